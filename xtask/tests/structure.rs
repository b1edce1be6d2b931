//! The structure rules of the workspace's crates, checked on their sources (docs/architecture.md,
//! "Structure rules"): no source file over 600 lines of non-test code, `plan()` a table of
//! contents under 80 lines, and no import cycle between the top-level modules of a crate (a
//! module `a` that names `crate::b` depends on `b`; test code and comments do not count).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_NON_TEST_LINES: usize = 600;
const MAX_PLAN_LINES: usize = 80;
const CRATES: &[&str] = &["api", "engine", "core", "common", "runtime", "kubectl-dbc"];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates")
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("reading {}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Whether a file under `src/` is test code as a whole (`tests.rs`, `*_tests.rs`, a `tests/`
/// folder).
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// The lines of a file before its first top-level `#[cfg(test)]` (the test module at its end).
fn non_test_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .collect()
}

/// The top-level modules that `lines` names as `crate::<module>`, comments left out (a
/// `use crate::{...}` group spread over several lines included).
fn crate_references(lines: &[&str]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let code: Vec<&str> = lines
        .iter()
        .map(|l| l.trim_start())
        .filter(|l| !l.starts_with("//"))
        .map(|l| l.split(" //").next().unwrap_or(l))
        .collect();
    let code = code.join(" ");
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` in macros and `some_crate::` are other paths.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::X, b, C}`: the first segment of each item at the top level
            // of the group.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        insert_module(&mut found, &item);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            insert_module(&mut found, &item);
            continue;
        }
        insert_module(&mut found, rest);
    }
    found
}

/// Records the module that a path (`members::Member`, `self`) starts with, if it names one (a
/// lowercase identifier other than `self`; `crate::Error` names an item of the root).
fn insert_module(found: &mut BTreeSet<String>, path: &str) {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if name != "self" && name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
        found.insert(name);
    }
}

/// A crate's graph: top-level module -> the top-level modules its non-test code names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(src) {
        let rel = path.strip_prefix(src).expect("below src");
        if is_test_file(rel) {
            continue;
        }
        let first = rel.components().next().expect("a component");
        let top = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" || top == "main" {
            continue;
        }
        let text = fs::read_to_string(&path).expect("readable source");
        let refs = crate_references(&non_test_lines(&text));
        let entry = graph.entry(top.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != top));
    }
    // Only edges to modules of this crate (not `crate::SomeReExport` at the root).
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// One cycle of the graph as a path `a -> b -> ... -> a`, if there is any.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == node).expect("on the path");
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn no_source_file_has_over_600_lines_of_non_test_code() {
    let mut too_long = Vec::new();
    for krate in CRATES {
        let src = crates_dir().join(krate).join("src");
        for path in rust_files(&src) {
            let rel = path.strip_prefix(&src).expect("below src");
            if is_test_file(rel) {
                continue;
            }
            let text = fs::read_to_string(&path).expect("readable source");
            let n = non_test_lines(&text).len();
            if n > MAX_NON_TEST_LINES {
                too_long.push(format!("crates/{krate}/src/{}: {n} lines", rel.display()));
            }
        }
    }
    assert!(
        too_long.is_empty(),
        "split these by responsibility (at most {MAX_NON_TEST_LINES} lines before the test module):\n{}",
        too_long.join("\n")
    );
}

#[test]
fn plan_reads_as_a_table_of_contents() {
    let path = crates_dir().join("core/src/plan.rs");
    let text = fs::read_to_string(&path).expect("crates/core/src/plan.rs");
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("pub fn plan("))
        .expect("crates/core/src/plan.rs defines `pub fn plan(`");
    let len = lines[start..]
        .iter()
        .position(|l| *l == "}")
        .expect("plan() ends with a `}` at the start of a line")
        + 1;
    assert!(
        len <= MAX_PLAN_LINES,
        "plan() is {len} lines; keep it under {MAX_PLAN_LINES} by moving a step into its module"
    );
}

#[test]
fn no_import_cycle_between_the_modules_of_a_crate() {
    let mut cycles = Vec::new();
    for krate in CRATES {
        let graph = module_graph(&crates_dir().join(krate).join("src"));
        assert!(
            graph.len() > 3,
            "crates/{krate}: found only {:?}",
            graph.keys()
        );
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("crates/{krate}: {}", cycle.join(" -> ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles between top-level modules (move the shared item down a layer, or pass it in):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // References: comments, `$crate::`, other crates' paths and re-exports do not count.
    let refs = crate_references(&[
        "use crate::io::ClusterIo;",
        "    let x = crate::members::{a, b};",
        "// crate::comment",
        "/// [`crate::doc`]",
        "$crate::macro_path",
        "database_operator_core::render",
        "let y = f(); // crate::trailing",
        "crate::Error",
        "use crate::{render::labels, status, Observed, failover::{self, Outcome}};",
        "use crate::{",
        "    backup_status::BackupJob,",
        "    // crate::commented",
        "    Plan,",
        "};",
    ]);
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        [
            "backup_status",
            "failover",
            "io",
            "members",
            "render",
            "status"
        ],
        "crate_references"
    );
    // A cycle is found and named as a path; a chain is not a cycle.
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry((*a).to_owned())
                .or_default()
                .insert((*b).to_owned());
            g.entry((*b).to_owned()).or_default();
        }
        g
    };
    assert_eq!(find_cycle(&graph(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    // The test module at the end of a file is not counted.
    assert_eq!(
        non_test_lines("fn a() {}\n#[cfg(test)]\nmod tests {}\n"),
        ["fn a() {}"]
    );
    assert!(is_test_file(Path::new("failover/tests.rs")));
    assert!(is_test_file(Path::new("upgrade/roll_tests.rs")));
    assert!(!is_test_file(Path::new("failover/mod.rs")));
    // The engine rule fires on each kind of reference and on nothing else.
    the_engine_rule_sees_what_it_checks();
}

// ------------------------------------------------------------------------------------------
// The engine rule (docs/architecture.md, "The engine crate"): only `crates/engine` tells the
// engines apart. Everything else asks `database_operator_engine::of(engine)`.
// ------------------------------------------------------------------------------------------

/// Files whose non-test code still tells the engines apart, with the number of references the
/// detector finds in each (a ratchet: the test fails when a file not listed here gains one,
/// when a listed file gains more, and when a listed file has fewer than listed, so that the
/// number is lowered or the line removed as code moves into the engine crate).
#[rustfmt::skip]
const ENGINE_ALLOWED: &[(&str, usize, &str)] = &[
    // The api declares the engines: the enum, its names, family and what a manifest may ask
    // of each (types.rs), and the version catalog (versions.rs). They stay: the api cannot
    // depend on the engine crate, and its validation reads these declarations.
    ("crates/api/src/types.rs", 15, "declares Engine, its names, family, bootstrap, ALL"),
    ("crates/api/src/versions.rs", 15, "the version catalog, per engine"),
];

/// The sources the engine rule reads: every crate but the engine's, and xtask's.
fn engine_rule_sources() -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<(String, PathBuf)> = CRATES
        .iter()
        .filter(|k| **k != "engine")
        .map(|k| (format!("crates/{k}/src"), crates_dir().join(k).join("src")))
        .collect();
    dirs.push((
        "xtask/src".to_owned(),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    ));
    let mut files = Vec::new();
    for (name, dir) in dirs {
        for path in rust_files(&dir) {
            let rel = path.strip_prefix(&dir).expect("below src");
            if !is_test_file(rel) {
                files.push((format!("{name}/{}", rel.display()), path));
            }
        }
    }
    files
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether a `match` scrutinee is an engine: it ends in something named `engine` or `dialect`
/// (`engine`, `&cluster.spec.engine`, `self.dialect()`, `engine.as_str()`, an element of a
/// tuple), not a call that merely takes one (`of(engine).protocol()`, `facts.position(engine)`).
fn names_an_engine(scrutinee: &str) -> bool {
    let expr = scrutinee.trim().trim_start_matches(['&', '*']).trim();
    if let Some(inner) = expr.strip_prefix('(').and_then(|e| e.strip_suffix(')')) {
        return inner.split(',').any(names_an_engine);
    }
    let expr = expr.strip_suffix(".as_str()").unwrap_or(expr);
    let callee = if expr.ends_with(')') {
        // A call: what is called, not its arguments.
        let mut depth = 0;
        let open = expr.char_indices().rev().find_map(|(i, c)| {
            match c {
                ')' => depth += 1,
                '(' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i)
        });
        match open {
            Some(i) => &expr[..i],
            None => return false,
        }
    } else {
        expr
    };
    let last: String = callee
        .chars()
        .rev()
        .take_while(|c| is_ident(*c))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    last == "engine" || last == "dialect"
}

/// How many times `lines` tell the engines apart, comments left out: a path to a variant
/// (`Engine::Mysql`, `Dialect::Mariadb`, a glob `Engine::*`), a family check
/// (`is_mysql_family`), or a `match` on an engine ([`names_an_engine`]).
fn engine_references(lines: &[&str]) -> usize {
    let mut count = 0;
    for line in lines {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let code = line.split(" //").next().unwrap_or(line);
        for ty in ["Engine::", "Dialect::"] {
            for (at, _) in code.match_indices(ty) {
                if code[..at].chars().last().is_some_and(is_ident) {
                    continue; // `MyEngine::`: another type.
                }
                let rest = &code[at + ty.len()..];
                let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
                let variant = name.starts_with(|c: char| c.is_ascii_uppercase())
                    && name.chars().any(|c| c.is_ascii_lowercase());
                if variant || rest.starts_with('*') {
                    count += 1;
                }
            }
        }
        count += code.matches("is_mysql_family").count();
        for (at, _) in code.match_indices("match ") {
            if code[..at].chars().last().is_some_and(is_ident) {
                continue;
            }
            let scrutinee = code[at + "match ".len()..].split('{').next().unwrap_or("");
            if names_an_engine(scrutinee) {
                count += 1;
            }
        }
    }
    count
}

#[test]
fn only_the_engine_crate_tells_the_engines_apart() {
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for (name, path) in engine_rule_sources() {
        let text = fs::read_to_string(&path).expect("readable source");
        let n = engine_references(&non_test_lines(&text));
        if n > 0 {
            found.insert(name, n);
        }
    }
    let allowed: BTreeMap<&str, usize> = ENGINE_ALLOWED.iter().map(|(f, n, _)| (*f, *n)).collect();
    assert_eq!(
        allowed.len(),
        ENGINE_ALLOWED.len(),
        "a file is listed twice"
    );
    let mut problems = Vec::new();
    for (file, n) in &found {
        match allowed.get(file.as_str()) {
            None => problems.push(format!(
                "{file}: {n} references to the engines; ask database_operator_engine::of(engine) instead"
            )),
            Some(max) if n > max => problems.push(format!(
                "{file}: {n} references to the engines, {max} allowed; ask database_operator_engine::of(engine) instead"
            )),
            Some(max) if n < max => problems.push(format!(
                "{file}: {n} references to the engines, {max} listed; lower the number in ENGINE_ALLOWED"
            )),
            Some(_) => {}
        }
    }
    for file in allowed.keys() {
        if !found.contains_key(*file) {
            problems.push(format!(
                "{file}: no reference to the engines left; remove it from ENGINE_ALLOWED"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The engine rule's detector on samples (called by `the_checks_see_what_they_check`).
fn the_engine_rule_sees_what_it_checks() {
    let count = |lines: &[&str]| engine_references(lines);
    // Each kind of reference fires.
    assert_eq!(
        count(&["let p = if e == Engine::Mysql { 1 } else { 2 };"]),
        1
    );
    assert_eq!(count(&["    api::Engine::Mariadb => 3306,"]), 1);
    assert_eq!(count(&["fence(Dialect::Postgresql)"]), 1);
    assert_eq!(count(&["use database_operator_api::Engine::*;"]), 1);
    assert_eq!(count(&["if cluster.engine.is_mysql_family() {"]), 1);
    assert_eq!(count(&["match cluster.spec.engine {"]), 1);
    assert_eq!(count(&["let x = match self.dialect {"]), 1);
    assert_eq!(count(&["match dialect(engine) {"]), 1);
    assert_eq!(count(&["match &target.engine {"]), 1);
    assert_eq!(count(&["match engine.as_str() {"]), 1);
    assert_eq!(count(&["match (self.engine, other) {"]), 1);
    assert_eq!(
        count(&[
            "match target.engine {",
            "    Engine::Postgresql => 5432,",
            "    Engine::Mysql | Engine::Mariadb => 3306,",
            "}",
        ]),
        4
    );
    // Asking the engine crate, naming the type, its list and comments do not count.
    assert_eq!(
        count(&[
            "let port = database_operator_engine::of(cluster.spec.engine).port();",
            "pub engine: Engine,",
            "for engine in Engine::ALL {",
            "// match engine { Engine::Mysql => ... }",
            "/// [`Engine::Mariadb`]",
            "let d = MyEngine::Mysql; // Engine::Mysql",
            "match protocol {",
            "match database_operator_engine::of(engine).protocol() {",
            "let position = match facts.position(engine) {",
            "match engineering {",
            "let m = matches!(x, Some(_));",
        ]),
        0
    );
    // The whole file is read: the engine crate is left out, test code too.
    let sources = engine_rule_sources();
    assert!(sources.iter().any(|(f, _)| f == "crates/core/src/plan.rs"));
    assert!(sources.iter().any(|(f, _)| f == "xtask/src/main.rs"));
    assert!(!sources.iter().any(|(f, _)| f.starts_with("crates/engine/")));
    assert!(!sources.iter().any(|(f, _)| f.ends_with("/tests.rs")));
}
