//! The order a plan is carried out in: [`Plan::flow`] lists its stages, and the runtime carries
//! each out after the one before it, doing nothing the flow does not list.
//!
//! The order, and why:
//! 1. Three waves of object writes ([`Writes`]): first the finalizer when the plan adds it
//!    (before a deletion could need it), the operator Secret's changes and what the members
//!    read when they start; then the StatefulSet; then the rest, the deletions and the
//!    on-demand backup Jobs (before the status that records their request: a pass repeated
//!    after a failed status write creates the same Job again, which is harmless).
//! 2. The status when it changed, **before any database command** (write-ahead):
//!    `status.failover` records what a pass decided before a server is touched, so an operator
//!    that dies between the two repeats an intent (every command is idempotent) instead of
//!    forgetting it.
//! 3. The database commands, in order; the first that fails on its member stops the commands
//!    after it (a fence comes before a follow), not the rest of the plan.
//! 4. The pod actions (role labels), which follow what the servers report.
//! 5. The events.
//! 6. The backup cleanup tasks of a deleted cluster; a failed cleanup ([`Stage::Stop`]) ends
//!    the pass there, so the finalizer stays.
//! 7. The finalizer when the plan removes it, after everything else.

use k8s_openapi::api::batch::v1::Job;

use super::{Change, CleanupTask, DatabaseCommand, FinalizerChange, Plan, PlannedEvent, PodAction};
use crate::credentials::SecretChange;
use crate::owned::{ApplyWave, DesiredObject, ObjectKey};
use database_operator_api::DatabaseClusterStatus;

/// Writes of one stage: they do not depend on each other and may go out together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Writes<'a> {
    /// Add the operator's finalizer.
    pub add_finalizer: bool,
    /// Changes to the operator Secret, in order.
    pub secret_changes: &'a [SecretChange],
    /// The certificates to make ([`crate::tls`]).
    pub tls_change: Option<&'a crate::tls::TlsChange>,
    /// Objects the watches do not show ([`Change::Create`]), in apply order: written only
    /// when no object of that name exists or the one that does is this cluster's (the
    /// operator never takes over an object another owner made).
    pub create: Vec<&'a DesiredObject>,
    /// Objects to apply (server-side) that the watches show as this cluster's
    /// ([`Change::Update`]), in apply order.
    pub apply: Vec<&'a DesiredObject>,
    /// Owned objects to delete.
    pub delete: &'a [ObjectKey],
    /// On-demand backup Jobs to create.
    pub backup_jobs: &'a [Job],
}

impl Writes<'_> {
    /// Whether the stage writes nothing.
    pub fn is_empty(&self) -> bool {
        !self.add_finalizer
            && self.secret_changes.is_empty()
            && self.tls_change.is_none()
            && self.create.is_empty()
            && self.apply.is_empty()
            && self.delete.is_empty()
            && self.backup_jobs.is_empty()
    }
}

/// One stage of carrying out a plan (see the module documentation for the order).
#[derive(Clone, Debug, PartialEq)]
pub enum Stage<'a> {
    /// Object writes, together.
    Writes(Writes<'a>),
    /// Write this status.
    Status(&'a DatabaseClusterStatus),
    /// Send these commands to the members' servers, in order, stopping at the first that
    /// fails (the flow goes on after it).
    DatabaseCommands(&'a [DatabaseCommand]),
    /// Carry out these pod actions, in order.
    PodActions(&'a [PodAction]),
    /// Publish these events (one that cannot be written stops nothing).
    Events(&'a [PlannedEvent]),
    /// Carry out these backup cleanup tasks, in order.
    Cleanup(&'a [CleanupTask]),
    /// Stop here and report this as the pass's error (the backup cleanup failed).
    Stop(&'a str),
    /// Remove the operator's finalizer.
    RemoveFinalizer,
}

impl Plan {
    /// The stages of carrying out this plan, in order, each with something to do; empty for a
    /// plan that does nothing.
    pub fn flow(&self) -> Vec<Stage<'_>> {
        let waves = [
            Writes {
                add_finalizer: self.finalizer == FinalizerChange::Add,
                secret_changes: &self.secret_changes,
                tls_change: self.tls_change.as_ref(),
                create: self.objects_in(ApplyWave::BeforeMembers, Change::Create),
                apply: self.objects_in(ApplyWave::BeforeMembers, Change::Update),
                ..Writes::default()
            },
            Writes {
                create: self.objects_in(ApplyWave::Members, Change::Create),
                apply: self.objects_in(ApplyWave::Members, Change::Update),
                ..Writes::default()
            },
            Writes {
                create: self.objects_in(ApplyWave::AfterMembers, Change::Create),
                apply: self.objects_in(ApplyWave::AfterMembers, Change::Update),
                delete: &self.delete,
                backup_jobs: &self.backup_jobs,
                ..Writes::default()
            },
        ];
        let mut flow: Vec<Stage<'_>> = waves
            .into_iter()
            .filter(|w| !w.is_empty())
            .map(Stage::Writes)
            .collect();
        if self.status_changed {
            flow.push(Stage::Status(&self.status));
        }
        if !self.database_commands.is_empty() {
            flow.push(Stage::DatabaseCommands(&self.database_commands));
        }
        if !self.pod_actions.is_empty() {
            flow.push(Stage::PodActions(&self.pod_actions));
        }
        if !self.events.is_empty() {
            flow.push(Stage::Events(&self.events));
        }
        if !self.cleanup.is_empty() {
            flow.push(Stage::Cleanup(&self.cleanup));
        }
        if let Some(failure) = &self.cleanup_failure {
            flow.push(Stage::Stop(failure));
            return flow;
        }
        if self.finalizer == FinalizerChange::Remove {
            flow.push(Stage::RemoveFinalizer);
        }
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemberRole, PlannedEvent};

    fn plan() -> Plan {
        Plan::quiet(DatabaseClusterStatus::default(), FinalizerChange::Keep)
    }

    #[test]
    fn a_quiet_plan_has_no_stage() {
        assert!(plan().flow().is_empty());
    }

    #[test]
    fn the_status_goes_before_the_database_commands_and_the_labels_after_them() {
        let mut p = plan();
        p.status_changed = true;
        p.database_commands = vec![DatabaseCommand::Fence { pod: "db-0".into() }];
        p.pod_actions = vec![PodAction::LabelPod {
            pod: "db-1".into(),
            role: MemberRole::Primary,
        }];
        p.events = vec![PlannedEvent::new(
            crate::EventType::Normal,
            crate::EventReason::BackupScheduled,
            "x".to_owned(),
        )];
        let kinds: Vec<&str> = p.flow().iter().map(name).collect();
        assert_eq!(kinds, ["status", "database", "pods", "events"]);
    }

    #[test]
    fn the_finalizer_is_added_first_and_removed_last() {
        let mut p = plan();
        p.finalizer = FinalizerChange::Add;
        let flow = p.flow();
        assert_eq!(flow.len(), 1);
        assert!(matches!(&flow[0], Stage::Writes(w) if w.add_finalizer));

        let mut p = plan();
        p.finalizer = FinalizerChange::Remove;
        p.cleanup = vec![CleanupTask::DeleteJob("db-cleanup".into())];
        let kinds: Vec<&str> = p.flow().iter().map(name).collect();
        assert_eq!(kinds, ["cleanup", "remove finalizer"]);
    }

    #[test]
    fn a_failed_cleanup_stops_the_flow_before_the_finalizer() {
        let mut p = plan();
        p.finalizer = FinalizerChange::Remove;
        p.cleanup_failure = Some("the Job failed".into());
        assert_eq!(p.flow(), [Stage::Stop("the Job failed")]);
    }

    #[test]
    fn deletions_and_backup_jobs_go_out_with_the_last_wave() {
        let mut p = plan();
        p.delete = vec![ObjectKey {
            kind: crate::OwnedKind::CronJob,
            name: "db-backup".into(),
        }];
        let flow = p.flow();
        assert_eq!(flow.len(), 1);
        assert!(matches!(&flow[0], Stage::Writes(w) if w.delete.len() == 1 && !w.add_finalizer));
    }

    fn name(stage: &Stage<'_>) -> &'static str {
        match stage {
            Stage::Writes(_) => "writes",
            Stage::Status(_) => "status",
            Stage::DatabaseCommands(_) => "database",
            Stage::PodActions(_) => "pods",
            Stage::Events(_) => "events",
            Stage::Cleanup(_) => "cleanup",
            Stage::Stop(_) => "stop",
            Stage::RemoveFinalizer => "remove finalizer",
        }
    }
}
