//! A starting cluster's progress is written once its members settle.
//!
//! The members of a new cluster start together and become Ready within moments of each other.
//! Writing the status for each of them (`1/3 replicas ready`, `2/3`, then Running) costs a
//! status patch apiece, read by nobody: the API server is at its busiest while clusters are
//! created, and the next patch follows a few seconds later. So, while a cluster is
//! Initializing before and after a pass, a status that differs from the written one only in
//! its **progress** waits:
//!
//! - until no member's readiness has changed for [`SETTLE`], and
//! - while some members are Ready and the others are not yet, until [`STARTUP_WAIT`] has
//!   passed since the first of the Ready ones turned Ready: the others usually follow within
//!   seconds (on a loaded control plane the members of one cluster turned Ready up to 7 s
//!   apart), and Running is written the moment the last one does.
//!
//! The pass asks to run again when the wait is up. Progress is: the ready count, the reason and
//! message of the `Ready` and `Degraded` conditions (not their True/False), `currentVersion`
//! and the members' facts. Anything else (a phase, a condition turning True or False, the
//! failover, upgrade, backup or password records, a new generation) is written at once, and
//! so is Running, so a cluster reports Running as soon as the last member is Ready.
//!
//! The wait cannot go on for ever: a pod's readiness changes at most once per period of its
//! readiness probe (5 s in the rendered pods), longer than [`SETTLE`], and the wait for the
//! other members ends [`STARTUP_WAIT`] after the first one turned Ready however the others
//! fare. A readiness change stamped after `now` (the node's clock ahead of the operator's)
//! does not hold anything.

use std::time::Duration;

use database_operator_api::conditions;
use database_operator_api::{DatabaseClusterStatus, Phase};
use k8s_openapi::jiff::Timestamp;

use crate::MemberPod;

/// How long a starting cluster's members must keep their readiness before its progress is
/// written.
pub const SETTLE: Duration = Duration::from_secs(2);

/// How long a starting cluster's progress waits for the rest of its members once one of them
/// is Ready (counted from the first that turned Ready).
pub const STARTUP_WAIT: Duration = Duration::from_secs(10);

/// How long to wait before writing `new` in place of the written `previous`: `None` to write
/// it now. `members` are the cluster's member pods (their readiness and its
/// [`MemberPod::ready_changed`]); `now` is in whole seconds, as those are.
pub fn hold<'a>(
    previous: Option<&DatabaseClusterStatus>,
    new: &DatabaseClusterStatus,
    members: impl IntoIterator<Item = &'a MemberPod>,
    now: Timestamp,
) -> Option<Duration> {
    let previous = previous?;
    if !progress_only(previous, new) {
        return None;
    }
    // The newest readiness change of any member, and the earliest of the Ready ones (changes
    // stamped after `now` left out).
    let (mut newest, mut first_ready) = (None::<Timestamp>, None::<Timestamp>);
    for m in members {
        let Some(changed) = m.ready_changed.filter(|t| *t <= now) else {
            continue;
        };
        newest = newest.max(Some(changed));
        if m.ready {
            first_ready = Some(first_ready.map_or(changed, |t| t.min(changed)));
        }
    }
    let left = |since: Timestamp, wait: Duration| {
        wait.checked_sub(now.duration_since(since).unsigned_abs())
            .filter(|d| !d.is_zero())
    };
    let settling = left(newest?, SETTLE);
    let waiting_for_the_rest = first_ready.and_then(|t| left(t, STARTUP_WAIT));
    settling.max(waiting_for_the_rest)
}

/// Both Initializing, and equal but for their progress.
fn progress_only(previous: &DatabaseClusterStatus, new: &DatabaseClusterStatus) -> bool {
    previous.phase == Some(Phase::Initializing)
        && new.phase == Some(Phase::Initializing)
        && previous != new
        && without_progress(previous) == without_progress(new)
}

fn without_progress(status: &DatabaseClusterStatus) -> DatabaseClusterStatus {
    let mut status = status.clone();
    status.ready_replicas = 0;
    status.current_version = None;
    status.members.clear();
    for c in &mut status.conditions {
        if c.type_ == conditions::READY || c.type_ == conditions::DEGRADED {
            c.reason.clear();
            c.message.clear();
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use database_operator_api::conditions::reasons;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(at(0)),
            observed_generation: Some(1),
        }
    }

    fn starting(ready: i32) -> DatabaseClusterStatus {
        let reason = if ready == 0 {
            reasons::NO_READY_REPLICAS
        } else {
            reasons::INSUFFICIENT_REPLICAS
        };
        let message = format!("starting ns/db: {ready}/3 replicas ready");
        DatabaseClusterStatus {
            phase: Some(Phase::Initializing),
            ready_replicas: ready,
            current_version: (ready > 0).then(|| "16.4".to_string()),
            observed_generation: Some(1),
            conditions: vec![
                condition(conditions::READY, "False", reason, &message),
                condition(
                    conditions::DEGRADED,
                    "False",
                    reasons::AS_EXPECTED,
                    &message,
                ),
            ],
            ..Default::default()
        }
    }

    /// A member pod that is not Ready, its readiness last changed at `t`.
    fn unready(t: i64) -> MemberPod {
        MemberPod {
            ready_changed: Some(at(t)),
            ..Default::default()
        }
    }

    /// A member pod that turned Ready at `t`.
    fn ready(t: i64) -> MemberPod {
        MemberPod {
            ready: true,
            ready_changed: Some(at(t)),
            ..Default::default()
        }
    }

    #[test]
    fn progress_waits_while_members_are_changing() {
        let (was, now) = (starting(0), starting(0));
        let mut now = now;
        now.conditions[0].message = "starting ns/db: 0/3 replicas ready (pods pending)".into();
        // A member's readiness changed this second: wait the rest of SETTLE.
        assert_eq!(hold(Some(&was), &now, &[unready(10)], at(10)), Some(SETTLE));
        assert_eq!(
            hold(Some(&was), &now, &[unready(3), unready(9)], at(10)),
            Some(Duration::from_secs(1))
        );
        // Settled: written.
        assert_eq!(hold(Some(&was), &now, &[unready(8)], at(10)), None);
        // A clock ahead of ours holds nothing; nor does a pod without a Ready condition.
        assert_eq!(hold(Some(&was), &now, &[unready(11)], at(10)), None);
        assert_eq!(hold(Some(&was), &now, &[], at(10)), None);
        assert_eq!(
            hold(Some(&was), &now, &[MemberPod::default()], at(10)),
            None
        );
    }

    #[test]
    fn the_first_ready_member_waits_for_the_others_a_while() {
        let (was, now) = (starting(0), starting(1));
        // The primary turned Ready at 10, the others not yet: 1/3 waits until 20, however
        // settled the members are.
        let members = [ready(10), unready(1), unready(1)];
        assert_eq!(hold(Some(&was), &now, &members, at(10)), Some(STARTUP_WAIT));
        assert_eq!(
            hold(Some(&was), &now, &members, at(15)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            hold(Some(&was), &now, &members, at(19)),
            Some(Duration::from_secs(1))
        );
        // A member still Pending ten seconds after the first was Ready: the count is written.
        assert_eq!(hold(Some(&was), &now, &members, at(20)), None);
        // A second member Ready at 14: 2/3 still waits for the third until 20 (counted from
        // the first), then is written.
        let two = [ready(10), ready(14), unready(1)];
        assert_eq!(
            hold(Some(&was), &starting(2), &two, at(16)),
            Some(Duration::from_secs(4))
        );
        assert_eq!(hold(Some(&was), &starting(2), &two, at(20)), None);
        // 1/3 written long ago, 2/3 now: only SETTLE (the first was Ready long before).
        let (was, now) = (starting(1), starting(2));
        let members = [ready(1), ready(30), unready(1)];
        assert_eq!(
            hold(Some(&was), &now, &members, at(31)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(hold(Some(&was), &now, &members, at(32)), None);
    }

    #[test]
    fn everything_but_progress_is_written_at_once() {
        let was = starting(1);
        let recent = [ready(10), unready(10)];
        // The first status, and an unchanged one.
        assert_eq!(hold(None, &starting(1), &recent, at(10)), None);
        assert_eq!(hold(Some(&was), &was, &recent, at(10)), None);
        // Running, and Degraded.
        let mut running = starting(3);
        running.phase = Some(Phase::Running);
        assert_eq!(hold(Some(&was), &running, &recent, at(10)), None);
        let mut degraded = starting(1);
        degraded.phase = Some(Phase::Degraded);
        degraded.conditions[1].status = "True".into();
        assert_eq!(hold(Some(&was), &degraded, &recent, at(10)), None);
        // A condition turning True while still Initializing.
        let mut flipped = starting(2);
        flipped.conditions[0].status = "True".into();
        assert_eq!(hold(Some(&was), &flipped, &recent, at(10)), None);
        // A new generation, a failover record, another condition.
        let mut generation = starting(2);
        generation.observed_generation = Some(2);
        assert_eq!(hold(Some(&was), &generation, &recent, at(10)), None);
        let mut failover = starting(2);
        failover.failover = Some(Default::default());
        assert_eq!(hold(Some(&was), &failover, &recent, at(10)), None);
        let mut other = starting(2);
        other.conditions.push(condition(
            conditions::BACKUP_HEALTHY,
            "False",
            "NoBackupYet",
            "",
        ));
        assert_eq!(hold(Some(&was), &other, &recent, at(10)), None);
        // Progress alone waits.
        assert_eq!(
            hold(Some(&was), &starting(2), &recent, at(10)),
            Some(STARTUP_WAIT)
        );
    }
}
