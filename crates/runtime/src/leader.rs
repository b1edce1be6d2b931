//! Leader election on a `coordination.k8s.io/v1` Lease, with kube-lease-manager.
//!
//! Only the holder runs the controllers. When the lease is lost the controller future is
//! dropped at once, which cancels in-flight reconciles (they run as cancellable tasks); when
//! this replica is asked to stop (SIGTERM) the controllers finish their in-flight reconciles,
//! then the lease is released so a standby takes over without waiting for it to expire.

use std::future::Future;
use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::shutdown::Shutdown;

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
    /// Seconds before expiry at which the holder renews: a third of the duration (at least 1s).
    pub fn grace_secs(&self) -> u64 {
        (self.duration.as_secs() / 3).max(1)
    }
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
) -> anyhow::Result<()>
where
    F: FnMut(Shutdown) -> Fut,
    Fut: Future<Output = ()>,
{
    let manager = LeaseManagerBuilder::new(client, &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(settings.duration.as_secs().max(2))
        .with_grace(settings.grace_secs())
        .with_field_manager(format!(
            "{}-leader-election",
            database_operator_api::FIELD_MANAGER
        ))
        .build()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "preparing Lease {}/{}: {e}",
                settings.namespace,
                settings.name
            )
        })?;
    tracing::info!(
        lease = %format!("{}/{}", settings.namespace, settings.name),
        identity = %settings.identity,
        "waiting for the leader lease"
    );
    let (leader, task) = manager.watch().await;
    run_elected(leader, shutdown, lead, on_change).await;
    // Dropping the receiver (moved into run_elected and dropped there) makes the manager
    // release the lease and return.
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(Ok(_))) => tracing::info!("leader lease released"),
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "releasing the leader lease"),
        Ok(Err(e)) => tracing::warn!(error = %e, "lease manager task"),
        Err(_) => tracing::warn!("releasing the leader lease timed out; it expires on its own"),
    }
    Ok(())
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

    #[test]
    fn grace_is_a_third_of_the_duration() {
        let s = LeaseSettings {
            name: "l".into(),
            namespace: "n".into(),
            identity: "i".into(),
            duration: Duration::from_secs(15),
        };
        assert_eq!(s.grace_secs(), 5);
    }
}
