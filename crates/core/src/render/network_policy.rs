//! NetworkPolicy `<name>-access`: the database port of the members, from the cluster's namespace, the
//! operator's namespace and `spec.networkPolicy.allowFrom` only.
//!
//! It selects every database pod of the cluster (members of any role), is of type `Ingress`
//! only (the members' own connections out, to the primary, the bucket or the API server, are
//! not restricted), and admits one port: the engine's. Nothing else listens on a member, so
//! nothing else is admitted. Rendered unless `spec.networkPolicy.enabled` is `false`.

use std::collections::BTreeMap;

use database_operator_api::NetworkPolicySpec;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec as PolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::RenderContext;
use super::labels::{self, COMPONENT_DATABASE};

/// The label the API server puts on every namespace, with its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Whether the cluster gets a NetworkPolicy.
pub fn wanted(cluster: &RenderContext<'_>) -> bool {
    NetworkPolicySpec::wanted(cluster.spec.network_policy.as_ref())
}

/// The policy.
pub fn render(cluster: &RenderContext<'_>) -> NetworkPolicy {
    let mut from = vec![
        // Every pod of the cluster's namespace: clients, the other members, the backup,
        // restore-drill and cleanup Jobs.
        NetworkPolicyPeer {
            pod_selector: Some(LabelSelector::default()),
            ..NetworkPolicyPeer::default()
        },
        // The operator's probes and steps.
        NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    NAMESPACE_NAME_LABEL.to_owned(),
                    cluster.config.operator_namespace.clone(),
                )])),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        },
    ];
    if let Some(spec) = &cluster.spec.network_policy {
        from.extend(spec.allow_from.iter().cloned());
    }
    NetworkPolicy {
        metadata: cluster.metadata(
            [cluster.name, crate::owned::NETWORK_POLICY_SUFFIX].concat(),
            COMPONENT_DATABASE,
        ),
        spec: Some(PolicySpec {
            pod_selector: Some(labels::member_label_selector(cluster)),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(vec![NetworkPolicyPort {
                    protocol: Some("TCP".to_owned()),
                    port: Some(IntOrString::Int(i32::from(cluster.engine_def().port()))),
                    end_port: None,
                }]),
            }]),
            egress: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use database_operator_api::{DatabaseClusterSpec, Engine, SecretKeySelector, StorageSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    use super::*;
    use crate::OperatorConfig;

    fn spec(policy: Option<NetworkPolicySpec>) -> DatabaseClusterSpec {
        let mut spec: DatabaseClusterSpec = serde_json::from_value(json!({
            "engine": "mariadb", "version": "10.11.9",
            "storage": {"size": "1Gi"},
            "passwordSecretRef": {"name": "pw", "key": "password"}
        }))
        .unwrap();
        spec.network_policy = policy;
        spec.storage = StorageSpec {
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        };
        spec.password_secret_ref = SecretKeySelector {
            name: "pw".into(),
            key: "password".into(),
        };
        spec
    }

    fn context<'a>(spec: &'a DatabaseClusterSpec, config: &'a OperatorConfig) -> RenderContext<'a> {
        RenderContext {
            tls_blocked: false,
            name: "shop",
            namespace: "team-a",
            uid: "u1",
            engine: Engine::Mariadb,
            version: &spec.version,
            spec,
            config,
        }
    }

    #[test]
    fn the_database_port_from_the_namespace_and_the_operators_only() {
        let config = OperatorConfig {
            operator_namespace: "db-system".into(),
            ..OperatorConfig::default()
        };
        let spec = spec(None);
        let ctx = context(&spec, &config);
        assert!(wanted(&ctx));
        let policy = serde_json::to_value(render(&ctx)).unwrap();
        assert_eq!(policy["metadata"]["name"], "shop-access");
        assert_eq!(policy["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(
            policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
            "database"
        );
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
        let rules = policy["spec"]["ingress"].as_array().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0]["ports"],
            json!([{"protocol": "TCP", "port": 3306}])
        );
        assert_eq!(
            rules[0]["from"],
            json!([
                {"podSelector": {}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "db-system"}}}
            ])
        );
    }

    #[test]
    fn allow_from_widens_and_disabled_renders_none() {
        let config = OperatorConfig::default();
        let extra = NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("team".to_owned(), "web".to_owned())])),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        };
        let widened = spec(Some(NetworkPolicySpec {
            enabled: true,
            allow_from: vec![extra.clone()],
        }));
        let policy = render(&context(&widened, &config));
        let from = &policy.spec.unwrap().ingress.unwrap()[0]
            .from
            .clone()
            .unwrap();
        assert_eq!(from.len(), 3);
        assert_eq!(from[2], extra);
        let off = spec(Some(NetworkPolicySpec {
            enabled: false,
            allow_from: Vec::new(),
        }));
        assert!(!wanted(&context(&off, &config)));
    }
}
