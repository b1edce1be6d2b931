//! `backup wal-push`: PostgreSQL's archive command. Uploads one file of the write-ahead log,
//! gzip-compressed, to `<prefix>wal/<file>.gz` ([`database_operator_core::backup::wal`]).
//! `backup wal-fetch`, its restore command, reads one back ([`fetch`]).
//!
//! The server runs it for each file it completes and retries it (with the same file) until it
//! exits 0, keeping the file in `pg_wal` meanwhile. An object already stored under the key is
//! never overwritten: when it holds the same content (an upload whose success the server did
//! not learn of, a restarted archiver) the push succeeds without writing; when it holds other
//! content (a former primary's diverged file, another cluster writing to the same prefix) the
//! push fails and says so, every time, so `ArchivingHealthy` turns False instead of the archive
//! silently mixing two histories.

use std::io::{Read as _, Write as _};
use std::path::Path;

use database_operator_core::backup::Layout;
use database_operator_core::backup::wal::{self, NotAWalFile};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest as _, Sha256};

use super::store::{BackupStore, StoreError};

/// A failed push.
#[derive(Debug, thiserror::Error)]
pub enum WalPushError {
    /// The name is not of a file the archive takes.
    #[error(transparent)]
    Name(#[from] NotAWalFile),
    /// The file could not be read.
    #[error("reading {path}: {message}")]
    Read {
        /// The path given.
        path: String,
        /// Why.
        message: String,
    },
    /// The bucket refused or failed a call.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The key holds other content: nothing was written.
    #[error(
        "{key} already holds different content ({stored}); refusing to overwrite it with {name} (sha256 {local}): another server archived a different file of this name (a former primary's diverged history, or another cluster using the same bucket prefix)"
    )]
    Different {
        /// The key.
        key: String,
        /// The file name.
        name: String,
        /// What is stored (its SHA-256 after decompression, or why it could not be read).
        stored: String,
        /// SHA-256 of the local file.
        local: String,
    },
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// The file was uploaded: its size and its stored (compressed) size.
    Uploaded {
        /// The key written.
        key: String,
        /// Bytes of the file.
        bytes: u64,
        /// Bytes stored.
        stored: u64,
    },
    /// The key already held this very content: nothing was written.
    AlreadyArchived {
        /// The key.
        key: String,
    },
}

fn sha256_hex(bytes: &[u8]) -> String {
    super::run::hex(&Sha256::digest(bytes))
}

/// The SHA-256 of the decompressed `stored`, or why it does not decompress.
fn stored_digest(stored: &[u8]) -> Result<String, String> {
    let mut content = Vec::new();
    GzDecoder::new(stored)
        .read_to_end(&mut content)
        .map_err(|e| format!("not readable gzip: {e}"))?;
    Ok(sha256_hex(&content))
}

/// The system identifier of the PostgreSQL data directory `data_dir`: the first 8 bytes of
/// `global/pg_control`, in the machine's byte order (as the server writes it).
pub fn system_identifier(data_dir: &Path) -> std::io::Result<u64> {
    let path = data_dir.join("global").join("pg_control");
    let mut first = [0u8; 8];
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_exact(&mut first))
        .map_err(|e| std::io::Error::new(e.kind(), format!("reading {}: {e}", path.display())))?;
    Ok(u64::from_ne_bytes(first))
}

/// Pushes the file at `path`, named `name` in the archive of the database system
/// `system_id`, to `layout`'s archive in `store`.
pub async fn push(
    store: &impl BackupStore,
    layout: &Layout,
    system_id: u64,
    path: &Path,
    name: &str,
) -> Result<Pushed, WalPushError> {
    let key = wal::wal_key(layout, system_id, name)?;
    let content = tokio::fs::read(path)
        .await
        .map_err(|e| WalPushError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let local = sha256_hex(&content);
    if let Some(stored) = store.get_opt(&key).await? {
        return match stored_digest(&stored) {
            Ok(digest) if digest == local => Ok(Pushed::AlreadyArchived { key }),
            Ok(digest) => Err(WalPushError::Different {
                key,
                name: name.to_owned(),
                stored: format!("sha256 {digest}"),
                local,
            }),
            Err(why) => Err(WalPushError::Different {
                key,
                name: name.to_owned(),
                stored: why,
                local,
            }),
        };
    }
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let body = encoder
        .write_all(&content)
        .and_then(|()| encoder.finish())
        .map_err(|e| WalPushError::Read {
            path: path.display().to_string(),
            message: format!("compressing: {e}"),
        })?;
    let stored = body.len() as u64;
    store.put(&key, body).await?;
    Ok(Pushed::Uploaded {
        key,
        bytes: content.len() as u64,
        stored,
    })
}

/// A failed fetch.
#[derive(Debug, thiserror::Error)]
pub enum WalFetchError {
    /// The name is not of a file the archive takes.
    #[error(transparent)]
    Name(#[from] NotAWalFile),
    /// The bucket refused or failed a call.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The archived object does not decompress (a flipped byte, a truncated object): recovery
    /// must stop here rather than take the archive as ending before it.
    #[error(
        "{key} is corrupt ({why}); recovery stops rather than end at the file before it: restore that file from another copy, or recover to a point before it"
    )]
    Corrupt {
        /// The key.
        key: String,
        /// What decompressing said.
        why: String,
    },
    /// Writing the file failed.
    #[error("writing {path}: {message}")]
    Write {
        /// The destination.
        path: String,
        /// Why.
        message: String,
    },
}

impl WalFetchError {
    /// The exit code that tells the server how to take this failure. Above 125 it stops
    /// recovery: a corrupt archive, or a bucket that cannot be read, must never look like the
    /// archive's end (a restore would end early, short of data the archive holds). 1 means
    /// "no such file" and the server carries on: a name the archive never takes.
    pub fn exit_code(&self) -> u8 {
        match self {
            WalFetchError::Name(_) => 1,
            _ => STOP_RECOVERY_EXIT,
        }
    }
}

/// The exit code of `wal-fetch` when the server must stop its recovery instead of ending it:
/// above 125 (a corrupt archived file, a bucket that cannot be read).
pub const STOP_RECOVERY_EXIT: u8 = 126;

/// What a fetch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The file was written: its size.
    Restored {
        /// Bytes written.
        bytes: u64,
    },
    /// The archive has no such file (the server asks for files that may not exist: the next
    /// timeline's history, the segment after the last one).
    NotArchived,
}

/// Fetches the archived `name` of the database system `system_id` from `layout`'s archive into
/// `dest`: decompressed (the gzip trailer checks its CRC-32 and length), written beside `dest`
/// and renamed into place, so the server never reads a partial file.
pub async fn fetch(
    store: &impl BackupStore,
    layout: &Layout,
    system_id: u64,
    name: &str,
    dest: &Path,
) -> Result<Fetched, WalFetchError> {
    let key = wal::wal_key(layout, system_id, name)?;
    let Some(stored) = store.get_opt(&key).await? else {
        return Ok(Fetched::NotArchived);
    };
    let mut content = Vec::new();
    GzDecoder::new(stored.as_slice())
        .read_to_end(&mut content)
        .map_err(|e| WalFetchError::Corrupt {
            key: key.clone(),
            why: e.to_string(),
        })?;
    let write_error = |e: std::io::Error| WalFetchError::Write {
        path: dest.display().to_string(),
        message: e.to_string(),
    };
    let file_name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned());
    let partial = dest.with_file_name(format!(".{file_name}.partial"));
    tokio::fs::write(&partial, &content)
        .await
        .map_err(write_error)?;
    tokio::fs::rename(&partial, dest)
        .await
        .map_err(write_error)?;
    Ok(Fetched::Restored {
        bytes: content.len() as u64,
    })
}

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;
