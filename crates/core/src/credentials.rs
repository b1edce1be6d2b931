//! The operator's own credentials: a Secret `<name>-operator` the operator creates once per
//! cluster, holding a generated admin account (what the operator and the backup Jobs connect
//! as) and the replication account (what replicas connect as). The user's password Secret
//! (`spec.passwordSecretRef`) stays read-only to the operator and holds only the superuser
//! password applications and people use.
//!
//! This module is the contract between the places that use the Secret: the rendered pods
//! (init scripts create both accounts), the backup Jobs, and the runtime (which creates the
//! Secret and reads it to dial members). The values themselves never pass through the core.

/// Suffix of the operator-owned Secret's name: `<cluster>-operator`.
pub const OPERATOR_SECRET_SUFFIX: &str = "-operator";
/// The account the operator (and backup Jobs) connect as: superuser-equivalent.
pub const ADMIN_USER: &str = "database_operator";
/// Key of the admin account's user name in the operator Secret.
pub const ADMIN_USERNAME_KEY: &str = "admin-username";
/// Key of the admin account's password in the operator Secret.
pub const ADMIN_PASSWORD_KEY: &str = "admin-password";
/// Key of the replication account's user name in the operator Secret.
pub const REPLICATION_USERNAME_KEY: &str = "replication-username";
/// Key of the replication account's password in the operator Secret.
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";

/// The name of the operator-owned Secret of the cluster `cluster`.
///
/// ```
/// assert_eq!(database_operator_core::credentials::operator_secret_name("orders"), "orders-operator");
/// ```
pub fn operator_secret_name(cluster: &str) -> String {
    [cluster, OPERATOR_SECRET_SUFFIX].concat()
}
