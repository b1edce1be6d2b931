//! Physical base backups (PostgreSQL): the `pg_basebackup` command, what the backup learns from
//! its tar stream while uploading it, and how a restore unpacks it.
//!
//! `pg_basebackup --format=tar --pgdata=-` writes the data directory as one tar on stdout and,
//! last, its `backup_manifest`: every file with its checksum and the WAL range the copy needs
//! ("WAL-Ranges"). The backup uploads the stream as it comes ([`super::run`]) and reads the
//! manifest out of it on the way ([`TarTap`]); the WAL range goes into the backup's own
//! manifest, and a stream that ends without a `backup_manifest` is no backup.

use std::io::Read;
use std::path::{Component, Path};

use database_operator_core::backup::WalRange;

use super::dump::{DumpCommand, DumpTarget};

/// The name of the file in a base backup's tar that says which WAL the copy needs.
pub const BACKUP_MANIFEST: &str = "backup_manifest";

/// The most of a `backup_manifest` the tap keeps (one line per file of the data directory:
/// a few MiB for a large database).
pub const MANIFEST_LIMIT: usize = 256 * 1024 * 1024;

const BLOCK: usize = 512;

/// The `pg_basebackup` command for `target` (the replication account), the password read from
/// `password_file`; `None` for an engine without physical backups. Over TLS as the dump.
pub fn base_backup_command(
    target: &DumpTarget,
    tools: Option<&Path>,
    password_file: &Path,
) -> Option<DumpCommand> {
    let engine = database_operator_engine::of(target.engine);
    let (name, tool) =
        engine.base_backup(target.tool_target(), &password_file.display().to_string())?;
    let mut env = tool.env;
    if let Some(ca) = &target.tls_ca {
        let tls = engine.tls_args(&ca.display().to_string());
        env.extend(tls.env);
    }
    Some(DumpCommand {
        program: match tools {
            Some(dir) => dir.join(name),
            None => name.into(),
        },
        args: tool.args,
        env,
    })
}

/// Reads a tar stream as it passes and keeps the content of one regular file of it (by name,
/// `./` prefixes ignored). Never fails the stream: what it could not read is said by
/// [`TarTap::finish`].
#[derive(Debug)]
pub struct TarTap {
    wanted: &'static str,
    limit: usize,
    header: Vec<u8>,
    /// Bytes of the current entry's data (and its padding) still to pass.
    data_left: u64,
    padding_left: u64,
    capturing: bool,
    captured: Vec<u8>,
    found: Option<Vec<u8>>,
    ended: bool,
    broken: Option<String>,
}

impl TarTap {
    /// A tap that keeps the file named `wanted`, up to `limit` bytes.
    pub fn new(wanted: &'static str, limit: usize) -> TarTap {
        TarTap {
            wanted,
            limit,
            header: Vec::with_capacity(BLOCK),
            data_left: 0,
            padding_left: 0,
            capturing: false,
            captured: Vec::new(),
            found: None,
            ended: false,
            broken: None,
        }
    }

    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.ended && self.broken.is_none() {
            if self.data_left > 0 {
                let n = usize::try_from(self.data_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                if self.capturing {
                    if self.captured.len() + n > self.limit {
                        self.broken = Some(format!(
                            "{} is larger than {} bytes",
                            self.wanted, self.limit
                        ));
                        return;
                    }
                    self.captured.extend_from_slice(&bytes[..n]);
                }
                self.data_left -= n as u64;
                bytes = &bytes[n..];
                if self.data_left == 0 && self.capturing {
                    self.found = Some(std::mem::take(&mut self.captured));
                    self.capturing = false;
                }
                continue;
            }
            if self.padding_left > 0 {
                let n = usize::try_from(self.padding_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.padding_left -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = (BLOCK - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == BLOCK {
                let header = std::mem::take(&mut self.header);
                self.read_header(&header);
            }
        }
    }

    fn read_header(&mut self, header: &[u8]) {
        if header.iter().all(|&b| b == 0) {
            // The end-of-archive marker.
            self.ended = true;
            return;
        }
        let Some(size) = entry_size(&header[124..136]) else {
            self.broken = Some("a tar header with an unreadable size".to_owned());
            return;
        };
        let name = field(&header[0..100]);
        let prefix = if &header[257..262] == b"ustar" {
            field(&header[345..500])
        } else {
            ""
        };
        let full = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        let regular = matches!(header[156], b'0' | 0);
        self.capturing = regular && full.trim_start_matches("./") == self.wanted;
        self.captured.clear();
        self.data_left = size;
        self.padding_left = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
        if size == 0 && self.capturing {
            self.found = Some(Vec::new());
            self.capturing = false;
        }
    }

    /// The content of the file, or why the stream did not hold it.
    pub fn finish(self) -> Result<Vec<u8>, String> {
        if let Some(broken) = self.broken {
            return Err(broken);
        }
        self.found
            .ok_or_else(|| format!("the tar stream holds no {}", self.wanted))
    }
}

/// A NUL-terminated header field as text (empty when it is not UTF-8).
fn field(bytes: &[u8]) -> &str {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).unwrap_or("")
}

/// A header's size field: octal text, or big-endian binary when its first byte has the high
/// bit set (sizes of 8 GiB and more, as GNU tar and `pg_basebackup` write them).
fn entry_size(bytes: &[u8]) -> Option<u64> {
    if bytes[0] & 0x80 != 0 {
        let mut value: u64 = u64::from(bytes[0] & 0x7f);
        for &b in &bytes[1..] {
            value = value.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(value);
    }
    let text = field(bytes).trim_matches(|c: char| c == ' ' || c == '\0');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// The WAL range a `backup_manifest` records: the earliest start and the latest end of its
/// ranges, with the timeline of the range that starts first. PostgreSQL lists the ranges of a
/// backup taken across a promotion newest timeline first; the order is not relied on.
pub fn wal_range(manifest: &[u8]) -> Result<WalRange, String> {
    use database_operator_engine::position::Lsn;
    let doc: serde_json::Value = serde_json::from_slice(manifest)
        .map_err(|e| format!("{BACKUP_MANIFEST} is not JSON: {e}"))?;
    let ranges = doc
        .get("WAL-Ranges")
        .and_then(|r| r.as_array())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| format!("{BACKUP_MANIFEST} has no WAL-Ranges"))?;
    let mut read = Vec::with_capacity(ranges.len());
    for range in ranges {
        let lsn = |key: &str| -> Result<Lsn, String> {
            let text = range
                .get(key)
                .and_then(|v| v.as_str())
                .ok_or_else(|| format!("{BACKUP_MANIFEST}: a WAL range without {key}"))?;
            text.parse()
                .map_err(|e| format!("{BACKUP_MANIFEST}: {key} {text:?}: {e}"))
        };
        let timeline = range
            .get("Timeline")
            .and_then(|t| t.as_u64())
            .and_then(|t| u32::try_from(t).ok())
            .ok_or_else(|| format!("{BACKUP_MANIFEST}: a WAL range without Timeline"))?;
        read.push((timeline, lsn("Start-LSN")?, lsn("End-LSN")?));
    }
    let (timeline, start, _) = *read
        .iter()
        .min_by_key(|(_, start, _)| *start)
        .expect("at least one range");
    let end = read
        .iter()
        .map(|(_, _, end)| *end)
        .max()
        .expect("at least one range");
    Ok(WalRange {
        timeline,
        start: start.to_string(),
        end: end.to_string(),
    })
}

/// Unpacks a base backup's tar (already decompressed) into the empty directory `dir`: every
/// entry must stay inside it (no absolute path, no `..`), and only directories, regular files
/// and symbolic links are written. Returns how many entries were written.
pub fn unpack(reader: impl Read, dir: &Path) -> Result<u64, String> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(false);
    let mut count = 0;
    for entry in archive
        .entries()
        .map_err(|e| format!("reading the base backup: {e}"))?
    {
        let mut entry = entry.map_err(|e| format!("reading the base backup: {e}"))?;
        let path = entry
            .path()
            .map_err(|e| format!("an entry with an unreadable name: {e}"))?
            .into_owned();
        let inside = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(format!(
                "the base backup holds {}, a path outside its directory",
                path.display()
            ));
        }
        use tar::EntryType;
        match entry.header().entry_type() {
            EntryType::Directory | EntryType::Regular | EntryType::Symlink => {}
            other => {
                return Err(format!(
                    "the base backup holds {} of type {other:?}",
                    path.display()
                ));
            }
        }
        let written = entry
            .unpack_in(dir)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        if !written {
            return Err(format!(
                "{} would be written outside {}",
                path.display(),
                dir.display()
            ));
        }
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests;
