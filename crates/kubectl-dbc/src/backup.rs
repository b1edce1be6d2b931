//! `kubectl dbc backup <name>`: asks the operator for a backup now with the
//! `database.example.com/backup-now` annotation and follows it until `status.lastBackup` names
//! the new Job, the Job fails, or `--timeout` passes.
//!
//! The operator's contract (crates/core/src/backup_now.rs, backup_status.rs): a value of the
//! annotation it has not handled yet starts one Job named `backup_now::job_name(name, value)`
//! from the backup CronJob's template and records the value in `status.handledBackupNow`; a
//! completed backup Job is reported in `status.lastBackup` (job, started, completed). Every
//! request therefore carries a fresh value ([`request_value`]).
//!
//! [`check`] and [`observe`] decide from what was read (pure, unit-tested); [`run`] does the
//! reads and writes (tested against kube's mock client).

use std::io::Write;

use anyhow::Context as _;
use database_operator_api::{DatabaseCluster, conditions};
use database_operator_core::backup_now::{self, ANNOTATION};
use database_operator_core::{BackupJob, JobOutcome};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cli::{Progress, get_cluster};

/// How the backup ended, as far as the plugin saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The Job completed and the operator reports it in `status.lastBackup`.
    Completed {
        /// The backup Job.
        job: String,
        /// When its pod started, when known.
        started: Option<Timestamp>,
        /// When it completed.
        completed: Timestamp,
    },
    /// The backup Job failed.
    Failed {
        /// The backup Job.
        job: String,
        /// Why, from the Job's `Failed` condition.
        reason: String,
    },
    /// `--timeout` passed first; the backup (if started) carries on.
    TimedOut {
        /// The backup Job.
        job: String,
        /// The last progress seen.
        last_seen: String,
    },
}

/// Progress seen in one read of the cluster and its Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not finished; the line says where it is.
    Pending(String),
    /// Finished.
    Done(Outcome),
}

/// Refuses a cluster without `spec.backup` before anything is written (the operator would
/// only record the request with a Warning event).
pub fn check(cluster: &DatabaseCluster) -> anyhow::Result<()> {
    let name = cluster.name_any();
    if cluster.spec.backup.is_none() {
        anyhow::bail!(
            "{name} has no spec.backup: there is no bucket to back up to. Configure backups \
             first (spec.backup with schedule, s3Bucket and credentials; see docs/operations.md, \
             \"Backups and restores\"), then ask again. Nothing was changed."
        );
    }
    Ok(())
}

/// A fresh annotation value for a request made at `now`: the UTC time to the nanosecond, so
/// that two requests never share a value (and so never share a Job).
pub fn request_value(now: Timestamp) -> String {
    now.strftime("%Y%m%dT%H%M%S%.9fZ").to_string()
}

fn handled(cluster: &DatabaseCluster) -> Option<&str> {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.handled_backup_now.as_deref())
}

/// Where the request `value` (its Job `job_name`) stands, from the cluster and the Job as read
/// (`job`: `None` when it does not exist).
pub fn observe(cluster: &DatabaseCluster, value: &str, job_name: &str, job: Option<&Job>) -> Seen {
    let last = cluster.status.as_ref().and_then(|s| s.last_backup.as_ref());
    if let Some(last) = last.filter(|l| l.job == job_name) {
        return Seen::Done(Outcome::Completed {
            job: last.job.clone(),
            started: last.started.as_ref().map(|t| t.0),
            completed: last.completed.0,
        });
    }
    let Some(job) = job else {
        return Seen::Pending(if handled(cluster) == Some(value) {
            format!("request handled; waiting for the backup Job {job_name}")
        } else {
            "waiting for the operator to pick up the request".to_owned()
        });
    };
    let facts = BackupJob::from_job(job);
    match facts.outcome {
        JobOutcome::Failed => Seen::Done(Outcome::Failed {
            job: job_name.to_owned(),
            reason: failure_reason(job),
        }),
        JobOutcome::Succeeded => Seen::Pending(format!(
            "Job {job_name} completed; waiting for the operator to report it in status.lastBackup"
        )),
        JobOutcome::Running => {
            let status = job.status.clone().unwrap_or_default();
            Seen::Pending(match (status.active.unwrap_or(0), facts.started) {
                (active, Some(started)) if active > 0 => {
                    format!("Job {job_name} running (started {started})")
                }
                _ if status.failed.unwrap_or(0) > 0 => format!(
                    "Job {job_name} created; {} failed attempt(s), retrying",
                    status.failed.unwrap_or(0)
                ),
                _ => format!("Job {job_name} created; waiting for its pod"),
            })
        }
    }
}

/// The reason and message of a failed Job's `Failed` condition.
fn failure_reason(job: &Job) -> String {
    let status = job.status.clone().unwrap_or_default();
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True");
    let attempts = status
        .failed
        .map(|n| format!(" after {n} failed attempt(s)"))
        .unwrap_or_default();
    match condition {
        Some(c) => {
            let reason = c.reason.as_deref().unwrap_or("Failed");
            match c.message.as_deref().filter(|m| !m.is_empty()) {
                Some(message) => format!("{reason}: {message}{attempts}"),
                None => format!("{reason}{attempts}"),
            }
        }
        None => format!("the Job failed{attempts}"),
    }
}

/// What explains a failed or slow backup: the `BackupHealthy` condition when it is not `True`,
/// and the newest Warning events about the cluster and its backup Job.
pub fn explain(cluster: &DatabaseCluster, events: &[Event]) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(status) = &cluster.status {
        for c in &status.conditions {
            if c.type_ == conditions::BACKUP_HEALTHY && c.status != "True" {
                out.push(format!(
                    "condition {}={} ({}): {}",
                    c.type_, c.status, c.reason, c.message
                ));
            }
        }
    }
    let mut warnings: Vec<&Event> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    warnings.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    warnings.dedup_by(|a, b| a.message == b.message && a.reason == b.reason);
    for e in warnings.iter().rev().take(3).rev() {
        let object = e.involved_object.name.as_deref().unwrap_or("?");
        out.push(format!(
            "event Warning {} ({} {object}): {}",
            e.reason.as_deref().unwrap_or("?"),
            e.involved_object.kind.as_deref().unwrap_or("?"),
            e.message.as_deref().unwrap_or("")
        ));
    }
    out
}

/// Lists the events about the cluster and about its backup Job (for [`explain`]).
pub async fn events(
    client: &Client,
    namespace: &str,
    name: &str,
    job: &str,
) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut all = crate::switchover::events(client, namespace, name).await?;
    all.extend(
        api.list(&ListParams::default().fields(&format!(
            "involvedObject.kind=Job,involvedObject.name={job}"
        )))
        .await
        .with_context(|| format!("listing the events of Job {namespace}/{job}"))?
        .items,
    );
    Ok(all)
}

/// How long to wait and how often to look.
pub type Timing = crate::switchover::Timing;

/// Requests a backup with the annotation value `value` and follows it, writing progress lines
/// to `out`. Returns the outcome and, for anything but success, what explains it (the
/// `BackupHealthy` condition, Warning events).
pub async fn run(
    client: &Client,
    namespace: &str,
    name: &str,
    value: &str,
    timing: Timing,
    out: &mut dyn Write,
) -> anyhow::Result<(Outcome, Vec<String>)> {
    let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), namespace);
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let mut progress = Progress::start();
    let started = progress.started();
    let mut cluster = get_cluster(&api, namespace, name, "").await?;
    check(&cluster)?;
    let job_name = backup_now::job_name(name, value);
    if let Some(pending) = backup_now::requested(&cluster).filter(|v| handled(&cluster) != Some(*v))
    {
        progress.say(
            out,
            &format!(
                "note: an earlier request ({ANNOTATION}={pending}) was not picked up yet; \
                 the new request replaces it"
            ),
        );
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION: value}}})),
    )
    .await
    .with_context(|| {
        format!(
            "annotating DatabaseCluster {namespace}/{name} (you need `patch` on databaseclusters)"
        )
    })?;
    progress.say(
        out,
        &format!("requested a backup of {name} ({ANNOTATION}={value}, Job {job_name})"),
    );
    loop {
        let job = jobs
            .get_opt(&job_name)
            .await
            .with_context(|| format!("reading Job {namespace}/{job_name}"))?;
        match observe(&cluster, value, &job_name, job.as_ref()) {
            Seen::Done(outcome) => {
                let details = match outcome {
                    Outcome::Failed { .. } => {
                        explain(&cluster, &events(client, namespace, name, &job_name).await?)
                    }
                    _ => Vec::new(),
                };
                return Ok((outcome, details));
            }
            Seen::Pending(line) => progress.update(out, line),
        }
        if started.elapsed() >= timing.timeout {
            let details = explain(&cluster, &events(client, namespace, name, &job_name).await?);
            return Ok((
                Outcome::TimedOut {
                    job: job_name,
                    last_seen: progress.last().to_owned(),
                },
                details,
            ));
        }
        tokio::time::sleep(timing.poll).await;
        cluster = get_cluster(&api, namespace, name, "").await?;
    }
}

/// The closing message for an outcome, and whether it is a success.
pub fn summary(name: &str, namespace: &str, outcome: &Outcome) -> (String, bool) {
    match outcome {
        Outcome::Completed {
            job,
            started,
            completed,
        } => {
            let took = started
                .map(|s| {
                    let secs = completed.duration_since(s).as_secs().max(0);
                    format!(", took {}m{:02}s", secs / 60, secs % 60)
                })
                .unwrap_or_default();
            (
                format!("backup of {name} done: Job {job} completed at {completed}{took}"),
                true,
            )
        }
        Outcome::Failed { job, reason } => (
            format!(
                "backup of {name} failed: Job {job}: {reason}. Its pod's logs say more: \
                 `kubectl logs -n {namespace} job/{job}`; backups already stored are untouched"
            ),
            false,
        ),
        Outcome::TimedOut { job, last_seen } => (
            format!(
                "backup of {name} not finished within --timeout (last seen: {last_seen}). The \
                 backup carries on: follow it with `kubectl get job -n {namespace} {job}` or \
                 `kubectl dbc status {name}`"
            ),
            false,
        ),
    }
}

#[cfg(test)]
mod tests;
