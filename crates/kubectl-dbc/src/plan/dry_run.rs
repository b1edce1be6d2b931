//! The exact result: every desired object applied server-side with `dryRun=All`, as the
//! operator applies it (field manager `database-operator`, forced), and what the API server
//! would store compared with the live object, defaults and admission included. The local
//! comparison stays when the dry run cannot be made (permissions, an unreachable webhook), and
//! the plan says so.

use std::future::Future;
use std::pin::Pin;

use database_operator_api::FIELD_MANAGER;
use database_operator_core::DesiredObject;
use kube::api::{Patch, PatchParams};

use super::diff::{field, line_changes};
use super::planning::{live_value, restarting_pods};
use super::*;

/// Metadata the API server changes on every write (or keeps per manager): not a change of the
/// object.
const VOLATILE_METADATA: &[&str] = &["resourceVersion", "generation", "managedFields"];

/// The note of a plan refined by the dry run.
pub const EXACT_NOTE: &str =
    "exact: every object dry-run applied server-side as the operator applies it";

/// `object` without what changes on every write, and without `status` (the dry run applies the
/// main resource only).
pub fn normalize(mut object: Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for key in VOLATILE_METADATA {
                meta.remove(*key);
            }
        }
    }
    object
}

/// Every field where `after` (the dry run's result) differs from `before` (the live object),
/// both ways: fields set, changed or removed.
pub fn exact_differences(before: &Value, after: &Value) -> Vec<FieldDiff> {
    fn walk(path: String, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<FieldDiff>) {
        if before == after {
            return;
        }
        match (before, after) {
            (Some(Value::Object(old)), Some(Value::Object(new))) => {
                let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
                keys.sort();
                keys.dedup();
                for key in keys {
                    walk(field(&path, key), old.get(key), new.get(key), out);
                }
            }
            (Some(Value::Array(old)), Some(Value::Array(new))) if old.len() == new.len() => {
                for (i, (o, n)) in old.iter().zip(new).enumerate() {
                    walk(format!("{path}[{i}]"), Some(o), Some(n), out);
                }
            }
            _ => out.push(FieldDiff {
                lines: match (before, after) {
                    (Some(Value::String(old)), Some(Value::String(new)))
                        if old.contains('\n') || new.contains('\n') =>
                    {
                        line_changes(old, new)
                    }
                    _ => Vec::new(),
                },
                path,
                live: before.map(Value::to_string),
                desired: after.map_or_else(|| "(removed)".to_owned(), Value::to_string),
            }),
        }
    }
    let mut out = Vec::new();
    walk(
        String::new(),
        Some(&normalize(before.clone())),
        Some(&normalize(after.clone())),
        &mut out,
    );
    out
}

/// What the dry run of one object answered.
pub type DryRunResult = Result<Value, String>;

/// Rewrites `report` from the dry-run results (pure): per object the exact change and fields,
/// the restart reasons from the StatefulSet's exact change, and a note. `results` are keyed by
/// `Kind/name`; an error leaves the whole report local, with the reason in a note.
pub fn apply_results(
    report: &mut PlanReport,
    gathered: &Gathered,
    results: &BTreeMap<String, (OwnedKind, String, DryRunResult)>,
) {
    if let Some((object, error)) = results
        .iter()
        .find_map(|(object, (_, _, r))| r.as_ref().err().map(|e| (object.clone(), e.clone())))
    {
        report.notes.push(format!(
            "server-side dry run not possible ({object}: {error}); this is the local comparison \
             (the fields the operator sets, without the API server's defaults)"
        ));
        return;
    }
    let mut reasons = Vec::new();
    for plan in &mut report.objects {
        let Some((kind, name, Ok(after))) = results.get(&plan.object) else {
            continue;
        };
        if plan.change == "create" {
            continue;
        }
        let before = live_value(&gathered.observed.owned, *kind, name);
        let diff = exact_differences(&before, after);
        plan.change = if diff.is_empty() {
            "unchanged"
        } else {
            "update"
        };
        if *kind == OwnedKind::StatefulSet {
            reasons = restart_reasons(&diff);
        }
        plan.diff = diff;
    }
    report.restarts = if reasons.is_empty() {
        Vec::new()
    } else {
        restarting_pods(&gathered.observed)
    };
    report.restart_reasons = reasons;
    report.notes.push(EXACT_NOTE.to_owned());
}

/// Applies one object with `dryRun=All`; the stored result as JSON.
struct DryRun<'a> {
    client: &'a Client,
    namespace: &'a str,
    object: &'a DesiredObject,
}

impl<'a> KindVisitor for DryRun<'a> {
    type Output = Pin<Box<dyn Future<Output = Result<Value, kube::Error>> + Send + 'a>>;

    fn visit<K: OwnedResource>(self) -> Self::Output {
        Box::pin(async move {
            let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
            let name = self.object.metadata().name.clone().unwrap_or_default();
            let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
            let stored = api
                .patch(&name, &params, &Patch::Apply(self.object))
                .await?;
            Ok(serde_json::to_value(stored).unwrap_or(Value::Null))
        })
    }
}

/// Dry-runs every object of the cluster's plan and refines `report` with the results. Skipped
/// (with a note) for a cluster that does not exist yet: its objects' owner has no uid.
pub async fn refine(client: &Client, gathered: &Gathered, report: &mut PlanReport) {
    let observed = &gathered.observed;
    if observed.cluster.uid().is_none() {
        report.notes.push(
            "no server-side dry run: the objects' owner (the cluster) does not exist yet"
                .to_owned(),
        );
        return;
    }
    let namespace = observed.cluster.namespace().unwrap_or_default();
    let plan = database_operator_core::plan(observed);
    let mut results = BTreeMap::new();
    for planned in &plan.objects {
        let key = planned.object.key();
        let shown = format!("{}/{}", key.kind.as_str(), key.name);
        let result = key
            .kind
            .visit(DryRun {
                client,
                namespace: &namespace,
                object: &planned.object,
            })
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) => format!("{} {}", status.code, status.message),
                other => other.to_string(),
            });
        let failed = result.is_err();
        results.insert(shown, (key.kind, key.name, result));
        if failed {
            break;
        }
    }
    apply_results(report, gathered, &results);
}
