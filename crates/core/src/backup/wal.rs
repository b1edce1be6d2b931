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

use jiff::{SignedDuration, Timestamp};

use super::{Layout, ListedObject};

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

/// How much earlier than the oldest kept backup's start an archived file must have been written
/// for retention to remove it: room for the bucket's clock (which stamps the file) running
/// behind the backup Job's (which stamps the backup).
pub const PRUNE_MARGIN: SignedDuration = SignedDuration::from_hours(1);

/// The archived files retention removes once only backups started at `oldest_kept_start` or
/// later remain: every file of `archive` written more than [`PRUNE_MARGIN`] before it. No kept
/// backup can need them: a recovery starts from a backup and replays what was written after
/// it. Timeline history files stay (a few bytes each, and a recovery that follows a promotion
/// reads them whatever its starting point). Never a key outside `layout`'s archive folder.
pub fn select_pruned(
    layout: &Layout,
    archive: &[ListedObject],
    oldest_kept_start: Timestamp,
) -> Vec<String> {
    let folder = wal_prefix(layout);
    let before = oldest_kept_start - PRUNE_MARGIN;
    archive
        .iter()
        .filter(|o| o.key.starts_with(&folder) && layout.owns(&o.key))
        .filter(|o| !o.key.ends_with(&[".history", WAL_SUFFIX].concat()))
        .filter(|o| o.last_modified < before)
        .map(|o| o.key.clone())
        .collect()
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
        assert_eq!(catalog.archive_size(), (2, 107));
        assert_eq!(catalog.archive.len(), 2);
        assert_eq!(catalog.unrecognised, ["shop/orders/notes.txt"]);
        assert!(catalog.complete.is_empty() && catalog.incomplete.is_empty());
    }

    #[test]
    fn retention_prunes_the_archive_older_than_the_oldest_kept_backup() {
        use super::super::{Backup, BackupId, Catalog, ListedObject, Manifest, select_retention};
        let layout = Layout::new("shop", "orders");
        let at = |hours: i64| {
            "2026-03-01T00:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_hours(hours)
        };
        let backup = |hours| {
            let id = BackupId::at(at(hours));
            Backup {
                id: id.clone(),
                data_key: layout.data_key(&id),
                manifest_key: layout.manifest_key(&id),
                manifest: Manifest {
                    namespace: "shop".into(),
                    cluster: "orders".into(),
                    id,
                    engine: database_operator_api::Engine::Postgresql,
                    method: database_operator_api::BackupMethod::Logical,
                    wal: None,
                    server_version: "15.10".into(),
                    position: None,
                    size: 1,
                    sha256: "0".repeat(64),
                    started: at(hours),
                    finished: at(hours),
                    tables: None,
                },
            }
        };
        let file = |key: &str, hours| ListedObject {
            key: format!("shop/orders/wal/71/{key}"),
            size: 16,
            last_modified: at(hours),
        };
        let catalog = Catalog {
            // Backups at 0 h, 24 h and 48 h; retention 2 keeps the last two.
            complete: vec![backup(0), backup(24), backup(48)],
            archive: vec![
                file("000000010000000000000001.gz", 1),
                file("00000002.history.gz", 2),
                file("000000020000000000000002.gz", 22),
                // Within the margin before the oldest kept backup (24 h): kept.
                file("000000020000000000000003.gz", 23),
                file("000000020000000000000004.gz", 30),
                // Another cluster's archive that the listing returned: never.
                ListedObject {
                    key: "shop/other/wal/71/000000010000000000000001.gz".into(),
                    size: 16,
                    last_modified: at(1),
                },
            ],
            ..Catalog::default()
        };
        let r = select_retention(&layout, &catalog, 2, at(49), SignedDuration::from_hours(24));
        assert_eq!(r.kept, 2);
        assert_eq!(
            r.archive_pruned,
            [
                "shop/orders/wal/71/000000010000000000000001.gz",
                "shop/orders/wal/71/000000020000000000000002.gz",
            ]
        );
        // Without a backup, nothing of the archive goes.
        let empty = Catalog {
            complete: Vec::new(),
            ..catalog
        };
        let r = select_retention(&layout, &empty, 2, at(49), SignedDuration::from_hours(24));
        assert!(r.archive_pruned.is_empty(), "{r:?}");
    }
}
