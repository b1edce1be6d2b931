//! Job `<name>-cleanup`: removal of a deleted cluster's stored backups
//! (`backup.deletionPolicy: Delete`).
//!
//! Decides what the one-off cleanup runs: the engine's backup image (which has the AWS CLI the
//! backup CronJob uses) with the CronJob's own bucket, prefix, endpoint, region and credentials
//! (by `secretKeyRef`; taken from the rendered CronJob, so both always name the same place),
//! removing only objects under the cluster's prefix `<namespace>/<name>/` whose names end in
//! `.sql.gz` (the shape `backup.sh` writes): nothing else in the bucket is touched. The Job has
//! no owner reference (its owner is being deleted); a label with the cluster's uid tells a
//! leftover of an earlier cluster of the same name apart.

use std::collections::BTreeMap;

use database_operator_api::BackupSpec;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{RenderContext, backup_pod, cron_job, labels};

/// Seconds a finished cleanup Job (and its pods' logs) is kept before Kubernetes removes it.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 300;
/// A cleanup running longer than this is stopped and reported as failed.
pub const ACTIVE_DEADLINE_SECONDS: i64 = 3600;

/// The script the cleanup container runs (arguments come from the environment).
pub const SCRIPT: &str = r#"set -eu
if [ -n "${S3_ENDPOINT:-}" ]; then set -- --endpoint-url "$S3_ENDPOINT"; else set --; fi
echo "removing s3://${S3_BUCKET}/${S3_PREFIX}*.sql.gz" >&2
aws "$@" s3 rm "s3://${S3_BUCKET}/${S3_PREFIX}" --recursive --exclude '*' --include '*.sql.gz'
"#;

/// The environment variables of the backup CronJob that say where backups are and how to reach
/// them.
const LOCATION_ENV: [&str; 6] = [
    "S3_BUCKET",
    "S3_PREFIX",
    "S3_ENDPOINT",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
];

/// Name of the cleanup Job (at most 60 characters for a 52-character cluster name).
pub fn name(cluster: &str) -> String {
    [cluster, "-cleanup"].concat()
}

/// The cleanup Job removing the backups `backup` describes.
pub fn render(cluster: &RenderContext<'_>, backup: &BackupSpec) -> Job {
    let mut env: Vec<EnvVar> = location_env(cluster, backup);
    // After bucket and prefix, as the Job always had it: the AWS CLI writes under $HOME.
    env.insert(
        2.min(env.len()),
        EnvVar {
            name: "HOME".to_owned(),
            value: Some("/tmp".to_owned()),
            value_from: None,
        },
    );
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
        image: Some(cluster.backup_image()),
        command: Some(vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            SCRIPT.to_owned(),
        ]),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("50m".to_owned())),
                ("memory".to_owned(), Quantity("128Mi".to_owned())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("256Mi".to_owned()),
            )])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "tmp".to_owned(),
            mount_path: "/tmp".to_owned(),
            ..VolumeMount::default()
        }]),
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
                    volumes: Some(vec![Volume {
                        name: "tmp".to_owned(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Volume::default()
                    }]),
                    // Where the backup pods may go, like the backup CronJob's; as nobody.
                    ..backup_pod(cluster, 65534, None)
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// Bucket, prefix, endpoint, region and credentials exactly as the backup CronJob has them.
fn location_env(cluster: &RenderContext<'_>, backup: &BackupSpec) -> Vec<EnvVar> {
    let cron_job = cron_job::render(cluster, backup, &cluster.primary_host());
    cron_job
        .spec
        .job_template
        .spec
        .and_then(|s| s.template.spec)
        .into_iter()
        .flat_map(|pod| pod.containers)
        .flat_map(|c| c.env.unwrap_or_default())
        .filter(|e| LOCATION_ENV.contains(&e.name.as_str()))
        .collect()
}
