//! Version changes: the roll ([`roll`]): which member is replaced next through the
//! StatefulSet's rolling-update partition, when the primary moves, when the roll pauses.
//! Which version each member runs and whether an upgrade is rolling is read with the members
//! ([`crate::members::version_state`]).
//!
//! A member's version is its pod's `app.kubernetes.io/version` label (set from the pod
//! template), else the tag of its database container image (read in `members.rs`). The rule for the `Upgrading` phase:
//! **the cluster has run a version before (`status.currentVersion` is set) and at least one
//! member pod runs a version other than `spec.version`**. A new cluster is therefore never
//! "upgrading", and the phase ends when every member runs the version of the spec.
//! `status.currentVersion` is the version every ready member runs; while members disagree it
//! keeps its previous value (the version being replaced).
//!
//! ## The roll
//! The StatefulSet keeps `updateStrategy: RollingUpdate`; the operator holds the `partition` so
//! that the StatefulSet controller replaces exactly one chosen member at a time (a pod at or
//! above the partition gets the new template). One pass decides, from the members (ordinal,
//! Ready, pod version, the version the server reports, replication caught up), the primary, the
//! previous `status.upgrade`, `spec.upgrade.stepTimeoutSeconds` and `now`:
//!
//! 1. **Health gate.** A member that runs the new template but is not healthy yet (pod Ready,
//!    the server reporting the new version in a fresh probe, replication caught up) holds the
//!    roll; when it stays so longer than the step timeout the roll is **Paused** (`Upgrading`
//!    condition `UpgradePaused`, a Warning event). It continues by itself if the member recovers;
//!    setting `spec.version` back rolls the changed members back (a pod stuck on the failing
//!    version is deleted: the StatefulSet controller never replaces a pod that is not Ready).
//! 2. **One member down at most.** Nothing moves while another member is not Ready.
//! 3. **Next member**: the highest ordinal that does not run the target version. A replica: the
//!    partition drops to its ordinal (only it is replaced: every member above already runs the
//!    target).
//! 4. **The primary last.** When the next member is the primary, the roll asks failover for a
//!    planned switchover ([`crate::failover::Inputs::upgrade_switchover`]): to an upgraded,
//!    healthy replica once every other member runs the target; otherwise (the primary is not the
//!    lowest ordinal, so the partition cannot pass it) to the lowest-ordinal member still on the
//!    old version, so that every member left to replace sits above the primary. The primary is
//!    therefore never replaced while a replica is not on the target, and never moved onto a
//!    version that has not passed the gate. A switchover that is refused or aborted pauses the
//!    roll. A single-member cluster replaces its only member (downtime is unavoidable).
//!
//! ## Any restart rolls the same way
//! A member is on the target when its pod runs the spec's version **and** the pod template the
//! plan renders: every member pod carries the template's hash in its
//! `database.example.com/template` label ([`crate::render::statefulset::PodTemplate`]). So a
//! change that restarts pods without changing the version (resources, configuration,
//! scheduling, an image, the operator's own rendering after an upgrade of the operator) is
//! rolled exactly as a version change: replicas first, a switchover, then the former primary;
//! `status.upgrade` then has `from` equal to `to`, the phase stays `Running`, and the events are
//! `RollingRestart` and `RollingRestartCompleted`. A pod without the label (made by an earlier
//! release) runs an older template: such clusters roll once, primary last, when the operator is
//! upgraded. A cluster that never ran (no `status.currentVersion`) has nothing to protect: its
//! pods take the template at once.
//!
//! Without a roll the partition is 0.

use std::time::Duration;

use database_operator_api::DatabaseClusterStatus;
use database_operator_api::conditions::{self, reasons};
use database_operator_api::upgrade::{RollPhase, UpgradeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::{DatabaseCommand, EventReason, EventType, MemberFacts, PlannedEvent, ServerRole};

mod gate;

use gate::{healthy, idle, obstacle, on_target, unhealthy_why};

/// How much replication delay still counts as caught up, in seconds.
pub const CAUGHT_UP_LAG_SECONDS: u64 = 5;
/// How soon to look again while a roll waits for a member.
pub const ROLL_REQUEUE: Duration = Duration::from_secs(5);

/// Whether a server's own version string is `version`: equal, or `version` followed by a
/// suffix that is not part of a number (`16.4 (Debian 16.4-1)`, `10.11.19-MariaDB-log`).
///
/// ```
/// use database_operator_core::upgrade::reports_version;
/// assert!(reports_version("16.4 (Debian 16.4-1.pgdg120+1)", "16.4"));
/// assert!(reports_version("10.11.19-MariaDB-log", "10.11.19"));
/// assert!(reports_version("8.4.7", "8.4.7"));
/// assert!(!reports_version("16.14", "16.1"));
/// assert!(!reports_version("8.4.70", "8.4.7"));
/// ```
pub fn reports_version(reported: &str, version: &str) -> bool {
    match reported.strip_prefix(version) {
        Some(rest) => !rest.starts_with(|c: char| c.is_ascii_digit() || c == '.'),
        None => false,
    }
}

/// A member as the roll sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollMember<'a> {
    /// Pod name.
    pub name: &'a str,
    /// Ordinal.
    pub ordinal: i32,
    /// The pod is Ready and not terminating.
    pub ready: bool,
    /// The pod has a deletion timestamp.
    pub terminating: bool,
    /// The version the pod runs (label or image tag).
    pub pod_version: Option<&'a str>,
    /// The hash of the pod template the pod runs (its `database.example.com/template` label;
    /// `Some("")` for a pod without it, `None` for a member whose pod is missing).
    pub pod_template: Option<&'a str>,
    /// The version its server reports in a fresh probe.
    pub server_version: Option<&'a str>,
    /// A fresh probe says it is the primary, or a replica replicating without error within
    /// [`CAUGHT_UP_LAG_SECONDS`].
    pub caught_up: bool,
    /// No fresh probe says otherwise: it is the primary, quarantined, or follows the primary as
    /// [`crate::failover::follows`] defines it (the failover leaves it alone). `false` while a
    /// probe shows the failover still has to point it at the primary, e.g. the old primary
    /// right after a switchover, or a standby that must be rewound.
    pub follows: bool,
}

/// What one roll pass reads.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// `<namespace>/<name>`, for messages.
    pub cluster: &'a str,
    /// The members the StatefulSet keeps (ordinal below `spec.replicas`), by ordinal.
    pub members: Vec<RollMember<'a>>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The primary.
    pub primary: &'a str,
    /// `spec.version`.
    pub target: &'a str,
    /// The hash of the pod template the plan renders
    /// ([`crate::render::statefulset::PodTemplate::hash`]).
    pub template: &'a str,
    /// `status.currentVersion` before this pass.
    pub current_version: Option<&'a str>,
    /// `status.upgrade` before this pass.
    pub previous: Option<&'a UpgradeStatus>,
    /// `spec.upgrade.stepTimeoutSeconds`.
    pub step_timeout: Duration,
    /// A failover or switchover is in progress.
    pub failover_in_flight: bool,
    /// The last switchover ended without completing (refused or aborted) at this time.
    pub switchover_failed_at: Option<Timestamp>,
    /// The current time.
    pub now: Timestamp,
}

/// What one roll pass decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The StatefulSet's rolling-update partition.
    pub partition: i32,
    /// The new `status.upgrade` (`None` when nothing rolls).
    pub status: Option<UpgradeStatus>,
    /// The member to switch the primary role to (a planned switchover), if the roll needs one.
    pub switchover_to: Option<String>,
    /// `StopPod` of a member stuck on a version being rolled back.
    pub commands: Vec<DatabaseCommand>,
    /// Events (`UpgradePaused`).
    pub events: Vec<PlannedEvent>,
    /// When to look again at the latest.
    pub requeue_after: Option<Duration>,
}

/// One pass of a roll (see the module documentation).
pub fn roll(input: &Inputs<'_>) -> Outcome {
    let target = input.target;
    let Some(pass) = Roll::begin(input) else {
        return idle();
    };
    // 1. The health gate: a member on the new template that is not healthy yet.
    if let Some(m) = input
        .members
        .iter()
        .rev()
        .find(|m| on_target(m, input) && !healthy(m, input))
    {
        return pass.wait_for(m, RollPhase::Replicas, unhealthy_why(m, target));
    }
    let Some(next) = input.members.iter().rev().find(|m| !on_target(m, input)) else {
        return idle();
    };
    // `next` is the last member left on the old version.
    let last_left = input
        .members
        .iter()
        .filter(|m| !on_target(m, input))
        .count()
        == 1;
    if let Some((step, member, why)) = obstacle(input, next, last_left) {
        return pass.wait(step, member, why);
    }
    // 3. A replica (or the only member): replace it.
    if next.name != input.primary || input.members.len() == 1 {
        return pass.replace(next, last_left);
    }
    // 4. The primary is next: move the role first.
    pass.move_primary()
}

struct Roll<'i, 'a> {
    input: &'i Inputs<'a>,
    from: String,
    /// The version a roll being reverted was rolling to.
    reverting_from: Option<String>,
    done: Vec<String>,
    partition: i32,
    switchover_to: Option<String>,
    commands: Vec<DatabaseCommand>,
    events: Vec<PlannedEvent>,
}

impl<'i, 'a> Roll<'i, 'a> {
    /// The pass of a roll, when one is rolling: the version it rolls from, the members done
    /// (kept from the previous status while they stay on the target, with the healthy ones
    /// added) and the partition that holds what moved.
    fn begin(input: &'i Inputs<'a>) -> Option<Self> {
        let target = input.target;
        // A member whose version is unknown (its pod is being created again) keeps a roll
        // going, but does not start one: a pod deleted while nothing upgrades is no upgrade.
        let roll_in_progress = input.previous.is_some_and(|p| p.to == target);
        let rolling = input.current_version.is_some()
            && input
                .members
                .iter()
                .any(|m| match (m.pod_version, m.pod_template) {
                    (Some(v), Some(t)) => v != target || t != input.template,
                    (Some(v), None) => v != target,
                    (None, _) => roll_in_progress,
                });
        if !rolling {
            return None;
        }
        let same_roll = input.previous.filter(|p| p.to == target);
        let reverting_from = input
            .previous
            .filter(|p| p.to != target)
            .map(|p| p.to.clone());
        let from = same_roll
            .map(|p| p.from.clone())
            .or(reverting_from.clone())
            .or(input.current_version.map(str::to_owned))
            .unwrap_or_default();
        let mut done: Vec<String> = same_roll
            .map(|p| p.members_done.clone())
            .unwrap_or_default();
        done.retain(|d| {
            input
                .members
                .iter()
                .any(|m| m.name == d && on_target(m, input))
        });
        for m in input.members.iter().rev().filter(|m| healthy(m, input)) {
            if !done.iter().any(|d| d == m.name) {
                done.push(m.name.to_owned());
            }
        }
        // Everything that moved stays on the new template; nothing else moves.
        let hold = input
            .members
            .iter()
            .filter(|m| on_target(m, input))
            .map(|m| m.ordinal)
            .min()
            .unwrap_or(input.replicas)
            .min(input.replicas);
        Some(Roll {
            input,
            from,
            reverting_from,
            done,
            partition: hold,
            switchover_to: None,
            commands: Vec::new(),
            events: Vec::new(),
        })
    }

    /// Replaces `next`, a replica or the only member (the last one left is the former
    /// primary, or the only member).
    fn replace(mut self, next: &RollMember<'_>, last_left: bool) -> Outcome {
        let step = if last_left {
            RollPhase::Primary
        } else {
            RollPhase::Replicas
        };
        // A pod on the version being rolled back never becomes Ready, and the StatefulSet
        // controller does not replace a pod that is not Ready: delete it.
        if !next.ready
            && !next.terminating
            && self
                .reverting_from
                .as_deref()
                .is_some_and(|v| next.pod_version == Some(v))
        {
            self.commands.push(DatabaseCommand::StopPod {
                pod: next.name.to_owned(),
            });
        }
        self.partition = next.ordinal;
        self.moving(step, next.name)
    }

    /// The primary is next: the role moves to another member first (a switchover), or the
    /// roll pauses when it does not.
    fn move_primary(mut self) -> Outcome {
        let input = self.input;
        let others_left: Vec<&RollMember<'_>> = input
            .members
            .iter()
            .filter(|m| m.name != input.primary && !on_target(m, input))
            .collect();
        let to = match others_left.first() {
            // The lowest ordinal still on the old version: every member left to replace is
            // then above the primary.
            Some(lowest) => lowest.name.to_owned(),
            None => match input.members.iter().find(|m| healthy(m, input)) {
                Some(m) => m.name.to_owned(),
                None => {
                    return self.wait(
                        RollPhase::Switchover,
                        None,
                        "no upgraded replica is healthy to take over the primary role".to_owned(),
                    );
                }
            },
        };
        let started = self.step_started(RollPhase::Switchover, Some(&to));
        if let Some(failed) = input.switchover_failed_at.filter(|t| *t >= started) {
            let why = format!(
                "the switchover to {to} did not complete (at {failed}); the primary {} keeps the old version",
                input.primary
            );
            return self.pause(RollPhase::Switchover, Some(&to), started, why);
        }
        if input.now >= add(started, input.step_timeout) {
            let why = format!(
                "the switchover to {to} did not happen within {} s (spec.upgrade.stepTimeoutSeconds); the primary {} keeps the old version",
                input.step_timeout.as_secs(),
                input.primary
            );
            return self.pause(RollPhase::Switchover, Some(&to), started, why);
        }
        self.switchover_to = Some(to.clone());
        self.moving(RollPhase::Switchover, &to)
    }
}

impl Roll<'_, '_> {
    /// When the step on `member` started: kept while the previous status describes the same
    /// roll, step and member.
    fn step_started(&self, step: RollPhase, member: Option<&str>) -> Timestamp {
        self.input
            .previous
            .filter(|p| p.to == self.input.target && p.member.as_deref() == member)
            .filter(|p| p.step == step || p.step == RollPhase::Paused)
            .map(|p| p.step_started.0)
            .unwrap_or(self.input.now)
    }

    fn status(
        &self,
        step: RollPhase,
        member: Option<&str>,
        step_started: Timestamp,
        paused: Option<String>,
        waiting: Option<String>,
    ) -> UpgradeStatus {
        let started = self
            .input
            .previous
            .filter(|p| p.to == self.input.target)
            .map(|p| p.started.clone())
            .unwrap_or(Time(self.input.now));
        UpgradeStatus {
            from: self.from.clone(),
            to: self.input.target.to_owned(),
            started,
            step,
            member: member.map(str::to_owned),
            step_started: Time(step_started),
            members_done: self.done.clone(),
            paused_reason: paused,
            waiting,
        }
    }

    fn finish(self, status: UpgradeStatus, requeue: Option<Duration>) -> Outcome {
        Outcome {
            partition: self.partition,
            status: Some(status),
            switchover_to: self.switchover_to,
            commands: self.commands,
            events: self.events,
            requeue_after: requeue,
        }
    }

    /// A member is being replaced (or the primary role moved): the health gate applies next.
    fn moving(self, step: RollPhase, member: &str) -> Outcome {
        let started = self.step_started(step, Some(member));
        let status = self.status(step, Some(member), started, None, None);
        self.finish(status, Some(ROLL_REQUEUE))
    }

    /// An upgraded member is not healthy yet: wait, and pause after the step timeout.
    fn wait_for(self, m: &RollMember<'_>, step: RollPhase, why: String) -> Outcome {
        let step = match self
            .input
            .previous
            .filter(|p| p.member.as_deref() == Some(m.name))
        {
            Some(p) if p.step != RollPhase::Paused => p.step,
            _ => step,
        };
        let started = self.step_started(step, Some(m.name));
        let deadline = add(started, self.input.step_timeout);
        if self.input.now >= deadline {
            let why = format!(
                "{why} {} s after it was replaced (spec.upgrade.stepTimeoutSeconds {}); the primary {} is not touched: fix the cause, or {} to roll {} back",
                self.input.now.duration_since(started).as_secs(),
                self.input.step_timeout.as_secs(),
                self.input.primary,
                if self.from == self.input.target {
                    "undo the change to the spec".to_owned()
                } else {
                    format!("set spec.version back to {}", self.from)
                },
                m.name
            );
            return self.pause(step, Some(m.name), started, why);
        }
        let status = self.status(step, Some(m.name), started, None, Some(why));
        let left = Duration::try_from(deadline.duration_since(self.input.now)).unwrap_or_default();
        self.finish(
            status,
            Some(left.clamp(Duration::from_secs(1), ROLL_REQUEUE)),
        )
    }

    /// Nothing moves this pass, for a reason that is not the member's health.
    fn wait(self, step: RollPhase, member: Option<&str>, why: String) -> Outcome {
        let step = match self.input.previous.filter(|p| p.to == self.input.target) {
            Some(p) if member.is_none() => p.step,
            _ => step,
        };
        let member = member.map(str::to_owned).or_else(|| {
            self.input
                .previous
                .filter(|p| p.to == self.input.target)
                .and_then(|p| p.member.clone())
        });
        let started = self.step_started(step, member.as_deref());
        let paused = self
            .input
            .previous
            .filter(|p| p.to == self.input.target && p.step == RollPhase::Paused)
            .and_then(|p| p.paused_reason.clone());
        let step = if paused.is_some() {
            RollPhase::Paused
        } else {
            step
        };
        let waiting = paused.is_none().then_some(why);
        let status = self.status(step, member.as_deref(), started, paused, waiting);
        self.finish(status, Some(ROLL_REQUEUE))
    }

    fn pause(
        mut self,
        _step: RollPhase,
        member: Option<&str>,
        started: Timestamp,
        why: String,
    ) -> Outcome {
        let was_paused = self
            .input
            .previous
            .is_some_and(|p| p.to == self.input.target && p.step == RollPhase::Paused);
        if !was_paused {
            self.events.push(PlannedEvent::new(
                EventType::Warning,
                EventReason::UpgradePaused,
                format!(
                    "upgrade of {} from {} to {} paused: {why}",
                    self.input.cluster, self.from, self.input.target
                ),
            ));
        }
        let why = match self.input.previous.filter(|_| was_paused) {
            Some(p) => p.paused_reason.clone().unwrap_or(why),
            None => why,
        };
        let status = self.status(RollPhase::Paused, member, started, Some(why), None);
        self.finish(status, None)
    }
}

/// Whether a member's facts say it is caught up: the primary, or a replica replicating
/// without error within [`CAUGHT_UP_LAG_SECONDS`].
pub fn caught_up(facts: &MemberFacts) -> bool {
    match facts.role {
        Some(ServerRole::Primary) => true,
        Some(ServerRole::Replica) => {
            facts.replicating == Some(true)
                && facts.replication_error.is_none()
                && facts
                    .lag_seconds
                    .is_none_or(|lag| lag <= CAUGHT_UP_LAG_SECONDS)
        }
        None => false,
    }
}

/// A paused roll says so in the `Upgrading` condition (reason `UpgradePaused`, the message
/// from `status.upgrade.pausedReason`).
pub fn paused_condition(status: &mut DatabaseClusterStatus) {
    let Some(why) = status
        .upgrade
        .as_ref()
        .filter(|u| u.step == RollPhase::Paused)
        .and_then(|u| u.paused_reason.clone())
    else {
        return;
    };
    if let Some(c) = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == conditions::UPGRADING && c.status == "True")
    {
        c.reason = reasons::UPGRADE_PAUSED.to_owned();
        c.message = why;
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    k8s_openapi::jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}
#[cfg(test)]
mod roll_tests;
