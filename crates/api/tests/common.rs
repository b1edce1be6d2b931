//! Shared helpers for the API tests.
#![allow(dead_code)]

use std::path::PathBuf;

use database_operator_api::DatabaseCluster;
use serde_json::{Value, json};

/// Path of a file relative to the workspace root.
pub fn workspace_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Every YAML document of a multi-document file, as JSON values.
pub fn yaml_documents(rel: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(workspace_file(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The DatabaseCluster documents of an example file.
pub fn example_clusters(rel: &str) -> Vec<Value> {
    yaml_documents(rel)
        .into_iter()
        .filter(|d| d["kind"] == "DatabaseCluster")
        .collect()
}

/// A valid MySQL cluster with backups, as JSON, to mutate in tests.
pub fn base() -> Value {
    json!({
        "apiVersion": "database.example.com/v1alpha1",
        "kind": "DatabaseCluster",
        "metadata": {"name": "my-mysql", "namespace": "default"},
        "spec": {
            "engine": "mysql",
            "version": "8.4.7",
            "replicas": 3,
            "storage": {"size": "20Gi", "storageClassName": "fast-ssd"},
            "passwordSecretRef": {"name": "mysql-root-password", "key": "password"},
            "backup": {"schedule": "0 2 * * *", "retention": 7, "s3Bucket": "my-db-backups"}
        }
    })
}

/// A valid PostgreSQL cluster, as JSON.
pub fn base_pg() -> Value {
    let mut v = base();
    v["spec"]["engine"] = json!("postgresql");
    v["spec"]["version"] = json!("16.4");
    v
}

/// A valid MariaDB cluster, as JSON.
pub fn base_mariadb() -> Value {
    let mut v = base();
    v["spec"]["engine"] = json!("mariadb");
    v["spec"]["version"] = json!("10.11.19");
    v
}

/// Sets the value at a JSON pointer (creating nothing: the parent must exist); `None` removes it.
pub fn set(mut v: Value, pointer: &str, new: Option<Value>) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a parent");
    let obj = v
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent}"));
    match new {
        Some(n) => {
            obj.insert(key.to_owned(), n);
        }
        None => {
            obj.remove(key);
        }
    }
    v
}

/// Deserialises a cluster that must have the right shape.
pub fn typed(v: Value) -> DatabaseCluster {
    serde_json::from_value(v).expect("cluster deserialises")
}
