//! What the core reads of the cluster's backup Jobs (the CronJob's, the on-demand ones, the
//! restore drills).

use super::*;

use crate::backup::failure::BackupFailure;

/// How a backup Job ended, if it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    /// Still running (or not started).
    Running,
    /// Completed successfully.
    Succeeded,
    /// Failed (its retries used up, or its deadline passed).
    Failed,
}

/// What the core reads of a backup Job, built by [`BackupJob::from_job`] (in
/// [`crate::backup_status`], which reads the Jobs' labels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupJob {
    /// `metadata.name`.
    pub name: String,
    /// `status.startTime`.
    pub started: Option<Timestamp>,
    /// When it finished: `status.completionTime`, or the time of its `Failed` condition.
    pub finished: Option<Timestamp>,
    /// How it ended.
    pub outcome: JobOutcome,
    /// Why it failed, when its `Failed` condition names the exit code of a known cause.
    pub failure: Option<BackupFailure>,
    /// A restore drill's Job (component `backup-verify`, [`crate::backup_verify`]) rather
    /// than a backup's.
    pub drill: bool,
}
