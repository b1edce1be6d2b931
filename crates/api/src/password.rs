//! Password rotation: the spec a user writes and what the operator reports about the
//! superuser password the database runs with.
//!
//! The superuser password lives in the user's Secret (`spec.passwordSecretRef`). When its value
//! changes, the operator applies the new value inside the running database, on the primary, with
//! its own connection (PostgreSQL `ALTER ROLE postgres PASSWORD ...`; MySQL `ALTER USER root ...
//! IDENTIFIED BY ... RETAIN CURRENT PASSWORD`, then `DISCARD OLD PASSWORD` once
//! `spec.passwordRotation.graceSeconds` have passed; MariaDB `ALTER USER root ...`, replaced at
//! once because MariaDB has no dual passwords). Replication carries the change to the replicas.
//! No pod restarts. The status records a fingerprint of the applied value, never the value.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default of `spec.passwordRotation.graceSeconds`: one hour.
pub const DEFAULT_GRACE_SECONDS: i32 = 3600;

/// Longest grace period: seven days.
pub const MAX_GRACE_SECONDS: i32 = 604_800;

/// How a change of the superuser password is applied.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct PasswordRotationSpec {
    /// MySQL only: how long, in seconds, the old password keeps working after the new one was
    /// applied (MySQL dual passwords, `RETAIN CURRENT PASSWORD`), so clients can move over
    /// without an outage; then the operator discards it (`DISCARD OLD PASSWORD`). 0 to 604800
    /// (seven days), default 3600. 0 discards the old password on the next pass. MariaDB has no
    /// dual passwords and PostgreSQL keeps one password per role: there the old password stops
    /// working as soon as the new one is applied, and this field has no effect.
    #[serde(default = "default_grace_seconds")]
    #[schemars(range(min = 0, max = 604_800))]
    #[garde(range(min = 0, max = MAX_GRACE_SECONDS))]
    pub grace_seconds: i32,
}

impl Default for PasswordRotationSpec {
    fn default() -> Self {
        Self {
            grace_seconds: default_grace_seconds(),
        }
    }
}

fn default_grace_seconds() -> i32 {
    DEFAULT_GRACE_SECONDS
}

/// What the operator knows about the superuser password the database runs with. Holds
/// fingerprints only (a salted hash of the Secret's value), never a password.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordStatus {
    /// Fingerprint of the password the database runs with: the value the cluster was
    /// initialized with, or the last value the operator applied and saw succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,

    /// When that password took effect (initialization, or the successful `ALTER`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<Time>,

    /// Fingerprint of a new Secret value not applied yet (waiting for a reachable primary,
    /// being applied, or failed and retried). Absent when the database runs the Secret's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,

    /// When the operator first saw the pending value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since: Option<Time>,

    /// MySQL: while the previous password is still accepted (dual passwords), when the operator
    /// discards it (`appliedAt` + `spec.passwordRotation.graceSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_password_expires: Option<Time>,

    /// MySQL: when the previous password was discarded (`DISCARD OLD PASSWORD` succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_password_discarded_at: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use garde::Validate;

    #[test]
    fn grace_defaults_to_an_hour_and_is_bounded() {
        let spec: PasswordRotationSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec.grace_seconds, 3600);
        for (grace, ok) in [
            (-1, false),
            (0, true),
            (3600, true),
            (604_800, true),
            (604_801, false),
        ] {
            let spec = PasswordRotationSpec {
                grace_seconds: grace,
            };
            assert_eq!(spec.validate().is_ok(), ok, "graceSeconds {grace}");
        }
    }

    #[test]
    fn an_empty_status_serializes_to_an_empty_object() {
        let json = serde_json::to_value(PasswordStatus::default()).unwrap();
        assert_eq!(json, serde_json::json!({}));
    }
}
