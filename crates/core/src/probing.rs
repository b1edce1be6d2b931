//! What the prober's findings mean for the reconciles: which changes of a member's facts a
//! decision reads ([`material_change`], [`material_changes`] for the log), and when a cluster
//! wants a reconcile after every probe round and frequent probes ([`operation_in_flight`]).
//! The runtime's prober asks these and decides nothing itself.

use database_operator_api::DatabaseClusterStatus;

use crate::MemberFacts;

/// Whether a failover or switchover operation is in flight in `status`: each of its steps
/// waits for a probe taken after it, so the prober asks for a reconcile after every round and
/// probes the cluster at its faster pace while this holds.
pub fn operation_in_flight(status: Option<&DatabaseClusterStatus>) -> bool {
    status
        .and_then(|s| s.failover.as_ref())
        .is_some_and(|f| f.operation.is_some())
}

/// Whether `new` differs from `old` in something a decision reads (reachability, role,
/// read-only, source, replication running or failing, the semi-synchronous switch, the member
/// slots, a source that lacks history, archiving that starts, fails or recovers), not only in its
/// position, lag, oldest WAL or archived count, which move with every write.
pub fn material_change(old: Option<&MemberFacts>, new: &MemberFacts) -> bool {
    // Compared field by field on every probe of every member; [`material_changes`] words it
    // only when this says so.
    let Some(old) = old else {
        return true;
    };
    old.reachable != new.reachable
        || (new.reachable
            && (old.role != new.role
                || old.read_only != new.read_only
                || old.source != new.source
                || old.replicating != new.replicating
                || old.replication_error != new.replication_error
                || old.semi_sync_source != new.semi_sync_source
                || old.member_slots != new.member_slots
                || old.source_lacks_history != new.source_lacks_history
                || archiving_failing(old) != archiving_failing(new)))
}

/// What of a primary's archiver the status shows: whether it fails, and whether it has
/// archived anything (`ArchivingHealthy` changes with either).
fn archiving_failing(facts: &MemberFacts) -> Option<(bool, bool)> {
    facts
        .archiver
        .as_ref()
        .map(|a| (a.failing(), a.last_archived.is_some()))
}

/// What [`material_change`] found, said for the log (`stopped answering`, `role replica ->
/// primary`, ...); empty for a first probe (no `old`) and for a change of position or lag only.
pub fn material_changes(old: Option<&MemberFacts>, new: &MemberFacts) -> Vec<String> {
    let Some(old) = old else {
        return Vec::new();
    };
    match (old.reachable, new.reachable) {
        (true, false) => return vec!["stopped answering".to_owned()],
        (false, true) => return vec!["answers again".to_owned()],
        (false, false) => return Vec::new(),
        (true, true) => {}
    }
    let mut said = Vec::new();
    let mut differ = |what: &str, a: String, b: String| {
        if a != b {
            said.push(format!("{what} {a} -> {b}"));
        }
    };
    let opt = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
    differ(
        "role",
        opt(old.role.map(|r| format!("{r:?}").to_lowercase())),
        opt(new.role.map(|r| format!("{r:?}").to_lowercase())),
    );
    differ(
        "read-only",
        opt(old.read_only.map(|b| b.to_string())),
        opt(new.read_only.map(|b| b.to_string())),
    );
    differ("source", opt(old.source.clone()), opt(new.source.clone()));
    differ(
        "replicating",
        opt(old.replicating.map(|b| b.to_string())),
        opt(new.replicating.map(|b| b.to_string())),
    );
    differ(
        "semi-sync source",
        opt(old.semi_sync_source.map(|b| b.to_string())),
        opt(new.semi_sync_source.map(|b| b.to_string())),
    );
    if old.member_slots != new.member_slots {
        said.push(format!(
            "member slots {} -> {}",
            old.member_slots
                .as_ref()
                .map_or_else(|| "none".to_owned(), |s| format!("[{}]", s.join(","))),
            new.member_slots
                .as_ref()
                .map_or_else(|| "none".to_owned(), |s| format!("[{}]", s.join(",")))
        ));
    }
    if archiving_failing(old) != archiving_failing(new) {
        said.push(match archiving_failing(new) {
            Some((true, _)) => "archiving fails".to_owned(),
            Some((false, true)) => "archiving works".to_owned(),
            Some((false, false)) => "archives, nothing yet".to_owned(),
            None => "does not archive".to_owned(),
        });
    }
    if !old.source_lacks_history && new.source_lacks_history {
        said.push("its source no longer has what it needs".to_owned());
    }
    if old.replication_error != new.replication_error {
        said.push(match &new.replication_error {
            Some(e) => format!("replication error: {e}"),
            None => "replication error cleared".to_owned(),
        });
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerRole;
    use k8s_openapi::jiff::Timestamp;

    fn now() -> Timestamp {
        "2026-12-01T08:00:00Z".parse().unwrap()
    }

    #[test]
    fn material_changes_say_what_changed() {
        let replica = MemberFacts {
            reachable: true,
            role: Some(ServerRole::Replica),
            read_only: Some(true),
            source: Some("orders-0".into()),
            replicating: Some(true),
            ..MemberFacts::unreachable(now())
        };
        let promoted = MemberFacts {
            role: Some(ServerRole::Primary),
            read_only: Some(false),
            source: None,
            replicating: None,
            ..replica.clone()
        };
        assert_eq!(
            material_changes(Some(&replica), &promoted),
            [
                "role replica -> primary",
                "read-only true -> false",
                "source orders-0 -> none",
                "replicating true -> none",
            ]
        );
        let down = MemberFacts::unreachable(now());
        assert_eq!(
            material_changes(Some(&replica), &down),
            ["stopped answering"]
        );
        assert_eq!(material_changes(Some(&down), &replica), ["answers again"]);
        assert!(material_changes(Some(&down), &down).is_empty());
        // A first probe is a change (a decision has something new) with nothing to say.
        assert!(material_change(None, &replica));
        assert!(material_changes(None, &replica).is_empty());
        let failing = MemberFacts {
            replication_error: Some("1236: could not find next log".into()),
            ..replica.clone()
        };
        assert_eq!(
            material_changes(Some(&replica), &failing),
            ["replication error: 1236: could not find next log"]
        );
    }

    #[test]
    fn a_moved_position_or_lag_is_no_material_change() {
        let replica = MemberFacts {
            reachable: true,
            role: Some(ServerRole::Replica),
            lag_seconds: Some(1),
            ..MemberFacts::unreachable(now())
        };
        let moved = MemberFacts {
            lag_seconds: Some(7),
            lag_bytes: Some(4096),
            ..replica.clone()
        };
        assert!(!material_change(Some(&replica), &moved));
        assert!(material_change(
            Some(&replica),
            &MemberFacts {
                semi_sync_source: Some(true),
                ..replica.clone()
            }
        ));
        // Two unreachable probes: nothing a decision reads changed.
        let down = MemberFacts::unreachable(now());
        assert!(!material_change(Some(&down), &down));
    }

    #[test]
    fn archiving_that_starts_fails_or_recovers_is_a_material_change_more_archived_is_not() {
        let archived = |count, age, failed_age| crate::ArchiverFacts {
            archived_count: count,
            last_archived: (count > 0).then(|| format!("{count:024X}")),
            last_archived_age_seconds: (count > 0).then_some(age),
            last_failed_age_seconds: failed_age,
            failed_count: u64::from(failed_age.is_some()),
            last_attempt_failed: failed_age.is_some_and(|f| f < age),
            ..Default::default()
        };
        let primary = |archiver| MemberFacts {
            reachable: true,
            role: Some(ServerRole::Primary),
            archiver,
            ..MemberFacts::unreachable(now())
        };
        let none_yet = primary(Some(archived(0, 0, None)));
        let one = primary(Some(archived(1, 3, None)));
        let two = primary(Some(archived(2, 1, None)));
        let failing = primary(Some(archived(2, 90, Some(2))));
        assert_eq!(material_changes(Some(&none_yet), &one), ["archiving works"]);
        assert!(!material_change(Some(&one), &two));
        assert_eq!(material_changes(Some(&two), &failing), ["archiving fails"]);
        assert_eq!(material_changes(Some(&failing), &two), ["archiving works"]);
        assert_eq!(
            material_changes(Some(&primary(None)), &none_yet),
            ["archives, nothing yet"]
        );
    }

    #[test]
    fn only_an_operation_in_flight_counts() {
        use database_operator_api::FailoverStatus;
        assert!(!operation_in_flight(None));
        let mut status = DatabaseClusterStatus::default();
        assert!(!operation_in_flight(Some(&status)));
        status.failover = Some(FailoverStatus::default());
        assert!(!operation_in_flight(Some(&status)));
        let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now());
        status.failover = Some(FailoverStatus {
            operation: Some(database_operator_api::failover::FailoverOperation {
                kind: database_operator_api::failover::FailoverKind::Switchover,
                phase: database_operator_api::failover::FailoverPhase::Fencing,
                started: at.clone(),
                phase_started: at,
                from: "db-0".into(),
                fenced: None,
                stopped: None,
                to: None,
                reason: "requested".into(),
                request: Some("auto".into()),
                candidates: Vec::new(),
            }),
            ..FailoverStatus::default()
        });
        assert!(operation_in_flight(Some(&status)));
    }
}
