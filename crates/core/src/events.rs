//! Events: what a person is told, and when.
//!
//! Decides which events a pass emits: a change of phase (or of the reason a cluster is degraded),
//! a write a person wants to hear about (scaling, a roll for a new configuration, backups
//! scheduled on an existing cluster or no longer scheduled), a storage size the operator cannot apply yet, and what
//! happened to the backups of a deleted cluster. A steady cluster emits nothing. Every reason is
//! an [`EventReason`]; Warning is only for something to act on.

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{DatabaseClusterStatus, Phase};
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::credentials::{SecretChange, operator_secret_name};
use crate::render::{RenderContext, labels};
use crate::status::Verdict;
use crate::{Change, EventReason, EventType, ObjectKey, OwnedKind, PlannedEvent, PlannedObject};

/// The reason of the True `Degraded` condition of `status`, if any.
pub(crate) fn degraded_reason(status: &DatabaseClusterStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DEGRADED && c.status == "True")
        .map(|c| c.reason.as_str())
}

/// Events for a change of phase (or of the reason the cluster is degraded). Nothing when the
/// cluster stays as it was.
pub(crate) fn transitions(
    cluster: &RenderContext<'_>,
    previous: &DatabaseClusterStatus,
    new: &DatabaseClusterStatus,
    verdict: &Verdict,
) -> Vec<PlannedEvent> {
    let mut events = backups(cluster, previous, new);
    events.extend(restarts(cluster, previous, new));
    events.extend(archiving(previous, new));
    let phase_changed = previous.phase != Some(verdict.phase);
    let reason_changed = degraded_reason(previous) != degraded_reason(new);
    if previous.phase == Some(Phase::Upgrading)
        && verdict.phase != Phase::Upgrading
        && let Some(version) = new
            .current_version
            .as_deref()
            .filter(|v| *v == cluster.version)
    {
        events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::UpgradeCompleted,
            format!(
                "every member of {}/{} runs version {version}",
                cluster.namespace, cluster.name
            ),
        ));
    }
    if !(phase_changed || (verdict.phase == Phase::Degraded && reason_changed)) {
        return events;
    }
    let message = verdict.message.clone();
    match verdict.phase {
        Phase::Running => events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::ClusterReady,
            message,
        )),
        Phase::Upgrading => events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::UpgradeStarted,
            message,
        )),
        Phase::Deleting => events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::ClusterDeleting,
            message,
        )),
        Phase::Degraded => {
            let reason = match verdict.degraded_reason {
                reasons::INVALID_SPEC => EventReason::InvalidSpec,
                reasons::SECRET_NOT_FOUND => EventReason::SecretNotFound,
                reasons::SECRET_KEY_MISSING => EventReason::SecretKeyMissing,
                reasons::PASSWORD_UNUSABLE => EventReason::PasswordUnusable,
                reasons::OPERATOR_SECRET_LOST => EventReason::OperatorSecretLost,
                _ => EventReason::ClusterDegraded,
            };
            events.push(PlannedEvent::new(EventType::Warning, reason, message));
        }
        Phase::Pending | Phase::Initializing => {}
    }
    events
}

/// One event per change of `ArchivingHealthy` between True and False (the message is the
/// condition's): `ArchivingFailing` when it turns False, `ArchivingRecovered` when it turns
/// True after False, `ArchivingStarted` when it turns True from absent or Unknown.
fn archiving(
    previous: &DatabaseClusterStatus,
    new: &DatabaseClusterStatus,
) -> Option<PlannedEvent> {
    let state = |s: &DatabaseClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == database_operator_api::conditions::ARCHIVING_HEALTHY)
            .map(|c| (c.status.clone(), c.message.clone()))
    };
    let before = state(previous).map(|(s, _)| s);
    let (now, message) = state(new)?;
    if before.as_deref() == Some(now.as_str()) {
        return None;
    }
    match (before.as_deref(), now.as_str()) {
        (_, "False") => Some(PlannedEvent::new(
            EventType::Warning,
            EventReason::ArchivingFailing,
            message,
        )),
        (Some("False"), "True") => Some(PlannedEvent::new(
            EventType::Normal,
            EventReason::ArchivingRecovered,
            message,
        )),
        (_, "True") => Some(PlannedEvent::new(
            EventType::Normal,
            EventReason::ArchivingStarted,
            message,
        )),
        _ => None,
    }
}

/// A roll that restarts the members without a version change (`status.upgrade` with `from`
/// equal to `to`): `RollingRestart` when it starts, `RollingRestartCompleted` when it ends.
fn restarts(
    cluster: &RenderContext<'_>,
    previous: &DatabaseClusterStatus,
    new: &DatabaseClusterStatus,
) -> Vec<PlannedEvent> {
    let restarting = |s: &DatabaseClusterStatus| {
        s.upgrade
            .as_ref()
            .filter(|u| u.from == u.to)
            .map(|u| u.to.clone())
    };
    match (restarting(previous), restarting(new)) {
        (None, Some(version)) => vec![PlannedEvent::new(
            EventType::Normal,
            EventReason::RollingRestart,
            format!(
                "the pod template of {}/{} changed (version {version} kept): restarting one member at a time, replicas first, then a switchover, then the former primary",
                cluster.namespace, cluster.name
            ),
        )],
        (Some(_), None) if new.upgrade.is_none() => vec![PlannedEvent::new(
            EventType::Normal,
            EventReason::RollingRestartCompleted,
            format!(
                "every member of {}/{} runs the pod template of the spec",
                cluster.namespace, cluster.name
            ),
        )],
        _ => Vec::new(),
    }
}

/// One event per backup and per restore drill, from what the status records (so a restarted
/// operator repeats none): `BackupCompleted` when `status.lastBackup` names a Job it did not
/// name before; `BackupFailed` when `BackupHealthy` turns to a failed Job it did not name
/// before (the condition's message names the Job and the cause); `RestoreDrillPassed` /
/// `RestoreDrillFailed` when `status.lastVerifiedBackup` names a new drill Job.
fn backups(
    cluster: &RenderContext<'_>,
    previous: &DatabaseClusterStatus,
    new: &DatabaseClusterStatus,
) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    let id = format!("{}/{}", cluster.namespace, cluster.name);
    if let Some(last) = &new.last_backup
        && previous.last_backup.as_ref().map(|l| &l.job) != Some(&last.job)
    {
        let took = last
            .started
            .as_ref()
            .map(|s| {
                format!(
                    " in {}s",
                    last.completed.0.duration_since(s.0).as_secs().max(0)
                )
            })
            .unwrap_or_default();
        events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::BackupCompleted,
            format!(
                "backup of {id} by Job {} completed at {}{took}{}",
                last.job,
                last.completed.0,
                last.retention_error
                    .as_deref()
                    .map(|e| format!(
                        "; retention could not delete older backups ({e}): they are kept"
                    ))
                    .unwrap_or_default()
            ),
        ));
    }
    let failed = |s: &DatabaseClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::BACKUP_HEALTHY && c.status == "False")
            .filter(|c| {
                [
                    reasons::LAST_BACKUP_FAILED,
                    reasons::BACKUP_STORAGE_DENIED,
                    reasons::BACKUP_STORAGE_UNREACHABLE,
                    reasons::BACKUP_DUMP_FAILED,
                ]
                .contains(&c.reason.as_str())
            })
            .map(|c| c.message.clone())
    };
    if let Some(message) = failed(new)
        && failed(previous).as_ref() != Some(&message)
    {
        events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::BackupFailed,
            format!("{id}: {message}"),
        ));
    }
    if let Some(drill) = &new.last_verified_backup
        && previous.last_verified_backup.as_ref().map(|d| &d.job) != Some(&drill.job)
    {
        let verified = new
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::BACKUP_VERIFIED)
            .map(|c| c.message.as_str())
            .unwrap_or("see the Job's log");
        let (type_, reason, outcome) = if drill.succeeded {
            (EventType::Normal, EventReason::RestoreDrillPassed, "passed")
        } else {
            (
                EventType::Warning,
                EventReason::RestoreDrillFailed,
                "failed",
            )
        };
        events.push(PlannedEvent::new(
            type_,
            reason,
            format!("restore drill {} of {id} {outcome}: {verified}", drill.job),
        ));
    }
    events
}

/// Events about objects this plan writes or deletes, for changes a person wants to hear about.
pub(crate) fn object_changes(
    cluster: &RenderContext<'_>,
    objects: &[PlannedObject],
    delete: &[ObjectKey],
    observed_sts: Option<&StatefulSet>,
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
            events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::ScaledUp,
                format!("scaling StatefulSet {id} from {observed_replicas} to {wanted} replicas"),
            ));
        } else if wanted < observed_replicas {
            events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::ScaledDown,
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
        if annotation(labels::CONFIG_HASH).is_some_and(|old| old != config_hash) {
            events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::ConfigurationChanged,
                format!("the configuration of {id} changed: rolling the members"),
            ));
        }
    }
    // Backups added to a cluster that exists. A new cluster's CronJob comes with everything
    // else (its schedule is in the spec and `status.nextBackupTime`): one event fewer for
    // every cluster created, and `ClusterReady` tells when it is up.
    if let Some(backup) = &cluster.spec.backup
        && observed_sts.is_some()
        && objects.iter().any(|o| {
            o.object.kind() == OwnedKind::CronJob
                && o.change == Change::Create
                && !o
                    .object
                    .metadata()
                    .name
                    .as_deref()
                    .is_some_and(|n| n.ends_with(crate::owned::VERIFY_CRON_JOB_SUFFIX))
        })
    {
        events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::BackupScheduled,
            format!(
                "backups of {id} run on schedule \"{}\" (UTC) to bucket {}, keeping the newest {}",
                backup.schedule, backup.s3_bucket, backup.retention
            ),
        ));
    }
    if delete.iter().any(|k| {
        k.kind == OwnedKind::CronJob && !k.name.ends_with(crate::owned::VERIFY_CRON_JOB_SUFFIX)
    }) {
        events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::BackupScheduleRemoved,
            format!("backups of {id} are no longer scheduled; backups already stored are kept"),
        ));
    }
    events
}

/// The operator Secret created again with the values the operator held (a Warning: someone
/// deleted it, and the same deletion after an operator restart would leave no values).
pub(crate) fn operator_secret_restored(
    cluster: &RenderContext<'_>,
    changes: &[SecretChange],
) -> Option<PlannedEvent> {
    let restored = changes
        .iter()
        .any(|c| matches!(c, SecretChange::Restore(_)));
    restored.then(|| {
        PlannedEvent::new(
            EventType::Warning,
            EventReason::OperatorSecretRestored,
            format!(
                "Secret {}/{} was deleted; it is created again with the passwords the servers know, from the operator's memory (after an operator restart there would be none: keep a copy of it, docs/operations.md \"The operator Secret\")",
                cluster.namespace,
                operator_secret_name(cluster.name)
            ),
        )
    })
}

/// What happened to the backups of a deleted cluster, in `bucket <bucket> under <prefix>`.
pub(crate) fn backups_after_deletion(
    cluster: &RenderContext<'_>,
    bucket: &str,
    prefix: &str,
    deleted: bool,
) -> PlannedEvent {
    let (namespace, name) = (cluster.namespace, cluster.name);
    let location = format!("bucket {bucket} under {prefix}");
    if deleted {
        PlannedEvent::new(
            EventType::Normal,
            EventReason::BackupsDeleted,
            format!(
                "Backups of {namespace}/{name} in {location} were removed (deletionPolicy Delete)."
            ),
        )
    } else {
        PlannedEvent::new(
            EventType::Normal,
            EventReason::BackupsRetained,
            format!(
                "Backups of {namespace}/{name} in {location} are kept (deletionPolicy Retain); remove them from the bucket when no longer needed."
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn with_archiving(status: Option<&str>) -> DatabaseClusterStatus {
        DatabaseClusterStatus {
            conditions: status
                .map(|s| Condition {
                    type_: database_operator_api::conditions::ARCHIVING_HEALTHY.to_owned(),
                    status: s.to_owned(),
                    reason: "R".to_owned(),
                    message: format!("archiving is {s}"),
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                })
                .into_iter()
                .collect(),
            ..DatabaseClusterStatus::default()
        }
    }

    #[test]
    fn archiving_says_once_when_it_starts_fails_and_recovers() {
        let said = |before: Option<&str>, after: Option<&str>| {
            archiving(&with_archiving(before), &with_archiving(after))
                .map(|e| (e.type_, e.reason, e.message))
        };
        assert_eq!(
            said(None, Some("True")),
            Some((
                EventType::Normal,
                EventReason::ArchivingStarted,
                "archiving is True".into()
            ))
        );
        assert_eq!(
            said(Some("True"), Some("False")).map(|e| (e.0, e.1)),
            Some((EventType::Warning, EventReason::ArchivingFailing))
        );
        assert_eq!(
            said(Some("Unknown"), Some("False")).map(|e| e.1),
            Some(EventReason::ArchivingFailing)
        );
        assert_eq!(
            said(Some("False"), Some("True")).map(|e| (e.0, e.1)),
            Some((EventType::Normal, EventReason::ArchivingRecovered))
        );
        for (before, after) in [
            (Some("True"), Some("True")),
            (Some("False"), Some("False")),
            (Some("True"), Some("Unknown")),
            (None, Some("Unknown")),
            (Some("True"), None),
            (None, None),
        ] {
            assert_eq!(said(before, after), None, "{before:?} -> {after:?}");
        }
    }
}
