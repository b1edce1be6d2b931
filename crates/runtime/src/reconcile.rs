//! Carrying out one plan: the decisions are the core's, this module only turns them into calls
//! on a [`ClusterIo`], in order, and says when to look again.
//!
//! - A live cluster gets the finalizer first, then every object the plan marks created or
//!   changed (server-side apply), the deletions, the pod actions in order, the status when it
//!   changed, and the plan's events. A steady cluster makes no call at all.
//! - A cluster being deleted gets the `Deleting` status, then its backups are dealt with
//!   (`deletionPolicy: Delete` runs the cleanup, `Retain` says in an event that they are kept),
//!   then the finalizer goes. Owned objects follow by owner-reference garbage collection;
//!   PersistentVolumeClaims are never deleted here.
//! - Errors ([`report_error`]): a conflict requeues at once and quietly; anything else backs off
//!   exponentially per cluster, sets the `Degraded` condition with reason `ReconcileError` and
//!   emits one Warning event per distinct error, not one per retry.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{
    BackupDeletionPolicy, DatabaseCluster, DatabaseClusterStatus, FINALIZER,
};
use database_operator_core::{Action, EventType, KnownMatch, ObjectKey, Observed, PlannedEvent};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::error::{Backoff, Error};
use crate::io::{CleanupProgress, ClusterIo};

/// How often a running backup cleanup is looked at.
pub const CLEANUP_POLL: Duration = Duration::from_secs(10);

/// Longest condition message written (the API allows 32 KiB; a screen does not).
const MAX_MESSAGE: usize = 1024;

/// What a successful reconcile did and when to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// `Some`: look again after this long; `None`: only when something changes.
    pub requeue_after: Option<Duration>,
    /// Writes made (applies, deletes, labels, status, finalizer); events are not counted.
    pub writes: usize,
    /// Comparisons the next reconcile may skip ([`Plan::known_matches`]); empty when the
    /// cluster is being deleted.
    ///
    /// [`Plan::known_matches`]: database_operator_core::Plan::known_matches
    pub known_matches: BTreeMap<ObjectKey, KnownMatch>,
}

/// Whether the operator's finalizer is on `cluster`.
pub fn has_finalizer(cluster: &DatabaseCluster) -> bool {
    cluster.finalizers().iter().any(|f| f == FINALIZER)
}

/// The reference events about `cluster` point at.
pub fn object_reference(cluster: &DatabaseCluster) -> ObjectReference {
    cluster.object_ref(&())
}

async fn publish_all<I: ClusterIo>(io: &I, reference: &ObjectReference, events: &[PlannedEvent]) {
    for event in events {
        if let Err(error) = io.publish(reference, event).await {
            // An event that cannot be written must not stop the reconcile it describes.
            tracing::warn!(%error, reason = %event.reason, "could not publish event");
        }
    }
}

/// Plans and carries out one reconcile of `observed.cluster`.
pub async fn reconcile<I: ClusterIo>(io: &I, observed: &Observed) -> Result<Reconciled, Error> {
    let cluster = &observed.cluster;
    let namespace = cluster.namespace().unwrap_or_default();
    let reference = object_reference(cluster);
    let plan = database_operator_core::plan(observed);
    let mut writes = 0;

    if cluster.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(cluster) {
            // Not ours to hold any more (cleanup done, or never started): nothing to do.
            return Ok(Reconciled {
                requeue_after: None,
                writes,
                known_matches: BTreeMap::new(),
            });
        }
        if plan.status_changed {
            io.patch_status(cluster, &plan.status).await?;
            writes += 1;
        }
        publish_all(io, &reference, &plan.events).await;
        if let Some(backup) = &cluster.spec.backup {
            let location = format!(
                "bucket {} under {}/{}/",
                backup.s3_bucket,
                namespace,
                cluster.name_any()
            );
            match backup.deletion_policy {
                BackupDeletionPolicy::Retain => {
                    let event = PlannedEvent {
                        type_: EventType::Normal,
                        reason: "BackupsRetained".to_owned(),
                        message: format!(
                            "Backups of {namespace}/{} in {location} are kept (deletionPolicy Retain); remove them from the bucket when no longer needed.",
                            cluster.name_any()
                        ),
                    };
                    publish_all(io, &reference, std::slice::from_ref(&event)).await;
                }
                BackupDeletionPolicy::Delete => match io.cleanup_backups(cluster).await? {
                    CleanupProgress::InProgress => {
                        return Ok(Reconciled {
                            requeue_after: Some(CLEANUP_POLL),
                            writes,
                            known_matches: BTreeMap::new(),
                        });
                    }
                    CleanupProgress::Done => {
                        let event = PlannedEvent {
                            type_: EventType::Normal,
                            reason: "BackupsDeleted".to_owned(),
                            message: format!(
                                "Backups of {namespace}/{} in {location} were removed (deletionPolicy Delete).",
                                cluster.name_any()
                            ),
                        };
                        publish_all(io, &reference, std::slice::from_ref(&event)).await;
                    }
                },
            }
        }
        io.remove_finalizer(cluster).await?;
        writes += 1;
        return Ok(Reconciled {
            requeue_after: None,
            writes,
            known_matches: BTreeMap::new(),
        });
    }

    if !has_finalizer(cluster) {
        io.add_finalizer(cluster).await?;
        writes += 1;
    }
    for object in plan.changed_objects() {
        io.apply(&namespace, object).await?;
        writes += 1;
    }
    for key in &plan.delete {
        io.delete(&namespace, key).await?;
        writes += 1;
    }
    for action in &plan.actions {
        match action {
            Action::LabelPod { pod, role } => io.label_pod(&namespace, pod, *role).await?,
        }
        writes += 1;
    }
    if plan.status_changed {
        io.patch_status(cluster, &plan.status).await?;
        writes += 1;
    }
    publish_all(io, &reference, &plan.events).await;
    Ok(Reconciled {
        requeue_after: Some(plan.requeue_after),
        writes,
        // An object just written has a new resourceVersion: only unchanged ones are known.
        known_matches: plan.known_matches(&observed.owned),
    })
}

/// What each cluster's last successful reconcile compared and found unchanged
/// ([`database_operator_core::KnownMatch`]), by (namespace, name): handed back to the core so a
/// steady cluster's plan does not walk its owned objects again. A few hundred bytes a cluster;
/// an entry goes when its cluster's reconcile finds nothing to remember (deletion).
#[derive(Debug, Default)]
pub struct KnownMatches {
    by_cluster: Mutex<HashMap<(String, String), BTreeMap<ObjectKey, KnownMatch>>>,
}

impl KnownMatches {
    /// What is known about the cluster `namespace/name` (empty when nothing is).
    pub fn get(&self, namespace: &str, name: &str) -> BTreeMap<ObjectKey, KnownMatch> {
        let map = self.by_cluster.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces what is known about `namespace/name`.
    pub fn set(&self, namespace: &str, name: &str, known: BTreeMap<ObjectKey, KnownMatch>) {
        let mut map = self.by_cluster.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        if known.is_empty() {
            map.remove(&key);
        } else {
            map.insert(key, known);
        }
    }

    /// Clusters with something known.
    pub fn len(&self) -> usize {
        self.by_cluster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Whether nothing is known about any cluster.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Consecutive failures per cluster, and the last error reported for each.
#[derive(Debug, Default)]
pub struct Failures {
    inner: Mutex<HashMap<(String, String), (u32, String)>>,
}

/// One failure as [`Failures::record`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Consecutive failures including this one.
    pub count: u32,
    /// Whether the error differs from the one last reported for this cluster.
    pub new_error: bool,
}

impl Failures {
    /// Records a failure of `namespace/name` with `message`.
    pub fn record(&self, namespace: &str, name: &str, message: &str) -> Failure {
        let mut map = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = map
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert((0, String::new()));
        entry.0 = entry.0.saturating_add(1);
        let new_error = entry.1 != message;
        if new_error {
            entry.1 = message.to_owned();
        }
        Failure {
            count: entry.0,
            new_error,
        }
    }

    /// Forgets the failures of `namespace/name` (after a success).
    pub fn reset(&self, namespace: &str, name: &str) {
        let mut map = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.remove(&(namespace.to_owned(), name.to_owned()));
    }
}

/// The status with `Degraded=True` / `ReconcileError` / `message`, keeping the other conditions
/// and fields; `None` when the status already says exactly that.
pub fn degraded_status(
    cluster: &DatabaseCluster,
    message: &str,
    now: Timestamp,
) -> Option<DatabaseClusterStatus> {
    let mut status = cluster.status.clone().unwrap_or_default();
    let message: String = message.chars().take(MAX_MESSAGE).collect();
    let existing = status
        .conditions
        .iter()
        .position(|c| c.type_ == conditions::DEGRADED);
    if let Some(i) = existing {
        let c = &status.conditions[i];
        if c.status == "True" && c.reason == reasons::RECONCILE_ERROR && c.message == message {
            return None;
        }
    }
    let last_transition_time = match existing.map(|i| &status.conditions[i]) {
        Some(c) if c.status == "True" => c.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: conditions::DEGRADED.to_owned(),
        status: "True".to_owned(),
        reason: reasons::RECONCILE_ERROR.to_owned(),
        message,
        observed_generation: cluster.metadata.generation,
        last_transition_time,
    };
    match existing {
        Some(i) => status.conditions[i] = condition,
        None => status.conditions.push(condition),
    }
    Some(status)
}

/// Reports a failed reconcile and says when to retry.
///
/// A conflict is not reported at all and retried after `backoff.conflict`. Another error is
/// retried after `backoff.delay(failure.count)`; when it is a new error for this cluster (not the
/// same one again), it is published once as a Warning event (reason = its category) and written
/// once into the `Degraded` condition.
pub async fn report_error<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    error: &Error,
    failure: &Failure,
    backoff: &Backoff,
    now: Timestamp,
) -> Duration {
    if error.is_conflict() {
        return backoff.conflict;
    }
    if failure.new_error {
        let message = error.to_string();
        let event = PlannedEvent {
            type_: EventType::Warning,
            reason: error.category().event_reason().to_owned(),
            message: format!(
                "Reconcile of {}/{} failed: {message}",
                cluster.namespace().unwrap_or_default(),
                cluster.name_any()
            ),
        };
        publish_all(io, &object_reference(cluster), std::slice::from_ref(&event)).await;
        // Not for a cluster whose spec cannot be read: the status of such an object is not ours
        // to rewrite from a guess.
        if !matches!(error, Error::InvalidObject { .. })
            && let Some(status) = degraded_status(cluster, &message, now)
            && let Err(patch_error) = io.patch_status(cluster, &status).await
        {
            tracing::warn!(error = %patch_error, "could not record the error in the Degraded condition");
        }
    }
    backoff.delay(failure.count)
}

#[cfg(test)]
mod tests;
