//! One reconcile of one watched object: the span, the metrics, the log line and the error
//! handling around [`crate::reconcile`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use database_operator_api::DatabaseCluster;
use database_operator_core::{EventType, PlannedEvent};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::Instrument;

use super::context::{Context, cached_version, gather, versions_before};
use super::lane::{Entry, LANE_RECHECK};
use crate::echo::{ECHO_RECHECK, Write};
use crate::error::Error;
use crate::io::ClusterIo;
use crate::members::Members;
use crate::metrics::Outcome;
use crate::reconcile;
use crate::secrets::SecretSource;

/// How often at most the cluster gauge is recounted: counting walks every cluster in the cache,
/// which after every reconcile would make each reconcile cost O(clusters).
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

fn refresh_cluster_gauge<I, S, M>(ctx: &Context<I, S, M>) {
    {
        let mut last = ctx
            .gauge_refreshed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_some_and(|at| at.elapsed() < GAUGE_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
    }
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut last_backups = crate::metrics::LastBackups::new();
    for obj in ctx.stores.clusters.state() {
        if let Ok(c) = &obj.0
            && let Some(last) = c.status.as_ref().and_then(|s| s.last_backup.as_ref())
        {
            last_backups.insert(
                (obj.namespace().unwrap_or_default(), obj.name_any()),
                last.completed.0.as_second(),
            );
        }
        let phase = match &obj.0 {
            Ok(c) => c
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or("Unknown", |p| p.as_str()),
            Err(_) => "Invalid",
        };
        *counts
            .entry((obj.namespace().unwrap_or_default(), phase.to_owned()))
            .or_default() += 1;
    }
    ctx.metrics.set_clusters(ctx.scope.label(), &counts);
    ctx.metrics
        .set_last_backups(ctx.scope.label(), &last_backups);
}

fn invalid_reference(obj: &DeserializeGuard<DatabaseCluster>) -> ObjectReference {
    ObjectReference {
        api_version: Some(DatabaseCluster::api_version(&()).into_owned()),
        kind: Some(DatabaseCluster::kind(&()).into_owned()),
        name: obj.meta().name.clone(),
        namespace: obj.meta().namespace.clone(),
        uid: obj.meta().uid.clone(),
        resource_version: obj.meta().resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// One reconcile of one watched object: the span, the metrics, the log line and the error
/// handling around [`reconcile::reconcile`].
pub async fn reconcile_object<I: ClusterIo, S: SecretSource, M: Members>(
    obj: Arc<DeserializeGuard<DatabaseCluster>>,
    ctx: Arc<Context<I, S, M>>,
) -> Result<Action, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let span = tracing::info_span!("reconcile", namespace = %namespace, name = %name);
    async move {
        // Decisions are made from the caches only, so not before every watch has its first
        // complete list: the cluster watch can deliver a cluster before the pod watch has
        // listed its pods, and a missing pod or object would look like a real absence. After
        // a restart that flipped conditions, emitted events and re-applied CronJobs for some
        // clusters, only to flip back on the next pass (the restart phase of the 1,000-cluster
        // benchmark). Synced once; afterwards this returns at once.
        ctx.synced.wait().await;
        let _worker = ctx.metrics.worker();
        let started = Instant::now();
        let cluster = match &obj.0 {
            Ok(cluster) => cluster,
            Err(invalid) => {
                report_invalid(&ctx, &obj, &invalid.error).await;
                ctx.metrics.reconciled(&namespace, Outcome::Error, started.elapsed());
                return Ok(Action::await_change());
            }
        };
        // A write of an earlier pass that the caches do not show yet would be planned again
        // from the old state: wait for its watch event, which queues this cluster anyway.
        if ctx.echoes.awaiting(
            &namespace,
            &name,
            |target| cached_version(&ctx.stores, cluster, target),
            Instant::now(),
        ) {
            ctx.metrics.deferred();
            tracing::debug!("deferred: the caches do not show this operator's last writes yet");
            return Ok(Action::requeue(ECHO_RECHECK));
        }
        let before = versions_before(&ctx.stores, cluster);
        let result = match gather(&ctx, cluster).await {
            Ok(observed) => {
                let plan = database_operator_core::plan(&observed);
                let _place = match ctx.lane.enter(plan.writes_objects()).await {
                    Entry::Full => {
                        ctx.metrics.deferred();
                        tracing::debug!("deferred: the write lane and its queue are full");
                        return Ok(Action::requeue(LANE_RECHECK));
                    }
                    entry => entry,
                };
                reconcile::carry_out(&ctx.io, &ctx.members, &observed, plan).await
            }
            Err(e) => Err(e),
        };
        let action = match result {
            Ok(done) => {
                ctx.failures.reset(&namespace, &name);
                match &done.database_failure {
                    Some(failure) => {
                        reconcile::report_database_failure(&ctx.io, cluster, failure, &ctx.database_failures).await;
                    }
                    None => ctx.database_failures.reset(&namespace, &name),
                }
                if cluster.metadata.deletion_timestamp.is_some() {
                    ctx.password_outcomes.forget(&namespace, &name);
                } else if let Some(outcome) = done.password_outcome {
                    ctx.password_outcomes.set(&namespace, &name, outcome);
                }
                ctx.known_matches.set(&namespace, &name, done.known_matches);
                // Named for the log line only when something was written.
                let wrote = if done.writes > 0 {
                    crate::echo::describe(done.written.iter().map(|(t, _)| t))
                } else {
                    String::new()
                };
                if cluster.metadata.deletion_timestamp.is_some() {
                    // Its last passes: nothing is left to wait for once the finalizer goes.
                    ctx.echoes.forget(&namespace, &name);
                } else {
                    let writes: Vec<Write> = done
                        .written
                        .into_iter()
                        .map(|(target, after)| Write {
                            before: before.get(&target).cloned().flatten(),
                            target,
                            after,
                        })
                        .collect();
                    ctx.echoes.record(&namespace, &name, &writes, Instant::now());
                }
                ctx.metrics.reconciled(&namespace, Outcome::Success, started.elapsed());
                // What changed at info; a steady pass that wrote nothing at debug.
                if done.writes > 0 {
                    tracing::info!(
                        writes = done.writes,
                        wrote = %wrote,
                        requeue_after_secs = done.requeue_after.map(|d| d.as_secs()),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "reconciled"
                    );
                } else {
                    tracing::debug!(
                        writes = 0,
                        requeue_after_secs = done.requeue_after.map(|d| d.as_secs()),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "reconciled"
                    );
                }
                done.requeue_after.map_or_else(Action::await_change, Action::requeue)
            }
            Err(error) => {
                ctx.metrics.error(error.category());
                let failure = ctx.failures.record(&namespace, &name, &error.to_string());
                let delay = reconcile::report_error(&ctx.io, cluster, &error, (&failure, &ctx.failures), &ctx.backoff, Timestamp::now()).await;
                if error.is_conflict() {
                    ctx.metrics.reconciled(&namespace, Outcome::Conflict, started.elapsed());
                    tracing::debug!(%error, retry_in_ms = delay.as_millis() as u64, "conflict; retrying");
                } else {
                    ctx.metrics.reconciled(&namespace, Outcome::Error, started.elapsed());
                    tracing::warn!(
                        %error,
                        category = error.category().as_str(),
                        failures = failure.count,
                        retry_in_secs = delay.as_secs(),
                        "reconcile failed"
                    );
                }
                Action::requeue(delay)
            }
        };
        refresh_cluster_gauge(&ctx);
        Ok(action)
    }
    .instrument(span)
    .await
}

async fn report_invalid<I: ClusterIo, S, M>(
    ctx: &Context<I, S, M>,
    obj: &DeserializeGuard<DatabaseCluster>,
    message: &str,
) {
    let id = (obj.namespace().unwrap_or_default(), obj.name_any());
    let version = obj.resource_version().unwrap_or_default();
    {
        let mut reported = ctx
            .invalid_reported
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if reported.get(&id) == Some(&version) {
            return;
        }
        reported.insert(id.clone(), version);
    }
    let error = Error::InvalidObject {
        namespace: id.0,
        name: id.1,
        message: message.to_owned(),
    };
    ctx.metrics.error(error.category());
    tracing::warn!(%error, "cannot read DatabaseCluster; waiting for it to change");
    let event = PlannedEvent {
        type_: EventType::Warning,
        reason: error.category().event_reason(),
        message: format!("{error}. Fix the object; it is looked at again when it changes."),
    };
    if let Err(e) = ctx.io.publish(&invalid_reference(obj), &event).await {
        tracing::warn!(error = %e, "could not publish event");
    }
}

pub(super) fn error_policy<I, S, M>(
    _obj: Arc<DeserializeGuard<DatabaseCluster>>,
    error: &Error,
    ctx: Arc<Context<I, S, M>>,
) -> Action {
    // reconcile_object handles its errors itself and returns Ok; this only runs if that changes.
    tracing::warn!(%error, "reconcile failed");
    Action::requeue(ctx.backoff.initial)
}
