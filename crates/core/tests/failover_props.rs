//! Properties of one failover step over arbitrary members and facts: whatever the previous
//! phase, a promotion never picks a member behind another reachable one, nothing acts while
//! most members are unreachable, and without facts nothing happens at all.

use std::collections::BTreeMap;

use database_operator_api::Engine;
use database_operator_api::failover::{
    FailoverKind, FailoverOperation, FailoverPhase, FailoverSpec, FailoverStatus,
};
use database_operator_core::failover::{self, Inputs};
use database_operator_core::members::Member;
use database_operator_core::position::{Lsn, PgPosition, Position};
use database_operator_core::{DatabaseCommand, MemberFacts, ServerRole};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

const NOW: i64 = 1_800_000_100;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

#[derive(Clone, Debug)]
struct Case {
    ready: Vec<bool>,
    facts: Vec<Option<(bool, u64, i64, bool)>>, // reachable, lsn, age, writable primary
    phase: Option<FailoverPhase>,
    to: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..=5).prop_flat_map(|n| {
        (
            prop::collection::vec(any::<bool>(), n),
            prop::collection::vec(
                prop::option::of((any::<bool>(), 0u64..50, 0i64..40, any::<bool>())),
                n,
            ),
            prop::option::of(prop::sample::select(vec![
                FailoverPhase::Detecting,
                FailoverPhase::Fencing,
                FailoverPhase::Promoting,
                FailoverPhase::Repointing,
            ])),
            0..n,
        )
            .prop_map(|(ready, facts, phase, to)| Case {
                ready,
                facts,
                phase,
                to,
            })
    })
}

fn facts_of(case: &Case) -> BTreeMap<String, MemberFacts> {
    case.facts
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let (reachable, lsn, age, writable) = (*f)?;
            let probed_at = at(NOW - age);
            Some((
                format!("db-{i}"),
                if reachable {
                    MemberFacts {
                        reachable: true,
                        role: Some(if writable {
                            ServerRole::Primary
                        } else {
                            ServerRole::Replica
                        }),
                        read_only: Some(!writable),
                        position: Some(Position::Postgresql(PgPosition::new(1, Lsn(lsn)))),
                        ..MemberFacts::unreachable(probed_at)
                    }
                } else {
                    MemberFacts::unreachable(probed_at)
                },
            ))
        })
        .collect()
}

fn run(case: &Case, facts: &BTreeMap<String, MemberFacts>) -> failover::Outcome {
    let n = case.ready.len();
    let names: Vec<String> = (0..n).map(|i| format!("db-{i}")).collect();
    let members: Vec<Member<'_>> = (0..n)
        .map(|i| Member {
            name: &names[i],
            ordinal: i32::try_from(i).unwrap(),
            ready: case.ready[i],
            terminating: false,
            role: None,
            version: None,
            template: None,
            created: None,
            node: None,
            deletion: None,
            initialize: false,
            reseed: None,
            server_exit: None,
        })
        .collect();
    let previous = case.phase.map(|phase| FailoverStatus {
        operation: Some(FailoverOperation {
            kind: FailoverKind::Failover,
            phase,
            started: Time(at(NOW - 100)),
            phase_started: Time(at(NOW - 20)),
            from: "db-0".into(),
            fenced: Some(Time(at(NOW - 25))),
            stopped: None,
            to: matches!(phase, FailoverPhase::Promoting | FailoverPhase::Repointing)
                .then(|| names[case.to].clone()),
            reason: "test".into(),
            request: None,
            candidates: Vec::new(),
        }),
        ..FailoverStatus::default()
    });
    failover::advance(&Inputs {
        cluster: "p/db",
        engine: Engine::Postgresql,
        spec: FailoverSpec::default(),
        replicas: i32::try_from(n).unwrap(),
        members: &members,
        facts,
        primary: "db-0",
        previous: previous.as_ref(),
        blocked_before: None,
        switchover: None,
        upgrade_switchover: None,
        planned_for: "",
        reseed_request: None,
        lease: None,
        has_run: true,
        now: at(NOW),
    })
}

fn fresh(f: &MemberFacts) -> bool {
    at(NOW).duration_since(f.probed_at).as_secs() <= MemberFacts::STALE_AFTER.as_secs() as i64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn promotions_are_never_behind_a_reachable_member_nor_without_a_majority(case in case()) {
        let facts = facts_of(&case);
        let out = run(&case, &facts);
        let n = case.ready.len();
        let reachable: Vec<(&String, &MemberFacts)> =
            facts.iter().filter(|(_, f)| f.reachable && fresh(f)).collect();
        for step in &out.commands {
            if let DatabaseCommand::Promote { pod } = step {
                prop_assert!((n - reachable.len()) * 2 <= n, "promoted {pod} without a majority");
                let mine = facts[pod].position.as_ref().unwrap();
                for (other, f) in &reachable {
                    let theirs = f.position.as_ref().unwrap();
                    prop_assert!(
                        theirs.compare(mine) != database_operator_core::position::Relation::Ahead,
                        "promoted {pod} behind {other}"
                    );
                }
            }
            if let DatabaseCommand::StopPod { pod } = step
                && case.phase == Some(FailoverPhase::Detecting)
            {
                prop_assert!((n - reachable.len()) * 2 <= n, "stopped {pod} without a majority");
            }
        }
    }

    #[test]
    fn without_facts_nothing_happens(mut case in case()) {
        case.phase = None;
        let out = run(&case, &BTreeMap::new());
        prop_assert!(out.commands.is_empty());
        prop_assert!(out.status.is_none());
        prop_assert!(out.events.is_empty());
        prop_assert!(out.blocked.is_none());
    }
}
