//! Backups in the bucket: where they are stored, what a backup is, which ones retention deletes.
//!
//! Everything a cluster stores lives under its own prefix, `<namespace>/<name>/`
//! ([`cluster_prefix`], the one source of it; the backup CronJob and the cleanup job use it too).
//! One backup is two objects named by the UTC second it started ([`BackupId`],
//! `20260301T020000Z`):
//!
//! - `<prefix><id>.dump.sql.gz`: the gzip-compressed logical dump ([`Layout::data_key`]), or
//!   `<prefix><id>.base.tar.gz`: the gzip-compressed tar of a physical base backup
//!   (PostgreSQL's `pg_basebackup`, [`Layout::data_key_for`]);
//! - `<prefix><id>.manifest.json`: its [`Manifest`] ([`Layout::manifest_key`]), written only
//!   after the dump is completely uploaded.
//!
//! The dump's suffix differs from the `<timestamp>.sql.gz` of the former `backup.sh`, so such
//! dumps (which have no manifest) are unrecognised objects: never counted, never deleted.
//!
//! The runtime lists the prefix and reads the manifests ([`Listing`]); [`classify`] turns that
//! into a [`Catalog`]. A backup counts only when its dump exists, its manifest parses, belongs
//! to this cluster and this backup, and records the dump's size as stored ([`Backup`]).
//! Everything else under the prefix is reported ([`Incomplete`], [`Catalog::unrecognised`]) and
//! never counted. [`select_retention`] then says which backups to delete: only complete ones
//! beyond the newest `retention`, never the newest, never a key outside the prefix; incomplete
//! uploads older than a grace period are listed apart.
//!
//! Pure: no clock (`now` is an argument), no IO.

use std::collections::BTreeMap;
use std::fmt;

use database_operator_api::{BackupMethod, Engine};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// The manifest format this code writes and reads.
pub const MANIFEST_FORMAT_VERSION: u32 = 1;
/// The `kind` every manifest carries, so that other JSON under the prefix is not taken for one.
pub const MANIFEST_KIND: &str = "database-operator.backup";
/// Suffix of a backup's dump object.
pub const DATA_SUFFIX: &str = ".dump.sql.gz";
/// Suffix of a physical base backup's object (a gzip-compressed tar).
pub const BASE_SUFFIX: &str = ".base.tar.gz";
/// Suffix of a backup's manifest object.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";
/// How a dump is compressed (the only value written and accepted).
pub const COMPRESSION: &str = "gzip";
/// How long an object without its partner may stay before it is reported as stale: longer than
/// any backup's upload of the manifest after its dump.
pub const DEFAULT_INCOMPLETE_GRACE: SignedDuration = SignedDuration::from_hours(24);

const ID_FORMAT: &str = "%Y%m%dT%H%M%SZ";
const ID_LEN: usize = 16;

/// Key prefix of a cluster's backups in the bucket: `<namespace>/<name>/`.
pub fn cluster_prefix(namespace: &str, name: &str) -> String {
    [namespace, "/", name, "/"].concat()
}

/// A backup's name: the UTC second its dump started, `YYYYMMDDTHHMMSSZ`. Ordering the names
/// orders the backups in time.
/// The instant is kept beside the text, so that reading it back never parses (or fails).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackupId {
    text: String,
    at: Timestamp,
}

impl BackupId {
    /// The id of a backup started at `started` (sub-second precision dropped).
    pub fn at(started: Timestamp) -> BackupId {
        let text = started.strftime(ID_FORMAT).to_string();
        let at = Timestamp::from_second(started.as_second()).unwrap_or(started);
        BackupId { text, at }
    }

    /// Parses an id; `None` unless `text` is exactly `YYYYMMDDTHHMMSSZ` naming a valid time.
    pub fn parse(text: &str) -> Option<BackupId> {
        if text.len() != ID_LEN || !text.is_ascii() {
            return None;
        }
        let bytes = text.as_bytes();
        let shape_ok = bytes.iter().enumerate().all(|(i, b)| match i {
            8 => *b == b'T',
            15 => *b == b'Z',
            _ => b.is_ascii_digit(),
        });
        if !shape_ok {
            return None;
        }
        let at = jiff::civil::DateTime::strptime(ID_FORMAT, text)
            .and_then(|t| t.to_zoned(jiff::tz::TimeZone::UTC))
            .ok()?
            .timestamp();
        Some(BackupId {
            text: text.to_owned(),
            at,
        })
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The instant the id names.
    pub fn timestamp(&self) -> Timestamp {
        self.at
    }
}

impl fmt::Display for BackupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The object names of one cluster's backups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    namespace: String,
    name: String,
    prefix: String,
}

/// What an object key under a cluster's prefix is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// A backup's data: a logical dump or a physical base backup.
    Data(BackupId, BackupMethod),
    /// A backup's manifest.
    Manifest(BackupId),
}

impl Layout {
    /// The layout of the cluster `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> Layout {
        Layout {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            prefix: cluster_prefix(namespace, name),
        }
    }

    /// The cluster's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `<namespace>/<name>/`: every key of this cluster starts with it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether `key` lies under this cluster's prefix.
    pub fn owns(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
    }

    /// `<prefix><id>.dump.sql.gz`: a logical backup's dump.
    pub fn data_key(&self, id: &BackupId) -> String {
        self.data_key_for(id, BackupMethod::Logical)
    }

    /// The data object of a backup taken with `method`: `<prefix><id>.dump.sql.gz` or
    /// `<prefix><id>.base.tar.gz`.
    pub fn data_key_for(&self, id: &BackupId, method: BackupMethod) -> String {
        [self.prefix.as_str(), id.as_str(), data_suffix(method)].concat()
    }

    /// `<prefix><id>.manifest.json`.
    pub fn manifest_key(&self, id: &BackupId) -> String {
        [self.prefix.as_str(), id.as_str(), MANIFEST_SUFFIX].concat()
    }

    /// What `key` is; `None` for keys outside the prefix or not of a backup's shape (objects in
    /// sub-folders included).
    pub fn classify_key(&self, key: &str) -> Option<KeyKind> {
        let rest = key.strip_prefix(&self.prefix)?;
        for method in [BackupMethod::Logical, BackupMethod::Physical] {
            if let Some(id) = rest.strip_suffix(data_suffix(method)) {
                return BackupId::parse(id).map(|id| KeyKind::Data(id, method));
            }
        }
        if let Some(id) = rest.strip_suffix(MANIFEST_SUFFIX) {
            return BackupId::parse(id).map(KeyKind::Manifest);
        }
        None
    }
}

/// The suffix of the data object of a backup taken with `method`.
pub fn data_suffix(method: BackupMethod) -> &'static str {
    match method {
        BackupMethod::Logical => DATA_SUFFIX,
        BackupMethod::Physical => BASE_SUFFIX,
    }
}

/// One object as the bucket listed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// Its full key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written.
    pub last_modified: Timestamp,
}

/// What the runtime read from the bucket: every object under the prefix, and the content of each
/// manifest object it could read (by key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The objects listed.
    pub objects: Vec<ListedObject>,
    /// The bodies of the manifest objects, by key.
    pub manifests: BTreeMap<String, Vec<u8>>,
}

/// A complete backup: its dump and a valid manifest that matches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backup {
    /// Its id.
    pub id: BackupId,
    /// Key of the dump.
    pub data_key: String,
    /// Key of the manifest.
    pub manifest_key: String,
    /// The manifest.
    pub manifest: Manifest,
}

/// Why objects under the prefix do not make a backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IncompleteReason {
    /// A dump without a manifest: an upload that did not finish, or is finishing now.
    NoManifest,
    /// A manifest without its dump.
    NoData,
    /// The manifest object was listed but its content was not read.
    ManifestUnread,
    /// The manifest is not acceptable.
    InvalidManifest(ManifestError),
    /// The dump stored is not the size the manifest records.
    SizeMismatch {
        /// The size in the manifest.
        manifest: u64,
        /// The size of the stored dump.
        stored: u64,
    },
}

impl fmt::Display for IncompleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IncompleteReason::NoManifest => f.write_str("dump without manifest"),
            IncompleteReason::NoData => f.write_str("manifest without dump"),
            IncompleteReason::ManifestUnread => f.write_str("manifest could not be read"),
            IncompleteReason::InvalidManifest(e) => write!(f, "invalid manifest: {e}"),
            IncompleteReason::SizeMismatch { manifest, stored } => {
                write!(f, "dump is {stored} bytes, the manifest records {manifest}")
            }
        }
    }
}

/// Objects of one backup id that do not make a complete backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incomplete {
    /// The id their keys name.
    pub id: BackupId,
    /// Their keys (under the prefix).
    pub keys: Vec<String>,
    /// The latest time any of them was written.
    pub last_modified: Timestamp,
    /// What is wrong.
    pub reason: IncompleteReason,
}

/// What the bucket holds for one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Complete backups, oldest first.
    pub complete: Vec<Backup>,
    /// Objects that do not make a backup, by id (oldest first). Never counted as backups.
    pub incomplete: Vec<Incomplete>,
    /// Keys under the prefix of no backup's shape (sub-folders, other files): left alone.
    pub unrecognised: Vec<String>,
    /// Keys outside the prefix that the listing returned anyway: left alone.
    pub outside: Vec<String>,
    /// The files of the write-ahead log archive (`<prefix>wal/`, [`wal`]) as listed:
    /// retention prunes them ([`wal::select_pruned`]).
    pub archive: Vec<ListedObject>,
}

impl Catalog {
    /// The newest complete backup.
    pub fn newest(&self) -> Option<&Backup> {
        self.complete.last()
    }

    /// How many files the write-ahead log archive holds, and their stored size in bytes.
    pub fn archive_size(&self) -> (u64, u64) {
        let files = u64::try_from(self.archive.len()).unwrap_or(u64::MAX);
        (files, self.archive.iter().map(|o| o.size).sum())
    }
}

/// Sorts a listing of `layout`'s prefix into complete backups and everything else.
pub fn classify(layout: &Layout, listing: &Listing) -> Catalog {
    #[derive(Default)]
    struct Parts<'a> {
        data: Vec<(&'a ListedObject, BackupMethod)>,
        manifest: Option<&'a ListedObject>,
    }
    let mut catalog = Catalog::default();
    let mut by_id: BTreeMap<BackupId, Parts<'_>> = BTreeMap::new();
    let archive = wal::wal_prefix(layout);
    for object in &listing.objects {
        if !layout.owns(&object.key) {
            catalog.outside.push(object.key.clone());
            continue;
        }
        if object.key.starts_with(&archive) {
            catalog.archive.push(object.clone());
            continue;
        }
        match layout.classify_key(&object.key) {
            Some(KeyKind::Data(id, method)) => {
                by_id.entry(id).or_default().data.push((object, method));
            }
            Some(KeyKind::Manifest(id)) => by_id.entry(id).or_default().manifest = Some(object),
            None => catalog.unrecognised.push(object.key.clone()),
        }
    }
    for (id, parts) in by_id {
        let objects: Vec<&ListedObject> = parts
            .data
            .iter()
            .map(|(o, _)| *o)
            .chain(parts.manifest)
            .collect();
        let incomplete = |reason| Incomplete {
            id: id.clone(),
            keys: objects.iter().map(|o| o.key.clone()).collect(),
            last_modified: objects
                .iter()
                .map(|o| o.last_modified)
                .max()
                .expect("an id is only recorded with an object"),
            reason,
        };
        let (data, manifest_object) = match (parts.data.is_empty(), parts.manifest) {
            (false, Some(m)) => (&parts.data, m),
            (false, None) => {
                catalog
                    .incomplete
                    .push(incomplete(IncompleteReason::NoManifest));
                continue;
            }
            (true, _) => {
                catalog
                    .incomplete
                    .push(incomplete(IncompleteReason::NoData));
                continue;
            }
        };
        let Some(bytes) = listing.manifests.get(&manifest_object.key) else {
            catalog
                .incomplete
                .push(incomplete(IncompleteReason::ManifestUnread));
            continue;
        };
        let manifest = match Manifest::parse(bytes, layout, &id) {
            Ok(m) => m,
            Err(e) => {
                catalog
                    .incomplete
                    .push(incomplete(IncompleteReason::InvalidManifest(e)));
                continue;
            }
        };
        // The data object of the method the manifest records; one of another method under the
        // same id is not this backup's (it is reported, never deleted).
        let Some((data, _)) = data.iter().find(|(_, m)| *m == manifest.method) else {
            catalog
                .incomplete
                .push(incomplete(IncompleteReason::NoData));
            continue;
        };
        for (other, _) in parts.data.iter().filter(|(_, m)| *m != manifest.method) {
            catalog.unrecognised.push(other.key.clone());
        }
        if manifest.size != data.size {
            catalog
                .incomplete
                .push(incomplete(IncompleteReason::SizeMismatch {
                    manifest: manifest.size,
                    stored: data.size,
                }));
            continue;
        }
        catalog.complete.push(Backup {
            data_key: data.key.clone(),
            manifest_key: manifest_object.key.clone(),
            id,
            manifest,
        });
    }
    catalog
}

/// What retention deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Complete backups beyond the newest `retention`, oldest first.
    pub expired: Vec<BackupId>,
    /// Their keys, in deletion order: each manifest before its dump, so a backup stops counting
    /// before its dump goes.
    pub delete: Vec<String>,
    /// Keys of incomplete uploads last written more than the grace period ago.
    pub stale_incomplete: Vec<String>,
    /// Files of the write-ahead log archive older than every kept backup
    /// ([`wal::select_pruned`]), deleted after the expired backups.
    pub archive_pruned: Vec<String>,
    /// How many complete backups remain once the expired ones are deleted.
    pub kept: usize,
    /// Why deleting stopped, when a delete failed (what was not deleted is kept).
    pub error: Option<String>,
}

/// Where the backup container writes its [`RunReport`]: its `terminationMessagePath`, so the
/// report reaches the operator in the pod's status (the operator reads no bucket).
pub const REPORT_PATH: &str = "/run/database-operator/termination-log";

/// What a successful `database-operator backup run` reports in its termination message:
/// the backup stored and how many complete backups its prefix holds after retention.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunReport {
    /// The backup's id.
    pub id: String,
    /// The object key of its dump.
    pub key: String,
    /// The dump's stored size in bytes.
    pub size: u64,
    /// Complete backups under the cluster's prefix after retention.
    pub backups: u32,
    /// Why retention could not delete the older backups, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_error: Option<String>,
}

/// What a successful `database-operator backup restore` reports in its termination message
/// (the init container of a cluster's first primary, `spec.bootstrap.fromBackup`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestoreReport {
    /// The id of the backup restored.
    pub restored: String,
    /// The object key of its dump.
    pub key: String,
    /// The source cluster, `<namespace>/<name>`.
    pub cluster: String,
    /// Where a physical backup's recovery from the archive was set to stop (`the end of the
    /// archive`, `time ...`, `LSN ...`); absent for a logical backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The commit time of the last transaction the recovery replayed, as the promoted server
    /// reported it (added by the init script once the recovery has promoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<String>,
}

impl RestoreReport {
    /// The report as the one JSON line written to [`REPORT_PATH`].
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A report read back from a termination message; `None` when `text` is none.
    pub fn parse(text: &str) -> Option<RestoreReport> {
        serde_json::from_str(text.trim()).ok()
    }
}

impl RunReport {
    /// The report as the one JSON line written to [`REPORT_PATH`].
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A report read back from a termination message; `None` when `text` is no report (a
    /// message of another kind, or cut short).
    pub fn parse(text: &str) -> Option<RunReport> {
        serde_json::from_str(text.trim()).ok()
    }
}

/// Which keys retention deletes: the complete backups beyond the newest `retention` (at least
/// one is always kept, whatever `retention` says), and, listed apart, incomplete uploads older
/// than `grace` at `now` and the archived write-ahead log older than the oldest kept backup
/// ([`wal::select_pruned`]). Never a key outside `layout`'s prefix.
pub fn select_retention(
    layout: &Layout,
    catalog: &Catalog,
    retention: u32,
    now: Timestamp,
    grace: SignedDuration,
) -> Retention {
    let keep = usize::try_from(retention.max(1)).unwrap_or(usize::MAX);
    let excess = catalog.complete.len().saturating_sub(keep);
    let mut result = Retention::default();
    for backup in &catalog.complete[..excess] {
        result.expired.push(backup.id.clone());
        result.delete.push(backup.manifest_key.clone());
        result.delete.push(backup.data_key.clone());
    }
    for incomplete in &catalog.incomplete {
        if now.duration_since(incomplete.last_modified) > grace {
            result
                .stale_incomplete
                .extend(incomplete.keys.iter().cloned());
        }
    }
    if let Some(oldest_kept) = catalog.complete.get(excess) {
        result.archive_pruned =
            wal::select_pruned(layout, &catalog.archive, oldest_kept.manifest.started);
    }
    result.delete.retain(|k| layout.owns(k));
    result.stale_incomplete.retain(|k| layout.owns(k));
    result.kept = catalog.complete.len() - excess;
    result
}

pub mod failure;
mod manifest;
pub mod restore;
pub mod signature;
pub mod tables;
pub mod wal;

pub use manifest::{Manifest, ManifestError, WalRange, hex, is_sha256_hex};

#[cfg(test)]
mod tests;
