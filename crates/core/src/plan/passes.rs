//! The passes that keep their progress in status and plan database commands or pod actions: the
//! version roll, failover and switchover, the password, the replication mode, the volume sizes;
//! and how each enters the plan:
//! its inputs read from what was observed, its part of the status, its commands and requeue.

use super::*;

/// The passes that keep their progress in status and plan database commands: the version roll
/// (first: it may ask for a switchover), failover and switchover (which decides the primary),
/// the password (on that primary).
pub(super) struct Passes {
    pub(super) roll: upgrade::Outcome,
    failover: failover::Outcome,
    password: password::Outcome,
    replication: Vec<crate::DatabaseCommand>,
    storage: crate::storage::Outcome,
    /// The StatefulSet's replicas while a scale-down waits for the primary to move
    /// ([`scale_down_target`]).
    pub(super) hold_replicas: Option<i32>,
}

impl Passes {
    /// The member that carries the primary label after this pass (`None` while a failover or
    /// switchover fences the old primary or promotes a new one).
    pub(super) fn label_primary(&self) -> Option<&str> {
        self.failover.label_primary.as_deref()
    }

    pub(super) fn run(
        observed: &Observed,
        ctx: &RenderContext<'_>,
        membership: &mut Membership<'_>,
        previous: &DatabaseClusterStatus,
        template: &str,
        now: Timestamp,
    ) -> Passes {
        let roll = upgrade_pass(observed, ctx, membership, previous, template, now);
        let scale_down = scale_down_target(ctx, membership, previous);
        let planned = match (roll.switchover_to.as_deref(), scale_down) {
            (Some(to), _) => Some((to, "the upgrade".to_owned())),
            (None, Some(to)) => Some((
                to,
                format!("the scale-down to {} members", ctx.spec.replicas),
            )),
            (None, None) => None,
        };
        let failover = failover_pass(
            observed,
            ctx,
            membership,
            previous,
            planned.as_ref().map(|(to, why)| (*to, why.as_str())),
            now,
        );
        membership.primary = failover.primary.clone();
        // Never fewer pods than the primary needs: the StatefulSet would remove it first.
        let hold_replicas = crate::members::parse_ordinal(ctx.name, &membership.primary)
            .filter(|o| *o >= ctx.spec.replicas)
            .map(|o| o + 1);
        let initializing =
            observed.owned.stateful_set(ctx.name).is_none() && membership.members.is_empty();
        let password = password_pass(
            observed,
            ctx,
            membership,
            previous,
            Some(&failover),
            initializing,
            now,
        );
        let replication = replication_pass(observed, ctx, membership, &failover, now);
        let storage = crate::storage::pass(ctx, &observed.volumes, &previous.conditions);
        Passes {
            roll,
            failover,
            password,
            replication,
            storage,
            hold_replicas,
        }
    }

    /// What they decided of the status: `failover`, `upgrade`, `password` and what their
    /// conditions are made from ([`crate::compose`] records them).
    pub(super) fn records(&self) -> crate::compose::PassRecords<'_> {
        crate::compose::PassRecords {
            failover: self.failover.status.as_ref(),
            failover_blocked: self.failover.blocked.as_ref(),
            upgrade: self.roll.status.as_ref(),
            password: self.password.status.as_ref(),
            password_verdict: &self.password.verdict,
            storage: self.storage.condition.as_ref(),
        }
    }

    pub(super) fn events(&self) -> impl Iterator<Item = PlannedEvent> + '_ {
        self.failover
            .events
            .iter()
            .chain(&self.password.events)
            .chain(&self.roll.events)
            .chain(&self.storage.events)
            .cloned()
    }

    /// The role labels, the database commands in order (failover, replication mode, password,
    /// roll) and the requeue.
    pub(super) fn carry_out(&self, membership: &Membership<'_>, has_run: bool, plan: &mut Plan) {
        carry_out_failover(Some(&self.failover), membership, has_run, plan);
        plan.pod_actions
            .extend(self.storage.actions.iter().cloned());
        plan.database_commands
            .extend(self.replication.iter().cloned());
        // A member still serving an older certificate is asked again soon: its volume may not
        // have shown the new files yet when it reloaded.
        let reloading = self
            .replication
            .iter()
            .any(|c| matches!(c, crate::DatabaseCommand::ReloadTls { .. }));
        if let (true, Some(requeue)) = (reloading, plan.requeue_after) {
            plan.requeue_after = Some(crate::tls::RELOAD_RETRY.min(requeue).max(MIN_REQUEUE));
        }
        for (commands, after) in [
            (&self.password.commands, self.password.requeue_after),
            (&self.roll.commands, self.roll.requeue_after),
        ] {
            plan.database_commands.extend(commands.iter().cloned());
            if let (Some(after), Some(requeue)) = (after, plan.requeue_after) {
                plan.requeue_after = Some(after.min(requeue).max(MIN_REQUEUE));
            }
        }
    }
}

/// A scale-down that would remove the primary (its ordinal at or above `spec.replicas`): the
/// member to switch over to first, the lowest-ordinal one that stays, Ready and not
/// quarantined. `None` when the primary stays, or when no member can take over yet (the
/// StatefulSet keeps the primary's pod meanwhile: [`Passes::hold_replicas`]).
fn scale_down_target<'m>(
    ctx: &RenderContext<'_>,
    membership: &'m Membership<'_>,
    previous: &DatabaseClusterStatus,
) -> Option<&'m str> {
    let primary = crate::members::parse_ordinal(ctx.name, &membership.primary)?;
    if primary < ctx.spec.replicas {
        return None;
    }
    let quarantined = previous
        .failover
        .as_ref()
        .map(|f| f.quarantined.as_slice())
        .unwrap_or_default();
    membership
        .members
        .iter()
        .filter(|m| m.ordinal < ctx.spec.replicas && m.ready && !m.terminating)
        .filter(|m| !quarantined.iter().any(|q| q == m.name))
        .min_by_key(|m| m.ordinal)
        .map(|m| m.name)
}

/// One failover pass ([`failover::advance`]) over the observed members and facts.
fn failover_pass(
    observed: &Observed,
    ctx: &RenderContext<'_>,
    membership: &Membership<'_>,
    previous: &DatabaseClusterStatus,
    planned: Option<(&str, &str)>,
    now: Timestamp,
) -> failover::Outcome {
    let cluster = &observed.cluster;
    let id = [ctx.namespace, "/", ctx.name].concat();
    failover::advance(&failover::Inputs {
        cluster: &id,
        engine: ctx.engine,
        spec: cluster.spec.failover.clone().unwrap_or_default(),
        replicas: ctx.spec.replicas,
        members: &membership.members,
        facts: &observed.member_facts,
        primary: &membership.primary,
        previous: previous.failover.as_ref(),
        blocked_before: failover::blocked_reason(previous),
        switchover: cluster
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(database_operator_api::SWITCHOVER_ANNOTATION))
            .map(String::as_str),
        upgrade_switchover: planned.map(|(to, _)| to),
        planned_for: planned.map_or("", |(_, why)| why),
        reseed_request: cluster
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(database_operator_api::RESEED_ANNOTATION))
            .map(String::as_str),
        lease: observed.primary_lease.as_ref(),
        has_run: previous.current_version.is_some(),
        now,
    })
}

/// The passes' outcome carried into `plan` ([`Passes::carry_out`]); without passes, the labels
/// of the observed primary. `previous` (the status before this pass) says whether the cluster
/// has run: until it has, its first primary may initialize a new database.
pub(super) fn carry_out_passes(
    passes: Option<&Passes>,
    membership: &Membership<'_>,
    previous: &database_operator_api::DatabaseClusterStatus,
    plan: &mut Plan,
) {
    let has_run = previous.current_version.is_some();
    match passes {
        Some(passes) => passes.carry_out(membership, has_run, plan),
        None => carry_out_failover(None, membership, has_run, plan),
    }
}

/// The role labels (the primary label as the failover pass decides, `quarantined`
/// labels), the database commands of the pass and its requeue; without a pass, the labels of the
/// observed primary.
fn carry_out_failover(
    outcome: Option<&failover::Outcome>,
    membership: &Membership<'_>,
    has_run: bool,
    plan: &mut Plan,
) {
    match outcome {
        Some(outcome) => {
            let quarantined = outcome
                .status
                .as_ref()
                .map(|s| s.quarantined.as_slice())
                .unwrap_or_default();
            let reseeding = outcome
                .status
                .as_ref()
                .and_then(|s| s.reseed.as_ref())
                .filter(|r| r.finished.is_none())
                .map(|r| (r.member.as_str(), r.token()));
            // Before the role labels: a new pod's init container waits for its role, and must
            // see the reseed request with it.
            plan.pod_actions = crate::members::reseed_labels(
                &membership.members,
                reseeding
                    .as_ref()
                    .map(|(pod, token)| (*pod, token.as_str())),
            );
            plan.pod_actions
                .extend(membership.role_labels(outcome.label_primary.as_deref(), quarantined));
            plan.pod_actions
                .extend(membership.initialize_labels(outcome.label_primary.as_deref(), has_run));
            plan.database_commands = outcome.commands.clone();
            if let (Some(after), Some(requeue)) = (outcome.requeue_after, plan.requeue_after) {
                plan.requeue_after = Some(after.min(requeue).max(MIN_REQUEUE));
            }
        }
        None => {
            plan.pod_actions = membership.role_labels(Some(&membership.primary), &[]);
            plan.pod_actions
                .extend(membership.initialize_labels(Some(&membership.primary), has_run));
        }
    }
}

/// The semi-synchronous switches to flip ([`replication::switches`]) on the members in spec,
/// after the failover pass `failover`.
fn replication_pass(
    observed: &Observed,
    ctx: &RenderContext<'_>,
    membership: &Membership<'_>,
    failover: &failover::Outcome,
    now: Timestamp,
) -> Vec<crate::DatabaseCommand> {
    let members: Vec<&str> = membership
        .members
        .iter()
        .filter(|m| m.ordinal < ctx.spec.replicas && !m.terminating)
        .map(|m| m.name)
        .collect();
    let inputs = replication::Inputs {
        engine: ctx.engine,
        sync: ctx.sync_replication(),
        members: &members,
        label_primary: failover.label_primary.as_deref(),
        failover_in_flight: failover
            .status
            .as_ref()
            .is_some_and(|s| s.operation.is_some()),
        facts: &observed.member_facts,
        now,
    };
    let ordinal = |pod: &str| crate::members::parse_ordinal(ctx.name, pod);
    let quarantined: Vec<i32> = failover
        .status
        .iter()
        .flat_map(|s| &s.quarantined)
        .filter_map(|q| ordinal(q))
        .collect();
    let mut commands = replication::switches(&inputs);
    commands.extend(crate::tls::secure_replication(
        ctx,
        &members,
        inputs.label_primary,
        inputs.failover_in_flight,
        &observed.member_facts,
        now,
    ));
    commands.extend(crate::tls::reloads(
        ctx,
        &observed.tls,
        &members,
        &observed.member_facts,
        now,
    ));
    if let Some(primary) = inputs.label_primary.and_then(ordinal) {
        commands.extend(replication::member_slots(
            &inputs,
            0..ctx.spec.replicas,
            primary,
            &quarantined,
        ));
    }
    commands
}

/// One pass of a version roll ([`upgrade::roll`]) over the members in spec, their facts and
/// the previous `status.upgrade`.
fn upgrade_pass(
    observed: &Observed,
    ctx: &RenderContext<'_>,
    membership: &Membership<'_>,
    previous: &DatabaseClusterStatus,
    template: &str,
    now: Timestamp,
) -> upgrade::Outcome {
    let fresh = |pod: &str| {
        observed
            .member_facts
            .get(pod)
            .filter(|f| f.reachable && f.fresh_at(now))
    };
    // A member whose pod is missing (deleted, being created again by the StatefulSet
    // controller) is a member that is down, with an unknown version: without it the roll would
    // think the others were all there and, for one, move the primary while a replica is gone.
    let missing: Vec<(String, i32)> = (0..ctx.spec.replicas)
        .filter(|o| !membership.members.iter().any(|m| m.ordinal == *o))
        .map(|o| (format!("{}-{o}", ctx.name), o))
        .collect();
    let quarantined = previous
        .failover
        .as_ref()
        .map(|f| f.quarantined.as_slice())
        .unwrap_or_default();
    let primary_position = fresh(&membership.primary).and_then(|f| f.position.as_ref());
    let mut members: Vec<upgrade::RollMember<'_>> = membership
        .members
        .iter()
        .filter(|m| m.ordinal < ctx.spec.replicas)
        .map(|m| {
            let facts = fresh(m.name);
            upgrade::RollMember {
                name: m.name,
                ordinal: m.ordinal,
                ready: m.ready,
                terminating: m.terminating,
                pod_version: m.version.as_deref(),
                // A pod without the label runs a template of an earlier release.
                pod_template: Some(m.template.unwrap_or_default()),
                server_version: facts.and_then(|f| f.version.as_deref()),
                caught_up: facts.is_some_and(upgrade::caught_up),
                follows: m.name == membership.primary
                    || quarantined.iter().any(|q| q == m.name)
                    || facts.is_none_or(|f| {
                        failover::follows(ctx.engine, f, &membership.primary, primary_position)
                    }),
            }
        })
        .chain(missing.iter().map(|(name, ordinal)| upgrade::RollMember {
            name,
            ordinal: *ordinal,
            ready: false,
            terminating: false,
            pod_version: None,
            pod_template: None,
            server_version: None,
            caught_up: false,
            follows: false,
        }))
        .collect();
    members.sort_by_key(|m| m.ordinal);
    let failover_status = previous.failover.as_ref();
    let step_timeout = ctx
        .spec
        .upgrade
        .clone()
        .unwrap_or_default()
        .step_timeout_seconds;
    upgrade::roll(&upgrade::Inputs {
        cluster: &[ctx.namespace, "/", ctx.name].concat(),
        members,
        replicas: ctx.spec.replicas,
        primary: &membership.primary,
        target: ctx.version,
        template,
        current_version: previous.current_version.as_deref(),
        previous: previous.upgrade.as_ref(),
        step_timeout: Duration::from_secs(u64::try_from(step_timeout).unwrap_or(0)),
        failover_in_flight: failover_status.is_some_and(|s| s.operation.is_some()),
        switchover_failed_at: failover_status
            .and_then(|s| s.last.as_ref())
            .filter(|l| {
                l.kind == database_operator_api::failover::FailoverKind::Switchover
                    && l.outcome != database_operator_api::failover::FailoverOutcome::Completed
            })
            .map(|l| l.finished.0),
        now,
    })
}

/// One password pass ([`password::rotate`]) over the Secret, the previous status, the last
/// password command's outcome and the primary's facts.
fn password_pass(
    observed: &Observed,
    ctx: &RenderContext<'_>,
    membership: &Membership<'_>,
    previous: &DatabaseClusterStatus,
    failover: Option<&failover::Outcome>,
    initializing: bool,
    now: Timestamp,
) -> password::Outcome {
    let cluster = [ctx.namespace, "/", ctx.name].concat();
    let grace = ctx
        .spec
        .password_rotation
        .clone()
        .unwrap_or_default()
        .grace_seconds;
    let failover_in_flight = failover
        .and_then(|o| o.status.as_ref())
        .or(previous.failover.as_ref())
        .is_some_and(|s| s.operation.is_some());
    password::rotate(&password::Inputs {
        cluster: &cluster,
        namespace: ctx.namespace,
        engine: ctx.engine,
        secret_ref: &ctx.spec.password_secret_ref,
        secret: &observed.secret,
        unkeyed: observed.secret_unkeyed_fingerprint.as_deref(),
        grace: Duration::from_secs(u64::try_from(grace).unwrap_or(0)),
        previous: previous.password.as_ref(),
        previous_condition: previous
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::PASSWORD_APPLIED),
        outcome: observed.password_outcome.as_ref(),
        primary: &membership.primary,
        primary_facts: observed.member_facts.get(&membership.primary),
        failover_in_flight,
        initializing,
        now,
    })
}
