//! The Synced barrier: reconciles wait until every watch has delivered its first complete list,
//! so a missing object in a cache is a real absence (after a restart nothing is written that
//! was not needed). No IO.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use database_operator_core::OwnedKind;
use kube::runtime::watcher;

/// watch streams (after the event reached the cache). Any number of tasks can wait on it:
/// kube's `Store::wait_until_ready` sits on a one-shot channel that wakes only the last of
/// several waiters, so reconciles waiting on it next to the readiness probe never woke.
#[derive(Clone, Debug)]
pub struct Synced {
    inner: Arc<SyncedInner>,
}

#[derive(Debug)]
struct SyncedInner {
    pending: Mutex<BTreeSet<&'static str>>,
    tx: tokio::sync::watch::Sender<bool>,
}

impl Synced {
    /// Waiting for the first list of each of `watches`; with none, synced at once.
    pub fn new(watches: &[&'static str]) -> Self {
        let pending: BTreeSet<&'static str> = watches.iter().copied().collect();
        let (tx, _) = tokio::sync::watch::channel(pending.is_empty());
        Self {
            inner: Arc::new(SyncedInner {
                pending: Mutex::new(pending),
                tx,
            }),
        }
    }

    /// `watch` has delivered a complete list (later relists change nothing).
    pub fn listed(&self, watch: &'static str) {
        let mut pending = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pending.remove(watch) && pending.is_empty() {
            self.inner.tx.send_replace(true);
        }
    }

    /// Waits until every watch has listed.
    pub async fn wait(&self) {
        let mut rx = self.inner.tx.subscribe();
        // The sender lives as long as `self`: this cannot fail.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Marks `watch` listed when `event` completes its first list.
    pub(super) fn observe<K>(&self, watch: &'static str, event: &watcher::Event<K>) {
        if matches!(event, watcher::Event::InitDone) {
            self.listed(watch);
        }
    }
}

/// Names of the watches one controller waits for, in [`Synced`]: the clusters, each owned kind
/// (by its resource name), pods, Secrets and cleanup Jobs.
pub fn watches() -> Vec<&'static str> {
    let mut names = vec!["databaseclusters"];
    names.extend(OwnedKind::all().into_iter().map(OwnedKind::plural));
    names.extend([
        "pods",
        "secrets",
        "jobs",
        "persistentvolumeclaims",
        "storageclasses",
    ]);
    names
}
