//! The generated CRD: its shape is reviewed through a snapshot, its patterns are the fixed ones,
//! and its CEL rules accept and reject what they should (evaluated locally with kube's CEL).

mod common;

use common::*;
use database_operator_api::crd::{crd, crd_yaml};
use database_operator_api::validate::validate_create;
use database_operator_api::{DatabaseCluster, rules};
use kube::core::cel::{validate_cel, validate_cel_update};
use regex::Regex;
use serde_json::{Value, json};

fn schema() -> Value {
    let crd = crd();
    let v = &crd.spec.versions[0];
    serde_json::to_value(
        v.schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

fn spec_prop(path: &str) -> Value {
    let mut v = schema()["properties"]["spec"].clone();
    for seg in path.split('.') {
        v = v["properties"][seg].clone();
    }
    assert!(!v.is_null(), "no schema for spec.{path}");
    v
}

fn pattern(path: &str) -> Regex {
    Regex::new(spec_prop(path)["pattern"].as_str().expect("pattern")).expect("pattern compiles")
}

#[test]
fn snapshot_crd_yaml() {
    insta::assert_snapshot!("crd", crd_yaml());
}

#[test]
fn crd_names_columns_and_subresources() {
    let crd = crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("databaseclusters.database.example.com")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["dbc".to_owned()][..])
    );
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let cols: Vec<(&str, &str)> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        cols,
        [
            ("Engine", ".spec.engine"),
            ("Replicas", ".spec.replicas"),
            ("Ready", ".status.readyReplicas"),
            ("Phase", ".status.phase"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}

#[test]
fn schema_enums_ranges_and_defaults() {
    assert_eq!(
        spec_prop("engine")["enum"],
        json!(["mysql", "postgresql", "mariadb"])
    );
    assert_eq!(spec_prop("engine")["default"], json!("mysql"));
    assert_eq!(spec_prop("replicas")["minimum"], json!(1.0));
    assert_eq!(spec_prop("replicas")["maximum"], json!(9.0));
    assert_eq!(spec_prop("replicas")["default"], json!(1));
    assert_eq!(spec_prop("backup.retention")["minimum"], json!(1.0));
    assert_eq!(spec_prop("backup.retention")["default"], json!(7));
    assert_eq!(
        spec_prop("backup.deletionPolicy")["default"],
        json!("Retain")
    );
    let status = &schema()["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"],
        json!([
            "Pending",
            "Initializing",
            "Running",
            "Degraded",
            "Upgrading",
            "Deleting"
        ])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], json!("map"));
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        json!(["type"])
    );
}

#[test]
fn version_pattern_accepts_postgresql_versions() {
    // The design's pattern `^\d+\.\d+\.\d+$` rejected every PostgreSQL version it supported.
    let re = pattern("version");
    for ok in [
        "8.0.36", "8.4.0", "9.7.4", "10.11.19", "15.18", "16.2", "16.14",
    ] {
        assert!(re.is_match(ok), "{ok}");
    }
    for bad in ["latest", "8", "8.0.36.1", "16.", "v16.3", "16.3 ", ""] {
        assert!(!re.is_match(bad), "{bad}");
    }
}

#[test]
fn cron_pattern_is_anchored_as_a_whole() {
    // The design's pattern `^(@(...))|(\S+ \S+ \S+ \S+ \S+)$` anchored each alternative at one
    // end only, so `@dailyfoo` and a six-field expression slipped through.
    let re = pattern("backup.schedule");
    for ok in ["0 2 * * *", "@daily", "@hourly", "*/5 * * * 1-5"] {
        assert!(re.is_match(ok), "{ok}");
    }
    for bad in [
        "0 2 * * * *",
        "@dailyfoo",
        "x@daily",
        "0 2 * *",
        "@every 5m",
    ] {
        assert!(!re.is_match(bad), "{bad}");
    }
    // What the schema lets through, validate() still checks for meaning.
    assert!(re.is_match("61 2 * * *"));
    let c = typed(set(
        base(),
        "/spec/backup/schedule",
        Some(json!("61 2 * * *")),
    ));
    assert!(
        validate_create(&c)
            .unwrap_err()
            .has_field("spec.backup.schedule")
    );
}

#[test]
fn schema_patterns_never_accept_what_validate_rejects_for_shape() {
    // Whatever the schema promises must hold in validate: a value matching no pattern is
    // rejected by validate too, and the fixed examples agree.
    for (path, pointer, samples) in [
        (
            "version",
            "/spec/version",
            &["8.0.36", "16.3", "latest", "8", "8.0.36.1"][..],
        ),
        (
            "storage.size",
            "/spec/storage/size",
            &["20Gi", "1.5Ti", "20GB", "ten", "-1Gi"][..],
        ),
        (
            "backup.s3Bucket",
            "/spec/backup/s3Bucket",
            &["my-db-backups", "My_Bucket", "-x-", "ab"][..],
        ),
        (
            "passwordSecretRef.key",
            "/spec/passwordSecretRef/key",
            &["password", "pass word", "a.b_c-d"][..],
        ),
    ] {
        let re = pattern(path);
        for s in samples {
            let c = typed(set(base(), pointer, Some(json!(s))));
            let field = format!("spec.{path}");
            let rejected = validate_create(&c)
                .err()
                .is_some_and(|e| e.has_field(&field));
            if !re.is_match(s) {
                assert!(rejected, "{path}={s}: schema rejects but validate accepts");
            }
        }
    }
    assert_eq!(
        spec_prop("storage.size")["pattern"],
        json!(rules::STORAGE_QUANTITY_PATTERN)
    );
}

fn cel_update(old: Value, new: Value) -> Result<(), String> {
    let old: DatabaseCluster = typed(old);
    let new: DatabaseCluster = typed(new);
    validate_cel_update(&new, &old).map_err(|e| e.to_string())
}

#[test]
fn scheduling_takes_kubernetes_types() {
    let scheduling = spec_prop("scheduling");
    for field in [
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
    ] {
        assert!(
            !scheduling["properties"][field].is_null(),
            "spec.scheduling.{field} in the schema"
        );
    }
    assert!(
        !spec_prop("scheduling.affinity")["properties"]["podAntiAffinity"].is_null(),
        "the affinity schema is Kubernetes' own"
    );
    let c = typed(set(
        base(),
        "/spec/scheduling",
        Some(json!({
            "nodeSelector": {"database.example.com/process-node": "true"},
            "tolerations": [{"key": "database.example.com/process-node", "operator": "Equal",
                             "value": "true", "effect": "NoSchedule"}],
        })),
    ));
    assert_eq!(validate_create(&c).expect("valid"), vec![]);
}

#[test]
fn cel_engine_is_immutable() {
    let pg = set(
        base_pg(),
        "/spec/storage/storageClassName",
        Some(json!("fast-ssd")),
    );
    let err = cel_update(base(), pg).expect_err("engine change");
    assert!(err.contains("spec.engine is immutable"), "{err}");
    assert!(cel_update(base(), set(base(), "/spec/replicas", Some(json!(5)))).is_ok());
}

#[test]
fn cel_bootstrap_is_set_at_creation_only() {
    let with = |cluster: &str| {
        set(
            base(),
            "/spec/bootstrap",
            Some(
                json!({"fromBackup": {"cluster": cluster, "s3Bucket": "backups", "backup": "latest"}}),
            ),
        )
    };
    let err = cel_update(base(), with("orders")).expect_err("added");
    assert!(err.contains("spec.bootstrap may only be set"), "{err}");
    let err = cel_update(with("orders"), with("other")).expect_err("changed");
    assert!(err.contains("spec.bootstrap may only be set"), "{err}");
    assert!(cel_update(with("orders"), with("orders")).is_ok());
    assert!(cel_update(with("orders"), base()).is_ok(), "removed");
}

#[test]
fn cel_storage_class_is_immutable_once_set() {
    let err = cel_update(
        base(),
        set(
            base(),
            "/spec/storage/storageClassName",
            Some(json!("slow")),
        ),
    )
    .expect_err("changed");
    assert!(err.contains("storageClassName is immutable"), "{err}");
    let err = cel_update(base(), set(base(), "/spec/storage/storageClassName", None))
        .expect_err("removed");
    assert!(err.contains("storageClassName is immutable"), "{err}");
    // Setting it when it was unset is allowed.
    assert!(cel_update(set(base(), "/spec/storage/storageClassName", None), base()).is_ok());
}

#[test]
fn cel_storage_never_shrinks() {
    let err = cel_update(
        base(),
        set(base(), "/spec/storage/size", Some(json!("10Gi"))),
    )
    .expect_err("shrink");
    assert!(err.contains("spec.storage.size may not shrink"), "{err}");
    let err = cel_update(
        base(),
        set(base(), "/spec/storage/size", Some(json!("20G"))),
    )
    .expect_err("20G < 20Gi");
    assert!(err.contains("may not shrink"), "{err}");
    assert!(
        cel_update(
            base(),
            set(base(), "/spec/storage/size", Some(json!("40Gi")))
        )
        .is_ok()
    );
    assert!(
        cel_update(
            base(),
            set(base(), "/spec/storage/size", Some(json!("20480Mi")))
        )
        .is_ok()
    );
}

#[test]
fn cel_name_rules() {
    assert!(validate_cel(&typed(base())).is_ok());
    let long = typed(set(base(), "/metadata/name", Some(json!("a".repeat(53)))));
    let err = validate_cel(&long).expect_err("long name").to_string();
    assert!(err.contains("at most 52 characters"), "{err}");
    let bad = typed(set(base(), "/metadata/name", Some(json!("9lives"))));
    let err = validate_cel(&bad).expect_err("bad name").to_string();
    assert!(err.contains("DNS-1035"), "{err}");
}

#[test]
fn api_version_constant_matches_the_resource() {
    use kube::Resource;
    assert_eq!(
        database_operator_api::API_VERSION,
        format!(
            "{}/{}",
            database_operator_api::GROUP,
            database_operator_api::VERSION
        )
    );
    assert_eq!(
        database_operator_api::DatabaseCluster::api_version(&()),
        database_operator_api::API_VERSION
    );
}
