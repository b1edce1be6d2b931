//! The contract between the core and the runtime: what goes in, what comes out.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use database_operator_api::scheduling::SchedulingPolicy;
use database_operator_api::{DatabaseCluster, DatabaseClusterStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::owned::{DesiredObject, ObjectKey, OwnedObjects};

mod backup_job;
mod command;
mod event;
mod exit;
mod flow;
mod lease;
mod member;
mod pod_action;
mod volume;

pub use backup_job::*;
pub use command::*;
pub use event::*;
pub use exit::*;
pub use flow::*;
pub use lease::*;
pub use member::*;
pub use pod_action::*;
pub use volume::*;

/// Settings of the operator installation that shape rendered objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorConfig {
    /// Registry (and path prefix) that database images are pulled from, without a trailing
    /// slash: images are `<registry>/mysql:<version>`, `<registry>/mariadb:<version>` and
    /// `<registry>/postgres:<version>`.
    /// Default `docker.io/library`; override for air-gapped clusters.
    pub image_registry: String,
    /// The operator's own image (`database-operator` at `/usr/local/bin/database-operator`).
    /// The backup Job's init container copies the binary from it into the pod, so the backup
    /// runs `database-operator backup run` inside the engine's own image (which has the dump
    /// tools); the cleanup Job of a deleted cluster runs in it directly.
    pub operator_image: String,
    /// How long to wait before looking at a cluster again when nothing else is due.
    pub resync: Duration,
    /// Database images that are not `<image_registry>/<repository>:<version>`, by
    /// `<engine>/<version>` (`mysql/9.7.4`): the versions catalog's `image` entries.
    pub images: BTreeMap<String, String>,
    /// Which priority classes and tolerations `spec.scheduling` may ask for (the operator's
    /// `--allowed-priority-classes` and `--allowed-toleration-keys`): a cluster asking for more
    /// is not reconciled (`Degraded` `InvalidSpec`, naming the field).
    pub scheduling: SchedulingPolicy,
    /// The namespace the operator runs in: each cluster's NetworkPolicy admits the database
    /// port from it (the operator's probes and steps).
    pub operator_namespace: String,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            image_registry: "docker.io/library".to_owned(),
            operator_image: DEFAULT_OPERATOR_IMAGE.to_owned(),
            resync: Duration::from_secs(30),
            images: BTreeMap::new(),
            scheduling: SchedulingPolicy::default(),
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.to_owned(),
        }
    }
}

/// The namespace of the shipped installations (`deploy/`, the Helm chart's default).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "database-operator-system";

/// The operator image of this release, as `deploy/manager/deployment.yaml` runs it.
pub const DEFAULT_OPERATOR_IMAGE: &str = concat!(
    "ghcr.io/example/database-operator:",
    env!("CARGO_PKG_VERSION")
);

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
    /// The key exists but its value cannot be a password ([`PasswordProblem::of`]): nothing is
    /// created or changed with it, and a running database keeps the password it has.
    Unusable {
        /// What is wrong with the value (the value itself never enters the core).
        problem: PasswordProblem,
    },
}

/// Why a Secret value cannot be used as a password. Each would break the members' start (the
/// init scripts take the password from the environment and write it into option files and
/// `.pgpass`, one entry per line) or make the password a server holds differ from the one the
/// fingerprint in the status describes (a value read as text with its invalid bytes replaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PasswordProblem {
    /// The value is empty: no server would ask for a password.
    Empty,
    /// The value holds a carriage return or a line feed.
    LineBreak,
    /// The value holds a NUL byte.
    Nul,
    /// The value is not UTF-8 text.
    NotText,
}

impl PasswordProblem {
    /// What is wrong with `value` as a password, or `None` when it can be one.
    ///
    /// ```
    /// use database_operator_core::PasswordProblem;
    /// assert_eq!(PasswordProblem::of(b"s3cret pass"), None);
    /// assert_eq!(PasswordProblem::of(b"s3cret\n"), Some(PasswordProblem::LineBreak));
    /// assert_eq!(PasswordProblem::of(b""), Some(PasswordProblem::Empty));
    /// ```
    pub fn of(value: &[u8]) -> Option<PasswordProblem> {
        if value.is_empty() {
            Some(PasswordProblem::Empty)
        } else if value.contains(&0) {
            Some(PasswordProblem::Nul)
        } else if value.iter().any(|b| matches!(b, b'\r' | b'\n')) {
            Some(PasswordProblem::LineBreak)
        } else if std::str::from_utf8(value).is_err() {
            Some(PasswordProblem::NotText)
        } else {
            None
        }
    }

    /// The problem in words, for conditions and errors: "is empty", "holds a line break (CR or
    /// LF)", "holds a NUL byte", "is not UTF-8 text".
    pub const fn describe(self) -> &'static str {
        match self {
            PasswordProblem::Empty => "is empty",
            PasswordProblem::LineBreak => "holds a line break (CR or LF)",
            PasswordProblem::Nul => "holds a NUL byte",
            PasswordProblem::NotText => "is not UTF-8 text",
        }
    }
}

/// Everything the core needs to decide, gathered by the runtime from its caches.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The cluster as stored (spec, status, metadata including uid, generation, deletion).
    pub cluster: DatabaseCluster,
    /// Objects owned by the cluster.
    pub owned: OwnedObjects,
    /// Pods of the cluster (selected by the cluster label), as far as the core reads them.
    pub pods: Vec<MemberPod>,
    /// The password Secret, as far as the core may know it.
    pub secret: SecretState,
    /// When [`Observed::secret`]'s fingerprint is keyed (HMAC with the cluster's key): the
    /// unkeyed fingerprint of the same value, as releases before keyed fingerprints (and a
    /// cluster before its key exists) recorded it, so that a status recording it is moved to
    /// the keyed form without a password change. `None` otherwise.
    pub secret_unkeyed_fingerprint: Option<String>,
    /// The operator Secret `<name>-operator` (generated credentials): whether it exists and its
    /// owners, never its values.
    pub operator_secret: crate::credentials::OperatorSecretState,
    /// The current time, for status timestamps and the next backup time.
    pub now: Timestamp,
    /// Installation settings.
    pub config: OperatorConfig,
    /// Comparisons earlier passes already made, by owned object (empty is always correct: the
    /// objects are then compared in full). See [`KnownMatch`].
    pub known_matches: BTreeMap<ObjectKey, KnownMatch>,
    /// The backup cleanup Job `<name>-cleanup` of a cluster being deleted, when observed.
    pub cleanup_job: Option<Job>,
    /// The cluster's backup Jobs (the CronJob's and on-demand ones) the runtime sees, in any
    /// order ([`crate::backup_status`]).
    pub backup_jobs: Vec<BackupJob>,
    /// What the database prober last found on each member, by pod name. Empty (the runtime
    /// does not probe yet) means no server signal: failover never starts without it.
    pub member_facts: BTreeMap<String, MemberFacts>,
    /// The result of the last password command ([`DatabaseCommand::SetPassword`],
    /// [`DatabaseCommand::DiscardOldPassword`]) the runtime carried out for this cluster, kept
    /// in memory until the status records it. `None` is always correct: a command whose result is
    /// unknown is planned again (every password command is idempotent). See [`PasswordOutcome`].
    pub password_outcome: Option<PasswordOutcome>,
    /// The Lease `<name>-primary` as the runtime last read it (`spec.failover.nodeLoss:
    /// SelfFence`). `None` is always correct: the failover then waits for the old primary's
    /// pod to be gone, as with `nodeLoss: Wait`.
    pub primary_lease: Option<LeaseSighting>,
    /// The data volume claims of the members in spec (ordinals below `spec.replicas`) that
    /// exist, by ordinal. Empty is always correct: no volume is then grown, and the
    /// `StorageResized` condition stays as it was.
    pub volumes: Vec<MemberVolume>,
    /// What the runtime saw of the cluster's TLS Secrets ([`crate::tls`]). `Default` is correct
    /// for a new cluster.
    pub tls: crate::tls::TlsObserved,
}

/// Which password command a [`PasswordOutcome`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PasswordAction {
    /// [`DatabaseCommand::SetPassword`].
    Set,
    /// [`DatabaseCommand::DiscardOldPassword`].
    DiscardOld,
}

/// What happened when the runtime carried out a password command: how the core learns that a
/// password was applied (it never assumes a command succeeded).
///
/// The runtime keeps the last outcome per cluster (in memory) and passes it in every
/// [`Observed`] until a newer command replaces it; the next pass records a success in
/// `status.password` (after which the outcome changes nothing) or reports a failure in the
/// `PasswordApplied` condition and retries after [`crate::password::RETRY_AFTER`]. A command the
/// runtime skipped because the Secret moved on (see [`DatabaseCommand::SetPassword`]) leaves no
/// outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordOutcome {
    /// The command carried out.
    pub action: PasswordAction,
    /// The `fingerprint` of the command.
    pub fingerprint: String,
    /// When it finished (success or failure).
    pub at: Timestamp,
    /// `None`: every account was changed. `Some`: why it failed, without any password (the
    /// driver's error; it shows in the `PasswordApplied` condition and a Warning event).
    pub error: Option<String>,
}

/// A database account that gets the superuser password: the engine's superuser at each host
/// the init scripts create it for ([`crate::password::superuser_accounts`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PasswordAccount {
    /// User (role) name: `postgres`, `root`.
    pub user: String,
    /// MySQL/MariaDB host part (`localhost`, `%`); `None` for PostgreSQL.
    pub host: Option<String>,
    /// MariaDB `root@localhost`: it also logs in through `unix_socket` (the OS user root), which
    /// setting the password must keep: `ALTER USER ... IDENTIFIED VIA mysql_native_password
    /// USING PASSWORD(...) OR unix_socket`, not a plain `IDENTIFIED BY`.
    pub keep_unix_socket: bool,
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

/// The outcome of one planning pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Every object the cluster should have, with whether it needs writing.
    pub objects: Vec<PlannedObject>,
    /// Owned objects that should no longer exist.
    pub delete: Vec<ObjectKey>,
    /// Actions on pods besides applying objects (role labels), in the order they must happen.
    pub pod_actions: Vec<PodAction>,
    /// Changes to the operator Secret `<name>-operator` ([`crate::credentials`]): created before
    /// any object is applied (the pods read it), released before the finalizer goes.
    pub secret_changes: Vec<crate::credentials::SecretChange>,
    /// The certificates to make ([`crate::tls`]): written with the operator Secret, before the
    /// members that mount them.
    pub tls_change: Option<crate::tls::TlsChange>,
    /// Commands to the members' databases (failover, switchover, rejoin, password, semi-sync),
    /// in order; they come before [`Plan::pod_actions`] (the labels follow the roles).
    pub database_commands: Vec<DatabaseCommand>,
    /// The status the cluster should report.
    pub status: DatabaseClusterStatus,
    /// Whether `status` differs from the observed status (patch only then).
    pub status_changed: bool,
    /// Events to emit.
    pub events: Vec<PlannedEvent>,
    /// When to look at the cluster again if nothing happens before; `None`: only when
    /// something changes (a deleted cluster whose finalizer goes).
    pub requeue_after: Option<Duration>,
    /// What happens to the operator's finalizer ([`crate::finalize`]).
    pub finalizer: FinalizerChange,
    /// The backup cleanup Job of a cluster being deleted, in order ([`crate::finalize`]).
    pub cleanup: Vec<CleanupTask>,
    /// Why the backup cleanup failed, when it did: the runtime reports it as an error (Warning
    /// event, `Degraded` condition, backoff) and keeps the finalizer.
    pub cleanup_failure: Option<String>,
    /// On-demand backup Jobs to create ([`crate::backup_now`]), before the status that records
    /// their request is written (a Job of the same name that exists already is fine).
    pub backup_jobs: Vec<Job>,
}

/// What happens to the operator's finalizer in this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Nothing.
    Keep,
    /// Add it, before anything is written (a live cluster without it).
    Add,
    /// Remove it, after everything else (a deleted cluster whose cleanup is done).
    Remove,
}

/// A task of the backup cleanup of a deleted cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum CleanupTask {
    /// Create the cleanup Job (an existing one of that name is fine).
    CreateJob(Box<Job>),
    /// Delete the Job with this name (absent is fine): a leftover of an earlier cluster of the
    /// same name.
    DeleteJob(String),
}

impl Plan {
    /// A plan that writes nothing and reports `status` as it is, with `finalizer` for the
    /// operator's finalizer; the decisions of a pass fill it in.
    pub fn quiet(status: DatabaseClusterStatus, finalizer: FinalizerChange) -> Self {
        Self {
            objects: Vec::new(),
            delete: Vec::new(),
            pod_actions: Vec::new(),
            secret_changes: Vec::new(),
            tls_change: None,
            database_commands: Vec::new(),
            status,
            status_changed: false,
            events: Vec::new(),
            requeue_after: None,
            finalizer,
            cleanup: Vec::new(),
            cleanup_failure: None,
            backup_jobs: Vec::new(),
        }
    }

    /// The objects that need a write (created or updated).
    pub fn changed_objects(&self) -> impl Iterator<Item = &DesiredObject> {
        self.objects
            .iter()
            .filter(|o| o.change != Change::Unchanged)
            .map(|o| &o.object)
    }

    /// The objects that need a write in `wave`, in apply order: the runtime writes one wave
    /// after the other, the objects of a wave concurrently ([`crate::ApplyWave`]).
    pub fn changed_objects_in(&self, wave: crate::ApplyWave) -> Vec<&DesiredObject> {
        self.changed_objects()
            .filter(|o| o.kind().wave() == wave)
            .collect()
    }

    /// The objects of `wave` with `change` (created, or updated), in apply order.
    pub fn objects_in(&self, wave: crate::ApplyWave, change: Change) -> Vec<&DesiredObject> {
        self.objects
            .iter()
            .filter(|o| o.change == change && o.object.kind().wave() == wave)
            .map(|o| &o.object)
            .collect()
    }

    /// Whether the plan writes owned objects (applies, deletions, the operator Secret, Jobs):
    /// the heavy part of a pass, which the runtime bounds; status, labels and events are not.
    pub fn writes_objects(&self) -> bool {
        self.changed_objects().next().is_some()
            || !self.delete.is_empty()
            || !self.secret_changes.is_empty()
            || self.tls_change.is_some()
            || !self.backup_jobs.is_empty()
            || !self.cleanup.is_empty()
    }

    /// Whether carrying out the plan writes nothing at all.
    pub fn is_noop(&self) -> bool {
        self.changed_objects().next().is_none()
            && self.delete.is_empty()
            && self.pod_actions.is_empty()
            && self.database_commands.is_empty()
            && self.secret_changes.is_empty()
            && self.tls_change.is_none()
            && !self.status_changed
            && self.finalizer == FinalizerChange::Keep
            && self.cleanup.is_empty()
            && self.backup_jobs.is_empty()
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
