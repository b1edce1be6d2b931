//! Reseeding: a replica that can no longer catch up is copied from the primary again.
//!
//! A replica is *stranded* when the primary no longer has what it needs to stream (PostgreSQL:
//! the WAL from its position was recycled, its slot exceeded `max_slot_wal_keep_size`;
//! MySQL/MariaDB: the binary logs it asks for were purged, error 1236) and it holds nothing the
//! primary lacks (its position is behind or equal: a member with transactions of its own is
//! rewound or quarantined instead, never reseeded without a person asking). Such a replica can
//! only be copied again, so the operator does it on its own, one member at a time, while
//! nothing else changes the primary:
//!
//! ```text
//!   stranded, or the database.example.com/reseed annotation names it
//!        │  status.failover.reseed { member, trigger, reason, started }; event MemberReseeding
//!        ▼
//!   label the pod database.example.com/reseed=<started, Unix seconds>   (PodAction::SetReseed)
//!        │  the label is on the pod (created before `started`)
//!        ▼
//!   StopPod: the StatefulSet creates it again; the plan labels the new pod (reseed before
//!        │  role); its init container discards the data directory and copies the primary,
//!        │  once per token (a marker on the volume)
//!        ▼
//!   the new pod's server streams from the primary: finished; label off; event MemberReseeded
//! ```
//!
//! Nothing is deleted by the operator itself: the init container discards the data directory
//! only on the label's request, and only on a replica.

use database_operator_api::failover::{Reseed, ReseedTrigger};

use super::*;

impl Pass<'_, '_> {
    /// One pass of reseeding: a new request, a stranded replica, or the reseed in progress.
    /// Runs only while no change of primary is in progress (the caller's rule).
    pub(super) fn reseed_step(&mut self) {
        self.reseed_request();
        let in_progress = self
            .status
            .reseed
            .as_ref()
            .is_some_and(|r| r.finished.is_none());
        if !in_progress && let Some((pod, reason)) = self.first_stranded() {
            self.start_reseed(pod, ReseedTrigger::Automatic, reason);
        }
        if let Some(reseed) = self.status.reseed.clone().filter(|r| r.finished.is_none()) {
            self.advance_reseed(&reseed);
        }
    }

    /// Whether `pod` is being reseeded (the failover's rejoin leaves it alone meanwhile).
    pub(super) fn reseeding(&self, pod: &str) -> bool {
        self.status
            .reseed
            .as_ref()
            .is_some_and(|r| r.finished.is_none() && r.member == pod)
    }

    /// The `database.example.com/reseed` annotation: a new value names a member to reseed.
    fn reseed_request(&mut self) {
        let Some(request) = self.input.reseed_request else {
            self.status.handled_reseed = None;
            return;
        };
        if self.status.handled_reseed.as_deref() == Some(request) {
            return;
        }
        let cluster = self.input.cluster;
        let refuse = if request == self.primary {
            Some(format!(
                "reseed of {request} in {cluster} refused: it is the primary; switch over first (kubectl dbc switchover), then reseed it"
            ))
        } else if !self.in_spec().any(|m| m.name == request) {
            Some(format!(
                "reseed of {request} in {cluster} refused: no such member (members are {})",
                self.in_spec()
                    .map(|m| m.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        } else {
            None
        };
        if let Some(message) = refuse {
            self.status.handled_reseed = Some(request.to_owned());
            self.events.push(PlannedEvent::new(
                EventType::Warning,
                EventReason::MemberReseeding,
                message,
            ));
            return;
        }
        if self
            .status
            .reseed
            .as_ref()
            .is_some_and(|r| r.finished.is_none())
        {
            // One at a time: the request waits for the reseed in progress.
            return;
        }
        self.status.handled_reseed = Some(request.to_owned());
        let reason = if self.quarantined(request) {
            "requested (database.example.com/reseed) for a quarantined member: the transactions only it held are discarded".to_owned()
        } else {
            "requested (database.example.com/reseed)".to_owned()
        };
        self.start_reseed(request.to_owned(), ReseedTrigger::Requested, reason);
    }

    /// The first replica in spec that is stranded ([`stranded`]), with why.
    fn first_stranded(&self) -> Option<(String, String)> {
        let primary = self.primary.as_str();
        if !self.writable_primary(primary) {
            return None;
        }
        let primary_facts = self.facts(primary)?;
        self.in_spec()
            .filter(|m| m.name != primary && !self.quarantined(m.name))
            .find_map(|m| {
                let facts = self.facts(m.name)?;
                stranded(facts, primary, primary_facts).map(|why| (m.name.to_owned(), why))
            })
    }

    fn start_reseed(&mut self, pod: String, trigger: ReseedTrigger, reason: String) {
        self.status.quarantined.retain(|q| *q != pod);
        let (type_, what) = match trigger {
            ReseedTrigger::Automatic => (EventType::Warning, "can no longer catch up"),
            ReseedTrigger::Requested => (EventType::Normal, "was asked for"),
        };
        self.events.push(PlannedEvent::new(
            type_,
            EventReason::MemberReseeding,
            format!(
                "{pod} of {} {what}: {reason}; discarding its data directory and copying the primary {} again (its pod restarts)",
                self.input.cluster, self.primary
            ),
        ));
        self.status.reseed = Some(Reseed {
            member: pod,
            trigger,
            reason,
            started: self.now(),
            finished: None,
        });
        self.requeue(ACTIVE_REQUEUE);
    }

    /// The reseed in progress: restart the labelled pod once, then wait for the new copy to
    /// stream from the primary.
    fn advance_reseed(&mut self, reseed: &Reseed) {
        let Some(member) = self.member(&reseed.member).cloned() else {
            // The pod is being created again: the plan labels it before its role.
            self.requeue(ACTIVE_REQUEUE);
            return;
        };
        if !self.in_spec().any(|m| m.name == reseed.member) {
            // Scaled away (or terminating): nothing left to seed.
            if member.ordinal >= self.input.replicas {
                self.finish_reseed(reseed, "it left the cluster before it was copied again");
            }
            self.requeue(ACTIVE_REQUEUE);
            return;
        }
        let token = reseed.token();
        let old_incarnation = member.created.is_none_or(|c| c < reseed.started.0);
        if old_incarnation {
            // Restart it once its label asks for the reseed, and while the primary answers
            // (the copy comes from it).
            if member.reseed == Some(token.as_str()) && self.writable_primary(&self.primary) {
                self.commands.push(DatabaseCommand::StopPod {
                    pod: reseed.member.clone(),
                });
            }
            self.requeue(Duration::from_secs(2));
            return;
        }
        let streams = self.facts(&reseed.member).is_some_and(|f| {
            f.reachable && f.role == Some(ServerRole::Replica) && f.replicating == Some(true)
        });
        if streams {
            let took = self.since(&reseed.started);
            self.finish_reseed(
                reseed,
                &format!(
                    "copied from {} again and streaming, {} s after the decision",
                    self.primary,
                    took.as_secs()
                ),
            );
        } else {
            self.requeue(Duration::from_secs(2));
        }
    }

    fn finish_reseed(&mut self, reseed: &Reseed, how: &str) {
        self.events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::MemberReseeded,
            format!("{} of {}: {how}", reseed.member, self.input.cluster),
        ));
        self.status.reseed = Some(Reseed {
            finished: Some(self.now()),
            ..reseed.clone()
        });
    }
}

/// Why a replica with these (fresh) `facts` can no longer catch up with `primary` (whose
/// fresh facts are `primary_facts`), when it cannot: it does not replicate, holds nothing the
/// primary lacks (behind or equal), and either its source said it no longer has what it needs
/// (MySQL/MariaDB) or it needs WAL from before the oldest the primary still has (PostgreSQL).
/// `None` for every other member (one that replicates, diverged, or cannot be told).
pub fn stranded(facts: &MemberFacts, primary: &str, primary_facts: &MemberFacts) -> Option<String> {
    if !facts.reachable || facts.role != Some(ServerRole::Replica) {
        return None;
    }
    if facts.replicating == Some(true) {
        return None;
    }
    let mine = facts.position.as_ref()?;
    let theirs = primary_facts.position.as_ref()?;
    if !matches!(mine.compare(theirs), Relation::Behind | Relation::Equal) {
        return None;
    }
    if facts.source_lacks_history {
        return Some(format!(
            "the primary {primary} no longer has the binary logs it needs ({})",
            facts
                .replication_error
                .as_deref()
                .unwrap_or("error 1236 from its source")
        ));
    }
    let oldest = primary_facts.retained_from.as_ref()?;
    mine.needs_before(oldest).then(|| {
        format!(
            "it stopped at {mine} and the primary {primary} keeps WAL from {oldest} on only (it fell further behind than max_slot_wal_keep_size allows)"
        )
    })
}
