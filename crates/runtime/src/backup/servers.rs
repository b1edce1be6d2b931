//! What `backup run` asks the server before its dump, through the operator's own drivers: its
//! version and position (for the manifest), and on MySQL and MariaDB its application accounts
//! (appended to the dump: [`database_operator_engine::statements::accounts`]).

use database_operator_engine::Protocol;

use super::dump::DumpTarget;
use super::restore;
use super::run::{BackupError, ServerFacts};
use crate::database::statements::Secret;
use crate::database::{DatabaseIo, Timeouts};

/// The trust the backup checks `target`'s server with: the authorities of `--tls-ca`, for the
/// name it dials; `None` without.
fn trust(target: &DumpTarget) -> Result<Option<crate::database::tls::ServerTrust>, String> {
    let Some(file) = &target.tls_ca else {
        return Ok(None);
    };
    let pem = std::fs::read(file)
        .map_err(|e| format!("reading the authorities {}: {e}", file.display()))?;
    crate::database::tls::ServerTrust::from_pem_verifying(&pem, crate::database::tls::Verify::Full)
        .map(Some)
        .map_err(|e| format!("the authorities {}: {e}", file.display()))
}

/// The MySQL-protocol driver's settings for `target`.
fn mysql_config(
    target: &DumpTarget,
    password: &Secret,
    tls: Option<crate::database::tls::ServerTrust>,
) -> crate::database::mysql::MysqlConfig {
    crate::database::mysql::MysqlConfig {
        engine: target.engine,
        host: target.host.clone(),
        port: target.port,
        user: target.user.clone(),
        password: password.clone(),
        timeouts: Timeouts::default(),
        replication_user: String::new(),
        replication_password: Secret::new(String::new()),
        tls,
    }
}

/// The application accounts of `target`'s server as SQL appended to its dump (MySQL and
/// MariaDB; nothing for PostgreSQL, whose dump holds its roles), read as the dump's account.
/// An account that cannot be carried (a name with a line break) is logged and left out; a
/// server whose accounts cannot be read fails the dump from it (a restore would lose them).
pub(super) async fn accounts_section(
    target: &DumpTarget,
    password: &Secret,
) -> Result<Vec<u8>, BackupError> {
    if database_operator_engine::of(target.engine).protocol() != Protocol::Mysql {
        return Ok(Vec::new());
    }
    let tls = trust(target).map_err(BackupError::Accounts)?;
    let io = crate::database::mysql::MysqlIo::new(mysql_config(target, password, tls));
    let managed = restore::managed_accounts(&target.user);
    let (section, left_out) = io
        .application_accounts(&managed)
        .await
        .map_err(|e| BackupError::Accounts(e.to_string()))?;
    for account in left_out {
        tracing::warn!(account = %account.escape_debug(), "an account whose name spans lines is left out of the backup");
    }
    Ok(section.into_bytes())
}

/// The server's version and position before the dump, through the operator's own drivers, or
/// why it cannot be asked.
pub(super) async fn server_facts(
    target: &DumpTarget,
    password: &Secret,
) -> Result<ServerFacts, String> {
    let tls = trust(target)?;
    let facts = match database_operator_engine::of(target.engine).protocol() {
        Protocol::Postgres => {
            let io = crate::database::postgres::PostgresIo::new(
                crate::database::postgres::PostgresConfig {
                    engine: target.engine,
                    host: target.host.clone(),
                    port: target.port,
                    user: target.user.clone(),
                    password: password.clone(),
                    dbname: "postgres".to_owned(),
                    timeouts: Timeouts::default(),
                    replication_user: String::new(),
                    replication_passfile: None,
                    application_name: Some("database-operator-backup".to_owned()),
                    tls: tls.clone(),
                },
            );
            io.probe().await
        }
        Protocol::Mysql => {
            crate::database::mysql::MysqlIo::new(mysql_config(target, password, tls))
                .probe()
                .await
        }
    };
    match facts {
        // The drivers report a server they cannot connect to as facts, not as an error.
        Ok(f) if !f.reachable => Err("the server cannot be reached".to_owned()),
        Ok(f) => Ok(ServerFacts {
            version: f.version,
            position: f.position,
        }),
        Err(e) => Err(e.to_string()),
    }
}
