//! Server identity: on an engine whose members share one
//! ([`database_operator_engine::EngineDef::shares_cluster_identity`]: PostgreSQL's
//! `system_identifier`), the cluster's is recorded from its primary, and a member that reports
//! another holds another database (a volume initialized elsewhere, or swapped in). Such a
//! member is quarantined, never followed and never a candidate for promotion.

use super::*;

impl Pass<'_, '_> {
    /// Records the cluster's identity from the primary, the first time it answers as one.
    pub(super) fn record_identity(&mut self) {
        if self.status.identity.is_some()
            || !database_operator_engine::of(self.input.engine).shares_cluster_identity()
        {
            return;
        }
        let primary = self.primary.as_str();
        self.status.identity = self
            .facts(primary)
            .filter(|f| f.reachable && f.role == Some(ServerRole::Primary))
            .and_then(|f| f.server_id.clone());
    }

    /// The identity `pod` reports when it is not the cluster's (`None`: the same, unknown, or
    /// nothing recorded yet).
    pub(super) fn foreign_identity(&self, pod: &str) -> Option<String> {
        let cluster = self.status.identity.as_deref()?;
        let theirs = self
            .facts(pod)
            .filter(|f| f.reachable)
            .and_then(|f| f.server_id.as_deref())?;
        (theirs != cluster).then(|| theirs.to_owned())
    }

    /// Quarantines `pod`, which reports the identity `theirs`: fenced, out of both Services
    /// (its `quarantined` label), its volume kept.
    pub(super) fn quarantine_foreign(&mut self, pod: &str, theirs: &str) {
        self.commands.push(DatabaseCommand::Quarantine {
            pod: pod.to_owned(),
        });
        self.status.quarantined.push(pod.to_owned());
        self.status.quarantined.sort();
        let cluster_identity = self.status.identity.clone().unwrap_or_default();
        self.events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::MemberQuarantined,
            format!(
                "{pod} of {} reports system identifier {theirs}, not the cluster's {cluster_identity}: it holds another database (its volume initialized elsewhere or swapped in). Quarantined: out of both Services, never followed or promoted, its volume kept; inspect it, then delete its claim and pod to seed it anew from the primary",
                self.input.cluster
            ),
        ));
    }
}
