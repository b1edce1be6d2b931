//! Services `<name>`, `<name>-replicas` and `<name>-headless`.
//!
//! Decides how clients reach the cluster: the read-write Service selects the one pod labelled
//! `database.example.com/role: primary`, the read-only Service the pods labelled `replica`, and
//! the headless governing Service gives every member a stable DNS name, listed even before it is
//! ready (replication and seeding need to reach members that are still starting).

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::RenderContext;
use super::labels::{self, COMPONENT_DATABASE};
use crate::MemberRole;

/// The read-write Service `<name>`: the primary only.
pub fn read_write(cluster: &RenderContext<'_>) -> Service {
    role_service(cluster, cluster.primary_name(), MemberRole::Primary)
}

/// The read-only Service `<name>-replicas`: every replica.
pub fn read_only(cluster: &RenderContext<'_>) -> Service {
    role_service(
        cluster,
        cluster.replicas_service_name(),
        MemberRole::Replica,
    )
}

/// The headless governing Service `<name>-headless`: every member, ready or not.
pub fn headless(cluster: &RenderContext<'_>) -> Service {
    Service {
        metadata: cluster.metadata(cluster.headless_service_name(), COMPONENT_DATABASE),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(labels::member_selector(cluster)),
            ports: Some(ports(cluster)),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn role_service(cluster: &RenderContext<'_>, name: String, role: MemberRole) -> Service {
    let mut selector = labels::member_selector(cluster);
    selector.insert(labels::ROLE.to_owned(), role.as_str().to_owned());
    Service {
        metadata: cluster.metadata(name, COMPONENT_DATABASE),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector),
            ports: Some(ports(cluster)),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn ports(cluster: &RenderContext<'_>) -> Vec<ServicePort> {
    let engine = cluster.engine_def();
    vec![ServicePort {
        name: Some(engine.container_name().to_owned()),
        port: i32::from(engine.port()),
        target_port: Some(IntOrString::String(engine.container_name().to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    }]
}
