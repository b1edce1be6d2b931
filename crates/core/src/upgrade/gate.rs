//! What holds a roll back: the health gate (a member on the new template that is not healthy
//! yet) and the obstacles before the next member is replaced.

use super::*;

/// A roll with nothing to do.
pub(super) fn idle() -> Outcome {
    Outcome {
        partition: 0,
        status: None,
        switchover_to: None,
        commands: Vec::new(),
        events: Vec::new(),
        requeue_after: None,
    }
}

/// Whether `m`'s pod runs the template the plan renders: the target version, and the same
/// template hash.
pub(super) fn on_target(m: &RollMember<'_>, input: &Inputs<'_>) -> bool {
    m.pod_version == Some(input.target) && m.pod_template == Some(input.template)
}

/// Whether `m` runs `target` and passed the health gate: Ready, not terminating, caught up,
/// its server reporting `target`.
pub(super) fn healthy(m: &RollMember<'_>, input: &Inputs<'_>) -> bool {
    let target = input.target;
    on_target(m, input)
        && m.ready
        && !m.terminating
        && m.caught_up
        && m.server_version.is_some_and(|v| reports_version(v, target))
}

/// What keeps `next` from being replaced this pass, besides the health gate: the step to
/// report, the member waited for and why.
pub(super) fn obstacle<'a>(
    input: &Inputs<'a>,
    next: &RollMember<'a>,
    last_left: bool,
) -> Option<(RollPhase, Option<&'a str>, String)> {
    // 2. One member down at most: `next` may be the one that is down.
    if let Some(down) = input
        .members
        .iter()
        .find(|m| m.name != next.name && (!m.ready || m.terminating))
    {
        return Some((
            RollPhase::Replicas,
            Some(down.name),
            format!("waiting for {} to be Ready", down.name),
        ));
    }
    if input.failover_in_flight {
        return Some((
            RollPhase::Switchover,
            None,
            "waiting for the failover or switchover in progress".to_owned(),
        ));
    }
    // 2b. A member the failover is still pointing at the primary is the failover's to restart
    // (a PostgreSQL primary becoming a standby, a standby restarting for a rewind): replacing
    // it as well would restart it twice at once.
    let m = input
        .members
        .iter()
        .find(|m| m.ready && !m.terminating && !m.follows)?;
    // After the roll's switchover the one member left on the old version is the former
    // primary, rejoining: the roll is at its Primary step, not back at the replicas.
    let step = if last_left && m.name == next.name {
        RollPhase::Primary
    } else {
        RollPhase::Replicas
    };
    Some((
        step,
        Some(m.name),
        format!(
            "waiting for {} to follow the primary {}",
            m.name, input.primary
        ),
    ))
}

/// Why an upgraded member is not healthy yet.
pub(super) fn unhealthy_why(m: &RollMember<'_>, target: &str) -> String {
    let name = m.name;
    if !m.ready || m.terminating {
        format!("{name} runs {target} but is not Ready")
    } else if !m.server_version.is_some_and(|v| reports_version(v, target)) {
        match m.server_version {
            Some(v) => format!("{name}'s server reports version {v}, not {target}"),
            None => format!("{name}'s server has not reported its version in a fresh probe"),
        }
    } else {
        format!("{name} has not caught up on replication")
    }
}
