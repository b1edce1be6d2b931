//! `plan()` on a steady cluster of 1, 3 and 9 replicas (every object observed, pods ready): the
//! cost of one reconcile's thinking. Run: `cargo bench -p database-operator-core --bench plan`.

// The allocator the operator binary uses (crates/runtime/src/main.rs): what is measured is
// what runs. With the system allocator, plan/9 takes about 1.8 times as long.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;

fn bench_plan(c: &mut Criterion) {
    // `plan`: as the runtime calls it, with the comparisons the previous pass found unchanged.
    // `plan_cold`: the first pass after a start (or after every owned object changed).
    for (group_name, cold) in [("plan", false), ("plan_cold", true)] {
        let mut group = c.benchmark_group(group_name);
        for replicas in [1, 3, 9] {
            let mut observed = steady(replicas);
            assert!(!observed.known_matches.is_empty());
            if cold {
                observed.known_matches.clear();
            }
            assert!(database_operator_core::plan(&observed).is_noop());
            group.bench_with_input(
                BenchmarkId::from_parameter(replicas),
                &observed,
                |b, observed| b.iter(|| database_operator_core::plan(black_box(observed))),
            );
        }
        group.finish();
    }
}

criterion_group!(benches, bench_plan);

/// Where the time of one pass goes, for docs/performance.md.
fn bench_parts(c: &mut Criterion) {
    let observed = common::running(common::mysql());
    let cluster = observed.cluster.clone();
    let plan = database_operator_core::plan(&observed);
    let mut group = c.benchmark_group("parts");
    group.bench_function("validate_create", |b| {
        b.iter(|| database_operator_api::validate::validate_create(black_box(&cluster)))
    });
    group.bench_function("next_run", |b| {
        b.iter(|| database_operator_api::schedule::next_run(black_box("0 2 * * *"), observed.now))
    });
    group.bench_function("diff_all_objects", |b| {
        b.iter(|| {
            plan.objects
                .iter()
                .map(|o| {
                    database_operator_core::diff::change(&o.object, black_box(&observed.owned))
                })
                .collect::<Vec<_>>()
        })
    });
    group.bench_function("objects_to_json", |b| {
        b.iter(|| {
            plan.objects
                .iter()
                .map(|o| o.object.to_value())
                .collect::<Vec<_>>()
        })
    });
    let config = database_operator_core::OperatorConfig::default();
    let ctx = database_operator_core::render::RenderContext {
        tls_blocked: false,
        name: "my-mysql",
        namespace: "default",
        uid: common::UID,
        engine: cluster.spec.engine,
        version: &cluster.spec.version,
        spec: &cluster.spec,
        config: &config,
    };
    group.bench_function("config_map_data", |b| {
        b.iter(|| database_operator_core::render::config_map::data(black_box(&ctx)))
    });
    let data = database_operator_core::render::config_map::data(&ctx);
    group.bench_function("config_hash", |b| {
        b.iter(|| database_operator_core::render::config_map::config_hash(black_box(&data)))
    });
    group.bench_function("render_statefulset", |b| {
        b.iter(|| {
            database_operator_core::render::statefulset::render(
                black_box(&ctx),
                &database_operator_core::render::statefulset::StatefulSetInputs::default(),
            )
        })
    });
    group.bench_function("clone_desired_objects", |b| {
        b.iter(|| black_box(&plan.objects).clone())
    });
    group.finish();
}

criterion_group!(parts, bench_parts);
/// A steady cluster of `replicas` members with backups: every object observed, pods ready.
fn steady(replicas: i32) -> database_operator_core::Observed {
    common::running(common::stored(json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"engine": "mysql", "version": "8.4.0", "replicas": replicas,
                 "storage": {"size": "20Gi", "storageClassName": "fast-ssd"},
                 "passwordSecretRef": {"name": "bench-root", "key": "password"},
                 "backup": {"schedule": "0 2 * * *", "retention": 7, "s3Bucket": "bench-backups"}}
    })))
}

fn main() {
    // `PLAN_ITERATIONS=N` runs plan() N times on the 9-replica cluster and exits: a fixed
    // workload for `valgrind --tool=callgrind` or `perf stat`, whose counts do not depend on
    // how busy the machine is. `PLAN_COLD=1` drops the known matches first.
    if let Some(n) = std::env::var("PLAN_ITERATIONS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        let mut observed = steady(9);
        if std::env::var_os("PLAN_COLD").is_some() {
            observed.known_matches.clear();
        }
        for _ in 0..n {
            black_box(database_operator_core::plan(black_box(&observed)));
        }
        return;
    }
    benches();
    parts();
    Criterion::default().configure_from_args().final_summary();
}
