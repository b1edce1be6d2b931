//! Failover and switchover: a state machine that decides one step per pass and keeps its
//! progress in `status.failover`, so that a restarted operator continues where the last one
//! stopped.
//!
//! ```text
//!            primary lost (pod not Ready AND probe fails)         switchover requested
//!   Idle ─────────────────────────────────────────► Detecting    Idle ──────────────► Fencing
//!    ▲  ◄──── primary back ─────────────────────────── │          (Fence the primary, read-only)
//!    │                                                  │ lost for delaySeconds, a majority
//!    │                                                  │ reachable, a reachable candidate
//!    │                                                  ▼
//!    │                                               Fencing  (StopPod the old primary; a
//!    │                                                  │      switchover: Fence it)
//!    │                                                  │ fenced: pod gone, or its server
//!    │                                                  │ answers read-only; elect()
//!    │                                                  ▼
//!    │                                               Promoting (Promote the chosen member)
//!    │                                                  │ it reports primary, writable
//!    │                                                  ▼
//!    └──────── every reachable member follows it ── Repointing (Follow, relabel the pods)
//! ```
//!
//! Safety rules, each enforced here and checked by `tests/failover_sim.rs` and the unit tests:
//! - Act only on two signals: a failover starts only when the primary's pod is not Ready (or
//!   gone) AND a fresh probe of its server fails, and proceeds only after that held for
//!   `spec.failover.delaySeconds`. Probes older than [`STALE_AFTER`] are no signal at all.
//! - Fence before promote: no `Promote` while the old primary is not known fenced (its pod
//!   gone or terminating, or its server answering read-only). During `Fencing` and `Promoting`
//!   no pod carries the primary label, so a restarted old primary starts as a replica.
//! - Never promote a candidate behind another reachable candidate: [`crate::position::elect`]
//!   over every reachable member chooses; conflicting positions block.
//! - Never act when most members are unreachable: condition `FailoverBlocked` `NoQuorum`.
//! - An ex-primary rejoins as a replica when its history allows (behind or equal: follow;
//!   PostgreSQL past the fork: follow with `pg_rewind`); a MySQL/MariaDB member with errant
//!   transactions is quarantined, never reseeded implicitly.
//!
//! Database steps are intents ([`DatabaseStep`]), never SQL.

use std::collections::BTreeMap;
use std::time::Duration;

use database_operator_api::conditions::{self, reasons};
use database_operator_api::failover::{
    CandidateVerdict, FailoverCandidate, FailoverKind, FailoverOperation, FailoverOutcome,
    FailoverPhase, FailoverRecord, FailoverSpec, FailoverStatus, SWITCHOVER_AUTO,
};
use database_operator_api::{DatabaseClusterStatus, Engine};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::events::event;
use crate::members::Member;
use crate::position::{self, Candidate, Position, Relation};
use crate::{DatabaseStep, EventReason, EventType, MemberFacts, PlannedEvent, ServerRole};

/// Facts older than this are no signal: neither a failed probe nor a reachable candidate.
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// How long a `StopPod` fence may go unconfirmed before it is issued again.
pub const FENCE_RETRY: Duration = Duration::from_secs(30);
/// How long a switchover waits for its target to catch up with the fenced primary before it
/// gives the primary its writes back.
pub const SWITCHOVER_CATCH_UP: Duration = Duration::from_secs(60);
/// How long `Repointing` waits for every reachable member to follow before it completes (the
/// steady-state rejoin keeps pointing late members at the primary afterwards).
pub const REPOINT_TIMEOUT: Duration = Duration::from_secs(60);
/// How soon to look again while an operation is in flight.
pub const ACTIVE_REQUEUE: Duration = Duration::from_secs(1);

/// What one failover pass reads.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// `<namespace>/<name>`, for messages.
    pub cluster: &'a str,
    /// The engine (decides how a diverged member rejoins).
    pub engine: Engine,
    /// `spec.failover` with its defaults.
    pub spec: FailoverSpec,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The member pods, by ordinal ([`crate::members::members`]).
    pub members: &'a [Member<'a>],
    /// The prober's facts, by pod name.
    pub facts: &'a BTreeMap<String, MemberFacts>,
    /// The primary before this pass (`status.primaryPod`, else ordinal 0).
    pub primary: &'a str,
    /// `status.failover` before this pass.
    pub previous: Option<&'a FailoverStatus>,
    /// The reason of the `FailoverBlocked` condition before this pass, when it was True.
    pub blocked_before: Option<&'a str>,
    /// The `database.example.com/switchover` annotation.
    pub switchover: Option<&'a str>,
    /// The current time.
    pub now: Timestamp,
}

/// Why a failover cannot proceed: the `FailoverBlocked` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// A reason of [`reasons`]: `NoQuorum`, `NoCandidate`, `FailoverDisabled`.
    pub reason: &'static str,
    /// What is wrong and what to do, naming members and numbers.
    pub message: String,
}

/// What one failover pass decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The new `status.failover` (`None` while there has never been anything to say).
    pub status: Option<FailoverStatus>,
    /// The primary from now on (`status.primaryPod`).
    pub primary: String,
    /// The member that should carry the primary label: `None` while the old primary is being
    /// fenced or a new one promoted (nobody receives writes through the Service then).
    pub label_primary: Option<String>,
    /// Database steps, in order.
    pub steps: Vec<DatabaseStep>,
    /// Events.
    pub events: Vec<PlannedEvent>,
    /// Why failover is blocked, when it is.
    pub blocked: Option<Blocked>,
    /// When to look again at the latest.
    pub requeue_after: Option<Duration>,
}

/// Decides one step of failover or switchover from the previous status, the members, their
/// facts, the spec, the switchover request and `now`.
pub fn step(input: &Inputs<'_>) -> Outcome {
    let previous = input.previous.cloned().unwrap_or_default();
    let mut pass = Pass {
        input,
        status: previous.clone(),
        primary: input.primary.to_owned(),
        label_primary: Some(input.primary.to_owned()),
        steps: Vec::new(),
        events: Vec::new(),
        blocked: None,
        requeue_after: None,
    };
    // A quarantined member the spec no longer keeps leaves the list (its volume stays).
    pass.status.quarantined.retain(|q| {
        input
            .members
            .iter()
            .any(|m| m.name == q && in_spec(input, m))
    });
    match previous.operation.clone() {
        None => pass.idle(),
        Some(op) => match op.phase {
            FailoverPhase::Detecting => pass.detecting(op),
            FailoverPhase::Fencing => pass.fencing(op),
            FailoverPhase::Promoting => pass.promoting(op),
            FailoverPhase::Repointing => pass.repointing(op),
        },
    }
    pass.finish()
}

fn in_spec(input: &Inputs<'_>, m: &Member<'_>) -> bool {
    m.ordinal < input.replicas && !m.terminating
}

struct Pass<'i, 'a> {
    input: &'i Inputs<'a>,
    status: FailoverStatus,
    primary: String,
    label_primary: Option<String>,
    steps: Vec<DatabaseStep>,
    events: Vec<PlannedEvent>,
    blocked: Option<Blocked>,
    requeue_after: Option<Duration>,
}

impl Pass<'_, '_> {
    // ---------------------------------------------------------------- signals

    fn member(&self, pod: &str) -> Option<&Member<'_>> {
        self.input.members.iter().find(|m| m.name == pod)
    }

    /// Fresh facts of `pod`.
    fn facts(&self, pod: &str) -> Option<&MemberFacts> {
        self.input
            .facts
            .get(pod)
            .filter(|f| elapsed(f.probed_at, self.input.now) <= STALE_AFTER)
    }

    fn server_up(&self, pod: &str) -> bool {
        self.facts(pod).is_some_and(|f| f.reachable)
    }

    fn server_down(&self, pod: &str) -> bool {
        self.facts(pod).is_some_and(|f| !f.reachable)
    }

    fn pod_down(&self, pod: &str) -> bool {
        self.member(pod).is_none_or(|m| !m.ready || m.terminating)
    }

    /// Both signals: the pod is not Ready (or gone) and a fresh probe failed.
    fn lost(&self, pod: &str) -> bool {
        self.pod_down(pod) && self.server_down(pod)
    }

    fn writable_primary(&self, pod: &str) -> bool {
        self.facts(pod).is_some_and(|f| {
            f.reachable && f.role == Some(ServerRole::Primary) && f.read_only == Some(false)
        })
    }

    fn read_only(&self, pod: &str) -> bool {
        self.facts(pod)
            .is_some_and(|f| f.reachable && f.read_only == Some(true))
    }

    fn position(&self, pod: &str) -> Option<&Position> {
        self.facts(pod)
            .filter(|f| f.reachable)
            .and_then(|f| f.position.as_ref())
    }

    fn quarantined(&self, pod: &str) -> bool {
        self.status.quarantined.iter().any(|q| q == pod)
    }

    /// Members the StatefulSet keeps, not terminating.
    fn in_spec(&self) -> impl Iterator<Item = &Member<'_>> {
        self.input.members.iter().filter(|m| in_spec(self.input, m))
    }

    /// Reachable members other than `exclude`, not quarantined, by ordinal.
    fn candidates(&self, exclude: &[&str]) -> Vec<Candidate> {
        self.in_spec()
            .filter(|m| !exclude.contains(&m.name) && !self.quarantined(m.name))
            .filter(|m| self.server_up(m.name))
            .map(|m| Candidate {
                name: m.name.to_owned(),
                position: self.position(m.name).cloned(),
            })
            .collect()
    }

    /// A majority of `spec.replicas` answers its probe (half is enough: with two members the
    /// survivor of a lost primary is half).
    fn quorum(&self) -> Result<(), Blocked> {
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
    /// not in a switchover.
    fn elect(
        &self,
        from: &str,
        with_from: bool,
    ) -> Result<(String, Vec<FailoverCandidate>), Blocked> {
        let candidates = if with_from {
            self.candidates(&[])
        } else {
            self.candidates(&[from])
        };
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

    fn block(&mut self, blocked: Result<(), Blocked>) -> bool {
        match blocked {
            Ok(()) => false,
            Err(b) => {
                self.blocked = Some(b);
                self.requeue(Duration::from_secs(5));
                true
            }
        }
    }

    fn requeue(&mut self, after: Duration) {
        let after = after.max(ACTIVE_REQUEUE);
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }

    fn now(&self) -> Time {
        Time(self.input.now)
    }

    fn since(&self, t: &Time) -> Duration {
        elapsed(t.0, self.input.now)
    }

    // ---------------------------------------------------------------- phases

    fn idle(&mut self) {
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
        let primary = self.primary.clone();
        if self.lost(&primary) {
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
            let now = self.now();
            self.status.operation = Some(FailoverOperation {
                kind: FailoverKind::Failover,
                phase: FailoverPhase::Detecting,
                started: now.clone(),
                phase_started: now,
                from: primary.clone(),
                fenced: None,
                to: None,
                reason: format!("primary {primary}: pod not Ready and server unreachable"),
                request: None,
                candidates: Vec::new(),
            });
            self.requeue(delay(&self.input.spec));
            return;
        }
        self.restore_writes(&primary);
        self.rejoin_all(&primary);
    }

    /// The primary answers but refuses writes: it restarted before its label said primary
    /// (it then starts as a replica), or an aborted switchover's unfence was lost. It gets its
    /// writes back when no other member answers as a writable primary and none is ahead of it.
    fn restore_writes(&mut self, primary: &str) {
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

    fn detecting(&mut self, mut op: FailoverOperation) {
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
        let waited = self.since(&op.started);
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
        self.events.push(event(
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

    /// Whether the old primary is fenced. A read-only answer counts only from a probe taken
    /// after the fence was issued (an older one may predate a promotion). A probe stamped with
    /// the second of a decision was taken before it: "after" is strictly later.
    fn fenced(&self, op: &FailoverOperation) -> bool {
        let from = op.from.as_str();
        let read_only = self.read_only(from)
            && self
                .facts(from)
                .is_some_and(|f| f.probed_at > op.phase_started.0);
        match op.kind {
            // Gone: Kubernetes removes a pod only once its containers stopped (a Terminating
            // pod may still run during its grace period, so that is not enough).
            FailoverKind::Failover => self.member(from).is_none() || read_only,
            FailoverKind::Switchover => read_only,
        }
    }

    fn fencing(&mut self, mut op: FailoverOperation) {
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

    fn promote(
        &mut self,
        mut op: FailoverOperation,
        chosen: String,
        report: Vec<FailoverCandidate>,
    ) {
        op.phase = FailoverPhase::Promoting;
        op.phase_started = self.now();
        op.to = Some(chosen.clone());
        op.candidates = report;
        self.steps.push(DatabaseStep::Promote { pod: chosen });
        self.status.operation = Some(op);
    }

    fn promoting(&mut self, mut op: FailoverOperation) {
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
        let probed_since_promote = self
            .facts(&to)
            .is_some_and(|f| f.probed_at > op.phase_started.0);
        let behind_another = self.position(&to).is_some_and(|mine| {
            self.candidates(&[&to])
                .iter()
                .filter_map(|c| c.position.as_ref())
                .any(|p| mine.compare(p) == Relation::Behind)
        });
        let overtaken = probed_since_promote && behind_another;
        if overtaken || self.server_down(&to) || self.member(&to).is_none_or(|m| m.terminating) {
            // The chosen member went away mid-promotion: it may have become writable, so it is
            // fenced (its pod stopped) before a failover chooses again among the others.
            self.steps.push(DatabaseStep::StopPod { pod: to.clone() });
            if op.kind == FailoverKind::Switchover {
                return self.abort(
                    op,
                    format!("the switchover target {to} stopped answering while being promoted"),
                    true,
                );
            }
            // The old primary is fenced already; the member to fence now is this one.
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
            self.steps.push(DatabaseStep::Promote { pod: to });
        }
        self.status.operation = Some(op);
    }

    fn repointing(&mut self, op: FailoverOperation) {
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
        self.events.push(event(
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

    fn start_switchover(&mut self, request: String) {
        let primary = self.primary.clone();
        let refuse = |pass: &mut Self, why: String| {
            pass.status.handled_switchover = Some(request.clone());
            pass.events.push(event(
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
            self.events.push(event(
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
        let now = self.now();
        self.events.push(event(
            EventType::Normal,
            EventReason::Switchover,
            format!(
                "switchover of {} from {primary} to {} started: {primary} made read-only",
                self.input.cluster,
                to.as_deref().unwrap_or("the most advanced replica")
            ),
        ));
        self.steps.push(DatabaseStep::Fence {
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
            to,
            reason: format!("requested by annotation ({request})"),
            request: Some(request),
            candidates: Vec::new(),
        });
        self.requeue(ACTIVE_REQUEUE);
    }

    /// Ends an operation before a promotion: the old primary stays (`unfence`: give it its
    /// writes back).
    fn abort(&mut self, op: FailoverOperation, why: String, unfence: bool) {
        if unfence {
            self.steps.push(DatabaseStep::Unfence {
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
        self.events.push(event(
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

    /// Points every reachable member at `primary` when it does not follow it yet; fences a
    /// second writable primary. Whether every reachable member already follows.
    fn rejoin_all(&mut self, primary: &str) -> bool {
        if !self.server_up(primary) {
            return true;
        }
        let others: Vec<String> = self
            .in_spec()
            .filter(|m| m.name != primary && !self.quarantined(m.name))
            .filter(|m| self.server_up(m.name))
            .map(|m| m.name.to_owned())
            .collect();
        let mut all = true;
        for pod in others {
            if !self.rejoin(&pod, primary) {
                all = false;
            }
        }
        all
    }

    /// One member towards following `primary`; whether it follows already.
    fn rejoin(&mut self, pod: &str, primary: &str) -> bool {
        let Some(facts) = self.facts(pod).cloned() else {
            return false;
        };
        if facts.role == Some(ServerRole::Replica) && facts.source.as_deref() == Some(primary) {
            return true;
        }
        if self.writable_primary(pod) {
            self.steps.push(DatabaseStep::Fence {
                pod: pod.to_owned(),
            });
        }
        let (Some(mine), Some(theirs)) = (facts.position.as_ref(), self.position(primary)) else {
            return false;
        };
        match mine.compare(theirs) {
            Relation::Equal | Relation::Behind => self.steps.push(DatabaseStep::Follow {
                pod: pod.to_owned(),
                source: primary.to_owned(),
                rewind: false,
            }),
            Relation::Ahead | Relation::Diverged if self.input.engine == Engine::Postgresql => {
                self.steps.push(DatabaseStep::Follow {
                    pod: pod.to_owned(),
                    source: primary.to_owned(),
                    rewind: true,
                })
            }
            Relation::Ahead | Relation::Diverged => {
                let missing = theirs.shortfall(mine);
                self.steps.push(DatabaseStep::Quarantine {
                    pod: pod.to_owned(),
                });
                self.status.quarantined.push(pod.to_owned());
                self.status.quarantined.sort();
                self.events.push(event(
                    EventType::Warning,
                    EventReason::MemberQuarantined,
                    format!(
                        "{pod} of {} holds transactions the primary {primary} lacks ({missing}): quarantined, out of the read Service, its volume kept; inspect it, then reseed it explicitly",
                        self.input.cluster
                    ),
                ));
            }
            Relation::Unknown => {}
        }
        false
    }

    fn finish(mut self) -> Outcome {
        let input = self.input;
        if let Some(blocked) = &self.blocked
            && input.blocked_before != Some(blocked.reason)
        {
            self.events.push(event(
                EventType::Warning,
                EventReason::FailoverBlocked,
                blocked.message.clone(),
            ));
            let now = self.now();
            let op = self.status.operation.as_ref();
            self.status.last = Some(FailoverRecord {
                kind: op.map_or(FailoverKind::Failover, |o| o.kind),
                outcome: FailoverOutcome::Blocked,
                started: op.map_or(now.clone(), |o| o.started.clone()),
                finished: now,
                from: op.map_or(self.primary.clone(), |o| o.from.clone()),
                to: None,
                reason: blocked.message.clone(),
                candidates: Vec::new(),
            });
        }
        if let Some(op) = &self.status.operation
            && op.phase == FailoverPhase::Detecting
        {
            self.label_primary = Some(op.from.clone());
        }
        let status = if input.previous.is_none() && self.status == FailoverStatus::default() {
            None
        } else {
            Some(self.status)
        };
        Outcome {
            status,
            primary: self.primary,
            label_primary: self.label_primary,
            steps: self.steps,
            events: self.events,
            blocked: self.blocked,
            requeue_after: self.requeue_after,
        }
    }
}

fn delay(spec: &FailoverSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.delay_seconds.max(1)).unwrap_or(1))
}

/// Time from `t` to `now` (zero when `t` is in the future).
fn elapsed(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or(Duration::ZERO)
}

fn kind_word(kind: FailoverKind) -> &'static str {
    match kind {
        FailoverKind::Failover => "failover",
        FailoverKind::Switchover => "switchover",
    }
}

fn report(candidates: &[Candidate], election: &position::Election) -> Vec<FailoverCandidate> {
    election
        .verdicts
        .iter()
        .map(|(name, verdict)| {
            let position = candidates
                .iter()
                .find(|c| &c.name == name)
                .and_then(|c| c.position.as_ref())
                .map(ToString::to_string);
            FailoverCandidate {
                pod: name.clone(),
                position,
                verdict: if *verdict == position::Verdict::Chosen {
                    CandidateVerdict::Chosen
                } else {
                    CandidateVerdict::Lost
                },
                reason: verdict.reason(),
            }
        })
        .collect()
}

fn requested_report(target: &str, pass: &Pass<'_, '_>) -> Vec<FailoverCandidate> {
    vec![FailoverCandidate {
        pod: target.to_owned(),
        position: pass.position(target).map(ToString::to_string),
        verdict: CandidateVerdict::Chosen,
        reason: "requested, caught up with the fenced primary".to_owned(),
    }]
}

fn describe(report: &[FailoverCandidate]) -> String {
    report
        .iter()
        .map(|c| match &c.position {
            Some(p) => format!("{} ({p}): {}", c.pod, c.reason),
            None => format!("{}: {}", c.pod, c.reason),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// "promoted db-2 (0/5000060 on timeline 1); db-1 lost: behind db-2: lacks 24 bytes of WAL;
/// old primary db-0 fenced".
fn completion_message(op: &FailoverOperation, to: &str) -> String {
    let mut parts = Vec::new();
    for c in &op.candidates {
        let at = c.position.as_deref().unwrap_or("position unknown");
        if c.pod == to {
            parts.insert(0, format!("promoted {to} ({at}; {})", c.reason));
        } else {
            parts.push(format!("{} lost ({at}): {}", c.pod, c.reason));
        }
    }
    if parts.is_empty() {
        parts.push(format!("promoted {to}"));
    }
    if op.from == to {
        parts.push(format!(
            "the old primary {to} came back read-only with the most data and was promoted again"
        ));
    } else {
        parts.push(format!(
            "old primary {} {}",
            op.from,
            match op.kind {
                FailoverKind::Failover => "fenced (pod stopped)",
                FailoverKind::Switchover => "now follows it",
            }
        ));
    }
    parts.join("; ")
}

/// The `FailoverBlocked` condition after this pass: True with the reason while blocked; once it
/// was True, False when no longer blocked; absent while it never was (a cluster without member
/// facts keeps its status byte-identical).
pub fn apply_condition(
    status: &mut DatabaseClusterStatus,
    previous: &DatabaseClusterStatus,
    blocked: Option<&Blocked>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let before = previous
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FAILOVER_BLOCKED);
    let (value, reason, message) = match (blocked, before) {
        (Some(b), _) => ("True", b.reason, b.message.clone()),
        (None, Some(_)) => (
            "False",
            reasons::AS_EXPECTED,
            "failover is not blocked".to_owned(),
        ),
        (None, None) => return,
    };
    let last_transition_time = match before {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: conditions::FAILOVER_BLOCKED.to_owned(),
        status: value.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    };
    status
        .conditions
        .retain(|c| c.type_ != conditions::FAILOVER_BLOCKED);
    status.conditions.push(condition);
}

/// The reason of the previous True `FailoverBlocked` condition.
pub fn blocked_reason(status: &DatabaseClusterStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FAILOVER_BLOCKED && c.status == "True")
        .map(|c| c.reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::{Lsn, PgPosition};

    const T0: i64 = 1_800_000_000;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(T0 + s).unwrap()
    }

    fn lsn(n: u64) -> Option<Position> {
        Some(Position::Postgresql(PgPosition::new(1, Lsn(n))))
    }

    fn up(
        t: i64,
        role: ServerRole,
        read_only: bool,
        pos: u64,
        source: Option<&str>,
    ) -> MemberFacts {
        MemberFacts {
            reachable: true,
            role: Some(role),
            read_only: Some(read_only),
            position: lsn(pos),
            source: source.map(str::to_owned),
            ..MemberFacts::unreachable(at(t))
        }
    }

    struct World {
        ready: Vec<bool>,
        present: Vec<bool>,
        facts: BTreeMap<String, MemberFacts>,
        status: Option<FailoverStatus>,
        primary: String,
        switchover: Option<String>,
        blocked: Option<&'static str>,
    }

    impl World {
        /// db-0 primary at 100, db-1 and db-2 replicas at 90 and 80, probed at `t`.
        fn healthy(t: i64) -> World {
            let mut facts = BTreeMap::new();
            facts.insert("db-0".into(), up(t, ServerRole::Primary, false, 100, None));
            facts.insert(
                "db-1".into(),
                up(t, ServerRole::Replica, true, 90, Some("db-0")),
            );
            facts.insert(
                "db-2".into(),
                up(t, ServerRole::Replica, true, 80, Some("db-0")),
            );
            World {
                ready: vec![true; 3],
                present: vec![true; 3],
                facts,
                status: None,
                primary: "db-0".into(),
                switchover: None,
                blocked: None,
            }
        }

        fn step(&mut self, t: i64) -> Outcome {
            let names: Vec<String> = (0..3).map(|i| format!("db-{i}")).collect();
            let members: Vec<Member<'_>> = (0..3)
                .filter(|&i| self.present[i])
                .map(|i| Member {
                    name: &names[i],
                    ordinal: i as i32,
                    ready: self.ready[i],
                    terminating: false,
                    role: None,
                    version: None,
                })
                .collect();
            let out = step(&Inputs {
                cluster: "shop/orders",
                engine: Engine::Postgresql,
                spec: FailoverSpec::default(),
                replicas: 3,
                members: &members,
                facts: &self.facts,
                primary: &self.primary,
                previous: self.status.as_ref(),
                blocked_before: self.blocked,
                switchover: self.switchover.as_deref(),
                now: at(t),
            });
            self.status = out.status.clone();
            self.primary = out.primary.clone();
            self.blocked = out.blocked.as_ref().map(|b| b.reason);
            out
        }

        fn lose_primary(&mut self, t: i64) {
            self.ready[0] = false;
            self.facts
                .insert("db-0".into(), MemberFacts::unreachable(at(t)));
        }

        fn phase(&self) -> Option<FailoverPhase> {
            self.status.as_ref()?.operation.as_ref().map(|o| o.phase)
        }

        fn refresh(&mut self, t: i64) {
            for f in self.facts.values_mut() {
                f.probed_at = at(t);
            }
        }
    }

    #[test]
    fn no_facts_no_failover_and_no_status() {
        let mut w = World::healthy(0);
        w.facts.clear();
        w.ready[0] = false;
        let out = w.step(100);
        assert_eq!(out.status, None);
        assert!(out.steps.is_empty() && out.events.is_empty() && out.blocked.is_none());
        assert_eq!(out.primary, "db-0");
        assert_eq!(out.label_primary.as_deref(), Some("db-0"));
    }

    #[test]
    fn a_steady_cluster_does_nothing() {
        let mut w = World::healthy(0);
        let out = w.step(0);
        assert_eq!(out.status, None);
        assert!(out.steps.is_empty() && out.events.is_empty());
    }

    #[test]
    fn one_signal_is_not_enough() {
        // Pod not Ready, server answers.
        let mut w = World::healthy(0);
        w.ready[0] = false;
        assert_eq!(w.step(0).status, None);
        // Pod Ready, server does not answer (a network cut between operator and member).
        let mut w = World::healthy(0);
        w.facts
            .insert("db-0".into(), MemberFacts::unreachable(at(0)));
        assert_eq!(w.step(0).status, None);
        // Both, but the failed probe is stale: no signal.
        let mut w = World::healthy(0);
        w.lose_primary(0);
        w.facts.get_mut("db-0").unwrap().probed_at = at(-31);
        assert_eq!(w.step(0).status, None);
    }

    #[test]
    fn failover_runs_detect_fence_promote_repoint() {
        let mut w = World::healthy(0);
        w.lose_primary(0);
        let out = w.step(0);
        assert_eq!(w.phase(), Some(FailoverPhase::Detecting));
        assert!(out.steps.is_empty());
        assert_eq!(out.label_primary.as_deref(), Some("db-0"));
        assert_eq!(out.requeue_after, Some(Duration::from_secs(10)));

        // Within the delay: wait.
        w.refresh(5);
        assert!(w.step(5).steps.is_empty());
        assert_eq!(w.phase(), Some(FailoverPhase::Detecting));

        // After it: stop the old primary's pod, nobody carries the primary label.
        w.refresh(10);
        let out = w.step(10);
        assert_eq!(out.steps, [DatabaseStep::StopPod { pod: "db-0".into() }]);
        assert_eq!(out.label_primary, None);
        assert_eq!(out.events[0].reason, EventReason::Failover);
        assert_eq!(w.phase(), Some(FailoverPhase::Fencing));

        // Still there: not fenced, no promotion.
        w.refresh(11);
        assert!(w.step(11).steps.is_empty());

        // Gone: fenced; positions must come from probes after that moment.
        w.present[0] = false;
        w.facts.remove("db-0");
        let out = w.step(12);
        assert!(out.steps.is_empty());
        w.refresh(12);
        assert!(
            w.step(12).steps.is_empty(),
            "probes of the fence's second are older"
        );
        w.refresh(13);
        let out = w.step(13);
        assert_eq!(out.steps, [DatabaseStep::Promote { pod: "db-1".into() }]);
        assert_eq!(w.phase(), Some(FailoverPhase::Promoting));
        let op = w.status.as_ref().unwrap().operation.clone().unwrap();
        assert_eq!(op.candidates[0].verdict, CandidateVerdict::Chosen);
        assert_eq!(op.candidates[1].pod, "db-2");
        assert_eq!(
            op.candidates[1].reason,
            "behind db-1: lacks 10 bytes of WAL"
        );

        // Promoted: db-2 is pointed at it, the label follows.
        w.facts
            .insert("db-1".into(), up(14, ServerRole::Primary, false, 90, None));
        w.refresh(14);
        let out = w.step(14);
        assert_eq!(out.primary, "db-1");
        assert_eq!(out.label_primary.as_deref(), Some("db-1"));
        assert_eq!(
            out.steps,
            [DatabaseStep::Follow {
                pod: "db-2".into(),
                source: "db-1".into(),
                rewind: false
            }]
        );
        assert_eq!(w.phase(), Some(FailoverPhase::Repointing));

        // Everyone follows: done, recorded, announced.
        w.facts.insert(
            "db-2".into(),
            up(15, ServerRole::Replica, true, 90, Some("db-1")),
        );
        w.refresh(15);
        let out = w.step(15);
        assert_eq!(w.phase(), None);
        let last = w.status.as_ref().unwrap().last.clone().unwrap();
        assert_eq!(last.outcome, FailoverOutcome::Completed);
        assert_eq!(last.to.as_deref(), Some("db-1"));
        assert_eq!(out.events[0].reason, EventReason::Failover);
        assert_eq!(
            out.events[0].message,
            "shop/orders: promoted db-1 (timeline 1, LSN 0/5A; most advanced position); db-2 lost (timeline 1, LSN 0/50): behind db-1: lacks 10 bytes of WAL; old primary db-0 fenced (pod stopped)"
        );

        // The ex-primary comes back behind: it follows (a PostgreSQL one past the fork would
        // be rewound).
        w.present[0] = true;
        w.facts
            .insert("db-0".into(), up(16, ServerRole::Replica, true, 95, None));
        let out = w.step(16);
        assert_eq!(
            out.steps,
            [DatabaseStep::Follow {
                pod: "db-0".into(),
                source: "db-1".into(),
                rewind: true
            }]
        );
    }

    #[test]
    fn the_primary_coming_back_within_the_delay_ends_detection() {
        let mut w = World::healthy(0);
        w.lose_primary(0);
        w.step(0);
        w.ready[0] = true;
        w.facts
            .insert("db-0".into(), up(3, ServerRole::Primary, false, 100, None));
        let out = w.step(3);
        assert_eq!(w.phase(), None);
        assert!(out.steps.is_empty());
    }

    #[test]
    fn most_members_unreachable_blocks() {
        let mut w = World::healthy(0);
        w.lose_primary(0);
        w.facts
            .insert("db-2".into(), MemberFacts::unreachable(at(0)));
        w.step(0);
        let out = w.step(10);
        assert!(out.steps.is_empty());
        let blocked = out.blocked.unwrap();
        assert_eq!(blocked.reason, reasons::NO_QUORUM);
        assert!(
            blocked
                .message
                .starts_with("2/3 members of shop/orders are unreachable")
        );
        assert_eq!(out.events[0].reason, EventReason::FailoverBlocked);
        // Once: the next pass does not repeat the event.
        let out = w.step(11);
        assert!(out.events.is_empty());
        assert_eq!(w.phase(), Some(FailoverPhase::Detecting));
    }

    #[test]
    fn disabled_failover_blocks() {
        let mut w = World::healthy(0);
        w.lose_primary(0);
        let names: Vec<String> = (0..3).map(|i| format!("db-{i}")).collect();
        let members: Vec<Member<'_>> = (0..3)
            .map(|i| Member {
                name: &names[i],
                ordinal: i as i32,
                ready: w.ready[i],
                terminating: false,
                role: None,
                version: None,
            })
            .collect();
        let out = step(&Inputs {
            cluster: "shop/orders",
            engine: Engine::Postgresql,
            spec: FailoverSpec {
                enabled: false,
                delay_seconds: 10,
            },
            replicas: 3,
            members: &members,
            facts: &w.facts,
            primary: "db-0",
            previous: None,
            blocked_before: None,
            switchover: None,
            now: at(0),
        });
        assert_eq!(out.blocked.unwrap().reason, reasons::FAILOVER_DISABLED);
        assert!(out.steps.is_empty());
    }

    #[test]
    fn switchover_fences_waits_for_catch_up_promotes_and_records_the_request() {
        let mut w = World::healthy(0);
        w.switchover = Some("db-2".into());
        let out = w.step(0);
        assert_eq!(out.steps, [DatabaseStep::Fence { pod: "db-0".into() }]);
        assert_eq!(out.label_primary, None);
        assert_eq!(w.phase(), Some(FailoverPhase::Fencing));

        // Not confirmed yet: the fence is repeated (idempotent).
        w.refresh(1);
        let out = w.step(1);
        assert_eq!(out.steps, [DatabaseStep::Fence { pod: "db-0".into() }]);
        // Read-only now, but db-2 is behind: wait.
        w.facts
            .insert("db-0".into(), up(2, ServerRole::Primary, true, 100, None));
        w.refresh(2);
        let out = w.step(2);
        assert!(out.steps.is_empty());
        assert_eq!(w.phase(), Some(FailoverPhase::Fencing));

        // Caught up: promote it.
        w.facts.insert(
            "db-2".into(),
            up(3, ServerRole::Replica, true, 100, Some("db-0")),
        );
        w.refresh(3);
        let out = w.step(3);
        assert_eq!(out.steps, [DatabaseStep::Promote { pod: "db-2".into() }]);

        w.facts
            .insert("db-2".into(), up(4, ServerRole::Primary, false, 100, None));
        w.refresh(4);
        let out = w.step(4);
        assert_eq!(out.primary, "db-2");
        assert!(out.steps.contains(&DatabaseStep::Follow {
            pod: "db-0".into(),
            source: "db-2".into(),
            rewind: false
        }));
        w.facts.insert(
            "db-0".into(),
            up(5, ServerRole::Replica, true, 100, Some("db-2")),
        );
        w.facts.insert(
            "db-1".into(),
            up(5, ServerRole::Replica, true, 100, Some("db-2")),
        );
        let out = w.step(5);
        assert_eq!(w.phase(), None);
        assert_eq!(out.events[0].reason, EventReason::Switchover);
        let status = w.status.clone().unwrap();
        assert_eq!(status.handled_switchover.as_deref(), Some("db-2"));
        // The same annotation again: nothing.
        assert!(w.step(6).steps.is_empty());
        // Removed, then written again: a new request.
        w.switchover = None;
        w.step(7);
        assert_eq!(w.status.as_ref().unwrap().handled_switchover, None);
        w.switchover = Some("db-0".into());
        w.facts
            .insert("db-2".into(), up(8, ServerRole::Primary, false, 100, None));
        w.refresh(8);
        assert_eq!(
            w.step(8).steps,
            [DatabaseStep::Fence { pod: "db-2".into() }]
        );
    }

    #[test]
    fn a_switchover_whose_target_does_not_catch_up_gives_the_writes_back() {
        let mut w = World::healthy(0);
        w.switchover = Some("db-2".into());
        w.step(0);
        w.facts
            .insert("db-0".into(), up(1, ServerRole::Primary, true, 100, None));
        for t in 1..60 {
            w.refresh(t);
            w.step(t);
        }
        w.refresh(60);
        let out = w.step(60);
        assert!(
            out.steps
                .contains(&DatabaseStep::Unfence { pod: "db-0".into() })
        );
        let status = w.status.clone().unwrap();
        assert_eq!(status.last.unwrap().outcome, FailoverOutcome::Aborted);
        assert_eq!(status.handled_switchover.as_deref(), Some("db-2"));
        assert_eq!(out.label_primary.as_deref(), Some("db-0"));
    }

    #[test]
    fn a_switchover_to_an_unknown_pod_is_refused_once() {
        let mut w = World::healthy(0);
        w.switchover = Some("db-7".into());
        let out = w.step(0);
        assert!(out.steps.is_empty());
        assert_eq!(out.events[0].type_, EventType::Warning);
        let status = w.status.clone().unwrap();
        assert_eq!(status.last.unwrap().outcome, FailoverOutcome::Blocked);
        assert!(w.step(1).events.is_empty());
    }

    #[test]
    fn a_mysql_member_with_errant_transactions_is_quarantined() {
        use crate::position::GtidSet;
        let gtid = |s: &str| Some(Position::Mysql(s.parse::<GtidSet>().unwrap()));
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let b = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mut facts = BTreeMap::new();
        facts.insert(
            "db-0".to_owned(),
            MemberFacts {
                position: gtid(&format!("{a}:1-10")),
                ..up(0, ServerRole::Primary, false, 0, None)
            },
        );
        facts.insert(
            "db-1".to_owned(),
            MemberFacts {
                position: gtid(&format!("{a}:1-8,{b}:1")),
                ..up(0, ServerRole::Replica, true, 0, None)
            },
        );
        let names = ["db-0".to_owned(), "db-1".to_owned()];
        let members: Vec<Member<'_>> = (0..2)
            .map(|i| Member {
                name: &names[i],
                ordinal: i as i32,
                ready: true,
                terminating: false,
                role: None,
                version: None,
            })
            .collect();
        let out = step(&Inputs {
            cluster: "shop/orders",
            engine: Engine::Mysql,
            spec: FailoverSpec::default(),
            replicas: 2,
            members: &members,
            facts: &facts,
            primary: "db-0",
            previous: None,
            blocked_before: None,
            switchover: None,
            now: at(0),
        });
        assert_eq!(out.steps, [DatabaseStep::Quarantine { pod: "db-1".into() }]);
        assert_eq!(out.status.unwrap().quarantined, ["db-1"]);
        assert_eq!(out.events[0].reason, EventReason::MemberQuarantined);
    }
}
