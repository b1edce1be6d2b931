//! A starting cluster's progress is written once its members settle.
//!
//! The members of a new cluster start together and become Ready within moments of each other.
//! Writing the status for each of them (`1/3 replicas ready`, `2/3`, then Running) costs a
//! status patch apiece, read by nobody: the API server is at its busiest while clusters are
//! created, and the next patch follows a fraction of a second later. So, while a cluster is
//! Initializing before and after a pass, a status that differs from the written one only in
//! its **progress** waits until no member's readiness has changed for [`SETTLE`]; the pass
//! asks to run again when that time is up. Progress is: the ready count, the reason and
//! message of the `Ready` and `Degraded` conditions (not their True/False), `currentVersion`
//! and the members' facts. Anything else (a phase, a condition turning True or False, the
//! failover, upgrade, backup or password records, a new generation) is written at once, and
//! so is Running, so a cluster reports Running as soon as the last member is Ready.
//!
//! The wait cannot go on for ever: a pod's readiness changes at most once per period of its
//! readiness probe (5 s in the rendered pods), longer than [`SETTLE`]. A readiness change
//! stamped after `now` (the node's clock ahead of the operator's) does not hold anything.

use std::time::Duration;

use database_operator_api::conditions;
use database_operator_api::{DatabaseClusterStatus, Phase};
use k8s_openapi::jiff::Timestamp;

/// How long a starting cluster's members must keep their readiness before its progress is
/// written.
pub const SETTLE: Duration = Duration::from_secs(2);

/// How long to wait before writing `new` in place of the written `previous`: `None` to write
/// it now. `ready_changes` are the members' [`crate::MemberPod::ready_changed`]; `now` is in
/// whole seconds, as they are.
pub fn hold(
    previous: Option<&DatabaseClusterStatus>,
    new: &DatabaseClusterStatus,
    ready_changes: impl IntoIterator<Item = Timestamp>,
    now: Timestamp,
) -> Option<Duration> {
    let previous = previous?;
    if !progress_only(previous, new) {
        return None;
    }
    let newest = ready_changes.into_iter().filter(|t| *t <= now).max()?;
    let age = now.duration_since(newest).unsigned_abs();
    SETTLE.checked_sub(age).filter(|d| !d.is_zero())
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

    #[test]
    fn progress_waits_while_members_are_changing() {
        let (was, now) = (starting(0), starting(1));
        // A member turned Ready this second: wait the rest of SETTLE.
        assert_eq!(hold(Some(&was), &now, [at(10)], at(10)), Some(SETTLE));
        assert_eq!(
            hold(Some(&was), &now, [at(3), at(9)], at(10)),
            Some(Duration::from_secs(1))
        );
        // Settled: written.
        assert_eq!(hold(Some(&was), &now, [at(8)], at(10)), None);
        // A clock ahead of ours holds nothing; nor does a pod without a Ready condition.
        assert_eq!(hold(Some(&was), &now, [at(11)], at(10)), None);
        assert_eq!(hold(Some(&was), &now, [], at(10)), None);
    }

    #[test]
    fn everything_but_progress_is_written_at_once() {
        let was = starting(1);
        let recent = [at(10)];
        // The first status, and an unchanged one.
        assert_eq!(hold(None, &starting(1), recent, at(10)), None);
        assert_eq!(hold(Some(&was), &was, recent, at(10)), None);
        // Running, and Degraded.
        let mut running = starting(3);
        running.phase = Some(Phase::Running);
        assert_eq!(hold(Some(&was), &running, recent, at(10)), None);
        let mut degraded = starting(1);
        degraded.phase = Some(Phase::Degraded);
        degraded.conditions[1].status = "True".into();
        assert_eq!(hold(Some(&was), &degraded, recent, at(10)), None);
        // A condition turning True while still Initializing.
        let mut flipped = starting(2);
        flipped.conditions[0].status = "True".into();
        assert_eq!(hold(Some(&was), &flipped, recent, at(10)), None);
        // A new generation, a failover record, another condition.
        let mut generation = starting(2);
        generation.observed_generation = Some(2);
        assert_eq!(hold(Some(&was), &generation, recent, at(10)), None);
        let mut failover = starting(2);
        failover.failover = Some(Default::default());
        assert_eq!(hold(Some(&was), &failover, recent, at(10)), None);
        let mut other = starting(2);
        other.conditions.push(condition(
            conditions::BACKUP_HEALTHY,
            "False",
            "NoBackupYet",
            "",
        ));
        assert_eq!(hold(Some(&was), &other, recent, at(10)), None);
        // Progress alone waits.
        assert_eq!(hold(Some(&was), &starting(2), recent, at(10)), Some(SETTLE));
    }
}
