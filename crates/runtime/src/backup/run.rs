//! What the backup commands do, over a [`BackupStore`]: stream a dump into the bucket, write
//! its manifest last, apply retention, list, delete a cluster's prefix.

use crate::backup::WithoutSecrets;
use std::future::Future;
use std::process::Stdio;

use database_operator_api::{BackupMethod, Engine};
use database_operator_core::backup::signature::{self, SigningKey};
use database_operator_core::backup::tables::DumpStats;
use database_operator_core::backup::{
    self, BackupId, Catalog, Layout, Listing, Manifest, Retention,
};
use flate2::Compression;
use flate2::write::GzEncoder;
use jiff::{SignedDuration, Timestamp};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt as _, ReadBuf};

use super::dump::{DumpCommand, DumpTarget};
use super::store::{BackupStore, StoreError};

/// Size of each uploaded part but the last (S3 requires at least 5 MiB).
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// A failed backup command.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The bucket refused or failed a call.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The dump tool could not be started.
    #[error("starting {program}: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        message: String,
    },
    /// The dump tool failed (its messages are on stderr).
    #[error("{program} failed: {status}")]
    Dump {
        /// The program.
        program: String,
        /// Its exit status.
        status: String,
    },
    /// Reading the dump or compressing it failed.
    #[error("reading the dump: {0}")]
    Io(String),
    /// A backup with this id already exists (two backups in one second).
    #[error("backup {0} already exists in the bucket")]
    Exists(String),
    /// The application accounts could not be read (MySQL, MariaDB): a backup without them would
    /// lose them on restore.
    #[error("reading the application accounts: {0}")]
    Accounts(String),
    /// Writing the password file failed.
    #[error("writing the password file: {0}")]
    PasswordFile(String),
    /// A physical backup was asked of an engine that has none here.
    #[error("physical backups are taken of postgresql only, not {0}")]
    NoPhysical(Engine),
    /// No host to dump from was given.
    #[error("no host to dump from: give --host (or BACKUP_HOST), comma-separated")]
    NoHost,
}

/// What was uploaded: the stored (compressed) size and its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    /// Bytes stored.
    pub size: u64,
    /// SHA-256 of the stored bytes, lowercase hex.
    pub sha256: String,
}

/// Streams `reader` through gzip into a multipart upload of `key`, in parts of `part_size`.
/// After the end of the input, awaits `finished` (the dump's exit): the upload completes only
/// when the input was read to its end and `finished` succeeded; on any failure it is aborted,
/// so no object appears.
pub async fn upload_compressed<S, R, F>(
    store: &S,
    key: &str,
    reader: R,
    part_size: usize,
    finished: F,
) -> Result<Uploaded, BackupError>
where
    S: BackupStore,
    R: AsyncRead + Unpin,
    F: Future<Output = Result<(), BackupError>>,
{
    let upload = store.start_upload(key).await?;
    let result = async {
        let uploaded = pump(store, &upload, reader, part_size).await?;
        finished.await?;
        store.complete_upload(&upload).await?;
        Ok(uploaded)
    }
    .await;
    if let Err(e) = &result {
        tracing::warn!(key, error = %e, "backup upload failed; aborting it");
        if let Err(abort) = store.abort_upload(&upload).await {
            tracing::warn!(key, error = %abort, "aborting the upload failed; the store expires it");
        }
    }
    result
}

async fn pump<S: BackupStore, R: AsyncRead + Unpin>(
    store: &S,
    upload: &super::store::UploadId,
    mut reader: R,
    part_size: usize,
) -> Result<Uploaded, BackupError> {
    use std::io::Write as _;
    let mut gzip = GzEncoder::new(Vec::with_capacity(part_size), Compression::default());
    let mut sha = Sha256::new();
    let mut size: u64 = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = reader
            .read(&mut chunk)
            .await
            .map_err(|e| BackupError::Io(e.to_string()))?;
        if n == 0 {
            break;
        }
        gzip.write_all(&chunk[..n])
            .map_err(|e| BackupError::Io(e.to_string()))?;
        if gzip.get_ref().len() >= part_size {
            let part = std::mem::replace(gzip.get_mut(), Vec::with_capacity(part_size));
            sha.update(&part);
            size += part.len() as u64;
            store.upload_part(upload, part).await?;
        }
    }
    let last = gzip.finish().map_err(|e| BackupError::Io(e.to_string()))?;
    sha.update(&last);
    size += last.len() as u64;
    store.upload_part(upload, last).await?;
    Ok(Uploaded {
        size,
        sha256: hex(&sha.finalize()),
    })
}

/// What a backup learns from its data as it is uploaded.
enum Watch {
    /// A logical dump: every table's rows and checksum.
    Tables(DumpStats),
    /// A physical base backup: its `backup_manifest`, for the WAL range.
    Tar(super::base::TarTap),
}

impl Watch {
    fn feed(&mut self, bytes: &[u8]) {
        match self {
            Watch::Tables(stats) => stats.feed(bytes),
            Watch::Tar(tap) => tap.feed(bytes),
        }
    }
}

/// A reader that feeds everything read through it to a [`Watch`].
struct Observed<R> {
    inner: R,
    stats: Watch,
}

impl<R: AsyncRead + Unpin> AsyncRead for Observed<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &poll {
            this.stats.feed(&buf.filled()[before..]);
        }
        poll
    }
}

pub(crate) use database_operator_core::backup::hex;

/// What the server said about itself before the dump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerFacts {
    /// Its version string.
    pub version: Option<String>,
    /// Its replication position.
    pub position: Option<String>,
}

/// A finished backup and what retention did after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The manifest written.
    pub manifest: Manifest,
    /// What retention deleted.
    pub retention: Retention,
}

/// Takes one backup of `layout`'s cluster: runs `dump`, streams its output and then `appended`
/// (the accounts section of MySQL and MariaDB) into `<prefix><id>.dump.sql.gz` (a physical
/// base backup's tar into `<prefix><id>.base.tar.gz`), writes the manifest last (signed with
/// `signing`, when given), then applies retention (`retention` complete backups kept;
/// incomplete uploads older than `grace` removed). `clock` gives the times recorded.
///
/// A physical backup records the WAL range read from the `backup_manifest` inside its tar; a
/// tar without one is deleted again and the backup fails.
#[allow(clippy::too_many_arguments)]
pub async fn run_backup<S: BackupStore>(
    store: &S,
    layout: &Layout,
    engine: Engine,
    method: BackupMethod,
    dump: &DumpCommand,
    appended: &[u8],
    facts: ServerFacts,
    retention: u32,
    grace: SignedDuration,
    signing: Option<&SigningKey>,
    clock: impl Fn() -> Timestamp,
) -> Result<RunReport, BackupError> {
    let started = clock();
    let id = BackupId::at(started);
    let before = catalog(store, layout).await?;
    let exists =
        before.complete.iter().any(|b| b.id == id) || before.incomplete.iter().any(|i| i.id == id);
    if exists {
        return Err(BackupError::Exists(id.to_string()));
    }
    let data_key = layout.data_key_for(&id, method);
    let program = dump.program.display().to_string();
    tracing::info!(key = %data_key, program = %program, "backup started");
    let mut child = tokio::process::Command::new(&dump.program)
        .without_secrets()
        .args(&dump.args)
        .envs(dump.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| BackupError::Spawn {
            program: program.clone(),
            message: e.to_string(),
        })?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let finished = async {
        let status = child
            .wait()
            .await
            .map_err(|e| BackupError::Io(e.to_string()))?;
        if status.success() {
            Ok(())
        } else {
            Err(BackupError::Dump {
                program: program.clone(),
                status: status.to_string(),
            })
        }
    };
    let mut observed = Observed {
        inner: stdout.chain(std::io::Cursor::new(appended.to_vec())),
        stats: match method {
            BackupMethod::Logical => Watch::Tables(DumpStats::new(engine)),
            BackupMethod::Physical => Watch::Tar(super::base::TarTap::new(
                super::base::BACKUP_MANIFEST,
                super::base::MANIFEST_LIMIT,
            )),
        },
    };
    let uploaded = upload_compressed(store, &data_key, &mut observed, PART_SIZE, finished).await?;
    let (tables, wal) = match observed.stats {
        Watch::Tables(stats) => (Some(stats.finish()), None),
        Watch::Tar(tap) => {
            let range = tap.finish().and_then(|m| super::base::wal_range(&m));
            match range {
                Ok(range) => (None, Some(range)),
                Err(why) => {
                    tracing::warn!(key = %data_key, %why, "the base backup is unusable; deleting it");
                    if let Err(error) = store.delete(&data_key).await {
                        tracing::warn!(key = %data_key, %error, "could not delete it; retention removes it after the grace period");
                    }
                    return Err(BackupError::Io(format!("the base backup's tar: {why}")));
                }
            }
        }
    };
    let manifest = Manifest {
        namespace: layout.namespace().to_owned(),
        cluster: layout.name().to_owned(),
        id: id.clone(),
        engine,
        method,
        wal,
        server_version: facts.version.unwrap_or_default(),
        position: facts.position,
        size: uploaded.size,
        sha256: uploaded.sha256,
        started,
        finished: clock(),
        tables,
    };
    let stored = match signing {
        Some(key) => signature::sign(manifest.to_json().as_bytes(), key)
            .map_err(|e| BackupError::Io(format!("signing the manifest: {e}")))?,
        None => {
            tracing::warn!(
                "no signing key ({}): the manifest is stored unsigned, and restores and drills \
                 refuse it unless told to skip the signature check",
                super::SIGNING_KEY_ENV
            );
            manifest.to_json()
        }
    };
    store
        .put(&layout.manifest_key(&id), stored.into_bytes())
        .await?;
    tracing::info!(key = %data_key, size = manifest.size, sha256 = %manifest.sha256, "backup stored");
    // The backup is stored: retention that cannot delete (a bucket that refuses deletes, a
    // listing that fails now) is reported, not a failed backup.
    let retention = match apply_retention(store, layout, retention, clock(), grace).await {
        Ok(retention) => retention,
        Err(error) => {
            tracing::warn!(%error, "retention could not run; every older backup is kept");
            Retention {
                kept: before.complete.len() + 1,
                error: Some(error.to_string()),
                ..Retention::default()
            }
        }
    };
    Ok(RunReport {
        manifest,
        retention,
    })
}

/// Lists `layout`'s prefix, reads every manifest, and classifies what is there. A manifest
/// that cannot be read leaves its backup incomplete (not counted, not deleted as a backup).
pub async fn catalog<S: BackupStore>(store: &S, layout: &Layout) -> Result<Catalog, BackupError> {
    let objects = store.list(layout.prefix()).await?;
    let mut listing = Listing {
        objects,
        manifests: Default::default(),
    };
    for object in &listing.objects {
        if let Some(backup::KeyKind::Manifest(_)) = layout.classify_key(&object.key) {
            match store.get(&object.key).await {
                Ok(bytes) => {
                    listing.manifests.insert(object.key.clone(), bytes);
                }
                Err(e) => tracing::warn!(error = %e, "could not read a manifest"),
            }
        }
    }
    Ok(backup::classify(layout, &listing))
}

/// Deletes what [`backup::select_retention`] selects, from a fresh catalog: expired backups
/// (manifest first), then stale incomplete uploads. The first delete that fails stops it: what
/// is left is kept, and [`Retention::error`] says why and [`Retention::kept`] counts the
/// complete backups that remain (a backup whose manifest was deleted no longer counts). Only a
/// listing that fails is an error.
pub async fn apply_retention<S: BackupStore>(
    store: &S,
    layout: &Layout,
    retention: u32,
    now: Timestamp,
    grace: SignedDuration,
) -> Result<Retention, BackupError> {
    let catalog = catalog(store, layout).await?;
    let mut selected = backup::select_retention(layout, &catalog, retention, now, grace);
    let manifests: Vec<String> = catalog
        .complete
        .iter()
        .map(|b| b.manifest_key.clone())
        .collect();
    let mut gone = 0;
    let keys = selected
        .delete
        .iter()
        .chain(&selected.stale_incomplete)
        .chain(&selected.archive_pruned);
    for key in keys {
        // select_retention never returns a key outside the prefix; checked again at the edge.
        if !layout.owns(key) {
            continue;
        }
        if let Err(error) = store.delete(key).await {
            tracing::warn!(key = %key, %error, "retention could not delete; the rest is kept");
            selected.error = Some(error.to_string());
            break;
        }
        if manifests.contains(key) {
            gone += 1;
        }
        tracing::info!(key = %key, "deleted by retention");
    }
    selected.kept = catalog.complete.len() - gone;
    Ok(selected)
}

/// Deletes every object under `layout`'s prefix and nothing else (`deletionPolicy: Delete`).
/// Manifests go first, so an interrupted run leaves no backup that still counts. Returns how
/// many objects were deleted.
pub async fn delete_prefix<S: BackupStore>(
    store: &S,
    layout: &Layout,
) -> Result<usize, BackupError> {
    let mut keys: Vec<String> = store
        .list(layout.prefix())
        .await?
        .into_iter()
        .map(|o| o.key)
        .filter(|k| layout.owns(k))
        .collect();
    keys.sort_by_key(|k| !k.ends_with(backup::MANIFEST_SUFFIX));
    for key in &keys {
        store.delete(key).await?;
    }
    Ok(keys.len())
}

/// The catalog as text for `backup list`.
pub fn format_catalog(layout: &Layout, catalog: &Catalog) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} complete backup(s) under {}",
        catalog.complete.len(),
        layout.prefix()
    );
    for b in &catalog.complete {
        let m = &b.manifest;
        let _ = writeln!(
            out,
            "  {}  {} {}  {} bytes  sha256 {}  position {}  {} .. {}",
            b.id,
            m.engine,
            m.server_version,
            m.size,
            m.sha256,
            m.position.as_deref().unwrap_or("-"),
            m.started,
            m.finished
        );
    }
    if !catalog.incomplete.is_empty() {
        let _ = writeln!(
            out,
            "{} incomplete (not backups):",
            catalog.incomplete.len()
        );
        for i in &catalog.incomplete {
            let _ = writeln!(out, "  {}  {}  {}", i.id, i.reason, i.keys.join(" "));
        }
    }
    for key in &catalog.unrecognised {
        let _ = writeln!(out, "  other object: {key}");
    }
    let (files, bytes) = catalog.archive_size();
    if files > 0 {
        let _ = writeln!(
            out,
            "WAL archive: {files} file(s), {bytes} bytes under {}",
            database_operator_core::backup::wal::wal_prefix(layout)
        );
    }
    out
}

/// How long `backup run` waits before dumping from the next host after a dump failed (a
/// backup's id is its start second: the next one must start in another second).
pub const NEXT_HOST_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `dump` against the first of `targets` whose server answers `ask`, with what it
/// answered; when that dump fails ([`BackupError::Dump`]: the server went away, a replica
/// cancelled the dump's query), waits `pause` and goes on with the next target that answers,
/// so a replica that fails the backup never fails it while the primary can take it. When no
/// server answers, the last target is dumped with nothing known (the dump then decides
/// whether the backup fails, and says why in its own words).
pub async fn dump_first_that_works<T>(
    targets: impl IntoIterator<Item = DumpTarget>,
    ask: impl AsyncFn(&DumpTarget) -> Result<ServerFacts, String>,
    dump: impl AsyncFn(&DumpTarget, ServerFacts) -> Result<T, BackupError>,
    pause: std::time::Duration,
) -> Result<T, BackupError> {
    let mut last = None;
    let mut failed: Option<BackupError> = None;
    for target in targets {
        match ask(&target).await {
            Ok(facts) => {
                if failed.is_some() {
                    tokio::time::sleep(pause).await;
                }
                match dump(&target, facts).await {
                    Err(error @ (BackupError::Dump { .. } | BackupError::Accounts(_))) => {
                        tracing::warn!(host = %target.host, %error, "the dump failed; trying the next host");
                        failed = Some(error);
                    }
                    other => return other,
                }
            }
            Err(error) => {
                tracing::warn!(host = %target.host, %error, "server does not answer; trying the next host");
                last = Some(target);
            }
        }
    }
    if let Some(error) = failed {
        return Err(error);
    }
    match last {
        Some(target) => dump(&target, ServerFacts::default()).await,
        None => Err(BackupError::NoHost),
    }
}

#[cfg(test)]
mod tests;
