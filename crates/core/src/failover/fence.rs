//! Fencing: the old primary is stopped (failover) or made read-only (switchover) before
//! anything is promoted.

use super::*;

impl Pass<'_, '_> {
    /// Whether the old primary is fenced. A read-only answer counts only from a probe sent
    /// after the fence was issued (an older one may predate a promotion); status keeps whole
    /// seconds, so "after" means after the end of the decision's second.
    pub(super) fn fenced(&self, op: &FailoverOperation) -> bool {
        let from = op.from.as_str();
        let read_only = self.read_only(from) && self.probed_after(from, &op.phase_started);
        match op.kind {
            // Gone: Kubernetes removes a pod only once its containers stopped (a Terminating
            // pod may still run during its grace period, so that is not enough). A pod of that
            // name created after the stop is the StatefulSet's replacement: the stopped pod is
            // gone too (a pass may never see the moment between the two). Both times keep whole
            // seconds, so a replacement created within the second of the stop counts (the
            // stopped pod ran before the decision, in an earlier second): reading it as the
            // stopped pod cost a second stop 30 s later (FENCE_RETRY).
            // Or its agent let the primary Lease expire: it has made its server read-only
            // (`nodeLoss: SelfFence`).
            FailoverKind::Failover => {
                self.member(from).is_none_or(|m| {
                    m.created.is_some_and(|c| c >= op.phase_started.0) && !m.terminating
                }) || read_only
                    || (self.lease_fenced(from) && self.server_down(from))
            }
            // Stopped after that (PostgreSQL: [`hard_fence_by_stop`]) counts still.
            FailoverKind::Switchover => read_only || op.stopped.is_some(),
        }
    }

    /// The `Fencing` phase: the old primary is fenced (stopped, or made read-only), then,
    /// once the candidates' positions are final, a member is chosen and promoted.
    pub(super) fn fencing(&mut self, mut op: FailoverOperation) {
        self.label_primary = None;
        self.requeue(ACTIVE_REQUEUE);
        let Some(op_left) = self.old_primary_changed_course(op) else {
            return;
        };
        op = op_left;
        if !self.fenced(&op) {
            return self.fence(op);
        }
        // Positions are final only once the old primary can send nothing more: compare only
        // probes taken after the fence was confirmed.
        let Some(fenced) = op.fenced.clone() else {
            op.fenced = Some(self.now());
            self.status.operation = Some(op);
            return;
        };
        if !self.positions_final(&op, &fenced) {
            self.status.operation = Some(op);
            return;
        }
        match op.kind {
            FailoverKind::Failover => self.choose_after_failover(op),
            FailoverKind::Switchover => self.choose_after_switchover(op),
        }
    }

    /// The old primary stopped answering during a switchover, or came back during a
    /// failover: the operation ends (or waits a probe) and `None` is returned; else the
    /// operation goes on.
    fn old_primary_changed_course(&mut self, op: FailoverOperation) -> Option<FailoverOperation> {
        let from = op.from.clone();
        if op.kind == FailoverKind::Switchover && op.stopped.is_none() && !self.server_up(&from) {
            if self.facts(&from).is_none() || (self.server_down(&from) && !self.server_gone(&from))
            {
                // No probe yet (an operator that has just started, resuming the switchover
                // from the status) or a missed one: look again before giving it up.
                self.status.operation = Some(op);
                return None;
            }
            self.abort(
                op,
                format!("primary {from} stopped answering during the switchover; failover handles a lost primary"),
                false,
            );
            return None;
        }
        if op.kind == FailoverKind::Failover
            && self.writable_primary(&from)
            && !self.pod_down(&from)
        {
            // Back, Ready and writable before anything was promoted: keep it. After a
            // promotion target went away mid-promotion, `from` is that target, which took the
            // promotion: it is the primary now, not the one fenced before it.
            self.primary = from.clone();
            self.abort(
                op,
                format!("primary {from} came back before a replica was promoted"),
                false,
            );
            return None;
        }
        Some(op)
    }

    /// The old primary is not confirmed fenced yet: fence it (switchover: read-only, given
    /// up after [`SWITCHOVER_CATCH_UP`]; failover: its pod stopped, again every
    /// [`FENCE_RETRY`]).
    fn fence(&mut self, mut op: FailoverOperation) {
        let from = op.from.clone();
        match op.kind {
            FailoverKind::Switchover => {
                self.commands
                    .push(DatabaseCommand::Fence { pod: from.clone() });
                if self.since(&op.phase_started) >= SWITCHOVER_CATCH_UP {
                    return self.abort(
                        op,
                        format!(
                            "primary {from} was not confirmed read-only within {}s",
                            SWITCHOVER_CATCH_UP.as_secs()
                        ),
                        true,
                    );
                }
            }
            FailoverKind::Failover => {
                self.blocked = self.stop_unconfirmed(&from);
                // A pod being deleted already is not deleted again: that changes nothing
                // (its node is what is not stopping it).
                let terminating = self.member(&from).is_some_and(|m| m.terminating);
                // The very pod that ran the lost primary, not deleted yet: the stop was not
                // carried out (an API server that failed the delete, a pass whose steps were
                // refused), so it is asked for again on every pass, not after FENCE_RETRY.
                // Deleting a pod is idempotent; a pod created since is another incarnation.
                let original = self
                    .member(&from)
                    .is_some_and(|m| m.created.is_some_and(|c| c <= op.started.0));
                if !terminating && original {
                    self.commands
                        .push(DatabaseCommand::StopPod { pod: from.clone() });
                } else if self.since(&op.phase_started) >= FENCE_RETRY && !terminating {
                    self.commands
                        .push(DatabaseCommand::StopPod { pod: from.clone() });
                    op.phase_started = self.now();
                }
            }
        }
        self.status.operation = Some(op);
    }

    /// Whether the candidates' positions are final: each probed after the fence was
    /// confirmed (`fenced`) and recently, after the old primary last stopped answering, and no
    /// member is restarting.
    fn positions_final(&self, op: &FailoverOperation, fenced: &Time) -> bool {
        let from = op.from.as_str();
        let exclude: &[&str] = match op.kind {
            FailoverKind::Failover => &[],
            FailoverKind::Switchover => &[from],
        };
        // And recently: a replica may still receive WAL from the old primary's server after
        // its pod was replaced (it streams from the member it follows, which runs again
        // read-only), so an old probe may not show all it has.
        if self.candidates(exclude).iter().any(|c| {
            !self.probed_after(&c.name, fenced)
                || self
                    .facts(&c.name)
                    .is_none_or(|f| elapsed(f.probed_at, self.input.now) > ELECT_WITHIN)
        }) {
            return false;
        }
        // The old primary answered again after that (its pod back, read-only) and is gone
        // again: while it ran it may have sent its replicas WAL they lacked (they stream from
        // it as from any member), so their positions count only from probes sent after it
        // stopped answering.
        if let Some(gone) = self
            .facts(from)
            .filter(|f| !f.reachable)
            .and_then(|f| f.down_since)
            .filter(|d| *d > fenced.0)
            && self
                .candidates(exclude)
                .iter()
                .any(|c| self.facts(&c.name).is_none_or(|f| f.probed_at <= gone))
        {
            return false;
        }
        // A member whose pod is being deleted still answers and may hold the most data; it is
        // back (same volume) within its grace period and a restart: choose then.
        !self
            .input
            .members
            .iter()
            .any(|m| m.terminating && m.ordinal < self.input.replicas && self.server_up(m.name))
    }

    /// A failover with final positions: with a quorum, the election's choice is promoted.
    fn choose_after_failover(&mut self, op: FailoverOperation) {
        let quorum = self.quorum();
        if self.block(quorum) {
            self.status.operation = Some(op);
            return;
        }
        match self.elect(&op.from.clone(), true) {
            Err(b) => {
                self.blocked = Some(b);
                self.status.operation = Some(op);
            }
            Ok((chosen, report)) => self.promote(op, chosen, report),
        }
    }

    /// A switchover with final positions: the requested (or elected) target is promoted once
    /// it caught up with the fenced primary; given up after [`SWITCHOVER_CATCH_UP`].
    fn choose_after_switchover(&mut self, op: FailoverOperation) {
        if let Some(stopped) = op.stopped.clone() {
            return self.after_stop(op, stopped);
        }
        let from = op.from.clone();
        let target = match op.to.clone() {
            Some(target) => Ok((target.clone(), requested_report(&target, self))),
            None => self.elect(&from, false),
        };
        let caught_up = target.as_ref().ok().and_then(|(t, _)| {
            let t = self.position(t)?;
            let f = self.position(&from)?;
            Some(matches!(t.compare(f), Relation::Equal | Relation::Ahead))
        });
        match (target, caught_up) {
            (Ok((chosen, report)), Some(true)) if self.server_up(&chosen) => {
                if hard_fence_by_stop(self.input.engine) {
                    self.stop_old_primary(op, chosen, report)
                } else {
                    self.promote(op, chosen, report)
                }
            }
            _ if self.since(&op.phase_started) >= SWITCHOVER_CATCH_UP => self.abort(
                op,
                format!(
                    "no target caught up with the fenced primary {from} within {}s",
                    SWITCHOVER_CATCH_UP.as_secs()
                ),
                true,
            ),
            _ => self.status.operation = Some(op),
        }
    }

    /// `FenceUnconfirmed` when the stopped old primary's pod stays Terminating well past its
    /// grace period: its node is not stopping it (lost, or cut off from the API server), so the
    /// server may still run and accept writes from clients that reach it. Kubernetes never
    /// removes such a pod on its own and neither does the operator; the message says how an
    /// administrator who knows the node is down lets the failover go on.
    pub(super) fn stop_unconfirmed(&self, from: &str) -> Option<Blocked> {
        let member = self.member(from)?;
        let deadline = member.deletion.filter(|_| member.terminating)?;
        let overdue = elapsed(deadline, self.input.now);
        if overdue < FENCE_UNCONFIRMED_AFTER {
            return None;
        }
        let (namespace, _) = self
            .input
            .cluster
            .split_once('/')
            .unwrap_or(("default", self.input.cluster));
        let (node, mark) = match member.node {
            Some(node) => (
                node.to_owned(),
                format!(
                    "If {node} is down, mark it out of service (`kubectl taint nodes {node} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`: Kubernetes then removes its pods), or once"
                ),
            ),
            None => ("its node".to_owned(), "Once".to_owned()),
        };
        Some(Blocked {
            reason: reasons::FENCE_UNCONFIRMED,
            message: format!(
                "primary {from} of {} was stopped to fence it, but its pod is still Terminating {}s after its grace period ended: {node} does not confirm that the server stopped (a lost or cut-off node), and no replica is promoted while the old primary might still accept writes. {mark} the server is known stopped, `kubectl delete pod {from} -n {namespace} --force --grace-period=0`; the failover goes on as soon as the pod is gone",
                self.input.cluster,
                overdue.as_secs()
            ),
        })
    }
}
