//! The member agent (`spec.failover.nodeLoss: SelfFence`): a sidecar that runs the operator
//! binary's `member-agent` command. It renews the Lease `<name>-primary` while its pod holds it
//! and makes the local server read-only once it could not renew for half of the lease (see
//! `docs/decisions/2026-12-04-self-fencing-on-node-loss.md`). Only this container gets the pod's
//! ServiceAccount token; the database container has none. The operator's account reaches it as
//! files of a Secret volume ([`CREDENTIALS_MOUNT_PATH`]), never in its environment: a process
//! that runs for the pod's lifetime keeps no password where its children and `/proc` would see
//! it.

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

/// The Secret volume with the operator's account (`admin-username`, `admin-password` of the
/// operator Secret).
pub const CREDENTIALS_VOLUME: &str = "operator-credentials";

/// Where the agent reads the operator's account: a file per key, `admin-username` and
/// `admin-password`.
pub const CREDENTIALS_MOUNT_PATH: &str = "/var/run/database-operator/credentials";

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
        literal_env("DBO_CREDENTIALS_DIR", CREDENTIALS_MOUNT_PATH.to_owned()),
    ];
    let mut env = env;
    let mut mounts = vec![
        mount(TOKEN_VOLUME, TOKEN_MOUNT_PATH, true),
        mount(CREDENTIALS_VOLUME, CREDENTIALS_MOUNT_PATH, true),
    ];
    if crate::render::tls::wanted(cluster) {
        // Its own server over TLS, the certificate checked for the member's DNS name.
        env.push(literal_env(
            "DBO_TLS_CA",
            crate::render::tls::replica_ca_file(),
        ));
        env.push(literal_env(
            "DBO_TLS_DOMAIN",
            format!("{}.{}", cluster.headless_service_name(), cluster.namespace) + ".svc",
        ));
        mounts.push(mount(
            crate::render::tls::VOLUME,
            crate::render::tls::MOUNT_PATH,
            true,
        ));
    }
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
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

/// The operator's account for the agent, from the operator Secret: owner-and-group readable
/// (the pod's `fsGroup` is the server's user, which the agent runs as).
pub fn credentials_volume(cluster: &RenderContext<'_>) -> Volume {
    let item = |key: &str| KeyToPath {
        key: key.to_owned(),
        path: key.to_owned(),
        ..KeyToPath::default()
    };
    super::super::secret_volume(
        CREDENTIALS_VOLUME,
        credentials::operator_secret_name(cluster.name),
        0o440,
        Some(vec![
            item(credentials::ADMIN_USERNAME_KEY),
            item(credentials::ADMIN_PASSWORD_KEY),
        ]),
    )
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
