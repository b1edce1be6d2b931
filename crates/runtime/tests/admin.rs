//! The admin endpoints over real loopback sockets: /metrics, /healthz, /readyz.

use std::sync::Arc;
use std::time::Duration;

use database_operator_runtime::admin;
use database_operator_runtime::controller::Readiness;
use database_operator_runtime::metrics::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

#[tokio::test]
async fn metrics_and_health_on_ephemeral_loopback_ports() {
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());
    metrics.set_leader(true);
    metrics.api_write("Service", "apply");
    // Families labelled by namespace have series once something happened there.
    metrics.reconciled(
        "shop",
        database_operator_runtime::metrics::Outcome::Success,
        Duration::from_millis(4),
    );
    metrics.set_clusters(
        "*",
        &std::collections::BTreeMap::from([(("shop".to_owned(), "Running".to_owned()), 1)]),
    );
    let servers = admin::bind(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        metrics.clone(),
        readiness.clone(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(servers.len(), 2);
    let addrs: Vec<_> = servers.iter().map(|s| s.local_addr().unwrap()).collect();
    assert!(
        addrs.iter().all(|a| a.port() != 0),
        "port 0 resolves to a real port: {addrs:?}"
    );
    let shutdown = database_operator_runtime::shutdown::Shutdown::new();
    let tasks: Vec<_> = servers
        .into_iter()
        .map(|s| tokio::spawn(s.run(shutdown.future())))
        .collect();
    let (metrics_addr, health_addr) = (addrs[0], addrs[1]);

    let (status, content_type, body) = get(metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    for name in [
        "database_cluster_reconcile_duration_seconds_count{namespace=\"shop\",result=\"success\"} 1",
        "database_clusters_total{namespace=\"shop\",phase=\"Running\"} 1",
        "controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"success\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"databasecluster\"} 0",
        "controller_runtime_reconcile_time_seconds_bucket{",
        "controller_runtime_max_concurrent_reconciles{controller=\"databasecluster\"}",
        "controller_runtime_active_workers{controller=\"databasecluster\"} 0",
        "database_operator_reconcile_errors_total{category=\"Kube\"} 0",
        "database_operator_api_writes_total{kind=\"Service\",verb=\"apply\"} 1",
        "database_operator_leader 1",
    ] {
        assert!(body.contains(name), "/metrics lacks {name}:\n{body}");
    }
    assert!(body.ends_with("# EOF\n"));

    assert_eq!(get(health_addr, "/healthz").await.0, 200);
    // A standby is ready; a leader only once its caches synced.
    assert_eq!(get(health_addr, "/readyz").await.0, 200);
    readiness.start_leading();
    let (status, _, body) = get(health_addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    readiness.mark_synced();
    assert_eq!(get(health_addr, "/readyz").await.0, 200);
    assert_eq!(
        get(metrics_addr, "/healthz").await.0,
        404,
        "each listener serves its own paths"
    );

    shutdown.trigger();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}
