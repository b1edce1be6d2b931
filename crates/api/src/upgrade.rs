//! Version upgrades the operator drives: the spec a user writes and the status of a roll.
//!
//! A `spec.version` change is applied member by member: replicas first, from the highest
//! ordinal, then a planned switchover to an upgraded replica that caught up, then the old
//! primary. Each member must become Ready, report the new version from its server and catch up
//! on replication within `spec.upgrade.stepTimeoutSeconds`; otherwise the roll pauses (the
//! primary is never moved onto a version that failed) until `spec.version` changes again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default of `spec.upgrade.stepTimeoutSeconds`: ten minutes.
pub const DEFAULT_STEP_TIMEOUT_SECONDS: i32 = 600;

/// How a version change rolls through the members.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema, garde::Validate,
)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSpec {
    /// How long, in seconds, one member may take to come back on the new version (pod Ready,
    /// the server reporting the new version, replication caught up) before the roll pauses.
    /// 30 to 86400, default 600. A paused roll leaves the primary on the old version and says
    /// why in the `Upgrading` condition; setting `spec.version` back resumes toward the old
    /// version.
    #[serde(default = "default_step_timeout_seconds")]
    #[schemars(range(min = 30, max = 86_400))]
    #[garde(range(min = 30, max = 86_400))]
    pub step_timeout_seconds: i32,
}

impl Default for UpgradeSpec {
    fn default() -> Self {
        Self {
            step_timeout_seconds: default_step_timeout_seconds(),
        }
    }
}

fn default_step_timeout_seconds() -> i32 {
    DEFAULT_STEP_TIMEOUT_SECONDS
}

/// The former name of [`RollPhase`], for code that imports the api crate.
#[deprecated(since = "0.1.0", note = "renamed RollPhase")]
pub type UpgradeStep = RollPhase;

/// Where a roll stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RollPhase {
    /// Replacing replicas, highest ordinal first.
    Replicas,
    /// Every replica runs the new version: moving the primary role to an upgraded replica.
    Switchover,
    /// Replacing the former primary (now a replica).
    Primary,
    /// A member did not become healthy in time: nothing more is replaced until `spec.version`
    /// changes.
    Paused,
}

/// A version change rolling through the members.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// The version being replaced (equal to `to` when a change other than the version, such as
    /// resources or configuration, restarts the members).
    pub from: String,
    /// The version being rolled out (`spec.version`).
    pub to: String,
    /// When the roll started.
    pub started: Time,
    /// Where it stands: `Replicas`, `Switchover`, `Primary` or `Paused`.
    pub step: RollPhase,
    /// The member being replaced now, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// When the current step started (the step timeout counts from here).
    pub step_started: Time,
    /// Members that run the new version and passed the health gate, in the order they were done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members_done: Vec<String>,
    /// Why the roll is paused, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_reason: Option<String>,
    /// What the roll waits for before its next move, when it waits: a member to be Ready, the
    /// failover in progress, a member to follow the primary, or what the replaced `member`
    /// still lacks to pass the health gate (the step timeout counts from `stepStarted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use garde::Validate;

    #[test]
    fn step_timeout_defaults_to_ten_minutes_and_is_bounded() {
        let spec: UpgradeSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec.step_timeout_seconds, 600);
        for (t, ok) in [(29, false), (30, true), (86_400, true), (86_401, false)] {
            let spec = UpgradeSpec {
                step_timeout_seconds: t,
            };
            assert_eq!(spec.validate().is_ok(), ok, "stepTimeoutSeconds {t}");
        }
    }
}
