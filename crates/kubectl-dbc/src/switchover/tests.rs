use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

use super::*;

/// A three-member PostgreSQL cluster `shop/orders` with primary orders-0, plus `extra` merged
/// into it (metadata annotations, status fields).
fn cluster(extra: Value) -> Value {
    let mut base = json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": "1"},
        "spec": {"engine": "postgresql", "version": "16.4", "replicas": 3,
                 "storage": {"size": "10Gi"},
                 "passwordSecretRef": {"name": "orders-pw", "key": "password"}},
        "status": {"primaryPod": "orders-0", "readyReplicas": 3, "phase": "Running"}
    });
    merge(&mut base, extra);
    base
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn typed(value: Value) -> DatabaseCluster {
    serde_json::from_value(value).expect("a DatabaseCluster")
}

fn operation(phase: &str, to: Option<&str>, request: &str) -> Value {
    json!({"kind": "Switchover", "phase": phase, "started": "2026-12-01T05:00:00Z",
           "phaseStarted": "2026-12-01T05:00:01Z", "from": "orders-0", "to": to,
           "reason": format!("requested by annotation ({request})"), "request": request})
}

fn record(outcome: &str, to: Option<&str>, reason: &str) -> Value {
    json!({"kind": "Switchover", "outcome": outcome, "started": "2026-12-01T05:00:00Z",
           "finished": "2026-12-01T05:00:04Z", "from": "orders-0", "to": to, "reason": reason})
}

#[test]
fn the_target_is_auto_or_a_member() {
    let c = typed(cluster(json!({})));
    assert_eq!(target(&c, None).unwrap(), "auto");
    assert_eq!(target(&c, Some("orders-2")).unwrap(), "orders-2");
    for wrong in ["orders-3", "orders-x", "payments-1", "orders"] {
        let err = target(&c, Some(wrong)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("--to {wrong}: not a member of orders")),
            "{err}"
        );
        assert!(err.contains("orders-0 to orders-2"), "{err}");
    }
    let single = typed(cluster(json!({"spec": {"replicas": 1}})));
    let err = target(&single, None).unwrap_err().to_string();
    assert!(err.contains("needs a replica to promote"), "{err}");
}

#[test]
fn how_a_request_starts_depends_on_what_the_cluster_holds() {
    let plain = typed(cluster(json!({})));
    assert_eq!(start(&plain, "orders-1").unwrap(), Start::Write);
    assert_eq!(
        start(&plain, "orders-0").unwrap(),
        Start::AlreadyPrimary("orders-0".into())
    );
    let handled = typed(cluster(json!({
        "metadata": {"annotations": {SWITCHOVER_ANNOTATION: "orders-1"}},
        "status": {"failover": {"handledSwitchover": "orders-1"}}})));
    assert_eq!(start(&handled, "orders-1").unwrap(), Start::ClearThenWrite);
    // A handled request for another value is history: a new value is simply written.
    assert_eq!(start(&handled, "orders-2").unwrap(), Start::Write);
    let pending = typed(cluster(json!({
        "metadata": {"annotations": {SWITCHOVER_ANNOTATION: "orders-1"}}})));
    assert_eq!(start(&pending, "orders-1").unwrap(), Start::Attach);
    let err = start(&pending, "orders-2").unwrap_err().to_string();
    assert!(
        err.contains("already has a switchover request (database.example.com/switchover=orders-1)"),
        "{err}"
    );
    let ours = typed(cluster(json!({"status": {"failover": {
        "operation": operation("Promoting", Some("orders-1"), "orders-1")}}})));
    assert_eq!(start(&ours, "orders-1").unwrap(), Start::Attach);
    let failing_over = typed(cluster(json!({"status": {"failover": {"operation": {
        "kind": "Failover", "phase": "Detecting", "started": "2026-12-01T05:00:00Z",
        "phaseStarted": "2026-12-01T05:00:00Z", "from": "orders-0", "reason": "lost"}}}})));
    let err = start(&failing_over, "orders-1").unwrap_err().to_string();
    assert!(
        err.contains("a Failover of orders is in progress (Detecting"),
        "{err}"
    );
}

#[test]
fn observing_follows_the_operation_and_reads_the_new_record() {
    let old = serde_json::from_value::<FailoverRecord>(record(
        "Completed",
        Some("orders-0"),
        "an older switchover",
    ))
    .unwrap();
    let waiting = typed(cluster(
        json!({"status": {"failover": {"last": record("Completed", Some("orders-0"), "an older switchover")}}}),
    ));
    assert_eq!(
        observe(&waiting, "orders-1", Some(&old)),
        Seen::Pending("waiting for the operator to pick up the request".into())
    );
    let fencing = typed(cluster(json!({"status": {"failover": {
        "operation": operation("Fencing", Some("orders-1"), "orders-1")}}})));
    assert_eq!(
        observe(&fencing, "orders-1", Some(&old)),
        Seen::Pending("Fencing: from orders-0 to orders-1".into())
    );
    let done = typed(cluster(
        json!({"status": {"primaryPod": "orders-1", "failover": {
        "handledSwitchover": "orders-1",
        "last": record("Completed", Some("orders-1"), "requested by annotation (orders-1)")}}}),
    ));
    assert_eq!(
        observe(&done, "orders-1", Some(&old)),
        Seen::Done(Outcome::Completed {
            from: "orders-0".into(),
            to: "orders-1".into()
        })
    );
    let blocked = typed(cluster(json!({"status": {"failover": {
        "handledSwitchover": "auto",
        "last": record("Blocked", None, "no replica answers its probe")}}})));
    assert_eq!(
        observe(&blocked, "auto", Some(&old)),
        Seen::Done(Outcome::Failed {
            outcome: FailoverOutcome::Blocked,
            reason: "no replica answers its probe".into()
        })
    );
    // Handled with the old record in place and the target the primary: nothing moved.
    let already = typed(cluster(
        json!({"status": {"primaryPod": "orders-1", "failover": {
        "handledSwitchover": "orders-1",
        "last": record("Completed", Some("orders-0"), "an older switchover")}}}),
    ));
    assert_eq!(
        observe(&already, "orders-1", Some(&old)),
        Seen::Done(Outcome::AlreadyPrimary("orders-1".into()))
    );
}

fn event(type_: &str, reason: &str, message: &str, at: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("orders.{at}"), "namespace": "shop"},
        "involvedObject": {"kind": "DatabaseCluster", "name": "orders", "namespace": "shop"},
        "type": type_, "reason": reason, "message": message, "lastTimestamp": at}))
    .unwrap()
}

#[test]
fn a_failure_is_explained_by_the_blocked_condition_and_the_events() {
    let c = typed(cluster(json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "3/3",
         "lastTransitionTime": "2026-12-01T05:00:00Z"},
        {"type": "FailoverBlocked", "status": "True", "reason": "NoQuorum",
         "message": "only 1 of 3 members answer", "lastTransitionTime": "2026-12-01T05:00:00Z"}]}})));
    let events = [
        event(
            "Normal",
            "ClusterReady",
            "orders is ready",
            "2026-12-01T04:00:00Z",
        ),
        event(
            "Warning",
            "Switchover",
            "switchover request \"orders-1\" for shop/orders refused: no quorum",
            "2026-12-01T05:00:03Z",
        ),
    ];
    let lines = explain(&c, &events);
    assert_eq!(
        lines,
        vec![
            "condition FailoverBlocked=True (NoQuorum): only 1 of 3 members answer".to_string(),
            "event Warning Switchover: switchover request \"orders-1\" for shop/orders refused: no quorum"
                .to_string(),
        ]
    );
}

/// One request the mock API server answered.
#[derive(Debug, Clone)]
struct Seen2 {
    method: Method,
    path: String,
    content_type: Option<String>,
    body: Value,
}

/// A mock API server for `shop/orders`: the n-th GET of the cluster answers `states[n]` (the
/// last one from then on), a PATCH answers the current state, a list of events answers
/// `events`. Returns the client and the requests seen.
fn server(states: Vec<Value>, events: Vec<Event>) -> (Client, Arc<Mutex<Vec<Seen2>>>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        let mut gets = 0usize;
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let content_type = request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned());
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            log.lock().unwrap().push(Seen2 {
                method: method.clone(),
                path: path.clone(),
                content_type,
                body,
            });
            let current = states[gets.saturating_sub(1).min(states.len() - 1)].clone();
            let answer = match (method, path.as_str()) {
                (
                    Method::GET,
                    "/apis/database.example.com/v1alpha1/namespaces/shop/databaseclusters/orders",
                ) => {
                    let state = states[gets.min(states.len() - 1)].clone();
                    gets += 1;
                    state
                }
                (
                    Method::PATCH,
                    "/apis/database.example.com/v1alpha1/namespaces/shop/databaseclusters/orders",
                ) => current,
                (Method::GET, "/api/v1/namespaces/shop/events") => json!({
                    "apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": events}),
                (m, p) => panic!("unexpected {m} {p}"),
            };
            send.send_response(
                Response::builder()
                    .status(StatusCode::OK)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    (Client::new(service, "default"), seen)
}

const FAST: Timing = Timing {
    timeout: Duration::from_secs(10),
    poll: Duration::from_millis(1),
};

fn annotation_patches(seen: &[Seen2]) -> Vec<Value> {
    seen.iter()
        .filter(|s| s.method == Method::PATCH)
        .map(|s| {
            assert_eq!(
                s.content_type.as_deref(),
                Some("application/merge-patch+json")
            );
            s.body["metadata"]["annotations"][SWITCHOVER_ANNOTATION].clone()
        })
        .collect()
}

#[tokio::test]
async fn a_switchover_is_requested_then_followed_phase_by_phase_to_the_new_primary() {
    let states = vec![
        cluster(json!({})),
        cluster(
            json!({"status": {"failover": {"operation": operation("Fencing", Some("orders-1"), "orders-1")}}}),
        ),
        cluster(
            json!({"status": {"failover": {"operation": operation("Promoting", Some("orders-1"), "orders-1")}}}),
        ),
        cluster(
            json!({"status": {"failover": {"operation": operation("Promoting", Some("orders-1"), "orders-1")}}}),
        ),
        cluster(json!({"status": {"primaryPod": "orders-1", "failover": {
            "handledSwitchover": "orders-1",
            "last": record("Completed", Some("orders-1"), "requested by annotation (orders-1)")}}})),
    ];
    let (client, seen) = server(states, Vec::new());
    let mut out = Vec::new();
    let (outcome, details) = run(&client, "shop", "orders", Some("orders-1"), FAST, &mut out)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Completed {
            from: "orders-0".into(),
            to: "orders-1".into()
        }
    );
    assert!(details.is_empty());
    assert_eq!(
        annotation_patches(&seen.lock().unwrap()),
        vec![json!("orders-1")]
    );
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().map(|l| &l[9..]).collect();
    assert_eq!(
        lines,
        vec![
            "requested a switchover of orders from orders-0 to orders-1",
            "waiting for the operator to pick up the request",
            "Fencing: from orders-0 to orders-1",
            "Promoting: from orders-0 to orders-1",
        ],
        "{text}"
    );
    assert_eq!(
        summary("orders", &outcome),
        (
            "switchover of orders done: orders-1 is the primary (was orders-0)".into(),
            true
        )
    );
}

#[tokio::test]
async fn a_refused_switchover_reports_the_reason_and_the_events() {
    let states = vec![
        cluster(json!({})),
        cluster(json!({"status": {"failover": {"handledSwitchover": "auto",
            "last": record("Blocked", None, "no replica answers its probe")}}})),
    ];
    let events = vec![event(
        "Warning",
        "Switchover",
        "switchover request \"auto\" for shop/orders refused: no replica answers its probe",
        "2026-12-01T05:00:03Z",
    )];
    let (client, seen) = server(states, events);
    let mut out = Vec::new();
    let (outcome, details) = run(&client, "shop", "orders", None, FAST, &mut out)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Failed {
            outcome: FailoverOutcome::Blocked,
            reason: "no replica answers its probe".into()
        }
    );
    assert_eq!(
        annotation_patches(&seen.lock().unwrap()),
        vec![json!("auto")]
    );
    assert_eq!(details.len(), 1, "{details:?}");
    assert!(details[0].contains("refused: no replica answers its probe"));
    let (message, ok) = summary("orders", &outcome);
    assert!(!ok);
    assert_eq!(
        message,
        "switchover of orders Blocked: no replica answers its probe"
    );
}

#[tokio::test]
async fn asking_again_for_a_handled_target_removes_the_annotation_first() {
    let handled = json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: "orders-1"}},
        "status": {"primaryPod": "orders-0", "failover": {"handledSwitchover": "orders-1",
            "last": record("Completed", Some("orders-0"), "an older switchover back")}}});
    let states = vec![
        cluster(handled.clone()),
        // The operator has not noticed the removal yet, then has.
        cluster(handled),
        cluster(json!({"status": {"failover": {
            "last": record("Completed", Some("orders-0"), "an older switchover back")}}})),
        cluster(json!({"status": {"primaryPod": "orders-1", "failover": {
            "handledSwitchover": "orders-1",
            "last": record("Completed", Some("orders-1"), "requested by annotation (orders-1)")}}})),
    ];
    let (client, seen) = server(states, Vec::new());
    let mut out = Vec::new();
    let (outcome, _) = run(&client, "shop", "orders", Some("orders-1"), FAST, &mut out)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Completed {
            from: "orders-0".into(),
            to: "orders-1".into()
        }
    );
    assert_eq!(
        annotation_patches(&seen.lock().unwrap()),
        vec![Value::Null, json!("orders-1")]
    );
}

#[tokio::test]
async fn the_target_already_primary_writes_nothing() {
    let (client, seen) = server(vec![cluster(json!({}))], Vec::new());
    let mut out = Vec::new();
    let (outcome, _) = run(&client, "shop", "orders", Some("orders-0"), FAST, &mut out)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AlreadyPrimary("orders-0".into()));
    assert!(annotation_patches(&seen.lock().unwrap()).is_empty());
}

#[tokio::test]
async fn a_timeout_says_where_it_was_and_leaves_the_request() {
    let states = vec![
        cluster(json!({})),
        cluster(
            json!({"status": {"failover": {"operation": operation("Fencing", Some("orders-2"), "orders-2")}}}),
        ),
    ];
    let (client, seen) = server(states, Vec::new());
    let mut out = Vec::new();
    let timing = Timing {
        timeout: Duration::from_millis(50),
        poll: Duration::from_millis(5),
    };
    let (outcome, _) = run(
        &client,
        "shop",
        "orders",
        Some("orders-2"),
        timing,
        &mut out,
    )
    .await
    .unwrap();
    assert_eq!(
        outcome,
        Outcome::TimedOut {
            last_seen: "Fencing: from orders-0 to orders-2".into()
        }
    );
    let seen = seen.lock().unwrap();
    assert_eq!(annotation_patches(&seen), vec![json!("orders-2")]);
    assert!(
        seen.iter()
            .any(|s| s.path == "/api/v1/namespaces/shop/events")
    );
    let (message, ok) = summary("orders", &outcome);
    assert!(!ok);
    assert!(message.contains("The request stays"), "{message}");
}

#[tokio::test]
async fn a_missing_cluster_is_named() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        let (_, send) = handle.next_request().await.unwrap();
        send.send_response(
            Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::from(
                    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1",
                        "metadata": {}, "status": "Failure", "message": "not found",
                        "reason": "NotFound", "code": 404}))
                    .unwrap(),
                ))
                .unwrap(),
        );
    });
    let client = Client::new(service, "default");
    let err = run(&client, "shop", "orders", None, FAST, &mut Vec::new())
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("DatabaseCluster shop/orders not found"),
        "{err:#}"
    );
}
