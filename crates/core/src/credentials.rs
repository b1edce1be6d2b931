//! The operator's own credentials: a Secret `<name>-operator` the operator creates once per
//! cluster, holding a generated admin account (what the operator and the backup Jobs connect
//! as) and the replication account (what replicas connect as). The user's password Secret
//! (`spec.passwordSecretRef`) stays read-only to the operator and holds only the superuser
//! password applications and people use.
//!
//! This module is the contract between the places that use the Secret: the rendered pods
//! (init scripts create both accounts), the backup Jobs, and the runtime (which creates the
//! Secret and reads it to dial members): its name, accounts and keys, what the runtime observes
//! of it ([`OperatorSecretState`]) and the changes to it ([`SecretChange`]). The values themselves
//! never pass through the core. It depends on no other module of the core.
//!
//! The decisions are taken with those about the other objects: [`mod@crate::plan`] creates the
//! Secret for a live cluster without it ([`SecretChange::Create`], the object rendered by
//! [`crate::render::secret`]); [`crate::finalize`] releases it when the cluster is deleted
//! ([`SecretChange::Release`]: it is kept, as the volumes are, and a cluster re-created under the
//! same name adopts it).
//!
//! Generated passwords are only ever given to a cluster that has not run: once its servers
//! hold data, they know these passwords and no others, and a Secret with new values would lock
//! the operator, the member agents (which could then not fence), the backups and every new
//! replica out. So a Secret deleted after the cluster ran ([`has_run`]) is created again only
//! with the values the runtime still holds from its last read ([`SecretChange::Restore`],
//! [`OperatorSecretState::MissingRemembered`]); when it holds none, nothing is created and the
//! cluster is degraded with [`LOST_REASON`] until a person brings the Secret back
//! (docs/operations.md, "The operator Secret").

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Suffix of the operator-owned Secret's name: `<cluster>-operator`.
pub const OPERATOR_SECRET_SUFFIX: &str = "-operator";
/// The account the operator (and backup Jobs) connect as: superuser-equivalent.
pub const ADMIN_USER: &str = database_operator_engine::OPERATOR_ACCOUNT;
/// Key of the admin account's user name in the operator Secret.
pub const ADMIN_USERNAME_KEY: &str = "admin-username";
/// Key of the admin account's password in the operator Secret.
pub const ADMIN_PASSWORD_KEY: &str = "admin-password";
/// Key of the replication account's user name in the operator Secret.
pub const REPLICATION_USERNAME_KEY: &str = "replication-username";
/// Key of the replication account's password in the operator Secret.
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";

/// Key of the cluster's backup signing key in the operator Secret (64 random hex digits): the
/// backup Jobs sign their manifests with it, restores and drills check them
/// ([`crate::backup::signature`]). Secrets created before signing existed get it added once
/// (the runtime adds the key alone, never changing another).
pub const SIGNING_KEY_KEY: &str = "backup-signing-key";

/// The name of the operator-owned Secret of the cluster `cluster`.
///
/// ```
/// assert_eq!(database_operator_core::credentials::operator_secret_name("orders"), "orders-operator");
/// ```
pub fn operator_secret_name(cluster: &str) -> String {
    [cluster, OPERATOR_SECRET_SUFFIX].concat()
}

/// The account replicas connect as (also MySQL's clone donor account).
pub const REPLICATION_USER: &str = database_operator_engine::REPLICATION_ACCOUNT;
/// Component label of the operator Secret.
pub const COMPONENT_CREDENTIALS: &str = "credentials";

/// The `Degraded` reason of a cluster that ran and whose operator Secret is gone with no values
/// to restore it from.
pub const LOST_REASON: &str = database_operator_api::conditions::reasons::OPERATOR_SECRET_LOST;

/// Whether a cluster has run: some member reached the spec's version once (the status records
/// a current version). Its servers then hold data that knows the operator Secret's passwords.
pub fn has_run(status: Option<&database_operator_api::DatabaseClusterStatus>) -> bool {
    status.is_some_and(|s| s.current_version.is_some())
}

/// What the runtime knows about the operator Secret `<name>-operator`: whether it exists and
/// whom it names as owners (from the metadata watch; never its values).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OperatorSecretState {
    /// No Secret of that name, and the runtime holds no values of it: the plan creates it for a
    /// cluster that has not run, and creates nothing for one that has ([`LOST_REASON`]).
    #[default]
    Missing,
    /// No Secret of that name, but the runtime still holds the values it last read from it (it
    /// was deleted while this operator ran): the plan creates it again with them
    /// ([`SecretChange::Restore`]).
    MissingRemembered,
    /// The Secret exists (created by this cluster, or kept from an earlier cluster of the same
    /// name whose volumes were retained: it is adopted as it is, never rewritten).
    Present {
        /// The uids of its owner references.
        owner_uids: Vec<String>,
    },
}

impl OperatorSecretState {
    /// The state of a Secret that exists with `metadata` (its owners' uids).
    pub fn present(metadata: &ObjectMeta) -> Self {
        Self::Present {
            owner_uids: metadata
                .owner_references
                .iter()
                .flatten()
                .map(|r| r.uid.clone())
                .collect(),
        }
    }
}

/// A change to the operator Secret. The runtime carries it out; the values never pass through
/// the core.
#[derive(Clone, Debug, PartialEq)]
pub enum SecretChange {
    /// Create the Secret: `secret` carries its complete metadata (name, labels, owner
    /// reference) and no data; the runtime adds generated values under [`ADMIN_USERNAME_KEY`],
    /// [`ADMIN_PASSWORD_KEY`], [`REPLICATION_USERNAME_KEY`] and [`REPLICATION_PASSWORD_KEY`].
    /// Create only: an existing Secret of that name is left as it is (never overwritten).
    Create(Box<Secret>),
    /// Create the Secret again with the values the runtime last read from it: `secret` carries
    /// its metadata and no data. Never generated values: without values to restore, the
    /// runtime creates nothing and reports an error. Create only, as [`SecretChange::Create`].
    Restore(Box<Secret>),
    /// Remove the owner reference with `owner_uid` from the Secret `name` (absent is fine), so
    /// garbage collection keeps it when its cluster goes: the volumes stay, and their data knows
    /// only these passwords.
    Release {
        /// The Secret's name.
        name: String,
        /// The uid of the deleted cluster.
        owner_uid: String,
    },
}
