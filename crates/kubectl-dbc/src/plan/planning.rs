//! Plans one gathered cluster with the operator's own `plan()` and compares each desired
//! object with the live one (pure).

use super::*;

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
    let restarts = if reasons.is_empty() {
        Vec::new()
    } else {
        restarting_pods(observed)
    };
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
            .secret_changes
            .iter()
            .map(|s| match s {
                SecretChange::Create(secret) => format!(
                    "create Secret {} with generated credentials (never overwritten)",
                    secret.metadata.name.as_deref().unwrap_or_default()
                ),
                SecretChange::Restore(secret) => format!(
                    "create Secret {} again with the credentials the operator holds (never new ones)",
                    secret.metadata.name.as_deref().unwrap_or_default()
                ),
                SecretChange::Release { name, .. } => format!(
                    "release Secret {name}: drop its owner reference, keep it for the retained volumes"
                ),
            })
            .chain(plan.pod_actions.iter().map(|s| match s {
                PodAction::LabelPod { pod, role } => {
                    format!("label pod {pod} {}={}", labels::ROLE, role.as_str())
                }
                PodAction::SetInitialize { pod, allowed: true } => format!(
                    "label pod {pod} {}={} (the first primary may create the database)",
                    labels::INITIALIZE,
                    labels::INITIALIZE_ALLOWED
                ),
                PodAction::SetInitialize {
                    pod,
                    allowed: false,
                } => format!(
                    "label pod {pod} {}- (the cluster has run: no member creates a new database)",
                    labels::INITIALIZE
                ),
                PodAction::SetReseed {
                    pod,
                    token: Some(token),
                } => format!(
                    "label pod {pod} {}={token} (its data directory is discarded and copied from the primary again)",
                    labels::RESEED
                ),
                PodAction::SetReseed { pod, token: None } => {
                    format!("label pod {pod} {}- (reseeded)", labels::RESEED)
                }
                PodAction::ExpandVolume { claim, size } => format!(
                    "request {size} on PersistentVolumeClaim {claim} (the volume grows with its server running)"
                ),
            }))
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
        notes: gathered
            .notes
            .iter()
            .cloned()
            .chain(scale_down_note(observed))
            .collect(),
    }
}

/// What a scale-down that would remove the primary does first, which the plan cannot show: the
/// plugin reads no database, and the switchover starts from the members' facts.
fn scale_down_note(observed: &Observed) -> Option<String> {
    let cluster = &observed.cluster;
    let primary = cluster.status.as_ref()?.primary_pod.as_deref()?;
    let stays = u64::try_from(cluster.spec.replicas).unwrap_or(0);
    (ordinal(primary) >= stays).then(|| {
        format!(
            "spec.replicas {} leaves out the primary {primary}: the operator first switches over to the lowest-ordinal Ready member that stays (Switchover events), and the StatefulSet keeps {primary} until then",
            cluster.spec.replicas
        )
    })
}

/// The database pods, in the order the operator's roll restarts them: the replicas from the
/// highest ordinal down, then the primary (after a switchover), last.
pub(super) fn restarting_pods(observed: &Observed) -> Vec<String> {
    let mut pods: Vec<(bool, String)> = observed
        .pods
        .iter()
        .filter(|p| {
            p.labels
                .get("app.kubernetes.io/component")
                .map(String::as_str)
                == Some(labels::COMPONENT_DATABASE)
        })
        .map(|p| {
            let primary = p.labels.get(labels::ROLE).map(String::as_str) == Some("primary");
            (primary, p.name.clone())
        })
        .collect();
    pods.sort_by_key(|(primary, p)| (*primary, std::cmp::Reverse(ordinal(p))));
    pods.into_iter().map(|(_, p)| p).collect()
}

pub(super) fn phase_str(phase: &database_operator_api::Phase) -> String {
    match serde_json::to_value(phase) {
        Ok(Value::String(s)) => s,
        _ => format!("{phase:?}"),
    }
}

pub(super) fn live_value(owned: &OwnedObjects, kind: OwnedKind, name: &str) -> Value {
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
