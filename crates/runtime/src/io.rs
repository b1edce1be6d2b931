//! Every write the controller makes to the cluster, behind one small trait.
//!
//! [`ClusterIo`] is what [`crate::reconcile`] talks to; [`KubeIo`] implements it with a kube
//! client (server-side apply with field manager `database-operator` and `force`, merge patches
//! for pod labels, the `/status` subresource for status, events.k8s.io events), and tests use a
//! mock. Reads come from the watch caches, not from here.

use std::fmt::Debug;
use std::sync::Arc;

use database_operator_api::{DatabaseCluster, DatabaseClusterStatus, FIELD_MANAGER, FINALIZER};
use database_operator_core::{
    DesiredObject, EventType, MemberRole, ObjectKey, OperatorConfig, OwnedKind, PlannedEvent,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cleanup::{self, CleanupJobState};
use crate::error::Error;
use crate::metrics::Metrics;

/// How far the removal of stored backups has got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupProgress {
    /// Still running; look again later.
    InProgress,
    /// Finished: nothing of the cluster's backups is left in the bucket.
    Done,
}

/// Cluster writes the reconciler makes. Every method is idempotent.
///
/// Used through generics (never `dyn`), so the futures of an implementation keep their auto
/// traits: the kube implementation's are `Send`, as the controller requires.
#[allow(async_fn_in_trait)]
#[cfg_attr(test, mockall::automock)]
pub trait ClusterIo: Send + Sync {
    /// Server-side applies `object` in `namespace`.
    async fn apply(&self, namespace: &str, object: &DesiredObject) -> Result<(), Error>;
    /// Deletes an owned object (absent is fine).
    async fn delete(&self, namespace: &str, key: &ObjectKey) -> Result<(), Error>;
    /// Sets the `database.example.com/role` label of a pod.
    async fn label_pod(&self, namespace: &str, pod: &str, role: MemberRole) -> Result<(), Error>;
    /// Replaces the status of `cluster` (through the `/status` subresource).
    async fn patch_status(
        &self,
        cluster: &DatabaseCluster,
        status: &DatabaseClusterStatus,
    ) -> Result<(), Error>;
    /// Publishes an event about `cluster`.
    async fn publish(&self, cluster: &ObjectReference, event: &PlannedEvent) -> Result<(), Error>;
    /// Adds the operator's finalizer to `cluster`.
    async fn add_finalizer(&self, cluster: &DatabaseCluster) -> Result<(), Error>;
    /// Removes the operator's finalizer from `cluster`.
    async fn remove_finalizer(&self, cluster: &DatabaseCluster) -> Result<(), Error>;
    /// Removes the cluster's backups from its bucket (`backup.deletionPolicy: Delete`).
    async fn cleanup_backups(&self, cluster: &DatabaseCluster) -> Result<CleanupProgress, Error>;
}

/// [`ClusterIo`] over a kube client.
#[derive(Clone)]
pub struct KubeIo {
    client: Client,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    config: OperatorConfig,
}

impl KubeIo {
    /// A writer that reports as `reporter` in events and counts writes in `metrics`.
    pub fn new(
        client: Client,
        reporter: Reporter,
        metrics: Arc<Metrics>,
        config: OperatorConfig,
    ) -> Self {
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            recorder,
            metrics,
            config,
        }
    }

    async fn apply_typed<K>(&self, namespace: &str, object: &K) -> Result<(), Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Serialize
            + Debug,
    {
        let kind = kind_name::<K>();
        let name = object.meta().name.clone().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        self.metrics.api_write(kind, "apply");
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map_err(|e| Error::api("apply", kind, namespace, &name, e))?;
        Ok(())
    }

    async fn delete_typed<K>(&self, namespace: &str, name: &str) -> Result<(), Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        let kind = kind_name::<K>();
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
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
    ) -> Result<(), Error> {
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
            Ok(_) => Ok(()),
            // Gone already: nothing left to guard.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
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

/// The kind of `K` as a static string (for metrics and errors).
fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "StatefulSet" => OwnedKind::StatefulSet.as_str(),
        "Service" => OwnedKind::Service.as_str(),
        "ConfigMap" => OwnedKind::ConfigMap.as_str(),
        "CronJob" => OwnedKind::CronJob.as_str(),
        "PodDisruptionBudget" => OwnedKind::PodDisruptionBudget.as_str(),
        "Pod" => "Pod",
        "Job" => "Job",
        "DatabaseCluster" => "DatabaseCluster",
        _ => "Object",
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
pub fn status_apply_body(status: &DatabaseClusterStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": DatabaseCluster::api_version(&()),
        "kind": DatabaseCluster::kind(&()),
        "status": status,
    })
}

impl ClusterIo for KubeIo {
    async fn apply(&self, namespace: &str, object: &DesiredObject) -> Result<(), Error> {
        match object {
            DesiredObject::StatefulSet(o) => self.apply_typed::<StatefulSet>(namespace, o).await,
            DesiredObject::Service(o) => self.apply_typed::<Service>(namespace, o).await,
            DesiredObject::ConfigMap(o) => self.apply_typed::<ConfigMap>(namespace, o).await,
            DesiredObject::CronJob(o) => self.apply_typed::<CronJob>(namespace, o).await,
            DesiredObject::PodDisruptionBudget(o) => {
                self.apply_typed::<PodDisruptionBudget>(namespace, o).await
            }
        }
    }

    async fn delete(&self, namespace: &str, key: &ObjectKey) -> Result<(), Error> {
        match key.kind {
            OwnedKind::StatefulSet => self.delete_typed::<StatefulSet>(namespace, &key.name).await,
            OwnedKind::Service => self.delete_typed::<Service>(namespace, &key.name).await,
            OwnedKind::ConfigMap => self.delete_typed::<ConfigMap>(namespace, &key.name).await,
            OwnedKind::CronJob => self.delete_typed::<CronJob>(namespace, &key.name).await,
            OwnedKind::PodDisruptionBudget => {
                self.delete_typed::<PodDisruptionBudget>(namespace, &key.name)
                    .await
            }
        }
    }

    async fn label_pod(&self, namespace: &str, pod: &str, role: MemberRole) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch =
            serde_json::json!({"metadata": {"labels": {crate::labels::ROLE: role.as_str()}}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        self.metrics.api_write("Pod", "patch");
        api.patch(pod, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::api("patch", "Pod", namespace, pod, e))?;
        Ok(())
    }

    async fn patch_status(
        &self,
        cluster: &DatabaseCluster,
        status: &DatabaseClusterStatus,
    ) -> Result<(), Error> {
        let (api, namespace, name) = self.clusters(cluster);
        self.metrics.api_write("DatabaseCluster", "patch_status");
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(status_apply_body(status)),
        )
        .await
        .map_err(|e| Error::api("patch status of", "DatabaseCluster", &namespace, &name, e))?;
        Ok(())
    }

    async fn publish(&self, cluster: &ObjectReference, event: &PlannedEvent) -> Result<(), Error> {
        let ev = Event {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason.clone(),
            note: Some(event.message.clone()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        self.metrics.api_write("Event", "create");
        self.recorder.publish(&ev, cluster).await.map_err(|e| {
            Error::api(
                "publish event about",
                "DatabaseCluster",
                cluster.namespace.as_deref().unwrap_or_default(),
                cluster.name.as_deref().unwrap_or_default(),
                e,
            )
        })
    }

    async fn add_finalizer(&self, cluster: &DatabaseCluster) -> Result<(), Error> {
        self.patch_finalizers(cluster, add_finalizer_patch(cluster), "add finalizer to")
            .await
    }

    async fn remove_finalizer(&self, cluster: &DatabaseCluster) -> Result<(), Error> {
        match remove_finalizer_patch(cluster) {
            Some(patch) => {
                self.patch_finalizers(cluster, patch, "remove finalizer from")
                    .await
            }
            None => Ok(()),
        }
    }

    async fn cleanup_backups(&self, cluster: &DatabaseCluster) -> Result<CleanupProgress, Error> {
        let namespace = cluster.namespace().unwrap_or_default();
        let Some(job) = cleanup::render_job(cluster, &self.config) else {
            return Ok(CleanupProgress::Done);
        };
        let name = job.metadata.name.clone().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.client.clone(), &namespace);
        let existing = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::api("get", "Job", &namespace, &name, e))?;
        match cleanup::job_state(existing.as_ref(), &cluster.uid().unwrap_or_default()) {
            CleanupJobState::Absent => {
                self.metrics.api_write("Job", "create");
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PostParams::default()
                };
                match api.create(&params, &job).await {
                    Ok(_) => Ok(CleanupProgress::InProgress),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(CleanupProgress::InProgress),
                    Err(e) => Err(Error::api("create", "Job", &namespace, &name, e)),
                }
            }
            CleanupJobState::Stale => {
                self.delete_typed::<Job>(&namespace, &name).await?;
                Ok(CleanupProgress::InProgress)
            }
            CleanupJobState::Running => Ok(CleanupProgress::InProgress),
            // A finished Job is left to its `ttlSecondsAfterFinished`: a failed one keeps its
            // pods (and logs) until then, and the retry after it is gone starts a fresh run.
            CleanupJobState::Succeeded => Ok(CleanupProgress::Done),
            CleanupJobState::Failed(reason) => Err(Error::Cleanup {
                namespace,
                name: cluster.name_any(),
                message: format!(
                    "backup cleanup Job {name} failed ({reason}); see the logs of its pods; a new run starts once it has been removed"
                ),
            }),
        }
    }
}
