//! Properties of `plan()` over generated clusters: fixpoint, at most one primary label,
//! readyReplicas within bounds, determinism, a password change restarts nothing.

mod common;

use std::collections::BTreeMap;

use common::{Pods, apply, converge};
use database_operator_api::validate::validate_create;
use database_operator_api::{DatabaseCluster, DatabaseClusterStatus};
use database_operator_core::render::labels;
use database_operator_core::{
    Change, MemberPod, MemberRole, Observed, OperatorConfig, OwnedObjects, PodAction, SecretState,
    plan,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use serde_json::{Value, json};

fn engine_version() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop_oneof![
        prop::sample::select(vec!["8.4.0", "8.4.7", "9.7.4"]).prop_map(|v| ("mysql", v)),
        prop::sample::select(vec!["15.18", "16.2", "16.4"]).prop_map(|v| ("postgresql", v)),
    ]
}

fn resources() -> impl Strategy<Value = Option<Value>> {
    let cpu = prop::sample::select(vec!["250m", "500m", "1", "1.5", "2000m", "0.1"]);
    let memory = prop::sample::select(vec!["512Mi", "1Gi", "2048Mi", "1.5Gi", "4G", "3000M"]);
    prop::option::of((cpu, memory.clone(), prop::option::of(memory)).prop_map(
        |(cpu, mem, limit)| {
            let mut r = json!({"requests": {"cpu": cpu, "memory": mem}});
            if let Some(limit) = limit {
                r["limits"] = json!({"memory": limit});
            }
            r
        },
    ))
}

fn backup() -> impl Strategy<Value = Option<Value>> {
    let schedule = prop::sample::select(vec![
        "0 2 * * *",
        "@daily",
        "*/15 * * * *",
        "30 4 * * MON-FRI",
        "0 */6 * * *",
    ]);
    prop::option::of(
        (
            schedule,
            1..30i32,
            prop::option::of(Just("https://minio.backup.svc:9000")),
            prop::option::of(Just("eu-west-1")),
            any::<bool>(),
        )
            .prop_map(|(schedule, retention, endpoint, region, credentials)| {
                let mut b =
                    json!({"schedule": schedule, "retention": retention, "s3Bucket": "db-backups"});
                if let Some(e) = endpoint {
                    b["endpoint"] = json!(e);
                }
                if let Some(r) = region {
                    b["region"] = json!(r);
                }
                if credentials {
                    b["credentialsSecretRef"] = json!({"name": "s3-credentials"});
                }
                b
            }),
    )
}

/// A valid cluster as the API server would store it.
fn cluster() -> impl Strategy<Value = DatabaseCluster> {
    (
        "[a-z][a-z0-9-]{0,12}[a-z0-9]",
        "[a-z]{1,10}",
        engine_version(),
        1..=9i32,
        prop::sample::select(vec!["1Gi", "20Gi", "1024Mi", "0.5Ti", "100G", "1.5Gi"]),
        prop::option::of(prop::sample::select(vec!["fast-ssd", "standard"])),
        resources(),
        backup(),
    )
        .prop_map(
            |(name, namespace, (engine, version), replicas, size, class, resources, backup)| {
                let mut doc = json!({
                    "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"engine": engine, "version": version, "replicas": replicas,
                             "storage": {"size": size},
                             "passwordSecretRef": {"name": "root-password", "key": "password"}}
                });
                if let Some(class) = class {
                    doc["spec"]["storage"]["storageClassName"] = json!(class);
                }
                if let Some(r) = resources {
                    doc["spec"]["resources"] = r;
                }
                if let Some(b) = backup {
                    doc["spec"]["backup"] = b;
                }
                common::stored(doc)
            },
        )
        .prop_filter("valid", |c| validate_create(c).is_ok())
}

fn now() -> impl Strategy<Value = Timestamp> {
    (0..20_000_000i64, 0..1_000_000_000i32).prop_map(|(s, ns)| {
        let base: Timestamp = common::NOW.parse().unwrap();
        base.checked_add(SignedDuration::new(s, ns)).unwrap()
    })
}

fn observed_at(cluster: DatabaseCluster, now: Timestamp, fingerprint: String) -> Observed {
    Observed {
        cluster,
        owned: OwnedObjects::default(),
        pods: Vec::new(),
        secret: SecretState::Present { fingerprint },
        now,
        config: OperatorConfig::default(),
        known_matches: BTreeMap::new(),
        cleanup_job: None,
        backup_jobs: Vec::new(),
        member_facts: Default::default(),
        operator_secret: Default::default(),
        secret_unkeyed_fingerprint: None,
        password_outcome: None,
        primary_lease: None,
        volumes: Vec::new(),
        tls: Default::default(),
    }
}

/// `observed` after a spec change to `other`'s spec, keeping what may not change (engine,
/// version, storage); the generation moves.
fn with_spec_of(observed: &Observed, other: &DatabaseCluster) -> Observed {
    let mut changed = observed.clone();
    let current = &observed.cluster.spec;
    let mut spec = other.spec.clone();
    spec.engine = current.engine;
    spec.version = current.version.clone();
    spec.storage = current.storage.clone();
    changed.cluster.spec = spec;
    changed.cluster.metadata.generation = Some(2);
    changed
}

fn primaries(pods: &[MemberPod]) -> usize {
    pods.iter()
        .filter(|p| p.labels.get(labels::ROLE).map(String::as_str) == Some("primary"))
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Carrying a plan out and observing the result converges: objects are settled after one
    /// round, labels and status after two, the first primary's permission to initialize comes
    /// off once the status says the cluster has run (a third), and the plan after that is a
    /// no-op without events.
    #[test]
    fn fixpoint(cluster in cluster(), now in now(), fingerprint in "[a-f0-9]{8}") {
        let (settled, plans) = converge(observed_at(cluster, now, fingerprint), Pods::Ready, 5);
        prop_assert!(plans.len() <= 4, "needed {} plans", plans.len());
        for later in &plans[1..] {
            for o in &later.objects {
                // The only object that may follow the first pass is the backup CronJob, whose
                // source moves to the replicas once one is ready.
                prop_assert!(
                    o.change == Change::Unchanged || o.object.kind() == database_operator_core::OwnedKind::CronJob,
                    "{:?} {:?} after the first pass", o.object.key(), o.change
                );
            }
        }
        let last = plan(&settled);
        prop_assert!(last.is_noop(), "not a fixpoint: {:?} {:?} {:?}", common::summary(&last), last.pod_actions, last.status_changed);
        prop_assert!(last.events.is_empty(), "{:?}", last.events);
        prop_assert_eq!(last.status.phase, Some(database_operator_api::Phase::Running));
    }

    /// A new password in the Secret never touches the objects (no roll, no write) and, without
    /// a probe of the primary, never reaches the database; a missing Secret changes nothing
    /// either. The status says which value the database runs and which one waits, by
    /// fingerprint only.
    #[test]
    fn a_password_change_restarts_nothing(cluster in cluster(), now in now(), missing in prop::bool::ANY) {
        let (settled, _) = converge(observed_at(cluster, now, "aaaa1111".into()), Pods::Ready, 4);
        let mut changed = settled.clone();
        changed.secret = if missing {
            SecretState::Missing
        } else {
            SecretState::Present { fingerprint: "bbbb2222".into() }
        };
        let p = plan(&changed);
        prop_assert!(p.changed_objects().next().is_none(), "{:?}", common::summary(&p));
        prop_assert!(p.delete.is_empty() && p.pod_actions.is_empty() && p.database_commands.is_empty());
        let password = p.status.password.clone().unwrap();
        prop_assert_eq!(password.fingerprint.as_deref(), Some("aaaa1111"));
        prop_assert_eq!(password.pending.as_deref(), (!missing).then_some("bbbb2222"));
        // And it stays so: the next pass is a fixpoint.
        let next = apply(&changed, &p, Pods::Ready);
        let again = plan(&next);
        prop_assert!(again.is_noop(), "{:?}", common::summary(&again));
    }

    /// Comparisons remembered from earlier passes never change a plan: every pass on the way to
    /// a steady cluster, and after a spec change, plans the same with and without them.
    #[test]
    fn known_matches_never_change_a_plan(
        a in cluster(),
        b in cluster(),
        now in now(),
        unready in proptest::collection::vec(any::<bool>(), 0..6),
    ) {
        let check = |observed: &Observed| -> Result<(), TestCaseError> {
            let mut cold = observed.clone();
            cold.known_matches.clear();
            prop_assert_eq!(plan(observed), plan(&cold));
            Ok(())
        };
        let (settled, _) = converge(observed_at(a.clone(), now, "aa".into()), Pods::Ready, 4);
        prop_assert!(!settled.known_matches.is_empty(), "a steady cluster has known matches");
        check(&settled)?;
        // Members going unready change what some objects are rendered from (the backup source).
        let mut degraded = settled.clone();
        for (pod, down) in degraded.pods.iter_mut().zip(&unready) {
            if *down {
                pod.ready = false;
            }
        }
        check(&degraded)?;
        let mut observed = with_spec_of(&settled, &b);
        for _ in 0..5 {
            check(&observed)?;
            let p = plan(&observed);
            observed = apply(&observed, &p, Pods::Ready);
        }
    }

    /// After a spec change to another valid spec, the cluster converges again.
    #[test]
    fn fixpoint_after_a_change(a in cluster(), b in cluster(), now in now()) {
        let (settled, _) = converge(observed_at(a.clone(), now, "aa".into()), Pods::Ready, 4);
        let (after, plans) = converge(with_spec_of(&settled, &b), Pods::Ready, 5);
        prop_assert!(plans.len() <= 4, "needed {} plans", plans.len());
        let last = plan(&after);
        prop_assert!(last.is_noop() && last.events.is_empty(), "{:?}", common::summary(&last));
    }

    /// Whatever the pods' labels, carrying out the actions in order never has two pods
    /// labelled primary once the first action has run (and never more than before it), and
    /// ends with exactly the chosen primary labelled when its pod exists.
    #[test]
    fn at_most_one_primary(
        cluster in cluster(),
        pods in prop::collection::btree_map(0..12i32, (prop::option::of(prop::bool::ANY), any::<bool>(), any::<bool>()), 0..10),
        recorded in prop::option::of(0..12i32),
    ) {
        let name = cluster.metadata.name.clone().unwrap();
        let mut o = observed_at(cluster, common::NOW.parse().unwrap(), "fp".into());
        o.cluster.status = Some(DatabaseClusterStatus {
            primary_pod: recorded.map(|i| format!("{name}-{i}")),
            ..Default::default()
        });
        o.pods = pods.iter().map(|(i, (role, ready, terminating))| {
            let role = role.map(|p| if p { "primary" } else { "replica" });
            let mut pod = common::pod(&format!("{name}-{i}"), role, *ready, &o.cluster.spec.version);
            if *terminating {
                pod.terminating = true;
            }
            pod
        }).collect();
        let p = plan(&o);
        let mut state = o.pods.clone();
        let mut count = primaries(&state);
        for action in &p.pod_actions {
            let PodAction::LabelPod { pod, role } = action else {
                continue;
            };
            if *role == MemberRole::Primary {
                prop_assert_eq!(primaries(&state), 0, "promoting {} while another pod is labelled primary", pod);
            }
            let target = state.iter_mut().find(|p| p.name == *pod).unwrap();
            target.labels.insert(labels::ROLE.into(), role.as_str().into());
            let now = primaries(&state);
            prop_assert!(now <= count.max(1));
            count = now;
        }
        prop_assert!(primaries(&state) <= 1);
        let chosen = p.status.primary_pod.clone().unwrap();
        let chosen_alive = state.iter().any(|p| p.name == chosen && !p.terminating);
        if chosen_alive {
            prop_assert_eq!(primaries(&state), 1);
        }
    }

    /// readyReplicas never exceeds spec.replicas, whatever pods exist.
    #[test]
    fn ready_replicas_within_replicas(
        cluster in cluster(),
        pods in prop::collection::btree_map(0..15i32, any::<bool>(), 0..15),
        extra in prop::collection::vec("[a-z0-9-]{1,20}", 0..4),
    ) {
        let name = cluster.metadata.name.clone().unwrap();
        let replicas = cluster.spec.replicas;
        let mut o = observed_at(cluster, common::NOW.parse().unwrap(), "fp".into());
        o.pods = pods.iter().map(|(i, ready)| common::pod(&format!("{name}-{i}"), None, *ready, "8.4.0")).collect();
        // Pods that are not members (other names) never count.
        o.pods.extend(extra.iter().map(|n| common::pod(n, None, true, "8.4.0")));
        let p = plan(&o);
        prop_assert!(p.status.ready_replicas >= 0);
        prop_assert!(p.status.ready_replicas <= replicas);
        let members_ready = pods.iter().filter(|(i, r)| **i < replicas && **r).count() as i32;
        prop_assert_eq!(p.status.ready_replicas, members_ready);
    }

    /// The same input gives byte-identical output.
    #[test]
    fn deterministic(cluster in cluster(), now in now(), ready_below in 0..10i32) {
        let first = observed_at(cluster, now, "fp".into());
        let p1 = plan(&first);
        let second = apply(&first, &p1, Pods::ReadyBelow(ready_below));
        for o in [&first, &second] {
            let a = plan(o);
            let b = plan(&o.clone());
            prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
            let json = |p: &database_operator_core::Plan| {
                p.objects.iter().map(|o| o.object.to_value().to_string()).collect::<Vec<_>>().join("\n")
                    + &serde_json::to_string(&p.status).unwrap()
            };
            prop_assert_eq!(json(&a), json(&b));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The next backup time carried over from an earlier status is the one the schedule gives
    /// for now (the schedule is evaluated again only when the status cannot be reused).
    #[test]
    fn next_backup_time_carried_over_is_exact(cluster in cluster(), start in now(), later in 0..200_000i64) {
        prop_assume!(cluster.spec.backup.is_some());
        let first = observed_at(cluster, start, "fp".into());
        let p1 = plan(&first);
        let mut second = first.clone();
        second.cluster.status = Some(p1.status.clone());
        second.now = start.checked_add(SignedDuration::from_secs(later)).unwrap();
        let carried = plan(&second).status.next_backup_time;
        let schedule = &second.cluster.spec.backup.as_ref().unwrap().schedule;
        let whole = Timestamp::from_second(second.now.as_second()).unwrap();
        let fresh = database_operator_api::schedule::next_run(schedule, whole).unwrap();
        prop_assert_eq!(carried, Some(Time(fresh)));
    }
}

#[test]
fn pods_without_a_name_are_not_members() {
    // ObjectMeta default has no name: the member filter ignores such pods.
    let mut o = observed_at(common::mysql(), common::NOW.parse().unwrap(), "fp".into());
    o.pods.push(MemberPod::from_pod(&Pod {
        metadata: ObjectMeta::default(),
        spec: None,
        status: None,
    }));
    assert_eq!(plan(&o).status.ready_replicas, 0);
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-5i64..5).prop_map(Value::from),
        prop::sample::select(vec!["a", "b", "1", "", "1Gi"]).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["a", "b", "c", "ab"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Extends `value` the way the API server does: extra keys in objects, recursively.
fn with_extras(value: &Value, extra: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), with_extras(v, extra)))
                .collect();
            out.entry("server-default").or_insert_with(|| extra.clone());
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| with_extras(v, extra)).collect()),
        other => other.clone(),
    }
}

proptest! {
    /// The hashed comparison the diff uses first answers like the JSON comparison, on arbitrary
    /// pairs and on a value against itself with server additions.
    #[test]
    fn hashed_subset_agrees_with_json_subset(a in json_value(), b in json_value(), extra in json_value()) {
        use database_operator_core::diff::{hashed_is_subset, is_subset};
        prop_assert_eq!(hashed_is_subset(&a, &b), Some(is_subset(&a, &b)), "{} vs {}", a, b);
        let grown = with_extras(&a, &extra);
        prop_assert!(is_subset(&a, &grown));
        prop_assert_eq!(hashed_is_subset(&a, &grown), Some(true));
    }
}
