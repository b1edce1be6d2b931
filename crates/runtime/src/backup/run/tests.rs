use std::io::Read as _;
use std::sync::{Arc, Mutex};

use database_operator_core::backup::ListedObject;
use mockall::predicate::eq;

use super::*;
use crate::backup::store::{MockBackupStore, UploadId};

fn upload_id() -> UploadId {
    UploadId {
        key: "shop/orders/x.sql.gz".to_owned(),
        handle: 7,
    }
}

/// Bytes that gzip cannot shrink much (a linear congruential sequence).
fn noise(len: usize) -> Vec<u8> {
    let mut x: u32 = 12345;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect()
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[tokio::test]
async fn a_successful_dump_is_uploaded_in_parts_and_completed() {
    let input = noise(200_000);
    let parts = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let calls = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let mut store = MockBackupStore::new();
    let log = calls.clone();
    store
        .expect_start_upload()
        .with(eq("shop/orders/x.sql.gz"))
        .times(1)
        .returning(move |_| {
            log.lock().unwrap().push("start");
            Ok(upload_id())
        });
    let sink = parts.clone();
    let log = calls.clone();
    store.expect_upload_part().returning(move |_, part| {
        log.lock().unwrap().push("part");
        sink.lock().unwrap().push(part);
        Ok(())
    });
    let log = calls.clone();
    store.expect_complete_upload().times(1).returning(move |_| {
        log.lock().unwrap().push("complete");
        Ok(())
    });
    store.expect_abort_upload().never();

    let uploaded = upload_compressed(&store, "shop/orders/x.sql.gz", &input[..], 1024, async {
        Ok(())
    })
    .await
    .unwrap();

    let calls = calls.lock().unwrap();
    assert_eq!(calls.first(), Some(&"start"));
    assert_eq!(calls.last(), Some(&"complete"));
    let parts = parts.lock().unwrap();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert_eq!(calls.len(), parts.len() + 2);
    let (last, rest) = parts.split_last().unwrap();
    assert!(rest.iter().all(|p| p.len() >= 1024));
    assert!(!last.is_empty());
    let stored: Vec<u8> = parts.concat();
    assert_eq!(uploaded.size, stored.len() as u64);
    assert_eq!(uploaded.sha256, hex(&Sha256::digest(&stored)));
    assert_eq!(gunzip(&stored), input);
}

#[tokio::test]
async fn a_failed_dump_aborts_the_upload() {
    let mut store = MockBackupStore::new();
    store.expect_start_upload().returning(|_| Ok(upload_id()));
    store.expect_upload_part().returning(|_, _| Ok(()));
    store.expect_complete_upload().never();
    store.expect_abort_upload().times(1).returning(|_| Ok(()));
    let err = upload_compressed(
        &store,
        "shop/orders/x.sql.gz",
        &b"partial"[..],
        1024,
        async {
            Err(BackupError::Dump {
                program: "pg_dumpall".to_owned(),
                status: "exit status: 1".to_owned(),
            })
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "pg_dumpall failed: exit status: 1");
}

#[tokio::test]
async fn a_failed_part_aborts_the_upload_and_skips_the_rest() {
    let mut store = MockBackupStore::new();
    store.expect_start_upload().returning(|_| Ok(upload_id()));
    store
        .expect_upload_part()
        .times(1)
        .returning(|u, _| Err(StoreError::new("upload part", &u.key, "503 Slow Down")));
    store.expect_complete_upload().never();
    store.expect_abort_upload().times(1).returning(|_| Ok(()));
    let input = noise(10_000);
    let err = upload_compressed(&store, "shop/orders/x.sql.gz", &input[..], 1024, async {
        Ok(())
    })
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "upload part shop/orders/x.sql.gz: 503 Slow Down"
    );
}

#[tokio::test]
async fn a_failed_completion_aborts_too() {
    let mut store = MockBackupStore::new();
    store.expect_start_upload().returning(|_| Ok(upload_id()));
    store.expect_upload_part().returning(|_, _| Ok(()));
    store
        .expect_complete_upload()
        .times(1)
        .returning(|u| Err(StoreError::new("complete upload", &u.key, "400")));
    store.expect_abort_upload().times(1).returning(|_| Ok(()));
    assert!(
        upload_compressed(&store, "k", &b"x"[..], 1024, async { Ok(()) })
            .await
            .is_err()
    );
}

fn t(hours: i64) -> Timestamp {
    "2026-03-01T00:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_hours(hours)
}

fn stored_backup(layout: &Layout, at: Timestamp) -> (Vec<ListedObject>, (String, Vec<u8>)) {
    let id = BackupId::at(at);
    let manifest = Manifest {
        namespace: layout.namespace().to_owned(),
        cluster: layout.name().to_owned(),
        id: id.clone(),
        engine: Engine::Postgresql,
        method: database_operator_api::BackupMethod::Logical,
        wal: None,
        server_version: "15.10".to_owned(),
        position: None,
        size: 42,
        sha256: "0".repeat(64),
        started: at,
        finished: at,
        tables: None,
    };
    (
        vec![
            ListedObject {
                key: layout.data_key(&id),
                size: 42,
                last_modified: at,
            },
            ListedObject {
                key: layout.manifest_key(&id),
                size: 10,
                last_modified: at,
            },
        ],
        (layout.manifest_key(&id), manifest.to_json().into_bytes()),
    )
}

#[tokio::test]
async fn retention_deletes_the_oldest_complete_backups_only() {
    let layout = Layout::new("shop", "orders");
    let mut objects = Vec::new();
    let mut manifests = std::collections::BTreeMap::new();
    for day in 0..4 {
        let (o, (k, m)) = stored_backup(&layout, t(24 * day));
        objects.extend(o);
        manifests.insert(k, m);
    }
    // An upload that never got its manifest, two days old.
    objects.push(ListedObject {
        key: "shop/orders/20260301T120000Z.dump.sql.gz".to_owned(),
        size: 5,
        last_modified: t(12),
    });
    // The write-ahead log archive: a segment from before the oldest kept backup (day 2) goes,
    // a timeline history of the same age and a segment written after it stay.
    for (name, hours) in [
        ("000000010000000000000001.gz", 30),
        ("00000002.history.gz", 30),
        ("000000020000000000000009.gz", 60),
    ] {
        objects.push(ListedObject {
            key: format!("shop/orders/wal/7001/{name}"),
            size: 16,
            last_modified: t(hours),
        });
    }
    let mut store = MockBackupStore::new();
    store
        .expect_list()
        .with(eq("shop/orders/"))
        .returning(move |_| Ok(objects.clone()));
    store
        .expect_get()
        .returning(move |k| Ok(manifests[k].clone()));
    let deleted = Arc::new(Mutex::new(Vec::new()));
    let sink = deleted.clone();
    store.expect_delete().returning(move |k| {
        sink.lock().unwrap().push(k.to_owned());
        Ok(())
    });
    let r = apply_retention(&store, &layout, 2, t(100), SignedDuration::from_hours(24))
        .await
        .unwrap();
    assert_eq!(r.expired.len(), 2);
    assert_eq!(
        *deleted.lock().unwrap(),
        [
            "shop/orders/20260301T000000Z.manifest.json",
            "shop/orders/20260301T000000Z.dump.sql.gz",
            "shop/orders/20260302T000000Z.manifest.json",
            "shop/orders/20260302T000000Z.dump.sql.gz",
            "shop/orders/20260301T120000Z.dump.sql.gz",
            "shop/orders/wal/7001/000000010000000000000001.gz",
        ]
    );
    assert_eq!(r.archive_pruned.len(), 1);
}

#[tokio::test]
async fn delete_prefix_deletes_only_the_clusters_own_objects_manifests_first() {
    let layout = Layout::new("shop", "orders");
    let listed = |key: &str| ListedObject {
        key: key.to_owned(),
        size: 1,
        last_modified: t(0),
    };
    let objects = vec![
        listed("shop/orders/20260301T000000Z.dump.sql.gz"),
        listed("shop/orders/20260301T000000Z.manifest.json"),
        listed("shop/orders/notes.txt"),
        // A store that ignores the prefix must not make us delete a neighbour's backups.
        listed("shop/orders-2/20260301T000000Z.dump.sql.gz"),
    ];
    let mut store = MockBackupStore::new();
    store.expect_list().returning(move |_| Ok(objects.clone()));
    let deleted = Arc::new(Mutex::new(Vec::new()));
    let sink = deleted.clone();
    store.expect_delete().returning(move |k| {
        sink.lock().unwrap().push(k.to_owned());
        Ok(())
    });
    assert_eq!(delete_prefix(&store, &layout).await.unwrap(), 3);
    assert_eq!(
        *deleted.lock().unwrap(),
        [
            "shop/orders/20260301T000000Z.manifest.json",
            "shop/orders/20260301T000000Z.dump.sql.gz",
            "shop/orders/notes.txt",
        ]
    );
}

#[tokio::test]
async fn list_reports_incomplete_uploads_apart() {
    let layout = Layout::new("shop", "orders");
    let (mut objects, (k, m)) = stored_backup(&layout, t(0));
    objects.push(ListedObject {
        key: "shop/orders/20260301T120000Z.dump.sql.gz".to_owned(),
        size: 5,
        last_modified: t(12),
    });
    let mut store = MockBackupStore::new();
    store.expect_list().returning(move |_| Ok(objects.clone()));
    store
        .expect_get()
        .with(eq(k.clone()))
        .returning(move |_| Ok(m.clone()));
    let catalog = catalog(&store, &layout).await.unwrap();
    insta::assert_snapshot!(format_catalog(&layout, &catalog));
}

#[tokio::test]
async fn a_delete_the_bucket_refuses_stops_retention_and_keeps_the_rest() {
    let layout = Layout::new("shop", "orders");
    let mut objects = Vec::new();
    let mut manifests = std::collections::BTreeMap::new();
    for day in 0..4 {
        let (o, (k, m)) = stored_backup(&layout, t(24 * day));
        objects.extend(o);
        manifests.insert(k, m);
    }
    let mut store = MockBackupStore::new();
    store.expect_list().returning(move |_| Ok(objects.clone()));
    store
        .expect_get()
        .returning(move |k| Ok(manifests[k].clone()));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let sink = attempts.clone();
    // The first expired backup goes; the bucket refuses the second one's manifest.
    store.expect_delete().returning(move |k| {
        sink.lock().unwrap().push(k.to_owned());
        if k.starts_with("shop/orders/20260302") {
            Err(StoreError::new("delete", k, "AccessDenied"))
        } else {
            Ok(())
        }
    });
    let r = apply_retention(&store, &layout, 2, t(100), SignedDuration::from_hours(24))
        .await
        .expect("a refused delete is reported, not an error");
    assert_eq!(
        *attempts.lock().unwrap(),
        [
            "shop/orders/20260301T000000Z.manifest.json",
            "shop/orders/20260301T000000Z.dump.sql.gz",
            "shop/orders/20260302T000000Z.manifest.json",
        ],
        "nothing is tried after the refusal"
    );
    assert_eq!(r.kept, 3, "four complete backups, one deleted");
    let error = r.error.expect("the reason");
    assert!(
        error.contains("AccessDenied") && error.contains("20260302T000000Z.manifest.json"),
        "{error}"
    );
}

fn target(host: &str) -> DumpTarget {
    DumpTarget {
        engine: Engine::Postgresql,
        host: host.to_owned(),
        port: 5432,
        user: "postgres".to_owned(),
        tls_ca: None,
    }
}

#[tokio::test]
async fn the_first_host_that_answers_is_dumped_and_a_failed_dump_moves_on() {
    let answers = async |t: &DumpTarget| {
        if t.host == "orders.shop.svc" || t.host == "late" {
            Ok(ServerFacts {
                version: Some("16.4".to_owned()),
                position: None,
            })
        } else {
            Err("no ready replica".to_owned())
        }
    };
    let dumped = Mutex::new(Vec::new());
    let dump = async |t: &DumpTarget, facts: ServerFacts| {
        dumped.lock().unwrap().push(t.host.clone());
        if t.host == "late" {
            Err(BackupError::Dump {
                program: "pg_dumpall".to_owned(),
                status: "exit status: 1".to_owned(),
            })
        } else {
            Ok((t.host.clone(), facts))
        }
    };
    let pause = std::time::Duration::ZERO;
    let hosts = |names: &[&str]| names.iter().map(|n| target(n)).collect::<Vec<_>>();
    // The replicas do not answer: the primary is dumped, with what it answered.
    let (chosen, facts) = dump_first_that_works(
        hosts(&["orders-replicas.shop.svc", "orders.shop.svc"]),
        answers,
        dump,
        pause,
    )
    .await
    .unwrap();
    assert_eq!(chosen, "orders.shop.svc");
    assert_eq!(facts.version.as_deref(), Some("16.4"));
    assert_eq!(*dumped.lock().unwrap(), ["orders.shop.svc"]);
    // A server that answers but whose dump fails: the next one that answers.
    dumped.lock().unwrap().clear();
    let (chosen, _) = dump_first_that_works(
        hosts(&["late", "down", "orders.shop.svc"]),
        answers,
        dump,
        pause,
    )
    .await
    .unwrap();
    assert_eq!(chosen, "orders.shop.svc");
    assert_eq!(*dumped.lock().unwrap(), ["late", "orders.shop.svc"]);
    // Every dump failed: the failure, not a dump of a host that never answered.
    dumped.lock().unwrap().clear();
    let failed = dump_first_that_works(hosts(&["late", "down"]), answers, dump, pause).await;
    assert!(
        matches!(failed, Err(BackupError::Dump { .. })),
        "{failed:?}"
    );
    assert_eq!(*dumped.lock().unwrap(), ["late"]);
    // None answers: the last, with nothing known (the dump says why it fails).
    dumped.lock().unwrap().clear();
    let (chosen, facts) = dump_first_that_works(
        hosts(&["a", "b"]),
        |_: &DumpTarget| async { Err::<ServerFacts, _>("down".to_owned()) },
        dump,
        pause,
    )
    .await
    .unwrap();
    assert_eq!(chosen, "b");
    assert_eq!(facts, ServerFacts::default());
    assert!(matches!(
        dump_first_that_works(Vec::<DumpTarget>::new(), answers, dump, pause).await,
        Err(BackupError::NoHost)
    ));
}

/// A physical backup whose tar holds no `backup_manifest` (here: no tar at all) is deleted
/// again once uploaded, and no manifest is written: it never counts as a backup.
#[tokio::test]
async fn a_base_backup_without_its_backup_manifest_is_deleted_and_fails() {
    let layout = Layout::new("shop", "orders");
    let at: Timestamp = "2026-03-01T02:00:00Z".parse().unwrap();
    let data_key = "shop/orders/20260301T020000Z.base.tar.gz";
    let mut store = MockBackupStore::new();
    store.expect_list().returning(|_| Ok(Vec::new()));
    store
        .expect_start_upload()
        .with(eq(data_key))
        .times(1)
        .returning(|k| {
            Ok(UploadId {
                key: k.to_owned(),
                handle: 1,
            })
        });
    store.expect_upload_part().returning(|_, _| Ok(()));
    store
        .expect_complete_upload()
        .times(1)
        .returning(|_| Ok(()));
    let deleted = Arc::new(Mutex::new(Vec::new()));
    let sink = deleted.clone();
    store.expect_delete().returning(move |k| {
        sink.lock().unwrap().push(k.to_owned());
        Ok(())
    });
    store.expect_put().never();
    let dump = DumpCommand {
        program: "sh".into(),
        args: vec!["-c".to_owned(), "printf 'no tar here'".to_owned()],
        env: Vec::new(),
    };
    let err = run_backup(
        &store,
        &layout,
        Engine::Postgresql,
        BackupMethod::Physical,
        &dump,
        &[],
        ServerFacts::default(),
        7,
        SignedDuration::from_hours(24),
        None,
        || at,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "reading the dump: the base backup's tar: the tar stream holds no backup_manifest"
    );
    assert_eq!(*deleted.lock().unwrap(), [data_key]);
}
