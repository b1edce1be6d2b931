//! Carrying out one plan: the decisions are the core's, this module only turns them into calls
//! on a [`ClusterIo`] and says when to look again.
//!
//! The order is the core's too: [`Plan::flow`] lists the stages (the object writes in three
//! waves, the status when it changed, the database commands, the pod actions, the events, the
//! backup cleanup of a deleted cluster, the finalizer's removal) and where to stop; this module
//! carries them out one after the other. A steady cluster's flow is empty: no call at all.
//! - The database commands go through a [`DatabaseIo`] per member (see [`Members`]). A command
//!   that fails on its member stops the commands after it, not the rest of the flow; it is
//!   returned in [`Reconciled::database_failure`] and the cluster is looked at again within
//!   [`DATABASE_RETRY`], not with the exponential backoff. How a `Follow` is carried out
//!   (repointed, or the pod restarted) is the core's [`follow_by`].
//! - Errors ([`report_error`]): a conflict requeues at once and quietly; unconfirmed leadership
//!   after [`LEADERSHIP_RETRY`]; anything else backs off exponentially per cluster (at most
//!   [`IN_FLIGHT_RETRY`] while a failover or switchover is in flight), sets the `Degraded`
//!   condition with reason `ReconcileError` and emits one Warning event per distinct error, not
//!   one per retry.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::SecretChange;
use database_operator_core::failover::{FollowBy, follow_by};
use database_operator_core::render::labels;
use database_operator_core::status;
use database_operator_core::{
    CleanupTask, DatabaseCommand, EventType, KnownMatch, ObjectKey, Observed, PasswordOutcome,
    Plan, PlannedEvent, PodAction, Stage,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::database::{DatabaseIo, DbError, DbErrorKind};
use crate::echo::Target;
use crate::error::{Backoff, Error};
use crate::io::ClusterIo;
use crate::members::{MemberError, Members, Purpose};
use crate::per_cluster::PerCluster;

/// How soon a cluster is looked at again after a failed database command.
pub const DATABASE_RETRY: Duration = Duration::from_secs(2);

/// The termination grace period of a pod stopped to fence its server (`StopPod`): the server
/// stopped answering (hung, or its node is gone), so waiting the pod's own grace period (two
/// minutes for a database) for a clean shutdown would only prolong the outage. Kubernetes still
/// removes the pod only once its containers stopped (never a force delete).
pub const FENCE_GRACE_SECONDS: u32 = 1;

/// The termination grace period of a switchover's `StopServer`, in whole seconds
/// ([`database_operator_core::failover::SWITCHOVER_STOP_GRACE`]).
pub const STOP_SERVER_GRACE_SECONDS: u32 =
    database_operator_core::failover::SWITCHOVER_STOP_GRACE.as_secs() as u32;

/// What a successful reconcile did and when to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// `Some`: look again after this long; `None`: only when something changes.
    pub requeue_after: Option<Duration>,
    /// Writes made (applies, deletes, labels, status, cleanup Jobs, finalizer); events are not
    /// counted.
    pub writes: usize,
    /// The objects written, in order, with the version each write left: what the next
    /// reconcile waits for the watches to show ([`crate::echo`]). Deleted pods are not in it
    /// (the failover decides from their absence, not from a version).
    pub written: Vec<waves::Written>,
    /// Comparisons the next reconcile may skip ([`Plan::known_matches`]); empty when the
    /// cluster is being deleted.
    ///
    /// [`Plan::known_matches`]: database_operator_core::Plan::known_matches
    pub known_matches: BTreeMap<ObjectKey, KnownMatch>,
    /// The database command that failed, when one did (the rest of the plan was carried out).
    pub database_failure: Option<DatabaseFailure>,
    /// The outcome of a password command carried out in this pass, to hand to the next passes
    /// ([`Observed::password_outcome`]).
    pub password_outcome: Option<PasswordOutcome>,
}

/// A database command that failed on a member. Never holds a password (the drivers' errors do
/// not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseFailure {
    /// The member.
    pub pod: String,
    /// The command ([`DatabaseCommand::name`]): `fence`, `unfence`, `promote`, `follow`,
    /// `quarantine`, ...
    pub command: &'static str,
    /// The kind of error ([`DbErrorKind::as_str`], or why the member could not be dialled).
    pub kind: &'static str,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for DatabaseFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of member {} failed ({}): {}",
            self.command, self.pod, self.kind, self.message
        )
    }
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

/// Plans and carries out one reconcile of `observed.cluster`; database commands go to the
/// members through `members`.
pub async fn reconcile<I: ClusterIo, M: Members>(
    io: &I,
    members: &M,
    observed: &Observed,
) -> Result<Reconciled, Error> {
    carry_out(
        io,
        members,
        observed,
        database_operator_core::plan(observed),
    )
    .await
}

/// Carries out `plan`, planned from `observed`, stage after stage as [`Plan::flow`] orders
/// them.
pub async fn carry_out<I: ClusterIo, M: Members>(
    io: &I,
    members: &M,
    observed: &Observed,
    plan: Plan,
) -> Result<Reconciled, Error> {
    let cluster = &observed.cluster;
    let namespace = cluster.namespace().unwrap_or_default();
    let mut done = Carried::default();
    for stage in plan.flow() {
        match stage {
            Stage::Writes(writes) => {
                let remembered = writes
                    .secret_changes
                    .iter()
                    .any(|c| matches!(c, SecretChange::Restore(_)))
                    .then(|| members.remembered_credentials(cluster))
                    .flatten();
                let written =
                    waves::write(io, cluster, &namespace, &writes, remembered.as_deref()).await?;
                for (target, _) in &written {
                    crate::failpoint::hit_named(|| format!("write:{}", target.kind()));
                }
                done.writes += written.len();
                done.written.extend(written);
            }
            Stage::Status(status) => {
                // The status applies only at the cluster's version it was planned from, or at
                // the one this pass's own write left (the finalizer added first).
                let version = match done.cluster_version() {
                    Some(version) => {
                        let mut latest = cluster.clone();
                        latest.metadata.resource_version = Some(version);
                        io.patch_status(&latest, status).await?
                    }
                    None => io.patch_status(cluster, status).await?,
                };
                done.wrote(Target::Cluster, version);
            }
            Stage::DatabaseCommands(commands) => {
                // Confirmed from the API server before the first step, checked again before
                // every step: a replica that stalled past its term takes no database step.
                let term = members
                    .leadership_term()
                    .await
                    .map_err(|why| Error::Leadership { why })?;
                let CommandsDone {
                    writes,
                    failure,
                    password,
                } = database_commands(io, members, cluster, commands, term).await?;
                done.writes += writes;
                done.database_failure = failure;
                done.password_outcome = password;
            }
            Stage::PodActions(actions) => {
                for action in actions {
                    match action {
                        PodAction::LabelPod { pod, role } => {
                            let version = io.label_pod(&namespace, pod, *role).await?;
                            done.wrote(Target::Pod(pod.clone()), version);
                        }
                        PodAction::SetInitialize { pod, allowed } => {
                            let value = allowed.then_some(labels::INITIALIZE_ALLOWED);
                            let version = io
                                .set_pod_label(&namespace, pod, labels::INITIALIZE, value)
                                .await?;
                            done.wrote(Target::Pod(pod.clone()), version);
                        }
                        PodAction::SetReseed { pod, token } => {
                            let version = io
                                .set_pod_label(&namespace, pod, labels::RESEED, token.as_deref())
                                .await?;
                            done.wrote(Target::Pod(pod.clone()), version);
                        }
                        PodAction::ExpandVolume { claim, size } => {
                            let version = io.expand_claim(&namespace, claim, size).await?;
                            done.wrote(Target::Claim(claim.clone()), version);
                        }
                    }
                }
            }
            Stage::Events(events) => publish_all(io, &object_reference(cluster), events).await,
            Stage::Cleanup(tasks) => {
                for task in tasks {
                    let (name, version) = cleanup_task(io, &namespace, task).await?;
                    done.wrote(Target::Job(name), version);
                }
            }
            Stage::Stop(message) => {
                return Err(Error::Cleanup {
                    namespace,
                    name: cluster.name_any(),
                    message: message.to_owned(),
                });
            }
            Stage::RemoveFinalizer => {
                let version = io.remove_finalizer(cluster).await?;
                done.wrote(Target::Cluster, version);
            }
        }
    }
    let requeue_after = match &done.database_failure {
        Some(_) => Some(
            plan.requeue_after
                .map_or(DATABASE_RETRY, |r| r.min(DATABASE_RETRY)),
        ),
        None => plan.requeue_after,
    };
    Ok(Reconciled {
        requeue_after,
        writes: done.writes,
        written: done.written,
        database_failure: done.database_failure,
        password_outcome: done.password_outcome,
        // An object just written has a new resourceVersion: only unchanged ones are known.
        known_matches: plan.known_matches(&observed.owned),
    })
}

/// What the stages of a flow did so far.
#[derive(Default)]
struct Carried {
    writes: usize,
    written: Vec<waves::Written>,
    database_failure: Option<DatabaseFailure>,
    password_outcome: Option<PasswordOutcome>,
}

impl Carried {
    /// One write made, leaving `version` on `target`.
    fn wrote(&mut self, target: Target, version: crate::io::Version) {
        crate::failpoint::hit_named(|| format!("write:{}", target.kind()));
        self.written.push((target, version));
        self.writes += 1;
    }

    /// The resourceVersion this pass's last write of the cluster left, if it wrote it.
    fn cluster_version(&self) -> Option<String> {
        self.written
            .iter()
            .rev()
            .find(|(target, _)| *target == Target::Cluster)
            .and_then(|(_, version)| version.clone())
    }
}

/// Carries out one backup cleanup task: the Job's name and the version the write left.
async fn cleanup_task<I: ClusterIo>(
    io: &I,
    namespace: &str,
    task: &CleanupTask,
) -> Result<(String, crate::io::Version), Error> {
    match task {
        CleanupTask::CreateJob(job) => {
            let version = io.create_job(namespace, job).await?;
            Ok((job.metadata.name.clone().unwrap_or_default(), version))
        }
        CleanupTask::DeleteJob(name) => {
            io.delete_job(namespace, name).await?;
            Ok((name.clone(), None))
        }
    }
}

/// The last password command's outcome per cluster (namespace, name), handed to the core in every
/// following [`Observed::password_outcome`] until a newer command replaces it; in memory only
/// (a lost outcome only makes the core plan the idempotent command again).
pub type PasswordOutcomes = PerCluster<PasswordOutcome>;

/// What each cluster's last successful reconcile compared and found unchanged
/// ([`database_operator_core::KnownMatch`]), by (namespace, name): handed back to the core so a
/// steady cluster's plan does not walk its owned objects again. A few hundred bytes a cluster;
/// an entry goes when its cluster's reconcile finds nothing to remember (deletion).
#[derive(Debug, Default)]
pub struct KnownMatches(PerCluster<BTreeMap<ObjectKey, KnownMatch>>);

impl KnownMatches {
    /// What is known about the cluster `namespace/name` (empty when nothing is).
    pub fn get(&self, namespace: &str, name: &str) -> BTreeMap<ObjectKey, KnownMatch> {
        self.0.get(namespace, name).unwrap_or_default()
    }

    /// Replaces what is known about `namespace/name`.
    pub fn set(&self, namespace: &str, name: &str, known: BTreeMap<ObjectKey, KnownMatch>) {
        self.0.update(namespace, name, |v| {
            *v = (!known.is_empty()).then_some(known)
        });
    }

    /// Clusters with something known.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is known about any cluster.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Consecutive failures per cluster, and the last error reported for each.
#[derive(Debug, Default)]
pub struct Failures(PerCluster<(u32, String)>);

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
        self.0.update(namespace, name, |entry| {
            let (count, last) = entry.get_or_insert_with(|| (0, String::new()));
            *count = count.saturating_add(1);
            let new_error = last != message;
            if new_error {
                message.clone_into(last);
            }
            Failure {
                count: *count,
                new_error,
            }
        })
    }

    /// Forgets the failures of `namespace/name` (after a success).
    pub fn reset(&self, namespace: &str, name: &str) {
        self.0.forget(namespace, name);
    }

    /// The last error of `namespace/name` was not recorded after all: the same error again is
    /// new (reported again); the count stays.
    pub fn unreport(&self, namespace: &str, name: &str) {
        self.0.update(namespace, name, |entry| {
            if let Some((_, last)) = entry {
                last.clear();
            }
        });
    }
}

/// Reports a failed database command: a `warn` log (when new, then every tenth attempt), and a
/// Warning event (`DatabaseStepFailed`) once per distinct failure of the cluster (`seen`
/// remembers the last one; a pass without failure resets it).
pub async fn report_database_failure<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    failure: &DatabaseFailure,
    seen: &Failures,
) {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let message = failure.to_string();
    let recorded = seen.record(&namespace, &name, &message);
    // Retried every second or two while a failover waits for it: at warn when new and then
    // every tenth attempt, at debug in between.
    if recorded.new_error || recorded.count.is_multiple_of(10) {
        tracing::warn!(
            member = %failure.pod,
            step = failure.command,
            kind = failure.kind,
            attempts = recorded.count,
            error = %failure.message,
            "database step failed; retrying in {}s",
            DATABASE_RETRY.as_secs()
        );
    } else {
        tracing::debug!(
            member = %failure.pod,
            step = failure.command,
            kind = failure.kind,
            attempts = recorded.count,
            error = %failure.message,
            "database step failed again"
        );
    }
    if recorded.new_error {
        let event = PlannedEvent {
            type_: EventType::Warning,
            reason: database_operator_core::EventReason::DatabaseStepFailed,
            message: format!("{namespace}/{name}: {message}; retrying"),
        };
        publish_all(io, &object_reference(cluster), std::slice::from_ref(&event)).await;
    }
}

/// Reports a failed reconcile and says when to retry.
///
/// A conflict is not reported at all and retried after `backoff.conflict`. Another error is
/// retried after `backoff.delay(failure.count)`; when it is a new error for this cluster (not the
/// same one again), it is published once as a Warning event (reason = its category) and written
/// once into the `Degraded` condition.
///
/// The `Degraded` condition is written with the status the reconcile started from, under its
/// resourceVersion ([`ClusterIo::patch_status`]): when the reconcile had written a newer status
/// first, that write is refused rather than turning the status back; the error is then
/// reported again at its next occurrence (`failures` forgets it), from the newer status.
pub async fn report_error<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    error: &Error,
    (failure, failures): (&Failure, &Failures),
    backoff: &Backoff,
    now: Timestamp,
) -> Duration {
    if error.is_conflict() {
        return backoff.conflict;
    }
    // A failover or switchover in flight waits for no backoff: its steps were refused by
    // transient faults (an API server answering 500 or 429 now and then), not by a spec to
    // fix, and every second of it is a second without a primary.
    let in_flight = database_operator_core::probing::operation_in_flight(cluster.status.as_ref());
    let bounded = |delay: Duration| {
        if in_flight {
            delay.min(IN_FLIGHT_RETRY)
        } else {
            delay
        }
    };
    if matches!(error, Error::Leadership { .. }) {
        // This replica may not lead: it writes nothing about the cluster (neither an event nor
        // the Degraded condition) and looks again soon (its Lease read may have met a
        // transient fault); losing the Lease stops its controllers.
        return LEADERSHIP_RETRY;
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
            if patch_error.is_conflict() {
                failures.unreport(
                    &cluster.namespace().unwrap_or_default(),
                    &cluster.name_any(),
                );
                tracing::debug!(error = %patch_error, "the status moved on; the error is recorded at its next occurrence");
                return backoff.conflict;
            }
            tracing::warn!(error = %patch_error, "could not record the error in the Degraded condition");
        }
    }
    bounded(backoff.delay(failure.count))
}

/// How soon a reconcile refused for unconfirmed leadership is tried again.
pub const LEADERSHIP_RETRY: Duration = Duration::from_secs(1);

/// The longest a failed reconcile waits while a failover or switchover is in flight.
pub const IN_FLIGHT_RETRY: Duration = Duration::from_secs(2);

mod passwords;
mod steps;
use steps::{CommandsDone, database_commands};
#[cfg(test)]
mod tests;
pub mod waves;
