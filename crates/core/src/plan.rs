//! One planning pass: [`plan`] puts the pieces together.
//!
//! Decides which objects exist (the PodDisruptionBudget only above one replica, the CronJob only
//! with `spec.backup`, no StatefulSet before the password Secret exists), which of them need
//! writing ([`crate::diff`]), which owned objects to delete, which pod gets which role label and
//! in what order, the status ([`crate::status`]), the events (transitions only), and when to look
//! again.

use std::collections::BTreeSet;
use std::time::Duration;

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{DatabaseClusterStatus, Phase, schedule, validate};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::render::statefulset::StatefulSetInputs;
use crate::render::{Cluster, config_map, cron_job, labels, pdb, quantity, service, statefulset};
use crate::status::{self, SecretProblem, StatusInputs};
use crate::upgrade;
use crate::{
    Action, Change, DesiredObject, EventType, MemberRole, ObjectKey, Observed, OwnedKind, Plan,
    PlannedEvent, PlannedObject, SecretState,
};

/// The shortest requeue interval: a plan never asks to be run again immediately.
pub const MIN_REQUEUE: Duration = Duration::from_secs(1);

/// A member pod of the StatefulSet, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// Pod name, `<name>-<ordinal>`.
    pub name: &'a str,
    /// Ordinal from the name.
    pub ordinal: i32,
    /// The pod's `Ready` condition is True.
    pub ready: bool,
    /// The pod has a deletion timestamp.
    pub terminating: bool,
    /// The pod's `database.example.com/role` label.
    pub role: Option<&'a str>,
    /// The version it runs ([`upgrade::pod_version`]).
    pub version: Option<String>,
}

/// Computes what the cluster should look like from what it looks like. Never fails: an invalid
/// spec or a missing Secret is reported in the status, not as an error.
///
/// See the crate documentation for an example.
pub fn plan(observed: &Observed) -> Plan {
    let cluster = &observed.cluster;
    let meta = &cluster.metadata;
    let now = whole_seconds(observed.now);
    let previous = cluster.status.clone().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let ctx = Cluster {
        name,
        namespace,
        uid: meta.uid.as_deref().unwrap_or_default(),
        engine: cluster.spec.engine,
        version: &cluster.spec.version,
        spec: &cluster.spec,
        config: &observed.config,
    };
    let replicas = cluster.spec.replicas;
    let resync = observed.config.resync.max(MIN_REQUEUE);

    // Members and roles.
    let members = members(name, cluster.spec.engine, &observed.pods);
    let primary = choose_primary(&ctx, previous.primary_pod.as_deref(), replicas);
    let in_spec = |m: &&Member<'_>| m.ordinal < replicas && !m.terminating;
    let ready_members = members.iter().filter(in_spec).filter(|m| m.ready).count();
    let primary_ready = members
        .iter()
        .filter(in_spec)
        .any(|m| m.ready && m.name == primary);
    let member_versions: Vec<(Option<String>, bool)> = members
        .iter()
        .filter(in_spec)
        .map(|m| (m.version.clone(), m.ready))
        .collect();
    let versions = upgrade::version_state(
        &cluster.spec.version,
        previous.current_version.as_deref(),
        &member_versions,
    );

    let invalid_spec = if meta.name.is_none() {
        Some("metadata.name: is required".to_owned())
    } else if already_validated(cluster.status.as_ref(), meta.generation) {
        None
    } else {
        validate::validate_running(cluster)
            .err()
            .map(|errors| errors.to_string())
    };
    let deleting = meta.deletion_timestamp.is_some();
    let secret_problem = secret_problem(&ctx, &observed.secret);
    let observed_sts = observed.owned.stateful_set(name);

    let next_backup_time = match (&cluster.spec.backup, &invalid_spec) {
        (Some(backup), None) => known_next_backup(&previous, meta.generation, now)
            .or_else(|| schedule::next_run(&backup.schedule, now).ok()),
        _ => None,
    };

    let status_inputs = StatusInputs {
        cluster: [namespace, "/", name].concat(),
        generation: meta.generation,
        replicas,
        spec_version: &cluster.spec.version,
        deleting,
        invalid_spec: invalid_spec.clone(),
        secret_problem: secret_problem.clone(),
        observed_anything: observed_sts.is_some() || !members.is_empty(),
        ready_members: i32::try_from(ready_members).unwrap_or(i32::MAX),
        primary: Some(primary.clone()),
        primary_ready,
        versions,
        next_backup_time,
        previous: &previous,
        now,
    };
    let assessment = status::assess(&status_inputs);
    let new_status = status::compute(&status_inputs, &assessment);
    let status_changed = cluster.status.as_ref() != Some(&new_status);
    let mut events = transition_events(&ctx, &previous, &new_status, &assessment);

    let requeue_after = match next_backup_time {
        Some(next) => {
            let until = next.duration_since(now);
            let until = Duration::try_from(until).unwrap_or(Duration::ZERO);
            until.min(resync).max(MIN_REQUEUE)
        }
        None => resync,
    };

    if deleting || invalid_spec.is_some() {
        return Plan {
            objects: Vec::new(),
            delete: Vec::new(),
            actions: Vec::new(),
            status: new_status,
            status_changed,
            events,
            requeue_after,
        };
    }

    // Desired objects, in the order they are applied: configuration before the pods that mount
    // it, Services before the StatefulSet that names its governing Service.
    let config_data = config_map::data(&ctx);
    let config_hash = config_map::config_hash(&config_data);
    let mut desired = vec![
        DesiredObject::ConfigMap(Box::new(config_map::render_with(&ctx, config_data))),
        DesiredObject::Service(Box::new(service::headless(&ctx))),
        DesiredObject::Service(Box::new(service::read_write(&ctx))),
        DesiredObject::Service(Box::new(service::read_only(&ctx))),
    ];
    let observed_template = observed_sts.map(|s| &s.spec.template);
    let observed_annotation = |key: &str| {
        observed_template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(key))
            .cloned()
    };
    let password_fingerprint = match &observed.secret {
        SecretState::Present { fingerprint } => Some(fingerprint.clone()),
        // Keep what the pods run with: no roll until the Secret is back.
        SecretState::Missing | SecretState::KeyMissing => {
            observed_annotation(labels::PASSWORD_FINGERPRINT)
        }
    };
    let sts_inputs = StatefulSetInputs {
        config_hash: config_hash.clone(),
        password_fingerprint: password_fingerprint.clone(),
        partition: upgrade::partition(replicas),
        observed_volume_claim_templates: observed_sts
            .and_then(|s| s.spec.volume_claim_templates.clone()),
    };
    // Pods of a new StatefulSet could not start without the Secret: create it once it exists.
    let with_stateful_set = secret_problem.is_none() || observed_sts.is_some();
    if with_stateful_set {
        desired.push(DesiredObject::StatefulSet(Box::new(statefulset::render(
            &ctx,
            &sts_inputs,
        ))));
    }
    if pdb::wanted(&ctx) {
        desired.push(DesiredObject::PodDisruptionBudget(Box::new(pdb::render(
            &ctx,
        ))));
    }
    let backup_host = cluster.spec.backup.as_ref().map(|_| {
        let ready_replica_members = members
            .iter()
            .filter(in_spec)
            .filter(|m| m.ready && m.name != primary)
            .count();
        cron_job::backup_host(&ctx, ready_replica_members)
    });
    if let (Some(backup), Some(host)) = (&cluster.spec.backup, &backup_host) {
        desired.push(DesiredObject::CronJob(Box::new(cron_job::render(
            &ctx, backup, host,
        ))));
    }

    // Everything the objects above were rendered from: equal digests, equal objects.
    let digest = crate::leaves::digest(&RenderInputs {
        name,
        namespace,
        uid: ctx.uid,
        spec: &cluster.spec,
        image_registry: &observed.config.image_registry,
        mysql_backup_image: &observed.config.mysql_backup_image,
        mariadb_backup_image: &observed.config.mariadb_backup_image,
        postgresql_backup_image: &observed.config.postgresql_backup_image,
        config_hash: &sts_inputs.config_hash,
        password_fingerprint: sts_inputs.password_fingerprint.as_deref(),
        partition: sts_inputs.partition,
        observed_volume_claim_templates: sts_inputs.observed_volume_claim_templates.as_deref(),
        with_stateful_set,
        backup_host: backup_host.as_deref(),
    });
    let mut comparer = crate::leaves::Comparer::default();
    let objects: Vec<PlannedObject> = desired
        .into_iter()
        .map(|object| {
            let change = crate::diff::compare(
                &mut comparer,
                &object,
                &observed.owned,
                &observed.known_matches,
                digest,
            );
            PlannedObject {
                object,
                change,
                digest,
            }
        })
        .collect();

    // Owned objects no longer wanted. The StatefulSet is never deleted here: its pods and their
    // data go only with the cluster itself.
    let wanted: BTreeSet<ObjectKey> = objects.iter().map(|o| o.object.key()).collect();
    let delete: Vec<ObjectKey> = observed
        .owned
        .keys()
        .into_iter()
        .filter(|(key, meta)| {
            key.kind != OwnedKind::StatefulSet && !wanted.contains(key) && controlled_by(meta, &ctx)
        })
        .map(|(key, _)| key)
        .collect();

    let actions = label_actions(&members, &primary);

    events.extend(object_events(
        &ctx,
        &objects,
        &delete,
        observed_sts,
        &observed.secret,
        &config_hash,
    ));
    // Told once per generation: the first pass of a spec change that grows the storage.
    if previous.observed_generation != meta.generation
        && let Some(created_with) = observed_sts.and_then(volume_size)
        && let (Some(have), Some(want)) = (
            quantity::value(&created_with),
            quantity::value(&cluster.spec.storage.size.0),
        )
        && have < want
    {
        events.push(event(
            EventType::Warning,
            "StorageResizeNotApplied",
            format!(
                "spec.storage.size is {} but the volumes of {namespace}/{name} were created with {created_with}: the operator does not expand PersistentVolumeClaims yet; expand each data-{name}-<ordinal> PVC with kubectl (the StorageClass must allow volume expansion)",
                cluster.spec.storage.size.0
            ),
        ));
    }

    Plan {
        objects,
        delete,
        actions,
        status: new_status,
        status_changed,
        events,
        requeue_after,
    }
}

/// The inputs of every renderer in one pass ([`PlannedObject::digest`] is their digest). A
/// renderer reads nothing else: the [`Cluster`] context (name, namespace, uid, spec, operator
/// configuration), the StatefulSet inputs and the backup host.
#[derive(serde::Serialize)]
struct RenderInputs<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    spec: &'a database_operator_api::DatabaseClusterSpec,
    image_registry: &'a str,
    mysql_backup_image: &'a str,
    mariadb_backup_image: &'a str,
    postgresql_backup_image: &'a str,
    config_hash: &'a str,
    password_fingerprint: Option<&'a str>,
    partition: i32,
    observed_volume_claim_templates:
        Option<&'a [k8s_openapi::api::core::v1::PersistentVolumeClaim]>,
    with_stateful_set: bool,
    backup_host: Option<&'a str>,
}

/// The storage request of the data volume claim template of `sts`.
fn volume_size(sts: &k8s_openapi::api::apps::v1::StatefulSet) -> Option<String> {
    sts.spec
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(statefulset::DATA_VOLUME))?
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
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
            && degraded_reason(s) != Some(reasons::INVALID_SPEC)
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

/// The member pods of the cluster's StatefulSet, by ordinal. Other pods carrying the cluster
/// label (backup jobs) are not members.
pub fn members<'a>(
    name: &str,
    engine: database_operator_api::Engine,
    pods: &'a [Pod],
) -> Vec<Member<'a>> {
    let mut members: Vec<Member<'a>> = pods
        .iter()
        .filter_map(|pod| {
            let pod_name = pod.metadata.name.as_deref()?;
            let ordinal = parse_ordinal(name, pod_name)?;
            let labels = pod.metadata.labels.as_ref();
            if labels
                .and_then(|l| l.get(labels::COMPONENT))
                .is_some_and(|c| c != labels::COMPONENT_DATABASE)
            {
                return None;
            }
            Some(Member {
                name: pod_name,
                ordinal,
                ready: is_ready(pod),
                terminating: pod.metadata.deletion_timestamp.is_some(),
                role: labels.and_then(|l| l.get(labels::ROLE)).map(String::as_str),
                version: upgrade::pod_version(pod, engine),
            })
        })
        .collect();
    members.sort_by_key(|m| m.ordinal);
    members
}

/// The ordinal of `pod` when it is named `<cluster>-<ordinal>`.
pub fn parse_ordinal(cluster: &str, pod: &str) -> Option<i32> {
    let digits = pod.strip_prefix(cluster)?.strip_prefix('-')?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The primary: `status.primaryPod` while it names a member the StatefulSet keeps (ordinal below
/// `spec.replicas`), even if its pod is momentarily gone (being recreated: its volume holds the
/// primary's data); otherwise ordinal 0. Choosing among live replicas when the primary is lost
/// is failover's decision, not this function's.
pub fn choose_primary(cluster: &Cluster<'_>, previous: Option<&str>, replicas: i32) -> String {
    match previous.and_then(|p| parse_ordinal(cluster.name, p).map(|o| (p, o))) {
        Some((pod, ordinal)) if ordinal < replicas => pod.to_owned(),
        _ => cluster.pod_name(0),
    }
}

/// Role labels to set so that exactly the chosen pod is labelled primary. Demotions come first,
/// so at no point do two pods carry the primary label (the read-write Service would send writes
/// to both).
pub fn label_actions(members: &[Member<'_>], primary: &str) -> Vec<Action> {
    let mut demote = Vec::new();
    let mut promote = Vec::new();
    let mut rest = Vec::new();
    for member in members.iter().filter(|m| !m.terminating) {
        let want = if member.name == primary {
            MemberRole::Primary
        } else {
            MemberRole::Replica
        };
        if member.role == Some(want.as_str()) {
            continue;
        }
        let action = Action::LabelPod {
            pod: member.name.to_owned(),
            role: want,
        };
        match (member.role, want) {
            (Some("primary"), MemberRole::Replica) => demote.push(action),
            (_, MemberRole::Primary) => promote.push(action),
            _ => rest.push(action),
        }
    }
    // A terminating pod that still carries the primary label is demoted too: it may linger.
    for member in members
        .iter()
        .filter(|m| m.terminating && m.role == Some("primary") && m.name != primary)
    {
        demote.insert(
            0,
            Action::LabelPod {
                pod: member.name.to_owned(),
                role: MemberRole::Replica,
            },
        );
    }
    demote.into_iter().chain(promote).chain(rest).collect()
}

fn secret_problem(cluster: &Cluster<'_>, secret: &SecretState) -> Option<SecretProblem> {
    let selector = &cluster.spec.password_secret_ref;
    let secret_name = format!("{}/{}", cluster.namespace, selector.name);
    match secret {
        SecretState::Present { .. } => None,
        SecretState::Missing => Some(SecretProblem {
            reason: reasons::SECRET_NOT_FOUND,
            message: format!(
                "Secret {secret_name} not found: the members read the password from its key {}; create it",
                selector.key
            ),
        }),
        SecretState::KeyMissing => Some(SecretProblem {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret {secret_name} has no key {}: add the password under that key",
                selector.key
            ),
        }),
    }
}

/// Whether the object's controller is this cluster (by uid when known, else by name).
fn controlled_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster: &Cluster<'_>,
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

fn event(type_: EventType, reason: &str, message: String) -> PlannedEvent {
    PlannedEvent {
        type_,
        reason: reason.to_owned(),
        message,
    }
}

fn degraded_reason(status: &DatabaseClusterStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DEGRADED && c.status == "True")
        .map(|c| c.reason.as_str())
}

/// Events for a change of phase (or of the reason the cluster is degraded). Nothing when the
/// cluster stays as it was.
fn transition_events(
    cluster: &Cluster<'_>,
    previous: &DatabaseClusterStatus,
    new: &DatabaseClusterStatus,
    assessment: &status::Assessment,
) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    let phase_changed = previous.phase != Some(assessment.phase);
    let reason_changed = degraded_reason(previous) != degraded_reason(new);
    if previous.phase == Some(Phase::Upgrading)
        && assessment.phase != Phase::Upgrading
        && let Some(version) = new
            .current_version
            .as_deref()
            .filter(|v| *v == cluster.version)
    {
        events.push(event(
            EventType::Normal,
            "UpgradeCompleted",
            format!(
                "every member of {}/{} runs version {version}",
                cluster.namespace, cluster.name
            ),
        ));
    }
    if !(phase_changed || (assessment.phase == Phase::Degraded && reason_changed)) {
        return events;
    }
    let message = assessment.message.clone();
    match assessment.phase {
        Phase::Running => events.push(event(EventType::Normal, "ClusterReady", message)),
        Phase::Upgrading => events.push(event(EventType::Normal, "UpgradeStarted", message)),
        Phase::Deleting => events.push(event(EventType::Normal, "ClusterDeleting", message)),
        Phase::Degraded => {
            let reason = match assessment.degraded_reason {
                r @ (reasons::INVALID_SPEC
                | reasons::SECRET_NOT_FOUND
                | reasons::SECRET_KEY_MISSING) => r,
                _ => "ClusterDegraded",
            };
            events.push(event(EventType::Warning, reason, message));
        }
        Phase::Pending | Phase::Initializing => {}
    }
    events
}

/// Events about objects this plan writes or deletes, for changes a person wants to hear about.
fn object_events(
    cluster: &Cluster<'_>,
    objects: &[PlannedObject],
    delete: &[ObjectKey],
    observed_sts: Option<&k8s_openapi::api::apps::v1::StatefulSet>,
    secret: &SecretState,
    config_hash: &str,
) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    let id = format!("{}/{}", cluster.namespace, cluster.name);
    let sts_change = objects
        .iter()
        .find(|o| o.object.kind() == OwnedKind::StatefulSet)
        .map(|o| o.change);
    if let (Some(sts), Some(Change::Update)) = (observed_sts, sts_change) {
        let observed_replicas = sts.spec.replicas.unwrap_or(1);
        let wanted = cluster.spec.replicas;
        if wanted > observed_replicas {
            events.push(event(
                EventType::Normal,
                "ScaledUp",
                format!("scaling StatefulSet {id} from {observed_replicas} to {wanted} replicas"),
            ));
        } else if wanted < observed_replicas {
            events.push(event(
                EventType::Normal,
                "ScaledDown",
                format!(
                    "scaling StatefulSet {id} from {observed_replicas} to {wanted} replicas; the volumes of removed members are kept"
                ),
            ));
        }
        let annotation = |key: &str| {
            sts.spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(key))
                .map(String::as_str)
        };
        if let SecretState::Present { fingerprint } = secret
            && annotation(labels::PASSWORD_FINGERPRINT).is_some_and(|old| old != fingerprint)
        {
            events.push(event(
                EventType::Normal,
                "PasswordChanged",
                format!(
                    "the password in Secret {}/{} changed: rolling the members of {id}",
                    cluster.namespace, cluster.spec.password_secret_ref.name
                ),
            ));
        }
        if annotation(labels::CONFIG_HASH).is_some_and(|old| old != config_hash) {
            events.push(event(
                EventType::Normal,
                "ConfigurationChanged",
                format!("the configuration of {id} changed: rolling the members"),
            ));
        }
    }
    if let Some(backup) = &cluster.spec.backup
        && objects
            .iter()
            .any(|o| o.object.kind() == OwnedKind::CronJob && o.change == Change::Create)
    {
        events.push(event(
            EventType::Normal,
            "BackupScheduled",
            format!(
                "backups of {id} run on schedule \"{}\" (UTC) to bucket {}, keeping the newest {}",
                backup.schedule, backup.s3_bucket, backup.retention
            ),
        ));
    }
    if delete.iter().any(|k| k.kind == OwnedKind::CronJob) {
        events.push(event(
            EventType::Normal,
            "BackupScheduleRemoved",
            format!("backups of {id} are no longer scheduled; backups already stored are kept"),
        ));
    }
    events
}
