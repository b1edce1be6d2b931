//! Replication mode (`spec.replication.mode`): whether commits wait for a replica, and the
//! semi-synchronous source switch the operator turns on MySQL and MariaDB members.
//!
//! PostgreSQL needs nothing at run time: its rendered configuration names every member in
//! `synchronous_standby_names` (see `render::config_map`), which a standby ignores and a
//! promoted standby applies from its first commit. MySQL and MariaDB render the replica side on
//! every member; the source side (a commit waits for a replica's acknowledgement) must be on on
//! the primary only, and only once a replica replicates from it: switched on at startup, a lone
//! primary would make its first commits wait for the whole timeout. So the operator decides it
//! here, from the facts, one [`DatabaseCommand::SetSemiSync`] at a time:
//! - on, on the primary, when it answers writable under the primary label and a member
//!   replicates from it; once on it stays on (a replica that goes away makes the source fall
//!   back to asynchronous replication after the timeout, and back again when one catches up);
//! - off, on every other member (a former primary after a switchover), while no failover or
//!   switchover is in flight (a fenced primary's waiting commits keep waiting);
//! - off, on every member, in `async` mode.
//!
//! Nothing happens on facts older than [`MemberFacts::STALE_AFTER`] or without facts.
//!
//! PostgreSQL standbys stream through a physical replication slot each (`member_<ordinal>`,
//! init.sh sets `primary_slot_name`), bounded by `max_slot_wal_keep_size`. The slots live on the
//! primary only and are not replicated, so [`member_slots`] keeps them there: one for every other
//! member the cluster keeps (quarantined ones excepted), created as soon as a new primary
//! answers writable, dropped when a member leaves, made again when one lost its WAL.

use std::collections::BTreeMap;

use database_operator_api::Engine;
use k8s_openapi::jiff::Timestamp;

use crate::{DatabaseCommand, MemberFacts, ServerRole};

/// What [`switches`] decides from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `spec.engine`.
    pub engine: Engine,
    /// Whether commits wait for a replica ([`crate::render::RenderContext::sync_replication`]).
    pub sync: bool,
    /// The member pods (names), the primary among them.
    pub members: &'a [&'a str],
    /// The member that carries the primary label this pass (`None` while failover fences or
    /// promotes).
    pub label_primary: Option<&'a str>,
    /// Whether a failover or switchover is in flight.
    pub failover_in_flight: bool,
    /// The prober's facts, by pod.
    pub facts: &'a BTreeMap<String, MemberFacts>,
    /// Now.
    pub now: Timestamp,
}

/// The semi-synchronous source switches to flip this pass (MySQL and MariaDB; none for
/// PostgreSQL), in member order.
pub fn switches(input: &Inputs<'_>) -> Vec<DatabaseCommand> {
    if !database_operator_engine::of(input.engine).switches_semi_sync() {
        return Vec::new();
    }
    let fresh = |pod: &str| {
        input
            .facts
            .get(pod)
            .filter(|f| f.reachable && f.fresh_at(input.now))
    };
    let replicated = |primary: &str| {
        input.members.iter().any(|m| {
            *m != primary
                && fresh(m).is_some_and(|f| {
                    f.source.as_deref() == Some(primary) && f.replicating == Some(true)
                })
        })
    };
    let mut switches = Vec::new();
    for pod in input.members {
        let Some(enabled) = fresh(pod).and_then(|f| f.semi_sync_source) else {
            continue;
        };
        let primary = input.label_primary == Some(*pod);
        let writable = fresh(pod)
            .is_some_and(|f| f.role == Some(ServerRole::Primary) && f.read_only == Some(false));
        let wanted = if !input.sync {
            false
        } else if primary && writable {
            enabled || replicated(pod)
        } else if primary || input.failover_in_flight {
            // The primary fenced, or anyone during a failover: leave the switch as it is.
            enabled
        } else {
            false
        };
        if wanted != enabled {
            switches.push(DatabaseCommand::SetSemiSync {
                pod: (*pod).to_owned(),
                enabled: wanted,
            });
        }
    }
    switches
}

/// The member slots the primary `label_primary` should keep, when its fresh probe lists
/// different ones ([`MemberFacts::member_slots`], PostgreSQL only): one
/// [`DatabaseCommand::KeepMemberSlots`]. `ordinals` are the members the cluster keeps
/// (`0..spec.replicas`, with or without a pod), `primary_ordinal` the primary's own,
/// `quarantined` those that replicate from nobody.
pub fn member_slots(
    input: &Inputs<'_>,
    ordinals: std::ops::Range<i32>,
    primary_ordinal: i32,
    quarantined: &[i32],
) -> Option<DatabaseCommand> {
    let primary = input.label_primary?;
    let facts = input.facts.get(primary).filter(|f| {
        f.reachable
            && f.fresh_at(input.now)
            && f.role == Some(ServerRole::Primary)
            && f.read_only == Some(false)
    })?;
    let mut have = facts.member_slots.clone()?;
    have.sort();
    let mut want: Vec<String> = ordinals
        .filter(|o| *o != primary_ordinal && !quarantined.contains(o))
        .map(database_operator_engine::statements::member_slot)
        .collect();
    want.sort();
    (have != want).then(|| DatabaseCommand::KeepMemberSlots {
        pod: primary.to_owned(),
        slots: want,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:30Z";

    fn facts(role: ServerRole, source: Option<&str>, semi_sync: Option<bool>) -> MemberFacts {
        MemberFacts {
            role: Some(role),
            read_only: Some(role == ServerRole::Replica),
            source: source.map(str::to_owned),
            replicating: source.map(|_| true),
            semi_sync_source: semi_sync,
            reachable: true,
            ..MemberFacts::unreachable(NOW.parse().unwrap())
        }
    }

    fn run(
        engine: Engine,
        sync: bool,
        in_flight: bool,
        facts: &[(&str, MemberFacts)],
    ) -> Vec<DatabaseCommand> {
        let map: BTreeMap<String, MemberFacts> = facts
            .iter()
            .map(|(p, f)| ((*p).to_owned(), f.clone()))
            .collect();
        let members = ["db-0", "db-1", "db-2"];
        switches(&Inputs {
            engine,
            sync,
            members: &members,
            label_primary: Some("db-0"),
            failover_in_flight: in_flight,
            facts: &map,
            now: NOW.parse().unwrap(),
        })
    }

    fn set(pod: &str, enabled: bool) -> DatabaseCommand {
        DatabaseCommand::SetSemiSync {
            pod: pod.to_owned(),
            enabled,
        }
    }

    #[test]
    fn the_primary_turns_on_once_a_replica_replicates() {
        let lone = [("db-0", facts(ServerRole::Primary, None, Some(false)))];
        assert_eq!(run(Engine::Mariadb, true, false, &lone), vec![]);
        let replicated = [
            ("db-0", facts(ServerRole::Primary, None, Some(false))),
            (
                "db-1",
                facts(ServerRole::Replica, Some("db-0"), Some(false)),
            ),
        ];
        assert_eq!(
            run(Engine::Mysql, true, false, &replicated),
            vec![set("db-0", true)]
        );
        // A replica of someone else does not count.
        let elsewhere = [
            ("db-0", facts(ServerRole::Primary, None, Some(false))),
            (
                "db-1",
                facts(ServerRole::Replica, Some("db-2"), Some(false)),
            ),
        ];
        assert_eq!(run(Engine::Mysql, true, false, &elsewhere), vec![]);
    }

    #[test]
    fn once_on_the_primary_stays_on_without_replicas() {
        let lone = [("db-0", facts(ServerRole::Primary, None, Some(true)))];
        assert_eq!(run(Engine::Mariadb, true, false, &lone), vec![]);
    }

    #[test]
    fn other_members_turn_off_but_not_during_a_failover() {
        let demoted = [
            ("db-0", facts(ServerRole::Primary, None, Some(true))),
            ("db-1", facts(ServerRole::Replica, Some("db-0"), Some(true))),
        ];
        assert_eq!(
            run(Engine::Mariadb, true, false, &demoted),
            vec![set("db-1", false)]
        );
        assert_eq!(run(Engine::Mariadb, true, true, &demoted), vec![]);
    }

    #[test]
    fn a_fenced_primary_keeps_its_switch() {
        let mut fenced = facts(ServerRole::Primary, None, Some(true));
        fenced.read_only = Some(true);
        assert_eq!(
            run(Engine::Mariadb, true, false, &[("db-0", fenced)]),
            vec![]
        );
    }

    #[test]
    fn async_mode_turns_everything_off() {
        let on = [
            ("db-0", facts(ServerRole::Primary, None, Some(true))),
            (
                "db-1",
                facts(ServerRole::Replica, Some("db-0"), Some(false)),
            ),
        ];
        assert_eq!(
            run(Engine::Mysql, false, false, &on),
            vec![set("db-0", false)]
        );
    }

    #[test]
    fn postgresql_stale_or_unknown_facts_do_nothing() {
        let replicated = [
            ("db-0", facts(ServerRole::Primary, None, Some(false))),
            (
                "db-1",
                facts(ServerRole::Replica, Some("db-0"), Some(false)),
            ),
        ];
        assert_eq!(run(Engine::Postgresql, true, false, &replicated), vec![]);
        let unknown = [
            ("db-0", facts(ServerRole::Primary, None, None)),
            ("db-1", facts(ServerRole::Replica, Some("db-0"), None)),
        ];
        assert_eq!(run(Engine::Mariadb, true, false, &unknown), vec![]);
        let mut stale = replicated.clone();
        for (_, f) in &mut stale {
            // 31 s before NOW: older than STALE_AFTER.
            f.probed_at = "2025-12-31T23:59:59Z".parse().unwrap();
        }
        assert_eq!(run(Engine::Mariadb, true, false, &stale), vec![]);
    }

    fn slots(
        primary: MemberFacts,
        label: Option<&str>,
        quarantined: &[i32],
    ) -> Option<DatabaseCommand> {
        let map = BTreeMap::from([("db-1".to_owned(), primary)]);
        let members = ["db-0", "db-1", "db-2", "db-3"];
        member_slots(
            &Inputs {
                engine: Engine::Postgresql,
                sync: false,
                members: &members,
                label_primary: label,
                failover_in_flight: false,
                facts: &map,
                now: NOW.parse().unwrap(),
            },
            0..4,
            1,
            quarantined,
        )
    }

    #[test]
    fn the_primary_keeps_a_slot_for_every_other_member() {
        let with = |have: &[&str]| MemberFacts {
            member_slots: Some(have.iter().map(|s| (*s).to_owned()).collect()),
            ..facts(ServerRole::Primary, None, None)
        };
        let keep = |slots: &[&str]| {
            Some(DatabaseCommand::KeepMemberSlots {
                pod: "db-1".into(),
                slots: slots.iter().map(|s| (*s).to_owned()).collect(),
            })
        };
        // A new primary has none: one for each of the others, not for itself.
        assert_eq!(
            slots(with(&[]), Some("db-1"), &[]),
            keep(&["member_0", "member_2", "member_3"])
        );
        // As wanted (in any order): nothing.
        assert_eq!(
            slots(
                with(&["member_3", "member_0", "member_2"]),
                Some("db-1"),
                &[]
            ),
            None
        );
        // A quarantined member replicates from nobody: its slot goes; a lost one comes back.
        assert_eq!(
            slots(
                with(&["member_0", "member_2", "member_3"]),
                Some("db-1"),
                &[2]
            ),
            keep(&["member_0", "member_3"])
        );
        assert_eq!(
            slots(with(&["member_0", "member_3"]), Some("db-1"), &[]),
            keep(&["member_0", "member_2", "member_3"])
        );
        // No slots listed (MySQL/MariaDB, a standby), a fenced primary, or no primary label
        // (a failover fencing or promoting): nothing.
        assert_eq!(
            slots(facts(ServerRole::Primary, None, None), Some("db-1"), &[]),
            None
        );
        let fenced = MemberFacts {
            read_only: Some(true),
            ..with(&[])
        };
        assert_eq!(slots(fenced, Some("db-1"), &[]), None);
        assert_eq!(slots(with(&[]), None, &[]), None);
    }
}
