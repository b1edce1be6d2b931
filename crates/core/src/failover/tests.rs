use super::*;
use crate::position::{Lsn, PgPosition};
use k8s_openapi::jiff::SignedDuration;

const T0: i64 = 1_800_000_000;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(T0 + s).unwrap()
}

fn lsn(n: u64) -> Option<Position> {
    Some(Position::Postgresql(PgPosition::new(1, Lsn(n))))
}

fn up(t: i64, role: ServerRole, read_only: bool, pos: u64, source: Option<&str>) -> MemberFacts {
    MemberFacts {
        reachable: true,
        role: Some(role),
        read_only: Some(read_only),
        position: lsn(pos),
        source: source.map(str::to_owned),
        down_since: None,
        ..MemberFacts::unreachable(at(t))
    }
}

struct World {
    ready: Vec<bool>,
    present: Vec<bool>,
    /// Each pod's creation second.
    created: Vec<Option<i64>>,
    /// Each pod's deletion second (its grace period's end), when it is being deleted.
    deletion: Vec<Option<i64>>,
    facts: BTreeMap<String, MemberFacts>,
    status: Option<FailoverStatus>,
    primary: String,
    switchover: Option<String>,
    upgrade_switchover: Option<String>,
    reseed_request: Option<String>,
    /// Each pod's `database.example.com/reseed` label.
    reseed_labels: Vec<Option<String>>,
    /// Each pod's database container's last failed exit.
    server_exits: Vec<Option<crate::ContainerExit>>,
    blocked: Option<&'static str>,
    has_run: bool,
    spec: FailoverSpec,
    lease: Option<crate::LeaseSighting>,
    engine: Engine,
}

impl World {
    /// db-0 primary at 100, db-1 and db-2 replicas at 90 and 80, probed at `t`.
    fn healthy(t: i64) -> World {
        let mut facts = BTreeMap::new();
        facts.insert("db-0".into(), up(t, ServerRole::Primary, false, 100, None));
        facts.insert(
            "db-1".into(),
            up(t, ServerRole::Replica, true, 90, Some("db-0")),
        );
        facts.insert(
            "db-2".into(),
            up(t, ServerRole::Replica, true, 80, Some("db-0")),
        );
        World {
            ready: vec![true; 3],
            present: vec![true; 3],
            created: vec![None; 3],
            deletion: vec![None; 3],
            facts,
            status: None,
            primary: "db-0".into(),
            switchover: None,
            upgrade_switchover: None,
            reseed_request: None,
            reseed_labels: vec![None; 3],
            server_exits: vec![None; 3],
            blocked: None,
            has_run: true,
            spec: FailoverSpec::default(),
            lease: None,
            engine: Engine::Postgresql,
        }
    }

    fn step(&mut self, t: i64) -> Outcome {
        let names: Vec<String> = (0..3).map(|i| format!("db-{i}")).collect();
        let members: Vec<Member<'_>> = (0..3)
            .filter(|&i| self.present[i])
            .map(|i| Member {
                name: &names[i],
                ordinal: i as i32,
                ready: self.ready[i],
                terminating: self.deletion[i].is_some(),
                role: None,
                version: None,
                template: None,
                created: self.created[i].map(at),
                node: Some(["node-a", "node-b", "node-c"][i]),
                deletion: self.deletion[i].map(at),
                initialize: false,
                reseed: self.reseed_labels[i].as_deref(),
                server_exit: self.server_exits[i].as_ref(),
            })
            .collect();
        let out = advance(&Inputs {
            cluster: "shop/orders",
            engine: self.engine,
            spec: self.spec.clone(),
            replicas: 3,
            members: &members,
            facts: &self.facts,
            primary: &self.primary,
            previous: self.status.as_ref(),
            blocked_before: self.blocked,
            switchover: self.switchover.as_deref(),
            upgrade_switchover: self.upgrade_switchover.as_deref(),
            planned_for: "the upgrade",
            reseed_request: self.reseed_request.as_deref(),
            lease: self.lease.as_ref(),
            has_run: self.has_run,
            now: at(t),
        });
        self.status = out.status.clone();
        self.primary = out.primary.clone();
        self.blocked = out.blocked.as_ref().map(|b| b.reason);
        out
    }

    fn lose_primary(&mut self, t: i64) {
        self.ready[0] = false;
        self.facts
            .insert("db-0".into(), MemberFacts::unreachable(at(t)));
    }

    fn phase(&self) -> Option<FailoverPhase> {
        self.status.as_ref()?.operation.as_ref().map(|o| o.phase)
    }

    /// PostgreSQL's hard fence: the switchover stopped `db-0`; its pod is gone (the
    /// StatefulSet has not recreated it yet).
    fn stopped_primary_gone(&mut self) {
        self.present[0] = false;
        self.facts
            .insert("db-0".into(), MemberFacts::unreachable(at(0)));
    }

    fn refresh(&mut self, t: i64) {
        for f in self.facts.values_mut() {
            f.probed_at = at(t);
        }
    }
}

#[test]
fn no_facts_no_failover_and_no_status() {
    let mut w = World::healthy(0);
    w.facts.clear();
    w.ready[0] = false;
    let out = w.step(100);
    assert_eq!(out.status, None);
    assert!(out.commands.is_empty() && out.events.is_empty() && out.blocked.is_none());
    assert_eq!(out.primary, "db-0");
    assert_eq!(out.label_primary.as_deref(), Some("db-0"));
}

#[test]
fn a_steady_cluster_does_nothing() {
    let mut w = World::healthy(0);
    let out = w.step(0);
    assert_eq!(out.status, None);
    assert!(out.commands.is_empty() && out.events.is_empty());
}

#[test]
fn a_cluster_that_never_ran_is_starting_not_failing() {
    // The primary's first start (init, a restore) takes longer than the delay, and most
    // members do not answer yet: no failover and no FailoverBlocked warning.
    let mut w = World::healthy(0);
    w.has_run = false;
    w.lose_primary(0);
    w.ready[1] = false;
    w.facts
        .insert("db-1".into(), MemberFacts::unreachable(at(0)));
    for t in [0, 15, 60, 300] {
        let out = w.step(t);
        assert_eq!(out.status, None, "at {t}s");
        assert!(
            out.events.is_empty() && out.blocked.is_none(),
            "at {t}s: {out:?}"
        );
        assert_eq!(out.primary, "db-0");
    }
    // Once it has run, the same signals start a failover, and then refuse it with the reason.
    w.has_run = true;
    w.lose_primary(301);
    w.facts
        .insert("db-1".into(), MemberFacts::unreachable(at(301)));
    let out = w.step(301);
    assert!(out.status.is_some_and(|s| s.operation.is_some()) || out.blocked.is_some());
}

#[test]
fn one_signal_is_not_enough() {
    // Pod not Ready, server answers.
    let mut w = World::healthy(0);
    w.ready[0] = false;
    assert_eq!(w.step(0).status, None);
    // Pod Ready, server does not answer (a network cut between operator and member).
    let mut w = World::healthy(0);
    w.facts
        .insert("db-0".into(), MemberFacts::unreachable(at(0)));
    assert_eq!(w.step(0).status, None);
    // Both, but the failed probe is stale: no signal.
    let mut w = World::healthy(0);
    w.lose_primary(0);
    w.facts.get_mut("db-0").unwrap().probed_at = at(-31);
    assert_eq!(w.step(0).status, None);
}

#[test]
fn failover_runs_detect_fence_promote_repoint() {
    let mut w = World::healthy(0);
    w.lose_primary(0);
    let out = w.step(0);
    assert_eq!(w.phase(), Some(FailoverPhase::Detecting));
    assert!(out.commands.is_empty());
    assert_eq!(out.label_primary.as_deref(), Some("db-0"));
    assert_eq!(out.requeue_after, Some(Duration::from_secs(10)));

    // Within the delay: wait.
    w.refresh(5);
    assert!(w.step(5).commands.is_empty());
    assert_eq!(w.phase(), Some(FailoverPhase::Detecting));

    // After it: stop the old primary's pod, nobody carries the primary label.
    w.refresh(10);
    let out = w.step(10);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    assert_eq!(out.label_primary, None);
    assert_eq!(out.events[0].reason, EventReason::Failover);
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));

    // Still there: not fenced, no promotion.
    w.refresh(11);
    assert!(w.step(11).commands.is_empty());

    // Gone: fenced; positions must come from probes after that moment.
    w.present[0] = false;
    w.facts.remove("db-0");
    let out = w.step(12);
    assert!(out.commands.is_empty());
    w.refresh(12);
    assert!(
        w.step(12).commands.is_empty(),
        "probes of the fence's second are older"
    );
    w.refresh(13);
    let out = w.step(13);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Promote { pod: "db-1".into() }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Promoting));
    let op = w.status.as_ref().unwrap().operation.clone().unwrap();
    assert_eq!(op.candidates[0].verdict, CandidateVerdict::Chosen);
    assert_eq!(op.candidates[1].pod, "db-2");
    assert_eq!(
        op.candidates[1].reason,
        "behind db-1: lacks 10 bytes of WAL"
    );

    // Promoted: db-2 is pointed at it, the label follows.
    w.facts
        .insert("db-1".into(), up(14, ServerRole::Primary, false, 90, None));
    w.refresh(14);
    let out = w.step(14);
    assert_eq!(out.primary, "db-1");
    assert_eq!(out.label_primary.as_deref(), Some("db-1"));
    assert_eq!(
        out.commands,
        [DatabaseCommand::Follow {
            pod: "db-2".into(),
            source: "db-1".into(),
            rewind: false
        }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Repointing));

    // Everyone follows: done, recorded, announced.
    w.facts.insert(
        "db-2".into(),
        up(15, ServerRole::Replica, true, 90, Some("db-1")),
    );
    w.refresh(15);
    let out = w.step(15);
    assert_eq!(w.phase(), None);
    let last = w.status.as_ref().unwrap().last.clone().unwrap();
    assert_eq!(last.outcome, FailoverOutcome::Completed);
    assert_eq!(last.to.as_deref(), Some("db-1"));
    assert_eq!(out.events[0].reason, EventReason::Failover);
    assert_eq!(
        out.events[0].message,
        "shop/orders: promoted db-1 (timeline 1, LSN 0/5A; most advanced position); db-2 lost (timeline 1, LSN 0/50): behind db-1: lacks 10 bytes of WAL; old primary db-0 fenced (pod stopped)"
    );

    // The ex-primary comes back behind: it follows (a PostgreSQL one past the fork would
    // be rewound).
    w.present[0] = true;
    w.facts
        .insert("db-0".into(), up(16, ServerRole::Replica, true, 95, None));
    let out = w.step(16);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Follow {
            pod: "db-0".into(),
            source: "db-1".into(),
            rewind: true
        }]
    );
}

#[test]
fn a_primary_whose_server_exited_on_a_full_volume_says_so_in_the_failover() {
    let full = crate::ContainerExit::from_terminated(
        &k8s_openapi::api::core::v1::ContainerStateTerminated {
            exit_code: 1,
            message: Some(
                "PANIC:  could not write to file \"pg_wal/xlogtemp.81\": No space left on device"
                    .into(),
            ),
            ..Default::default()
        },
    );
    let mut w = World::healthy(0);
    w.server_exits[0] = full;
    w.lose_primary(0);
    w.step(0);
    let reason = w
        .status
        .as_ref()
        .unwrap()
        .operation
        .as_ref()
        .unwrap()
        .reason
        .clone();
    assert!(
        reason.starts_with("primary db-0: pod not Ready and server unreachable; its server exited with 1: its volume is full (PANIC:"),
        "{reason}"
    );
    w.refresh(10);
    let out = w.step(10);
    assert!(
        out.events[0].message.contains("its volume is full"),
        "{}",
        out.events[0].message
    );
}

#[test]
fn the_primary_coming_back_within_the_delay_ends_detection() {
    let mut w = World::healthy(0);
    w.lose_primary(0);
    w.step(0);
    w.ready[0] = true;
    w.facts
        .insert("db-0".into(), up(3, ServerRole::Primary, false, 100, None));
    let out = w.step(3);
    assert_eq!(w.phase(), None);
    assert!(out.commands.is_empty());
}

#[test]
fn most_members_unreachable_blocks() {
    let mut w = World::healthy(0);
    w.lose_primary(0);
    w.facts
        .insert("db-2".into(), MemberFacts::unreachable(at(0)));
    w.step(0);
    let out = w.step(10);
    assert!(out.commands.is_empty());
    let blocked = out.blocked.unwrap();
    assert_eq!(blocked.reason, reasons::NO_QUORUM);
    assert!(
        blocked
            .message
            .starts_with("2/3 members of shop/orders are unreachable")
    );
    assert_eq!(out.events[0].reason, EventReason::FailoverBlocked);
    // Once: the next pass does not repeat the event.
    let out = w.step(11);
    assert!(out.events.is_empty());
    assert_eq!(w.phase(), Some(FailoverPhase::Detecting));
}

#[test]
fn disabled_failover_blocks() {
    let mut w = World::healthy(0);
    w.lose_primary(0);
    let names: Vec<String> = (0..3).map(|i| format!("db-{i}")).collect();
    let members: Vec<Member<'_>> = (0..3)
        .map(|i| Member {
            name: &names[i],
            ordinal: i as i32,
            ready: w.ready[i],
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
    let out = advance(&Inputs {
        cluster: "shop/orders",
        engine: Engine::Postgresql,
        spec: FailoverSpec {
            enabled: false,
            ..FailoverSpec::default()
        },
        replicas: 3,
        members: &members,
        facts: &w.facts,
        primary: "db-0",
        previous: None,
        blocked_before: None,
        switchover: None,
        upgrade_switchover: None,
        planned_for: "the upgrade",
        reseed_request: None,
        lease: None,
        has_run: true,
        now: at(0),
    });
    assert_eq!(out.blocked.unwrap().reason, reasons::FAILOVER_DISABLED);
    assert!(out.commands.is_empty());
}

#[test]
fn switchover_fences_waits_for_catch_up_promotes_and_records_the_request() {
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    let out = w.step(0);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Fence { pod: "db-0".into() }]
    );
    assert_eq!(out.label_primary, None);
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));

    // Not confirmed yet: the fence is repeated (idempotent).
    w.refresh(1);
    let out = w.step(1);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Fence { pod: "db-0".into() }]
    );
    // Read-only now, but db-2 is behind: wait.
    w.facts
        .insert("db-0".into(), up(2, ServerRole::Primary, true, 100, None));
    w.refresh(2);
    let out = w.step(2);
    assert!(out.commands.is_empty());
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));

    // Caught up: PostgreSQL's read-only fence is advisory, so the old primary's server is
    // stopped first, and nothing is promoted while its pod is still there.
    w.facts.insert(
        "db-2".into(),
        up(3, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.refresh(3);
    let out = w.step(3);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopServer { pod: "db-0".into() }]
    );
    assert!(out.events[0].message.contains("stopping db-0's server"));
    w.deletion[0] = Some(13);
    w.refresh(3);
    assert!(w.step(3).commands.is_empty());
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    // Gone: promote the target.
    w.stopped_primary_gone();
    w.deletion[0] = None;
    let out = w.step(3);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Promote { pod: "db-2".into() }]
    );
    // The replacement starts as a replica.
    w.present[0] = true;
    w.created[0] = Some(4);
    w.facts
        .insert("db-0".into(), up(4, ServerRole::Replica, true, 100, None));

    w.facts
        .insert("db-2".into(), up(4, ServerRole::Primary, false, 100, None));
    w.refresh(4);
    let out = w.step(4);
    assert_eq!(out.primary, "db-2");
    assert!(out.commands.contains(&DatabaseCommand::Follow {
        pod: "db-0".into(),
        source: "db-2".into(),
        rewind: false
    }));
    w.facts.insert(
        "db-0".into(),
        up(5, ServerRole::Replica, true, 100, Some("db-2")),
    );
    w.facts.insert(
        "db-1".into(),
        up(5, ServerRole::Replica, true, 100, Some("db-2")),
    );
    let out = w.step(5);
    assert_eq!(w.phase(), None);
    assert_eq!(out.events[0].reason, EventReason::Switchover);
    let status = w.status.clone().unwrap();
    assert_eq!(status.handled_switchover.as_deref(), Some("db-2"));
    // The same annotation again: nothing.
    assert!(w.step(6).commands.is_empty());
    // Removed, then written again: a new request.
    w.switchover = None;
    w.step(7);
    assert_eq!(w.status.as_ref().unwrap().handled_switchover, None);
    w.switchover = Some("db-0".into());
    w.facts
        .insert("db-2".into(), up(8, ServerRole::Primary, false, 100, None));
    w.refresh(8);
    assert_eq!(
        w.step(8).commands,
        [DatabaseCommand::Fence { pod: "db-2".into() }]
    );
}

#[test]
fn a_switchover_whose_target_does_not_catch_up_gives_the_writes_back() {
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    w.step(0);
    w.facts
        .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
    for t in 1..60 {
        w.refresh(t);
        w.step(t);
    }
    w.refresh(60);
    let out = w.step(60);
    assert!(
        out.commands
            .contains(&DatabaseCommand::Unfence { pod: "db-0".into() })
    );
    let status = w.status.clone().unwrap();
    assert_eq!(status.last.unwrap().outcome, FailoverOutcome::Aborted);
    assert_eq!(status.handled_switchover.as_deref(), Some("db-2"));
    assert_eq!(out.label_primary.as_deref(), Some("db-0"));
}

#[test]
fn a_switchover_outlasts_a_missed_probe_but_not_a_lost_server() {
    // The primary misses one probe while being fenced: the switchover waits, then goes on.
    // (MySQL: promoted without stopping the old primary, so the switchover can give up.)
    let mut w = World::healthy(0);
    w.engine = Engine::Mysql;
    w.switchover = Some("db-2".into());
    w.step(0);
    w.facts.insert("db-0".into(), down(1, 1));
    w.refresh(1);
    w.facts.insert("db-0".into(), down(1, 1));
    let out = w.step(1);
    assert!(out.commands.is_empty(), "{:?}", out.commands);
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    assert!(w.status.as_ref().unwrap().last.is_none());
    w.facts
        .insert("db-0".into(), up(2, ServerRole::Primary, true, 100, None));
    w.facts.insert(
        "db-2".into(),
        up(2, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.refresh(2);
    w.step(2);
    w.refresh(3);
    let out = w.step(3);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Promote { pod: "db-2".into() }]
    );
    // The target misses a probe while being promoted: not stopped, promoted again once it
    // answers.
    w.refresh(4);
    w.facts.insert("db-2".into(), down(4, 4));
    let out = w.step(4);
    assert!(
        !out.commands
            .contains(&DatabaseCommand::StopPod { pod: "db-2".into() }),
        "{:?}",
        out.commands
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Promoting));
    // Gone for the grace: the target is stopped and the switchover given up.
    let t = 4 + MemberFacts::GONE_AFTER.as_secs() as i64;
    w.refresh(t);
    w.facts.insert("db-2".into(), down(4, t));
    let out = w.step(t);
    assert!(
        out.commands
            .contains(&DatabaseCommand::StopPod { pod: "db-2".into() })
    );
    let last = w.status.clone().unwrap().last.unwrap();
    assert_eq!(last.outcome, FailoverOutcome::Aborted);

    // A primary that stays silent through the grace ends the switchover (failover's case).
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    w.step(0);
    let t = MemberFacts::GONE_AFTER.as_secs() as i64;
    w.refresh(t);
    w.facts.insert("db-0".into(), down(0, t));
    w.step(t);
    let last = w.status.clone().unwrap().last.unwrap();
    assert_eq!(last.outcome, FailoverOutcome::Aborted);
    assert!(last.reason.contains("stopped answering"), "{}", last.reason);
}

#[test]
fn a_switchover_to_an_unknown_pod_is_refused_once() {
    let mut w = World::healthy(0);
    w.switchover = Some("db-7".into());
    let out = w.step(0);
    assert!(out.commands.is_empty());
    assert_eq!(out.events[0].type_, EventType::Warning);
    let status = w.status.clone().unwrap();
    assert_eq!(status.last.unwrap().outcome, FailoverOutcome::Blocked);
    assert!(w.step(1).events.is_empty());
}

#[test]
fn a_mysql_member_with_errant_transactions_is_quarantined() {
    use crate::position::GtidSet;
    let gtid = |s: &str| Some(Position::Mysql(s.parse::<GtidSet>().unwrap()));
    let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    let b = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
    let mut facts = BTreeMap::new();
    facts.insert(
        "db-0".to_owned(),
        MemberFacts {
            position: gtid(&format!("{a}:1-10")),
            ..up(0, ServerRole::Primary, false, 0, None)
        },
    );
    facts.insert(
        "db-1".to_owned(),
        MemberFacts {
            position: gtid(&format!("{a}:1-8,{b}:1")),
            ..up(0, ServerRole::Replica, true, 0, None)
        },
    );
    let names = ["db-0".to_owned(), "db-1".to_owned()];
    let members: Vec<Member<'_>> = (0..2)
        .map(|i| Member {
            name: &names[i],
            ordinal: i as i32,
            ready: true,
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
    let out = advance(&Inputs {
        cluster: "shop/orders",
        engine: Engine::Mysql,
        spec: FailoverSpec::default(),
        replicas: 2,
        members: &members,
        facts: &facts,
        primary: "db-0",
        previous: None,
        blocked_before: None,
        switchover: None,
        upgrade_switchover: None,
        planned_for: "the upgrade",
        reseed_request: None,
        lease: None,
        has_run: true,
        now: at(0),
    });
    assert_eq!(
        out.commands,
        [DatabaseCommand::Quarantine { pod: "db-1".into() }]
    );
    assert_eq!(out.status.unwrap().quarantined, ["db-1"]);
    assert_eq!(out.events[0].reason, EventReason::MemberQuarantined);
}

#[test]
fn an_upgrade_switchover_fences_the_primary_and_is_never_recorded_as_handled() {
    let mut w = World::healthy(0);
    w.upgrade_switchover = Some("db-2".into());
    let out = w.step(0);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Fence { pod: "db-0".into() }]
    );
    assert_eq!(out.label_primary, None);
    let op = w.status.as_ref().unwrap().operation.clone().unwrap();
    assert_eq!(op.kind, FailoverKind::Switchover);
    assert_eq!(op.to.as_deref(), Some("db-2"));
    assert_eq!(op.request, None);
    assert_eq!(w.status.as_ref().unwrap().handled_switchover, None);

    // A request for a member that cannot take over changes nothing and says nothing.
    let mut w = World::healthy(0);
    w.ready[2] = false;
    w.upgrade_switchover = Some("db-2".into());
    let out = w.step(0);
    assert!(out.commands.is_empty());
    assert!(out.events.is_empty());
    assert_eq!(w.phase(), None);
    assert!(w.status.as_ref().is_none_or(|s| s.last.is_none()));

    // Naming the primary itself is nothing to do.
    let mut w = World::healthy(0);
    w.upgrade_switchover = Some("db-0".into());
    assert!(w.step(0).commands.is_empty());
    assert_eq!(w.phase(), None);
}

#[test]
fn a_replica_as_far_as_the_old_primary_wins_the_tie() {
    let mut w = World::healthy(0);
    w.facts.insert(
        "db-1".into(),
        up(0, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.lose_primary(0);
    w.step(0);
    w.refresh(10);
    let out = w.step(10);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    // The fenced pod is back, read-only, as far as db-1 (nothing was lost).
    w.ready[0] = true;
    w.facts
        .insert("db-0".into(), up(11, ServerRole::Replica, true, 100, None));
    w.refresh(11);
    w.step(11);
    w.refresh(12);
    let out = w.step(12);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Promote { pod: "db-1".into() }],
        "{:?}",
        w.status
    );
}

/// db-0's server failed every probe since `since`, the last one at `t`.
fn down(since: i64, t: i64) -> MemberFacts {
    MemberFacts {
        down_since: Some(at(since)),
        ..MemberFacts::unreachable(at(t))
    }
}

#[test]
fn the_delay_counts_from_the_first_failed_probe() {
    let mut w = World::healthy(0);
    // The server stopped answering at 0; the pod stays Ready until its readiness probe
    // catches up at 6: nothing happens on one signal.
    w.facts.insert("db-0".into(), down(0, 4));
    assert_eq!(w.step(4).status, None);
    // Both signals at 6: detecting since the first failed probe, 4 s left of the 10.
    w.ready[0] = false;
    w.facts.insert("db-0".into(), down(0, 6));
    let out = w.step(6);
    assert!(out.commands.is_empty());
    let op = w.status.as_ref().unwrap().operation.clone().unwrap();
    assert_eq!(op.phase, FailoverPhase::Detecting);
    assert_eq!(op.started, Time(at(0)));
    assert_eq!(out.requeue_after, Some(Duration::from_secs(4)));
    w.refresh(9);
    assert!(w.step(9).commands.is_empty());
    w.refresh(10);
    let out = w.step(10);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
}

#[test]
fn a_pod_not_ready_after_the_delay_is_fenced_in_the_same_pass() {
    let mut w = World::healthy(0);
    w.ready[0] = false;
    w.facts.insert("db-0".into(), down(0, 12));
    let out = w.step(12);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    // Still both signals at the moment of acting: a Ready pod is not fenced.
    let mut w = World::healthy(0);
    w.facts.insert("db-0".into(), down(0, 12));
    assert!(w.step(12).commands.is_empty());
    assert_eq!(w.phase(), None);
}

#[test]
fn an_answer_from_the_server_starts_the_count_again() {
    let mut w = World::healthy(0);
    w.ready[0] = false;
    w.facts.insert("db-0".into(), down(0, 2));
    w.step(2);
    assert_eq!(w.phase(), Some(FailoverPhase::Detecting));
    // It answered at 5 (no pass saw it) and failed again from 6: the run starts at 6.
    w.facts.insert("db-0".into(), down(6, 11));
    w.refresh(11);
    assert!(w.step(11).commands.is_empty());
    assert_eq!(w.phase(), Some(FailoverPhase::Detecting));
    w.refresh(16);
    assert_eq!(
        w.step(16).commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
}

#[test]
fn a_stop_that_was_not_carried_out_is_asked_for_again_at_the_next_pass() {
    // Seen through an API server failing some requests: the delete of the old primary's pod
    // failed, and the fence waited FENCE_RETRY (30 s) before asking again.
    let mut w = World::healthy(0);
    w.ready[0] = false;
    w.created[0] = Some(-100);
    w.facts.insert("db-0".into(), down(0, 10));
    assert_eq!(
        w.step(10).commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    // The very pod still there, not being deleted: asked again, pass after pass.
    for t in [11, 12] {
        w.refresh(t);
        assert_eq!(
            w.step(t).commands,
            [DatabaseCommand::StopPod { pod: "db-0".into() }],
            "at {t}"
        );
    }
    // Being deleted: nothing more (its node is what has to stop it).
    w.deletion[0] = Some(40);
    w.refresh(13);
    assert!(w.step(13).commands.is_empty());
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
}

#[test]
fn a_pod_recreated_after_the_stop_counts_as_fenced() {
    let mut w = World::healthy(0);
    w.ready[0] = false;
    w.facts.insert("db-0".into(), down(0, 10));
    w.step(10);
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    // The pod created before the stop is the old one (still there): not fenced.
    w.created[0] = Some(-100);
    w.refresh(11);
    w.step(11);
    let op = w.status.as_ref().unwrap().operation.clone().unwrap();
    assert_eq!(op.fenced, None);
    // The StatefulSet's replacement (created after the stop, its server not answering yet):
    // the stopped pod is gone.
    w.created[0] = Some(11);
    w.refresh(12);
    w.step(12);
    let op = w.status.as_ref().unwrap().operation.clone().unwrap();
    assert_eq!(op.fenced, Some(Time(at(12))));
    w.refresh(13);
    assert_eq!(
        w.step(13).commands,
        [DatabaseCommand::Promote { pod: "db-1".into() }]
    );
}

#[test]
fn a_switchover_target_still_a_replica_after_its_promotion_is_not_stopped() {
    // Seen on real servers during an upgrade: the fenced PostgreSQL primary still writes WAL (a
    // checkpoint), so its position passes the target's for a moment, and the target's first
    // probe after the Promote shows the replica it still was. That is no member ahead of the
    // target: the switchover waits for the promotion instead of stopping the new primary.
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    w.step(0);
    w.facts
        .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
    w.facts.insert(
        "db-2".into(),
        up(1, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.refresh(1);
    w.step(1);
    w.refresh(2);
    let out = w.step(2);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopServer { pod: "db-0".into() }]
    );
    // Its replacement comes back as a standby that wrote a little more WAL (a checkpoint).
    w.created[0] = Some(3);
    w.facts
        .insert("db-0".into(), up(3, ServerRole::Replica, true, 101, None));
    w.refresh(3);
    let out = w.step(3);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Promote { pod: "db-2".into() }]
    );

    w.facts
        .insert("db-0".into(), up(3, ServerRole::Primary, true, 101, None));
    w.refresh(3);
    let out = w.step(3);
    assert!(
        !out.commands.iter().any(|s| matches!(
            s,
            DatabaseCommand::StopPod { .. } | DatabaseCommand::Unfence { .. }
        )),
        "{:?}",
        out.commands
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Promoting));
    assert_eq!(out.label_primary, None);

    w.facts
        .insert("db-2".into(), up(4, ServerRole::Primary, false, 100, None));
    w.refresh(4);
    let out = w.step(4);
    assert_eq!(out.primary, "db-2");
    assert_eq!(w.phase(), Some(FailoverPhase::Repointing));
}

#[test]
fn a_probe_sent_within_the_second_of_a_decision_does_not_confirm_it() {
    // Status keeps whole seconds: a fence decided at 0.7 s reads back as 0 s, and a read-only
    // answer stamped 0.5 s was sent before the fence. It confirms nothing.
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    w.step(0);
    let half = at(0).checked_add(SignedDuration::from_millis(500)).unwrap();
    let mut early = up(0, ServerRole::Primary, true, 100, None);
    early.probed_at = half;
    w.facts.insert("db-0".into(), early);
    let out = w.step(1);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Fence { pod: "db-0".into() }]
    );
    let op = w.status.as_ref().unwrap().operation.as_ref().unwrap();
    assert_eq!(op.fenced, None);
    // The next probe, sent after the end of the decision's second, confirms it.
    w.facts
        .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
    w.step(1);
    let op = w.status.as_ref().unwrap().operation.as_ref().unwrap();
    assert!(op.fenced.is_some());
}

#[test]
fn a_primary_on_a_lost_node_is_not_promoted_over_until_its_pod_is_gone() {
    let mut w = World::healthy(0);
    w.ready[0] = false;
    w.facts.insert("db-0".into(), down(0, 10));
    let out = w.step(10);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    // Its node never confirms the stop: the pod stays Terminating (grace period to 11).
    w.deletion[0] = Some(11);
    for t in 11..21 {
        w.refresh(t);
        let out = w.step(t);
        assert!(out.blocked.is_none(), "blocked too early at {t}");
        assert!(
            !out.commands
                .iter()
                .any(|s| matches!(s, DatabaseCommand::Promote { .. }))
        );
    }
    w.refresh(21);
    let out = w.step(21);
    let blocked = out.blocked.clone().expect("FenceUnconfirmed");
    assert_eq!(blocked.reason, reasons::FENCE_UNCONFIRMED);
    assert!(
        blocked.message.contains("node-a") && blocked.message.contains("out-of-service"),
        "{}",
        blocked.message
    );
    assert_eq!(
        out.events.len(),
        1,
        "one warning when it starts: {:?}",
        out.events
    );
    assert_eq!(out.label_primary, None);
    // Still blocked a minute later: no promotion, no second event, and the Terminating pod
    // is not deleted again and again (that changes nothing).
    for t in 22..80 {
        w.refresh(t);
        let out = w.step(t);
        assert_eq!(
            out.blocked.map(|b| b.reason),
            Some(reasons::FENCE_UNCONFIRMED)
        );
        assert!(out.events.is_empty());
        assert!(out.commands.is_empty(), "{:?}", out.commands);
    }
    // The node is marked out of service and Kubernetes removes the pod: fenced, promoted.
    w.present[0] = false;
    w.facts.remove("db-0");
    w.refresh(80);
    let out = w.step(80);
    assert!(out.blocked.is_none());
    w.refresh(81);
    assert_eq!(
        w.step(81).commands,
        [DatabaseCommand::Promote { pod: "db-1".into() }]
    );
}

/// `nodeLoss: SelfFence`, lease 6 s, delay 5 s; the primary's agent renewed (as the runtime
/// saw it) at `renewed`, the Lease last read at `checked`.
fn self_fencing(w: &mut World, renewed: i64, checked: i64, holder: &str) {
    w.spec = FailoverSpec {
        delay_seconds: 5,
        node_loss: database_operator_api::NodeLossPolicy::SelfFence,
        lease_seconds: 6,
        ..FailoverSpec::default()
    };
    w.lease = Some(crate::LeaseSighting {
        holder: Some(holder.into()),
        renew_time: Some(at(renewed)),
        renewal_seen_at: at(renewed),
        observed_renewal: true,
        checked_at: at(checked),
        duration: Duration::from_secs(6),
    });
}

/// The primary's node powered off at 1: its pod stays Ready (nobody updates it), its server
/// has failed every probe since 1.
fn node_lost(w: &mut World, t: i64) {
    w.refresh(t);
    w.facts.insert(
        "db-0".into(),
        MemberFacts {
            down_since: Some(at(1)),
            ..MemberFacts::unreachable(at(t))
        },
    );
}

#[test]
fn self_fence_fails_over_from_a_lost_node_once_the_lease_expired() {
    let mut w = World::healthy(0);
    // Before the lease (6 s + 2 s margin from the renewal seen at 0) expired: the pod is
    // Ready, so one signal only.
    for t in [2, 5, 7] {
        self_fencing(&mut w, 0, t, "db-0");
        node_lost(&mut w, t);
        assert_eq!(w.step(t).status, None, "at {t}s");
    }
    // Expired: lost; the delay ran from the first failed probe (1), so fencing at once.
    self_fencing(&mut w, 0, 8, "db-0");
    node_lost(&mut w, 8);
    let out = w.step(8);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-0".into() }]
    );
    let op = w.status.as_ref().unwrap().operation.clone().unwrap();
    assert!(op.reason.contains("primary Lease"), "{}", op.reason);
    assert_eq!(op.started, Time(at(1)));
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    // The pod stays (Terminating, its node is gone), but the lease is its fence: no
    // FenceUnconfirmed, the fence is confirmed and positions compared after it.
    w.deletion[0] = Some(9);
    node_lost(&mut w, 9);
    self_fencing(&mut w, 0, 9, "db-0");
    let out = w.step(9);
    assert!(out.commands.is_empty() && out.blocked.is_none(), "{out:?}");
    node_lost(&mut w, 11);
    self_fencing(&mut w, 0, 11, "db-0");
    let out = w.step(11);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Promote { pod: "db-1".into() }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Promoting));
}

#[test]
fn wait_never_counts_a_lease() {
    let mut w = World::healthy(0);
    self_fencing(&mut w, 0, 30, "db-0");
    w.spec.node_loss = database_operator_api::NodeLossPolicy::Wait;
    node_lost(&mut w, 30);
    assert_eq!(w.step(30).status, None);
}

#[test]
fn a_lease_held_by_another_member_or_stopped_long_before_proves_nothing() {
    // Another holder.
    let mut w = World::healthy(0);
    self_fencing(&mut w, 0, 30, "db-1");
    node_lost(&mut w, 30);
    assert_eq!(w.step(30).status, None);
    // Renewals stopped at -20, long before the server went away at 1: the agent was not
    // running, nothing says the server was fenced.
    let mut w = World::healthy(0);
    self_fencing(&mut w, -20, 30, "db-0");
    node_lost(&mut w, 30);
    assert_eq!(w.step(30).status, None);
}

#[test]
fn a_primary_whose_agent_cannot_renew_keeps_read_only() {
    // The primary answers read-only (its agent fenced it: no API access), nothing else is
    // writable: without the lease it would get its writes back; with it, LeaseNotRenewed.
    let mut w = World::healthy(0);
    w.facts
        .insert("db-0".into(), up(20, ServerRole::Primary, true, 100, None));
    w.refresh(20);
    let out = w.step(20);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Unfence { pod: "db-0".into() }]
    );
    self_fencing(&mut w, 0, 20, "db-0");
    let out = w.step(20);
    assert!(out.commands.is_empty(), "{out:?}");
    let blocked = out.blocked.unwrap();
    assert_eq!(blocked.reason, reasons::LEASE_NOT_RENEWED);
    assert!(
        blocked.message.contains("orders-primary"),
        "{}",
        blocked.message
    );
    // Renewed again: writes come back.
    self_fencing(&mut w, 19, 20, "db-0");
    let out = w.step(20);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Unfence { pod: "db-0".into() }]
    );
    // Renewed, but that read is older than a lease, or the Lease names someone else (not
    // applied yet): nothing until a fresh read says so.
    self_fencing(&mut w, 12, 13, "db-0");
    assert!(w.step(20).commands.is_empty());
    self_fencing(&mut w, 19, 20, "db-1");
    assert!(w.step(20).commands.is_empty());
    w.lease = None;
    assert!(w.step(20).commands.is_empty());
}

#[test]
fn a_postgresql_switchover_waits_for_the_stopped_primary_and_stops_it_again_when_it_stays() {
    let mut w = World::healthy(0);
    w.switchover = Some("db-1".into());
    w.step(0);
    w.facts
        .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
    w.facts.insert(
        "db-1".into(),
        up(1, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.refresh(1);
    w.step(1);
    w.refresh(2);
    assert_eq!(
        w.step(2).commands,
        [DatabaseCommand::StopServer { pod: "db-0".into() }]
    );
    let op = w.status.clone().unwrap().operation.unwrap();
    assert_eq!(op.stopped, Some(Time(at(2))));
    assert_eq!(op.to.as_deref(), Some("db-1"));
    // The delete did not take: the pod is still there, still answering (read-only), and
    // nothing is promoted; it is stopped again after STOP_RETRY. Its silence is no abort.
    for t in 3..(2 + STOP_RETRY.as_secs() as i64) {
        w.refresh(t);
        let out = w.step(t);
        assert!(out.commands.is_empty(), "at {t}: {:?}", out.commands);
    }
    let t = 2 + STOP_RETRY.as_secs() as i64;
    w.facts.insert("db-0".into(), down(t - 1, t));
    w.refresh(t);
    assert_eq!(
        w.step(t).commands,
        [DatabaseCommand::StopServer { pod: "db-0".into() }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    assert!(w.status.clone().unwrap().last.is_none());
}

#[test]
fn a_postgresql_switchover_whose_target_is_lost_after_the_stop_goes_on_as_a_failover() {
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    w.step(0);
    w.facts
        .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
    w.facts.insert(
        "db-2".into(),
        up(1, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.facts.insert(
        "db-1".into(),
        up(1, ServerRole::Replica, true, 99, Some("db-0")),
    );
    w.refresh(1);
    w.step(1);
    w.refresh(2);
    w.step(2);
    // The old primary is gone, and so is the target, for good.
    w.stopped_primary_gone();
    let t = 2 + MemberFacts::GONE_AFTER.as_secs() as i64;
    w.facts.insert("db-2".into(), down(2, t));
    w.facts.insert(
        "db-1".into(),
        up(t, ServerRole::Replica, true, 100, Some("db-0")),
    );
    let out = w.step(t);
    assert!(
        !out.commands
            .iter()
            .any(|c| matches!(c, DatabaseCommand::Unfence { .. })),
        "a stopped primary cannot be given its writes back: {:?}",
        out.commands
    );
    assert!(
        out.events
            .iter()
            .any(|e| e.message.contains("goes on as a failover")),
        "{:?}",
        out.events
    );
    let op = w.status.clone().unwrap().operation.unwrap();
    assert_eq!(op.kind, FailoverKind::Failover);
    assert_eq!(out.label_primary, None);
    // The failover elects among the members that answer (a majority: the old primary's
    // replacement is back as a standby): never the lost target.
    w.present[0] = true;
    w.created[0] = Some(t);
    let mut promoted = None;
    for t in (t + 1)..(t + 10) {
        w.facts
            .insert("db-0".into(), up(t, ServerRole::Replica, true, 100, None));
        w.facts.insert(
            "db-1".into(),
            up(t, ServerRole::Replica, true, 100, Some("db-0")),
        );
        w.facts.insert("db-2".into(), down(2, t));
        let out = w.step(t);
        if let Some(DatabaseCommand::Promote { pod }) = out.commands.first() {
            promoted = Some(pod.clone());
            break;
        }
    }
    assert!(
        matches!(promoted.as_deref(), Some("db-0" | "db-1")),
        "{promoted:?}, blocked: {:?}",
        w.blocked
    );
}

#[test]
fn a_mysql_switchover_promotes_without_stopping_the_old_primary() {
    let mut w = World::healthy(0);
    w.engine = Engine::Mysql;
    w.switchover = Some("db-1".into());
    w.step(0);
    w.facts
        .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
    w.facts.insert(
        "db-1".into(),
        up(1, ServerRole::Replica, true, 100, Some("db-0")),
    );
    w.refresh(1);
    w.step(1);
    w.refresh(2);
    assert_eq!(
        w.step(2).commands,
        [DatabaseCommand::Promote { pod: "db-1".into() }]
    );
}

#[test]
fn a_member_with_another_system_identifier_is_quarantined_and_never_promoted() {
    let mut w = World::healthy(0);
    for f in w.facts.values_mut() {
        f.server_id = Some("7301".into());
    }
    w.step(0);
    assert_eq!(
        w.status.as_ref().unwrap().identity.as_deref(),
        Some("7301"),
        "recorded from the primary"
    );
    // db-2's volume now holds another database (initialized elsewhere), the most advanced
    // position of all by its own count.
    w.facts.insert(
        "db-2".into(),
        MemberFacts {
            server_id: Some("9999".into()),
            ..up(1, ServerRole::Primary, false, 500, None)
        },
    );
    w.refresh(1);
    let out = w.step(1);
    assert!(
        out.commands
            .contains(&DatabaseCommand::Quarantine { pod: "db-2".into() }),
        "{:?}",
        out.commands
    );
    assert!(
        !out.commands
            .iter()
            .any(|c| matches!(c, DatabaseCommand::Follow { pod, .. } if pod == "db-2")),
        "never pointed at the primary: {:?}",
        out.commands
    );
    assert!(out.events[0].message.contains("system identifier 9999"));
    assert_eq!(w.status.as_ref().unwrap().quarantined, ["db-2"]);
    // The recorded identity never changes.
    assert_eq!(w.status.as_ref().unwrap().identity.as_deref(), Some("7301"));

    // The primary is lost: db-1 is promoted, never db-2 (even once out of quarantine).
    w.status.as_mut().unwrap().quarantined.clear();
    w.lose_primary(2);
    let mut promoted = None;
    for t in 2..40 {
        w.facts.insert(
            "db-1".into(),
            MemberFacts {
                server_id: Some("7301".into()),
                ..up(t, ServerRole::Replica, true, 100, Some("db-0"))
            },
        );
        w.facts.insert(
            "db-2".into(),
            MemberFacts {
                server_id: Some("9999".into()),
                ..up(t, ServerRole::Primary, true, 500, None)
            },
        );
        w.facts.insert("db-0".into(), down(2, t));
        let out = w.step(t);
        // The fence: the old primary's pod is gone.
        if out
            .commands
            .contains(&DatabaseCommand::StopPod { pod: "db-0".into() })
        {
            w.present[0] = false;
        }
        if let Some(pod) = out.commands.iter().find_map(|c| match c {
            DatabaseCommand::Promote { pod } => Some(pod.clone()),
            _ => None,
        }) {
            promoted = Some(pod);
            break;
        }
    }
    assert_eq!(
        promoted.as_deref(),
        Some("db-1"),
        "blocked {:?}, status {:?}",
        w.blocked,
        w.status
    );
}

#[test]
fn mysql_members_have_identities_of_their_own() {
    let mut w = World::healthy(0);
    w.engine = Engine::Mysql;
    for (i, f) in w.facts.values_mut().enumerate() {
        f.server_id = Some(format!("uuid-{i}"));
    }
    let out = w.step(0);
    assert!(
        w.status.as_ref().is_none_or(|s| s.identity.is_none()),
        "nothing recorded"
    );
    assert!(
        !out.commands
            .iter()
            .any(|c| matches!(c, DatabaseCommand::Quarantine { .. })),
        "{:?}",
        out.commands
    );
}

#[test]
fn an_operator_that_restarts_mid_switchover_waits_for_its_first_probes() {
    let mut w = World::healthy(0);
    w.switchover = Some("db-2".into());
    w.step(0);
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    // A new operator: the status says Fencing, its prober has reported nothing yet.
    let facts = std::mem::take(&mut w.facts);
    let out = w.step(1);
    assert!(
        w.status.as_ref().unwrap().last.is_none(),
        "aborted without a probe: {:?}",
        w.status.as_ref().unwrap().last
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
    assert!(
        !out.commands
            .iter()
            .any(|c| matches!(c, DatabaseCommand::Unfence { .. })),
        "{:?}",
        out.commands
    );
    // The first probes: the switchover goes on (the fence repeated).
    w.facts = facts;
    w.refresh(2);
    let out = w.step(2);
    assert!(
        out.commands
            .contains(&DatabaseCommand::Fence { pod: "db-0".into() }),
        "{:?}",
        out.commands
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
}

#[test]
fn a_switchover_requested_before_the_first_probes_waits_for_them() {
    let mut w = World::healthy(0);
    let facts = std::mem::take(&mut w.facts);
    w.switchover = Some("db-2".into());
    let out = w.step(0);
    assert!(out.commands.is_empty(), "{:?}", out.commands);
    assert!(
        out.events.is_empty(),
        "refused on no evidence: {:?}",
        out.events
    );
    assert!(
        w.status
            .as_ref()
            .is_none_or(|s| s.handled_switchover.is_none() && s.last.is_none()),
        "{:?}",
        w.status
    );
    // The probes come: the switchover starts.
    w.facts = facts;
    w.refresh(1);
    let out = w.step(1);
    assert_eq!(
        out.commands,
        [DatabaseCommand::Fence { pod: "db-0".into() }]
    );
    assert_eq!(w.phase(), Some(FailoverPhase::Fencing));
}

mod reseed;
