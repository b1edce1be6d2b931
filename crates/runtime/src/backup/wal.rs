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
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SHA-256 of the decompressed `stored`, or why it does not decompress.
fn stored_digest(stored: &[u8]) -> Result<String, String> {
    let mut content = Vec::new();
    GzDecoder::new(stored)
        .read_to_end(&mut content)
        .map_err(|e| format!("not readable gzip: {e}"))?;
    Ok(sha256_hex(&content))
}

/// Pushes the file at `path`, named `name` in the archive, to `layout`'s archive in `store`.
pub async fn push(
    store: &impl BackupStore,
    layout: &Layout,
    path: &Path,
    name: &str,
) -> Result<Pushed, WalPushError> {
    let key = wal::wal_key(layout, name)?;
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
    /// recovery (a corrupt archive must never look like its end); 1 means "not available now"
    /// and the server carries on (a standby streams or tries again, a restore ends its replay).
    pub fn exit_code(&self) -> u8 {
        match self {
            WalFetchError::Corrupt { .. } => CORRUPT_EXIT,
            _ => 1,
        }
    }
}

/// The exit code of `wal-fetch` for a corrupt archived file: above 125, so the server stops
/// its recovery instead of ending it early.
pub const CORRUPT_EXIT: u8 = 126;

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

/// Fetches the archived `name` of `layout`'s archive into `dest`: decompressed (the gzip
/// trailer checks its CRC-32 and length), written beside `dest` and renamed into place, so the
/// server never reads a partial file.
pub async fn fetch(
    store: &impl BackupStore,
    layout: &Layout,
    name: &str,
    dest: &Path,
) -> Result<Fetched, WalFetchError> {
    let key = wal::wal_key(layout, name)?;
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
