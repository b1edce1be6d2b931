//! The finalizer: what happens between `kubectl delete` and the cluster being gone.
//!
//! Decides that a live cluster gets the operator's finalizer before anything is written, and
//! what a cluster being deleted still needs while the finalizer holds it: the `Deleting` status
//! and events, then its backups (`deletionPolicy: Retain` keeps them and says so in an event;
//! `Delete` creates the cleanup Job ([`crate::render::cleanup_job`]), waits for it, removes a
//! leftover Job of an earlier cluster of the same name first, and reports a failed one), then
//! the finalizer's removal. Owned objects follow by owner-reference garbage collection;
//! PersistentVolumeClaims are never deleted here, and so the operator Secret of generated
//! credentials (the only passwords the retained data knows) loses its owner reference to the
//! cluster ([`crate::credentials::SecretChange::Release`]) and stays for a re-created cluster. A deleted cluster without the finalizer is not
//! the operator's any more: nothing is planned for it.

use std::time::Duration;

use database_operator_api::{
    BackupDeletionPolicy, DatabaseCluster, DatabaseClusterStatus, FINALIZER,
};
use k8s_openapi::api::batch::v1::Job;

use crate::credentials::{OperatorSecretState, SecretChange, operator_secret_name};
use crate::render::{RenderContext, cleanup_job, cron_job, labels};
use crate::{CleanupTask, FinalizerChange, Observed, Plan, PlannedEvent, events};

/// How often a running backup cleanup is looked at.
pub const CLEANUP_POLL: Duration = Duration::from_secs(10);

/// Whether the operator's finalizer is on `cluster`.
pub fn has_finalizer(cluster: &DatabaseCluster) -> bool {
    cluster
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// The finalizer change of a live cluster: add it when it is missing.
pub(crate) fn on_live(cluster: &DatabaseCluster) -> FinalizerChange {
    if has_finalizer(cluster) {
        FinalizerChange::Keep
    } else {
        FinalizerChange::Add
    }
}

/// The change the operator Secret of a deleted cluster needs: its owner reference to the
/// cluster goes, because the cluster's PersistentVolumeClaims are always retained (the
/// StatefulSet's `persistentVolumeClaimRetentionPolicy` is `Retain`) and their data only knows
/// the passwords in this Secret; a cluster re-created under the same name adopts it.
fn release_operator_secret(
    ctx: &RenderContext<'_>,
    state: &OperatorSecretState,
) -> Option<SecretChange> {
    match state {
        OperatorSecretState::Present { owner_uids }
            if !ctx.uid.is_empty() && owner_uids.iter().any(|u| u == ctx.uid) =>
        {
            Some(SecretChange::Release {
                name: operator_secret_name(ctx.name),
                owner_uid: ctx.uid.to_owned(),
            })
        }
        _ => None,
    }
}

/// Where an observed cleanup Job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupJobState {
    /// No Job yet.
    Absent,
    /// A Job of an earlier cluster with the same name (another uid): to be removed first.
    Stale,
    /// Running (or pending).
    Running,
    /// Finished successfully.
    Succeeded,
    /// Failed, with the Job's reason.
    Failed(String),
}

/// Reads the state of `job` as a cleanup of the cluster with `uid`.
pub fn job_state(job: Option<&Job>, uid: &str) -> CleanupJobState {
    let Some(job) = job else {
        return CleanupJobState::Absent;
    };
    let job_uid = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::CLUSTER_UID));
    if job_uid.map(String::as_str) != Some(uid) {
        return CleanupJobState::Stale;
    }
    let Some(status) = &job.status else {
        return CleanupJobState::Running;
    };
    if status.succeeded.unwrap_or(0) > 0 {
        return CleanupJobState::Succeeded;
    }
    let failed = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True");
    match failed {
        Some(c) => CleanupJobState::Failed(c.reason.clone().unwrap_or_else(|| "Failed".to_owned())),
        None => CleanupJobState::Running,
    }
}

/// The plan of a cluster being deleted: `status` and `events` as assessed (phase Deleting),
/// then the cleanup of its backups and the finalizer.
pub(crate) fn plan(
    ctx: &RenderContext<'_>,
    observed: &Observed,
    status: DatabaseClusterStatus,
    status_changed: bool,
    mut events: Vec<PlannedEvent>,
) -> Plan {
    let mut plan = Plan::quiet(status, FinalizerChange::Keep);
    if !has_finalizer(&observed.cluster) {
        return plan;
    }
    plan.status_changed = status_changed;
    plan.secret_changes
        .extend(release_operator_secret(ctx, &observed.operator_secret));
    let mut finished = true;
    if let Some(backup) = &ctx.spec.backup {
        let prefix = cron_job::s3_prefix(ctx);
        match backup.deletion_policy {
            BackupDeletionPolicy::Retain => events.push(events::backups_after_deletion(
                ctx,
                &backup.s3_bucket,
                &prefix,
                false,
            )),
            BackupDeletionPolicy::Delete => {
                finished = false;
                match job_state(observed.cleanup_job.as_ref(), ctx.uid) {
                    CleanupJobState::Absent => {
                        plan.cleanup
                            .push(CleanupTask::CreateJob(Box::new(cleanup_job::render(
                                ctx, backup,
                            ))))
                    }
                    CleanupJobState::Stale => plan
                        .cleanup
                        .push(CleanupTask::DeleteJob(cleanup_job::name(ctx.name))),
                    CleanupJobState::Running => {}
                    // A finished Job is left to its `ttlSecondsAfterFinished`: a failed one keeps
                    // its pods (and logs) until then, and the retry after it is gone starts a
                    // fresh run.
                    CleanupJobState::Succeeded => {
                        finished = true;
                        events.push(events::backups_after_deletion(
                            ctx,
                            &backup.s3_bucket,
                            &prefix,
                            true,
                        ));
                    }
                    CleanupJobState::Failed(reason) => {
                        plan.cleanup_failure = Some(format!(
                            "backup cleanup Job {} failed ({reason}); see the logs of its pods; a new run starts once it has been removed",
                            cleanup_job::name(ctx.name)
                        ));
                    }
                }
            }
        }
    }
    plan.events = events;
    if finished {
        plan.finalizer = FinalizerChange::Remove;
    } else if plan.cleanup_failure.is_none() {
        plan.requeue_after = Some(CLEANUP_POLL);
    }
    plan
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use database_operator_api::{
        BackupCredentialsRef, BackupSpec, DatabaseClusterSpec, Engine, SecretKeySelector,
        StorageSpec,
    };
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::OperatorConfig;

    fn spec(policy: BackupDeletionPolicy) -> DatabaseClusterSpec {
        DatabaseClusterSpec {
            engine: Engine::Postgresql,
            version: "16.4".into(),
            replicas: 3,
            storage: StorageSpec {
                size: Quantity("10Gi".into()),
                storage_class_name: None,
            },
            resources: None,
            scheduling: None,
            backup: Some(BackupSpec {
                schedule: "0 2 * * *".into(),
                retention: 7,
                s3_bucket: "orders-backups".into(),
                endpoint: Some("https://minio.backup.svc:9000".into()),
                region: None,
                credentials_secret_ref: Some(BackupCredentialsRef {
                    name: "s3".into(),
                    access_key_id_key: "id".into(),
                    secret_access_key_key: "key".into(),
                }),
                deletion_policy: policy,
                verify: None,
                archive: None,
                method: None,
            }),
            password_secret_ref: SecretKeySelector {
                name: "pw".into(),
                key: "password".into(),
            },
            failover: None,
            replication: None,
            password_rotation: None,
            upgrade: None,
            bootstrap: None,
            network_policy: None,
            tls: None,
        }
    }

    fn job(spec: &DatabaseClusterSpec, config: &OperatorConfig) -> Job {
        let ctx = RenderContext {
            tls_blocked: false,
            name: "orders",
            namespace: "shop",
            uid: "uid-1",
            engine: spec.engine,
            version: &spec.version,
            spec,
            config,
        };
        cleanup_job::render(&ctx, spec.backup.as_ref().unwrap())
    }

    #[test]
    fn the_cleanup_job_is_limited_to_the_cluster_prefix_and_uses_the_backup_location() {
        let config = OperatorConfig::default();
        let job = job(&spec(BackupDeletionPolicy::Delete), &config);
        assert_eq!(job.metadata.name.as_deref(), Some("orders-cleanup"));
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some(config.operator_image.as_str()));
        assert_eq!(
            c.command.as_deref().unwrap(),
            [crate::render::OPERATOR_BINARY, "backup", "delete-prefix"]
        );
        let names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "CLUSTER_NAMESPACE",
                "CLUSTER_NAME",
                "S3_BUCKET",
                "S3_ENDPOINT",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY"
            ]
        );
        let env: BTreeMap<_, _> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e))
            .collect();
        // The prefix `shop/orders/` follows from the cluster's namespace and name.
        assert_eq!(env["CLUSTER_NAMESPACE"].value.as_deref(), Some("shop"));
        assert_eq!(env["CLUSTER_NAME"].value.as_deref(), Some("orders"));
        assert_eq!(env["S3_BUCKET"].value.as_deref(), Some("orders-backups"));
        assert_eq!(
            env["S3_ENDPOINT"].value.as_deref(),
            Some("https://minio.backup.svc:9000")
        );
        // Credentials by reference only.
        let key = env["AWS_SECRET_ACCESS_KEY"]
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!((key.name.as_str(), key.key.as_str()), ("s3", "key"));
        assert!(env["AWS_SECRET_ACCESS_KEY"].value.is_none());
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()[labels::CLUSTER_UID],
            "uid-1"
        );
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
    }

    #[test]
    fn job_states() {
        let job = job(
            &spec(BackupDeletionPolicy::Delete),
            &OperatorConfig::default(),
        );
        assert_eq!(job_state(None, "uid-1"), CleanupJobState::Absent);
        assert_eq!(job_state(Some(&job), "uid-2"), CleanupJobState::Stale);
        assert_eq!(job_state(Some(&job), "uid-1"), CleanupJobState::Running);
        let mut done = job.clone();
        done.status = Some(JobStatus {
            succeeded: Some(1),
            ..JobStatus::default()
        });
        assert_eq!(job_state(Some(&done), "uid-1"), CleanupJobState::Succeeded);
        let mut failed = job;
        failed.status = Some(JobStatus {
            failed: Some(3),
            conditions: Some(vec![JobCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("BackoffLimitExceeded".into()),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        assert_eq!(
            job_state(Some(&failed), "uid-1"),
            CleanupJobState::Failed("BackoffLimitExceeded".into())
        );
    }
}
