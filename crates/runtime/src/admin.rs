//! The plain-HTTP admin endpoints: `/metrics` on `--metrics-addr`, `/healthz` and `/readyz` on
//! `--health-addr` (both on one listener when the addresses are equal).
//!
//! - `/healthz`: 200 while the process serves requests (liveness).
//! - `/readyz`: 200 on a standby replica, and on the leader once every watch cache has its first
//!   complete list; 503 while the leader's caches are still syncing.
//! - `/metrics`: OpenMetrics text ([`crate::metrics`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::controller::Readiness;
use crate::metrics::{CONTENT_TYPE, Metrics};

/// Routes of the metrics listener.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(metrics)
}

/// Routes of the health listener.
pub fn health_router(readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(serve_ready))
        .with_state(readiness)
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}\n"),
        )
            .into_response(),
    }
}

async fn serve_ready(State(readiness): State<Arc<Readiness>>) -> Response {
    if readiness.is_ready() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "watch caches are syncing\n",
        )
            .into_response()
    }
}

/// A bound admin listener and what it serves.
pub struct AdminServer {
    listener: TcpListener,
    router: Router,
    what: &'static str,
}

impl AdminServer {
    /// The address actually bound (port 0 picks a free port).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Self {
            listener,
            router,
            what,
        } = self;
        tracing::info!(addr = %listener.local_addr()?, endpoints = what, "admin server listening (HTTP)");
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    }
}

/// Binds the metrics and health listeners (one listener when the addresses are equal).
pub async fn bind(
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> std::io::Result<Vec<AdminServer>> {
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("listening on {addr}: {e}")))
    };
    if metrics_addr == health_addr && metrics_addr.port() != 0 {
        let router = metrics_router(metrics).merge(health_router(readiness));
        return Ok(vec![AdminServer {
            listener: bind(metrics_addr).await?,
            router,
            what: "/metrics /healthz /readyz",
        }]);
    }
    Ok(vec![
        AdminServer {
            listener: bind(metrics_addr).await?,
            router: metrics_router(metrics),
            what: "/metrics",
        },
        AdminServer {
            listener: bind(health_addr).await?,
            router: health_router(readiness),
            what: "/healthz /readyz",
        },
    ])
}
