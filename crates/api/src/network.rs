//! `spec.networkPolicy`: who may reach the database port.

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who may open connections to the members' database port. The operator keeps a NetworkPolicy
/// `<name>` that admits the database port from every pod of the cluster's namespace (clients,
/// the other members, backup and restore Jobs), from the operator's namespace and from
/// `allowFrom`, and nothing else on any port of the members.
///
/// Absent: the same as `{enabled: true}`. A NetworkPolicy takes effect only where the cluster's
/// network plugin enforces NetworkPolicies.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, garde::Validate)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// `false`: no NetworkPolicy (one the operator made before is deleted), every source may
    /// connect, as far as the cluster's other policies allow. Default `true`.
    #[serde(default = "enabled")]
    #[garde(skip)]
    pub enabled: bool,

    /// More sources admitted to the database port, as NetworkPolicy peers (`podSelector`,
    /// `namespaceSelector`, both, or `ipBlock`), for clients in other namespaces or outside the
    /// cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[garde(length(max = 32))]
    pub allow_from: Vec<NetworkPolicyPeer>,
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_from: Vec::new(),
        }
    }
}

fn enabled() -> bool {
    true
}

impl NetworkPolicySpec {
    /// Whether a cluster with `spec` (its `spec.networkPolicy`) gets a NetworkPolicy.
    pub fn wanted(spec: Option<&NetworkPolicySpec>) -> bool {
        spec.is_none_or(|s| s.enabled)
    }
}
