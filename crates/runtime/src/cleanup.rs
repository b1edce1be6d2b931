//! Removal of a cluster's stored backups when it is deleted with
//! `backup.deletionPolicy: Delete`.
//!
//! The operator itself holds no S3 credentials and no S3 client: it runs a one-off Job
//! `<name>-cleanup` from the engine's backup image (which has the AWS CLI the backup CronJob
//! uses), with the same bucket, endpoint, region and credentials (by `secretKeyRef`) as the
//! CronJob. The Job removes only objects under the cluster's own prefix `<namespace>/<name>/`
//! whose names end in `.sql.gz` (the shape `backup.sh` writes), so nothing else in the bucket is
//! touched. The finalizer is removed once the Job has succeeded; a failed Job is reported (event
//! and condition) and run again after it expires. Rendering is pure; [`crate::io::KubeIo`]
//! creates and reads the Job.

use std::collections::BTreeMap;

use database_operator_api::{BackupDeletionPolicy, DatabaseCluster};
use database_operator_core::OperatorConfig;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodSecurityContext,
    PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, SecretKeySelector,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::labels;

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

/// Name of the cleanup Job of cluster `name` (at most 60 characters for a 52-character name).
pub fn job_name(name: &str) -> String {
    format!("{name}-cleanup")
}

/// Key prefix of the cluster's backups, as the backup CronJob writes them.
pub fn s3_prefix(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}/")
}

/// The cleanup Job for `cluster`, or `None` when its backups are to be kept (no backups
/// configured, or `deletionPolicy: Retain`).
pub fn render_job(cluster: &DatabaseCluster, config: &OperatorConfig) -> Option<Job> {
    let backup = cluster.spec.backup.as_ref()?;
    if backup.deletion_policy != BackupDeletionPolicy::Delete {
        return None;
    }
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let image = config.backup_image(cluster.spec.engine).to_owned();
    let mut env = vec![
        literal("S3_BUCKET", &backup.s3_bucket),
        literal("S3_PREFIX", &s3_prefix(&namespace, &name)),
        literal("HOME", "/tmp"),
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
    let job_labels = BTreeMap::from([
        (labels::MANAGED_BY.to_owned(), labels::OPERATOR.to_owned()),
        (labels::PART_OF.to_owned(), labels::OPERATOR.to_owned()),
        (labels::INSTANCE.to_owned(), name.clone()),
        (labels::COMPONENT.to_owned(), "backup-cleanup".to_owned()),
        (labels::CLUSTER.to_owned(), name.clone()),
        (
            labels::CLUSTER_UID.to_owned(),
            cluster.uid().unwrap_or_default(),
        ),
    ]);
    let container = Container {
        name: "cleanup".to_owned(),
        image: Some(image),
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
    Some(Job {
        metadata: ObjectMeta {
            name: Some(job_name(&name)),
            namespace: Some(namespace),
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
                    restart_policy: Some("Never".to_owned()),
                    automount_service_account_token: Some(false),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65534),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "tmp".to_owned(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn secret(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// Where an existing cleanup Job stands.
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
    if job.labels().get(labels::CLUSTER_UID).map(String::as_str) != Some(uid) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use database_operator_api::{
        BackupSpec, DatabaseClusterSpec, Engine, SecretKeySelector as Sel, StorageSpec,
    };
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn cluster(policy: BackupDeletionPolicy) -> DatabaseCluster {
        let mut c = DatabaseCluster::new(
            "orders",
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
                    credentials_secret_ref: Some(database_operator_api::BackupCredentialsRef {
                        name: "s3".into(),
                        access_key_id_key: "id".into(),
                        secret_access_key_key: "key".into(),
                    }),
                    deletion_policy: policy,
                }),
                password_secret_ref: Sel {
                    name: "pw".into(),
                    key: "password".into(),
                },
            },
        );
        c.metadata.namespace = Some("shop".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn retain_and_no_backup_render_nothing() {
        assert!(
            render_job(
                &cluster(BackupDeletionPolicy::Retain),
                &OperatorConfig::default()
            )
            .is_none()
        );
        let mut c = cluster(BackupDeletionPolicy::Delete);
        c.spec.backup = None;
        assert!(render_job(&c, &OperatorConfig::default()).is_none());
    }

    #[test]
    fn delete_renders_a_job_limited_to_the_cluster_prefix() {
        let config = OperatorConfig::default();
        let job = render_job(&cluster(BackupDeletionPolicy::Delete), &config).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("orders-cleanup"));
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(config.postgresql_backup_image.as_str())
        );
        let env: BTreeMap<_, _> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e))
            .collect();
        assert_eq!(env["S3_PREFIX"].value.as_deref(), Some("shop/orders/"));
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
        assert!(SCRIPT.contains("--include '*.sql.gz'"));
        assert_eq!(job.labels()[labels::CLUSTER_UID], "uid-1");
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
    }

    #[test]
    fn job_states() {
        let job = render_job(
            &cluster(BackupDeletionPolicy::Delete),
            &OperatorConfig::default(),
        )
        .unwrap();
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
