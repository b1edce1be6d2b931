//! Defaulting from the generated CRD schema (pure).
//!
//! The defaults are read from the `default` keywords of the CRD that `database_operator_api::crd`
//! generates, not restated here, so the webhook, the API server's own structural defaulting and
//! the serde defaults of the Rust types cannot drift apart (tests check the last pair).
//!
//! The walk follows the API server's rules for structural schemas: a property that is absent
//! from an object that is present gets its default; a `null` in a property that is not
//! `nullable` is replaced by the default; nested objects, array items and map values are
//! visited; `status` is the operator's and is left alone.

use database_operator_api::VERSION;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use super::WebhookError;

/// The defaults the CRD schema declares for `spec`, ready to be turned into JSON patches.
#[derive(Clone, Debug)]
pub struct SchemaDefaults {
    spec_schema: Value,
}

impl SchemaDefaults {
    /// Reads the `spec` schema of the served version from `crd`.
    pub fn from_crd(crd: &CustomResourceDefinition) -> Result<Self, WebhookError> {
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == VERSION)
            .ok_or_else(|| WebhookError::Schema(format!("the CRD has no version {VERSION}")))?;
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or_else(|| {
                WebhookError::Schema(format!("version {VERSION} has no openAPIV3Schema"))
            })?;
        let schema =
            serde_json::to_value(schema).map_err(|e| WebhookError::Schema(e.to_string()))?;
        let spec_schema = schema
            .pointer("/properties/spec")
            .filter(|s| s.is_object())
            .cloned()
            .ok_or_else(|| WebhookError::Schema("the schema has no properties.spec".into()))?;
        Ok(Self { spec_schema })
    }

    /// The defaults of the `DatabaseCluster` CRD that `database_operator_api::crd::crd()` generates.
    pub fn generated() -> Result<Self, WebhookError> {
        Self::from_crd(&database_operator_api::crd::crd())
    }

    /// Every declared default as `(field path, value)`, paths written as in error messages
    /// (`spec.backup.retention`; `[]` for array items, `{}` for map values), in schema order.
    pub fn declared(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        collect(&self.spec_schema, "spec", &mut out);
        out
    }

    /// The JSON patch operations that fill the defaults missing from `object` (a whole
    /// `DatabaseCluster` as JSON). Empty when nothing is missing or there is no `spec` object to
    /// default (validation reports that).
    pub fn patch_for(&self, object: &Value) -> Vec<PatchOperation> {
        let mut ops = Vec::new();
        if let Some(spec) = object.get("spec").filter(|s| s.is_object()) {
            let mut path = vec!["spec".to_owned()];
            walk(&self.spec_schema, spec, &mut path, &mut ops);
        }
        ops
    }
}

fn is_nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn walk(schema: &Value, value: &Value, path: &mut Vec<String>, ops: &mut Vec<PatchOperation>) {
    match value {
        Value::Object(object) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    path.push(name.clone());
                    let default = property.get("default");
                    match (object.get(name), default) {
                        (None, Some(default)) => ops.push(PatchOperation::Add(AddOperation {
                            path: PointerBuf::from_tokens(path.iter()),
                            value: default.clone(),
                        })),
                        (Some(Value::Null), Some(default)) if !is_nullable(property) => {
                            ops.push(PatchOperation::Replace(ReplaceOperation {
                                path: PointerBuf::from_tokens(path.iter()),
                                value: default.clone(),
                            }))
                        }
                        (Some(child), _) => walk(property, child, path, ops),
                        (None, None) => {}
                    }
                    path.pop();
                }
            } else if let Some(values) =
                schema.get("additionalProperties").filter(|s| s.is_object())
            {
                for (key, child) in object {
                    path.push(key.clone());
                    walk(values, child, path, ops);
                    path.pop();
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    path.push(i.to_string());
                    walk(item_schema, item, path, ops);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

fn collect(schema: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let child = format!("{path}.{name}");
            if let Some(default) = property.get("default") {
                out.push((child.clone(), default.clone()));
            }
            collect(property, &child, out);
        }
    }
    if let Some(values) = schema.get("additionalProperties").filter(|s| s.is_object()) {
        collect(values, &format!("{path}{{}}"), out);
    }
    if let Some(items) = schema.get("items").filter(|s| s.is_object()) {
        collect(items, &format!("{path}[]"), out);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn defaults() -> SchemaDefaults {
        SchemaDefaults::generated().expect("the generated CRD has a spec schema")
    }

    fn apply(object: &Value) -> Value {
        let mut patched = object.clone();
        let ops = defaults().patch_for(object);
        json_patch::patch(&mut patched, &ops)
            .expect("the patch applies to the object it was made for");
        patched
    }

    #[test]
    fn declared_defaults_are_exactly_the_documented_ones() {
        let declared = defaults().declared();
        let expected = vec![
            ("spec.backup.archive.timeoutSeconds".to_owned(), json!(60)),
            (
                "spec.backup.credentialsSecretRef.accessKeyIdKey".to_owned(),
                json!("AWS_ACCESS_KEY_ID"),
            ),
            (
                "spec.backup.credentialsSecretRef.secretAccessKeyKey".to_owned(),
                json!("AWS_SECRET_ACCESS_KEY"),
            ),
            ("spec.backup.deletionPolicy".to_owned(), json!("Retain")),
            ("spec.backup.retention".to_owned(), json!(7)),
            (
                "spec.bootstrap.fromBackup.backup".to_owned(),
                json!("latest"),
            ),
            (
                "spec.bootstrap.fromBackup.credentialsSecretRef.accessKeyIdKey".to_owned(),
                json!("AWS_ACCESS_KEY_ID"),
            ),
            (
                "spec.bootstrap.fromBackup.credentialsSecretRef.secretAccessKeyKey".to_owned(),
                json!("AWS_SECRET_ACCESS_KEY"),
            ),
            (
                "spec.bootstrap.fromBackup.signatureCheck".to_owned(),
                json!("Required"),
            ),
            ("spec.engine".to_owned(), json!("mysql")),
            ("spec.failover.delaySeconds".to_owned(), json!(10)),
            ("spec.failover.enabled".to_owned(), json!(true)),
            ("spec.failover.leaseSeconds".to_owned(), json!(10)),
            ("spec.failover.nodeLoss".to_owned(), json!("Wait")),
            ("spec.networkPolicy.enabled".to_owned(), json!(true)),
            ("spec.passwordRotation.graceSeconds".to_owned(), json!(3600)),
            ("spec.replicas".to_owned(), json!(1)),
            ("spec.replication.mode".to_owned(), json!("async")),
            ("spec.tls.allowPlaintext".to_owned(), json!(false)),
            ("spec.tls.enabled".to_owned(), json!(true)),
            (
                "spec.tls.serverCertificateLifetimeSeconds".to_owned(),
                json!(7_776_000),
            ),
            ("spec.upgrade.stepTimeoutSeconds".to_owned(), json!(600)),
        ];
        assert_eq!(declared, expected);
    }

    #[test]
    fn fills_what_is_missing_and_nothing_else() {
        let object = json!({
            "metadata": {"name": "db"},
            "spec": {
                "version": "8.4.0",
                "storage": {"size": "1Gi"},
                "passwordSecretRef": {"name": "pw", "key": "password"},
                "backup": {"schedule": "@daily", "s3Bucket": "bucket", "credentialsSecretRef": {"name": "s3"}}
            }
        });
        let ops = serde_json::to_value(defaults().patch_for(&object)).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "add", "path": "/spec/backup/credentialsSecretRef/accessKeyIdKey", "value": "AWS_ACCESS_KEY_ID"},
                {"op": "add", "path": "/spec/backup/credentialsSecretRef/secretAccessKeyKey", "value": "AWS_SECRET_ACCESS_KEY"},
                {"op": "add", "path": "/spec/backup/deletionPolicy", "value": "Retain"},
                {"op": "add", "path": "/spec/backup/retention", "value": 7},
                {"op": "add", "path": "/spec/engine", "value": "mysql"},
                {"op": "add", "path": "/spec/replicas", "value": 1},
            ])
        );
    }

    #[test]
    fn a_complete_object_needs_no_patch() {
        let object = json!({"spec": {
            "engine": "postgresql", "version": "16.4", "replicas": 3,
            "storage": {"size": "1Gi"}, "passwordSecretRef": {"name": "pw", "key": "password"},
            "backup": {"schedule": "@daily", "s3Bucket": "bucket", "retention": 2, "deletionPolicy": "Delete"}
        }});
        assert!(defaults().patch_for(&object).is_empty());
    }

    #[test]
    fn null_in_a_non_nullable_field_is_replaced_and_nullable_null_is_kept() {
        // `replicas` is not nullable: the API server prunes the null and defaults it. `backup`
        // is nullable (an Option): null means "no backups" and stays.
        let object = json!({"spec": {"replicas": null, "backup": null, "engine": "mysql"}});
        let ops = serde_json::to_value(defaults().patch_for(&object)).unwrap();
        assert_eq!(
            ops,
            json!([{"op": "replace", "path": "/spec/replicas", "value": 1}])
        );
    }

    #[test]
    fn no_spec_no_patch() {
        assert!(
            defaults()
                .patch_for(&json!({"metadata": {"name": "x"}}))
                .is_empty()
        );
        assert!(
            defaults()
                .patch_for(&json!({"spec": "nonsense"}))
                .is_empty()
        );
        assert!(defaults().patch_for(&json!({"spec": {"backup": 3}})).len() == 2);
    }

    /// The schema's defaults and the serde defaults of the Rust types agree: defaulting an object
    /// through the patch gives the same spec as reading it into the types and writing it back.
    #[test]
    fn patch_and_serde_defaults_agree() {
        let minimal = [
            json!({"spec": {"version": "8.4.0", "storage": {"size": "1Gi"},
                            "passwordSecretRef": {"name": "pw", "key": "k"}}}),
            json!({"spec": {"version": "8.4.0", "storage": {"size": "1Gi"},
                            "passwordSecretRef": {"name": "pw", "key": "k"},
                            "backup": {"schedule": "@daily", "s3Bucket": "bucket"}}}),
            json!({"spec": {"engine": "postgresql", "version": "16.4", "storage": {"size": "1Gi"},
                            "passwordSecretRef": {"name": "pw", "key": "k"},
                            "backup": {"schedule": "@daily", "s3Bucket": "bucket",
                                       "credentialsSecretRef": {"name": "s3"}}}}),
        ];
        for spec in minimal {
            let mut object = spec.clone();
            object["apiVersion"] = json!("database.example.com/v1alpha1");
            object["kind"] = json!("DatabaseCluster");
            object["metadata"] = json!({"name": "db"});
            let typed =
                database_operator_api::validate::parse_cluster(object.clone()).expect("parses");
            let via_serde = serde_json::to_value(&typed.spec).unwrap();
            assert_eq!(apply(&object)["spec"], via_serde, "{spec}");
        }
    }
}
