//! Fencing: the old primary is stopped (failover) or made read-only (switchover) before
//! anything is promoted.

use super::*;

impl Pass<'_, '_> {
    /// Whether the old primary is fenced. A read-only answer counts only from a probe taken
    /// after the fence was issued (an older one may predate a promotion). A probe stamped with
    /// the second of a decision was taken before it: "after" is strictly later.
    pub(super) fn fenced(&self, op: &FailoverOperation) -> bool {
        let from = op.from.as_str();
        let read_only = self.read_only(from)
            && self
                .facts(from)
                .is_some_and(|f| f.probed_at > op.phase_started.0);
        match op.kind {
            // Gone: Kubernetes removes a pod only once its containers stopped (a Terminating
            // pod may still run during its grace period, so that is not enough). A pod of that
            // name created after the stop is the StatefulSet's replacement: the stopped pod is
            // gone too (a pass may never see the moment between the two).
            FailoverKind::Failover => {
                self.member(from).is_none_or(|m| {
                    m.created.is_some_and(|c| c > op.phase_started.0) && !m.terminating
                }) || read_only
            }
            FailoverKind::Switchover => read_only,
        }
    }

    pub(super) fn fencing(&mut self, mut op: FailoverOperation) {
        self.label_primary = None;
        self.requeue(ACTIVE_REQUEUE);
        let from = op.from.clone();
        if op.kind == FailoverKind::Switchover && !self.server_up(&from) {
            return self.abort(
                op,
                format!("primary {from} stopped answering during the switchover; failover handles a lost primary"),
                false,
            );
        }
        if op.kind == FailoverKind::Failover
            && self.writable_primary(&from)
            && !self.pod_down(&from)
        {
            // Back, Ready and writable before anything was promoted: keep it.
            return self.abort(
                op,
                format!("primary {from} came back before a replica was promoted"),
                false,
            );
        }
        if !self.fenced(&op) {
            match op.kind {
                FailoverKind::Switchover => {
                    self.steps.push(DatabaseStep::Fence { pod: from.clone() });
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
                    if self.since(&op.phase_started) >= FENCE_RETRY {
                        self.steps.push(DatabaseStep::StopPod { pod: from.clone() });
                        op.phase_started = self.now();
                    }
                }
            }
            self.status.operation = Some(op);
            return;
        }
        // Positions are final only once the old primary can send nothing more: compare only
        // probes taken after the fence was confirmed.
        let Some(fenced) = op.fenced.clone() else {
            op.fenced = Some(self.now());
            self.status.operation = Some(op);
            return;
        };
        let exclude: &[&str] = match op.kind {
            FailoverKind::Failover => &[],
            FailoverKind::Switchover => &[&from],
        };
        if self
            .candidates(exclude)
            .iter()
            .any(|c| self.facts(&c.name).is_some_and(|f| f.probed_at <= fenced.0))
        {
            self.status.operation = Some(op);
            return;
        }
        // A member whose pod is being deleted still answers and may hold the most data; it is
        // back (same volume) within its grace period and a restart: choose then.
        let restarting =
            self.input.members.iter().any(|m| {
                m.terminating && m.ordinal < self.input.replicas && self.server_up(m.name)
            });
        if restarting {
            self.status.operation = Some(op);
            return;
        }
        match op.kind {
            FailoverKind::Failover => {
                let quorum = self.quorum();
                if self.block(quorum) {
                    self.status.operation = Some(op);
                    return;
                }
                match self.elect(&from, true) {
                    Err(b) => {
                        self.blocked = Some(b);
                        self.status.operation = Some(op);
                    }
                    Ok((chosen, report)) => self.promote(op, chosen, report),
                }
            }
            FailoverKind::Switchover => {
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
                        self.promote(op, chosen, report)
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
        }
    }
}
