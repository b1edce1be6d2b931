//! Backups in the spec and status: the schedule and bucket, restore drills, bootstrap from a
//! backup, and what the operator last recorded of them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rules;

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

    /// Continuous archiving of the write-ahead log to the same bucket, under
    /// `<namespace>/<name>/wal/` (PostgreSQL): every completed WAL segment is compressed and
    /// uploaded by the primary as it is written, so the data a lost cluster takes with it
    /// shrinks from everything since the last backup to at most `timeoutSeconds` of writes
    /// (condition `ArchivingHealthy`). A segment already in the bucket is never overwritten.
    /// Absent: no archive. Not yet available for MySQL and MariaDB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub archive: Option<ArchiveSpec>,

    /// How the scheduled backups copy the data: `logical` (the engine's dump of every database;
    /// the default) or `physical` (PostgreSQL: a base backup of the data files taken from the
    /// primary, which needs `archive`: the WAL that makes the copy consistent, and every write
    /// after it, comes from the archive). A physical backup restores only into the same major
    /// release, much faster than a dump replays, and to any point in time the archive reaches
    /// (`spec.bootstrap.fromBackup.targetTime`). Restore drills verify logical backups only so
    /// far: a drill of a cluster whose newest backup is physical says so and fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub method: Option<BackupMethod>,
}

impl BackupSpec {
    /// The method the scheduled backups use (absent: logical).
    pub fn method(&self) -> BackupMethod {
        self.method.unwrap_or_default()
    }
}

/// Continuous archiving.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveSpec {
    /// The longest an idle primary waits before it archives a partly filled WAL segment
    /// (PostgreSQL's `archive_timeout`): the bound on the writes the archive can lack while
    /// archiving keeps up. Each switch archives a whole segment (16 MiB, compressed to little
    /// when mostly empty). 10 to 3600 seconds; default 60.
    #[serde(default = "default_archive_timeout")]
    #[garde(range(min = 10, max = 3600))]
    pub timeout_seconds: i32,
}

impl Default for ArchiveSpec {
    fn default() -> Self {
        Self {
            timeout_seconds: default_archive_timeout(),
        }
    }
}

fn default_archive_timeout() -> i32 {
    60
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

    /// The key the source's backup Jobs signed their manifests with. Absent: the source's
    /// operator Secret `<cluster>-operator` (key `backup-signing-key`) when the source is in this
    /// namespace; name a Secret here for a source in another namespace, or when the source's
    /// operator Secret is gone and a copy of its key was kept elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(dive)]
    pub signing_key_secret_ref: Option<crate::SecretKeySelector>,

    /// Whether the backup's manifest must carry a signature that verifies with the source's
    /// key: `Required` (the default) or `Skip`, for a backup written before backups were signed
    /// or whose key is lost. With `Skip`, anyone who could write to the bucket could have a
    /// dump of their own restored: check the backup first.
    #[serde(default)]
    #[garde(skip)]
    pub signature_check: SignatureCheck,

    /// Recover to this moment (RFC 3339 with a zone, e.g. `2026-03-01T04:04:00Z`): every
    /// transaction committed at or before it is kept, none after it (microsecond precision).
    /// PostgreSQL, from a physical backup and the source's WAL archive: `backup: latest` starts
    /// from the newest physical backup that finished before it. Absent, with no `targetLSN`
    /// either: a physical backup replays the whole archive, a logical one restores as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(inner(length(min = 1, max = 64), custom(rules::rfc3339_time)))]
    pub target_time: Option<String>,

    /// Recover to this WAL position (PostgreSQL, as `pg_current_wal_lsn()` prints it, e.g.
    /// `0/3000100`): every transaction committed at or before it. Not with `targetTime`.
    #[serde(default, rename = "targetLSN", skip_serializing_if = "Option::is_none")]
    #[garde(inner(pattern(r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")))]
    pub target_lsn: Option<String>,
}

impl FromBackupSpec {
    /// Whether the restore stops at a point (`targetTime` or `targetLSN`) rather than at the
    /// end of what the backup and archive hold.
    pub fn has_target(&self) -> bool {
        self.target_time.is_some() || self.target_lsn.is_some()
    }
}

/// Whether a restore checks the backup manifest's signature
/// (`spec.bootstrap.fromBackup.signatureCheck`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SignatureCheck {
    /// The manifest's signature must verify with the source's signing key (the default).
    #[default]
    Required,
    /// Restore without checking the signature.
    Skip,
}

impl SignatureCheck {
    /// The value as written in the spec.
    pub const fn as_str(self) -> &'static str {
        match self {
            SignatureCheck::Required => "Required",
            SignatureCheck::Skip => "Skip",
        }
    }
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
    /// Where the recovery from the archive was set to stop, for a physical backup (`time
    /// 2026-03-01T04:04:00Z`, `LSN 0/3000100`, `the end of the archive`); absent for a logical
    /// backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The point the recovery actually reached, for a physical backup: the commit time of the
    /// last transaction replayed from the archive, as the new primary reported it when it had
    /// promoted (`2026-03-01 04:03:59.871234+00`); absent for a logical backup, or when nothing
    /// was replayed after the base backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<String>,
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

/// How a backup copies the data.
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
#[serde(rename_all = "camelCase")]
pub enum BackupMethod {
    /// The engine's dump of every database as SQL (`pg_dumpall`, `mysqldump`,
    /// `mariadb-dump`): restores into the same or a newer major release; slow to restore for
    /// large databases; no point-in-time recovery from it.
    #[default]
    Logical,
    /// A copy of the data files (PostgreSQL: `pg_basebackup` without WAL, the write-ahead log
    /// archive holding the rest): restores only into the same major release, as fast as the
    /// files download, and to any point the archive reaches.
    Physical,
}

impl BackupMethod {
    /// The name as the manifest and the spec write it (`logical`, `physical`).
    pub fn as_str(self) -> &'static str {
        match self {
            BackupMethod::Logical => "logical",
            BackupMethod::Physical => "physical",
        }
    }
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

#[cfg(test)]
mod tests {
    use garde::Validate;
    use serde_json::json;

    use super::*;

    /// The bucket location is declared twice, where backups go and where a restore reads them:
    /// the same values must pass or fail both, with the same field named.
    #[test]
    fn the_backup_and_the_restore_source_judge_a_bucket_alike() {
        let cases = [
            ("orders-backups", None, None, true),
            ("ab", None, None, false),
            ("Orders", None, None, false),
            ("orders..backups", None, None, false),
            ("192.168.1.1", None, None, false),
            ("orders", Some("https://minio.backup.svc:9000"), None, true),
            ("orders", Some("ftp://minio"), None, false),
            ("orders", Some("http://a b"), None, false),
            ("orders", None, Some("eu-west-1"), true),
            ("orders", None, Some("EU_WEST"), false),
            ("orders", None, Some(""), false),
        ];
        for (bucket, endpoint, region, ok) in cases {
            let location = json!({"s3Bucket": bucket, "endpoint": endpoint, "region": region});
            let mut backup = json!({"schedule": "0 2 * * *"});
            let mut restore = json!({"cluster": "orders"});
            for doc in [&mut backup, &mut restore] {
                for (k, v) in location.as_object().unwrap() {
                    if !v.is_null() {
                        doc[k] = v.clone();
                    }
                }
            }
            let backup: BackupSpec = serde_json::from_value(backup).unwrap();
            let restore: FromBackupSpec = serde_json::from_value(restore).unwrap();
            let fields = |r: Result<(), garde::Report>| -> Vec<String> {
                r.err()
                    .map(|r| r.iter().map(|(path, _)| path.to_string()).collect())
                    .unwrap_or_default()
            };
            let (b, r) = (fields(backup.validate()), fields(restore.validate()));
            assert_eq!(b.is_empty(), ok, "{bucket} {endpoint:?} {region:?}: {b:?}");
            assert_eq!(b, r, "{bucket} {endpoint:?} {region:?}");
        }
    }
}
