//! Shared fixtures for the core tests: clusters from the examples, an `Observed` builder, and a
//! small simulation of the API server and the StatefulSet controller to carry a plan out.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use database_operator_api::FINALIZER;
use database_operator_api::{DatabaseCluster, validate::parse_cluster};
use database_operator_core::credentials::{OperatorSecretState, SecretChange};
use database_operator_core::render::{labels, quantity};
use database_operator_core::{
    Change, DesiredObject, FinalizerChange, KindVisitor, MemberPod, ObjectVisitor, Observed,
    OperatorConfig, OwnedKind, OwnedObjects, OwnedResource, Plan, PodAction, SecretState,
};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

/// The fixed "now" of the fixtures.
pub const NOW: &str = "2026-03-01T12:00:00Z";
/// Uid of every fixture cluster.
pub const UID: &str = "6b3a1f2e-0c4d-4e5f-8a9b-1c2d3e4f5a6b";

/// Path of a file relative to the workspace root.
pub fn workspace_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The DatabaseCluster of an example manifest, as the API server would return it (uid,
/// generation, creation time).
pub fn example(rel: &str) -> DatabaseCluster {
    let text =
        std::fs::read_to_string(workspace_file(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let doc = docs
        .into_iter()
        .find(|d| d["kind"] == "DatabaseCluster")
        .expect("a DatabaseCluster");
    stored(doc)
}

/// A cluster from JSON, with the fields the API server adds.
pub fn stored(mut doc: Value) -> DatabaseCluster {
    doc["metadata"]["uid"] = json!(UID);
    doc["metadata"]["generation"] = json!(1);
    doc["metadata"]["creationTimestamp"] = json!("2026-03-01T11:00:00Z");
    if doc["metadata"]["namespace"].is_null() {
        doc["metadata"]["namespace"] = json!("default");
    }
    parse_cluster(doc).unwrap_or_else(|e| panic!("{e}"))
}

/// The seed's MySQL manifest.
pub fn mysql() -> DatabaseCluster {
    example("examples/mysql.yaml")
}

/// The PostgreSQL example.
pub fn postgresql() -> DatabaseCluster {
    example("examples/postgresql.yaml")
}

/// A three-member MariaDB cluster without backups.
pub fn mariadb() -> DatabaseCluster {
    stored(json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "maria", "namespace": "shop"},
        "spec": {"engine": "mariadb", "version": "10.11.19", "replicas": 3,
                 "storage": {"size": "5Gi"},
                 "passwordSecretRef": {"name": "maria-root", "key": "password"}}
    }))
}

/// A single-member MySQL cluster without backups.
pub fn single() -> DatabaseCluster {
    stored(json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "solo", "namespace": "dev"},
        "spec": {"engine": "mysql", "version": "8.4.0", "replicas": 1,
                 "storage": {"size": "5Gi"},
                 "passwordSecretRef": {"name": "solo-root", "key": "password"}}
    }))
}

/// A MySQL cluster with explicit resources written in non-canonical spellings.
pub fn with_resources() -> DatabaseCluster {
    stored(json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "sized", "namespace": "prod"},
        "spec": {"engine": "mysql", "version": "8.4.7", "replicas": 2,
                 "storage": {"size": "1024Gi", "storageClassName": "premium"},
                 "resources": {"requests": {"cpu": "1.5", "memory": "4096Mi"},
                               "limits": {"cpu": "4000m", "memory": "4Gi"}},
                 "passwordSecretRef": {"name": "sized-root", "key": "root-password"}}
    }))
}

/// An `Observed` with nothing but the cluster: the first pass after `kubectl apply`.
pub fn observed(cluster: DatabaseCluster) -> Observed {
    Observed {
        cluster,
        owned: OwnedObjects::default(),
        pods: Vec::new(),
        secret: SecretState::Present {
            fingerprint: "fp-1".into(),
        },
        now: NOW.parse().unwrap(),
        config: OperatorConfig::default(),
        known_matches: BTreeMap::new(),
        cleanup_job: None,
        backup_jobs: Vec::new(),
        member_facts: Default::default(),
        operator_secret: OperatorSecretState::Missing,
        secret_unkeyed_fingerprint: None,
        password_outcome: None,
        primary_lease: None,
        volumes: Vec::new(),
        tls: Default::default(),
    }
}

/// How the simulated members behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pods {
    /// Every member pod becomes Ready.
    Ready,
    /// Member pods exist but none is Ready.
    NotReady,
    /// Only the first `n` ordinals become Ready.
    ReadyBelow(i32),
}

/// Carries `plan` out against `observed` the way the cluster would: the API server stores the
/// written objects with its defaults and bookkeeping, deletes what was deleted, applies the pod
/// labels, patches the status; the StatefulSet controller creates or replaces member pods
/// (new pods carry the template's labels and no role label).
pub fn apply(observed: &Observed, plan: &Plan, pods: Pods) -> Observed {
    let mut next = observed.clone();
    // What the runtime keeps between passes (only comparisons found unchanged).
    next.known_matches = plan.known_matches(&observed.owned);
    // resourceVersions only grow, across all objects, as on a real API server (a hint must
    // never meet a new object with an old version).
    let mut counter = observed
        .owned
        .keys()
        .iter()
        .filter_map(|(key, _)| observed.owned.resource_version(key)?.parse::<u64>().ok())
        .max()
        .unwrap_or(100);
    for planned in &plan.objects {
        if planned.change == Change::Unchanged {
            continue;
        }
        counter += 1;
        store(&mut next.owned, &planned.object, counter);
    }
    for key in &plan.delete {
        struct Remove<'a>(&'a mut OwnedObjects, &'a str);
        impl KindVisitor for Remove<'_> {
            type Output = ();
            fn visit<K: OwnedResource>(self) {
                K::items_mut(self.0).retain(|o| o.metadata().name.as_deref() != Some(self.1));
            }
        }
        key.kind.visit(Remove(&mut next.owned, &key.name));
    }
    for step in &plan.secret_changes {
        apply_secret_step(&mut next.operator_secret, step);
    }
    if let Some(change) = &plan.tls_change {
        apply_tls_change(&mut next.tls, change, observed.now);
    }
    for step in &plan.pod_actions {
        match step {
            PodAction::ExpandVolume { claim, size } => {
                let volume = next
                    .volumes
                    .iter_mut()
                    .find(|v| v.claim == *claim)
                    .expect("grown claim exists");
                volume.requested = Some(size.clone());
            }
            PodAction::LabelPod { pod, role } => {
                let pod = next
                    .pods
                    .iter_mut()
                    .find(|p| p.name == *pod)
                    .expect("labelled pod exists");
                pod.labels.insert(labels::ROLE.into(), role.as_str().into());
            }
            PodAction::SetInitialize { pod, allowed } => {
                let pod = next
                    .pods
                    .iter_mut()
                    .find(|p| p.name == *pod)
                    .expect("labelled pod exists");
                if *allowed {
                    pod.labels
                        .insert(labels::INITIALIZE.into(), labels::INITIALIZE_ALLOWED.into());
                } else {
                    pod.labels.remove(labels::INITIALIZE);
                }
            }
            PodAction::SetReseed { pod, token } => {
                let pod = next
                    .pods
                    .iter_mut()
                    .find(|p| p.name == *pod)
                    .expect("labelled pod exists");
                match token {
                    Some(token) => {
                        pod.labels.insert(labels::RESEED.into(), token.clone());
                    }
                    None => {
                        pod.labels.remove(labels::RESEED);
                    }
                }
            }
        }
    }
    match plan.finalizer {
        FinalizerChange::Keep => {}
        FinalizerChange::Add => next
            .cluster
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(FINALIZER.to_owned()),
        FinalizerChange::Remove => next
            .cluster
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .retain(|f| f != FINALIZER),
    }
    next.cluster.status = Some(plan.status.clone());
    run_statefulset_controller(&mut next, pods);
    next
}

/// The operator Secret after `step`, as the API server would keep it.
pub fn apply_secret_step(state: &mut OperatorSecretState, step: &SecretChange) {
    match step {
        SecretChange::Create(secret) | SecretChange::Restore(secret) => {
            if matches!(
                state,
                OperatorSecretState::Missing | OperatorSecretState::MissingRemembered
            ) {
                *state = OperatorSecretState::Present {
                    owner_uids: secret
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .map(|r| r.uid.clone())
                        .collect(),
                };
            }
        }
        SecretChange::Release { owner_uid, .. } => {
            if let OperatorSecretState::Present { owner_uids } = state {
                owner_uids.retain(|u| u != owner_uid);
            }
        }
    }
}

/// Stores a desired object as the API server would return it.
fn store(owned: &mut OwnedObjects, object: &DesiredObject, counter: u64) {
    let mut value = object.to_value();
    server_defaults(&mut value, object.kind(), counter);
    struct Put<'a>(&'a mut OwnedObjects, Value);
    impl ObjectVisitor<'_> for Put<'_> {
        type Output = ();
        fn visit<K: OwnedResource>(self, desired: &K) {
            let name = desired.metadata().name.clone();
            let item: K = serde_json::from_value(self.1).expect("stored object deserializes");
            let items = K::items_mut(self.0);
            match items.iter_mut().find(|o| o.metadata().name == name) {
                Some(slot) => *slot = item,
                None => items.push(item),
            }
        }
    }
    object.visit(Put(owned, value));
}

/// Adds what the API server adds: bookkeeping metadata, defaults, canonical quantities, status.
pub fn server_defaults(value: &mut Value, kind: OwnedKind, counter: u64) {
    let meta = &mut value["metadata"];
    meta["resourceVersion"] = json!(counter.to_string());
    meta["uid"] = json!(format!("00000000-0000-0000-0000-{counter:012}"));
    meta["creationTimestamp"] = json!("2026-03-01T11:00:01Z");
    meta["generation"] = json!(1);
    meta["managedFields"] = json!([{"manager": "database-operator", "operation": "Apply"}]);
    canonicalize_quantities(value, false);
    match kind {
        OwnedKind::StatefulSet => {
            let spec = &mut value["spec"];
            spec["revisionHistoryLimit"] = json!(10);
            pod_defaults(&mut spec["template"]["spec"]);
            for claim in spec["volumeClaimTemplates"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                claim["apiVersion"] = json!("v1");
                claim["kind"] = json!("PersistentVolumeClaim");
                claim["spec"]["volumeMode"] = json!("Filesystem");
                claim["status"] = json!({"phase": "Pending"});
            }
            value["status"] = json!({"replicas": 0, "availableReplicas": 0});
        }
        OwnedKind::Service => {
            let spec = &mut value["spec"];
            if spec["clusterIP"].is_null() {
                spec["clusterIP"] = json!("10.96.0.10");
                spec["clusterIPs"] = json!(["10.96.0.10"]);
            }
            spec["sessionAffinity"] = json!("None");
            spec["ipFamilies"] = json!(["IPv4"]);
            spec["ipFamilyPolicy"] = json!("SingleStack");
            spec["internalTrafficPolicy"] = json!("Cluster");
            value["status"] = json!({"loadBalancer": {}});
        }
        OwnedKind::CronJob => {
            let spec = &mut value["spec"];
            spec["suspend"] = json!(false);
            pod_defaults(&mut spec["jobTemplate"]["spec"]["template"]["spec"]);
            spec["jobTemplate"]["spec"]["completionMode"] = json!("NonIndexed");
            value["status"] = json!({});
        }
        OwnedKind::PodDisruptionBudget => {
            value["status"] = json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0});
        }
        OwnedKind::Lease => {
            // The holder's agent renews it: a field the operator never sets.
            value["spec"]["renewTime"] = json!("2026-03-01T11:00:05.123456Z");
        }
        OwnedKind::ConfigMap
        | OwnedKind::ServiceAccount
        | OwnedKind::Role
        | OwnedKind::RoleBinding
        | OwnedKind::NetworkPolicy => {}
    }
}

fn pod_defaults(spec: &mut Value) {
    spec["dnsPolicy"] = json!("ClusterFirst");
    spec["schedulerName"] = json!("default-scheduler");
    if spec["restartPolicy"].is_null() {
        spec["restartPolicy"] = json!("Always");
    }
    for list in ["containers", "initContainers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            // Defaults, as the API server sets them: only where the object leaves them unset.
            if c["terminationMessagePath"].is_null() {
                c["terminationMessagePath"] = json!("/dev/termination-log");
            }
            if c["terminationMessagePolicy"].is_null() {
                c["terminationMessagePolicy"] = json!("File");
            }
            for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                if c[probe].is_object() {
                    c[probe]["successThreshold"] = json!(1);
                    c[probe]["initialDelaySeconds"] = json!(0);
                }
            }
            for env in c["env"].as_array_mut().into_iter().flatten() {
                if env["valueFrom"]["fieldRef"].is_object() {
                    env["valueFrom"]["fieldRef"]["apiVersion"] = json!("v1");
                }
            }
        }
    }
    for v in spec["volumes"].as_array_mut().into_iter().flatten() {
        if v["configMap"].is_object() {
            v["configMap"]["defaultMode"] = json!(420);
        }
        if v["downwardAPI"].is_object() {
            v["downwardAPI"]["defaultMode"] = json!(420);
        }
    }
}

/// Rewrites every quantity under `resources` and `requests` the way the API server stores it.
fn canonicalize_quantities(value: &mut Value, in_quantities: bool) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                let quantities = matches!(key.as_str(), "requests" | "limits");
                if in_quantities && let Value::String(s) = v {
                    *s = quantity::canonical(s);
                }
                canonicalize_quantities(v, quantities);
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| canonicalize_quantities(v, false)),
        _ => {}
    }
}

/// The StatefulSet controller, instantly: one pod per ordinal below `replicas`, replaced when
/// its template changed (losing the role label), removed above `replicas`.
fn run_statefulset_controller(observed: &mut Observed, pods: Pods) {
    let name = observed.cluster.metadata.name.clone().unwrap();
    let Some(sts) = observed.owned.stateful_set(&name).cloned() else {
        return;
    };
    let replicas = sts.spec.replicas.unwrap_or(1);
    let template = sts.spec.template.clone();
    let revision = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        serde_json::to_string(&template).unwrap().hash(&mut hasher);
        format!("{:x}", hasher.finish())
    };
    observed.pods.retain(|p| {
        let ordinal: i32 = p.name.rsplit('-').next().unwrap().parse().unwrap();
        ordinal < replicas
    });
    for ordinal in 0..replicas {
        let pod_name = format!("{name}-{ordinal}");
        let ready = match pods {
            Pods::Ready => true,
            Pods::NotReady => false,
            Pods::ReadyBelow(n) => ordinal < n,
        };
        let partition = sts
            .spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0);
        let existing = observed.pods.iter_mut().find(|p| p.name == pod_name);
        match existing {
            // Below the partition a pod keeps the template it has.
            Some(pod)
                if pod.labels.get("controller-revision-hash") == Some(&revision)
                    || ordinal < partition =>
            {
                pod.ready = ready;
            }
            other => {
                let mut labels = template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default();
                labels.insert("controller-revision-hash".into(), revision.clone());
                let pod = MemberPod::from_pod(&Pod {
                    metadata: ObjectMeta {
                        name: Some(pod_name.clone()),
                        namespace: observed.cluster.metadata.namespace.clone(),
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    },
                    spec: template.spec.clone(),
                    status: Some(pod_status(ready)),
                });
                match other {
                    Some(slot) => *slot = pod,
                    None => observed.pods.push(pod),
                }
            }
        }
    }
    observed.pods.sort_by(|a, b| a.name.cmp(&b.name));
}

/// A pod status with the Ready condition.
pub fn pod_status(ready: bool) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    }
}

/// Plans, carries out and observes until a plan is a no-op (at most `rounds` plans); returns
/// the last observed state and every plan made.
pub fn converge(start: Observed, pods: Pods, rounds: usize) -> (Observed, Vec<Plan>) {
    let mut observed = start;
    let mut plans = Vec::new();
    for _ in 0..rounds {
        let plan = database_operator_core::plan(&observed);
        let done = plan.is_noop() && plan.events.is_empty();
        observed = apply(&observed, &plan, pods);
        plans.push(plan);
        if done {
            break;
        }
    }
    (observed, plans)
}

/// What the runtime leaves after a TLS change: the Secrets it wrote, as the cache then shows
/// them (a new authority gets a new fingerprint; certificates live their full life from `now`).
pub fn apply_tls_change(
    tls: &mut database_operator_core::tls::TlsObserved,
    change: &database_operator_core::tls::TlsChange,
    now: k8s_openapi::jiff::Timestamp,
) {
    use database_operator_core::tls::{self, CertSighting};
    let until = |seconds: i64| {
        k8s_openapi::jiff::Timestamp::from_second(now.as_second() + seconds).unwrap()
    };
    if change.new_ca.is_some() {
        let generation = tls.ca.as_ref().map_or(0, |c| c.ca_sha256.len());
        tls.ca = Some(CertSighting {
            not_after: until(tls::CA_LIFETIME_SECONDS),
            ca_sha256: format!("ca-{generation}"),
            names: Vec::new(),
            owned: true,
            source_version: None,
            not_before: None,
        });
    }
    let ca = tls
        .ca
        .as_ref()
        .map(|c| c.ca_sha256.clone())
        .unwrap_or_default();
    if change.server.is_some() {
        tls.server = Some(CertSighting {
            not_after: until(change.server_lifetime_seconds),
            ca_sha256: ca.clone(),
            names: change.names.clone(),
            owned: true,
            source_version: None,
            not_before: None,
        });
    }
    if change.publish.is_some() {
        tls.published = Some(CertSighting {
            not_after: until(tls::CA_LIFETIME_SECONDS),
            ca_sha256: ca,
            names: Vec::new(),
            owned: true,
            source_version: None,
            not_before: None,
        });
    }
}

/// A steady, running cluster: converged with every pod ready.
pub fn running(cluster: DatabaseCluster) -> Observed {
    let (observed, plans) = converge(observed(cluster), Pods::Ready, 6);
    assert!(
        plans.last().unwrap().is_noop(),
        "did not converge: {:#?}",
        plans.last()
    );
    observed
}

/// The desired object of `kind` named `name` in `plan`, as JSON.
pub fn object(plan: &Plan, kind: OwnedKind, name: &str) -> Value {
    plan.objects
        .iter()
        .find(|o| o.object.kind() == kind && o.object.key().name == name)
        .map(|o| o.object.to_value())
        .unwrap_or_else(|| panic!("no {kind:?} {name} in the plan"))
}

/// Kind/name of every object in the plan with its change.
pub fn summary(plan: &Plan) -> Vec<String> {
    plan.objects
        .iter()
        .map(|o| {
            format!(
                "{:?} {} {:?}",
                o.object.kind(),
                o.object.key().name,
                o.change
            )
        })
        .collect()
}

/// The reasons of the plan's events.
pub fn reasons(plan: &Plan) -> Vec<&str> {
    plan.events.iter().map(|e| e.reason.as_str()).collect()
}

/// A member pod named `name` with the given role label and readiness, running `version`.
pub fn pod(name: &str, role: Option<&str>, ready: bool, version: &str) -> MemberPod {
    let mut labels = BTreeMap::from([(labels::VERSION.to_owned(), version.to_owned())]);
    if let Some(role) = role {
        labels.insert(labels::ROLE.into(), role.into());
    }
    MemberPod {
        name: name.into(),
        labels,
        ready,
        ..MemberPod::default()
    }
}
