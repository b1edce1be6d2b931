//! The operator Secret `<name>-operator` ([`crate::credentials`]), without its data: the
//! runtime adds the generated values when it creates it.

use k8s_openapi::api::core::v1::Secret;

use super::RenderContext;
use crate::credentials::{COMPONENT_CREDENTIALS, operator_secret_name};

/// The operator Secret without its data: name, namespace, labels, owner reference, type.
pub fn render(ctx: &RenderContext<'_>) -> Secret {
    Secret {
        metadata: ctx.metadata(operator_secret_name(ctx.name), COMPONENT_CREDENTIALS),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}
