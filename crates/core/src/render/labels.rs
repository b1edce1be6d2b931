//! Labels, selectors, annotations and owner references shared by every rendered object.
//!
//! Decides which labels an object carries (the recommended `app.kubernetes.io/*` set plus
//! `database.example.com/cluster`), which of them selectors may use (only the stable ones, never
//! the version, so an upgrade never orphans pods), and the owner reference that ties every object
//! to its `DatabaseCluster` for garbage collection.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use super::RenderContext;

/// `app.kubernetes.io/name`: the engine (`mysql` or `postgresql`).
pub const NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/instance`: the cluster name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/version`: the engine version the object is rendered for.
pub const VERSION: &str = "app.kubernetes.io/version";
/// `app.kubernetes.io/component`: `database` or `backup`.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/part-of`: always `database-operator`.
pub const PART_OF: &str = "app.kubernetes.io/part-of";
/// `app.kubernetes.io/managed-by`: always `database-operator`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `database.example.com/cluster`: the cluster name (what the runtime selects pods by).
pub const CLUSTER: &str = "database.example.com/cluster";
/// `database.example.com/role` on pods: `primary` or `replica`, set by [`crate::PodAction::LabelPod`].
pub const ROLE: &str = "database.example.com/role";

/// `database.example.com/initialize` on a pod: [`INITIALIZE_ALLOWED`] lets its init container
/// create a new, empty database when its volume is empty and it is to be the primary. Set by
/// [`crate::PodAction::SetInitialize`] only on the first primary of a cluster that has never run
/// (`status.currentVersion` unset), and taken off once it has run: a member of a cluster that
/// has held data never initializes one (an emptied or replaced volume under the primary waits
/// for the failover, then is seeded as a replica).
pub const INITIALIZE: &str = "database.example.com/initialize";
/// The value of [`INITIALIZE`] that allows it.
pub const INITIALIZE_ALLOWED: &str = "allowed";

/// `database.example.com/reseed` on a member pod: its init container discards the data
/// directory and copies the primary again, once per value (the request's start in Unix
/// seconds, recorded on the volume when done). Set by [`crate::PodAction::SetReseed`] while
/// `status.failover.reseed` is in progress for the member, before its role label, and taken
/// off when it is done.
pub const RESEED: &str = "database.example.com/reseed";

/// `database.example.com/template` on the pod template, so on every member pod: a hash of the
/// rest of the template ([`super::statefulset::PodTemplate`]). A member whose pod carries
/// another value runs an older template; the roll ([`crate::upgrade`]) replaces it, replicas
/// first and the primary after a switchover, whatever changed (resources, configuration,
/// scheduling, an image).
pub const TEMPLATE: &str = "database.example.com/template";

/// Pod-template annotation carrying a hash of the rendered ConfigMap data: a configuration
/// change changes the template and so rolls the pods.
pub const CONFIG_HASH: &str = "database.example.com/config-hash";
/// Pod-template annotation carrying the fingerprint of the password Secret key (never the
/// password): a new password changes the template and so rolls the pods.
pub const PASSWORD_FINGERPRINT: &str = "database.example.com/password-fingerprint";

/// Value of `part-of` and `managed-by`.
pub const OPERATOR: &str = "database-operator";
/// Component of the database pods and their objects.
pub const COMPONENT_DATABASE: &str = "database";
/// Component of the backup CronJob and its pods.
pub const COMPONENT_BACKUP: &str = "backup";
/// Component of the restore drill CronJob `<name>-verify` and its pods.
pub const COMPONENT_BACKUP_VERIFY: &str = "backup-verify";
/// Component of the backup cleanup Job of a deleted cluster.
pub const COMPONENT_BACKUP_CLEANUP: &str = "backup-cleanup";
/// `database.example.com/cluster-uid` on the backup cleanup Job: which incarnation of a
/// cluster name it belongs to.
pub const CLUSTER_UID: &str = "database.example.com/cluster-uid";

/// Every label of an object of `component` (version included).
pub fn labels(cluster: &RenderContext<'_>, component: &str) -> BTreeMap<String, String> {
    // In key order: the map is built without reordering.
    BTreeMap::from([
        (COMPONENT.to_owned(), component.to_owned()),
        (INSTANCE.to_owned(), cluster.name.to_owned()),
        (MANAGED_BY.to_owned(), OPERATOR.to_owned()),
        (NAME.to_owned(), cluster.engine.as_str().to_owned()),
        (PART_OF.to_owned(), OPERATOR.to_owned()),
        (VERSION.to_owned(), cluster.version.to_owned()),
        (CLUSTER.to_owned(), cluster.name.to_owned()),
    ])
}

/// The labels that never change over a cluster's life: what selectors match on.
///
/// `component` is part of the selector so that backup job pods (which carry the cluster labels
/// too) are never counted by the Services, the PodDisruptionBudget or the StatefulSet.
pub fn stable(cluster: &RenderContext<'_>, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPONENT.to_owned(), component.to_owned()),
        (INSTANCE.to_owned(), cluster.name.to_owned()),
        (NAME.to_owned(), cluster.engine.as_str().to_owned()),
        (CLUSTER.to_owned(), cluster.name.to_owned()),
    ])
}

/// Selector of the database pods (all members, whatever their role).
pub fn member_selector(cluster: &RenderContext<'_>) -> BTreeMap<String, String> {
    stable(cluster, COMPONENT_DATABASE)
}

/// The same as a `LabelSelector`.
pub fn member_label_selector(cluster: &RenderContext<'_>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(member_selector(cluster)),
        ..LabelSelector::default()
    }
}

/// The controller owner reference to the cluster: garbage collection removes the object with
/// the cluster, and `blockOwnerDeletion` keeps the cluster until its dependents are gone.
pub fn owner_reference(cluster: &RenderContext<'_>) -> OwnerReference {
    OwnerReference {
        api_version: database_operator_api::API_VERSION.to_owned(),
        kind: database_operator_api::KIND.to_owned(),
        name: cluster.name.to_owned(),
        uid: cluster.uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
