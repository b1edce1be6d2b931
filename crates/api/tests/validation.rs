//! Table tests: invalid specs and invalid updates are rejected with an error naming the field;
//! valid changes pass with the warnings a careful operator should see.

mod common;

use common::*;
use database_operator_api::validate::{parse_cluster, validate_create, validate_update};
use serde_json::{Value, json};

/// Runs parse + create validation, returning the errors as `field: message` strings.
fn create_errors(v: Value) -> Vec<(String, String)> {
    let cluster = match parse_cluster(v) {
        Ok(c) => c,
        Err(e) => {
            return e
                .errors()
                .iter()
                .map(|e| (e.field.clone(), e.to_string()))
                .collect();
        }
    };
    match validate_create(&cluster) {
        Ok(_) => vec![],
        Err(e) => e
            .errors()
            .iter()
            .map(|e| (e.field.clone(), e.to_string()))
            .collect(),
    }
}

#[test]
fn invalid_specs_are_rejected_naming_the_field() {
    let long_name = "a".repeat(53);
    #[rustfmt::skip]
    let cases: Vec<(&str, &str, Option<Value>, &str, &str)> = vec![
        // (case, pointer, new value or None to remove, field expected, text expected in message)
        ("replicas 0", "/spec/replicas", Some(json!(0)), "spec.replicas", "lower than 1"),
        ("replicas 10", "/spec/replicas", Some(json!(10)), "spec.replicas", "greater than 9"),
        ("replicas negative", "/spec/replicas", Some(json!(-1)), "spec.replicas", "lower than 1"),
        ("replicas not a number", "/spec/replicas", Some(json!("three")), "spec.replicas", "invalid type"),
        ("unknown engine", "/spec/engine", Some(json!("oracle")), "spec.engine", "unknown variant"),
        ("version latest", "/spec/version", Some(json!("latest")), "spec.version", "pattern"),
        ("version one component", "/spec/version", Some(json!("8")), "spec.version", "pattern"),
        ("version four components", "/spec/version", Some(json!("8.0.36.1")), "spec.version", "pattern"),
        ("version empty", "/spec/version", Some(json!("")), "spec.version", "length"),
        ("version unsupported", "/spec/version", Some(json!("9.0.0")), "spec.version", "supported versions are 8.4.0, 8.4.7, 9.7.4"),
        ("version of the other engine", "/spec/version", Some(json!("16.4")), "spec.version", "unsupported version for mysql"),
        ("version retired", "/spec/version", Some(json!("8.0.36")), "spec.version", "mysql 8.0.36 is retired (MySQL 8.0 reached end of life in April 2026); a new cluster or a version change must use a supported version: 8.4.0, 8.4.7, 9.7.4"),
        ("scheduling priority class", "/spec/scheduling", Some(json!({"priorityClassName": "High_Priority"})), "spec.scheduling.priorityClassName", "pattern"),
        ("version missing", "/spec/version", None, "spec", "missing field `version`"),
        ("storage size not a quantity", "/spec/storage/size", Some(json!("ten")), "spec.storage.size", "not a storage quantity"),
        ("storage size zero", "/spec/storage/size", Some(json!("0")), "spec.storage.size", "greater than zero"),
        ("storage size GB", "/spec/storage/size", Some(json!("20GB")), "spec.storage.size", "not a storage quantity"),
        ("storage class bad", "/spec/storage/storageClassName", Some(json!("Fast_SSD")), "spec.storage.storageClassName", "pattern"),
        ("secret name empty", "/spec/passwordSecretRef/name", Some(json!("")), "spec.passwordSecretRef.name", "length"),
        ("secret name uppercase", "/spec/passwordSecretRef/name", Some(json!("Root-PW")), "spec.passwordSecretRef.name", "pattern"),
        ("secret key empty", "/spec/passwordSecretRef/key", Some(json!("")), "spec.passwordSecretRef.key", "length"),
        ("secret key with space", "/spec/passwordSecretRef/key", Some(json!("pass word")), "spec.passwordSecretRef.key", "pattern"),
        ("secret key missing", "/spec/passwordSecretRef/key", None, "spec.passwordSecretRef", "missing field `key`"),
        ("cron six fields", "/spec/backup/schedule", Some(json!("0 2 * * * *")), "spec.backup.schedule", "pattern"),
        ("cron bad descriptor", "/spec/backup/schedule", Some(json!("@dailyfoo")), "spec.backup.schedule", "unknown descriptor"),
        ("cron minute 61", "/spec/backup/schedule", Some(json!("61 2 * * *")), "spec.backup.schedule", "61 is out of range 0-59"),
        ("cron never runs", "/spec/backup/schedule", Some(json!("0 0 30 2 *")), "spec.backup.schedule", "never runs"),
        ("cron quartz syntax", "/spec/backup/schedule", Some(json!("0 0 L * *")), "spec.backup.schedule", "not a number"),
        ("retention 0", "/spec/backup/retention", Some(json!(0)), "spec.backup.retention", "lower than 1"),
        ("bucket uppercase", "/spec/backup/s3Bucket", Some(json!("My_Bucket")), "spec.backup.s3Bucket", "lowercase"),
        ("bucket ip address", "/spec/backup/s3Bucket", Some(json!("192.168.5.4")), "spec.backup.s3Bucket", "IP address"),
        ("bucket too short", "/spec/backup/s3Bucket", Some(json!("ab")), "spec.backup.s3Bucket", "3 to 63"),
        ("bucket double dot", "/spec/backup/s3Bucket", Some(json!("my..bucket")), "spec.backup.s3Bucket", "'..'"),
        ("endpoint not http", "/spec/backup/endpoint", Some(json!("ftp://store")), "spec.backup.endpoint", "pattern"),
        ("region with spaces", "/spec/backup/region", Some(json!("EU West")), "spec.backup.region", "pattern"),
        ("credentials name empty", "/spec/backup/credentialsSecretRef", Some(json!({"name": ""})), "spec.backup.credentialsSecretRef.name", "length"),
        ("drill cron minute 61", "/spec/backup/verify", Some(json!({"schedule": "61 5 * * 0"})), "spec.backup.verify.schedule", "61 is out of range 0-59"),
        ("drill cron six fields", "/spec/backup/verify", Some(json!({"schedule": "0 5 * * 0 0"})), "spec.backup.verify.schedule", "pattern"),
        ("drill without a schedule", "/spec/backup/verify", Some(json!({})), "spec.backup.verify", "missing field `schedule`"),
        ("archive of a mysql cluster", "/spec/backup/archive", Some(json!({})), "spec.backup.archive", "available for PostgreSQL only so far, not mysql"),
        ("archive timeout too short", "/spec/backup/archive", Some(json!({"timeoutSeconds": 5})), "spec.backup.archive.timeoutSeconds", "lower than 10"),
        ("archive timeout too long", "/spec/backup/archive", Some(json!({"timeoutSeconds": 7200})), "spec.backup.archive.timeoutSeconds", "greater than 3600"),
        ("physical backup of a mysql cluster", "/spec/backup/method", Some(json!("physical")), "spec.backup.method", "physical backups are available for PostgreSQL only so far, not mysql"),
        ("backup method unknown", "/spec/backup/method", Some(json!("snapshot")), "spec.backup.method", "unknown variant"),
        ("bootstrap target time of a mysql cluster", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups", "targetTime": "2026-03-01T04:04:00Z"}})), "spec.bootstrap.fromBackup.targetTime", "point-in-time recovery replays a WAL archive onto a physical backup: PostgreSQL only so far, not mysql"),
        ("bootstrap target time without a zone", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups", "targetTime": "2026-03-01 04:04"}})), "spec.bootstrap.fromBackup.targetTime", "is not an RFC 3339 time with a zone"),
        ("bootstrap target LSN not an LSN", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups", "targetLSN": "3000100"}})), "spec.bootstrap.fromBackup.targetLSN", "pattern"),
        ("deletion policy unknown", "/spec/backup/deletionPolicy", Some(json!("Purge")), "spec.backup.deletionPolicy", "unknown variant"),
        ("bootstrap of a mysql cluster", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups"}})), "spec.bootstrap.fromBackup", "not supported yet (PostgreSQL and MariaDB only)"),
        ("bootstrap backup neither latest nor an id", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups", "backup": "yesterday"}})), "spec.bootstrap.fromBackup.backup", "pattern"),
        ("bootstrap bucket too short", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "ab"}})), "spec.bootstrap.fromBackup.s3Bucket", "3 to 63"),
        ("bootstrap namespace uppercase", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "namespace": "Shop", "s3Bucket": "backups"}})), "spec.bootstrap.fromBackup.namespace", "pattern"),
        ("bootstrap endpoint not http", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups", "endpoint": "s3.example"}})), "spec.bootstrap.fromBackup.endpoint", "pattern"),
        ("bootstrap without a bucket", "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders"}})), "spec.bootstrap.fromBackup", "missing field `s3Bucket`"),
        ("certificate secret uppercase", "/spec/tls", Some(json!({"certificateSecret": "My_Cert"})), "spec.tls.certificateSecret", "pattern"),
        ("certificate secret empty", "/spec/tls", Some(json!({"certificateSecret": ""})), "spec.tls.certificateSecret", "length"),
        ("certificate secret the operator's own", "/spec/tls", Some(json!({"certificateSecret": "my-mysql-tls"})), "spec.tls.certificateSecret", "a name the operator writes for this cluster"),
        ("certificate secret the published authority", "/spec/tls", Some(json!({"certificateSecret": "my-mysql-ca"})), "spec.tls.certificateSecret", "a name the operator writes for this cluster"),
        ("name too long", "/metadata/name", Some(json!(long_name)), "metadata.name", "at most 52"),
        ("name starts with digit", "/metadata/name", Some(json!("1db")), "metadata.name", "DNS-1035"),
    ];
    assert!(cases.len() >= 25);
    for (case, pointer, value, field, text) in cases {
        let errors = create_errors(set(base(), pointer, value));
        assert!(
            errors.iter().any(|(f, m)| f == field && m.contains(text)),
            "{case}: expected an error on {field} containing {text:?}, got {errors:?}"
        );
    }
}

#[test]
fn a_physical_backup_needs_the_archive_and_a_recovery_one_target() {
    let mut v = base_pg();
    v["spec"]["backup"]["method"] = json!("physical");
    let errors = create_errors(v.clone());
    assert!(
        errors.iter().any(|(f, m)| f == "spec.backup.method"
            && m.contains("a physical backup needs spec.backup.archive")),
        "{errors:?}"
    );
    v["spec"]["backup"]["archive"] = json!({});
    assert_eq!(create_errors(v.clone()), Vec::<(String, String)>::new());
    v["spec"]["bootstrap"] = json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups",
        "targetTime": "2026-03-01T04:04:00.123456Z"}});
    assert_eq!(create_errors(v.clone()), Vec::<(String, String)>::new());
    v["spec"]["bootstrap"]["fromBackup"]["targetLSN"] = json!("0/3000100");
    let errors = create_errors(v.clone());
    assert!(
        errors
            .iter()
            .any(|(f, m)| f == "spec.bootstrap.fromBackup.targetLSN" && m.contains("not both")),
        "{errors:?}"
    );
    v["spec"]["bootstrap"]["fromBackup"]
        .as_object_mut()
        .unwrap()
        .remove("targetTime");
    assert_eq!(create_errors(v), Vec::<(String, String)>::new());
}

#[test]
fn every_error_is_reported_at_once() {
    let mut v = base();
    v["spec"]["replicas"] = json!(0);
    v["spec"]["version"] = json!("7.0.0");
    v["spec"]["backup"]["s3Bucket"] = json!("Bad_Bucket");
    let mut fields: Vec<String> = create_errors(v).into_iter().map(|(f, _)| f).collect();
    // A field may break several rules (the bucket breaks the pattern and the naming rules).
    fields.dedup();
    assert_eq!(
        fields,
        ["spec.backup.s3Bucket", "spec.replicas", "spec.version"]
    );
}

#[test]
fn errors_carry_the_rejected_value() {
    let err = validate_create(&typed(set(base(), "/spec/replicas", Some(json!(12))))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 validation error: spec.replicas: greater than 9 (value: 12)"
    );
}

fn update(old: Value, new: Value) -> Result<Vec<String>, Vec<(String, String)>> {
    validate_update(&typed(old), &typed(new))
        .map(|w| w.iter().map(ToString::to_string).collect())
        .map_err(|e| {
            e.errors()
                .iter()
                .map(|e| (e.field.clone(), e.to_string()))
                .collect()
        })
}

#[test]
fn invalid_updates_are_rejected_naming_the_field() {
    #[rustfmt::skip]
    let cases: Vec<(&str, Value, Value, &str, &str)> = vec![
        ("engine change", base(), set(base_pg(), "/spec/storage/storageClassName", Some(json!("fast-ssd"))), "spec.engine", "immutable"),
        ("storage class change", base(), set(base(), "/spec/storage/storageClassName", Some(json!("slow-hdd"))), "spec.storage.storageClassName", "immutable once set"),
        ("storage class removed", base(), set(base(), "/spec/storage/storageClassName", None), "spec.storage.storageClassName", "immutable once set"),
        ("storage shrink", base(), set(base(), "/spec/storage/size", Some(json!("10Gi"))), "spec.storage.size", "may not shrink from 20Gi to 10Gi"),
        ("storage shrink across units", base(), set(base(), "/spec/storage/size", Some(json!("20G"))), "spec.storage.size", "may not shrink"),
        ("mysql downgrade", base(), set(base(), "/spec/version", Some(json!("8.4.0"))), "spec.version", "downgrade from 8.4.7 to 8.4.0"),
        ("mysql series downgrade", set(base(), "/spec/version", Some(json!("9.7.4"))), base(), "spec.version", "downgrade"),
        ("retired to another retired version", set(base(), "/spec/version", Some(json!("8.0.36"))), set(base(), "/spec/version", Some(json!("8.0.37"))), "spec.version", "8.0.37 is retired"),
        ("supported to a retired version", base(), set(base(), "/spec/version", Some(json!("8.0.37"))), "spec.version", "is retired"),
        ("postgres major upgrade", set(base_pg(), "/spec/version", Some(json!("15.18"))), base_pg(), "spec.version", "PostgreSQL major version change from 15 to 16"),
        ("postgres downgrade", base_pg(), set(base_pg(), "/spec/version", Some(json!("16.2"))), "spec.version", "downgrade from 16.4 to 16.2"),
        ("postgres major downgrade", base_pg(), set(base_pg(), "/spec/version", Some(json!("15.18"))), "spec.version", "downgrade"),
        ("mariadb downgrade", set(base_mariadb(), "/spec/version", Some(json!("11.8.3"))), base_mariadb(), "spec.version", "downgrade from 11.8.3 to 10.11.19"),
        ("mariadb to mysql", base_mariadb(), base(), "spec.engine", "immutable"),
        ("mysql skips an lts series", set(base(), "/spec/version", Some(json!("8.0.37"))), set(base(), "/spec/version", Some(json!("9.7.4"))), "spec.version", "from 8.0 upgrade to 8.4 first"),
        ("invalid new value", base(), set(base(), "/spec/replicas", Some(json!(10))), "spec.replicas", "greater than 9"),
        ("bootstrap added", base(), set(base(), "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups"}}))), "spec.bootstrap", "can only be set when the cluster is created"),
        ("bootstrap changed", set(base(), "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups"}}))), set(base(), "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "other", "s3Bucket": "backups"}}))), "spec.bootstrap", "immutable"),
    ];
    for (case, old, new, field, text) in cases {
        match update(old, new) {
            Ok(w) => panic!("{case}: accepted with warnings {w:?}"),
            Err(errors) => assert!(
                errors.iter().any(|(f, m)| f == field && m.contains(text)),
                "{case}: expected an error on {field} containing {text:?}, got {errors:?}"
            ),
        }
    }
}

#[test]
fn valid_updates_pass_with_the_right_warnings() {
    #[rustfmt::skip]
    let cases: Vec<(&str, Value, Value, &[&str])> = vec![
        ("no change", base(), base(), &[]),
        ("bootstrap removed", set(base(), "/spec/bootstrap", Some(json!({"fromBackup": {"cluster": "orders", "s3Bucket": "backups"}}))), base(), &[]),
        ("scale up", base(), set(base(), "/spec/replicas", Some(json!(5))), &[]),
        ("scale down", base(), set(base(), "/spec/replicas", Some(json!(1))), &["spec.replicas: scaling down from 3 to 1", "PersistentVolumeClaims and data are retained"]),
        ("grow storage", base(), set(base(), "/spec/storage/size", Some(json!("40Gi"))), &["spec.storage.size: growth from 20Gi to 40Gi: the operator grows each member's PersistentVolumeClaim", "data-<cluster>-<ordinal>", "allowVolumeExpansion"]),
        ("same size other unit", base(), set(base(), "/spec/storage/size", Some(json!("20480Mi"))), &[]),
        ("set storage class", set(base(), "/spec/storage/storageClassName", None), base(), &[]),
        ("mysql patch upgrade", set(base(), "/spec/version", Some(json!("8.4.0"))), base(), &[]),
        ("mysql series upgrade", base(), set(base(), "/spec/version", Some(json!("9.7.4"))), &["crosses release series (8.4 to 9.7)"]),
        ("retired version kept", set(base(), "/spec/version", Some(json!("8.0.36"))), set(set(base(), "/spec/version", Some(json!("8.0.36"))), "/spec/replicas", Some(json!(5))), &["spec.version: mysql 8.0.36 is retired (MySQL 8.0 reached end of life in April 2026): the cluster keeps running and being reconciled, but it may only move to a supported version: 8.4.0, 8.4.7, 9.7.4"]),
        ("retired to supported", set(base(), "/spec/version", Some(json!("8.0.36"))), base(), &["crosses release series (8.0 to 8.4)"]),
        ("mariadb series upgrade", base_mariadb(), set(base_mariadb(), "/spec/version", Some(json!("11.8.3"))), &["upgrade from MariaDB 10.11.19 to 11.8.3 crosses release series (10.11 to 11.8)"]),
        ("scheduling added", base(), set(base(), "/spec/scheduling", Some(json!({"nodeSelector": {"disk": "ssd"}, "priorityClassName": "db-critical"}))), &[]),
        ("postgres minor upgrade", set(base_pg(), "/spec/version", Some(json!("16.2"))), base_pg(), &[]),
        ("backup removed", base(), set(base(), "/spec/backup", None), &["spec.backup: removed", "backups already stored are kept"]),
        ("delete policy", base(), set(base(), "/spec/backup/deletionPolicy", Some(json!("Delete"))), &["spec.backup.deletionPolicy: Delete"]),
        ("fix an unsupported old version", set(base(), "/spec/version", Some(json!("8.4.1"))), base(), &[]),
    ];
    for (case, old, new, want) in cases {
        let warnings = update(old, new).unwrap_or_else(|e| panic!("{case}: rejected: {e:?}"));
        let joined = warnings.join("\n");
        for w in want {
            assert!(
                joined.contains(w),
                "{case}: expected warning containing {w:?}, got {warnings:?}"
            );
        }
        if want.is_empty() {
            assert!(
                warnings.is_empty(),
                "{case}: unexpected warnings {warnings:?}"
            );
        }
    }
}

#[test]
fn a_certificate_secret_with_tls_off_is_a_warning() {
    let v = set(
        base(),
        "/spec/tls",
        Some(json!({"enabled": false, "certificateSecret": "corp-cert"})),
    );
    let w = validate_create(&typed(v)).expect("valid");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].to_string()
            .starts_with("spec.tls.certificateSecret: Secret corp-cert is not used"),
        "{w:?}"
    );
    let on = set(
        base(),
        "/spec/tls",
        Some(json!({"certificateSecret": "corp-cert"})),
    );
    assert!(validate_create(&typed(on)).expect("valid").is_empty());
}

#[test]
fn plain_http_endpoint_is_a_warning() {
    let v = set(
        base(),
        "/spec/backup/endpoint",
        Some(json!("http://minio.local:9000")),
    );
    let w = validate_create(&typed(v)).expect("valid");
    assert_eq!(w.len(), 1);
    assert!(
        w[0].to_string()
            .starts_with("spec.backup.endpoint: uses plain http")
    );
}

#[test]
fn a_name_that_shares_a_service_name_with_another_cluster_is_a_warning() {
    for (name, other) in [
        ("my-mysql-replicas", "my-mysql"),
        ("orders-headless", "orders"),
    ] {
        let v = set(base(), "/metadata/name", Some(json!(name)));
        let w = validate_create(&typed(v)).expect("valid");
        assert_eq!(w.len(), 1, "{w:?}");
        let text = w[0].to_string();
        assert!(
            text.starts_with("metadata.name: its read-write Service has the name of a Service")
                && text.contains(&format!("{other:?}")),
            "{text}"
        );
    }
    // A name that merely contains the word is fine.
    let v = set(base(), "/metadata/name", Some(json!("replicas-store")));
    assert!(validate_create(&typed(v)).expect("valid").is_empty());
}
