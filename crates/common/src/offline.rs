//! The offline commands: `render`, `validate` and `crd`. No cluster is contacted.
//!
//! `render` runs the same [`database_operator_core::plan()`] the controller runs, on a cluster
//! that has nothing yet (no objects, no pods) and whose password Secret exists, and prints
//! every object the operator would create plus the status it would start with.

use database_operator_api::validate::{parse_cluster, validate_create, validate_update};
use database_operator_api::{DatabaseCluster, GROUP, KIND, VERSION, Warning};
use database_operator_core::credentials::OperatorSecretState;
use database_operator_core::{Observed, OperatorConfig, OwnedObjects, SecretState};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// Fingerprint used in rendered manifests in place of the real Secret's.
pub const PLACEHOLDER_FINGERPRINT: &str = "0000000000000000";

/// Why an offline command failed.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The input is not YAML.
    #[error("{source_name}: not valid YAML: {message}")]
    Yaml {
        /// File name (or `-`).
        source_name: String,
        /// The parser's message.
        message: String,
    },
    /// The input has no DatabaseCluster.
    #[error("{source_name}: no {KIND} ({GROUP}/{VERSION}) document found")]
    NoCluster {
        /// File name.
        source_name: String,
    },
    /// A DatabaseCluster breaks rules.
    #[error("{cluster}: {errors}")]
    Invalid {
        /// `namespace/name`.
        cluster: String,
        /// Every broken rule.
        errors: database_operator_api::ValidationErrors,
    },
    /// An object could not be written as YAML.
    #[error("writing YAML: {0}")]
    Serialize(String),
}

fn is_cluster(doc: &serde_json::Value) -> bool {
    doc.get("kind").and_then(|k| k.as_str()) == Some(KIND)
        && doc.get("apiVersion").and_then(|v| v.as_str()) == Some(&format!("{GROUP}/{VERSION}"))
}

/// Every DatabaseCluster document in `input` (other documents, such as Secrets, are skipped),
/// read with field paths in errors.
pub fn read_clusters(input: &str, source_name: &str) -> Result<Vec<DatabaseCluster>, OfflineError> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(input).map_err(|e| OfflineError::Yaml {
            source_name: source_name.to_owned(),
            message: e.to_string(),
        })?;
    let mut clusters = Vec::new();
    for doc in docs.into_iter().filter(is_cluster) {
        let name = doc
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("<unnamed>")
            .to_owned();
        let cluster = parse_cluster(doc).map_err(|errors| OfflineError::Invalid {
            cluster: name,
            errors,
        })?;
        clusters.push(cluster);
    }
    if clusters.is_empty() {
        return Err(OfflineError::NoCluster {
            source_name: source_name.to_owned(),
        });
    }
    Ok(clusters)
}

fn display_name(cluster: &DatabaseCluster) -> String {
    format!(
        "{}/{}",
        cluster.metadata.namespace.as_deref().unwrap_or("default"),
        cluster.metadata.name.as_deref().unwrap_or("<unnamed>")
    )
}

/// The output of `render`: the YAML and the warnings to show on stderr.
#[derive(Debug)]
pub struct Rendered {
    /// Multi-document YAML.
    pub yaml: String,
    /// Validation warnings, as `namespace/name: field: message`.
    pub warnings: Vec<String>,
}

fn to_yaml<T: serde::Serialize>(value: &T) -> Result<String, OfflineError> {
    serde_saphyr::to_string(value).map_err(|e| OfflineError::Serialize(e.to_string()))
}

/// Renders every DatabaseCluster in `input` as the operator would on first sight.
pub fn render(
    input: &str,
    source_name: &str,
    now: Timestamp,
    config: &OperatorConfig,
) -> Result<Rendered, OfflineError> {
    let mut yaml = String::new();
    let mut warnings = Vec::new();
    for mut cluster in read_clusters(input, source_name)? {
        let shown = display_name(&cluster);
        let found = validate_create(&cluster).map_err(|errors| OfflineError::Invalid {
            cluster: shown.clone(),
            errors,
        })?;
        warnings.extend(found.iter().map(|w: &Warning| format!("{shown}: {w}")));
        cluster
            .metadata
            .namespace
            .get_or_insert_with(|| "default".to_owned());
        cluster.metadata.generation.get_or_insert(1);
        cluster.status = None;
        let observed = Observed {
            cluster: cluster.clone(),
            owned: OwnedObjects::default(),
            pods: Vec::new(),
            secret: SecretState::Present {
                fingerprint: PLACEHOLDER_FINGERPRINT.to_owned(),
            },
            secret_unkeyed_fingerprint: None,
            now,
            config: config.clone(),
            known_matches: BTreeMap::new(),
            cleanup_job: None,
            backup_jobs: Vec::new(),
            member_facts: Default::default(),
            // Created by the operator; offline there is nothing to create it in.
            operator_secret: OperatorSecretState::Missing,
            password_outcome: None,
            primary_lease: None,
            volumes: Vec::new(),
            tls: Default::default(),
        };
        let plan = database_operator_core::plan(&observed);
        yaml.push_str(&format!(
            "# Rendered offline for DatabaseCluster {shown} at {now}.\n\
             # ownerReferences carry no uid and the password fingerprint is a placeholder: these\n\
             # objects are for review; apply the DatabaseCluster and let the operator create them.\n"
        ));
        for planned in &plan.objects {
            let body = to_yaml(&planned.object)?;
            yaml.push_str("---\n");
            yaml.push_str(&body);
            if !body.ends_with('\n') {
                yaml.push('\n');
            }
        }
        for event in &plan.events {
            yaml.push_str(&format!(
                "# event {:?} {}: {}\n",
                event.type_, event.reason, event.message
            ));
        }
        yaml.push_str(&format!("# The status {shown} starts with:\n---\n"));
        cluster.status = Some(plan.status);
        cluster.metadata.managed_fields = None;
        yaml.push_str(&to_yaml(&cluster)?);
    }
    Ok(Rendered { yaml, warnings })
}

/// The outcome of `validate`.
#[derive(Debug, Default)]
pub struct Validation {
    /// One line per valid cluster.
    pub valid: Vec<String>,
    /// Warnings (`namespace/name: field: message`).
    pub warnings: Vec<String>,
    /// Errors (`namespace/name: field: message`).
    pub errors: Vec<String>,
}

/// Validates every DatabaseCluster in `input`, as an update of the one in `old` with the same
/// name when `old` is given. Only reading the input can fail; broken rules are in the result.
pub fn validate(
    input: &str,
    source_name: &str,
    old: Option<(&str, &str)>,
) -> Result<Validation, OfflineError> {
    let mut out = Validation::default();
    let clusters = match read_clusters(input, source_name) {
        Ok(c) => c,
        Err(OfflineError::Invalid { cluster, errors }) => {
            out.errors
                .extend(errors.errors().iter().map(|e| format!("{cluster}: {e}")));
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    let old_clusters = match old {
        Some((text, name)) => Some(read_clusters(text, name)?),
        None => None,
    };
    for cluster in &clusters {
        let shown = display_name(cluster);
        let result = match &old_clusters {
            Some(olds) => {
                let before = olds
                    .iter()
                    .find(|o| o.metadata.name == cluster.metadata.name)
                    .or_else(|| if olds.len() == 1 { olds.first() } else { None });
                match before {
                    Some(before) => validate_update(before, cluster),
                    None => {
                        out.errors.push(format!(
                            "{shown}: no DatabaseCluster of that name in the --old file"
                        ));
                        continue;
                    }
                }
            }
            None => validate_create(cluster),
        };
        match result {
            Ok(warnings) => {
                out.warnings
                    .extend(warnings.iter().map(|w| format!("{shown}: {w}")));
                out.valid.push(format!("{shown}: valid"));
            }
            Err(errors) => out
                .errors
                .extend(errors.errors().iter().map(|e| format!("{shown}: {e}"))),
        }
    }
    Ok(out)
}

/// The CRD as YAML.
pub fn crd() -> String {
    database_operator_api::crd::crd_yaml()
}
