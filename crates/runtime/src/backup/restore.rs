//! `backup restore`: one backup of a cluster's prefix, into a server.
//!
//! Order, so that nothing is applied unless everything checks out: list the prefix and choose
//! the backup (`latest` or an id, [`restore::choose`]); read its manifest again and refuse it
//! unless its signature verifies with the source's signing key ([`SignaturePolicy`],
//! [`database_operator_core::backup::signature`]); ask the target server its version with
//! the engine's client and refuse a manifest of another engine or a newer major release
//! ([`restore::check_restorable`]); download the dump to a private file while hashing it and
//! refuse it unless size and SHA-256 match the manifest ([`restore::check_download`]); read it
//! once through the [`DumpFilter`] and refuse it if any line asks the client to run a command
//! ([`database_operator_engine::dump_guard`]: `\!`, `system` and the like); only then stream it,
//! decompressed, into the engine's client (`psql` in its restricted mode where it has one,
//! [`psql_restrict`]; `mariadb --sandbox`; `mysql`), stopping at the first error.
//!
//! What is not restored, on purpose: the accounts the target cluster manages itself keep their
//! own passwords. For PostgreSQL, the `DROP ROLE`, `CREATE ROLE` and `ALTER ROLE` statements of
//! `postgres`, `replicator`, the operator's admin account and the connecting user are skipped
//! (every other role is restored). For MySQL and MariaDB, the `mysql` system schema is skipped
//! entirely (its account tables would replace the target's accounts): application accounts and
//! their grants must be created again (docs/operations.md says how).

use crate::backup::WithoutSecrets;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use database_operator_api::Engine;
use database_operator_core::backup::restore::{self, BackupChoice, RestoreRefusal};
use database_operator_core::backup::signature::{self, SignatureError, SigningKey};
use database_operator_core::backup::{Backup, Layout, Manifest};
use database_operator_core::credentials;
use database_operator_engine::dump_guard::{Meta, UnsafeDump};
use database_operator_engine::psql_restrict::{self, Restricted};
pub use database_operator_engine::tools::DumpFilter;
use database_operator_engine::tools::{ToolArgs, ToolTarget};
use sha2::{Digest as _, Sha256};

use super::dump::{DumpCommand, DumpTarget, PasswordFile, password_file_content};
use super::run;
use super::store::{BackupStore, StoreError};
use crate::database::statements::Secret;

/// A failed restore. Nothing was applied unless it is [`RestoreError::Apply`].
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The bucket refused or failed a call.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Listing the backups failed.
    #[error(transparent)]
    Catalog(#[from] run::BackupError),
    /// The backup may not be restored here (nothing was applied).
    #[error(transparent)]
    Refused(#[from] RestoreRefusal),
    /// The target server could not be asked its version (nothing was applied).
    #[error("asking the target server its version with {program}: {message}")]
    Version {
        /// The client.
        program: String,
        /// What went wrong.
        message: String,
    },
    /// A local file could not be written or read.
    #[error("{0}")]
    Io(String),
    /// The manifest's signature was not accepted (nothing was applied).
    #[error("backup {id} refused: {error}; nothing was restored{hint}")]
    Signature {
        /// The backup.
        id: String,
        /// Why.
        error: SignatureError,
        /// What to do about it, as a sentence starting with "; " (or empty).
        hint: &'static str,
    },
    /// No signing key was given to check the manifest with (nothing was applied).
    #[error(
        "backup {id} refused: no signing key to check its manifest with (BACKUP_SIGNING_KEY: the \
         source cluster's operator Secret, key backup-signing-key; in a cluster, \
         spec.bootstrap.fromBackup.signingKeySecretRef for a source in another namespace); to \
         restore without the check, --skip-signature-check (spec.bootstrap.fromBackup.\
         signatureCheck: Skip); nothing was restored"
    )]
    NoSigningKey {
        /// The backup.
        id: String,
    },
    /// The dump asks the client to run a command (nothing was applied).
    #[error("backup {id} refused: {refusal}")]
    Unsafe {
        /// The backup.
        id: String,
        /// The line and what it asks for.
        refusal: UnsafeDump,
    },
    /// The client failed while applying the dump: the target may hold part of it.
    #[error(
        "applying backup {id} with {program} failed ({status}); the target may hold part of it (see the client's messages above)"
    )]
    Apply {
        /// The backup.
        id: String,
        /// The client.
        program: String,
        /// Its exit status or the error.
        status: String,
    },
}

/// Where a restore goes and as whom.
#[derive(Clone, Debug)]
pub struct RestoreTarget {
    /// The engine.
    pub engine: Engine,
    /// A host name or address, or an absolute path: PostgreSQL's socket directory, or the
    /// MySQL/MariaDB socket file.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The user.
    pub user: String,
    /// The password (`None`: the socket's peer authentication).
    pub password: Option<Secret>,
    /// Directory of the client (`None`: found on `PATH`).
    pub tools: Option<PathBuf>,
}

/// The name of `engine`'s SQL client.
pub fn client(engine: Engine) -> &'static str {
    database_operator_engine::of(engine).client_tool()
}

/// The client of `target`, applying SQL from stdin (`query: None`) or running `query` and
/// printing its rows unaligned. The password only in `password_file`. The arguments are the
/// engine's ([`EngineDef::client_args`](database_operator_engine::EngineDef::client_args)).
pub fn client_command(
    target: &RestoreTarget,
    password_file: Option<&Path>,
    query: Option<&str>,
) -> DumpCommand {
    let name = client(target.engine);
    let program = match &target.tools {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    };
    let password_file = password_file.map(|f| f.display().to_string());
    let ToolArgs { args, env } = database_operator_engine::of(target.engine).client_args(
        ToolTarget {
            host: &target.host,
            port: target.port,
            user: &target.user,
        },
        password_file.as_deref(),
        query,
    );
    DumpCommand { program, args, env }
}

/// The accounts a restore leaves alone: those the target cluster manages (the superuser of
/// every engine, the operator's and the replication account), and `user`.
pub fn managed_accounts(user: &str) -> Vec<String> {
    let mut accounts: Vec<String> = Vec::new();
    let superusers = Engine::ALL
        .iter()
        .map(|e| database_operator_engine::of(*e).superuser());
    for account in superusers.chain([credentials::REPLICATION_USER, credentials::ADMIN_USER, user])
    {
        if !accounts.iter().any(|a| a == account) {
            accounts.push(account.to_owned());
        }
    }
    accounts
}

/// A private directory (0700) under `parent`, removed on drop.
pub(super) struct PrivateDir(pub(super) PathBuf);

impl PrivateDir {
    pub(super) fn new(parent: &Path) -> std::io::Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = parent.join(format!(
            "database-operator-restore-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(PrivateDir(dir))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What was restored.
#[derive(Clone, Debug)]
pub struct Restored {
    /// The manifest of the backup.
    pub manifest: Manifest,
    /// The target server's version.
    pub target_version: String,
    /// Lines of the dump left out (managed accounts, the `mysql` schema).
    pub skipped_lines: u64,
}

/// How a restore treats the manifest's signature.
#[derive(Clone, Debug)]
pub enum SignaturePolicy {
    /// The manifest must be signed with this key (the source cluster's).
    Verify(SigningKey),
    /// No key was given: the restore is refused, saying how to give one.
    NoKey,
    /// Restore without checking (`--skip-signature-check`).
    Skip,
}

impl SignaturePolicy {
    /// The policy for `key` (absent: [`SignaturePolicy::NoKey`]), or [`SignaturePolicy::Skip`]
    /// when `skip`.
    pub fn new(key: Option<SigningKey>, skip: bool) -> SignaturePolicy {
        match (skip, key) {
            (true, _) => SignaturePolicy::Skip,
            (false, Some(key)) => SignaturePolicy::Verify(key),
            (false, None) => SignaturePolicy::NoKey,
        }
    }
}

/// The manifest of `backup` read again and checked against `policy`: the manifest the rest of
/// the restore trusts (the catalog's copy was read before the check).
pub(super) async fn checked_manifest<S: BackupStore>(
    store: &S,
    layout: &Layout,
    backup: &Backup,
    policy: &SignaturePolicy,
) -> Result<Manifest, RestoreError> {
    let id = backup.id.to_string();
    let key = match policy {
        SignaturePolicy::Skip => {
            tracing::warn!(backup = %id, "the manifest's signature is not checked (skip requested)");
            return Ok(backup.manifest.clone());
        }
        SignaturePolicy::NoKey => return Err(RestoreError::NoSigningKey { id }),
        SignaturePolicy::Verify(key) => key,
    };
    let bytes = store.get(&backup.manifest_key).await?;
    signature::verify(&bytes, key).map_err(|error| {
        let hint = match error {
            SignatureError::Unsigned => {
                "; a backup written before backups were signed restores only with the check \
                 skipped (--skip-signature-check, spec.bootstrap.fromBackup.signatureCheck: Skip)"
            }
            _ => "",
        };
        RestoreError::Signature {
            id: id.clone(),
            error,
            hint,
        }
    })?;
    let manifest =
        Manifest::parse(&bytes, layout, &backup.id).map_err(|e| RestoreError::Signature {
            id: id.clone(),
            error: SignatureError::NotJson(e.to_string()),
            hint: "",
        })?;
    tracing::info!(backup = %id, "manifest signature verified");
    Ok(manifest)
}

/// Restores the backup `choice` of `layout`'s cluster into `target` (see the module
/// documentation for the order of checks). `temp` is where the dump is downloaded.
pub async fn restore<S: BackupStore>(
    store: &S,
    layout: &Layout,
    choice: &BackupChoice,
    target: &RestoreTarget,
    temp: &Path,
    policy: &SignaturePolicy,
) -> Result<Restored, RestoreError> {
    let catalog = run::catalog(store, layout).await?;
    let backup = restore::choose(&catalog, choice, layout.prefix())?.clone();
    let manifest = checked_manifest(store, layout, &backup, policy).await?;
    restore::check_dump(&manifest)?;
    tracing::info!(backup = %backup.id, engine = %manifest.engine, server_version = %manifest.server_version, "restoring");
    // Another engine is refused before the target is even asked.
    restore::check_restorable(&manifest, target.engine, "")?;

    let dir = PrivateDir::new(temp).map_err(|e| RestoreError::Io(format!("temp dir: {e}")))?;
    let password_file = match &target.password {
        Some(password) => {
            // Any host: the same file serves the socket and TCP.
            let for_file = DumpTarget {
                engine: target.engine,
                host: "*".to_owned(),
                port: target.port,
                user: target.user.clone(),
                tls_ca: None,
            };
            Some(
                PasswordFile::write(&dir.0, &password_file_content(&for_file, password))
                    .map_err(|e| RestoreError::Io(format!("password file: {e}")))?,
            )
        }
        None => None,
    };
    let password_path = password_file.as_ref().map(|f| f.path().to_owned());

    // The target's version, before anything is downloaded.
    let query = database_operator_engine::of(target.engine).version_query();
    let version_command = client_command(target, password_path.as_deref(), Some(query));
    let target_version = run_query(&version_command)?;
    restore::check_restorable(&manifest, target.engine, &target_version)?;

    // The dump, checked against the manifest before a byte of it is applied.
    let file = dir.0.join("dump.sql.gz");
    let size = store.download(&backup.data_key, &file).await?;
    let sha256 = sha256_of(&file)?;
    restore::check_download(&manifest, size, &sha256)?;
    tracing::info!(backup = %backup.id, size, "dump downloaded and verified");

    let apply = client_command(target, password_path.as_deref(), None);
    let managed = managed_accounts(&target.user);
    let engine = target.engine;
    let id = backup.id.to_string();
    let skipped =
        tokio::task::spawn_blocking(move || apply_dump(&apply, &file, engine, managed, &id))
            .await
            .map_err(|e| RestoreError::Io(e.to_string()))??;
    drop(password_file);
    Ok(Restored {
        manifest,
        target_version,
        skipped_lines: skipped,
    })
}

fn run_query(command: &DumpCommand) -> Result<String, RestoreError> {
    let program = command.program.display().to_string();
    let out = Command::new(&command.program)
        .without_secrets()
        .args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| RestoreError::Version {
            program: program.clone(),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(RestoreError::Version {
            program,
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub(super) fn sha256_of(path: &Path) -> Result<String, RestoreError> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| RestoreError::Io(e.to_string()))?;
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| RestoreError::Io(e.to_string()))?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
    }
    Ok(super::run::hex(&sha.finalize()))
}

/// Reads the gzip file line by line through `filter`, handing each line the client gets to
/// `send` (with what the filter read it as); a line the client must never see ends the reading
/// with [`RestoreError::Unsafe`]. The one walk over a dump, for its first reading without a
/// client and for the client.
fn through_filter(
    file: &Path,
    filter: &mut DumpFilter,
    id: &str,
    mut send: impl FnMut(&[u8], Option<Meta>) -> Result<(), RestoreError>,
) -> Result<(), RestoreError> {
    let input = std::fs::File::open(file).map_err(|e| RestoreError::Io(e.to_string()))?;
    let mut reader = BufReader::new(flate2::read::GzDecoder::new(input));
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(RestoreError::Io(format!("reading the dump: {e}"))),
        }
        let kept = filter.keep(&line).map_err(|refusal| RestoreError::Unsafe {
            id: id.to_owned(),
            refusal,
        })?;
        if kept {
            send(&line, filter.last_meta())?;
        }
    }
}

/// psql's restricted mode for this restore, when the client is a psql that has it
/// ([`psql_restrict`]): a random key the dump cannot know.
fn restricted_mode(command: &DumpCommand, engine: Engine) -> Option<Restricted> {
    if database_operator_engine::of(engine).protocol()
        != database_operator_engine::Protocol::Postgres
    {
        return None;
    }
    let version = Command::new(&command.program)
        .without_secrets()
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    if !psql_restrict::has_restrict(&version) {
        tracing::warn!(client = %version, "this psql has no restricted mode (\\restrict, from 15.14, 16.10, 17.6): the dump's reading alone keeps its commands out");
        return None;
    }
    let key = crate::credentials::generate_password()
        .map_err(|e| tracing::warn!(error = %e, "no random key for psql's restricted mode"))
        .ok()?;
    tracing::info!(client = %version, "the dump is applied in psql's restricted mode");
    Restricted::new(key)
}

/// Streams the gzip file through the filter into the client, after a first reading that
/// refuses a dump asking the client to run commands; returns the lines skipped.
fn apply_dump(
    command: &DumpCommand,
    file: &Path,
    engine: Engine,
    managed: Vec<String>,
    id: &str,
) -> Result<u64, RestoreError> {
    let program = command.program.display().to_string();
    let failed = |status: String| RestoreError::Apply {
        id: id.to_owned(),
        program: program.clone(),
        status,
    };
    // The first reading, without a client: nothing runs if any line must not.
    through_filter(
        file,
        &mut DumpFilter::new(engine, managed.clone()),
        id,
        |_, _| Ok(()),
    )?;
    let mut child = Command::new(&command.program)
        .without_secrets()
        .args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| failed(format!("could not start: {e}")))?;
    let mut filter = DumpFilter::new(engine, managed);
    let written = {
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let restricted = restricted_mode(command, engine);
        if let Some(r) = &restricted
            && let Err(e) = stdin.write_all(&r.start())
        {
            return Err(failed(format!("stopped reading: {e}")));
        }
        // A refusal now means the file changed under the restore (it was read once already).
        through_filter(file, &mut filter, id, |line, meta| {
            let sent = match &restricted {
                Some(r) => stdin.write_all(&r.line(line, meta)),
                None => stdin.write_all(line),
            };
            // The client stopped reading (it failed): its status says why.
            sent.map_err(|e| failed(format!("stopped reading: {e}")))
        })
    };
    let status = child.wait().map_err(|e| failed(e.to_string()))?;
    if !status.success() {
        return Err(failed(status.to_string()));
    }
    written?;
    Ok(filter.skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_commands_keep_the_password_out_of_argv() {
        let tcp = RestoreTarget {
            engine: Engine::Mariadb,
            host: "10.0.0.1".into(),
            port: 3306,
            user: "database_operator".into(),
            password: Some(Secret::new("pw")),
            tools: None,
        };
        let cmd = client_command(&tcp, Some(Path::new("/tmp/d/password")), None);
        assert_eq!(cmd.args[0], "--defaults-extra-file=/tmp/d/password");
        assert!(cmd.args.iter().all(|a| !a.contains("pw")), "{cmd:?}");
        assert!(cmd.env.is_empty());
        assert!(cmd.args.contains(&"--protocol=TCP".to_owned()));
        assert!(cmd.args.contains(&"--binary-mode".to_owned()));
        let socket = RestoreTarget {
            host: "/var/run/mysqld/mysqld.sock".into(),
            password: None,
            ..tcp.clone()
        };
        let cmd = client_command(&socket, None, Some("SELECT VERSION()"));
        assert!(
            cmd.args
                .contains(&"--socket=/var/run/mysqld/mysqld.sock".to_owned())
        );
        assert!(cmd.args.iter().all(|a| !a.starts_with("--host")));
        let pg = RestoreTarget {
            engine: Engine::Postgresql,
            host: "/var/run/postgresql".into(),
            port: 5432,
            user: "postgres".into(),
            password: None,
            tools: Some(PathBuf::from("/usr/lib/postgresql/15/bin")),
        };
        let cmd = client_command(&pg, Some(Path::new("/p")), None);
        assert_eq!(
            cmd.program,
            PathBuf::from("/usr/lib/postgresql/15/bin/psql")
        );
        assert!(cmd.args.contains(&"--set=ON_ERROR_STOP=1".to_owned()));
        assert_eq!(cmd.env, [("PGPASSFILE".to_owned(), "/p".to_owned())]);
    }
}
