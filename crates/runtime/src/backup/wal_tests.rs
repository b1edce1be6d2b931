use std::sync::{Arc, Mutex};

use super::*;
use crate::backup::store::MockBackupStore;

const SEGMENT: &str = "000000010000000000000003";
const SYSTEM: u64 = 7_412_345_678_901_234_567;
const KEY: &str = "shop/orders/wal/7412345678901234567/000000010000000000000003.gz";

fn segment_file(content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SEGMENT);
    std::fs::write(&path, content).unwrap();
    (dir, path)
}

fn gzip(content: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(content).unwrap();
    encoder.finish().unwrap()
}

fn layout() -> Layout {
    Layout::new("shop", "orders")
}

#[tokio::test]
async fn a_new_file_is_stored_compressed_under_its_key() {
    let content: Vec<u8> = (0..16u32 * 1024).flat_map(|i| i.to_le_bytes()).collect();
    let (_dir, path) = segment_file(&content);
    let written = Arc::new(Mutex::new(Vec::new()));
    let mut store = MockBackupStore::new();
    store
        .expect_get_opt()
        .withf(|key| key == KEY)
        .returning(|_| Ok(None));
    let w = written.clone();
    store.expect_put().times(1).returning(move |key, body| {
        w.lock().unwrap().push((key.to_owned(), body));
        Ok(())
    });
    let pushed = push(&store, &layout(), SYSTEM, &path, SEGMENT)
        .await
        .unwrap();
    let (key, body) = written.lock().unwrap().pop().unwrap();
    assert_eq!(key, KEY);
    assert_eq!(
        pushed,
        Pushed::Uploaded {
            key: KEY.into(),
            bytes: content.len() as u64,
            stored: body.len() as u64
        }
    );
    let mut back = Vec::new();
    GzDecoder::new(body.as_slice())
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, content);
}

#[tokio::test]
async fn the_same_file_again_is_not_written_twice() {
    let (_dir, path) = segment_file(b"wal bytes");
    let mut store = MockBackupStore::new();
    store
        .expect_get_opt()
        .returning(|_| Ok(Some(gzip(b"wal bytes"))));
    store.expect_put().never();
    let pushed = push(&store, &layout(), SYSTEM, &path, SEGMENT)
        .await
        .unwrap();
    assert_eq!(pushed, Pushed::AlreadyArchived { key: KEY.into() });
}

#[tokio::test]
async fn different_content_under_the_key_is_never_overwritten() {
    let (_dir, path) = segment_file(b"this primary's segment");
    for stored in [gzip(b"another history's segment"), b"not gzip".to_vec()] {
        let mut store = MockBackupStore::new();
        store
            .expect_get_opt()
            .returning(move |_| Ok(Some(stored.clone())));
        store.expect_put().never();
        let err = push(&store, &layout(), SYSTEM, &path, SEGMENT)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, WalPushError::Different { .. }), "{text}");
        assert!(
            text.contains(KEY) && text.contains("refusing to overwrite"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn names_that_are_not_wal_files_and_unreadable_files_touch_nothing() {
    let (dir, path) = segment_file(b"x");
    let mut store = MockBackupStore::new();
    store.expect_get_opt().never();
    store.expect_put().never();
    let err = push(&store, &layout(), SYSTEM, &path, "../../etc/passwd")
        .await
        .unwrap_err();
    assert!(matches!(err, WalPushError::Name(_)), "{err}");
    let missing = dir.path().join("000000010000000000000009");
    let err = push(
        &store,
        &layout(),
        SYSTEM,
        &missing,
        "000000010000000000000009",
    )
    .await
    .unwrap_err();
    assert!(matches!(err, WalPushError::Read { .. }), "{err}");
}

#[tokio::test]
async fn a_failing_bucket_fails_the_push() {
    let (_dir, path) = segment_file(b"x");
    let mut store = MockBackupStore::new();
    store
        .expect_get_opt()
        .returning(|key| Err(StoreError::new("get", key, "connection refused")));
    store.expect_put().never();
    let err = push(&store, &layout(), SYSTEM, &path, SEGMENT)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("connection refused"), "{err}");
}

#[tokio::test]
async fn a_fetched_file_is_decompressed_into_place_and_a_missing_one_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("RECOVERYXLOG");
    let mut store = MockBackupStore::new();
    store
        .expect_get_opt()
        .withf(|key| key == KEY)
        .returning(|_| Ok(Some(gzip(b"segment content"))));
    let fetched = fetch(&store, &layout(), SYSTEM, SEGMENT, &dest)
        .await
        .unwrap();
    assert_eq!(fetched, Fetched::Restored { bytes: 15 });
    assert_eq!(std::fs::read(&dest).unwrap(), b"segment content");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["RECOVERYXLOG"], "nothing partial left beside it");

    let mut store = MockBackupStore::new();
    store.expect_get_opt().returning(|_| Ok(None));
    let absent = dir.path().join("00000002.history");
    let fetched = fetch(&store, &layout(), SYSTEM, "00000002.history", &absent)
        .await
        .unwrap();
    assert_eq!(fetched, Fetched::NotArchived);
    assert!(!absent.exists());
}

#[tokio::test]
async fn a_corrupt_archived_file_stops_recovery_instead_of_ending_it() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("RECOVERYXLOG");
    let mut corrupt = gzip(&[7u8; 64 * 1024]);
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 1;
    let mut store = MockBackupStore::new();
    store
        .expect_get_opt()
        .returning(move |_| Ok(Some(corrupt.clone())));
    let err = fetch(&store, &layout(), SYSTEM, SEGMENT, &dest)
        .await
        .unwrap_err();
    assert!(matches!(err, WalFetchError::Corrupt { .. }), "{err}");
    assert!(err.exit_code() > 125, "the server must stop its recovery");
    assert!(!dest.exists());

    let mut store = MockBackupStore::new();
    store
        .expect_get_opt()
        .returning(|key| Err(StoreError::new("get", key, "connection refused")));
    let err = fetch(&store, &layout(), SYSTEM, SEGMENT, &dest)
        .await
        .unwrap_err();
    assert!(
        err.exit_code() > 125,
        "a bucket that cannot be read is no end of the archive: {err}"
    );
    let err = fetch(&store, &layout(), SYSTEM, "../x", &dest)
        .await
        .unwrap_err();
    assert!(matches!(err, WalFetchError::Name(_)), "{err}");
}

#[test]
fn the_system_identifier_is_read_from_pg_control() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("global")).unwrap();
    let mut control = SYSTEM.to_ne_bytes().to_vec();
    control.extend([0u8; 100]);
    std::fs::write(dir.path().join("global/pg_control"), control).unwrap();
    assert_eq!(system_identifier(dir.path()).unwrap(), SYSTEM);
    let err = system_identifier(&dir.path().join("nowhere")).unwrap_err();
    assert!(err.to_string().contains("pg_control"), "{err}");
}
