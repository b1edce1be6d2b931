//! What the core reads of member pods and of their servers.

use super::*;

/// What the core reads of a pod that carries the cluster label: the contract between the
/// runtime's pod cache and the core. The runtime caches exactly this (never the pod's spec or
/// status), built with [`MemberPod::from_pod`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberPod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels` (role, version, component, ...).
    pub labels: BTreeMap<String, String>,
    /// The pod's `Ready` condition is True.
    pub ready: bool,
    /// When the pod's `Ready` condition last changed (its `lastTransitionTime`, whole
    /// seconds): a starting cluster's progress waits for its members to settle
    /// ([`crate::settle::SETTLE`]).
    pub ready_changed: Option<Timestamp>,
    /// The pod has a deletion timestamp.
    pub terminating: bool,
    /// The image of each container, by container name.
    pub images: BTreeMap<String, String>,
    /// The init container that failed, and how (`init container init exited with 1`): its
    /// current or last run exited non-zero and no run of it has completed since.
    pub failed_init: Option<String>,
    /// `metadata.creationTimestamp` (whole seconds): a pod created after its predecessor was
    /// stopped is a new incarnation that cannot run the stopped server.
    pub created: Option<Timestamp>,
    /// `spec.nodeName`: the node the pod runs on (named when its stop cannot be confirmed).
    pub node: Option<String>,
    /// `metadata.deletionTimestamp`: when the pod's grace period ends. A pod still there long
    /// after it is not being stopped by its node (a lost node keeps it Terminating for good).
    pub deletion: Option<Timestamp>,
    /// The termination message of a container (or init container) that exited 0: a backup
    /// Job's report ([`crate::backup::RunReport`]), or a first primary's restore
    /// ([`crate::backup::RestoreReport`]); `None` when there is none.
    pub termination_message: Option<String>,
    /// The failed exit of each container whose current or last run failed, by container name
    /// (empty while none did): why a member's server stopped on its own.
    pub exits: BTreeMap<String, ContainerExit>,
}

/// The message of the first container (then init container) that terminated with exit code 0
/// and left one.
fn termination_message(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .filter(|t| t.exit_code == 0)
        .find_map(|t| t.message.clone().filter(|m| !m.trim().is_empty()))
}

impl MemberPod {
    /// The fields of `pod` the core reads.
    pub fn from_pod(pod: &Pod) -> Self {
        Self {
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            ready: pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            ready_changed: pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            images: pod
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .filter_map(|c| Some((c.name.clone(), c.image.clone()?)))
                .collect(),
            failed_init: failed_init(pod),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            deletion: pod.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            termination_message: termination_message(pod),
            exits: exit::container_exits(pod),
        }
    }
}

/// The init container of `pod` whose current or last run exited non-zero (a crash loop shows it
/// in `lastState` while it waits or runs again), unless a run of it has since completed.
fn failed_init(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.init_container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let failed = |t: Option<&k8s_openapi::api::core::v1::ContainerStateTerminated>| {
            t.filter(|t| t.exit_code != 0).map(|t| t.exit_code)
        };
        let current = c.state.as_ref();
        if current
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
        {
            return None;
        }
        // Waiting or running again after a failure: the last failure stands until a run
        // completes (no flapping between failed and starting on every retry).
        let code = failed(current.and_then(|s| s.terminated.as_ref()))
            .or_else(|| failed(c.last_state.as_ref().and_then(|s| s.terminated.as_ref())))?;
        Some(format!("init container {} exited with {code}", c.name))
    })
}

/// Role of a member in replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemberRole {
    /// Accepts writes.
    Primary,
    /// Streams from the primary and serves reads.
    Replica,
    /// Diverged from the primary and cannot rejoin on its own: serves nothing, keeps its data.
    Quarantined,
}

impl MemberRole {
    /// The value of the `database.example.com/role` pod label.
    pub const fn as_str(&self) -> &'static str {
        match self {
            MemberRole::Primary => "primary",
            MemberRole::Replica => "replica",
            MemberRole::Quarantined => "quarantined",
        }
    }
}

/// The role a server reports for itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerRole {
    /// PostgreSQL: not in recovery. MySQL/MariaDB: no replication source configured.
    Primary,
    /// PostgreSQL: in recovery. MySQL/MariaDB: a replication source is configured.
    Replica,
}

/// What a PostgreSQL primary's archiver reported (`pg_stat_archiver`, counted since the server
/// started, and the files waiting in `pg_wal/archive_status`). Times are ages at the probe, in
/// whole seconds, on the server's own clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiverFacts {
    /// WAL files completed but not archived yet (they stay on the primary's volume).
    pub waiting: u64,
    /// Files archived since the server started.
    pub archived_count: u64,
    /// The last file archived.
    pub last_archived: Option<String>,
    /// Seconds since the last file was archived.
    pub last_archived_age_seconds: Option<u64>,
    /// Failed attempts since the server started.
    pub failed_count: u64,
    /// The file of the last failed attempt.
    pub last_failed: Option<String>,
    /// Seconds since the last failed attempt.
    pub last_failed_age_seconds: Option<u64>,
    /// Whether the last attempt failed: the last failure is later than the last success (the
    /// server compares its own timestamps).
    pub last_attempt_failed: bool,
}

impl ArchiverFacts {
    /// Whether the archiver's latest attempt failed: a failure after the last success (or with
    /// no success at all).
    pub fn failing(&self) -> bool {
        self.last_attempt_failed
    }
}

/// What one probe of a member's server found, as the core reads it: plain data, filled by the
/// runtime from its prober (which parses the positions and maps the source host to a pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberFacts {
    /// When the probe ran. Facts older than [`MemberFacts::STALE_AFTER`] are not trusted:
    /// they count neither as a failed probe nor as a reachable candidate.
    pub probed_at: Timestamp,
    /// Whether the server answered.
    pub reachable: bool,
    /// The role the server reports (`None` when unreachable).
    pub role: Option<ServerRole>,
    /// Whether the server refuses writes from ordinary clients. A fenced primary reports
    /// `Primary` with `read_only: Some(true)`.
    pub read_only: Option<bool>,
    /// What the server has received (applied or not): what failover compares. PostgreSQL: the
    /// LSN on its timeline with the timeline's history; MySQL: the GTID set; MariaDB: the GTID
    /// position.
    pub position: Option<crate::position::Position>,
    /// Replication delay in seconds as the engine reports it.
    pub lag_seconds: Option<u64>,
    /// PostgreSQL: bytes received but not yet replayed.
    pub lag_bytes: Option<u64>,
    /// The member (pod name) a replica follows, when its configured source is a member.
    pub source: Option<String>,
    /// Whether replication is running (`None` on a primary).
    pub replicating: Option<bool>,
    /// The last replication error the server reports, if any.
    pub replication_error: Option<String>,
    /// The server's identity: PostgreSQL `system_identifier`, MySQL `server_uuid`, MariaDB
    /// `server_id`.
    pub server_id: Option<String>,
    /// The server's version string.
    pub version: Option<String>,
    /// MySQL/MariaDB: whether the semi-synchronous source side is on (a commit waits for a
    /// replica's acknowledgement: `rpl_semi_sync_source_enabled`, MariaDB
    /// `rpl_semi_sync_master_enabled`). `None` where there is no such switch (PostgreSQL, a
    /// server without the plugin).
    pub semi_sync_source: Option<bool>,
    /// On a PostgreSQL primary: the member replication slots it has that can still serve their
    /// standby (`member_<ordinal>`; a slot that lost its WAL is left out). `None` on a standby
    /// and where the engine has no slots (MySQL/MariaDB): then nothing is planned for slots.
    pub member_slots: Option<Vec<String>>,
    /// On a primary: the oldest position it still has the changes from (PostgreSQL: the start
    /// of its oldest WAL segment). A replica that needs changes from before it can no longer
    /// catch up by streaming ([`crate::position::Position::needs_before`]).
    pub retained_from: Option<crate::position::Position>,
    /// On a replica: its source refused it because it no longer has what the replica needs
    /// (MySQL/MariaDB error 1236: the binary logs were purged, or the replica diverged).
    pub source_lacks_history: bool,
    /// On a PostgreSQL primary with continuous archiving: what its archiver reports.
    pub archiver: Option<ArchiverFacts>,
    /// A replica: whether its replication connection checks the source's certificate against
    /// the cluster's authority; `None` on a primary or when unknown ([`crate::tls::secure_replication`]).
    pub source_tls_checked: Option<bool>,
    /// When the certificate the server serves on its TLS port expires (its notAfter); `None`
    /// when the operator's session was not TLS or the server did not say. Compared with the
    /// cluster's current server certificate ([`crate::tls::reloads`]).
    pub tls_not_after: Option<Timestamp>,
    /// When the server was first seen unreachable in the run of failed probes this one ends
    /// (`None` while it answers; a probe that answers ends the run). Failover counts
    /// `spec.failover.delaySeconds` from here.
    pub down_since: Option<Timestamp>,
    /// Whether this pod's server has answered a probe of this operator process: true on an
    /// answer; on a failed probe, what the facts before it said (same pod incarnation). The
    /// status counts a Ready pod as not ready when its server *stopped* answering
    /// ([`crate::member_status::silent`]); a server that never answered (a pod without one, or
    /// an operator started during the outage) is left to its pod's readiness.
    pub answered_before: bool,
}

impl MemberFacts {
    /// Facts older than this are no signal: neither a failed probe nor a reachable candidate.
    pub const STALE_AFTER: Duration = Duration::from_secs(30);

    /// How long a server may miss probes before it counts as gone: a missed probe on a busy
    /// machine is no news (`status.members` flapped out and back, a switchover was aborted and
    /// its target's pod stopped, on one probe that timed out). `status.members` drops the
    /// member then; a switchover gives up on its fenced primary or its target then (waiting
    /// changes nothing for safety: the old primary is fenced, the target promoted or not).
    pub const GONE_AFTER: Duration = Duration::from_secs(5);

    /// Whether these facts are recent enough at `now` to mean anything: probed at most
    /// [`MemberFacts::STALE_AFTER`] ago.
    pub fn fresh_at(&self, now: Timestamp) -> bool {
        now.duration_since(self.probed_at)
            <= k8s_openapi::jiff::SignedDuration::try_from(Self::STALE_AFTER).unwrap_or_default()
    }

    /// How long the server has not answered at `now` (from the first failed probe of the run),
    /// when it does not; `None` while it answers.
    pub fn down_for(&self, now: Timestamp) -> Option<Duration> {
        if self.reachable {
            return None;
        }
        let since = self.down_since.unwrap_or(self.probed_at);
        Some(
            now.duration_since(since)
                .try_into()
                .unwrap_or(Duration::ZERO),
        )
    }

    /// The facts of a server that did not answer a probe at `probed_at`.
    pub fn unreachable(probed_at: Timestamp) -> MemberFacts {
        MemberFacts {
            source_tls_checked: None,
            tls_not_after: None,
            probed_at,
            reachable: false,
            role: None,
            read_only: None,
            position: None,
            lag_seconds: None,
            lag_bytes: None,
            source: None,
            replicating: None,
            replication_error: None,
            server_id: None,
            version: None,
            semi_sync_source: None,
            member_slots: None,
            retained_from: None,
            source_lacks_history: false,
            archiver: None,
            down_since: Some(probed_at),
            answered_before: false,
        }
    }
}
