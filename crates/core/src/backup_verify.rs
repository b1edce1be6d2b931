//! Restore drills: `status.lastVerifiedBackup` and the `BackupVerified` condition, from the
//! drill Jobs of CronJob `<name>-verify` (component `backup-verify`) the runtime observes.
//!
//! A drill (`database-operator backup verify`) restores the newest complete backup into a
//! scratch server of the cluster's version inside its own pod and compares every table's row
//! count and checksum with the backup's manifest; it exits with
//! [`BackupFailure::Mismatch`]'s code when they (or the stored dump's SHA-256) differ and
//! [`BackupFailure::RestoreFailed`]'s when the scratch server cannot start or load it.
//!
//! - `BackupVerified=True`, `RestoreDrillPassed`: the newest finished drill succeeded;
//! - `BackupVerified=False`, `RestoreDrillOverdue`: it did, but the scheduled drill after it is
//!   more than [`OVERDUE_AFTER`] late and none runs (a suspended CronJob, unschedulable pods):
//!   the backups since are untested;
//! - `BackupVerified=False`, `BackupMismatch` / `BackupRestoreFailed` / `BackupStorageDenied` /
//!   `BackupStorageUnreachable` (the exit code's cause) or `RestoreDrillFailed` (any other
//!   failure): the newest finished drill failed; the message names its Job and when a drill last
//!   succeeded;
//! - `BackupVerified=False`, `NoDrillYet`: drills are scheduled but none has finished;
//! - `BackupVerified=False`, `NotVerified`: `spec.backup` without `verify`: no backup is known
//!   to restore, and the status says so instead of staying silent.
//!
//! Without `spec.backup` there is no condition. Pure: `now` is an argument.

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{BackupSpec, DatabaseClusterStatus, LastVerifiedBackup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::backup::failure::BackupFailure;
use crate::backup_status::OVERDUE_AFTER;
use crate::{BackupJob, JobOutcome, status};

/// Sets `status.lastVerifiedBackup` and the `BackupVerified` condition of `status` from the
/// drill Jobs among `jobs` (`backup`: the cluster's valid `spec.backup`, if any).
pub fn record(
    backup: Option<&BackupSpec>,
    jobs: &[BackupJob],
    status: &mut DatabaseClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    let previous = status.conditions.clone();
    let Some(backup) = backup else {
        status
            .conditions
            .retain(|c| c.type_ != conditions::BACKUP_VERIFIED);
        return;
    };
    let newest = jobs
        .iter()
        .filter(|j| j.drill && j.outcome != JobOutcome::Running)
        .filter_map(|j| Some((j.finished?, j)))
        .max_by_key(|(finished, j)| (*finished, j.name.clone()));
    if let Some((finished, job)) = newest {
        let known = status.last_verified_backup.as_ref();
        let newer = known.is_none_or(|k| k.finished.0 < finished || k.job == job.name);
        if newer {
            let succeeded = job.outcome == JobOutcome::Succeeded;
            let last_success = if succeeded {
                Some(Time(finished))
            } else {
                known.and_then(|k| k.last_success.clone())
            };
            status.last_verified_backup = Some(LastVerifiedBackup {
                job: job.name.clone(),
                finished: Time(finished),
                succeeded,
                last_success,
            });
        }
    }
    let failure_of = |name: &str| {
        jobs.iter()
            .find(|j| j.drill && j.name == name)
            .and_then(|j| j.failure)
    };
    let running = jobs
        .iter()
        .any(|j| j.drill && j.outcome == JobOutcome::Running);
    let overdue = |verify: &database_operator_api::BackupVerifySpec, last: &LastVerifiedBackup| {
        database_operator_api::schedule::next_run(&verify.schedule, last.finished.0)
            .ok()
            .filter(|due| !running && now > *due + OVERDUE_AFTER)
    };
    let (verified, reason, message) = match (&status.last_verified_backup, &backup.verify) {
        (Some(last), Some(verify)) if last.succeeded && overdue(verify, last).is_some() => (
            false,
            reasons::RESTORE_DRILL_OVERDUE,
            format!(
                "the last restore drill ({}) passed at {}, but the drill due at {} has not run: the backups taken since are untested; is the cluster's drill CronJob (<name>{}) suspended, or its pods unschedulable?",
                last.job,
                last.finished.0,
                overdue(verify, last).map(|d| d.to_string()).unwrap_or_default(),
                crate::owned::VERIFY_CRON_JOB_SUFFIX
            ),
        ),
        (Some(last), _) if last.succeeded => (
            true,
            reasons::RESTORE_DRILL_PASSED,
            format!(
                "restore drill {} restored the newest backup into a scratch server at {}: every table's rows and checksum matched its manifest",
                last.job, last.finished.0
            ),
        ),
        (Some(last), _) => {
            let failure = failure_of(&last.job);
            (
                false,
                failure.map_or(reasons::RESTORE_DRILL_FAILED, BackupFailure::reason),
                format!(
                    "restore drill {} failed at {}{}; see the logs of its pod; {}",
                    last.job,
                    last.finished.0,
                    failure
                        .map(|f| format!(": {}", f.describe()))
                        .unwrap_or_default(),
                    last.last_success.as_ref().map_or_else(
                        || "no drill has succeeded yet".to_owned(),
                        |t| format!("the last successful drill finished at {}", t.0)
                    )
                ),
            )
        }
        (None, Some(verify)) => (
            false,
            reasons::NO_DRILL_YET,
            format!(
                "restore drills run on schedule {:?} but none has finished yet: the backups are untested",
                verify.schedule
            ),
        ),
        (None, None) => (
            false,
            reasons::NOT_VERIFIED,
            "spec.backup.verify is not set: no backup of this cluster has been restored, so none is known to restore".to_owned(),
        ),
    };
    status::put_condition(
        &mut status.conditions,
        &previous,
        conditions::BACKUP_VERIFIED,
        (verified, reason, message),
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use database_operator_api::BackupVerifySpec;
    use k8s_openapi::jiff::SignedDuration;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn drill(name: &str, outcome: JobOutcome, finished: Option<&str>) -> BackupJob {
        BackupJob {
            name: name.into(),
            started: finished.map(|f| at(f) - SignedDuration::from_secs(30)),
            finished: finished.map(at),
            outcome,
            failure: None,
            drill: true,
        }
    }

    fn spec(verify: bool) -> BackupSpec {
        BackupSpec {
            schedule: "0 2 * * *".into(),
            retention: 3,
            s3_bucket: "orders-backups".into(),
            endpoint: None,
            region: None,
            credentials_secret_ref: None,
            deletion_policy: Default::default(),
            verify: verify.then(|| BackupVerifySpec {
                schedule: "0 5 * * 0".into(),
            }),
            archive: None,
            method: None,
        }
    }

    fn condition(status: &DatabaseClusterStatus) -> (String, String, String) {
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::BACKUP_VERIFIED)
            .expect("BackupVerified");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    const NOW: &str = "2026-03-01T06:00:00Z";

    #[test]
    fn a_drill_that_stops_running_is_overdue_an_hour_after_it_was_due() {
        // Drills on Sundays at 05:00; the last passed Sunday 2026-03-01 05:01.
        let passed = drill(
            "orders-verify-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T05:01:00Z"),
        );
        let jobs = std::slice::from_ref(&passed);
        let mut status = DatabaseClusterStatus::default();
        // The next one is due 2026-03-08 05:00: passed until an hour after that.
        record(
            Some(&spec(true)),
            jobs,
            &mut status,
            Some(1),
            at("2026-03-08T05:59:00Z"),
        );
        assert_eq!(condition(&status).1, "RestoreDrillPassed");
        record(
            Some(&spec(true)),
            jobs,
            &mut status,
            Some(1),
            at("2026-03-08T06:01:00Z"),
        );
        let (s, reason, message) = condition(&status);
        assert_eq!(
            (s.as_str(), reason.as_str()),
            ("False", "RestoreDrillOverdue")
        );
        assert!(
            message.contains("orders-verify-1") && message.contains("2026-03-08T05:00:00Z"),
            "{message}"
        );
        // A drill running now is not overdue.
        let running = drill("orders-verify-2", JobOutcome::Running, None);
        record(
            Some(&spec(true)),
            &[passed.clone(), running],
            &mut status,
            Some(1),
            at("2026-03-08T06:01:00Z"),
        );
        assert_eq!(condition(&status).1, "RestoreDrillPassed");
    }

    #[test]
    fn without_drills_the_backups_show_as_untested() {
        let mut status = DatabaseClusterStatus::default();
        record(Some(&spec(false)), &[], &mut status, Some(1), at(NOW));
        let (s, reason, message) = condition(&status);
        assert_eq!((s.as_str(), reason.as_str()), ("False", "NotVerified"));
        assert!(message.contains("spec.backup.verify"), "{message}");
        record(Some(&spec(true)), &[], &mut status, Some(2), at(NOW));
        let (s, reason, message) = condition(&status);
        assert_eq!((s.as_str(), reason.as_str()), ("False", "NoDrillYet"));
        assert!(message.contains("0 5 * * 0"), "{message}");
        // Backup Jobs are not drills.
        let mut backup_job = drill("orders-backup-1", JobOutcome::Succeeded, Some(NOW));
        backup_job.drill = false;
        record(
            Some(&spec(true)),
            &[backup_job],
            &mut status,
            Some(2),
            at(NOW),
        );
        assert_eq!(condition(&status).1, "NoDrillYet");
        assert_eq!(status.last_verified_backup, None);
        // No spec.backup: no condition.
        record(None, &[], &mut status, Some(3), at(NOW));
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.type_ != conditions::BACKUP_VERIFIED)
        );
    }

    #[test]
    fn the_newest_finished_drill_decides_and_a_failure_names_its_cause_and_the_last_success() {
        let mut status = DatabaseClusterStatus::default();
        let good = drill(
            "orders-verify-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T05:01:00Z"),
        );
        record(
            Some(&spec(true)),
            std::slice::from_ref(&good),
            &mut status,
            Some(1),
            at(NOW),
        );
        let (s, reason, message) = condition(&status);
        assert_eq!(
            (s.as_str(), reason.as_str()),
            ("True", "RestoreDrillPassed")
        );
        assert!(message.contains("orders-verify-1"), "{message}");
        let last = status.last_verified_backup.clone().unwrap();
        assert!(last.succeeded);
        assert_eq!(last.last_success, Some(Time(at("2026-03-01T05:01:00Z"))));

        let mut bad = drill(
            "orders-drill-2",
            JobOutcome::Failed,
            Some("2026-03-01T05:30:00Z"),
        );
        bad.failure = Some(BackupFailure::Mismatch);
        let running = drill("orders-drill-3", JobOutcome::Running, None);
        record(
            Some(&spec(true)),
            &[good.clone(), bad.clone(), running],
            &mut status,
            Some(1),
            at(NOW),
        );
        let (s, reason, message) = condition(&status);
        assert_eq!((s.as_str(), reason.as_str()), ("False", "BackupMismatch"));
        assert!(message.contains("orders-drill-2"), "{message}");
        assert!(message.contains("does not match its manifest"), "{message}");
        assert!(message.contains("2026-03-01T05:01:00Z"), "{message}");
        let last = status.last_verified_backup.clone().unwrap();
        assert_eq!(last.job, "orders-drill-2");
        assert!(!last.succeeded);
        assert_eq!(last.last_success, Some(Time(at("2026-03-01T05:01:00Z"))));

        // The failed Job removed by the history limit: the status keeps saying it failed (the
        // cause is then unknown), and an older Job seen again changes nothing.
        record(Some(&spec(true)), &[good], &mut status, Some(1), at(NOW));
        let (s, reason, _) = condition(&status);
        assert_eq!(
            (s.as_str(), reason.as_str()),
            ("False", "RestoreDrillFailed")
        );
        assert_eq!(
            status.last_verified_backup.clone().unwrap().job,
            "orders-drill-2"
        );

        // A failure without a known exit code.
        let mut fresh = DatabaseClusterStatus::default();
        let other = drill(
            "orders-drill-4",
            JobOutcome::Failed,
            Some("2026-03-01T05:40:00Z"),
        );
        record(Some(&spec(true)), &[other], &mut fresh, Some(1), at(NOW));
        let (_, reason, message) = condition(&fresh);
        assert_eq!(reason, "RestoreDrillFailed");
        assert!(message.contains("no drill has succeeded yet"), "{message}");
    }

    #[test]
    fn a_steady_status_is_left_as_it_is() {
        let mut status = DatabaseClusterStatus::default();
        let good = drill(
            "orders-verify-1",
            JobOutcome::Succeeded,
            Some("2026-03-01T05:01:00Z"),
        );
        record(
            Some(&spec(true)),
            std::slice::from_ref(&good),
            &mut status,
            Some(1),
            at(NOW),
        );
        let before = status.clone();
        let later = at(NOW) + SignedDuration::from_hours(1);
        record(Some(&spec(true)), &[good], &mut status, Some(1), later);
        assert_eq!(status, before);
    }
}
