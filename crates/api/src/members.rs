//! What the operator's probes found on each member's server, as reported in
//! `status.members`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The coarse steps `status.members[].lagSeconds` moves in: a replica's delay is reported as the
/// largest step it has reached, so a delay that wanders under load does not rewrite the status
/// on every probe (the exact value is the metric `database_cluster_replication_lag_seconds`).
pub const LAG_STEPS_SECONDS: [u64; 12] = [0, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

/// `seconds` rounded down to its step of [`LAG_STEPS_SECONDS`].
pub fn lag_step(seconds: u64) -> u64 {
    LAG_STEPS_SECONDS
        .iter()
        .copied()
        .rfind(|step| *step <= seconds)
        .unwrap_or(0)
}

/// One member whose server answers the operator's probes, as the server reported itself.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member's pod.
    pub pod: String,
    /// `primary` or `replica`, as the server reports it (not the pod's label).
    pub role: String,
    /// Whether the server refuses writes from ordinary clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The server's version string, as the server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// A replica: how far behind the primary it applies, in coarse steps (0, 1, 2, 5, 10, 30,
    /// 60, 120, 300, 600, 1800, 3600 seconds: at least this far behind, less than the next
    /// step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<u64>,
    /// A replica: whether it is replicating (receiving from its source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicating: Option<bool>,
    /// A replica: the member it follows, when that is a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_rounded_down_to_its_step() {
        assert_eq!(lag_step(0), 0);
        assert_eq!(lag_step(1), 1);
        assert_eq!(lag_step(4), 2);
        assert_eq!(lag_step(29), 10);
        assert_eq!(lag_step(30), 30);
        assert_eq!(lag_step(7_200), 3_600);
    }
}
