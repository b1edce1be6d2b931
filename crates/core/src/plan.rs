//! One planning pass: [`plan`] calls the decisions in order.
//!
//! Validation and the Secret, the members and the primary ([`crate::members`]), the status
//! ([`crate::status`]) and the events of a transition ([`crate::events`]); a cluster being
//! deleted goes to [`crate::finalize`]. Otherwise: the operator Secret when it is missing
//! ([`crate::credentials`]), the desired objects (the PodDisruptionBudget only above one
//! replica, the CronJob only with `spec.backup`, no StatefulSet before the password Secret
//! exists), which of them need writing ([`crate::diff`]), which owned objects to delete, the
//! role labels, the events about writes, and when to look again.

use std::collections::BTreeSet;
use std::time::Duration;

use database_operator_api::conditions::{self, reasons};
use database_operator_api::scheduling::SchedulingPolicy;
use database_operator_api::{DatabaseCluster, DatabaseClusterStatus, schedule, validate};
use k8s_openapi::jiff::Timestamp;

use crate::compose::{self, BackupFacts, ComposedStatus, MemberReport, StatusFacts};
use crate::members::Membership;
use crate::render::statefulset::StatefulSetInputs;
use crate::render::{
    RenderContext, config_map, cron_job, labels, member_access, network_policy, pdb, service,
    statefulset,
};
use crate::status::{SecretProblem, StatusInputs};
use crate::{
    DesiredObject, ObjectKey, Observed, OwnedKind, OwnedObjects, Plan, PlannedEvent, PlannedObject,
    events, failover, finalize, password, replication, upgrade,
};

mod passes;
mod secrets;

use passes::Passes;
use secrets::{operator_secret_change, secret_problem};

/// The shortest requeue interval: a plan never asks to be run again immediately.
pub const MIN_REQUEUE: Duration = Duration::from_secs(1);

/// Computes what the cluster should look like from what it looks like. Never fails: an invalid
/// spec or a missing Secret is reported in the status, not as an error.
///
/// See the crate documentation for an example.
pub fn plan(observed: &Observed) -> Plan {
    let cluster = &observed.cluster;
    let now = whole_seconds(observed.now);
    let previous = cluster.status.clone().unwrap_or_default();
    let ctx = render_context(observed);
    let mut membership = Membership::of(&ctx, &observed.pods, previous.primary_pod.as_deref());
    let invalid_spec = invalid_spec(cluster, &observed.config.scheduling);
    let deleting = cluster.metadata.deletion_timestamp.is_some();
    let template = MemberTemplate::of(&ctx, observed);
    let passes = (!deleting && invalid_spec.is_none()).then(|| {
        Passes::run(
            observed,
            &ctx,
            &mut membership,
            &previous,
            &template.pod.hash,
            now,
        )
    });
    let next_backup_time = next_backup_time(cluster, &previous, invalid_spec.is_some(), now);
    let checks = Checks {
        invalid_spec: invalid_spec.clone(),
        secret_problem: secret_problem(&ctx, observed),
        next_backup_time,
        deleting,
        observed_sts: observed.owned.stateful_set(ctx.name).is_some(),
    };
    let composed = new_status(
        observed,
        &ctx,
        &membership,
        passes.as_ref(),
        &checks,
        &previous,
        now,
    );
    let (status, verdict, held) = (composed.status, composed.verdict, composed.held);
    let status_changed = composed.changed;
    let member_recheck =
        crate::member_status::recheck_after(&membership.members, &observed.member_facts, now);
    let mut events = events::transitions(&ctx, &previous, &status, &verdict);
    events.extend(passes.iter().flat_map(Passes::events));
    if deleting {
        return finalize::plan(&ctx, observed, status, status_changed, events);
    }

    let mut plan = Plan {
        status_changed,
        events,
        requeue_after: Some(
            requeue_after(next_backup_time, now, observed.config.resync)
                .min(held.unwrap_or(Duration::MAX))
                .min(member_recheck.unwrap_or(Duration::MAX)),
        ),
        ..Plan::quiet(status, finalize::on_live(cluster))
    };
    if invalid_spec.is_some() {
        return plan;
    }
    plan.secret_changes
        .extend(operator_secret_change(&ctx, observed));
    // A conflict is the checks' Secret problem: nothing is written.
    plan.tls_change = crate::tls::change(&ctx, &observed.tls, observed.now).unwrap_or(None);
    let rendered = render(
        &ctx,
        observed,
        &checks,
        passes.as_ref(),
        &membership,
        template,
    );
    plan.objects = crate::diff::plan_changes(rendered.objects, observed, rendered.digest);
    plan.delete = unwanted(&ctx, &observed.owned, &plan.objects);
    passes::carry_out_passes(passes.as_ref(), &membership, &previous, &mut plan);
    crate::backup_now::carry_out(&ctx, cluster, &previous, &mut plan);
    let write_events = write_events(&ctx, observed, &plan, &rendered.config_hash);
    plan.events.extend(write_events);
    plan
}

/// Who the primary Lease names: the pod the primary label is on; while no pod carries it (a
/// failover or switchover between fence and promotion), the holder it had, so no agent starts
/// renewing before its server was promoted.
fn lease_holder(
    ctx: &RenderContext<'_>,
    observed: &Observed,
    passes: Option<&Passes>,
    membership: &Membership<'_>,
) -> String {
    passes
        .and_then(Passes::label_primary)
        .map(str::to_owned)
        .or_else(|| {
            observed
                .owned
                .get::<k8s_openapi::api::coordination::v1::Lease>(&member_access::lease_name(ctx))
                .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
        })
        .unwrap_or_else(|| membership.primary.clone())
}

/// What a pass found before deciding the status.
struct Checks {
    invalid_spec: Option<String>,
    secret_problem: Option<SecretProblem>,
    next_backup_time: Option<Timestamp>,
    deleting: bool,
    observed_sts: bool,
}

/// The status this pass reports ([`compose`]): the facts of the phase and the conditions,
/// what the passes and the backup Jobs record, the members as their servers report them, the
/// settling of a starting cluster and the backup-now request it handles.
fn new_status(
    observed: &Observed,
    ctx: &RenderContext<'_>,
    membership: &Membership<'_>,
    passes: Option<&Passes>,
    checks: &Checks,
    previous: &DatabaseClusterStatus,
    now: Timestamp,
) -> ComposedStatus {
    let cluster = &observed.cluster;
    // Pods Ready whose servers stopped answering count as not ready, by name.
    let silent: Vec<&str> =
        crate::member_status::silent(&membership.members, &observed.member_facts, now)
            .into_iter()
            .filter(|name| {
                membership
                    .members
                    .iter()
                    .any(|m| m.name == *name && m.ready)
            })
            .collect();
    let base = StatusInputs {
        cluster: [ctx.namespace, "/", ctx.name].concat(),
        generation: cluster.metadata.generation,
        replicas: ctx.spec.replicas,
        spec_version: ctx.version,
        deleting: checks.deleting,
        invalid_spec: checks.invalid_spec.clone(),
        secret_problem: checks.secret_problem.clone(),
        observed_anything: checks.observed_sts || !membership.members.is_empty(),
        ready_members: i32::try_from(membership.ready_and_answering(&silent)).unwrap_or(i32::MAX),
        silent: silent.iter().map(|s| (*s).to_owned()).collect(),
        exits: membership
            .members
            .iter()
            .filter(|m| !m.ready && !m.terminating)
            .filter_map(|m| Some(format!("{}'s server {}", m.name, m.server_exit?.describe())))
            .collect(),
        primary: Some(membership.primary.clone()),
        // Only before the cluster first ran (no current version): later, init.sh restores
        // nothing.
        restore_failure: ctx
            .spec
            .bootstrap
            .as_ref()
            .filter(|_| previous.current_version.is_none())
            .and_then(|_| observed.pods.iter().find(|p| p.name == membership.primary))
            .and_then(|p| p.failed_init.clone())
            .map(|failed| {
                match crate::backup::failure::BackupFailure::from_init_message(&failed) {
                    Some(cause) => format!("{failed}: {}", cause.describe_restore()),
                    None => failed,
                }
            }),
        primary_ready: membership.primary_ready() && !silent.contains(&membership.primary.as_str()),
        versions: membership.versions(ctx.version, previous.current_version.as_deref()),
        next_backup_time: checks.next_backup_time,
        previous,
        now,
    };
    let valid = checks.invalid_spec.is_none();
    let live = !checks.deleting;
    let member_names: Vec<&str> = membership.members.iter().map(|m| m.name).collect();
    compose::compose(&StatusFacts {
        base,
        stored: cluster.status.as_ref(),
        passes: passes.map(Passes::records),
        backups: live.then_some(BackupFacts {
            spec: cluster.spec.backup.as_ref().filter(|_| valid),
            jobs: &observed.backup_jobs,
            bootstrapped: valid && ctx.spec.bootstrap.is_some(),
            primary: &membership.primary,
            archiver: crate::archive_status::PrimaryArchiver::of(
                observed.member_facts.get(&membership.primary),
                now,
            ),
        }),
        members: live.then_some(MemberReport {
            members: &membership.members,
            facts: &observed.member_facts,
        }),
        pods: &observed.pods,
        member_names: &member_names,
        backup_now: (live && valid)
            .then(|| crate::backup_now::to_handle(cluster, previous))
            .flatten(),
    })
}

/// The next backup time in the status: the known one while the spec is unchanged, else the
/// schedule's next run; none without backups or with an invalid spec.
fn next_backup_time(
    cluster: &DatabaseCluster,
    previous: &DatabaseClusterStatus,
    invalid_spec: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    match (&cluster.spec.backup, invalid_spec) {
        (Some(backup), false) => known_next_backup(previous, cluster.metadata.generation, now)
            .or_else(|| schedule::next_run(&backup.schedule, now).ok()),
        _ => None,
    }
}

/// The events about this pass's writes: object changes, then a restored operator Secret.
fn write_events(
    ctx: &RenderContext<'_>,
    observed: &Observed,
    plan: &Plan,
    config_hash: &str,
) -> Vec<PlannedEvent> {
    let observed_sts = observed.owned.stateful_set(ctx.name);
    let mut events =
        events::object_changes(ctx, &plan.objects, &plan.delete, observed_sts, config_hash);
    events.extend(events::operator_secret_restored(ctx, &plan.secret_changes));
    events
}

/// The render context of the observed cluster.
fn render_context(observed: &Observed) -> RenderContext<'_> {
    RenderContext::of(observed)
}

/// The validation errors of the spec (the operator's scheduling policy included), unless an
/// earlier pass found this generation valid.
fn invalid_spec(cluster: &DatabaseCluster, scheduling: &SchedulingPolicy) -> Option<String> {
    if cluster.metadata.name.is_none() {
        return Some("metadata.name: is required".to_owned());
    }
    if already_validated(cluster.status.as_ref(), cluster.metadata.generation) {
        return None;
    }
    validate::with_more_errors(
        validate::validate_running(cluster),
        scheduling.check(cluster.spec.scheduling.as_ref()),
    )
    .err()
    .map(|errors| errors.to_string())
}

/// The time until the next backup when sooner than the resync, never less than [`MIN_REQUEUE`].
fn requeue_after(
    next_backup_time: Option<Timestamp>,
    now: Timestamp,
    resync: Duration,
) -> Duration {
    let resync = resync.max(MIN_REQUEUE);
    match next_backup_time {
        Some(next) => {
            let until = next.duration_since(now);
            let until = Duration::try_from(until).unwrap_or(Duration::ZERO);
            until.min(resync).max(MIN_REQUEUE)
        }
        None => resync,
    }
}

/// The ConfigMap's data and the members' pod template, rendered before the passes: the roll
/// compares each member's template with this one.
struct MemberTemplate {
    config_data: std::collections::BTreeMap<String, String>,
    config_hash: String,
    password_fingerprint: Option<String>,
    pod: statefulset::PodTemplate,
}

impl MemberTemplate {
    fn of(ctx: &RenderContext<'_>, observed: &Observed) -> MemberTemplate {
        // For the volumes the members have: the StatefulSet's claim template, once it exists.
        let templates = observed
            .owned
            .stateful_set(ctx.name)
            .and_then(|s| s.spec.volume_claim_templates.as_deref());
        let config_data =
            config_map::data_for_volume(ctx, config_map::volume_bytes(ctx, templates));
        let config_hash = config_map::config_hash(&config_data);
        // A password change is applied inside the database, never by rolling the pods. A
        // StatefulSet made by an earlier release keeps the fingerprint annotation it carries
        // (taking it out of the template would roll every member once); a new one has none.
        let password_fingerprint = observed
            .owned
            .stateful_set(ctx.name)
            .and_then(|s| s.spec.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(labels::PASSWORD_FINGERPRINT))
            .cloned();
        let pod = statefulset::pod_template(ctx, &config_hash, password_fingerprint.as_deref());
        MemberTemplate {
            config_data,
            config_hash,
            password_fingerprint,
            pod,
        }
    }
}

/// The objects one pass renders, their digest and the config hash.
struct Rendered {
    objects: Vec<DesiredObject>,
    digest: u64,
    config_hash: String,
}

/// The desired objects, in the order they are applied: configuration before the pods that mount
/// it, Services before the StatefulSet that names its governing Service.
fn render(
    ctx: &RenderContext<'_>,
    observed: &Observed,
    checks: &Checks,
    passes: Option<&Passes>,
    membership: &Membership<'_>,
    template: MemberTemplate,
) -> Rendered {
    let secret_ok = checks
        .secret_problem
        .as_ref()
        .is_none_or(|p| !p.keeps_members_from_starting());
    let partition = passes.map_or(0, |p| p.roll.partition);
    let lease_holder = &lease_holder(ctx, observed, passes, membership);
    let observed_sts = observed.owned.stateful_set(ctx.name);
    let MemberTemplate {
        config_data,
        config_hash,
        password_fingerprint,
        pod,
    } = template;
    let mut objects = vec![
        DesiredObject::ConfigMap(Box::new(config_map::render_with(ctx, config_data))),
        DesiredObject::Service(Box::new(service::headless(ctx))),
        DesiredObject::Service(Box::new(service::read_write(ctx))),
        DesiredObject::Service(Box::new(service::read_only(ctx))),
    ];
    let self_fence = member_access::wanted(ctx);
    if self_fence {
        objects.extend([
            DesiredObject::ServiceAccount(Box::new(member_access::service_account(ctx))),
            DesiredObject::Role(Box::new(member_access::role(ctx))),
            DesiredObject::RoleBinding(Box::new(member_access::role_binding(ctx))),
            DesiredObject::Lease(Box::new(member_access::lease(ctx, lease_holder))),
        ]);
    }
    let sts_inputs = StatefulSetInputs {
        config_hash: config_hash.clone(),
        password_fingerprint,
        template: Some(pod),
        partition,
        replicas: passes.and_then(|p| p.hold_replicas),
        observed_volume_claim_templates: observed_sts
            .and_then(|s| s.spec.volume_claim_templates.clone()),
        observed_pod_management_policy: observed_sts
            .and_then(|s| s.spec.pod_management_policy.clone()),
    };
    // Pods of a new StatefulSet could not start without the Secret: create it once it exists.
    let with_stateful_set = secret_ok || observed_sts.is_some();
    if with_stateful_set {
        objects.push(DesiredObject::StatefulSet(Box::new(statefulset::render(
            ctx,
            &sts_inputs,
        ))));
    }
    if pdb::wanted(ctx) {
        objects.push(DesiredObject::PodDisruptionBudget(Box::new(pdb::render(
            ctx,
        ))));
    }
    if network_policy::wanted(ctx) {
        objects.push(DesiredObject::NetworkPolicy(Box::new(
            network_policy::render(ctx),
        )));
    }
    let backup_host = ctx
        .spec
        .backup
        .as_ref()
        .map(|_| cron_job::backup_hosts(ctx));
    if let (Some(backup), Some(host)) = (&ctx.spec.backup, &backup_host) {
        objects.push(DesiredObject::CronJob(Box::new(cron_job::render(
            ctx, backup, host,
        ))));
        if let Some(verify) = &backup.verify {
            objects.push(DesiredObject::CronJob(Box::new(cron_job::render_verify(
                ctx, backup, verify,
            ))));
        }
    }
    // Everything the objects above were rendered from: equal digests, equal objects.
    let digest = crate::diff::digest(&RenderInputs {
        name: ctx.name,
        namespace: ctx.namespace,
        uid: ctx.uid,
        spec: ctx.spec,
        image_registry: &ctx.config.image_registry,
        database_image: ctx.image(),
        operator_image: &ctx.config.operator_image,
        operator_namespace: &ctx.config.operator_namespace,
        config_hash: &sts_inputs.config_hash,
        password_fingerprint: sts_inputs.password_fingerprint.as_deref(),
        partition: sts_inputs.partition,
        observed_volume_claim_templates: sts_inputs.observed_volume_claim_templates.as_deref(),
        observed_pod_management_policy: sts_inputs.observed_pod_management_policy.as_deref(),
        with_stateful_set,
        backup_host: backup_host.as_deref(),
        lease_holder: self_fence.then_some(lease_holder),
    });
    Rendered {
        objects,
        digest,
        config_hash,
    }
}

/// Owned objects no longer wanted. The StatefulSet is never deleted here: its pods and their
/// data go only with the cluster itself.
fn unwanted(
    ctx: &RenderContext<'_>,
    owned: &OwnedObjects,
    objects: &[PlannedObject],
) -> Vec<ObjectKey> {
    let wanted: BTreeSet<ObjectKey> = objects.iter().map(|o| o.object.key()).collect();
    owned
        .keys()
        .into_iter()
        .filter(|(key, meta)| {
            key.kind != OwnedKind::StatefulSet && !wanted.contains(key) && controlled_by(meta, ctx)
        })
        .map(|(key, _)| key)
        .collect()
}

/// The inputs of every renderer in one pass ([`PlannedObject::digest`] is their digest). A
/// renderer reads nothing else: the [`RenderContext`] context (name, namespace, uid, spec, operator
/// configuration), the StatefulSet inputs and the backup host.
#[derive(serde::Serialize)]
struct RenderInputs<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    spec: &'a database_operator_api::DatabaseClusterSpec,
    image_registry: &'a str,
    database_image: String,
    operator_image: &'a str,
    config_hash: &'a str,
    password_fingerprint: Option<&'a str>,
    partition: i32,
    observed_volume_claim_templates:
        Option<&'a [k8s_openapi::api::core::v1::PersistentVolumeClaim]>,
    observed_pod_management_policy: Option<&'a str>,
    operator_namespace: &'a str,
    with_stateful_set: bool,
    backup_host: Option<&'a str>,
    lease_holder: Option<&'a str>,
}

/// Whether the spec of this generation was validated and found valid by an earlier pass: the
/// status describes this generation and does not report it invalid. `metadata.generation` moves
/// on every spec change, so the same generation is the same spec and validating it again would
/// only repeat the answer. (An operator upgrade with stricter rules therefore does not turn a
/// running cluster invalid; its next spec change is checked by the new rules.)
fn already_validated(status: Option<&DatabaseClusterStatus>, generation: Option<i64>) -> bool {
    status.is_some_and(|s| {
        s.observed_generation.is_some()
            && s.observed_generation == generation
            && s.phase.is_some()
            && events::degraded_reason(s) != Some(reasons::INVALID_SPEC)
    })
}

/// The next backup time from the status when it is still ahead and was computed for this
/// generation (the same schedule): the first run after an earlier moment that is still in the
/// future is also the first run after now, so the schedule need not be evaluated again.
fn known_next_backup(
    previous: &DatabaseClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Timestamp> {
    if previous.observed_generation.is_none() || previous.observed_generation != generation {
        return None;
    }
    previous
        .next_backup_time
        .as_ref()
        .map(|t| t.0)
        .filter(|t| *t > now)
}

/// Whether the object's controller is this cluster (by uid when known, else by name).
fn controlled_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster: &RenderContext<'_>,
) -> bool {
    meta.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == database_operator_api::KIND
            && r.name == cluster.name
            && (cluster.uid.is_empty() || r.uid == cluster.uid)
    })
}

fn whole_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}
