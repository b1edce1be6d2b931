//! Whether an object needs writing: "is the desired object a subset of the observed one".
//!
//! Server-side apply makes the operator the owner of exactly the fields it sends; the API server
//! adds defaults (a Service's `clusterIP`, a probe's `successThreshold`), other controllers add
//! their own fields, and the server owns bookkeeping (`resourceVersion`, `uid`, `managedFields`,
//! `creationTimestamp`, `generation`, `status`). So an observed object is as desired when every
//! field the desired object sets has the same value there, whatever else it carries:
//!
//! - objects: every key of the desired object is in the observed one with a matching value;
//! - arrays: the same length, elements matching pairwise (lists are ordered in Kubernetes);
//! - scalars: equal (quantities are rendered in canonical form so the server keeps them as sent);
//! - a desired `null`, empty object or empty array matches an absent field (the server drops
//!   empty values).
//!
//! This is what keeps a steady cluster at zero writes, and what reverts a manual change to a
//! field the operator owns (`kubectl scale statefulset` changes `spec.replicas`).
//!
//! The check runs in two steps, the cheap one first. [`merge_is_noop`] merges the desired object
//! over a copy of the observed one with k8s-openapi's `DeepMerge` (which follows the list types
//! of the API schema, the same ones server-side apply uses: lists keyed by name merge element by
//! element, atomic lists are replaced) and asks whether anything changed; that needs no JSON and
//! settles a steady cluster in microseconds. Only when it reports a difference does the JSON
//! comparison above decide (it forgives what the merge cannot, such as defaults the server adds
//! inside an atomic list). So an object is unchanged when either says so: in both cases applying
//! it would change nothing the operator owns.

use k8s_openapi::DeepMerge;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::{Change, DesiredObject, OwnedObjects};

/// Metadata fields the API server owns; never compared.
pub const SERVER_OWNED_METADATA: [&str; 6] = [
    "resourceVersion",
    "uid",
    "managedFields",
    "creationTimestamp",
    "generation",
    "selfLink",
];

/// Whether `desired` is a subset of `observed` in the sense of the module docs.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, value)| match have.get(key) {
                Some(found) => is_subset(value, found),
                None => is_empty(value),
            })
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| is_subset(w, h))
        }
        (Value::Null, Value::Null) => true,
        (want, Value::Null) => is_empty(want),
        (Value::Number(a), Value::Number(b)) => numbers_equal(a, b),
        (want, have) => want == have,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x == y,
        _ => a.as_f64() == b.as_f64(),
    }
}

/// Whether the desired object, compared with the observed object of the same kind and name,
/// needs creating, updating, or nothing.
pub fn change(desired: &DesiredObject, observed: &OwnedObjects) -> Change {
    fn compare<K>(desired: &K, items: &[K]) -> Change
    where
        K: DeepMerge
            + Clone
            + PartialEq
            + serde::Serialize
            + k8s_openapi::Metadata<Ty = ObjectMeta>,
    {
        let name = desired.metadata().name.as_deref();
        let Some(found) = items.iter().find(|o| o.metadata().name.as_deref() == name) else {
            return Change::Create;
        };
        if merge_is_noop(desired, found) {
            return Change::Unchanged;
        }
        // Serializing these generated types cannot fail (every map has string keys); a failure
        // would only make the object look changed, which is safe.
        match (serde_json::to_value(desired), serde_json::to_value(found)) {
            (Ok(want), Ok(have)) if object_is_subset(&want, &have) => Change::Unchanged,
            _ => Change::Update,
        }
    }
    match desired {
        DesiredObject::StatefulSet(o) => compare(o.as_ref(), &observed.stateful_sets),
        DesiredObject::Service(o) => compare(o.as_ref(), &observed.services),
        DesiredObject::ConfigMap(o) => compare(o.as_ref(), &observed.config_maps),
        DesiredObject::CronJob(o) => compare(o.as_ref(), &observed.cron_jobs),
        DesiredObject::PodDisruptionBudget(o) => {
            compare(o.as_ref(), &observed.pod_disruption_budgets)
        }
    }
}

/// Whether merging `desired` over `observed` leaves `observed` as it is.
pub fn merge_is_noop<K: DeepMerge + Clone + PartialEq>(desired: &K, observed: &K) -> bool {
    let mut merged = observed.clone();
    merged.merge_from(desired.clone());
    merged == *observed
}

/// [`is_subset`] for whole objects, ignoring server-owned metadata and `status`.
pub fn object_is_subset(desired: &Value, observed: &Value) -> bool {
    let Value::Object(want) = desired else {
        return is_subset(desired, observed);
    };
    want.iter().all(|(key, value)| match key.as_str() {
        "status" => true,
        "metadata" => match (value, observed.get("metadata")) {
            (Value::Object(meta), Some(have)) => meta
                .iter()
                .filter(|(k, _)| !SERVER_OWNED_METADATA.contains(&k.as_str()))
                .all(|(k, v)| match have.get(k) {
                    Some(found) => is_subset(v, found),
                    None => is_empty(v),
                }),
            (value, None) => is_empty(value),
            (value, Some(have)) => is_subset(value, have),
        },
        _ => match observed.get(key) {
            Some(found) => is_subset(value, found),
            None => is_empty(value),
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn extra_observed_fields_are_ignored() {
        let desired =
            json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a"}]}}}});
        let observed = json!({"spec": {"replicas": 3, "revisionHistoryLimit": 10,
            "template": {"spec": {"containers": [{"name": "a", "terminationMessagePath": "/dev/termination-log"}]}}}});
        assert!(is_subset(&desired, &observed));
    }

    #[test]
    fn changed_scalar_is_a_difference() {
        assert!(!is_subset(
            &json!({"spec": {"replicas": 3}}),
            &json!({"spec": {"replicas": 5}})
        ));
        assert!(!is_subset(&json!({"a": "x"}), &json!({"a": "y"})));
        assert!(!is_subset(&json!({"a": true}), &json!({"a": false})));
    }

    #[test]
    fn missing_field_is_a_difference() {
        assert!(!is_subset(
            &json!({"spec": {"replicas": 3}}),
            &json!({"spec": {}})
        ));
        assert!(!is_subset(&json!({"spec": {"replicas": 3}}), &json!({})));
    }

    #[test]
    fn arrays_compare_pairwise_with_equal_length() {
        assert!(is_subset(
            &json!([{"a": 1}, {"b": 2}]),
            &json!([{"a": 1, "x": 0}, {"b": 2}])
        ));
        assert!(!is_subset(&json!([{"a": 1}]), &json!([{"a": 1}, {"b": 2}])));
        assert!(!is_subset(
            &json!([{"a": 1}, {"b": 2}]),
            &json!([{"b": 2}, {"a": 1}])
        ));
    }

    #[test]
    fn empty_desired_values_match_absent_fields() {
        assert!(is_subset(
            &json!({"emptyDir": {}, "items": [], "n": null}),
            &json!({})
        ));
        assert!(!is_subset(&json!({"items": ["a"]}), &json!({})));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(is_subset(&json!({"a": 1}), &json!({"a": 1.0})));
        assert!(!is_subset(&json!({"a": 1}), &json!({"a": 2})));
        assert!(!is_subset(&json!({"a": 1}), &json!({"a": "1"})));
    }

    fn service(
        selector: &[(&str, &str)],
        cluster_ip: Option<&str>,
    ) -> k8s_openapi::api::core::v1::Service {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {
                "selector": selector.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
                "clusterIP": cluster_ip,
                "ports": [{"name": "mysql", "port": 3306, "targetPort": "mysql"}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn merge_check_ignores_server_fields_and_sees_changed_ones() {
        let desired = service(&[("app", "db")], None);
        let mut observed = service(&[("app", "db")], Some("10.0.0.1"));
        observed.metadata.resource_version = Some("7".into());
        observed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("TCP".into());
        assert!(merge_is_noop(&desired, &observed));
        let changed = service(&[("app", "other")], Some("10.0.0.1"));
        assert!(!merge_is_noop(&desired, &changed));
        let mut owned = OwnedObjects::default();
        owned.services.push(observed);
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired.clone())), &owned),
            Change::Unchanged
        );
        // The selector is an atomic map: the merge sees an extra key as a change, the JSON check
        // as a superset.
        owned.services[0] = service(&[("app", "db"), ("extra", "x")], Some("10.0.0.1"));
        assert!(!merge_is_noop(&desired, &owned.services[0]));
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired.clone())), &owned),
            Change::Unchanged
        );
        owned.services[0] = changed;
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired.clone())), &owned),
            Change::Update
        );
        assert_eq!(
            change(
                &DesiredObject::Service(Box::new(desired)),
                &OwnedObjects::default()
            ),
            Change::Create
        );
    }

    #[test]
    fn defaults_inside_atomic_lists_fall_back_to_the_json_check() {
        // `ipFamilies` is an atomic list: the merge replaces it, the JSON check compares it.
        let mut desired = service(&[("app", "db")], None);
        desired.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into()]);
        let mut observed = desired.clone();
        observed.spec.as_mut().unwrap().cluster_ip = Some("10.0.0.1".into());
        let mut owned = OwnedObjects::default();
        owned.services.push(observed);
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired.clone())), &owned),
            Change::Unchanged
        );
        owned.services[0].spec.as_mut().unwrap().ip_families = Some(vec!["IPv6".into()]);
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired)), &owned),
            Change::Update
        );
    }

    #[test]
    fn server_owned_metadata_and_status_are_ignored() {
        let desired = json!({"metadata": {"name": "x", "resourceVersion": "1", "uid": "a"}, "status": {"replicas": 1}});
        let observed = json!({"metadata": {"name": "x", "resourceVersion": "99", "uid": "b", "generation": 4}});
        assert!(object_is_subset(&desired, &observed));
        let renamed = json!({"metadata": {"name": "y"}});
        assert!(!object_is_subset(&desired, &renamed));
    }
}
