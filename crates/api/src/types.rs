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

use crate::failover::{FailoverSpec, FailoverStatus, ReplicationSpec};
use crate::password::{PasswordRotationSpec, PasswordStatus};
use crate::rules;
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

    /// Whether the engine speaks the MySQL protocol (MySQL and MariaDB).
    pub const fn is_mysql_family(&self) -> bool {
        matches!(self, Engine::Mysql | Engine::Mariadb)
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
    /// Size of each member's volume, a Kubernetes quantity such as `20Gi`. It may grow (when the
    /// storage class allows volume expansion) but never shrink.
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

/// Scheduled backups: a CronJob dumps the database (from a ready replica when there is one) and
/// uploads it to an S3-compatible bucket, keeping the newest `retention` backups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, garde::Validate)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// When to back up, a five-field cron expression (`minute hour day-of-month month
    /// day-of-week`, e.g. `0 2 * * *`) or one of `@yearly`, `@annually`, `@monthly`, `@weekly`,
    /// `@daily`, `@hourly`. Evaluated in UTC.
    #[garde(
        length(min = 1, max = 128),
        pattern(
            r"^(@(annually|yearly|monthly|weekly|daily|hourly)|[^ ]+ [^ ]+ [^ ]+ [^ ]+ [^ ]+)$"
        ),
        custom(rules::cron_schedule)
    )]
    pub schedule: String,

    /// How many backups to keep in the bucket; older ones are pruned after each successful
    /// backup. At least 1.
    #[serde(default = "default_retention")]
    #[garde(range(min = 1))]
    pub retention: i32,

    /// Bucket to upload to. Must follow the S3 bucket naming rules (3-63 characters, lowercase
    /// letters, digits, dots and hyphens, starting and ending with a letter or digit).
    #[garde(
        length(min = 3, max = 63),
        pattern(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$"),
        custom(rules::s3_bucket)
    )]
    pub s3_bucket: String,

    /// S3 endpoint URL for S3-compatible stores (MinIO, Ceph, GCS interoperability), such as
    /// `https://minio.backup.svc:9000`. Absent: AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 2048), pattern(r"^https?://[^ /?#]+(/[^ ]*)?$"))]
    pub endpoint: Option<String>,

    /// Region of the bucket, such as `eu-west-1`. Absent: the store's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 64), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub region: Option<String>,

    /// Secret holding the access key pair for the bucket. Absent: the backup pod uses its own
    /// cloud identity (for example IRSA or workload identity on its ServiceAccount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub credentials_secret_ref: Option<BackupCredentialsRef>,

    /// What happens to the stored backups when the DatabaseCluster is deleted: `Retain` (the
    /// default) keeps them, `Delete` removes every backup of this cluster from the bucket.
    #[serde(default)]
    #[garde(skip)]
    pub deletion_policy: BackupDeletionPolicy,

    /// Restore drills: on this schedule a throwaway pod restores the newest backup into a
    /// scratch server of the cluster's version and checks that every table's row count and
    /// checksum match the backup's manifest (`status.lastVerifiedBackup`, condition
    /// `BackupVerified`). Absent: backups are never restored by the operator, and the condition
    /// says they are untested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub verify: Option<BackupVerifySpec>,
}

/// When restore drills run.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct BackupVerifySpec {
    /// When to run a drill, a cron expression as `spec.backup.schedule` (UTC), e.g. `0 5 * * 0`
    /// for Sundays at 05:00. A drill needs node disk for one copy of the database. Start one at
    /// once with `kubectl create job --from=cronjob/<name>-verify <job name>`.
    #[garde(
        length(min = 1, max = 128),
        pattern(
            r"^(@(annually|yearly|monthly|weekly|daily|hourly)|[^ ]+ [^ ]+ [^ ]+ [^ ]+ [^ ]+)$"
        ),
        custom(rules::cron_schedule)
    )]
    pub schedule: String,
}

fn default_retention() -> i32 {
    7
}

/// A Secret with S3 credentials, in the cluster's namespace.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct BackupCredentialsRef {
    /// Name of the Secret.
    #[garde(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// Key holding the access key id.
    #[serde(default = "default_access_key_id_key")]
    #[garde(length(min = 1, max = 253), pattern(r"^[-._a-zA-Z0-9]+$"))]
    pub access_key_id_key: String,
    /// Key holding the secret access key.
    #[serde(default = "default_secret_access_key_key")]
    #[garde(length(min = 1, max = 253), pattern(r"^[-._a-zA-Z0-9]+$"))]
    pub secret_access_key_key: String,
}

fn default_access_key_id_key() -> String {
    "AWS_ACCESS_KEY_ID".to_owned()
}

fn default_secret_access_key_key() -> String {
    "AWS_SECRET_ACCESS_KEY".to_owned()
}

/// How a new cluster gets its first data.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Restore a backup taken by this operator (of this or another cluster of the same engine)
    /// into the first member before it accepts connections; the replicas then copy it.
    #[garde(dive)]
    pub from_backup: FromBackupSpec,
}

/// A backup to start from: the source cluster's backups in a bucket, as its `spec.backup`
/// wrote them (under `<namespace>/<cluster>/`).
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct FromBackupSpec {
    /// Name of the cluster whose backup is restored (it need not exist any more).
    #[garde(length(min = 1, max = 52), custom(rules::cluster_name))]
    pub cluster: String,

    /// Namespace of that cluster. Absent: this cluster's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,

    /// Which backup: `latest` (the newest complete one, the default) or a backup id such as
    /// `20260301T020000Z` (as `kubectl dbc status` and the bucket's `<id>.manifest.json` name
    /// it).
    #[serde(default = "default_backup_choice")]
    #[garde(pattern(r"^(latest|[0-9]{8}T[0-9]{6}Z)$"))]
    pub backup: String,

    /// Bucket holding the backups (the source's `spec.backup.s3Bucket`).
    #[garde(
        length(min = 3, max = 63),
        pattern(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$"),
        custom(rules::s3_bucket)
    )]
    pub s3_bucket: String,

    /// S3 endpoint URL for S3-compatible stores. Absent: AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 2048), pattern(r"^https?://[^ /?#]+(/[^ ]*)?$"))]
    pub endpoint: Option<String>,

    /// Region of the bucket. Absent: the store's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(min = 1, max = 64), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub region: Option<String>,

    /// Secret (in this cluster's namespace) with the access key pair for the bucket. Absent:
    /// the pod's own cloud identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub credentials_secret_ref: Option<BackupCredentialsRef>,
}

fn default_backup_choice() -> String {
    "latest".to_owned()
}

/// A completed backup, as its Job reported it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// The backup Job.
    pub job: String,
    /// When its pod started, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Time>,
    /// When it completed.
    pub completed: Time,
    /// The object key of its dump in the bucket, as the Job reported it (its container's
    /// termination message); absent when the report was not seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The size of the stored (compressed) dump in bytes, as the Job reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// Why retention could not delete older backups after this one, as the Job reported it
    /// (they are kept; the `BackupHealthy` condition is False with reason `RetentionNotMet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_error: Option<String>,
}

/// The backup a cluster started from (`spec.bootstrap.fromBackup`), as its first primary
/// restored it: written once, when the operator first reads the restore's report, and kept.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoredFrom {
    /// The source cluster, `<namespace>/<name>`.
    pub cluster: String,
    /// The backup's id (what `latest` resolved to).
    pub backup: String,
    /// The object key of its dump.
    pub key: String,
    /// When the operator read the report (the restore finished before).
    pub recorded: Time,
}

/// The newest finished restore drill: which Job, when, and whether the backup it restored
/// matched its manifest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastVerifiedBackup {
    /// The drill's Job (its pod's log names the backup and every table compared).
    pub job: String,
    /// When the drill finished.
    pub finished: Time,
    /// True when the backup restored and every table matched; false when the drill failed.
    pub succeeded: bool,
    /// When the newest successful drill finished (kept when a later one fails; absent when
    /// none has succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<Time>,
}

/// What to do with stored backups when the cluster is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum BackupDeletionPolicy {
    /// Keep every stored backup (the default): deleting a cluster never deletes its backups.
    #[default]
    Retain,
    /// Remove this cluster's backups from the bucket when the cluster is deleted.
    Delete,
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

    /// The members whose server answered the operator's last probe, as each server reports
    /// itself (role, read-only, version, replication delay in coarse steps), by ordinal. A
    /// member whose server does not answer is not listed. Written only when one of these
    /// changes, never for a delay that moves within its step.
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
