//! The `DatabaseCluster` resource: spec, status and their parts.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Affinity, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::{BackupSpec, BootstrapSpec, LastBackup, LastVerifiedBackup, RestoredFrom};
use crate::failover::{FailoverSpec, FailoverStatus, ReplicationSpec};
use crate::network::NetworkPolicySpec;
use crate::password::{PasswordRotationSpec, PasswordStatus};
use crate::rules;
use crate::tls::TlsSpec;
use crate::upgrade::{UpgradeSpec, UpgradeStatus};

/// Desired state of a database cluster: one primary and `replicas - 1` streaming replicas of
/// one engine, with storage, credentials and optional scheduled backups.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, garde::Validate,
)]
#[kube(
    group = "database.example.com",
    version = "v1alpha1",
    kind = "DatabaseCluster",
    plural = "databaseclusters",
    singular = "databasecluster",
    shortname = "dbc",
    category = "all",
    namespaced,
    status = "DatabaseClusterStatus",
    printcolumn = r#"{"name":"Engine","type":"string","jsonPath":".spec.engine"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new(rules::CEL_NAME_LENGTH.0).message(rules::CEL_NAME_LENGTH.1),
    validation = kube::core::Rule::new(rules::CEL_NAME_FORMAT.0).message(rules::CEL_NAME_FORMAT.1),
    validation = kube::core::Rule::new(rules::CEL_ENGINE_IMMUTABLE.0).message(rules::CEL_ENGINE_IMMUTABLE.1).field_path(".spec.engine"),
    validation = kube::core::Rule::new(rules::CEL_STORAGE_CLASS_IMMUTABLE.0).message(rules::CEL_STORAGE_CLASS_IMMUTABLE.1).field_path(".spec.storage.storageClassName"),
    validation = kube::core::Rule::new(rules::CEL_STORAGE_NO_SHRINK.0).message(rules::CEL_STORAGE_NO_SHRINK.1).field_path(".spec.storage.size"),
    validation = kube::core::Rule::new(rules::CEL_BOOTSTRAP_IMMUTABLE.0).message(rules::CEL_BOOTSTRAP_IMMUTABLE.1).field_path(".spec.bootstrap"),
)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseClusterSpec {
    /// Database engine: `mysql`, `mariadb` or `postgresql`. Immutable after creation: the data
    /// on disk belongs to one engine.
    #[serde(default)]
    #[garde(skip)]
    pub engine: Engine,

    /// Engine version to run, `MAJOR.MINOR[.PATCH]` as the engine numbers it: `9.7.4` for MySQL,
    /// `10.11.19` for MariaDB, `16.4` for PostgreSQL. A new cluster must use a supported version
    /// (MySQL 8.4.0, 8.4.7, 9.7.4; MariaDB 10.11.18, 10.11.19, 11.8.3; PostgreSQL 15.18, 15.20, 16.2,
    /// 16.4, 16.14, 17.10, 18.4). A cluster already running a retired version (MySQL 8.0.36,
    /// 8.0.37; PostgreSQL 15.6, 16.3) keeps running and may only move to a supported one.
    /// (These are the built-in catalog; an installation may extend or restrict it.) A change
    /// rolls member by member: replicas first from the highest ordinal, each checked healthy on
    /// the new version (Ready, the server reporting it, replication caught up), then a planned
    /// switchover to an upgraded replica, then the old primary; a member that does not become
    /// healthy within `upgrade.stepTimeoutSeconds` pauses the roll with the primary untouched
    /// (see `status.upgrade`); setting `version` back then rolls the changed members back. A
    /// member whose pod is being recreated counts as down: nothing else moves meanwhile.
    /// Refused: downgrades, PostgreSQL major-version changes, MySQL
    /// upgrades that skip an LTS series, MariaDB short-term releases past the next long-term one.
    #[garde(length(min = 1, max = 32), pattern(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"))]
    pub version: String,

    /// Number of database members: one primary plus `replicas - 1` replicas, 1 to 9.
    /// Scaling down keeps the PersistentVolumeClaims of removed members.
    #[serde(default = "default_replicas")]
    #[garde(range(min = 1, max = 9))]
    pub replicas: i32,

    /// Persistent storage for each member.
    #[garde(dive)]
    pub storage: StorageSpec,

    /// CPU and memory for each database container. When absent the operator uses documented
    /// defaults (requests 500m CPU / 1Gi memory, memory limit 1Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub resources: Option<ResourceRequirements>,

    /// Scheduled logical backups to an S3-compatible bucket. Absent: no backups are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub backup: Option<BackupSpec>,

    /// Where the database pods may run: node selector, tolerations, affinity, topology spread
    /// constraints and priority class, for the database pods and the backup job's pods.
    /// Absent: any node, with the default anti-affinity that prefers one member per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub scheduling: Option<SchedulingSpec>,

    /// The Secret key holding the database superuser password (`root` for MySQL and MariaDB,
    /// at `localhost` and `%`; `postgres` for PostgreSQL). A new cluster is initialized with
    /// it (the init container reads it through `secretKeyRef`; the operator never copies it).
    /// Changing the value in the Secret does not restart anything: the operator applies the new
    /// value inside the running database on the primary (replication carries it to the
    /// replicas) and records its fingerprint in `status.password`; the `PasswordApplied`
    /// condition says whether the database runs the Secret's value. MySQL keeps accepting the
    /// old password for `spec.passwordRotation.graceSeconds`; MariaDB and PostgreSQL switch at
    /// once. Sessions opened before the change stay open. Replication and backups use the
    /// operator's own accounts (Secret `<name>-operator`), so a change never interrupts them.
    /// A missing Secret or key leaves the database's password as it is (`PasswordApplied`
    /// False, naming the Secret and the key).
    #[garde(dive)]
    pub password_secret_ref: SecretKeySelector,

    /// How a change of the password in `passwordSecretRef` is applied. Absent: MySQL keeps the
    /// old password working for one hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub password_rotation: Option<PasswordRotationSpec>,

    /// How a `version` change rolls through the members. Absent: ten minutes per member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub upgrade: Option<UpgradeSpec>,

    /// Automatic failover when the primary is lost. Absent: enabled, with a 10 second delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub failover: Option<FailoverSpec>,

    /// How replicas acknowledge commits: `mode: async` (default) or `sync`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub replication: Option<ReplicationSpec>,

    /// How a new cluster gets its first data. Absent: empty. Set only at creation (it may be
    /// removed later, not added or changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub bootstrap: Option<BootstrapSpec>,

    /// Who may connect to the database port (a NetworkPolicy `<name>-access`). Absent: the cluster's
    /// namespace and the operator's namespace only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub network_policy: Option<NetworkPolicySpec>,

    /// TLS on the database port (a certificate authority per cluster, server certificates,
    /// the authority's certificate for clients in the Secret `<name>-ca`). Absent: on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub tls: Option<TlsSpec>,
}

fn default_replicas() -> i32 {
    1
}

/// The database engine of a cluster.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// MySQL 8.4 and 9.x with GTID-based asynchronous replication.
    #[default]
    Mysql,
    /// PostgreSQL with streaming replication and hot standbys.
    Postgresql,
    /// MariaDB with GTID-based asynchronous replication (`MASTER_USE_GTID=slave_pos`).
    Mariadb,
}

impl Engine {
    /// The name as written in a manifest: `mysql`, `postgresql` or `mariadb`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Engine::Mysql => "mysql",
            Engine::Postgresql => "postgresql",
            Engine::Mariadb => "mariadb",
        }
    }

    /// The product's name as its vendor writes it, for messages: `MySQL`, `PostgreSQL` or
    /// `MariaDB`.
    pub const fn product_name(&self) -> &'static str {
        match self {
            Engine::Mysql => "MySQL",
            Engine::Postgresql => "PostgreSQL",
            Engine::Mariadb => "MariaDB",
        }
    }

    /// Whether a new cluster of this engine may start from a backup
    /// (`spec.bootstrap.fromBackup`): PostgreSQL and MariaDB; not MySQL yet.
    pub const fn bootstraps_from_backup(&self) -> bool {
        match self {
            Engine::Postgresql | Engine::Mariadb => true,
            Engine::Mysql => false,
        }
    }

    /// Whether `spec.backup.archive` (continuous archiving of the write-ahead log) is
    /// available for the engine: PostgreSQL only so far.
    pub const fn archives_wal(&self) -> bool {
        matches!(self, Engine::Postgresql)
    }

    /// Whether the engine speaks the MySQL protocol (MySQL and MariaDB).
    pub const fn is_mysql_family(&self) -> bool {
        // Exhaustive, so that a new engine has to say.
        match self {
            Engine::Mysql | Engine::Mariadb => true,
            Engine::Postgresql => false,
        }
    }

    /// Every engine, in a stable order.
    pub const ALL: [Engine; 3] = [Engine::Mysql, Engine::Postgresql, Engine::Mariadb];
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Persistent storage of each member, one PersistentVolumeClaim per pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, garde::Validate)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Size of each member's volume, a Kubernetes quantity such as `20Gi`. It may grow but never
    /// shrink: the operator grows each member's claim with the servers running when its storage
    /// class allows volume expansion (condition `StorageResized`).
    #[schemars(schema_with = "crate::rules::quantity_schema")]
    #[garde(custom(rules::storage_size))]
    pub size: Quantity,

    /// StorageClass of the volumes. Absent: the cluster's default class. Immutable once set,
    /// because existing volumes cannot move to another class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub storage_class_name: Option<String>,
}

/// Where the cluster's pods may be scheduled. Each field is passed as it is to the pod template
/// of the StatefulSet (database members) and of the backup CronJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema, garde::Validate)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// Node labels a node must have to run the pods (`pod.spec.nodeSelector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Taints the pods tolerate (`pod.spec.tolerations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub tolerations: Option<Vec<Toleration>>,

    /// Node affinity, pod affinity and pod anti-affinity (`pod.spec.affinity`). When set, it
    /// replaces the operator's default (a preferred pod anti-affinity that spreads members over
    /// nodes by `kubernetes.io/hostname`) entirely: include an anti-affinity term yourself if
    /// you still want members spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub affinity: Option<Affinity>,

    /// How the pods spread across topology domains (`pod.spec.topologySpreadConstraints`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// PriorityClass of the pods (`pod.spec.priorityClassName`), a DNS subdomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub priority_class_name: Option<String>,
}

/// A key in a Secret in the cluster's namespace.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Name of the Secret, in the same namespace as the cluster.
    #[garde(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// Key within the Secret's data.
    #[garde(length(min = 1, max = 253), pattern(r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// Observed state of a database cluster, written only by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseClusterStatus {
    /// Latest observations of the cluster's state: `Ready`, `Degraded`, `Upgrading`, ... One
    /// entry per type; `lastTransitionTime` moves only when that condition's status changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Number of members whose pod is Ready.
    #[serde(default)]
    pub ready_replicas: i32,

    /// Name of the pod currently serving writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_pod: Option<String>,

    /// Summary of the cluster's lifecycle: Pending, Initializing, Running, Degraded, Upgrading
    /// or Deleting. Conditions carry the details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// The version every ready member runs; during an upgrade, the version being replaced (it
    /// changes only once every member is Ready on the new version; a member being recreated
    /// holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,

    /// When the next scheduled backup starts (UTC), when backups are configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_backup_time: Option<Time>,

    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Failovers and switchovers: the one in progress, the last one, the switchover request
    /// handled, the quarantined members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverStatus>,

    /// The superuser password the database runs with, as a fingerprint (never the value): when
    /// it was applied, a value waiting to be applied, and (MySQL) when the old one is or was
    /// discarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<PasswordStatus>,

    /// The version change rolling through the members, while one is: from, to, the current
    /// step and member, the members done, why it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,

    /// The newest backup Job that completed successfully (scheduled or on demand), as the
    /// operator last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<LastBackup>,

    /// How many complete backups the cluster's prefix held after the last backup's retention,
    /// as that Job counted them (the operator holds no S3 credentials and does not list the
    /// bucket itself; `database-operator backup list` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_count: Option<i32>,

    /// The backup this cluster was started from (`spec.bootstrap.fromBackup`), once its first
    /// primary restored it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<RestoredFrom>,

    /// The newest finished restore drill (`spec.backup.verify`), as the operator last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_backup: Option<LastVerifiedBackup>,

    /// The last value of the annotation `database.example.com/backup-now` the operator started
    /// a backup for. A new value starts one backup; the same value never starts another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_backup_now: Option<String>,

    /// The members whose server answers the operator's probes, as each server reports itself
    /// (role, read-only, version, replication delay in coarse steps), by ordinal. A member
    /// whose server has not answered for 5 s is not listed (a single missed probe changes
    /// nothing). Written only when one of these changes, never for a delay that moves within
    /// its step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<crate::MemberStatus>,
}

/// Lifecycle phase of a cluster, as shown in `kubectl get databaseclusters`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Accepted, nothing created yet. The operator writes the objects and the status in one
    /// pass and reports `Initializing` from the first, so it does not write this phase itself;
    /// it is kept for clients that read or set it.
    Pending,
    /// Objects exist but no member is ready yet.
    Initializing,
    /// Every member is ready and a primary is known.
    Running,
    /// Some members are not ready, no primary is known, or a dependency (such as the password
    /// Secret) is missing. The `Degraded` condition says which.
    Degraded,
    /// A version change is rolling through the members.
    Upgrading,
    /// The cluster is being deleted; cleanup runs before the finalizer is removed.
    Deleting,
}

impl Phase {
    /// The name as written in status: `Running`, `Degraded`, ...
    pub const fn as_str(&self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Initializing => "Initializing",
            Phase::Running => "Running",
            Phase::Degraded => "Degraded",
            Phase::Upgrading => "Upgrading",
            Phase::Deleting => "Deleting",
        }
    }

    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 6] = [
        Phase::Pending,
        Phase::Initializing,
        Phase::Running,
        Phase::Degraded,
        Phase::Upgrading,
        Phase::Deleting,
    ];
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_and_what_a_new_cluster_may_start_from() {
        let table: Vec<(&str, &str, bool)> = Engine::ALL
            .iter()
            .map(|e| (e.as_str(), e.product_name(), e.bootstraps_from_backup()))
            .collect();
        assert_eq!(
            table,
            [
                ("mysql", "MySQL", false),
                ("postgresql", "PostgreSQL", true),
                ("mariadb", "MariaDB", true),
            ]
        );
    }
}
