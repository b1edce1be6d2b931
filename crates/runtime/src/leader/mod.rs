//! Leader election on a `coordination.k8s.io/v1` Lease ([`elector`]).
//!
//! Only the holder runs the controllers. When the lease is lost the controller future is
//! dropped at once, which cancels in-flight reconciles (they run as cancellable tasks); when
//! this replica is asked to stop (SIGTERM) the controllers finish their in-flight reconciles,
//! then the lease is released so a standby takes over without waiting for it to expire.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::shutdown::Shutdown;

pub mod elector;

/// Lease parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Name of the Lease object.
    pub name: String,
    /// Namespace of the Lease object.
    pub namespace: String,
    /// This replica's identity (the pod name, or host and process id out of cluster).
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub duration: Duration,
}

impl LeaseSettings {
    /// When this replica renews, retries and steps down.
    pub fn timing(&self) -> elector::Timing {
        elector::Timing::for_duration(self.duration)
    }
}

/// What is kept back of a confirmed term: a database step starts only while more than this
/// remains of it (a step cannot be recalled once sent).
pub const TERM_MARGIN: Duration = Duration::from_secs(1);

/// A bound on reading the Lease to confirm a term.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);

/// Until when `identity` holds `lease` for certain, on this process's monotonic clock: the
/// Lease's last renewal (or acquisition) plus its duration, less [`TERM_MARGIN`], counted from
/// `now_wall` (read before the Lease was) as `now`. No other replica takes a Lease before it
/// expires, so no other leader acts before this. `Err` says why not: another holder, no
/// renewal recorded, or expired (a replica that stalled past its term, cut off from the API
/// server or paused, still believing it leads).
pub fn term_end(
    lease: &Lease,
    identity: &str,
    now_wall: Timestamp,
    now: Instant,
) -> Result<Instant, String> {
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.as_deref());
    if holder != Some(identity) {
        return Err(format!(
            "the leader Lease is held by {}, not by {identity}",
            holder.unwrap_or("nobody")
        ));
    }
    let renewed = spec
        .and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()))
        .ok_or_else(|| "the leader Lease records no renewal".to_owned())?;
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .filter(|d| *d > 0)
        .ok_or_else(|| "the leader Lease has no duration".to_owned())?;
    let expires = renewed.0 + SignedDuration::from_secs(i64::from(duration));
    let left = now_wall.duration_until(expires)
        - SignedDuration::try_from(TERM_MARGIN).unwrap_or_default();
    match Duration::try_from(left) {
        Ok(left) if !left.is_zero() => Ok(now + left),
        _ => Err(format!(
            "this replica's leader Lease expired (renewed {renewed}, {duration}s term, {}ms kept back), so another replica may lead",
            TERM_MARGIN.as_millis(),
            renewed = renewed.0
        )),
    }
}

/// Reads the leader Lease `settings` names from the API server and returns [`term_end`].
pub async fn confirm_term(client: &Client, settings: &LeaseSettings) -> Result<Instant, String> {
    let (now, now_wall) = (Instant::now(), Timestamp::now());
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let lease = match tokio::time::timeout(CONFIRM_TIMEOUT, api.get(&settings.name)).await {
        Ok(Ok(lease)) => lease,
        Ok(Err(e)) => {
            return Err(format!(
                "reading the leader Lease {}/{}: {e}",
                settings.namespace, settings.name
            ));
        }
        Err(_) => {
            return Err(format!(
                "reading the leader Lease {}/{} took longer than {}s",
                settings.namespace,
                settings.name,
                CONFIRM_TIMEOUT.as_secs()
            ));
        }
    };
    term_end(&lease, &settings.identity, now_wall, now)
}

/// Runs `lead` whenever `leader` says this replica holds the lease, until `shutdown`.
///
/// `lead` gets the shutdown signal to stop gracefully. Losing the lease drops its future at
/// once. `on_change(true|false)` is called on every transition (metrics, readiness).
pub async fn run_elected<F, Fut>(
    mut leader: watch::Receiver<bool>,
    shutdown: Shutdown,
    mut lead: F,
    mut on_change: impl FnMut(bool),
) where
    F: FnMut(Shutdown) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        // Wait to be elected (or to be told to stop).
        loop {
            if *leader.borrow_and_update() {
                break;
            }
            tokio::select! {
                changed = leader.changed() => if changed.is_err() {
                    tracing::error!("leader election stopped; not reconciling");
                    return;
                },
                () = shutdown.wait() => return,
            }
        }
        tracing::info!("elected leader: starting the controllers");
        on_change(true);
        let lost = async {
            loop {
                if leader.changed().await.is_err() || !*leader.borrow_and_update() {
                    return;
                }
            }
        };
        tokio::select! {
            () = lead(shutdown.clone()) => {
                tracing::info!("controllers stopped");
            }
            () = lost => {
                tracing::warn!("lost the leader lease: reconciling stopped at once");
            }
        }
        on_change(false);
        if shutdown.is_triggered() {
            return;
        }
        // The controllers ended without being asked to (or the lease flapped): do not spin.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Elects with a Lease and runs `lead` while elected; releases the lease before returning.
pub async fn run_with_lease<F, Fut>(
    client: Client,
    settings: &LeaseSettings,
    shutdown: Shutdown,
    lead: F,
    on_change: impl FnMut(bool),
) where
    F: FnMut(Shutdown) -> Fut,
    Fut: Future<Output = ()>,
{
    tracing::info!(
        lease = %format!("{}/{}", settings.namespace, settings.name),
        identity = %settings.identity,
        "waiting for the leader lease"
    );
    let store =
        elector::KubeLeaseStore::new(Api::namespaced(client, &settings.namespace), &settings.name);
    let candidate = elector::Candidate {
        name: settings.name.clone(),
        namespace: settings.namespace.clone(),
        identity: settings.identity.clone(),
        timing: settings.timing(),
    };
    let (tx, leader) = watch::channel(false);
    let task = tokio::spawn(elector::elect(store, candidate, tx));
    run_elected(leader, shutdown, lead, on_change).await;
    // Dropping the receiver (moved into run_elected and dropped there) makes the elector
    // release the lease and return.
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the leader election task failed"),
        Err(_) => tracing::warn!("releasing the leader lease timed out; it expires on its own"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leads_only_while_elected_and_stops_at_once_when_the_lease_is_lost() {
        let (tx, rx) = watch::channel(false);
        let shutdown = Shutdown::new();
        let running = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let transitions = Arc::new(std::sync::Mutex::new(Vec::new()));

        let (r, s, t) = (running.clone(), started.clone(), transitions.clone());
        let task = tokio::spawn(run_elected(
            rx,
            shutdown.clone(),
            move |stop: Shutdown| {
                let r = r.clone();
                s.fetch_add(1, Ordering::SeqCst);
                async move {
                    struct Running(Arc<AtomicUsize>);
                    impl Drop for Running {
                        fn drop(&mut self) {
                            self.0.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    let _guard = Running(r.clone());
                    stop.wait().await;
                }
            },
            move |leading| t.lock().unwrap().push(leading),
        ));

        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            0,
            "not elected: nothing runs"
        );

        tx.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(running.load(Ordering::SeqCst), 1);

        tx.send(false).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            running.load(Ordering::SeqCst),
            0,
            "lost: the controllers were dropped"
        );

        tx.send(true).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "re-elected: started again"
        );

        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(running.load(Ordering::SeqCst), 0);
        assert_eq!(*transitions.lock().unwrap(), [true, false, true, false]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_while_waiting_returns() {
        let (_tx, rx) = watch::channel(false);
        let shutdown = Shutdown::new();
        let task = tokio::spawn(run_elected(
            rx,
            shutdown.clone(),
            |_s: Shutdown| async {},
            |_| {},
        ));
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap()
            .unwrap();
    }

    fn lease(holder: &str, renewed: Timestamp, seconds: i32) -> Lease {
        Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(holder.to_owned()),
                renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    renewed,
                )),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_term_ends_a_margin_before_the_lease_expires() {
        let wall = Timestamp::from_second(1_800_000_000).unwrap();
        let now = Instant::now();
        // Renewed 4 s ago, 15 s lease: 11 s left, 10 s usable.
        let renewed = wall - SignedDuration::from_secs(4);
        let end = term_end(&lease("op-a", renewed, 15), "op-a", wall, now).unwrap();
        assert_eq!(end.duration_since(now), Duration::from_secs(10));
    }

    #[test]
    fn another_holder_or_an_expired_lease_confirms_nothing() {
        let wall = Timestamp::from_second(1_800_000_000).unwrap();
        let now = Instant::now();
        let fresh = wall - SignedDuration::from_secs(1);
        let why = term_end(&lease("op-b", fresh, 15), "op-a", wall, now).unwrap_err();
        assert!(why.contains("held by op-b"), "{why}");
        // Renewed 14.5 s ago with 15 s: less than the margin left.
        let old = wall - SignedDuration::from_millis(14_500);
        let why = term_end(&lease("op-a", old, 15), "op-a", wall, now).unwrap_err();
        assert!(why.contains("expired"), "{why}");
        let why = term_end(&Lease::default(), "op-a", wall, now).unwrap_err();
        assert!(why.contains("held by nobody"), "{why}");
    }
}
