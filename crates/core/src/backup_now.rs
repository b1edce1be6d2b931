//! On-demand backups: the annotation `database.example.com/backup-now` on a cluster starts one
//! backup per value.
//!
//! A value the status has not recorded as handled (`status.handledBackupNow`) plans one Job
//! made from the backup CronJob's own job template (as `kubectl create job --from=cronjob/...`
//! does), named after the value, so a pass that is repeated (the status write failed) creates
//! the same Job again, which is harmless; the status then records the value. A value without
//! `spec.backup` is recorded too, with a Warning event saying why nothing ran. The annotation
//! itself is the user's: the operator never edits it.

use std::collections::BTreeMap;

use database_operator_api::{DatabaseCluster, DatabaseClusterStatus};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::render::{RenderContext, labels};
use crate::{DesiredObject, EventReason, EventType, Plan, PlannedEvent};

/// The annotation that requests a backup now; any new value starts one.
pub const ANNOTATION: &str = "database.example.com/backup-now";
/// Seconds a finished on-demand backup Job is kept (with its pod's logs).
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 24 * 3600;

/// The requested value, when the annotation is set and not empty.
pub fn requested(cluster: &DatabaseCluster) -> Option<&str> {
    cluster
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// Name of the Job for the request `value` of cluster `name`: `<name>-now-<6 hex digits of the
/// value's hash>` (at most 63 characters for a 52-character cluster name).
pub fn job_name(name: &str, value: &str) -> String {
    let hash = crate::hash::hash_parts([value.as_bytes()]);
    format!("{name}-now-{:06x}", hash & 0xff_ffff)
}

/// The Job for request `value`, from the CronJob's job template, owned by the cluster.
pub fn job(ctx: &RenderContext<'_>, cron_job: &CronJob, value: &str) -> Job {
    let template = cron_job.spec.job_template.clone();
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION.to_owned(), value.to_owned());
    let mut spec = template.spec.unwrap_or_default();
    spec.ttl_seconds_after_finished = Some(TTL_SECONDS_AFTER_FINISHED);
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(ctx.name, value)),
            namespace: Some(ctx.namespace.to_owned()),
            labels: template.metadata.and_then(|m| m.labels),
            annotations: Some(annotations),
            owner_references: Some(vec![labels::owner_reference(ctx)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The requested value this pass handles: set and not yet recorded as handled in `previous`
/// (the status records it, [`crate::compose`]).
pub fn to_handle<'a>(
    cluster: &'a DatabaseCluster,
    previous: &DatabaseClusterStatus,
) -> Option<&'a str> {
    requested(cluster).filter(|value| previous.handled_backup_now.as_deref() != Some(*value))
}

/// Plans the on-demand backup of this pass, if one was requested: the Job and the event (the
/// status that records the request is [`crate::compose`]'s).
pub fn carry_out(
    ctx: &RenderContext<'_>,
    cluster: &DatabaseCluster,
    previous: &DatabaseClusterStatus,
    plan: &mut Plan,
) {
    let Some(value) = to_handle(cluster, previous) else {
        return;
    };
    let cron_job = plan.objects.iter().find_map(|o| match &o.object {
        DesiredObject::CronJob(c) => Some(c.as_ref()),
        _ => None,
    });
    match cron_job {
        Some(cron_job) => {
            let job = job(ctx, cron_job, value);
            let name = job.metadata.name.clone().unwrap_or_default();
            plan.backup_jobs.push(job);
            plan.events.push(PlannedEvent::new(
                EventType::Normal,
                EventReason::BackupRequested,
                format!("{ANNOTATION}={value}: started the backup Job {name}"),
            ));
        }
        None => plan.events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::BackupRequested,
            format!(
                "{ANNOTATION}={value} ignored: the cluster has no spec.backup (no bucket to back up to)"
            ),
        )),
    }
}
