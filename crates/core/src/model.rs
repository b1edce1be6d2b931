//! The contract between the core and the runtime: what goes in, what comes out.

use std::collections::BTreeMap;
use std::time::Duration;

use database_operator_api::{DatabaseCluster, DatabaseClusterStatus};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// Settings of the operator installation that shape rendered objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorConfig {
    /// Registry (and path prefix) that database images are pulled from, without a trailing
    /// slash: images are `<registry>/mysql:<version>`, `<registry>/mariadb:<version>` and
    /// `<registry>/postgres:<version>`.
    /// Default `docker.io/library`; override for air-gapped clusters.
    pub image_registry: String,
    /// Image of the backup job for MySQL clusters (needs `mysqldump` and an S3 client).
    pub mysql_backup_image: String,
    /// Image of the backup job for MariaDB clusters (needs `mariadb-dump` and an S3 client).
    pub mariadb_backup_image: String,
    /// Image of the backup job for PostgreSQL clusters (needs `pg_dump` and an S3 client).
    pub postgresql_backup_image: String,
    /// How long to wait before looking at a cluster again when nothing else is due.
    pub resync: Duration,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            image_registry: "docker.io/library".to_owned(),
            mysql_backup_image: "ghcr.io/example/database-backup-mysql:0.1.0".to_owned(),
            mariadb_backup_image: "ghcr.io/example/database-backup-mariadb:0.1.0".to_owned(),
            postgresql_backup_image: "ghcr.io/example/database-backup-postgresql:0.1.0".to_owned(),
            resync: Duration::from_secs(30),
        }
    }
}

impl OperatorConfig {
    /// The image of the backup (and backup cleanup) jobs of `engine`.
    pub fn backup_image(&self, engine: database_operator_api::Engine) -> &str {
        match engine {
            database_operator_api::Engine::Mysql => &self.mysql_backup_image,
            database_operator_api::Engine::Mariadb => &self.mariadb_backup_image,
            database_operator_api::Engine::Postgresql => &self.postgresql_backup_image,
        }
    }
}

/// What the runtime knows about the password Secret a cluster references.
///
/// The password itself never enters the core: only a fingerprint that changes when the value
/// changes, so a new password can roll the pods without being copied anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretState {
    /// The Secret does not exist.
    Missing,
    /// The Secret exists but has no entry for the referenced key.
    KeyMissing,
    /// The key exists; `fingerprint` is a salted hash of its value (never the value).
    Present {
        /// Opaque, stable while the value is unchanged.
        fingerprint: String,
    },
}

/// A database member's own view of itself, probed by the runtime (when it can reach it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberFacts {
    /// Whether the database answered the probe.
    pub reachable: bool,
    /// The role the database reports (`primary` or `replica`), when reachable.
    pub role: Option<MemberRole>,
    /// Replication position as the engine reports it (GTID set or LSN), for choosing the most
    /// advanced replica on failover.
    pub position: Option<String>,
}

/// Role of a member in replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemberRole {
    /// Accepts writes.
    Primary,
    /// Streams from the primary and serves reads.
    Replica,
}

impl MemberRole {
    /// The value of the `database.example.com/role` pod label.
    pub const fn as_str(&self) -> &'static str {
        match self {
            MemberRole::Primary => "primary",
            MemberRole::Replica => "replica",
        }
    }
}

/// The objects a cluster owns, as last observed (absent ones are simply not there).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnedObjects {
    /// StatefulSets owned by the cluster (normally one, `<name>`).
    pub stateful_sets: Vec<StatefulSet>,
    /// Services owned by the cluster.
    pub services: Vec<Service>,
    /// ConfigMaps owned by the cluster.
    pub config_maps: Vec<ConfigMap>,
    /// CronJobs owned by the cluster.
    pub cron_jobs: Vec<CronJob>,
    /// PodDisruptionBudgets owned by the cluster.
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
}

impl OwnedObjects {
    /// The observed object with `key` as JSON, when there is one.
    pub fn get(&self, key: &ObjectKey) -> Option<serde_json::Value> {
        fn find<K: serde::Serialize + k8s_openapi::Metadata<Ty = ObjectMeta>>(
            items: &[K],
            name: &str,
        ) -> Option<serde_json::Value> {
            items
                .iter()
                .find(|o| o.metadata().name.as_deref() == Some(name))
                .and_then(|o| serde_json::to_value(o).ok())
        }
        match key.kind {
            OwnedKind::StatefulSet => find(&self.stateful_sets, &key.name),
            OwnedKind::Service => find(&self.services, &key.name),
            OwnedKind::ConfigMap => find(&self.config_maps, &key.name),
            OwnedKind::CronJob => find(&self.cron_jobs, &key.name),
            OwnedKind::PodDisruptionBudget => find(&self.pod_disruption_budgets, &key.name),
        }
    }

    /// `metadata.resourceVersion` of the observed object with `key`, when there is one.
    pub fn resource_version(&self, key: &ObjectKey) -> Option<&str> {
        fn find<'a, K: k8s_openapi::Metadata<Ty = ObjectMeta>>(
            items: &'a [K],
            name: &str,
        ) -> Option<&'a str> {
            items
                .iter()
                .find(|o| o.metadata().name.as_deref() == Some(name))
                .and_then(|o| o.metadata().resource_version.as_deref())
        }
        match key.kind {
            OwnedKind::StatefulSet => find(&self.stateful_sets, &key.name),
            OwnedKind::Service => find(&self.services, &key.name),
            OwnedKind::ConfigMap => find(&self.config_maps, &key.name),
            OwnedKind::CronJob => find(&self.cron_jobs, &key.name),
            OwnedKind::PodDisruptionBudget => find(&self.pod_disruption_budgets, &key.name),
        }
    }

    /// The StatefulSet called `name`, when observed.
    pub fn stateful_set(&self, name: &str) -> Option<&StatefulSet> {
        self.stateful_sets
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(name))
    }

    /// Key and metadata of every observed object, in kind then name order.
    pub fn keys(&self) -> Vec<(ObjectKey, &ObjectMeta)> {
        fn add<'a, K: k8s_openapi::Metadata<Ty = ObjectMeta>>(
            out: &mut Vec<(ObjectKey, &'a ObjectMeta)>,
            kind: OwnedKind,
            items: &'a [K],
        ) {
            for item in items {
                let meta = item.metadata();
                out.push((
                    ObjectKey {
                        kind,
                        name: meta.name.clone().unwrap_or_default(),
                    },
                    meta,
                ));
            }
        }
        let mut out = Vec::new();
        add(&mut out, OwnedKind::StatefulSet, &self.stateful_sets);
        add(&mut out, OwnedKind::Service, &self.services);
        add(&mut out, OwnedKind::ConfigMap, &self.config_maps);
        add(&mut out, OwnedKind::CronJob, &self.cron_jobs);
        add(
            &mut out,
            OwnedKind::PodDisruptionBudget,
            &self.pod_disruption_budgets,
        );
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// Everything the core needs to decide, gathered by the runtime from its caches.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The cluster as stored (spec, status, metadata including uid, generation, deletion).
    pub cluster: DatabaseCluster,
    /// Objects owned by the cluster.
    pub owned: OwnedObjects,
    /// Pods of the cluster (selected by the cluster label).
    pub pods: Vec<Pod>,
    /// The password Secret, as far as the core may know it.
    pub secret: SecretState,
    /// Per-pod database facts, keyed by pod name (empty when the runtime probes nothing).
    pub members: BTreeMap<String, MemberFacts>,
    /// The current time, for status timestamps and the next backup time.
    pub now: Timestamp,
    /// Installation settings.
    pub config: OperatorConfig,
    /// Comparisons earlier passes already made, by owned object (empty is always correct: the
    /// objects are then compared in full). See [`KnownMatch`].
    pub known_matches: BTreeMap<ObjectKey, KnownMatch>,
}

/// A comparison an earlier pass made: the desired object rendered from inputs with `digest` was
/// found to be a subset of the owned object at `resource_version`.
///
/// The API server gives an object a new `resourceVersion` with every write, so while the owned
/// object keeps this version and the desired object keeps this digest, comparing them again
/// would give the same answer: a pass that finds both unchanged skips walking the observed
/// object nor hash the desired one (about half the cost of a steady cluster's plan). The runtime keeps what
/// [`Plan::known_matches`] returns and passes it back with the next [`Observed`]. A hint never
/// changes a plan: a stale or missing one only means the full comparison runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownMatch {
    /// `metadata.resourceVersion` of the owned object that was compared.
    pub resource_version: String,
    /// The digest of the inputs the desired object was rendered from ([`PlannedObject::digest`]).
    pub digest: u64,
}

/// One object the cluster should have, complete, with owner reference and labels.
#[derive(Clone, Debug, PartialEq)]
pub enum DesiredObject {
    /// The database StatefulSet.
    StatefulSet(Box<StatefulSet>),
    /// A Service (read-write, read-only or headless).
    Service(Box<Service>),
    /// The engine configuration and scripts.
    ConfigMap(Box<ConfigMap>),
    /// The backup CronJob.
    CronJob(Box<CronJob>),
    /// The PodDisruptionBudget.
    PodDisruptionBudget(Box<PodDisruptionBudget>),
}

impl DesiredObject {
    /// Kind and name of the object.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind(),
            name: self.metadata().name.clone().unwrap_or_default(),
        }
    }

    /// Kind of the object.
    pub fn kind(&self) -> OwnedKind {
        match self {
            DesiredObject::StatefulSet(_) => OwnedKind::StatefulSet,
            DesiredObject::Service(_) => OwnedKind::Service,
            DesiredObject::ConfigMap(_) => OwnedKind::ConfigMap,
            DesiredObject::CronJob(_) => OwnedKind::CronJob,
            DesiredObject::PodDisruptionBudget(_) => OwnedKind::PodDisruptionBudget,
        }
    }

    /// Metadata of the object.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            DesiredObject::StatefulSet(o) => &o.metadata,
            DesiredObject::Service(o) => &o.metadata,
            DesiredObject::ConfigMap(o) => &o.metadata,
            DesiredObject::CronJob(o) => &o.metadata,
            DesiredObject::PodDisruptionBudget(o) => &o.metadata,
        }
    }

    /// The object as JSON, as it is sent to the API server (with `apiVersion` and `kind`).
    pub fn to_value(&self) -> serde_json::Value {
        // Serializing these generated types cannot fail: every map has string keys.
        match self {
            DesiredObject::StatefulSet(o) => serde_json::to_value(o),
            DesiredObject::Service(o) => serde_json::to_value(o),
            DesiredObject::ConfigMap(o) => serde_json::to_value(o),
            DesiredObject::CronJob(o) => serde_json::to_value(o),
            DesiredObject::PodDisruptionBudget(o) => serde_json::to_value(o),
        }
        .unwrap_or(serde_json::Value::Null)
    }
}

/// Kinds of objects a cluster owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OwnedKind {
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `v1` Service.
    Service,
    /// `v1` ConfigMap.
    ConfigMap,
    /// `batch/v1` CronJob.
    CronJob,
    /// `policy/v1` PodDisruptionBudget.
    PodDisruptionBudget,
}

impl OwnedKind {
    /// Every kind, in the order objects are applied.
    pub const ALL: [OwnedKind; 5] = [
        OwnedKind::ConfigMap,
        OwnedKind::Service,
        OwnedKind::StatefulSet,
        OwnedKind::PodDisruptionBudget,
        OwnedKind::CronJob,
    ];

    /// The Kubernetes kind name.
    pub const fn as_str(&self) -> &'static str {
        match self {
            OwnedKind::StatefulSet => "StatefulSet",
            OwnedKind::Service => "Service",
            OwnedKind::ConfigMap => "ConfigMap",
            OwnedKind::CronJob => "CronJob",
            OwnedKind::PodDisruptionBudget => "PodDisruptionBudget",
        }
    }
}

/// A namespaced object of a known kind, by name (in the cluster's namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Kind of the object.
    pub kind: OwnedKind,
    /// Name of the object.
    pub name: String,
}

/// Whether an object needs writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// Not observed yet: create it.
    Create,
    /// Observed but some field the operator manages differs: apply it.
    Update,
    /// Observed with every managed field as desired: do not write.
    Unchanged,
}

/// A desired object and whether it needs writing.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedObject {
    /// The complete desired object.
    pub object: DesiredObject,
    /// What has to happen to it.
    pub change: Change,
    /// A 64-bit digest of everything the objects of this plan were rendered from (the spec, the
    /// name and uid, the operator configuration, the config hash, the password fingerprint, the
    /// rollout partition, the observed volume claim templates, the backup source): rendering is
    /// a pure function of these, so equal digests mean equal desired objects.
    pub digest: u64,
}

/// Something to do besides applying objects, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Set the `database.example.com/role` label of a pod (the read-write Service follows it).
    LabelPod {
        /// Pod name.
        pod: String,
        /// Its role from now on.
        role: MemberRole,
    },
}

/// Type of a Kubernetes event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Information.
    Normal,
    /// Something a person should act on.
    Warning,
}

/// An event worth telling a user: a transition, not a repetition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason, such as `ClusterReady`.
    pub reason: String,
    /// A sentence a person can act on, naming the object and numbers.
    pub message: String,
}

/// The outcome of one planning pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Every object the cluster should have, with whether it needs writing.
    pub objects: Vec<PlannedObject>,
    /// Owned objects that should no longer exist.
    pub delete: Vec<ObjectKey>,
    /// Pod actions, in the order they must happen.
    pub actions: Vec<Action>,
    /// The status the cluster should report.
    pub status: DatabaseClusterStatus,
    /// Whether `status` differs from the observed status (patch only then).
    pub status_changed: bool,
    /// Events to emit.
    pub events: Vec<PlannedEvent>,
    /// When to look at the cluster again if nothing happens before.
    pub requeue_after: Duration,
}

impl Plan {
    /// The objects that need a write (created or updated).
    pub fn changed_objects(&self) -> impl Iterator<Item = &DesiredObject> {
        self.objects
            .iter()
            .filter(|o| o.change != Change::Unchanged)
            .map(|o| &o.object)
    }

    /// Whether carrying out the plan writes nothing at all.
    pub fn is_noop(&self) -> bool {
        self.changed_objects().next().is_none()
            && self.delete.is_empty()
            && self.actions.is_empty()
            && !self.status_changed
    }

    /// The comparisons this plan made that the next pass may skip: every unchanged object with
    /// the `resourceVersion` it was observed at. Keep them (per cluster) and pass them back as
    /// [`Observed::known_matches`].
    pub fn known_matches(&self, owned: &OwnedObjects) -> BTreeMap<ObjectKey, KnownMatch> {
        self.objects
            .iter()
            .filter(|o| o.change == Change::Unchanged)
            .filter_map(|o| {
                let key = o.object.key();
                let resource_version = owned.resource_version(&key)?.to_owned();
                let digest = o.digest;
                Some((
                    key,
                    KnownMatch {
                        resource_version,
                        digest,
                    },
                ))
            })
            .collect()
    }
}
