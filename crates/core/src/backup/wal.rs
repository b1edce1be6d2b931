//! The write-ahead log archive in the bucket: which files go there and under which keys.
//!
//! PostgreSQL's archive command is given each file the primary completes: WAL segments
//! (`000000010000000000000003`), timeline history files (`00000002.history`), backup history
//! files (`000000010000000000000003.00000028.backup`) and, after a promotion, the partly filled
//! last segment of the old timeline (`000000010000000000000005.partial`). Each is stored
//! gzip-compressed as `<namespace>/<name>/wal/<system identifier>/<file>.gz`; the gzip
//! trailer's CRC-32 and length check the content when it is read back. The system identifier
//! (`pg_controldata`'s, decimal) keeps apart the archives of two database systems that had the
//! same cluster name: a cluster deleted and created again, or restored from a logical backup
//! under its old name, starts its segment names from the beginning again.

use super::Layout;

/// The archive's folder under a cluster's prefix.
pub const WAL_FOLDER: &str = "wal/";

/// The suffix of an archived file's key.
pub const WAL_SUFFIX: &str = ".gz";

/// A file name the archive does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a WAL file name (a segment such as 000000010000000000000003, a timeline history such as 00000002.history, a backup history file or a .partial segment)"
)]
pub struct NotAWalFile(pub String);

fn hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F'))
}

/// Whether `name` is a file PostgreSQL archives: a segment (24 upper-case hex digits), a
/// `.partial` segment, a backup history file (segment, `.`, 8 hex digits, `.backup`) or a
/// timeline history file (8 hex digits, `.history`). Nothing else, so a key is never built
/// from a path or a name with `/` in it.
pub fn is_wal_file_name(name: &str) -> bool {
    if let Some(timeline) = name.strip_suffix(".history") {
        return hex(timeline, 8);
    }
    if let Some(segment) = name.strip_suffix(".partial") {
        return hex(segment, 24);
    }
    if let Some(rest) = name.strip_suffix(".backup") {
        return rest
            .split_once('.')
            .is_some_and(|(segment, offset)| hex(segment, 24) && hex(offset, 8));
    }
    hex(name, 24)
}

/// The key of the archived `name` of the database system `system_id`:
/// `<prefix>wal/<system_id>/<name>.gz`.
pub fn wal_key(layout: &Layout, system_id: u64, name: &str) -> Result<String, NotAWalFile> {
    if !is_wal_file_name(name) {
        return Err(NotAWalFile(name.to_owned()));
    }
    Ok(format!(
        "{}{WAL_FOLDER}{system_id}/{name}{WAL_SUFFIX}",
        layout.prefix()
    ))
}

/// The archive's folder of the cluster `layout` names: `<prefix>wal/`.
pub fn wal_prefix(layout: &Layout) -> String {
    [layout.prefix(), WAL_FOLDER].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_postgresql_archives_get_a_key() {
        let layout = Layout::new("shop", "orders");
        for name in [
            "000000010000000000000003",
            "0000000A00000001000000FF",
            "00000002.history",
            "000000010000000000000005.partial",
            "000000010000000000000003.00000028.backup",
        ] {
            assert_eq!(
                wal_key(&layout, 7_300_000_000_000_000_001, name).unwrap(),
                format!("shop/orders/wal/7300000000000000001/{name}.gz")
            );
        }
        for name in [
            "",
            "00000001000000000000003",
            "000000010000000000000003x",
            "000000010000000000000003.gz",
            "0000000a0000000000000003",
            "../000000010000000000000003",
            "pg_wal/000000010000000000000003",
            "0000002.history",
            "000000010000000000000003.0028.backup",
            "000000010000000000000003.00000028",
        ] {
            let err = wal_key(&layout, 1, name).unwrap_err();
            assert!(
                err.to_string().contains("not a WAL file name"),
                "{name}: {err}"
            );
        }
        assert_eq!(wal_prefix(&layout), "shop/orders/wal/");
    }

    #[test]
    fn the_archive_is_counted_apart_from_backups_and_never_taken_for_one() {
        use super::super::{ListedObject, Listing, classify};
        let layout = Layout::new("shop", "orders");
        let object = |key: &str, size| ListedObject {
            key: key.to_owned(),
            size,
            last_modified: jiff::Timestamp::UNIX_EPOCH,
        };
        let listing = Listing {
            objects: vec![
                object("shop/orders/wal/71/000000010000000000000001.gz", 100),
                object("shop/orders/wal/72/00000002.history.gz", 7),
                object("shop/orders/notes.txt", 1),
            ],
            manifests: Default::default(),
        };
        let catalog = classify(&layout, &listing);
        assert_eq!((catalog.archive_files, catalog.archive_bytes), (2, 107));
        assert_eq!(catalog.unrecognised, ["shop/orders/notes.txt"]);
        assert!(catalog.complete.is_empty() && catalog.incomplete.is_empty());
    }
}
