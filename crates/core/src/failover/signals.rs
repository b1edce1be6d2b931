//! What a pass reads of the members: fresh facts, the two signals of a lost primary, quorum,
//! candidates and the election among them.

use super::*;

impl Pass<'_, '_> {
    pub(super) fn member(&self, pod: &str) -> Option<&Member<'_>> {
        self.input.members.iter().find(|m| m.name == pod)
    }

    /// Fresh facts of `pod`.
    pub(super) fn facts(&self, pod: &str) -> Option<&MemberFacts> {
        self.input
            .facts
            .get(pod)
            .filter(|f| elapsed(f.probed_at, self.input.now) <= MemberFacts::STALE_AFTER)
    }

    /// Whether the fresh facts of `pod` come from a probe sent after the decision recorded in
    /// status at `at` ([`crate::status::surely_after`]: status keeps whole seconds).
    pub(super) fn probed_after(&self, pod: &str, at: &Time) -> bool {
        let after = crate::status::surely_after(at.0);
        self.facts(pod).is_some_and(|f| f.probed_at >= after)
    }

    pub(super) fn server_up(&self, pod: &str) -> bool {
        self.facts(pod).is_some_and(|f| f.reachable)
    }

    pub(super) fn server_down(&self, pod: &str) -> bool {
        self.facts(pod).is_some_and(|f| !f.reachable)
    }

    /// When the current run of failed probes of `pod` began (the first probe of it that
    /// failed), never later than now; `None` while its server answers or has no fresh probe.
    pub(super) fn down_since(&self, pod: &str) -> Option<Timestamp> {
        self.facts(pod)
            .filter(|f| !f.reachable)
            .map(|f| f.down_since.unwrap_or(f.probed_at).min(self.input.now))
    }

    /// Whether the server of `pod` has failed its probes for [`MemberFacts::GONE_AFTER`] or
    /// more (fresh facts only).
    pub(super) fn server_gone(&self, pod: &str) -> bool {
        self.facts(pod)
            .and_then(|f| f.down_for(self.input.now))
            .is_some_and(|d| d >= MemberFacts::GONE_AFTER)
    }

    pub(super) fn pod_down(&self, pod: &str) -> bool {
        self.member(pod).is_none_or(|m| !m.ready || m.terminating)
    }

    /// Both signals: the pod is not Ready (or gone), or with `nodeLoss: SelfFence` its agent
    /// let the primary Lease expire; and a fresh probe failed.
    pub(super) fn lost(&self, pod: &str) -> bool {
        (self.pod_down(pod) || self.lease_fenced(pod)) && self.server_down(pod)
    }

    /// `nodeLoss: SelfFence`: the primary Lease proves that `pod`'s agent has made its server
    /// read-only ([`crate::LeaseSighting::fenced`]).
    pub(super) fn lease_fenced(&self, pod: &str) -> bool {
        self.self_fence()
            && self
                .input
                .lease
                .is_some_and(|l| l.fenced(pod, self.down_since(pod)))
    }

    /// The members self-fence ([`database_operator_api::FailoverSpec::self_fencing`]).
    pub(super) fn self_fence(&self) -> bool {
        self.input.spec.self_fencing()
    }

    pub(super) fn writable_primary(&self, pod: &str) -> bool {
        self.facts(pod).is_some_and(|f| {
            f.reachable && f.role == Some(ServerRole::Primary) && f.read_only == Some(false)
        })
    }

    pub(super) fn read_only(&self, pod: &str) -> bool {
        self.facts(pod)
            .is_some_and(|f| f.reachable && f.read_only == Some(true))
    }

    pub(super) fn position(&self, pod: &str) -> Option<&Position> {
        self.facts(pod)
            .filter(|f| f.reachable)
            .and_then(|f| f.position.as_ref())
    }

    pub(super) fn quarantined(&self, pod: &str) -> bool {
        self.status.quarantined.iter().any(|q| q == pod)
    }

    /// Members the StatefulSet keeps, not terminating.
    pub(super) fn in_spec(&self) -> impl Iterator<Item = &Member<'_>> {
        self.input.members.iter().filter(|m| in_spec(self.input, m))
    }

    /// Reachable members other than `exclude`, not quarantined, by ordinal.
    pub(super) fn candidates(&self, exclude: &[&str]) -> Vec<Candidate> {
        self.in_spec()
            .filter(|m| !exclude.contains(&m.name) && !self.quarantined(m.name))
            .filter(|m| self.server_up(m.name) && self.foreign_identity(m.name).is_none())
            .map(|m| Candidate {
                name: m.name.to_owned(),
                position: self.position(m.name).cloned(),
            })
            .collect()
    }

    /// A majority of `spec.replicas` answers its probe (half is enough: with two members the
    /// survivor of a lost primary is half).
    pub(super) fn quorum(&self) -> Result<(), Blocked> {
        let n = usize::try_from(self.input.replicas.max(1)).unwrap_or(1);
        let up = self.in_spec().filter(|m| self.server_up(m.name)).count();
        let unreachable = n.saturating_sub(up);
        if unreachable * 2 > n {
            return Err(Blocked {
                reason: reasons::NO_QUORUM,
                message: format!(
                    "{unreachable}/{n} members of {} are unreachable: the operator cannot tell a lost primary from its own network cut and will not fail over; restore connectivity to the members",
                    self.input.cluster
                ),
            });
        }
        Ok(())
    }

    /// Chooses among the reachable members ([`position::elect`]); the old primary `from` takes
    /// part in a failover (fenced and back read-only, its data is the most complete there is),
    /// not in a switchover, and wins only when it is ahead of every replica.
    pub(super) fn elect(
        &self,
        from: &str,
        with_from: bool,
    ) -> Result<(String, Vec<FailoverCandidate>), Blocked> {
        let mut candidates = if with_from {
            self.candidates(&[])
        } else {
            self.candidates(&[from])
        };
        // Ties go to the first candidate: a replica before the old primary, which was just
        // lost (on real servers its fenced pod is often back, read-only, before the election,
        // and winning a tie by ordinal it was promoted again).
        candidates.sort_by_key(|c| c.name == from);
        let old = self.input.facts.get(from).and_then(|f| f.position.as_ref());
        let election = position::elect(old, &candidates);
        let report = report(&candidates, &election);
        match election.chosen {
            Some(chosen) => Ok((chosen, report)),
            None => Err(Blocked {
                reason: reasons::NO_CANDIDATE,
                message: if candidates.is_empty() {
                    format!(
                        "primary {from} of {} is lost and no other member answers its probe: nothing to promote; bring a member back",
                        self.input.cluster
                    )
                } else {
                    format!(
                        "primary {from} of {} is lost and no member can be promoted safely: {}",
                        self.input.cluster,
                        describe(&report)
                    )
                },
            }),
        }
    }

    pub(super) fn block(&mut self, blocked: Result<(), Blocked>) -> bool {
        match blocked {
            Ok(()) => false,
            Err(b) => {
                self.blocked = Some(b);
                self.requeue(Duration::from_secs(5));
                true
            }
        }
    }

    pub(super) fn requeue(&mut self, after: Duration) {
        let after = after.max(ACTIVE_REQUEUE);
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }

    pub(super) fn now(&self) -> Time {
        Time(self.input.now)
    }

    pub(super) fn since(&self, t: &Time) -> Duration {
        elapsed(t.0, self.input.now)
    }
}
