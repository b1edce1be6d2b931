//! Label keys and values the runtime selects and writes by (the same strings the core renders).

/// `app.kubernetes.io/managed-by` on every object the operator creates.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `app.kubernetes.io/part-of`.
pub const PART_OF: &str = "app.kubernetes.io/part-of";
/// `app.kubernetes.io/instance`: the cluster name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/component`.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// Value of `managed-by` and `part-of`.
pub const OPERATOR: &str = "database-operator";
/// `database.example.com/cluster`: the cluster name, on every owned object and pod.
pub const CLUSTER: &str = "database.example.com/cluster";
/// `database.example.com/role` on pods: `primary` or `replica`.
pub const ROLE: &str = "database.example.com/role";
/// `database.example.com/cluster-uid` on the backup cleanup Job: which incarnation of a
/// cluster name it belongs to.
pub const CLUSTER_UID: &str = "database.example.com/cluster-uid";

/// The label selector of the owned-object watches.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY}={OPERATOR}")
}

/// The label selector of the pod watch: every pod of some cluster.
pub fn pod_selector() -> String {
    CLUSTER.to_owned()
}
