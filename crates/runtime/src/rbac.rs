//! The API calls the operator makes, as RBAC rules. `deploy/rbac/cluster_role.yaml` and
//! `deploy/rbac/leader_election_role.yaml` must grant exactly these (a test compares them, and
//! the mock-API-server tests check that every request the client sends is covered). Why each
//! rule exists is documented in `docs/operations.md`.

/// One RBAC rule: API group (`""` for core), resource, verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API group.
    pub group: &'static str,
    /// Resource (plural, with `/subresource` where applicable).
    pub resource: &'static str,
    /// Verbs.
    pub verbs: &'static [&'static str],
}

/// Cluster-wide rules (ClusterRole `database-operator`).
pub const CLUSTER_RULES: &[Rule] = &[
    // Watch clusters; finalizer add/remove is a JSON patch on the object.
    Rule {
        group: "database.example.com",
        resource: "databaseclusters",
        verbs: &["get", "list", "watch", "patch"],
    },
    // Status is written with server-side apply on the status subresource.
    Rule {
        group: "database.example.com",
        resource: "databaseclusters/status",
        verbs: &["patch"],
    },
    // Owned objects carry blockOwnerDeletion, which needs update on the owner's finalizers.
    Rule {
        group: "database.example.com",
        resource: "databaseclusters/finalizers",
        verbs: &["update"],
    },
    // Owned objects: watched, server-side applied (an apply that creates the object is also
    // authorised as `create`), pruned; read once (get) before the first apply of an object the
    // watches do not show, so another owner's object of that name is never taken over.
    Rule {
        group: "apps",
        resource: "statefulsets",
        verbs: &["get", "list", "watch", "create", "patch"],
    },
    Rule {
        group: "",
        resource: "services",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "",
        resource: "configmaps",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "batch",
        resource: "cronjobs",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "policy",
        resource: "poddisruptionbudgets",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // The NetworkPolicy `<name>`: watched, applied, deleted when `spec.networkPolicy.enabled`
    // turns false.
    Rule {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // Pods of clusters: watched; the role label is set with a merge patch; failover deletes the
    // pod of a lost primary (its fence) and of a PostgreSQL member that must restart as a standby.
    Rule {
        group: "",
        resource: "pods",
        verbs: &["list", "watch", "patch", "delete"],
    },
    // The members' data volume claims: watched; a larger `spec.storage.size` raises their
    // request with a merge patch. Never created or deleted by the operator (the StatefulSet
    // makes them, and they are retained).
    Rule {
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["list", "watch", "patch"],
    },
    // StorageClasses: watched, for whether a claim may grow (`allowVolumeExpansion`).
    Rule {
        group: "storage.k8s.io",
        resource: "storageclasses",
        verbs: &["list", "watch"],
    },
    // Secrets: metadata watch, one GET of a referenced Secret when it changed. The operator
    // Secret `<name>-operator` of generated credentials is created once (never updated); its
    // owner reference to a deleted cluster is removed with one patch, so it stays with the
    // retained volumes. No update, no delete: an existing Secret's values are never rewritten.
    Rule {
        group: "",
        resource: "secrets",
        verbs: &["get", "list", "watch", "create", "patch"],
    },
    // The backup cleanup Job of deletionPolicy Delete: watched (the finalizer waits for it),
    // created, and deleted when a leftover of an earlier cluster of the same name is in the way.
    // Backup Jobs: watched (status.lastBackup, BackupHealthy), created for backup-now.
    Rule {
        group: "batch",
        resource: "jobs",
        verbs: &["list", "watch", "create", "delete"],
    },
    // `spec.failover.nodeLoss: SelfFence`: the member agents' ServiceAccount, Role and
    // RoleBinding, and the primary Lease they renew: watched, applied, pruned when the policy
    // goes back to Wait. The prober GETs each such Lease every round (a read after its expiry,
    // not a cache). The operator holds every permission the Role grants (get and patch of
    // Leases), so creating and binding it needs no `escalate` or `bind`.
    Rule {
        group: "",
        resource: "serviceaccounts",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "rbac.authorization.k8s.io",
        resource: "roles",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "rbac.authorization.k8s.io",
        resource: "rolebindings",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // `--metrics-secure`: a reader's bearer token is reviewed (who is it?) and its user's
    // permission to `get /metrics` checked, once a minute per token.
    Rule {
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        verbs: &["create"],
    },
    Rule {
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        verbs: &["create"],
    },
    // Events (events.k8s.io/v1), with series updates as patches.
    Rule {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
    },
];

/// Rules in the operator's own namespace (Role `database-operator-leader-election`).
pub const LEADER_ELECTION_RULES: &[Rule] = &[Rule {
    group: "coordination.k8s.io",
    resource: "leases",
    verbs: &["get", "create", "patch"],
}];

/// Whether `rules` allow `verb` on `group`/`resource`.
pub fn allows(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
    rules
        .iter()
        .any(|r| r.group == group && r.resource == resource && r.verbs.contains(&verb))
}

/// Expands rules into sorted `(group, resource, verb)` triples.
pub fn triples(rules: &[Rule]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = rules
        .iter()
        .flat_map(|r| {
            r.verbs
                .iter()
                .map(move |v| (r.group.to_owned(), r.resource.to_owned(), (*v).to_owned()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
