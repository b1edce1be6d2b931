//! Members: which pods are members, which of them is the primary, and the role labels.
//!
//! Decides which observed pods are members of the StatefulSet (named `<name>-<ordinal>`, not a
//! backup job's pod), which one is the primary (`status.primaryPod` while it names a member the
//! StatefulSet keeps, else ordinal 0), what the members run and how many are ready, and the
//! role labels to set, demotions first so that no two pods ever carry the primary label.
//! When the primary is lost or a switchover is requested, [`crate::failover`] decides and its
//! outcome replaces the primary chosen here.

use database_operator_api::Engine;

use crate::render::{EngineSpec, RenderContext, labels};
use crate::upgrade::{self, VersionState};
use crate::{MemberPod, MemberRole, Step};

/// A member pod of the StatefulSet, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// Pod name, `<name>-<ordinal>`.
    pub name: &'a str,
    /// Ordinal from the name.
    pub ordinal: i32,
    /// The pod's `Ready` condition is True.
    pub ready: bool,
    /// The pod has a deletion timestamp.
    pub terminating: bool,
    /// The pod's `database.example.com/role` label.
    pub role: Option<&'a str>,
    /// The version it runs ([`pod_version`]).
    pub version: Option<String>,
    /// The pod's creation time ([`MemberPod::created`]).
    pub created: Option<k8s_openapi::jiff::Timestamp>,
    /// The node the pod runs on ([`MemberPod::node`]).
    pub node: Option<&'a str>,
    /// When the pod's grace period ends, once it is being deleted ([`MemberPod::deletion`]).
    pub deletion: Option<k8s_openapi::jiff::Timestamp>,
}

/// The members of a cluster and its primary.
#[derive(Clone, Debug)]
pub struct Membership<'a> {
    /// Every member pod, by ordinal (terminating ones and those above `spec.replicas`
    /// included).
    pub members: Vec<Member<'a>>,
    /// The pod chosen as primary ([`choose_primary`]).
    pub primary: String,
    /// `spec.replicas`.
    pub replicas: i32,
}

impl<'a> Membership<'a> {
    /// The members of the cluster of `ctx` among `pods`, and the primary.
    pub fn of(
        ctx: &RenderContext<'_>,
        pods: &'a [MemberPod],
        previous_primary: Option<&str>,
    ) -> Self {
        let replicas = ctx.spec.replicas;
        Self {
            members: members(ctx.name, ctx.engine, pods),
            primary: choose_primary(ctx, previous_primary, replicas),
            replicas,
        }
    }

    /// Members the StatefulSet keeps (ordinal below `spec.replicas`) that are not terminating.
    fn in_spec(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members
            .iter()
            .filter(|m| m.ordinal < self.replicas && !m.terminating)
    }

    /// Members in spec whose pod is Ready.
    pub fn ready(&self) -> usize {
        self.in_spec().filter(|m| m.ready).count()
    }

    /// Whether the primary is a ready member in spec.
    pub fn primary_ready(&self) -> bool {
        self.in_spec().any(|m| m.ready && m.name == self.primary)
    }

    /// Ready members in spec other than the primary.
    pub fn ready_replicas(&self) -> usize {
        self.in_spec()
            .filter(|m| m.ready && m.name != self.primary)
            .count()
    }

    /// What the members in spec run, against `spec_version` and the status's current version.
    /// A member whose pod is missing or terminating (being replaced) counts as not Ready with
    /// an unknown version.
    pub fn versions(&self, spec_version: &str, current_version: Option<&str>) -> VersionState {
        let mut member_versions: Vec<(Option<String>, bool)> = self
            .in_spec()
            .map(|m| (m.version.clone(), m.ready))
            .collect();
        let missing = usize::try_from(self.replicas)
            .unwrap_or(0)
            .saturating_sub(member_versions.len());
        member_versions.extend(std::iter::repeat_n((None, false), missing));
        upgrade::version_state(spec_version, current_version, &member_versions)
    }

    /// The role labels to set ([`label_steps`]): `label_primary` carries the primary label
    /// (none while failover fences the old primary and promotes a new one), the `quarantined`
    /// members are labelled so.
    pub fn label_steps(&self, label_primary: Option<&str>, quarantined: &[String]) -> Vec<Step> {
        label_steps(&self.members, label_primary, quarantined)
    }
}

/// The member pods of the cluster's StatefulSet, by ordinal. Other pods carrying the cluster
/// label (backup jobs) are not members.
pub fn members<'a>(name: &str, engine: Engine, pods: &'a [MemberPod]) -> Vec<Member<'a>> {
    let mut members: Vec<Member<'a>> = pods
        .iter()
        .filter_map(|pod| {
            let ordinal = parse_ordinal(name, &pod.name)?;
            if pod
                .labels
                .get(labels::COMPONENT)
                .is_some_and(|c| c != labels::COMPONENT_DATABASE)
            {
                return None;
            }
            Some(Member {
                name: &pod.name,
                ordinal,
                ready: pod.ready,
                terminating: pod.terminating,
                role: pod.labels.get(labels::ROLE).map(String::as_str),
                version: pod_version(pod, engine),
                created: pod.created,
                node: pod.node.as_deref(),
                deletion: pod.deletion,
            })
        })
        .collect();
    members.sort_by_key(|m| m.ordinal);
    members
}

/// The version a member pod runs, when it can be told: its `app.kubernetes.io/version` label,
/// else the tag of its database container's image.
pub fn pod_version(pod: &MemberPod, engine: Engine) -> Option<String> {
    if let Some(version) = pod.labels.get(labels::VERSION) {
        return Some(version.clone());
    }
    let image = pod.images.get(EngineSpec::of(engine).container_name)?;
    upgrade::image_tag(image).map(str::to_owned)
}

/// The ordinal of `pod` when it is named `<cluster>-<ordinal>`.
pub fn parse_ordinal(cluster: &str, pod: &str) -> Option<i32> {
    let digits = pod.strip_prefix(cluster)?.strip_prefix('-')?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

/// The primary: `status.primaryPod` while it names a member the StatefulSet keeps (ordinal below
/// `spec.replicas`), even if its pod is momentarily gone (being recreated: its volume holds the
/// primary's data); otherwise ordinal 0. Choosing among live replicas when the primary is lost
/// is failover's decision, not this function's.
pub fn choose_primary(
    cluster: &RenderContext<'_>,
    previous: Option<&str>,
    replicas: i32,
) -> String {
    match previous.and_then(|p| parse_ordinal(cluster.name, p).map(|o| (p, o))) {
        Some((pod, ordinal)) if ordinal < replicas => pod.to_owned(),
        _ => cluster.pod_name(0),
    }
}

/// Role labels to set so that exactly the chosen pod (or none) is labelled primary and the
/// quarantined members are labelled `quarantined` (out of the read-only Service). Demotions
/// come first, so at no point do two pods carry the primary label (the read-write Service would
/// send writes to both).
pub fn label_steps(
    members: &[Member<'_>],
    primary: Option<&str>,
    quarantined: &[String],
) -> Vec<Step> {
    let mut demote = Vec::new();
    let mut promote = Vec::new();
    let mut rest = Vec::new();
    for member in members.iter().filter(|m| !m.terminating) {
        let want = if Some(member.name) == primary {
            MemberRole::Primary
        } else if quarantined.iter().any(|q| q == member.name) {
            MemberRole::Quarantined
        } else {
            MemberRole::Replica
        };
        if member.role == Some(want.as_str()) {
            continue;
        }
        let step = Step::LabelPod {
            pod: member.name.to_owned(),
            role: want,
        };
        match (member.role, want) {
            (Some("primary"), MemberRole::Replica | MemberRole::Quarantined) => demote.push(step),
            (_, MemberRole::Primary) => promote.push(step),
            _ => rest.push(step),
        }
    }
    // A terminating pod that still carries the primary label is demoted too: it may linger.
    for member in members
        .iter()
        .filter(|m| m.terminating && m.role == Some("primary") && Some(m.name) != primary)
    {
        demote.insert(
            0,
            Step::LabelPod {
                pod: member.name.to_owned(),
                role: MemberRole::Replica,
            },
        );
    }
    demote.into_iter().chain(promote).chain(rest).collect()
}
