//! `spec.networkPolicy`: who may reach the database port.

use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{IPBlock, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validate::FieldError;

/// Who may open connections to the members' database port. The operator keeps a NetworkPolicy
/// `<name>-access` that admits the database port from every pod of the cluster's namespace (clients,
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

    /// What the API server would refuse in `allowFrom` (a refused NetworkPolicy would leave the
    /// cluster without the one it has): a peer with no source or with an `ipBlock` beside a
    /// selector, a CIDR that does not parse, an `except` outside its `cidr`, a selector
    /// requirement whose operator and values do not go together.
    pub(crate) fn problems(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (i, peer) in self.allow_from.iter().enumerate() {
            let at = format!("spec.networkPolicy.allowFrom[{i}]");
            let selects = peer.pod_selector.is_some() || peer.namespace_selector.is_some();
            match (&peer.ip_block, selects) {
                (None, false) => errors.push(FieldError::new(
                    at.clone(),
                    "names no source: set podSelector, namespaceSelector (or both), or ipBlock",
                )),
                (Some(_), true) => errors.push(FieldError::new(
                    at.clone(),
                    "ipBlock cannot be combined with podSelector or namespaceSelector in one entry; use two entries",
                )),
                (Some(block), false) => ip_block_problems(&at, block, &mut errors),
                (None, true) => {}
            }
            for (name, selector) in [
                ("podSelector", &peer.pod_selector),
                ("namespaceSelector", &peer.namespace_selector),
            ] {
                if let Some(selector) = selector {
                    selector_problems(&format!("{at}.{name}"), selector, &mut errors);
                }
            }
        }
        errors
    }
}

/// A CIDR: its address and prefix length, `None` when it does not parse (or the prefix is
/// longer than the address).
fn cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, prefix) = text.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some((addr, prefix))
}

/// Whether `inner` lies within `outer` (same family, a longer prefix, the same leading bits).
fn within(inner: (IpAddr, u8), outer: (IpAddr, u8)) -> bool {
    let bits = |addr: IpAddr| -> u128 {
        match addr {
            IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
            IpAddr::V6(v6) => u128::from(v6),
        }
    };
    if inner.0.is_ipv4() != outer.0.is_ipv4() || inner.1 <= outer.1 {
        return false;
    }
    // An IPv4 address sits in the top 32 bits, so its prefix counts from the top too.
    let width = u32::from(outer.1);
    let mask = if width == 0 {
        0
    } else {
        u128::MAX << (128 - width)
    };
    bits(inner.0) & mask == bits(outer.0) & mask
}

fn ip_block_problems(at: &str, block: &IPBlock, errors: &mut Vec<FieldError>) {
    let Some(outer) = cidr(&block.cidr) else {
        errors.push(FieldError::with_value(
            format!("{at}.ipBlock.cidr"),
            "not a CIDR such as 10.0.0.0/8 or 2001:db8::/32",
            &block.cidr,
        ));
        return;
    };
    for (j, except) in block.except.iter().flatten().enumerate() {
        let field = format!("{at}.ipBlock.except[{j}]");
        match cidr(except) {
            None => errors.push(FieldError::with_value(
                field,
                "not a CIDR such as 10.1.0.0/16",
                except,
            )),
            Some(inner) if !within(inner, outer) => errors.push(FieldError::with_value(
                field,
                format!("must lie strictly within the cidr {}", block.cidr),
                except,
            )),
            Some(_) => {}
        }
    }
}

fn selector_problems(at: &str, selector: &LabelSelector, errors: &mut Vec<FieldError>) {
    for (k, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let field = format!("{at}.matchExpressions[{k}]");
        let values = requirement.values.as_ref().map_or(0, Vec::len);
        let problem = match requirement.operator.as_str() {
            "In" | "NotIn" if values == 0 => Some("In and NotIn need at least one value"),
            "Exists" | "DoesNotExist" if values > 0 => {
                Some("Exists and DoesNotExist take no values")
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => None,
            _ => Some("operator must be In, NotIn, Exists or DoesNotExist"),
        };
        if let Some(problem) = problem {
            errors.push(FieldError::with_value(
                field,
                problem,
                &requirement.operator,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn block(cidr: &str, except: &[&str]) -> NetworkPolicyPeer {
        NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: cidr.to_owned(),
                except: (!except.is_empty())
                    .then(|| except.iter().map(|e| (*e).to_owned()).collect()),
            }),
            ..NetworkPolicyPeer::default()
        }
    }

    fn fields(peers: Vec<NetworkPolicyPeer>) -> Vec<String> {
        NetworkPolicySpec {
            enabled: true,
            allow_from: peers,
        }
        .problems()
        .into_iter()
        .map(|e| e.field)
        .collect()
    }

    #[test]
    fn what_the_api_server_would_refuse_is_named() {
        let selector = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: "In".into(),
                values: None,
            }]),
            ..LabelSelector::default()
        };
        let mut both = block("10.0.0.0/8", &[]);
        both.pod_selector = Some(LabelSelector::default());
        assert_eq!(
            fields(vec![
                NetworkPolicyPeer::default(),
                both,
                block("10.0.0.0/33", &[]),
                block(
                    "10.0.0.0/8",
                    &["10.1.0.0/16", "192.168.0.0/16", "10.0.0.0/8", "x"]
                ),
                NetworkPolicyPeer {
                    namespace_selector: Some(selector),
                    ..NetworkPolicyPeer::default()
                },
            ]),
            [
                "spec.networkPolicy.allowFrom[0]",
                "spec.networkPolicy.allowFrom[1]",
                "spec.networkPolicy.allowFrom[2].ipBlock.cidr",
                "spec.networkPolicy.allowFrom[3].ipBlock.except[1]",
                "spec.networkPolicy.allowFrom[3].ipBlock.except[2]",
                "spec.networkPolicy.allowFrom[3].ipBlock.except[3]",
                "spec.networkPolicy.allowFrom[4].namespaceSelector.matchExpressions[0]",
            ]
        );
    }

    #[test]
    fn ordinary_sources_pass() {
        let peers = vec![
            block("0.0.0.0/0", &["169.254.0.0/16"]),
            block("2001:db8::/32", &["2001:db8:1::/48"]),
            NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector::default()),
                pod_selector: Some(LabelSelector::default()),
                ..NetworkPolicyPeer::default()
            },
        ];
        assert!(fields(peers).is_empty());
    }
}
