//! HTTPS serving: the axum router and the TLS accept loop.
//!
//! HTTP/1.1 only: the API server speaks it to webhooks, and it keeps HTTP/2's rapid-reset class
//! of attacks off a port that every API server request may depend on. Each connection gets a
//! handshake timeout and a header read timeout; the number of open connections is capped.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use database_operator_api::scheduling::SchedulingPolicy;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::admission::{Admission, Endpoint};
use super::tls::{CertPaths, CertReloader};
use super::{WebhookConfig, WebhookError};

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send the request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open requests may take to finish after shutdown was asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Most connections served at once; further ones wait in the listen backlog.
const MAX_CONNECTIONS: usize = 512;

struct AppState {
    admission: Admission,
    max_body_bytes: usize,
}

/// The webhook's HTTP routes, `POST /validate` and `POST /mutate`, without TLS: for serving
/// behind [`serve`] and for in-process tests. Bodies over `max_body_bytes` get HTTP 413,
/// malformed AdmissionReviews HTTP 400; everything else HTTP 200 with an AdmissionReview.
pub fn router(max_body_bytes: usize) -> Result<Router, WebhookError> {
    router_with(max_body_bytes, SchedulingPolicy::default())
}

/// [`router`] with the operator's scheduling policy.
pub fn router_with(
    max_body_bytes: usize,
    scheduling: SchedulingPolicy,
) -> Result<Router, WebhookError> {
    let state = Arc::new(AppState {
        admission: Admission::new()?.with_scheduling(scheduling),
        max_body_bytes,
    });
    Ok(Router::new()
        .route(Endpoint::Validate.path(), post(validate))
        .route(Endpoint::Mutate.path(), post(mutate))
        .with_state(state))
}

async fn validate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    answer(&state, Endpoint::Validate, request).await
}

async fn mutate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    answer(&state, Endpoint::Mutate, request).await
}

async fn answer(state: &AppState, endpoint: Endpoint, request: Request) -> Response {
    let body = match read_body(request.into_body(), state.max_body_bytes).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match state.admission.handle(endpoint, &body) {
        Ok(review) => match serde_json::to_vec(&review) {
            Ok(json) => {
                let mut response = Response::new(Body::from(json));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(e) => {
                tracing::error!(%endpoint, error = %e, "serialising an AdmissionReview failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("serialising the AdmissionReview failed: {e}\n"),
                )
                    .into_response()
            }
        },
        Err(bad) => {
            tracing::warn!(%endpoint, error = %bad, "rejected a malformed AdmissionReview");
            (StatusCode::BAD_REQUEST, format!("{bad}\n")).into_response()
        }
    }
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, Response> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            tracing::warn!(limit, "rejected an AdmissionReview over the size limit");
            Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("AdmissionReview body is larger than the {limit}-byte limit\n"),
            )
                .into_response())
        }
        Err(e) => Err((
            StatusCode::BAD_REQUEST,
            format!("reading the request body failed: {e}\n"),
        )
            .into_response()),
    }
}

/// A webhook server whose socket is open and certificate loaded, ready to [`run`](Self::run).
pub struct WebhookServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    acceptor: TlsAcceptor,
    router: Router,
    reloader: CertReloader,
    reload_interval: Duration,
}

impl WebhookServer {
    /// Loads the certificate from `config.cert_dir` and opens the listening socket. Fails with a
    /// message naming the file or address when either is unusable.
    pub async fn bind(config: WebhookConfig) -> Result<Self, WebhookError> {
        // An explicit provider (ring, as kube is built with) rather than the process default, so
        // the server never depends on which provider another crate installed or enabled.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let reloader =
            CertReloader::load(CertPaths::in_dir(&config.cert_dir), Arc::clone(&provider))?;
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(reloader.resolver());
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener =
            TcpListener::bind(config.addr)
                .await
                .map_err(|source| WebhookError::Bind {
                    addr: config.addr,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| WebhookError::Bind {
            addr: config.addr,
            source,
        })?;
        Ok(Self {
            listener,
            local_addr,
            acceptor: TlsAcceptor::from(Arc::new(tls)),
            router: router_with(config.max_body_bytes, config.scheduling.clone())?,
            reloader,
            reload_interval: config.reload_interval,
        })
    }

    /// The address actually listened on (useful when the port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes, then stops accepting, lets open requests finish (up
    /// to 10 seconds) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), WebhookError> {
        let Self {
            listener,
            local_addr,
            acceptor,
            router,
            reloader,
            reload_interval,
        } = self;
        tracing::info!(addr = %local_addr, "admission webhook listening (HTTPS)");
        let reload = tokio::spawn(reloader.run(reload_interval));
        let graceful = GracefulShutdown::new();
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => break,
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    // The semaphore is never closed.
                    Err(_) => break,
                },
            };
            let (tcp, peer) = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Such as too many open files: wait a moment instead of spinning.
                        tracing::warn!(error = %e, "accepting a webhook connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(router.clone());
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let _permit = permit;
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "webhook TLS handshake timed out");
                        return;
                    }
                };
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(tls), service);
                if let Err(e) = watcher.watch(connection).await {
                    tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
                }
            });
        }
        drop(listener);
        reload.abort();
        tracing::info!("admission webhook stopping: finishing open requests");
        if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "admission webhook connections still open after the grace period; closing them");
        }
        Ok(())
    }
}

/// Serves the admission webhook over HTTPS until `shutdown` completes.
///
/// The runtime exposes it through these flags of `database-operator run`:
///
/// - `--webhook` (default `true`): serve the webhook. With `--webhook=false` the operator serves
///   no admission endpoints; remove the webhook configurations too (deploy without the
///   `deploy/webhook` component), or the API server, with `failurePolicy: Fail`, rejects every
///   write to a `DatabaseCluster`. The CRD's schema and CEL rules still hold then; what is lost
///   is listed in `docs/webhook-rules.md`.
/// - `--webhook-addr` (default `0.0.0.0:9443`, [`DEFAULT_ADDR`](super::DEFAULT_ADDR)): the
///   listening address; the `database-operator-webhook` Service maps port 443 to 9443.
/// - `--webhook-cert-dir` (default `/tmp/k8s-webhook-server/serving-certs`,
///   [`DEFAULT_CERT_DIR`](super::DEFAULT_CERT_DIR)): the directory with `tls.crt` and `tls.key`.
///   The files are checked every [`WebhookConfig::reload_interval`] and a rotated pair is served
///   from the next handshake on, without a restart.
///
/// The body limit ([`WebhookConfig::max_body_bytes`], 1 MiB by default) needs no flag.
///
/// Fails at start when the certificate pair cannot be loaded or the address cannot be bound;
/// after that it only returns when `shutdown` completes.
pub async fn serve(
    config: WebhookConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WebhookError> {
    WebhookServer::bind(config).await?.run(shutdown).await
}
