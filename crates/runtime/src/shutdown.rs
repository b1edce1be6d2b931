//! A shutdown signal many tasks can wait on.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::watch;

/// Cloneable shutdown signal: [`Shutdown::trigger`] once, every [`Shutdown::wait`] completes.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal not yet triggered.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(false);
        Self {
            tx: std::sync::Arc::new(tx),
        }
    }

    /// Triggers the signal (idempotent).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Whether the signal was triggered.
    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }

    /// Completes once the signal is triggered.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // Err only if the sender is gone, and we hold it.
        let _ = rx.wait_for(|triggered| *triggered).await;
    }

    /// The signal as a cloneable `Send + Sync` future (what `Controller::graceful_shutdown_on`
    /// takes).
    pub fn future(&self) -> Shared<BoxFuture<'static, ()>> {
        let this = self.clone();
        async move { this.wait().await }.boxed().shared()
    }

    /// Triggers the signal on SIGTERM or SIGINT (Ctrl-C).
    pub fn on_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested: finishing in-flight work");
            this.trigger();
        });
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the operator");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiter_wakes() {
        let s = Shutdown::new();
        let a = tokio::spawn({
            let s = s.clone();
            async move { s.wait().await }
        });
        let f = s.future();
        assert!(!s.is_triggered());
        s.trigger();
        tokio::time::timeout(std::time::Duration::from_secs(1), a)
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), f.clone())
            .await
            .unwrap();
        // Already triggered: returns at once.
        tokio::time::timeout(std::time::Duration::from_secs(1), s.wait())
            .await
            .unwrap();
    }
}
