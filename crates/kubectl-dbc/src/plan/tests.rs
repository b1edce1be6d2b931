use super::*;
use database_operator_core::{DesiredObject, MemberPod, ObjectVisitor, OwnedResource};
use serde_json::json;

const LIVE: &str = include_str!("../../tests/fixtures/plan-postgresql.yaml");
const CHANGED: &str = include_str!("../../tests/fixtures/plan-postgresql-changed.yaml");

fn cluster(text: &str) -> DatabaseCluster {
    let mut clusters = read_clusters(text, "fixture").expect("fixture has a cluster");
    clusters.remove(0)
}

fn member(i: usize, role: &str) -> MemberPod {
    MemberPod {
        name: format!("orders-{i}"),
        labels: [
            (labels::CLUSTER, "orders"),
            ("app.kubernetes.io/component", labels::COMPONENT_DATABASE),
            ("app.kubernetes.io/version", "16.4"),
            (labels::ROLE, role),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        ready: true,
        ready_changed: None,
        terminating: false,
        images: [(
            "database".to_owned(),
            "docker.io/library/postgres:16.4".to_owned(),
        )]
        .into(),
        failed_init: None,
        created: None,
        node: None,
        deletion: None,
        termination_message: None,
        exits: Default::default(),
    }
}

fn observed(cluster: DatabaseCluster, fingerprint: &str) -> Observed {
    Observed {
        cluster,
        owned: OwnedObjects::default(),
        pods: vec![
            member(0, "primary"),
            member(1, "replica"),
            member(2, "replica"),
        ],
        secret: SecretState::Present {
            fingerprint: fingerprint.to_owned(),
        },
        now: "2026-12-01T05:00:00Z".parse().expect("timestamp"),
        config: OperatorConfig::default(),
        known_matches: BTreeMap::new(),
        cleanup_job: None,
        backup_jobs: Vec::new(),
        member_facts: BTreeMap::new(),
        operator_secret: OperatorSecretState::Present {
            owner_uids: Vec::new(),
        },
        secret_unkeyed_fingerprint: None,
        password_outcome: None,
        primary_lease: None,
        volumes: Vec::new(),
        tls: Default::default(),
    }
}

/// The live cluster with every object the operator renders for it stored as it was applied.
fn live_cluster() -> Observed {
    struct Store<'a>(&'a mut OwnedObjects);
    impl ObjectVisitor<'_> for Store<'_> {
        type Output = ();
        fn visit<K: OwnedResource>(self, object: &K) {
            K::items_mut(self.0).push(object.clone());
        }
    }
    let mut live = observed(cluster(LIVE), "0123456789abcdef");
    let applied = database_operator_core::plan(&live);
    let mut owned = OwnedObjects::default();
    for planned in &applied.objects {
        let object: &DesiredObject = &planned.object;
        object.visit(Store(&mut owned));
    }
    live.owned = owned;
    live.cluster.status = Some(applied.status);
    // The pods run the template the operator applied.
    let template = live
        .owned
        .stateful_sets
        .first()
        .and_then(|s| s.spec.template.metadata.as_ref()?.labels.clone())
        .and_then(|l| l.get(labels::TEMPLATE).cloned())
        .expect("the applied StatefulSet has a template label");
    for pod in &mut live.pods {
        pod.labels
            .insert(labels::TEMPLATE.to_owned(), template.clone());
    }
    live
}

fn gathered(observed: Observed, source: &str) -> Gathered {
    Gathered {
        observed,
        source: source.to_owned(),
        notes: Vec::new(),
    }
}

/// The live cluster with the spec of the changed manifest, as `plan -f` gathers it.
fn with_manifest(mut live: Observed, text: &str) -> Observed {
    let wanted = cluster(text);
    assert!(spec_differs(&live.cluster, &wanted));
    live.cluster.spec = wanted.spec;
    live.cluster.metadata.generation = Some(4);
    live
}

#[test]
fn a_steady_cluster_plans_nothing() {
    let report = report(&gathered(live_cluster(), "live"));
    assert!(
        report.objects.iter().all(|o| o.change == "unchanged"),
        "{report:#?}"
    );
    assert!(report.restarts.is_empty() && report.deletions.is_empty());
    insta::assert_snapshot!(render_all(&[report], Style::PLAIN));
}

#[test]
fn more_members_and_memory_update_the_statefulset_and_restart_every_pod() {
    let report = report(&gathered(
        with_manifest(live_cluster(), CHANGED),
        "orders.yaml",
    ));
    let changed: Vec<(&str, &str)> = report
        .objects
        .iter()
        .filter(|o| o.change != "unchanged")
        .map(|o| (o.object.as_str(), o.change))
        .collect();
    // Memory sizes the engine's buffers, so the configuration changes too.
    assert_eq!(
        changed,
        [
            ("ConfigMap/orders-config", "update"),
            ("StatefulSet/orders", "update")
        ]
    );
    assert_eq!(report.restarts, ["orders-2", "orders-1", "orders-0"]);
    let text = render_all(&[report], Style::PLAIN);
    assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn a_scale_down_past_the_primary_says_the_switchover_comes_first() {
    let mut live = live_cluster();
    let primary = live.pods.last().expect("members").name.clone();
    live.cluster.status.as_mut().expect("status").primary_pod = Some(primary.clone());
    let mut fewer = live.clone();
    fewer.cluster.spec.replicas = 2;
    fewer.cluster.metadata.generation = Some(4);
    let report = report(&gathered(fewer, "live"));
    assert!(
        report.notes.iter().any(|n| n.contains(&format!(
            "spec.replicas 2 leaves out the primary {primary}: the operator first switches over"
        ))),
        "{:?}",
        report.notes
    );
    // A scale-down that keeps the primary needs no such note.
    let mut keeps = live_cluster();
    keeps.cluster.spec.replicas = 2;
    assert!(
        report_notes(&keeps).is_empty(),
        "{:?}",
        report_notes(&keeps)
    );
}

fn report_notes(observed: &Observed) -> Vec<String> {
    report(&gathered(observed.clone(), "live")).notes
}

#[test]
fn a_new_password_restarts_nothing() {
    let mut live = live_cluster();
    live.secret = SecretState::Present {
        fingerprint: "fedcba9876543210".to_owned(),
    };
    let report = report(&gathered(live, "live"));
    assert!(
        report.restart_reasons.is_empty(),
        "{:?}",
        report.restart_reasons
    );
    assert!(report.restarts.is_empty(), "{:?}", report.restarts);
}

#[test]
fn a_cluster_not_created_yet_creates_every_object() {
    let mut new = observed(cluster(CHANGED), "0123456789abcdef");
    new.pods.clear();
    new.cluster.metadata.namespace = Some("shop".to_owned());
    new.cluster.metadata.generation = Some(1);
    let report = report(&Gathered {
        observed: new,
        source: "orders.yaml".to_owned(),
        notes: vec!["shop/orders does not exist yet: every object would be created".to_owned()],
    });
    assert!(
        report.objects.iter().all(|o| o.change == "create"),
        "{report:#?}"
    );
    assert!(report.restarts.is_empty());
}

#[test]
fn differences_follow_the_operators_subset_relation() {
    let desired = json!({"spec": {"replicas": 4, "template": {"metadata": {"annotations": {
        "database.example.com/config-hash": "b"}}}, "empty": {}}});
    let live = json!({"spec": {"replicas": 3, "revisionHistoryLimit": 10, "template": {
        "metadata": {"annotations": {"database.example.com/config-hash": "a"}}}}});
    let diff = differences(&desired, &live);
    assert!(diff.iter().all(|d| d.lines.is_empty()));
    let shown: Vec<(String, Option<String>, String)> = diff
        .iter()
        .map(|d| (d.path.clone(), d.live.clone(), d.desired.clone()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                "spec.replicas".to_owned(),
                Some("3".to_owned()),
                "4".to_owned()
            ),
            (
                "spec.template.metadata.annotations[\"database.example.com/config-hash\"]"
                    .to_owned(),
                Some("\"a\"".to_owned()),
                "\"b\"".to_owned()
            ),
        ]
    );
    assert_eq!(
        restart_reasons(&diff),
        ["the configuration changed (config-hash annotation)"]
    );
    assert!(differences(&desired, &desired).is_empty());
}

#[test]
fn configuration_files_show_the_lines_that_change() {
    let desired = json!({"data": {"postgresql.conf": "a = 1\nshared_buffers = 512MB\nc = 3\n"}});
    let live = json!({"data": {"postgresql.conf": "a = 1\nshared_buffers = 256MB\nc = 3\n"}});
    let diff = differences(&desired, &live);
    assert_eq!(diff.len(), 1);
    assert_eq!(
        diff[0].lines,
        ["- shared_buffers = 256MB", "+ shared_buffers = 512MB"]
    );
}

mod exact {
    use super::*;
    use crate::plan::dry_run::{
        DryRunResult, EXACT_NOTE, apply_results, exact_differences, refine,
    };
    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use std::sync::{Arc, Mutex};

    /// Dry-run results that store `f(object, live)` for every object of the report.
    fn results(
        g: &Gathered,
        f: impl Fn(&str, Value) -> DryRunResult,
    ) -> BTreeMap<String, (OwnedKind, String, DryRunResult)> {
        let plan = database_operator_core::plan(&g.observed);
        plan.objects
            .iter()
            .map(|p| {
                let key = p.object.key();
                let shown = format!("{}/{}", key.kind.as_str(), key.name);
                let live = planning::live_value(&g.observed.owned, key.kind, &key.name);
                let result = f(&shown, live);
                (shown, (key.kind, key.name, result))
            })
            .collect()
    }

    #[test]
    fn exact_differences_see_added_removed_and_defaulted_fields_but_not_write_metadata() {
        let before = json!({"metadata": {"name": "a", "resourceVersion": "1", "generation": 1,
            "managedFields": [{"manager": "x"}]}, "spec": {"x": 1, "y": 2, "l": [1, 2]},
            "status": {"ready": 1}});
        let after = json!({"metadata": {"name": "a", "resourceVersion": "2", "generation": 2},
            "spec": {"x": 1, "z": 3, "l": [1, 3]}, "status": {"ready": 0}});
        let diffs: Vec<(String, Option<String>, String)> = exact_differences(&before, &after)
            .into_iter()
            .map(|d| (d.path, d.live, d.desired))
            .collect();
        assert_eq!(
            diffs,
            [
                ("spec.l[1]".to_owned(), Some("2".to_owned()), "3".to_owned()),
                (
                    "spec.y".to_owned(),
                    Some("2".to_owned()),
                    "(removed)".to_owned()
                ),
                ("spec.z".to_owned(), None, "3".to_owned()),
            ]
        );
        assert!(exact_differences(&before, &before).is_empty());
    }

    #[test]
    fn when_the_server_would_store_what_is_live_nothing_changes() {
        let g = gathered(with_manifest(live_cluster(), CHANGED), "orders.yaml");
        let mut r = report(&g);
        assert!(r.objects.iter().any(|o| o.change == "update"));
        assert!(!r.restarts.is_empty());
        apply_results(&mut r, &g, &results(&g, |_, live| Ok(live)));
        assert!(r.objects.iter().all(|o| o.change == "unchanged"), "{r:#?}");
        assert!(r.restarts.is_empty() && r.restart_reasons.is_empty());
        assert_eq!(r.notes, [EXACT_NOTE]);
    }

    #[test]
    fn the_exact_change_of_the_statefulset_gives_the_restarts() {
        let g = gathered(live_cluster(), "live");
        let mut r = report(&g);
        assert!(r.objects.iter().all(|o| o.change == "unchanged"));
        // The API server would store a new image (say, a mutating webhook pins a digest).
        let pinned = |object: &str, mut live: Value| {
            if object == "StatefulSet/orders" {
                live["spec"]["template"]["spec"]["containers"][0]["image"] =
                    json!("docker.io/library/postgres@sha256:0123");
            }
            Ok(live)
        };
        apply_results(&mut r, &g, &results(&g, pinned));
        let changed: Vec<&str> = r
            .objects
            .iter()
            .filter(|o| o.change != "unchanged")
            .map(|o| o.object.as_str())
            .collect();
        assert_eq!(changed, ["StatefulSet/orders"]);
        let diff = &r
            .objects
            .iter()
            .find(|o| o.change == "update")
            .unwrap()
            .diff;
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert_eq!(diff[0].path, "spec.template.spec.containers[0].image");
        assert_eq!(r.restarts, ["orders-2", "orders-1", "orders-0"]);
        assert!(
            r.restart_reasons[0].starts_with("image "),
            "{:?}",
            r.restart_reasons
        );
    }

    #[test]
    fn a_refused_dry_run_keeps_the_local_comparison_and_says_why() {
        let g = gathered(with_manifest(live_cluster(), CHANGED), "orders.yaml");
        let local = report(&g);
        let mut r = local.clone();
        apply_results(
            &mut r,
            &g,
            &results(&g, |object, live| {
                if object == "StatefulSet/orders" {
                    Err("403 statefulsets.apps \"orders\" is forbidden".to_owned())
                } else {
                    Ok(live)
                }
            }),
        );
        let changes =
            |r: &PlanReport| -> Vec<&'static str> { r.objects.iter().map(|o| o.change).collect() };
        assert_eq!(changes(&r), changes(&local));
        assert_eq!(r.restarts, local.restarts);
        assert_eq!(r.notes.len(), 1);
        assert!(
            r.notes[0].starts_with("server-side dry run not possible (StatefulSet/orders: 403"),
            "{:?}",
            r.notes
        );
        assert!(r.notes[0].contains("local comparison"), "{:?}", r.notes);
    }

    #[tokio::test]
    async fn each_object_is_applied_with_dry_run_as_the_operator_applies_it() {
        let g = gathered(live_cluster(), "live");
        assert!(g.observed.cluster.metadata.uid.is_some());
        let mut r = report(&g);
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let line = format!(
                    "{} {}?{} {}",
                    request.method(),
                    request.uri().path(),
                    request.uri().query().unwrap_or(""),
                    request
                        .headers()
                        .get(http::header::CONTENT_TYPE)
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default()
                );
                let body = request.into_body().collect_bytes().await.unwrap();
                log.lock().unwrap().push(line);
                // The server stores exactly what was applied.
                send.send_response(
                    Response::builder()
                        .status(StatusCode::OK)
                        .body(Body::from(body.to_vec()))
                        .unwrap(),
                );
            }
        });
        let client = Client::new(service, "default");
        refine(&client, &g, &mut r).await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), r.objects.len(), "{seen:#?}");
        for line in seen.iter() {
            assert!(line.starts_with("PATCH /"), "{line}");
            for part in ["dryRun=All", "fieldManager=database-operator", "force=true"] {
                assert!(line.contains(part), "{part} missing in {line}");
            }
            assert!(line.ends_with("application/apply-patch+yaml"), "{line}");
        }
        assert!(
            seen.iter()
                .any(|l| l.contains("/apis/apps/v1/namespaces/shop/statefulsets/orders?")),
            "{seen:#?}"
        );
        assert!(r.objects.iter().all(|o| o.change == "unchanged"), "{r:#?}");
        assert_eq!(r.notes, [EXACT_NOTE]);
    }

    #[tokio::test]
    async fn a_cluster_not_created_yet_is_not_dry_run() {
        let mut g = gathered(observed(cluster(LIVE), "0123456789abcdef"), "orders.yaml");
        g.observed.cluster.metadata.uid = None;
        let mut r = report(&g);
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        refine(&Client::new(service, "default"), &g, &mut r).await;
        assert_eq!(r.notes.len(), 1);
        assert!(
            r.notes[0].starts_with("no server-side dry run"),
            "{:?}",
            r.notes
        );
    }
}
