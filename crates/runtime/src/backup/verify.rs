//! `backup verify`: a restore drill. Restores one backup (the newest complete one by default)
//! into a scratch server this command starts in its own directory, then reads every table
//! back out of that server with the engine's dump tool and compares each table's row count and
//! checksum with the backup's manifest ([`database_operator_core::backup::tables`]).
//!
//! The scratch server listens on a Unix socket only (no TCP port), runs as the pod's user, and
//! is initialized empty for every drill (PostgreSQL `initdb`, MariaDB `mariadb-install-db`,
//! MySQL `mysqld --initialize-insecure`: the engine crate's
//! [`EngineDef::scratch_server`](database_operator_engine::EngineDef::scratch_server) says what
//! to run); it never sees the cluster's servers or credentials.
//! The restore is the one `backup restore` does (engine, major release and the dump's SHA-256
//! checked before anything is applied).
//!
//! Failures carry their cause to the Job's exit code: [`BackupFailure::Mismatch`] when the
//! stored dump's SHA-256 or a table differs from the manifest, [`BackupFailure::RestoreFailed`]
//! when the scratch server cannot start or load the dump, the storage causes as `backup run`.

use crate::backup::WithoutSecrets;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use database_operator_api::Engine;
use database_operator_core::backup::Layout;
use database_operator_core::backup::failure::BackupFailure;
use database_operator_core::backup::restore::{BackupChoice, RestoreRefusal};
use database_operator_core::backup::tables::{self, DumpStats, TableMismatch, TableSet};
use database_operator_engine::scratch::{Command, ScratchStop};
use tokio::io::AsyncReadExt as _;

use super::dump::{self, DumpTarget, PasswordFile};
use super::restore::{self, RestoreError, RestoreTarget};
use super::store::BackupStore;
use crate::database::statements::Secret;

/// How long the scratch server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A failed drill.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The restore failed or was refused.
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// The scratch server could not be prepared or started.
    #[error("the scratch server: {0}")]
    Server(String),
    /// Reading the restored server back out failed.
    #[error("reading the restored server with {program}: {message}")]
    Read {
        /// The dump tool.
        program: String,
        /// What went wrong.
        message: String,
    },
    /// The restored tables differ from the manifest.
    #[error(
        "backup {id}: {} table(s) differ from the manifest after the restore: {}",
        .mismatches.len(),
        .mismatches.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Mismatch {
        /// The backup.
        id: String,
        /// Every difference.
        mismatches: Vec<TableMismatch>,
    },
}

impl VerifyError {
    /// The cause the Job's exit code carries, when known.
    pub fn failure(&self) -> Option<BackupFailure> {
        match self {
            VerifyError::Mismatch { .. } => Some(BackupFailure::Mismatch),
            VerifyError::Server(_) | VerifyError::Read { .. } => Some(BackupFailure::RestoreFailed),
            VerifyError::Restore(e) => match e {
                RestoreError::Refused(RestoreRefusal::Corrupt { .. }) => {
                    Some(BackupFailure::Mismatch)
                }
                RestoreError::Store(store) => BackupFailure::from_store_message(&store.to_string()),
                RestoreError::Catalog(catalog) => {
                    BackupFailure::from_store_message(&catalog.to_string())
                }
                RestoreError::Signature { .. } => Some(BackupFailure::Mismatch),
                RestoreError::Refused(_)
                | RestoreError::NoSigningKey { .. }
                | RestoreError::Version { .. }
                | RestoreError::Io(_)
                | RestoreError::Apply { .. }
                | RestoreError::Unsafe { .. } => Some(BackupFailure::RestoreFailed),
            },
        }
    }
}

/// What a drill found.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The backup restored.
    pub id: String,
    /// The scratch server's version.
    pub server_version: String,
    /// The tables compared (empty when the manifest has none: taken by an older release).
    pub tables: TableSet,
    /// False when the manifest has no table statistics, so only the restore itself was checked.
    pub compared: bool,
}

/// A server started for one drill, on a socket in its own directory (what runs is the engine
/// crate's [`database_operator_engine::scratch`]).
pub struct ScratchServer {
    engine: Engine,
    dir: PathBuf,
    child: tokio::process::Child,
    tools: Option<PathBuf>,
    socket: String,
    stop: ScratchStop,
}

impl ScratchServer {
    /// Initializes an empty instance in `dir` (which must not exist or be empty) and starts it.
    pub async fn start(
        engine: Engine,
        dir: &Path,
        tools: Option<&Path>,
    ) -> Result<ScratchServer, VerifyError> {
        let server = |e: String| VerifyError::Server(e);
        std::fs::create_dir_all(dir).map_err(|e| server(format!("{}: {e}", dir.display())))?;
        let def = database_operator_engine::of(engine).scratch_server(dir, tools);
        run_to_end(&def.init, &dir.join("init.log")).await?;
        let log = std::fs::File::create(dir.join("server.out"))
            .map_err(|e| server(format!("server log: {e}")))?;
        let err = log
            .try_clone()
            .map_err(|e| server(format!("server log: {e}")))?;
        let binary = &def.server.program;
        let child = tokio::process::Command::new(binary)
            .without_secrets()
            .args(&def.server.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| server(format!("starting {}: {e}", binary.display())))?;
        let mut scratch = ScratchServer {
            engine,
            dir: dir.to_owned(),
            child,
            tools: tools.map(Path::to_owned),
            socket: def.socket,
            stop: def.stop,
        };
        scratch.wait_until_ready().await?;
        if let Some(setup) = &def.setup {
            scratch.query(setup).map_err(server)?;
        }
        tracing::info!(engine = %engine, dir = %dir.display(), "scratch server started");
        Ok(scratch)
    }

    /// Where the restore goes: the socket, the engine's superuser, no password.
    pub fn target(&self) -> RestoreTarget {
        RestoreTarget {
            engine: self.engine,
            host: self.socket(),
            port: DumpTarget::default_port(self.engine),
            user: DumpTarget::default_user(self.engine).to_owned(),
            password: None,
            tools: self.tools.clone(),
        }
    }

    fn socket(&self) -> String {
        self.socket.clone()
    }

    fn query(&self, text: &str) -> Result<String, String> {
        let command = restore::client_command(&self.target(), None, Some(text));
        let out = std::process::Command::new(&command.program)
            .without_secrets()
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", command.program.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    async fn wait_until_ready(&mut self) -> Result<(), VerifyError> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(VerifyError::Server(format!(
                    "exited with {status} before accepting connections: {}",
                    self.log_tail()
                )));
            }
            match self.query("SELECT 1") {
                Ok(_) => return Ok(()),
                Err(e) if tokio::time::Instant::now() > deadline => {
                    return Err(VerifyError::Server(format!(
                        "not accepting connections after {}s ({e}): {}",
                        START_TIMEOUT.as_secs(),
                        self.log_tail()
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    fn log_tail(&self) -> String {
        let mut text = String::new();
        for name in ["server.out", "server.log"] {
            if let Ok(t) = std::fs::read_to_string(self.dir.join(name)) {
                text.push_str(&t);
            }
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join(" | ")
    }

    /// Every table's rows and checksum as the engine's dump tool reads them from this server.
    pub async fn table_stats(&self) -> Result<TableSet, VerifyError> {
        let target = DumpTarget {
            engine: self.engine,
            host: self.socket(),
            port: DumpTarget::default_port(self.engine),
            user: DumpTarget::default_user(self.engine).to_owned(),
            tls_ca: None,
        };
        let file = PasswordFile::write(
            &self.dir,
            &dump::password_file_content(&target, &Secret::new(String::new())),
        )
        .map_err(|e| VerifyError::Server(format!("password file: {e}")))?;
        let command = dump::dump_command(&target, self.tools.as_deref(), file.path());
        let program = command.program.display().to_string();
        let read = |message: String| VerifyError::Read {
            program: program.clone(),
            message,
        };
        let mut child = tokio::process::Command::new(&command.program)
            .without_secrets()
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| read(e.to_string()))?;
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stats = DumpStats::new(self.engine);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = stdout
                .read(&mut chunk)
                .await
                .map_err(|e| read(e.to_string()))?;
            if n == 0 {
                break;
            }
            stats.feed(&chunk[..n]);
        }
        let status = child.wait().await.map_err(|e| read(e.to_string()))?;
        if !status.success() {
            return Err(read(status.to_string()));
        }
        Ok(stats.finish())
    }

    /// Stops the server (fast shutdown; killed if it does not stop within 30 s).
    pub async fn stop(mut self) {
        let stopped = match &self.stop {
            ScratchStop::Statement(statement) => self.query(statement).is_ok(),
            ScratchStop::Program(command) => {
                self.query("SELECT 1").is_ok()
                    && tokio::process::Command::new(&command.program)
                        .without_secrets()
                        .args(&command.args)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .await
                        .is_ok_and(|s| s.success())
            }
        };
        let waited = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        if !stopped || waited.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// Runs `command` to its end with its output in `log`; its tail is in the error when it fails.
async fn run_to_end(command: &Command, log: &Path) -> Result<(), VerifyError> {
    let server = |e: String| VerifyError::Server(e);
    let out = std::fs::File::create(log).map_err(|e| server(format!("{}: {e}", log.display())))?;
    let err = out.try_clone().map_err(|e| server(e.to_string()))?;
    let program = command.program.display();
    let status = tokio::process::Command::new(&command.program)
        .without_secrets()
        .args(&command.args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .await
        .map_err(|e| server(format!("starting {program}: {e}")))?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    Err(server(format!(
        "{program} failed ({status}): {}",
        lines[lines.len().saturating_sub(20)..].join(" | ")
    )))
}

/// The drill: restore `choice` of `layout`'s cluster into a scratch server of `engine` in
/// `scratch` (created; removed afterwards), read it back and compare with the manifest.
pub async fn verify<S: BackupStore>(
    store: &S,
    layout: &Layout,
    choice: &BackupChoice,
    engine: Engine,
    scratch: &Path,
    tools: Option<&Path>,
    policy: &restore::SignaturePolicy,
) -> Result<Verified, VerifyError> {
    let server_dir = scratch.join("server");
    let server = ScratchServer::start(engine, &server_dir, tools).await?;
    let result = async {
        let restored =
            restore::restore(store, layout, choice, &server.target(), scratch, policy).await?;
        let actual = server.table_stats().await?;
        let id = restored.manifest.id.to_string();
        let Some(expected) = &restored.manifest.tables else {
            tracing::warn!(backup = %id, "the manifest has no table statistics (taken by an older release): only the restore itself was checked");
            return Ok(Verified {
                id,
                server_version: restored.target_version,
                tables: actual,
                compared: false,
            });
        };
        let mismatches = tables::compare(expected, &actual);
        if !mismatches.is_empty() {
            return Err(VerifyError::Mismatch { id, mismatches });
        }
        Ok(Verified {
            id,
            server_version: restored.target_version,
            tables: actual,
            compared: true,
        })
    }
    .await;
    server.stop().await;
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&server_dir);
    }
    result
}
