//! The scheduling guard: which `spec.scheduling.priorityClassName` and tolerations a cluster
//! may ask for.
//!
//! Whoever may create a `DatabaseCluster` decides where its pods run and at which priority. A
//! platform team that hands out only that right does not mean to hand out a place on the
//! control-plane nodes or a system priority (which preempts everything else). The operator's
//! flags `--allowed-priority-classes` and `--allowed-toleration-keys` (Helm
//! `scheduling.allowedPriorityClasses`, `scheduling.allowedTolerationKeys`) set a
//! [`SchedulingPolicy`]; the admission webhook refuses a cluster that asks for more, and the
//! operator does not reconcile one (condition `Degraded` `InvalidSpec`) when the webhook is off.
//!
//! Without flags the policy is [`SchedulingPolicy::default`]: every priority class but the
//! reserved `system-` ones, every toleration but those of the control-plane taints and the
//! toleration of every taint (an empty key with `operator: Exists`).
//!
//! ```
//! use database_operator_api::scheduling::SchedulingPolicy;
//! use database_operator_api::SchedulingSpec;
//!
//! let policy = SchedulingPolicy::default();
//! let spec = SchedulingSpec {
//!     priority_class_name: Some("system-node-critical".into()),
//!     ..SchedulingSpec::default()
//! };
//! let errors = policy.check(Some(&spec));
//! assert_eq!(errors[0].field, "spec.scheduling.priorityClassName");
//!
//! let policy = SchedulingPolicy::allow_list(Some(["batch-low".to_owned()].into()), None);
//! assert!(policy.check(Some(&spec)).len() == 1);
//! ```

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Toleration;

use crate::SchedulingSpec;
use crate::validate::FieldError;

/// Taint keys of control-plane nodes: tolerating them is refused unless allowed by name.
pub const CONTROL_PLANE_TAINT_KEYS: &[&str] = &[
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// Prefix Kubernetes reserves for its own priority classes (`system-cluster-critical`,
/// `system-node-critical`).
pub const SYSTEM_PRIORITY_PREFIX: &str = "system-";

/// Allowed values, one list per field: unset is the default rule, a list allows only its
/// entries (`*` in a list allows everything).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulingPolicy {
    /// `spec.scheduling.priorityClassName` values; `None`: any but `system-*`.
    pub priority_classes: Option<BTreeSet<String>>,
    /// Keys of `spec.scheduling.tolerations`; `None`: any but the control-plane keys and the
    /// empty key (every taint).
    pub toleration_keys: Option<BTreeSet<String>>,
}

/// The entry of an allow list that allows everything.
pub const ANY: &str = "*";

impl SchedulingPolicy {
    /// A policy from the operator's flags (`None`: the flag was not given).
    pub fn allow_list(
        priority_classes: Option<BTreeSet<String>>,
        toleration_keys: Option<BTreeSet<String>>,
    ) -> Self {
        Self {
            priority_classes,
            toleration_keys,
        }
    }

    /// Every field of `scheduling` (a cluster's `spec.scheduling`) the policy refuses, each
    /// naming the field, the value and the rule.
    pub fn check(&self, scheduling: Option<&SchedulingSpec>) -> Vec<FieldError> {
        let Some(scheduling) = scheduling else {
            return Vec::new();
        };
        let mut errors = Vec::new();
        if let Some(class) = scheduling.priority_class_name.as_deref()
            && let Some(rule) = self.priority_class_refusal(class)
        {
            errors.push(FieldError::with_value(
                "spec.scheduling.priorityClassName",
                rule,
                class,
            ));
        }
        for (i, toleration) in scheduling.tolerations.iter().flatten().enumerate() {
            if let Some(rule) = self.toleration_refusal(toleration) {
                errors.push(FieldError::with_value(
                    format!("spec.scheduling.tolerations[{i}].key"),
                    rule,
                    toleration.key.as_deref().unwrap_or_default(),
                ));
            }
        }
        errors
    }

    fn priority_class_refusal(&self, class: &str) -> Option<String> {
        match &self.priority_classes {
            Some(allowed) if allowed.contains(ANY) || allowed.contains(class) => None,
            Some(allowed) => Some(format!(
                "priority class not allowed by the operator's --allowed-priority-classes ({})",
                listed(allowed)
            )),
            None if class.starts_with(SYSTEM_PRIORITY_PREFIX) => Some(format!(
                "the {SYSTEM_PRIORITY_PREFIX}* priority classes are reserved for the cluster's own \
                 components; a platform team can allow one with the operator's \
                 --allowed-priority-classes"
            )),
            None => None,
        }
    }

    fn toleration_refusal(&self, toleration: &Toleration) -> Option<String> {
        let key = toleration.key.as_deref().unwrap_or_default();
        match &self.toleration_keys {
            Some(allowed) if allowed.contains(ANY) || allowed.contains(key) => None,
            Some(allowed) if key.is_empty() => Some(format!(
                "a toleration without a key tolerates every taint and is not allowed by the \
                 operator's --allowed-toleration-keys ({})",
                listed(allowed)
            )),
            Some(allowed) => Some(format!(
                "toleration key not allowed by the operator's --allowed-toleration-keys ({})",
                listed(allowed)
            )),
            None if key.is_empty() => Some(
                "a toleration without a key tolerates every taint, the control plane's too; name \
                 the taint (a platform team can allow it with the operator's \
                 --allowed-toleration-keys=*)"
                    .to_owned(),
            ),
            None if CONTROL_PLANE_TAINT_KEYS.contains(&key) => Some(
                "tolerating the control plane's taint would place database pods on control-plane \
                 nodes; a platform team can allow it with the operator's \
                 --allowed-toleration-keys"
                    .to_owned(),
            ),
            None => None,
        }
    }
}

fn listed(allowed: &BTreeSet<String>) -> String {
    if allowed.is_empty() {
        "none allowed".to_owned()
    } else {
        let names: Vec<&str> = allowed.iter().map(String::as_str).collect();
        format!("allowed: {}", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toleration(key: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(str::to_owned),
            operator: Some(if key.is_some() { "Equal" } else { "Exists" }.to_owned()),
            effect: Some("NoSchedule".to_owned()),
            ..Toleration::default()
        }
    }

    fn spec(class: Option<&str>, keys: &[Option<&str>]) -> SchedulingSpec {
        SchedulingSpec {
            priority_class_name: class.map(str::to_owned),
            tolerations: Some(keys.iter().map(|k| toleration(*k)).collect()),
            ..SchedulingSpec::default()
        }
    }

    fn fields(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn the_default_refuses_system_priority_and_the_control_plane() {
        let policy = SchedulingPolicy::default();
        assert!(policy.check(None).is_empty());
        let ordinary = spec(
            Some("databases"),
            &[Some("dedicated"), Some("node.kubernetes.io/unreachable")],
        );
        assert!(policy.check(Some(&ordinary)).is_empty());
        let errors = policy.check(Some(&spec(
            Some("system-cluster-critical"),
            &[
                Some("dedicated"),
                Some("node-role.kubernetes.io/control-plane"),
                None,
                Some("node-role.kubernetes.io/master"),
            ],
        )));
        assert_eq!(
            fields(&errors),
            [
                "spec.scheduling.priorityClassName",
                "spec.scheduling.tolerations[1].key",
                "spec.scheduling.tolerations[2].key",
                "spec.scheduling.tolerations[3].key",
            ]
        );
        assert!(errors[0].to_string().contains("reserved"), "{}", errors[0]);
        assert!(
            errors[0]
                .to_string()
                .contains("(value: \"system-cluster-critical\")")
        );
        assert!(errors[2].message.contains("every taint"));
    }

    #[test]
    fn an_allow_list_allows_only_its_entries() {
        let policy = SchedulingPolicy::allow_list(
            Some(["system-node-critical".to_owned()].into()),
            Some(["dedicated".to_owned()].into()),
        );
        let allowed = spec(Some("system-node-critical"), &[Some("dedicated")]);
        assert!(policy.check(Some(&allowed)).is_empty());
        let errors = policy.check(Some(&spec(Some("databases"), &[Some("other"), None])));
        assert_eq!(
            fields(&errors),
            [
                "spec.scheduling.priorityClassName",
                "spec.scheduling.tolerations[0].key",
                "spec.scheduling.tolerations[1].key",
            ]
        );
        assert!(errors[0].message.contains("allowed: system-node-critical"));
        assert!(errors[1].message.contains("allowed: dedicated"));
    }

    #[test]
    fn an_empty_list_allows_nothing_and_a_star_everything() {
        let none = SchedulingPolicy::allow_list(Some(BTreeSet::new()), Some(BTreeSet::new()));
        let errors = none.check(Some(&spec(Some("databases"), &[Some("dedicated")])));
        assert_eq!(errors.len(), 2);
        assert!(errors[0].message.contains("none allowed"));
        let any = SchedulingPolicy::allow_list(
            Some([ANY.to_owned()].into()),
            Some([ANY.to_owned()].into()),
        );
        let everything = spec(
            Some("system-node-critical"),
            &[None, Some("node-role.kubernetes.io/control-plane")],
        );
        assert!(any.check(Some(&everything)).is_empty());
    }
}
