//! The outcome of a pass: `status.failover`, its records and messages, and the
//! `FailoverBlocked` condition.

use super::*;

impl Pass<'_, '_> {
    pub(super) fn finish(mut self) -> Outcome {
        let input = self.input;
        if let Some(blocked) = &self.blocked
            && input.blocked_before != Some(blocked.reason)
        {
            self.events.push(PlannedEvent::new(
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
            commands: self.commands,
            events: self.events,
            blocked: self.blocked,
            requeue_after: self.requeue_after,
        }
    }
}

pub(super) fn delay(spec: &FailoverSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.delay_seconds.max(1)).unwrap_or(1))
}

/// Time from `t` to `now` (zero when `t` is in the future).
pub(super) fn elapsed(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or(Duration::ZERO)
}

pub(super) fn kind_word(kind: FailoverKind) -> &'static str {
    match kind {
        FailoverKind::Failover => "failover",
        FailoverKind::Switchover => "switchover",
    }
}

pub(super) fn report(
    candidates: &[Candidate],
    election: &position::Election,
) -> Vec<FailoverCandidate> {
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

pub(super) fn requested_report(target: &str, pass: &Pass<'_, '_>) -> Vec<FailoverCandidate> {
    vec![FailoverCandidate {
        pod: target.to_owned(),
        position: pass.position(target).map(ToString::to_string),
        verdict: CandidateVerdict::Chosen,
        reason: "requested, caught up with the fenced primary".to_owned(),
    }]
}

pub(super) fn describe(report: &[FailoverCandidate]) -> String {
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
pub(super) fn completion_message(op: &FailoverOperation, to: &str) -> String {
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
