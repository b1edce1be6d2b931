//! Members: which pods are members, which of them is the primary, and the role labels.
//!
//! Decides which observed pods are members of the StatefulSet (named `<name>-<ordinal>`, not a
//! backup job's pod), which one is the primary (`status.primaryPod` while it names a member the
//! StatefulSet keeps, else ordinal 0), what the members run and how many are ready, and the
//! role labels to set, demotions first so that no two pods ever carry the primary label.
//! When the primary is lost or a switchover is requested, [`crate::failover`] decides and its
//! outcome replaces the primary chosen here.

use database_operator_api::Engine;

use crate::render::{RenderContext, labels};
use crate::{ContainerExit, MemberPod, MemberRole, PodAction};

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
    /// The hash of the pod template it runs (its [`labels::TEMPLATE`] label; `None` on a pod of
    /// an earlier release, which has none).
    pub template: Option<&'a str>,
    /// The pod's creation time ([`MemberPod::created`]).
    pub created: Option<k8s_openapi::jiff::Timestamp>,
    /// The node the pod runs on ([`MemberPod::node`]).
    pub node: Option<&'a str>,
    /// When the pod's grace period ends, once it is being deleted ([`MemberPod::deletion`]).
    pub deletion: Option<k8s_openapi::jiff::Timestamp>,
    /// The pod carries [`labels::INITIALIZE`] = [`labels::INITIALIZE_ALLOWED`].
    pub initialize: bool,
    /// The pod's [`labels::RESEED`] label: the reseed request its init container carries out.
    pub reseed: Option<&'a str>,
    /// The database container's last failed exit ([`MemberPod::exits`]), when its current or
    /// last run failed.
    pub server_exit: Option<&'a ContainerExit>,
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
            primary: choose_primary(ctx, previous_primary),
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

    /// Members in spec whose pod is Ready and whose server is not in `silent`
    /// ([`crate::member_status::silent`]).
    pub fn ready_and_answering(&self, silent: &[&str]) -> usize {
        self.in_spec()
            .filter(|m| m.ready && !silent.contains(&m.name))
            .count()
    }

    /// Whether the primary's pod is Ready (in spec, or left out by a scale-down that waits for
    /// it to move).
    pub fn primary_ready(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.ready && !m.terminating && m.name == self.primary)
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
        version_state(spec_version, current_version, &member_versions)
    }

    /// The role labels to set ([`role_labels`]): `label_primary` carries the primary label
    /// (none while failover fences the old primary and promotes a new one), the `quarantined`
    /// members are labelled so.
    pub fn role_labels(
        &self,
        label_primary: Option<&str>,
        quarantined: &[String],
    ) -> Vec<PodAction> {
        role_labels(&self.members, label_primary, quarantined)
    }

    /// The [`labels::INITIALIZE`] labels to set ([`initialize_labels`]).
    pub fn initialize_labels(&self, label_primary: Option<&str>, has_run: bool) -> Vec<PodAction> {
        initialize_labels(&self.members, label_primary, has_run)
    }
}

/// The [`labels::RESEED`] labels to set: `token` on the member `reseeding` (the reseed in
/// progress), none on every other member.
pub fn reseed_labels(members: &[Member<'_>], reseeding: Option<(&str, &str)>) -> Vec<PodAction> {
    members
        .iter()
        .filter(|m| !m.terminating)
        .filter_map(|m| {
            let want = reseeding
                .filter(|(pod, _)| *pod == m.name)
                .map(|(_, token)| token);
            (want != m.reseed).then(|| PodAction::SetReseed {
                pod: m.name.to_owned(),
                token: want.map(str::to_owned),
            })
        })
        .collect()
}

/// Who may initialize a new database ([`labels::INITIALIZE`]): the member labelled primary
/// (`primary`), and only while the cluster has never run (`has_run`: `status.currentVersion`
/// is set). Once it has run, the label comes off every pod that carries it, so that no member
/// ever creates an empty database in place of one that held data.
pub fn initialize_labels(
    members: &[Member<'_>],
    primary: Option<&str>,
    has_run: bool,
) -> Vec<PodAction> {
    members
        .iter()
        .filter(|m| !m.terminating)
        .filter_map(|m| {
            let want = !has_run && Some(m.name) == primary;
            (want != m.initialize).then(|| PodAction::SetInitialize {
                pod: m.name.to_owned(),
                allowed: want,
            })
        })
        .collect()
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
                template: pod.labels.get(labels::TEMPLATE).map(String::as_str),
                created: pod.created,
                node: pod.node.as_deref(),
                deletion: pod.deletion,
                initialize: pod.labels.get(labels::INITIALIZE).map(String::as_str)
                    == Some(labels::INITIALIZE_ALLOWED),
                reseed: pod.labels.get(labels::RESEED).map(String::as_str),
                server_exit: pod
                    .exits
                    .get(database_operator_engine::of(engine).container_name()),
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
    let image = pod
        .images
        .get(database_operator_engine::of(engine).container_name())?;
    image_tag(image).map(str::to_owned)
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

/// The primary: `status.primaryPod` when it names a member of the cluster, even if its pod is
/// momentarily gone (being recreated: its volume holds the primary's data), and also when a
/// smaller `spec.replicas` leaves it out: the scale-down then waits for a switchover to a member
/// that stays (the StatefulSet keeps the primary's pod until then: `plan/passes.rs`), and a
/// primary whose pod is gone is failover's to replace. Labelling another member primary here
/// would point the read-write Service at a replica while the real primary still accepts
/// writes. Ordinal 0 for a cluster that has none yet.
pub fn choose_primary(cluster: &RenderContext<'_>, previous: Option<&str>) -> String {
    match previous.filter(|p| parse_ordinal(cluster.name, p).is_some()) {
        Some(pod) => pod.to_owned(),
        None => cluster.pod_name(0),
    }
}

/// Role labels to set so that exactly the chosen pod (or none) is labelled primary and the
/// quarantined members are labelled `quarantined` (out of the read-only Service). Demotions
/// come first, so at no point do two pods carry the primary label (the read-write Service would
/// send writes to both).
pub fn role_labels(
    members: &[Member<'_>],
    primary: Option<&str>,
    quarantined: &[String],
) -> Vec<PodAction> {
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
        let step = PodAction::LabelPod {
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
            PodAction::LabelPod {
                pod: member.name.to_owned(),
                role: MemberRole::Replica,
            },
        );
    }
    demote.into_iter().chain(promote).chain(rest).collect()
}

/// The tag of an image reference (`registry:5000/mysql:8.0.36` gives `8.0.36`), ignoring a
/// digest.
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':')
        .map(|(_, tag)| tag)
        .filter(|t| !t.is_empty())
}

/// What the members run compared with the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionState {
    /// Whether a version change is rolling through the members (the rule for the `Upgrading`
    /// phase, see [`crate::upgrade`]).
    pub upgrading: bool,
    /// The value of `status.currentVersion`.
    pub current_version: Option<String>,
}

/// Versions of the members (`(version, ready)` per member in spec; a member being replaced is
/// `(None, false)`) against the spec.
///
/// Once the cluster has a current version, it moves to another one only when every member is
/// Ready and runs it: while a member is being replaced (missing, not Ready, version unknown)
/// and the spec asks for another version than the current one, the cluster is still upgrading.
pub fn version_state(
    spec_version: &str,
    previous: Option<&str>,
    members: &[(Option<String>, bool)],
) -> VersionState {
    let behind = members
        .iter()
        .any(|(v, _)| v.as_deref().is_some_and(|v| v != spec_version));
    let settled = members.iter().all(|(v, ready)| *ready && v.is_some());
    let unsettled = previous.is_some_and(|p| p != spec_version) && !settled;
    let upgrading = previous.is_some() && (behind || unsettled);
    let mut ready = members
        .iter()
        .filter(|(_, r)| *r)
        .filter_map(|(v, _)| v.as_deref());
    let current_version = match ready.next() {
        Some(first) if !upgrading && ready.all(|v| v == first) => Some(first.to_owned()),
        _ => previous.map(str::to_owned),
    };
    VersionState {
        upgrading,
        current_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags() {
        assert_eq!(image_tag("docker.io/library/mysql:8.0.36"), Some("8.0.36"));
        assert_eq!(image_tag("registry:5000/postgres:16.3"), Some("16.3"));
        assert_eq!(image_tag("registry:5000/postgres"), None);
        assert_eq!(image_tag("postgres:16.3@sha256:abc"), Some("16.3"));
    }

    fn m(v: &str, ready: bool) -> (Option<String>, bool) {
        (Some(v.to_owned()), ready)
    }

    #[test]
    fn new_cluster_is_not_upgrading() {
        let s = version_state("8.0.36", None, &[m("8.0.36", true)]);
        assert_eq!(
            s,
            VersionState {
                upgrading: false,
                current_version: Some("8.0.36".into())
            }
        );
        let s = version_state("8.0.36", None, &[]);
        assert_eq!(
            s,
            VersionState {
                upgrading: false,
                current_version: None
            }
        );
    }

    #[test]
    fn rolling_keeps_the_replaced_version() {
        let s = version_state(
            "8.0.37",
            Some("8.0.36"),
            &[m("8.0.36", true), m("8.0.37", true), m("8.0.36", false)],
        );
        assert_eq!(
            s,
            VersionState {
                upgrading: true,
                current_version: Some("8.0.36".into())
            }
        );
        // Not started yet: every member still runs the old version.
        let s = version_state(
            "8.0.37",
            Some("8.0.36"),
            &[m("8.0.36", true), m("8.0.36", true)],
        );
        assert!(s.upgrading);
        assert_eq!(s.current_version.as_deref(), Some("8.0.36"));
    }

    #[test]
    fn the_current_version_moves_only_when_every_member_runs_the_new_one() {
        // The last member (the former primary) is being replaced: the others already run the
        // new version, but the roll is not over.
        let s = version_state(
            "15.20",
            Some("15.18"),
            &[(None, false), m("15.20", true), m("15.20", true)],
        );
        assert!(s.upgrading);
        assert_eq!(s.current_version.as_deref(), Some("15.18"));
        // Back and Ready: done.
        let s = version_state(
            "15.20",
            Some("15.18"),
            &[m("15.20", true), m("15.20", true), m("15.20", true)],
        );
        assert!(!s.upgrading);
        assert_eq!(s.current_version.as_deref(), Some("15.20"));
        // A member replaced without a version change (a deleted pod) is no upgrade.
        let s = version_state("15.20", Some("15.20"), &[(None, false), m("15.20", true)]);
        assert!(!s.upgrading);
        assert_eq!(s.current_version.as_deref(), Some("15.20"));
        // A new cluster whose members start one after another takes the version of the first.
        let s = version_state("15.20", None, &[m("15.20", true), (None, false)]);
        assert!(!s.upgrading);
        assert_eq!(s.current_version.as_deref(), Some("15.20"));
    }

    #[test]
    fn finished_upgrade_moves_the_current_version() {
        let s = version_state(
            "8.0.37",
            Some("8.0.36"),
            &[m("8.0.37", true), m("8.0.37", true)],
        );
        assert_eq!(
            s,
            VersionState {
                upgrading: false,
                current_version: Some("8.0.37".into())
            }
        );
    }

    #[test]
    fn the_reseed_label_is_on_the_member_being_reseeded_only() {
        let member = |name: &'static str, ordinal: i32, reseed: Option<&'static str>| Member {
            name,
            ordinal,
            ready: true,
            terminating: false,
            role: Some("replica"),
            version: None,
            template: None,
            created: None,
            node: None,
            deletion: None,
            initialize: false,
            reseed,
            server_exit: None,
        };
        let members = [
            member("db-0", 0, None),
            member("db-1", 1, Some("1800000000")),
            member("db-2", 2, None),
        ];
        assert_eq!(
            reseed_labels(&members, Some(("db-2", "1800000100"))),
            [
                PodAction::SetReseed {
                    pod: "db-1".into(),
                    token: None
                },
                PodAction::SetReseed {
                    pod: "db-2".into(),
                    token: Some("1800000100".into())
                },
            ]
        );
        assert_eq!(reseed_labels(&members, Some(("db-1", "1800000000"))), []);
    }
}
