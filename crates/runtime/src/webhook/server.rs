//! HTTPS serving: the axum router, served by the TLS accept loop of [`crate::https`] (HTTP/1.1
//! only, handshake and header timeouts, a cap on open connections).

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
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::admission::{Admission, Endpoint};
use super::tls::{CertPaths, CertReloader};
use super::{WebhookConfig, WebhookError};

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
        let reloader = CertReloader::load(CertPaths::in_dir(&config.cert_dir), provider)?;
        let acceptor = crate::https::acceptor(reloader.resolver())?;
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
            acceptor,
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
        crate::https::serve(listener, acceptor, router, shutdown, "admission webhook").await;
        reload.abort();
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
