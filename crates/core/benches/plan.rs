//! `plan()` on a steady cluster of 1, 3 and 9 replicas (every object observed, pods ready): the
//! cost of one reconcile's thinking. Run: `cargo bench -p database-operator-core --bench plan`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;

#[path = "../tests/common/mod.rs"]
mod common;

fn bench_plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    for replicas in [1, 3, 9] {
        let mut doc = json!({
            "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
            "metadata": {"name": "bench", "namespace": "default"},
            "spec": {"engine": "mysql", "version": "8.0.36", "replicas": replicas,
                     "storage": {"size": "20Gi", "storageClassName": "fast-ssd"},
                     "passwordSecretRef": {"name": "bench-root", "key": "password"},
                     "backup": {"schedule": "0 2 * * *", "retention": 7, "s3Bucket": "bench-backups"}}
        });
        doc["spec"]["replicas"] = json!(replicas);
        let observed = common::running(common::stored(doc));
        assert!(database_operator_core::plan(&observed).is_noop());
        group.bench_with_input(
            BenchmarkId::from_parameter(replicas),
            &observed,
            |b, observed| b.iter(|| database_operator_core::plan(black_box(observed))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_plan);
criterion_main!(benches, parts);

fn bench_parts(c: &mut Criterion) {
    let observed = common::running(common::mysql());
    let cluster = observed.cluster.clone();
    let mut group = c.benchmark_group("parts");
    group.bench_function("validate_create", |b| {
        b.iter(|| database_operator_api::validate::validate_create(black_box(&cluster)))
    });
    let mut no_backup = cluster.clone();
    no_backup.spec.backup = None;
    group.bench_function("validate_create_without_backup", |b| {
        b.iter(|| database_operator_api::validate::validate_create(black_box(&no_backup)))
    });
    group.bench_function("clone_owned", |b| {
        b.iter(|| black_box(&observed.owned).clone())
    });
    group.bench_function("next_run", |b| {
        b.iter(|| database_operator_api::schedule::next_run(black_box("0 2 * * *"), observed.now))
    });
    group.bench_function("schedule_parse", |b| {
        b.iter(|| database_operator_api::schedule::Schedule::parse(black_box("0 2 * * *")))
    });
    let plan = database_operator_core::plan(&observed);
    group.bench_function("clone_desired", |b| {
        b.iter(|| black_box(&plan.objects).clone())
    });
    let mut deleting = observed.clone();
    deleting.cluster.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(observed.now),
    );
    group.bench_function("plan_without_objects", |b| {
        b.iter(|| database_operator_core::plan(black_box(&deleting)))
    });
    group.bench_function("objects_to_json", |b| {
        b.iter(|| plan.objects.iter().map(|o| o.object.to_value()).count())
    });
    group.bench_function("diff", |b| {
        b.iter(|| {
            plan.objects
                .iter()
                .map(|o| {
                    database_operator_core::diff::change(&o.object, black_box(&observed.owned))
                })
                .count()
        })
    });
    group.finish();
}

criterion_group!(parts, bench_parts);
