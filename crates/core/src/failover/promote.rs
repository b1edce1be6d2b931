//! Promotion of the elected member and repointing of the others at it.

use super::*;

impl Pass<'_, '_> {
    pub(super) fn promote(
        &mut self,
        mut op: FailoverOperation,
        chosen: String,
        report: Vec<FailoverCandidate>,
    ) {
        op.phase = FailoverPhase::Promoting;
        op.phase_started = self.now();
        op.to = Some(chosen.clone());
        op.candidates = report;
        self.commands.push(DatabaseCommand::Promote { pod: chosen });
        self.status.operation = Some(op);
    }

    pub(super) fn promoting(&mut self, mut op: FailoverOperation) {
        self.requeue(ACTIVE_REQUEUE);
        let Some(to) = op.to.clone() else {
            // Not reachable by this code; go back and choose.
            op.phase = FailoverPhase::Fencing;
            return self.fencing(op);
        };
        if self.writable_primary(&to) {
            self.primary = to.clone();
            op.phase = FailoverPhase::Repointing;
            op.phase_started = self.now();
            return self.repointing(op);
        }
        self.label_primary = None;
        // A member that was out of reach when `to` was chosen may be back, and ahead of it:
        // `to` is then not promoted again but fenced like a lost candidate, and the choice made
        // again (it may already have taken the promotion, so it cannot simply be dropped).
        // Only a probe of `to` sent after the promotion counts (one sent before it shows the
        // replica it still was). A switchover's old primary is no such member: the target
        // caught up with it after the fence, and what the fenced server writes since (a
        // checkpoint, a vacuum) is no client's transaction; it rejoins with a rewind.
        let probed_since_promote = self.probed_after(&to, &op.phase_started);
        let others: &[&str] = match op.kind {
            FailoverKind::Failover => &[&to],
            FailoverKind::Switchover => &[&to, &op.from],
        };
        let behind_another = self.position(&to).is_some_and(|mine| {
            self.candidates(others)
                .iter()
                .filter_map(|c| c.position.as_ref())
                .any(|p| mine.compare(p) == Relation::Behind)
        });
        let overtaken = probed_since_promote && behind_another;
        if overtaken || self.server_gone(&to) || self.member(&to).is_none_or(|m| m.terminating) {
            // The chosen member went away mid-promotion: it may have become writable, so it is
            // fenced (its pod stopped) before a failover chooses again among the others.
            self.commands
                .push(DatabaseCommand::StopPod { pod: to.clone() });
            if op.kind == FailoverKind::Switchover && op.stopped.is_none() {
                return self.abort(
                    op,
                    format!("the switchover target {to} stopped answering while being promoted"),
                    true,
                );
            }
            // The old primary is fenced already (a switchover's: stopped, so it cannot be
            // given its writes back and the switchover goes on as a failover); the member to
            // fence now is this one.
            op.kind = FailoverKind::Failover;
            op.stopped = None;
            op.phase = FailoverPhase::Fencing;
            op.phase_started = self.now();
            op.fenced = None;
            op.from = to;
            op.to = None;
            op.candidates.clear();
            self.status.operation = Some(op);
            return;
        }
        // Promote again (a lost step, an operator restart) only while it answers, a majority
        // does, and no reachable member is known to be ahead of it (then wait for a probe of
        // it taken after the promotion: promoted already, or overtaken).
        if self.server_up(&to) && self.quorum().is_ok() && !behind_another {
            self.commands.push(DatabaseCommand::Promote { pod: to });
        }
        self.status.operation = Some(op);
    }

    pub(super) fn repointing(&mut self, op: FailoverOperation) {
        let Some(to) = op.to.clone() else {
            self.status.operation = None;
            return;
        };
        self.primary = to.clone();
        self.label_primary = Some(to.clone());
        let all_follow = self.rejoin_all(&to);
        if !all_follow && self.since(&op.phase_started) < REPOINT_TIMEOUT {
            self.requeue(ACTIVE_REQUEUE);
            self.status.operation = Some(op);
            return;
        }
        let message = completion_message(&op, &to);
        let reason = match op.kind {
            FailoverKind::Failover => EventReason::Failover,
            FailoverKind::Switchover => EventReason::Switchover,
        };
        self.events.push(PlannedEvent::new(
            EventType::Normal,
            reason,
            format!("{}: {message}", self.input.cluster),
        ));
        if op.request.is_some() {
            self.status.handled_switchover = op.request.clone();
        }
        self.status.last = Some(FailoverRecord {
            kind: op.kind,
            outcome: FailoverOutcome::Completed,
            started: op.started,
            finished: self.now(),
            from: op.from,
            to: Some(to),
            reason: op.reason,
            candidates: op.candidates,
        });
        self.status.operation = None;
    }
}
