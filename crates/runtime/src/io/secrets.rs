//! Reading and writing the cluster's TLS Secrets ([`super::ClusterIo::read_secret`],
//! [`super::ClusterIo::put_secret`]).

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use database_operator_api::FIELD_MANAGER;

use super::Version;
use crate::error::Error;

fn controller_of(meta: &ObjectMeta) -> Option<OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .cloned()
}

/// The Secret `name` in `namespace` with its values (`None`: absent).
pub(super) async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Secret>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .map_err(|e| Error::api("get", "Secret", namespace, name, e))
}

/// Applies `secret` over the one of its name when that one is absent or has `secret`'s
/// controller; [`Error::NotOwned`] otherwise, with nothing written.
pub(super) async fn put(
    client: &Client,
    namespace: &str,
    secret: &Secret,
) -> Result<Version, Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let existing = api
        .get_metadata_opt(&name)
        .await
        .map_err(|e| Error::api("get", "Secret", namespace, &name, e))?;
    if let Some(existing) = existing {
        let theirs = controller_of(&existing.metadata);
        let ours = controller_of(&secret.metadata);
        if theirs.as_ref().map(|r| &r.uid) != ours.as_ref().map(|r| &r.uid) {
            return Err(Error::NotOwned {
                kind: "Secret",
                namespace: namespace.to_owned(),
                name,
                owner: match theirs {
                    Some(r) => format!("its controller is {} {}", r.kind, r.name),
                    None => "it has no controller".to_owned(),
                },
            });
        }
    }
    let mut metadata = secret.metadata.clone();
    metadata.managed_fields = None;
    metadata.resource_version = None;
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": secret.type_,
        "data": secret.data,
    });
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|e| Error::api("apply", "Secret", namespace, &name, e))?;
    Ok(applied.metadata.resource_version)
}
