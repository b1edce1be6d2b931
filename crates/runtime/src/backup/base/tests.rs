use super::*;

const MANIFEST: &str = r#"{ "PostgreSQL-Backup-Manifest-Version": 1,
"Files": [
{ "Path": "PG_VERSION", "Size": 3, "Last-Modified": "2026-12-07 22:04:01 GMT", "Checksum-Algorithm": "CRC32C", "Checksum": "7e1bd3ff" }
],
"WAL-Ranges": [
{ "Timeline": 1, "Start-LSN": "0/2000028", "End-LSN": "0/2000100" }
],
"Manifest-Checksum": "d446221c5167707d8ee466bb0800f79f285f01d2a0a5032953e6f3d0d45656ea"}
"#;

/// A tar as `pg_basebackup` writes one: directories, files, the manifest near the end.
fn base_tar(manifest: Option<&str>) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8], kind: tar::EntryType| {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(if kind == tar::EntryType::Directory {
            0o700
        } else {
            0o600
        });
        builder.append_data(&mut header, name, data).unwrap();
    };
    add("base", b"", tar::EntryType::Directory);
    add("PG_VERSION", b"15\n", tar::EntryType::Regular);
    // A file named like the manifest elsewhere is not it.
    add(
        "base/backup_manifest",
        b"not this one",
        tar::EntryType::Regular,
    );
    add(
        "base/1/1259",
        &vec![7u8; 3 * 8192 + 100],
        tar::EntryType::Regular,
    );
    if let Some(m) = manifest {
        add("backup_manifest", m.as_bytes(), tar::EntryType::Regular);
    }
    add(
        "backup_label",
        b"START WAL LOCATION: 0/2000028\n",
        tar::EntryType::Regular,
    );
    builder.into_inner().unwrap()
}

#[test]
fn the_tap_finds_the_manifest_however_the_stream_is_cut() {
    let tar = base_tar(Some(MANIFEST));
    for chunk in [1, 7, 511, 512, 513, 4096, tar.len()] {
        let mut tap = TarTap::new(BACKUP_MANIFEST, MANIFEST_LIMIT);
        for part in tar.chunks(chunk) {
            tap.feed(part);
        }
        assert_eq!(
            tap.finish().as_deref(),
            Ok(MANIFEST.as_bytes()),
            "chunks of {chunk}"
        );
    }
}

#[test]
fn a_stream_without_the_manifest_or_cut_short_says_so() {
    let mut tap = TarTap::new(BACKUP_MANIFEST, MANIFEST_LIMIT);
    tap.feed(&base_tar(None));
    assert_eq!(
        tap.finish(),
        Err("the tar stream holds no backup_manifest".to_owned())
    );
    // Cut inside the manifest's data: it was not read whole.
    let tar = base_tar(Some(MANIFEST));
    let at = tar
        .windows(20)
        .position(|w| w == b"\"WAL-Ranges\": [\n{ \"T")
        .unwrap();
    let mut tap = TarTap::new(BACKUP_MANIFEST, MANIFEST_LIMIT);
    tap.feed(&tar[..at]);
    assert!(tap.finish().is_err());
    let mut small = TarTap::new(BACKUP_MANIFEST, 100);
    small.feed(&tar);
    assert_eq!(
        small.finish(),
        Err("backup_manifest is larger than 100 bytes".to_owned())
    );
}

#[test]
fn sizes_are_octal_or_binary() {
    assert_eq!(entry_size(b"00000001750\0"), Some(1000));
    assert_eq!(entry_size(b"     1750 \0\0"), Some(1000));
    let mut big = [0u8; 12];
    big[0] = 0x80;
    big[7] = 0x02; // 2 << 32
    assert_eq!(entry_size(&big), Some(2 << 32));
    assert_eq!(entry_size(b"12x4\0\0\0\0\0\0\0\0"), None);
}

#[test]
fn the_wal_range_is_read_from_the_manifest() {
    assert_eq!(
        wal_range(MANIFEST.as_bytes()),
        Ok(WalRange {
            timeline: 1,
            start: "0/2000028".to_owned(),
            end: "0/2000100".to_owned(),
        })
    );
    // Across a promotion, as PostgreSQL lists it: the newest timeline first.
    let across = r#"{"WAL-Ranges": [
        { "Timeline": 3, "Start-LSN": "0/50001F0", "End-LSN": "0/6000100" },
        { "Timeline": 2, "Start-LSN": "0/5000028", "End-LSN": "0/50001F0" }]}"#;
    assert_eq!(
        wal_range(across.as_bytes()).map(|r| (r.timeline, r.start, r.end)),
        Ok((2, "0/5000028".to_owned(), "0/6000100".to_owned()))
    );
    assert_eq!(
        wal_range(br#"{"WAL-Ranges": []}"#),
        Err("backup_manifest has no WAL-Ranges".to_owned())
    );
    assert!(wal_range(b"{").unwrap_err().contains("is not JSON"));
    assert_eq!(
        wal_range(br#"{"WAL-Ranges": [{"Timeline": 1, "Start-LSN": "0/1"}]}"#),
        Err("backup_manifest: a WAL range without End-LSN".to_owned())
    );
    assert!(
        wal_range(br#"{"WAL-Ranges": [{"Timeline": 1, "Start-LSN": "x", "End-LSN": "0/2"}]}"#)
            .unwrap_err()
            .starts_with("backup_manifest: Start-LSN \"x\": ")
    );
}

#[test]
fn unpacking_writes_the_data_directory_and_nothing_outside_it() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("data");
    std::fs::create_dir(&target).unwrap();
    let n = unpack(&base_tar(Some(MANIFEST))[..], &target).unwrap();
    assert_eq!(n, 6);
    assert_eq!(std::fs::read(target.join("PG_VERSION")).unwrap(), b"15\n");
    assert_eq!(
        std::fs::metadata(target.join("base/1/1259")).unwrap().len(),
        3 * 8192 + 100
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(target.join("PG_VERSION"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // An entry naming a path outside: refused, nothing written there.
    let mut evil = tar::Header::new_old();
    evil.as_old_mut().name[..12].copy_from_slice(b"../escaped\0\0");
    evil.set_size(3);
    evil.set_mode(0o600);
    evil.set_entry_type(tar::EntryType::Regular);
    evil.set_cksum();
    let mut bytes = evil.as_bytes().to_vec();
    bytes.extend_from_slice(b"bad");
    bytes.resize(1024 + 1024, 0);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let err = unpack(&bytes[..], &other).unwrap_err();
    assert!(err.contains("a path outside its directory"), "{err}");
    assert!(!dir.path().join("escaped").exists());

    // A device node is no part of a data directory.
    let mut fifo = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Fifo);
    header.set_size(0);
    fifo.append_data(&mut header, "pipe", &[][..]).unwrap();
    let third = dir.path().join("third");
    std::fs::create_dir(&third).unwrap();
    let err = unpack(&fifo.into_inner().unwrap()[..], &third).unwrap_err();
    assert!(err.contains("of type Fifo"), "{err}");
}

#[test]
fn the_base_backup_is_a_tar_on_stdout_without_wal_over_tls() {
    use database_operator_api::Engine;
    let target = DumpTarget {
        engine: Engine::Postgresql,
        host: "orders.shop.svc".to_owned(),
        port: 5432,
        user: "replicator".to_owned(),
        tls_ca: Some("/etc/ca/ca.crt".into()),
    };
    let command = base_backup_command(
        &target,
        Some(Path::new("/usr/lib/postgresql/15/bin")),
        Path::new("/tmp/pw"),
    )
    .expect("PostgreSQL has base backups");
    assert_eq!(
        command.program,
        Path::new("/usr/lib/postgresql/15/bin/pg_basebackup")
    );
    assert_eq!(
        command.args,
        [
            "--host=orders.shop.svc",
            "--port=5432",
            "--username=replicator",
            "--no-password",
            "--pgdata=-",
            "--format=tar",
            "--wal-method=none",
            "--checkpoint=fast",
            "--label=database-operator",
        ]
    );
    let env: Vec<(&str, &str)> = command
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [
            ("PGPASSFILE", "/tmp/pw"),
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", "/etc/ca/ca.crt"),
        ]
    );
    // The MySQL family takes no physical backups here.
    for engine in [Engine::Mysql, Engine::Mariadb] {
        let other = DumpTarget {
            engine,
            ..target.clone()
        };
        assert!(base_backup_command(&other, None, Path::new("/tmp/pw")).is_none());
    }
}
