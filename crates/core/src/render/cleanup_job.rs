//! Job `<name>-cleanup`: removal of a deleted cluster's stored backups
//! (`backup.deletionPolicy: Delete`).
//!
//! Decides what the one-off cleanup runs: `database-operator backup delete-prefix` in the
//! operator's own image, with the backup CronJob's own cluster, bucket, endpoint, region and
//! credentials (by `secretKeyRef`; the same [`cron_job::location_env`], so both always name the
//! same place). It removes the objects under the cluster's prefix `<namespace>/<name>/`
//! (manifests first, so an interrupted run leaves no backup that still counts) and nothing else
//! in the bucket. The Job has no owner reference (its owner is being deleted); a label with the
//! cluster's uid tells a leftover of an earlier cluster of the same name apart.

use std::collections::BTreeMap;

use database_operator_api::BackupSpec;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{OPERATOR_BINARY, RenderContext, backup_pod, cron_job, labels};

/// Seconds a finished cleanup Job (and its pods' logs) is kept before Kubernetes removes it.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 300;
/// A cleanup running longer than this is stopped and reported as failed.
pub const ACTIVE_DEADLINE_SECONDS: i64 = 3600;
/// The user the cleanup runs as: the operator image's own non-root user.
pub const CLEANUP_USER: i64 = 65532;

/// Name of the cleanup Job (at most 60 characters for a 52-character cluster name).
pub fn name(cluster: &str) -> String {
    [cluster, "-cleanup"].concat()
}

/// The cleanup Job removing the backups `backup` describes.
pub fn render(cluster: &RenderContext<'_>, backup: &BackupSpec) -> Job {
    let job_labels = BTreeMap::from([
        (labels::MANAGED_BY.to_owned(), labels::OPERATOR.to_owned()),
        (labels::PART_OF.to_owned(), labels::OPERATOR.to_owned()),
        (labels::INSTANCE.to_owned(), cluster.name.to_owned()),
        (
            labels::COMPONENT.to_owned(),
            labels::COMPONENT_BACKUP_CLEANUP.to_owned(),
        ),
        (labels::CLUSTER.to_owned(), cluster.name.to_owned()),
        (labels::CLUSTER_UID.to_owned(), cluster.uid.to_owned()),
    ]);
    let container = Container {
        name: "cleanup".to_owned(),
        image: Some(cluster.operator_image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![
            OPERATOR_BINARY.to_owned(),
            "backup".to_owned(),
            "delete-prefix".to_owned(),
        ]),
        env: Some(cron_job::location_env(cluster, backup)),
        resources: Some(cron_job::resources("50m", "64Mi", "128Mi")),
        security_context: Some(cron_job::security_context()),
        ..Container::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(name(cluster.name)),
            namespace: Some(cluster.namespace.to_owned()),
            labels: Some(job_labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            active_deadline_seconds: Some(ACTIVE_DEADLINE_SECONDS),
            ttl_seconds_after_finished: Some(TTL_SECONDS_AFTER_FINISHED),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(job_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    // Where the backup pods may go, like the backup CronJob's; as the operator
                    // image's own non-root user.
                    ..backup_pod(cluster, CLEANUP_USER, Some(CLEANUP_USER))
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}
