//! CronJob `<name>-backup`: scheduled logical backups to an S3-compatible bucket.
//!
//! Decides when backups run (the spec's cron schedule in UTC, never two at once), where the dump
//! comes from (the read-only Service when a replica is ready, so backups do not load the
//! primary; else the read-write Service), as whom (the operator's admin account from the
//! Secret `<name>-operator`, so a change of the user's password never breaks a backup), where
//! it goes (bucket, endpoint, region, credentials by `secretKeyRef` or the pod's own cloud
//! identity), and how many are kept (`retention`).
//!
//! The pod runs the operator's own binary inside the engine's image, which has the dump tool of
//! the cluster's version: an init container in the operator image copies `database-operator`
//! into a shared `emptyDir` (`database-operator copy-binary`), then the backup container, in the
//! database image of `spec.version`, runs `database-operator backup run` (dump, compress,
//! multipart upload, manifest, retention). Everything it needs comes from its environment.

use std::collections::BTreeMap;

use database_operator_api::{BackupMethod, BackupSpec, BackupVerifySpec};
use k8s_openapi::api::batch::v1::{
    CronJob, CronJobSpec, JobSpec, JobTemplateSpec, PodFailurePolicy,
    PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::labels::{self, COMPONENT_BACKUP, COMPONENT_BACKUP_VERIFY};
use super::{OPERATOR_BIN_DIR, OPERATOR_BINARY, RenderContext, backup_pod, statefulset};
use crate::backup::failure::BackupFailure;
use crate::credentials;
use crate::owned::VERIFY_CRON_JOB_SUFFIX;

/// Successful and failed jobs kept for inspection.
pub const HISTORY_LIMIT: i32 = 3;
/// A start missed by more than this (controller down, cluster busy) is skipped, not run late.
pub const STARTING_DEADLINE_SECONDS: i64 = 3600;
/// A backup running longer than this is stopped, so a hung dump cannot block every later backup
/// (the schedule forbids concurrent runs).
pub const ACTIVE_DEADLINE_SECONDS: i64 = 6 * 3600;
/// Retries of a failed backup before the job fails.
pub const BACKOFF_LIMIT: i32 = 2;
/// Name of the backup pod's init container (copies the operator binary).
pub const INSTALL_CONTAINER: &str = "install-operator";
/// Name of the backup container.
pub const BACKUP_CONTAINER: &str = "backup";
/// Name of the restore drill's container.
pub const VERIFY_CONTAINER: &str = "verify";
/// Where the drill downloads the backup and runs its scratch server (an `emptyDir` on the
/// node's disk: it holds one copy of the database).
pub const SCRATCH_DIR: &str = "/scratch";
/// The `emptyDir` volume at [`SCRATCH_DIR`].
const SCRATCH_VOLUME: &str = "scratch";
/// The `emptyDir` volume holding the copied binary.
pub const BIN_VOLUME: &str = "operator-bin";
/// The in-memory `emptyDir` at `/tmp` (the password file the dump tool reads).
const TMP_VOLUME: &str = "tmp";

/// Where a backup dumps from, in order of preference, comma-separated: the replicas' Service
/// `<name>-replicas` first when the cluster has replicas (a backup does not load the primary),
/// then the primary's `<name>`. The backup binary dumps from the first that answers, so the
/// CronJob is written once and not again each time a replica becomes ready or goes away.
pub fn backup_hosts(cluster: &RenderContext<'_>) -> String {
    let physical = cluster
        .spec
        .backup
        .as_ref()
        .is_some_and(|b| b.method() == BackupMethod::Physical);
    // A physical backup from the primary only: there the server ends the backup once the WAL
    // it needs is archived, so a stored base backup is always restorable; a standby cannot wait
    // for the primary's archiver.
    if cluster.spec.replicas > 1 && !physical {
        [cluster.replicas_host(), cluster.primary_host()].join(",")
    } else {
        cluster.primary_host()
    }
}

/// Key prefix of this cluster's backups in the bucket: `<namespace>/<name>/`
/// ([`crate::backup::cluster_prefix`]).
pub fn s3_prefix(cluster: &RenderContext<'_>) -> String {
    crate::backup::cluster_prefix(cluster.namespace, cluster.name)
}

/// Path of the copied binary in the backup container.
pub fn copied_binary() -> String {
    [OPERATOR_BIN_DIR, "/database-operator"].concat()
}

/// The environment that says which cluster's backups and where they are: the cluster, bucket,
/// endpoint, region and S3 credentials (by `secretKeyRef`, or none for the pod's own cloud
/// identity). The backup CronJob and the cleanup Job both use exactly this.
pub fn location_env(cluster: &RenderContext<'_>, backup: &BackupSpec) -> Vec<EnvVar> {
    let mut env = vec![
        literal("CLUSTER_NAMESPACE", cluster.namespace),
        literal("CLUSTER_NAME", cluster.name),
        literal("S3_BUCKET", &backup.s3_bucket),
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
    env
}

/// Where the backup Job mounts the cluster's published authorities (`<name>-ca`).
pub const CA_MOUNT_PATH: &str = "/etc/database-operator-ca";
/// The backup Job's volume of `<name>-ca`.
const CA_VOLUME: &str = "tls-ca";

/// The cluster's published authorities (`<name>-ca`, key `ca.crt`), readable by anyone in the pod
/// (certificates, no key).
fn ca_volume(cluster: &RenderContext<'_>) -> Volume {
    super::secret_volume(
        CA_VOLUME,
        super::tls::ca_secret_name(cluster.name),
        0o444,
        None,
    )
}

/// The backup CronJob for `backup`, dumping from the first of `host` (a list,
/// [`backup_hosts`]) that answers.
pub fn render(cluster: &RenderContext<'_>, backup: &BackupSpec, host: &str) -> CronJob {
    let operator_secret = credentials::operator_secret_name(cluster.name);
    let mut env = vec![
        literal("ENGINE", cluster.engine.as_str()),
        literal("BACKUP_HOST", host),
        secret("DB_USER", &operator_secret, credentials::ADMIN_USERNAME_KEY),
        secret(
            "DB_PASSWORD",
            &operator_secret,
            credentials::ADMIN_PASSWORD_KEY,
        ),
        signing_key(&operator_secret),
        literal("RETENTION", &backup.retention.to_string()),
        literal("TMPDIR", "/tmp"),
        // Where the report of a successful run goes: the termination message, which the
        // operator reads from the pod's status (key, size, backups kept).
        literal("BACKUP_REPORT_FILE", crate::backup::REPORT_PATH),
    ];
    env.extend(location_env(cluster, backup));
    if backup.method() == BackupMethod::Physical {
        // pg_basebackup connects as the replication account, the only one allowed to.
        env.push(literal("BACKUP_METHOD", BackupMethod::Physical.as_str()));
        env.push(secret(
            "REPLICATION_USER",
            &operator_secret,
            credentials::REPLICATION_USERNAME_KEY,
        ));
        env.push(secret(
            "REPLICATION_PASSWORD",
            &operator_secret,
            credentials::REPLICATION_PASSWORD_KEY,
        ));
    }
    let tls = super::tls::wanted(cluster);
    if tls {
        // The dump connects over TLS and checks the server for the Service name it dials.
        env.push(literal(
            "DB_TLS_CA",
            &format!("{CA_MOUNT_PATH}/{}", super::tls::CA_CERT_KEY),
        ));
    }
    let uid = cluster.engine_def().os_user_id();
    let install = install_container(cluster);
    let mut backup_container = Container {
        name: BACKUP_CONTAINER.to_owned(),
        // The database image of the cluster's version: its dump tool matches the server.
        image: Some(cluster.image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![copied_binary(), "backup".to_owned(), "run".to_owned()]),
        termination_message_path: Some(crate::backup::REPORT_PATH.to_owned()),
        env: Some(env),
        resources: Some(resources("100m", "256Mi", "512Mi")),
        security_context: Some(security_context()),
        volume_mounts: Some(vec![
            VolumeMount {
                name: BIN_VOLUME.to_owned(),
                mount_path: OPERATOR_BIN_DIR.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: TMP_VOLUME.to_owned(),
                mount_path: "/tmp".to_owned(),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    };
    let mut volumes = vec![
        bin_volume(),
        Volume {
            name: TMP_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(Quantity("16Mi".to_owned())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    if tls {
        backup_container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: CA_VOLUME.to_owned(),
                mount_path: CA_MOUNT_PATH.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        volumes.push(ca_volume(cluster));
    }
    let pod = PodSpec {
        init_containers: Some(vec![install]),
        containers: vec![backup_container],
        volumes: Some(volumes),
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
                    pod_failure_policy: Some(pod_failure_policy()),
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

/// The restore drill CronJob `<name>-verify`: on `verify.schedule`, a pod of the backup's shape
/// (the operator binary copied into the database image of `spec.version`) runs
/// `database-operator backup verify`: it downloads the newest complete backup into
/// [`SCRATCH_DIR`], restores it into a scratch server it starts there (no network: a Unix
/// socket), and compares every table's rows and checksum with the manifest. It never connects
/// to the cluster's servers, so it gets no database credentials, only the bucket's.
pub fn render_verify(
    cluster: &RenderContext<'_>,
    backup: &BackupSpec,
    verify: &BackupVerifySpec,
) -> CronJob {
    let mut cron_job = render(cluster, backup, "");
    let name = [cluster.name, VERIFY_CRON_JOB_SUFFIX].concat();
    cron_job.metadata = cluster.metadata(name, COMPONENT_BACKUP_VERIFY);
    let spec = &mut cron_job.spec;
    spec.schedule = verify.schedule.clone();
    let drill_labels = labels::labels(cluster, COMPONENT_BACKUP_VERIFY);
    spec.job_template.metadata = Some(ObjectMeta {
        labels: Some(drill_labels.clone()),
        ..ObjectMeta::default()
    });
    let job = spec.job_template.spec.get_or_insert_with(JobSpec::default);
    job.pod_failure_policy = Some(pod_failure_policy_for(VERIFY_CONTAINER));
    job.template.metadata = Some(ObjectMeta {
        labels: Some(drill_labels),
        ..ObjectMeta::default()
    });
    let pod = job.template.spec.get_or_insert_with(PodSpec::default);
    // A drill connects to no server of the cluster: no authority to check one with.
    if let Some(volumes) = pod.volumes.as_mut() {
        volumes.retain(|v| v.name != CA_VOLUME);
    }
    for container in &mut pod.containers {
        if let Some(mounts) = container.volume_mounts.as_mut() {
            mounts.retain(|m| m.name != CA_VOLUME);
        }
    }
    let mut env = vec![
        literal("ENGINE", cluster.engine.as_str()),
        literal("TMPDIR", SCRATCH_DIR),
        literal("SCRATCH_DIR", SCRATCH_DIR),
        signing_key(&credentials::operator_secret_name(cluster.name)),
    ];
    env.extend(location_env(cluster, backup));
    for container in &mut pod.containers {
        container.name = VERIFY_CONTAINER.to_owned();
        container.command = Some(vec![
            copied_binary(),
            "backup".to_owned(),
            "verify".to_owned(),
        ]);
        container.env = Some(env.clone());
        // A drill reports through its log and the Job's exit code, not a termination message.
        container.termination_message_path = None;
        // A scratch server of the engine's default sizes (PostgreSQL's shared buffers,
        // InnoDB's buffer pool) with room for the restore's client.
        container.resources = Some(resources("200m", "512Mi", "1Gi"));
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: SCRATCH_VOLUME.to_owned(),
                mount_path: SCRATCH_DIR.to_owned(),
                ..VolumeMount::default()
            });
    }
    // The scratch directory holds the downloaded dump and one restored copy of the data, each
    // within the cluster's own volume size: at twice that the kubelet evicts a runaway drill
    // (it fails, the condition says so) before it can fill the node's disk.
    let size = &cluster.spec.storage.size.0;
    pod.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: SCRATCH_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(
                super::quantity::times(size, 2).unwrap_or_else(|| super::quantity::canonical(size)),
            )),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    });
    cron_job
}

/// Fails the Job at once when the backup command exits with the code of a known cause
/// ([`BackupFailure`]: refused credentials, unreachable bucket, failed dump): retrying changes
/// nothing, and the Job's `Failed` condition then names the exit code, which the status reads
/// back. Other failures are retried up to [`BACKOFF_LIMIT`].
pub fn pod_failure_policy() -> PodFailurePolicy {
    pod_failure_policy_for(BACKUP_CONTAINER)
}

/// [`pod_failure_policy`] for the container `container`.
fn pod_failure_policy_for(container: &str) -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "FailJob".to_owned(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: Some(container.to_owned()),
                operator: "In".to_owned(),
                values: BackupFailure::ALL
                    .iter()
                    .map(|f| i32::from(f.exit_code()))
                    .collect(),
            }),
            on_pod_conditions: None,
        }],
    }
}

/// The init container that copies the operator binary from the operator image into the
/// [`BIN_VOLUME`] at [`OPERATOR_BIN_DIR`] (the operator image has no shell: the binary copies
/// itself).
pub fn install_container(cluster: &RenderContext<'_>) -> Container {
    Container {
        name: INSTALL_CONTAINER.to_owned(),
        image: Some(cluster.operator_image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![
            OPERATOR_BINARY.to_owned(),
            "copy-binary".to_owned(),
            copied_binary(),
        ]),
        resources: Some(resources("10m", "32Mi", "64Mi")),
        security_context: Some(security_context()),
        volume_mounts: Some(vec![VolumeMount {
            name: BIN_VOLUME.to_owned(),
            mount_path: OPERATOR_BIN_DIR.to_owned(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    }
}

/// The `emptyDir` the binary is copied into.
pub fn bin_volume() -> Volume {
    Volume {
        name: BIN_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// Requests of `cpu` and `memory`, a memory limit of `limit`, no CPU limit.
pub(crate) fn resources(cpu: &str, memory: &str, limit: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_owned(),
            Quantity(limit.to_owned()),
        )])),
        claims: None,
    }
}

/// The database containers' security context with a read-only root filesystem (the backup
/// pods write only to their `emptyDir` volumes).
pub(crate) fn security_context() -> SecurityContext {
    SecurityContext {
        read_only_root_filesystem: Some(true),
        ..statefulset::container_security_context()
    }
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

/// The cluster's backup signing key from its operator Secret `operator_secret`: the backup
/// signs its manifest with it, a drill checks the manifest. Optional, so that a Secret from
/// before signing (the operator adds the key) does not keep the pod from starting: the backup is
/// then stored unsigned and a drill says there is no key.
pub fn signing_key(operator_secret: &str) -> EnvVar {
    let mut env = secret(
        SIGNING_KEY_ENV,
        operator_secret,
        credentials::SIGNING_KEY_KEY,
    );
    if let Some(selector) = env
        .value_from
        .as_mut()
        .and_then(|v| v.secret_key_ref.as_mut())
    {
        selector.optional = Some(true);
    }
    env
}

/// The variable holding the backup signing key (`backup run`, `restore`, `verify` read it).
pub const SIGNING_KEY_ENV: &str = "BACKUP_SIGNING_KEY";
/// The variable that makes `backup restore` skip the signature check.
pub const SKIP_SIGNATURE_CHECK_ENV: &str = "BACKUP_SKIP_SIGNATURE_CHECK";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OperatorConfig;
    use database_operator_api::{
        BackupCredentialsRef, DatabaseClusterSpec, Engine, SecretKeySelector as ApiSecretRef,
        StorageSpec,
    };

    fn spec(engine: Engine, version: &str) -> DatabaseClusterSpec {
        DatabaseClusterSpec {
            engine,
            version: version.into(),
            replicas: 3,
            storage: StorageSpec {
                size: Quantity("10Gi".into()),
                storage_class_name: None,
            },
            resources: None,
            scheduling: None,
            backup: Some(BackupSpec {
                schedule: "0 2 * * *".into(),
                retention: 5,
                s3_bucket: "orders-backups".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
                credentials_secret_ref: Some(BackupCredentialsRef {
                    name: "s3".into(),
                    access_key_id_key: "id".into(),
                    secret_access_key_key: "key".into(),
                }),
                deletion_policy: Default::default(),
                verify: None,
                archive: None,
                method: None,
            }),
            password_secret_ref: ApiSecretRef {
                name: "user-pw".into(),
                key: "password".into(),
            },
            failover: None,
            replication: None,
            bootstrap: None,
            network_policy: None,
            tls: None,
            password_rotation: None,
            upgrade: None,
        }
    }

    fn context<'a>(spec: &'a DatabaseClusterSpec, config: &'a OperatorConfig) -> RenderContext<'a> {
        RenderContext {
            tls_blocked: false,
            name: "orders",
            namespace: "shop",
            uid: "uid-1",
            engine: spec.engine,
            version: &spec.version,
            spec,
            config,
        }
    }

    fn render_for(spec: &DatabaseClusterSpec, config: &OperatorConfig, host: &str) -> CronJob {
        render(&context(spec, config), spec.backup.as_ref().unwrap(), host)
    }

    fn pod(cron_job: &CronJob) -> &PodSpec {
        cron_job
            .spec
            .job_template
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
    }

    #[test]
    fn backups_prefer_the_replicas_then_the_primary_whatever_is_ready() {
        let config = OperatorConfig::default();
        let mut spec = spec(Engine::Postgresql, "16.4");
        let hosts = |spec: &DatabaseClusterSpec| backup_hosts(&context(spec, &config));
        assert_eq!(hosts(&spec), "orders-replicas.shop.svc,orders.shop.svc");
        spec.replicas = 1;
        assert_eq!(hosts(&spec), "orders.shop.svc", "no replicas: the primary");
    }

    #[test]
    fn a_physical_backup_is_taken_from_the_primary_as_the_replication_account() {
        let config = OperatorConfig::default();
        let mut spec = spec(Engine::Postgresql, "16.4");
        let backup = spec.backup.as_mut().unwrap();
        backup.method = Some(BackupMethod::Physical);
        backup.archive = Some(database_operator_api::ArchiveSpec::default());
        assert_eq!(
            backup_hosts(&context(&spec, &config)),
            "orders.shop.svc",
            "only the primary waits for the archive"
        );
        let cron_job = render_for(&spec, &config, "orders.shop.svc");
        let env = pod(&cron_job).containers[0].env.clone().unwrap();
        let find = |name: &str| env.iter().find(|e| e.name == name).cloned();
        assert_eq!(
            find("BACKUP_METHOD").and_then(|e| e.value).as_deref(),
            Some("physical")
        );
        for (name, key) in [
            ("REPLICATION_USER", credentials::REPLICATION_USERNAME_KEY),
            (
                "REPLICATION_PASSWORD",
                credentials::REPLICATION_PASSWORD_KEY,
            ),
        ] {
            let selector = find(name)
                .and_then(|e| e.value_from)
                .and_then(|v| v.secret_key_ref)
                .unwrap_or_else(|| panic!("{name} by secretKeyRef"));
            assert_eq!(selector.name, "orders-operator");
            assert_eq!(selector.key, key);
        }
        // A logical backup has none of them.
        spec.backup.as_mut().unwrap().method = None;
        let cron_job = render_for(&spec, &config, "orders.shop.svc");
        let env = pod(&cron_job).containers[0].env.clone().unwrap();
        assert!(
            env.iter()
                .all(|e| e.name != "BACKUP_METHOD" && e.name != "REPLICATION_PASSWORD"),
            "{env:?}"
        );
    }

    #[test]
    fn the_backup_runs_the_operator_binary_in_the_engine_image() {
        let config = OperatorConfig {
            operator_image: "registry.internal/database-operator:9.9.9".into(),
            ..OperatorConfig::default()
        };
        for (engine, version, image) in [
            (
                Engine::Postgresql,
                "15.20",
                "docker.io/library/postgres:15.20",
            ),
            (Engine::Mariadb, "10.11", "docker.io/library/mariadb:10.11"),
            (Engine::Mysql, "8.4.3", "docker.io/library/mysql:8.4.3"),
        ] {
            let spec = spec(engine, version);
            let cron_job = render_for(&spec, &config, "orders-replicas.shop.svc");
            let pod = pod(&cron_job);
            let init = &pod.init_containers.as_ref().unwrap()[0];
            assert_eq!(
                init.image.as_deref(),
                Some("registry.internal/database-operator:9.9.9")
            );
            assert_eq!(
                init.command.as_ref().unwrap(),
                &[
                    OPERATOR_BINARY,
                    "copy-binary",
                    "/operator/database-operator"
                ]
            );
            let main = &pod.containers[0];
            assert_eq!(main.image.as_deref(), Some(image), "{engine}");
            assert_eq!(
                main.command.as_ref().unwrap(),
                &["/operator/database-operator", "backup", "run"]
            );
            // Both containers see the binary at the same path; the backup only reads it.
            let mounts = |c: &Container| {
                c.volume_mounts
                    .iter()
                    .flatten()
                    .find(|m| m.name == BIN_VOLUME)
                    .map(|m| (m.mount_path.clone(), m.read_only))
            };
            assert_eq!(mounts(init), Some(("/operator".into(), None)));
            assert_eq!(mounts(main), Some(("/operator".into(), Some(true))));
            let env: BTreeMap<_, _> = main
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.as_str(), e))
                .collect();
            assert_eq!(env["ENGINE"].value.as_deref(), Some(engine.as_str()));
            assert_eq!(
                env["BACKUP_HOST"].value.as_deref(),
                Some("orders-replicas.shop.svc")
            );
            assert_eq!(env["CLUSTER_NAMESPACE"].value.as_deref(), Some("shop"));
            assert_eq!(env["CLUSTER_NAME"].value.as_deref(), Some("orders"));
            assert_eq!(env["RETENTION"].value.as_deref(), Some("5"));
        }
    }

    #[test]
    fn with_tls_the_backup_checks_the_server_and_the_drill_gets_no_authority() {
        let config = OperatorConfig::default();
        let spec = spec(Engine::Postgresql, "15.20");
        let cron_job = render_for(&spec, &config, "orders.shop.svc");
        let backup = pod(&cron_job);
        let env = |c: &Container, name: &str| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(
            env(&backup.containers[0], "DB_TLS_CA").as_deref(),
            Some("/etc/database-operator-ca/ca.crt")
        );
        let ca = backup
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == CA_VOLUME)
            .and_then(|v| v.secret.as_ref())
            .and_then(|s| s.secret_name.clone());
        assert_eq!(ca.as_deref(), Some("orders-ca"));
        let mounted = |p: &PodSpec| {
            p.containers[0]
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == CA_VOLUME && m.mount_path == CA_MOUNT_PATH)
        };
        assert!(mounted(backup));
        let verify = BackupVerifySpec {
            schedule: "0 3 * * *".into(),
        };
        let drill = render_verify(
            &context(&spec, &config),
            spec.backup.as_ref().unwrap(),
            &verify,
        );
        let drill_pod = pod(&drill);
        assert!(!mounted(drill_pod));
        assert!(
            drill_pod
                .volumes
                .iter()
                .flatten()
                .all(|v| v.name != CA_VOLUME)
        );
        // TLS off: neither.
        let mut off = spec.clone();
        off.tls = Some(database_operator_api::TlsSpec {
            enabled: false,
            ..Default::default()
        });
        let plain = render_for(&off, &config, "orders.shop.svc");
        assert!(env(&pod(&plain).containers[0], "DB_TLS_CA").is_none());
        assert!(!mounted(pod(&plain)));
    }

    #[test]
    fn the_backup_connects_with_the_operator_credentials_never_the_user_secret() {
        let config = OperatorConfig::default();
        let spec = spec(Engine::Postgresql, "15.20");
        let cron_job = render_for(&spec, &config, "orders.shop.svc");
        let main = &pod(&cron_job).containers[0];
        let by_ref = |name: &str| {
            let e = main.env.iter().flatten().find(|e| e.name == name).unwrap();
            assert!(e.value.is_none(), "{name} must be a reference");
            let r = e
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap();
            (r.name.clone(), r.key.clone())
        };
        assert_eq!(
            by_ref("DB_PASSWORD"),
            ("orders-operator".into(), "admin-password".into())
        );
        assert_eq!(
            by_ref("DB_USER"),
            ("orders-operator".into(), "admin-username".into())
        );
        assert_eq!(by_ref("AWS_SECRET_ACCESS_KEY"), ("s3".into(), "key".into()));
        assert_eq!(by_ref("AWS_ACCESS_KEY_ID"), ("s3".into(), "id".into()));
        let json = serde_json::to_string(&cron_job).unwrap();
        assert!(!json.contains("user-pw"), "the user's Secret is not used");
    }

    #[test]
    fn the_backup_pod_is_non_root_with_requests_and_read_only_roots() {
        let config = OperatorConfig::default();
        let spec = spec(Engine::Mariadb, "10.11");
        let cron_job = render_for(&spec, &config, "orders.shop.svc");
        let pod = pod(&cron_job);
        let security = pod.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.run_as_user, Some(999));
        for c in pod.init_containers.iter().flatten().chain(&pod.containers) {
            let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
            assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
            assert_eq!(sc.allow_privilege_escalation, Some(false));
        }
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.automount_service_account_token, Some(false));
    }
}
