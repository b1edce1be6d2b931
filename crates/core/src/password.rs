//! Password rotation: applying a changed superuser password inside the running database,
//! without restarting anything. Pure: one decision per pass from the Secret's fingerprint, the
//! previous `status.password`, the result of the last password command and the primary's facts.
//!
//! ```text
//!  Secret value F (fingerprint)         status.password
//!  ────────────────────────────         ───────────────
//!  new cluster (nothing observed)  ──►  fingerprint F, appliedAt now   (the pods initialize with F)
//!  F == fingerprint                ──►  PasswordApplied True Applied; MySQL: DiscardOldPassword
//!                                       once oldPasswordExpires has passed
//!  F != fingerprint                ──►  pending F; SetPassword{primary, F} while the primary
//!                                       answers as a writable primary and no failover runs;
//!                                       PasswordApplied False Applying
//!  outcome Set F ok                ──►  fingerprint F, appliedAt (MySQL: oldPasswordExpires =
//!                                       appliedAt + graceSeconds); True Applied
//!  outcome Set F failed            ──►  False ApplyFailed (the error), retried after RETRY_AFTER
//!  Secret or key missing, or value  ──►  False SecretNotFound / SecretKeyMissing /
//!  not a password                       PasswordUnusable; no command at all
//! ```
//!
//! The core never assumes a command succeeded: success is what the runtime reports in
//! [`crate::Observed::password_outcome`] after carrying the command out, and the next pass records
//! it. A lost outcome (the operator restarted) only means the command is planned again: every
//! password command is idempotent. An existing cluster without `status.password` (created by an
//! earlier operator release, whose pods were rolled on a Secret change but whose database kept
//! its first password) gets the Secret's value applied once.
//!
//! Accounts ([`superuser_accounts`]): every account the init scripts give the superuser
//! password: PostgreSQL `postgres`; MySQL `root@localhost` and `root@'%'`; MariaDB
//! `root@localhost` (which keeps `unix_socket`) and `root@'%'`. The replication account is not
//! the superuser's: it moves to the operator-owned Secret ([`crate::credentials`]).

use std::time::Duration;

use database_operator_api::conditions::{self, reasons};
use database_operator_api::password::PasswordStatus;
use database_operator_api::{DatabaseClusterStatus, Engine, SecretKeySelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::{
    DatabaseCommand, EventReason, EventType, MemberFacts, PasswordAccount, PasswordAction,
    PasswordOutcome, PlannedEvent, SecretState, ServerRole,
};

/// How long after a failed password command it is planned again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// How soon to look again after planning a password command (so its outcome is recorded quickly).
pub const STEP_REQUEUE: Duration = Duration::from_secs(2);

/// The accounts that get the superuser password in `engine`, as the init scripts create them
/// (the engine crate's `scripts/*-init.sh`).
pub fn superuser_accounts(engine: Engine) -> Vec<PasswordAccount> {
    database_operator_engine::of(engine)
        .superuser_accounts()
        .iter()
        .map(|a| PasswordAccount {
            user: a.user.to_owned(),
            host: a.host.map(str::to_owned),
            keep_unix_socket: a.keep_unix_socket,
        })
        .collect()
}

/// Whether `engine` keeps the old password working after a change (MySQL dual passwords).
pub fn has_dual_passwords(engine: Engine) -> bool {
    database_operator_engine::of(engine).has_dual_passwords()
}

/// What one password pass reads.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// `<namespace>/<name>`, for messages.
    pub cluster: &'a str,
    /// The namespace (the Secret's).
    pub namespace: &'a str,
    /// The engine.
    pub engine: Engine,
    /// `spec.passwordSecretRef`.
    pub secret_ref: &'a SecretKeySelector,
    /// What the runtime found in the Secret.
    pub secret: &'a SecretState,
    /// The unkeyed fingerprint of the same value when the Secret's is keyed
    /// ([`Observed::secret_unkeyed_fingerprint`](crate::Observed::secret_unkeyed_fingerprint)).
    pub unkeyed: Option<&'a str>,
    /// `spec.passwordRotation.graceSeconds` (MySQL).
    pub grace: Duration,
    /// The previous `status.password`.
    pub previous: Option<&'a PasswordStatus>,
    /// The previous `PasswordApplied` condition, if any (events only on a change).
    pub previous_condition: Option<&'a Condition>,
    /// The result of the last password command the runtime carried out.
    pub outcome: Option<&'a PasswordOutcome>,
    /// The primary's pod name.
    pub primary: &'a str,
    /// What the prober last found on the primary.
    pub primary_facts: Option<&'a MemberFacts>,
    /// A failover or switchover is in progress (the primary may change under the command).
    pub failover_in_flight: bool,
    /// Neither the StatefulSet nor a member pod exists yet: the pods will be initialized with
    /// the Secret's current value.
    pub initializing: bool,
    /// The current time.
    pub now: Timestamp,
}

/// The `PasswordApplied` condition a pass decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// True: the database runs the Secret's value.
    pub applied: bool,
    /// `Applied`, `Applying`, `ApplyFailed`, `SecretNotFound`, `SecretKeyMissing`, `PasswordUnusable`.
    pub reason: &'static str,
    /// A sentence naming the Secret, the key, the pod and the fingerprints (never a password).
    pub message: String,
}

/// What one password pass decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The new `status.password`.
    pub status: Option<PasswordStatus>,
    /// The `PasswordApplied` condition.
    pub verdict: Verdict,
    /// `SetPassword` or `DiscardOldPassword`, at most one.
    pub commands: Vec<DatabaseCommand>,
    /// Events of this pass.
    pub events: Vec<PlannedEvent>,
    /// When to look again, if sooner than usual.
    pub requeue_after: Option<Duration>,
}

/// A status that records `unkeyed`, the unkeyed fingerprint of the Secret's current value
/// (written by a release before keyed fingerprints, or before the cluster had its key), records
/// the same value: it is moved to `keyed` with no password change. Only an exact match moves,
/// so a password that changed meanwhile is still applied.
fn rekey(status: &mut PasswordStatus, unkeyed: &str, keyed: &str) {
    if unkeyed == keyed {
        return;
    }
    for recorded in [&mut status.fingerprint, &mut status.pending] {
        if recorded.as_deref() == Some(unkeyed) {
            *recorded = Some(keyed.to_owned());
        }
    }
}

/// One password pass (see the module documentation).
pub fn rotate(input: &Inputs<'_>) -> Outcome {
    let mut status = input.previous.cloned();
    let mut events = Vec::new();
    let secret_name = format!("{}/{}", input.namespace, input.secret_ref.name);
    let key = &input.secret_ref.key;
    if let Some(outcome) = input.outcome {
        record(input, outcome, &mut status, &mut events, &secret_name);
    }
    let fingerprint = match input.secret {
        SecretState::Present { fingerprint } => fingerprint,
        SecretState::Missing | SecretState::KeyMissing | SecretState::Unusable { .. } => {
            if let Some(s) = status.as_mut() {
                s.pending = None;
                s.pending_since = None;
            }
            let (reason, what) = match input.secret {
                SecretState::Missing => (
                    reasons::SECRET_NOT_FOUND,
                    format!("Secret {secret_name} not found"),
                ),
                SecretState::Unusable { problem } => (
                    reasons::PASSWORD_UNUSABLE,
                    format!(
                        "Secret {secret_name} key {key}: the value {} and cannot be a password",
                        problem.describe()
                    ),
                ),
                _ => (
                    reasons::SECRET_KEY_MISSING,
                    format!("Secret {secret_name} has no key {key}"),
                ),
            };
            let message = format!(
                "{what}: the database of {} keeps the password it runs with ({}); nothing is changed until the Secret and key are back",
                input.cluster,
                running(status.as_ref())
            );
            return Outcome {
                status,
                verdict: Verdict {
                    applied: false,
                    reason,
                    message,
                },
                commands: Vec::new(),
                events,
                requeue_after: None,
            };
        }
    };
    if let (Some(unkeyed), Some(status)) = (input.unkeyed, status.as_mut()) {
        rekey(status, unkeyed, fingerprint);
    }
    let mut status = status.unwrap_or_else(|| {
        if input.initializing {
            PasswordStatus {
                fingerprint: Some(fingerprint.clone()),
                applied_at: Some(Time(input.now)),
                ..PasswordStatus::default()
            }
        } else {
            PasswordStatus::default()
        }
    });
    if status.fingerprint.as_ref() == Some(fingerprint) {
        status.pending = None;
        status.pending_since = None;
        let (commands, requeue_after) = discard(input, &status, fingerprint);
        let message = format!(
            "the database of {} runs the password of Secret {secret_name} key {key} (fingerprint {fingerprint}){}",
            input.cluster,
            old_password_note(&status)
        );
        return Outcome {
            status: Some(status),
            verdict: Verdict {
                applied: true,
                reason: reasons::APPLIED,
                message,
            },
            commands,
            events,
            requeue_after,
        };
    }
    apply(input, status, fingerprint, events, &secret_name)
}

/// Records a command's result in `status` (a success once; a failure is reported by [`apply`]).
fn record(
    input: &Inputs<'_>,
    outcome: &PasswordOutcome,
    status: &mut Option<PasswordStatus>,
    events: &mut Vec<PlannedEvent>,
    secret_name: &str,
) {
    if outcome.error.is_some() {
        return;
    }
    let current = status.clone().unwrap_or_default();
    match outcome.action {
        PasswordAction::Set => {
            let newer = current
                .applied_at
                .as_ref()
                .is_none_or(|t| outcome.at >= t.0);
            if current.fingerprint.as_ref() == Some(&outcome.fingerprint) || !newer {
                return;
            }
            let expires = has_dual_passwords(input.engine)
                .then(|| Time(ceil_to_second(add(outcome.at, input.grace))));
            let pending_done = current.pending.as_ref() == Some(&outcome.fingerprint);
            let note = match &expires {
                Some(t) => format!("; the old password keeps working until {}", t.0),
                None => "; the old password no longer works".to_owned(),
            };
            events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::PasswordApplied,
                format!(
                    "the database of {} runs the new password of Secret {secret_name} (fingerprint {}){note}; no pod restarted",
                    input.cluster, outcome.fingerprint
                ),
            ));
            *status = Some(PasswordStatus {
                fingerprint: Some(outcome.fingerprint.clone()),
                applied_at: Some(Time(outcome.at)),
                pending: current.pending.filter(|_| !pending_done),
                pending_since: current.pending_since.filter(|_| !pending_done),
                old_password_expires: expires,
                old_password_discarded_at: None,
            });
        }
        PasswordAction::DiscardOld => {
            if current.fingerprint.as_ref() != Some(&outcome.fingerprint)
                || current.old_password_expires.is_none()
            {
                return;
            }
            events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::OldPasswordDiscarded,
                format!(
                    "the grace period of the previous password of {} ended: only the password of Secret {secret_name} works now",
                    input.cluster
                ),
            ));
            *status = Some(PasswordStatus {
                old_password_expires: None,
                old_password_discarded_at: Some(Time(outcome.at)),
                ..current
            });
        }
    }
}

/// A Secret value the database does not run yet: apply it on the primary when it can be.
fn apply(
    input: &Inputs<'_>,
    mut status: PasswordStatus,
    fingerprint: &str,
    mut events: Vec<PlannedEvent>,
    secret_name: &str,
) -> Outcome {
    let key = &input.secret_ref.key;
    if status.pending.as_deref() != Some(fingerprint) {
        if status.fingerprint.is_some() {
            events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::PasswordChanged,
                format!(
                    "the password in Secret {secret_name} key {key} changed (fingerprint {fingerprint}): applying it in the database of {} on its primary, without restarting any pod",
                    input.cluster
                ),
            ));
        }
        status.pending = Some(fingerprint.to_owned());
        status.pending_since = Some(Time(input.now));
    }
    let failure = input.outcome.filter(|o| {
        o.action == PasswordAction::Set && o.fingerprint == fingerprint && o.error.is_some()
    });
    let retry_in = failure.map(|o| remaining(add(o.at, RETRY_AFTER), input.now));
    let ready = primary_ready(input);
    let plan_step = ready.is_ok() && retry_in.is_none_or(|d| d.is_zero());
    let commands = if plan_step {
        vec![DatabaseCommand::SetPassword {
            pod: input.primary.to_owned(),
            accounts: superuser_accounts(input.engine),
            fingerprint: fingerprint.to_owned(),
            retain_old: has_dual_passwords(input.engine),
        }]
    } else {
        Vec::new()
    };
    let unknown = status.fingerprint.is_none();
    let what = if unknown {
        format!(
            "the operator has no record of the password the database of {} runs with: applying the value of Secret {secret_name} key {key} (fingerprint {fingerprint})",
            input.cluster
        )
    } else {
        format!(
            "the password of Secret {secret_name} key {key} changed (fingerprint {fingerprint}); the database of {} still runs {}",
            input.cluster,
            running(Some(&status))
        )
    };
    let verdict = match (failure, &ready) {
        (Some(o), _) => Verdict {
            applied: false,
            reason: reasons::APPLY_FAILED,
            message: format!(
                "{what}; applying it on the primary failed at {}: {}; retried every {} s",
                o.at,
                o.error.as_deref().unwrap_or_default(),
                RETRY_AFTER.as_secs()
            ),
        },
        (None, Ok(())) => Verdict {
            applied: false,
            reason: reasons::APPLYING,
            message: format!("{what}; applying it on the primary {}", input.primary),
        },
        (None, Err(why)) => Verdict {
            applied: false,
            reason: reasons::APPLYING,
            message: format!("{what}; waiting: {why}"),
        },
    };
    let previously = input.previous_condition;
    if verdict.reason == reasons::APPLY_FAILED
        && previously.is_none_or(|c| c.reason != verdict.reason || c.message != verdict.message)
    {
        events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::PasswordApplyFailed,
            verdict.message.clone(),
        ));
    }
    let requeue_after = if plan_step {
        Some(STEP_REQUEUE)
    } else {
        retry_in.filter(|d| !d.is_zero())
    };
    Outcome {
        status: Some(status),
        verdict,
        commands,
        events,
        requeue_after,
    }
}

/// MySQL: `DiscardOldPassword` once the old password's grace period is over.
fn discard(
    input: &Inputs<'_>,
    status: &PasswordStatus,
    fingerprint: &str,
) -> (Vec<DatabaseCommand>, Option<Duration>) {
    let Some(expires) = status.old_password_expires.as_ref().map(|t| t.0) else {
        return (Vec::new(), None);
    };
    if !has_dual_passwords(input.engine) {
        return (Vec::new(), None);
    }
    let mut due = expires;
    if let Some(o) = input.outcome.filter(|o| {
        o.action == PasswordAction::DiscardOld && o.fingerprint == fingerprint && o.error.is_some()
    }) {
        due = due.max(add(o.at, RETRY_AFTER));
    }
    let wait = remaining(due, input.now);
    if !wait.is_zero() {
        return (Vec::new(), Some(wait));
    }
    if primary_ready(input).is_err() {
        return (Vec::new(), None);
    }
    let step = DatabaseCommand::DiscardOldPassword {
        pod: input.primary.to_owned(),
        accounts: superuser_accounts(input.engine),
        fingerprint: fingerprint.to_owned(),
    };
    (vec![step], Some(STEP_REQUEUE))
}

/// Whether the primary may take a password command now, and if not, why.
fn primary_ready(input: &Inputs<'_>) -> Result<(), String> {
    if input.failover_in_flight {
        return Err("a failover or switchover is in progress".to_owned());
    }
    let primary = input.primary;
    let Some(facts) = input.primary_facts else {
        return Err(format!("no probe of the primary {primary} yet"));
    };
    let age = input.now.duration_since(facts.probed_at);
    if age > SignedDuration::try_from(MemberFacts::STALE_AFTER).unwrap_or(SignedDuration::MAX) {
        return Err(format!(
            "the last probe of the primary {primary} is older than {} s",
            MemberFacts::STALE_AFTER.as_secs()
        ));
    }
    if !facts.reachable {
        return Err(format!("the primary {primary} does not answer"));
    }
    if facts.role != Some(ServerRole::Primary) || facts.read_only == Some(true) {
        return Err(format!(
            "the primary {primary} does not answer as a writable primary"
        ));
    }
    Ok(())
}

/// What the database runs, for messages.
fn running(status: Option<&PasswordStatus>) -> String {
    match status.and_then(|s| s.fingerprint.as_deref()) {
        Some(fp) => format!("the password with fingerprint {fp}"),
        None => "the password it was initialized with".to_owned(),
    }
}

fn old_password_note(status: &PasswordStatus) -> String {
    match &status.old_password_expires {
        Some(t) => format!("; the previous password keeps working until {}", t.0),
        None => String::new(),
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `t` rounded up to a whole second. Status times are written with whole seconds (the fraction is
/// dropped on the way through the API server), so a deadline kept in status is rounded up first:
/// dropping the fraction of `at + grace` would end the grace period up to a second early.
fn ceil_to_second(t: Timestamp) -> Timestamp {
    if t.subsec_nanosecond() == 0 {
        return t;
    }
    Timestamp::from_second(t.as_second().saturating_add(1)).unwrap_or(Timestamp::MAX)
}

/// The time from `now` until `t`, zero when it has passed (whole seconds, rounded up).
fn remaining(t: Timestamp, now: Timestamp) -> Duration {
    let d = t.duration_since(now);
    if d.is_negative() || d.is_zero() {
        return Duration::ZERO;
    }
    let secs = d.as_secs() + i64::from(d.subsec_nanos() > 0);
    Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX))
}

/// Writes the `PasswordApplied` condition into `status` (its transition time moves only when
/// its status does).
pub fn apply_condition(
    status: &mut DatabaseClusterStatus,
    previous: &DatabaseClusterStatus,
    verdict: &Verdict,
    generation: Option<i64>,
    now: Timestamp,
) {
    crate::status::put_condition(
        &mut status.conditions,
        &previous.conditions,
        conditions::PASSWORD_APPLIED,
        (verdict.applied, verdict.reason, verdict.message.clone()),
        generation,
        now,
    );
}

#[cfg(test)]
mod tests;
