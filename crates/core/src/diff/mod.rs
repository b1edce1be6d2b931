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
//! - a desired `null`, empty array, or object of such values asks for nothing: it matches an
//!   absent field (the server drops empty values) or any value.
//!
//! This is what keeps a steady cluster at zero writes, and what reverts a manual change to a
//! field the operator owns (`kubectl scale statefulset` changes `spec.replicas`).
//!
//! Comparing JSON trees allocates a tree per object per pass; a steady cluster is compared with
//! hashed leaves instead (`leaves.rs`: the same comparison, no tree), and only an object that
//! looks changed is compared again as JSON to confirm.

mod leaves;
mod serializer;

use std::collections::BTreeMap;

use serde_json::Value;

use leaves::Comparer;
pub(crate) use leaves::digest;

use crate::{
    Change, DesiredObject, KnownMatch, ObjectKey, ObjectVisitor, Observed, OwnedObjects,
    OwnedResource, PlannedObject,
};

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
///
/// ```
/// use database_operator_core::diff::is_subset;
/// use serde_json::json;
/// let desired = json!({"spec": {"replicas": 3, "ports": [{"port": 3306}]}});
/// assert!(is_subset(&desired, &json!({"spec": {"replicas": 3, "ports": [{"port": 3306, "protocol": "TCP"}], "x": 1}})));
/// assert!(!is_subset(&desired, &json!({"spec": {"replicas": 5, "ports": [{"port": 3306}]}})));
/// ```
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    if is_empty(desired) {
        return true;
    }
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
        (Value::Number(a), Value::Number(b)) => numbers_equal(a, b),
        (want, have) => want == have,
    }
}

/// A value that asks for nothing: `null`, an empty array, or an object of such values.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().all(is_empty),
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
    compare(
        &mut Comparer::default(),
        desired,
        observed,
        &BTreeMap::new(),
        0,
    )
}

/// Every desired object of one pass with whether it needs writing, reusing one comparer's
/// buffers for all of them. `digest` is what they were rendered from
/// ([`crate::PlannedObject::digest`]).
pub(crate) fn plan_changes(
    desired: Vec<DesiredObject>,
    observed: &Observed,
    digest: u64,
) -> Vec<PlannedObject> {
    let mut comparer = Comparer::default();
    desired
        .into_iter()
        .map(|object| {
            let change = compare(
                &mut comparer,
                &object,
                &observed.owned,
                &observed.known_matches,
                digest,
            );
            PlannedObject {
                object,
                change,
                digest,
            }
        })
        .collect()
}

/// [`change`] reusing the buffers of `comparer`, and skipping the comparison when `known` says
/// the observed object, at its current `resourceVersion`, matched an object rendered from
/// inputs with the same `digest` ([`crate::PlannedObject::digest`]).
fn compare(
    comparer: &mut Comparer,
    desired: &DesiredObject,
    observed: &OwnedObjects,
    known: &BTreeMap<ObjectKey, KnownMatch>,
    digest: u64,
) -> Change {
    struct Compare<'a> {
        comparer: &'a mut Comparer,
        observed: &'a OwnedObjects,
        known: Option<&'a KnownMatch>,
        digest: u64,
    }
    impl ObjectVisitor<'_> for Compare<'_> {
        type Output = Change;
        fn visit<K: OwnedResource>(self, desired: &K) -> Change {
            let name = desired.metadata().name.as_deref();
            let Some(found) = K::items(self.observed)
                .iter()
                .find(|o| o.metadata().name.as_deref() == name)
            else {
                return Change::Create;
            };
            if let Some(known) = self.known
                && known.digest == self.digest
                && found.metadata().resource_version.as_deref()
                    == Some(known.resource_version.as_str())
            {
                return Change::Unchanged;
            }
            if self.comparer.object_is_subset(desired, found) == Some(true) {
                return Change::Unchanged;
            }
            // Serializing these generated types cannot fail (every map has string keys); a
            // failure would only make the object look changed, which is safe.
            match (serde_json::to_value(desired), serde_json::to_value(found)) {
                (Ok(want), Ok(have)) if object_is_subset(&want, &have) => Change::Unchanged,
                _ => Change::Update,
            }
        }
    }
    desired.visit(Compare {
        comparer,
        observed,
        known: known.get(&desired.key()),
        digest,
    })
}

/// [`is_subset`] computed on hashed leaves (what [`change`] uses first): the same answer, without
/// building JSON trees. `None` when a value cannot be serialized.
pub fn hashed_is_subset<A: serde::Serialize + ?Sized, B: serde::Serialize + ?Sized>(
    desired: &A,
    observed: &B,
) -> Option<bool> {
    Some(leaves::is_subset(
        &leaves::leaves(desired)?,
        &mut leaves::leaves(observed)?,
    ))
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
    fn typed_objects_compare_as_json() {
        let desired = service(&[("app", "db")], None);
        let mut observed = service(&[("app", "db"), ("extra", "x")], Some("10.0.0.1"));
        observed.metadata.resource_version = Some("7".into());
        observed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("TCP".into());
        let mut owned = OwnedObjects::default();
        owned.services.push(observed);
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired.clone())), &owned),
            Change::Unchanged
        );
        owned.services[0] = service(&[("app", "other")], Some("10.0.0.1"));
        assert_eq!(
            change(&DesiredObject::Service(Box::new(desired.clone())), &owned),
            Change::Update
        );
        owned.services[0].spec.as_mut().unwrap().selector = None;
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
    fn server_owned_metadata_and_status_are_ignored() {
        let desired = json!({"metadata": {"name": "x", "resourceVersion": "1", "uid": "a"}, "status": {"replicas": 1}});
        let observed = json!({"metadata": {"name": "x", "resourceVersion": "99", "uid": "b", "generation": 4}});
        assert!(object_is_subset(&desired, &observed));
        let renamed = json!({"metadata": {"name": "y"}});
        assert!(!object_is_subset(&desired, &renamed));
    }
}
