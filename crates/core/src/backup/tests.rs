use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn layout() -> Layout {
    Layout::new("shop", "orders")
}

fn manifest(layout: &Layout, id: &BackupId, size: u64) -> Manifest {
    let started = id.timestamp();
    Manifest {
        namespace: layout.namespace().to_owned(),
        cluster: layout.name().to_owned(),
        id: id.clone(),
        engine: Engine::Postgresql,
        method: database_operator_api::BackupMethod::Logical,
        wal: None,
        server_version: "16.4".to_owned(),
        position: Some("0/3000060".to_owned()),
        size,
        sha256: "ab".repeat(32),
        started,
        finished: started + SignedDuration::from_secs(90),
        tables: None,
    }
}

fn object(key: String, size: u64, at: Timestamp) -> ListedObject {
    ListedObject {
        key,
        size,
        last_modified: at,
    }
}

/// Adds a complete backup of `size` bytes started at `at` to `listing`.
fn add_complete(listing: &mut Listing, layout: &Layout, at: Timestamp, size: u64) -> BackupId {
    let id = BackupId::at(at);
    let m = manifest(layout, &id, size);
    listing.objects.push(object(layout.data_key(&id), size, at));
    listing
        .objects
        .push(object(layout.manifest_key(&id), 300, at));
    listing
        .manifests
        .insert(layout.manifest_key(&id), m.to_json().into_bytes());
    id
}

#[test]
fn prefix_is_namespace_then_name() {
    assert_eq!(cluster_prefix("shop", "orders"), "shop/orders/");
    let l = layout();
    let id = BackupId::at(ts("2026-03-01T02:00:00.75Z"));
    assert_eq!(id.as_str(), "20260301T020000Z");
    assert_eq!(l.data_key(&id), "shop/orders/20260301T020000Z.dump.sql.gz");
    assert_eq!(
        l.manifest_key(&id),
        "shop/orders/20260301T020000Z.manifest.json"
    );
    assert_eq!(id.timestamp(), ts("2026-03-01T02:00:00Z"));
}

#[test]
fn keys_are_classified_strictly() {
    let l = layout();
    let id = BackupId::parse("20260301T020000Z").unwrap();
    assert_eq!(
        l.classify_key("shop/orders/20260301T020000Z.dump.sql.gz"),
        Some(KeyKind::Data(
            id.clone(),
            database_operator_api::BackupMethod::Logical
        ))
    );
    assert_eq!(
        l.classify_key("shop/orders/20260301T020000Z.manifest.json"),
        Some(KeyKind::Manifest(id))
    );
    for key in [
        "shop/orders-2/20260301T020000Z.dump.sql.gz",
        "shop/ordersx/20260301T020000Z.dump.sql.gz",
        "shop/orders/sub/20260301T020000Z.dump.sql.gz",
        "shop/orders/20261301T020000Z.dump.sql.gz",
        "shop/orders/20260301T020000Z.sql",
        // A dump of the former backup.sh: not ours to count or delete.
        "shop/orders/20260301T020000Z.sql.gz",
        "shop/orders/notes.txt",
        "other/orders/20260301T020000Z.dump.sql.gz",
    ] {
        assert_eq!(l.classify_key(key), None, "{key}");
    }
}

#[test]
fn ids_reject_other_shapes() {
    for text in [
        "",
        "20260301T020000",
        "20260301 020000Z",
        "2026030lT020000Z",
        "20260230T020000Z",
        "20260301T250000Z",
        "20260301T020000ZZ",
    ] {
        assert_eq!(BackupId::parse(text), None, "{text}");
    }
}

#[test]
fn manifest_round_trips_and_is_stable() {
    let l = layout();
    let id = BackupId::parse("20260301T020000Z").unwrap();
    let m = manifest(&l, &id, 1234);
    let json = m.to_json();
    assert_eq!(Manifest::parse(json.as_bytes(), &l, &id), Ok(m));
    insta::assert_snapshot!(json);
}

#[test]
fn manifest_errors_are_clear() {
    let l = layout();
    let id = BackupId::parse("20260301T020000Z").unwrap();
    let good: serde_json::Value = serde_json::from_str(&manifest(&l, &id, 10).to_json()).unwrap();
    let with = |field: &str, value: serde_json::Value| {
        let mut v = good.clone();
        v[field] = value;
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"not json".to_vec(),
            "not a backup manifest: expected ident at line 1 column 2",
        ),
        (b"{}".to_vec(), "not a backup manifest: no \"kind\""),
        (
            with("kind", "other".into()),
            "not a backup manifest: kind is \"other\", expected \"database-operator.backup\"",
        ),
        (
            with("formatVersion", 2.into()),
            "manifest format version 2 is not supported (this operator reads version 1)",
        ),
        (
            with("cluster", "invoices".into()),
            "manifest belongs to cluster shop/invoices, not shop/orders",
        ),
        (
            with("namespace", "web".into()),
            "manifest belongs to cluster web/orders, not shop/orders",
        ),
        (
            with("id", "20260302T020000Z".into()),
            "manifest describes backup 20260302T020000Z, but is stored as the manifest of 20260301T020000Z",
        ),
        (
            with("compression", "zstd".into()),
            "unsupported compression \"zstd\" (expected \"gzip\")",
        ),
        (
            with("sha256", "ABC".into()),
            "sha256 \"ABC\" is not 64 lowercase hex digits",
        ),
        (
            with("started", "yesterday".into()),
            "started \"yesterday\" is not an RFC 3339 time",
        ),
        (
            with("finished", "2026-03-01T01:00:00Z".into()),
            "finished 2026-03-01T01:00:00Z is before started 2026-03-01T02:00:00Z",
        ),
        (
            with("size", "big".into()),
            "not a backup manifest: invalid type: string \"big\", expected u64",
        ),
        (
            with("engine", "oracle".into()),
            "not a backup manifest: unknown variant `oracle`, expected one of `mysql`, `postgresql`, `mariadb`",
        ),
    ];
    for (bytes, message) in cases {
        let err = Manifest::parse(&bytes, &l, &id).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
}

#[test]
fn catalog_counts_only_complete_backups() {
    let l = layout();
    let mut listing = Listing::default();
    let t = ts("2026-03-01T02:00:00Z");
    let good = add_complete(&mut listing, &l, t, 100);
    // A dump whose manifest is missing.
    let orphan = BackupId::at(t + SignedDuration::from_hours(24));
    listing
        .objects
        .push(object(l.data_key(&orphan), 50, orphan.timestamp()));
    // A manifest whose dump is missing.
    let lonely = BackupId::at(t + SignedDuration::from_hours(48));
    listing
        .objects
        .push(object(l.manifest_key(&lonely), 300, lonely.timestamp()));
    // A manifest recording another size than stored.
    let short = add_complete(&mut listing, &l, t + SignedDuration::from_hours(72), 100);
    listing
        .objects
        .iter_mut()
        .find(|o| o.key == l.data_key(&short))
        .unwrap()
        .size = 99;
    // A manifest that is not one.
    let bad = BackupId::at(t + SignedDuration::from_hours(96));
    listing
        .objects
        .push(object(l.data_key(&bad), 10, bad.timestamp()));
    listing
        .objects
        .push(object(l.manifest_key(&bad), 2, bad.timestamp()));
    listing
        .manifests
        .insert(l.manifest_key(&bad), b"{}".to_vec());
    // A manifest that was listed but not read.
    let unread = BackupId::at(t + SignedDuration::from_hours(120));
    listing
        .objects
        .push(object(l.data_key(&unread), 10, unread.timestamp()));
    listing
        .objects
        .push(object(l.manifest_key(&unread), 2, unread.timestamp()));
    listing
        .objects
        .push(object("shop/orders/README".into(), 1, t));
    listing
        .objects
        .push(object("shop/orders/20250101T020000Z.sql.gz".into(), 9, t));
    listing.objects.push(object(
        "shop/orders-old/20260301T020000Z.dump.sql.gz".into(),
        1,
        t,
    ));

    let catalog = classify(&l, &listing);
    assert_eq!(
        catalog.complete.iter().map(|b| &b.id).collect::<Vec<_>>(),
        [&good]
    );
    let reasons: Vec<(String, String)> = catalog
        .incomplete
        .iter()
        .map(|i| (i.id.to_string(), i.reason.to_string()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("20260302T020000Z".into(), "dump without manifest".into()),
            ("20260303T020000Z".into(), "manifest without dump".into()),
            (
                "20260304T020000Z".into(),
                "dump is 99 bytes, the manifest records 100".into()
            ),
            (
                "20260305T020000Z".into(),
                "invalid manifest: not a backup manifest: no \"kind\"".into()
            ),
            (
                "20260306T020000Z".into(),
                "manifest could not be read".into()
            ),
        ]
    );
    assert_eq!(
        catalog.unrecognised,
        ["shop/orders/README", "shop/orders/20250101T020000Z.sql.gz"]
    );
    let r = select_retention(
        &l,
        &catalog,
        1,
        t + SignedDuration::from_hours(1000),
        DEFAULT_INCOMPLETE_GRACE,
    );
    assert!(
        !r.delete
            .iter()
            .chain(&r.stale_incomplete)
            .any(|k| k.ends_with("Z.sql.gz"))
    );
    assert_eq!(
        catalog.outside,
        ["shop/orders-old/20260301T020000Z.dump.sql.gz"]
    );
}

/// A physical manifest of PostgreSQL 15 for `id`, consistent at 0/3000100.
fn physical(layout: &Layout, id: &BackupId, size: u64) -> Manifest {
    Manifest {
        method: database_operator_api::BackupMethod::Physical,
        wal: Some(WalRange {
            timeline: 1,
            start: "0/2000028".to_owned(),
            end: "0/3000100".to_owned(),
        }),
        server_version: "15.20".to_owned(),
        ..manifest(layout, id, size)
    }
}

#[test]
fn a_physical_backup_is_its_base_tar_and_its_manifest() {
    use database_operator_api::BackupMethod::{Logical, Physical};
    let l = layout();
    let id = BackupId::at(ts("2026-03-01T02:00:00Z"));
    assert_eq!(
        l.data_key_for(&id, Physical),
        "shop/orders/20260301T020000Z.base.tar.gz"
    );
    assert_eq!(
        l.classify_key("shop/orders/20260301T020000Z.base.tar.gz"),
        Some(KeyKind::Data(id.clone(), Physical))
    );
    let mut listing = Listing::default();
    let at = id.timestamp();
    listing
        .objects
        .push(object(l.data_key_for(&id, Physical), 500, at));
    // A dump under the same id is not this backup's data: reported, never counted or deleted.
    listing
        .objects
        .push(object(l.data_key_for(&id, Logical), 7, at));
    listing.objects.push(object(l.manifest_key(&id), 300, at));
    listing.manifests.insert(
        l.manifest_key(&id),
        physical(&l, &id, 500).to_json().into_bytes(),
    );
    let catalog = classify(&l, &listing);
    assert_eq!(catalog.complete.len(), 1, "{catalog:?}");
    let backup = &catalog.complete[0];
    assert_eq!(backup.data_key, l.data_key_for(&id, Physical));
    assert_eq!(backup.manifest.method, Physical);
    assert_eq!(
        backup.manifest.wal.as_ref().map(|w| w.end.as_str()),
        Some("0/3000100")
    );
    assert_eq!(catalog.unrecognised, [l.data_key_for(&id, Logical)]);
    let r = select_retention(&l, &catalog, 1, at, DEFAULT_INCOMPLETE_GRACE);
    assert!(
        r.delete.is_empty() && r.stale_incomplete.is_empty(),
        "{r:?}"
    );

    // A physical manifest whose tar is missing (only a dump there) is no backup.
    let mut no_tar = listing.clone();
    no_tar.objects.retain(|o| !o.key.ends_with(BASE_SUFFIX));
    let catalog = classify(&l, &no_tar);
    assert!(catalog.complete.is_empty());
    assert_eq!(catalog.incomplete[0].reason, IncompleteReason::NoData);
}

#[test]
fn a_physical_manifest_needs_its_wal_range() {
    let l = layout();
    let id = BackupId::at(ts("2026-03-01T02:00:00Z"));
    let good = physical(&l, &id, 500);
    assert_eq!(
        Manifest::parse(good.to_json().as_bytes(), &l, &id),
        Ok(good.clone())
    );
    let refused = |m: Manifest| {
        Manifest::parse(m.to_json().as_bytes(), &l, &id)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refused(Manifest {
            wal: None,
            ..good.clone()
        }),
        "physical backup: no WAL range (wal.start, wal.end)"
    );
    let mut backwards = good.clone();
    backwards.wal.as_mut().unwrap().end = "0/1000000".to_owned();
    assert_eq!(
        refused(backwards),
        "physical backup: wal.end 0/1000000 is before wal.start 0/2000028"
    );
    let mut garbled = good.clone();
    garbled.wal.as_mut().unwrap().start = "yesterday".to_owned();
    assert!(refused(garbled).starts_with("physical backup: wal.start: "));
    assert_eq!(
        refused(Manifest {
            engine: Engine::Mariadb,
            ..good.clone()
        }),
        "physical backup: physical backups exist for postgresql only, not mariadb"
    );
    let logical_with_range = Manifest {
        method: database_operator_api::BackupMethod::Logical,
        ..good
    };
    assert_eq!(
        refused(logical_with_range),
        "physical backup: a logical backup records no WAL range"
    );
    // A manifest written before physical backups existed has no method: logical.
    let old = manifest(&l, &id, 10)
        .to_json()
        .replace("  \"method\": \"logical\",\n", "");
    assert!(!old.contains("method"), "{old}");
    assert_eq!(
        Manifest::parse(old.as_bytes(), &l, &id),
        Ok(manifest(&l, &id, 10))
    );
}

#[test]
fn retention_keeps_the_newest_and_deletes_manifests_first() {
    let l = layout();
    let mut listing = Listing::default();
    let t = ts("2026-03-01T02:00:00Z");
    let ids: Vec<BackupId> = (0..4)
        .map(|d| add_complete(&mut listing, &l, t + SignedDuration::from_hours(24 * d), 10))
        .collect();
    let catalog = classify(&l, &listing);
    let now = t + SignedDuration::from_hours(100);
    let r = select_retention(&l, &catalog, 2, now, DEFAULT_INCOMPLETE_GRACE);
    assert_eq!(r.expired, ids[..2]);
    assert_eq!(
        r.delete,
        [
            "shop/orders/20260301T020000Z.manifest.json",
            "shop/orders/20260301T020000Z.dump.sql.gz",
            "shop/orders/20260302T020000Z.manifest.json",
            "shop/orders/20260302T020000Z.dump.sql.gz",
        ]
    );
    assert!(r.stale_incomplete.is_empty());
    // Retention 0 (refused by the schema) still keeps one.
    let r = select_retention(&l, &catalog, 0, now, DEFAULT_INCOMPLETE_GRACE);
    assert_eq!(r.expired, ids[..3]);
}

#[test]
fn incomplete_uploads_are_stale_only_after_the_grace_period() {
    let l = layout();
    let t = ts("2026-03-01T02:00:00Z");
    let id = BackupId::at(t);
    let listing = Listing {
        objects: vec![object(l.data_key(&id), 10, t)],
        manifests: BTreeMap::new(),
    };
    let catalog = classify(&l, &listing);
    let grace = SignedDuration::from_hours(1);
    let r = select_retention(&l, &catalog, 1, t + grace, grace);
    assert!(r.stale_incomplete.is_empty() && r.delete.is_empty());
    let r = select_retention(
        &l,
        &catalog,
        1,
        t + grace + SignedDuration::from_secs(1),
        grace,
    );
    assert_eq!(r.stale_incomplete, [l.data_key(&id)]);
    assert!(r.delete.is_empty());
}

// ------------------------------------------------------------------------------------------
// Properties
// ------------------------------------------------------------------------------------------

/// What one generated backup id holds in the bucket.
#[derive(Clone, Debug)]
enum Shape {
    Complete,
    NoManifest,
    NoData,
    SizeMismatch,
    ForeignManifest,
    Unread,
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        4 => Just(Shape::Complete),
        1 => Just(Shape::NoManifest),
        1 => Just(Shape::NoData),
        1 => Just(Shape::SizeMismatch),
        1 => Just(Shape::ForeignManifest),
        1 => Just(Shape::Unread),
    ]
}

/// A listing of up to 12 ids (hours apart, some objects written late) plus keys of neighbouring
/// clusters and odd names the store may return; `now` some hours after.
fn scenario() -> impl Strategy<Value = (Listing, Timestamp)> {
    (
        proptest::collection::btree_map(0u32..200, (shape(), 0i64..48, 1u64..1000), 0..12),
        proptest::collection::vec(
            prop_oneof![
                Just("shop/orders-2/".to_owned()),
                Just("shop/order/".to_owned()),
                Just("shop/orders/sub/".to_owned()),
                Just("".to_owned()),
            ],
            0..4,
        ),
        0i64..400,
    )
        .prop_map(|(ids, foreign, now_hours)| {
            let l = layout();
            let base = ts("2026-03-01T00:00:00Z");
            let mut listing = Listing::default();
            for (hour, (shape, late, size)) in ids {
                let at = base + SignedDuration::from_hours(i64::from(hour));
                let written = at + SignedDuration::from_hours(late);
                let id = BackupId::at(at);
                let data = object(l.data_key(&id), size, written);
                let m_obj = object(l.manifest_key(&id), 300, written);
                let m = manifest(&l, &id, size);
                match shape {
                    Shape::Complete => {
                        listing.objects.extend([data, m_obj.clone()]);
                        listing.manifests.insert(m_obj.key, m.to_json().into());
                    }
                    Shape::NoManifest => listing.objects.push(data),
                    Shape::NoData => {
                        listing.objects.push(m_obj.clone());
                        listing.manifests.insert(m_obj.key, m.to_json().into());
                    }
                    Shape::SizeMismatch => {
                        listing.objects.extend([data, m_obj.clone()]);
                        let wrong = manifest(&l, &id, size + 1);
                        listing.manifests.insert(m_obj.key, wrong.to_json().into());
                    }
                    Shape::ForeignManifest => {
                        listing.objects.extend([data, m_obj.clone()]);
                        let mut other = m.clone();
                        other.cluster = "invoices".to_owned();
                        listing.manifests.insert(m_obj.key, other.to_json().into());
                    }
                    Shape::Unread => listing.objects.extend([data, m_obj]),
                }
            }
            for (i, prefix) in foreign.into_iter().enumerate() {
                let id = BackupId::at(base + SignedDuration::from_hours(i as i64));
                listing.objects.push(object(
                    [prefix.as_str(), id.as_str(), DATA_SUFFIX].concat(),
                    5,
                    base,
                ));
            }
            (listing, base + SignedDuration::from_hours(200 + now_hours))
        })
}

fn complete_keys(catalog: &Catalog) -> BTreeSet<String> {
    catalog
        .complete
        .iter()
        .flat_map(|b| [b.data_key.clone(), b.manifest_key.clone()])
        .collect()
}

proptest! {
    #[test]
    fn never_deletes_the_newest_complete_backup(
        (listing, now) in scenario(), retention in 0u32..6, grace_hours in 0i64..72,
    ) {
        let l = layout();
        let catalog = classify(&l, &listing);
        let r = select_retention(&l, &catalog, retention, now, SignedDuration::from_hours(grace_hours));
        if let Some(newest) = catalog.newest() {
            for key in r.delete.iter().chain(&r.stale_incomplete) {
                prop_assert_ne!(key, &newest.data_key);
                prop_assert_ne!(key, &newest.manifest_key);
            }
        }
    }

    #[test]
    fn never_deletes_more_than_asked(
        (listing, now) in scenario(), retention in 0u32..6,
    ) {
        let l = layout();
        let catalog = classify(&l, &listing);
        let r = select_retention(&l, &catalog, retention, now, DEFAULT_INCOMPLETE_GRACE);
        let keep = retention.max(1) as usize;
        let n = catalog.complete.len();
        prop_assert_eq!(r.expired.len(), n.saturating_sub(keep));
        prop_assert_eq!(n - r.expired.len(), n.min(keep));
        // The expired are the oldest: every kept backup is newer than every expired one.
        let kept = &catalog.complete[r.expired.len()..];
        for e in &r.expired {
            prop_assert!(kept.iter().all(|k| k.id > *e));
        }
        // Exactly the expired backups' two keys, nothing else among the complete ones.
        let deleted: BTreeSet<&String> = r.delete.iter().collect();
        prop_assert_eq!(deleted.len(), 2 * r.expired.len());
        for b in kept {
            prop_assert!(!deleted.contains(&b.data_key) && !deleted.contains(&b.manifest_key));
        }
    }

    #[test]
    fn never_touches_a_key_outside_the_prefix(
        (listing, now) in scenario(), retention in 0u32..6, grace_hours in 0i64..72,
    ) {
        let l = layout();
        let catalog = classify(&l, &listing);
        let r = select_retention(&l, &catalog, retention, now, SignedDuration::from_hours(grace_hours));
        for key in r.delete.iter().chain(&r.stale_incomplete) {
            prop_assert!(key.starts_with("shop/orders/"), "{key}");
            prop_assert!(l.classify_key(key).is_some(), "{key}");
            prop_assert!(!catalog.unrecognised.contains(key) && !catalog.outside.contains(key));
        }
    }

    #[test]
    fn never_counts_an_incomplete_upload(
        (listing, now) in scenario(), retention in 0u32..6,
    ) {
        let l = layout();
        let catalog = classify(&l, &listing);
        for b in &catalog.complete {
            let data = listing.objects.iter().find(|o| o.key == b.data_key);
            prop_assert!(data.is_some_and(|d| d.size == b.manifest.size));
            let bytes = listing.manifests.get(&b.manifest_key).unwrap();
            let parsed = Manifest::parse(bytes, &l, &b.id);
            prop_assert_eq!(parsed.as_ref(), Ok(&b.manifest));
        }
        // Incomplete objects are never deleted as backups.
        let r = select_retention(&l, &catalog, retention, now, DEFAULT_INCOMPLETE_GRACE);
        let complete = complete_keys(&catalog);
        for key in &r.delete {
            prop_assert!(complete.contains(key));
        }
        for key in &r.stale_incomplete {
            prop_assert!(!complete.contains(key));
        }
    }

    #[test]
    fn stale_incomplete_only_after_the_grace_period(
        (listing, now) in scenario(), grace_hours in 0i64..300,
    ) {
        let l = layout();
        let catalog = classify(&l, &listing);
        let grace = SignedDuration::from_hours(grace_hours);
        let r = select_retention(&l, &catalog, 3, now, grace);
        let stale: BTreeSet<&String> = r.stale_incomplete.iter().collect();
        for i in &catalog.incomplete {
            let old = now.duration_since(i.last_modified) > grace;
            for key in &i.keys {
                prop_assert_eq!(stale.contains(key), old, "{}", key);
            }
        }
    }
}
