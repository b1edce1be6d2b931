//! The objects the benchmark creates and changes: N DatabaseClusters (half MySQL, half
//! PostgreSQL, 3 replicas, backups on) with their password Secrets, and the churn applied to a
//! tenth of them.

use std::fmt::Write as _;

/// Namespace every benchmark object lives in.
pub const NAMESPACE: &str = "dbbench";
/// Replicas of every cluster at creation.
pub const REPLICAS: i32 = 3;
/// Replicas of a cluster the churn scales.
pub const SCALED_REPLICAS: i32 = 5;

/// Engine and version of a benchmark cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineVersions {
    /// `spec.engine`.
    pub engine: &'static str,
    /// `spec.version` at creation.
    pub version: &'static str,
}

const MYSQL: EngineVersions = EngineVersions {
    engine: "mysql",
    version: "8.4.0",
};
const POSTGRESQL: EngineVersions = EngineVersions {
    engine: "postgresql",
    version: "16.2",
};

/// Name of cluster `i`.
pub fn cluster_name(i: usize) -> String {
    format!("bench-{i:04}")
}

/// Engine of cluster `i`: two MySQL, two PostgreSQL, and so on.
pub fn engine_of(i: usize) -> EngineVersions {
    if i % 4 < 2 { MYSQL } else { POSTGRESQL }
}

/// What the spec of one cluster asks for (what "settled" is checked against).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.version`.
    pub version: String,
}

/// The expected state of cluster `i` right after creation.
pub fn initial(i: usize) -> Expected {
    Expected {
        replicas: REPLICAS,
        version: engine_of(i).version.to_string(),
    }
}

/// The Namespace, as YAML.
pub fn namespace_manifest() -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n")
}

/// Cluster `i` and its password Secret, as multi-document YAML.
pub fn cluster_manifest(i: usize) -> String {
    let name = cluster_name(i);
    let ev = engine_of(i);
    let mut out = String::new();
    let _ = write!(
        out,
        "---
apiVersion: v1
kind: Secret
metadata:
  name: {name}-password
  namespace: {NAMESPACE}
type: Opaque
stringData:
  password: bench-password-{i}
---
apiVersion: database.example.com/v1alpha1
kind: DatabaseCluster
metadata:
  name: {name}
  namespace: {NAMESPACE}
spec:
  engine: {engine}
  version: \"{version}\"
  replicas: {REPLICAS}
  storage:
    size: 1Gi
    storageClassName: standard
  passwordSecretRef:
    name: {name}-password
    key: password
  backup:
    schedule: \"0 3 * * *\"
    retention: 7
    s3Bucket: bench-backups
",
        engine = ev.engine,
        version = ev.version,
    );
    out
}

/// How the churn changes one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Churn {
    /// `spec.replicas` 3 -> 5.
    Scale,
    /// A new memory limit: every member is replaced, one at a time, as a version upgrade
    /// replaced them before upgrades waited for each server to report its new version (kwok's
    /// pods run no server, so an upgrade can never complete on them).
    Resize,
}

/// The memory limit the churn's [`Churn::Resize`] sets.
pub const RESIZED_MEMORY: &str = "1536Mi";

/// The clusters the churn changes (every tenth; at least one), alternating scale and resize in
/// pairs so both engines get both changes.
pub fn churn_plan(clusters: usize) -> Vec<(usize, Churn)> {
    let count = (clusters / 10).max(1).min(clusters);
    (0..count)
        .map(|k| {
            let i = k * 10 % clusters.max(1);
            let churn = if (k / 2) % 2 == 0 {
                Churn::Scale
            } else {
                Churn::Resize
            };
            (i, churn)
        })
        .collect()
}

/// The merge patch for `churn` on cluster `i`, and what its spec then asks for.
pub fn churn_patch(i: usize, churn: Churn) -> (String, Expected) {
    let ev = engine_of(i);
    match churn {
        Churn::Scale => (
            format!("{{\"spec\":{{\"replicas\":{SCALED_REPLICAS}}}}}"),
            Expected {
                replicas: SCALED_REPLICAS,
                version: ev.version.to_string(),
            },
        ),
        Churn::Resize => (
            format!(
                "{{\"spec\":{{\"resources\":{{\"limits\":{{\"memory\":\"{RESIZED_MEMORY}\"}}}}}}}}"
            ),
            Expected {
                replicas: REPLICAS,
                version: ev.version.to_string(),
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use database_operator_api::DatabaseCluster;

    #[test]
    fn every_manifest_parses_as_a_valid_cluster() {
        for i in 0..8 {
            let text = cluster_manifest(i);
            let docs: Vec<&str> = text.split("\n---\n").collect();
            assert_eq!(docs.len(), 2, "{text}");
            let cluster: DatabaseCluster = serde_saphyr::from_str(docs[1]).unwrap();
            assert_eq!(
                cluster.metadata.name.as_deref(),
                Some(cluster_name(i).as_str())
            );
            assert_eq!(cluster.spec.replicas, REPLICAS);
            let checked = database_operator_api::validate::validate_create(&cluster);
            assert!(checked.is_ok(), "cluster {i}: {checked:?}");
        }
    }

    #[test]
    fn churn_touches_a_tenth_with_both_changes_on_both_engines() {
        let plan = churn_plan(100);
        assert_eq!(plan.len(), 10);
        let mut seen = std::collections::BTreeSet::new();
        for (i, churn) in &plan {
            assert!(*i < 100);
            seen.insert((engine_of(*i).engine, *churn == Churn::Scale));
        }
        assert_eq!(seen.len(), 4, "{plan:?}");
        let indexes: std::collections::BTreeSet<usize> = plan.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes.len(), plan.len(), "no cluster twice");
        assert_eq!(churn_plan(5).len(), 1);
    }

    #[test]
    fn churned_specs_stay_valid() {
        for (i, churn) in churn_plan(40) {
            let (patch, expected) = churn_patch(i, churn);
            let mut doc: serde_json::Value =
                serde_saphyr::from_str(cluster_manifest(i).split("\n---\n").nth(1).unwrap())
                    .unwrap();
            let patch: serde_json::Value = serde_json::from_str(&patch).unwrap();
            for (k, v) in patch["spec"].as_object().unwrap() {
                doc["spec"][k] = v.clone();
            }
            let old: DatabaseCluster =
                serde_saphyr::from_str(cluster_manifest(i).split("\n---\n").nth(1).unwrap())
                    .unwrap();
            let new: DatabaseCluster = serde_json::from_value(doc).unwrap();
            assert_eq!(new.spec.replicas, expected.replicas);
            assert_eq!(new.spec.version, expected.version);
            let checked = database_operator_api::validate::validate_update(&old, &new);
            assert!(checked.is_ok(), "{churn:?} on {i}: {checked:?}");
        }
    }
}
