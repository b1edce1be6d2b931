//! `backup restore --data-dir`: a physical base backup unpacked into a new data directory,
//! set up to recover from the archive to a point (PostgreSQL).
//!
//! Order, so that nothing is written unless everything checks out: choose the base backup for
//! the target ([`restore::choose_for_target`]); read its manifest again and check its signature;
//! refuse a server of another major release ([`restore::check_restorable`]); download the tar
//! and refuse it unless size and SHA-256 match the manifest; only then unpack it into the empty
//! directory ([`base::unpack`]) and write `recovery.signal` and a `postgresql.auto.conf` that
//! holds nothing but the recovery settings ([`restore::recovery_settings`]): the source's
//! `ALTER SYSTEM` settings (its standby names, a fence's read-only default) are not the new
//! cluster's. A server started on the directory replays the archive to the target and
//! promotes; the caller then sets the new cluster's passwords and resets those settings.

use std::path::{Path, PathBuf};

use clap::Args;
use database_operator_api::BackupMethod;
use database_operator_core::backup::restore::{self, BackupChoice, RecoveryTarget};
use database_operator_core::backup::{Layout, Manifest};

use super::base;
use super::restore::{PrivateDir, RestoreError, SignaturePolicy, checked_manifest, sha256_of};
use super::store::{BackupStore, S3Store};
use super::{BucketArgs, signing_key};

/// Flags of `backup choose`, and the source of `backup unpack`: which backup of which cluster,
/// recovered to where.
#[derive(Debug, Args)]
pub struct ChooseArgs {
    /// The cluster whose backup is restored, and its bucket.
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// The backup: `latest` or its id (`20260301T020000Z`).
    #[arg(long, env = "RESTORE_BACKUP", default_value = "latest")]
    pub backup: String,
    /// Where the recovery stops.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Where a recovery from the archive stops (neither: the end of the archive).
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Every transaction committed at or before this time (RFC 3339), none after it.
    #[arg(long, env = "RESTORE_TARGET_TIME", conflicts_with = "target_lsn")]
    pub target_time: Option<String>,
    /// Every transaction committed at or before this WAL position (`0/3000100`).
    #[arg(long, env = "RESTORE_TARGET_LSN")]
    pub target_lsn: Option<String>,
}

impl TargetArgs {
    /// The target the flags name.
    pub fn target(&self) -> anyhow::Result<RecoveryTarget> {
        match (&self.target_time, &self.target_lsn) {
            (Some(time), _) if !time.is_empty() => {
                time.parse().map(RecoveryTarget::Time).map_err(|e| {
                    anyhow::anyhow!("--target-time {time:?} is not an RFC 3339 time: {e}")
                })
            }
            (_, Some(lsn)) if !lsn.is_empty() => lsn
                .parse()
                .map(RecoveryTarget::Lsn)
                .map_err(|e| anyhow::anyhow!("--target-lsn {lsn:?}: {e}")),
            _ => Ok(RecoveryTarget::End),
        }
    }
}

/// Flags of `backup unpack`.
#[derive(Debug, Args)]
pub struct UnpackArgs {
    /// The backup, its cluster and bucket, and the target.
    #[command(flatten)]
    pub source: ChooseArgs,
    /// The new data directory (absent or empty).
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// What the server that starts on it says of itself (`postgres --version`): a base backup
    /// restores only into its own major release.
    #[arg(long)]
    pub server_version: String,
    /// This program as the server runs it in its restore command (default: this binary).
    #[arg(long, value_name = "FILE")]
    pub program: Option<PathBuf>,
    /// Where to write the report of a successful unpack (one JSON line).
    #[arg(long, env = "BACKUP_REPORT_FILE", value_name = "FILE")]
    pub report_file: Option<PathBuf>,
    /// Restore without checking the manifest's signature.
    #[arg(long, env = "BACKUP_SKIP_SIGNATURE_CHECK")]
    pub skip_signature_check: bool,
}

/// `backup choose`: prints the method and id of the backup a restore starts from
/// (`physical 20260301T020000Z`).
pub(super) async fn choose_cli(args: ChooseArgs) -> anyhow::Result<()> {
    let choice = BackupChoice::parse(&args.backup)?;
    let store = S3Store::new(&args.bucket.s3())?;
    let (method, id) = choose(
        &store,
        &args.bucket.layout(),
        &choice,
        args.target.target()?,
    )
    .await?;
    println!("{} {id}", method.as_str());
    Ok(())
}

/// `backup unpack`: a base backup into a new data directory, set up to recover.
pub(super) async fn unpack_cli(args: UnpackArgs) -> anyhow::Result<()> {
    let choice = BackupChoice::parse(&args.source.backup)?;
    let target = args.source.target.target()?;
    let store = S3Store::new(&args.source.bucket.s3())?;
    let layout = args.source.bucket.layout();
    let program = match &args.program {
        Some(p) => p.clone(),
        None => std::env::current_exe()?,
    };
    let command = restore_command(
        &program,
        &layout,
        &args.source.bucket.bucket,
        args.source.bucket.endpoint.as_deref(),
        args.source.bucket.region.as_deref(),
    );
    let policy = SignaturePolicy::new(signing_key()?, args.skip_signature_check);
    // The download goes under TMPDIR (the init script gives a directory of its own on the data
    // volume, which it empties before and after).
    let temp = std::env::temp_dir();
    let unpacked = unpack_base(
        &store,
        &layout,
        &choice,
        target,
        &args.server_version,
        &args.data_dir,
        &command,
        &temp,
        &policy,
    )
    .await?;
    println!(
        "unpacked {}{} ({} {}, {} bytes, sha256 {} verified, {} entries) into {}; it recovers to {}",
        layout.prefix(),
        unpacked.manifest.id,
        unpacked.manifest.engine,
        unpacked.manifest.server_version,
        unpacked.manifest.size,
        unpacked.manifest.sha256,
        unpacked.entries,
        args.data_dir.display(),
        unpacked.target
    );
    if let Some(path) = &args.report_file {
        let report = database_operator_core::backup::RestoreReport {
            restored: unpacked.manifest.id.to_string(),
            key: layout.data_key_for(&unpacked.manifest.id, BackupMethod::Physical),
            cluster: format!(
                "{}/{}",
                args.source.bucket.namespace, args.source.bucket.cluster
            ),
            target: Some(unpacked.target.to_string()),
            // The init script adds it once the recovery has promoted.
            reached: None,
        };
        if let Err(error) = std::fs::write(path, report.to_json()) {
            tracing::warn!(path = %path.display(), %error, "could not write the restore report");
        }
    }
    Ok(())
}

/// The header of the `postgresql.auto.conf` a restore writes.
const AUTO_CONF_HEADER: &str = "# Do not edit this file manually!\n\
# It will be overwritten by the ALTER SYSTEM command.\n\
# Written by database-operator's restore: the recovery from the archive.\n";

/// What was unpacked.
#[derive(Clone, Debug)]
pub struct Unpacked {
    /// The manifest of the base backup.
    pub manifest: Manifest,
    /// The target the recovery is set up for.
    pub target: RecoveryTarget,
    /// Entries of the tar written.
    pub entries: u64,
}

/// Which backup a restore of `choice` to `target` starts from, and its method: what the init
/// script asks first (`backup restore --choose-only`), to know whether to unpack a base
/// backup or to restore a dump into a fresh server.
pub async fn choose<S: BackupStore>(
    store: &S,
    layout: &Layout,
    choice: &BackupChoice,
    target: RecoveryTarget,
) -> Result<(BackupMethod, String), RestoreError> {
    let catalog = super::run::catalog(store, layout).await?;
    let backup = restore::choose_for_target(&catalog, choice, target, layout.prefix())?;
    Ok((backup.manifest.method, backup.id.to_string()))
}

/// The restore command of a server recovering from `layout`'s archive: `program backup
/// wal-fetch %f %p` with the source's cluster and bucket as flags, each word quoted for the
/// shell the server runs it with (the bucket's keys come from the server's environment).
pub fn restore_command(
    program: &Path,
    layout: &Layout,
    bucket: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> String {
    // PostgreSQL replaces `%f`, `%p` (and `%r`) anywhere in the command and refuses other
    // `%` sequences: a `%` of ours is written `%%`.
    let word = |text: &str| shell_quote(&text.replace('%', "%%"));
    let mut words = vec![
        word(&program.display().to_string()),
        "backup".to_owned(),
        "wal-fetch".to_owned(),
        "%f".to_owned(),
        "%p".to_owned(),
        word(&format!("--namespace={}", layout.namespace())),
        word(&format!("--cluster={}", layout.name())),
        word(&format!("--bucket={bucket}")),
    ];
    if let Some(endpoint) = endpoint {
        words.push(word(&format!("--endpoint={endpoint}")));
    }
    if let Some(region) = region {
        words.push(word(&format!("--region={region}")));
    }
    words.join(" ")
}

/// `text` as one shell word: in single quotes, a quote in it written `'\''`; a word of plain
/// characters as it is.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_=./:%,@".contains(&b));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// A `postgresql.auto.conf` holding only `settings`, each value quoted as `ALTER SYSTEM` writes
/// it (a backslash and a quote doubled: the file's parser reads backslash escapes).
pub fn auto_conf(settings: &[(String, String)]) -> String {
    let mut out = AUTO_CONF_HEADER.to_owned();
    for (name, value) in settings {
        let quoted = value.replace('\\', r"\\").replace('\'', "''");
        out.push_str(&format!("{name} = '{quoted}'\n"));
    }
    out
}

/// Unpacks the base backup `choice` names (for `target`) into `data_dir` (absent or empty) and
/// sets it up to recover with `restore_command`; `server_version` is what the server that will
/// start on it says of itself (`postgres --version`). `temp` holds the download.
#[allow(clippy::too_many_arguments)]
pub async fn unpack_base<S: BackupStore>(
    store: &S,
    layout: &Layout,
    choice: &BackupChoice,
    target: RecoveryTarget,
    server_version: &str,
    data_dir: &Path,
    restore_command: &str,
    temp: &Path,
    policy: &SignaturePolicy,
) -> Result<Unpacked, RestoreError> {
    let catalog = super::run::catalog(store, layout).await?;
    let backup = restore::choose_for_target(&catalog, choice, target, layout.prefix())?.clone();
    let manifest = checked_manifest(store, layout, &backup, policy).await?;
    if manifest.method != BackupMethod::Physical {
        return Err(RestoreError::Io(format!(
            "backup {} is a logical backup: it is restored into a running server, not unpacked",
            backup.id
        )));
    }
    restore::check_restorable(&manifest, manifest.engine, server_version)?;
    let empty = match std::fs::read_dir(data_dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(RestoreError::Io(format!("{}: {e}", data_dir.display()))),
    };
    if !empty {
        return Err(RestoreError::Io(format!(
            "{} is not empty; a base backup is unpacked only into an empty directory",
            data_dir.display()
        )));
    }
    tracing::info!(backup = %backup.id, %target, "restoring a base backup");
    let dir = PrivateDir::new(temp).map_err(|e| RestoreError::Io(format!("temp dir: {e}")))?;
    let file = dir.0.join("base.tar.gz");
    let size = store.download(&backup.data_key, &file).await?;
    let sha256 = sha256_of(&file)?;
    restore::check_download(&manifest, size, &sha256)?;
    tracing::info!(backup = %backup.id, size, "base backup downloaded and verified");

    let to = data_dir.to_owned();
    let entries = tokio::task::spawn_blocking(move || -> Result<u64, RestoreError> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&to)
            .map_err(|e| RestoreError::Io(format!("{}: {e}", to.display())))?;
        let input = std::fs::File::open(&file).map_err(|e| RestoreError::Io(e.to_string()))?;
        base::unpack(flate2::read::GzDecoder::new(input), &to).map_err(RestoreError::Io)
    })
    .await
    .map_err(|e| RestoreError::Io(e.to_string()))??;
    // A backup_label says where replay starts: it is in the tar, and must stay.
    if !data_dir.join("backup_label").exists() {
        return Err(RestoreError::Io(
            "the base backup has no backup_label; it cannot be recovered".to_owned(),
        ));
    }
    let settings = restore::recovery_settings(target, restore_command);
    let write = |name: &str, content: &str| {
        std::fs::write(data_dir.join(name), content)
            .map_err(|e| RestoreError::Io(format!("writing {name}: {e}")))
    };
    write("postgresql.auto.conf", &auto_conf(&settings))?;
    write("recovery.signal", "")?;
    tracing::info!(backup = %backup.id, entries, "base backup unpacked; the server recovers from the archive when it starts");
    Ok(Unpacked {
        manifest,
        target,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restore_command_quotes_what_the_shell_would_read() {
        let layout = Layout::new("shop", "orders");
        let plain = restore_command(
            Path::new("/operator/database-operator"),
            &layout,
            "orders-backups",
            Some("http://127.0.0.1:9000"),
            None,
        );
        assert_eq!(
            plain,
            "/operator/database-operator backup wal-fetch %f %p --namespace=shop --cluster=orders --bucket=orders-backups --endpoint=http://127.0.0.1:9000"
        );
        let odd = restore_command(
            Path::new("/op dir/db"),
            &layout,
            "b",
            Some("http://h/x';touch /tmp/p;'"),
            Some("eu-1"),
        );
        assert_eq!(
            odd,
            r"'/op dir/db' backup wal-fetch %f %p --namespace=shop --cluster=orders --bucket=b '--endpoint=http://h/x'\'';touch /tmp/p;'\''' --region=eu-1"
        );
        // A `%` of the endpoint is not one of PostgreSQL's placeholders.
        let percent = restore_command(
            Path::new("/op/db"),
            &layout,
            "b",
            Some("http://h/a%2Fb%p"),
            None,
        );
        assert!(
            percent.ends_with(" --endpoint=http://h/a%%2Fb%%p"),
            "{percent}"
        );
        // The shell reads each quoted word back as it was.
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "printf '%s\\n' {}",
                    &odd[odd.find("--endpoint").unwrap() - 1..]
                ),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "--endpoint=http://h/x';touch /tmp/p;'\n--region=eu-1\n"
        );
    }

    #[test]
    fn the_auto_conf_holds_only_the_recovery_settings_quoted() {
        let conf = auto_conf(&[
            ("restore_command".to_owned(), r"a 'b' %f c:\d".to_owned()),
            ("recovery_target_action".to_owned(), "promote".to_owned()),
        ]);
        assert!(
            conf.starts_with("# Do not edit this file manually!\n"),
            "{conf}"
        );
        assert!(
            conf.ends_with(
                "restore_command = 'a ''b'' %f c:\\\\d'\nrecovery_target_action = 'promote'\n"
            ),
            "{conf}"
        );
    }
}
