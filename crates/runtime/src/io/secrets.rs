//! Reading and writing the cluster's TLS Secrets ([`super::ClusterIo::read_secret`],
//! [`super::ClusterIo::put_secret`]).

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

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

/// How many times [`put`] reads again after the Secret changed under it.
const PUT_TRIES: usize = 3;

/// Writes `secret`: creates it when its name is free, applies it over the one of its name when
/// that one has `secret`'s controller (with that one's resourceVersion as a precondition), and
/// returns [`Error::NotOwned`] otherwise, with nothing written. A Secret created, replaced or
/// changed by someone else between the read and the write makes the write fail (409) and is
/// read again: someone else's Secret is never written over.
pub(super) async fn put(
    client: &Client,
    namespace: &str,
    secret: &Secret,
) -> Result<Version, Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut metadata = secret.metadata.clone();
    metadata.managed_fields = None;
    let mut tries = 0;
    loop {
        tries += 1;
        let existing = api
            .get_metadata_opt(&name)
            .await
            .map_err(|e| Error::api("get", "Secret", namespace, &name, e))?;
        let written = match existing {
            None => {
                metadata.resource_version = None;
                let new = Secret {
                    metadata: metadata.clone(),
                    ..secret.clone()
                };
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PostParams::default()
                };
                api.create(&params, &new).await.map_err(|e| ("create", e))
            }
            Some(existing) => {
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
                // The precondition: the Secret whose owner was just read, not one that
                // replaced it since.
                metadata.resource_version = existing.metadata.resource_version.clone();
                let body = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": metadata,
                    "type": secret.type_,
                    "data": secret.data,
                });
                api.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map_err(|e| ("apply", e))
            }
        };
        match written {
            Ok(written) => return Ok(written.metadata.resource_version),
            Err((verb, kube::Error::Api(e))) if e.code == 409 && tries < PUT_TRIES => {
                tracing::debug!(%namespace, %name, verb, reason = %e.reason, "the Secret changed under the write: reading it again");
            }
            Err((verb, e)) => return Err(Error::api(verb, "Secret", namespace, &name, e)),
        }
    }
}
