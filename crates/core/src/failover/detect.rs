//! Detection: the idle state (steady-state rejoin, quarantine, a switchover request, a lost
//! primary) and `Detecting`, which waits `delaySeconds` before fencing.

use super::*;

impl Pass<'_, '_> {
    pub(super) fn idle(&mut self) {
        // The annotation was removed: the next value, even the same one, is a new request.
        if self.input.switchover.is_none() {
            self.status.handled_switchover = None;
        }
        if let Some(request) = self
            .input
            .switchover
            .filter(|r| self.status.handled_switchover.as_deref() != Some(*r))
        {
            return self.start_switchover(request.to_owned());
        }
        if let Some(to) = self
            .input
            .upgrade_switchover
            .filter(|to| *to != self.primary)
        {
            return self.start_upgrade_switchover(to.to_owned());
        }
        let primary = self.primary.clone();
        if self.input.has_run && self.lost(&primary) {
            if !self.input.spec.enabled {
                self.blocked = Some(Blocked {
                    reason: reasons::FAILOVER_DISABLED,
                    message: format!(
                        "primary {primary} of {} is lost (pod not Ready, server unreachable) and spec.failover.enabled is false: bring it back, or enable failover",
                        self.input.cluster
                    ),
                });
                return;
            }
            // The delay runs from the first failed probe of the server, not from the moment
            // the pod's readiness probe caught up: both signals must hold when acting, but
            // the kubelet's verdict lags the prober's by its period times its threshold.
            let since = Time(self.down_since(&primary).unwrap_or(self.input.now));
            let op = FailoverOperation {
                kind: FailoverKind::Failover,
                phase: FailoverPhase::Detecting,
                started: since,
                phase_started: self.now(),
                from: primary.clone(),
                fenced: None,
                to: None,
                reason: format!("primary {primary}: pod not Ready and server unreachable"),
                request: None,
                candidates: Vec::new(),
            };
            return self.detecting(op);
        }
        self.restore_writes(&primary);
        self.rejoin_all(&primary);
    }

    /// The primary answers but refuses writes: it restarted before its label said primary
    /// (it then starts as a replica), or an aborted switchover's unfence was lost. It gets its
    /// writes back when no other member answers as a writable primary and none is ahead of it.
    pub(super) fn restore_writes(&mut self, primary: &str) {
        let Some(facts) = self.facts(primary).filter(|f| f.reachable).cloned() else {
            return;
        };
        if facts.role == Some(ServerRole::Primary) && facts.read_only == Some(false) {
            return;
        }
        let other_writable = self
            .in_spec()
            .any(|m| m.name != primary && self.writable_primary(m.name));
        let Some(mine) = facts.position.as_ref() else {
            return;
        };
        let behind = self.candidates(&[primary]).iter().any(|c| {
            c.position
                .as_ref()
                .is_none_or(|p| !matches!(mine.compare(p), Relation::Equal | Relation::Ahead))
        });
        if other_writable || behind || self.quorum().is_err() {
            return;
        }
        self.steps.push(match facts.role {
            Some(ServerRole::Primary) => DatabaseStep::Unfence {
                pod: primary.to_owned(),
            },
            _ => DatabaseStep::Promote {
                pod: primary.to_owned(),
            },
        });
    }

    pub(super) fn detecting(&mut self, mut op: FailoverOperation) {
        if !self.lost(&op.from) {
            // Back on at least one signal before the delay ran out: nothing happened.
            self.status.operation = None;
            let primary = self.primary.clone();
            self.rejoin_all(&primary);
            return;
        }
        if !self.input.spec.enabled {
            self.status.operation = None;
            return self.idle();
        }
        // Counted from the start of the current run of failed probes: a server that
        // answered in between (even unseen by a pass) starts the count again.
        let run = self
            .down_since(&op.from)
            .map_or(op.started.0, |since| since.max(op.started.0));
        let waited = elapsed(run, self.input.now);
        let delay = delay(&self.input.spec);
        if waited < delay {
            self.status.operation = Some(op);
            return self.requeue(delay - waited);
        }
        let quorum = self.quorum();
        let candidate = self.elect(&op.from, true).map(|_| ());
        if self.block(quorum.and(candidate)) {
            self.status.operation = Some(op);
            return;
        }
        op.phase = FailoverPhase::Fencing;
        op.phase_started = self.now();
        self.steps.push(DatabaseStep::StopPod {
            pod: op.from.clone(),
        });
        self.label_primary = None;
        self.events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::Failover,
            format!(
                "primary {} of {} lost for {}s (pod not Ready, server unreachable): stopping its pod to fence it before promoting a replica",
                op.from,
                self.input.cluster,
                waited.as_secs()
            ),
        ));
        self.status.operation = Some(op);
        self.requeue(ACTIVE_REQUEUE);
    }
}
