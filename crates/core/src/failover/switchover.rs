//! Switchover requests, and aborting an operation before a promotion.

use super::*;

impl Pass<'_, '_> {
    pub(super) fn start_switchover(&mut self, request: String) {
        let primary = self.primary.clone();
        // No probe of the primary or of the requested member yet (an operator that has just
        // started): the request waits for them instead of being refused on no evidence.
        if self.facts(&primary).is_none()
            || (request != SWITCHOVER_AUTO
                && self.member(&request).is_some()
                && self.facts(&request).is_none())
        {
            return;
        }
        let refuse = |pass: &mut Self, why: String| {
            pass.status.handled_switchover = Some(request.clone());
            pass.events.push(PlannedEvent::new(
                EventType::Warning,
                EventReason::Switchover,
                format!(
                    "switchover request {request:?} for {} refused: {why}",
                    pass.input.cluster
                ),
            ));
            let now = pass.now();
            pass.status.last = Some(FailoverRecord {
                kind: FailoverKind::Switchover,
                outcome: FailoverOutcome::Blocked,
                started: now.clone(),
                finished: now,
                from: primary.clone(),
                to: None,
                reason: why,
                candidates: Vec::new(),
            });
        };
        if request == primary {
            self.status.handled_switchover = Some(request.clone());
            self.events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::Switchover,
                format!("{request} is already the primary of {}", self.input.cluster),
            ));
            self.rejoin_all(&primary);
            return;
        }
        if self.pod_down(&primary) || !self.writable_primary(&primary) {
            return refuse(
                self,
                format!(
                    "primary {primary} is not Ready and writable; a lost primary is failover's job"
                ),
            );
        }
        if let Err(b) = self.quorum() {
            return refuse(self, b.message);
        }
        let to = if request == SWITCHOVER_AUTO {
            if self.candidates(&[&primary]).is_empty() {
                return refuse(self, "no replica answers its probe".to_owned());
            }
            None
        } else {
            let ok = self
                .in_spec()
                .any(|m| m.name == request && !m.terminating && m.ready);
            if !ok || self.quarantined(&request) || !self.server_up(&request) {
                return refuse(
                    self,
                    format!("{request} is not a Ready, reachable, unquarantined member"),
                );
            }
            Some(request.clone())
        };
        let message = format!(
            "switchover of {} from {primary} to {} started: {primary} made read-only",
            self.input.cluster,
            to.as_deref().unwrap_or("the most advanced replica")
        );
        let reason = format!("requested by annotation ({request})");
        self.begin_switchover(primary, to, reason, Some(request), message);
    }

    /// Fences `primary` (read-only) and records a switchover in `Fencing`, to `to` (`None`: the
    /// most advanced replica), with the event `message`.
    fn begin_switchover(
        &mut self,
        primary: String,
        to: Option<String>,
        reason: String,
        request: Option<String>,
        message: String,
    ) {
        let now = self.now();
        self.events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::Switchover,
            message,
        ));
        self.commands.push(DatabaseCommand::Fence {
            pod: primary.clone(),
        });
        self.label_primary = None;
        self.status.operation = Some(FailoverOperation {
            kind: FailoverKind::Switchover,
            phase: FailoverPhase::Fencing,
            started: now.clone(),
            phase_started: now,
            from: primary,
            fenced: None,
            stopped: None,
            to,
            reason,
            request,
            candidates: Vec::new(),
        });
        self.requeue(ACTIVE_REQUEUE);
    }

    /// A switchover the upgrade asks for (to an upgraded, healthy replica, or to the
    /// lowest-ordinal member still on the old version). Checked like an annotation request; a
    /// refusal changes nothing (no record, no event: the upgrade asks again and pauses on its
    /// own timeout).
    pub(super) fn start_upgrade_switchover(&mut self, to: String) {
        let primary = self.primary.clone();
        let target_ok = self
            .in_spec()
            .any(|m| m.name == to && !m.terminating && m.ready)
            && !self.quarantined(&to)
            && self.server_up(&to);
        if self.pod_down(&primary)
            || !self.writable_primary(&primary)
            || self.quorum().is_err()
            || !target_ok
        {
            return;
        }
        let planned_for = self.input.planned_for;
        let message = format!(
            "switchover of {} from {primary} to {to} for {planned_for} started: {primary} made read-only",
            self.input.cluster
        );
        let reason = format!("requested by {planned_for} (to {to})");
        self.begin_switchover(primary, Some(to), reason, None, message);
    }

    /// Ends an operation before a promotion: the old primary stays (`unfence`: give it its
    /// writes back).
    pub(super) fn abort(&mut self, op: FailoverOperation, why: String, unfence: bool) {
        if unfence {
            self.commands.push(DatabaseCommand::Unfence {
                pod: op.from.clone(),
            });
        }
        self.label_primary = Some(self.primary.clone());
        if op.request.is_some() {
            self.status.handled_switchover = op.request.clone();
        }
        let reason = match op.kind {
            FailoverKind::Failover => EventReason::Failover,
            FailoverKind::Switchover => EventReason::Switchover,
        };
        self.events.push(PlannedEvent::new(
            EventType::Warning,
            reason,
            format!(
                "{} of {} aborted: {why}",
                kind_word(op.kind),
                self.input.cluster
            ),
        ));
        self.status.last = Some(FailoverRecord {
            kind: op.kind,
            outcome: FailoverOutcome::Aborted,
            started: op.started,
            finished: self.now(),
            from: op.from,
            to: op.to,
            reason: why,
            candidates: op.candidates,
        });
        self.status.operation = None;
    }
}
