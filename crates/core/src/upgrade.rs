//! Version changes: which version each member runs, whether an upgrade is rolling, and the
//! StatefulSet rolling-update partition.
//!
//! A member's version is its pod's `app.kubernetes.io/version` label (set from the pod
//! template), else the tag of its database container image (read in `members.rs`). The rule for the `Upgrading` phase:
//! **the cluster has run a version before (`status.currentVersion` is set) and at least one
//! member pod runs a version other than `spec.version`**. A new cluster is therefore never
//! "upgrading", and the phase ends when every member runs the version of the spec.
//! `status.currentVersion` is the version every ready member runs; while members disagree it
//! keeps its previous value (the version being replaced).
//!
//! The partition is 0 for now: the StatefulSet controller replaces members from the highest
//! ordinal down. Ordering replicas before the primary, whatever its ordinal, is the upgrade
//! work this module will grow into by raising the partition.

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
    /// Whether a version change is rolling through the members (see the module docs).
    pub upgrading: bool,
    /// The value of `status.currentVersion`.
    pub current_version: Option<String>,
}

/// Versions of the members (`(version, ready)` per member pod) against the spec.
pub fn version_state(
    spec_version: &str,
    previous: Option<&str>,
    members: &[(Option<String>, bool)],
) -> VersionState {
    let behind = members
        .iter()
        .any(|(v, _)| v.as_deref().is_some_and(|v| v != spec_version));
    let upgrading = previous.is_some() && behind;
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

/// The rolling-update partition of the StatefulSet: 0, every member takes the new template.
pub fn partition(_replicas: i32) -> i32 {
    0
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
    fn partition_is_zero_for_now() {
        assert_eq!(partition(3), 0);
    }
}
