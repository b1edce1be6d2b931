//! The `backup wal-push` and `backup wal-fetch` commands: their flags, and how they run
//! [`super::wal`] against the bucket and report to the server (exit codes, one log line).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::store::S3Store;
use super::{BucketArgs, wal};

/// Flags of `backup wal-push`.
#[derive(Debug, Args)]
pub struct WalPushArgs {
    /// The cluster and its bucket.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The file, as the server gives it (`%p`: relative to the data directory).
    pub path: PathBuf,
    /// Its name in the archive (`%f`).
    pub name: String,
    /// Give up after this many seconds (the server tries again later).
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
    /// The server's data directory, whose `global/pg_control` names the database system whose
    /// archive this is (default: the current directory, where the server runs the command).
    #[arg(long, default_value = ".")]
    pub data_dir: PathBuf,
}

/// Flags of `backup wal-fetch`.
#[derive(Debug, Args)]
pub struct WalFetchArgs {
    /// The cluster and its bucket.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The file's name in the archive (`%f`).
    pub name: String,
    /// Where to write it, as the server gives it (`%p`: relative to the data directory).
    pub path: PathBuf,
    /// Give up after this many seconds (the server asks again).
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
    /// The server's data directory, whose `global/pg_control` names the database system whose
    /// archive is read (default: the current directory, where the server runs the command; a
    /// base backup's is the system it was taken from).
    #[arg(long, default_value = ".")]
    pub data_dir: PathBuf,
}

/// `backup wal-push`: archives one file of the write-ahead log.
pub(super) async fn wal_push(args: WalPushArgs) -> anyhow::Result<()> {
    let limit = std::time::Duration::from_secs(args.timeout_seconds);
    let store = S3Store::within(&args.bucket.s3(), limit)?;
    let layout = args.bucket.layout();
    let system = wal::system_identifier(&args.data_dir)?;
    let pushed = tokio::time::timeout(
        limit,
        wal::push(&store, &layout, system, &args.path, &args.name),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "archiving {} took longer than {}s; the server tries again",
            args.name,
            args.timeout_seconds
        )
    })??;
    match pushed {
        wal::Pushed::Uploaded { key, bytes, stored } => {
            tracing::info!(%key, bytes, stored, "archived");
        }
        wal::Pushed::AlreadyArchived { key } => {
            tracing::info!(%key, "already archived with the same content");
        }
    }
    Ok(())
}

/// `backup wal-fetch`: restores one file of the write-ahead log; its own exit codes
/// ([`wal::WalFetchError::exit_code`]), and nothing said when the archive lacks the file.
pub(super) async fn wal_fetch(args: WalFetchArgs) -> ExitCode {
    let limit = std::time::Duration::from_secs(args.timeout_seconds);
    let store = match S3Store::within(&args.bucket.s3(), limit) {
        Ok(store) => store,
        Err(e) => {
            tracing::error!(error = %e, "the bucket cannot be used");
            return ExitCode::from(wal::STOP_RECOVERY_EXIT);
        }
    };
    let layout = args.bucket.layout();
    let system = match wal::system_identifier(&args.data_dir) {
        Ok(system) => system,
        Err(e) => {
            tracing::error!(error = %e, "the data directory names no database system");
            return ExitCode::from(wal::STOP_RECOVERY_EXIT);
        }
    };
    let fetched = tokio::time::timeout(
        limit,
        wal::fetch(&store, &layout, system, &args.name, &args.path),
    )
    .await;
    match fetched {
        Ok(Ok(wal::Fetched::Restored { bytes })) => {
            tracing::info!(name = %args.name, bytes, "restored from the archive");
            ExitCode::SUCCESS
        }
        Ok(Ok(wal::Fetched::NotArchived)) => ExitCode::FAILURE,
        Ok(Err(e)) => {
            tracing::error!(name = %args.name, error = %e, "fetching from the archive failed");
            ExitCode::from(e.exit_code())
        }
        Err(_) => {
            tracing::error!(
                name = %args.name,
                "fetching from the archive took longer than {}s",
                args.timeout_seconds
            );
            ExitCode::from(wal::STOP_RECOVERY_EXIT)
        }
    }
}
