//! The kube-backed `ClusterIo` against kube's mock API server (tower-test): what each write
//! looks like on the wire. Paths, verbs, query pairs, content types and JSON bodies are parsed
//! and compared; every request must also be allowed by the RBAC rules the operator ships.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use database_operator_api::{DatabaseCluster, DatabaseClusterStatus, FINALIZER, Phase};
use database_operator_core::render::{RenderContext, cleanup_job};
use database_operator_core::{
    DesiredObject, EventType, MemberRole, ObjectKey, OperatorConfig, OwnedKind, PlannedEvent,
    SecretState,
};
use database_operator_runtime::error::ErrorCategory;
use database_operator_runtime::io::{ClusterIo, KubeIo};
use database_operator_runtime::metrics::Metrics;
use database_operator_runtime::rbac;
use database_operator_runtime::secrets::{KubeSecrets, SecretSource, fingerprint, state_of};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::client::Body;
use kube::runtime::events::Reporter;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

type MockHandle = Handle<Request<Body>, Response<Body>>;

/// One request as the API server saw it.
#[derive(Debug)]
struct Seen {
    method: Method,
    path: String,
    query: BTreeMap<String, String>,
    content_type: Option<String>,
    body: Value,
}

impl Seen {
    /// (group, resource, verb) as RBAC sees this request.
    fn rbac(&self) -> (String, String, String) {
        let parts: Vec<&str> = self.path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => panic!("unexpected path {}", self.path),
        };
        let rest = match rest {
            ["namespaces", _ns, rest @ ..] => rest,
            other => other,
        };
        let (resource, named) = match rest {
            [resource] => (resource.to_string(), false),
            [resource, _name] => (resource.to_string(), true),
            [resource, _name, sub] => (format!("{resource}/{sub}"), true),
            _ => panic!("unexpected path {}", self.path),
        };
        let verb = match (&self.method, named) {
            (&Method::GET, true) => "get",
            (&Method::GET, false) if self.query.get("watch").is_some_and(|w| w == "true") => {
                "watch"
            }
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PATCH, _) => "patch",
            (&Method::PUT, _) => "update",
            (&Method::DELETE, _) => "delete",
            (m, _) => panic!("unexpected method {m}"),
        };
        (group.to_owned(), resource, verb.to_owned())
    }
}

async fn next(handle: &mut MockHandle) -> (Seen, tower_test::mock::SendResponse<Response<Body>>) {
    let (request, send) = handle
        .next_request()
        .await
        .expect("the client sent a request");
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(form_pairs).unwrap_or_default();
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON body")
    };
    let seen = Seen {
        method,
        path,
        query,
        content_type,
        body,
    };
    let triple = seen.rbac();
    // A server-side apply that creates the object is authorised as `create` too.
    if seen.content_type.as_deref() == Some("application/apply-patch+yaml")
        && !triple.1.ends_with("/status")
    {
        assert!(
            rbac::allows(rbac::CLUSTER_RULES, &triple.0, &triple.1, "create"),
            "server-side apply of {triple:?} needs create as well as patch"
        );
    }
    assert!(
        rbac::allows(rbac::CLUSTER_RULES, &triple.0, &triple.1, &triple.2)
            || rbac::allows(rbac::LEADER_ELECTION_RULES, &triple.0, &triple.1, &triple.2),
        "request {triple:?} is not granted by deploy/rbac"
    );
    (seen, send)
}

fn form_pairs(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

fn api_status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

fn setup() -> (KubeIo, MockHandle, Arc<Metrics>, kube::Client) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let metrics = Arc::new(Metrics::new());
    let reporter = Reporter {
        controller: "database-operator".into(),
        instance: Some("test-0".into()),
    };
    (
        KubeIo::new(client.clone(), reporter, metrics.clone()),
        handle,
        metrics,
        client,
    )
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("the exchange finished in time")
}

fn cluster() -> DatabaseCluster {
    serde_json::from_value(json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "uid-1", "resourceVersion": "7", "generation": 2,
                     "finalizers": ["other.example.com/keep"]},
        "spec": {"engine": "postgresql", "version": "16.4", "replicas": 3, "storage": {"size": "10Gi"},
                 "passwordSecretRef": {"name": "orders-pw", "key": "password"},
                 "backup": {"schedule": "@daily", "s3Bucket": "orders-backups", "deletionPolicy": "Delete"}}
    }))
    .unwrap()
}

fn stateful_set() -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("orders".into()),
            namespace: Some("shop".into()),
            ..ObjectMeta::default()
        },
        ..StatefulSet::default()
    }
}

#[tokio::test]
async fn apply_is_a_forced_server_side_apply_by_the_operator() {
    let (io, mut handle, metrics, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        assert_eq!(
            seen.path,
            "/apis/apps/v1/namespaces/shop/statefulsets/orders"
        );
        assert_eq!(
            seen.query.get("fieldManager").map(String::as_str),
            Some("database-operator")
        );
        assert_eq!(seen.query.get("force").map(String::as_str), Some("true"));
        assert_eq!(
            seen.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert_eq!(seen.body["apiVersion"], "apps/v1");
        assert_eq!(seen.body["kind"], "StatefulSet");
        assert_eq!(seen.body["metadata"]["name"], "orders");
        let reply = seen.body.clone();
        respond(send, StatusCode::OK, &reply);
    });
    within(io.apply(
        "shop",
        &DesiredObject::StatefulSet(Box::new(stateful_set())),
    ))
    .await
    .unwrap();
    within(server).await.unwrap();
    assert_eq!(metrics.api_writes_total(), 1);
}

/// A Service of this cluster (controller reference to `uid-1`).
fn owned_service() -> DesiredObject {
    let mut service = k8s_openapi::api::core::v1::Service::default();
    service.metadata.name = Some("orders".into());
    service.metadata.namespace = Some("shop".into());
    service.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "database.example.com/v1alpha1".into(),
            kind: "DatabaseCluster".into(),
            name: "orders".into(),
            uid: "uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    DesiredObject::Service(Box::new(service))
}

fn service_metadata(owners: Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": "orders", "namespace": "shop", "uid": "svc-uid", "resourceVersion": "3",
                        "ownerReferences": owners}})
}

#[tokio::test]
async fn create_applies_only_when_the_name_is_free_or_already_this_clusters() {
    // Free: one GET (404), then the apply.
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::GET);
        assert_eq!(seen.path, "/api/v1/namespaces/shop/services/orders");
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "not found"),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        assert_eq!(seen.query.get("force").map(String::as_str), Some("true"));
        let reply = seen.body.clone();
        respond(send, StatusCode::CREATED, &reply);
    });
    within(io.create("shop", &owned_service())).await.unwrap();
    within(server).await.unwrap();

    // This cluster's own, not in the watch yet: applied.
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        let ours = json!([{"apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
                           "name": "orders", "uid": "uid-1", "controller": true}]);
        respond(send, StatusCode::OK, &service_metadata(ours));
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        let reply = seen.body.clone();
        respond(send, StatusCode::OK, &reply);
    });
    within(io.create("shop", &owned_service())).await.unwrap();
    within(server).await.unwrap();

    // Someone else's (no controller, or another one): nothing is written, the error names it.
    for (owners, says) in [
        (json!([]), "it has no controller"),
        (
            json!([{"apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
                    "name": "orders", "uid": "uid-of-an-earlier-cluster", "controller": true}]),
            "its controller is DatabaseCluster orders",
        ),
    ] {
        let (io, mut handle, _, _) = setup();
        let server = tokio::spawn(async move {
            let (seen, send) = next(&mut handle).await;
            assert_eq!(seen.method, Method::GET);
            respond(send, StatusCode::OK, &service_metadata(owners));
            // No second request: the mock would wait for it forever.
            assert!(
                tokio::time::timeout(Duration::from_millis(200), handle.next_request())
                    .await
                    .is_err(),
                "a write followed the refusal"
            );
        });
        let error = within(io.create("shop", &owned_service()))
            .await
            .unwrap_err();
        within(server).await.unwrap();
        assert_eq!(error.category(), ErrorCategory::NotOwned);
        let text = error.to_string();
        assert!(
            text.contains("Service shop/orders exists and is not this cluster's")
                && text.contains(says),
            "{text}"
        );
    }
}

#[tokio::test]
async fn apply_conflict_is_a_conflict() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        respond(
            send,
            StatusCode::CONFLICT,
            &api_status(409, "Conflict", "Operation cannot be fulfilled"),
        );
    });
    let error = within(io.apply(
        "shop",
        &DesiredObject::StatefulSet(Box::new(stateful_set())),
    ))
    .await
    .unwrap_err();
    within(server).await.unwrap();
    assert_eq!(error.category(), ErrorCategory::Conflict);
}

#[tokio::test]
async fn status_goes_to_the_status_subresource() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        assert_eq!(
            seen.path,
            "/apis/database.example.com/v1alpha1/namespaces/shop/databaseclusters/orders/status"
        );
        assert_eq!(
            seen.query.get("fieldManager").map(String::as_str),
            Some("database-operator")
        );
        assert_eq!(seen.query.get("force").map(String::as_str), Some("true"));
        assert_eq!(
            seen.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert_eq!(seen.body["apiVersion"], "database.example.com/v1alpha1");
        assert_eq!(seen.body["kind"], "DatabaseCluster");
        assert_eq!(seen.body["status"]["phase"], "Running");
        assert_eq!(seen.body["status"]["readyReplicas"], 3);
        assert!(seen.body.get("spec").is_none(), "only the status is sent");
        let mut reply = serde_json::to_value(cluster()).unwrap();
        reply["status"] = seen.body["status"].clone();
        respond(send, StatusCode::OK, &reply);
    });
    let status = DatabaseClusterStatus {
        phase: Some(Phase::Running),
        ready_replicas: 3,
        ..DatabaseClusterStatus::default()
    };
    within(io.patch_status(&cluster(), &status)).await.unwrap();
    within(server).await.unwrap();
}

#[tokio::test]
async fn pod_role_is_a_merge_patch_of_one_label() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        assert_eq!(seen.path, "/api/v1/namespaces/shop/pods/orders-1");
        assert_eq!(
            seen.content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        assert_eq!(
            seen.body,
            json!({"metadata": {"labels": {"database.example.com/role": "primary"}}})
        );
        respond(
            send,
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-1", "namespace": "shop"}}),
        );
    });
    within(io.label_pod("shop", "orders-1", MemberRole::Primary))
        .await
        .unwrap();
    within(server).await.unwrap();
}

/// A pod deleted since the pass observed it (a fence) has nothing to label: no error, no
/// Warning event, no backoff; any other failure still fails the pass.
#[tokio::test]
async fn labelling_a_pod_that_is_gone_is_not_an_error() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "pods \"orders-0\" not found"),
        );
        let (_, send) = next(&mut handle).await;
        respond(
            send,
            StatusCode::INTERNAL_SERVER_ERROR,
            &api_status(500, "InternalError", "etcdserver: request timed out"),
        );
    });
    assert_eq!(
        within(io.label_pod("shop", "orders-0", MemberRole::Replica))
            .await
            .unwrap(),
        None
    );
    let failed = within(io.label_pod("shop", "orders-0", MemberRole::Replica)).await;
    assert!(
        failed
            .as_ref()
            .is_err_and(|e| e.to_string().contains("orders-0")),
        "{failed:?}"
    );
    within(server).await.unwrap();
}

#[tokio::test]
async fn delete_runs_in_the_background_and_absent_is_fine() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::DELETE);
        assert_eq!(
            seen.path,
            "/apis/batch/v1/namespaces/shop/cronjobs/orders-backup"
        );
        assert_eq!(seen.body["propagationPolicy"], "Background");
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(
                404,
                "NotFound",
                "cronjobs.batch \"orders-backup\" not found",
            ),
        );
    });
    within(io.delete(
        "shop",
        &ObjectKey {
            kind: OwnedKind::CronJob,
            name: "orders-backup".into(),
        },
    ))
    .await
    .unwrap();
    within(server).await.unwrap();
}

#[tokio::test]
async fn finalizers_are_guarded_json_patches() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        assert_eq!(
            seen.path,
            "/apis/database.example.com/v1alpha1/namespaces/shop/databaseclusters/orders"
        );
        assert_eq!(
            seen.content_type.as_deref(),
            Some("application/json-patch+json")
        );
        assert_eq!(
            seen.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other.example.com/keep"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])
        );
        respond(
            send,
            StatusCode::UNPROCESSABLE_ENTITY,
            &api_status(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            ),
        );
    });
    let error = within(io.add_finalizer(&cluster())).await.unwrap_err();
    within(server).await.unwrap();
    assert_eq!(
        error.category(),
        ErrorCategory::Conflict,
        "a failed test is a conflict"
    );

    let (io, mut handle, _, _) = setup();
    let mut with_ours = cluster();
    with_ours.metadata.finalizers = Some(vec!["other.example.com/keep".into(), FINALIZER.into()]);
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(
            seen.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
        respond(
            send,
            StatusCode::OK,
            &serde_json::to_value(cluster()).unwrap(),
        );
    });
    within(io.remove_finalizer(&with_ours)).await.unwrap();
    within(server).await.unwrap();
}

#[tokio::test]
async fn events_are_events_k8s_io() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::POST);
        assert_eq!(seen.path, "/apis/events.k8s.io/v1/namespaces/shop/events");
        assert_eq!(seen.body["type"], "Warning");
        assert_eq!(seen.body["reason"], "ApiCallFailed");
        assert_eq!(seen.body["note"], "Reconcile of shop/orders failed");
        assert_eq!(seen.body["regarding"]["kind"], "DatabaseCluster");
        assert_eq!(seen.body["regarding"]["name"], "orders");
        assert_eq!(seen.body["reportingController"], "database-operator");
        let reply = seen.body.clone();
        respond(send, StatusCode::CREATED, &reply);
    });
    let reference = database_operator_runtime::reconcile::object_reference(&cluster());
    let event = PlannedEvent {
        type_: EventType::Warning,
        reason: database_operator_core::EventReason::ApiCallFailed,
        message: "Reconcile of shop/orders failed".into(),
    };
    within(io.publish(&reference, &event)).await.unwrap();
    within(server).await.unwrap();
}

#[tokio::test]
async fn secret_is_read_with_one_get_and_hashed() {
    let (_, mut handle, _, client) = setup();
    let secrets = KubeSecrets::new(client);
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::GET);
        assert_eq!(seen.path, "/api/v1/namespaces/shop/secrets/orders-pw");
        respond(
            send,
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "orders-pw", "namespace": "shop", "uid": "s-uid", "resourceVersion": "3"},
                    "data": {"password": "aHVudGVyMg=="}}),
        );
        let (_, send) = next(&mut handle).await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "secrets \"gone\" not found"),
        );
    });
    let secret = within(secrets.get("shop", "orders-pw"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        state_of(&secret, "password"),
        SecretState::Present {
            fingerprint: fingerprint("s-uid", b"hunter2")
        }
    );
    assert!(within(secrets.get("shop", "gone")).await.unwrap().is_none());
    within(server).await.unwrap();
}

#[tokio::test]
async fn cleanup_job_is_created_once_and_a_leftover_deleted() {
    let (io, mut handle, _, _) = setup();
    let cluster = cluster();
    let config = OperatorConfig::default();
    let ctx = RenderContext {
        tls_blocked: false,
        name: "orders",
        namespace: "shop",
        uid: "uid-1",
        engine: cluster.spec.engine,
        version: &cluster.spec.version,
        spec: &cluster.spec,
        config: &config,
    };
    let job = cleanup_job::render(&ctx, cluster.spec.backup.as_ref().unwrap());
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(
            (seen.method.clone(), seen.path.as_str()),
            (Method::POST, "/apis/batch/v1/namespaces/shop/jobs")
        );
        assert_eq!(seen.body["metadata"]["name"], "orders-cleanup");
        assert_eq!(
            seen.body["metadata"]["labels"]["database.example.com/cluster-uid"],
            "uid-1"
        );
        let env = &seen.body["spec"]["template"]["spec"]["containers"][0]["env"];
        // The prefix `shop/orders/` is the cluster's namespace and name.
        let value = |name: &str| {
            env.as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .map(|e| e["value"].clone())
        };
        assert_eq!(value("CLUSTER_NAMESPACE"), Some(serde_json::json!("shop")));
        assert_eq!(value("CLUSTER_NAME"), Some(serde_json::json!("orders")));
        let reply = seen.body.clone();
        respond(send, StatusCode::CREATED, &reply);
        // Created again before the Job watch saw it: the conflict is fine.
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::POST);
        respond(
            send,
            StatusCode::CONFLICT,
            &api_status(
                409,
                "AlreadyExists",
                "jobs.batch \"orders-cleanup\" already exists",
            ),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(
            (seen.method.clone(), seen.path.as_str()),
            (
                Method::DELETE,
                "/apis/batch/v1/namespaces/shop/jobs/orders-cleanup"
            )
        );
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "jobs.batch \"orders-cleanup\" not found"),
        );
    });
    within(io.create_job("shop", &job)).await.unwrap();
    within(io.create_job("shop", &job)).await.unwrap();
    within(io.delete_job("shop", "orders-cleanup"))
        .await
        .unwrap();
    within(server).await.unwrap();
}

#[tokio::test]
async fn the_operator_secret_is_created_once_and_released_by_a_strategic_merge_patch() {
    let (io, mut handle, _, _) = setup();
    let mut secret = Secret::default();
    secret.metadata.name = Some("orders-operator".into());
    secret.data = Some(BTreeMap::from([(
        "admin-password".to_owned(),
        k8s_openapi::ByteString(b"generated".to_vec()),
    )]));
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(
            (seen.method.clone(), seen.path.as_str()),
            (Method::POST, "/api/v1/namespaces/shop/secrets")
        );
        assert_eq!(seen.body["metadata"]["name"], "orders-operator");
        assert_eq!(seen.body["data"]["admin-password"], "Z2VuZXJhdGVk");
        let reply = seen.body.clone();
        respond(send, StatusCode::CREATED, &reply);
        // It exists already (created earlier, or kept from a deleted cluster): left as it is.
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::POST);
        respond(
            send,
            StatusCode::CONFLICT,
            &api_status(
                409,
                "AlreadyExists",
                "secrets \"orders-operator\" already exists",
            ),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(
            (seen.method.clone(), seen.path.as_str()),
            (
                Method::PATCH,
                "/api/v1/namespaces/shop/secrets/orders-operator"
            )
        );
        assert_eq!(
            seen.content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        assert_eq!(
            seen.body,
            serde_json::json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "uid-1"}]}})
        );
        respond(
            send,
            StatusCode::OK,
            &serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "orders-operator"}}),
        );
        // Gone already: fine.
        let (_, send) = next(&mut handle).await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "secrets \"orders-operator\" not found"),
        );
    });
    within(io.create_secret("shop", &secret)).await.unwrap();
    within(io.create_secret("shop", &secret)).await.unwrap();
    within(io.release_secret("shop", "orders-operator", "uid-1"))
        .await
        .unwrap();
    within(io.release_secret("shop", "orders-operator", "uid-1"))
        .await
        .unwrap();
    within(server).await.unwrap();
}

#[tokio::test]
async fn the_same_note_again_is_a_series_another_note_a_new_event() {
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..3 {
            let (request, send) = next(&mut handle).await;
            seen.push((
                request.method.clone(),
                request.body["note"].as_str().unwrap_or_default().to_owned(),
                request.body["series"]["count"].as_i64(),
            ));
            let mut reply = request.body.clone();
            reply["metadata"]["name"] = json!("orders.1");
            respond(send, StatusCode::CREATED, &reply);
        }
        seen
    });
    let reference = database_operator_runtime::reconcile::object_reference(&cluster());
    let event = |message: &str| PlannedEvent {
        type_: EventType::Normal,
        reason: database_operator_core::EventReason::BackupCompleted,
        message: message.into(),
    };
    within(io.publish(&reference, &event("backup by Job a completed")))
        .await
        .unwrap();
    within(io.publish(&reference, &event("backup by Job a completed")))
        .await
        .unwrap();
    within(io.publish(&reference, &event("backup by Job b completed")))
        .await
        .unwrap();
    let seen = within(server).await.unwrap();
    assert_eq!(
        seen,
        [
            (Method::POST, "backup by Job a completed".to_owned(), None),
            (
                Method::PATCH,
                "backup by Job a completed".to_owned(),
                Some(2)
            ),
            (Method::POST, "backup by Job b completed".to_owned(), None),
        ]
    );
}

/// A TLS Secret of cluster `orders` (controller uid-1), as `put_secret` is given it.
fn owned_secret() -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "orders-tls", "namespace": "shop",
                     "ownerReferences": [{"apiVersion": "database.example.com/v1alpha1",
                        "kind": "DatabaseCluster", "name": "orders", "uid": "uid-1", "controller": true}]},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}
    }))
    .unwrap()
}

fn secret_metadata(owner_uid: &str, version: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": "orders-tls", "namespace": "shop", "uid": "secret-uid",
                        "resourceVersion": version,
                        "ownerReferences": [{"apiVersion": "database.example.com/v1alpha1",
                            "kind": "DatabaseCluster", "name": "orders", "uid": owner_uid,
                            "controller": true}]}})
}

#[tokio::test]
async fn put_secret_creates_a_free_name_and_applies_over_its_own_with_a_precondition() {
    // Free: a GET (404), then a create (never an apply, which would take a Secret created in
    // between).
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::GET);
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "not found"),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::POST);
        assert_eq!(seen.path, "/api/v1/namespaces/shop/secrets");
        assert_eq!(
            seen.query.get("fieldManager").map(String::as_str),
            Some("database-operator")
        );
        assert!(seen.body["metadata"].get("resourceVersion").is_none());
        let mut created = seen.body.clone();
        created["metadata"]["resourceVersion"] = json!("11");
        respond(send, StatusCode::CREATED, &created);
    });
    let version = within(io.put_secret("shop", &owned_secret()))
        .await
        .unwrap();
    within(server).await.unwrap();
    assert_eq!(version.as_deref(), Some("11"));

    // Its own: the apply carries the resourceVersion whose owner was read.
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        respond(send, StatusCode::OK, &secret_metadata("uid-1", "5"));
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::PATCH);
        assert_eq!(seen.query.get("force").map(String::as_str), Some("true"));
        assert_eq!(seen.body["metadata"]["resourceVersion"], json!("5"));
        let mut applied = seen.body.clone();
        applied["metadata"]["resourceVersion"] = json!("6");
        respond(send, StatusCode::OK, &applied);
    });
    let version = within(io.put_secret("shop", &owned_secret()))
        .await
        .unwrap();
    within(server).await.unwrap();
    assert_eq!(version.as_deref(), Some("6"));
}

#[tokio::test]
async fn put_secret_never_writes_over_a_secret_made_by_someone_else_in_between() {
    // Free when read, taken by someone else before the create (409), theirs when read again:
    // refused, nothing more written.
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            &api_status(404, "NotFound", "not found"),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::POST);
        respond(
            send,
            StatusCode::CONFLICT,
            &api_status(
                409,
                "AlreadyExists",
                "secrets \"orders-tls\" already exists",
            ),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::GET);
        respond(send, StatusCode::OK, &secret_metadata("someone-else", "9"));
        assert!(
            tokio::time::timeout(Duration::from_millis(200), handle.next_request())
                .await
                .is_err(),
            "a write followed the refusal"
        );
    });
    let error = within(io.put_secret("shop", &owned_secret()))
        .await
        .unwrap_err();
    within(server).await.unwrap();
    assert_eq!(error.category(), ErrorCategory::NotOwned);

    // Ours when read, replaced before the apply (409 on the precondition): read again.
    let (io, mut handle, _, _) = setup();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        respond(send, StatusCode::OK, &secret_metadata("uid-1", "5"));
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.body["metadata"]["resourceVersion"], json!("5"));
        respond(
            send,
            StatusCode::CONFLICT,
            &api_status(409, "Conflict", "the object has been modified"),
        );
        let (seen, send) = next(&mut handle).await;
        assert_eq!(seen.method, Method::GET);
        respond(
            send,
            StatusCode::OK,
            &secret_metadata("another-cluster", "8"),
        );
    });
    let error = within(io.put_secret("shop", &owned_secret()))
        .await
        .unwrap_err();
    within(server).await.unwrap();
    assert_eq!(error.category(), ErrorCategory::NotOwned);
}
