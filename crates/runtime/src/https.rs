//! The TLS accept loop shared by the HTTPS servers (the admission webhook, the secure
//! `/metrics`).
//!
//! HTTP/1.1 only: the API server speaks it to webhooks, Prometheus to targets, and it keeps
//! HTTP/2's rapid-reset class of attacks off these ports. Each connection gets a handshake
//! timeout and a header read timeout; the number of open connections is capped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send the request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open requests may take to finish after shutdown was asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Most connections served at once; further ones wait in the listen backlog.
const MAX_CONNECTIONS: usize = 512;

/// A TLS server configuration with `resolver`'s certificate, HTTP/1.1, the ring provider (as
/// kube is built with, rather than whichever provider the process installed).
pub(crate) fn acceptor(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
) -> Result<TlsAcceptor, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(tls)))
}

/// Serves `router` over TLS on `listener` until `shutdown` completes, then stops accepting, lets
/// open requests finish (up to 10 seconds) and returns. `what` names the server in logs.
pub(crate) async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    shutdown: impl Future<Output = ()>,
    what: &'static str,
) {
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
                    tracing::warn!(server = what, error = %e, "accepting a connection failed");
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
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(server = what, %peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(server = what, %peer, "TLS handshake timed out");
                    return;
                }
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!(server = what, %peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(server = what, "stopping: finishing open requests");
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(server = what, grace = ?SHUTDOWN_GRACE, "connections still open after the grace period; closing them");
    }
}
