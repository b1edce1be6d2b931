//! The example manifests load, validate, and say what the design says they say.

mod common;

use common::*;
use database_operator_api::validate::{parse_cluster, validate_create};
use database_operator_api::{BackupDeletionPolicy, Engine};

#[test]
fn mysql_example_is_the_design_manifest() {
    let docs = yaml_documents("examples/mysql.yaml");
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret")
        .expect("a Secret");
    assert_eq!(secret["metadata"]["name"], "mysql-root-password");
    assert!(secret["stringData"]["password"].is_string());

    let clusters = example_clusters("examples/mysql.yaml");
    assert_eq!(clusters.len(), 1);
    // The manifest as written, field for field (the design's, on a supported version: MySQL
    // 8.0 left the catalog).
    assert_eq!(clusters[0], base());

    let cluster = parse_cluster(clusters[0].clone()).expect("parses");
    assert_eq!(cluster.spec.engine, Engine::Mysql);
    assert_eq!(cluster.spec.replicas, 3);
    let warnings = validate_create(&cluster).expect("valid");
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn postgresql_example_is_valid_with_backups() {
    let docs = yaml_documents("examples/postgresql.yaml");
    let clusters = example_clusters("examples/postgresql.yaml");
    assert_eq!(clusters.len(), 1);
    let cluster = parse_cluster(clusters[0].clone()).expect("parses");
    assert_eq!(cluster.spec.engine, Engine::Postgresql);
    assert_eq!(cluster.spec.version, "16.4");
    assert_eq!(cluster.spec.replicas, 3);
    let backup = cluster.spec.backup.as_ref().expect("backup configured");
    assert_eq!(backup.deletion_policy, BackupDeletionPolicy::Retain);
    let creds = backup.credentials_secret_ref.as_ref().expect("credentials");
    // Every Secret the cluster references is in the file, with the keys it needs.
    let secret = |name: &str| {
        docs.iter()
            .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("Secret {name} in example"))
    };
    assert!(
        secret(&cluster.spec.password_secret_ref.name)["stringData"]
            [&cluster.spec.password_secret_ref.key]
            .is_string()
    );
    assert!(secret(&creds.name)["stringData"][&creds.access_key_id_key].is_string());
    assert!(secret(&creds.name)["stringData"][&creds.secret_access_key_key].is_string());
    assert_eq!(validate_create(&cluster).expect("valid"), vec![]);
}

#[test]
fn defaults_match_the_design() {
    let v = serde_json::json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "minimal"},
        "spec": {"version": "8.4.7", "storage": {"size": "1Gi"},
                 "passwordSecretRef": {"name": "pw", "key": "password"},
                 "backup": {"schedule": "@daily", "s3Bucket": "bucket-one"}}
    });
    let c = parse_cluster(v).expect("parses");
    assert_eq!(c.spec.engine, Engine::Mysql);
    assert_eq!(c.spec.replicas, 1);
    let b = c.spec.backup.expect("backup");
    assert_eq!(b.retention, 7);
    assert_eq!(b.deletion_policy, BackupDeletionPolicy::Retain);
    assert!(b.credentials_secret_ref.is_none());
}

#[test]
fn local_examples_run_on_process_nodes_with_versions_that_exist_here() {
    for (file, engine, version) in [
        (
            "examples/local/postgresql.yaml",
            Engine::Postgresql,
            "15.20",
        ),
        ("examples/local/mariadb.yaml", Engine::Mariadb, "10.11.19"),
        ("examples/local/mysql.yaml", Engine::Mysql, "9.7.4"),
    ] {
        let docs = yaml_documents(file);
        let clusters = example_clusters(file);
        assert_eq!(clusters.len(), 1, "{file}");
        let cluster = parse_cluster(clusters[0].clone()).expect("parses");
        assert_eq!(cluster.spec.engine, engine, "{file}");
        assert_eq!(cluster.spec.version, version, "{file}");
        assert_eq!(cluster.spec.replicas, 3, "{file}");
        assert_eq!(validate_create(&cluster).expect("valid"), vec![], "{file}");
        let secret = docs
            .iter()
            .find(|d| {
                d["kind"] == "Secret"
                    && d["metadata"]["name"] == cluster.spec.password_secret_ref.name
            })
            .unwrap_or_else(|| panic!("{file}: the password Secret"));
        assert!(secret["stringData"][&cluster.spec.password_secret_ref.key].is_string());
        let scheduling = cluster.spec.scheduling.as_ref().expect("scheduling");
        assert_eq!(
            scheduling.node_selector.as_ref().expect("nodeSelector")["database.example.com/process-node"],
            "true"
        );
        let toleration = &scheduling.tolerations.as_ref().expect("tolerations")[0];
        assert_eq!(
            toleration.key.as_deref(),
            Some("database.example.com/process-node")
        );
        assert_eq!(toleration.value.as_deref(), Some("true"));
        assert_eq!(toleration.effect.as_deref(), Some("NoSchedule"));
    }
}
