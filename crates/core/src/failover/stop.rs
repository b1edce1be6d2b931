//! A switchover's hard fence: on PostgreSQL the old primary's server is stopped before its
//! target is promoted.
//!
//! The switchover's first fence is read-only (`default_transaction_read_only`, sessions ended),
//! which a PostgreSQL client overrides with `BEGIN READ WRITE` (or `SET SESSION
//! CHARACTERISTICS AS TRANSACTION READ WRITE`, which some drivers send): rows it writes on the
//! old primary after the promotion would be acknowledged and then rewound away. So once the
//! target has caught up, the old primary's server is stopped ([`DatabaseCommand::StopServer`]:
//! a clean shutdown, which first sends every change to the standbys streaming from it and
//! waits for them to confirm it), and the target is promoted only once the pod is gone. The
//! replacement pod starts as a replica. MySQL's `super_read_only` refuses every account, so
//! MySQL is promoted at once as before; MariaDB's `read_only` is overridden only by accounts
//! with `READ ONLY ADMIN`, which `root@'%'` does not hold (docs/operations.md).
//!
//! Once the old primary is stopped, the switchover can no longer give it its writes back: if
//! the target stops answering, it goes on as a failover (the most advanced member is
//! promoted).

use super::*;

/// How long a switchover's stop may go unseen (the pod neither Terminating nor replaced)
/// before it is issued again: an operator that ended between the status write and the step
/// lost it, and the write gap lasts until it is repeated. Deleting a pod again is harmless.
pub const STOP_RETRY: Duration = Duration::from_secs(5);

/// Whether a switchover stops the old primary's server before the promotion (its read-only
/// fence is advisory): PostgreSQL
/// ([`database_operator_engine::EngineDef::switchover_stops_old_primary`]).
pub fn hard_fence_by_stop(engine: Engine) -> bool {
    database_operator_engine::of(engine).switchover_stops_old_primary()
}

impl Pass<'_, '_> {
    /// The target caught up with the read-only old primary: stop the old primary's server.
    pub(super) fn stop_old_primary(
        &mut self,
        mut op: FailoverOperation,
        chosen: String,
        report: Vec<FailoverCandidate>,
    ) {
        let from = op.from.clone();
        self.commands
            .push(DatabaseCommand::StopServer { pod: from.clone() });
        self.events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::Switchover,
            format!(
                "switchover of {}: {chosen} caught up with {from}; stopping {from}'s server before {chosen} is promoted (a client can override PostgreSQL's read-only fence)",
                self.input.cluster
            ),
        ));
        let now = self.now();
        op.stopped = Some(now.clone());
        op.phase_started = now;
        op.to = Some(chosen);
        op.candidates = report;
        self.status.operation = Some(op);
    }

    /// The old primary's server was stopped at `stopped`: promote the target once the pod is
    /// gone (its containers stopped) and the target answers.
    pub(super) fn after_stop(&mut self, mut op: FailoverOperation, stopped: Time) {
        let from = op.from.clone();
        // Gone, or replaced by the StatefulSet (the replacement starts as a replica; whole
        // seconds, as in `fenced`).
        let gone = self
            .member(&from)
            .is_none_or(|m| m.created.is_some_and(|c| c >= stopped.0) && !m.terminating);
        if !gone {
            self.blocked = self.stop_unconfirmed(&from);
            let terminating = self.member(&from).is_some_and(|m| m.terminating);
            if !terminating && self.since(&op.phase_started) >= STOP_RETRY {
                self.commands
                    .push(DatabaseCommand::StopServer { pod: from.clone() });
                op.phase_started = self.now();
            }
            self.status.operation = Some(op);
            return;
        }
        let Some(to) = op.to.clone() else {
            return self.continue_as_failover(op, stopped, "no target was recorded".to_owned());
        };
        if self.server_up(&to) && !self.quarantined(&to) {
            let report = std::mem::take(&mut op.candidates);
            return self.promote(op, to, report);
        }
        if self.server_gone(&to) || self.since(&op.phase_started) >= SWITCHOVER_CATCH_UP {
            return self.continue_as_failover(
                op,
                stopped,
                format!("its target {to} stopped answering after {from} was stopped"),
            );
        }
        self.status.operation = Some(op);
    }

    /// The old primary is stopped and the switchover cannot finish: it becomes a failover
    /// whose fence is that stop (the replaced pod counts as fenced), and the election chooses.
    pub(super) fn continue_as_failover(
        &mut self,
        mut op: FailoverOperation,
        stopped: Time,
        why: String,
    ) {
        self.events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::Switchover,
            format!(
                "switchover of {} from {}: {why}; the old primary is stopped, so it goes on as a failover (the most advanced member is promoted)",
                self.input.cluster, op.from
            ),
        ));
        op.kind = FailoverKind::Failover;
        op.phase = FailoverPhase::Fencing;
        op.phase_started = stopped;
        op.fenced = None;
        op.stopped = None;
        op.to = None;
        op.candidates.clear();
        self.status.operation = Some(op);
    }
}
