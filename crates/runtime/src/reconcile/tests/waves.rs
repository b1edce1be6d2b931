//! The object writes of a pass go out in waves: what the members read, then the StatefulSet,
//! then the rest, each wave's writes together.

use std::sync::Mutex;

use database_operator_api::DatabaseClusterStatus;
use database_operator_core::{DesiredObject, MemberRole, ObjectKey, OwnedKind, PlannedEvent};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};

use super::*;
use crate::io::{ClusterIo, Version};

/// A cluster writer whose every write takes 20 ms of (paused) time and is logged as it starts
/// and ends, with the answer `v<n>`.
#[derive(Default)]
struct Slow {
    log: Mutex<Vec<(bool, String)>>,
}

impl Slow {
    async fn write(&self, what: String) -> Result<Version, Error> {
        self.log.lock().unwrap().push((true, what.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut log = self.log.lock().unwrap();
        let n = log.len();
        log.push((false, what));
        Ok(Some(format!("v{n}")))
    }

    fn started(&self, what: &str) -> usize {
        self.position(true, what)
    }

    fn ended(&self, what: &str) -> usize {
        self.position(false, what)
    }

    fn position(&self, start: bool, what: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter()
            .position(|(s, w)| *s == start && w == what)
            .unwrap_or_else(|| {
                panic!(
                    "{what} never {}: {log:?}",
                    if start { "started" } else { "ended" }
                )
            })
    }
}

fn key(kind: OwnedKind, name: &str) -> String {
    format!("{}/{name}", kind.as_str())
}

impl ClusterIo for Slow {
    async fn apply(&self, _: &str, object: &DesiredObject) -> Result<Version, Error> {
        let k = object.key();
        self.write(key(k.kind, &k.name)).await
    }
    async fn create(&self, namespace: &str, object: &DesiredObject) -> Result<Version, Error> {
        self.apply(namespace, object).await
    }
    async fn delete(&self, _: &str, k: &ObjectKey) -> Result<(), Error> {
        self.write(format!("delete {}", key(k.kind, &k.name)))
            .await
            .map(|_| ())
    }
    async fn label_pod(&self, _: &str, pod: &str, _: MemberRole) -> Result<Version, Error> {
        self.write(format!("label {pod}")).await
    }
    async fn set_pod_label(
        &self,
        _: &str,
        pod: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<Version, Error> {
        self.write(format!("label {pod}")).await
    }
    async fn delete_pod(&self, _: &str, pod: &str, _: Option<u32>) -> Result<Version, Error> {
        self.write(format!("delete pod {pod}")).await
    }
    async fn expand_claim(&self, _: &str, claim: &str, size: &str) -> Result<Version, Error> {
        self.write(format!("expand {claim} to {size}")).await
    }
    async fn patch_status(
        &self,
        _: &DatabaseCluster,
        _: &DatabaseClusterStatus,
    ) -> Result<Version, Error> {
        self.write("status".into()).await
    }
    async fn publish(&self, _: &ObjectReference, _: &PlannedEvent) -> Result<(), Error> {
        Ok(())
    }
    async fn add_finalizer(&self, _: &DatabaseCluster) -> Result<Version, Error> {
        self.write("finalizer".into()).await
    }
    async fn remove_finalizer(&self, _: &DatabaseCluster) -> Result<Version, Error> {
        self.write("remove finalizer".into()).await
    }
    async fn create_job(&self, _: &str, job: &Job) -> Result<Version, Error> {
        self.write(format!(
            "job {}",
            job.metadata.name.clone().unwrap_or_default()
        ))
        .await
    }
    async fn delete_job(&self, _: &str, name: &str) -> Result<(), Error> {
        self.write(format!("delete job {name}")).await.map(|_| ())
    }
    async fn create_secret(&self, _: &str, s: &Secret) -> Result<Version, Error> {
        self.write(format!(
            "secret {}",
            s.metadata.name.clone().unwrap_or_default()
        ))
        .await
    }
    async fn release_secret(&self, _: &str, name: &str, _: &str) -> Result<Version, Error> {
        self.write(format!("release {name}")).await
    }
    async fn read_secret(&self, _: &str, _: &str) -> Result<Option<Secret>, Error> {
        Ok(None)
    }
    async fn put_secret(&self, _: &str, s: &Secret) -> Result<Version, Error> {
        self.write(format!(
            "secret {}",
            s.metadata.name.clone().unwrap_or_default()
        ))
        .await
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_cluster_writes_its_statefulset_after_one_round_of_writes() {
    let mut fresh = observed(cluster(false));
    fresh.operator_secret = database_operator_core::credentials::OperatorSecretState::Missing;
    let io = Slow::default();
    let started = tokio::time::Instant::now();
    let done = reconcile(&io, &NoMembers, &fresh).await.unwrap();

    let sts = key(OwnedKind::StatefulSet, "orders");
    let config = key(OwnedKind::ConfigMap, "orders-config");
    let policy = key(OwnedKind::NetworkPolicy, "orders-access");
    // What the members read, and the NetworkPolicy that guards them, is written before the
    // StatefulSet, together with the finalizer and the operator Secret.
    for first in [
        "finalizer",
        "secret orders-operator",
        config.as_str(),
        policy.as_str(),
    ] {
        assert!(
            io.ended(first) < io.started(&sts),
            "{first} before the StatefulSet"
        );
        assert!(
            io.started(first) < io.ended("finalizer"),
            "{first} in the first wave"
        );
    }
    // Everything else after it, together.
    let rest = [
        key(OwnedKind::Service, "orders"),
        key(OwnedKind::Service, "orders-headless"),
        key(OwnedKind::Service, "orders-replicas"),
        key(OwnedKind::PodDisruptionBudget, "orders"),
        key(OwnedKind::CronJob, "orders-backup"),
    ];
    for later in &rest {
        assert!(
            io.started(later) > io.ended(&sts),
            "{later} after the StatefulSet"
        );
    }
    // Then the status, once every object is written.
    for object in rest.iter().chain([&sts, &config]) {
        assert!(io.ended(object) < io.started("status"));
    }
    // Three waves of 20 ms and the status: 4 rounds, not the 11 of one write after another.
    let rounds = started.elapsed().as_millis() / 20;
    assert_eq!(rounds, 4, "{:?}", io.log.lock().unwrap());
    assert_eq!(done.writes, 11);
    // Every write is handed back with the version it left, the status last.
    assert_eq!(done.written.len(), 11);
    assert_eq!(
        done.written.last().map(|w| &w.0),
        Some(&crate::echo::Target::Cluster)
    );
    assert!(done.written.iter().all(|(_, v)| v.is_some()));
}
