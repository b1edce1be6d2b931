//! What a restore may restore: which backup (`latest` or an id), and whether its manifest fits
//! the target server (same engine, not a newer major release) and its downloaded dump is the one
//! the manifest describes (size and SHA-256). Pure: the runtime lists, downloads and applies.

use database_operator_api::Engine;
use database_operator_api::versions::Version;

use super::{Backup, BackupId, Catalog, Manifest};

/// Which backup to restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupChoice {
    /// The newest complete backup.
    Latest,
    /// The backup with this id.
    Id(BackupId),
}

impl BackupChoice {
    /// Parses `latest` or a backup id (`20260301T020000Z`).
    pub fn parse(text: &str) -> Result<BackupChoice, RestoreRefusal> {
        if text == "latest" {
            return Ok(BackupChoice::Latest);
        }
        BackupId::parse(text)
            .map(BackupChoice::Id)
            .ok_or_else(|| RestoreRefusal::BadChoice(text.to_owned()))
    }
}

/// Why a backup is not restored. Nothing has been applied when one of these is returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestoreRefusal {
    /// Neither `latest` nor a backup id.
    #[error("{0:?} is neither `latest` nor a backup id such as 20260301T020000Z")]
    BadChoice(String),
    /// The prefix holds no complete backup.
    #[error("no complete backup under {prefix}")]
    NoBackup {
        /// The prefix listed.
        prefix: String,
    },
    /// No complete backup has this id.
    #[error("no complete backup {id} under {prefix} (complete backups: {available})")]
    NotFound {
        /// The id asked for.
        id: String,
        /// The prefix listed.
        prefix: String,
        /// The ids there are, or `none`.
        available: String,
    },
    /// The backup is of another engine.
    #[error("backup {id} is a {found} backup; the target server is {expected}")]
    OtherEngine {
        /// The backup.
        id: String,
        /// The backup's engine.
        found: Engine,
        /// The target's engine.
        expected: Engine,
    },
    /// The backup comes from a newer major release than the target server runs.
    #[error(
        "backup {id} was taken from {engine} {backup_version}, a newer major release than the target server's {target_version}; restore into a server of release {backup_major} or newer"
    )]
    NewerMajor {
        /// The backup.
        id: String,
        /// The engine.
        engine: Engine,
        /// The server version the manifest records.
        backup_version: String,
        /// Its major release.
        backup_major: String,
        /// The target server's version.
        target_version: String,
    },
    /// The downloaded dump is not what the manifest describes.
    #[error(
        "backup {id}: the downloaded dump has {size} bytes and sha256 {sha256}, the manifest says {expected_size} bytes and sha256 {expected_sha256}; nothing was restored"
    )]
    Corrupt {
        /// The backup.
        id: String,
        /// Bytes downloaded.
        size: u64,
        /// Their SHA-256.
        sha256: String,
        /// The manifest's size.
        expected_size: u64,
        /// The manifest's SHA-256.
        expected_sha256: String,
    },
}

/// The backup `choice` names among the complete backups of `catalog` (listed under `prefix`).
pub fn choose<'a>(
    catalog: &'a Catalog,
    choice: &BackupChoice,
    prefix: &str,
) -> Result<&'a Backup, RestoreRefusal> {
    match choice {
        BackupChoice::Latest => catalog.newest().ok_or_else(|| RestoreRefusal::NoBackup {
            prefix: prefix.to_owned(),
        }),
        BackupChoice::Id(id) => catalog
            .complete
            .iter()
            .find(|b| &b.id == id)
            .ok_or_else(|| {
                let ids: Vec<&str> = catalog.complete.iter().map(|b| b.id.as_str()).collect();
                RestoreRefusal::NotFound {
                    id: id.to_string(),
                    prefix: prefix.to_owned(),
                    available: if ids.is_empty() {
                        "none".to_owned()
                    } else {
                        ids.join(", ")
                    },
                }
            }),
    }
}

/// The `MAJOR.MINOR[.PATCH]` at the start of a server's version text (`15.20 (Debian
/// 15.20-0+deb12u1)`, `10.11.19-MariaDB-0+deb12u1`, `8.4.3`).
pub fn server_version(text: &str) -> Option<Version> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let rest = &text[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let numbers = rest[..end].trim_end_matches('.');
    let mut parts: Vec<&str> = numbers.split('.').take(3).collect();
    if parts.len() < 2 {
        parts.push("0");
    }
    Version::parse(&parts.join("."))
}

/// Whether `manifest` may be restored into a server of `engine` reporting `target_version`:
/// the same engine, and not a newer major release (a dump of PostgreSQL 16 may use what 15 does
/// not know; MariaDB 11.4 and MySQL 9.x likewise). A version that cannot be read is not
/// refused here: the server then says what it cannot apply.
pub fn check_restorable(
    manifest: &Manifest,
    engine: Engine,
    target_version: &str,
) -> Result<(), RestoreRefusal> {
    if manifest.engine != engine {
        return Err(RestoreRefusal::OtherEngine {
            id: manifest.id.to_string(),
            found: manifest.engine,
            expected: engine,
        });
    }
    let (Some(backup), Some(target)) = (
        server_version(&manifest.server_version),
        server_version(target_version),
    ) else {
        return Ok(());
    };
    if backup.release(engine) > target.release(engine) {
        return Err(RestoreRefusal::NewerMajor {
            id: manifest.id.to_string(),
            engine,
            backup_version: manifest.server_version.clone(),
            backup_major: backup.major_release(engine),
            target_version: target_version.to_owned(),
        });
    }
    Ok(())
}

/// Whether the downloaded dump (`size` bytes with SHA-256 `sha256`) is the one `manifest`
/// describes.
pub fn check_download(manifest: &Manifest, size: u64, sha256: &str) -> Result<(), RestoreRefusal> {
    if size == manifest.size && sha256 == manifest.sha256 {
        Ok(())
    } else {
        Err(RestoreRefusal::Corrupt {
            id: manifest.id.to_string(),
            size,
            sha256: sha256.to_owned(),
            expected_size: manifest.size,
            expected_sha256: manifest.sha256.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::Layout;

    fn manifest(engine: Engine, version: &str, id: &str) -> Manifest {
        let id = BackupId::parse(id).unwrap();
        Manifest {
            namespace: "shop".into(),
            cluster: "orders".into(),
            id: id.clone(),
            engine,
            server_version: version.into(),
            position: None,
            size: 10,
            sha256: "a".repeat(64),
            started: id.timestamp(),
            finished: id.timestamp(),
            tables: None,
        }
    }

    fn backup(m: Manifest) -> Backup {
        let layout = Layout::new("shop", "orders");
        Backup {
            id: m.id.clone(),
            data_key: layout.data_key(&m.id),
            manifest_key: layout.manifest_key(&m.id),
            manifest: m,
        }
    }

    #[test]
    fn choices() {
        assert_eq!(BackupChoice::parse("latest"), Ok(BackupChoice::Latest));
        assert!(matches!(
            BackupChoice::parse("20260301T020000Z"),
            Ok(BackupChoice::Id(_))
        ));
        assert_eq!(
            BackupChoice::parse("yesterday"),
            Err(RestoreRefusal::BadChoice("yesterday".into()))
        );
        let catalog = Catalog {
            complete: vec![
                backup(manifest(Engine::Postgresql, "15.20", "20260301T020000Z")),
                backup(manifest(Engine::Postgresql, "15.20", "20260302T020000Z")),
            ],
            ..Catalog::default()
        };
        let latest = choose(&catalog, &BackupChoice::Latest, "shop/orders/").unwrap();
        assert_eq!(latest.id.as_str(), "20260302T020000Z");
        let first = BackupChoice::parse("20260301T020000Z").unwrap();
        assert_eq!(
            choose(&catalog, &first, "p/").unwrap().id.as_str(),
            "20260301T020000Z"
        );
        let missing = BackupChoice::parse("20260303T020000Z").unwrap();
        let err = choose(&catalog, &missing, "shop/orders/").unwrap_err();
        assert!(
            err.to_string()
                .contains("complete backups: 20260301T020000Z, 20260302T020000Z"),
            "{err}"
        );
        assert!(matches!(
            choose(&Catalog::default(), &BackupChoice::Latest, "p/"),
            Err(RestoreRefusal::NoBackup { .. })
        ));
    }

    #[test]
    fn versions_are_read_from_server_texts() {
        let v = |t: &str| server_version(t).map(|v| v.to_string());
        assert_eq!(
            v("15.20 (Debian 15.20-0+deb12u1)").as_deref(),
            Some("15.20")
        );
        assert_eq!(
            v("10.11.19-MariaDB-0+deb12u1-log").as_deref(),
            Some("10.11.19")
        );
        assert_eq!(v("PostgreSQL 16.4 on x86_64").as_deref(), Some("16.4"));
        assert_eq!(v("18").as_deref(), Some("18.0"));
        assert_eq!(v("").as_deref(), None);
    }

    #[test]
    fn another_engine_or_a_newer_major_is_refused() {
        let pg16 = manifest(Engine::Postgresql, "16.4", "20260301T020000Z");
        assert!(check_restorable(&pg16, Engine::Postgresql, "16.9").is_ok());
        assert!(check_restorable(&pg16, Engine::Postgresql, "17.1").is_ok());
        let err = check_restorable(&pg16, Engine::Postgresql, "15.20 (Debian)").unwrap_err();
        assert!(matches!(err, RestoreRefusal::NewerMajor { .. }), "{err}");
        assert!(err.to_string().contains("release 16 or newer"), "{err}");
        assert!(matches!(
            check_restorable(&pg16, Engine::Mariadb, "16.4"),
            Err(RestoreRefusal::OtherEngine { .. })
        ));
        // MariaDB's major release is MAJOR.MINOR.
        let maria = manifest(Engine::Mariadb, "11.4.2-MariaDB", "20260301T020000Z");
        assert!(check_restorable(&maria, Engine::Mariadb, "11.4.9-MariaDB").is_ok());
        assert!(check_restorable(&maria, Engine::Mariadb, "11.8.1").is_ok());
        assert!(matches!(
            check_restorable(&maria, Engine::Mariadb, "10.11.19-MariaDB"),
            Err(RestoreRefusal::NewerMajor { .. })
        ));
        // An unknown version is not refused here.
        let unknown = manifest(Engine::Mysql, "", "20260301T020000Z");
        assert!(check_restorable(&unknown, Engine::Mysql, "8.4.3").is_ok());
    }

    #[test]
    fn a_download_must_match_the_manifest() {
        let m = manifest(Engine::Postgresql, "15.20", "20260301T020000Z");
        assert!(check_download(&m, 10, &"a".repeat(64)).is_ok());
        assert!(matches!(
            check_download(&m, 10, &"b".repeat(64)),
            Err(RestoreRefusal::Corrupt { .. })
        ));
        assert!(check_download(&m, 11, &"a".repeat(64)).is_err());
    }
}
