//! The structure rules of the workspace's crates and of xtask, checked on their sources
//! (docs/architecture.md, "Structure rules"): no source file over 600 lines of non-test code, no
//! function over 150 lines of non-test code, `plan()` a table of contents under 80 lines, no
//! import cycle between the top-level modules of a crate (a module `a` that names `crate::b`
//! depends on `b`; test code and comments do not count), and xtask's two products, the local
//! Kubernetes distribution (`xtask/src/cluster`) and the benchmark suite (`xtask/src/bench`),
//! bounded: neither names the xtask commands around it.
//!
//! The file and function rules read `src/` of every crate and `xtask/src`. Test code is exempt:
//! the test module at the end of a file, `tests.rs` and `*_tests.rs` files, and the scenario
//! functions of the test targets under `xtask/tests` (an end-to-end scenario reads top to
//! bottom as one story).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_NON_TEST_LINES: usize = 600;
const MAX_FN_LINES: usize = 150;
const MAX_PLAN_LINES: usize = 80;
const CRATES: &[&str] = &["api", "engine", "core", "common", "runtime", "kubectl-dbc"];
/// xtask's two products and the other top-level modules of xtask each may name: the local
/// Kubernetes distribution stands alone; the benchmark suite runs on it and builds with cargo.
/// Neither names the commands around them (`demo`, `e2e`, `prebuild`, `timing`) nor the other
/// way round for `cluster`.
const XTASK_PRODUCTS: &[(&str, &[&str])] = &[("cluster", &[]), ("bench", &["cargo", "cluster"])];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates")
}

fn xtask_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Crates held to the file and function rules only: the fuzz targets (`crates/fuzz`) are one
/// module of harness code whose PostgreSQL-only target names its engine, like a test.
const SIZE_RULES_ONLY: &[&str] = &["fuzz"];

/// The source directories the file and function rules read, with the name they are reported
/// under: `src/` of every crate, and `xtask/src`.
fn source_dirs() -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<(String, PathBuf)> = CRATES
        .iter()
        .chain(SIZE_RULES_ONLY)
        .map(|k| (format!("crates/{k}/src"), crates_dir().join(k).join("src")))
        .collect();
    dirs.push(("xtask/src".to_owned(), xtask_src()));
    dirs
}

/// Every file of [`source_dirs`] that is not test code as a whole, as (reported name, path).
fn non_test_sources() -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for (name, dir) in source_dirs() {
        for path in rust_files(&dir) {
            let rel = path.strip_prefix(&dir).expect("below src");
            if !is_test_file(rel) {
                files.push((format!("{name}/{}", rel.display()), path));
            }
        }
    }
    files
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

/// A function of a file: its name, the line its `fn` is on (1-based) and its length in lines,
/// from that line to its closing brace.
#[derive(Debug, PartialEq)]
struct FnSpan {
    name: String,
    line: usize,
    len: usize,
}

/// The name of the function a line starts, if it starts one: `fn`, after qualifiers (`pub`,
/// `pub(crate)`, `const`, `async`, `unsafe`, `extern "C"`), first on the line.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for qualifier in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest);
        }
        if let Some(after) = rest.strip_prefix("extern ") {
            rest = after.trim_start_matches(|c| c != ' ').trim_start();
        }
        if rest == before {
            break;
        }
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The functions with a body in `lines`: each from its `fn` line to the first later line that
/// is a lone `}` at the `fn` line's indentation (rustfmt's layout), nested functions and
/// methods included. A declaration without a body (`fn f(&self);` in a trait) is no function.
fn functions(lines: &[&str]) -> Vec<FnSpan> {
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        if line.trim_start().starts_with("//") {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        // The signature ends at the first line ending in `{` (a body) or `;` (none), or
        // the whole function is on one line.
        let mut end = None;
        for (i, l) in lines.iter().enumerate().skip(start) {
            let code = l.trim_end();
            if code.ends_with(';') && !code.contains('{') {
                break;
            }
            if code.ends_with('}') && i == start {
                end = Some(start);
                break;
            }
            if code.ends_with('{') {
                let close = format!("{}}}", " ".repeat(indent));
                end = lines[i + 1..]
                    .iter()
                    .position(|l| l.trim_end() == close)
                    .map(|p| i + 1 + p);
                break;
            }
        }
        if let Some(end) = end {
            found.push(FnSpan {
                name,
                line: start + 1,
                len: end - start + 1,
            });
        }
    }
    found
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

/// The top-level modules of xtask that `lines` of the file `rel` (below `xtask/src`) name:
/// `crate::<module>` ([`crate_references`]) and `super::` paths that climb to the crate root
/// (`super::timing` in `cluster/mod.rs`, `super::super::bench` in `cluster/local/mod.rs`, one
/// more `super` inside an inline `mod name { ... }`).
fn xtask_references(rel: &Path, lines: &[&str]) -> BTreeSet<String> {
    let mut module: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if module
        .last()
        .is_some_and(|m| m == "mod" || m == "main" || m == "lib")
    {
        module.pop();
    }
    // Inline modules (`mod name {` ... its `}`) add a level to the lines inside them.
    let mut inline: Vec<usize> = Vec::new();
    let rewritten: Vec<String> = lines
        .iter()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            let code = line.trim();
            if inline.last() == Some(&indent) && code == "}" {
                inline.pop();
            }
            let opens = code.ends_with('{')
                && code
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub(super) ")
                    .starts_with("mod ");
            if opens {
                inline.push(indent);
            }
            let depth = module.len() + inline.len() - usize::from(opens);
            let mut out = String::new();
            let mut rest = *line;
            while let Some(at) = rest.find("super::") {
                let before = rest[..at].chars().last();
                out.push_str(&rest[..at]);
                rest = &rest[at..];
                let mut climbs = 0;
                while let Some(after) = rest.strip_prefix("super::") {
                    climbs += 1;
                    rest = after;
                }
                let other_path = before.is_some_and(|c| c.is_alphanumeric() || c == '_');
                if !other_path && climbs == depth {
                    out.push_str("crate::");
                } else {
                    out.push_str(&"super::".repeat(climbs));
                }
            }
            out.push_str(rest);
            out
        })
        .collect();
    let rewritten: Vec<&str> = rewritten.iter().map(String::as_str).collect();
    crate_references(&rewritten)
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
    for (name, path) in non_test_sources() {
        let text = fs::read_to_string(&path).expect("readable source");
        let n = non_test_lines(&text).len();
        if n > MAX_NON_TEST_LINES {
            too_long.push(format!("{name}: {n} lines"));
        }
    }
    assert!(
        too_long.is_empty(),
        "split these by responsibility (at most {MAX_NON_TEST_LINES} lines before the test module):\n{}",
        too_long.join("\n")
    );
}

/// Every function of the crates' and xtask's non-test code, from its `fn` line to its closing
/// brace. Test code is exempt: the test module at the end of a file, test files, and the
/// scenario functions of the test targets under `xtask/tests`, which read as one story each.
#[test]
fn no_function_has_over_150_lines_of_non_test_code() {
    let mut too_long = Vec::new();
    for (name, path) in non_test_sources() {
        let text = fs::read_to_string(&path).expect("readable source");
        for f in functions(&non_test_lines(&text)) {
            if f.len > MAX_FN_LINES {
                too_long.push(format!("{name}:{}: fn {}: {} lines", f.line, f.name, f.len));
            }
        }
    }
    assert!(
        too_long.is_empty(),
        "split these into named steps (at most {MAX_FN_LINES} lines from `fn` to its closing brace):\n{}",
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
fn xtask_products_are_bounded() {
    let src = xtask_src();
    let mut problems = Vec::new();
    for (product, allowed) in XTASK_PRODUCTS {
        let files = rust_files(&src.join(product));
        assert!(files.len() > 3, "xtask/src/{product}: found only {files:?}");
        for path in files {
            let rel = path.strip_prefix(&src).expect("below src");
            if is_test_file(rel) {
                continue;
            }
            let text = fs::read_to_string(&path).expect("readable source");
            for name in xtask_references(rel, &non_test_lines(&text)) {
                if name != *product && !allowed.contains(&name.as_str()) {
                    problems.push(format!(
                        "xtask/src/{}: names crate::{name}; {product} may name only {allowed:?}",
                        rel.display()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "xtask's products name only what XTASK_PRODUCTS allows (pass the rest in):\n{}",
        problems.join("\n")
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
    // Functions: from `fn` to the `}` at its indentation, signatures over several lines,
    // qualifiers, methods and nested functions; declarations without a body are none.
    let spans = functions(&[
        "pub fn one() {}",
        "pub(crate) async fn two(",
        "    a: u8,",
        ") -> u8 {",
        "    let s = \"}\";",
        "    {",
        "    }",
        "    a",
        "}",
        "trait T {",
        "    fn declared(&self);",
        "    fn provided(&self) {",
        "        fn nested() {",
        "        }",
        "    }",
        "}",
        "// fn commented() {",
        "const fn three() -> u8 { 3 }",
        "pub unsafe extern \"C\" fn four() {",
        "}",
        "fn ender() {",
    ]);
    let span = |name: &str, line: usize, len: usize| FnSpan {
        name: name.to_owned(),
        line,
        len,
    };
    assert_eq!(
        spans,
        [
            span("one", 1, 1),
            span("two", 2, 8),
            span("provided", 12, 4),
            span("nested", 13, 2),
            span("three", 18, 1),
            span("four", 19, 2),
        ],
        "functions"
    );
    // xtask references: `crate::` and `super::` chains that reach the crate root.
    let names = |rel: &str, lines: &[&str]| {
        xtask_references(Path::new(rel), lines)
            .into_iter()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            "cluster/local/starter.rs",
            &[
                "use super::super::super::bench::Run;",
                "use super::super::images;",
                "let b = crate::cluster::s3::BUCKET;",
                "use super::*;",
                "my_super::x",
            ]
        ),
        ["bench", "cluster"]
    );
    assert_eq!(
        names(
            "cluster/mod.rs",
            &["use super::{timing, cargo::command};", "pub mod local;"]
        ),
        ["cargo", "timing"]
    );
    assert_eq!(names("bench/mod.rs", &["use super::demo;"]), ["demo"]);
    assert_eq!(
        names(
            "bench/result.rs",
            &[
                "mod serde_samples {",
                "    use super::super::observe::Sample;",
                "    use super::super::super::e2e;",
                "}",
                "use super::super::prebuild;",
            ]
        ),
        ["e2e", "prebuild"]
    );
    assert_eq!(
        names("bench/run/mod.rs", &["use super::result::X;"]),
        [] as [&str; 0]
    );
    let sources = non_test_sources();
    assert!(sources.iter().any(|(f, _)| f == "crates/core/src/plan.rs"));
    assert!(sources.iter().any(|(f, _)| f == "xtask/src/cluster/mod.rs"));
    assert!(!sources.iter().any(|(f, _)| f.ends_with("/tests.rs")));
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
    ("crates/api/src/types.rs", 17, "declares Engine, its names, family, bootstrap, archiving, ALL"),
    ("crates/api/src/versions.rs", 15, "the version catalog, per engine"),
];

/// The sources the engine rule reads: every crate but the engine's, and xtask's.
fn engine_rule_sources() -> Vec<(String, PathBuf)> {
    non_test_sources()
        .into_iter()
        .filter(|(f, _)| {
            !f.starts_with("crates/engine/")
                && !SIZE_RULES_ONLY
                    .iter()
                    .any(|k| f.starts_with(&format!("crates/{k}/")))
        })
        .collect()
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
