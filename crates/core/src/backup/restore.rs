//! What a restore may restore: which backup (`latest` or an id), and whether its manifest fits
//! the target server (same engine, not a newer major release) and its downloaded dump is the one
//! the manifest describes (size and SHA-256). Pure: the runtime lists, downloads and applies.

use std::fmt;

use database_operator_api::versions::Version;
use database_operator_api::{BackupMethod, Engine};
use database_operator_engine::position::Lsn;
use jiff::Timestamp;

use super::{Backup, BackupId, Catalog, Manifest};

/// How far a restore of a physical backup replays the write-ahead log archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryTarget {
    /// To the end of the archive: every write archived.
    End,
    /// Every transaction committed at or before this time, none after it.
    Time(Timestamp),
    /// Every transaction committed at or before this WAL position (PostgreSQL).
    Lsn(Lsn),
}

impl fmt::Display for RecoveryTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryTarget::End => f.write_str("the end of the archive"),
            RecoveryTarget::Time(t) => write!(f, "time {t}"),
            RecoveryTarget::Lsn(l) => write!(f, "LSN {l}"),
        }
    }
}

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
    /// A point in time was asked for, and the backup chosen cannot reach it: a logical backup,
    /// or a base backup that finished after the target.
    #[error("backup {id} cannot be recovered to {target}: {why}")]
    CannotReachTarget {
        /// The backup.
        id: String,
        /// The target asked for.
        target: String,
        /// Why not.
        why: String,
    },
    /// A point in time was asked for, and no physical backup precedes it.
    #[error(
        "no physical backup under {prefix} finished before {target}, so the archive cannot be replayed to it (physical backups: {available})"
    )]
    NoBaseBefore {
        /// The prefix listed.
        prefix: String,
        /// The target asked for.
        target: String,
        /// The physical backups there are (id and when each finished), or `none`.
        available: String,
    },
    /// A physical backup where a dump is applied to a running server (`backup restore`, the
    /// restore drill).
    #[error(
        "backup {id} is a physical base backup: it is unpacked into a new data directory and recovered from the archive (`backup unpack`; a new cluster's spec.bootstrap.fromBackup does it), not applied to a running server; restore drills verify logical backups only so far"
    )]
    NotADump {
        /// The backup.
        id: String,
    },
    /// A physical backup and a server of another major release.
    #[error(
        "backup {id} is a physical backup of {engine} {backup_version}; a physical backup restores only into the same major release ({backup_major}), and the server here is {target_version}: use an image of release {backup_major}, or a logical backup"
    )]
    OtherMajor {
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

/// The backup a restore to `target` starts from. Without a target ([`RecoveryTarget::End`]) it
/// is the one `choice` names, of either method (a physical one then replays the whole archive).
/// With a target, it must be a physical backup that can reach it: `latest` picks the newest
/// physical backup that finished at or before a target time (or whose WAL range ends at or
/// before a target LSN); an id names one, refused when it is logical or finished after the
/// target. The time a backup finished (its upload complete) is later than the point its copy
/// became consistent, so a backup chosen this way always precedes its target.
pub fn choose_for_target<'a>(
    catalog: &'a Catalog,
    choice: &BackupChoice,
    target: RecoveryTarget,
    prefix: &str,
) -> Result<&'a Backup, RestoreRefusal> {
    if target == RecoveryTarget::End {
        return choose(catalog, choice, prefix);
    }
    let reaches = |b: &Backup| -> Result<(), String> {
        if b.manifest.method != BackupMethod::Physical {
            return Err(
                "it is a logical backup; only a physical backup replays the archive to a point"
                    .to_owned(),
            );
        }
        match target {
            RecoveryTarget::End => Ok(()),
            RecoveryTarget::Time(t) if b.manifest.finished <= t => Ok(()),
            RecoveryTarget::Time(_) => Err(format!(
                "it finished at {}, after the target",
                b.manifest.finished
            )),
            RecoveryTarget::Lsn(lsn) => {
                let end = b
                    .manifest
                    .wal
                    .as_ref()
                    .and_then(|w| w.end.parse::<Lsn>().ok());
                match end {
                    Some(end) if end <= lsn => Ok(()),
                    Some(end) => Err(format!(
                        "its copy is consistent only at {end}, after the target"
                    )),
                    None => Err("its manifest records no WAL range".to_owned()),
                }
            }
        }
    };
    match choice {
        BackupChoice::Id(_) => {
            let backup = choose(catalog, choice, prefix)?;
            reaches(backup).map_err(|why| RestoreRefusal::CannotReachTarget {
                id: backup.id.to_string(),
                target: target.to_string(),
                why,
            })?;
            Ok(backup)
        }
        BackupChoice::Latest => catalog
            .complete
            .iter()
            .rev()
            .find(|b| reaches(b).is_ok())
            .ok_or_else(|| {
                let physical: Vec<String> = catalog
                    .complete
                    .iter()
                    .filter(|b| b.manifest.method == BackupMethod::Physical)
                    .map(|b| format!("{} finished {}", b.id, b.manifest.finished))
                    .collect();
                RestoreRefusal::NoBaseBefore {
                    prefix: prefix.to_owned(),
                    target: target.to_string(),
                    available: if physical.is_empty() {
                        "none".to_owned()
                    } else {
                        physical.join(", ")
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

/// Whether `manifest` is a logical backup, the kind applied to a running server.
pub fn check_dump(manifest: &Manifest) -> Result<(), RestoreRefusal> {
    match manifest.method {
        BackupMethod::Logical => Ok(()),
        BackupMethod::Physical => Err(RestoreRefusal::NotADump {
            id: manifest.id.to_string(),
        }),
    }
}

/// Whether `manifest` may be restored into a server of `engine` reporting `target_version`:
/// the same engine, and not a newer major release (a dump of PostgreSQL 16 may use what 15 does
/// not know; MariaDB 11.4 and MySQL 9.x likewise); a physical backup only into the same major
/// release (data files are not readable across majors). A version that cannot be read is not
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
    if manifest.method == BackupMethod::Physical && backup.release(engine) != target.release(engine)
    {
        return Err(RestoreRefusal::OtherMajor {
            id: manifest.id.to_string(),
            engine,
            backup_version: manifest.server_version.clone(),
            backup_major: backup.major_release(engine),
            target_version: target_version.to_owned(),
        });
    }
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

/// The server settings of a PostgreSQL recovery from the archive to `target`, for the
/// temporary server a restore starts on the extracted base backup (`recovery.signal` in its
/// data directory): `restore_command` fetches each file from the archive, the target (inclusive:
/// a transaction committed exactly at the target time or LSN is kept) and `promote` once it is
/// reached; the latest timeline, so a recovery follows the promotions the archive records. A
/// target the archive does not reach stops the server with an error instead of promoting early.
pub fn recovery_settings(target: RecoveryTarget, restore_command: &str) -> Vec<(String, String)> {
    let mut settings = vec![
        ("restore_command".to_owned(), restore_command.to_owned()),
        ("recovery_target_timeline".to_owned(), "latest".to_owned()),
    ];
    match target {
        RecoveryTarget::End => {}
        RecoveryTarget::Time(t) => {
            // PostgreSQL reads `+00` offsets; microseconds are its precision.
            let text = t.strftime("%Y-%m-%d %H:%M:%S%.6f+00").to_string();
            settings.push(("recovery_target_time".to_owned(), text));
        }
        RecoveryTarget::Lsn(lsn) => {
            settings.push(("recovery_target_lsn".to_owned(), lsn.to_string()));
        }
    }
    if target != RecoveryTarget::End {
        settings.push(("recovery_target_inclusive".to_owned(), "on".to_owned()));
        settings.push(("recovery_target_action".to_owned(), "promote".to_owned()));
    }
    settings
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
            method: BackupMethod::Logical,
            wal: None,
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
            data_key: layout.data_key_for(&m.id, m.method),
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

    /// A physical PostgreSQL backup that finished `minutes` after it started, consistent
    /// at `end`.
    fn physical(id: &str, minutes: i64, end: &str) -> Manifest {
        let mut m = manifest(Engine::Postgresql, "15.20", id);
        m.method = BackupMethod::Physical;
        m.finished = m.started + jiff::SignedDuration::from_mins(minutes);
        m.wal = Some(crate::backup::WalRange {
            timeline: 1,
            start: "0/2000028".into(),
            end: end.into(),
        });
        m
    }

    fn at(text: &str) -> RecoveryTarget {
        RecoveryTarget::Time(text.parse().unwrap())
    }

    #[test]
    fn a_target_is_reached_from_the_newest_base_backup_before_it() {
        let catalog = Catalog {
            complete: vec![
                backup(physical("20260301T020000Z", 5, "0/3000100")),
                backup(manifest(Engine::Postgresql, "15.20", "20260301T030000Z")),
                backup(physical("20260301T040000Z", 5, "0/9000100")),
            ],
            ..Catalog::default()
        };
        let pick = |choice: &str, target| {
            choose_for_target(
                &catalog,
                &BackupChoice::parse(choice).unwrap(),
                target,
                "shop/orders/",
            )
            .map(|b| b.id.to_string())
        };
        // The logical backup of 03:00 is never the start of a recovery to a point.
        assert_eq!(
            pick("latest", at("2026-03-01T03:30:00Z")).unwrap(),
            "20260301T020000Z"
        );
        // The 04:00 base backup finished at 04:05: a target at 04:04 is reached from 02:00.
        assert_eq!(
            pick("latest", at("2026-03-01T04:04:00Z")).unwrap(),
            "20260301T020000Z"
        );
        assert_eq!(
            pick("latest", at("2026-03-01T04:05:00Z")).unwrap(),
            "20260301T040000Z"
        );
        assert_eq!(
            pick("latest", RecoveryTarget::Lsn("0/9000100".parse().unwrap())).unwrap(),
            "20260301T040000Z"
        );
        assert_eq!(
            pick("latest", RecoveryTarget::Lsn("0/90000FF".parse().unwrap())).unwrap(),
            "20260301T020000Z"
        );
        // Without a target, `latest` is the newest backup of any method.
        assert_eq!(
            pick("latest", RecoveryTarget::End).unwrap(),
            "20260301T040000Z"
        );
        let early = pick("latest", at("2026-03-01T02:04:59Z")).unwrap_err();
        assert!(
            matches!(early, RestoreRefusal::NoBaseBefore { .. }),
            "{early}"
        );
        assert!(
            early
                .to_string()
                .contains("20260301T020000Z finished 2026-03-01T02:05:00Z"),
            "{early}"
        );
        let logical = pick("20260301T030000Z", at("2026-03-01T03:30:00Z")).unwrap_err();
        assert!(
            logical.to_string().contains("it is a logical backup"),
            "{logical}"
        );
        let after = pick("20260301T040000Z", at("2026-03-01T04:01:00Z")).unwrap_err();
        assert!(
            after
                .to_string()
                .contains("finished at 2026-03-01T04:05:00Z, after the target"),
            "{after}"
        );
        assert_eq!(
            pick("20260301T020000Z", at("2026-03-01T04:30:00Z")).unwrap(),
            "20260301T020000Z"
        );
    }

    #[test]
    fn a_physical_backup_restores_only_into_its_major_release() {
        let m = physical("20260301T020000Z", 5, "0/3000100");
        assert!(check_restorable(&m, Engine::Postgresql, "postgres (PostgreSQL) 15.10").is_ok());
        let newer =
            check_restorable(&m, Engine::Postgresql, "postgres (PostgreSQL) 16.2").unwrap_err();
        assert!(
            matches!(newer, RestoreRefusal::OtherMajor { .. }),
            "{newer}"
        );
        assert!(
            newer
                .to_string()
                .contains("only into the same major release (15)"),
            "{newer}"
        );
        assert!(check_restorable(&m, Engine::Postgresql, "14.9").is_err());
    }

    #[test]
    fn only_a_dump_is_applied_to_a_running_server() {
        let dump = manifest(Engine::Postgresql, "15.20", "20260301T020000Z");
        assert!(check_dump(&dump).is_ok());
        let base = physical("20260301T020000Z", 5, "0/3000100");
        let err = check_dump(&base).unwrap_err();
        assert!(err.to_string().contains("backup unpack"), "{err}");
    }

    #[test]
    fn recovery_settings_name_the_target_inclusively() {
        let command = "/operator/database-operator backup wal-fetch %f %p";
        assert_eq!(
            recovery_settings(RecoveryTarget::End, command),
            [
                ("restore_command".to_owned(), command.to_owned()),
                ("recovery_target_timeline".to_owned(), "latest".to_owned()),
            ]
        );
        let timed = recovery_settings(at("2026-03-01T04:04:00.123456789Z"), command);
        assert_eq!(
            timed[2..],
            [
                (
                    "recovery_target_time".to_owned(),
                    "2026-03-01 04:04:00.123456+00".to_owned()
                ),
                ("recovery_target_inclusive".to_owned(), "on".to_owned()),
                ("recovery_target_action".to_owned(), "promote".to_owned()),
            ]
        );
        let lsn = recovery_settings(RecoveryTarget::Lsn("0/9000100".parse().unwrap()), command);
        assert_eq!(
            lsn[2],
            ("recovery_target_lsn".to_owned(), "0/9000100".to_owned())
        );
    }
}
