//! `kubectl dbc plan`: what the operator would do with a cluster, without doing it.
//!
//! [`fetch_and_plan`] reads what the operator's reconcile reads (IO, reads only): the cluster,
//! the objects it owns looked up by the names the core gives them and kept when the cluster is
//! their controller (as the operator's caches do), the pods labelled with the cluster, and the
//! password Secret's fingerprint computed by the operator's own function. [`report`] then runs
//! the same [`database_operator_core::plan()`] the operator runs and compares each desired
//! object with the live one (pure, snapshot-tested); [`render_all`] prints it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use anyhow::Context as _;
use database_operator_api::DatabaseCluster;
use database_operator_core::diff::is_subset;
use database_operator_core::render::labels;
use database_operator_core::{
    Change, EventType, KindVisitor, MemberPod, Observed, OperatorConfig, OwnedKind, OwnedObjects,
    OwnedResource, SecretState, Step,
};
use database_operator_runtime::offline::read_clusters;
use database_operator_runtime::secrets::state_of;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use crate::term::{Colour, Style, WIDTH, truncate};

/// What to plan.
#[derive(Debug)]
pub enum Desired {
    /// The live cluster of this name, as it is.
    Live(String),
    /// The clusters of a manifest, against the live objects.
    File {
        /// The manifest.
        text: String,
        /// Its name, for messages.
        source: String,
    },
}

/// What was read for one cluster, ready to plan.
#[derive(Clone, Debug)]
pub struct Gathered {
    /// What the core gets, as the operator would gather it.
    pub observed: Observed,
    /// Where the desired spec comes from (`live` or the file name).
    pub source: String,
    /// Things the reader should know about how this plan was made.
    pub notes: Vec<String>,
}

/// Reads and plans every cluster `desired` names.
pub async fn fetch_and_plan(
    client: &Client,
    namespace: &str,
    desired: Desired,
    config: &OperatorConfig,
) -> anyhow::Result<Vec<PlanReport>> {
    let (clusters, source) = match desired {
        Desired::Live(name) => {
            let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), namespace);
            let Some(cluster) = api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading DatabaseCluster {namespace}/{name}"))?
            else {
                anyhow::bail!(
                    "DatabaseCluster {namespace}/{name} not found: `kubectl get dbc -n \
                     {namespace}` lists the clusters there; use -n for another namespace, or \
                     `plan -f <file>` for a cluster not created yet"
                );
            };
            (vec![cluster], "live".to_owned())
        }
        Desired::File { text, source } => (read_clusters(&text, &source)?, source),
    };
    let mut reports = Vec::new();
    for cluster in clusters {
        let gathered = gather(client, namespace, cluster, &source, config).await?;
        reports.push(report(&gathered));
    }
    Ok(reports)
}

async fn gather(
    client: &Client,
    default_namespace: &str,
    mut wanted: DatabaseCluster,
    source: &str,
    config: &OperatorConfig,
) -> anyhow::Result<Gathered> {
    let namespace = wanted
        .namespace()
        .unwrap_or_else(|| default_namespace.to_owned());
    let name = wanted.name_any();
    wanted.metadata.namespace = Some(namespace.clone());
    let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), &namespace);
    let live = api
        .get_opt(&name)
        .await
        .with_context(|| format!("reading DatabaseCluster {namespace}/{name}"))?;
    let mut notes = Vec::new();
    let exists = live.is_some();
    let cluster = match live {
        Some(mut live) => {
            if source != "live" && spec_differs(&live, &wanted) {
                // The API server bumps the generation with a new spec; the operator validates a
                // spec whose generation it has not observed.
                live.metadata.generation = Some(live.metadata.generation.unwrap_or(0) + 1);
                live.spec = wanted.spec;
            }
            live
        }
        None => {
            notes.push(format!(
                "{namespace}/{name} does not exist yet: every object would be created"
            ));
            wanted.metadata.generation = Some(1);
            wanted.status = None;
            wanted
        }
    };
    let uid = cluster.uid().unwrap_or_default();
    let owned = if uid.is_empty() {
        OwnedObjects::default()
    } else {
        owned_objects(client, &namespace, &name, &uid).await?
    };
    let pods: Vec<MemberPod> = if exists {
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let mut pods: Vec<MemberPod> = api
            .list(&ListParams::default().labels(&format!("{}={name}", labels::CLUSTER)))
            .await
            .with_context(|| format!("listing the pods of {namespace}/{name}"))?
            .items
            .iter()
            .map(MemberPod::from_pod)
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        pods
    } else {
        Vec::new()
    };
    let secret = secret_state(client, &namespace, &cluster, &owned, &mut notes).await?;
    Ok(Gathered {
        observed: Observed {
            cluster,
            owned,
            pods,
            secret,
            now: Timestamp::now(),
            config: config.clone(),
            known_matches: BTreeMap::new(),
            cleanup_job: None,
            // The plugin talks to no database: the plan is the operator's without member facts
            // (no failover step is planned from it).
            member_facts: BTreeMap::new(),
        },
        source: source.to_owned(),
        notes,
    })
}

fn spec_differs(live: &DatabaseCluster, wanted: &DatabaseCluster) -> bool {
    serde_json::to_value(&live.spec).ok() != serde_json::to_value(&wanted.spec).ok()
}

/// The password Secret as the operator sees it: its fingerprint computed by the operator's own
/// function. A Secret this user may not read falls back to the fingerprint the live
/// StatefulSet carries (a changed password is then not seen), and says so.
async fn secret_state(
    client: &Client,
    namespace: &str,
    cluster: &DatabaseCluster,
    owned: &OwnedObjects,
    notes: &mut Vec<String>,
) -> anyhow::Result<SecretState> {
    let reference = &cluster.spec.password_secret_ref;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(&reference.name).await {
        Ok(Some(secret)) => Ok(state_of(&secret, &reference.key)),
        Ok(None) => Ok(SecretState::Missing),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let live = owned
                .stateful_set(&cluster.name_any())
                .and_then(|s| s.spec.template.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(labels::PASSWORD_FINGERPRINT))
                .cloned();
            notes.push(format!(
                "Secret {namespace}/{} is not readable with these credentials: the password is \
                 assumed unchanged (a new password would also restart the pods)",
                reference.name
            ));
            Ok(SecretState::Present {
                fingerprint: live.unwrap_or_else(|| {
                    database_operator_runtime::offline::PLACEHOLDER_FINGERPRINT.to_owned()
                }),
            })
        }
        Err(e) => Err(e).with_context(|| format!("reading Secret {namespace}/{}", reference.name)),
    }
}

type Insert = Box<dyn FnOnce(&mut OwnedObjects) + Send>;

/// Reads the objects of one kind by the names the core gives them.
struct Fetch<'a> {
    client: &'a Client,
    namespace: &'a str,
    cluster: &'a str,
    uid: &'a str,
}

impl<'a> KindVisitor for Fetch<'a> {
    type Output = Pin<Box<dyn Future<Output = anyhow::Result<Insert>> + Send + 'a>>;

    fn visit<K: OwnedResource>(self) -> Self::Output {
        Box::pin(async move {
            let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
            let mut found = Vec::new();
            for name in K::names(self.cluster) {
                let object = api
                    .get_opt(&name)
                    .await
                    .with_context(|| format!("reading {} {}/{name}", K::KIND, self.namespace))?;
                if let Some(object) = object.filter(|o| {
                    o.owner_references()
                        .iter()
                        .any(|r| r.uid == self.uid && r.controller == Some(true))
                }) {
                    found.push(object);
                }
            }
            Ok(Box::new(move |owned: &mut OwnedObjects| *K::items_mut(owned) = found) as Insert)
        })
    }
}

async fn owned_objects(
    client: &Client,
    namespace: &str,
    cluster: &str,
    uid: &str,
) -> anyhow::Result<OwnedObjects> {
    let mut owned = OwnedObjects::default();
    for kind in OwnedKind::all() {
        let insert = kind
            .visit(Fetch {
                client,
                namespace,
                cluster,
                uid,
            })
            .await?;
        insert(&mut owned);
    }
    Ok(owned)
}

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
    /// The pods that would restart, in the order the StatefulSet replaces them.
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
fn line_changes(live: &str, desired: &str) -> Vec<String> {
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

fn field(path: &str, key: &str) -> String {
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

fn ordinal(pod: &str) -> u64 {
    pod.rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

/// Why the pods would restart, from the StatefulSet's differences.
fn restart_reasons(diff: &[FieldDiff]) -> Vec<String> {
    let mut reasons = Vec::new();
    for d in diff.iter().filter(|d| d.path.starts_with("spec.template")) {
        let reason = if d.path.contains(labels::CONFIG_HASH) {
            "the configuration changed (config-hash annotation)".to_owned()
        } else if d.path.contains(labels::PASSWORD_FINGERPRINT) {
            "the password changed (password-fingerprint annotation)".to_owned()
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

/// Plans one gathered cluster and compares each desired object with the live one (pure).
pub fn report(gathered: &Gathered) -> PlanReport {
    let observed = &gathered.observed;
    let plan = database_operator_core::plan(observed);
    let name = observed.cluster.name_any();
    let namespace = observed.cluster.namespace().unwrap_or_default();
    let mut objects = Vec::new();
    let mut reasons = Vec::new();
    for planned in &plan.objects {
        let key = planned.object.key();
        let shown = format!("{}/{}", key.kind.as_str(), key.name);
        let (change, diff) = match planned.change {
            Change::Create => ("create", Vec::new()),
            Change::Unchanged => ("unchanged", Vec::new()),
            Change::Update => {
                let live = live_value(&observed.owned, key.kind, &key.name);
                let diff = differences(&planned.object.to_value(), &live);
                if key.kind == OwnedKind::StatefulSet {
                    reasons = restart_reasons(&diff);
                }
                ("update", diff)
            }
        };
        objects.push(ObjectPlan {
            object: shown,
            change,
            diff,
        });
    }
    let mut restarts: Vec<String> = if reasons.is_empty() {
        Vec::new()
    } else {
        observed
            .pods
            .iter()
            .filter(|p| {
                p.labels
                    .get("app.kubernetes.io/component")
                    .map(String::as_str)
                    == Some(labels::COMPONENT_DATABASE)
            })
            .map(|p| p.name.clone())
            .collect()
    };
    restarts.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
    let old_phase = observed
        .cluster
        .status
        .as_ref()
        .and_then(|s| s.phase.as_ref())
        .map(phase_str);
    let new_phase = plan.status.phase.as_ref().map(phase_str);
    let status = if !plan.status_changed {
        "unchanged".to_owned()
    } else if old_phase == new_phase {
        format!(
            "would be written (phase stays {})",
            new_phase.as_deref().unwrap_or("unset")
        )
    } else {
        format!(
            "would be written (phase {} -> {})",
            old_phase.as_deref().unwrap_or("unset"),
            new_phase.as_deref().unwrap_or("unset")
        )
    };
    PlanReport {
        cluster: format!("{namespace}/{name}"),
        source: gathered.source.clone(),
        objects,
        deletions: plan
            .delete
            .iter()
            .map(|k| format!("{}/{}", k.kind.as_str(), k.name))
            .collect(),
        steps: plan
            .steps
            .iter()
            .map(|s| match s {
                Step::LabelPod { pod, role } => {
                    format!("label pod {pod} {}={}", labels::ROLE, role.as_str())
                }
            })
            .collect(),
        restart_reasons: reasons,
        restarts,
        status,
        events: plan
            .events
            .iter()
            .map(|e| {
                let t = match e.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                };
                format!("{t} {}: {}", e.reason, e.message)
            })
            .collect(),
        notes: gathered.notes.clone(),
    }
}

fn phase_str(phase: &database_operator_api::Phase) -> String {
    match serde_json::to_value(phase) {
        Ok(Value::String(s)) => s,
        _ => format!("{phase:?}"),
    }
}

fn live_value(owned: &OwnedObjects, kind: OwnedKind, name: &str) -> Value {
    struct Get<'a>(&'a OwnedObjects, &'a str);
    impl KindVisitor for Get<'_> {
        type Output = Value;
        fn visit<K: OwnedResource>(self) -> Value {
            self.0
                .get::<K>(self.1)
                .and_then(|o| serde_json::to_value(o).ok())
                .unwrap_or(Value::Null)
        }
    }
    kind.visit(Get(owned, name))
}

/// One differing field: `path: live -> desired` on one line when it fits, else the path and
/// then the values; multi-line text as its changed lines.
fn render_field(d: &FieldDiff, style: Style) -> Vec<String> {
    let indent = "      ";
    let path = truncate(&d.path, WIDTH - indent.len() - 1);
    if !d.lines.is_empty() {
        let mut out = vec![format!("{indent}{path}:")];
        for line in &d.lines {
            let colour = if line.starts_with('+') {
                Colour::Green
            } else {
                Colour::Red
            };
            let shown = truncate(line, WIDTH - indent.len() - 2);
            out.push(format!("{indent}  {}", style.paint(&shown, Some(colour))));
        }
        return out;
    }
    let live = d.live.as_deref().unwrap_or("(not set)");
    let one_line = format!("{indent}{path}: {live} -> {}", d.desired);
    if one_line.chars().count() <= WIDTH {
        return vec![format!(
            "{indent}{path}: {} -> {}",
            style.paint(live, Some(Colour::Red)),
            style.paint(&d.desired, Some(Colour::Green))
        )];
    }
    let half = (WIDTH - indent.len() - 2 - 4) / 2;
    vec![
        format!("{indent}{path}:"),
        format!(
            "{indent}  {} -> {}",
            style.paint(&truncate(live, half), Some(Colour::Red)),
            style.paint(&truncate(&d.desired, half), Some(Colour::Green))
        ),
    ]
}

/// The plans as text, at most [`WIDTH`] columns a line (pure).
pub fn render_all(reports: &[PlanReport], style: Style) -> String {
    let mut out: Vec<String> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            out.push(String::new());
        }
        let from = if r.source == "live" {
            "the live spec".to_owned()
        } else {
            r.source.clone()
        };
        out.push(truncate(
            &format!(
                "{} {} (from {from}); read-only, nothing was changed",
                style.bold("Plan for DatabaseCluster"),
                r.cluster
            ),
            WIDTH,
        ));
        for note in &r.notes {
            out.push(truncate(&format!("  note: {note}"), WIDTH));
        }
        let width = r
            .objects
            .iter()
            .map(|o| o.object.chars().count())
            .max()
            .unwrap_or(0)
            .min(60);
        for o in &r.objects {
            let colour = match o.change {
                "create" => Some(Colour::Green),
                "update" => Some(Colour::Yellow),
                _ => Some(Colour::Dim),
            };
            let name = truncate(&o.object, width);
            let pad = " ".repeat(width - name.chars().count() + 2);
            out.push(format!("  {name}{pad}{}", style.paint(o.change, colour)));
            for d in &o.diff {
                out.extend(render_field(d, style));
            }
        }
        for d in &r.deletions {
            out.push(format!(
                "  {d}  {}",
                style.paint("delete", Some(Colour::Red))
            ));
        }
        for s in &r.steps {
            out.push(truncate(&format!("  step: {s}"), WIDTH));
        }
        if r.restarts.is_empty() {
            out.push("  pods that would restart: none".to_owned());
        } else {
            out.push(truncate(
                &format!(
                    "  pods that would restart, one at a time: {}",
                    r.restarts.join(", ")
                ),
                WIDTH,
            ));
            for reason in &r.restart_reasons {
                out.push(truncate(&format!("    because {reason}"), WIDTH));
            }
        }
        out.push(format!("  status: {}", r.status));
        for e in &r.events {
            out.push(truncate(&format!("  event: {e}"), WIDTH));
        }
        let count = |c: &str| r.objects.iter().filter(|o| o.change == c).count();
        out.push(format!(
            "  {} to create, {} to update, {} unchanged, {} to delete",
            count("create"),
            count("update"),
            count("unchanged"),
            r.deletions.len()
        ));
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests;
