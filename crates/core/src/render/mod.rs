//! Rendering: the complete desired objects of a cluster, from its spec and a few facts.
//!
//! Every function here is pure and decides only what an object looks like; whether it needs
//! writing is [`crate::diff`]'s business and which objects exist at all is [`mod@crate::plan`]'s.
//! One file per kind, like the objects a reader looks for:
//!
//! | object | name | file |
//! | --- | --- | --- |
//! | ConfigMap (engine config, scripts) | `<name>-config` | [`config_map`] |
//! | Service, read-write (primary) | `<name>` | [`service`] |
//! | Service, read-only (replicas) | `<name>-replicas` | [`service`] |
//! | Service, headless (governing) | `<name>-headless` | [`service`] |
//! | StatefulSet | `<name>` | [`statefulset`] |
//! | PodDisruptionBudget | `<name>` | [`pdb`] |
//! | NetworkPolicy | `<name>-access` | [`network_policy`] |
//! | CronJob (backups) | `<name>-backup` | [`cron_job`] |
//! | Job (backup cleanup of a deleted cluster) | `<name>-cleanup` | [`cleanup_job`] |
//! | Secret (operator credentials, no data) | `<name>-operator` | [`secret`] |

pub mod cleanup_job;
pub mod config_map;
pub mod cron_job;
pub mod labels;
pub mod member_access;
pub mod network_policy;
pub mod pdb;
pub mod quantity;
pub mod scripts;
pub mod secret;
pub mod service;
pub mod statefulset;
pub mod tls;

use database_operator_api::failover::ReplicationMode;
use database_operator_api::{DatabaseClusterSpec, Engine};
use database_operator_engine::EngineDef;
use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SeccompProfile};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::OperatorConfig;

/// The facts about a cluster that every renderer needs, borrowed from the observed cluster.
#[derive(Clone, Copy, Debug)]
pub struct RenderContext<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// `metadata.uid` (empty only in hand-built test input; the API server always sets it).
    pub uid: &'a str,
    /// `spec.engine`.
    pub engine: Engine,
    /// `spec.version`.
    pub version: &'a str,
    /// The whole spec.
    pub spec: &'a DatabaseClusterSpec,
    /// Installation settings.
    pub config: &'a OperatorConfig,
    /// A Secret of the cluster's TLS belongs to someone else ([`crate::tls::TlsConflict`]):
    /// the members are rendered without TLS (they would mount another's Secret, or wait for
    /// one that is never written), and the cluster is reported degraded.
    pub tls_blocked: bool,
}

impl<'a> RenderContext<'a> {
    /// Name of the StatefulSet, the read-write Service and the PodDisruptionBudget.
    pub fn primary_name(&self) -> String {
        self.name.to_owned()
    }

    /// Name of the read-only Service.
    pub fn replicas_service_name(&self) -> String {
        [
            self.name,
            database_operator_api::rules::REPLICAS_SERVICE_SUFFIX,
        ]
        .concat()
    }

    /// Name of the headless governing Service.
    pub fn headless_service_name(&self) -> String {
        [
            self.name,
            database_operator_api::rules::HEADLESS_SERVICE_SUFFIX,
        ]
        .concat()
    }

    /// The render context of the observed cluster.
    pub fn of(observed: &'a crate::Observed) -> RenderContext<'a> {
        let meta = &observed.cluster.metadata;
        RenderContext {
            name: meta.name.as_deref().unwrap_or_default(),
            namespace: meta.namespace.as_deref().unwrap_or("default"),
            uid: meta.uid.as_deref().unwrap_or_default(),
            engine: observed.cluster.spec.engine,
            version: &observed.cluster.spec.version,
            spec: &observed.cluster.spec,
            config: &observed.config,
            tls_blocked: observed.tls.foreign(),
        }
    }

    /// Name of the ConfigMap.
    pub fn config_map_name(&self) -> String {
        [self.name, "-config"].concat()
    }

    /// Name of the backup CronJob.
    pub fn backup_name(&self) -> String {
        [self.name, "-backup"].concat()
    }

    /// Name of the pod with `ordinal`.
    pub fn pod_name(&self, ordinal: i32) -> String {
        format!("{}-{ordinal}", self.name)
    }

    /// DNS name of the read-write Service, the host replicas seed from and replicate from.
    ///
    /// The Service (not `<name>-0.<name>-headless`) because it follows the pod labelled primary
    /// and lists it only while it is ready: after a failover it points at the new primary, and a
    /// replica never seeds from a primary that is still starting.
    pub fn primary_host(&self) -> String {
        [self.name, ".", self.namespace, ".svc"].concat()
    }

    /// Whether commits wait for a replica: `spec.replication.mode: sync` with at least two
    /// members (a lone member has nobody to wait for, so it runs asynchronously rather than
    /// refusing every write).
    pub fn sync_replication(&self) -> bool {
        self.spec
            .replication
            .as_ref()
            .is_some_and(|r| r.mode == ReplicationMode::Sync)
            && self.spec.replicas >= 2
    }

    /// DNS name of the read-only Service.
    pub fn replicas_host(&self) -> String {
        [self.name, "-replicas.", self.namespace, ".svc"].concat()
    }

    /// DNS suffix of the members: `<pod>.<name>-headless.<namespace>.svc`.
    pub fn headless_domain(&self) -> String {
        [self.name, "-headless.", self.namespace, ".svc"].concat()
    }

    /// Metadata of an owned object: name, namespace, labels, controller owner reference.
    pub fn metadata(&self, name: String, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.to_owned()),
            labels: Some(labels::labels(self, component)),
            owner_references: Some(vec![labels::owner_reference(self)]),
            ..ObjectMeta::default()
        }
    }

    /// What differs between engines (ports, paths, accounts), from the engine crate.
    pub fn engine_def(&self) -> &'static dyn EngineDef {
        database_operator_engine::of(self.engine)
    }

    /// The database image: the catalog's image for this version when it names one
    /// ([`crate::OperatorConfig::images`]), else `<registry>/<repository>:<version>`.
    pub fn image(&self) -> String {
        let key = [self.engine.as_str(), "/", self.version].concat();
        if let Some(image) = self.config.images.get(&key) {
            return image.clone();
        }
        format!(
            "{}/{}:{}",
            self.config.image_registry.trim_end_matches('/'),
            self.engine_def().image_repository(),
            self.version
        )
    }

    /// The operator's own image, whose binary the backup pods run.
    pub fn operator_image(&self) -> String {
        self.config.operator_image.clone()
    }
}

/// A volume of Secret `secret` (required: the pod waits for it), its files in `mode`, only the
/// keys `items` when given.
pub(crate) fn secret_volume(
    volume: &str,
    secret: String,
    mode: i32,
    items: Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>,
) -> k8s_openapi::api::core::v1::Volume {
    k8s_openapi::api::core::v1::Volume {
        name: volume.to_owned(),
        secret: Some(k8s_openapi::api::core::v1::SecretVolumeSource {
            secret_name: Some(secret),
            items,
            default_mode: Some(mode),
            optional: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the backup pods (the backup CronJob's and the cleanup Job's) share, all but their
/// containers and volumes: never restarted, placed where the database pods may go
/// (`spec.scheduling`, without their default anti-affinity), no service account token, and a
/// non-root `user` (and `group`) with the runtime's default seccomp profile.
pub(crate) fn backup_pod(cluster: &RenderContext<'_>, user: i64, group: Option<i64>) -> PodSpec {
    let scheduling = cluster.spec.scheduling.clone().unwrap_or_default();
    PodSpec {
        restart_policy: Some("Never".to_owned()),
        node_selector: scheduling.node_selector,
        tolerations: scheduling.tolerations,
        affinity: scheduling.affinity,
        topology_spread_constraints: scheduling.topology_spread_constraints,
        priority_class_name: scheduling.priority_class_name,
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(user),
            run_as_group: group,
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        ..PodSpec::default()
    }
}

/// Where the ConfigMap (configuration and scripts) is mounted in every container.
pub const CONFIG_MOUNT_PATH: &str = "/etc/database-operator";
/// Where the `database-operator` binary is in the operator image.
pub const OPERATOR_BINARY: &str = "/usr/local/bin/database-operator";
/// Where the backup pod's init container copies the `database-operator` binary (a shared
/// `emptyDir`), for the backup container in the engine's image to run it.
pub const OPERATOR_BIN_DIR: &str = "/operator";

/// `spec.backup.archive`, when the cluster archives its write-ahead log (PostgreSQL only: the
/// validation refuses it for the other engines).
pub fn archive<'a>(cluster: &RenderContext<'a>) -> Option<&'a database_operator_api::ArchiveSpec> {
    if !cluster.spec.engine.archives_wal() {
        return None;
    }
    cluster.spec.backup.as_ref()?.archive.as_ref()
}
/// Where the pod's own labels are visible (downward API), for the start-up script to read its
/// role.
pub const PODINFO_MOUNT_PATH: &str = "/etc/podinfo";

#[cfg(test)]
mod tests {
    use super::*;

    fn sync_replication(spec: &DatabaseClusterSpec) -> bool {
        RenderContext {
            tls_blocked: false,
            name: "db",
            namespace: "ns",
            uid: "",
            engine: spec.engine,
            version: &spec.version,
            spec,
            config: &OperatorConfig::default(),
        }
        .sync_replication()
    }

    #[test]
    fn sync_needs_the_mode_and_two_members() {
        let mut spec: DatabaseClusterSpec = serde_json::from_value(serde_json::json!({
            "engine": "mariadb", "version": "10.11", "replicas": 3,
            "storage": {"size": "1Gi"},
            "passwordSecretRef": {"name": "s", "key": "k"},
        }))
        .unwrap();
        assert!(!sync_replication(&spec));
        spec.replication = Some(database_operator_api::failover::ReplicationSpec {
            mode: ReplicationMode::Sync,
        });
        assert!(sync_replication(&spec));
        spec.replicas = 1;
        assert!(!sync_replication(&spec));
    }
}
