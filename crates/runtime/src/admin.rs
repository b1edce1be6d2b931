//! The admin endpoints: `/metrics` on `--metrics-addr`, `/healthz` and `/readyz` on
//! `--health-addr` (both on one plain-HTTP listener when the addresses are equal).
//!
//! With `--metrics-secure` (the default in a pod), `/metrics` is served over HTTPS and only to
//! readers the API server authorizes ([`crate::metrics_auth`]); the health endpoints stay plain
//! HTTP for the kubelet's probes, on a listener of their own.
//!
//! - `/healthz`: 200 while the process serves requests (liveness).
//! - `/readyz`: 200 on a standby replica, and on the leader once every watch cache has its first
//!   complete list; 503 while the leader's caches are still syncing.
//! - `/metrics`: OpenMetrics text ([`crate::metrics`]).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rustls::server::ResolvesServerCert;
use tokio_rustls::TlsAcceptor;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::controller::Readiness;
use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::metrics_auth::{self, KubeReviews, MetricsAuth, Reviews};
use crate::webhook::tls::{CertPaths, CertReloader, ReloadingResolver};

/// How often `--metrics-cert-dir` is checked for a rotated pair.
const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// Routes of the metrics listener.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(metrics)
}

/// The metrics routes behind the authorizer: 401 without an accepted token, 403 for a user
/// who may not `get /metrics`.
pub fn secure_metrics_router<R: Reviews + 'static>(
    metrics: Arc<Metrics>,
    auth: Arc<MetricsAuth<R>>,
) -> Router {
    metrics_router(metrics).layer(axum::middleware::from_fn_with_state(
        auth,
        metrics_auth::require::<R>,
    ))
}

/// How `/metrics` is served with `--metrics-secure`: its TLS settings and who may read it.
pub struct SecureMetrics {
    /// The TLS configuration (a certificate from `--metrics-cert-dir`, or one made at start).
    pub acceptor: TlsAcceptor,
    /// Reloads the certificate from `--metrics-cert-dir` when it changes.
    pub(crate) reloader: Option<CertReloader>,
    /// Reviews the readers' tokens.
    pub auth: Arc<MetricsAuth<KubeReviews>>,
}

impl SecureMetrics {
    /// Serving with the pair in `cert_dir` (reloaded on change), or else with a self-signed
    /// certificate made now (Prometheus scrapes it with `insecureSkipVerify`, as
    /// controller-runtime's generated certificate; the bearer token is what is checked).
    pub fn new(client: kube::Client, cert_dir: Option<&Path>) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (resolver, reloader): (Arc<dyn ResolvesServerCert>, _) = match cert_dir {
            Some(dir) => {
                let reloader = CertReloader::load(CertPaths::in_dir(dir), provider)
                    .context("loading the metrics serving certificate")?;
                (reloader.resolver(), Some(reloader))
            }
            None => {
                let names = vec![
                    "database-operator-metrics".to_owned(),
                    "localhost".to_owned(),
                ];
                let generated = rcgen::generate_simple_self_signed(names)
                    .context("making the metrics serving certificate")?;
                let resolver = ReloadingResolver::fixed(
                    generated.cert.pem().as_bytes(),
                    generated.signing_key.serialize_pem().as_bytes(),
                    &provider,
                )
                .context("loading the generated metrics certificate")?;
                (resolver, None)
            }
        };
        Ok(Self {
            acceptor: crate::https::acceptor(resolver).context("metrics TLS settings")?,
            reloader,
            auth: Arc::new(MetricsAuth::new(KubeReviews(client))),
        })
    }
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
    tls: Option<(TlsAcceptor, Option<CertReloader>)>,
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
            tls,
        } = self;
        let Some((acceptor, reloader)) = tls else {
            tracing::info!(addr = %listener.local_addr()?, endpoints = what, "admin server listening (HTTP)");
            return axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await;
        };
        tracing::info!(addr = %listener.local_addr()?, endpoints = what, "admin server listening (HTTPS, readers authorized by the API server)");
        let reload = reloader.map(|r| tokio::spawn(r.run(RELOAD_INTERVAL)));
        crate::https::serve(listener, acceptor, router, shutdown, what).await;
        if let Some(reload) = reload {
            reload.abort();
        }
        Ok(())
    }
}

/// Binds the metrics and health listeners (one listener when the addresses are equal and
/// `/metrics` is plain HTTP; `secure` needs two).
pub async fn bind(
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    secure: Option<SecureMetrics>,
) -> std::io::Result<Vec<AdminServer>> {
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("listening on {addr}: {e}")))
    };
    if metrics_addr == health_addr && metrics_addr.port() != 0 {
        if secure.is_some() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "--metrics-secure serves /metrics over HTTPS and the health endpoints over \
                     HTTP: give --metrics-addr and --health-addr different ports (both are \
                     {metrics_addr})"
                ),
            ));
        }
        let router = metrics_router(metrics).merge(health_router(readiness));
        return Ok(vec![AdminServer {
            listener: bind(metrics_addr).await?,
            router,
            what: "/metrics /healthz /readyz",
            tls: None,
        }]);
    }
    let (router, tls) = match secure {
        Some(secure) => (
            secure_metrics_router(metrics, secure.auth),
            Some((secure.acceptor, secure.reloader)),
        ),
        None => (metrics_router(metrics), None),
    };
    Ok(vec![
        AdminServer {
            listener: bind(metrics_addr).await?,
            router,
            what: "/metrics",
            tls,
        },
        AdminServer {
            listener: bind(health_addr).await?,
            router: health_router(readiness),
            what: "/healthz /readyz",
            tls: None,
        },
    ])
}
