//! The `ArchivingHealthy` condition: whether the primary's write-ahead log reaches the archive
//! (`spec.backup.archive`), from what the prober last read of the primary's archiver.

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{BackupSpec, DatabaseClusterStatus};
use k8s_openapi::jiff::Timestamp;

use crate::{ArchiverFacts, MemberFacts};

/// What the primary's last probe says of archiving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryArchiver<'a> {
    /// There is no primary, or no fresh probe of it answered.
    NotProbed,
    /// The primary answered, but its server does not archive (it runs without `archive_mode`:
    /// the configuration that has it is still rolling out).
    NotArchiving,
    /// What its archiver reports.
    Reports(&'a ArchiverFacts),
}

impl<'a> PrimaryArchiver<'a> {
    /// From the primary's last probe (`None`: not probed), as fresh as `now` allows.
    pub fn of(facts: Option<&'a MemberFacts>, now: Timestamp) -> Self {
        match facts {
            Some(f) if f.reachable && f.fresh_at(now) => match &f.archiver {
                Some(archiver) => PrimaryArchiver::Reports(archiver),
                None => PrimaryArchiver::NotArchiving,
            },
            _ => PrimaryArchiver::NotProbed,
        }
    }
}

/// A WAL segment's size (the default `wal_segment_size`), for the message's estimate.
const SEGMENT_MIB: u64 = 16;

/// How many WAL files wait, said coarsely (a power of ten and its size), so the message
/// changes as the backlog grows tenfold, not with every file: each change of the status is a
/// write and another reconcile.
fn backlog(waiting: u64) -> String {
    if waiting == 0 {
        return "no WAL file waits on its volume yet".to_owned();
    }
    let mut step = 1u64;
    while step.saturating_mul(10) <= waiting {
        step = step.saturating_mul(10);
    }
    format!(
        "at least {step} WAL file(s) (at least {} MiB) wait on its volume",
        step.saturating_mul(SEGMENT_MIB)
    )
}

/// `(status, reason, message)` of the condition. The messages hold only what changes when the
/// state does (file names, a coarse backlog), never ages or counts of attempts.
fn assess(primary: &str, archiver: PrimaryArchiver<'_>) -> (&'static str, &'static str, String) {
    match archiver {
        PrimaryArchiver::NotProbed => (
            "Unknown",
            reasons::PRIMARY_NOT_PROBED,
            format!(
                "the primary {primary} has not answered a probe recently; whether it archives is unknown"
            ),
        ),
        PrimaryArchiver::NotArchiving => (
            "Unknown",
            reasons::NOTHING_ARCHIVED_YET,
            format!(
                "the primary {primary}'s server runs without archiving; it starts archiving once it restarts with the configuration that has it (the members roll)"
            ),
        ),
        PrimaryArchiver::Reports(a) if a.failing() => {
            let last = match &a.last_archived {
                Some(file) => format!("the last file archived is {file}"),
                None => "nothing was archived since its server started".to_owned(),
            };
            (
                "False",
                reasons::ARCHIVING_FAILING,
                format!(
                    "the primary {primary}'s archive command fails (on {failed}); {backlog}, and {last}. Writes go on; the server's log has the command's error: check the bucket, its endpoint and credentials",
                    failed = a.last_failed.as_deref().unwrap_or("a WAL file"),
                    backlog = backlog(a.waiting),
                ),
            )
        }
        PrimaryArchiver::Reports(a) if a.last_archived.is_none() => (
            "Unknown",
            reasons::NOTHING_ARCHIVED_YET,
            format!(
                "the primary {primary} has archived nothing since its server started; it archives a WAL file once one is complete, at the latest spec.backup.archive.timeoutSeconds after a write"
            ),
        ),
        PrimaryArchiver::Reports(_) => (
            "True",
            reasons::ARCHIVING,
            format!("the primary {primary} archives every WAL file it completes"),
        ),
    }
}

/// Sets (with `spec.backup.archive`) or removes (without) the `ArchivingHealthy` condition of
/// `status`, for the primary `primary` whose archiver `archiver` describes.
pub fn record(
    backup: Option<&BackupSpec>,
    primary: &str,
    archiver: PrimaryArchiver<'_>,
    status: &mut DatabaseClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    if backup.and_then(|b| b.archive.as_ref()).is_none() {
        status
            .conditions
            .retain(|c| c.type_ != conditions::ARCHIVING_HEALTHY);
        return;
    }
    let (state, reason, message) = assess(primary, archiver);
    let condition = crate::status::transition_to(
        &status.conditions,
        conditions::ARCHIVING_HEALTHY,
        state,
        reason,
        message,
        generation,
        now,
    );
    crate::status::set_condition(&mut status.conditions, condition);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    /// `spec.backup` as a manifest writes it, with `archive: {}` or without.
    fn spec(archive: bool) -> BackupSpec {
        let mut backup = serde_json::json!({"schedule": "0 2 * * *", "s3Bucket": "orders-backups"});
        if archive {
            backup["archive"] = serde_json::json!({});
        }
        let spec: BackupSpec = serde_json::from_value(backup).unwrap();
        assert_eq!(spec.archive.is_some(), archive);
        spec
    }

    fn condition(status: &DatabaseClusterStatus) -> Option<(String, String, String, Timestamp)> {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::ARCHIVING_HEALTHY)
            .map(|c| {
                (
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                    c.last_transition_time.0,
                )
            })
    }

    fn archived(waiting: u64) -> ArchiverFacts {
        ArchiverFacts {
            waiting,
            archived_count: 12,
            last_archived: Some("00000001000000000000000C".into()),
            last_archived_age_seconds: Some(20),
            failed_count: 0,
            last_failed: None,
            last_failed_age_seconds: None,
            last_attempt_failed: false,
        }
    }

    #[test]
    fn without_an_archive_there_is_no_condition() {
        let mut status = DatabaseClusterStatus::default();
        let facts = archived(0);
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&facts),
            &mut status,
            Some(1),
            at(0),
        );
        assert!(condition(&status).is_some());
        record(
            Some(&spec(false)),
            "db-0",
            PrimaryArchiver::Reports(&facts),
            &mut status,
            Some(1),
            at(1),
        );
        assert_eq!(condition(&status), None);
        record(
            None,
            "db-0",
            PrimaryArchiver::NotProbed,
            &mut status,
            Some(1),
            at(2),
        );
        assert_eq!(condition(&status), None);
    }

    #[test]
    fn a_failing_archive_says_how_far_behind_and_recovers() {
        let mut status = DatabaseClusterStatus::default();
        let ok = archived(0);
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&ok),
            &mut status,
            Some(1),
            at(0),
        );
        let (state, reason, message, since) = condition(&status).unwrap();
        assert_eq!(
            (state.as_str(), reason.as_str()),
            ("True", reasons::ARCHIVING)
        );
        assert_eq!(
            message,
            "the primary db-0 archives every WAL file it completes"
        );
        assert_eq!(since, at(0));

        let failing = ArchiverFacts {
            waiting: 25,
            failed_count: 9,
            last_failed: Some("000000010000000000000011".into()),
            last_failed_age_seconds: Some(3),
            last_archived_age_seconds: Some(300),
            last_attempt_failed: true,
            ..archived(25)
        };
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&failing),
            &mut status,
            Some(1),
            at(60),
        );
        let (state, reason, message, since) = condition(&status).unwrap();
        assert_eq!(
            (state.as_str(), reason.as_str()),
            ("False", reasons::ARCHIVING_FAILING)
        );
        for part in [
            "fails (on 000000010000000000000011)",
            "at least 10 WAL file(s) (at least 160 MiB) wait on its volume",
            "the last file archived is 00000001000000000000000C",
            "Writes go on",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert_eq!(since, at(60));

        // Still failing a minute later, with more waiting and more attempts failed: the same
        // condition, message and transition time (no status write).
        let before = status.clone();
        let later = ArchiverFacts {
            waiting: 31,
            failed_count: 14,
            last_failed_age_seconds: Some(1),
            last_archived_age_seconds: Some(360),
            ..failing.clone()
        };
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&later),
            &mut status,
            Some(1),
            at(120),
        );
        assert_eq!(status, before);

        // A success after the failure: archiving again.
        let recovered = ArchiverFacts {
            last_archived_age_seconds: Some(1),
            last_attempt_failed: false,
            ..failing
        };
        assert!(!recovered.failing());
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&recovered),
            &mut status,
            Some(1),
            at(180),
        );
        let (state, _, _, since) = condition(&status).unwrap();
        assert_eq!((state.as_str(), since), ("True", at(180)));
    }

    #[test]
    fn unknown_until_the_primary_answers_and_has_archived() {
        let mut status = DatabaseClusterStatus::default();
        let cases = [
            (PrimaryArchiver::NotProbed, reasons::PRIMARY_NOT_PROBED),
            (PrimaryArchiver::NotArchiving, reasons::NOTHING_ARCHIVED_YET),
        ];
        for (archiver, expected) in cases {
            record(
                Some(&spec(true)),
                "db-0",
                archiver,
                &mut status,
                Some(1),
                at(0),
            );
            let (state, reason, _, _) = condition(&status).unwrap();
            assert_eq!((state.as_str(), reason.as_str()), ("Unknown", expected));
        }
        let fresh = ArchiverFacts::default();
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&fresh),
            &mut status,
            Some(1),
            at(0),
        );
        let (state, reason, message, _) = condition(&status).unwrap();
        assert_eq!(
            (state.as_str(), reason.as_str()),
            ("Unknown", reasons::NOTHING_ARCHIVED_YET)
        );
        assert!(message.contains("archived nothing"), "{message}");
        // Never archived, and failing: False, not Unknown.
        let never = ArchiverFacts {
            failed_count: 2,
            last_failed: Some("000000010000000000000001".into()),
            last_failed_age_seconds: Some(4),
            last_attempt_failed: true,
            ..ArchiverFacts::default()
        };
        record(
            Some(&spec(true)),
            "db-0",
            PrimaryArchiver::Reports(&never),
            &mut status,
            Some(1),
            at(5),
        );
        let (state, _, message, _) = condition(&status).unwrap();
        assert_eq!(state, "False");
        assert!(message.contains("nothing was archived"), "{message}");
    }

    #[test]
    fn the_backlog_is_said_by_powers_of_ten() {
        let said: Vec<String> = [0, 1, 9, 10, 99, 100, 12_345]
            .into_iter()
            .map(backlog)
            .collect();
        assert_eq!(
            said,
            [
                "no WAL file waits on its volume yet",
                "at least 1 WAL file(s) (at least 16 MiB) wait on its volume",
                "at least 1 WAL file(s) (at least 16 MiB) wait on its volume",
                "at least 10 WAL file(s) (at least 160 MiB) wait on its volume",
                "at least 10 WAL file(s) (at least 160 MiB) wait on its volume",
                "at least 100 WAL file(s) (at least 1600 MiB) wait on its volume",
                "at least 10000 WAL file(s) (at least 160000 MiB) wait on its volume",
            ]
        );
    }

    #[test]
    fn the_primary_s_view_follows_its_probe() {
        let mut facts = MemberFacts::unreachable(at(0));
        assert_eq!(
            PrimaryArchiver::of(Some(&facts), at(0)),
            PrimaryArchiver::NotProbed
        );
        assert_eq!(PrimaryArchiver::of(None, at(0)), PrimaryArchiver::NotProbed);
        facts.reachable = true;
        facts.down_since = None;
        assert_eq!(
            PrimaryArchiver::of(Some(&facts), at(1)),
            PrimaryArchiver::NotArchiving
        );
        let archiver = archived(0);
        facts.archiver = Some(archiver.clone());
        assert_eq!(
            PrimaryArchiver::of(Some(&facts), at(1)),
            PrimaryArchiver::Reports(&archiver)
        );
        // A probe older than the facts are trusted for says nothing.
        assert_eq!(
            PrimaryArchiver::of(Some(&facts), at(600)),
            PrimaryArchiver::NotProbed
        );
    }
}
