//! A fault proxy in front of kube-apiserver, for operator processes of the suite: plain HTTP on
//! a loopback port, forwarding each request with the operator's own credentials (a kube client
//! made from its kubeconfig) and, by fixed counts so that a run can be repeated, answering
//! some with 500 or 429, holding some until they time out, and cutting watches.
//!
//! The operator is pointed at it by a kubeconfig of its own ([`FaultProxy::kubeconfig`]); the
//! suite's other clients and the cluster's components talk to kube-apiserver directly.

use std::convert::Infallible;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::env::Env;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Which requests get which fault: every `n`th request (counted over requests that are not
/// watches; 0 turns a fault off), and every watch cut after `watch_cut_after`.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Answered 500 Internal Server Error.
    pub error_every: u64,
    /// Answered 429 Too Many Requests with `Retry-After: 1`.
    pub throttle_every: u64,
    /// Held for `stall`, then answered 504 Gateway Timeout (the request reaches nothing).
    pub stall_every: u64,
    pub stall: Duration,
    /// A watch's response is cut (the connection aborted) this long after it started.
    pub watch_cut_after: Option<Duration>,
}

/// What the proxy did so far.
#[derive(Debug, Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub forwarded: AtomicU64,
    pub errors: AtomicU64,
    pub throttled: AtomicU64,
    pub stalled: AtomicU64,
    pub watches: AtomicU64,
    pub watches_cut: AtomicU64,
}

impl Counts {
    /// One line for a note.
    pub fn summary(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} requests: {} forwarded, {} answered 500, {} answered 429, {} held until they timed out; {} watches, {} cut",
            get(&self.requests),
            get(&self.forwarded),
            get(&self.errors),
            get(&self.throttled),
            get(&self.stalled),
            get(&self.watches),
            get(&self.watches_cut)
        )
    }
}

/// A running proxy; stopped when dropped.
pub struct FaultProxy {
    /// A kubeconfig that points at the proxy (plain HTTP on 127.0.0.1, no credentials: the
    /// proxy adds the operator's).
    pub kubeconfig: PathBuf,
    pub counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy for the operator's user (`env.operator_kubeconfig`) with `faults`.
    pub async fn start(env: &Env, name: &str, faults: Faults) -> Result<FaultProxy> {
        let kubeconfig = Kubeconfig::read_from(&env.operator_kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        let upstream = kube::Client::try_from(config)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let path = env.state_dir.join(format!("{name}.proxy.kubeconfig"));
        fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n"
            ),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        let counts = Arc::new(Counts::default());
        let shared = Arc::new((upstream, faults, counts.clone()));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let shared = shared.clone();
                        async move {
                            let (upstream, faults, counts) = &*shared;
                            Ok::<_, Infallible>(handle(upstream, faults, counts, req).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FaultProxy {
            kubeconfig: path,
            counts,
            task,
        })
    }
}

fn is_watch(req: &Request<Incoming>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

fn full(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A `metav1.Status` body, as the API server answers errors.
fn status_body(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
    .to_string()
}

async fn handle(
    upstream: &kube::Client,
    faults: &Faults,
    counts: &Arc<Counts>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let watch = is_watch(&req);
    if watch {
        counts.watches.fetch_add(1, Ordering::Relaxed);
    } else {
        let n = counts.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let every = |k: u64| k > 0 && n.is_multiple_of(k);
        if every(faults.error_every) {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            return full(
                StatusCode::INTERNAL_SERVER_ERROR,
                status_body(500, "InternalError", "fault proxy: injected error"),
            );
        }
        if every(faults.throttle_every) {
            counts.throttled.fetch_add(1, Ordering::Relaxed);
            let mut resp = full(
                StatusCode::TOO_MANY_REQUESTS,
                status_body(429, "TooManyRequests", "fault proxy: injected throttling"),
            );
            resp.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            return resp;
        }
        if every(faults.stall_every) {
            counts.stalled.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(faults.stall).await;
            return full(
                StatusCode::GATEWAY_TIMEOUT,
                status_body(504, "Timeout", "fault proxy: injected timeout"),
            );
        }
    }
    let (mut parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return full(
                StatusCode::BAD_REQUEST,
                status_body(400, "BadRequest", &format!("fault proxy: {e}")),
            );
        }
    };
    parts.headers.remove(hyper::header::HOST);
    let out = Request::from_parts(parts, kube::client::Body::from(body.to_vec()));
    let resp = match upstream.send(out).await {
        Ok(resp) => resp,
        Err(e) => {
            return full(
                StatusCode::BAD_GATEWAY,
                status_body(502, "BadGateway", &format!("fault proxy: {e}")),
            );
        }
    };
    counts.forwarded.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = resp.into_parts();
    let frames = body
        .into_data_stream()
        .map(|chunk| chunk.map(Frame::data).map_err(|e| Box::new(e) as BoxError));
    let body: ProxyBody = match faults.watch_cut_after.filter(|_| watch) {
        // The watch's frames until the deadline, then an error: the connection is aborted
        // mid-stream, as when a load balancer or the API server drops it.
        Some(after) => {
            let cut_at = tokio::time::Instant::now() + after;
            let counts = counts.clone();
            let cut =
                futures::stream::unfold((Box::pin(frames), false), move |(mut frames, done)| {
                    let counts = counts.clone();
                    async move {
                        if done {
                            return None;
                        }
                        tokio::select! {
                            next = frames.next() => next.map(|item| (item, (frames, false))),
                            () = tokio::time::sleep_until(cut_at) => {
                                counts.watches_cut.fetch_add(1, Ordering::Relaxed);
                                let err: BoxError = "fault proxy: watch cut".into();
                                Some((Err(err), (frames, true)))
                            }
                        }
                    }
                });
            BodyExt::boxed_unsync(StreamBody::new(cut))
        }
        None => BodyExt::boxed_unsync(StreamBody::new(frames)),
    };
    Response::from_parts(parts, body)
}
