//! # database-operator-fuzz
//!
//! The fuzz targets of database-operator, as plain functions of the fuzzer's bytes. Each one
//! feeds untrusted input to one parser or decision of the operator and panics only when an
//! invariant breaks (a parse that does not read back what it printed, a filter that depends on
//! where the input was cut); the code under test must never panic on its own.
//!
//! Two callers:
//! - the libFuzzer harness in `fuzz/` at the workspace root (one binary per target, built with
//!   coverage instrumentation; `fuzz/run.sh TARGET RUNS`, see `fuzz/README.md`);
//! - `tests/corpus.rs`, which replays the committed corpus `fuzz/corpus/TARGET/` through the
//!   same functions in a plain `cargo test`, on the stable toolchain, in seconds.
//!
//! | target | input | checks |
//! | --- | --- | --- |
//! | [`validation`] | a `DatabaseCluster` as YAML or JSON | parse, create/running/update validation |
//! | [`admission`] | an AdmissionReview body | both webhook endpoints answer or refuse |
//! | [`lsn`] | a PostgreSQL LSN, or a timeline history | display round-trip, order |
//! | [`gtid_set`] | two MySQL GTID sets, split at `\|` | display round-trip, set algebra |
//! | [`mariadb_gtid`] | two MariaDB GTID positions, split at `\|` | display round-trip, compare |
//! | [`backup_manifest`] | a backup manifest (JSON) | parse, write and parse again |
//! | [`dump_filter`] | an engine byte and a dump | restore filter, table stats chunk-invariant |

#![deny(missing_docs)]

use std::sync::OnceLock;

use database_operator_api::Engine;
use database_operator_api::validate::{
    assess_update, parse_cluster, validate_create, validate_running, validate_spec,
};
use database_operator_core::backup::tables::DumpStats;
use database_operator_core::backup::{BackupId, Layout, Manifest};
use database_operator_engine::position::{
    GtidSet, Lsn, MariadbGtidPos, Position, Relation, TimelineHistory,
};
use database_operator_engine::tools::DumpFilter;
use database_operator_runtime::webhook::{Admission, Endpoint};

/// A fuzz target: takes the fuzzer's bytes, panics only on a broken invariant.
pub type Target = fn(&[u8]);

/// Every target by name, as the harness and the corpus replay call them.
pub const TARGETS: &[(&str, Target)] = &[
    ("validation", validation),
    ("admission", admission),
    ("lsn", lsn),
    ("gtid_set", gtid_set),
    ("mariadb_gtid", mariadb_gtid),
    ("backup_manifest", backup_manifest),
    ("dump_filter", dump_filter),
];

/// Inputs longer than this are cut: the targets look for wrong answers, not for slow ones
/// (the webhook's server already refuses bodies over 1 MiB).
const MAX_LEN: usize = 64 * 1024;

fn cut(data: &[u8]) -> &[u8] {
    &data[..data.len().min(MAX_LEN)]
}

/// The input as text, when it is UTF-8.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(cut(data)).ok()
}

/// A `DatabaseCluster` as JSON (when the input starts with `{`) or YAML (every document of a
/// multi-document file, as `kubectl apply -f` reads the examples), through the api's parse and
/// every validation entry point: errors are fine, panics are not.
pub fn validation(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let documents: Vec<serde_json::Value> = if text.trim_start().starts_with('{') {
        match serde_json::from_str(text) {
            Ok(v) => vec![v],
            Err(_) => return,
        }
    } else {
        match serde_saphyr::from_multiple(text) {
            Ok(v) => v,
            Err(_) => return,
        }
    };
    for value in documents {
        validate_cluster(value);
    }
}

fn validate_cluster(value: serde_json::Value) {
    let Ok(cluster) = parse_cluster(value) else {
        return;
    };
    let _ = validate_running(&cluster);
    let _ = validate_spec(&cluster.spec);
    // An update to itself finds no error that creating it would not.
    let same = assess_update(&cluster, &cluster);
    if validate_create(&cluster).is_ok() {
        assert!(
            same.errors.is_empty(),
            "a valid cluster updated to itself is refused: {:?}",
            same.errors
        );
    }
}

fn webhook() -> &'static Admission {
    static ADMISSION: OnceLock<Admission> = OnceLock::new();
    ADMISSION.get_or_init(|| Admission::new().expect("the generated CRD gives the defaults"))
}

/// An AdmissionReview body through the webhook's whole decision ([`Admission::handle`]), on
/// both endpoints: a malformed body is refused ([`database_operator_runtime::webhook::BadReview`]),
/// anything else is answered with a response that names the request's uid.
pub fn admission(data: &[u8]) {
    let body = cut(data);
    for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
        let Ok(answer) = webhook().handle(endpoint, body) else {
            continue;
        };
        let response = &answer["response"];
        assert!(
            response["uid"].is_string(),
            "{endpoint}: an answer without the request uid: {answer}"
        );
        assert!(
            response["allowed"].is_boolean(),
            "{endpoint}: an answer that neither allows nor denies: {answer}"
        );
    }
}

/// A PostgreSQL LSN (`16/B374D848`), or a timeline history file when the input has a tab or a
/// newline: what parses prints back to the same value, and order follows the number.
pub fn lsn(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if text.contains(['\t', '\n']) {
        if let Ok(history) = TimelineHistory::parse(text) {
            let again: String = history
                .switches
                .iter()
                .map(|s| format!("{}\t{}\treason\n", s.parent.0, s.switch_lsn))
                .collect();
            assert_eq!(
                TimelineHistory::parse(&again).as_ref(),
                Ok(&history),
                "history {text:?} printed as {again:?}"
            );
        }
        return;
    }
    let Ok(lsn) = text.parse::<Lsn>() else { return };
    let printed = lsn.to_string();
    assert_eq!(
        printed.parse::<Lsn>(),
        Ok(lsn),
        "{text:?} printed as {printed:?}"
    );
    if let Ok(Position::Postgresql(p)) = Position::parse(Engine::Postgresql, text, Some(1), None) {
        assert_eq!(p.lsn, lsn);
    }
}

/// Splits the input at its first `|` into two texts (not at a newline: MySQL prints a GTID set
/// of several sources over several lines).
fn two(text: &str) -> (&str, &str) {
    text.split_once('|').unwrap_or((text, ""))
}

/// Two MySQL GTID sets (split at `|`): each prints back to itself, and union, subtraction,
/// intersection, subset and compare agree with each other.
pub fn gtid_set(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (first, second) = two(text);
    let Ok(a) = first.parse::<GtidSet>() else {
        return;
    };
    let printed = a.to_string();
    assert_eq!(
        printed.parse::<GtidSet>().as_ref(),
        Ok(&a),
        "{first:?} printed as {printed:?}"
    );
    let Ok(b) = second.parse::<GtidSet>() else {
        return;
    };
    let union = a.union(&b);
    assert!(
        a.is_subset(&union) && b.is_subset(&union),
        "{a} + {b} = {union}"
    );
    let only_a = a.subtract(&b);
    assert!(
        only_a.intersection(&b).is_empty(),
        "{a} - {b} = {only_a} meets {b}"
    );
    assert!(only_a.is_subset(&a), "{a} - {b} = {only_a}");
    assert_eq!(only_a.union(&a.intersection(&b)), a, "{a} split by {b}");
    assert_eq!(a.count(), only_a.count() + a.intersection(&b).count());
    let relation = a.compare(&b);
    assert_eq!(b.compare(&a), relation.reverse(), "{a} vs {b}: {relation}");
    assert_eq!(
        relation == Relation::Equal,
        a == b,
        "{a} vs {b}: {relation}"
    );
    if a.is_subset(&b) && a != b {
        assert_eq!(relation, Relation::Behind, "{a} vs {b}");
    }
}

/// Two MariaDB GTID positions (split at `|`): each prints back to itself, and compare is
/// mirrored.
pub fn mariadb_gtid(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (first, second) = two(text);
    let Ok(a) = first.parse::<MariadbGtidPos>() else {
        return;
    };
    let printed = a.to_string();
    assert_eq!(
        printed.parse::<MariadbGtidPos>().as_ref(),
        Ok(&a),
        "{first:?} printed as {printed:?}"
    );
    let Ok(b) = second.parse::<MariadbGtidPos>() else {
        return;
    };
    let relation = a.compare(&b);
    assert_eq!(b.compare(&a), relation.reverse(), "{a} vs {b}: {relation}");
    assert_eq!(a.compare(&a), Relation::Equal, "{a} vs itself");
}

/// A backup manifest (JSON) as stored in the bucket of `shop/orders`, read as the manifest of
/// the backup its `id` names: whatever is accepted, written again, reads back the same.
pub fn backup_manifest(data: &[u8]) {
    let bytes = cut(data);
    let layout = Layout::new("shop", "orders");
    let id = serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| {
            v.get("id")
                .and_then(|i| i.as_str())
                .and_then(BackupId::parse)
        })
        .unwrap_or_else(|| BackupId::parse("20261206T053000Z").expect("a valid id"));
    let Ok(manifest) = Manifest::parse(bytes, &layout, &id) else {
        return;
    };
    let written = manifest.to_json();
    assert_eq!(
        Manifest::parse(written.as_bytes(), &layout, &id).as_ref(),
        Ok(&manifest),
        "written as {written}"
    );
}

/// A dump (after one byte that chooses the engine) through a restore's [`DumpFilter`] and the
/// backup's [`DumpStats`]: the filter must not panic, and the stats must not depend on where
/// the stream was cut into chunks.
pub fn dump_filter(data: &[u8]) {
    let Some((&choice, dump)) = cut(data).split_first() else {
        return;
    };
    let engine = Engine::ALL[usize::from(choice % 3)];
    let managed = ["root", "postgres", "replicator", "database_operator"].map(str::to_owned);
    let mut filter = DumpFilter::new(engine, managed.to_vec());
    let mut kept = 0u64;
    let mut read = 0u64;
    for line in dump.split_inclusive(|&b| b == b'\n') {
        match filter.keep(line) {
            Ok(keep) => kept += u64::from(keep),
            // A refusal names the line it stopped at.
            Err(refusal) => {
                assert_eq!(refusal.line, read + 1, "{refusal}");
                break;
            }
        }
        read += 1;
    }
    assert_eq!(kept + filter.skipped, read);

    let mut whole = DumpStats::new(engine);
    whole.feed(dump);
    let whole = whole.finish();
    // The same stream in chunks whose sizes come from the engine byte.
    let step = usize::from(choice / 3).max(1);
    let mut chunked = DumpStats::new(engine);
    for chunk in dump.chunks(step) {
        chunked.feed(chunk);
    }
    assert_eq!(
        chunked.finish(),
        whole,
        "stats differ when fed {step} bytes at a time"
    );
}
