//! `database-operator backup …`: logical backups to S3, run by the backup Job inside the
//! engine's own image (the binary is copied in by an init container).
//!
//! - `backup run`: dumps the server with the engine's tool ([`dump`]), streams the dump
//!   through gzip and SHA-256 into a multipart upload, writes the manifest last, then applies
//!   retention. Any failure aborts the upload: nothing that counts as a backup remains.
//! - `backup list`: prints the catalog (complete backups; incomplete uploads apart).
//! - `backup delete-prefix`: deletes the cluster's prefix (`deletionPolicy: Delete`).
//! - `backup restore`: restores one backup into a server.
//! - `backup verify`: a restore drill ([`verify`]): the newest backup into a scratch server,
//!   every table compared with the manifest.
//!
//! The layout, manifests, catalog and retention decisions are pure, in
//! [`database_operator_core::backup`]; this module does the IO, through [`store::BackupStore`].
//! Secrets come from the environment only: `DB_PASSWORD` (the database password, written to a
//! 0600 file the dump tool reads), `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (or the pod's
//! cloud identity), `BACKUP_SIGNING_KEY` (the cluster's backup signing key: `backup run` signs
//! its manifest, `backup restore` and `backup verify` check one).

pub mod base;
pub mod base_restore;
pub mod dump;
pub mod restore;
mod secrets;
use secrets::signing_key;
mod servers;
pub use secrets::{
    PASSWORD_ENV, REPLICATION_PASSWORD_ENV, SECRET_VARIABLES, SIGNING_KEY_ENV, WithoutSecrets,
};
use servers::{accounts_section, server_facts};
pub mod run;
pub mod store;
pub mod verify;
pub mod wal;
mod wal_cli;
pub use wal_cli::{WalFetchArgs, WalPushArgs};
use wal_cli::{wal_fetch, wal_push};

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use database_operator_api::{BackupMethod, Engine};
use database_operator_core::backup::failure::BackupFailure;
use database_operator_core::backup::{DEFAULT_INCOMPLETE_GRACE, Layout};
use jiff::{SignedDuration, Timestamp};

use crate::database::statements::Secret;
use crate::telemetry::{self, LogFormat};
use dump::{DumpTarget, PasswordFile};
use run::{BackupError, ServerFacts};
use store::{S3Config, S3Store};

/// `backup` subcommands.
#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Take one backup, then apply retention.
    Run(RunArgs),
    /// Print the cluster's backups and anything incomplete under its prefix.
    List(BucketArgs),
    /// Delete every object under the cluster's prefix (deletionPolicy: Delete).
    DeletePrefix(BucketArgs),
    /// Restore one backup of the cluster into a server: checks the engine, the major release
    /// and the dump's SHA-256 against the manifest before applying anything.
    Restore(RestoreArgs),
    /// A restore drill: restore one backup (the newest by default) into a scratch server
    /// started here, then compare every table's rows and checksum with the manifest.
    Verify(VerifyArgs),
    /// Print the method and id of the backup a restore starts from (`physical
    /// 20260301T020000Z`): with a target time or LSN, the newest physical backup before it.
    Choose(base_restore::ChooseArgs),
    /// Unpack a physical base backup (PostgreSQL) into a new data directory, checked like a
    /// restore, and set it up to recover from the archive to a target when a server starts on
    /// it.
    Unpack(base_restore::UnpackArgs),
    /// PostgreSQL's archive command: upload one write-ahead log file to `<prefix>wal/`
    /// (`archive_command = '... backup wal-push %p %f'`). Never overwrites an archived file
    /// with different content.
    WalPush(WalPushArgs),
    /// PostgreSQL's restore command: fetch one write-ahead log file from `<prefix>wal/`
    /// (`restore_command = '... backup wal-fetch %f %p'`). Exits 1, silently, when the archive
    /// has no such file; 126 when the archived file is corrupt or the bucket cannot be read
    /// (the server then stops its recovery instead of ending it at the file before).
    WalFetch(WalFetchArgs),
}

/// Flags of `backup verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The cluster whose backup is restored, and its bucket.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The backup: `latest` (the newest complete one) or its id (`20260301T020000Z`).
    #[arg(long, env = "VERIFY_BACKUP", default_value = "latest")]
    pub backup: String,
    /// The engine (the scratch server's and the backup's).
    #[arg(long, env = "ENGINE", value_parser = parse_engine)]
    pub engine: Engine,
    /// Directory for the download and the scratch server (needs room for one copy of the
    /// database; default: a directory under the temporary directory).
    #[arg(long, env = "SCRATCH_DIR", value_name = "DIR")]
    pub scratch: Option<PathBuf>,
    /// Directory of the server and client programs (default: found on PATH).
    #[arg(long, value_name = "DIR")]
    pub tools: Option<PathBuf>,
    /// Restore without checking the manifest's signature (the key is read from
    /// BACKUP_SIGNING_KEY otherwise).
    #[arg(long, env = "BACKUP_SKIP_SIGNATURE_CHECK")]
    pub skip_signature_check: bool,
}

/// Flags of `backup restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The cluster whose backup is restored, and its bucket.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The backup: `latest` (the newest complete one) or its id (`20260301T020000Z`).
    #[arg(long, env = "RESTORE_BACKUP", default_value = "latest")]
    pub backup: String,
    /// The engine of the target server.
    #[arg(long, env = "ENGINE", value_parser = parse_engine)]
    pub engine: Engine,
    /// The target server: a host, or an absolute path (PostgreSQL's socket directory, the
    /// MySQL/MariaDB socket file).
    #[arg(long, env = "RESTORE_HOST")]
    pub host: String,
    /// Its port (default: the engine's).
    #[arg(long)]
    pub port: Option<u16>,
    /// The user (default: postgres or root). The password, if any, from `DB_PASSWORD`.
    #[arg(long, env = "DB_USER")]
    pub user: Option<String>,
    /// Directory of the client (default: found on PATH).
    #[arg(long, value_name = "DIR")]
    pub tools: Option<PathBuf>,
    /// Where to write the report of a successful restore (one JSON line: the backup, its key,
    /// the source cluster): the init container's termination message path.
    #[arg(long, env = "BACKUP_REPORT_FILE", value_name = "FILE")]
    pub report_file: Option<PathBuf>,
    /// Restore without checking the manifest's signature (the key is read from
    /// BACKUP_SIGNING_KEY otherwise): for a backup written before backups were signed, or whose
    /// key is lost.
    #[arg(long, env = "BACKUP_SKIP_SIGNATURE_CHECK")]
    pub skip_signature_check: bool,
}

/// Which cluster, which bucket.
#[derive(Debug, Args)]
pub struct BucketArgs {
    /// The cluster's namespace.
    #[arg(long, env = "CLUSTER_NAMESPACE")]
    pub namespace: String,
    /// The cluster's name.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster: String,
    /// The bucket.
    #[arg(long, env = "S3_BUCKET")]
    pub bucket: String,
    /// Endpoint URL of an S3-compatible store (default: AWS S3).
    #[arg(long, env = "S3_ENDPOINT")]
    pub endpoint: Option<String>,
    /// The region.
    #[arg(long, env = "AWS_DEFAULT_REGION")]
    pub region: Option<String>,
}

impl BucketArgs {
    fn layout(&self) -> Layout {
        Layout::new(&self.namespace, &self.cluster)
    }

    fn s3(&self) -> S3Config {
        S3Config {
            bucket: self.bucket.clone(),
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            credentials: None,
        }
    }
}

/// Flags of `backup run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Cluster and bucket.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The engine.
    #[arg(long, env = "ENGINE", value_parser = parse_engine)]
    pub engine: Engine,
    /// Hosts to dump from, in order of preference (comma-separated): the first whose server
    /// answers is dumped (the CronJob lists the replicas' Service, then the primary's).
    #[arg(
        long = "host",
        env = "BACKUP_HOST",
        value_delimiter = ',',
        required = true
    )]
    pub hosts: Vec<String>,
    /// Its port (default: the engine's).
    #[arg(long)]
    pub port: Option<u16>,
    /// The user (default: postgres or root; the backup Job gives the operator's admin account).
    #[arg(long, env = "DB_USER")]
    pub user: Option<String>,
    /// Directory of the dump tool (default: found on PATH).
    #[arg(long, value_name = "DIR")]
    pub tools: Option<PathBuf>,
    /// Connect over TLS and check the server's certificate against the authorities in this
    /// file for the host name dialled (the backup Job mounts the cluster's `<name>-ca` and
    /// gives its `ca.crt`). Absent: the engine's default.
    #[arg(long, env = "DB_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// How to copy the data: `logical` (the engine's dump) or `physical` (PostgreSQL:
    /// `pg_basebackup` as the replication account, whose password is in
    /// REPLICATION_PASSWORD; the WAL it needs comes from the archive, so the cluster must
    /// archive it).
    #[arg(long, env = "BACKUP_METHOD", default_value = "logical", value_parser = parse_method)]
    pub method: BackupMethod,
    /// The replication account (`--method physical`).
    #[arg(long, env = "REPLICATION_USER", default_value = "replicator")]
    pub replication_user: String,
    /// Complete backups to keep.
    #[arg(long, env = "RETENTION", default_value_t = 7)]
    pub retention: u32,
    /// Hours before an incomplete upload is removed.
    #[arg(long, default_value_t = 24)]
    pub incomplete_grace_hours: i64,
    /// Where to write the report of a successful run (one JSON line: id, key, size, backups
    /// kept): the container's termination message path, which the operator reads.
    #[arg(long, env = "BACKUP_REPORT_FILE", value_name = "FILE")]
    pub report_file: Option<PathBuf>,
}

fn parse_method(text: &str) -> Result<BackupMethod, String> {
    [BackupMethod::Logical, BackupMethod::Physical]
        .into_iter()
        .find(|m| m.as_str() == text)
        .ok_or_else(|| format!("unknown backup method {text:?} (logical or physical)"))
}

fn parse_engine(text: &str) -> Result<Engine, String> {
    Engine::ALL
        .into_iter()
        .find(|e| e.as_str() == text)
        .ok_or_else(|| format!("unknown engine {text:?} (mysql, postgresql or mariadb)"))
}

/// Copies the running binary to `dest` (written beside it under a temporary name, made
/// executable, then renamed into place, so a half-written copy is never run). Returns the size.
pub fn copy_binary(dest: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::fs::PermissionsExt as _;
    let source = std::env::current_exe()?;
    let name = dest
        .file_name()
        .ok_or_else(|| std::io::Error::other("the destination has no file name"))?;
    let partial = dest.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    let bytes = std::fs::copy(&source, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, dest)?;
    Ok(bytes)
}

/// Runs a `backup` subcommand; the one entry point `cli` dispatches to.
pub fn main(command: BackupCommand) -> ExitCode {
    telemetry::init(LogFormat::Text, "info");
    let Some(runtime) = crate::async_runtime::build(false) else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(execute(command)) {
        Ok(code) => code,
        Err(e) => {
            let failure = failure_of(&e);
            tracing::error!(error = %format!("{e:#}"), cause = ?failure, "backup command failed");
            eprintln!("error: {e:#}");
            match failure {
                Some(f) => {
                    eprintln!("cause: {}", f.describe());
                    ExitCode::from(f.exit_code())
                }
                None => ExitCode::FAILURE,
            }
        }
    }
}

/// The known cause of a failed backup command (its exit code; see
/// [`database_operator_core::backup::failure`]).
pub fn failure_of(error: &anyhow::Error) -> Option<BackupFailure> {
    error.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<BackupError>() {
            return backup_failure(e);
        }
        // A restore's errors wrap the store's and the catalog's transparently: they are not
        // in the chain of their own.
        if let Some(e) = cause.downcast_ref::<restore::RestoreError>() {
            return match e {
                restore::RestoreError::Store(store) => {
                    BackupFailure::from_store_message(&store.to_string())
                }
                restore::RestoreError::Catalog(e) => backup_failure(e),
                restore::RestoreError::Refused(
                    database_operator_core::backup::restore::RestoreRefusal::Corrupt { .. },
                ) => Some(BackupFailure::Mismatch),
                restore::RestoreError::Signature { .. } => Some(BackupFailure::Mismatch),
                restore::RestoreError::Version { .. }
                | restore::RestoreError::Apply { .. }
                | restore::RestoreError::NoSigningKey { .. }
                | restore::RestoreError::Unsafe { .. } => Some(BackupFailure::RestoreFailed),
                restore::RestoreError::Refused(_) | restore::RestoreError::Io(_) => None,
            };
        }
        if let Some(e) = cause.downcast_ref::<verify::VerifyError>() {
            return e.failure();
        }
        cause
            .downcast_ref::<store::StoreError>()
            .and_then(|store| BackupFailure::from_store_message(&store.to_string()))
    })
}

/// The cause of a failed backup step ([`failure_of`]).
fn backup_failure(e: &BackupError) -> Option<BackupFailure> {
    match e {
        BackupError::Store(store) => BackupFailure::from_store_message(&store.to_string()),
        BackupError::Spawn { .. } | BackupError::Dump { .. } | BackupError::Accounts(_) => {
            Some(BackupFailure::DumpFailed)
        }
        BackupError::Io(_)
        | BackupError::Exists(_)
        | BackupError::PasswordFile(_)
        | BackupError::NoPhysical(_)
        | BackupError::NoHost => None,
    }
}

/// Runs one `backup` subcommand.
async fn execute(command: BackupCommand) -> anyhow::Result<ExitCode> {
    match command {
        BackupCommand::List(args) => list(args).await,
        BackupCommand::DeletePrefix(args) => delete_prefix(args).await,
        BackupCommand::Restore(args) => restore_backup(args).await,
        BackupCommand::Verify(args) => verify_backup(args).await,
        BackupCommand::Run(args) => take_backup(args).await,
        BackupCommand::Choose(args) => base_restore::choose_cli(args).await,
        BackupCommand::Unpack(args) => base_restore::unpack_cli(args).await,
        BackupCommand::WalPush(args) => wal_push(args).await,
        // The restore command reports through its own exit codes, not an error.
        BackupCommand::WalFetch(args) => return Ok(wal_fetch(args).await),
    }
    .map(|()| ExitCode::SUCCESS)
}

/// `backup list`: prints the catalog.
async fn list(args: BucketArgs) -> anyhow::Result<()> {
    let store = S3Store::new(&args.s3())?;
    let layout = args.layout();
    let catalog = run::catalog(&store, &layout).await?;
    print!("{}", run::format_catalog(&layout, &catalog));
    Ok(())
}

/// `backup delete-prefix`: deletes every object under the cluster's prefix.
async fn delete_prefix(args: BucketArgs) -> anyhow::Result<()> {
    let store = S3Store::new(&args.s3())?;
    let layout = args.layout();
    let n = run::delete_prefix(&store, &layout).await?;
    println!("deleted {n} object(s) under {}", layout.prefix());
    Ok(())
}

/// `backup restore`: restores one backup into a server, then writes the report when asked.
async fn restore_backup(args: RestoreArgs) -> anyhow::Result<()> {
    let choice = database_operator_core::backup::restore::BackupChoice::parse(&args.backup)?;
    let target = restore::RestoreTarget {
        engine: args.engine,
        host: args.host.clone(),
        port: args.port.unwrap_or(DumpTarget::default_port(args.engine)),
        user: args
            .user
            .clone()
            .unwrap_or_else(|| DumpTarget::default_user(args.engine).to_owned()),
        password: std::env::var(PASSWORD_ENV).ok().map(Secret::new),
        tools: args.tools.clone(),
    };
    let store = S3Store::new(&args.bucket.s3())?;
    let layout = args.bucket.layout();
    let policy = restore::SignaturePolicy::new(signing_key()?, args.skip_signature_check);
    let restored = restore::restore(
        &store,
        &layout,
        &choice,
        &target,
        &std::env::temp_dir(),
        &policy,
    )
    .await?;
    println!(
        "restored {}{} ({} {}, {} bytes, sha256 {} verified) into {} ({}); {} line(s) of managed accounts or system schema left out",
        layout.prefix(),
        restored.manifest.id,
        restored.manifest.engine,
        restored.manifest.server_version,
        restored.manifest.size,
        restored.manifest.sha256,
        target.host,
        restored.target_version,
        restored.skipped_lines
    );
    if let Some(path) = &args.report_file {
        let report = database_operator_core::backup::RestoreReport {
            restored: restored.manifest.id.to_string(),
            key: layout.data_key(&restored.manifest.id),
            cluster: format!("{}/{}", args.bucket.namespace, args.bucket.cluster),
            target: None,
            reached: None,
        };
        // Restored: a report that cannot be written only leaves status.restoredFrom out.
        if let Err(error) = std::fs::write(path, report.to_json()) {
            tracing::warn!(path = %path.display(), %error, "could not write the restore report");
        }
    }
    Ok(())
}

/// `backup verify`: the restore drill, and what it found.
async fn verify_backup(args: VerifyArgs) -> anyhow::Result<()> {
    let choice = database_operator_core::backup::restore::BackupChoice::parse(&args.backup)?;
    let store = S3Store::new(&args.bucket.s3())?;
    let layout = args.bucket.layout();
    let scratch = args
        .scratch
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("drill-{}", std::process::id()));
    let verified = verify::verify(
        &store,
        &layout,
        &choice,
        args.engine,
        &scratch,
        args.tools.as_deref(),
        &restore::SignaturePolicy::new(signing_key()?, args.skip_signature_check),
    )
    .await?;
    for (table, stats) in &verified.tables {
        println!(
            "  {table}: {} rows, checksum {}",
            stats.rows, stats.checksum
        );
    }
    let rows: u64 = verified.tables.values().map(|t| t.rows).sum();
    if verified.compared {
        println!(
            "verified {}{}: restored into a scratch server ({}); {} table(s), {rows} row(s), every one matching the manifest",
            layout.prefix(),
            verified.id,
            verified.server_version,
            verified.tables.len()
        );
    } else {
        println!(
            "restored {}{} into a scratch server ({}): {} table(s), {rows} row(s); its manifest has no table statistics (an older release took it), so the rows were not compared",
            layout.prefix(),
            verified.id,
            verified.server_version,
            verified.tables.len()
        );
    }
    Ok(())
}

/// `backup run`: dumps the first server that answers, stores the dump, applies retention and
/// writes the report when asked.
async fn take_backup(args: RunArgs) -> anyhow::Result<()> {
    let password = Secret::new(
        std::env::var(PASSWORD_ENV)
            .map_err(|_| anyhow::anyhow!("{PASSWORD_ENV} must hold the database password"))?,
    );
    let targets = args.hosts.iter().map(|host| DumpTarget {
        engine: args.engine,
        host: host.clone(),
        port: args.port.unwrap_or(DumpTarget::default_port(args.engine)),
        user: args
            .user
            .clone()
            .unwrap_or_else(|| DumpTarget::default_user(args.engine).to_owned()),
        tls_ca: args.tls_ca.clone(),
    });
    let store = S3Store::new(&args.bucket.s3())?;
    let grace = if args.incomplete_grace_hours > 0 {
        SignedDuration::from_hours(args.incomplete_grace_hours)
    } else {
        DEFAULT_INCOMPLETE_GRACE
    };
    let signing = signing_key()?;
    let physical = args.method == BackupMethod::Physical;
    let replication = if physical {
        Some(Secret::new(std::env::var(REPLICATION_PASSWORD_ENV).map_err(|_| {
            anyhow::anyhow!(
                "{REPLICATION_PASSWORD_ENV} must hold the replication account's password for a physical backup"
            )
        })?))
    } else {
        None
    };
    let report = run::dump_first_that_works(
        targets,
        async |target: &DumpTarget| server_facts(target, &password).await,
        async |target: &DumpTarget, facts: ServerFacts| {
            let (appended, command, file) = match &replication {
                None => {
                    let appended = accounts_section(target, &password).await?;
                    let file = PasswordFile::write(
                        &std::env::temp_dir(),
                        &dump::password_file_content(target, &password),
                    )
                    .map_err(|e| BackupError::PasswordFile(e.to_string()))?;
                    let command = dump::dump_command(target, args.tools.as_deref(), file.path());
                    (appended, command, file)
                }
                Some(replication) => {
                    let target = DumpTarget {
                        user: args.replication_user.clone(),
                        ..target.clone()
                    };
                    let file = PasswordFile::write(
                        &std::env::temp_dir(),
                        &dump::password_file_content(&target, replication),
                    )
                    .map_err(|e| BackupError::PasswordFile(e.to_string()))?;
                    let command =
                        base::base_backup_command(&target, args.tools.as_deref(), file.path())
                            .ok_or(BackupError::NoPhysical(args.engine))?;
                    (Vec::new(), command, file)
                }
            };
            let report = run::run_backup(
                &store,
                &args.bucket.layout(),
                args.engine,
                args.method,
                &command,
                &appended,
                facts,
                args.retention,
                grace,
                signing.as_ref(),
                Timestamp::now,
            )
            .await;
            drop(file);
            report
        },
        run::NEXT_HOST_PAUSE,
    )
    .await?;
    let key = args
        .bucket
        .layout()
        .data_key_for(&report.manifest.id, report.manifest.method);
    println!(
        "stored {key} ({} bytes, sha256 {}); retention deleted {} backup(s), {} incomplete object(s), {} archived WAL file(s) older than every kept backup; {} complete backup(s) kept",
        report.manifest.size,
        report.manifest.sha256,
        report.retention.expired.len(),
        report.retention.stale_incomplete.len(),
        report.retention.archive_pruned.len(),
        report.retention.kept
    );
    if let Some(path) = &args.report_file {
        let summary = database_operator_core::backup::RunReport {
            id: report.manifest.id.to_string(),
            key,
            size: report.manifest.size,
            backups: u32::try_from(report.retention.kept).unwrap_or(u32::MAX),
            retention_error: report.retention.error.clone(),
        };
        // The backup is stored: a report that cannot be written only leaves the
        // status without its key and count.
        if let Err(error) = std::fs::write(path, summary.to_json()) {
            tracing::warn!(path = %path.display(), %error, "could not write the backup report");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn children_never_see_the_secret_variables() {
        let mut command = std::process::Command::new("sh");
        for name in SECRET_VARIABLES {
            command.env(name, "s3cret");
        }
        let out = command
            .env("KEPT", "visible")
            .without_secrets()
            .args(["-c", "env"])
            .output()
            .unwrap();
        let env = String::from_utf8(out.stdout).unwrap();
        assert!(env.contains("KEPT=visible"), "{env}");
        assert!(!env.contains("s3cret"), "{env}");
    }

    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: BackupCommand,
    }

    #[tokio::test]
    async fn a_server_that_cannot_be_reached_does_not_answer() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        for engine in Engine::ALL {
            let target = DumpTarget {
                engine,
                host: "127.0.0.1".to_owned(),
                port,
                user: DumpTarget::default_user(engine).to_owned(),
                tls_ca: None,
            };
            let answer = server_facts(&target, &Secret::new("pw")).await;
            assert!(answer.is_err(), "{engine}: {answer:?}");
        }
    }

    #[test]
    fn run_flags_parse() {
        let cli = Cli::try_parse_from([
            "backup",
            "run",
            "--namespace=shop",
            "--cluster=orders",
            "--bucket=backups",
            "--engine=postgresql",
            "--host=127.10.30.1",
            "--retention=2",
        ])
        .unwrap();
        let BackupCommand::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.engine, Engine::Postgresql);
        assert_eq!(args.retention, 2);
        assert_eq!(args.bucket.layout().prefix(), "shop/orders/");
        assert!(Cli::try_parse_from(["backup", "run", "--engine=oracle"]).is_err());
    }

    #[test]
    fn failures_get_the_exit_code_of_their_cause() {
        let denied = anyhow::Error::from(BackupError::Store(store::StoreError::new(
            "list",
            "shop/orders/",
            "Server returned non-2xx status code: 403 Forbidden: InvalidAccessKeyId",
        )));
        assert_eq!(failure_of(&denied), Some(BackupFailure::StorageDenied));
        let dump = anyhow::Error::from(BackupError::Dump {
            program: "pg_dumpall".into(),
            status: "exit status: 1".into(),
        })
        .context("backup run");
        assert_eq!(failure_of(&dump), Some(BackupFailure::DumpFailed));
        let other = anyhow::Error::from(BackupError::Exists("20260301T020000Z".into()));
        assert_eq!(failure_of(&other), None);
        let bare = anyhow::Error::from(store::StoreError::new(
            "list",
            "shop/orders/",
            "error sending request: Connection refused",
        ));
        assert_eq!(failure_of(&bare), Some(BackupFailure::StorageUnreachable));
        // A restore's errors: the bucket unreachable while listing (seen on a restore into a
        // new cluster through an endpoint that refused connections: it exited 1), a load that
        // failed, a missing backup.
        let listing = anyhow::Error::from(restore::RestoreError::Store(store::StoreError::new(
            "list",
            "shop/orders/",
            "Generic S3 error: Error performing list request: Error performing GET http://127.0.0.1:37293/backups?list-type=2 in 2.07s, after 10 retries - HTTP error: error sending request",
        )));
        assert_eq!(
            failure_of(&listing),
            Some(BackupFailure::StorageUnreachable)
        );
        let catalog = anyhow::Error::from(restore::RestoreError::Catalog(BackupError::Store(
            store::StoreError::new("list", "shop/orders/", "403 Forbidden"),
        )));
        assert_eq!(failure_of(&catalog), Some(BackupFailure::StorageDenied));
        let load = anyhow::Error::from(restore::RestoreError::Apply {
            id: "20260301T020000Z".into(),
            program: "psql".into(),
            status: "exit status: 3".into(),
        });
        assert_eq!(failure_of(&load), Some(BackupFailure::RestoreFailed));
        let none = anyhow::Error::from(restore::RestoreError::Refused(
            database_operator_core::backup::restore::RestoreRefusal::NoBackup {
                prefix: "shop/orders/".into(),
            },
        ));
        assert_eq!(failure_of(&none), None);
    }

    #[test]
    fn copy_binary_writes_an_executable_copy_of_this_program() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("database-operator");
        let bytes = copy_binary(&dest).unwrap();
        let source = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(bytes, source.len() as u64);
        assert_eq!(std::fs::read(&dest).unwrap(), source);
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        // Nothing partial left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(copy_binary(&dir.path().join("missing/dir/x")).is_err());
    }
}
