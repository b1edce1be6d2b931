//! The offline commands, through the library and through the built binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use database_operator_runtime::cli::{RenderArgs, ValidateArgs, render_command, validate_command};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn now() -> Timestamp {
    "2025-06-01T12:00:00Z".parse().unwrap()
}

fn render(file: PathBuf) -> (u8, String, String) {
    let args = RenderArgs {
        file,
        now: None,
        render: database_operator_runtime::operator::RenderFlags::default(),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = render_command(&args, now(), &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn kinds_and_names(docs: &[Value]) -> Vec<(String, String)> {
    docs.iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn render_mysql_example_prints_every_object_and_the_initial_status() {
    let (code, out, err) = render(repo("examples/mysql.yaml"));
    assert_eq!(code, 0, "stderr: {err}");
    let docs = documents(&out);
    let mut found = kinds_and_names(&docs);
    found.sort();
    let mut expected: Vec<(String, String)> = [
        ("ConfigMap", "my-mysql-config"),
        ("CronJob", "my-mysql-backup"),
        ("DatabaseCluster", "my-mysql"),
        ("NetworkPolicy", "my-mysql-access"),
        ("PodDisruptionBudget", "my-mysql"),
        ("Service", "my-mysql"),
        ("Service", "my-mysql-headless"),
        ("Service", "my-mysql-replicas"),
        ("StatefulSet", "my-mysql"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    expected.sort();
    assert_eq!(found, expected);

    for doc in &docs {
        assert!(doc["apiVersion"].is_string(), "{doc}");
        assert_eq!(doc["metadata"]["namespace"], "default");
    }
    let sts = docs.iter().find(|d| d["kind"] == "StatefulSet").unwrap();
    assert_eq!(sts["spec"]["replicas"], 3);
    let status = &docs
        .iter()
        .find(|d| d["kind"] == "DatabaseCluster")
        .unwrap()["status"];
    // The pass that creates the objects reports them as initializing (no member is ready yet).
    assert_eq!(status["phase"], "Initializing");
    assert_eq!(
        status["nextBackupTime"], "2025-06-02T02:00:00Z",
        "the fixed clock decides it"
    );
    // The password never appears: the example's Secret value is not copied anywhere.
    assert!(!out.contains("change-me-before-production"));
}

#[test]
fn render_postgresql_example() {
    let (code, out, err) = render(repo("examples/postgresql.yaml"));
    assert_eq!(code, 0, "stderr: {err}");
    let docs = documents(&out);
    assert_eq!(docs.iter().filter(|d| d["kind"] == "Service").count(), 3);
    let sts = docs.iter().find(|d| d["kind"] == "StatefulSet").unwrap();
    assert_eq!(sts["metadata"]["name"], "orders-db");
    assert!(!out.contains("replace-with-secret-access-key"));
}

#[test]
fn render_refuses_an_invalid_cluster_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "apiVersion: database.example.com/v1alpha1\nkind: DatabaseCluster\nmetadata: {name: bad}\n\
         spec: {engine: mysql, version: '5.7.1', replicas: 3, storage: {size: 1Gi},\n\
         passwordSecretRef: {name: s, key: k}}\n",
    )
    .unwrap();
    let (code, out, err) = render(path);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("spec.version"), "{err}");
}

#[test]
fn render_says_when_there_is_no_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.yaml");
    std::fs::write(&path, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n").unwrap();
    let (code, _, err) = render(path);
    assert_eq!(code, 1);
    assert!(err.contains("no DatabaseCluster"), "{err}");
}

fn validate(file: PathBuf, old: Option<PathBuf>) -> (u8, String, String) {
    let args = ValidateArgs { file, old };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = validate_command(&args, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn validate_accepts_the_examples() {
    for example in ["examples/mysql.yaml", "examples/postgresql.yaml"] {
        let (code, out, err) = validate(repo(example), None);
        assert_eq!(code, 0, "{example}: {err}");
        assert!(out.ends_with(": valid\n"), "{out}");
    }
}

#[test]
fn validate_update_reports_errors_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.yaml");
    let new = dir.path().join("new.yaml");
    let cluster = |engine: &str, version: &str, replicas: i32, size: &str| {
        format!(
            "apiVersion: database.example.com/v1alpha1\nkind: DatabaseCluster\nmetadata: {{name: db, namespace: shop}}\n\
             spec: {{engine: {engine}, version: '{version}', replicas: {replicas}, storage: {{size: {size}}},\n\
             passwordSecretRef: {{name: s, key: k}}}}\n"
        )
    };
    std::fs::write(&old, cluster("postgresql", "16.4", 3, "20Gi")).unwrap();

    // Scale-down only: accepted with a warning on stderr.
    std::fs::write(&new, cluster("postgresql", "16.4", 2, "20Gi")).unwrap();
    let (code, out, err) = validate(new.clone(), Some(old.clone()));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "shop/db: valid\n");
    assert!(
        err.starts_with("warning: shop/db: spec.replicas: scaling down from 3 to 2"),
        "{err}"
    );

    // Engine change and shrink: refused, exit 1, each field named.
    std::fs::write(&new, cluster("mysql", "8.4.0", 3, "10Gi")).unwrap();
    let (code, out, err) = validate(new, Some(old));
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.contains("error: shop/db: spec.engine: is immutable"),
        "{err}"
    );
    assert!(
        err.contains("error: shop/db: spec.storage.size: may not shrink"),
        "{err}"
    );
}

#[test]
fn binary_renders_validates_and_prints_the_crd() {
    let bin = env!("CARGO_BIN_EXE_database-operator");

    let out = Command::new(bin)
        .args(["render", "-f"])
        .arg(repo("examples/mysql.yaml"))
        .args(["--now", "2025-06-01T12:00:00Z"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = documents(&String::from_utf8(out.stdout).unwrap());
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Service",
            "Service",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "CronJob",
            "DatabaseCluster"
        ]
    );

    let out = Command::new(bin)
        .args(["validate", "-f"])
        .arg(repo("examples/postgresql.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "default/orders-db: valid\n"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: database.example.com/v1alpha1\nkind: DatabaseCluster\nmetadata: {name: db}\n\
         spec: {engine: mysql, version: '8.4.0', replicas: 12, storage: {size: 1Gi}, passwordSecretRef: {name: s, key: k}}\n",
    )
    .unwrap();
    let out = Command::new(bin)
        .args(["validate", "-f"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.replicas"));

    let out = Command::new(bin).arg("crd").output().unwrap();
    assert!(out.status.success());
    let crd = String::from_utf8(out.stdout).unwrap();
    assert_eq!(crd, database_operator_api::crd::crd_yaml());
    assert!(crd.contains("name: databaseclusters.database.example.com"));

    let out = Command::new(bin).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for word in [
        "render",
        "validate",
        "crd",
        "--leader-elect",
        "--metrics-addr",
        "--namespace",
    ] {
        assert!(help.contains(word), "--help lacks {word}:\n{help}");
    }
}

/// The binary starts itself again with the allocator's settings (mimalloc reads them before
/// `main`), unless one of them is already set: then exactly what was set holds.
#[cfg(unix)]
#[test]
fn the_binary_runs_with_the_allocators_settings() {
    let purge_delay = |extra: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_database-operator"))
            .arg("--version")
            .env("MIMALLOC_VERBOSE", "1")
            .envs(extra.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // mimalloc prints its options when the process starts; the last start counts.
        let last = stderr
            .lines()
            .rev()
            .find(|l| l.contains("option 'purge_delay'"))
            .map(str::to_owned);
        (last, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (option, stdout) = purge_delay(&[]);
    assert_eq!(
        option.as_deref().map(str::trim),
        Some("option 'purge_delay': 0"),
        "{stdout}"
    );
    assert!(stdout.contains("database-operator"), "{stdout}");
    let (option, _) = purge_delay(&[("MIMALLOC_PURGE_DELAY", "250")]);
    assert_eq!(
        option.as_deref().map(str::trim),
        Some("option 'purge_delay': 250")
    );
}
