//! `--metrics-secure` over a real loopback socket: /metrics over HTTPS (a certificate made at
//! start), answered only to a bearer token the API server accepts (TokenReview) whose user may
//! `get /metrics` (SubjectAccessReview); the API server is kube's mock service, answering as a
//! real one would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use database_operator_runtime::admin::{self, SecureMetrics};
use database_operator_runtime::controller::Readiness;
use database_operator_runtime::metrics::Metrics;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

/// The mock API server: token `reader` is Prometheus (allowed), `other` a web app (not
/// allowed), anything else unknown. Counts the reviews asked for.
fn api_server() -> (kube::Client, Arc<AtomicUsize>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let reviews = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reviews);
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let path = request.uri().path().to_owned();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let review: Value = serde_json::from_slice(&body).unwrap();
            let answer = match path.as_str() {
                "/apis/authentication.k8s.io/v1/tokenreviews" => {
                    let user = match review["spec"]["token"].as_str() {
                        Some("reader") => Some("system:serviceaccount:monitoring:prometheus"),
                        Some("other") => Some("system:serviceaccount:apps:web"),
                        _ => None,
                    };
                    let mut answer = review.clone();
                    answer["status"] = match user {
                        Some(user) => {
                            json!({"authenticated": true, "user": {"username": user, "groups": ["system:serviceaccounts"]}})
                        }
                        None => json!({"authenticated": false, "error": "invalid bearer token"}),
                    };
                    answer
                }
                "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
                    assert_eq!(
                        review["spec"]["nonResourceAttributes"],
                        json!({"path": "/metrics", "verb": "get"})
                    );
                    let user = review["spec"]["user"].as_str().unwrap_or_default();
                    let mut answer = review.clone();
                    answer["status"] = json!({"allowed": user.ends_with(":prometheus")});
                    answer
                }
                other => panic!("unexpected request to {other}"),
            };
            send.send_response(
                Response::builder()
                    .status(StatusCode::CREATED)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    (kube::Client::new(service, "default"), reviews)
}

#[tokio::test]
async fn metrics_need_a_token_the_api_server_accepts_and_allows() {
    let (client, reviews) = api_server();
    let metrics = Arc::new(Metrics::new());
    metrics.set_leader(true);
    let readiness = Arc::new(Readiness::default());
    let secure = SecureMetrics::new(client, None).expect("a certificate is made at start");
    let servers = admin::bind(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        metrics,
        readiness,
        Some(secure),
    )
    .await
    .unwrap();
    let addrs: Vec<_> = servers.iter().map(|s| s.local_addr().unwrap()).collect();
    let shutdown = database_operator_runtime::shutdown::Shutdown::new();
    for server in servers {
        tokio::spawn(server.run(shutdown.future()));
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The certificate is self-signed: what is checked is the token.
    let https = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://{}/metrics", addrs[0]);
    let get = |token: Option<&'static str>| {
        let mut request = https.get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.expect("an HTTPS answer");
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let (status, body) = get(None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(get(Some("forged")).await.0, 401);
    let (status, body) = get(Some("other")).await;
    assert_eq!(status, 403);
    assert!(
        body.contains("system:serviceaccount:apps:web may not get /metrics"),
        "{body}"
    );
    let (status, body) = get(Some("reader")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("database_operator_leader 1"), "{body}");
    // The reader's decision is kept: scraping again asks the API server nothing.
    let asked = reviews.load(Ordering::SeqCst);
    assert_eq!(asked, 5, "forged 1, other 2, reader 2");
    assert_eq!(get(Some("reader")).await.0, 200);
    assert_eq!(reviews.load(Ordering::SeqCst), asked);
    // Plain HTTP is not served on the metrics port; the health port stays plain HTTP.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/metrics", addrs[0]))
        .send()
        .await;
    assert!(
        plain.is_err() || !plain.unwrap().status().is_success(),
        "plain HTTP answered /metrics"
    );
    let health = reqwest::get(format!("http://{}/healthz", addrs[1]))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    shutdown.trigger();
}

#[tokio::test]
async fn secure_metrics_refuse_one_listener_for_both() {
    let (client, _) = api_server();
    let secure = SecureMetrics::new(client, None).unwrap();
    let addr: std::net::SocketAddr = "127.0.0.1:18089".parse().unwrap();
    let error = admin::bind(
        addr,
        addr,
        Arc::new(Metrics::new()),
        Arc::new(Readiness::default()),
        Some(secure),
    )
    .await
    .err()
    .expect("refused");
    assert!(
        error
            .to_string()
            .contains("give --metrics-addr and --health-addr different ports"),
        "{error}"
    );
}
