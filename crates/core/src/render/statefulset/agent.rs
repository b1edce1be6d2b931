//! The member agent (`spec.failover.nodeLoss: SelfFence`): a sidecar that runs the operator
//! binary's `member-agent` command. It renews the Lease `<name>-primary` while its pod holds it
//! and makes the local server read-only once it could not renew for half of the lease (see
//! `docs/decisions/2026-12-04-self-fencing-on-node-loss.md`). Only this container gets the pod's
//! ServiceAccount token; the database container has none.

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, DownwardAPIProjection, KeyToPath, ProjectedVolumeSource,
    ServiceAccountTokenProjection, Volume, VolumeProjection,
};

use super::*;
use crate::render::member_access;

/// Name of the agent's container.
pub const AGENT_CONTAINER: &str = "member-agent";

/// The projected volume with the agent's API credentials.
pub const TOKEN_VOLUME: &str = "member-token";

/// Where the agent finds its token, CA and namespace: where Kubernetes clients look.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The token's lifetime; the kubelet renews it at 80 % of it.
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// The agent's container.
pub fn container(cluster: &RenderContext<'_>) -> Container {
    let engine = cluster.engine_def();
    let env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
        field_env(
            "DBO_START_ROLE",
            &format!("metadata.labels['{}']", labels::ROLE),
        ),
        literal_env("DBO_ENGINE", cluster.engine.to_string()),
        literal_env("DBO_PORT", engine.port().to_string()),
        literal_env("DBO_LEASE", member_access::lease_name(cluster)),
        literal_env(
            "DBO_LEASE_SECONDS",
            member_access::lease_seconds(cluster).to_string(),
        ),
        env::admin_username_env(cluster),
        env::admin_password_env(cluster),
    ];
    Container {
        name: AGENT_CONTAINER.to_owned(),
        image: Some(cluster.operator_image()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![
            super::super::OPERATOR_BINARY.to_owned(),
            "member-agent".to_owned(),
        ]),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("10m".to_owned())),
                ("memory".to_owned(), Quantity("32Mi".to_owned())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("64Mi".to_owned()),
            )])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(container_security_context()),
        volume_mounts: Some(vec![mount(TOKEN_VOLUME, TOKEN_MOUNT_PATH, true)]),
        ..Container::default()
    }
}

/// The agent's credentials: a bound ServiceAccount token, the cluster CA and the namespace,
/// as the kubelet would mount them automatically (which the pod turns off).
pub fn token_volume() -> Volume {
    Volume {
        name: TOKEN_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o444),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_owned(),
                        expiration_seconds: Some(TOKEN_EXPIRATION_SECONDS),
                        ..ServiceAccountTokenProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            ..KeyToPath::default()
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(field_ref("metadata.namespace")),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    }
}
