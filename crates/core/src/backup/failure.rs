//! Why a backup command failed, as the backup Job's exit code carries it to the operator.
//!
//! `database-operator backup run` exits with [`BackupFailure::exit_code`] when it knows the
//! cause; the Job's `podFailurePolicy` fails the Job at once on those codes (retrying wrong
//! credentials changes nothing), and the Job controller writes the code into the Job's
//! `Failed` condition ("... failed with exit code 3 matching FailJob rule at index 0"), which
//! [`BackupFailure::from_job_message`] reads back. Any other failure exits 1 and is retried
//! up to the Job's backoff limit. Pure.

use database_operator_api::conditions::reasons;

/// A known cause of a failed backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupFailure {
    /// The bucket refused the credentials (HTTP 401/403).
    StorageDenied,
    /// The bucket could not be reached (connection, DNS, timeout, 5xx).
    StorageUnreachable,
    /// The dump failed: the database could not be reached, or the dump tool failed.
    DumpFailed,
    /// A restore drill: the stored dump or the restored tables do not match the backup's
    /// manifest (SHA-256, row counts or checksums).
    Mismatch,
    /// A restore drill: the scratch server could not be started or could not load the backup.
    RestoreFailed,
}

impl BackupFailure {
    /// Every cause, in exit code order.
    pub const ALL: [BackupFailure; 5] = [
        BackupFailure::StorageDenied,
        BackupFailure::StorageUnreachable,
        BackupFailure::DumpFailed,
        BackupFailure::Mismatch,
        BackupFailure::RestoreFailed,
    ];

    /// The exit code of the backup command.
    pub const fn exit_code(self) -> u8 {
        match self {
            BackupFailure::StorageDenied => 3,
            BackupFailure::StorageUnreachable => 4,
            BackupFailure::DumpFailed => 5,
            BackupFailure::Mismatch => 6,
            BackupFailure::RestoreFailed => 7,
        }
    }

    /// The cause an exit code stands for.
    pub fn from_exit_code(code: i64) -> Option<BackupFailure> {
        Self::ALL
            .into_iter()
            .find(|f| i64::from(f.exit_code()) == code)
    }

    /// The `BackupHealthy` reason.
    pub const fn reason(self) -> &'static str {
        match self {
            BackupFailure::StorageDenied => reasons::BACKUP_STORAGE_DENIED,
            BackupFailure::StorageUnreachable => reasons::BACKUP_STORAGE_UNREACHABLE,
            BackupFailure::DumpFailed => reasons::BACKUP_DUMP_FAILED,
            BackupFailure::Mismatch => reasons::BACKUP_MISMATCH,
            BackupFailure::RestoreFailed => reasons::BACKUP_RESTORE_FAILED,
        }
    }

    /// What an SRE reads in the condition's message.
    pub const fn describe(self) -> &'static str {
        match self {
            BackupFailure::StorageDenied => {
                "the bucket refused the credentials (check the keys in spec.backup.credentialsSecretRef and their access to the bucket)"
            }
            BackupFailure::StorageUnreachable => {
                "the bucket could not be reached (check spec.backup.endpoint, the network and the S3 service)"
            }
            BackupFailure::DumpFailed => {
                "the dump failed (the database could not be reached or the dump tool failed)"
            }
            BackupFailure::Mismatch => {
                "the backup does not match its manifest (its signature, the stored dump's SHA-256, or a table's rows or checksum after the restore): do not rely on it; take a new backup and look for what changed the stored objects"
            }
            BackupFailure::RestoreFailed => {
                "the backup could not be restored into a scratch server (the drill's log has the server's and the client's errors)"
            }
        }
    }

    /// What an SRE reads when a restore into a new cluster (`spec.bootstrap.fromBackup`)
    /// failed on this cause.
    pub const fn describe_restore(self) -> &'static str {
        match self {
            BackupFailure::StorageDenied => {
                "the bucket refused the credentials (check the keys in spec.bootstrap.fromBackup.credentialsSecretRef and their access to the bucket)"
            }
            BackupFailure::StorageUnreachable => {
                "the bucket could not be reached (check spec.bootstrap.fromBackup.endpoint, the network and the S3 service)"
            }
            BackupFailure::Mismatch => {
                "the backup does not match its manifest (its signature, the stored dump's SHA-256, or a table's rows or checksum after the restore): choose another backup"
            }
            BackupFailure::DumpFailed | BackupFailure::RestoreFailed => {
                "the backup could not be loaded into the server (the init container's log has the server's and the client's errors)"
            }
        }
    }

    /// The cause a failed init container's summary (`init container init exited with 4`)
    /// names, when the restore exited with one of the codes.
    pub fn from_init_message(message: &str) -> Option<BackupFailure> {
        let (_, rest) = message.split_once("exited with ")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Self::from_exit_code(digits.parse().ok()?)
    }

    /// The cause a failed Job's `Failed` condition message names, when the Job was failed by
    /// its pod failure policy on one of the exit codes.
    pub fn from_job_message(message: &str) -> Option<BackupFailure> {
        let (_, rest) = message.split_once("with exit code ")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Self::from_exit_code(digits.parse().ok()?)
    }

    /// The cause of a failed call to the bucket, from the S3 client's error text: refused
    /// credentials (401/403 and the S3 error codes for bad keys), or else unreachable when the
    /// request never got an answer or the server failed; `None` for anything else (a missing
    /// object, a bad request).
    pub fn from_store_message(message: &str) -> Option<BackupFailure> {
        const DENIED: [&str; 8] = [
            "403 Forbidden",
            "401 Unauthorized",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "lacked the necessary privileges",
            "lacked valid authentication",
            "Missing credentials",
        ];
        const UNREACHABLE: [&str; 9] = [
            "error sending request",
            "Connection refused",
            "connection refused",
            "dns error",
            "timed out",
            "Timeout",
            "500 Internal Server Error",
            "502 Bad Gateway",
            "503 Service Unavailable",
        ];
        if DENIED.iter().any(|d| message.contains(d)) {
            Some(BackupFailure::StorageDenied)
        } else if UNREACHABLE.iter().any(|u| message.contains(u)) {
            Some(BackupFailure::StorageUnreachable)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_round_trip_and_are_distinct() {
        for f in BackupFailure::ALL {
            assert_eq!(BackupFailure::from_exit_code(f.exit_code().into()), Some(f));
            assert_ne!(f.exit_code(), 0);
            assert_ne!(f.exit_code(), 1, "1 is any other failure (retried)");
        }
        assert_eq!(BackupFailure::from_exit_code(1), None);
        assert_eq!(BackupFailure::from_exit_code(137), None);
    }

    #[test]
    fn the_job_controller_message_names_the_exit_code() {
        let message = "Container backup for pod shop/orders-backup-29000000-x7k2p failed with exit code 3 matching FailJob rule at index 0";
        assert_eq!(
            BackupFailure::from_job_message(message),
            Some(BackupFailure::StorageDenied)
        );
        assert_eq!(
            BackupFailure::from_job_message(&message.replace("code 3", "code 5")),
            Some(BackupFailure::DumpFailed)
        );
        assert_eq!(
            BackupFailure::from_job_message("Job has reached the specified backoff limit"),
            None
        );
        assert_eq!(
            BackupFailure::from_job_message(&message.replace("code 3", "code 42")),
            None
        );
    }

    #[test]
    fn store_errors_are_classified() {
        let denied = "list ns/orders/: Generic S3 error: Error performing list request: Server returned non-2xx status code: 403 Forbidden: <Error><Code>InvalidAccessKeyId</Code></Error>";
        assert_eq!(
            BackupFailure::from_store_message(denied),
            Some(BackupFailure::StorageDenied)
        );
        let refused = "list ns/orders/: Generic S3 error: Error performing list request: HTTP error: error sending request for url (http://127.0.0.1:9/backups?list-type=2): client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(
            BackupFailure::from_store_message(refused),
            Some(BackupFailure::StorageUnreachable)
        );
        assert_eq!(
            BackupFailure::from_store_message("get ns/orders/x: Object at location x not found"),
            None
        );
    }

    #[test]
    fn a_failed_restore_names_its_cause_from_the_init_containers_exit_code() {
        let unreachable = BackupFailure::from_init_message("init container init exited with 4");
        assert_eq!(unreachable, Some(BackupFailure::StorageUnreachable));
        assert!(
            BackupFailure::StorageUnreachable
                .describe_restore()
                .contains("spec.bootstrap.fromBackup.endpoint")
        );
        assert_eq!(
            BackupFailure::from_init_message("init container init exited with 3"),
            Some(BackupFailure::StorageDenied)
        );
        assert_eq!(
            BackupFailure::from_init_message("init container init exited with 1"),
            None
        );
        assert_eq!(BackupFailure::from_init_message("exited with"), None);
        for f in BackupFailure::ALL {
            assert!(!f.describe_restore().contains("spec.backup."), "{f:?}");
        }
    }
}
