//! Condition types and reasons used in `status.conditions`, spelled as the API promises.
//!
//! Condition types are stable API: dashboards and alerts match on them. Reasons are CamelCase
//! words that explain the status; messages carry the details and numbers.

/// The cluster serves reads and writes with every member ready.
pub const READY: &str = "Ready";
/// The cluster works below its desired shape or a dependency is missing.
pub const DEGRADED: &str = "Degraded";
/// A version change is rolling through the members.
pub const UPGRADING: &str = "Upgrading";
/// A failover or switchover is needed or requested but a safety rule forbids it; the reason
/// says which rule and the message what to do.
pub const FAILOVER_BLOCKED: &str = "FailoverBlocked";
/// Whether the database runs the superuser password of `spec.passwordSecretRef` (applied
/// without a restart; `status.password` holds its fingerprint).
pub const PASSWORD_APPLIED: &str = "PasswordApplied";

/// The backups are taken as scheduled: the newest finished backup Job succeeded and a backup
/// completed within its schedule (only with `spec.backup`).
pub const BACKUP_HEALTHY: &str = "BackupHealthy";

/// Whether the backups are known to restore: the newest restore drill (`spec.backup.verify`)
/// restored the newest backup into a scratch server and every table matched its manifest
/// (only with `spec.backup`; without drills it is False, `NotVerified`).
pub const BACKUP_VERIFIED: &str = "BackupVerified";

/// Whether the primary's write-ahead log reaches the archive (only with
/// `spec.backup.archive`): True while the primary archives every segment it completes, False
/// while archiving fails (the message says how many segments wait on the primary's volume and
/// since when), Unknown while the primary cannot be asked or has archived nothing yet.
pub const ARCHIVING_HEALTHY: &str = "ArchivingHealthy";

/// Whether every member's data volume has the size `spec.storage.size` asks for. Present once
/// the spec asked for more than a volume had: False while the volumes grow or cannot grow (the
/// reason says which), True once all have the size. Volumes never shrink.
pub const STORAGE_RESIZED: &str = "StorageResized";

/// Reasons for condition statuses.
pub mod reasons {
    /// Every member is ready and a primary is known.
    pub const ALL_REPLICAS_READY: &str = "AllReplicasReady";
    /// Fewer members are ready than the spec asks for.
    pub const INSUFFICIENT_REPLICAS: &str = "InsufficientReplicas";
    /// No member is ready yet.
    pub const NO_READY_REPLICAS: &str = "NoReadyReplicas";
    /// No member is known to be the primary.
    pub const NO_PRIMARY: &str = "NoPrimary";
    /// The referenced password Secret does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// The referenced password Secret exists but lacks the key.
    pub const SECRET_KEY_MISSING: &str = "SecretKeyMissing";
    /// The password Secret's key holds a value that cannot be a password (empty, a line break,
    /// a NUL byte, not UTF-8 text): nothing is created or changed with it.
    pub const PASSWORD_UNUSABLE: &str = "PasswordUnusable";
    /// The operator Secret `<name>-operator` of a cluster that has run is gone and the operator
    /// holds no copy of its values: new passwords would lock it out of the data, so none are
    /// generated until a person brings the Secret back.
    pub const OPERATOR_SECRET_LOST: &str = "OperatorSecretLost";
    /// A Secret of the cluster's TLS (`<name>-ca-key`, `<name>-tls`, `<name>-ca`) exists and
    /// belongs to someone else: the operator writes nothing over it.
    pub const TLS_SECRET_NOT_OWNED: &str = "TLSSecretNotOwned";
    /// The Secret `spec.tls.certificateSecret` names does not exist.
    pub const TLS_CERTIFICATE_NOT_FOUND: &str = "TLSCertificateNotFound";
    /// The certificate `spec.tls.certificateSecret` provides fails a check (its key, its chain
    /// to `ca.crt`, its validity, the names it covers); the message says which. It is not used.
    pub const TLS_CERTIFICATE_UNUSABLE: &str = "TLSCertificateUnusable";
    /// The provided certificate in use expires within seven days, or has expired, and has not
    /// been renewed.
    pub const TLS_CERTIFICATE_EXPIRING: &str = "TLSCertificateExpiring";
    /// The spec breaks a validation rule; the message names the field.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The operator could not carry out its plan; the message says which call failed.
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    /// Nothing is wrong.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// A version upgrade is in progress.
    pub const VERSION_ROLLING: &str = "VersionRolling";
    /// Every member runs the desired version.
    pub const VERSION_CURRENT: &str = "VersionCurrent";
    /// A version roll stopped: a member did not become healthy on the new version in time, or
    /// the primary role could not move. The primary is untouched; the message says what to do.
    pub const UPGRADE_PAUSED: &str = "UpgradePaused";
    /// The cluster is being deleted.
    pub const DELETING: &str = "Deleting";
    /// Most members are unreachable: the operator cannot tell a lost primary from its own
    /// network cut, and does not act.
    pub const NO_QUORUM: &str = "NoQuorum";
    /// No reachable replica can be promoted (none has a known position, or their positions
    /// conflict).
    pub const NO_CANDIDATE: &str = "NoCandidate";
    /// The old primary was stopped to fence it, but its pod stays Terminating long after its
    /// grace period: its node does not confirm the stop (a lost or cut-off node), so nothing is
    /// promoted until the pod is gone.
    pub const FENCE_UNCONFIRMED: &str = "FenceUnconfirmed";
    /// `nodeLoss: SelfFence`: the primary answers, but its member agent has not renewed the
    /// primary Lease for longer than the lease, so the agent keeps the server read-only (its
    /// pod cannot reach the API server); the operator does not give it its writes back.
    pub const LEASE_NOT_RENEWED: &str = "LeaseNotRenewed";
    /// `spec.failover.enabled` is false.
    pub const FAILOVER_DISABLED: &str = "FailoverDisabled";
    /// A switchover request names a pod that cannot be promoted.
    pub const INVALID_SWITCHOVER: &str = "InvalidSwitchover";
    /// A member diverged from the primary and is quarantined.
    pub const MEMBER_QUARANTINED: &str = "MemberQuarantined";
    /// `PasswordApplied` True: the database runs the Secret's password.
    pub const APPLIED: &str = "Applied";
    /// `PasswordApplied` False: a new password is being applied (or waits for a writable
    /// primary); the message says which.
    pub const APPLYING: &str = "Applying";
    /// `PasswordApplied` False: applying the new password failed; the message has the error and
    /// the operator retries.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// `BackupHealthy`: no backup Job has completed yet.
    pub const NO_BACKUP_YET: &str = "NoBackupYet";
    /// `BackupHealthy`: the newest finished backup Job failed (the message names it).
    pub const LAST_BACKUP_FAILED: &str = "LastBackupFailed";
    /// `BackupHealthy`: the newest backup Job failed because the bucket refused its credentials
    /// (HTTP 401/403: wrong keys, or keys without access to the bucket).
    pub const BACKUP_STORAGE_DENIED: &str = "BackupStorageDenied";
    /// `BackupHealthy`: the newest backup Job failed because the bucket could not be reached
    /// (connection refused, DNS, timeouts, server errors).
    pub const BACKUP_STORAGE_UNREACHABLE: &str = "BackupStorageUnreachable";
    /// `BackupHealthy`: the newest backup Job failed because the dump failed (the database
    /// could not be reached or the dump tool exited with an error).
    pub const BACKUP_DUMP_FAILED: &str = "BackupDumpFailed";
    /// `Degraded` (and `Ready` False): a cluster bootstrapped from a backup whose first
    /// member's restore failed in its init container; it serves nothing until a retry succeeds.
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// `BackupHealthy`: the schedule's run after the last completed backup is overdue.
    pub const BACKUP_TOO_OLD: &str = "BackupTooOld";
    /// The last backup is stored, but retention could not delete the older ones (a bucket that
    /// refuses deletes, for example): they are kept, and the bucket holds more than asked.
    pub const RETENTION_NOT_MET: &str = "RetentionNotMet";
    /// `BackupHealthy`: the newest finished backup Job succeeded, on schedule.
    pub const BACKUP_SUCCEEDED: &str = "BackupSucceeded";
    /// `BackupVerified` True: the newest drill restored a backup and every table matched.
    pub const RESTORE_DRILL_PASSED: &str = "RestoreDrillPassed";
    /// `BackupVerified` False: the newest drill failed (the message names its Job and cause).
    pub const RESTORE_DRILL_FAILED: &str = "RestoreDrillFailed";
    /// `BackupVerified` False: the restored tables (or the stored dump's SHA-256) do not match
    /// the backup's manifest: the backup is not what was taken.
    pub const BACKUP_MISMATCH: &str = "BackupMismatch";
    /// `BackupVerified` False: the scratch server could not start or load the backup.
    pub const BACKUP_RESTORE_FAILED: &str = "BackupRestoreFailed";
    /// `BackupVerified` False: drills are configured but none has finished yet.
    pub const NO_DRILL_YET: &str = "NoDrillYet";
    /// `BackupVerified`: the last drill passed, but the scheduled drill after it is more than an
    /// hour late and none is running: the backups taken since are untested.
    pub const RESTORE_DRILL_OVERDUE: &str = "RestoreDrillOverdue";
    /// `BackupVerified` False: `spec.backup.verify` is not set; no backup has been restored.
    pub const NOT_VERIFIED: &str = "NotVerified";
    /// `ArchivingHealthy` True: the primary's last archiving attempt succeeded.
    pub const ARCHIVING: &str = "Archiving";
    /// `ArchivingHealthy` False: the primary's archive command fails (the bucket refuses or
    /// cannot be reached); segments wait on the primary's volume and writes go on.
    pub const ARCHIVING_FAILING: &str = "ArchivingFailing";
    /// `ArchivingHealthy` Unknown: the primary has archived nothing yet (it archives its
    /// first segment once it completes one, or `timeoutSeconds` after a write).
    pub const NOTHING_ARCHIVED_YET: &str = "NothingArchivedYet";
    /// `ArchivingHealthy` Unknown: there is no primary, or its last probe did not answer.
    pub const PRIMARY_NOT_PROBED: &str = "PrimaryNotProbed";
    /// `StorageResized` True: every member volume has at least `spec.storage.size`.
    pub const RESIZED: &str = "Resized";
    /// `StorageResized` False: larger requests are made; the storage provider grows the
    /// volumes (and the kubelet their file systems) with the servers running.
    pub const RESIZING: &str = "Resizing";
    /// `StorageResized` False: the volumes grew; their file systems grow when the kubelet next
    /// handles the mounted volumes.
    pub const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";
    /// `StorageResized` False: a volume's StorageClass does not allow expansion (or the claim
    /// names no class, or the class is gone): nothing is asked for; the message names the class.
    pub const EXPANSION_NOT_SUPPORTED: &str = "ExpansionNotSupported";
    /// `StorageResized` False: the storage provider or the kubelet failed to grow a volume; the
    /// message quotes the claim.
    pub const RESIZE_FAILED: &str = "ResizeFailed";
}
