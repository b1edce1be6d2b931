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
                stopped: None,
                to: None,
                reason: format!("primary {primary}: {}", self.lost_because(&primary)),
                request: None,
                candidates: Vec::new(),
            };
            return self.detecting(op);
        }
        self.restore_writes(&primary);
        self.rejoin_all(&primary);
    }

    /// The two signals of a lost `pod`, in words, and why its server stopped when the pod's
    /// status says (a full volume, the memory limit).
    pub(super) fn lost_because(&self, pod: &str) -> String {
        let signals = if self.pod_down(pod) {
            "pod not Ready and server unreachable"
        } else {
            "its agent stopped renewing the primary Lease and server unreachable"
        };
        // A Ready pod's last failed exit is history: its server has run since.
        match self
            .member(pod)
            .filter(|m| !m.ready)
            .and_then(|m| m.server_exit)
        {
            Some(exit) => format!("{signals}; its server {}", exit.describe()),
            None => signals.to_owned(),
        }
    }

    /// The primary answers but refuses writes: it restarted before its label said primary
    /// (it then starts as a replica), or an aborted switchover's unfence was lost. It gets its
    /// writes back when no other member answers as a writable primary and none is ahead of it.
    /// With `nodeLoss: SelfFence`, only on a read of the primary Lease less than a lease old
    /// that shows it held by the primary and renewed: while its agent fails to renew, the agent
    /// fenced the server because its pod cannot reach the API server, and would only fence it
    /// again (`LeaseNotRenewed`).
    pub(super) fn restore_writes(&mut self, primary: &str) {
        let Some(facts) = self.facts(primary).filter(|f| f.reachable).cloned() else {
            return;
        };
        if facts.role == Some(ServerRole::Primary) && facts.read_only == Some(false) {
            return;
        }
        if self.self_fence()
            && let Some(lease) = self.input.lease
            && lease.holder.as_deref() == Some(primary)
            && elapsed(lease.checked_at, self.input.now) <= lease.duration
        {
            if !lease.expired() {
                return self.give_writes_back(primary, &facts);
            }
            let name = self
                .input
                .cluster
                .split_once('/')
                .map_or(self.input.cluster, |(_, n)| n);
            self.blocked = Some(Blocked {
                reason: reasons::LEASE_NOT_RENEWED,
                message: format!(
                    "primary {primary} of {} answers read-only and its member agent has not renewed the Lease {} for {}s (lease {}s): the agent keeps the server read-only while its pod cannot reach the API server; writes come back once it renews (look at the agent container's log: `kubectl logs {primary} -c member-agent`)",
                    self.input.cluster,
                    [name, crate::owned::PRIMARY_LEASE_SUFFIX].concat(),
                    lease.unrenewed_for().as_secs(),
                    lease.duration.as_secs()
                ),
            });
            return;
        }
        if self.self_fence() {
            // Not read lately, or not (yet) naming the primary: look again first.
            return;
        }
        self.give_writes_back(primary, &facts);
    }

    /// [`Pass::restore_writes`] once nothing speaks against it from the lease: unless another
    /// member is writable or ahead, or most are unreachable.
    fn give_writes_back(&mut self, primary: &str, facts: &MemberFacts) {
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
        self.commands.push(match facts.role {
            Some(ServerRole::Primary) => DatabaseCommand::Unfence {
                pod: primary.to_owned(),
            },
            _ => DatabaseCommand::Promote {
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
        self.commands.push(DatabaseCommand::StopPod {
            pod: op.from.clone(),
        });
        self.label_primary = None;
        self.events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::Failover,
            format!(
                "primary {} of {} lost for {}s ({}): stopping its pod to fence it before promoting a replica",
                op.from,
                self.input.cluster,
                waited.as_secs(),
                self.lost_because(&op.from)
            ),
        ));
        self.status.operation = Some(op);
        self.requeue(ACTIVE_REQUEUE);
    }
}
