//! How a failover pass enters the plan: its inputs from what was observed, its status and
//! `FailoverBlocked` condition, and its label steps, database steps and requeue.

use super::*;

use crate::members::Membership;
use crate::plan::MIN_REQUEUE;
use crate::render::RenderContext;
use crate::{Observed, Plan};

/// One failover pass ([`step`]) over the observed members and facts.
pub(crate) fn pass(
    observed: &Observed,
    ctx: &RenderContext<'_>,
    membership: &Membership<'_>,
    previous: &DatabaseClusterStatus,
    upgrade_switchover: Option<&str>,
    now: Timestamp,
) -> Outcome {
    let cluster = &observed.cluster;
    let id = [ctx.namespace, "/", ctx.name].concat();
    step(&Inputs {
        cluster: &id,
        engine: ctx.engine,
        spec: cluster.spec.failover.clone().unwrap_or_default(),
        replicas: ctx.spec.replicas,
        members: &membership.members,
        facts: &observed.member_facts,
        primary: &membership.primary,
        previous: previous.failover.as_ref(),
        blocked_before: blocked_reason(previous),
        switchover: cluster
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(database_operator_api::SWITCHOVER_ANNOTATION))
            .map(String::as_str),
        upgrade_switchover,
        has_run: previous.current_version.is_some(),
        now,
    })
}

/// Records a pass in the new status: `status.failover` and the `FailoverBlocked` condition
/// (nothing without a pass).
pub(crate) fn record_status(
    outcome: Option<&Outcome>,
    status: &mut DatabaseClusterStatus,
    previous: &DatabaseClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    if let Some(outcome) = outcome {
        status.failover = outcome.status.clone();
        apply_condition(status, previous, outcome.blocked.as_ref(), generation, now);
    }
}

/// The role-label steps (the primary label as the pass decides, `quarantined` labels), the
/// database steps of the pass and its requeue; without a pass, the labels of the observed
/// primary.
pub(crate) fn carry_out(outcome: Option<&Outcome>, membership: &Membership<'_>, plan: &mut Plan) {
    match outcome {
        Some(outcome) => {
            let quarantined = outcome
                .status
                .as_ref()
                .map(|s| s.quarantined.as_slice())
                .unwrap_or_default();
            plan.steps = membership.label_steps(outcome.label_primary.as_deref(), quarantined);
            plan.database_steps = outcome.steps.clone();
            if let (Some(after), Some(requeue)) = (outcome.requeue_after, plan.requeue_after) {
                plan.requeue_after = Some(after.min(requeue).max(MIN_REQUEUE));
            }
        }
        None => plan.steps = membership.label_steps(Some(&membership.primary), &[]),
    }
}
