//! Reseeding a replica that can no longer catch up, and on request.

use super::*;
use crate::position::GtidSet;
use database_operator_api::failover::ReseedTrigger;

/// `db-0` keeps WAL from 85 on; `db-2` stopped at 80 and does not stream.
fn stranded_world() -> World {
    let mut w = World::healthy(0);
    w.facts.get_mut("db-0").unwrap().retained_from = lsn(85);
    for pod in ["db-1", "db-2"] {
        w.facts.get_mut(pod).unwrap().replicating = Some(pod == "db-1");
    }
    w
}

fn reseed(w: &World) -> database_operator_api::Reseed {
    w.status
        .as_ref()
        .and_then(|s| s.reseed.clone())
        .expect("a reseed in status")
}

#[test]
fn a_replica_behind_the_oldest_wal_is_labelled_restarted_and_finished_once_it_streams() {
    let mut w = stranded_world();
    let out = w.step(1);
    let r = reseed(&w);
    assert_eq!(
        (r.member.as_str(), r.trigger, r.finished.is_some()),
        ("db-2", ReseedTrigger::Automatic, false)
    );
    assert!(r.reason.contains("keeps WAL from"), "{}", r.reason);
    assert_eq!(out.events[0].reason, EventReason::MemberReseeding);
    assert_eq!(out.events[0].type_, EventType::Warning);
    // Not restarted before its pod carries the request.
    assert!(out.commands.is_empty(), "{:?}", out.commands);
    assert_eq!(r.token(), (T0 + 1).to_string());

    // Labelled: restarted (and nothing else is asked of it meanwhile).
    w.reseed_labels[2] = Some(r.token());
    w.created[2] = Some(-100);
    w.refresh(2);
    let out = w.step(2);
    assert_eq!(
        out.commands,
        [DatabaseCommand::StopPod { pod: "db-2".into() }]
    );

    // The new pod, seeding: no second restart, not finished.
    w.created[2] = Some(3);
    w.facts
        .insert("db-2".into(), MemberFacts::unreachable(at(4)));
    w.refresh(4);
    let out = w.step(4);
    assert!(out.commands.is_empty(), "{:?}", out.commands);
    assert!(reseed(&w).finished.is_none());

    // The copy streams: finished, with an event; nothing more.
    w.facts.insert(
        "db-2".into(),
        MemberFacts {
            replicating: Some(true),
            ..up(40, ServerRole::Replica, true, 100, Some("db-0"))
        },
    );
    w.refresh(40);
    let out = w.step(40);
    let r = reseed(&w);
    assert_eq!(r.finished.map(|t| t.0), Some(at(40)));
    assert_eq!(out.events[0].reason, EventReason::MemberReseeded);
    assert!(
        out.events[0].message.contains("39 s"),
        "{}",
        out.events[0].message
    );
    let out = w.step(41);
    assert!(out.events.is_empty() && out.commands.is_empty(), "{out:?}");
}

#[test]
fn no_reseed_while_the_primary_changes_or_is_not_writable() {
    let mut w = stranded_world();
    w.facts.get_mut("db-0").unwrap().read_only = Some(true);
    w.step(1);
    assert!(w.status.as_ref().and_then(|s| s.reseed.as_ref()).is_none());
}

#[test]
fn what_counts_as_stranded() {
    let primary = MemberFacts {
        retained_from: lsn(85),
        ..up(0, ServerRole::Primary, false, 100, None)
    };
    let replica = |pos: u64, replicating: bool| MemberFacts {
        replicating: Some(replicating),
        ..up(0, ServerRole::Replica, true, pos, None)
    };
    assert!(stranded(&replica(80, false), "db-0", &primary).is_some());
    // Streams, or still within what the primary keeps: it catches up by itself.
    assert!(stranded(&replica(80, true), "db-0", &primary).is_none());
    assert!(stranded(&replica(90, false), "db-0", &primary).is_none());
    // Ahead of the primary (its own WAL): rewound or quarantined, never reseeded on its own.
    assert!(stranded(&replica(120, false), "db-0", &primary).is_none());
    // Without the primary's oldest WAL nothing can be told.
    let unknown = MemberFacts {
        retained_from: None,
        ..primary.clone()
    };
    assert!(stranded(&replica(80, false), "db-0", &unknown).is_none());

    // MySQL: its source says the binary logs are purged, and it holds nothing of its own.
    let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    let b = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
    let gtid = |s: &str| Some(Position::Mysql(s.parse::<GtidSet>().unwrap()));
    let primary = MemberFacts {
        position: gtid(&format!("{a}:1-100")),
        ..up(0, ServerRole::Primary, false, 0, None)
    };
    let purged = MemberFacts {
        position: gtid(&format!("{a}:1-10")),
        replicating: Some(false),
        source_lacks_history: true,
        replication_error: Some("Got fatal error 1236 from source".into()),
        ..up(0, ServerRole::Replica, true, 0, None)
    };
    let why = stranded(&purged, "db-0", &primary).expect("stranded");
    assert!(why.contains("binary logs") && why.contains("1236"), "{why}");
    // The same error with an errant transaction: that is divergence, not for a reseed.
    let errant = MemberFacts {
        position: gtid(&format!("{a}:1-10,{b}:1")),
        ..purged.clone()
    };
    assert!(stranded(&errant, "db-0", &primary).is_none());
}

#[test]
fn a_request_names_a_member_and_is_handled_once() {
    let mut w = World::healthy(0);
    w.reseed_request = Some("db-0".into());
    let out = w.step(1);
    assert_eq!(out.events[0].type_, EventType::Warning);
    assert!(
        out.events[0].message.contains("is the primary"),
        "{}",
        out.events[0].message
    );
    assert!(w.step(2).events.is_empty());

    w.reseed_request = Some("db-7".into());
    let out = w.step(3);
    assert!(out.events[0].message.contains("no such member"));

    w.reseed_request = Some("db-1".into());
    let out = w.step(4);
    let r = reseed(&w);
    assert_eq!(
        (r.member.as_str(), r.trigger),
        ("db-1", ReseedTrigger::Requested)
    );
    assert_eq!(out.events[0].type_, EventType::Normal);
    assert_eq!(
        w.status.as_ref().unwrap().handled_reseed.as_deref(),
        Some("db-1")
    );
    // Removing the annotation clears the handled value; the reseed goes on.
    w.reseed_request = None;
    w.step(5);
    assert_eq!(w.status.as_ref().unwrap().handled_reseed, None);
    assert!(reseed(&w).finished.is_none());
}

#[test]
fn a_requested_reseed_of_a_quarantined_member_lifts_its_quarantine() {
    let mut w = World::healthy(0);
    w.status = Some(FailoverStatus {
        quarantined: vec!["db-2".into()],
        ..FailoverStatus::default()
    });
    w.reseed_request = Some("db-2".into());
    w.step(1);
    let status = w.status.as_ref().unwrap();
    assert!(status.quarantined.is_empty());
    assert!(reseed(&w).reason.contains("quarantined"));
}

#[test]
fn a_second_request_waits_for_the_reseed_in_progress() {
    let mut w = stranded_world();
    w.step(1);
    w.reseed_request = Some("db-1".into());
    w.step(2);
    assert_eq!(reseed(&w).member, "db-2");
    assert_eq!(w.status.as_ref().unwrap().handled_reseed, None);
}
