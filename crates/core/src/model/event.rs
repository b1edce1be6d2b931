//! The events a plan asks to emit.

use super::*;

/// Type of a Kubernetes event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Information.
    Normal,
    /// Something a person should act on.
    Warning,
}

/// The reason of every event the operator emits (CamelCase, as Kubernetes shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    /// Every member is ready, the primary among them.
    ClusterReady,
    /// The cluster ran before and is now degraded (members or the primary not ready).
    ClusterDegraded,
    /// A version change started rolling through the members.
    UpgradeStarted,
    /// Every member runs the spec's version.
    UpgradeCompleted,
    /// A change of the pod template other than the version (resources, configuration,
    /// scheduling, an image) restarts the members one at a time: replicas first, then a
    /// switchover, then the former primary.
    RollingRestart,
    /// Every member runs the pod template of the spec again.
    RollingRestartCompleted,
    /// A member did not become healthy on the new version in time (or the primary role could
    /// not move): the roll stops with the primary untouched.
    UpgradePaused,
    /// The cluster is being deleted.
    ClusterDeleting,
    /// The spec does not validate.
    InvalidSpec,
    /// The password Secret does not exist.
    SecretNotFound,
    /// The password Secret has no entry for the referenced key.
    SecretKeyMissing,
    /// The password Secret's key holds a value that cannot be a password.
    PasswordUnusable,
    /// The operator Secret of a cluster that ran is gone with no values to restore it from.
    OperatorSecretLost,
    /// The operator Secret was deleted and is created again with the values the operator held.
    OperatorSecretRestored,
    /// The StatefulSet's replicas are raised.
    ScaledUp,
    /// The StatefulSet's replicas are lowered.
    ScaledDown,
    /// The password in the Secret changed: the operator applies it in the database (no restart).
    PasswordChanged,
    /// The database runs the Secret's password (applied on the primary).
    PasswordApplied,
    /// Applying the new password failed; it is retried.
    PasswordApplyFailed,
    /// MySQL: the old password was discarded after its grace period.
    OldPasswordDiscarded,
    /// The configuration changed: the members roll.
    ConfigurationChanged,
    /// The backup CronJob was created.
    BackupScheduled,
    /// The backup CronJob was deleted (stored backups are kept).
    BackupScheduleRemoved,
    /// `spec.storage.size` grew but the volumes cannot follow: their StorageClass does not
    /// allow expansion (or is unknown), or the storage provider failed to grow them.
    StorageResizeNotApplied,
    /// The operator asked for larger member volumes (`spec.storage.size` grew).
    StorageExpanding,
    /// Every member volume has the size `spec.storage.size` asks for.
    StorageResized,
    /// The primary archives its write-ahead log (`ArchivingHealthy` turned True for the first
    /// time, or again after it was unknown).
    ArchivingStarted,
    /// The primary's archive command fails (`ArchivingHealthy` turned False).
    ArchivingFailing,
    /// The primary archives again after failing (`ArchivingHealthy` False to True).
    ArchivingRecovered,
    /// A deleted cluster's backups are kept (`deletionPolicy: Retain`).
    BackupsRetained,
    /// A deleted cluster's backups were removed (`deletionPolicy: Delete`).
    BackupsDeleted,
    /// A call to the API server failed (the runtime's `Kube` error category).
    ApiCallFailed,
    /// A write lost a race with another writer.
    Conflict,
    /// A `DatabaseCluster` could not be read as one.
    InvalidObject,
    /// The password Secret could not be read.
    SecretUnreadable,
    /// An object the cluster needs exists under its name and belongs to someone else.
    ObjectNotOwned,
    /// Runtime: before a database step the operator could not confirm that it still leads
    /// (never published: a replica that may not lead writes nothing about a cluster; a metric
    /// label and a log line).
    LeadershipUnconfirmed,
    /// The backup cleanup of a deleted cluster failed.
    CleanupFailed,
    /// A bug: something the operator built could not be serialized.
    InternalError,
    /// The primary was lost: a failover started or completed (the message names the members,
    /// their positions and why each candidate won or lost).
    Failover,
    /// A requested switchover started, completed, was refused or aborted.
    Switchover,
    /// A failover is needed but a safety rule forbids it; the message says which and what to do.
    FailoverBlocked,
    /// A member diverged from the primary and was quarantined (its data is kept).
    MemberQuarantined,
    /// A member is being seeded again from the primary (it could no longer catch up, or a
    /// person asked), or a request to reseed one was refused.
    MemberReseeding,
    /// A member seeded again streams from the primary.
    MemberReseeded,
    /// An on-demand backup (`database.example.com/backup-now`) was started, or could not be.
    BackupRequested,
    /// A backup Job completed (`status.lastBackup` names a new Job); one event per backup.
    BackupCompleted,
    /// A backup Job failed (`BackupHealthy` names a newly failed Job and the cause).
    BackupFailed,
    /// A restore drill restored the newest backup and found it equal to its manifest.
    RestoreDrillPassed,
    /// A restore drill failed: the backup did not restore, or differed from its manifest.
    RestoreDrillFailed,
    /// A database command (fence, promote, follow, ...) failed on a member (the runtime's; the
    /// message names the member, the command and the kind of error).
    DatabaseStepFailed,
}

impl EventReason {
    /// The reason as Kubernetes shows it.
    pub const fn as_str(&self) -> &'static str {
        match self {
            EventReason::ClusterReady => "ClusterReady",
            EventReason::ClusterDegraded => "ClusterDegraded",
            EventReason::UpgradeStarted => "UpgradeStarted",
            EventReason::UpgradeCompleted => "UpgradeCompleted",
            EventReason::RollingRestart => "RollingRestart",
            EventReason::RollingRestartCompleted => "RollingRestartCompleted",
            EventReason::UpgradePaused => "UpgradePaused",
            EventReason::ClusterDeleting => "ClusterDeleting",
            EventReason::InvalidSpec => "InvalidSpec",
            EventReason::SecretNotFound => "SecretNotFound",
            EventReason::SecretKeyMissing => "SecretKeyMissing",
            EventReason::PasswordUnusable => "PasswordUnusable",
            EventReason::OperatorSecretLost => "OperatorSecretLost",
            EventReason::OperatorSecretRestored => "OperatorSecretRestored",
            EventReason::ScaledUp => "ScaledUp",
            EventReason::ScaledDown => "ScaledDown",
            EventReason::PasswordChanged => "PasswordChanged",
            EventReason::PasswordApplied => "PasswordApplied",
            EventReason::PasswordApplyFailed => "PasswordApplyFailed",
            EventReason::OldPasswordDiscarded => "OldPasswordDiscarded",
            EventReason::ConfigurationChanged => "ConfigurationChanged",
            EventReason::BackupScheduled => "BackupScheduled",
            EventReason::BackupScheduleRemoved => "BackupScheduleRemoved",
            EventReason::StorageResizeNotApplied => "StorageResizeNotApplied",
            EventReason::StorageExpanding => "StorageExpanding",
            EventReason::StorageResized => "StorageResized",
            EventReason::ArchivingStarted => "ArchivingStarted",
            EventReason::ArchivingFailing => "ArchivingFailing",
            EventReason::ArchivingRecovered => "ArchivingRecovered",
            EventReason::BackupsRetained => "BackupsRetained",
            EventReason::BackupsDeleted => "BackupsDeleted",
            EventReason::ApiCallFailed => "ApiCallFailed",
            EventReason::Conflict => "Conflict",
            EventReason::InvalidObject => "InvalidObject",
            EventReason::SecretUnreadable => "SecretUnreadable",
            EventReason::ObjectNotOwned => "ObjectNotOwned",
            EventReason::LeadershipUnconfirmed => "LeadershipUnconfirmed",
            EventReason::CleanupFailed => "CleanupFailed",
            EventReason::InternalError => "InternalError",
            EventReason::Failover => "Failover",
            EventReason::Switchover => "Switchover",
            EventReason::FailoverBlocked => "FailoverBlocked",
            EventReason::MemberQuarantined => "MemberQuarantined",
            EventReason::MemberReseeding => "MemberReseeding",
            EventReason::MemberReseeded => "MemberReseeded",
            EventReason::BackupRequested => "BackupRequested",
            EventReason::BackupCompleted => "BackupCompleted",
            EventReason::BackupFailed => "BackupFailed",
            EventReason::RestoreDrillPassed => "RestoreDrillPassed",
            EventReason::RestoreDrillFailed => "RestoreDrillFailed",
            EventReason::DatabaseStepFailed => "DatabaseStepFailed",
        }
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for EventReason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// An event worth telling a user: a transition, not a repetition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason, such as `ClusterReady`.
    pub reason: EventReason,
    /// A sentence a person can act on, naming the object and numbers.
    pub message: String,
}

impl PlannedEvent {
    /// An event of `type_` with `reason` and `message`.
    pub fn new(type_: EventType, reason: EventReason, message: String) -> Self {
        Self {
            type_,
            reason,
            message,
        }
    }
}
