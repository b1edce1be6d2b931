//! The status a pass reports, composed in one place: [`compose`] takes every fact the status
//! is made of and returns the status to write, whether it changed, the verdict it was made
//! from and how long a starting cluster's progress is held back.
//!
//! In this order: the phase and the conditions ([`status::assess`], [`status::compute`]); the
//! parts the passes keep their progress in ([`PassRecords`]: `failover`, `upgrade`, `password`
//! and their conditions); for a cluster not being deleted, the backups ([`BackupFacts`]:
//! `lastBackup`, `backupCount`, `BackupHealthy`, `lastVerifiedBackup`, `BackupVerified`,
//! `restoredFrom`) and the members as their servers report them (`status.members`); then
//! whether a starting cluster's progress waits for its members to settle ([`settle::hold`]:
//! the written status stays as it is); last, the on-demand backup request this pass handles
//! (`handledBackupNow`, recorded even while the progress is held). The runtime writes what this
//! returns and changes nothing in it.

use std::collections::BTreeMap;
use std::time::Duration;

use database_operator_api::{
    BackupSpec, DatabaseClusterStatus, FailoverStatus, PasswordStatus, UpgradeStatus,
};

use crate::members::Member;
use crate::status::{self, StatusInputs, Verdict};
use crate::{BackupJob, MemberFacts, MemberPod, failover, password, settle, upgrade};

/// What the passes that keep their progress in status decided this pass.
#[derive(Clone, Copy, Debug)]
pub struct PassRecords<'a> {
    /// `status.failover` as the failover pass leaves it.
    pub failover: Option<&'a FailoverStatus>,
    /// Why failover is blocked, when it is (the `FailoverBlocked` condition).
    pub failover_blocked: Option<&'a failover::Blocked>,
    /// `status.upgrade` as the roll leaves it (the `UpgradePaused` condition follows it).
    pub upgrade: Option<&'a UpgradeStatus>,
    /// `status.password` as the password pass leaves it.
    pub password: Option<&'a PasswordStatus>,
    /// The password pass's verdict (the `PasswordApplied` condition).
    pub password_verdict: &'a password::Verdict,
    /// The `StorageResized` condition as the volume pass says it ([`crate::storage::Outcome`]);
    /// `None` keeps it as it was.
    pub storage: Option<&'a (bool, &'static str, String)>,
}

/// What the backup parts of the status are recorded from (a cluster not being deleted).
#[derive(Clone, Copy, Debug)]
pub struct BackupFacts<'a> {
    /// The cluster's `spec.backup` when the spec is valid.
    pub spec: Option<&'a BackupSpec>,
    /// The backup and restore drill Jobs observed.
    pub jobs: &'a [BackupJob],
    /// Whether the cluster starts from a backup (valid spec with `spec.bootstrap`).
    pub bootstrapped: bool,
    /// The primary's pod name.
    pub primary: &'a str,
    /// What the primary's last probe says of archiving (`ArchivingHealthy`).
    pub archiver: crate::archive_status::PrimaryArchiver<'a>,
}

/// What the members' part of the status is recorded from (a cluster not being deleted).
#[derive(Clone, Copy, Debug)]
pub struct MemberReport<'a> {
    /// The members.
    pub members: &'a [Member<'a>],
    /// What the prober last found on each member, by pod name.
    pub facts: &'a BTreeMap<String, MemberFacts>,
}

/// Every fact the status of one pass is made of.
#[derive(Clone, Debug)]
pub struct StatusFacts<'a> {
    /// The facts of the phase and the conditions ([`status::assess`]).
    pub base: StatusInputs<'a>,
    /// The status as stored (`None`: never written), which a held status keeps.
    pub stored: Option<&'a DatabaseClusterStatus>,
    /// The passes' records; `None` when they did not run (deleting, invalid spec).
    pub passes: Option<PassRecords<'a>>,
    /// The backup facts; `None` for a cluster being deleted.
    pub backups: Option<BackupFacts<'a>>,
    /// The members' facts; `None` for a cluster being deleted.
    pub members: Option<MemberReport<'a>>,
    /// The observed pods: the restore report in their termination messages, and (those of
    /// members) their readiness for [`settle::hold`].
    pub pods: &'a [MemberPod],
    /// The names of the cluster's member pods, for [`settle::hold`].
    pub member_names: &'a [&'a str],
    /// The value of the backup-now annotation this pass handles, when it handles one.
    pub backup_now: Option<&'a str>,
}

/// The status of one pass, as it is to be written.
#[derive(Clone, Debug, PartialEq)]
pub struct ComposedStatus {
    /// The status to report (the stored one, apart from `handledBackupNow`, while held).
    pub status: DatabaseClusterStatus,
    /// Whether it differs from the stored status: the runtime patches it only then.
    pub changed: bool,
    /// The phase and reasons the conditions were computed from (the transition events read
    /// it).
    pub verdict: Verdict,
    /// How long a starting cluster's progress waits for its members to settle, when it does.
    pub held: Option<Duration>,
}

/// Composes the status of one pass from `facts` (see the module documentation).
pub fn compose(facts: &StatusFacts<'_>) -> ComposedStatus {
    let input = &facts.base;
    let verdict = status::assess(input);
    let mut new = status::compute(input, &verdict);
    if let Some(records) = &facts.passes {
        record_passes(&mut new, records, input);
    }
    if let Some(backups) = &facts.backups {
        record_backups(&mut new, backups, facts.pods, input);
    }
    if let Some(report) = &facts.members {
        crate::member_status::record(&mut new, report.members, report.facts, input.now);
    }
    // A starting cluster's progress waits for its members to settle (one write, not three).
    let members = facts
        .pods
        .iter()
        .filter(|p| facts.member_names.contains(&p.name.as_str()));
    let held = settle::hold(facts.stored, &new, members, input.now);
    let mut status = if held.is_some() {
        input.previous.clone()
    } else {
        new
    };
    if let Some(value) = facts.backup_now {
        status.handled_backup_now = Some(value.to_owned());
    }
    ComposedStatus {
        changed: facts.stored != Some(&status),
        status,
        verdict,
        held,
    }
}

/// The passes' parts of the status: `failover`, `upgrade`, `password` and their conditions.
fn record_passes(
    status: &mut DatabaseClusterStatus,
    records: &PassRecords<'_>,
    input: &StatusInputs<'_>,
) {
    let (previous, generation, now) = (input.previous, input.generation, input.now);
    status.failover = records.failover.cloned();
    failover::apply_condition(status, previous, records.failover_blocked, generation, now);
    status.upgrade = records.upgrade.cloned();
    upgrade::paused_condition(status);
    status.password = records.password.cloned();
    password::apply_condition(status, previous, records.password_verdict, generation, now);
    if let Some((ok, reason, message)) = records.storage {
        status::put_condition(
            &mut status.conditions,
            &previous.conditions,
            database_operator_api::conditions::STORAGE_RESIZED,
            (*ok, reason, message.clone()),
            generation,
            now,
        );
    }
}

/// The backups' parts of the status: the backup Jobs, the restore drills, the restore.
fn record_backups(
    status: &mut DatabaseClusterStatus,
    backups: &BackupFacts<'_>,
    pods: &[MemberPod],
    input: &StatusInputs<'_>,
) {
    let (generation, now) = (input.generation, input.now);
    crate::backup_status::record(backups.spec, backups.jobs, pods, status, generation, now);
    crate::backup_verify::record(backups.spec, backups.jobs, status, generation, now);
    crate::backup_status::record_restore(backups.bootstrapped, pods, status, now);
    crate::archive_status::record(
        backups.spec,
        backups.primary,
        backups.archiver,
        status,
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::members::VersionState;
    use database_operator_api::Phase;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn base(previous: &DatabaseClusterStatus, ready: i32, now: i64) -> StatusInputs<'_> {
        StatusInputs {
            cluster: "ns/db".into(),
            generation: Some(1),
            replicas: 3,
            spec_version: "16.4",
            deleting: false,
            invalid_spec: None,
            secret_problem: None,
            observed_anything: true,
            ready_members: ready,
            silent: Vec::new(),
            exits: Vec::new(),
            primary: Some("db-0".into()),
            restore_failure: None,
            primary_ready: ready > 0,
            versions: VersionState {
                upgrading: false,
                current_version: None,
            },
            next_backup_time: None,
            previous,
            now: at(now),
        }
    }

    fn facts<'a>(
        base: StatusInputs<'a>,
        stored: Option<&'a DatabaseClusterStatus>,
        pods: &'a [MemberPod],
    ) -> StatusFacts<'a> {
        StatusFacts {
            base,
            stored,
            passes: None,
            backups: None,
            members: None,
            pods,
            member_names: &["db-0", "db-1", "db-2"],
            backup_now: None,
        }
    }

    #[test]
    fn a_status_composed_again_from_itself_is_unchanged() {
        let none = DatabaseClusterStatus::default();
        let first = compose(&facts(base(&none, 3, 0), None, &[]));
        assert!(first.changed);
        assert_eq!(first.status.phase, Some(Phase::Running));
        assert_eq!(first.held, None);
        let again = compose(&facts(base(&first.status, 3, 60), Some(&first.status), &[]));
        assert!(!again.changed, "{:?}", again.status);
        assert_eq!(again.status, first.status);
    }

    #[test]
    fn a_held_status_stays_as_stored_but_records_the_backup_request() {
        let none = DatabaseClusterStatus::default();
        let stored = compose(&facts(base(&none, 0, 0), None, &[])).status;
        // db-0 turned Ready this very second: the progress (1/3) waits for it to settle.
        let pods = [MemberPod {
            name: "db-0".into(),
            ready: true,
            ready_changed: Some(at(10)),
            ..MemberPod::default()
        }];
        let mut held = facts(base(&stored, 1, 10), Some(&stored), &pods);
        let composed = compose(&held);
        assert_eq!(composed.held, Some(settle::STARTUP_WAIT));
        assert_eq!(composed.status, stored);
        assert!(!composed.changed);
        held.backup_now = Some("nightly-1");
        let composed = compose(&held);
        assert!(composed.changed);
        assert_eq!(
            composed.status,
            DatabaseClusterStatus {
                handled_backup_now: Some("nightly-1".into()),
                ..stored.clone()
            }
        );
        // A pod that is not a member does not hold anything.
        held.member_names = &["db-1"];
        held.backup_now = None;
        let composed = compose(&held);
        assert_eq!(composed.held, None);
        assert_eq!(composed.status.ready_replicas, 1);
    }

    #[test]
    fn the_passes_records_are_the_status_parts_they_keep() {
        let none = DatabaseClusterStatus::default();
        let failover = FailoverStatus {
            quarantined: vec!["db-2".into()],
            ..FailoverStatus::default()
        };
        let verdict = password::Verdict {
            applied: true,
            reason: "Applied",
            message: "applied".into(),
        };
        let storage = (false, "Resizing", "growing".to_owned());
        let mut with_passes = facts(base(&none, 3, 0), None, &[]);
        with_passes.passes = Some(PassRecords {
            failover: Some(&failover),
            failover_blocked: None,
            upgrade: None,
            password: None,
            password_verdict: &verdict,
            storage: Some(&storage),
        });
        let composed = compose(&with_passes).status;
        assert_eq!(composed.failover, Some(failover));
        assert_eq!(composed.upgrade, None);
        let resized = composed
            .conditions
            .iter()
            .find(|c| c.type_ == database_operator_api::conditions::STORAGE_RESIZED)
            .expect("the volume pass's condition is recorded");
        assert_eq!(
            (resized.status.as_str(), resized.reason.as_str()),
            ("False", "Resizing")
        );
        let without = compose(&facts(base(&none, 3, 0), None, &[])).status;
        assert_eq!(without.failover, None);
    }
}
