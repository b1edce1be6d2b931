//! Writes this process made that the watches have not shown yet.
//!
//! A reconcile decides from the caches, and a cache learns of a write only when its watch
//! delivers it, a few milliseconds to a few seconds later. A reconcile that runs in between
//! (another pod of the cluster changed, a probe round asked for one) sees the object as it was
//! before the write and plans the same write again: the 1,000-cluster benchmark showed the
//! same pod label patched twice within 40 ms and the status twice within 20 ms.
//!
//! [`Echoes`] remembers, per cluster, each object a reconcile wrote: the resourceVersions that
//! predate the write (the one the reconcile observed, and those of its own earlier writes to the
//! same object in that pass) and the one the API server answered with. Before the next
//! reconcile of the cluster gathers anything, [`Echoes::awaiting`] compares each remembered
//! object with its cache: still at a version that predates the write means the cache is behind
//! and the reconcile is deferred; anything else (the written version, a later one, gone) means
//! the watch caught up and the entry is dropped. The watch event of the write itself queues the
//! cluster again, so a deferral costs the time the event takes to arrive. An entry older than
//! [`ECHO_WAIT`] is dropped whatever the cache says: a lost event can delay a reconcile, never
//! stop it.
//!
//! No decision is made here: a deferred reconcile plans nothing, and the next one plans from
//! caches that include the write.

use std::time::{Duration, Instant};

use database_operator_core::ObjectKey;

use crate::per_cluster::PerCluster;

/// How long a write is waited for at most before reconciles go on without its echo.
pub const ECHO_WAIT: Duration = Duration::from_secs(5);

/// How soon a deferred reconcile is retried when no watch event comes first.
pub const ECHO_RECHECK: Duration = Duration::from_millis(500);

/// An object a reconcile writes, as its cache knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// An owned object (StatefulSet, Service, ...).
    Owned(ObjectKey),
    /// The `DatabaseCluster` itself (status, finalizer).
    Cluster,
    /// A member pod (role label, deletion).
    Pod(String),
    /// A Secret (the operator Secret).
    Secret(String),
    /// A Job (on-demand backups, the cleanup Job).
    Job(String),
    /// A member's data volume claim (its size).
    Claim(String),
}

impl Target {
    /// The kind written, as the `write:<Kind>` failpoint names it ([`crate::failpoint`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Owned(key) => key.kind.as_str(),
            Target::Cluster => "DatabaseCluster",
            Target::Pod(_) => "Pod",
            Target::Secret(_) => "Secret",
            Target::Job(_) => "Job",
            Target::Claim(_) => "PersistentVolumeClaim",
        }
    }
}

impl std::fmt::Display for Target {
    /// `StatefulSet/orders`, `status`, `pod orders-1`: how the reconcile log line names a write.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Owned(key) => write!(f, "{}/{}", key.kind.as_str(), key.name),
            Target::Cluster => f.write_str("cluster"),
            Target::Pod(name) => write!(f, "pod/{name}"),
            Target::Secret(name) => write!(f, "Secret/{name}"),
            Target::Job(name) => write!(f, "Job/{name}"),
            Target::Claim(name) => write!(f, "PersistentVolumeClaim/{name}"),
        }
    }
}

/// The writes of one reconcile as one log field: each target once, in the order first written
/// (`cluster, pod/orders-1`).
pub fn describe<'a>(targets: impl IntoIterator<Item = &'a Target>) -> String {
    let mut seen: Vec<&Target> = Vec::new();
    for t in targets {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    seen.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One write of a reconcile: the object, the resourceVersion the reconcile observed it at
/// (`None`: absent) and the one the API server answered with (`None`: gone, or not said).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The object.
    pub target: Target,
    /// Its version in the caches the reconcile planned from.
    pub before: Option<String>,
    /// Its version after the write.
    pub after: Option<String>,
}

#[derive(Clone, Debug)]
struct Pending {
    target: Target,
    /// Versions a cache still at has not seen the write.
    predating: Vec<Option<String>>,
    /// The version the last write left.
    after: Option<String>,
    at: Instant,
}

/// Writes not yet seen by the caches, per cluster (namespace, name).
#[derive(Debug, Default)]
pub struct Echoes(PerCluster<Vec<Pending>>);

/// A resourceVersion as the number it is on the API server (an etcd revision).
fn revision(version: Option<&str>) -> Option<u64> {
    version?.parse().ok()
}

impl Pending {
    /// Whether a cache at `current` has not seen the write. When the write's answer and the
    /// cached version are both numbers, an older number has not: the API server's
    /// resourceVersions are etcd revisions, which grow with every write (Kubernetes documents
    /// them as comparable integers for built-in resources, and its own StatefulSet controller
    /// compares them to wait for its writes). A version the pass did not see (the kubelet's
    /// status update between the pass's read and its write) is then still recognised as
    /// older. Otherwise (a deletion, a create that found the object, versions that are not
    /// numbers) the versions known to predate the write decide.
    fn predates(&self, current: &Option<String>) -> bool {
        match (
            revision(self.after.as_deref()),
            revision(current.as_deref()),
        ) {
            (Some(after), Some(cached)) => cached < after,
            _ => self.predating.contains(current),
        }
    }
}

/// Adds the writes of one pass to the awaited ones.
fn record_in(pending: &mut Vec<Pending>, writes: &[Write], now: Instant) {
    for write in writes {
        if let Some(p) = pending.iter_mut().find(|p| p.target == write.target) {
            // A later write to the same object in the same pass (the finalizer, then the
            // status): the version the earlier write left predates this one too.
            let earlier = std::mem::replace(&mut p.after, write.after.clone());
            for v in [earlier, write.before.clone()] {
                if !p.predating.contains(&v) {
                    p.predating.push(v);
                }
            }
            p.predating.retain(|v| v != &write.after);
            p.at = now;
        } else if write.before != write.after {
            pending.push(Pending {
                target: write.target.clone(),
                predating: vec![write.before.clone()],
                after: write.after.clone(),
                at: now,
            });
        }
    }
    pending.retain(|p| !p.predating.is_empty());
}

impl Echoes {
    /// Remembers the writes one reconcile of `namespace/name` made, in the order it made them.
    /// A write that left the version as it was (the server had that content already) is not
    /// waited for: no watch event will come.
    pub fn record(&self, namespace: &str, name: &str, writes: &[Write], now: Instant) {
        if writes.is_empty() {
            return;
        }
        self.0.update(namespace, name, |entry| {
            let mut pending = entry.take().unwrap_or_default();
            record_in(&mut pending, writes, now);
            *entry = (!pending.is_empty()).then_some(pending);
        });
    }

    /// Whether a reconcile of `namespace/name` must wait: some object it wrote is still at a
    /// version from before the write in its cache (`current` gives the cached version, `None`
    /// when the cache does not hold the object). Entries the caches caught up with, and those
    /// older than [`ECHO_WAIT`], are dropped.
    pub fn awaiting(
        &self,
        namespace: &str,
        name: &str,
        current: impl Fn(&Target) -> Option<String>,
        now: Instant,
    ) -> bool {
        self.0.update(namespace, name, |entry| {
            let Some(mut pending) = entry.take() else {
                return false;
            };
            pending.retain(|p| {
                now.saturating_duration_since(p.at) < ECHO_WAIT && p.predates(&current(&p.target))
            });
            let waiting = !pending.is_empty();
            *entry = waiting.then_some(pending);
            waiting
        })
    }

    /// Forgets `namespace/name` (a deleted cluster).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.0.forget(namespace, name);
    }

    /// Whether no write is waited for.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use database_operator_core::OwnedKind;

    use super::*;

    fn v(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    fn sts() -> Target {
        Target::Owned(ObjectKey {
            kind: OwnedKind::StatefulSet,
            name: "orders".into(),
        })
    }

    fn write(target: Target, before: Option<String>, after: Option<String>) -> Write {
        Write {
            target,
            before,
            after,
        }
    }

    #[test]
    fn the_log_names_each_write_once_in_order() {
        let targets = [
            Target::Cluster,
            sts(),
            Target::Pod("orders-1".into()),
            Target::Cluster,
            Target::Secret("orders-operator".into()),
            Target::Job("orders-backup-now".into()),
        ];
        assert_eq!(
            describe(&targets),
            "cluster, StatefulSet/orders, pod/orders-1, Secret/orders-operator, Job/orders-backup-now"
        );
        assert_eq!(describe(&[]), "");
    }

    #[test]
    fn a_create_is_awaited_until_the_cache_holds_the_object() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record("shop", "orders", &[write(sts(), None, v("7"))], t0);
        assert!(echoes.awaiting("shop", "orders", |_| None, t0));
        assert!(!echoes.awaiting("shop", "orders", |_| v("7"), t0));
        // Caught up once: forgotten, even if the object goes again.
        assert!(!echoes.awaiting("shop", "orders", |_| None, t0));
        assert!(echoes.is_empty());
    }

    #[test]
    fn a_later_version_than_the_write_counts_as_seen() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record(
            "shop",
            "orders",
            &[write(Target::Pod("orders-0".into()), v("3"), v("5"))],
            t0,
        );
        assert!(echoes.awaiting("shop", "orders", |_| v("3"), t0));
        // Someone (the kubelet) wrote after us and the watch showed both.
        assert!(!echoes.awaiting("shop", "orders", |_| v("9"), t0));
    }

    #[test]
    fn a_version_between_the_read_and_the_write_still_predates_it() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        // Planned at 100, written at 105; the kubelet wrote 103 in between, and the watch
        // delivered 103 first.
        echoes.record(
            "shop",
            "orders",
            &[write(Target::Pod("orders-0".into()), v("100"), v("105"))],
            t0,
        );
        assert!(echoes.awaiting("shop", "orders", |_| v("103"), t0));
        assert!(!echoes.awaiting("shop", "orders", |_| v("105"), t0));
    }

    #[test]
    fn versions_that_are_not_numbers_fall_back_to_the_ones_known_to_predate() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record("shop", "orders", &[write(sts(), v("a"), v("b"))], t0);
        assert!(echoes.awaiting("shop", "orders", |_| v("a"), t0));
        assert!(!echoes.awaiting("shop", "orders", |_| v("c"), t0));
    }

    #[test]
    fn a_write_that_changed_nothing_is_not_awaited() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record("shop", "orders", &[write(sts(), v("4"), v("4"))], t0);
        assert!(!echoes.awaiting("shop", "orders", |_| v("4"), t0));
    }

    #[test]
    fn two_writes_to_the_cluster_in_one_pass_wait_for_the_second() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record(
            "shop",
            "orders",
            &[
                write(Target::Cluster, v("10"), v("11")), // finalizer
                write(Target::Cluster, v("10"), v("12")), // status
            ],
            t0,
        );
        assert!(echoes.awaiting("shop", "orders", |_| v("10"), t0));
        // The finalizer's event came, the status's not yet.
        assert!(echoes.awaiting("shop", "orders", |_| v("11"), t0));
        assert!(!echoes.awaiting("shop", "orders", |_| v("12"), t0));
    }

    #[test]
    fn a_deletion_is_awaited_until_the_object_leaves_the_cache() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record("shop", "orders", &[write(sts(), v("4"), None)], t0);
        assert!(echoes.awaiting("shop", "orders", |_| v("4"), t0));
        assert!(!echoes.awaiting("shop", "orders", |_| None, t0));
    }

    #[test]
    fn a_create_that_found_the_object_waits_for_any_version() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        let job = Target::Job("orders-backup-now-1".into());
        echoes.record(
            "shop",
            "orders",
            &[write(job, None, crate::io::existing())],
            t0,
        );
        assert!(echoes.awaiting("shop", "orders", |_| None, t0));
        assert!(!echoes.awaiting("shop", "orders", |_| v("1"), t0));
    }

    #[test]
    fn a_lost_event_delays_reconciles_by_at_most_the_echo_wait() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record("shop", "orders", &[write(sts(), v("4"), v("5"))], t0);
        assert!(echoes.awaiting("shop", "orders", |_| v("4"), t0 + ECHO_WAIT / 2));
        assert!(!echoes.awaiting("shop", "orders", |_| v("4"), t0 + ECHO_WAIT));
        assert!(echoes.is_empty());
    }

    #[test]
    fn clusters_are_independent_and_forgotten_on_deletion() {
        let echoes = Echoes::default();
        let t0 = Instant::now();
        echoes.record("shop", "orders", &[write(sts(), v("4"), v("5"))], t0);
        assert!(!echoes.awaiting("shop", "billing", |_| v("4"), t0));
        assert!(!echoes.awaiting("other", "orders", |_| v("4"), t0));
        echoes.forget("shop", "orders");
        assert!(!echoes.awaiting("shop", "orders", |_| v("4"), t0));
    }
}
