//! What the member agents need with `spec.failover.nodeLoss: SelfFence`: the Lease
//! `<name>-primary` the primary's agent renews, and the ServiceAccount, Role and RoleBinding
//! `<name>-member` that let the agents read and renew that one Lease and nothing else.
//!
//! The operator writes `spec.holderIdentity` (the pod that carries the primary label) and
//! `spec.leaseDurationSeconds` (`spec.failover.leaseSeconds`); the holder's agent writes
//! `spec.renewTime`, which the operator never sets (server-side apply keeps the two owners'
//! fields apart). See `docs/decisions/2026-12-04-self-fencing-on-node-loss.md`.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use super::RenderContext;
use super::labels::COMPONENT_DATABASE;
use crate::owned::{MEMBER_ACCESS_SUFFIX, PRIMARY_LEASE_SUFFIX};

/// Whether the cluster's members run an agent (`spec.failover.nodeLoss: SelfFence` with
/// failover enabled).
pub fn wanted(cluster: &RenderContext<'_>) -> bool {
    cluster.spec.self_fencing()
}

/// `spec.failover.leaseSeconds` (its default when unset).
pub fn lease_seconds(cluster: &RenderContext<'_>) -> i32 {
    cluster
        .spec
        .failover
        .clone()
        .unwrap_or_default()
        .lease_seconds
}

/// `<name>-member`: the ServiceAccount, Role and RoleBinding.
pub fn access_name(cluster: &RenderContext<'_>) -> String {
    [cluster.name, MEMBER_ACCESS_SUFFIX].concat()
}

/// `<name>-primary`: the Lease.
pub fn lease_name(cluster: &RenderContext<'_>) -> String {
    [cluster.name, PRIMARY_LEASE_SUFFIX].concat()
}

/// The ServiceAccount the member pods run as. Its token is mounted only into the agent's
/// container; `automountServiceAccountToken: false` keeps it out of the database's.
pub fn service_account(cluster: &RenderContext<'_>) -> ServiceAccount {
    ServiceAccount {
        metadata: cluster.metadata(access_name(cluster), COMPONENT_DATABASE),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

/// The Role: `get` and `patch` of the cluster's Lease, by name; nothing else.
pub fn role(cluster: &RenderContext<'_>) -> Role {
    Role {
        metadata: cluster.metadata(access_name(cluster), COMPONENT_DATABASE),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
            resources: Some(vec!["leases".to_owned()]),
            resource_names: Some(vec![lease_name(cluster)]),
            verbs: vec!["get".to_owned(), "patch".to_owned()],
            ..PolicyRule::default()
        }]),
    }
}

/// The RoleBinding of [`role`] to [`service_account`].
pub fn role_binding(cluster: &RenderContext<'_>) -> RoleBinding {
    RoleBinding {
        metadata: cluster.metadata(access_name(cluster), COMPONENT_DATABASE),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: access_name(cluster),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: access_name(cluster),
            namespace: Some(cluster.namespace.to_owned()),
            ..Subject::default()
        }]),
    }
}

/// The Lease, held by `holder` (the pod the primary label is on; during a failover, when no
/// pod carries it, the holder observed before, so nobody new starts renewing).
pub fn lease(cluster: &RenderContext<'_>, holder: &str) -> Lease {
    Lease {
        metadata: cluster.metadata(lease_name(cluster), COMPONENT_DATABASE),
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(lease_seconds(cluster)),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use database_operator_api::{DatabaseClusterSpec, FailoverSpec, NodeLossPolicy};

    use super::*;
    use crate::OperatorConfig;
    use database_operator_api::Engine;

    fn spec(node_loss: NodeLossPolicy, enabled: bool) -> DatabaseClusterSpec {
        let mut spec: DatabaseClusterSpec = serde_json::from_value(serde_json::json!({
            "engine": "postgresql",
            "version": "16.2",
            "replicas": 3,
            "storage": {"size": "1Gi"},
            "passwordSecretRef": {"name": "pw", "key": "password"},
        }))
        .unwrap();
        spec.failover = Some(FailoverSpec {
            enabled,
            node_loss,
            lease_seconds: 8,
            ..FailoverSpec::default()
        });
        spec
    }

    fn ctx<'a>(spec: &'a DatabaseClusterSpec, config: &'a OperatorConfig) -> RenderContext<'a> {
        RenderContext {
            tls_blocked: false,
            name: "db",
            namespace: "shop",
            uid: "u-1",
            engine: Engine::Postgresql,
            version: "16.2",
            spec,
            config,
        }
    }

    #[test]
    fn only_self_fence_with_failover_enabled_wants_agents() {
        let config = OperatorConfig::default();
        let s = spec(NodeLossPolicy::SelfFence, true);
        assert!(wanted(&ctx(&s, &config)));
        let s = spec(NodeLossPolicy::SelfFence, false);
        assert!(!wanted(&ctx(&s, &config)));
        let s = spec(NodeLossPolicy::Wait, true);
        assert!(!wanted(&ctx(&s, &config)));
    }

    #[test]
    fn the_role_grants_get_and_patch_of_the_one_lease() {
        let config = OperatorConfig::default();
        let s = spec(NodeLossPolicy::SelfFence, true);
        let role = role(&ctx(&s, &config));
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["db-primary".to_owned()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "patch"]);
        let binding = role_binding(&ctx(&s, &config));
        assert_eq!(binding.role_ref.name, "db-member");
        assert_eq!(binding.subjects.unwrap()[0].name, "db-member");
    }

    #[test]
    fn the_lease_names_its_holder_and_duration_never_a_renewal() {
        let config = OperatorConfig::default();
        let s = spec(NodeLossPolicy::SelfFence, true);
        let lease = lease(&ctx(&s, &config), "db-1");
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("db-1"));
        assert_eq!(spec.lease_duration_seconds, Some(8));
        assert!(spec.renew_time.is_none());
    }
}
