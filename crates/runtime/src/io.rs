//! Every write the controller makes to the cluster, behind one small trait.
//!
//! [`ClusterIo`] is what [`crate::reconcile`] talks to; [`KubeIo`] implements it with a kube
//! client (server-side apply with field manager `database-operator` and `force`, merge patches
//! for pod labels, the `/status` subresource for status, events.k8s.io events), and tests use a
//! mock. Every method is one primitive call: no reads (those come from the watch caches) and no
//! decisions (those are the core's). Owned objects of every kind go through one generic path
//! ([`DynamicObject`] with the kind's [`ApiResource`]), so a new owned kind adds nothing here.

use std::sync::Arc;

use database_operator_api::{DatabaseCluster, DatabaseClusterStatus, FIELD_MANAGER, FINALIZER};
use database_operator_core::render::labels;
use database_operator_core::{
    DesiredObject, EventType, KindVisitor, MemberRole, ObjectKey, OwnedKind, OwnedResource,
    PlannedEvent,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType as KubeEventType, Reporter};
use kube::{Client, Resource, ResourceExt};

use crate::error::Error;
use crate::metrics::Metrics;

mod events;
mod secrets;

use events::Events;

/// The `resourceVersion` a write left its object at, as the API server answered: `Some("")`
/// for an object a create found in place already (version not read), `None` when the object
/// is gone or the answer did not say. The runtime recognises its own writes by it when the
/// watches deliver them ([`crate::echo`]).
pub type Version = Option<String>;

/// The version a create reports for an object it found in place (HTTP 409).
pub fn existing() -> Version {
    Some(String::new())
}

/// Cluster writes the reconciler makes. Every method is idempotent.
///
/// Used through generics (never `dyn`), so the futures of an implementation keep their auto
/// traits: the kube implementation's are `Send`, as the controller requires.
#[allow(async_fn_in_trait)]
#[cfg_attr(test, mockall::automock)]
pub trait ClusterIo: Send + Sync {
    /// Server-side applies `object` in `namespace`.
    async fn apply(&self, namespace: &str, object: &DesiredObject) -> Result<Version, Error>;
    /// Creates an object the watches do not show: applies it like [`ClusterIo::apply`] when no
    /// object of its name exists, or when the one that does has the same controller as
    /// `object` (this cluster: the watch had not shown it yet); otherwise writes nothing and
    /// fails with [`Error::NotOwned`].
    async fn create(&self, namespace: &str, object: &DesiredObject) -> Result<Version, Error>;
    /// Deletes an owned object (absent is fine).
    async fn delete(&self, namespace: &str, key: &ObjectKey) -> Result<(), Error>;
    /// Sets the `database.example.com/role` label of a pod.
    async fn label_pod(
        &self,
        namespace: &str,
        pod: &str,
        role: MemberRole,
    ) -> Result<Version, Error>;
    /// Sets (`Some(value)`) or removes (`None`) the label `key` of a pod: the initialize and
    /// reseed labels ([`database_operator_core::PodAction::SetInitialize`],
    /// [`database_operator_core::PodAction::SetReseed`]).
    // mockall's generated mock needs the lifetime named.
    #[allow(clippy::needless_lifetimes)]
    async fn set_pod_label<'a>(
        &self,
        namespace: &str,
        pod: &str,
        key: &str,
        value: Option<&'a str>,
    ) -> Result<Version, Error>;
    /// Raises the storage request of the PersistentVolumeClaim `claim` to `size` (a merge
    /// patch of `spec.resources.requests.storage`): the storage provider grows the volume.
    async fn expand_claim(
        &self,
        namespace: &str,
        claim: &str,
        size: &str,
    ) -> Result<Version, Error>;
    /// Deletes a member pod (absent is fine): the StatefulSet recreates it, its volume stays.
    /// Failover's fence of a server that does not answer, and how a PostgreSQL member
    /// restarts as a standby. `grace_seconds`: the termination grace period (`None`: the
    /// pod's own); never 0 (a force delete would not wait for the containers to stop).
    async fn delete_pod(
        &self,
        namespace: &str,
        pod: &str,
        grace_seconds: Option<u32>,
    ) -> Result<Version, Error>;
    /// Replaces the status of `cluster` (through the `/status` subresource), only while the
    /// object is still at `cluster`'s resourceVersion ([`status_apply_body`]; 409, an
    /// [`Error::Conflict`], when it moved on).
    async fn patch_status(
        &self,
        cluster: &DatabaseCluster,
        status: &DatabaseClusterStatus,
    ) -> Result<Version, Error>;
    /// Publishes an event about `cluster`.
    async fn publish(&self, cluster: &ObjectReference, event: &PlannedEvent) -> Result<(), Error>;
    /// Adds the operator's finalizer to `cluster`.
    async fn add_finalizer(&self, cluster: &DatabaseCluster) -> Result<Version, Error>;
    /// Removes the operator's finalizer from `cluster`.
    async fn remove_finalizer(&self, cluster: &DatabaseCluster) -> Result<Version, Error>;
    /// Creates `job` in `namespace` (one that already exists under its name is fine).
    async fn create_job(&self, namespace: &str, job: &Job) -> Result<Version, Error>;
    /// Deletes the Job `name` in `namespace` (absent is fine).
    async fn delete_job(&self, namespace: &str, name: &str) -> Result<(), Error>;
    /// Creates the operator Secret `secret` (with its values) in `namespace`. Create only: one
    /// that already exists under its name is left as it is, and that is success.
    async fn create_secret(&self, namespace: &str, secret: &Secret) -> Result<Version, Error>;
    /// Removes the owner reference with `owner_uid` from the Secret `name` in `namespace`
    /// (absent Secret or reference is fine); nothing else of the Secret changes.
    async fn release_secret(
        &self,
        namespace: &str,
        name: &str,
        owner_uid: &str,
    ) -> Result<Version, Error>;
    /// Reads the Secret `name` in `namespace` with its values (`None`: absent). Only for the
    /// cluster's own TLS authority ([`crate::tls_issuer`]).
    async fn read_secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error>;
    /// Writes `secret` (with its values) over the one of its name, server-side: created when
    /// absent, replaced when its controller is `secret`'s; over a Secret of another owner (or
    /// none) nothing is written and it fails with [`Error::NotOwned`]. For the cluster's TLS
    /// Secrets, which the operator renews.
    async fn put_secret(&self, namespace: &str, secret: &Secret) -> Result<Version, Error>;
}

/// [`ClusterIo`] over a kube client.
#[derive(Clone)]
pub struct KubeIo {
    client: Client,
    events: Events,
    metrics: Arc<Metrics>,
}

impl KubeIo {
    /// Merges `labels` (a JSON object; `null` removes a label) into a pod's labels. A pod
    /// that is gone (a fence or the StatefulSet deleted it since the pass observed it) has
    /// nothing to label: `Ok(None)`, and its deletion brings the next pass, which labels its
    /// successor if it must.
    async fn patch_pod_labels(
        &self,
        namespace: &str,
        pod: &str,
        labels: serde_json::Value,
    ) -> Result<Version, Error> {
        let patch = serde_json::json!({"metadata": {"labels": labels}});
        match self.merge_patch::<Pod>(namespace, pod, &patch).await {
            Err(Error::Kube { source, .. }) if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404) =>
            {
                tracing::debug!(namespace, pod, "pod gone before its labels were written");
                Ok(None)
            }
            other => other,
        }
    }

    /// A JSON merge patch of the namespaced object `name` of kind `K` (counted as a write).
    async fn merge_patch<K>(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Version, Error>
    where
        K: k8s_openapi::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + k8s_openapi::Metadata<Ty = ObjectMeta>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let kind = <K as k8s_openapi::Resource>::KIND;
        self.metrics.api_write(kind, "patch");
        let patched = api
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| Error::api("patch", kind, namespace, name, e))?;
        Ok(patched.metadata().resource_version.clone())
    }

    /// A writer that reports as `reporter` in events and counts writes in `metrics`.
    pub fn new(client: Client, reporter: Reporter, metrics: Arc<Metrics>) -> Self {
        let events = Events::new(client.clone(), reporter);
        Self {
            client,
            events,
            metrics,
        }
    }

    fn owned_api(&self, namespace: &str, kind: OwnedKind) -> Api<DynamicObject> {
        struct Erase;
        impl KindVisitor for Erase {
            type Output = ApiResource;
            fn visit<K: OwnedResource>(self) -> ApiResource {
                ApiResource::erase::<K>(&())
            }
        }
        Api::namespaced_with(self.client.clone(), namespace, &kind.visit(Erase))
    }

    async fn delete_in(
        &self,
        api: Api<DynamicObject>,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> Result<(), Error> {
        self.metrics.api_write(kind, "delete");
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Error::api("delete", kind, namespace, name, e)),
        }
    }

    fn clusters(&self, cluster: &DatabaseCluster) -> (Api<DatabaseCluster>, String, String) {
        let namespace = cluster.namespace().unwrap_or_default();
        (
            Api::namespaced(self.client.clone(), &namespace),
            namespace,
            cluster.name_any(),
        )
    }

    async fn patch_finalizers(
        &self,
        cluster: &DatabaseCluster,
        patch: serde_json::Value,
        verb: &'static str,
    ) -> Result<Version, Error> {
        let (api, namespace, name) = self.clusters(cluster);
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(|source| Error::Serialize {
                kind: "DatabaseCluster",
                name: name.clone(),
                source,
            })?;
        self.metrics.api_write("DatabaseCluster", "patch");
        match api
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(patched) => Ok(patched.metadata.resource_version),
            // Gone already: nothing left to guard.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(Error::api_guarded(
                verb,
                "DatabaseCluster",
                &namespace,
                &name,
                e,
            )),
        }
    }
}

/// The JSON patch adding the finalizer, guarded by the current list (a concurrent change makes
/// the `test` fail, which is reported as a conflict).
pub fn add_finalizer_patch(cluster: &DatabaseCluster) -> serde_json::Value {
    match cluster.metadata.finalizers.as_deref() {
        None | Some([]) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": cluster.metadata.finalizers},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
        Some(current) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
    }
}

/// The JSON patch removing the finalizer, guarded by its position; `None` when it is not there.
pub fn remove_finalizer_patch(cluster: &DatabaseCluster) -> Option<serde_json::Value> {
    let index = cluster.finalizers().iter().position(|f| f == FINALIZER)?;
    let path = format!("/metadata/finalizers/{index}");
    Some(serde_json::json!([
        {"op": "test", "path": path, "value": FINALIZER},
        {"op": "remove", "path": path},
    ]))
}

/// The server-side-apply body of a status: apiVersion, kind and the complete status. Fields the
/// status no longer has are dropped by the API server, because the operator owns them.
///
/// With `resource_version` (the version the status was planned from), the write is a
/// precondition: the API server refuses it (409) when the object changed since, so a status
/// planned from an older version (a replica that stalled and still believes it leads, or an
/// error report after this reconcile's own status write) never replaces a newer one.
pub fn status_apply_body(
    status: &DatabaseClusterStatus,
    resource_version: Option<&str>,
) -> serde_json::Value {
    let mut body = serde_json::json!({
        "apiVersion": DatabaseCluster::api_version(&()),
        "kind": DatabaseCluster::kind(&()),
        "status": status,
    });
    if let Some(version) = resource_version {
        body["metadata"] = serde_json::json!({ "resourceVersion": version });
    }
    body
}

impl ClusterIo for KubeIo {
    async fn apply(&self, namespace: &str, object: &DesiredObject) -> Result<Version, Error> {
        let kind = object.kind();
        let name = object.metadata().name.clone().unwrap_or_default();
        self.metrics.api_write(kind.as_str(), "apply");
        let applied = self
            .owned_api(namespace, kind)
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .map_err(|e| Error::api("apply", kind.as_str(), namespace, &name, e))?;
        Ok(applied.metadata.resource_version)
    }

    async fn create(&self, namespace: &str, object: &DesiredObject) -> Result<Version, Error> {
        let kind = object.kind();
        let name = object.metadata().name.clone().unwrap_or_default();
        let controller = |meta: &ObjectMeta| {
            meta.owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true))
                .cloned()
        };
        let existing = self
            .owned_api(namespace, kind)
            .get_metadata_opt(&name)
            .await
            .map_err(|e| Error::api("get", kind.as_str(), namespace, &name, e))?;
        if let Some(existing) = existing {
            let theirs = controller(&existing.metadata);
            let ours = controller(object.metadata());
            if theirs.as_ref().map(|r| &r.uid) != ours.as_ref().map(|r| &r.uid) {
                return Err(Error::NotOwned {
                    kind: kind.as_str(),
                    namespace: namespace.to_owned(),
                    name,
                    owner: match theirs {
                        Some(r) => format!("its controller is {} {}", r.kind, r.name),
                        None => "it has no controller".to_owned(),
                    },
                });
            }
        }
        self.apply(namespace, object).await
    }

    async fn delete(&self, namespace: &str, key: &ObjectKey) -> Result<(), Error> {
        let api = self.owned_api(namespace, key.kind);
        self.delete_in(api, key.kind.as_str(), namespace, &key.name)
            .await
    }

    async fn label_pod(
        &self,
        namespace: &str,
        pod: &str,
        role: MemberRole,
    ) -> Result<Version, Error> {
        let labels = serde_json::json!({labels::ROLE: role.as_str()});
        self.patch_pod_labels(namespace, pod, labels).await
    }

    async fn set_pod_label(
        &self,
        namespace: &str,
        pod: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<Version, Error> {
        let labels = serde_json::json!({ key: value });
        self.patch_pod_labels(namespace, pod, labels).await
    }

    async fn expand_claim(
        &self,
        namespace: &str,
        claim: &str,
        size: &str,
    ) -> Result<Version, Error> {
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": size}}}});
        self.merge_patch::<PersistentVolumeClaim>(namespace, claim, &patch)
            .await
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        pod: &str,
        grace_seconds: Option<u32>,
    ) -> Result<Version, Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        self.metrics.api_write("Pod", "delete");
        let params = DeleteParams {
            grace_period_seconds: grace_seconds.map(|g| g.max(1)),
            ..DeleteParams::default()
        };
        match api.delete(pod, &params).await {
            // Terminating: the pod stays until its containers stopped, at this version.
            Ok(deleted) => Ok(deleted.left().and_then(|p| p.metadata.resource_version)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(Error::api("delete", "Pod", namespace, pod, e)),
        }
    }

    async fn patch_status(
        &self,
        cluster: &DatabaseCluster,
        status: &DatabaseClusterStatus,
    ) -> Result<Version, Error> {
        let (api, namespace, name) = self.clusters(cluster);
        self.metrics.api_write("DatabaseCluster", "patch_status");
        let patched = api
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(status_apply_body(
                    status,
                    cluster.metadata.resource_version.as_deref(),
                )),
            )
            .await
            .map_err(|e| Error::api("patch status of", "DatabaseCluster", &namespace, &name, e))?;
        Ok(patched.metadata.resource_version)
    }

    async fn publish(&self, cluster: &ObjectReference, event: &PlannedEvent) -> Result<(), Error> {
        let ev = Event {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason.as_str().to_owned(),
            note: Some(event.message.clone()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        self.metrics.api_write("Event", "create");
        let recorder = self.events.recorder_for(cluster, &ev);
        recorder.publish(&ev, cluster).await.map_err(|e| {
            Error::api(
                "publish event about",
                "DatabaseCluster",
                cluster.namespace.as_deref().unwrap_or_default(),
                cluster.name.as_deref().unwrap_or_default(),
                e,
            )
        })
    }

    async fn add_finalizer(&self, cluster: &DatabaseCluster) -> Result<Version, Error> {
        self.patch_finalizers(cluster, add_finalizer_patch(cluster), "add finalizer to")
            .await
    }

    async fn remove_finalizer(&self, cluster: &DatabaseCluster) -> Result<Version, Error> {
        match remove_finalizer_patch(cluster) {
            Some(patch) => {
                self.patch_finalizers(cluster, patch, "remove finalizer from")
                    .await
            }
            None => Ok(cluster.metadata.resource_version.clone()),
        }
    }

    async fn create_job(&self, namespace: &str, job: &Job) -> Result<Version, Error> {
        let name = job.metadata.name.clone().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.metrics.api_write("Job", "create");
        match api.create(&params, job).await {
            Ok(created) => Ok(created.metadata.resource_version),
            // Created by an earlier pass the Job cache has not seen yet.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(existing()),
            Err(e) => Err(Error::api("create", "Job", namespace, &name, e)),
        }
    }

    async fn delete_job(&self, namespace: &str, name: &str) -> Result<(), Error> {
        let api = Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::erase::<Job>(&()),
        );
        self.delete_in(api, "Job", namespace, name).await
    }

    async fn create_secret(&self, namespace: &str, secret: &Secret) -> Result<Version, Error> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.metrics.api_write("Secret", "create");
        match api.create(&params, secret).await {
            Ok(created) => Ok(created.metadata.resource_version),
            // Created by an earlier pass the watch has not shown yet, or kept from an earlier
            // cluster of the same name: the existing values stay, never overwritten.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(existing()),
            Err(e) => Err(Error::api("create", "Secret", namespace, &name, e)),
        }
    }

    async fn release_secret(
        &self,
        namespace: &str,
        name: &str,
        owner_uid: &str,
    ) -> Result<Version, Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        self.metrics.api_write("Secret", "patch");
        match api
            .patch(name, &params, &Patch::Strategic(release_patch(owner_uid)))
            .await
        {
            Ok(released) => Ok(released.metadata.resource_version),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(Error::api("release", "Secret", namespace, name, e)),
        }
    }

    async fn read_secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
        secrets::read(&self.client, namespace, name).await
    }

    async fn put_secret(&self, namespace: &str, secret: &Secret) -> Result<Version, Error> {
        self.metrics.api_write("Secret", "apply");
        secrets::put(&self.client, namespace, secret).await
    }
}

/// The strategic merge patch removing the owner reference with `owner_uid` (owner references
/// merge by uid): other owner references, labels and data stay as they are.
pub fn release_patch(owner_uid: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}]}
    })
}
