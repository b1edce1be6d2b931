//! What the status says about backups: `status.lastBackup` and the `BackupHealthy` condition,
//! from the cluster's backup Jobs (the CronJob's and the on-demand ones) the runtime observes.
//!
//! - `lastBackup`: the newest Job that succeeded (kept when its Job has since been removed);
//! - `BackupHealthy=False`, `LastBackupFailed`: the newest finished Job failed (named, so its
//!   pod's log can be read); older backups are untouched by a failed run; when the Job was
//!   failed on the exit code of a known cause ([`BackupFailure`]), that cause's reason instead:
//!   `BackupStorageDenied`, `BackupStorageUnreachable` or `BackupDumpFailed`;
//! - `BackupHealthy=False`, `BackupTooOld`: the schedule's first run after the last completed
//!   backup started is more than [`OVERDUE_AFTER`] in the past and no backup Job is running;
//! - `BackupHealthy=False`, `NoBackupYet`: nothing completed yet;
//! - `BackupHealthy=True`, `BackupSucceeded` otherwise.
//!
//! Without `spec.backup` there is no condition. Pure: `now` is an argument.

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{
    BackupSpec, DatabaseClusterStatus, LastBackup, RestoredFrom, schedule,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::backup::failure::BackupFailure;
use crate::backup::{RestoreReport, RunReport};
use crate::status;
use crate::{BackupJob, JobOutcome, MemberPod};

/// How late a scheduled backup may complete before the condition says so: the CronJob's
/// starting deadline (a start missed by more is skipped).
pub const OVERDUE_AFTER: SignedDuration =
    SignedDuration::from_secs(crate::render::cron_job::STARTING_DEADLINE_SECONDS);

// `BackupJob` is part of the contract with the runtime (in `model`); reading one from a Job
// needs the backup labels of `render`, so it is done here.
impl BackupJob {
    /// The facts of `job` (a restore drill's by its component label, the cause of a failure
    /// by the exit code its `Failed` condition names).
    pub fn from_job(job: &Job) -> BackupJob {
        let status = job.status.clone().unwrap_or_default();
        let condition = |type_: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == type_ && c.status == "True")
                .cloned()
        };
        let (outcome, finished) = if let Some(c) = condition("Complete") {
            (
                JobOutcome::Succeeded,
                status
                    .completion_time
                    .map(|t| t.0)
                    .or(c.last_transition_time.map(|t| t.0)),
            )
        } else if status.succeeded.unwrap_or(0) > 0 && status.completion_time.is_some() {
            (JobOutcome::Succeeded, status.completion_time.map(|t| t.0))
        } else if let Some(c) = condition("Failed") {
            (
                JobOutcome::Failed,
                c.last_transition_time
                    .map(|t| t.0)
                    .or(status.start_time.as_ref().map(|t| t.0)),
            )
        } else {
            (JobOutcome::Running, None)
        };
        let failure = match outcome {
            JobOutcome::Failed => condition("Failed")
                .and_then(|c| c.message)
                .and_then(|m| BackupFailure::from_job_message(&m)),
            _ => None,
        };
        BackupJob {
            name: job.metadata.name.clone().unwrap_or_default(),
            started: status.start_time.map(|t| t.0),
            finished,
            outcome,
            failure,
            drill: job
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::render::labels::COMPONENT))
                .is_some_and(|c| c == crate::render::labels::COMPONENT_BACKUP_VERIFY),
        }
    }
}

/// The report of backup Job `job` ([`RunReport`]) in the termination message of one of its
/// pods (the Job controller labels them with the Job's name), if one is seen.
pub fn report_of(job: &str, pods: &[MemberPod]) -> Option<RunReport> {
    pods.iter()
        .filter(|p| {
            JOB_NAME_LABELS
                .iter()
                .any(|l| p.labels.get(*l).is_some_and(|j| j == job))
        })
        .filter_map(|p| p.termination_message.as_deref())
        .find_map(RunReport::parse)
}

/// Records `status.restoredFrom` once, from the restore report of a member's init container,
/// when the cluster starts from a backup (`bootstrapped`); kept ever after.
pub fn record_restore(
    bootstrapped: bool,
    pods: &[MemberPod],
    status: &mut DatabaseClusterStatus,
    now: Timestamp,
) {
    if !bootstrapped || status.restored_from.is_some() {
        return;
    }
    let report = pods
        .iter()
        .filter_map(|p| p.termination_message.as_deref())
        .find_map(RestoreReport::parse);
    if let Some(report) = report {
        status.restored_from = Some(RestoredFrom {
            cluster: report.cluster,
            backup: report.restored,
            key: report.key,
            target: report.target,
            reached: report.reached,
            recorded: Time(now),
        });
    }
}

/// The labels the Job controller puts on a Job's pods with the Job's name.
const JOB_NAME_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];

/// Sets `status.lastBackup`, `status.backupCount` and the `BackupHealthy` condition of
/// `status` from `jobs` and the reports in their pods' termination messages (`backup`: the
/// cluster's valid `spec.backup`, if any).
pub fn record(
    backup: Option<&BackupSpec>,
    jobs: &[BackupJob],
    pods: &[MemberPod],
    status: &mut DatabaseClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    let previous = status.conditions.clone();
    let Some(backup) = backup else {
        status
            .conditions
            .retain(|c| c.type_ != conditions::BACKUP_HEALTHY);
        return;
    };
    let finished = |j: &&BackupJob| j.finished.is_some();
    let jobs: Vec<&BackupJob> = jobs.iter().filter(|j| !j.drill).collect();
    let newest_success = jobs
        .iter()
        .copied()
        .filter(|j| j.outcome == JobOutcome::Succeeded)
        .filter(finished)
        .max_by_key(|j| (j.finished, j.name.clone()));
    if let Some(job) = newest_success {
        let report = report_of(&job.name, pods);
        let mut seen = LastBackup {
            job: job.name.clone(),
            started: job.started.map(Time),
            completed: Time(job.finished.unwrap_or(now)),
            key: report.as_ref().map(|r| r.key.clone()),
            size_bytes: report
                .as_ref()
                .map(|r| i64::try_from(r.size).unwrap_or(i64::MAX)),
            retention_error: report.as_ref().and_then(|r| r.retention_error.clone()),
        };
        let known = status.last_backup.as_ref();
        let newer = known.is_none_or(|known| known.completed.0 <= seen.completed.0);
        if newer {
            // The Job's pod may be gone by now (its report with it): what was read of the
            // same Job before is kept.
            if let Some(known) = known.filter(|k| k.job == seen.job)
                && report.is_none()
            {
                seen.key.clone_from(&known.key);
                seen.size_bytes = known.size_bytes;
                seen.retention_error.clone_from(&known.retention_error);
            }
            if let Some(report) = &report {
                status.backup_count = Some(i32::try_from(report.backups).unwrap_or(i32::MAX));
            }
            status.last_backup = Some(seen);
        }
    }
    let newest_finished = jobs
        .iter()
        .copied()
        .filter(finished)
        .max_by_key(|j| (j.finished, j.name.clone()));
    let running = jobs.iter().any(|j| j.outcome == JobOutcome::Running);
    let (healthy, reason, message) = match (newest_finished, &status.last_backup) {
        (Some(job), _) if job.outcome == JobOutcome::Failed => (
            false,
            job.failure
                .map_or(reasons::LAST_BACKUP_FAILED, BackupFailure::reason),
            format!(
                "backup Job {} failed{}{}; see the logs of its pod; backups already stored are untouched",
                job.name,
                job.finished.map(|t| format!(" at {t}")).unwrap_or_default(),
                job.failure
                    .map(|f| format!(": {}", f.describe()))
                    .unwrap_or_default()
            ),
        ),
        (_, None) => (
            false,
            reasons::NO_BACKUP_YET,
            "no backup has completed yet".to_owned(),
        ),
        (_, Some(last)) if last.retention_error.is_some() => (
            false,
            reasons::RETENTION_NOT_MET,
            format!(
                "the last backup (Job {}) is stored, but retention could not delete the older ones: {}; they are kept{}; let the backup credentials delete under the cluster's prefix (or delete by hand), and the next backup applies retention",
                last.job,
                last.retention_error.as_deref().unwrap_or_default(),
                status
                    .backup_count
                    .map(|n| format!(
                        " ({n} complete backups, retention keeps {})",
                        backup.retention
                    ))
                    .unwrap_or_default()
            ),
        ),
        (_, Some(last)) => {
            let since = last.started.as_ref().unwrap_or(&last.completed).0;
            match schedule::next_run(&backup.schedule, since) {
                Ok(due) if !running && now > due + OVERDUE_AFTER => (
                    false,
                    reasons::BACKUP_TOO_OLD,
                    format!(
                        "the last backup (Job {}) completed at {}; the scheduled run due at {due} has not completed",
                        last.job, last.completed.0
                    ),
                ),
                _ => (
                    true,
                    reasons::BACKUP_SUCCEEDED,
                    format!(
                        "the last backup (Job {}) completed at {}",
                        last.job, last.completed.0
                    ),
                ),
            }
        }
    };
    status::put_condition(
        &mut status.conditions,
        &previous,
        conditions::BACKUP_HEALTHY,
        (healthy, reason, message),
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn job(name: &str, outcome: JobOutcome, finished: Option<&str>) -> BackupJob {
        BackupJob {
            name: name.into(),
            started: finished.map(|f| at(f) - SignedDuration::from_secs(60)),
            finished: finished.map(at),
            outcome,
            failure: None,
            drill: false,
        }
    }

    fn spec() -> BackupSpec {
        BackupSpec {
            schedule: "0 2 * * *".into(),
            retention: 7,
            s3_bucket: "b".into(),
            endpoint: None,
            region: None,
            credentials_secret_ref: None,
            deletion_policy: Default::default(),
            verify: None,
            archive: None,
            method: None,
        }
    }

    fn healthy_of(
        status: &DatabaseClusterStatus,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::BACKUP_HEALTHY)
            .expect("BackupHealthy")
            .clone()
    }

    fn healthy(jobs: &[BackupJob], now: &str) -> (String, String, DatabaseClusterStatus) {
        let mut status = DatabaseClusterStatus::default();
        record(Some(&spec()), jobs, &[], &mut status, Some(1), at(now));
        let c = healthy_of(&status);
        (c.status, c.reason, status)
    }

    fn job_pod(job: &str, message: Option<&str>) -> MemberPod {
        MemberPod {
            name: format!("{job}-x7k2p"),
            labels: [("batch.kubernetes.io/job-name".to_owned(), job.to_owned())].into(),
            termination_message: message.map(str::to_owned),
            ..MemberPod::default()
        }
    }

    #[test]
    fn the_jobs_report_gives_the_key_the_size_and_the_count() {
        let report = RunReport {
            id: "20260301T020000Z".into(),
            key: "shop/db/20260301T020000Z.dump.sql.gz".into(),
            size: 4096,
            backups: 3,
            retention_error: None,
        };
        let ok = job(
            "db-backup-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T02:01:00Z"),
        );
        let jobs = std::slice::from_ref(&ok);
        let mut status = DatabaseClusterStatus::default();
        // The Job is seen before its pod's report: no key yet, no count.
        record(
            Some(&spec()),
            jobs,
            &[],
            &mut status,
            Some(1),
            at("2026-03-01T02:01:01Z"),
        );
        let last = status.last_backup.clone().unwrap();
        assert_eq!(
            (last.key, last.size_bytes, status.backup_count),
            (None, None, None)
        );
        // Another pod's message, or one that is no report, is not read as this Job's.
        let pods = [
            job_pod("db-backup-0", Some(&report.to_json())),
            job_pod("db-backup-1", Some("Error: connection refused")),
        ];
        record(
            Some(&spec()),
            jobs,
            &pods,
            &mut status,
            Some(1),
            at("2026-03-01T02:01:02Z"),
        );
        assert_eq!(status.backup_count, None);
        // Its report: filled in.
        let pods = [job_pod("db-backup-1", Some(&report.to_json()))];
        record(
            Some(&spec()),
            jobs,
            &pods,
            &mut status,
            Some(1),
            at("2026-03-01T02:01:03Z"),
        );
        let last = status.last_backup.clone().unwrap();
        assert_eq!(last.key.as_deref(), Some(report.key.as_str()));
        assert_eq!(last.size_bytes, Some(4096));
        assert_eq!(status.backup_count, Some(3));
        // The pod removed later (the Job's history limit): what was read stays.
        record(
            Some(&spec()),
            jobs,
            &[],
            &mut status,
            Some(1),
            at("2026-03-01T03:00:00Z"),
        );
        let kept = status.last_backup.clone().unwrap();
        assert_eq!(kept, last);
        assert_eq!(status.backup_count, Some(3));
    }

    #[test]
    fn retention_that_could_not_delete_is_retention_not_met_until_a_backup_applies_it() {
        let mut report = RunReport {
            id: "20260301T020000Z".into(),
            key: "shop/db/20260301T020000Z.dump.sql.gz".into(),
            size: 10,
            backups: 9,
            retention_error: Some(
                "delete shop/db/20260220T020000Z.manifest.json: AccessDenied".into(),
            ),
        };
        let ok = job(
            "db-backup-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T02:01:00Z"),
        );
        let mut status = DatabaseClusterStatus::default();
        let pods = [job_pod("db-backup-1", Some(&report.to_json()))];
        record(
            Some(&spec()),
            std::slice::from_ref(&ok),
            &pods,
            &mut status,
            Some(1),
            at("2026-03-01T02:02:00Z"),
        );
        let c = healthy_of(&status);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", reasons::RETENTION_NOT_MET)
        );
        assert!(
            c.message.contains("AccessDenied")
                && c.message.contains("9 complete backups, retention keeps 7"),
            "{}",
            c.message
        );
        // The pod gone: still said (the error is kept with the backup it belongs to).
        record(
            Some(&spec()),
            std::slice::from_ref(&ok),
            &[],
            &mut status,
            Some(1),
            at("2026-03-01T03:00:00Z"),
        );
        let c = healthy_of(&status);
        assert_eq!(c.reason, reasons::RETENTION_NOT_MET);
        // The next backup's retention deleted what it had to: healthy again.
        report.retention_error = None;
        report.backups = 7;
        let next = job(
            "db-backup-2",
            JobOutcome::Succeeded,
            Some("2026-03-02T02:01:00Z"),
        );
        let pods = [job_pod("db-backup-2", Some(&report.to_json()))];
        record(
            Some(&spec()),
            &[ok, next],
            &pods,
            &mut status,
            Some(1),
            at("2026-03-02T02:02:00Z"),
        );
        let c = healthy_of(&status);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", reasons::BACKUP_SUCCEEDED)
        );
        assert_eq!(status.backup_count, Some(7));
    }

    #[test]
    fn the_first_primarys_restore_report_is_recorded_once() {
        let restore = RestoreReport {
            restored: "20260301T020000Z".into(),
            key: "shop/db/20260301T020000Z.dump.sql.gz".into(),
            cluster: "shop/db".into(),
            target: None,
            reached: None,
        };
        let run = RunReport {
            id: "20260301T030000Z".into(),
            key: "shop/new/20260301T030000Z.dump.sql.gz".into(),
            size: 1,
            backups: 1,
            retention_error: None,
        };
        let member = |message: Option<String>| MemberPod {
            name: "new-0".into(),
            termination_message: message,
            ..MemberPod::default()
        };
        let t = at("2026-03-01T04:00:00Z");
        let mut status = DatabaseClusterStatus::default();
        // A backup Job's report is no restore; without a bootstrap nothing is recorded.
        record_restore(
            true,
            &[job_pod("new-backup-1", Some(&run.to_json()))],
            &mut status,
            t,
        );
        assert_eq!(status.restored_from, None);
        record_restore(false, &[member(Some(restore.to_json()))], &mut status, t);
        assert_eq!(status.restored_from, None);
        assert_eq!(RunReport::parse(&restore.to_json()), None);
        assert_eq!(RestoreReport::parse(&run.to_json()), None);
        // The restore's report: recorded.
        record_restore(true, &[member(Some(restore.to_json()))], &mut status, t);
        let recorded = status.restored_from.clone().expect("restoredFrom");
        assert_eq!(
            (
                recorded.backup.as_str(),
                recorded.cluster.as_str(),
                recorded.key.as_str()
            ),
            ("20260301T020000Z", "shop/db", restore.key.as_str())
        );
        // Kept: the pod restarted without a report, or another report later, changes nothing.
        record_restore(
            true,
            &[member(None)],
            &mut status,
            at("2026-03-02T00:00:00Z"),
        );
        let other = RestoreReport {
            restored: "x".into(),
            ..restore.clone()
        };
        record_restore(true, &[member(Some(other.to_json()))], &mut status, t);
        assert_eq!(status.restored_from, Some(recorded));
    }

    #[test]
    fn a_physical_restore_records_its_target_and_the_point_reached() {
        // As the init script leaves it: the unpack's report with the point reached appended.
        let line = r#"{"restored":"20260301T020000Z","key":"shop/db/20260301T020000Z.base.tar.gz","cluster":"shop/db","target":"time 2026-03-01T04:04:00Z","reached":"2026-03-01 04:03:59.871234+00"}"#;
        let mut status = DatabaseClusterStatus::default();
        record_restore(
            true,
            &[MemberPod {
                name: "db-0".into(),
                termination_message: Some(line.to_owned()),
                ..MemberPod::default()
            }],
            &mut status,
            at("2026-03-02T00:00:00Z"),
        );
        let recorded = status.restored_from.expect("restoredFrom");
        assert_eq!(
            recorded.target.as_deref(),
            Some("time 2026-03-01T04:04:00Z")
        );
        assert_eq!(
            recorded.reached.as_deref(),
            Some("2026-03-01 04:03:59.871234+00")
        );
    }

    #[test]
    fn the_condition_follows_the_jobs() {
        let (s, r, status) = healthy(&[], "2026-03-01T10:00:00Z");
        assert_eq!((s.as_str(), r.as_str()), ("False", "NoBackupYet"));
        assert!(status.last_backup.is_none());

        let ok = job(
            "db-backup-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T02:01:00Z"),
        );
        let (s, r, status) = healthy(std::slice::from_ref(&ok), "2026-03-01T10:00:00Z");
        assert_eq!((s.as_str(), r.as_str()), ("True", "BackupSucceeded"));
        assert_eq!(status.last_backup.unwrap().job, "db-backup-1");

        // The newest finished Job failed: named; the last success stays the last backup.
        let failed = job(
            "db-backup-2",
            JobOutcome::Failed,
            Some("2026-03-02T02:05:00Z"),
        );
        let (s, r, status) = healthy(&[ok.clone(), failed], "2026-03-02T03:00:00Z");
        assert_eq!((s.as_str(), r.as_str()), ("False", "LastBackupFailed"));
        assert!(status.conditions[0].message.contains("db-backup-2"));
        assert_eq!(status.last_backup.unwrap().job, "db-backup-1");

        // The run due at 02:00 the next day did not complete within an hour.
        let (s, r, _) = healthy(std::slice::from_ref(&ok), "2026-03-02T03:30:00Z");
        assert_eq!((s.as_str(), r.as_str()), ("False", "BackupTooOld"));
        // ... unless it is running.
        let running = job("db-backup-2", JobOutcome::Running, None);
        let (s, _, _) = healthy(&[ok, running], "2026-03-02T03:30:00Z");
        assert_eq!(s, "True");
    }

    #[test]
    fn a_known_cause_is_the_reason() {
        let ok = job(
            "db-backup-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T02:01:00Z"),
        );
        let mut denied = job(
            "db-backup-2",
            JobOutcome::Failed,
            Some("2026-03-02T02:05:00Z"),
        );
        denied.failure = Some(BackupFailure::StorageDenied);
        let (s, r, status) = healthy(&[ok, denied], "2026-03-02T03:00:00Z");
        assert_eq!((s.as_str(), r.as_str()), ("False", "BackupStorageDenied"));
        let message = &status.conditions[0].message;
        assert!(message.contains("db-backup-2"), "{message}");
        assert!(message.contains("refused the credentials"), "{message}");
        assert!(message.contains("untouched"), "{message}");
        assert_eq!(status.last_backup.unwrap().job, "db-backup-1");
    }

    #[test]
    fn a_job_failed_by_its_pod_failure_policy_names_the_cause() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-backup-2"},
            "status": {
                "startTime": "2026-03-02T02:00:00Z",
                "failed": 1,
                "conditions": [{
                    "type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                    "lastTransitionTime": "2026-03-02T02:00:09Z",
                    "message": "Container backup for pod ns/db-backup-2-x7k2p failed with exit code 4 matching FailJob rule at index 0"
                }]
            }
        }))
        .unwrap();
        let facts = BackupJob::from_job(&job);
        assert_eq!(facts.outcome, JobOutcome::Failed);
        assert_eq!(facts.failure, Some(BackupFailure::StorageUnreachable));
        assert_eq!(facts.finished, Some(at("2026-03-02T02:00:09Z")));
        let mut backoff = job.clone();
        backoff
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .message = Some("Job has reached the specified backoff limit".into());
        assert_eq!(BackupJob::from_job(&backoff).failure, None);
    }

    #[test]
    fn without_backups_there_is_no_condition() {
        let mut status = DatabaseClusterStatus::default();
        record(
            None,
            &[],
            &[],
            &mut status,
            Some(1),
            at("2026-03-01T10:00:00Z"),
        );
        assert!(status.conditions.is_empty());
    }
}
