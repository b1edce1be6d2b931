//! The rules of `spec.backup` and `spec.bootstrap` that span fields or depend on the engine
//! (the field rules are on the types).

use super::{FieldError, Warning};
use crate::{BackupDeletionPolicy, BackupMethod, DatabaseClusterSpec};

/// Adds the errors and warnings of `spec.backup` and `spec.bootstrap`.
pub(super) fn check(
    spec: &DatabaseClusterSpec,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<Warning>,
) {
    if spec.bootstrap.is_some() && !spec.engine.bootstraps_from_backup() {
        errors.push(FieldError::new(
            "spec.bootstrap.fromBackup",
            format!(
                "starting a new {} cluster from a backup is not supported yet (PostgreSQL and MariaDB only); create the cluster empty and restore with `database-operator backup restore` (docs/operations.md)",
                spec.engine
            ),
        ));
    }

    if let Some(from) = spec.bootstrap.as_ref().map(|b| &b.from_backup) {
        if from.target_time.is_some() && from.target_lsn.is_some() {
            errors.push(FieldError::new(
                "spec.bootstrap.fromBackup.targetLSN",
                "give targetTime or targetLSN, not both".to_owned(),
            ));
        }
        if from.has_target() && !spec.engine.archives_wal() {
            let field = if from.target_time.is_some() {
                "spec.bootstrap.fromBackup.targetTime"
            } else {
                "spec.bootstrap.fromBackup.targetLSN"
            };
            errors.push(FieldError::new(
                field,
                format!(
                    "point-in-time recovery replays a WAL archive onto a physical backup: PostgreSQL only so far, not {}; remove the target to restore the backup as it is",
                    spec.engine
                ),
            ));
        }
    }

    if let Some(backup) = &spec.backup {
        if backup.method() == BackupMethod::Physical {
            if !spec.engine.archives_wal() {
                errors.push(FieldError::new(
                    "spec.backup.method",
                    format!(
                        "physical backups are available for PostgreSQL only so far, not {}; use logical",
                        spec.engine
                    ),
                ));
            } else if backup.archive.is_none() {
                errors.push(FieldError::new(
                    "spec.backup.method",
                    "a physical backup needs spec.backup.archive: the base backup holds no WAL of its own, the archive holds what makes it consistent".to_owned(),
                ));
            }
        }
        if backup.archive.is_some() && !spec.engine.archives_wal() {
            errors.push(FieldError::new(
                "spec.backup.archive",
                format!(
                    "continuous archiving is available for PostgreSQL only so far, not {}; remove spec.backup.archive (scheduled backups work without it)",
                    spec.engine
                ),
            ));
        }
        if backup.deletion_policy == BackupDeletionPolicy::Delete {
            warnings.push(Warning::new(
                "spec.backup.deletionPolicy",
                format!(
                    "Delete: every backup of this cluster in bucket {} is removed when the DatabaseCluster is deleted; use Retain to keep them",
                    backup.s3_bucket
                ),
            ));
        }
        if backup
            .endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
        {
            warnings.push(Warning::new(
                "spec.backup.endpoint",
                "uses plain http: backups and credentials travel unencrypted; prefer https",
            ));
        }
    }
}
