//! Behaviour of `plan()`: phase transitions and events, zero writes in steady state, reverting
//! manual changes, roles, deletes, requeue, and every rendered field that comes from the spec.

mod common;

use std::time::Duration;

use common::{NOW, Pods, apply, object, observed, pod, reasons, running};
use database_operator_api::Engine;
use database_operator_api::conditions::{self, reasons as why};
use database_operator_api::upgrade::RollPhase;
use database_operator_api::{BackupCredentialsRef, BackupSpec, DatabaseClusterStatus, Phase};
use database_operator_core::credentials::{OperatorSecretState, SecretChange};
use database_operator_core::render::labels;
use database_operator_core::{
    Change, ClassExpansion, ContainerExit, DatabaseCommand, EventType, FinalizerChange,
    MemberFacts, MemberRole, MemberVolume, ObjectKey, Observed, OwnedKind, PasswordAction,
    PasswordOutcome, PasswordProblem, Plan, PodAction, SecretState, ServerRole, password, plan,
    settle,
};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

fn later(observed: &mut Observed, seconds: i64) {
    observed.now = observed
        .now
        .checked_add(SignedDuration::from_secs(seconds))
        .unwrap();
}

/// Edits the spec as `kubectl apply` would (the generation moves).
fn edit(observed: &mut Observed, f: impl FnOnce(&mut database_operator_api::DatabaseClusterSpec)) {
    f(&mut observed.cluster.spec);
    let generation = observed.cluster.metadata.generation.unwrap_or(1);
    observed.cluster.metadata.generation = Some(generation + 1);
}

fn condition<'a>(status: &'a DatabaseClusterStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn change(plan: &Plan, kind: OwnedKind, name: &str) -> Change {
    plan.objects
        .iter()
        .find(|o| o.object.kind() == kind && o.object.key().name == name)
        .map(|o| o.change)
        .unwrap_or_else(|| panic!("no {kind:?} {name}"))
}

fn set_ready(observed: &mut Observed, pod: &str, ready: bool) {
    let p = observed.pods.iter_mut().find(|p| p.name == pod).unwrap();
    p.ready = ready;
}

fn role_of(observed: &Observed, pod: &str) -> Option<String> {
    observed
        .pods
        .iter()
        .find(|p| p.name == pod)
        .and_then(|p| p.labels.get(labels::ROLE).cloned())
}

fn container<'a>(sts: &'a Value, name: &str) -> &'a Value {
    sts["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn init_container(sts: &Value) -> &Value {
    &sts["spec"]["template"]["spec"]["initContainers"][0]
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn env<'a>(c: &'a Value, name: &str) -> &'a Value {
    c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no env {name}"))
}

// ---------------------------------------------------------------------------------------------
// Phases and events.

#[test]
fn first_pass_is_initializing_and_creates_everything() {
    let p = plan(&observed(common::mysql()));
    // Initializing from the pass that creates the objects (its status is written after them):
    // no Pending that the next pass would overwrite milliseconds later.
    assert_eq!(p.status.phase, Some(Phase::Initializing));
    assert!(p.objects.iter().all(|o| o.change == Change::Create));
    assert!(p.delete.is_empty() && p.pod_actions.is_empty());
    assert!(p.status_changed);
    assert_eq!(p.status.observed_generation, Some(1));
    assert!(
        p.status
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(1))
    );
    assert_eq!(p.status.primary_pod.as_deref(), Some("my-mysql-0"));
    // Creating a cluster is told once, when it is ready (ClusterReady); its backup schedule
    // is in the spec and in status.nextBackupTime.
    assert!(reasons(&p).is_empty(), "{:?}", reasons(&p));
}

#[test]
fn objects_are_written_in_waves_configuration_statefulset_rest() {
    use database_operator_core::ApplyWave;
    let p = plan(&observed(common::mysql()));
    let keys = |wave| -> Vec<(OwnedKind, String)> {
        p.changed_objects_in(wave)
            .iter()
            .map(|o| (o.kind(), o.key().name))
            .collect()
    };
    // What the members mount, and the NetworkPolicy that guards them, before the StatefulSet
    // that starts them.
    assert_eq!(
        keys(ApplyWave::BeforeMembers),
        [
            (OwnedKind::ConfigMap, "my-mysql-config".to_owned()),
            (OwnedKind::NetworkPolicy, "my-mysql-access".to_owned())
        ]
    );
    assert_eq!(
        keys(ApplyWave::Members),
        [(OwnedKind::StatefulSet, "my-mysql".to_owned())]
    );
    let rest = keys(ApplyWave::AfterMembers);
    assert_eq!(rest.len(), 5, "{rest:?}");
    assert!(rest.iter().all(|(k, _)| matches!(
        k,
        OwnedKind::Service | OwnedKind::PodDisruptionBudget | OwnedKind::CronJob
    )));
    // The waves split the changed objects, nothing lost or doubled.
    let in_waves: usize = ApplyWave::ALL
        .iter()
        .map(|w| p.changed_objects_in(*w).len())
        .sum();
    assert_eq!(in_waves, p.changed_objects().count());
}

#[test]
fn a_new_statefulset_starts_its_members_in_parallel_an_existing_one_keeps_its_policy() {
    let p = plan(&observed(common::postgresql()));
    let sts = object(&p, OwnedKind::StatefulSet, "orders-db");
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");

    // A StatefulSet made by an earlier release (OrderedReady): the field is immutable, so it is
    // kept and nothing is written for it.
    let mut obs = running(common::postgresql());
    obs.known_matches.clear();
    for s in &mut obs.owned.stateful_sets {
        s.spec.pod_management_policy = Some("OrderedReady".into());
    }
    let p = plan(&obs);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "orders-db"),
        Change::Unchanged
    );
    let sts = object(&p, OwnedKind::StatefulSet, "orders-db");
    assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
    assert!(p.is_noop(), "{p:#?}");
}

#[test]
fn pods_not_ready_yet_is_initializing_without_events() {
    let first = observed(common::mysql());
    let p1 = plan(&first);
    let second = apply(&first, &p1, Pods::NotReady);
    let p2 = plan(&second);
    assert_eq!(p2.status.phase, Some(Phase::Initializing));
    assert_eq!(
        condition(&p2.status, conditions::READY).reason,
        why::NO_READY_REPLICAS
    );
    assert_eq!(condition(&p2.status, conditions::DEGRADED).status, "False");
    assert_eq!(p2.status.ready_replicas, 0);
    assert!(p2.events.is_empty(), "{:?}", p2.events);
    // The first pass already said what this one sees: no status write for the pods' arrival
    // (one patch per new cluster fewer; they still get their role labels).
    assert!(!p2.status_changed, "{:#?}", p2.status);
    assert_eq!(p2.status, p1.status);
    // Three role labels, and the first primary may initialize the new database.
    assert_eq!(p2.pod_actions.len(), 4, "{:?}", p2.pod_actions);
}

#[test]
fn members_coming_up_one_by_one_stay_initializing_without_warnings() {
    let first = observed(common::mysql());
    let p1 = plan(&first);
    let mut obs = apply(&first, &p1, Pods::NotReady);
    let mut plans = vec![plan(&obs)];
    // The primary comes up first, then the replicas: the normal course of a creation.
    for ready in [1, 2] {
        obs = apply(&obs, plans.last().unwrap(), Pods::NotReady);
        for ordinal in 0..ready {
            set_ready(&mut obs, &format!("my-mysql-{ordinal}"), true);
        }
        let p = plan(&obs);
        assert_eq!(p.status.phase, Some(Phase::Initializing), "{ready}/3 ready");
        assert_eq!(p.status.ready_replicas, ready);
        let ready_cond = condition(&p.status, conditions::READY);
        assert_eq!(ready_cond.reason, why::INSUFFICIENT_REPLICAS);
        assert!(
            ready_cond
                .message
                .contains(&format!("{ready}/3 replicas ready"))
        );
        assert_eq!(condition(&p.status, conditions::DEGRADED).status, "False");
        assert!(
            p.events.iter().all(|e| e.type_ == EventType::Normal),
            "a normal creation must not warn: {:?}",
            p.events
        );
        plans.push(p);
    }
    // Once it has been Running, losing a member is a degradation worth a Warning.
    let mut obs = running(common::mysql());
    set_ready(&mut obs, "my-mysql-2", false);
    let p = plan(&obs);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    assert_eq!(reasons(&p), ["ClusterDegraded"]);
    assert_eq!(p.events[0].type_, EventType::Warning);
}

#[test]
fn a_starting_clusters_progress_waits_for_its_members_to_settle() {
    let first = observed(common::mysql());
    let p1 = plan(&first);
    let mut obs = apply(&first, &p1, Pods::NotReady);
    let p2 = plan(&obs);
    obs = apply(&obs, &p2, Pods::NotReady);
    let written = obs.cluster.status.clone().unwrap();
    assert_eq!(written.ready_replicas, 0);
    // The primary turns Ready this very second: 1/3 is not written yet, the pass asks to run
    // again when the others have had settle::STARTUP_WAIT to follow it.
    set_ready(&mut obs, "my-mysql-0", true);
    let now = obs.now;
    obs.pods[0].ready_changed = Some(now);
    let held = plan(&obs);
    assert!(!held.status_changed, "{:#?}", held.status);
    assert_eq!(held.status, written);
    assert_eq!(held.requeue_after, Some(settle::STARTUP_WAIT));
    assert!(held.events.is_empty(), "{:?}", held.events);
    // Settled, but the others may still follow: held for the rest of the wait.
    later(&mut obs, 2);
    let still = plan(&obs);
    assert!(!still.status_changed, "{:#?}", still.status);
    assert_eq!(
        still.requeue_after,
        Some(settle::STARTUP_WAIT - Duration::from_secs(2))
    );
    // The others did not follow within the wait: 1/3 is written.
    later(&mut obs, 8);
    let settled = plan(&obs);
    assert!(settled.status_changed);
    assert_eq!(settled.status.ready_replicas, 1);
    assert_eq!(settled.status.phase, Some(Phase::Initializing));
    // The last member turning Ready is written at once, even while the others just changed:
    // Running is never held.
    let mut obs = apply(&obs, &settled, Pods::NotReady);
    for ordinal in 0..3 {
        set_ready(&mut obs, &format!("my-mysql-{ordinal}"), true);
        obs.pods[ordinal].ready_changed = Some(obs.now);
    }
    let running = plan(&obs);
    assert!(running.status_changed);
    assert_eq!(running.status.phase, Some(Phase::Running));
    assert_eq!(reasons(&running), ["ClusterReady"]);
    // Once it has run, a member going away is written at once too (Degraded).
    let mut obs = apply(&obs, &running, Pods::Ready);
    set_ready(&mut obs, "my-mysql-2", false);
    let now = obs.now;
    obs.pods[2].ready_changed = Some(now);
    let degraded = plan(&obs);
    assert!(degraded.status_changed);
    assert_eq!(degraded.status.phase, Some(Phase::Degraded));
}

#[test]
fn all_ready_is_running_with_one_ready_event() {
    let first = observed(common::mysql());
    let p1 = plan(&first);
    let p2 = plan(&apply(&first, &p1, Pods::Ready));
    assert_eq!(p2.status.phase, Some(Phase::Running));
    assert_eq!(p2.status.ready_replicas, 3);
    assert_eq!(p2.status.current_version.as_deref(), Some("8.4.7"));
    let ready = condition(&p2.status, conditions::READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", why::ALL_REPLICAS_READY)
    );
    assert!(
        ready.message.contains("3/3 replicas ready"),
        "{}",
        ready.message
    );
    assert_eq!(reasons(&p2), ["ClusterReady"]);
    assert_eq!(p2.events[0].type_, EventType::Normal);
}

#[test]
fn steady_state_writes_nothing_and_says_nothing() {
    for cluster in [
        common::mysql(),
        common::postgresql(),
        common::single(),
        common::with_resources(),
    ] {
        let mut steady = running(cluster);
        // An hour later nothing has changed either: times in the status stay where they were.
        later(&mut steady, 3600);
        let p = plan(&steady);
        assert!(p.is_noop(), "{:?}", common::summary(&p));
        assert!(p.events.is_empty());
        assert!(p.objects.iter().all(|o| o.change == Change::Unchanged));
    }
}

#[test]
fn a_known_match_is_trusted_only_at_the_same_resource_version_and_digest() {
    let steady = running(common::mysql());
    let sts_key = ObjectKey {
        kind: OwnedKind::StatefulSet,
        name: "my-mysql".into(),
    };
    let known = steady
        .known_matches
        .get(&sts_key)
        .expect("steady StatefulSet is known");
    assert_eq!(
        Some(known.resource_version.as_str()),
        steady.owned.resource_version(&sts_key)
    );
    let digest = plan(&steady)
        .objects
        .iter()
        .find(|o| o.object.key() == sts_key)
        .map(|o| o.digest);
    assert_eq!(digest, Some(known.digest));

    // Someone scales the StatefulSet: the API server gives it a new resourceVersion, the hint
    // no longer applies, and the drift is found.
    let mut drifted = steady.clone();
    let sts = &mut drifted.owned.stateful_sets[0];
    sts.spec.replicas = Some(7);
    sts.metadata.resource_version = Some("999999".into());
    assert_eq!(
        change(&plan(&drifted), OwnedKind::StatefulSet, "my-mysql"),
        Change::Update
    );

    // The spec changes: the desired object's digest moves, the hint no longer applies.
    let mut scaled = steady.clone();
    edit(&mut scaled, |s| s.replicas = 5);
    assert_eq!(
        change(&plan(&scaled), OwnedKind::StatefulSet, "my-mysql"),
        Change::Update
    );

    // Every replica goes unready: nothing is rewritten (the backup picks the first host that
    // answers, the replicas or the primary, when it runs).
    let mut unready = steady.clone();
    set_ready(&mut unready, "my-mysql-1", false);
    set_ready(&mut unready, "my-mysql-2", false);
    assert_eq!(
        change(&plan(&unready), OwnedKind::CronJob, "my-mysql-backup"),
        Change::Unchanged
    );
    assert_eq!(
        change(&plan(&unready), OwnedKind::StatefulSet, "my-mysql"),
        Change::Unchanged
    );

    // The hint is what answers otherwise: the same drift under the old resourceVersion (which
    // a real API server never produces) goes unnoticed, the observed object is not walked.
    let mut same_version = steady.clone();
    same_version.owned.stateful_sets[0].spec.replicas = Some(7);
    assert_eq!(
        change(&plan(&same_version), OwnedKind::StatefulSet, "my-mysql"),
        Change::Unchanged
    );
    same_version.known_matches.clear();
    assert_eq!(
        change(&plan(&same_version), OwnedKind::StatefulSet, "my-mysql"),
        Change::Update
    );
}

#[test]
fn every_planned_object_has_one_of_the_owned_object_names() {
    for cluster in [
        common::mysql(),
        common::postgresql(),
        common::single(),
        common::with_resources(),
    ] {
        let name = cluster.metadata.name.clone().unwrap();
        let known = database_operator_core::owned_object_keys(&name);
        let p = plan(&observed(cluster));
        assert!(!p.objects.is_empty());
        for o in &p.objects {
            assert!(
                known.contains(&o.object.key()),
                "{:?} is not in {known:?}",
                o.object.key()
            );
        }
    }
}

#[test]
fn growing_the_storage_rolls_nothing_the_wal_bound_follows_the_volumes_there_are() {
    let steady = running(common::postgresql());
    let mut grown = steady.clone();
    edit(&mut grown, |s| s.storage.size = Quantity("500Gi".into()));
    let p = plan(&grown);
    // The volumes did not grow: the configuration (the slots' bound is a share of the volume)
    // stays, so no member restarts.
    assert_eq!(
        change(&p, OwnedKind::ConfigMap, "orders-db-config"),
        Change::Unchanged
    );
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "orders-db"),
        Change::Unchanged
    );
    let conf = object(&p, OwnedKind::ConfigMap, "orders-db-config");
    let conf = conf["data"]["postgresql.conf"].as_str().unwrap();
    assert!(
        conf.contains("max_slot_wal_keep_size = 12800MB\n"),
        "{conf}"
    );
    // A new cluster of that size gets the bound of its volumes.
    let new = plan(&common::observed({
        let mut c = common::postgresql();
        c.spec.storage.size = Quantity("500Gi".into());
        c
    }));
    let conf = object(&new, OwnedKind::ConfigMap, "orders-db-config");
    let conf = conf["data"]["postgresql.conf"].as_str().unwrap();
    assert!(
        conf.contains("max_slot_wal_keep_size = 128000MB\n"),
        "{conf}"
    );
}

fn volumes_of(observed: &Observed, size: &str, expansion: ClassExpansion) -> Vec<MemberVolume> {
    let name = observed.cluster.metadata.name.clone().unwrap_or_default();
    (0..observed.cluster.spec.replicas)
        .map(|o| MemberVolume {
            claim: format!("data-{name}-{o}"),
            requested: Some(size.into()),
            capacity: Some(size.into()),
            storage_class: Some("standard".into()),
            expansion,
            ..MemberVolume::default()
        })
        .collect()
}

fn expansions(p: &Plan) -> Vec<(String, String)> {
    p.pod_actions
        .iter()
        .filter_map(|a| match a {
            PodAction::ExpandVolume { claim, size } => Some((claim.clone(), size.clone())),
            _ => None,
        })
        .collect()
}

fn storage_condition(status: &DatabaseClusterStatus) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "StorageResized")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[test]
fn growing_the_storage_grows_each_claim_without_restarting_anything() {
    let mut steady = running(common::mysql());
    steady.volumes = volumes_of(&steady, "20Gi", ClassExpansion::Allowed);
    let quiet = plan(&steady);
    assert!(expansions(&quiet).is_empty());
    assert_eq!(
        storage_condition(&quiet.status),
        None,
        "no condition before a growth"
    );
    let mut grown = steady.clone();
    edit(&mut grown, |s| s.storage.size = Quantity("50Gi".into()));
    let p = plan(&grown);
    // The templates of an existing StatefulSet cannot change, and nothing restarts: the
    // StatefulSet and the configuration are not written.
    for (kind, name) in [
        (OwnedKind::StatefulSet, "my-mysql"),
        (OwnedKind::ConfigMap, "my-mysql-config"),
    ] {
        assert_eq!(change(&p, kind, name), Change::Unchanged, "{name}");
    }
    assert_eq!(
        expansions(&p),
        (0..3)
            .map(|o| (format!("data-my-mysql-{o}"), "50Gi".to_owned()))
            .collect::<Vec<_>>()
    );
    assert!(p.database_commands.is_empty(), "{:?}", p.database_commands);
    assert_eq!(
        storage_condition(&p.status),
        Some(("False".into(), "Resizing".into()))
    );
    assert!(reasons(&p).contains(&"StorageExpanding"));
    // Asked: the next pass asks nothing again.
    let next = apply(&grown, &p, Pods::Ready);
    let again = plan(&next);
    assert!(expansions(&again).is_empty());
    assert!(!reasons(&again).contains(&"StorageExpanding"));
    // The volumes grew: True, said once.
    let mut done = apply(&next, &again, Pods::Ready);
    for v in &mut done.volumes {
        v.capacity = Some("50Gi".into());
    }
    let resized = plan(&done);
    assert_eq!(
        storage_condition(&resized.status),
        Some(("True".into(), "Resized".into()))
    );
    assert!(reasons(&resized).contains(&"StorageResized"));
    // A spec change that leaves the size alone asks for nothing.
    let mut scaled = steady.clone();
    edit(&mut scaled, |s| s.replicas = 5);
    assert!(expansions(&plan(&scaled)).is_empty());
}

#[test]
fn growing_the_storage_on_a_class_without_expansion_says_so_and_asks_nothing() {
    let mut steady = running(common::mysql());
    steady.volumes = volumes_of(&steady, "20Gi", ClassExpansion::NotAllowed);
    let mut grown = steady.clone();
    edit(&mut grown, |s| s.storage.size = Quantity("50Gi".into()));
    let p = plan(&grown);
    assert!(expansions(&p).is_empty());
    assert_eq!(
        storage_condition(&p.status),
        Some(("False".into(), "ExpansionNotSupported".into()))
    );
    let warning = p
        .events
        .iter()
        .find(|e| e.reason == "StorageResizeNotApplied")
        .expect("the growth is reported");
    assert_eq!(warning.type_, EventType::Warning);
    assert!(warning.message.contains("50Gi"), "{}", warning.message);
    assert!(
        warning.message.contains("data-my-mysql-0 (20Gi)"),
        "{}",
        warning.message
    );
    // Once: the next pass of the same generation says nothing more.
    let next = apply(&grown, &p, Pods::Ready);
    assert!(!reasons(&plan(&next)).contains(&"StorageResizeNotApplied"));
}

#[test]
fn a_replica_going_unready_degrades_and_moves_only_the_changed_conditions() {
    let mut steady = running(common::mysql());
    let before = steady.cluster.status.clone().unwrap();
    later(&mut steady, 600);
    set_ready(&mut steady, "my-mysql-2", false);
    let p = plan(&steady);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    assert_eq!(p.status.ready_replicas, 2);
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", why::INSUFFICIENT_REPLICAS)
    );
    assert!(
        degraded.message.contains("2/3 replicas ready"),
        "{}",
        degraded.message
    );
    let moved: Time = Time(steady.now);
    assert_eq!(degraded.last_transition_time, moved);
    assert_eq!(
        condition(&p.status, conditions::READY).last_transition_time,
        moved
    );
    // Upgrading did not change status: its transition time stays.
    assert_eq!(
        condition(&p.status, conditions::UPGRADING).last_transition_time,
        condition(&before, conditions::UPGRADING).last_transition_time
    );
    assert_eq!(reasons(&p), ["ClusterDegraded"]);
    assert_eq!(p.events[0].type_, EventType::Warning);
    // The next pass, still degraded, does not repeat the event.
    let next = apply(&steady, &p, Pods::ReadyBelow(2));
    let p2 = plan(&next);
    assert!(p2.events.is_empty(), "{:?}", p2.events);
    assert!(!p2.status_changed);
    // Recovery: Running again, announced once.
    let healed = apply(&next, &p2, Pods::Ready);
    let p3 = plan(&healed);
    assert_eq!(p3.status.phase, Some(Phase::Running));
    assert_eq!(reasons(&p3), ["ClusterReady"]);
}

#[test]
fn the_primary_not_ready_is_no_primary() {
    let mut steady = running(common::mysql());
    set_ready(&mut steady, "my-mysql-0", false);
    let p = plan(&steady);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    assert_eq!(
        condition(&p.status, conditions::DEGRADED).reason,
        why::NO_PRIMARY
    );
    assert!(
        condition(&p.status, conditions::DEGRADED)
            .message
            .contains("my-mysql-0")
    );
}

#[test]
fn no_member_ready_after_running_is_degraded_not_initializing() {
    let mut steady = running(common::mysql());
    for i in 0..3 {
        set_ready(&mut steady, &format!("my-mysql-{i}"), false);
    }
    let p = plan(&steady);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    assert_eq!(
        condition(&p.status, conditions::DEGRADED).reason,
        why::NO_READY_REPLICAS
    );
    assert_eq!(p.status.current_version.as_deref(), Some("8.4.7"));
}

#[test]
fn missing_secret_degrades_keeps_the_pods_and_renders_the_rest() {
    let mut steady = running(common::mysql());
    later(&mut steady, 60);
    steady.secret = SecretState::Missing;
    let p = plan(&steady);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::SECRET_NOT_FOUND);
    assert!(
        degraded.message.contains("default/mysql-root-password"),
        "{}",
        degraded.message
    );
    assert!(degraded.message.contains("password"));
    assert_eq!(reasons(&p), ["SecretNotFound"]);
    assert_eq!(p.events[0].type_, EventType::Warning);
    // The pods keep running: no roll, no write, no database step.
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Unchanged
    );
    assert!(p.database_commands.is_empty());
    let applied = condition(&p.status, conditions::PASSWORD_APPLIED);
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", why::SECRET_NOT_FOUND)
    );
    assert!(
        applied.message.contains("default/mysql-root-password"),
        "{}",
        applied.message
    );
    // What the database runs is still on record.
    assert_eq!(
        p.status.password.as_ref().unwrap().fingerprint.as_deref(),
        Some("fp-1")
    );
    assert_eq!(p.objects.len(), 8);
    assert!(p.delete.is_empty());
    // Once reported, no repeated event.
    let p2 = plan(&apply(&steady, &p, Pods::Ready));
    assert!(p2.events.is_empty());
}

#[test]
fn missing_key_names_secret_and_key() {
    let mut steady = running(common::postgresql());
    steady.secret = SecretState::KeyMissing;
    let p = plan(&steady);
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::SECRET_KEY_MISSING);
    assert!(
        degraded
            .message
            .contains("Secret default/orders-db-password has no key password"),
        "{}",
        degraded.message
    );
    assert_eq!(reasons(&p), ["SecretKeyMissing"]);
}

#[test]
fn an_unusable_password_is_refused_naming_secret_key_and_problem() {
    // A running cluster keeps its pods and its password.
    let mut steady = running(common::postgresql());
    steady.secret = SecretState::Unusable {
        problem: PasswordProblem::LineBreak,
    };
    let p = plan(&steady);
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::PASSWORD_UNUSABLE);
    assert!(
        degraded.message.contains(
            "Secret default/orders-db-password key password: the value holds a line break (CR or LF)"
        ),
        "{}",
        degraded.message
    );
    assert_eq!(reasons(&p), ["PasswordUnusable"]);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "orders-db"),
        Change::Unchanged
    );
    assert!(p.database_commands.is_empty());
    // A new cluster creates no pods that could not start with it.
    let mut first = observed(common::mysql());
    first.secret = SecretState::Unusable {
        problem: PasswordProblem::Nul,
    };
    let p = plan(&first);
    assert!(
        !p.objects
            .iter()
            .any(|o| o.object.kind() == OwnedKind::StatefulSet)
    );
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::PASSWORD_UNUSABLE);
    assert!(
        degraded.message.contains("holds a NUL byte"),
        "{}",
        degraded.message
    );
}

#[test]
fn no_statefulset_is_created_before_the_secret_exists() {
    let mut first = observed(common::mysql());
    first.secret = SecretState::Missing;
    let p = plan(&first);
    assert!(
        !p.objects
            .iter()
            .any(|o| o.object.kind() == OwnedKind::StatefulSet)
    );
    assert!(
        p.objects
            .iter()
            .any(|o| o.object.kind() == OwnedKind::Service)
    );
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    // The Secret appears: the StatefulSet is created, and the status records the password the
    // members will be initialized with (a fingerprint; the template does not carry it).
    let mut next = apply(&first, &p, Pods::Ready);
    next.secret = SecretState::Present {
        fingerprint: "fp-9".into(),
    };
    let p2 = plan(&next);
    assert_eq!(
        change(&p2, OwnedKind::StatefulSet, "my-mysql"),
        Change::Create
    );
    let sts = object(&p2, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        sts["spec"]["template"]["metadata"]["annotations"][labels::PASSWORD_FINGERPRINT],
        Value::Null
    );
    let password = p2.status.password.as_ref().unwrap();
    assert_eq!(password.fingerprint.as_deref(), Some("fp-9"));
    assert_eq!(password.applied_at.as_ref().map(|t| t.0), Some(next.now));
    assert_eq!(
        condition(&p2.status, conditions::PASSWORD_APPLIED).reason,
        why::APPLIED
    );
}

#[test]
fn a_new_cluster_waiting_for_its_secret_then_starts_without_warnings() {
    let mut first = observed(common::mysql());
    first.secret = SecretState::Missing;
    let p = plan(&first);
    assert_eq!(reasons(&p)[0], "SecretNotFound");
    let mut next = apply(&first, &p, Pods::NotReady);
    next.secret = SecretState::Present {
        fingerprint: "fp-1".into(),
    };
    let p = plan(&next);
    // The StatefulSet is created now; its first member comes up.
    let mut next = apply(&next, &p, Pods::ReadyBelow(1));
    let p = plan(&next);
    assert_eq!(p.status.phase, Some(Phase::Initializing));
    assert!(
        p.events.iter().all(|e| e.type_ == EventType::Normal),
        "{:?}",
        p.events
    );
    next = apply(&next, &p, Pods::Ready);
    let p = plan(&next);
    assert_eq!(p.status.phase, Some(Phase::Running));
    assert_eq!(reasons(&p), ["ClusterReady"]);
}

#[test]
fn a_cluster_running_a_retired_version_keeps_being_reconciled_a_new_one_is_refused() {
    let mut cluster = common::mysql();
    cluster.spec.version = "8.0.36".into();
    // New (never ran): refused like any unsupported version.
    let p = plan(&observed(cluster.clone()));
    assert!(p.objects.is_empty(), "nothing is created");
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::INVALID_SPEC);
    assert!(
        degraded.message.contains("8.0.36 is retired"),
        "{}",
        degraded.message
    );

    // Already running it: reconciled as before.
    cluster.status = Some(DatabaseClusterStatus {
        current_version: Some("8.0.36".into()),
        phase: Some(Phase::Running),
        ..DatabaseClusterStatus::default()
    });
    let mut ran = observed(cluster);
    ran.operator_secret = OperatorSecretState::Present {
        owner_uids: Vec::new(),
    };
    let p = plan(&ran);
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        container(&sts, "mysql")["image"],
        "docker.io/library/mysql:8.0.36"
    );
    assert_ne!(
        condition(&p.status, conditions::DEGRADED).reason,
        why::INVALID_SPEC
    );
}

#[test]
fn invalid_spec_changes_nothing_and_warns_once() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.version = "5.7.44".into());
    let p = plan(&steady);
    assert!(p.objects.is_empty() && p.delete.is_empty() && p.pod_actions.is_empty());
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", why::INVALID_SPEC)
    );
    assert!(
        degraded.message.contains("spec.version"),
        "{}",
        degraded.message
    );
    assert_eq!(
        condition(&p.status, conditions::READY).reason,
        why::INVALID_SPEC
    );
    assert_eq!(reasons(&p), ["InvalidSpec"]);
    assert_eq!(p.status.observed_generation, Some(2));
    let again = apply(&steady, &p, Pods::Ready);
    let p2 = plan(&again);
    assert!(p2.events.is_empty() && !p2.status_changed);
}

#[test]
fn the_operators_scheduling_policy_refuses_what_it_does_not_allow() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| {
        s.scheduling = Some(database_operator_api::SchedulingSpec {
            priority_class_name: Some("system-node-critical".into()),
            ..database_operator_api::SchedulingSpec::default()
        });
    });
    // The default policy: the reserved system-* classes are refused, nothing is written.
    let p = plan(&steady);
    assert!(p.objects.is_empty() && p.pod_actions.is_empty());
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::INVALID_SPEC);
    assert!(
        degraded.message.contains(
            "spec.scheduling.priorityClassName: the system-* priority classes are reserved"
        ),
        "{}",
        degraded.message
    );
    // A platform team that allows it by name: reconciled, the class in the pod template.
    steady.config.scheduling = database_operator_api::scheduling::SchedulingPolicy::allow_list(
        Some(["system-node-critical".to_owned()].into()),
        None,
    );
    let p = plan(&steady);
    assert_ne!(
        condition(&p.status, conditions::DEGRADED).reason,
        why::INVALID_SPEC
    );
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        sts["spec"]["template"]["spec"]["priorityClassName"],
        "system-node-critical"
    );
}

#[test]
fn a_spec_is_validated_when_its_generation_moves() {
    // A running cluster whose (unchanged) spec a newer rule would refuse keeps running...
    let mut steady = running(common::mysql());
    steady.cluster.spec.backup.as_mut().unwrap().s3_bucket = "Not_A_Bucket".into();
    let p = plan(&steady);
    assert_eq!(p.status.phase, Some(Phase::Running));
    // ...and the next edit is checked.
    edit(&mut steady, |s| s.replicas = 2);
    let p = plan(&steady);
    assert_eq!(
        condition(&p.status, conditions::DEGRADED).reason,
        why::INVALID_SPEC
    );
    assert!(
        condition(&p.status, conditions::DEGRADED)
            .message
            .contains("spec.backup.s3Bucket")
    );
}

#[test]
fn a_schedule_change_moves_the_next_backup_time() {
    let mut steady = running(common::mysql());
    assert_eq!(
        steady.cluster.status.as_ref().unwrap().next_backup_time,
        Some(Time("2026-03-02T02:00:00Z".parse().unwrap()))
    );
    edit(&mut steady, |s| {
        s.backup.as_mut().unwrap().schedule = "30 12 * * *".into()
    });
    let p = plan(&steady);
    assert_eq!(
        p.status.next_backup_time,
        Some(Time("2026-03-01T12:30:00Z".parse().unwrap()))
    );
    assert_eq!(
        change(&p, OwnedKind::CronJob, "my-mysql-backup"),
        Change::Update
    );
    assert!(p.status_changed);
}

#[test]
fn deletion_plans_nothing_but_the_phase() {
    let mut steady = running(common::mysql());
    assert!(database_operator_core::finalize::has_finalizer(
        &steady.cluster
    ));
    steady.cluster.metadata.deletion_timestamp = Some(Time(NOW.parse().unwrap()));
    let p = plan(&steady);
    assert_eq!(p.status.phase, Some(Phase::Deleting));
    assert!(p.objects.is_empty() && p.delete.is_empty() && p.pod_actions.is_empty());
    assert_eq!(
        condition(&p.status, conditions::READY).reason,
        why::DELETING
    );
    // The backups are kept (deletionPolicy Retain), then the finalizer goes.
    assert_eq!(reasons(&p), ["ClusterDeleting", "BackupsRetained"]);
    assert_eq!(p.finalizer, FinalizerChange::Remove);
    assert!(p.cleanup.is_empty());
    assert_eq!(p.requeue_after, None);
}

#[test]
fn the_first_pass_creates_the_operator_secret_once_without_values() {
    let o = observed(common::postgresql());
    let p = plan(&o);
    let [SecretChange::Create(secret)] = p.secret_changes.as_slice() else {
        panic!("one Create step expected: {:?}", p.secret_changes);
    };
    let meta = &secret.metadata;
    assert_eq!(meta.name.as_deref(), Some("orders-db-operator"));
    assert_eq!(meta.namespace, o.cluster.metadata.namespace);
    let labels = meta.labels.as_ref().unwrap();
    assert_eq!(labels[labels::CLUSTER], "orders-db");
    assert_eq!(labels[labels::MANAGED_BY], labels::OPERATOR);
    assert_eq!(labels[labels::COMPONENT], "credentials");
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "DatabaseCluster");
    assert_eq!(Some(&owner.uid), o.cluster.metadata.uid.as_ref());
    // The core never holds a value: the runtime generates them.
    assert!(secret.data.is_none() && secret.string_data.is_none());
    assert!(!p.is_noop());

    // Once it exists, it is adopted as it is: no step, whoever owns it.
    let steady = running(common::postgresql());
    assert!(matches!(
        steady.operator_secret,
        OperatorSecretState::Present { .. }
    ));
    assert!(plan(&steady).secret_changes.is_empty());
    let mut adopted = steady.clone();
    adopted.operator_secret = OperatorSecretState::Present {
        owner_uids: Vec::new(),
    };
    let p = plan(&adopted);
    assert!(p.secret_changes.is_empty() && p.is_noop(), "{p:?}");
}

#[test]
fn a_cluster_that_ran_never_gets_generated_credentials() {
    let steady = running(common::postgresql());
    assert!(
        steady
            .cluster
            .status
            .as_ref()
            .unwrap()
            .current_version
            .is_some()
    );

    // Deleted while this operator ran: created again with the values it holds, and told.
    let mut remembered = steady.clone();
    remembered.operator_secret = OperatorSecretState::MissingRemembered;
    let p = plan(&remembered);
    let [SecretChange::Restore(secret)] = p.secret_changes.as_slice() else {
        panic!("one Restore step expected: {:?}", p.secret_changes);
    };
    assert_eq!(secret.metadata.name.as_deref(), Some("orders-db-operator"));
    assert!(secret.data.is_none() && secret.string_data.is_none());
    assert_eq!(reasons(&p), ["OperatorSecretRestored"]);
    assert_eq!(p.events[0].type_, EventType::Warning);
    assert!(p.events[0].message.contains("default/orders-db-operator"));
    // The members keep running meanwhile.
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "orders-db"),
        Change::Unchanged
    );

    // Gone with no values to restore (the operator restarted since): nothing is created,
    // and the cluster says why and how to repair it.
    let mut lost = steady.clone();
    lost.operator_secret = OperatorSecretState::Missing;
    let p = plan(&lost);
    assert!(p.secret_changes.is_empty(), "{:?}", p.secret_changes);
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::OPERATOR_SECRET_LOST);
    assert!(
        degraded
            .message
            .contains("Secret default/orders-db-operator")
            && degraded.message.contains("none are generated")
            && degraded.message.contains("docs/operations.md"),
        "{}",
        degraded.message
    );
    assert_eq!(reasons(&p), ["OperatorSecretLost"]);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "orders-db"),
        Change::Unchanged
    );
    // Said once: the next pass (status as written) has no new event and still no Secret.
    let p2 = plan(&apply(&lost, &p, Pods::Ready));
    assert!(p2.events.is_empty(), "{:?}", p2.events);
    assert!(p2.secret_changes.is_empty());
    // Back (re-applied by a person): adopted as it is, the cluster recovers.
    let mut back = apply(&lost, &p, Pods::Ready);
    back.operator_secret = OperatorSecretState::Present {
        owner_uids: Vec::new(),
    };
    let p3 = plan(&back);
    assert!(p3.secret_changes.is_empty());
    assert_ne!(
        condition(&p3.status, conditions::DEGRADED).reason,
        why::OPERATOR_SECRET_LOST
    );
}

#[test]
fn an_invalid_spec_creates_no_operator_secret() {
    let mut o = observed(common::postgresql());
    o.cluster.spec.replicas = -1;
    assert!(plan(&o).secret_changes.is_empty());
}

#[test]
fn a_deleted_cluster_releases_its_operator_secret_before_the_finalizer_goes() {
    let mut deleted = running(common::mysql());
    deleted.cluster.metadata.deletion_timestamp = Some(Time(NOW.parse().unwrap()));
    let uid = deleted.cluster.metadata.uid.clone().unwrap();
    let p = plan(&deleted);
    assert_eq!(
        p.secret_changes,
        [SecretChange::Release {
            name: "my-mysql-operator".into(),
            owner_uid: uid.clone(),
        }]
    );
    assert_eq!(p.finalizer, FinalizerChange::Remove);
    // Released (the watch shows no owner reference to this cluster): nothing more to do.
    let mut released = deleted.clone();
    released.operator_secret = OperatorSecretState::Present {
        owner_uids: vec!["another-cluster".into()],
    };
    assert!(plan(&released).secret_changes.is_empty());
    // Never created, or already gone: nothing either.
    released.operator_secret = OperatorSecretState::Missing;
    let p = plan(&released);
    assert!(p.secret_changes.is_empty());
    assert_eq!(p.finalizer, FinalizerChange::Remove);
    // Without the finalizer the cluster is not the operator's any more.
    let mut foreign = deleted;
    foreign.cluster.metadata.finalizers = None;
    assert!(plan(&foreign).secret_changes.is_empty());
}

#[test]
fn a_recreated_cluster_adopts_the_kept_operator_secret() {
    // The Secret of an earlier cluster of the same name, released at its deletion.
    let mut o = observed(common::mysql());
    o.operator_secret = OperatorSecretState::Present {
        owner_uids: Vec::new(),
    };
    let p = plan(&o);
    assert!(p.secret_changes.is_empty());
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    let init = init_container(&sts);
    assert_eq!(
        env(init, "REPLICATION_PASSWORD")["valueFrom"]["secretKeyRef"]["name"],
        "my-mysql-operator"
    );
    assert_eq!(env(init, "ADMIN_USER")["value"], "database_operator");
    assert_eq!(env(init, "REPLICATION_USER")["value"], "replicator");
}

#[test]
fn a_deleted_cluster_without_the_finalizer_is_left_alone() {
    let mut steady = running(common::mysql());
    steady.cluster.metadata.finalizers = None;
    steady.cluster.metadata.deletion_timestamp = Some(Time(NOW.parse().unwrap()));
    let p = plan(&steady);
    assert!(p.is_noop(), "{p:?}");
    assert!(p.events.is_empty());
    assert_eq!(p.requeue_after, None);
}

#[test]
fn a_live_cluster_gets_the_finalizer_first() {
    let o = common::observed(common::mysql());
    assert_eq!(plan(&o).finalizer, FinalizerChange::Add);
    let steady = running(common::mysql());
    assert_eq!(plan(&steady).finalizer, FinalizerChange::Keep);
}

#[test]
fn version_change_is_upgrading_until_every_member_runs_it() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.version = "9.7.4".into());
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Update
    );
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        container(&sts, "mysql")["image"],
        "docker.io/library/mysql:9.7.4"
    );
    // Only the highest replica takes the new template first.
    assert_eq!(
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        2
    );
    let roll = p.status.upgrade.as_ref().unwrap();
    assert_eq!(
        (roll.from.as_str(), roll.to.as_str(), roll.step),
        ("8.4.7", "9.7.4", RollPhase::Replicas)
    );
    assert_eq!(roll.member.as_deref(), Some("my-mysql-2"));
    assert_eq!(p.status.phase, Some(Phase::Upgrading));
    assert_eq!(p.status.current_version.as_deref(), Some("8.4.7"));
    let upgrading = condition(&p.status, conditions::UPGRADING);
    assert_eq!(
        (upgrading.status.as_str(), upgrading.reason.as_str()),
        ("True", why::VERSION_ROLLING)
    );
    assert!(
        upgrading.message.contains("from 8.4.7 to 9.7.4"),
        "{}",
        upgrading.message
    );
    assert_eq!(reasons(&p), ["UpgradeStarted"]);

    // Half-way: one member on the new version, one of the old ones restarting.
    let mut mid = apply(&steady, &p, Pods::Ready);
    for (i, version) in [(0, "8.4.7"), (1, "8.4.7"), (2, "9.7.4")] {
        let pod = mid
            .pods
            .iter_mut()
            .find(|p| p.name == format!("my-mysql-{i}"))
            .unwrap();
        let pod_labels = &mut pod.labels;
        pod_labels.insert(labels::VERSION.into(), version.into());
        if version == "8.4.7" {
            // Still on the old template: the StatefulSet controller replaces it next.
            pod_labels.insert("controller-revision-hash".into(), "old".into());
        }
    }
    set_ready(&mut mid, "my-mysql-1", false);
    let pm = plan(&mid);
    assert_eq!(pm.status.phase, Some(Phase::Upgrading));
    assert_eq!(pm.status.current_version.as_deref(), Some("8.4.7"));
    assert_eq!(condition(&pm.status, conditions::DEGRADED).status, "False");
    assert!(pm.events.is_empty());

    // Without a probe of the servers nothing passes the health gate: the roll waits, holding
    // the primary.
    let mut next = apply(&mid, &pm, Pods::Ready);
    next.pods.iter_mut().for_each(|p| p.ready = true);
    let p = plan(&next);
    assert_eq!(
        p.status.upgrade.as_ref().unwrap().member.as_deref(),
        Some("my-mysql-2")
    );
}

/// Fresh facts for every pod as its server would report them: Ready pods answer, with the
/// version of their pod, the primary label's pod as a writable primary, the others replicating
/// from it.
fn probe(o: &mut Observed) {
    let source = o
        .pods
        .iter()
        .find(|p| p.labels.get(labels::ROLE).map(String::as_str) == Some("primary"))
        .map(|p| p.name.clone());
    o.member_facts = o
        .pods
        .iter()
        .map(|p| {
            let primary = p.labels.get(labels::ROLE).map(String::as_str) == Some("primary");
            let facts = MemberFacts {
                reachable: p.ready,
                role: Some(if primary {
                    ServerRole::Primary
                } else {
                    ServerRole::Replica
                }),
                read_only: Some(!primary),
                replicating: (!primary).then_some(true),
                source: source.clone().filter(|_| !primary),
                lag_seconds: Some(0),
                version: p.labels.get(labels::VERSION).cloned(),
                ..MemberFacts::unreachable(o.now)
            };
            (p.name.clone(), facts)
        })
        .collect();
}

#[test]
fn an_upgrade_rolls_replicas_highest_first_then_asks_for_a_switchover() {
    let mut o = running(common::mysql());
    edit(&mut o, |s| s.version = "9.7.4".into());
    let mut partitions = Vec::new();
    let mut fence = None;
    for _ in 0..12 {
        probe(&mut o);
        let p = plan(&o);
        let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
        let partition = sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"].clone();
        if partitions.last() != Some(&partition) {
            partitions.push(partition);
        }
        if let Some(step) = p
            .database_commands
            .iter()
            .find(|s| matches!(s, DatabaseCommand::Fence { .. }))
        {
            fence = Some((step.clone(), p.status.upgrade.clone().unwrap()));
            break;
        }
        o = apply(&o, &p, Pods::Ready);
        later(&mut o, 1);
    }
    assert_eq!(partitions, [json!(2), json!(1)]);
    let (step, roll) = fence.expect("a switchover once both replicas run 9.7.4");
    assert_eq!(
        step,
        DatabaseCommand::Fence {
            pod: "my-mysql-0".into()
        }
    );
    assert_eq!(roll.step, RollPhase::Switchover);
    assert_eq!(roll.member.as_deref(), Some("my-mysql-1"));
    assert_eq!(roll.members_done, ["my-mysql-2", "my-mysql-1"]);
    let version = |name: &str| {
        let pod = o.pods.iter().find(|p| p.name == name).unwrap();
        pod.labels.get(labels::VERSION).cloned().unwrap()
    };
    assert_eq!(version("my-mysql-0"), "8.4.7", "the primary is untouched");
    assert_eq!(version("my-mysql-1"), "9.7.4");
}

#[test]
fn a_member_whose_pod_is_being_created_again_holds_the_roll_and_the_current_version() {
    let mut o = running(common::mysql());
    edit(&mut o, |s| s.version = "9.7.4".into());
    // Roll until the StatefulSet is told to replace my-mysql-1.
    for _ in 0..12 {
        probe(&mut o);
        let p = plan(&o);
        let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
        o = apply(&o, &p, Pods::Ready);
        later(&mut o, 1);
        if sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 1 {
            break;
        }
    }
    // The controller deleted my-mysql-1 and has not created it again yet: my-mysql-2 runs
    // 9.7.4 and is healthy, the primary my-mysql-0 is the only other pod.
    o.pods.retain(|p| p.name != "my-mysql-1");
    for _ in 0..3 {
        probe(&mut o);
        let p = plan(&o);
        assert!(
            !p.database_commands
                .iter()
                .any(|s| matches!(s, DatabaseCommand::Fence { .. })),
            "the primary is moved while a replica is missing: {:?}",
            p.database_commands
        );
        let roll = p.status.upgrade.as_ref().unwrap();
        assert_eq!(roll.step, RollPhase::Replicas);
        assert_eq!(roll.member.as_deref(), Some("my-mysql-1"));
        assert_eq!(p.status.current_version.as_deref(), Some("8.4.7"));
        assert_eq!(p.status.phase, Some(Phase::Upgrading));
        let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
        assert_eq!(
            sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
            1
        );
        o = apply(&o, &p, Pods::Ready);
        o.pods.retain(|p| p.name != "my-mysql-1");
        later(&mut o, 1);
    }
    // The former primary replaced last: while its pod is missing, the others run 9.7.4 and
    // currentVersion still says 8.4.7.
    let mut last = running(common::mysql());
    edit(&mut last, |s| s.version = "9.7.4".into());
    for pod in last.pods.iter_mut() {
        pod.labels.insert(labels::VERSION.into(), "9.7.4".into());
    }
    last.pods.retain(|p| p.name != "my-mysql-0");
    probe(&mut last);
    let p = plan(&last);
    assert_eq!(p.status.current_version.as_deref(), Some("8.4.7"));
    assert_eq!(p.status.phase, Some(Phase::Upgrading));

    // A pod deleted while nothing upgrades is no upgrade: no roll, partition 0.
    let mut steady = running(common::mysql());
    steady.pods.retain(|p| p.name != "my-mysql-1");
    probe(&mut steady);
    let p = plan(&steady);
    assert_eq!(p.status.upgrade, None);
    assert_ne!(p.status.phase, Some(Phase::Upgrading));
    assert_eq!(p.status.current_version.as_deref(), Some("8.4.7"));
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        0
    );
}

#[test]
fn an_upgraded_member_that_never_becomes_healthy_pauses_the_roll() {
    let mut o = running(common::postgresql());
    edit(&mut o, |s| {
        s.version = "16.14".into();
        s.upgrade = Some(database_operator_api::UpgradeSpec {
            step_timeout_seconds: 30,
        })
    });
    let mut events = Vec::new();
    for _ in 0..8 {
        probe(&mut o);
        // The new version's server answers with the old version string: never healthy.
        if let Some(f) = o.member_facts.get_mut("orders-db-2") {
            f.version = Some("16.4".into());
        }
        let p = plan(&o);
        events.extend(p.events.iter().map(|e| e.reason.as_str()));
        o = apply(&o, &p, Pods::Ready);
        later(&mut o, 10);
    }
    let status = o.cluster.status.clone().unwrap();
    let roll = status.upgrade.as_ref().unwrap();
    assert_eq!(roll.step, RollPhase::Paused);
    let upgrading = condition(&status, conditions::UPGRADING);
    assert_eq!(upgrading.reason, why::UPGRADE_PAUSED);
    assert!(
        upgrading
            .message
            .contains("orders-db-2's server reports version 16.4"),
        "{}",
        upgrading.message
    );
    assert_eq!(events.iter().filter(|e| **e == "UpgradePaused").count(), 1);
    let sts = object(&plan(&o), OwnedKind::StatefulSet, "orders-db");
    assert_eq!(
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        2
    );
}

#[test]
fn conditions_of_other_types_are_kept() {
    let mut steady = running(common::mysql());
    let foreign = Condition {
        type_: "PasswordApplied".into(),
        status: "True".into(),
        reason: "Applied".into(),
        message: "ok".into(),
        last_transition_time: Time("2026-02-01T00:00:00Z".parse().unwrap()),
        observed_generation: Some(1),
    };
    steady
        .cluster
        .status
        .as_mut()
        .unwrap()
        .conditions
        .push(foreign.clone());
    let p = plan(&steady);
    assert!(!p.status_changed);
    assert_eq!(p.status.conditions.last(), Some(&foreign));
}

// ---------------------------------------------------------------------------------------------
// Zero writes and reverting manual changes.

/// What the API server does with every write: the object gets a new `resourceVersion`.
fn written(meta: &mut ObjectMeta) {
    let version: u64 = meta
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap();
    meta.resource_version = Some((version + 1_000_000).to_string());
}

#[test]
fn manual_scale_of_the_statefulset_is_reverted() {
    let mut steady = running(common::mysql());
    steady.owned.stateful_sets[0].spec.replicas = Some(5);
    written(&mut steady.owned.stateful_sets[0].metadata);
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Update
    );
    assert_eq!(
        object(&p, OwnedKind::StatefulSet, "my-mysql")["spec"]["replicas"],
        3
    );
    assert_eq!(p.changed_objects().count(), 1);
    assert_eq!(reasons(&p), ["ScaledDown"]);
}

#[test]
fn manual_edits_of_owned_fields_are_reverted_and_foreign_fields_ignored() {
    let mut steady = running(common::mysql());
    // Someone else's annotation on a Service: not ours, not touched.
    steady.owned.services[0].metadata.annotations =
        Some([("team".to_owned(), "db".to_owned())].into());
    written(&mut steady.owned.services[0].metadata);
    assert!(plan(&steady).is_noop());
    // Someone changed the read-write Service's selector: reverted.
    let rw = steady
        .owned
        .services
        .iter_mut()
        .find(|s| s.metadata.name.as_deref() == Some("my-mysql"))
        .unwrap();
    rw.spec
        .as_mut()
        .unwrap()
        .selector
        .as_mut()
        .unwrap()
        .insert(labels::ROLE.into(), "replica".into());
    written(&mut rw.metadata);
    let p = plan(&steady);
    assert_eq!(change(&p, OwnedKind::Service, "my-mysql"), Change::Update);
    assert_eq!(p.changed_objects().count(), 1);
    // Someone edited the ConfigMap: reverted.
    let mut steady = running(common::postgresql());
    steady.owned.config_maps[0]
        .data
        .as_mut()
        .unwrap()
        .insert("postgresql.conf".into(), "fsync = off\n".into());
    written(&mut steady.owned.config_maps[0].metadata);
    assert_eq!(
        change(&plan(&steady), OwnedKind::ConfigMap, "orders-db-config"),
        Change::Update
    );
}

// ---------------------------------------------------------------------------------------------
// Roles.

#[test]
fn roles_are_assigned_primary_first_to_ordinal_zero() {
    let mut o = observed(common::mysql());
    o.pods = vec![
        pod("my-mysql-0", None, true, "8.4.7"),
        pod("my-mysql-1", None, true, "8.4.7"),
    ];
    let p = plan(&o);
    assert_eq!(
        p.pod_actions,
        [
            PodAction::LabelPod {
                pod: "my-mysql-0".into(),
                role: MemberRole::Primary
            },
            PodAction::LabelPod {
                pod: "my-mysql-1".into(),
                role: MemberRole::Replica
            },
            // A cluster that has never run: its first primary may create the database.
            PodAction::SetInitialize {
                pod: "my-mysql-0".into(),
                allowed: true
            },
        ]
    );
}

#[test]
fn only_the_first_primary_of_a_cluster_that_never_ran_may_initialize() {
    let mut o = observed(common::postgresql());
    let name = o.cluster.metadata.name.clone().unwrap();
    let version = o.cluster.spec.version.clone();
    let mut first = pod(&format!("{name}-0"), Some("primary"), true, &version);
    first
        .labels
        .insert(labels::INITIALIZE.into(), labels::INITIALIZE_ALLOWED.into());
    o.pods = vec![
        first,
        pod(&format!("{name}-1"), Some("replica"), true, &version),
    ];
    // Never run: the label stays where it is, nothing to do.
    assert!(
        plan(&o).pod_actions.is_empty(),
        "{:?}",
        plan(&o).pod_actions
    );
    // It has run (a version is recorded): the label comes off, and it is never set again on
    // the primary's pod, whatever happens to its volume.
    o.cluster.status = Some(DatabaseClusterStatus {
        primary_pod: Some(format!("{name}-0")),
        current_version: Some(version.clone()),
        ..Default::default()
    });
    assert_eq!(
        plan(&o).pod_actions,
        [PodAction::SetInitialize {
            pod: format!("{name}-0"),
            allowed: false
        }]
    );
    o.pods[0].labels.remove(labels::INITIALIZE);
    // A replaced primary pod (no labels yet): labelled primary, never allowed to initialize.
    o.pods[0].labels.remove(labels::ROLE);
    assert_eq!(
        plan(&o).pod_actions,
        [PodAction::LabelPod {
            pod: format!("{name}-0"),
            role: MemberRole::Primary
        }]
    );
}

#[test]
fn the_recorded_primary_keeps_its_role_and_a_second_primary_is_demoted_first() {
    let mut o = observed(common::mysql());
    o.cluster.status = Some(DatabaseClusterStatus {
        primary_pod: Some("my-mysql-1".into()),
        ..Default::default()
    });
    o.pods = vec![
        pod("my-mysql-0", Some("primary"), true, "8.4.7"),
        pod("my-mysql-1", Some("replica"), true, "8.4.7"),
        pod("my-mysql-2", Some("replica"), true, "8.4.7"),
    ];
    let p = plan(&o);
    assert_eq!(p.status.primary_pod.as_deref(), Some("my-mysql-1"));
    assert_eq!(
        p.pod_actions,
        [
            PodAction::LabelPod {
                pod: "my-mysql-0".into(),
                role: MemberRole::Replica
            },
            PodAction::LabelPod {
                pod: "my-mysql-1".into(),
                role: MemberRole::Primary
            },
            PodAction::SetInitialize {
                pod: "my-mysql-1".into(),
                allowed: true
            },
        ]
    );
}

#[test]
fn a_recorded_primary_whose_pod_is_being_recreated_keeps_the_role() {
    let mut o = running(common::mysql());
    o.cluster.status.as_mut().unwrap().primary_pod = Some("my-mysql-2".into());
    o.pods.retain(|p| p.name != "my-mysql-2");
    let p = plan(&o);
    assert_eq!(p.status.primary_pod.as_deref(), Some("my-mysql-2"));
    assert!(
        !p.pod_actions.iter().any(|a| matches!(
            a,
            PodAction::LabelPod {
                role: MemberRole::Primary,
                ..
            }
        )),
        "{:?}",
        p.pod_actions
    );
    assert_eq!(p.status.phase, Some(Phase::Degraded));
}

#[test]
fn a_primary_a_scale_down_would_remove_stays_primary_and_keeps_its_pod() {
    let mut o = running(common::mysql());
    o.cluster.status.as_mut().unwrap().primary_pod = Some("my-mysql-2".into());
    edit(&mut o, |s| s.replicas = 2);
    let p = plan(&o);
    // Not another member labelled primary behind the read-write Service while my-mysql-2 still
    // takes writes (before the change: my-mysql-0, a replica, got the label at once).
    assert_eq!(p.status.primary_pod.as_deref(), Some("my-mysql-2"));
    assert!(
        !p.pod_actions.iter().any(|a| matches!(
            a,
            PodAction::LabelPod { pod, role: MemberRole::Primary } if pod != "my-mysql-2"
        )),
        "{:?}",
        p.pod_actions
    );
    // The StatefulSet keeps its pod until a switchover moved the primary (no facts here, so no
    // switchover starts: the pod stays).
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(sts["spec"]["replicas"], 3);
}

#[test]
fn labels_already_right_give_no_actions() {
    let steady = running(common::mysql());
    assert_eq!(role_of(&steady, "my-mysql-0").as_deref(), Some("primary"));
    assert_eq!(role_of(&steady, "my-mysql-1").as_deref(), Some("replica"));
    assert!(plan(&steady).pod_actions.is_empty());
}

#[test]
fn backup_job_pods_are_not_members() {
    let mut steady = running(common::mysql());
    let mut job_pod = pod("my-mysql-backup-29512345-abcde", None, false, "8.4.7");
    job_pod
        .labels
        .insert(labels::COMPONENT.into(), "backup".into());
    steady.pods.push(job_pod);
    let p = plan(&steady);
    assert!(p.is_noop());
    assert_eq!(p.status.ready_replicas, 3);
}

// ---------------------------------------------------------------------------------------------
// Scaling, deletes.

#[test]
fn scaling_to_one_deletes_the_budget_and_scaling_up_recreates_it() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.replicas = 1);
    let p = plan(&steady);
    assert_eq!(
        p.delete,
        [ObjectKey {
            kind: OwnedKind::PodDisruptionBudget,
            name: "my-mysql".into()
        }]
    );
    assert_eq!(
        object(&p, OwnedKind::StatefulSet, "my-mysql")["spec"]["replicas"],
        1
    );
    assert_eq!(reasons(&p), ["ScaledDown"]);
    assert!(p.events[0].message.contains("from 3 to 1"));
    let one = running_from(apply(&steady, &p, Pods::Ready));
    let mut one = one;
    edit(&mut one, |s| s.replicas = 4);
    let p = plan(&one);
    assert_eq!(
        change(&p, OwnedKind::PodDisruptionBudget, "my-mysql"),
        Change::Create
    );
    let pdb = object(&p, OwnedKind::PodDisruptionBudget, "my-mysql");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    // 1/4 ready is below the spec: degraded until the new members are ready.
    assert_eq!(reasons(&p), ["ClusterDegraded", "ScaledUp"]);
    assert!(
        p.events[0].message.contains("1/4 replicas ready"),
        "{}",
        p.events[0].message
    );
}

fn running_from(o: Observed) -> Observed {
    let (o, plans) = common::converge(o, Pods::Ready, 6);
    assert!(plans.last().unwrap().is_noop());
    o
}

#[test]
fn removing_backups_deletes_the_cronjob_and_says_so() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.backup = None);
    let p = plan(&steady);
    assert_eq!(
        p.delete,
        [ObjectKey {
            kind: OwnedKind::CronJob,
            name: "my-mysql-backup".into()
        }]
    );
    assert_eq!(reasons(&p), ["BackupScheduleRemoved"]);
    assert_eq!(p.status.next_backup_time, None);
    assert_eq!(p.requeue_after, Some(Duration::from_secs(30)));
}

#[test]
fn adding_backups_to_a_running_cluster_creates_the_cronjob_and_says_so() {
    let mut steady = running(common::single());
    assert!(steady.cluster.spec.backup.is_none());
    edit(&mut steady, |s| {
        s.backup = Some(BackupSpec {
            schedule: "0 3 * * *".into(),
            retention: 3,
            s3_bucket: "solo-backups".into(),
            endpoint: None,
            region: None,
            credentials_secret_ref: None,
            deletion_policy: Default::default(),
            verify: None,
            archive: None,
            method: None,
        });
    });
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::CronJob, "solo-backup"),
        Change::Create
    );
    assert_eq!(reasons(&p), ["BackupScheduled"]);
    assert!(
        p.events[0].message.contains("\"0 3 * * *\"")
            && p.events[0].message.contains("solo-backups"),
        "{}",
        p.events[0].message
    );
}

#[test]
fn objects_not_controlled_by_the_cluster_and_statefulsets_are_never_deleted() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.backup = None);
    // The CronJob belongs to someone else now.
    steady.owned.cron_jobs[0].metadata.owner_references = None;
    // A stray StatefulSet owned by the cluster.
    let mut stray = steady.owned.stateful_sets[0].clone();
    stray.metadata.name = Some("my-mysql-old".into());
    steady.owned.stateful_sets.push(stray);
    assert!(plan(&steady).delete.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Password and configuration rolls.

/// Fresh facts of a writable primary.
fn primary_up(o: &Observed) -> MemberFacts {
    MemberFacts {
        reachable: true,
        role: Some(ServerRole::Primary),
        read_only: Some(false),
        ..MemberFacts::unreachable(o.now)
    }
}

#[test]
fn a_new_password_is_applied_in_the_database_without_rolling_the_pods() {
    let mut steady = running(common::mysql());
    steady.secret = SecretState::Present {
        fingerprint: "fp-2".into(),
    };
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Unchanged
    );
    assert_eq!(reasons(&p), ["PasswordChanged"]);
    // No probe of the primary yet: nothing is sent to the database.
    assert!(p.database_commands.is_empty());
    let applied = condition(&p.status, conditions::PASSWORD_APPLIED);
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", why::APPLYING)
    );
    assert_eq!(
        p.status.password.as_ref().unwrap().pending.as_deref(),
        Some("fp-2")
    );

    // The primary answers: SetPassword on it, for every root account, keeping the old one.
    let mut next = apply(&steady, &p, Pods::Ready);
    next.member_facts
        .insert("my-mysql-0".into(), primary_up(&next));
    let p = plan(&next);
    assert_eq!(
        p.database_commands,
        [DatabaseCommand::SetPassword {
            pod: "my-mysql-0".into(),
            accounts: password::superuser_accounts(Engine::Mysql),
            fingerprint: "fp-2".into(),
            retain_old: true,
        }]
    );
    assert!(p.events.is_empty());
    assert!(p.changed_objects().next().is_none());

    // The runtime reports success: recorded, then steady.
    let mut done = apply(&next, &p, Pods::Ready);
    done.password_outcome = Some(PasswordOutcome {
        action: PasswordAction::Set,
        fingerprint: "fp-2".into(),
        at: done.now,
        error: None,
    });
    let p = plan(&done);
    assert!(p.database_commands.is_empty());
    assert_eq!(reasons(&p), ["PasswordApplied"]);
    assert_eq!(
        condition(&p.status, conditions::PASSWORD_APPLIED).reason,
        why::APPLIED
    );
    let after = apply(&done, &p, Pods::Ready);
    assert!(plan(&after).is_noop());
}

#[test]
fn a_statefulset_of_an_earlier_release_keeps_its_password_annotation() {
    let mut steady = running(common::postgresql());
    let sts = &mut steady.owned.stateful_sets[0];
    sts.spec
        .template
        .metadata
        .get_or_insert_default()
        .annotations
        .get_or_insert_default()
        .insert(labels::PASSWORD_FINGERPRINT.into(), "fp-old".into());
    steady.known_matches.clear();
    steady.secret = SecretState::Present {
        fingerprint: "fp-new".into(),
    };
    // Its template and pods carry the hash of that template (the annotation included).
    let rendered = plan(&steady);
    let hash = object(&rendered, OwnedKind::StatefulSet, "orders-db")["spec"]["template"]
        ["metadata"]["labels"][labels::TEMPLATE]
        .as_str()
        .expect("a template label")
        .to_owned();
    for pod in &mut steady.pods {
        pod.labels.insert(labels::TEMPLATE.into(), hash.clone());
    }
    steady.owned.stateful_sets[0]
        .spec
        .template
        .metadata
        .get_or_insert_default()
        .labels
        .get_or_insert_default()
        .insert(labels::TEMPLATE.into(), hash.clone());
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "orders-db"),
        Change::Unchanged,
        "no roll"
    );
    let sts = object(&p, OwnedKind::StatefulSet, "orders-db");
    assert_eq!(
        sts["spec"]["template"]["metadata"]["annotations"][labels::PASSWORD_FINGERPRINT],
        "fp-old"
    );
}

#[test]
fn a_config_change_rolls_the_pods() {
    let mut steady = running(common::mysql());
    let before = object(&plan(&steady), OwnedKind::StatefulSet, "my-mysql");
    edit(&mut steady, |s| {
        s.resources = Some(ResourceRequirements {
            limits: Some([("memory".to_owned(), Quantity("4Gi".into()))].into()),
            ..Default::default()
        })
    });
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::ConfigMap, "my-mysql-config"),
        Change::Update
    );
    let after = object(&p, OwnedKind::StatefulSet, "my-mysql");
    let hash =
        |v: &Value| v["spec"]["template"]["metadata"]["annotations"][labels::CONFIG_HASH].clone();
    assert_ne!(hash(&before), hash(&after));
    assert!(reasons(&p).contains(&"ConfigurationChanged"));
    let cm = object(&p, OwnedKind::ConfigMap, "my-mysql-config");
    assert!(
        cm["data"]["my.cnf"]
            .as_str()
            .unwrap()
            .contains("innodb_buffer_pool_size = 2048M")
    );
}

#[test]
fn backup_settings_do_not_roll_the_database_pods() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.backup.as_mut().unwrap().retention = 30);
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Unchanged
    );
    assert_eq!(
        change(&p, OwnedKind::CronJob, "my-mysql-backup"),
        Change::Update
    );
}

// ---------------------------------------------------------------------------------------------
// Requeue.

#[test]
fn requeue_is_the_resync_or_the_next_backup_when_sooner_but_never_zero() {
    let steady = running(common::mysql());
    assert_eq!(plan(&steady).requeue_after, Some(Duration::from_secs(30)));
    let mut soon = steady.clone();
    soon.now = "2026-03-02T01:59:50Z".parse().unwrap();
    assert_eq!(plan(&soon).requeue_after, Some(Duration::from_secs(10)));
    let mut now = steady.clone();
    now.now = "2026-03-02T01:59:59.600Z".parse().unwrap();
    assert_eq!(plan(&now).requeue_after, Some(Duration::from_secs(1)));
    let p = plan(&now);
    assert_eq!(
        p.status.next_backup_time,
        Some(Time("2026-03-02T02:00:00Z".parse().unwrap()))
    );
    let mut single = running(common::single());
    single.config.resync = Duration::from_secs(300);
    assert_eq!(plan(&single).requeue_after, Some(Duration::from_secs(300)));
}

#[test]
fn next_backup_time_follows_the_schedule() {
    let mut o = observed(common::postgresql());
    o.now = "2026-03-01T05:59:59Z".parse().unwrap();
    assert_eq!(
        plan(&o).status.next_backup_time,
        Some(Time("2026-03-01T06:00:00Z".parse().unwrap()))
    );
    o.now = "2026-03-01T06:00:00Z".parse().unwrap();
    assert_eq!(
        plan(&o).status.next_backup_time,
        Some(Time("2026-03-01T12:00:00Z".parse().unwrap()))
    );
}

#[test]
fn status_times_are_whole_seconds() {
    let mut o = observed(common::mysql());
    o.now = "2026-03-01T12:00:00.750Z".parse().unwrap();
    let p = plan(&o);
    let expected: Timestamp = "2026-03-01T12:00:00Z".parse().unwrap();
    assert!(
        p.status
            .conditions
            .iter()
            .all(|c| c.last_transition_time == Time(expected))
    );
}

// ---------------------------------------------------------------------------------------------
// Rendered fields that come from the spec.

#[test]
fn statefulset_fields_follow_the_spec() {
    let p = plan(&observed(common::with_resources()));
    let sts = object(&p, OwnedKind::StatefulSet, "sized");
    assert_eq!(sts["spec"]["replicas"], 2);
    assert_eq!(sts["spec"]["serviceName"], "sized-headless");
    let db = container(&sts, "mysql");
    assert_eq!(db["image"], "docker.io/library/mysql:8.4.7");
    assert_eq!(
        sts["spec"]["template"]["metadata"]["labels"][labels::VERSION],
        "8.4.7"
    );
    // Quantities as the API server stores them.
    assert_eq!(
        db["resources"],
        json!({"requests": {"cpu": "1500m", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}})
    );
    let claim = &sts["spec"]["volumeClaimTemplates"][0];
    assert_eq!(claim["metadata"]["name"], "data");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Ti");
    assert_eq!(claim["spec"]["storageClassName"], "premium");
    assert_eq!(
        sts["spec"]["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    // The password only by reference, from the spec's Secret and key, and only where it is
    // used: the init container sets it; the server never needs it.
    let password = env(init_container(&sts), "MYSQL_ROOT_PASSWORD");
    assert_eq!(
        password["valueFrom"]["secretKeyRef"],
        json!({"name": "sized-root", "key": "root-password", "optional": false})
    );
    assert!(password.get("value").is_none());
    // Selectors never carry the version.
    assert!(
        sts["spec"]["selector"]["matchLabels"]
            .get(labels::VERSION)
            .is_none()
    );
    let cm = object(&p, OwnedKind::ConfigMap, "sized-config");
    assert!(
        cm["data"]["my.cnf"]
            .as_str()
            .unwrap()
            .contains("innodb_buffer_pool_size = 2048M")
    );
}

#[test]
fn defaults_when_resources_are_absent() {
    let p = plan(&observed(common::mysql()));
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        container(&sts, "mysql")["resources"],
        json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})
    );
    let sts_pg = object(
        &plan(&observed(common::single())),
        OwnedKind::StatefulSet,
        "solo",
    );
    assert!(
        sts_pg["spec"]["volumeClaimTemplates"][0]["spec"]
            .get("storageClassName")
            .is_none()
    );
}

#[test]
fn the_image_registry_comes_from_the_operator_config() {
    let mut o = observed(common::postgresql());
    o.config.image_registry = "registry.internal:5000/mirror/".into();
    o.config.operator_image = "registry.internal:5000/database-operator:1".into();
    let p = plan(&o);
    let sts = object(&p, OwnedKind::StatefulSet, "orders-db");
    assert_eq!(
        container(&sts, "postgresql")["image"],
        "registry.internal:5000/mirror/postgres:16.4"
    );
    // The backup runs in the database image, with the operator binary from the operator image.
    let cron = object(&p, OwnedKind::CronJob, "orders-db-backup");
    let pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.internal:5000/mirror/postgres:16.4"
    );
    assert_eq!(
        pod["initContainers"][0]["image"],
        "registry.internal:5000/database-operator:1"
    );
}

#[test]
fn engines_get_their_ports_probes_and_settings() {
    let p = plan(&observed(common::postgresql()));
    let sts = object(&p, OwnedKind::StatefulSet, "orders-db");
    let db = container(&sts, "postgresql");
    assert_eq!(db["ports"][0]["containerPort"], 5432);
    // The server listens on the pod IP only; probes use the unix socket, never 127.0.0.1.
    assert_eq!(strings(&db["command"]), ["postgres"]);
    let args = strings(&db["args"]).join(" ");
    assert!(args.contains("-c listen_addresses=$(POD_IP)"), "{args}");
    assert_eq!(
        env(db, "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    let probe = strings(&db["readinessProbe"]["exec"]["command"]);
    assert_eq!(probe[0], "pg_isready");
    assert!(probe.contains(&"--host=/var/run/postgresql"), "{probe:?}");
    assert!(!probe.iter().any(|a| a.contains("127.0.0.1")), "{probe:?}");
    // A member may take an hour to start (crash recovery, a clone), and counts as started
    // within 2 s of its server accepting connections.
    let startup = &db["startupProbe"];
    let period = startup["periodSeconds"].as_i64().unwrap();
    assert!(period <= 2, "{startup}");
    assert_eq!(period * startup["failureThreshold"].as_i64().unwrap(), 3600);
    let init = init_container(&sts);
    for (name, secret, key) in [
        ("POSTGRES_PASSWORD", "orders-db-password", "password"),
        (
            "REPLICATION_PASSWORD",
            "orders-db-operator",
            "replication-password",
        ),
        ("ADMIN_PASSWORD", "orders-db-operator", "admin-password"),
    ] {
        let reference = &env(init, name)["valueFrom"]["secretKeyRef"];
        assert_eq!(reference["name"], secret, "{name}");
        assert_eq!(reference["key"], key, "{name}");
        assert!(
            db["env"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["name"] != name),
            "the server container has no {name}"
        );
    }
    assert_eq!(
        env(init, "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
        "status.podIP"
    );
    assert_eq!(
        env(db, "PGDATA")["value"],
        "/var/lib/postgresql/data/pgdata"
    );
    let cm = object(&p, OwnedKind::ConfigMap, "orders-db-config");
    let conf = cm["data"]["postgresql.conf"].as_str().unwrap();
    for setting in [
        "wal_level = replica",
        "hot_standby = on",
        "max_wal_senders",
        "max_replication_slots",
        "shared_buffers = 512MB",
        "listen_addresses = ''",
        "unix_socket_directories = '/var/run/postgresql'",
        "primary_conninfo = 'host=orders-db.default.svc port=5432 user=replicator passfile=/run/database-operator/pgpass'",
        "include_if_exists = '/run/database-operator/tls.conf'",
    ] {
        assert!(conf.contains(setting), "{setting} missing");
    }
    let tls = cm["data"]["tls.conf"].as_str().unwrap();
    assert!(
        tls.contains("ssl = on\nssl_cert_file = '/etc/database-operator-tls/tls.crt'"),
        "{tls}"
    );
    let svc = object(&p, OwnedKind::Service, "orders-db");
    assert_eq!(svc["spec"]["ports"][0]["port"], 5432);
    assert_eq!(svc["spec"]["selector"][labels::ROLE], "primary");
    assert_eq!(
        object(&p, OwnedKind::Service, "orders-db-replicas")["spec"]["selector"][labels::ROLE],
        "replica"
    );
    let headless = object(&p, OwnedKind::Service, "orders-db-headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);

    let p = plan(&observed(common::mysql()));
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    let db = container(&sts, "mysql");
    assert_eq!(db["ports"][0]["containerPort"], 3306);
    assert_eq!(strings(&db["command"]), ["mysqld"]);
    assert_eq!(
        strings(&db["args"]),
        [
            "--defaults-file=/run/database-operator/my.cnf",
            "--bind-address=$(POD_IP)"
        ]
    );
    let probe = strings(&db["livenessProbe"]["exec"]["command"]);
    assert_eq!(probe[0], "mysqladmin");
    assert!(
        probe.contains(&"--socket=/var/run/mysqld/mysqld.sock"),
        "{probe:?}"
    );
    let cnf = object(&p, OwnedKind::ConfigMap, "my-mysql-config")["data"]["my.cnf"]
        .as_str()
        .unwrap()
        .to_owned();
    for setting in [
        "gtid_mode = ON",
        "enforce_gtid_consistency = ON",
        "log_bin",
        "mysql_clone.so",
        "mysqlx = OFF",
    ] {
        assert!(cnf.contains(setting), "{setting} missing");
    }

    let p = plan(&observed(common::stored(json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "maria", "namespace": "shop"},
        "spec": {"engine": "mariadb", "version": "10.11.19", "replicas": 3,
                 "storage": {"size": "5Gi"},
                 "passwordSecretRef": {"name": "maria-root", "key": "password"}}
    }))));
    let sts = object(&p, OwnedKind::StatefulSet, "maria");
    let db = container(&sts, "mariadb");
    assert_eq!(db["image"], "docker.io/library/mariadb:10.11.19");
    assert_eq!(strings(&db["command"]), ["mariadbd"]);
    assert!(strings(&db["args"]).contains(&"--bind-address=$(POD_IP)"));
    assert_eq!(db["readinessProbe"]["exec"]["command"][0], "mariadb-admin");
    assert_eq!(
        env(init_container(&sts), "MARIADB_ROOT_PASSWORD")["valueFrom"]["secretKeyRef"]["name"],
        "maria-root"
    );
    let cm = object(&p, OwnedKind::ConfigMap, "maria-config");
    let cnf = cm["data"]["my.cnf"].as_str().unwrap();
    for setting in ["log_bin", "log_slave_updates = ON", "gtid_strict_mode = ON"] {
        assert!(cnf.contains(setting), "{setting} missing");
    }
    for mysql_only in ["gtid_mode", "mysql_clone.so", "mysqlx"] {
        assert!(!cnf.contains(mysql_only), "{mysql_only} is MySQL's");
    }
    assert!(
        cm["data"]["init.sh"]
            .as_str()
            .unwrap()
            .contains("MASTER_USE_GTID = slave_pos")
    );
}

#[test]
fn scheduling_reaches_the_database_and_backup_pods() {
    let scheduling = json!({
        "nodeSelector": {"database.example.com/process-node": "true"},
        "tolerations": [{"key": "database.example.com/process-node", "operator": "Equal",
                         "value": "true", "effect": "NoSchedule"}],
        "priorityClassName": "db-critical",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway"}]
    });
    let mut cluster = common::mysql();
    cluster.spec.scheduling = Some(serde_json::from_value(scheduling.clone()).unwrap());
    let p = plan(&observed(cluster.clone()));
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    let cron = object(&p, OwnedKind::CronJob, "my-mysql-backup");
    let backup_pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    for pod in [&sts["spec"]["template"]["spec"], backup_pod] {
        for field in [
            "nodeSelector",
            "tolerations",
            "priorityClassName",
            "topologySpreadConstraints",
        ] {
            assert_eq!(pod[field], scheduling[field], "{field}");
        }
    }
    // Without an affinity of its own, the members keep the default anti-affinity.
    assert!(sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"].is_object());
    assert!(backup_pod["affinity"].is_null());

    // An affinity of its own replaces the default as a whole.
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}});
    cluster.spec.scheduling = Some(serde_json::from_value(json!({"affinity": affinity})).unwrap());
    let p = plan(&observed(cluster));
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(sts["spec"]["template"]["spec"]["affinity"], affinity);
    let cron = object(&p, OwnedKind::CronJob, "my-mysql-backup");
    assert_eq!(
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["affinity"],
        affinity
    );
}

#[test]
fn every_object_is_owned_and_labelled() {
    for cluster in [common::mysql(), common::postgresql()] {
        let name = cluster.metadata.name.clone().unwrap();
        let engine = cluster.spec.engine.as_str();
        let p = plan(&observed(cluster));
        for planned in &p.objects {
            let v = planned.object.to_value();
            let owner = &v["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "DatabaseCluster");
            assert_eq!(owner["apiVersion"], "database.example.com/v1alpha1");
            assert_eq!(owner["uid"], common::UID);
            assert_eq!(owner["controller"], true);
            assert_eq!(owner["blockOwnerDeletion"], true);
            let labels = &v["metadata"]["labels"];
            assert_eq!(labels["app.kubernetes.io/name"], engine);
            assert_eq!(labels["app.kubernetes.io/instance"], name.as_str());
            assert_eq!(labels["app.kubernetes.io/managed-by"], "database-operator");
            assert_eq!(labels["app.kubernetes.io/part-of"], "database-operator");
            assert_eq!(labels["database.example.com/cluster"], name.as_str());
        }
    }
}

#[test]
fn backup_cronjob_follows_the_spec() {
    let mut o = observed(common::mysql());
    o.cluster.spec.backup = Some(BackupSpec {
        schedule: "30 3 * * 1".into(),
        retention: 4,
        s3_bucket: "archive".into(),
        endpoint: Some("https://s3.example.net".into()),
        region: Some("eu-west-1".into()),
        credentials_secret_ref: Some(BackupCredentialsRef {
            name: "s3-keys".into(),
            access_key_id_key: "id".into(),
            secret_access_key_key: "secret".into(),
        }),
        deletion_policy: Default::default(),
        verify: None,
        archive: None,
        method: None,
    });
    let p = plan(&o);
    let cron = object(&p, OwnedKind::CronJob, "my-mysql-backup");
    assert_eq!(cron["spec"]["schedule"], "30 3 * * 1");
    assert_eq!(cron["spec"]["timeZone"], "Etc/UTC");
    assert_eq!(cron["spec"]["concurrencyPolicy"], "Forbid");
    let job = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env(job, "RETENTION")["value"], "4");
    assert_eq!(env(job, "S3_BUCKET")["value"], "archive");
    assert_eq!(env(job, "S3_ENDPOINT")["value"], "https://s3.example.net");
    assert_eq!(env(job, "AWS_DEFAULT_REGION")["value"], "eu-west-1");
    assert_eq!(
        env(job, "AWS_ACCESS_KEY_ID")["valueFrom"]["secretKeyRef"],
        json!({"name": "s3-keys", "key": "id", "optional": false})
    );
    assert_eq!(
        env(job, "AWS_SECRET_ACCESS_KEY")["valueFrom"]["secretKeyRef"]["key"],
        "secret"
    );
    // The operator's own account, never the user's Secret.
    assert_eq!(
        env(job, "DB_PASSWORD")["valueFrom"]["secretKeyRef"],
        json!({"name": "my-mysql-operator", "key": "admin-password", "optional": false})
    );
    assert_eq!(env(job, "CLUSTER_NAMESPACE")["value"], "default");
    assert_eq!(env(job, "CLUSTER_NAME")["value"], "my-mysql");
    // The replicas first, then the primary, whatever is ready: the same CronJob before any
    // member is ready and once all are (it is written once).
    assert_eq!(
        env(job, "BACKUP_HOST")["value"],
        "my-mysql-replicas.default.svc,my-mysql.default.svc"
    );
    let steady = running(common::mysql());
    let cron_steady = object(&plan(&steady), OwnedKind::CronJob, "my-mysql-backup");
    let job_steady =
        &cron_steady["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env(job_steady, "BACKUP_HOST"),
        env(job, "BACKUP_HOST"),
        "readiness does not change where a backup dumps from"
    );
    // Without credentials: no key variables, the pod's identity is used.
    let p = plan(&observed(common::mysql()));
    let cron = object(&p, OwnedKind::CronJob, "my-mysql-backup");
    let job = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert!(
        job["env"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"] != "AWS_ACCESS_KEY_ID")
    );
}

#[test]
fn storage_template_is_kept_once_the_statefulset_exists() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| s.storage.size = Quantity("40Gi".into()));
    let p = plan(&steady);
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "20Gi"
    );
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Unchanged
    );
}

#[test]
fn no_password_value_appears_in_any_object() {
    let mut o = observed(common::postgresql());
    o.secret = SecretState::Present {
        fingerprint: "c0ffee".into(),
    };
    let p = plan(&o);
    for planned in &p.objects {
        let text = planned.object.to_value().to_string();
        assert!(!text.contains("change-me-before-production"));
        let v = planned.object.to_value();
        let mut stack = vec![&v];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(m) => {
                    if let (Some(Value::String(n)), Some(_)) = (m.get("name"), m.get("value"))
                        && n.to_uppercase().contains("PASSWORD")
                    {
                        panic!("literal password variable {n}");
                    }
                    stack.extend(m.values());
                }
                Value::Array(a) => stack.extend(a),
                _ => {}
            }
        }
    }
}

#[test]
fn a_catalog_image_replaces_the_usual_one_for_its_version_only() {
    let mut o = observed(common::mysql());
    o.config.images.insert(
        "mysql/8.4.7".into(),
        "registry.local/mysql:8.4.7-debian".into(),
    );
    let sts = object(&plan(&o), OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        container(&sts, "mysql")["image"],
        "registry.local/mysql:8.4.7-debian"
    );
    o.config.images.clear();
    o.config.images.insert(
        "mysql/9.7.4".into(),
        "registry.local/mysql:9.7.4-debian".into(),
    );
    let sts = object(&plan(&o), OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        container(&sts, "mysql")["image"],
        "docker.io/library/mysql:8.4.7"
    );
}

#[test]
fn backup_now_starts_one_job_per_value() {
    use database_operator_core::backup_now;
    let mut o = running(common::postgresql());
    o.cluster
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(backup_now::ANNOTATION.into(), "before-upgrade".into());
    let p = plan(&o);
    assert_eq!(p.backup_jobs.len(), 1, "{:?}", p.backup_jobs);
    let job = &p.backup_jobs[0];
    let name = job.metadata.name.clone().unwrap();
    assert_eq!(name, backup_now::job_name("orders-db", "before-upgrade"));
    assert!(name.starts_with("orders-db-now-") && name.len() == "orders-db-now-".len() + 6);
    // The CronJob's own template: the binary, the database image, the operator's account.
    let cron = object(&p, OwnedKind::CronJob, "orders-db-backup");
    let job_value = serde_json::to_value(job).unwrap();
    assert_eq!(
        job_value["spec"]["template"],
        cron["spec"]["jobTemplate"]["spec"]["template"]
    );
    assert_eq!(
        job_value["metadata"]["ownerReferences"][0]["kind"],
        "DatabaseCluster"
    );
    assert_eq!(
        p.status.handled_backup_now.as_deref(),
        Some("before-upgrade")
    );
    assert!(p.status_changed);
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "BackupRequested" && e.message.contains(&name)),
        "{:?}",
        p.events
    );
    // The status recorded the value: the next pass starts nothing.
    o.cluster.status = Some(p.status.clone());
    let again = plan(&o);
    assert!(again.backup_jobs.is_empty());
    assert!(!again.status_changed);
    assert!(again.events.iter().all(|e| e.reason != "BackupRequested"));
    // A new value starts another.
    o.cluster
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(backup_now::ANNOTATION.into(), "2".into());
    let next = plan(&o);
    assert_eq!(next.backup_jobs.len(), 1);
    assert_ne!(
        next.backup_jobs[0].metadata.name.as_deref(),
        Some(name.as_str())
    );
}

#[test]
fn backup_now_without_spec_backup_is_recorded_with_a_warning() {
    use database_operator_core::backup_now;
    let mut o = running(common::single());
    assert!(o.cluster.spec.backup.is_none());
    o.cluster
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(backup_now::ANNOTATION.into(), "x".into());
    let p = plan(&o);
    assert!(p.backup_jobs.is_empty());
    assert_eq!(p.status.handled_backup_now.as_deref(), Some("x"));
    let warning = p
        .events
        .iter()
        .find(|e| e.reason == "BackupRequested")
        .expect("an event");
    assert_eq!(warning.type_, EventType::Warning);
    assert!(
        warning.message.contains("no spec.backup"),
        "{}",
        warning.message
    );
}

#[test]
fn backup_jobs_set_last_backup_and_backup_healthy() {
    use database_operator_core::{BackupJob, JobOutcome};
    let mut steady = running(common::mysql());
    let healthy = |p: &Plan| {
        p.status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::BACKUP_HEALTHY)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .expect("BackupHealthy")
    };
    // Steady with backups configured and none run: NoBackupYet, and nothing to write.
    assert_eq!(healthy(&plan(&steady)).1, "NoBackupYet");
    assert!(plan(&steady).is_noop());
    let done = steady.now - SignedDuration::from_mins(5);
    steady.backup_jobs = vec![BackupJob {
        name: "my-mysql-backup-29000000".into(),
        started: Some(done - SignedDuration::from_secs(30)),
        finished: Some(done),
        outcome: JobOutcome::Succeeded,
        failure: None,
        drill: false,
    }];
    let p = plan(&steady);
    assert!(p.status_changed);
    assert_eq!(healthy(&p).0, "True");
    let last = p.status.last_backup.clone().expect("lastBackup");
    assert_eq!(last.job, "my-mysql-backup-29000000");
    assert_eq!(last.completed.0, done);
    // One event for the backup, naming its Job and how long it took.
    let completed: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == "BackupCompleted")
        .collect();
    assert_eq!(completed.len(), 1, "{:?}", p.events);
    assert_eq!(completed[0].type_, EventType::Normal);
    assert!(
        completed[0].message.contains("my-mysql-backup-29000000")
            && completed[0].message.contains("in 30s"),
        "{}",
        completed[0].message
    );
    // Written: the next pass has nothing to do, and says nothing again.
    steady.cluster.status = Some(p.status.clone());
    assert!(plan(&steady).is_noop());
    assert!(plan(&steady).events.is_empty());
    // A failed run is named, once.
    steady.backup_jobs.push(BackupJob {
        name: "my-mysql-now-abcdef".into(),
        started: Some(steady.now - SignedDuration::from_secs(60)),
        finished: Some(steady.now - SignedDuration::from_secs(10)),
        outcome: JobOutcome::Failed,
        failure: None,
        drill: false,
    });
    let p = plan(&steady);
    let (status, reason, message) = healthy(&p);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "LastBackupFailed")
    );
    assert!(message.contains("my-mysql-now-abcdef"), "{message}");
    let failed: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == "BackupFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", p.events);
    assert_eq!(failed[0].type_, EventType::Warning);
    assert!(failed[0].message.contains("my-mysql-now-abcdef"));
    assert!(!p.events.iter().any(|e| e.reason == "BackupCompleted"));
    steady.cluster.status = Some(p.status.clone());
    assert!(plan(&steady).events.is_empty());
    // The next backup completes: one event again, and the failure is over.
    steady.backup_jobs.push(BackupJob {
        name: "my-mysql-backup-29000060".into(),
        started: Some(steady.now - SignedDuration::from_secs(8)),
        finished: Some(steady.now - SignedDuration::from_secs(2)),
        outcome: JobOutcome::Succeeded,
        failure: None,
        drill: false,
    });
    let p = plan(&steady);
    let reasons: Vec<&str> = p.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["BackupCompleted"]);
    assert_eq!(healthy(&p).0, "True");
}

#[test]
fn each_restore_drill_is_one_event_that_says_how_it_ended() {
    use database_operator_core::backup::failure::BackupFailure;
    use database_operator_core::{BackupJob, JobOutcome};
    let mut steady = running(common::mysql());
    steady
        .cluster
        .spec
        .backup
        .as_mut()
        .expect("spec.backup")
        .verify = Some(database_operator_api::BackupVerifySpec {
        schedule: "0 5 * * 0".into(),
    });
    steady.cluster.status = Some(plan(&steady).status);
    let drill = |name: &str, outcome, failure, ago: i64| BackupJob {
        name: name.into(),
        started: Some(steady.now - SignedDuration::from_secs(ago + 5)),
        finished: Some(steady.now - SignedDuration::from_secs(ago)),
        outcome,
        failure,
        drill: true,
    };
    steady.backup_jobs = vec![drill("my-mysql-verify-1", JobOutcome::Succeeded, None, 60)];
    let p = plan(&steady);
    let passed: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == "RestoreDrillPassed")
        .collect();
    assert_eq!(passed.len(), 1, "{:?}", p.events);
    assert!(passed[0].message.contains("my-mysql-verify-1"));
    steady.cluster.status = Some(p.status);
    assert!(plan(&steady).events.is_empty(), "said once");
    steady.backup_jobs.push(drill(
        "my-mysql-verify-2",
        JobOutcome::Failed,
        Some(BackupFailure::Mismatch),
        10,
    ));
    let p = plan(&steady);
    let failed: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == "RestoreDrillFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", p.events);
    assert_eq!(failed[0].type_, EventType::Warning);
    let verified = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::BACKUP_VERIFIED)
        .expect("BackupVerified");
    assert!(
        failed[0].message.contains("my-mysql-verify-2")
            && failed[0].message.contains(&verified.message),
        "{}",
        failed[0].message
    );
}

// ---------------------------------------------------------------------------------------------
// status.members: what the servers report, written only when it changes.

#[test]
fn members_are_listed_as_their_servers_report_them_and_rewritten_only_on_a_change() {
    let mut o = running(common::mysql());
    assert!(o.cluster.status.as_ref().unwrap().members.is_empty());
    probe(&mut o);
    o.member_facts.get_mut("my-mysql-2").unwrap().lag_seconds = Some(7);
    let p = plan(&o);
    assert!(p.status_changed);
    let members = &p.status.members;
    let pods: Vec<_> = members.iter().map(|m| m.pod.as_str()).collect();
    assert_eq!(pods, ["my-mysql-0", "my-mysql-1", "my-mysql-2"]);
    assert_eq!(members[0].role, "primary");
    assert_eq!(members[0].lag_seconds, None);
    assert_eq!(members[0].read_only, Some(false));
    assert_eq!(members[1].role, "replica");
    assert_eq!(members[1].lag_seconds, Some(0));
    assert_eq!(members[1].replicating, Some(true));
    assert_eq!(members[2].lag_seconds, Some(5), "7 s is in the 5 s step");
    assert_eq!(members[2].version.as_deref(), Some("8.4.7"));
    o.cluster.status = Some(p.status.clone());

    // A delay that moves within its step writes nothing.
    o.member_facts.get_mut("my-mysql-2").unwrap().lag_seconds = Some(9);
    assert!(!plan(&o).status_changed);
    // Reaching the next step does.
    o.member_facts.get_mut("my-mysql-2").unwrap().lag_seconds = Some(12);
    let p = plan(&o);
    assert!(p.status_changed);
    assert_eq!(p.status.members[2].lag_seconds, Some(10));
    o.cluster.status = Some(p.status);

    // Just after a restart (no facts yet): the list stays, nothing is written.
    let facts = std::mem::take(&mut o.member_facts);
    assert!(!plan(&o).status_changed);
    // Stale facts are no news either.
    o.member_facts = facts.clone();
    later(&mut o, 60);
    let p = plan(&o);
    assert_eq!(p.status.members.len(), 3);
    // A server that misses a probe stays listed (one missed probe on a busy machine is no
    // news), and the plan looks again when it would have been gone for MemberFacts::GONE_AFTER.
    o.member_facts = facts;
    for f in o.member_facts.values_mut() {
        f.probed_at = o.now;
    }
    o.member_facts
        .insert("my-mysql-1".into(), MemberFacts::unreachable(o.now));
    let p = plan(&o);
    assert!(!p.status_changed, "{:?}", p.status.members);
    assert_eq!(p.status.members.len(), 3);
    assert!(
        p.requeue_after.unwrap() <= MemberFacts::GONE_AFTER,
        "{:?}",
        p.requeue_after
    );
    // Still down 2 s later (the run of failed probes started at the first): still listed,
    // looked at again 3 s later.
    let first_failure = o.now;
    later(&mut o, 2);
    let mut down = MemberFacts::unreachable(o.now);
    down.down_since = Some(first_failure);
    o.member_facts.insert("my-mysql-1".into(), down.clone());
    for (pod, f) in o.member_facts.iter_mut() {
        if pod != "my-mysql-1" {
            f.probed_at = o.now;
        }
    }
    let p = plan(&o);
    assert!(!p.status_changed);
    assert!(
        p.requeue_after.unwrap() <= MemberFacts::GONE_AFTER - std::time::Duration::from_secs(2),
        "{:?}",
        p.requeue_after
    );
    // Down for MemberFacts::GONE_AFTER: it leaves the list.
    later(&mut o, 3);
    down.probed_at = o.now;
    o.member_facts.insert("my-mysql-1".into(), down);
    let p = plan(&o);
    assert!(p.status_changed);
    let pods: Vec<_> = p.status.members.iter().map(|m| m.pod.as_str()).collect();
    assert_eq!(pods, ["my-mysql-0", "my-mysql-2"]);
}

#[test]
fn members_whose_servers_never_answered_leave_the_status_alone() {
    // Pods that run no server yet (or kwok's): no fact says anything, nothing is listed or written.
    let mut o = running(common::postgresql());
    for pod in o.pods.clone() {
        o.member_facts
            .insert(pod.name.clone(), MemberFacts::unreachable(o.now));
    }
    let p = plan(&o);
    assert!(p.status.members.is_empty());
    assert!(!p.status_changed);
}

#[test]
fn a_postgresql_standby_that_replayed_past_the_new_timelines_fork_is_restarted_for_a_rewind() {
    use database_operator_core::position::{PgPosition, Position, TimelineHistory, TimelineId};
    let mut o = running(common::postgresql());
    probe(&mut o);
    let pg = |timeline: u32, lsn: &str, history: Option<&str>| {
        Position::Postgresql(PgPosition {
            timeline: TimelineId(timeline),
            lsn: lsn.parse().unwrap(),
            history: history.map(|h| TimelineHistory::parse(h).unwrap()),
        })
    };
    let primary = o
        .pods
        .iter()
        .find(|p| p.labels.get(labels::ROLE).map(String::as_str) == Some("primary"))
        .unwrap()
        .name
        .clone();
    let replicas: Vec<String> = o
        .pods
        .iter()
        .map(|p| p.name.clone())
        .filter(|n| *n != primary)
        .collect();
    // The primary was promoted at 0/5078638 (timeline 2); one standby received WAL of the old
    // primary past that point, the other stopped before it. Both name the primary as source.
    for (pod, position) in [
        (
            &primary,
            pg(
                2,
                "0/5079000",
                Some("1\t0/5078638\tno recovery target specified"),
            ),
        ),
        (&replicas[0], pg(1, "0/50786B0", None)),
        (&replicas[1], pg(1, "0/5078600", None)),
    ] {
        let f = o.member_facts.get_mut(pod).unwrap();
        f.position = Some(position);
        if *pod != primary {
            f.source = Some(primary.clone());
        }
    }
    let p = plan(&o);
    let follows: Vec<&DatabaseCommand> = p
        .database_commands
        .iter()
        .filter(|s| matches!(s, DatabaseCommand::Follow { .. }))
        .collect();
    assert_eq!(
        follows,
        [&DatabaseCommand::Follow {
            pod: replicas[0].clone(),
            source: primary.clone(),
            rewind: true,
        }],
        "{:?}",
        p.database_commands
    );
}

#[test]
fn a_failed_restore_degrades_the_new_cluster_until_its_primary_is_ready() {
    let mut cluster = common::postgresql();
    cluster.spec.bootstrap = Some(
        serde_json::from_value(
            json!({"fromBackup": {"cluster": "orders-old", "s3Bucket": "backups"}}),
        )
        .expect("a bootstrap"),
    );
    let (mut starting, _) = common::converge(observed(cluster), Pods::NotReady, 4);
    let primary = starting.pods[0].name.clone();
    // Before the restore fails: Initializing, as any new cluster.
    let p = plan(&starting);
    assert_eq!(p.status.phase, Some(Phase::Initializing));
    starting.pods[0].failed_init = Some("init container init exited with 1".into());
    let p = plan(&starting);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(degraded.reason, why::RESTORE_FAILED);
    assert_eq!(degraded.status, "True");
    assert!(degraded.message.contains(&primary), "{}", degraded.message);
    assert!(
        degraded.message.contains("exited with 1"),
        "{}",
        degraded.message
    );
    assert_eq!(
        condition(&p.status, conditions::READY).reason,
        why::RESTORE_FAILED
    );
    // The restore's exit code names its cause: the bucket could not be reached.
    let mut unreachable = starting.clone();
    unreachable.pods[0].failed_init = Some("init container init exited with 4".into());
    let message = condition(&plan(&unreachable).status, conditions::DEGRADED)
        .message
        .clone();
    assert!(
        message.contains("exited with 4: the bucket could not be reached (check spec.bootstrap.fromBackup.endpoint"),
        "{message}"
    );
    // A cluster that does not start from a backup: an init failure is no restore failure.
    let mut plain = starting.clone();
    plain.cluster.spec.bootstrap = None;
    assert_ne!(plan(&plain).status.phase, Some(Phase::Degraded));
    // Written; the retry runs (no failure in the pod's init statuses): starting again.
    starting.cluster.status = Some(p.status.clone());
    starting.pods[0].failed_init = None;
    assert_eq!(plan(&starting).status.phase, Some(Phase::Initializing));
    // The retry restored it: the primary is ready and the failure is gone.
    starting.pods[0].ready = true;
    let p = plan(&starting);
    assert_ne!(
        condition(&p.status, conditions::DEGRADED).reason,
        why::RESTORE_FAILED
    );
}

#[test]
fn a_member_pod_names_its_failed_init_container() {
    use database_operator_core::MemberPod;
    use k8s_openapi::api::core::v1::Pod;
    let pod = |statuses: Value| -> MemberPod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "orders-0"},
            "status": {"initContainerStatuses": statuses}
        }))
        .unwrap();
        MemberPod::from_pod(&pod)
    };
    let base = json!({"name": "init", "image": "postgres:15", "imageID": "", "ready": false, "restartCount": 2});
    let with = |extra: Value| {
        let mut s = base.clone();
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!([s])
    };
    // Crash loop: waiting, the last run exited 1.
    let looping = pod(with(json!({
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1}}
    })));
    assert_eq!(
        looping.failed_init.as_deref(),
        Some("init container init exited with 1")
    );
    // Just failed.
    let failed = pod(with(json!({"state": {"terminated": {"exitCode": 3}}})));
    assert_eq!(
        failed.failed_init.as_deref(),
        Some("init container init exited with 3")
    );
    // Running again after a failure: the failure stands until a run completes.
    let running = pod(with(json!({
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 1}}
    })));
    assert_eq!(
        running.failed_init.as_deref(),
        Some("init container init exited with 1")
    );
    let done = pod(with(json!({
        "state": {"terminated": {"exitCode": 0}},
        "lastState": {"terminated": {"exitCode": 1}}
    })));
    assert_eq!(done.failed_init, None);
    assert_eq!(pod(json!([])).failed_init, None);
}

#[test]
fn a_resources_change_rolls_the_replicas_first_as_a_version_change_does() {
    let mut steady = running(common::mysql());
    edit(&mut steady, |s| {
        s.resources
            .get_or_insert_default()
            .requests
            .get_or_insert_default()
            .insert("cpu".into(), Quantity("750m".into()));
    });
    let p = plan(&steady);
    assert_eq!(
        change(&p, OwnedKind::StatefulSet, "my-mysql"),
        Change::Update
    );
    let sts = object(&p, OwnedKind::StatefulSet, "my-mysql");
    assert_eq!(
        container(&sts, "mysql")["resources"]["requests"]["cpu"],
        "750m"
    );
    // Only the highest replica takes the new template first; the primary (ordinal 0) last,
    // after a switchover.
    assert_eq!(
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        2
    );
    let roll = p.status.upgrade.as_ref().expect("a roll in status.upgrade");
    assert_eq!(
        (roll.from.as_str(), roll.to.as_str(), roll.step),
        ("8.4.7", "8.4.7", RollPhase::Replicas)
    );
    assert_eq!(roll.member.as_deref(), Some("my-mysql-2"));
    // The version does not change: no Upgrading phase, one event that says why members restart.
    assert_eq!(p.status.phase, Some(Phase::Running));
    assert_eq!(reasons(&p), ["RollingRestart"]);
    let event = &p.events[0];
    assert!(
        event.message.contains("replicas first, then a switchover"),
        "{}",
        event.message
    );
}

/// A replica whose pod stays Ready (its kubelet cut off, or the operator cut off from it) but
/// whose server has not answered for `GONE_AFTER`: not counted as ready, named, Degraded; one
/// missed probe changes nothing; answering again, Running.
#[test]
fn a_ready_pod_whose_server_went_silent_is_not_counted_ready() {
    let mut o = running(common::postgresql());
    probe(&mut o);
    let steady = plan(&o);
    assert_eq!(steady.status.phase, Some(Phase::Running));
    o = apply(&o, &steady, Pods::Ready);

    let silent = "orders-db-2";
    let down_since = o.now;
    let down = |o: &mut Observed| {
        probe(o);
        let f = o.member_facts.get_mut(silent).unwrap();
        *f = MemberFacts {
            down_since: Some(down_since),
            answered_before: true,
            ..MemberFacts::unreachable(o.now)
        };
    };
    // One missed probe (2 s): no news.
    later(&mut o, 2);
    down(&mut o);
    let p = plan(&o);
    assert_eq!(p.status.phase, Some(Phase::Running));
    assert_eq!(p.status.ready_replicas, 3);
    o = apply(&o, &p, Pods::Ready);

    // Silent for 6 s, its pod still Ready.
    later(&mut o, 4);
    down(&mut o);
    assert!(o.pods.iter().find(|p| p.name == silent).unwrap().ready);
    let p = plan(&o);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    assert_eq!(p.status.ready_replicas, 2);
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", why::INSUFFICIENT_REPLICAS)
    );
    assert!(
        degraded
            .message
            .contains("2/3 replicas ready (orders-db-2 not answering the operator's probes)"),
        "{}",
        degraded.message
    );
    o = apply(&o, &p, Pods::Ready);

    // It answers again.
    later(&mut o, 2);
    probe(&mut o);
    let p = plan(&o);
    assert_eq!(p.status.phase, Some(Phase::Running));
    assert_eq!(p.status.ready_replicas, 3);
    o = apply(&o, &p, Pods::Ready);

    // A server that never answered this operator (a pod without one, or an operator started
    // during the outage) is left to its pod's readiness.
    later(&mut o, 10);
    probe(&mut o);
    let since = o.now.checked_sub(SignedDuration::from_secs(10)).unwrap();
    *o.member_facts.get_mut(silent).unwrap() = MemberFacts {
        down_since: Some(since),
        ..MemberFacts::unreachable(o.now)
    };
    let p = plan(&o);
    assert_eq!(p.status.phase, Some(Phase::Running));
    assert_eq!(p.status.ready_replicas, 3);
}

/// The primary's server silent while its pod is Ready: Degraded `NoPrimary`, named.
#[test]
fn a_silent_primary_is_not_a_ready_primary() {
    let mut o = running(common::postgresql());
    probe(&mut o);
    o = apply(&o, &plan(&o), Pods::Ready);
    let primary = o
        .cluster
        .status
        .as_ref()
        .unwrap()
        .primary_pod
        .clone()
        .unwrap();
    let since = o.now;
    later(&mut o, 6);
    probe(&mut o);
    *o.member_facts.get_mut(&primary).unwrap() = MemberFacts {
        down_since: Some(since),
        answered_before: true,
        ..MemberFacts::unreachable(o.now)
    };
    let p = plan(&o);
    let ready = condition(&p.status, conditions::READY);
    assert_eq!(ready.reason, why::NO_PRIMARY);
    assert!(
        ready
            .message
            .contains(&format!("({primary} not answering the operator's probes)")),
        "{}",
        ready.message
    );
}

/// A replica whose server exits on a full volume: the Degraded message names the member, the
/// cause with the server's own line, and what to do; once Ready again, the old exit is history.
#[test]
fn a_member_whose_server_exited_on_a_full_volume_is_named_with_the_cause() {
    let mut o = running(common::postgresql());
    probe(&mut o);
    o = apply(&o, &plan(&o), Pods::Ready);
    let full = ContainerExit::from_terminated(&ContainerStateTerminated {
        exit_code: 1,
        reason: Some("Error".into()),
        message: Some(
            "PANIC:  could not write to file \"pg_wal/xlogtemp.81\": No space left on device"
                .into(),
        ),
        ..ContainerStateTerminated::default()
    })
    .unwrap();
    later(&mut o, 2);
    probe(&mut o);
    let pod = o.pods.iter_mut().find(|p| p.name == "orders-db-2").unwrap();
    pod.ready = false;
    pod.exits.insert("postgresql".into(), full.clone());
    let p = plan(&o);
    assert_eq!(p.status.phase, Some(Phase::Degraded));
    let degraded = condition(&p.status, conditions::DEGRADED);
    assert!(
        degraded.message.contains(
            "2/3 replicas ready (orders-db-2's server exited with 1: its volume is full (PANIC:  could not write to file \"pg_wal/xlogtemp.81\": No space left on device): free space on it or grow spec.storage.size)"
        ),
        "{}",
        degraded.message
    );
    o = apply(&o, &p, Pods::Ready);

    later(&mut o, 2);
    probe(&mut o);
    let pod = o.pods.iter_mut().find(|p| p.name == "orders-db-2").unwrap();
    // Running again: the kubelet keeps the exit in `lastState`.
    pod.exits.insert("postgresql".into(), full);
    pod.ready = true;
    let p = plan(&o);
    assert_eq!(p.status.phase, Some(Phase::Running));
    let ready = condition(&p.status, conditions::READY);
    assert!(
        !ready.message.contains("volume is full"),
        "{}",
        ready.message
    );
}
