//! CronJob `<name>-backup`: scheduled logical backups to an S3-compatible bucket.
//!
//! Decides when backups run (the spec's cron schedule in UTC, never two at once), where the dump
//! comes from (the read-only Service when a replica is ready, so backups do not load the
//! primary; else the read-write Service), where it goes (bucket, endpoint, region, credentials
//! by `secretKeyRef` or the pod's own cloud identity), and how many are kept (`retention`).
//! The job runs `backup.sh` from the ConfigMap.

use std::collections::BTreeMap;

use database_operator_api::BackupSpec;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecretKeySelector, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::labels::{self, COMPONENT_BACKUP};
use super::{CONFIG_MOUNT_PATH, RenderContext, backup_pod, scripts, statefulset};

/// Successful and failed jobs kept for inspection.
pub const HISTORY_LIMIT: i32 = 3;
/// A start missed by more than this (controller down, cluster busy) is skipped, not run late.
pub const STARTING_DEADLINE_SECONDS: i64 = 3600;
/// A backup running longer than this is stopped, so a hung dump cannot block every later backup
/// (the schedule forbids concurrent runs).
pub const ACTIVE_DEADLINE_SECONDS: i64 = 6 * 3600;
/// Retries of a failed backup before the job fails.
pub const BACKOFF_LIMIT: i32 = 2;

/// Where the backup job dumps from: `<name>-replicas` when at least one replica is ready,
/// else `<name>` (the primary).
pub fn backup_host(cluster: &RenderContext<'_>, ready_replica_members: usize) -> String {
    if ready_replica_members > 0 {
        cluster.replicas_host()
    } else {
        cluster.primary_host()
    }
}

/// Key prefix of this cluster's backups in the bucket: `<namespace>/<name>/`
/// ([`crate::backup::cluster_prefix`]).
pub fn s3_prefix(cluster: &RenderContext<'_>) -> String {
    crate::backup::cluster_prefix(cluster.namespace, cluster.name)
}

/// The backup CronJob for `backup`, dumping from `host`.
pub fn render(cluster: &RenderContext<'_>, backup: &BackupSpec, host: &str) -> CronJob {
    let mut env = vec![
        literal("ENGINE", cluster.engine.as_str()),
        literal("BACKUP_HOST", host),
        statefulset::password_env(cluster, "DB_PASSWORD"),
        literal("S3_BUCKET", &backup.s3_bucket),
        literal("S3_PREFIX", &s3_prefix(cluster)),
        literal("RETENTION", &backup.retention.to_string()),
    ];
    if let Some(endpoint) = &backup.endpoint {
        env.push(literal("S3_ENDPOINT", endpoint));
    }
    if let Some(region) = &backup.region {
        env.push(literal("AWS_DEFAULT_REGION", region));
    }
    if let Some(credentials) = &backup.credentials_secret_ref {
        env.push(secret(
            "AWS_ACCESS_KEY_ID",
            &credentials.name,
            &credentials.access_key_id_key,
        ));
        env.push(secret(
            "AWS_SECRET_ACCESS_KEY",
            &credentials.name,
            &credentials.secret_access_key_key,
        ));
    }
    let uid = cluster.engine_spec().uid;
    let pod = PodSpec {
        containers: vec![Container {
            name: "backup".to_owned(),
            image: Some(cluster.backup_image()),
            image_pull_policy: Some("IfNotPresent".to_owned()),
            command: Some(vec![
                "/bin/sh".to_owned(),
                [CONFIG_MOUNT_PATH, "/", scripts::BACKUP_KEY].concat(),
            ]),
            env: Some(env),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity("100m".to_owned())),
                    ("memory".to_owned(), Quantity("256Mi".to_owned())),
                ])),
                limits: Some(BTreeMap::from([(
                    "memory".to_owned(),
                    Quantity("512Mi".to_owned()),
                )])),
                claims: None,
            }),
            security_context: Some(statefulset::container_security_context()),
            volume_mounts: Some(vec![k8s_openapi::api::core::v1::VolumeMount {
                name: "config".to_owned(),
                mount_path: CONFIG_MOUNT_PATH.to_owned(),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Container::default()
        }],
        volumes: Some(vec![Volume {
            name: "config".to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: cluster.config_map_name(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }]),
        // As the database server's user and group.
        ..backup_pod(cluster, uid, Some(uid))
    };
    CronJob {
        metadata: cluster.metadata(cluster.backup_name(), COMPONENT_BACKUP),
        spec: CronJobSpec {
            schedule: backup.schedule.clone(),
            time_zone: Some("Etc/UTC".to_owned()),
            concurrency_policy: Some("Forbid".to_owned()),
            starting_deadline_seconds: Some(STARTING_DEADLINE_SECONDS),
            successful_jobs_history_limit: Some(HISTORY_LIMIT),
            failed_jobs_history_limit: Some(HISTORY_LIMIT),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels::labels(cluster, COMPONENT_BACKUP)),
                    ..ObjectMeta::default()
                }),
                spec: Some(JobSpec {
                    backoff_limit: Some(BACKOFF_LIMIT),
                    active_deadline_seconds: Some(ACTIVE_DEADLINE_SECONDS),
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(labels::labels(cluster, COMPONENT_BACKUP)),
                            ..ObjectMeta::default()
                        }),
                        spec: Some(pod),
                    },
                    ..JobSpec::default()
                }),
            },
            ..CronJobSpec::default()
        },
        status: None,
    }
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

fn secret(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}
