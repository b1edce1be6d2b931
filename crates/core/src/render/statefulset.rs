//! StatefulSet `<name>`: the database members.
//!
//! Decides the pod shape: image, ports, the password by `secretKeyRef` (never a literal), probes
//! fitted to each engine, resources (spec or defaults), the data volume claim, PVC retention,
//! security context, anti-affinity, the configuration mounts, the pod-template annotations that
//! change the template on a configuration change, the template's hash label (what the roll
//! compares each member with, [`crate::upgrade`]) and the rolling update partition.

use std::collections::BTreeMap;

use database_operator_api::{FromBackupSpec, SignatureCheck};
use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm,
    PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecretKeySelector, SecurityContext, VolumeMount, VolumeResourceRequirements,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::labels::{self, COMPONENT_DATABASE};
use super::{
    CONFIG_MOUNT_PATH, OPERATOR_BIN_DIR, PODINFO_MOUNT_PATH, RenderContext, cron_job, quantity,
    scripts,
};
use crate::credentials;

pub mod agent;
mod env;

pub use env::{admin_password_env, password_env, replication_password_env, restore_env};
use env::{field_env, field_ref, literal_env};

/// Name of the volume claim template (PVCs are `data-<name>-<ordinal>`).
pub const DATA_VOLUME: &str = "data";
/// Name of the in-memory volume for the files init.sh writes for the server.
pub const RUN_VOLUME: &str = "run";
/// Where [`RUN_VOLUME`] is mounted.
pub const RUN_MOUNT_PATH: &str = "/run/database-operator";
/// Name of the volume holding the server's unix socket (mounted at the engine's socket dir).
pub const SOCKET_VOLUME: &str = "socket";
/// The database user replicas connect as.
pub const REPLICATION_USER: &str = crate::credentials::REPLICATION_USER;
/// Default CPU request when `spec.resources` is absent.
pub const DEFAULT_CPU_REQUEST: &str = "500m";
/// Default memory request and limit when `spec.resources` is absent.
pub const DEFAULT_MEMORY: &str = "1Gi";
/// How long a member may take to start (crash recovery, a clone) before the kubelet restarts it:
/// `STARTUP_PERIOD_SECONDS * STARTUP_FAILURE_THRESHOLD` = one hour.
pub const STARTUP_FAILURE_THRESHOLD: i32 = 1800;
/// Period of the startup probe: short, because a member counts as started (and then Ready) only
/// at the first probe that passes after its server accepts connections. At 10 s every start of a
/// member (bring-up, each step of a roll, a rejoin after failover) waited 5 s on average and up
/// to 10 s for a server that was up in one; the probe is a socket ping, run only while the
/// member starts.
pub const STARTUP_PERIOD_SECONDS: i32 = 2;
/// Time a member gets to shut down cleanly (flush, checkpoint) before it is killed.
pub const TERMINATION_GRACE_PERIOD_SECONDS: i64 = 120;

/// What the StatefulSet needs besides the spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatefulSetInputs {
    /// Value of the `database.example.com/config-hash` annotation.
    pub config_hash: String,
    /// Value of the `database.example.com/password-fingerprint` annotation; `None` leaves it
    /// out (only when the Secret is missing and no StatefulSet was ever rendered with it).
    pub password_fingerprint: Option<String>,
    /// The pod template when the caller rendered it already ([`pod_template`] of the two
    /// values above, which the plan needs before the StatefulSet for the roll); `None` renders
    /// it.
    pub template: Option<PodTemplate>,
    /// Rolling update partition: pods with an ordinal at or above it get the new template.
    pub partition: i32,
    /// The StatefulSet's replicas when they must differ from `spec.replicas`: held while a
    /// scale-down would remove the primary, until a switchover moved it (`None`: the spec's).
    pub replicas: Option<i32>,
    /// The volume claim templates of the StatefulSet as observed. They are immutable once the
    /// StatefulSet exists, so they are kept as they are (a larger storage size is applied to
    /// the members' claims themselves: [`crate::storage`]).
    pub observed_volume_claim_templates: Option<Vec<PersistentVolumeClaim>>,
    /// The pod management policy of the StatefulSet as observed: immutable once it exists, so
    /// kept as it is. A new StatefulSet starts its members in parallel
    /// ([`POD_MANAGEMENT_POLICY`]).
    pub observed_pod_management_policy: Option<String>,
}

/// The members' pod template and its hash.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodTemplate {
    /// The template, its [`labels::TEMPLATE`] label included.
    pub spec: PodTemplateSpec,
    /// The value of that label: 16 hex digits of the stable 128-bit hash
    /// ([`crate::hash::hash_parts`]) of the template's JSON without the label. It changes when
    /// anything the pods run with changes, and only then; it is the same across operator
    /// restarts and releases that render the same template.
    pub hash: String,
}

/// The members' pod template: labels, the configuration and password annotations, the pod.
pub fn pod_template(
    cluster: &RenderContext<'_>,
    config_hash: &str,
    password_fingerprint: Option<&str>,
) -> PodTemplate {
    let mut annotations =
        BTreeMap::from([(labels::CONFIG_HASH.to_owned(), config_hash.to_owned())]);
    if let Some(fingerprint) = password_fingerprint {
        annotations.insert(
            labels::PASSWORD_FINGERPRINT.to_owned(),
            fingerprint.to_owned(),
        );
    }
    let mut spec = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels::labels(cluster, COMPONENT_DATABASE)),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(pod_spec(cluster)),
    };
    let json = serde_json::to_vec(&spec).unwrap_or_default();
    let hash = format!("{:016x}", crate::hash::hash_parts([json.as_slice()]) >> 64);
    if let Some(template_labels) = spec.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        template_labels.insert(labels::TEMPLATE.to_owned(), hash.clone());
    }
    PodTemplate { spec, hash }
}

/// How a new StatefulSet starts its members: all at once. A replica's init container waits
/// for the primary to answer before it copies it (`init.sh`), and the primary is ordinal 0
/// from the first pass, so nothing depends on the StatefulSet's ordering; `OrderedReady` would
/// only start each member after the one before it is Ready (on real servers, a whole initdb
/// or base backup apart). Rolling updates are one member at a time under either policy.
/// StatefulSets made by an earlier release keep `OrderedReady` (the field is immutable).
pub const POD_MANAGEMENT_POLICY: &str = "Parallel";

/// The StatefulSet of the cluster.
pub fn render(cluster: &RenderContext<'_>, inputs: &StatefulSetInputs) -> StatefulSet {
    let template = match &inputs.template {
        Some(template) => template.spec.clone(),
        None => {
            pod_template(
                cluster,
                &inputs.config_hash,
                inputs.password_fingerprint.as_deref(),
            )
            .spec
        }
    };
    let volume_claim_templates = match &inputs.observed_volume_claim_templates {
        Some(observed) if !observed.is_empty() => observed.iter().map(strip_claim_status).collect(),
        _ => vec![volume_claim_template(cluster)],
    };
    StatefulSet {
        metadata: cluster.metadata(cluster.primary_name(), COMPONENT_DATABASE),
        spec: StatefulSetSpec {
            replicas: Some(inputs.replicas.unwrap_or(cluster.spec.replicas)),
            service_name: Some(cluster.headless_service_name()),
            selector: labels::member_label_selector(cluster),
            pod_management_policy: Some(
                inputs
                    .observed_pod_management_policy
                    .clone()
                    .unwrap_or_else(|| POD_MANAGEMENT_POLICY.to_owned()),
            ),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(inputs.partition),
                    ..RollingUpdateStatefulSetStrategy::default()
                }),
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Retain".to_owned()),
                    when_scaled: Some("Retain".to_owned()),
                },
            ),
            template,
            volume_claim_templates: Some(volume_claim_templates),
            ..StatefulSetSpec::default()
        },
        status: None,
    }
}

fn pod_spec(cluster: &RenderContext<'_>) -> PodSpec {
    let engine = cluster.engine_def();
    let mut volumes = vec![
        k8s_openapi::api::core::v1::Volume {
            name: "config".to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: cluster.config_map_name(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Default::default()
        },
        k8s_openapi::api::core::v1::Volume {
            name: "podinfo".to_owned(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: "labels".to_owned(),
                    field_ref: Some(field_ref("metadata.labels")),
                    ..DownwardAPIVolumeFile::default()
                }]),
                ..DownwardAPIVolumeSource::default()
            }),
            ..Default::default()
        },
    ];
    // Per-member files init.sh writes (the member's configuration, the replication password
    // file) live in memory, never on the node's disk; the unix socket gets a directory of its
    // own, so members never share one even where pods share a filesystem.
    volumes.push(k8s_openapi::api::core::v1::Volume {
        name: RUN_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: Some(Quantity("16Mi".to_owned())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Default::default()
    });
    volumes.push(k8s_openapi::api::core::v1::Volume {
        name: SOCKET_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    });
    if needs_binary(cluster) {
        volumes.push(cron_job::bin_volume());
    }
    if super::tls::wanted(cluster) {
        volumes.push(tls_volume(cluster));
    }
    let self_fence = super::member_access::wanted(cluster);
    let mut containers = vec![database_container(cluster)];
    if self_fence {
        volumes.push(agent::token_volume());
        volumes.push(agent::credentials_volume(cluster));
        containers.push(agent::container(cluster));
    }
    let scheduling = cluster.spec.scheduling.clone().unwrap_or_default();
    PodSpec {
        automount_service_account_token: Some(false),
        service_account_name: self_fence.then(|| super::member_access::access_name(cluster)),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_PERIOD_SECONDS),
        node_selector: scheduling.node_selector,
        tolerations: scheduling.tolerations,
        topology_spread_constraints: scheduling.topology_spread_constraints,
        priority_class_name: scheduling.priority_class_name,
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(engine.os_user_id()),
            run_as_group: Some(engine.os_user_id()),
            fs_group: Some(engine.os_user_id()),
            fs_group_change_policy: Some("OnRootMismatch".to_owned()),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        // `spec.scheduling.affinity` replaces the default as a whole (documented on the field).
        affinity: Some(
            scheduling
                .affinity
                .unwrap_or_else(|| default_affinity(cluster)),
        ),
        init_containers: Some(init_containers(cluster)),
        containers,
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// The affinity when `spec.scheduling.affinity` is absent: members prefer different nodes.
pub fn default_affinity(cluster: &RenderContext<'_>) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_labels: Some(labels::member_selector(cluster)),
                            ..LabelSelector::default()
                        }),
                        topology_key: "kubernetes.io/hostname".to_owned(),
                        ..PodAffinityTerm::default()
                    },
                },
            ]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// `spec.bootstrap.fromBackup`, when the cluster starts from a backup.
fn from_backup<'a>(cluster: &RenderContext<'a>) -> Option<&'a FromBackupSpec> {
    cluster.spec.bootstrap.as_ref().map(|b| &b.from_backup)
}

/// Whether the pods need the operator's binary: `init.sh` runs it to restore a backup, the
/// server runs it to archive its write-ahead log.
fn needs_binary(cluster: &RenderContext<'_>) -> bool {
    from_backup(cluster).is_some() || super::archive(cluster).is_some()
}

/// The init containers: the engine's `init.sh`, preceded, when the pods need it
/// ([`needs_binary`]), by the copy of the operator binary.
fn init_containers(cluster: &RenderContext<'_>) -> Vec<Container> {
    let mut containers = Vec::new();
    if needs_binary(cluster) {
        containers.push(cron_job::install_container(cluster));
    }
    containers.push(init_container(cluster));
    containers
}

fn init_container(cluster: &RenderContext<'_>) -> Container {
    let engine = cluster.engine_def();
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
        literal_env("PRIMARY_HOST", cluster.primary_host()),
    ];
    let headless_domain = cluster.headless_domain();
    env.extend(
        engine
            .init_env(&headless_domain)
            .into_iter()
            .map(|(name, value)| literal_env(name, value)),
    );
    env.push(password_env(cluster, engine.password_env()));
    env.push(literal_env("REPLICATION_USER", REPLICATION_USER.to_owned()));
    env.push(replication_password_env(cluster));
    env.push(literal_env(
        "ADMIN_USER",
        credentials::ADMIN_USER.to_owned(),
    ));
    env.push(admin_password_env(cluster));
    let mut mounts = common_mounts(cluster);
    mounts.push(mount("podinfo", PODINFO_MOUNT_PATH, true));
    // A restore reports what it restored in the termination message (`status.restoredFrom`).
    let mut report_path = None;
    if let Some(from) = from_backup(cluster) {
        env.extend(restore_env(cluster, from));
        env.push(literal_env(
            "BACKUP_REPORT_FILE",
            crate::backup::REPORT_PATH.to_owned(),
        ));
        report_path = Some(crate::backup::REPORT_PATH.to_owned());
        mounts.push(mount(cron_job::BIN_VOLUME, OPERATOR_BIN_DIR, true));
    }
    Container {
        name: "init".to_owned(),
        termination_message_path: report_path,
        image: Some(cluster.image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![
            "/bin/sh".to_owned(),
            [CONFIG_MOUNT_PATH, "/", scripts::INIT_KEY].concat(),
        ]),
        env: Some(env),
        resources: Some(database_resources(cluster)),
        security_context: Some(container_security_context()),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

/// The server's command line: the server binary itself (no image entrypoint), listening on the
/// pod IP only (`$(POD_IP)` is expanded by the kubelet from the container's environment).
pub fn server_command(cluster: &RenderContext<'_>) -> (Vec<String>, Vec<String>) {
    cluster
        .engine_def()
        .server_command(CONFIG_MOUNT_PATH, RUN_MOUNT_PATH)
}

/// The probe command: over the member's own unix socket, never TCP to 127.0.0.1 (on a node
/// where pods share the host's loopback, that address is nobody's or another pod's). Neither
/// needs a password: `pg_isready` does not log in, and `mysqladmin`/`mariadb-admin ping`
/// report a running server even when the login is refused (on MariaDB the OS user `mysql`
/// logs in through `unix_socket`; on MySQL through `auth_socket`).
pub fn probe_command(cluster: &RenderContext<'_>) -> Vec<String> {
    cluster.engine_def().probe_command()
}

fn database_container(cluster: &RenderContext<'_>) -> Container {
    let engine = cluster.engine_def();
    let (command, args) = server_command(cluster);
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
    ];
    env.extend(
        engine
            .server_env()
            .into_iter()
            .map(|(name, value)| literal_env(name, value)),
    );
    let mut mounts = common_mounts(cluster);
    // The archive command (`backup wal-push`) runs as the server's child, with its
    // environment: the bucket and its keys.
    if let Some(backup) = cluster
        .spec
        .backup
        .as_ref()
        .filter(|_| super::archive(cluster).is_some())
    {
        env.extend(cron_job::location_env(cluster, backup));
        mounts.push(mount(cron_job::BIN_VOLUME, OPERATOR_BIN_DIR, true));
    }
    let probe_command = probe_command(cluster);
    let probe = |period: i32, timeout: i32, failures: i32| Probe {
        exec: Some(ExecAction {
            command: Some(probe_command.clone()),
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        ..Probe::default()
    };
    Container {
        name: engine.container_name().to_owned(),
        image: Some(cluster.image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(command),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some(engine.container_name().to_owned()),
            container_port: i32::from(engine.port()),
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        env: Some(env),
        resources: Some(database_resources(cluster)),
        // Generous: crash recovery or a clone may take long, and killing a member in recovery
        // only starts the recovery again.
        startup_probe: Some(probe(STARTUP_PERIOD_SECONDS, 5, STARTUP_FAILURE_THRESHOLD)),
        // Quick to say not Ready (two failures 5 s apart): that is one of failover's two
        // signals, and the read Services stop sending a hung member traffic sooner.
        readiness_probe: Some(probe(5, 3, 2)),
        // Slower to give up than readiness: an overloaded member should stop getting traffic
        // long before it is restarted.
        liveness_probe: Some(probe(10, 5, 6)),
        // The server writes no termination message: the kubelet keeps the end of its log
        // instead when it fails, which is where it says why (a full volume: the operator names
        // it in the status and the failover's reason, `crate::ContainerExit`).
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(container_security_context()),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

fn common_mounts(cluster: &RenderContext<'_>) -> Vec<VolumeMount> {
    let mut mounts = vec![
        mount(DATA_VOLUME, cluster.engine_def().data_mount_path(), false),
        mount("config", CONFIG_MOUNT_PATH, true),
        mount(RUN_VOLUME, RUN_MOUNT_PATH, false),
        mount(SOCKET_VOLUME, cluster.engine_def().socket_dir(), false),
    ];
    if super::tls::wanted(cluster) {
        mounts.push(mount(super::tls::VOLUME, super::tls::MOUNT_PATH, true));
    }
    mounts
}

/// The members' server certificate, its key and the cluster's authority (`<name>-tls`,
/// [`crate::tls`]): owner-and-group readable, the group being the pod's `fsGroup` (the server's
/// user). PostgreSQL accepts a key file of the root user readable by its group, and reads a
/// renewed one on `pg_reload_conf()`; the kubelet replaces the files in place.
fn tls_volume(cluster: &RenderContext<'_>) -> k8s_openapi::api::core::v1::Volume {
    super::secret_volume(
        super::tls::VOLUME,
        super::tls::server_secret_name(cluster.name),
        0o440,
        None,
    )
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// No privilege escalation, no capabilities: the database needs neither.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}

/// The resources of the database container: `spec.resources` (quantities in canonical form),
/// or the defaults — requests 500m CPU and 1Gi memory, memory limit 1Gi, no CPU limit (a CPU
/// limit only throttles a database that has idle cores available).
pub fn database_resources(cluster: &RenderContext<'_>) -> ResourceRequirements {
    match &cluster.spec.resources {
        Some(resources) => ResourceRequirements {
            claims: resources.claims.clone(),
            limits: resources.limits.as_ref().map(canonical_quantities),
            requests: resources.requests.as_ref().map(canonical_quantities),
        },
        None => ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity(DEFAULT_CPU_REQUEST.to_owned())),
                ("memory".to_owned(), Quantity(DEFAULT_MEMORY.to_owned())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity(DEFAULT_MEMORY.to_owned()),
            )])),
            claims: None,
        },
    }
}

fn canonical_quantities(map: &BTreeMap<String, Quantity>) -> BTreeMap<String, Quantity> {
    map.iter()
        .map(|(k, v)| (k.clone(), Quantity(quantity::canonical(&v.0))))
        .collect()
}

fn volume_claim_template(cluster: &RenderContext<'_>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.to_owned()),
            // Stable labels only: the template is immutable, a version label would block upgrades.
            labels: Some(labels::member_selector(cluster)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: cluster.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(quantity::canonical(&cluster.spec.storage.size.0)),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

fn strip_claim_status(claim: &PersistentVolumeClaim) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        status: None,
        ..claim.clone()
    }
}
