//! Failover, switchover and replication mode: the spec a user writes and the status the operator
//! reports about changes of primary.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation that requests a planned switchover: the value is the pod to promote
/// (`<name>-<ordinal>`) or `auto` (the most advanced replica). The operator never edits the
/// annotation: it records the value it handled in `status.failover.handledSwitchover` and acts
/// only on a value it has not handled; removing the annotation clears the handled value, so the
/// same value written again is a new request.
pub const SWITCHOVER_ANNOTATION: &str = "database.example.com/switchover";

/// Annotation that asks for a member to be seeded again: the value is the pod
/// (`<name>-<ordinal>`, a replica or a quarantined member, never the primary). Its data
/// directory is discarded and copied from the primary; what only it holds (a quarantined
/// member's errant transactions) is lost. Handled like [`SWITCHOVER_ANNOTATION`]: the value
/// handled is recorded in `status.failover.handledReseed`, removing the annotation clears it.
/// `kubectl dbc reseed` writes it.
pub const RESEED_ANNOTATION: &str = "database.example.com/reseed";

/// The `auto` value of [`SWITCHOVER_ANNOTATION`]: promote the most advanced replica.
pub const SWITCHOVER_AUTO: &str = "auto";

/// Automatic failover: when the primary is lost, promote the most advanced replica.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Whether the operator promotes a replica when the primary is lost. Default true. When
    /// false, a lost primary leaves the cluster Degraded until it comes back; a switchover
    /// requested by annotation still runs.
    #[serde(default = "default_enabled")]
    #[garde(skip)]
    pub enabled: bool,

    /// How long, in seconds, the primary must be lost on both signals (its pod not Ready AND
    /// its server failing the operator's probe) before the operator fails over. 1 to 3600,
    /// default 10. Shorter reacts faster; longer rides out restarts and brief network cuts.
    #[serde(default = "default_delay_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    #[garde(range(min = 1, max = 3600))]
    pub delay_seconds: i32,

    /// What happens when the primary's node is lost (powered off, crashed, or cut off from the
    /// API server): `Wait` (default) or `SelfFence`. See [`NodeLossPolicy`].
    #[serde(default)]
    #[garde(skip)]
    pub node_loss: NodeLossPolicy,

    /// With `nodeLoss: SelfFence`: the lifetime, in seconds, of the primary's lease. The
    /// primary's pod renews it every quarter of this and makes its server read-only once it
    /// has not renewed for half of it; the operator counts the old primary as fenced once it
    /// has seen no renewal for the whole of it plus 2 s. 4 to 120, default 10. Shorter fails
    /// over from a lost node sooner; longer rides out longer API server outages before the
    /// primary stops taking writes. Ignored with `nodeLoss: Wait`.
    #[serde(default = "default_lease_seconds")]
    #[schemars(range(min = 4, max = 120))]
    #[garde(range(min = 4, max = 120))]
    pub lease_seconds: i32,
}

impl FailoverSpec {
    /// Whether the members run the `member-agent` that renews the primary Lease and fences its
    /// own server: failover enabled with `nodeLoss: SelfFence`. The one definition the
    /// rendering, the failover and the operator's Lease reads all use.
    pub fn self_fencing(&self) -> bool {
        self.enabled && self.node_loss == NodeLossPolicy::SelfFence
    }
}

impl crate::DatabaseClusterSpec {
    /// Whether this cluster's members self-fence ([`FailoverSpec::self_fencing`]; an unset
    /// `spec.failover` has the defaults, which do not).
    pub fn self_fencing(&self) -> bool {
        self.failover
            .as_ref()
            .is_some_and(FailoverSpec::self_fencing)
    }
}

impl Default for FailoverSpec {
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            delay_seconds: default_delay_seconds(),
            node_loss: NodeLossPolicy::default(),
            lease_seconds: default_lease_seconds(),
        }
    }
}

/// What the operator does about a primary on a node that stopped answering.
///
/// A powered-off node and a node cut off from the API server look the same from the control
/// plane, and in the second case the old primary may still accept writes from clients that
/// reach it. Kubernetes never removes the pods of such a node on its own.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum NodeLossPolicy {
    /// Fail over only once the old primary's pod is gone: the operator stops the pod, and a
    /// node that cannot confirm the stop leaves the failover blocked (`FailoverBlocked`
    /// `FenceUnconfirmed`, naming the node) until an administrator marks the node out of
    /// service or force-deletes the pod. Nothing in the database pods talks to the API server.
    #[default]
    Wait,
    /// Fail over by itself: every member pod runs a sidecar (`member-agent`) that renews the
    /// Lease `<name>-primary` while its pod is the primary, and makes the local server
    /// read-only when it cannot renew for half of `leaseSeconds`. The operator counts a lost
    /// primary as fenced once it has seen no renewal for `leaseSeconds` + 2 s, and promotes a
    /// replica without waiting for the node. Costs: each cluster gets a ServiceAccount, a Role
    /// and a RoleBinding (the pod may only get and patch its Lease), the primary writes its
    /// Lease every `leaseSeconds / 4`, and an API server outage longer than half the lease
    /// makes every such primary read-only until the operator gives its writes back.
    SelfFence,
}

fn default_lease_seconds() -> i32 {
    10
}

fn default_enabled() -> bool {
    true
}

fn default_delay_seconds() -> i32 {
    10
}

/// How replicas acknowledge the primary's commits.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// `async` (default): the primary commits without waiting for replicas; a failover may lose
    /// the last transactions the replicas had not received. `sync`: a commit waits until at
    /// least one other member has it, so the most advanced replica holds every acknowledged
    /// transaction. PostgreSQL (`synchronous_standby_names = 'ANY 1 (...)'`): writes wait while
    /// no standby is connected. MySQL/MariaDB (semi-synchronous replication): a commit waits at
    /// most 10 s, then the primary replicates asynchronously until a replica catches up. Needs
    /// two members or more (one member runs asynchronously); a change rolls the members.
    #[serde(default)]
    #[garde(skip)]
    pub mode: ReplicationMode,
}

/// Replication mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationMode {
    /// The primary does not wait for replicas.
    #[default]
    Async,
    /// A commit waits for one replica's acknowledgement.
    Sync,
}

/// What the operator reports about failovers and switchovers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverStatus {
    /// The change of primary in progress (or being considered, phase `Detecting`). Kept in
    /// status so that a restarted operator continues where the last one stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<FailoverOperation>,

    /// The last failover or switchover that finished, was aborted or was blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<FailoverRecord>,

    /// The value of the `database.example.com/switchover` annotation the operator last
    /// handled (done, refused or aborted). A request is new while the annotation differs;
    /// removing the annotation clears this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_switchover: Option<String>,

    /// Members whose data diverged from the primary's and that cannot rejoin on their own
    /// (MySQL/MariaDB errant transactions). They are labelled `quarantined`, serve no reads, and
    /// keep their volume: reseeding one is a decision the spec has to make.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<String>,

    /// The member being seeded again, or the last one seeded: a replica that can no longer
    /// catch up (its primary no longer has the WAL or binary logs it needs, and it holds
    /// nothing the primary lacks), or one a person asked for ([`RESEED_ANNOTATION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<Reseed>,

    /// The value of the `database.example.com/reseed` annotation the operator last handled
    /// (started or refused). A request is new while the annotation differs; removing the
    /// annotation clears this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_reseed: Option<String>,

    /// PostgreSQL: the `system_identifier` every member of this cluster shares, recorded from
    /// the primary the first time it answers. `initdb` creates it and every base copy keeps it,
    /// so a member that reports another holds another database (a volume initialized elsewhere
    /// or swapped in): it is quarantined, never followed and never promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// A member seeded again from the primary: its data directory discarded, a fresh copy taken.
/// The operator labels the pod `database.example.com/reseed: <started, Unix seconds>`,
/// restarts it, and its init container carries the request out once (a marker on the volume
/// records it); the label comes off when the new copy streams from the primary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reseed {
    /// The member (pod name).
    pub member: String,
    /// `Automatic` (it could no longer catch up) or `Requested` (the annotation).
    pub trigger: ReseedTrigger,
    /// Why, in words: what the member lacks and what the primary still has.
    pub reason: String,
    /// When the operator decided (the pod label's value is this time in Unix seconds).
    pub started: Time,
    /// When the new copy streamed from the primary; `None` while in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Time>,
}

impl Reseed {
    /// The value of the pod label that asks the member's init container for this reseed.
    pub fn token(&self) -> String {
        self.started.0.as_second().to_string()
    }
}

/// What started a reseed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ReseedTrigger {
    /// The replica could no longer catch up and held nothing the primary lacks.
    Automatic,
    /// A person asked with the `database.example.com/reseed` annotation.
    Requested,
}

/// A change of primary in progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverOperation {
    /// `Failover` (the primary was lost) or `Switchover` (requested).
    pub kind: FailoverKind,
    /// Where it is: `Detecting`, `Fencing`, `Promoting` or `Repointing`.
    pub phase: FailoverPhase,
    /// When it started (for a failover: when the primary's server first failed its probe, in
    /// the run of failed probes that led to it).
    pub started: Time,
    /// When it entered its current phase (retries and time limits count from here).
    pub phase_started: Time,
    /// The primary being replaced.
    pub from: String,
    /// When the old primary was confirmed fenced (its pod gone, or its server answering
    /// read-only). Only positions probed after this moment are final and compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced: Option<Time>,
    /// A switchover on an engine whose read-only fence a client can override (PostgreSQL's
    /// `BEGIN READ WRITE`): when the old primary's server was stopped, after its target caught
    /// up and before the promotion, so that nothing can be written on it any more (a clean
    /// shutdown first sends every change to the replicas streaming from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Time>,
    /// The member being promoted, once chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Why it started.
    pub reason: String,
    /// The switchover request value being handled (`auto` or a pod name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Each candidate's position and why it won or lost, once chosen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<FailoverCandidate>,
}

/// A failover or switchover that ended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRecord {
    /// `Failover` or `Switchover`.
    pub kind: FailoverKind,
    /// `Completed`, `Aborted` or `Blocked`.
    pub outcome: FailoverOutcome,
    /// When it started.
    pub started: Time,
    /// When it ended.
    pub finished: Time,
    /// The primary it replaced (or would have).
    pub from: String,
    /// The member promoted, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Why it started, and for `Aborted`/`Blocked` why it stopped.
    pub reason: String,
    /// Each candidate's position and why it won or lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<FailoverCandidate>,
}

/// One member considered for promotion.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverCandidate {
    /// Pod name.
    pub pod: String,
    /// Its replication position as the server reported it (LSN on a timeline, GTID set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<String>,
    /// `Chosen` or `Lost`.
    pub verdict: CandidateVerdict,
    /// Why: "most advanced position", "behind orders-2: lacks 24 bytes of WAL", ...
    pub reason: String,
}

/// Whether a candidate was promoted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum CandidateVerdict {
    /// Promoted.
    Chosen,
    /// Not promoted; the reason says why.
    Lost,
}

/// The kind of a change of primary.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FailoverKind {
    /// The primary was lost and a replica is promoted.
    Failover,
    /// A switchover was requested with the `database.example.com/switchover` annotation.
    Switchover,
}

/// The phase of a change of primary in progress.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FailoverPhase {
    /// The primary is lost on both signals; waiting `spec.failover.delaySeconds`.
    Detecting,
    /// Making sure the old primary accepts no writes (read-only, or its pod stopped).
    Fencing,
    /// The chosen member is being promoted.
    Promoting,
    /// The other members are being pointed at the new primary.
    Repointing,
}

/// How a change of primary ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FailoverOutcome {
    /// A new primary serves writes.
    Completed,
    /// Stopped before promoting; the old primary stays (a switchover whose target could not
    /// catch up, or whose request became impossible).
    Aborted,
    /// Not started because a safety rule forbids it; the `FailoverBlocked` condition says which.
    Blocked,
}

#[cfg(test)]
mod tests {
    use super::*;
    use garde::Validate;

    #[test]
    fn defaults_fill_an_empty_object() {
        let spec: FailoverSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, FailoverSpec::default());
        assert!(spec.enabled);
        assert_eq!(spec.delay_seconds, 10);
        assert_eq!(spec.node_loss, NodeLossPolicy::Wait);
        assert_eq!(spec.lease_seconds, 10);
        let fence: FailoverSpec =
            serde_json::from_str(r#"{"nodeLoss":"SelfFence","leaseSeconds":6}"#).unwrap();
        assert_eq!(fence.node_loss, NodeLossPolicy::SelfFence);
        assert_eq!(fence.lease_seconds, 6);
        assert!(serde_json::from_str::<FailoverSpec>(r#"{"nodeLoss":"selfFence"}"#).is_err());
        let replication: ReplicationSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(replication.mode, ReplicationMode::Async);
        let sync: ReplicationSpec = serde_json::from_str(r#"{"mode":"sync"}"#).unwrap();
        assert_eq!(sync.mode, ReplicationMode::Sync);
    }

    #[test]
    fn delay_is_between_one_second_and_an_hour() {
        for (delay, ok) in [
            (0, false),
            (1, true),
            (10, true),
            (3600, true),
            (3601, false),
        ] {
            let spec = FailoverSpec {
                delay_seconds: delay,
                ..FailoverSpec::default()
            };
            assert_eq!(spec.validate().is_ok(), ok, "delaySeconds {delay}");
        }
    }

    #[test]
    fn lease_is_between_four_seconds_and_two_minutes() {
        for (lease, ok) in [(3, false), (4, true), (10, true), (120, true), (121, false)] {
            let spec = FailoverSpec {
                node_loss: NodeLossPolicy::SelfFence,
                lease_seconds: lease,
                ..FailoverSpec::default()
            };
            assert_eq!(spec.validate().is_ok(), ok, "leaseSeconds {lease}");
        }
    }
}
