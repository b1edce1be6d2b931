//! The flags that shape what is rendered (shared by the operator's `run` and `render` and the
//! kubectl plugin's `plan`, so that all three render the same objects), and durations as the
//! command lines write them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use database_operator_api::scheduling::SchedulingPolicy;
use database_operator_core::{DEFAULT_OPERATOR_NAMESPACE, OperatorConfig};

/// The flags that shape what the operator renders (images), shared by `run`, `render` and the
/// kubectl plugin's `plan`, so that all three render the same objects.
#[derive(Debug, Clone, Args)]
pub struct RenderFlags {
    /// Registry (and path) database images are pulled from, for air-gapped clusters.
    #[arg(long, default_value = "docker.io/library", value_name = "REGISTRY")]
    pub image_registry: String,

    /// The operator's own image: the backup Jobs copy the `database-operator` binary from it
    /// (and the cleanup Job of a deleted cluster runs in it). Give the image this operator runs.
    #[arg(long, env = "OPERATOR_IMAGE", value_name = "IMAGE", default_value_t = OperatorConfig::default().operator_image)]
    pub operator_image: String,

    /// A versions file that extends or restricts the built-in catalog of supported versions
    /// (validation, the webhook, planning); see docs/operations.md.
    #[arg(long, value_name = "PATH")]
    pub versions_file: Option<PathBuf>,

    /// The only `spec.scheduling.priorityClassName` values clusters may ask for, comma
    /// separated (`*`: any; an empty value: none). Unset: any but the reserved `system-*`.
    #[arg(long, env = "ALLOWED_PRIORITY_CLASSES", value_name = "NAMES")]
    pub allowed_priority_classes: Option<String>,

    /// The only toleration keys `spec.scheduling.tolerations` may name, comma separated (`*`:
    /// any; an empty value: none). Unset: any but the control plane's taints and the empty key
    /// (every taint).
    #[arg(long, env = "ALLOWED_TOLERATION_KEYS", value_name = "KEYS")]
    pub allowed_toleration_keys: Option<String>,

    /// The namespace the operator runs in: every cluster's NetworkPolicy admits the database
    /// port from it.
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS", default_value = DEFAULT_OPERATOR_NAMESPACE)]
    pub operator_namespace: String,
}

impl Default for RenderFlags {
    /// The flags' defaults (those of [`OperatorConfig::default`]).
    fn default() -> Self {
        let config = OperatorConfig::default();
        Self {
            image_registry: config.image_registry,
            operator_image: config.operator_image,
            versions_file: None,
            allowed_priority_classes: None,
            allowed_toleration_keys: None,
            operator_namespace: config.operator_namespace,
        }
    }
}

impl RenderFlags {
    /// Reads `--versions-file` (when given) and makes it this process's catalog of versions
    /// (`database_operator_api::versions::install`). Call once, before anything validates.
    pub fn install_versions(&self) -> anyhow::Result<()> {
        let Some(path) = &self.versions_file else {
            return Ok(());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading --versions-file {}: {e}", path.display()))?;
        let catalog = database_operator_api::versions::Catalog::from_yaml(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), versions = catalog.entries().len(), "versions catalog from file");
        database_operator_api::versions::install(catalog)
            .map_err(|_| anyhow::anyhow!("a versions catalog was already in use"))
    }

    /// The rendering settings as the core takes them (every other setting at its default).
    pub fn operator_config(&self) -> OperatorConfig {
        OperatorConfig {
            image_registry: self.image_registry.trim_end_matches('/').to_owned(),
            operator_image: self.operator_image.clone(),
            images: database_operator_api::versions::catalog()
                .entries()
                .iter()
                .filter_map(|e| Some((format!("{}/{}", e.engine, e.version), e.image.clone()?)))
                .collect(),
            scheduling: SchedulingPolicy::allow_list(
                self.allowed_priority_classes.as_deref().map(names),
                self.allowed_toleration_keys.as_deref().map(names),
            ),
            operator_namespace: self.operator_namespace.clone(),
            ..OperatorConfig::default()
        }
    }
}

/// The entries of a comma-separated list, trimmed, empty ones dropped.
fn names(list: &str) -> BTreeSet<String> {
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses `30s`, `5m`, `1h`, `500ms` or plain seconds, zero included.
fn parse_any_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s, 5m or 1h"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(format!(
            "{text:?}: unknown unit {unit:?}; use ms, s, m or h"
        )),
    }
}

/// Parses `30s`, `5m`, `1h`, `500ms` or plain seconds; zero is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = parse_any_duration(text)?;
    if d.is_zero() {
        return Err(format!("{:?}: must be more than zero", text.trim()));
    }
    Ok(d)
}

/// [`parse_duration`], where zero (`0`, `0s`, `0ms`, ...) means "off".
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    parse_any_duration(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduling_flags_make_the_policy() {
        let mut flags = RenderFlags::default();
        assert_eq!(
            flags.operator_config().scheduling,
            SchedulingPolicy::default()
        );
        flags.allowed_priority_classes = Some(" batch , databases,".to_owned());
        flags.allowed_toleration_keys = Some(String::new());
        let policy = flags.operator_config().scheduling;
        assert_eq!(
            policy.priority_classes,
            Some(["batch".to_owned(), "databases".to_owned()].into())
        );
        assert_eq!(policy.toleration_keys, Some(BTreeSet::new()));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0s").unwrap_err().contains("more than zero"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("soon").is_err());
        for zero in ["0", "0s", "0ms", "00m"] {
            assert_eq!(parse_duration_or_zero(zero), Ok(Duration::ZERO), "{zero}");
        }
        assert!(
            parse_duration_or_zero("0d")
                .unwrap_err()
                .contains("unknown unit")
        );
    }
}
