//! Replays the committed fuzz corpus (`fuzz/corpus/TARGET/*`) through the fuzz targets, on the
//! stable toolchain, without libFuzzer: what the fuzzer once explored (and every crash it found,
//! once fixed and added) keeps being checked by a plain `cargo test`, in seconds.

use std::fs;
use std::path::{Path, PathBuf};

use database_operator_fuzz::TARGETS;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

/// Runs every input of `target`'s corpus, naming the input that panics.
fn replay(target: &str) {
    let (_, run) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a known target");
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "fuzz/corpus/{target} is empty");
    for (path, bytes) in inputs {
        let outcome = std::panic::catch_unwind(|| run(&bytes));
        assert!(outcome.is_ok(), "{target} panics on {}", path.display());
    }
}

#[test]
fn every_target_has_a_corpus() {
    let dir = corpus_dir("");
    let mut found: Vec<String> = fs::read_dir(&dir)
        .expect("fuzz/corpus")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    found.sort();
    let mut names: Vec<String> = TARGETS.iter().map(|(n, _)| (*n).to_owned()).collect();
    names.sort();
    assert_eq!(
        found, names,
        "one corpus directory per target, and no other"
    );
    let harness = fs::read_to_string(dir.join("../Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in &names {
        assert!(
            harness.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no binary for {name}"
        );
    }
}

#[test]
fn validation() {
    replay("validation");
}

#[test]
fn admission() {
    replay("admission");
}

#[test]
fn lsn() {
    replay("lsn");
}

#[test]
fn gtid_set() {
    replay("gtid_set");
}

#[test]
fn mariadb_gtid() {
    replay("mariadb_gtid");
}

#[test]
fn backup_manifest() {
    replay("backup_manifest");
}

#[test]
fn dump_filter() {
    replay("dump_filter");
}

/// The seeds reach the code they are meant for: a replay that only ever took the first `return`
/// would pass without checking anything.
#[test]
fn seeds_are_accepted_where_they_should_be() {
    use database_operator_engine::position::{GtidSet, Lsn, MariadbGtidPos};
    let text = |target: &str, name: &str| {
        String::from_utf8(fs::read(corpus_dir(target).join(name)).expect(name)).expect("UTF-8")
    };
    assert!(text("lsn", "seed-0").parse::<Lsn>().is_ok());
    assert!(text("gtid_set", "seed-0").parse::<GtidSet>().is_ok());
    assert!(
        text("mariadb_gtid", "seed-0")
            .parse::<MariadbGtidPos>()
            .is_ok()
    );
    let layout = database_operator_core::backup::Layout::new("shop", "orders");
    let id = database_operator_core::backup::BackupId::parse("20260301T020000Z").expect("an id");
    let manifest = text("backup_manifest", "postgresql.json");
    assert!(
        database_operator_core::backup::Manifest::parse(manifest.as_bytes(), &layout, &id).is_ok()
    );
    for example in ["mysql.yaml", "postgresql.yaml"] {
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text("validation", example)).expect("YAML");
        let value = documents
            .into_iter()
            .find(|d| d["kind"] == "DatabaseCluster")
            .expect("a DatabaseCluster document");
        let cluster = database_operator_api::validate::parse_cluster(value).expect("a cluster");
        assert!(database_operator_api::validate::validate_create(&cluster).is_ok());
    }
    let admission = database_operator_runtime::webhook::Admission::new().expect("admission");
    let body = fs::read(corpus_dir("admission").join("create-valid-mysql.json")).expect("seed");
    let answer = admission
        .handle(
            database_operator_runtime::webhook::Endpoint::Validate,
            &body,
        )
        .expect("a well-formed review");
    assert_eq!(answer["response"]["allowed"], true);
}
