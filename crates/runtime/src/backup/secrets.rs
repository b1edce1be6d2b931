//! The secrets of the backup, restore and drill processes: which environment variables hold
//! them, the signing key read from one, and children started without them.

use database_operator_core::backup::signature::SigningKey;

/// The database password's environment variable.
pub const PASSWORD_ENV: &str = "DB_PASSWORD";

/// The replication account's password (`backup run --method physical`: `pg_basebackup`
/// connects as the replication account, the only one the servers let replicate).
pub const REPLICATION_PASSWORD_ENV: &str = "REPLICATION_PASSWORD";

/// The backup signing key's environment variable (the operator Secret's `backup-signing-key`):
/// `backup run` signs its manifest with it, `backup restore` and `backup verify` check one.
pub const SIGNING_KEY_ENV: &str = "BACKUP_SIGNING_KEY";

/// The signing key in [`SIGNING_KEY_ENV`], if set and not empty.
pub(super) fn signing_key() -> anyhow::Result<Option<SigningKey>> {
    match std::env::var_os(SIGNING_KEY_ENV) {
        Some(value) if !value.is_empty() => Ok(Some(
            SigningKey::new(value.as_encoded_bytes())
                .map_err(|e| anyhow::anyhow!("{SIGNING_KEY_ENV}: {e}"))?,
        )),
        _ => Ok(None),
    }
}

/// Variables of the backup, restore and drill processes that may hold secrets: never passed on
/// to a child (the dump and restore tools read the password from a file of their own; uploads
/// are made by this process).
pub const SECRET_VARIABLES: [&str; 6] = [
    PASSWORD_ENV,
    SIGNING_KEY_ENV,
    "ADMIN_PASSWORD",
    REPLICATION_PASSWORD_ENV,
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
];

/// Leaves [`SECRET_VARIABLES`] out of a child's environment.
pub trait WithoutSecrets {
    /// The command, without [`SECRET_VARIABLES`] in the child's environment.
    fn without_secrets(&mut self) -> &mut Self;
}

impl WithoutSecrets for std::process::Command {
    fn without_secrets(&mut self) -> &mut Self {
        for name in SECRET_VARIABLES {
            self.env_remove(name);
        }
        self
    }
}

impl WithoutSecrets for tokio::process::Command {
    fn without_secrets(&mut self) -> &mut Self {
        for name in SECRET_VARIABLES {
            self.env_remove(name);
        }
        self
    }
}
