//! The watches, the caches and the reconcile loop around [`crate::reconcile`].
//!
//! One controller per watched scope (all namespaces, or each `--namespace`), each with:
//! - the `DatabaseCluster` watch (as [`DeserializeGuard`], so one unreadable object fails alone)
//!   feeding the store and the Secret reverse index;
//! - a watch of every owned kind ([`database_operator_core::OwnedKind::all`], one generic
//!   function for all of them), filtered by `app.kubernetes.io/managed-by=database-operator` and
//!   mapped to their owner;
//! - a watch of the pods that carry `database.example.com/cluster`, mapped by that label, cached
//!   as exactly what the core reads of a pod ([`crate::cache::CachedPod`]) and indexed by
//!   cluster ([`PodIndex`]);
//! - a watch of the backup cleanup Jobs, mapped by the same label;
//! - a metadata-only watch of Secrets, mapped through [`SecretIndex`] to exactly the clusters
//!   that reference the Secret.
//!
//! Every cached object has its `managedFields` (and the bulky last-applied annotation) removed;
//! owned objects are held in [`Compact`] form (typed metadata, the rest as JSON) and rebuilt for
//! the cluster a reconcile looks at.
//! A reconcile reads only these caches, plus one GET of the password Secret when its
//! resourceVersion moved ([`Fingerprints`]).
//!
//! | file | holds | IO |
//! | --- | --- | --- |
//! | `scope.rs` | which namespaces a controller watches | no |
//! | `synced.rs` | the Synced barrier: reconciles wait for every watch's first list | no |
//! | `stores.rs` | the caches and the lookups a reconcile makes in them | no |
//! | `context.rs` | what a reconcile needs; gathering the `Observed` | one Secret GET when it moved |
//! | `handler.rs` | one reconcile: span, metrics, logs, errors | through [`crate::io::ClusterIo`] |
//! | `lane.rs` | the write lane: a bounded number of reconciles write objects at once, the rest run beside them | no |
//! | `wiring.rs` | the watch streams and the kube `Controller` | watches |
//! | `prober.rs` | probes every member periodically into the facts cache; asks for reconciles when facts change | the members' servers |
//! | `readiness.rs` | `/readyz` | no |
//!
//! [`Compact`]: crate::cache::Compact
//! [`PodIndex`]: crate::index::PodIndex
//! [`Fingerprints`]: crate::secrets::Fingerprints
//! [`SecretIndex`]: crate::secrets::SecretIndex
//! [`DeserializeGuard`]: kube::core::DeserializeGuard

mod context;
mod handler;
mod lane;
mod prober;
mod readiness;
mod scope;
mod synced;
mod wiring;

pub use context::{Context, ProbeSettings, gather};
pub use handler::reconcile_object;
pub use lane::{Entry, LANE_RECHECK, SLOTS_PER_WRITER, WriteLane};
pub use readiness::Readiness;
pub use scope::Scope;
pub use synced::{Synced, watches};
pub use wiring::{LIST_PAGE_SIZE, SHUTDOWN_GRACE, Settings, run};

#[cfg(test)]
mod tests;
