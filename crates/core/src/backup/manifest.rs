//! A backup's manifest: what it records and how it is read and written.

use super::*;

/// What a backup's manifest records. Written last, after the dump is completely uploaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The cluster's namespace.
    pub namespace: String,
    /// The cluster's name.
    pub cluster: String,
    /// The backup.
    pub id: BackupId,
    /// The engine dumped.
    pub engine: Engine,
    /// How the data was copied: a logical dump (manifests written before physical backups
    /// existed say nothing, and are logical) or a physical base backup.
    pub method: BackupMethod,
    /// The write-ahead log a physical base backup needs from the archive to be consistent
    /// (PostgreSQL; `None` for logical backups).
    pub wal: Option<WalRange>,
    /// The server's version as it reported it (e.g. `16.4`, `11.4.2-MariaDB`).
    pub server_version: String,
    /// The replication position at the dump's snapshot as the server printed it (an LSN, a GTID
    /// set, a MariaDB GTID position), when known.
    pub position: Option<String>,
    /// Size of the stored (compressed) dump in bytes.
    pub size: u64,
    /// SHA-256 of the stored (compressed) dump, lowercase hex.
    pub sha256: String,
    /// When the dump started.
    pub started: Timestamp,
    /// When the upload of the dump finished.
    pub finished: Timestamp,
    /// Every table's row count and checksum as the dump holds them, read from the dump stream
    /// while it was uploaded ([`tables::DumpStats`]); a restore drill compares a restored
    /// server's against these. Absent in manifests written before drills existed.
    pub tables: Option<tables::TableSet>,
}

/// The write-ahead log a physical base backup needs: replayed from `start` to at least `end`
/// on `timeline`, from the archive, it is a consistent copy of the database as of `end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WalRange {
    /// The timeline the backup was taken on.
    pub timeline: u32,
    /// Where replay starts (the backup's checkpoint), as PostgreSQL writes an LSN (`0/2000028`).
    pub start: String,
    /// Where the backup became consistent: a recovery must replay at least to here.
    pub end: String,
}

/// The manifest as stored (JSON).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestDoc {
    format_version: u32,
    kind: String,
    namespace: String,
    cluster: String,
    id: String,
    engine: Engine,
    #[serde(default)]
    method: BackupMethod,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wal: Option<WalRange>,
    server_version: String,
    #[serde(default)]
    position: Option<String>,
    compression: String,
    size: u64,
    sha256: String,
    started: String,
    finished: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tables: Option<tables::TableSet>,
}

/// Why a manifest is not accepted. The backup it describes then does not count.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Not JSON, or JSON without the fields of a manifest.
    #[error("not a backup manifest: {0}")]
    Malformed(String),
    /// JSON of another kind.
    #[error("not a backup manifest: kind is {0:?}, expected {MANIFEST_KIND:?}")]
    ForeignKind(String),
    /// A format this code does not know.
    #[error(
        "manifest format version {0} is not supported (this operator reads version {MANIFEST_FORMAT_VERSION})"
    )]
    UnsupportedFormat(u32),
    /// Written for another cluster.
    #[error("manifest belongs to cluster {found}, not {expected}")]
    ForeignCluster {
        /// `namespace/name` this layout is for.
        expected: String,
        /// `namespace/name` the manifest names.
        found: String,
    },
    /// Describes another backup than the one its key names.
    #[error("manifest describes backup {found}, but is stored as the manifest of {expected}")]
    WrongBackup {
        /// The id from the key.
        expected: String,
        /// The id in the manifest.
        found: String,
    },
    /// A compression this code cannot read.
    #[error("unsupported compression {0:?} (expected {COMPRESSION:?})")]
    Compression(String),
    /// The checksum is not 64 lowercase hex digits.
    #[error("sha256 {0:?} is not 64 lowercase hex digits")]
    Sha256(String),
    /// A physical backup without the write-ahead log range it needs, of an engine that has
    /// none, or with positions that are not LSNs in order.
    #[error("physical backup: {0}")]
    Physical(String),
    /// A time that is not RFC 3339.
    #[error("{field} {value:?} is not an RFC 3339 time")]
    Time {
        /// `started` or `finished`.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// Finished before it started.
    #[error("finished {finished} is before started {started}")]
    FinishedBeforeStarted {
        /// When it started.
        started: Timestamp,
        /// When it finished.
        finished: Timestamp,
    },
}

impl Manifest {
    /// The manifest as stored: pretty JSON, keys in a fixed order.
    pub fn to_json(&self) -> String {
        let doc = ManifestDoc {
            format_version: MANIFEST_FORMAT_VERSION,
            kind: MANIFEST_KIND.to_owned(),
            namespace: self.namespace.clone(),
            cluster: self.cluster.clone(),
            id: self.id.to_string(),
            engine: self.engine,
            method: self.method,
            wal: self.wal.clone(),
            server_version: self.server_version.clone(),
            position: self.position.clone(),
            compression: COMPRESSION.to_owned(),
            size: self.size,
            sha256: self.sha256.clone(),
            started: self.started.to_string(),
            finished: self.finished.to_string(),
            tables: self.tables.clone(),
        };
        serde_json::to_string_pretty(&doc).expect("a manifest always serializes")
    }

    /// Parses the manifest stored as the manifest of backup `id` of `layout`'s cluster, and
    /// rejects one that is malformed, of another kind or format, of another cluster or backup.
    pub fn parse(bytes: &[u8], layout: &Layout, id: &BackupId) -> Result<Manifest, ManifestError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed(e.to_string()))?;
        match value.get("kind").and_then(|k| k.as_str()) {
            Some(MANIFEST_KIND) => {}
            Some(other) => return Err(ManifestError::ForeignKind(other.to_owned())),
            None => return Err(ManifestError::Malformed("no \"kind\"".to_owned())),
        }
        match value.get("formatVersion").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(MANIFEST_FORMAT_VERSION) => {}
            Some(v) => {
                return Err(ManifestError::UnsupportedFormat(
                    u32::try_from(v).unwrap_or(u32::MAX),
                ));
            }
            None => return Err(ManifestError::Malformed("no \"formatVersion\"".to_owned())),
        }
        let doc: ManifestDoc =
            serde_json::from_value(value).map_err(|e| ManifestError::Malformed(e.to_string()))?;
        if doc.namespace != layout.namespace || doc.cluster != layout.name {
            return Err(ManifestError::ForeignCluster {
                expected: [layout.namespace(), "/", layout.name()].concat(),
                found: [doc.namespace.as_str(), "/", doc.cluster.as_str()].concat(),
            });
        }
        if doc.id != id.as_str() {
            return Err(ManifestError::WrongBackup {
                expected: id.to_string(),
                found: doc.id,
            });
        }
        if doc.compression != COMPRESSION {
            return Err(ManifestError::Compression(doc.compression));
        }
        if !is_sha256_hex(&doc.sha256) {
            return Err(ManifestError::Sha256(doc.sha256));
        }
        check_physical(&doc)?;
        let started = parse_time("started", &doc.started)?;
        let finished = parse_time("finished", &doc.finished)?;
        if finished < started {
            return Err(ManifestError::FinishedBeforeStarted { started, finished });
        }
        Ok(Manifest {
            namespace: doc.namespace,
            cluster: doc.cluster,
            id: id.clone(),
            engine: doc.engine,
            method: doc.method,
            wal: doc.wal,
            server_version: doc.server_version,
            position: doc.position,
            size: doc.size,
            sha256: doc.sha256,
            started,
            finished,
            tables: doc.tables,
        })
    }
}

/// A physical manifest names a PostgreSQL backup and its WAL range (LSNs, start not after
/// end); a logical one names no range.
fn check_physical(doc: &ManifestDoc) -> Result<(), ManifestError> {
    use database_operator_engine::position::Lsn;
    match (doc.method, &doc.wal) {
        (BackupMethod::Logical, None) => Ok(()),
        (BackupMethod::Logical, Some(_)) => Err(ManifestError::Physical(
            "a logical backup records no WAL range".to_owned(),
        )),
        (BackupMethod::Physical, _) if !doc.engine.archives_wal() => {
            Err(ManifestError::Physical(format!(
                "physical backups exist for postgresql only, not {}",
                doc.engine
            )))
        }
        (BackupMethod::Physical, None) => Err(ManifestError::Physical(
            "no WAL range (wal.start, wal.end)".to_owned(),
        )),
        (BackupMethod::Physical, Some(range)) => {
            let lsn = |field: &str, text: &str| {
                text.parse::<Lsn>()
                    .map_err(|e| ManifestError::Physical(format!("wal.{field}: {e}")))
            };
            let (start, end) = (lsn("start", &range.start)?, lsn("end", &range.end)?);
            if end < start {
                return Err(ManifestError::Physical(format!(
                    "wal.end {end} is before wal.start {start}"
                )));
            }
            if range.timeline == 0 {
                return Err(ManifestError::Physical("wal.timeline is 0".to_owned()));
            }
            Ok(())
        }
    }
}

fn parse_time(field: &'static str, value: &str) -> Result<Timestamp, ManifestError> {
    value.parse().map_err(|_| ManifestError::Time {
        field,
        value: value.to_owned(),
    })
}

/// Lowercase hex of `bytes`: how manifests, signatures and messages write a SHA-256 digest
/// (and the signing key's random bytes).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Whether `text` is a SHA-256 digest in lowercase hex.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
