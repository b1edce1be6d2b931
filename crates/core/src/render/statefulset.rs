//! StatefulSet `<name>`: the database members.
//!
//! Decides the pod shape: image, ports, the password by `secretKeyRef` (never a literal), probes
//! fitted to each engine, resources (spec or defaults), the data volume claim, PVC retention,
//! security context, anti-affinity, the configuration mounts, the pod-template annotations that
//! roll the pods on a configuration or password change, and the rolling update partition.

use std::collections::BTreeMap;

use database_operator_api::Engine;
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
use super::{CONFIG_MOUNT_PATH, PODINFO_MOUNT_PATH, RenderContext, quantity, scripts};

/// Name of the volume claim template (PVCs are `data-<name>-<ordinal>`).
pub const DATA_VOLUME: &str = "data";
/// Default CPU request when `spec.resources` is absent.
pub const DEFAULT_CPU_REQUEST: &str = "500m";
/// Default memory request and limit when `spec.resources` is absent.
pub const DEFAULT_MEMORY: &str = "1Gi";
/// How long a member may take to start (crash recovery, a clone) before the kubelet restarts it:
/// `STARTUP_PERIOD_SECONDS * STARTUP_FAILURE_THRESHOLD` = one hour.
pub const STARTUP_FAILURE_THRESHOLD: i32 = 360;
/// Period of the startup probe.
pub const STARTUP_PERIOD_SECONDS: i32 = 10;
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
    /// Rolling update partition: pods with an ordinal at or above it get the new template.
    pub partition: i32,
    /// The volume claim templates of the StatefulSet as observed. They are immutable once the
    /// StatefulSet exists, so they are kept as they are (a storage size change would have to be
    /// applied to the PVCs themselves, which the operator does not do yet: the plan reports it
    /// with a `StorageResizeNotApplied` event).
    pub observed_volume_claim_templates: Option<Vec<PersistentVolumeClaim>>,
}

/// The StatefulSet of the cluster.
pub fn render(cluster: &RenderContext<'_>, inputs: &StatefulSetInputs) -> StatefulSet {
    let mut template_annotations =
        BTreeMap::from([(labels::CONFIG_HASH.to_owned(), inputs.config_hash.clone())]);
    if let Some(fingerprint) = &inputs.password_fingerprint {
        template_annotations.insert(labels::PASSWORD_FINGERPRINT.to_owned(), fingerprint.clone());
    }
    let volume_claim_templates = match &inputs.observed_volume_claim_templates {
        Some(observed) if !observed.is_empty() => observed.iter().map(strip_claim_status).collect(),
        _ => vec![volume_claim_template(cluster)],
    };
    StatefulSet {
        metadata: cluster.metadata(cluster.primary_name(), COMPONENT_DATABASE),
        spec: StatefulSetSpec {
            replicas: Some(cluster.spec.replicas),
            service_name: Some(cluster.headless_service_name()),
            selector: labels::member_label_selector(cluster),
            pod_management_policy: Some("OrderedReady".to_owned()),
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
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels::labels(cluster, COMPONENT_DATABASE)),
                    annotations: Some(template_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(cluster)),
            },
            volume_claim_templates: Some(volume_claim_templates),
            ..StatefulSetSpec::default()
        },
        status: None,
    }
}

fn pod_spec(cluster: &RenderContext<'_>) -> PodSpec {
    let engine = cluster.engine_spec();
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
    if cluster.engine == Engine::Mysql {
        volumes.push(k8s_openapi::api::core::v1::Volume {
            name: "conf-d".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
    PodSpec {
        automount_service_account_token: Some(false),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_PERIOD_SECONDS),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(engine.uid),
            run_as_group: Some(engine.uid),
            fs_group: Some(engine.uid),
            fs_group_change_policy: Some("OnRootMismatch".to_owned()),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        affinity: Some(Affinity {
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
        }),
        init_containers: Some(vec![init_container(cluster)]),
        containers: vec![database_container(cluster)],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

fn init_container(cluster: &RenderContext<'_>) -> Container {
    let engine = cluster.engine_spec();
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        literal_env("PRIMARY_HOST", cluster.primary_host()),
    ];
    match cluster.engine {
        Engine::Mysql => {
            env.push(literal_env("HEADLESS_DOMAIN", cluster.headless_domain()));
            env.push(password_env(cluster, engine.password_env));
        }
        Engine::Postgresql => {
            env.push(literal_env("PGDATA", engine.data_dir.to_owned()));
            env.push(password_env(cluster, "PGPASSWORD"));
        }
    }
    let mut mounts = common_mounts(cluster);
    mounts.push(mount("podinfo", PODINFO_MOUNT_PATH, true));
    Container {
        name: "init".to_owned(),
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

fn database_container(cluster: &RenderContext<'_>) -> Container {
    let engine = cluster.engine_spec();
    let (args, env, probe_command) = match cluster.engine {
        Engine::Mysql => (
            None,
            vec![
                password_env(cluster, engine.password_env),
                literal_env("MYSQL_ROOT_HOST", "%".to_owned()),
            ],
            // mysqladmin ping exits 0 whenever the server answers, even "access denied", so it
            // needs no password. Over TCP, so the image's socket-only bootstrap server is not
            // mistaken for a ready member.
            vec![
                "mysqladmin",
                "ping",
                "--host=127.0.0.1",
                "--port=3306",
                "--silent",
            ],
        ),
        Engine::Postgresql => (
            Some(vec![
                "postgres".to_owned(),
                "-c".to_owned(),
                ["config_file=", CONFIG_MOUNT_PATH, "/postgresql.conf"].concat(),
            ]),
            vec![
                password_env(cluster, engine.password_env),
                literal_env("PGDATA", engine.data_dir.to_owned()),
            ],
            // Over TCP for the same reason: initdb's temporary server listens on the socket only.
            vec![
                "pg_isready",
                "--host=127.0.0.1",
                "--port=5432",
                "--username=postgres",
                "--timeout=4",
            ],
        ),
    };
    let probe = |period: i32, timeout: i32, failures: i32| Probe {
        exec: Some(ExecAction {
            command: Some(probe_command.iter().map(|s| (*s).to_owned()).collect()),
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        ..Probe::default()
    };
    Container {
        name: engine.container_name.to_owned(),
        image: Some(cluster.image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        args,
        ports: Some(vec![ContainerPort {
            name: Some(engine.container_name.to_owned()),
            container_port: engine.port,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        env: Some(env),
        resources: Some(database_resources(cluster)),
        // Generous: crash recovery or a clone may take long, and killing a member in recovery
        // only starts the recovery again.
        startup_probe: Some(probe(STARTUP_PERIOD_SECONDS, 5, STARTUP_FAILURE_THRESHOLD)),
        readiness_probe: Some(probe(10, 5, 3)),
        // Slower to give up than readiness: an overloaded member should stop getting traffic
        // long before it is restarted.
        liveness_probe: Some(probe(10, 5, 6)),
        security_context: Some(container_security_context()),
        volume_mounts: Some(common_mounts(cluster)),
        ..Container::default()
    }
}

fn common_mounts(cluster: &RenderContext<'_>) -> Vec<VolumeMount> {
    let mut mounts = vec![
        mount(DATA_VOLUME, cluster.engine_spec().data_mount_path, false),
        mount("config", CONFIG_MOUNT_PATH, true),
    ];
    if cluster.engine == Engine::Mysql {
        mounts.push(mount("conf-d", "/etc/mysql/conf.d", false));
    }
    mounts
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

fn field_ref(path: &str) -> ObjectFieldSelector {
    ObjectFieldSelector {
        api_version: Some("v1".to_owned()),
        field_path: path.to_owned(),
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(field_ref(path)),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn literal_env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        ..EnvVar::default()
    }
}

/// The password, by reference to the Secret key of `spec.passwordSecretRef`.
pub fn password_env(cluster: &RenderContext<'_>, name: &str) -> EnvVar {
    let selector = &cluster.spec.password_secret_ref;
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: selector.name.clone(),
                key: selector.key.clone(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}
