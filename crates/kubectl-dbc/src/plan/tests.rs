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
        terminating: false,
        images: [(
            "database".to_owned(),
            "docker.io/library/postgres:16.4".to_owned(),
        )]
        .into(),
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
        member_facts: BTreeMap::new(),
        operator_secret: OperatorSecretState::Present {
            owner_uids: Vec::new(),
        },
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
fn a_new_password_restarts_the_pods_and_says_why() {
    let mut live = live_cluster();
    live.secret = SecretState::Present {
        fingerprint: "fedcba9876543210".to_owned(),
    };
    let report = report(&gathered(live, "live"));
    assert_eq!(
        report.restart_reasons,
        ["the password changed (password-fingerprint annotation)"]
    );
    assert_eq!(report.restarts.len(), 3);
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
