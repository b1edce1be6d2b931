//! The status a cluster reports: phase, conditions, counts. Pure.
//!
//! Decides the phase from what was observed, in this order (the first that applies wins):
//!
//! | phase | when | `Ready` | `Degraded` |
//! | --- | --- | --- | --- |
//! | Deleting | `metadata.deletionTimestamp` is set | False `Deleting` | False `Deleting` |
//! | Degraded | the spec is invalid | False `InvalidSpec` | True `InvalidSpec` |
//! | Degraded | the password Secret or its key is missing, or its value cannot be a password | False `SecretNotFound` / `SecretKeyMissing` / `PasswordUnusable` | True (same) |
//! | Pending | no StatefulSet and no member pod observed yet | False `NoReadyReplicas` | False `AsExpected` |
//! | Degraded | bootstrapped from a backup, the primary not ready and its init container (the restore) failed | False `RestoreFailed` | True `RestoreFailed` |
//! | Upgrading | a version change is rolling (see [`crate::upgrade`]) | True when all ready, else False `InsufficientReplicas` | False `AsExpected` |
//! | Initializing | not every member ready yet and the cluster was never Running (the previous phase is unset, Pending or Initializing, or Degraded by the spec or the Secret before any member was ready) | False `NoReadyReplicas` / `InsufficientReplicas` | False `AsExpected` |
//! | Degraded | no member ready, the cluster ran before | False `NoReadyReplicas` | True `NoReadyReplicas` |
//! | Degraded | the primary is not ready | False `NoPrimary` | True `NoPrimary` |
//! | Degraded | fewer members ready than `spec.replicas` | False `InsufficientReplicas` | True `InsufficientReplicas` |
//! | Running | every member ready, the primary among them | True `AllReplicasReady` | False `AsExpected` |
//!
//! A member is ready when its pod is Ready and its server has not stopped answering the
//! operator's probes for `MemberFacts::GONE_AFTER` (a kubelet cut off from the API server keeps
//! reporting the pod Ready for tens of seconds); the messages name such members.
//!
//! The `Upgrading` condition is True `VersionRolling` in the Upgrading phase, else False
//! `VersionCurrent`. Each condition's `lastTransitionTime` is kept from the previous status
//! while its status (True/False) is unchanged, so a steady cluster's status is byte-identical
//! from one pass to the next. Conditions of other types (written by someone else) are kept.

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{DatabaseCluster, DatabaseClusterStatus, Phase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::members::VersionState;

/// A problem with the password Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretProblem {
    /// `SecretNotFound`, `SecretKeyMissing`, `PasswordUnusable`, `OperatorSecretLost`, or one of
    /// the TLS Secrets' reasons.
    pub reason: &'static str,
    /// What is missing, naming `<namespace>/<secret>` and the key.
    pub message: String,
}

impl SecretProblem {
    /// Whether the members of a new cluster could not start with it, so its StatefulSet waits:
    /// every problem but a provided certificate near its end (still valid, served).
    pub fn keeps_members_from_starting(&self) -> bool {
        self.reason != database_operator_api::conditions::reasons::TLS_CERTIFICATE_EXPIRING
    }
}

/// The facts the status is computed from.
#[derive(Clone, Debug)]
pub struct StatusInputs<'a> {
    /// `<namespace>/<name>` of the cluster, for messages.
    pub cluster: String,
    /// `metadata.generation` of the cluster.
    pub generation: Option<i64>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.version`.
    pub spec_version: &'a str,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The validation errors, when the spec is invalid.
    pub invalid_spec: Option<String>,
    /// A problem with the password Secret.
    pub secret_problem: Option<SecretProblem>,
    /// Whether the StatefulSet or any member pod was observed.
    pub observed_anything: bool,
    /// Members (ordinal below `spec.replicas`, not terminating) whose pod is Ready and whose
    /// server has not gone silent (`silent`).
    pub ready_members: i32,
    /// Members whose pod is Ready but whose server has not answered the operator's probes for
    /// `MemberFacts::GONE_AFTER`: not counted as ready, and named in the messages.
    pub silent: Vec<String>,
    /// Members not Ready whose server's last run failed, each as `<pod>'s server <how>`
    /// ([`crate::ContainerExit::describe`]): named in the messages, a full volume or the
    /// memory limit with what to do.
    pub exits: Vec<String>,
    /// The pod chosen as primary, when there is one.
    pub primary: Option<String>,
    /// `spec.bootstrap.fromBackup` is set and the primary's init container failed: what
    /// failed (the restore; its log says why).
    pub restore_failure: Option<String>,
    /// Whether that pod is Ready.
    pub primary_ready: bool,
    /// Versions of the members.
    pub versions: VersionState,
    /// `status.nextBackupTime`.
    pub next_backup_time: Option<Timestamp>,
    /// The status as observed.
    pub previous: &'a DatabaseClusterStatus,
    /// The current time, whole seconds (status times are serialized to the second).
    pub now: Timestamp,
}

/// The phase and why, as the conditions will say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The phase.
    pub phase: Phase,
    /// Reason of the `Ready` condition.
    pub ready_reason: &'static str,
    /// Whether the `Ready` condition is True.
    pub ready: bool,
    /// Reason of the `Degraded` condition.
    pub degraded_reason: &'static str,
    /// Whether the `Degraded` condition is True.
    pub degraded: bool,
    /// A sentence describing the state, naming objects and numbers.
    pub message: String,
}

/// Decides the phase and the reasons (the table in the module docs): what holds the cluster
/// back, else a rolling upgrade, else a start, else how well it serves.
pub fn assess(input: &StatusInputs<'_>) -> Verdict {
    let mut counts = format!("{}/{} replicas ready", input.ready_members, input.replicas);
    let mut why: Vec<String> = Vec::new();
    if !input.silent.is_empty() {
        why.push(format!(
            "{} not answering the operator's probes",
            input.silent.join(", ")
        ));
    }
    why.extend(input.exits.iter().cloned());
    if !why.is_empty() {
        counts += &format!(" ({})", why.join("; "));
    }
    let all_ready = input.ready_members >= input.replicas && input.primary_ready;
    held_back(input, &counts)
        .or_else(|| upgrading(input, &counts, all_ready))
        .or_else(|| starting(input, &counts, all_ready))
        .unwrap_or_else(|| serving(input, &counts, all_ready))
}

/// A verdict from its parts.
fn verdict(
    phase: Phase,
    ready_reason: &'static str,
    ready: bool,
    degraded_reason: &'static str,
    degraded: bool,
    message: String,
) -> Verdict {
    Verdict {
        phase,
        ready_reason,
        ready,
        degraded_reason,
        degraded,
        message,
    }
}

/// The rows that apply whatever the members do: deleting, an invalid spec, a missing Secret,
/// nothing observed yet, a failed restore.
fn held_back(input: &StatusInputs<'_>, counts: &str) -> Option<Verdict> {
    if input.deleting {
        return Some(verdict(
            Phase::Deleting,
            reasons::DELETING,
            false,
            reasons::DELETING,
            false,
            format!("cluster {} is being deleted", input.cluster),
        ));
    }
    if let Some(errors) = &input.invalid_spec {
        return Some(verdict(
            Phase::Degraded,
            reasons::INVALID_SPEC,
            false,
            reasons::INVALID_SPEC,
            true,
            format!(
                "the spec of {} is invalid, nothing is changed until it is fixed: {errors}",
                input.cluster
            ),
        ));
    }
    if let Some(problem) = &input.secret_problem {
        return Some(verdict(
            Phase::Degraded,
            problem.reason,
            false,
            problem.reason,
            true,
            problem.message.clone(),
        ));
    }
    // Nothing exists yet and nothing stands in the way: this pass creates the objects, and the
    // status it writes comes after them. Reporting Pending here would be stale the moment it
    // is written and cost a second status write a few milliseconds later; so would a message
    // of its own: the words are those of the passes that see the members start, so the pass
    // that first sees the pods (not ready yet) has nothing to write.
    if !input.observed_anything {
        return Some(verdict(
            Phase::Initializing,
            reasons::NO_READY_REPLICAS,
            false,
            reasons::AS_EXPECTED,
            false,
            format!("starting {}: {counts}", input.cluster),
        ));
    }
    let failure = input
        .restore_failure
        .as_ref()
        .filter(|_| !input.primary_ready)?;
    Some(verdict(
        Phase::Degraded,
        reasons::RESTORE_FAILED,
        false,
        reasons::RESTORE_FAILED,
        true,
        format!(
            "restoring the backup of spec.bootstrap.fromBackup into {} failed ({failure}): the member serves nothing and retries; read `kubectl logs {} -c init`",
            input.primary.as_deref().unwrap_or("the primary"),
            input.primary.as_deref().unwrap_or("POD"),
        ),
    ))
}

/// The Upgrading row: a version change rolling through the members.
fn upgrading(input: &StatusInputs<'_>, counts: &str, all_ready: bool) -> Option<Verdict> {
    if !input.versions.upgrading {
        return None;
    }
    let from = input
        .versions
        .current_version
        .as_deref()
        .unwrap_or("the previous version");
    let message = format!(
        "upgrading {} from {from} to {}: {counts}",
        input.cluster, input.spec_version
    );
    Some(if all_ready {
        verdict(
            Phase::Upgrading,
            reasons::ALL_REPLICAS_READY,
            true,
            reasons::AS_EXPECTED,
            false,
            message,
        )
    } else {
        verdict(
            Phase::Upgrading,
            reasons::INSUFFICIENT_REPLICAS,
            false,
            reasons::AS_EXPECTED,
            false,
            message,
        )
    })
}

/// The Initializing row: a cluster that has never been Running is starting, and members
/// coming up one by one is the expected course of a creation, not a degradation worth a
/// Warning. That includes a new cluster that was held back by its spec, its Secret or a
/// failed restore (degraded for that reason, and no member ever ready: no current version).
fn starting(input: &StatusInputs<'_>, counts: &str, all_ready: bool) -> Option<Verdict> {
    let held_back_before_start = input.previous.phase == Some(Phase::Degraded)
        && input.previous.current_version.is_none()
        && input.previous.conditions.iter().any(|c| {
            c.type_ == conditions::DEGRADED
                && c.status == "True"
                && [
                    reasons::INVALID_SPEC,
                    reasons::SECRET_NOT_FOUND,
                    reasons::SECRET_KEY_MISSING,
                    reasons::PASSWORD_UNUSABLE,
                    reasons::RESTORE_FAILED,
                ]
                .contains(&c.reason.as_str())
        });
    let starting = held_back_before_start
        || matches!(
            input.previous.phase,
            None | Some(Phase::Pending | Phase::Initializing)
        );
    if !starting || all_ready {
        return None;
    }
    let reason = if input.ready_members == 0 {
        reasons::NO_READY_REPLICAS
    } else {
        reasons::INSUFFICIENT_REPLICAS
    };
    Some(verdict(
        Phase::Initializing,
        reason,
        false,
        reasons::AS_EXPECTED,
        false,
        format!("starting {}: {counts}", input.cluster),
    ))
}

/// The rows of a cluster that ran before: Degraded by what is missing (any ready member, the
/// primary, enough members), else Running.
fn serving(input: &StatusInputs<'_>, counts: &str, all_ready: bool) -> Verdict {
    if input.ready_members == 0 {
        return verdict(
            Phase::Degraded,
            reasons::NO_READY_REPLICAS,
            false,
            reasons::NO_READY_REPLICAS,
            true,
            format!("no member of {} is ready: {counts}", input.cluster),
        );
    }
    let primary = input.primary.as_deref().unwrap_or("none");
    if !input.primary_ready {
        return verdict(
            Phase::Degraded,
            reasons::NO_PRIMARY,
            false,
            reasons::NO_PRIMARY,
            true,
            format!(
                "the primary {primary} of {} is not ready: {counts}",
                input.cluster
            ),
        );
    }
    if !all_ready {
        return verdict(
            Phase::Degraded,
            reasons::INSUFFICIENT_REPLICAS,
            false,
            reasons::INSUFFICIENT_REPLICAS,
            true,
            format!("{counts} in {}", input.cluster),
        );
    }
    verdict(
        Phase::Running,
        reasons::ALL_REPLICAS_READY,
        true,
        reasons::AS_EXPECTED,
        false,
        format!("{counts} in {}, primary {primary}", input.cluster),
    )
}

/// The new status, with conditions whose transition times move only on a status change.
pub fn compute(input: &StatusInputs<'_>, verdict: &Verdict) -> DatabaseClusterStatus {
    let healthy_message = |what: &str| format!("{what}: {}", verdict.message);
    let ready_message = if verdict.ready {
        healthy_message("ready")
    } else {
        verdict.message.clone()
    };
    let degraded_message = if verdict.degraded {
        verdict.message.clone()
    } else {
        healthy_message("not degraded")
    };
    let (upgrading, upgrading_reason, upgrading_message) = if verdict.phase == Phase::Upgrading {
        (true, reasons::VERSION_ROLLING, verdict.message.clone())
    } else {
        let running = input
            .versions
            .current_version
            .as_deref()
            .unwrap_or(input.spec_version);
        (
            false,
            reasons::VERSION_CURRENT,
            format!("no version change in progress (version {running})"),
        )
    };
    let ours = [
        condition(
            input,
            conditions::READY,
            verdict.ready,
            verdict.ready_reason,
            ready_message,
        ),
        condition(
            input,
            conditions::DEGRADED,
            verdict.degraded,
            verdict.degraded_reason,
            degraded_message,
        ),
        condition(
            input,
            conditions::UPGRADING,
            upgrading,
            upgrading_reason,
            upgrading_message,
        ),
    ];
    let mut conditions: Vec<Condition> = ours.into();
    conditions.extend(
        input
            .previous
            .conditions
            .iter()
            .filter(|c| {
                ![
                    conditions::READY,
                    conditions::DEGRADED,
                    conditions::UPGRADING,
                ]
                .contains(&c.type_.as_str())
            })
            .cloned(),
    );
    DatabaseClusterStatus {
        conditions,
        ready_replicas: input.ready_members.min(input.replicas),
        primary_pod: input.primary.clone(),
        phase: Some(verdict.phase),
        current_version: input.versions.current_version.clone(),
        next_backup_time: input.next_backup_time.map(Time),
        observed_generation: input.generation,
        failover: input.previous.failover.clone(),
        password: input.previous.password.clone(),
        upgrade: input.previous.upgrade.clone(),
        last_backup: input.previous.last_backup.clone(),
        backup_count: input.previous.backup_count,
        restored_from: input.previous.restored_from.clone(),
        last_verified_backup: input.previous.last_verified_backup.clone(),
        handled_backup_now: input.previous.handled_backup_now.clone(),
        members: input.previous.members.clone(),
    }
}

fn condition(
    input: &StatusInputs<'_>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
) -> Condition {
    transition(
        &input.previous.conditions,
        type_,
        status,
        reason,
        message,
        input.generation,
        input.now,
    )
}

/// A condition whose `lastTransitionTime` is kept from the condition of the same type in
/// `previous` while its status (True/False) is unchanged, and is `now` when it changes: the one
/// rule for every condition the operator writes.
pub fn transition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    transition_to(
        previous,
        type_,
        if status { "True" } else { "False" },
        reason,
        message,
        generation,
        now,
    )
}

/// [`transition`] to any condition status (`True`, `False` or `Unknown`).
pub fn transition_to(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// Puts the condition `type_` with `(status, reason, message)` into `conditions`, its
/// transition time kept from `previous` by the rule of [`transition`].
pub fn put_condition(
    conditions: &mut Vec<Condition>,
    previous: &[Condition],
    type_: &str,
    (status, reason, message): (bool, &str, String),
    generation: Option<i64>,
    now: Timestamp,
) {
    let condition = transition(previous, type_, status, reason, message, generation, now);
    set_condition(conditions, condition);
}

/// Puts `condition` into `conditions`: in place of the one of its type when there is one (the
/// order of the conditions, and so a steady status, stays as it was), else at the end.
pub fn set_condition(conditions: &mut Vec<Condition>, condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// Longest condition message written for an error (the API allows 32 KiB; a screen does not).
const MAX_ERROR_MESSAGE: usize = 1024;

/// The status of `cluster` with `Degraded=True` / `ReconcileError` / `message` (a failed
/// reconcile), keeping the other conditions and fields; `None` when the status already says
/// exactly that.
pub fn with_reconcile_error(
    cluster: &DatabaseCluster,
    message: &str,
    now: Timestamp,
) -> Option<DatabaseClusterStatus> {
    let mut status = cluster.status.clone().unwrap_or_default();
    let message: String = message.chars().take(MAX_ERROR_MESSAGE).collect();
    let existing = status
        .conditions
        .iter()
        .position(|c| c.type_ == conditions::DEGRADED);
    if let Some(i) = existing {
        let c = &status.conditions[i];
        if c.status == "True" && c.reason == reasons::RECONCILE_ERROR && c.message == message {
            return None;
        }
    }
    let condition = transition(
        &status.conditions,
        conditions::DEGRADED,
        true,
        reasons::RECONCILE_ERROR,
        message,
        cluster.metadata.generation,
        now,
    );
    match existing {
        Some(i) => status.conditions[i] = condition,
        None => status.conditions.push(condition),
    }
    Some(status)
}

/// The first instant surely after a decision whose time was kept in status as `at`.
///
/// Status times keep whole seconds (the fraction is dropped on the way through the API
/// server), so a decision taken at 12:00:00.7 reads back as 12:00:00: a fact stamped
/// 12:00:00.4 looks later than the decision but was taken before it. Only a fact stamped at
/// or after the end of that second is certainly later.
pub(crate) fn surely_after(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second().saturating_add(1)).unwrap_or(Timestamp::MAX)
}
