//! Carrying out one plan: the decisions are the core's, this module only turns them into calls
//! on a [`ClusterIo`], in order, and says when to look again.
//!
//! The order: the finalizer when the plan adds it, the operator Secret's steps (created with
//! freshly generated passwords before the pods that read it, or released from a deleted
//! cluster), every object the plan marks created or changed (server-side apply), the deletions, the pod steps in order, the status when it
//! changed, the plan's events, the backup cleanup steps of a deleted cluster (a failed cleanup
//! is returned as an error), and the finalizer when the plan removes it. A steady cluster makes
//! no call at all.
//! - Errors ([`report_error`]): a conflict requeues at once and quietly; anything else backs off
//!   exponentially per cluster, sets the `Degraded` condition with reason `ReconcileError` and
//!   emits one Warning event per distinct error, not one per retry.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::SecretStep;
use database_operator_core::status;
use database_operator_core::{
    CleanupStep, EventType, FinalizerStep, KnownMatch, ObjectKey, Observed, PlannedEvent, Step,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::error::{Backoff, Error};
use crate::io::ClusterIo;

/// What a successful reconcile did and when to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// `Some`: look again after this long; `None`: only when something changes.
    pub requeue_after: Option<Duration>,
    /// Writes made (applies, deletes, labels, status, cleanup Jobs, finalizer); events are not
    /// counted.
    pub writes: usize,
    /// Comparisons the next reconcile may skip ([`Plan::known_matches`]); empty when the
    /// cluster is being deleted.
    ///
    /// [`Plan::known_matches`]: database_operator_core::Plan::known_matches
    pub known_matches: BTreeMap<ObjectKey, KnownMatch>,
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
    let plan = database_operator_core::plan(observed);
    let mut writes = 0;
    if plan.finalizer == FinalizerStep::Add {
        io.add_finalizer(cluster).await?;
        writes += 1;
    }
    // The operator Secret before the objects: the pods read it.
    for step in &plan.secret_steps {
        match step {
            SecretStep::Create(metadata) => {
                let secret = crate::credentials::with_generated_values(metadata)?;
                io.create_secret(&namespace, &secret).await?;
            }
            SecretStep::Release { name, owner_uid } => {
                io.release_secret(&namespace, name, owner_uid).await?;
            }
        }
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
    // Database steps (fence, promote, follow, ...) are not carried out yet: core plans them only
    // from member facts, which the runtime does not gather yet (the prober comes next).
    for step in &plan.database_steps {
        tracing::warn!(namespace = %namespace, ?step, "database step planned but not carried out yet");
    }
    for step in &plan.steps {
        match step {
            Step::LabelPod { pod, role } => io.label_pod(&namespace, pod, *role).await?,
        }
        writes += 1;
    }
    // On-demand backups before the status that records their request: a pass repeated after a
    // failed status write creates the same Job again, which is harmless.
    for job in &plan.backup_jobs {
        io.create_job(&namespace, job).await?;
        writes += 1;
    }
    if plan.status_changed {
        io.patch_status(cluster, &plan.status).await?;
        writes += 1;
    }
    publish_all(io, &object_reference(cluster), &plan.events).await;
    for step in &plan.cleanup {
        match step {
            CleanupStep::CreateJob(job) => io.create_job(&namespace, job).await?,
            CleanupStep::DeleteJob(name) => io.delete_job(&namespace, name).await?,
        }
        writes += 1;
    }
    if let Some(message) = plan.cleanup_failure {
        return Err(Error::Cleanup {
            namespace,
            name: cluster.name_any(),
            message,
        });
    }
    if plan.finalizer == FinalizerStep::Remove {
        io.remove_finalizer(cluster).await?;
        writes += 1;
    }
    Ok(Reconciled {
        requeue_after: plan.requeue_after,
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
            reason: error.category().event_reason(),
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
            && let Some(status) = status::with_reconcile_error(cluster, &message, now)
            && let Err(patch_error) = io.patch_status(cluster, &status).await
        {
            tracing::warn!(error = %patch_error, "could not record the error in the Degraded condition");
        }
    }
    backoff.delay(failure.count)
}

#[cfg(test)]
mod tests;
