//! Failover and switchover: a state machine that advances once per pass ([`advance`]) and keeps its
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
//!    │                                                  │      switchover: Fence it, and on
//!    │                                                  │      PostgreSQL StopServer it once
//!    │                                                  │      its target caught up)
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
//!   `spec.failover.delaySeconds`. Probes older than [`MemberFacts::STALE_AFTER`] are no signal at all.
//! - Fence before promote: no `Promote` while the old primary is not known fenced (its pod
//!   gone or terminating, or its server answering read-only). During `Fencing` and `Promoting`
//!   no pod carries the primary label, so a restarted old primary starts as a replica.
//! - Never promote a candidate behind another reachable candidate: [`crate::position::elect`]
//!   over every reachable member chooses; conflicting positions block.
//! - Never act when most members are unreachable: condition `FailoverBlocked` `NoQuorum`.
//! - A member that reports another server identity than the cluster's (PostgreSQL's
//!   `system_identifier`) holds another database: quarantined, never followed or promoted.
//! - An ex-primary rejoins as a replica when its history allows (behind or equal: follow;
//!   PostgreSQL past the fork: follow with `pg_rewind`); a MySQL/MariaDB member with errant
//!   transactions is quarantined, never reseeded implicitly.
//! - A replica that can no longer catch up (the primary no longer has the WAL or binary logs
//!   it needs) and holds nothing the primary lacks is seeded again, one at a time, only while
//!   no change of primary is in progress ([`reseed`]); a person can ask for one with the
//!   `database.example.com/reseed` annotation.
//!
//! Database commands are intents ([`DatabaseCommand`]), never SQL.

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

use crate::members::Member;
use crate::position::{self, Candidate, Position, Relation};
use crate::{DatabaseCommand, EventReason, EventType, MemberFacts, PlannedEvent, ServerRole};

mod detect;
mod fence;
mod follow;
mod identity;
mod promote;
mod rejoin;
mod reseed;
mod signals;
mod stop;
mod switchover;
mod text;

pub use follow::{FollowBy, follow_by};
pub use rejoin::follows;
pub use reseed::stranded;
pub use stop::{STOP_RETRY, hard_fence_by_stop};
pub use text::{apply_condition, blocked_reason};
use text::{completion_message, delay, describe, elapsed, kind_word, report, requested_report};

/// How long a `StopPod` fence may go unconfirmed before it is issued again.
pub const FENCE_RETRY: Duration = Duration::from_secs(30);
/// How long after its grace period a stopped primary's pod may stay Terminating before the
/// failover reports `FenceUnconfirmed` (its node is not stopping it).
pub const FENCE_UNCONFIRMED_AFTER: Duration = Duration::from_secs(10);
/// How long a switchover waits for its target to catch up with the fenced primary before it
/// gives the primary its writes back.
pub const SWITCHOVER_CATCH_UP: Duration = Duration::from_secs(60);
/// The termination grace period of a switchover's [`DatabaseCommand::StopServer`]: long
/// enough for a clean shutdown (its sessions were ended just before, and a clean PostgreSQL
/// shutdown waits for the streaming standbys to confirm every change), short enough to bound
/// the switchover's write gap when a client holds a session open (then the server is killed).
pub const SWITCHOVER_STOP_GRACE: Duration = Duration::from_secs(10);
/// How long `Repointing` waits for every reachable member to follow before it completes (the
/// steady-state rejoin keeps pointing late members at the primary afterwards).
pub const REPOINT_TIMEOUT: Duration = Duration::from_secs(60);
/// How recent a candidate's probe must be for the election (`MemberFacts::STALE_AFTER` is
/// the general bound; positions for a promotion need fresher ones).
pub const ELECT_WITHIN: Duration = Duration::from_secs(5);
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
    /// A switchover to this member the operator plans itself: the version roll's
    /// ([`crate::upgrade`]), or a scale-down's that would remove the primary: handled like an
    /// annotation request naming the member, after it, but never recorded in
    /// `handledSwitchover` and never reported when refused (the roll and the scale-down ask
    /// again; the roll pauses when the primary role does not move in time).
    pub upgrade_switchover: Option<&'a str>,
    /// What [`Inputs::upgrade_switchover`] is for, as its events say it (`the upgrade`, `the
    /// scale-down to 2 members`).
    pub planned_for: &'a str,
    /// The `database.example.com/reseed` annotation: a member to seed again from the primary.
    pub reseed_request: Option<&'a str>,
    /// The primary Lease as last read (`spec.failover.nodeLoss: SelfFence`; `None` otherwise,
    /// or not read yet): an expired lease of the old primary counts as its fence and as the
    /// pod signal of a lost primary ([`crate::LeaseSighting::fenced`]).
    pub lease: Option<&'a crate::LeaseSighting>,
    /// The cluster has had a ready member (`status.currentVersion` is set). Before that, a
    /// primary that does not answer is starting (init, a restore), not lost: no failover is
    /// started for it and no `FailoverBlocked` warning is raised while the members come up.
    pub has_run: bool,
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
    /// Database commands, in order.
    pub commands: Vec<DatabaseCommand>,
    /// Events.
    pub events: Vec<PlannedEvent>,
    /// Why failover is blocked, when it is.
    pub blocked: Option<Blocked>,
    /// When to look again at the latest.
    pub requeue_after: Option<Duration>,
}

/// Advances failover or switchover by one pass, from the previous status, the members, their
/// facts, the spec, the switchover request and `now`.
pub fn advance(input: &Inputs<'_>) -> Outcome {
    let previous = input.previous.cloned().unwrap_or_default();
    let mut pass = Pass {
        input,
        status: previous.clone(),
        primary: input.primary.to_owned(),
        label_primary: Some(input.primary.to_owned()),
        commands: Vec::new(),
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
    pass.record_identity();
    if previous.operation.is_none() {
        // Reseeding waits while the primary changes; a member being reseeded is left alone by
        // the rejoin below.
        pass.reseed_step();
    }
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
    commands: Vec<DatabaseCommand>,
    events: Vec<PlannedEvent>,
    blocked: Option<Blocked>,
    requeue_after: Option<Duration>,
}

#[cfg(test)]
mod tests;
