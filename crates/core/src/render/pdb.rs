//! PodDisruptionBudget `<name>`: at most one member voluntarily down at a time.
//!
//! Rendered only for more than one replica. With a single member, any budget that protects it
//! (maxUnavailable 0, or minAvailable 1) blocks every node drain forever, and one that does not
//! protect it is pointless; a single-member cluster accepts the downtime of a drain instead.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::RenderContext;
use super::labels::{self, COMPONENT_DATABASE};

/// Whether the cluster gets a budget.
pub fn wanted(cluster: &RenderContext<'_>) -> bool {
    cluster.spec.replicas > 1
}

/// The budget: `maxUnavailable: 1` over the members.
pub fn render(cluster: &RenderContext<'_>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: cluster.metadata(cluster.primary_name(), COMPONENT_DATABASE),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(labels::member_label_selector(cluster)),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}
