//! Failover through `plan()`: member facts start it, status carries it, the role labels and
//! the database steps follow; without facts a lost primary changes nothing.

mod common;

use common::{postgresql, running};
use database_operator_api::conditions;
use database_operator_api::failover::FailoverPhase;
use database_operator_core::position::{Lsn, PgPosition, Position};
use database_operator_core::{
    DatabaseCommand, MemberFacts, MemberRole, Observed, PodAction, ServerRole, plan,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

fn facts(now: Timestamp, reachable: bool, lsn: u64) -> MemberFacts {
    if !reachable {
        return MemberFacts::unreachable(now);
    }
    MemberFacts {
        reachable: true,
        role: Some(ServerRole::Replica),
        read_only: Some(true),
        position: Some(Position::Postgresql(PgPosition::new(1, Lsn(lsn)))),
        ..MemberFacts::unreachable(now)
    }
}

/// A running three-member cluster whose primary pod is not Ready; `reachable` says which
/// members answer their probe.
fn primary_lost(reachable: [bool; 3]) -> Observed {
    let mut o = running(postgresql());
    let primary = o
        .cluster
        .status
        .as_ref()
        .unwrap()
        .primary_pod
        .clone()
        .unwrap();
    for pod in &mut o.pods {
        if pod.name == primary {
            pod.ready = false;
        }
    }
    let names: Vec<String> = o.pods.iter().map(|p| p.name.clone()).collect();
    for (i, name) in names.iter().enumerate() {
        let up = name != &primary && reachable[i];
        o.member_facts
            .insert(name.clone(), facts(o.now, up, 100 - i as u64));
    }
    o
}

fn pass(o: &mut Observed, seconds: i64) -> database_operator_core::Plan {
    o.now = o
        .now
        .checked_add(SignedDuration::from_secs(seconds))
        .unwrap();
    for f in o.member_facts.values_mut() {
        f.probed_at = o.now;
    }
    let p = plan(o);
    o.cluster.status = Some(p.status.clone());
    p
}

#[test]
fn without_facts_a_lost_primary_changes_nothing_but_readiness() {
    let mut o = running(postgresql());
    let before = plan(&o);
    assert!(before.is_noop());
    o.pods[0].ready = false;
    let p = plan(&o);
    assert!(p.database_commands.is_empty());
    assert!(p.status.failover.is_none());
    assert!(
        !p.status
            .conditions
            .iter()
            .any(|c| c.type_ == conditions::FAILOVER_BLOCKED)
    );
}

#[test]
fn facts_start_a_failover_that_status_carries_and_labels_follow() {
    let mut o = primary_lost([true; 3]);
    let p = pass(&mut o, 0);
    let op = p
        .status
        .failover
        .as_ref()
        .unwrap()
        .operation
        .clone()
        .unwrap();
    assert_eq!(op.phase, FailoverPhase::Detecting);
    assert!(p.status_changed);
    assert!(p.database_commands.is_empty());
    assert!(p.requeue_after.unwrap().as_secs() <= 10);

    let p = pass(&mut o, 10);
    assert_eq!(
        p.database_commands,
        [DatabaseCommand::StopPod {
            pod: op.from.clone()
        }]
    );
    // Nobody keeps the primary label while the old primary is fenced.
    assert!(p.pod_actions.contains(&PodAction::LabelPod {
        pod: op.from.clone(),
        role: MemberRole::Replica
    }));
    assert!(!p.pod_actions.iter().any(|s| matches!(
        s,
        PodAction::LabelPod {
            role: MemberRole::Primary,
            ..
        }
    )));
    assert!(p.events.iter().any(|e| e.reason == "Failover"));
    assert!(!p.is_noop());
}

#[test]
fn most_members_unreachable_sets_failover_blocked() {
    let mut o = primary_lost([true, true, false]);
    pass(&mut o, 0);
    let p = pass(&mut o, 10);
    assert!(p.database_commands.is_empty());
    let c = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FAILOVER_BLOCKED)
        .expect("FailoverBlocked");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "NoQuorum"));
    assert!(p.events.iter().any(|e| e.reason == "FailoverBlocked"));
    // Steady while blocked: no new event.
    let p = pass(&mut o, 1);
    assert!(!p.events.iter().any(|e| e.reason == "FailoverBlocked"));
}

/// A running three-member cluster whose primary is member `ordinal` (after a switchover),
/// every member answering: the primary writable, the others streaming from it.
fn primary_on_member(ordinal: usize) -> Observed {
    let mut o = running(postgresql());
    let name = o.cluster.metadata.name.clone().unwrap();
    let primary = format!("{name}-{ordinal}");
    o.cluster.status.as_mut().unwrap().primary_pod = Some(primary.clone());
    for pod in &mut o.pods {
        let role = if pod.name == primary {
            "primary"
        } else {
            "replica"
        };
        pod.labels.insert(
            database_operator_core::render::labels::ROLE.into(),
            role.into(),
        );
    }
    let names: Vec<String> = o.pods.iter().map(|p| p.name.clone()).collect();
    for name in names {
        let mut f = facts(o.now, true, 100);
        if name == primary {
            f.role = Some(ServerRole::Primary);
            f.read_only = Some(false);
        } else {
            f.source = Some(primary.clone());
            f.replicating = Some(true);
        }
        o.member_facts.insert(name, f);
    }
    o
}

fn stateful_set_replicas(p: &database_operator_core::Plan, o: &Observed) -> Option<i32> {
    let name = o.cluster.metadata.name.clone().unwrap();
    match p
        .objects
        .iter()
        .find(|x| {
            x.object.key().name == name
                && x.object.kind() == database_operator_core::OwnedKind::StatefulSet
        })
        .map(|x| x.object.to_value())
    {
        Some(v) => v["spec"]["replicas"].as_i64().map(|r| r as i32),
        None => None,
    }
}

#[test]
fn a_scale_down_that_would_remove_the_primary_switches_over_first() {
    let mut o = primary_on_member(2);
    let steady = pass(&mut o, 1);
    assert!(
        steady.database_commands.is_empty(),
        "{:?}",
        steady.database_commands
    );
    let name = o.cluster.metadata.name.clone().unwrap();
    o.cluster.spec.replicas = 2;
    o.cluster.metadata.generation = Some(o.cluster.metadata.generation.unwrap_or(1) + 1);
    let p = pass(&mut o, 1);
    // The StatefulSet keeps the primary's pod: three replicas until the primary moved.
    assert_eq!(stateful_set_replicas(&p, &o), Some(3));
    let operation = p
        .status
        .failover
        .as_ref()
        .and_then(|f| f.operation.as_ref())
        .expect("a switchover in flight");
    assert_eq!(operation.to.as_deref(), Some(format!("{name}-0").as_str()));
    assert!(
        operation.reason.contains("the scale-down to 2 members"),
        "{}",
        operation.reason
    );
    assert!(
        p.database_commands
            .iter()
            .any(|c| matches!(c, DatabaseCommand::Fence { pod } if *pod == format!("{name}-2"))),
        "{:?}",
        p.database_commands
    );
    // Once member 0 is the primary, the StatefulSet shrinks.
    let mut moved = primary_on_member(0);
    moved.cluster.spec.replicas = 2;
    let shrunk = pass(&mut moved, 1);
    assert_eq!(stateful_set_replicas(&shrunk, &moved), Some(2));
}

#[test]
fn a_scale_down_that_keeps_the_primary_shrinks_at_once() {
    let mut o = running(postgresql());
    o.cluster.spec.replicas = 2;
    o.cluster.metadata.generation = Some(o.cluster.metadata.generation.unwrap_or(1) + 1);
    let p = pass(&mut o, 1);
    assert_eq!(stateful_set_replicas(&p, &o), Some(2));
    assert!(
        p.status
            .failover
            .as_ref()
            .and_then(|f| f.operation.as_ref())
            .is_none()
    );
}
