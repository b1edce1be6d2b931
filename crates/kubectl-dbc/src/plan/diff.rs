//! The plan of one cluster as data, and the field-by-field comparison of a desired object
//! with the live one.

use super::*;

/// The plan of one cluster, as printed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// `namespace/name`.
    pub cluster: String,
    /// `live` or the manifest's name.
    pub source: String,
    /// Every object the cluster should have, in apply order.
    pub objects: Vec<ObjectPlan>,
    /// Owned objects that would be deleted (`Kind/name`).
    pub deletions: Vec<String>,
    /// Role labels that would be set.
    pub steps: Vec<String>,
    /// Why pods would restart (empty: none would).
    pub restart_reasons: Vec<String>,
    /// The pods that would restart, in the order the roll restarts them (the primary last).
    pub restarts: Vec<String>,
    /// Whether the status would be written, and the phase it would show.
    pub status: String,
    /// Events the operator would emit.
    pub events: Vec<String>,
    /// How the plan was made, where that matters.
    pub notes: Vec<String>,
}

/// One object of the plan.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectPlan {
    /// `Kind/name`.
    pub object: String,
    /// `create`, `update` or `unchanged`.
    pub change: &'static str,
    /// The fields the operator sets that differ from the live object (updates only).
    pub diff: Vec<FieldDiff>,
}

/// One field that differs.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldDiff {
    /// `spec.template.spec.containers[0].image`.
    pub path: String,
    /// The live value (JSON), absent when the field is not set.
    pub live: Option<String>,
    /// The value the operator would apply (JSON).
    pub desired: String,
    /// For multi-line text (configuration files): the lines only the live value has (`- `) and
    /// only the desired value has (`+ `).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
}

/// The lines of `live` not in `desired` (`- `) and of `desired` not in `live` (`+ `), in order.
pub(super) fn line_changes(live: &str, desired: &str) -> Vec<String> {
    let old: Vec<&str> = live.lines().collect();
    let new: Vec<&str> = desired.lines().collect();
    let mut out: Vec<String> = old
        .iter()
        .filter(|l| !new.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        new.iter()
            .filter(|l| !old.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}

pub(super) fn field(path: &str, key: &str) -> String {
    if key.contains(['.', '/']) || key.is_empty() {
        format!("{path}[{key:?}]")
    } else if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The fields of `desired` that `live` does not match, by the operator's own relation
/// ([`is_subset`]: fields the operator does not set are not compared).
pub fn differences(desired: &Value, live: &Value) -> Vec<FieldDiff> {
    fn walk(path: String, desired: &Value, live: Option<&Value>, out: &mut Vec<FieldDiff>) {
        if let Some(live) = live
            && is_subset(desired, live)
        {
            return;
        }
        match (desired, live) {
            (Value::Object(want), Some(Value::Object(have))) => {
                for (key, value) in want {
                    walk(field(&path, key), value, have.get(key), out);
                }
            }
            (Value::Array(want), Some(Value::Array(have))) if want.len() == have.len() => {
                for (i, (w, h)) in want.iter().zip(have).enumerate() {
                    walk(format!("{path}[{i}]"), w, Some(h), out);
                }
            }
            (_, None) if is_subset(desired, &Value::Null) => {}
            _ => out.push(FieldDiff {
                lines: match (live, desired) {
                    (Some(Value::String(old)), Value::String(new))
                        if old.contains('\n') || new.contains('\n') =>
                    {
                        line_changes(old, new)
                    }
                    _ => Vec::new(),
                },
                path,
                live: live.map(Value::to_string),
                desired: desired.to_string(),
            }),
        }
    }
    let mut out = Vec::new();
    walk(String::new(), desired, Some(live), &mut out);
    out
}

pub(super) fn ordinal(pod: &str) -> u64 {
    pod.rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

/// Why the pods would restart, from the StatefulSet's differences.
pub(super) fn restart_reasons(diff: &[FieldDiff]) -> Vec<String> {
    let mut reasons = Vec::new();
    // The template label is the hash of the rest of the template: a consequence, not a cause.
    for d in diff
        .iter()
        .filter(|d| d.path.starts_with("spec.template") && !d.path.contains(labels::TEMPLATE))
    {
        let reason = if d.path.contains(labels::CONFIG_HASH) {
            "the configuration changed (config-hash annotation)".to_owned()
        } else if d.path.ends_with(".image") {
            format!(
                "image {} -> {}",
                d.live.as_deref().unwrap_or("none"),
                d.desired
            )
        } else {
            format!(
                "the pod template changed: {}",
                d.path.trim_start_matches("spec.template.spec.")
            )
        };
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    reasons
}
