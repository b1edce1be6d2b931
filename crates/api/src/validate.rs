//! Validation of `DatabaseCluster` objects beyond what the schema can say.
//!
//! The CRD schema and its CEL rules are enforced by the API server; this module enforces the
//! same rules again (so the CLI and the webhook report them without a round trip) plus the ones
//! a schema cannot express: supported versions per engine, cron semantics, S3 bucket names,
//! downgrades and PostgreSQL major-version changes. The webhook and `database-operator validate`
//! both call [`validate_create`] and [`validate_update`], so they never disagree.
//!
//! The result is either a list of [`Warning`]s (the object is accepted) or
//! [`ValidationErrors`], every one naming the field path and the rule it breaks.

use std::fmt;

use garde::Validate as _;

use crate::rules::{self, quantity_bytes};
use crate::versions::{self, Support, Version};
use crate::{DatabaseCluster, DatabaseClusterSpec};

mod backups;

/// One broken rule.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Path of the offending field from the object root, such as `spec.backup.schedule`.
    pub field: String,
    /// What the rule requires, as a sentence fragment a person can act on.
    pub message: String,
    /// The rejected value, when it helps to see it.
    pub value: Option<serde_json::Value>,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
            value: None,
        }
    }

    /// An error about `field` showing the rejected `value`.
    pub(crate) fn with_value(
        field: impl Into<String>,
        message: impl Into<String>,
        value: &str,
    ) -> Self {
        Self {
            value: Some(serde_json::Value::String(value.to_owned())),
            ..Self::new(field, message)
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)?;
        if let Some(v) = &self.value {
            write!(f, " (value: {v})")?;
        }
        Ok(())
    }
}

/// Every rule a `DatabaseCluster` breaks. Never empty.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    /// The individual errors, in field order.
    pub fn errors(&self) -> &[FieldError] {
        &self.0
    }

    /// Whether any error is about `field` (exact path).
    pub fn has_field(&self, field: &str) -> bool {
        self.0.iter().any(|e| e.field == field)
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} validation error{}: ", if n == 1 { "" } else { "s" })?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Something accepted but worth a careful operator's attention (shown by `kubectl` on apply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Path of the field the warning is about.
    pub field: String,
    /// What will happen and what to do about it.
    pub message: String,
}

impl Warning {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The outcome of a successful validation: the warnings to show.
pub type Warnings = Vec<Warning>;

/// Reads a `DatabaseCluster` from JSON (a webhook request, a file the CLI read), reporting a
/// value of the wrong type or shape with the path of the field, such as
/// `spec.engine: unknown variant `oracle`, expected one of `mysql`, `postgresql`, `mariadb``.
///
/// ```
/// use database_operator_api::validate::parse_cluster;
/// let err = parse_cluster(serde_json::json!({
///     "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
///     "metadata": {"name": "db"},
///     "spec": {"engine": "oracle", "version": "1.0", "storage": {"size": "1Gi"},
///              "passwordSecretRef": {"name": "s", "key": "k"}}
/// })).unwrap_err();
/// assert_eq!(err.errors()[0].field, "spec.engine");
/// ```
pub fn parse_cluster(value: serde_json::Value) -> Result<DatabaseCluster, ValidationErrors> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." {
            "<root>".to_owned()
        } else {
            field
        };
        ValidationErrors(vec![FieldError::new(field, e.into_inner().to_string())])
    })
}

/// Validates a cluster being created (or any cluster as it stands).
///
/// ```
/// use database_operator_api::{DatabaseCluster, validate::validate_create};
/// let cluster: DatabaseCluster = serde_json::from_value(serde_json::json!({
///     "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
///     "metadata": {"name": "orders", "namespace": "shop"},
///     "spec": {"engine": "postgresql", "version": "16.4", "replicas": 12,
///              "storage": {"size": "10Gi"},
///              "passwordSecretRef": {"name": "orders-pw", "key": "password"}}
/// })).unwrap();
/// let errors = validate_create(&cluster).unwrap_err();
/// assert!(errors.has_field("spec.replicas"));
/// ```
pub fn validate_create(cluster: &DatabaseCluster) -> Result<Warnings, ValidationErrors> {
    let mut errors = Vec::new();
    check_name(cluster, &mut errors);
    let mut warnings = check_spec(&cluster.spec, VersionRule::Supported, &mut errors);
    if let Some(other) = cluster
        .metadata
        .name
        .as_deref()
        .and_then(rules::service_name_shared_with)
    {
        warnings.push(Warning::new(
            "metadata.name",
            format!(
                "its read-write Service has the name of a Service of a cluster named {other:?} in this namespace: if both exist, the one created second is refused (the operator never takes over another cluster's objects); choose another name"
            ),
        ));
    }
    finish(errors, warnings)
}

/// Validates a cluster the operator is about to reconcile: everything [`validate_create`]
/// checks, except that a retired version (see [`crate::versions::RETIRED`]) the cluster
/// already runs (`status.currentVersion`) is a warning, not an error. An existing cluster on a
/// version that left the catalog keeps being reconciled; a new one (no current version yet) on
/// a retired version is refused like on creation.
///
/// ```
/// use database_operator_api::{DatabaseCluster, DatabaseClusterStatus};
/// use database_operator_api::validate::{validate_create, validate_running};
/// let mut cluster: DatabaseCluster = serde_json::from_value(serde_json::json!({
///     "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
///     "metadata": {"name": "orders", "namespace": "shop"},
///     "spec": {"engine": "mysql", "version": "8.0.36", "storage": {"size": "10Gi"},
///              "passwordSecretRef": {"name": "orders-pw", "key": "password"}}
/// })).unwrap();
/// assert!(validate_running(&cluster).is_err());
/// cluster.status = Some(DatabaseClusterStatus {
///     current_version: Some("8.0.36".into()),
///     ..DatabaseClusterStatus::default()
/// });
/// let warnings = validate_running(&cluster).unwrap();
/// assert!(warnings[0].message.contains("retired"));
/// assert!(validate_create(&cluster).is_err());
/// ```
pub fn validate_running(cluster: &DatabaseCluster) -> Result<Warnings, ValidationErrors> {
    let mut errors = Vec::new();
    check_name(cluster, &mut errors);
    let rule = match cluster
        .status
        .as_ref()
        .and_then(|s| s.current_version.as_deref())
    {
        Some(current) => VersionRule::Keeps(current),
        None => VersionRule::Supported,
    };
    let warnings = check_spec(&cluster.spec, rule, &mut errors);
    finish(errors, warnings)
}

/// Validates a change from `old` to `new`: everything [`validate_create`] checks on `new`, plus
/// the rules about changes (engine and storage class immutable, no storage shrink, no downgrade,
/// no upgrade the engine does not support in place: [`versions::upgrade_refusal`]) and warnings about consequential changes (scale-down).
pub fn validate_update(
    old: &DatabaseCluster,
    new: &DatabaseCluster,
) -> Result<Warnings, ValidationErrors> {
    let Assessment { errors, warnings } = assess_update(old, new);
    finish(errors, warnings)
}

/// Everything found about a change, errors and warnings together.
///
/// [`validate_update`] is the usual entry point; this is for callers that treat some errors
/// specially (the webhook lets an update through when every error was already present in the
/// stored object, and still shows the change's warnings).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assessment {
    /// Broken rules, in field order.
    pub errors: Vec<FieldError>,
    /// Things worth a careful operator's attention.
    pub warnings: Warnings,
}

/// Assesses a change from `old` to `new` without deciding: see [`Assessment`].
pub fn assess_update(old: &DatabaseCluster, new: &DatabaseCluster) -> Assessment {
    let mut errors = Vec::new();
    check_name(new, &mut errors);
    // A cluster whose version left the catalog may keep it (with a warning) or move to a
    // supported version; it may not move to another unsupported one.
    let rule = if old.spec.engine == new.spec.engine {
        VersionRule::Keeps(old.spec.version.as_str())
    } else {
        VersionRule::Supported
    };
    let mut warnings = check_spec(&new.spec, rule, &mut errors);
    check_transition(&old.spec, &new.spec, &mut errors, &mut warnings);
    Assessment { errors, warnings }
}

/// Validates a spec on its own (no name, no previous version).
pub fn validate_spec(spec: &DatabaseClusterSpec) -> Result<Warnings, ValidationErrors> {
    let mut errors = Vec::new();
    let warnings = check_spec(spec, VersionRule::Supported, &mut errors);
    finish(errors, warnings)
}

/// `outcome` with `more` errors (an installation's own rules, such as
/// [`crate::scheduling::SchedulingPolicy`]): refused when either has errors, the errors of both
/// in that order.
pub fn with_more_errors(
    outcome: Result<Warnings, ValidationErrors>,
    more: Vec<FieldError>,
) -> Result<Warnings, ValidationErrors> {
    match outcome {
        _ if more.is_empty() => outcome,
        Ok(_) => Err(ValidationErrors(more)),
        Err(ValidationErrors(mut errors)) => {
            errors.extend(more);
            Err(ValidationErrors(errors))
        }
    }
}

fn finish(errors: Vec<FieldError>, warnings: Warnings) -> Result<Warnings, ValidationErrors> {
    if errors.is_empty() {
        Ok(warnings)
    } else {
        Err(ValidationErrors(errors))
    }
}

/// The rules on `metadata.name`, and those that need it.
fn check_name(cluster: &DatabaseCluster, errors: &mut Vec<FieldError>) {
    let Some(name) = cluster.metadata.name.as_deref() else {
        return;
    };
    if let Err(e) = rules::check_cluster_name(name) {
        errors.push(FieldError::new("metadata.name", e));
    }
    if let Some(provided) = cluster
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.certificate_secret.as_deref())
        && rules::OPERATOR_TLS_SECRET_SUFFIXES
            .iter()
            .any(|suffix| provided == [name, suffix].concat())
    {
        errors.push(FieldError {
            field: "spec.tls.certificateSecret".into(),
            message: format!(
                "{provided} is a name the operator writes for this cluster ({name}-tls, {name}-ca, {name}-ca-key); name the Secret that holds your certificate, under another name"
            ),
            value: Some(provided.into()),
        });
    }
}

/// How `spec.version` is held against the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VersionRule<'a> {
    /// A new cluster: the version must be supported.
    Supported,
    /// A retired version equal to this one (the version the cluster already runs, or had
    /// before the update) is accepted with a warning; anything else must be supported.
    Keeps(&'a str),
}

fn check_version(
    spec: &DatabaseClusterSpec,
    rule: VersionRule<'_>,
    errors: &mut Vec<FieldError>,
    warnings: &mut Warnings,
) {
    // Only meaningful once the version has the right shape (the pattern reports it otherwise).
    if Version::parse(&spec.version).is_none() {
        return;
    }
    let supported = versions::supported_versions(spec.engine).join(", ");
    match versions::support(spec.engine, &spec.version) {
        Support::Supported => {}
        Support::Retired(retired) if rule == VersionRule::Keeps(spec.version.as_str()) => {
            warnings.push(Warning::new(
                "spec.version",
                format!(
                    "{} {} is retired ({}): the cluster keeps running and being reconciled, but it may only move to a supported version: {supported}",
                    spec.engine, spec.version, retired
                ),
            ));
        }
        Support::Retired(retired) => errors.push(FieldError {
            field: "spec.version".into(),
            message: format!(
                "{} {} is retired ({}); a new cluster or a version change must use a supported version: {supported}",
                spec.engine, spec.version, retired
            ),
            value: Some(spec.version.clone().into()),
        }),
        Support::Unknown => errors.push(FieldError {
            field: "spec.version".into(),
            message: format!(
                "unsupported version for {}: supported versions are {supported}",
                spec.engine
            ),
            value: Some(spec.version.clone().into()),
        }),
    }
}

fn check_spec(
    spec: &DatabaseClusterSpec,
    rule: VersionRule<'_>,
    errors: &mut Vec<FieldError>,
) -> Warnings {
    let mut warnings = Vec::new();

    // Field rules declared on the types (the same ones the schema carries).
    if let Err(report) = spec.validate() {
        let json = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
        for (path, err) in report.iter() {
            let rel = camel_path(&path.to_string());
            let value = json.pointer(&json_pointer(&rel)).cloned();
            errors.push(FieldError {
                field: format!("spec.{rel}"),
                message: err.message().to_owned(),
                value,
            });
        }
    }

    check_version(spec, rule, errors, &mut warnings);

    if let Some(policy) = &spec.network_policy {
        errors.extend(policy.problems());
    }

    if let Some(tls) = spec.tls.as_ref().filter(|t| !t.enabled)
        && let Some(secret) = &tls.certificate_secret
    {
        warnings.push(Warning::new(
            "spec.tls.certificateSecret",
            format!(
                "Secret {secret} is not used while spec.tls.enabled is false: the servers offer no TLS"
            ),
        ));
    }

    backups::check(spec, errors, &mut warnings);
    errors.sort_by(|a, b| a.field.cmp(&b.field));
    warnings
}

fn check_transition(
    old: &DatabaseClusterSpec,
    new: &DatabaseClusterSpec,
    errors: &mut Vec<FieldError>,
    warnings: &mut Warnings,
) {
    if new.bootstrap.is_some() && new.bootstrap != old.bootstrap {
        errors.push(FieldError {
            field: "spec.bootstrap".into(),
            message: if old.bootstrap.is_some() {
                "is immutable: it said how this cluster was first created; remove it, or create a new cluster to restore another backup".into()
            } else {
                "can only be set when the cluster is created: it acts once, on the first start of an empty cluster; create a new cluster to restore a backup".into()
            },
            value: None,
        });
    }
    if old.engine != new.engine {
        errors.push(FieldError {
            field: "spec.engine".into(),
            message: format!(
                "is immutable: the data on disk belongs to {}; create a new cluster and migrate the data instead",
                old.engine
            ),
            value: Some(new.engine.as_str().into()),
        });
    }

    if let Some(old_class) = &old.storage.storage_class_name
        && new.storage.storage_class_name.as_ref() != Some(old_class)
    {
        errors.push(FieldError {
            field: "spec.storage.storageClassName".into(),
            message: format!("is immutable once set (was {old_class:?}): existing volumes cannot move to another storage class"),
            value: new.storage.storage_class_name.clone().map(Into::into),
        });
    }

    if let (Some(before), Some(after)) = (
        quantity_bytes(&old.storage.size.0),
        quantity_bytes(&new.storage.size.0),
    ) && after < before
    {
        errors.push(FieldError {
            field: "spec.storage.size".into(),
            message: format!(
                "may not shrink from {} to {}: volumes cannot be made smaller without losing data",
                old.storage.size.0, new.storage.size.0
            ),
            value: None,
        });
    }

    if old.engine == new.engine
        && let (Some(from), Some(to)) = (Version::parse(&old.version), Version::parse(&new.version))
    {
        if to < from {
            errors.push(FieldError {
                field: "spec.version".into(),
                message: format!(
                    "downgrade from {from} to {to} is not supported: data files written by a newer {} may not be readable by an older one; restore a backup into a new cluster instead",
                    new.engine
                ),
                value: None,
            });
        } else if let Some(why) = versions::upgrade_refusal(new.engine, from, to) {
            errors.push(FieldError {
                field: "spec.version".into(),
                message: why,
                value: None,
            });
        } else if from.major_release(new.engine) != to.major_release(new.engine) {
            // Only the MySQL family gets here: PostgreSQL refuses any major upgrade above.
            let name = new.engine.product_name();
            warnings.push(Warning::new(
                "spec.version",
                format!(
                    "upgrade from {name} {from} to {to} crosses release series ({} to {}) and cannot be rolled back; take a backup first",
                    from.major_release(new.engine),
                    to.major_release(new.engine)
                ),
            ));
        }
    }

    if let (Some(before), Some(after)) = (
        quantity_bytes(&old.storage.size.0),
        quantity_bytes(&new.storage.size.0),
    ) && after > before
    {
        warnings.push(Warning::new(
            "spec.storage.size",
            format!(
                "growth from {} to {}: the operator grows each member's PersistentVolumeClaim (data-<cluster>-<ordinal>) with the servers running, when its StorageClass sets allowVolumeExpansion (condition StorageResized says how far it got); the StatefulSet's claim template keeps the size it was created with, so a member added later starts at that size and is grown right after",
                old.storage.size.0, new.storage.size.0
            ),
        ));
    }

    if new.replicas < old.replicas {
        warnings.push(Warning::new(
            "spec.replicas",
            format!(
                "scaling down from {} to {}: the removed members stop, their PersistentVolumeClaims and data are retained but no longer replicated; delete the PVCs yourself once you no longer need them",
                old.replicas, new.replicas
            ),
        ));
    }

    if old.backup.is_some() && new.backup.is_none() {
        warnings.push(Warning::new(
            "spec.backup",
            "removed: the backup CronJob will be deleted and no further backups are taken; backups already stored are kept",
        ));
    }
    errors.sort_by(|a, b| a.field.cmp(&b.field));
}

/// Fields whose manifest name is not the camelCase of their Rust name (`#[serde(rename)]`).
const RENAMED: [(&str, &str); 1] = [("targetLsn", "targetLSN")];

/// Converts a garde path (Rust field names, `a.b_c[0]`) to the manifest's camelCase.
fn camel_path(path: &str) -> String {
    camel_case(path)
        .split('.')
        .map(|segment| {
            RENAMED
                .iter()
                .find(|(rust, _)| *rust == segment)
                .map_or(segment, |(_, manifest)| manifest)
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn camel_case(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut upper = false;
    for c in path.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.push(c.to_ascii_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

fn json_pointer(path: &str) -> String {
    let mut p = String::new();
    for seg in path.split('.') {
        for part in seg.split(['[', ']']).filter(|s| !s.is_empty()) {
            p.push('/');
            p.push_str(part);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_paths() {
        assert_eq!(
            camel_path("password_secret_ref.name"),
            "passwordSecretRef.name"
        );
        assert_eq!(camel_path("backup.s3_bucket"), "backup.s3Bucket");
        assert_eq!(
            camel_path("bootstrap.from_backup.target_lsn"),
            "bootstrap.fromBackup.targetLSN"
        );
        assert_eq!(
            json_pointer("storage.storageClassName"),
            "/storage/storageClassName"
        );
        assert_eq!(json_pointer("a.b[2].c"), "/a/b/2/c");
    }
}
