use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

use super::*;

const VALUE: &str = "20261201T050000.000000001Z";

const CLUSTER_PATH: &str =
    "/apis/database.example.com/v1alpha1/namespaces/shop/databaseclusters/orders";

fn job_name() -> String {
    backup_now::job_name("orders", VALUE)
}

/// A PostgreSQL cluster `shop/orders` with backups configured, plus `extra` merged into it.
fn cluster(extra: Value) -> Value {
    let mut base = json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": "1"},
        "spec": {"engine": "postgresql", "version": "16.4", "replicas": 1,
                 "storage": {"size": "10Gi"},
                 "passwordSecretRef": {"name": "orders-pw", "key": "password"},
                 "backup": {"schedule": "0 2 * * *", "retention": 7,
                            "s3Bucket": "orders-backups",
                            "s3CredentialsSecretRef": {"name": "orders-s3"}}},
        "status": {"primaryPod": "orders-0", "readyReplicas": 1, "phase": "Running",
                   "lastBackup": {"job": "orders-backup-29000000",
                                  "started": "2026-12-01T02:00:00Z",
                                  "completed": "2026-12-01T02:01:00Z"}}
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

fn job(status: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": job_name(), "namespace": "shop",
                        "annotations": {ANNOTATION: VALUE}},
           "spec": {"template": {"spec": {"containers": []}}},
           "status": status})
}

fn running() -> Value {
    job(json!({"active": 1, "startTime": "2026-12-01T05:00:02Z"}))
}

fn succeeded() -> Value {
    job(json!({"succeeded": 1, "startTime": "2026-12-01T05:00:02Z",
               "completionTime": "2026-12-01T05:01:32Z",
               "conditions": [{"type": "Complete", "status": "True",
                               "lastTransitionTime": "2026-12-01T05:01:32Z"}]}))
}

fn failed() -> Value {
    job(json!({"failed": 2, "startTime": "2026-12-01T05:00:02Z",
               "conditions": [{"type": "Failed", "status": "True",
                               "reason": "BackoffLimitExceeded",
                               "message": "Job has reached the specified backoff limit",
                               "lastTransitionTime": "2026-12-01T05:00:40Z"}]}))
}

fn handled() -> Value {
    json!({"metadata": {"annotations": {ANNOTATION: VALUE}},
           "status": {"handledBackupNow": VALUE}})
}

fn reported() -> Value {
    json!({"metadata": {"annotations": {ANNOTATION: VALUE}},
           "status": {"handledBackupNow": VALUE,
                      "lastBackup": {"job": job_name(), "started": "2026-12-01T05:00:02Z",
                                     "completed": "2026-12-01T05:01:32Z"}}})
}

#[test]
fn a_cluster_without_spec_backup_is_refused() {
    assert!(check(&typed(cluster(json!({})))).is_ok());
    let err = check(&typed(cluster(json!({"spec": {"backup": null}}))))
        .unwrap_err()
        .to_string();
    assert!(err.contains("orders has no spec.backup"), "{err}");
    assert!(err.contains("Nothing was changed"), "{err}");
}

#[test]
fn request_values_are_fresh_and_name_distinct_jobs() {
    let a: Timestamp = "2026-12-01T05:00:00.000000001Z".parse().unwrap();
    let b: Timestamp = "2026-12-01T05:00:00.000000002Z".parse().unwrap();
    assert_eq!(request_value(a), VALUE);
    assert_ne!(request_value(a), request_value(b));
    assert_ne!(
        backup_now::job_name("orders", &request_value(a)),
        backup_now::job_name("orders", &request_value(b))
    );
}

#[test]
fn observing_follows_the_request_the_job_and_the_status() {
    let name = job_name();
    let before = typed(cluster(json!({})));
    assert_eq!(
        observe(&before, VALUE, &name, None),
        Seen::Pending("waiting for the operator to pick up the request".into())
    );
    let picked = typed(cluster(handled()));
    assert_eq!(
        observe(&picked, VALUE, &name, None),
        Seen::Pending(format!(
            "request handled; waiting for the backup Job {name}"
        ))
    );
    let created: Job = serde_json::from_value(job(json!({}))).unwrap();
    assert_eq!(
        observe(&picked, VALUE, &name, Some(&created)),
        Seen::Pending(format!("Job {name} created; waiting for its pod"))
    );
    let run: Job = serde_json::from_value(running()).unwrap();
    assert_eq!(
        observe(&picked, VALUE, &name, Some(&run)),
        Seen::Pending(format!("Job {name} running (started 2026-12-01T05:00:02Z)"))
    );
    let done: Job = serde_json::from_value(succeeded()).unwrap();
    assert!(matches!(
        observe(&picked, VALUE, &name, Some(&done)),
        Seen::Pending(line) if line.contains("waiting for the operator to report it")
    ));
    // The previous backup in status.lastBackup is not this one's outcome.
    let fail: Job = serde_json::from_value(failed()).unwrap();
    assert_eq!(
        observe(&picked, VALUE, &name, Some(&fail)),
        Seen::Done(Outcome::Failed {
            job: name.clone(),
            reason: "BackoffLimitExceeded: Job has reached the specified backoff limit \
                     after 2 failed attempt(s)"
                .into()
        })
    );
    let reported = typed(cluster(reported()));
    assert_eq!(
        observe(&reported, VALUE, &name, Some(&done)),
        Seen::Done(Outcome::Completed {
            job: name.clone(),
            started: Some("2026-12-01T05:00:02Z".parse().unwrap()),
            completed: "2026-12-01T05:01:32Z".parse().unwrap(),
        })
    );
}

fn event(
    object_kind: &str,
    object: &str,
    type_: &str,
    reason: &str,
    message: &str,
    at: &str,
) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{object}.{at}"), "namespace": "shop"},
        "involvedObject": {"kind": object_kind, "name": object, "namespace": "shop"},
        "type": type_, "reason": reason, "message": message, "lastTimestamp": at}))
    .unwrap()
}

/// One request the mock API server answered.
#[derive(Debug, Clone)]
struct Request2 {
    method: Method,
    path: String,
    content_type: Option<String>,
    body: Value,
}

/// A mock API server for `shop/orders`: the n-th GET of the cluster answers `states[n].0` (the
/// last one from then on) and a GET of the backup Job then answers `states[n].1` (404 for
/// `None`); a PATCH answers the current cluster; a list of events answers `events`.
fn server(
    states: Vec<(Value, Option<Value>)>,
    events: Vec<Event>,
) -> (Client, Arc<Mutex<Vec<Request2>>>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let job_path = format!("/apis/batch/v1/namespaces/shop/jobs/{}", job_name());
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
            log.lock().unwrap().push(Request2 {
                method: method.clone(),
                path: path.clone(),
                content_type,
                body,
            });
            let current = states[gets.saturating_sub(1).min(states.len() - 1)].clone();
            let (status, answer) = match (method, path.as_str()) {
                (Method::GET, CLUSTER_PATH) => {
                    let state = states[gets.min(states.len() - 1)].0.clone();
                    gets += 1;
                    (StatusCode::OK, state)
                }
                (Method::PATCH, CLUSTER_PATH) => (StatusCode::OK, current.0),
                (Method::GET, p) if p == job_path => match current.1 {
                    Some(job) => (StatusCode::OK, job),
                    None => (
                        StatusCode::NOT_FOUND,
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                               "status": "Failure", "reason": "NotFound", "code": 404,
                               "message": format!("jobs.batch \"{}\" not found", job_name())}),
                    ),
                },
                (Method::GET, "/api/v1/namespaces/shop/events") => (
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "EventList", "metadata": {},
                           "items": events}),
                ),
                (m, p) => panic!("unexpected {m} {p}"),
            };
            send.send_response(
                Response::builder()
                    .status(status)
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

fn annotation_patches(seen: &[Request2]) -> Vec<Value> {
    seen.iter()
        .filter(|s| s.method == Method::PATCH)
        .map(|s| {
            assert_eq!(s.path, CLUSTER_PATH);
            assert_eq!(
                s.content_type.as_deref(),
                Some("application/merge-patch+json")
            );
            s.body["metadata"]["annotations"][ANNOTATION].clone()
        })
        .collect()
}

fn progress(out: Vec<u8>) -> Vec<String> {
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| l[9..].to_owned())
        .collect()
}

#[tokio::test]
async fn a_backup_is_requested_then_followed_to_status_last_backup() {
    let states = vec![
        (cluster(json!({})), None),
        (cluster(json!({})), None),
        (cluster(handled()), None),
        (cluster(handled()), Some(job(json!({})))),
        (cluster(handled()), Some(running())),
        (cluster(handled()), Some(running())),
        (cluster(handled()), Some(succeeded())),
        (cluster(reported()), Some(succeeded())),
    ];
    let (client, seen) = server(states, Vec::new());
    let mut out = Vec::new();
    let (outcome, details) = run(&client, "shop", "orders", VALUE, FAST, &mut out)
        .await
        .unwrap();
    let name = job_name();
    let completed: Timestamp = "2026-12-01T05:01:32Z".parse().unwrap();
    assert_eq!(
        outcome,
        Outcome::Completed {
            job: name.clone(),
            started: Some("2026-12-01T05:00:02Z".parse().unwrap()),
            completed,
        }
    );
    assert!(details.is_empty());
    assert_eq!(
        annotation_patches(&seen.lock().unwrap()),
        vec![json!(VALUE)]
    );
    assert_eq!(
        progress(out),
        vec![
            format!("requested a backup of orders ({ANNOTATION}={VALUE}, Job {name})"),
            "waiting for the operator to pick up the request".to_owned(),
            format!("request handled; waiting for the backup Job {name}"),
            format!("Job {name} created; waiting for its pod"),
            format!("Job {name} running (started 2026-12-01T05:00:02Z)"),
            format!(
                "Job {name} completed; waiting for the operator to report it in status.lastBackup"
            ),
        ]
    );
    assert_eq!(
        summary("orders", "shop", &outcome),
        (
            format!(
                "backup of orders done: Job {name} completed at 2026-12-01T05:01:32Z, took 1m30s"
            ),
            true
        )
    );
}

#[tokio::test]
async fn a_cluster_without_backups_is_refused_before_anything_is_written() {
    let (client, seen) = server(
        vec![(cluster(json!({"spec": {"backup": null}})), None)],
        Vec::new(),
    );
    let mut out = Vec::new();
    let err = run(&client, "shop", "orders", VALUE, FAST, &mut out)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("orders has no spec.backup"), "{err}");
    let seen = seen.lock().unwrap();
    assert!(seen.iter().all(|s| s.method == Method::GET), "{seen:?}");
    assert!(out.is_empty());
}

#[tokio::test]
async fn a_failed_job_reports_its_reason_the_condition_and_the_warnings() {
    let failing = json!({"metadata": {"annotations": {ANNOTATION: VALUE}},
        "status": {"handledBackupNow": VALUE, "conditions": [
            {"type": "BackupHealthy", "status": "False", "reason": "LastBackupFailed",
             "message": format!("backup Job {} failed", job_name()),
             "lastTransitionTime": "2026-12-01T05:00:41Z"}]}});
    let states = vec![
        (cluster(json!({})), None),
        (cluster(handled()), Some(running())),
        (cluster(failing), Some(failed())),
    ];
    let events = vec![
        event(
            "DatabaseCluster",
            "orders",
            "Normal",
            "BackupRequested",
            "started",
            "2026-12-01T05:00:01Z",
        ),
        event(
            "Job",
            &job_name(),
            "Warning",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            "2026-12-01T05:00:40Z",
        ),
    ];
    let (client, seen) = server(states, events);
    let mut out = Vec::new();
    let (outcome, details) = run(&client, "shop", "orders", VALUE, FAST, &mut out)
        .await
        .unwrap();
    let name = job_name();
    assert_eq!(
        outcome,
        Outcome::Failed {
            job: name.clone(),
            reason: "BackoffLimitExceeded: Job has reached the specified backoff limit \
                     after 2 failed attempt(s)"
                .into()
        }
    );
    assert_eq!(
        annotation_patches(&seen.lock().unwrap()),
        vec![json!(VALUE)]
    );
    assert_eq!(
        details,
        vec![
            format!("condition BackupHealthy=False (LastBackupFailed): backup Job {name} failed"),
            format!(
                "event Warning BackoffLimitExceeded (Job {name}): Job has reached the specified \
                 backoff limit"
            ),
        ]
    );
    let (message, ok) = summary("orders", "shop", &outcome);
    assert!(!ok);
    assert!(
        message.starts_with(&format!(
            "backup of orders failed: Job {name}: BackoffLimitExceeded"
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!("kubectl logs -n shop job/{name}")),
        "{message}"
    );
}

#[tokio::test]
async fn a_timeout_stops_waiting_and_says_the_backup_carries_on() {
    let states = vec![
        (cluster(json!({})), None),
        (cluster(handled()), Some(running())),
    ];
    let (client, seen) = server(states, Vec::new());
    let mut out = Vec::new();
    let timing = Timing {
        timeout: Duration::from_millis(50),
        poll: Duration::from_millis(5),
    };
    let (outcome, _) = run(&client, "shop", "orders", VALUE, timing, &mut out)
        .await
        .unwrap();
    let name = job_name();
    let running_line = format!("Job {name} running (started 2026-12-01T05:00:02Z)");
    assert_eq!(
        outcome,
        Outcome::TimedOut {
            job: name.clone(),
            last_seen: running_line.clone()
        }
    );
    assert_eq!(
        annotation_patches(&seen.lock().unwrap()),
        vec![json!(VALUE)]
    );
    assert_eq!(progress(out).last(), Some(&running_line));
    let (message, ok) = summary("orders", "shop", &outcome);
    assert!(!ok);
    assert!(
        message.contains("not finished within --timeout"),
        "{message}"
    );
    assert!(message.contains("The backup carries on"), "{message}");
}
