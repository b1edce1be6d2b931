//! The calls a plan turns into, checked against a mock [`ClusterIo`].

use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;

use database_operator_api::conditions::{self, reasons};
use database_operator_api::{
    BackupDeletionPolicy, DatabaseCluster, DatabaseClusterStatus, FINALIZER,
};

use database_operator_core::credentials::{OperatorSecretState, SecretChange};
use database_operator_core::finalize::CLEANUP_POLL;
use database_operator_core::render::labels;
use database_operator_core::{
    ObjectKey, ObjectVisitor, Observed, OperatorConfig, OwnedKind, OwnedObjects, OwnedResource,
    SecretState,
};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use mockall::Sequence;
use mockall::predicate::always;

use super::*;
use crate::io::MockClusterIo;

mod failover;
mod waves;
use failover::NoMembers;

fn now() -> Timestamp {
    "2025-06-01T12:00:00Z".parse().unwrap()
}

fn cluster(finalizer: bool) -> DatabaseCluster {
    let mut c: DatabaseCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "0b6e0c52-1f7e-4d8e-9a61-3f1d2c4b5a69", "generation": 1},
        "spec": {"engine": "mysql", "version": "8.4.0", "replicas": 3,
                 "storage": {"size": "20Gi"},
                 "passwordSecretRef": {"name": "orders-pw", "key": "password"},
                 "backup": {"schedule": "0 2 * * *", "retention": 7, "s3Bucket": "orders-backups"}}
    }))
    .unwrap();
    if finalizer {
        c.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    }
    c
}

fn observed(cluster: DatabaseCluster) -> Observed {
    let mut observed = Observed {
        cluster,
        owned: OwnedObjects::default(),
        pods: Vec::new(),
        secret: SecretState::Present {
            fingerprint: "0123456789abcdef".into(),
        },
        now: now(),
        config: OperatorConfig::default(),
        known_matches: BTreeMap::new(),
        cleanup_job: None,
        backup_jobs: Vec::new(),
        member_facts: Default::default(),
        operator_secret: OperatorSecretState::Present {
            owner_uids: Vec::new(),
        },
        secret_unkeyed_fingerprint: None,
        password_outcome: None,
        primary_lease: None,
        volumes: Vec::new(),
        tls: Default::default(),
    };
    // The TLS Secrets exist, as the operator Secret does.
    observed.tls = database_operator_core::tls::TlsObserved::settled(&observed);
    observed
}

/// What the cluster looks like once plans for `observed` have been carried out until there is
/// nothing left to do (the core's fixpoint): every desired object exists as rendered, the status
/// is the planned one, the finalizer is on.
fn converged(mut observed: Observed) -> Observed {
    observed.cluster.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    for _ in 0..5 {
        let plan = database_operator_core::plan(&observed);
        if plan.is_noop() {
            return observed;
        }
        let mut owned = OwnedObjects::default();
        for (version, planned) in plan.objects.into_iter().enumerate() {
            // Stored objects carry a resourceVersion, as the API server returns them.
            struct Store<'a>(&'a mut OwnedObjects, String);
            impl ObjectVisitor<'_> for Store<'_> {
                type Output = ();
                fn visit<K: OwnedResource>(self, object: &K) {
                    let mut object = object.clone();
                    object.metadata_mut().resource_version = Some(self.1);
                    K::items_mut(self.0).push(object);
                }
            }
            planned
                .object
                .visit(Store(&mut owned, (1000 + version).to_string()));
        }
        observed.owned = owned;
        for step in &plan.pod_actions {
            match step {
                PodAction::ExpandVolume { claim, size } => {
                    if let Some(v) = observed.volumes.iter_mut().find(|v| &v.claim == claim) {
                        v.requested = Some(size.clone());
                    }
                }
                PodAction::LabelPod { pod, role } => {
                    if let Some(p) = observed.pods.iter_mut().find(|p| &p.name == pod) {
                        p.labels
                            .insert(labels::ROLE.to_owned(), role.as_str().to_owned());
                    }
                }
                PodAction::SetInitialize { pod, allowed } => {
                    if let Some(p) = observed.pods.iter_mut().find(|p| &p.name == pod) {
                        if *allowed {
                            p.labels.insert(
                                labels::INITIALIZE.to_owned(),
                                labels::INITIALIZE_ALLOWED.to_owned(),
                            );
                        } else {
                            p.labels.remove(labels::INITIALIZE);
                        }
                    }
                }
                PodAction::SetReseed { pod, token } => {
                    if let Some(p) = observed.pods.iter_mut().find(|p| &p.name == pod) {
                        match token {
                            Some(t) => {
                                p.labels.insert(labels::RESEED.to_owned(), t.clone());
                            }
                            None => {
                                p.labels.remove(labels::RESEED);
                            }
                        }
                    }
                }
            }
        }
        observed.cluster.status = Some(plan.status);
    }
    panic!("no fixpoint after 5 plans");
}

fn api_error(code: u16, message: &str) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code,
        message: message.into(),
        ..Default::default()
    }))
}

#[tokio::test]
async fn fresh_cluster_applies_every_object_once_and_patches_status_once() {
    let observed = observed(cluster(false));
    let expected: BTreeSet<ObjectKey> = database_operator_core::plan(&observed)
        .objects
        .iter()
        .map(|o| o.object.key())
        .collect();
    // The seed's shape (StatefulSet, three Services, ConfigMap, CronJob, PDB) and the
    // NetworkPolicy.
    assert_eq!(expected.len(), 8, "{expected:?}");

    let applied = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut io = MockClusterIo::new();
    io.expect_add_finalizer()
        .times(1)
        .returning(|_| Ok(Some("after-finalizer".into())));
    let sink = applied.clone();
    // None of them is in the watches yet: each is created (after the check that no other
    // owner's object has its name), none applied blindly.
    io.expect_create()
        .times(expected.len())
        .returning(move |ns, object| {
            assert_eq!(ns, "shop");
            sink.lock().unwrap().push(object.key());
            Ok(None)
        });
    io.expect_apply().never();
    // The status applies at the version the finalizer's write left (the status write carries
    // it as a precondition: the observed one would be refused, and the first status lost).
    io.expect_patch_status()
        .times(1)
        .withf(|cluster, _| cluster.metadata.resource_version.as_deref() == Some("after-finalizer"))
        .returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));

    let done = reconcile(&io, &NoMembers, &observed).await.unwrap();
    let applied = applied.lock().unwrap().clone();
    let distinct: BTreeSet<ObjectKey> = applied.iter().cloned().collect();
    assert_eq!(distinct, expected);
    assert_eq!(applied.len(), distinct.len(), "each object applied once");
    assert_eq!(done.writes, expected.len() + 2);
    assert!(done.requeue_after.is_some());
}

#[tokio::test]
async fn steady_cluster_makes_no_calls() {
    let steady = converged(observed(cluster(true)));
    // No expectation at all: any call fails the test.
    let io = MockClusterIo::new();
    let done = reconcile(&io, &NoMembers, &steady).await.unwrap();
    assert_eq!(done.writes, 0);
    assert!(done.requeue_after.is_some());
    // Every object was compared and found unchanged: the next pass may skip those walks, and
    // with them it still makes no call.
    let plan = database_operator_core::plan(&steady);
    assert_eq!(done.known_matches.len(), plan.objects.len());
    let mut next = steady.clone();
    next.known_matches = done.known_matches.clone();
    let again = reconcile(&io, &NoMembers, &next).await.unwrap();
    assert_eq!(again.writes, 0);
    assert_eq!(again.known_matches, done.known_matches);
}

#[test]
fn known_matches_are_kept_per_cluster_and_dropped_when_empty() {
    let store = crate::reconcile::KnownMatches::default();
    let steady = converged(observed(cluster(true)));
    let known = database_operator_core::plan(&steady).known_matches(&steady.owned);
    assert!(!known.is_empty());
    store.set("shop", "orders", known.clone());
    assert_eq!(store.get("shop", "orders"), known);
    assert!(store.get("shop", "other").is_empty());
    assert_eq!(store.len(), 1);
    store.set("shop", "orders", BTreeMap::new());
    assert!(store.is_empty());
}

#[tokio::test]
async fn spec_change_applies_only_the_changed_objects() {
    let mut changed = converged(observed(cluster(true)));
    changed.cluster.spec.backup.as_mut().unwrap().schedule = "30 3 * * *".into();
    changed.cluster.metadata.generation = Some(2);

    let mut io = MockClusterIo::new();
    io.expect_apply()
        .times(1)
        .withf(|ns, object| {
            ns == "shop"
                && object.key()
                    == ObjectKey {
                        kind: OwnedKind::CronJob,
                        name: "orders-backup".into(),
                    }
        })
        .returning(|_, _| Ok(None));
    // The next backup time and observed generation move.
    io.expect_patch_status().times(1).returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &NoMembers, &changed).await.unwrap();
    assert_eq!(done.writes, 2);
}

#[tokio::test]
async fn a_larger_size_patches_each_member_claim_and_nothing_else() {
    let mut grown = converged(observed(cluster(true)));
    grown.volumes = (0..grown.cluster.spec.replicas)
        .map(|o| database_operator_core::MemberVolume {
            claim: format!("data-orders-{o}"),
            requested: Some("1Gi".into()),
            capacity: Some("1Gi".into()),
            storage_class: Some("standard".into()),
            expansion: database_operator_core::ClassExpansion::Allowed,
            ..Default::default()
        })
        .collect();
    grown.cluster.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into());
    grown.cluster.metadata.generation = Some(2);
    let mut io = MockClusterIo::new();
    io.expect_expand_claim()
        .times(usize::try_from(grown.cluster.spec.replicas).unwrap())
        .withf(|ns, claim, size| ns == "shop" && claim.starts_with("data-orders-") && size == "2Gi")
        .returning(|_, _, _| Ok(Some("77".into())));
    // The condition (Resizing) and the observed generation; no object is applied.
    io.expect_patch_status().times(1).returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &NoMembers, &grown).await.unwrap();
    assert_eq!(done.writes, 1 + grown.volumes.len());
    assert!(
        done.written.iter().any(
            |(t, v)| *t == crate::echo::Target::Claim("data-orders-0".into())
                && v.as_deref() == Some("77")
        ),
        "the claim write is remembered for its echo: {:?}",
        done.written
    );
}

#[tokio::test]
async fn conflict_requeues_quickly_without_a_warning() {
    let observed = observed(cluster(true));
    let mut io = MockClusterIo::new();
    // The first wave (the ConfigMap and the NetworkPolicy) is written together: both refused.
    io.expect_create().times(2).returning(|ns, object| {
        Err(Error::api(
            "apply",
            "Object",
            ns,
            &object.metadata().name.clone().unwrap_or_default(),
            api_error(409, "the object has been modified"),
        ))
    });
    let error = reconcile(&io, &NoMembers, &observed).await.unwrap_err();
    assert!(error.is_conflict());

    // Reporting it: no event, no status patch (the mock has no such expectations).
    let failures = Failures::default();
    let failure = failures.record("shop", "orders", &error.to_string());
    let backoff = Backoff::default();
    let delay = report_error(
        &io,
        &observed.cluster,
        &error,
        (&failure, &failures),
        &backoff,
        now(),
    )
    .await;
    assert_eq!(delay, backoff.conflict);
    assert!(delay < Duration::from_secs(1));
}

#[tokio::test]
async fn other_errors_back_off_and_are_reported_once() {
    let observed = observed(cluster(true));
    let error = Error::api(
        "apply",
        "StatefulSet",
        "shop",
        "orders",
        api_error(500, "etcdserver: request timed out"),
    );
    let failures = Failures::default();
    let backoff = Backoff::default();

    let mut io = MockClusterIo::new();
    io.expect_publish()
        .times(1)
        .withf(|_, e| {
            e.type_ == EventType::Warning
                && e.reason == "ApiCallFailed"
                && e.message.contains("etcdserver: request timed out")
        })
        .returning(|_, _| Ok(()));
    io.expect_patch_status()
        .times(1)
        .withf(|_, status| {
            status.conditions.iter().any(|c| {
                c.type_ == conditions::DEGRADED
                    && c.status == "True"
                    && c.reason == reasons::RECONCILE_ERROR
                    && c.message.contains("request timed out")
            })
        })
        .returning(|_, _| Ok(None));

    let first = failures.record("shop", "orders", &error.to_string());
    assert_eq!(
        report_error(
            &io,
            &observed.cluster,
            &error,
            (&first, &failures),
            &backoff,
            now()
        )
        .await,
        Duration::from_secs(5)
    );
    // The same error again: longer delay, no second event, no second patch.
    let second = failures.record("shop", "orders", &error.to_string());
    assert!(!second.new_error);
    assert_eq!(
        report_error(
            &io,
            &observed.cluster,
            &error,
            (&second, &failures),
            &backoff,
            now()
        )
        .await,
        Duration::from_secs(10)
    );
    // A success resets the backoff.
    failures.reset("shop", "orders");
    assert_eq!(failures.record("shop", "orders", "x").count, 1);

    // While a failover is in flight the same errors wait at most IN_FLIGHT_RETRY, however
    // many came before; a refused leadership is looked at again after LEADERSHIP_RETRY.
    let mut failing_over = observed.cluster.clone();
    failing_over
        .status
        .get_or_insert_with(Default::default)
        .failover = Some(database_operator_api::FailoverStatus {
        operation: Some(
            serde_json::from_value(serde_json::json!({
                "kind": "Failover", "phase": "Fencing",
                "started": "2026-12-07T03:44:06Z", "phaseStarted": "2026-12-07T03:44:06Z",
                "from": "orders-0", "reason": "pod not Ready and server unreachable",
            }))
            .unwrap(),
        ),
        ..Default::default()
    });
    for _ in 0..5 {
        failures.record("shop", "orders", &error.to_string());
    }
    let sixth = failures.record("shop", "orders", &error.to_string());
    assert!(backoff.delay(sixth.count) >= Duration::from_secs(160));
    let quiet = MockClusterIo::new();
    assert_eq!(
        report_error(
            &quiet,
            &failing_over,
            &error,
            (&sixth, &failures),
            &backoff,
            now()
        )
        .await,
        IN_FLIGHT_RETRY
    );
    let leadership = Error::Leadership {
        why: "reading the leader Lease: injected error".into(),
    };
    assert_eq!(
        report_error(
            &quiet,
            &observed.cluster,
            &leadership,
            (&sixth, &failures),
            &backoff,
            now()
        )
        .await,
        LEADERSHIP_RETRY
    );
}

#[test]
fn degraded_condition_is_written_once_and_keeps_its_transition_time() {
    let mut c = cluster(true);
    let first = status::with_reconcile_error(&c, "boom", now()).unwrap();
    c.status = Some(first.clone());
    assert!(
        status::with_reconcile_error(&c, "boom", now()).is_none(),
        "already says so"
    );
    let later: Timestamp = "2025-06-01T13:00:00Z".parse().unwrap();
    let second = status::with_reconcile_error(&c, "other boom", later).unwrap();
    let t = |s: &DatabaseClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::DEGRADED)
            .unwrap()
            .last_transition_time
            .clone()
    };
    assert_eq!(
        t(&second),
        t(&first),
        "still True: the transition time stays"
    );
    assert_eq!(t(&first), Time(now()));
}

fn deleting(policy: Option<BackupDeletionPolicy>) -> Observed {
    let mut o = converged(observed(cluster(true)));
    o.cluster.metadata.deletion_timestamp = Some(Time(now()));
    match policy {
        Some(p) => o.cluster.spec.backup.as_mut().unwrap().deletion_policy = p,
        None => o.cluster.spec.backup = None,
    }
    o
}

/// The cleanup Job as the Job watch has it: of the cluster with `uid`, in `status`.
fn cleanup_job(uid: &str, status: Option<JobStatus>) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some("orders-cleanup".into()),
            namespace: Some("shop".into()),
            labels: Some(BTreeMap::from([(labels::CLUSTER_UID.into(), uid.into())])),
            ..ObjectMeta::default()
        },
        spec: None,
        status,
    }
}

fn uid(observed: &Observed) -> String {
    observed.cluster.metadata.uid.clone().unwrap()
}

#[tokio::test]
async fn backup_now_creates_the_job_before_the_status_that_records_it() {
    let mut steady = converged(observed(cluster(true)));
    steady
        .cluster
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            database_operator_core::backup_now::ANNOTATION.into(),
            "now-1".into(),
        );
    let expected = database_operator_core::backup_now::job_name("orders", "now-1");
    let mut seq = Sequence::new();
    let mut io = MockClusterIo::new();
    io.expect_create_job()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |ns, job| ns == "shop" && job.metadata.name.as_deref() == Some(&expected))
        .returning(|_, _| Ok(None));
    io.expect_patch_status()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, s| s.handled_backup_now.as_deref() == Some("now-1"))
        .returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &NoMembers, &steady).await.unwrap();
    assert_eq!(done.writes, 2);
}

#[tokio::test]
async fn deletion_creates_the_cleanup_job_and_polls() {
    let observed = deleting(Some(BackupDeletionPolicy::Delete));
    let mut seq = Sequence::new();
    let mut io = MockClusterIo::new();
    io.expect_patch_status()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, s| s.phase == Some(database_operator_api::Phase::Deleting))
        .returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_create_job()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|ns, job| ns == "shop" && job.metadata.name.as_deref() == Some("orders-cleanup"))
        .returning(|_, _| Ok(None));
    io.expect_remove_finalizer().never();
    io.expect_apply().never();
    io.expect_delete().never();
    let done = reconcile(&io, &NoMembers, &observed).await.unwrap();
    assert_eq!(done.requeue_after, Some(CLEANUP_POLL));
}

#[tokio::test]
async fn deletion_removes_the_finalizer_once_the_cleanup_succeeded() {
    let mut observed = deleting(Some(BackupDeletionPolicy::Delete));
    let succeeded = JobStatus {
        succeeded: Some(1),
        ..JobStatus::default()
    };
    observed.cleanup_job = Some(cleanup_job(&uid(&observed), Some(succeeded)));
    let mut seq = Sequence::new();
    let mut io = MockClusterIo::new();
    io.expect_patch_status()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_create_job().never();
    io.expect_remove_finalizer()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(None));
    let done = reconcile(&io, &NoMembers, &observed).await.unwrap();
    assert_eq!(done.requeue_after, None);
}

#[tokio::test]
async fn running_cleanup_keeps_the_finalizer_and_polls() {
    let mut observed = deleting(Some(BackupDeletionPolicy::Delete));
    observed.cleanup_job = Some(cleanup_job(&uid(&observed), None));
    observed = {
        // Let the status settle to what the core wants while deleting.
        let plan = database_operator_core::plan(&observed);
        observed.cluster.status = Some(plan.status);
        observed
    };
    let mut io = MockClusterIo::new();
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_create_job().never();
    io.expect_remove_finalizer().never();
    let done = reconcile(&io, &NoMembers, &observed).await.unwrap();
    assert_eq!(done.requeue_after, Some(CLEANUP_POLL));
    assert_eq!(done.writes, 0);
}

#[tokio::test]
async fn a_leftover_job_of_an_earlier_cluster_is_deleted_first() {
    let mut observed = deleting(Some(BackupDeletionPolicy::Delete));
    observed.cleanup_job = Some(cleanup_job("an-earlier-uid", None));
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_delete_job()
        .times(1)
        .withf(|ns, name| ns == "shop" && name == "orders-cleanup")
        .returning(|_, _| Ok(()));
    io.expect_create_job().never();
    io.expect_remove_finalizer().never();
    let done = reconcile(&io, &NoMembers, &observed).await.unwrap();
    assert_eq!(done.requeue_after, Some(CLEANUP_POLL));
}

#[tokio::test]
async fn failing_cleanup_keeps_the_finalizer_and_retries() {
    let mut observed = deleting(Some(BackupDeletionPolicy::Delete));
    let failed = JobStatus {
        failed: Some(3),
        conditions: Some(vec![JobCondition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: Some("BackoffLimitExceeded".into()),
            ..JobCondition::default()
        }]),
        ..JobStatus::default()
    };
    observed.cleanup_job = Some(cleanup_job(&uid(&observed), Some(failed)));
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_create_job().never();
    io.expect_remove_finalizer().never();
    let error = reconcile(&io, &NoMembers, &observed).await.unwrap_err();
    assert_eq!(error.category(), crate::error::ErrorCategory::Cleanup);
    assert!(
        error.to_string().contains("BackoffLimitExceeded"),
        "{error}"
    );

    let failures = Failures::default();
    let failure = failures.record("shop", "orders", &error.to_string());
    let delay = report_error(
        &io,
        &observed.cluster,
        &error,
        (&failure, &failures),
        &Backoff::default(),
        now(),
    )
    .await;
    assert!(
        delay >= Duration::from_secs(5),
        "retried with backoff, not dropped"
    );
}

#[tokio::test]
async fn retain_keeps_backups_and_says_where() {
    let observed = deleting(Some(BackupDeletionPolicy::Retain));
    let published = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = published.clone();
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish()
        .with(always(), always())
        .returning(move |_, e| {
            sink.lock().unwrap().push(e.clone());
            Ok(())
        });
    io.expect_create_job().never();
    io.expect_remove_finalizer()
        .times(1)
        .returning(|_| Ok(None));
    reconcile(&io, &NoMembers, &observed).await.unwrap();
    let published = published.lock().unwrap();
    let retained: Vec<_> = published
        .iter()
        .filter(|e| e.reason == "BackupsRetained")
        .collect();
    assert_eq!(retained.len(), 1, "{published:?}");
    assert_eq!(retained[0].type_, EventType::Normal);
    assert!(
        retained[0]
            .message
            .contains("bucket orders-backups under shop/orders/"),
        "{}",
        retained[0].message
    );
}

#[tokio::test]
async fn deleted_cluster_without_our_finalizer_is_left_alone() {
    let mut observed = deleting(None);
    observed.cluster.metadata.finalizers = Some(vec!["someone.else/finalizer".into()]);
    let io = MockClusterIo::new();
    let done = reconcile(&io, &NoMembers, &observed).await.unwrap();
    assert_eq!(
        done,
        Reconciled {
            requeue_after: None,
            writes: 0,
            written: Vec::new(),
            known_matches: BTreeMap::new(),
            database_failure: None,
            password_outcome: None,
        }
    );
}

#[tokio::test]
async fn a_missing_operator_secret_is_created_with_generated_passwords_before_any_object() {
    let mut fresh = observed(cluster(true));
    fresh.operator_secret = OperatorSecretState::Missing;
    let plan = database_operator_core::plan(&fresh);
    assert!(matches!(
        plan.secret_changes.as_slice(),
        [SecretChange::Create(_)]
    ));

    let mut seq = Sequence::new();
    let mut io = MockClusterIo::new();
    io.expect_create_secret()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|ns, secret| {
            let data = secret.data.as_ref().expect("values");
            let value = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
            ns == "shop"
                && secret.metadata.name.as_deref() == Some("orders-operator")
                && secret.metadata.owner_references.as_ref().unwrap()[0].uid
                    == "0b6e0c52-1f7e-4d8e-9a61-3f1d2c4b5a69"
                && value("admin-username") == "database_operator"
                && value("replication-username") == "replicator"
                && value("admin-password").len() == crate::credentials::PASSWORD_LEN
                && value("replication-password").len() == crate::credentials::PASSWORD_LEN
        })
        .returning(|_, _| Ok(None));
    io.expect_create()
        .times(plan.objects.len())
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(None));
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &NoMembers, &fresh).await.unwrap();
    assert_eq!(done.writes, plan.objects.len() + 2);
}

/// Members that remember an operator Secret as last read, and are never dialled.
struct Remembering(Option<std::sync::Arc<crate::members::Remembered>>);

impl Members for Remembering {
    type Io = <NoMembers as Members>::Io;
    async fn dial(
        &self,
        cluster: &DatabaseCluster,
        pod: &str,
        purpose: Purpose,
    ) -> Result<Self::Io, MemberError> {
        NoMembers.dial(cluster, pod, purpose).await
    }
    fn host(&self, cluster: &DatabaseCluster, pod: &str) -> Result<String, MemberError> {
        NoMembers.host(cluster, pod)
    }
    async fn superuser_password(
        &self,
        cluster: &DatabaseCluster,
    ) -> Result<Option<(String, crate::database::Secret)>, MemberError> {
        NoMembers.superuser_password(cluster).await
    }
    fn remembered_credentials(
        &self,
        _: &DatabaseCluster,
    ) -> Option<std::sync::Arc<crate::members::Remembered>> {
        self.0.clone()
    }
}

#[tokio::test]
async fn a_deleted_operator_secret_is_restored_byte_for_byte_and_never_generated() {
    let mut ran = converged(observed(cluster(true)));
    ran.cluster.status.get_or_insert_default().current_version = Some("8.4.0".into());
    ran.operator_secret = OperatorSecretState::MissingRemembered;
    let plan = database_operator_core::plan(&ran);
    assert!(
        matches!(plan.secret_changes.as_slice(), [SecretChange::Restore(_)]),
        "{:?}",
        plan.secret_changes
    );
    let data: BTreeMap<String, k8s_openapi::ByteString> = [
        ("admin-username", "database_operator"),
        ("admin-password", "the-servers-know-this-one"),
        ("replication-username", "replicator"),
        ("replication-password", "and-this-one"),
        ("a-key-someone-added", "kept too"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
    .collect();
    let remembered = std::sync::Arc::new(crate::members::Remembered {
        credentials: std::sync::Arc::new(crate::members::Credentials {
            admin_user: "database_operator".into(),
            admin_password: crate::database::Secret::new("the-servers-know-this-one"),
            replication_user: "replicator".into(),
            replication_password: crate::database::Secret::new("and-this-one"),
        }),
        data: data.clone(),
    });
    let mut io = MockClusterIo::new();
    io.expect_create_secret()
        .times(1)
        .withf(move |ns, secret| {
            ns == "shop"
                && secret.metadata.name.as_deref() == Some("orders-operator")
                && secret.metadata.owner_references.as_ref().unwrap()[0].uid
                    == "0b6e0c52-1f7e-4d8e-9a61-3f1d2c4b5a69"
                && secret.data.as_ref() == Some(&data)
        })
        .returning(|_, _| Ok(None));
    io.expect_apply().returning(|_, _| Ok(None));
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    reconcile(&io, &Remembering(Some(remembered)), &ran)
        .await
        .unwrap();

    // Remembered when planned, forgotten when carried out: nothing is created at all.
    let mut io = MockClusterIo::new();
    io.expect_create_secret().times(0);
    io.expect_apply().returning(|_, _| Ok(None));
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let error = reconcile(&io, &Remembering(None), &ran).await.unwrap_err();
    assert!(matches!(error, Error::NothingToRestore { .. }), "{error}");
}

#[tokio::test]
async fn a_deleted_cluster_releases_its_operator_secret_before_the_finalizer_goes() {
    let mut deleted = converged(observed(cluster(true)));
    deleted.cluster.spec.backup = None;
    deleted.cluster.metadata.deletion_timestamp = Some(Time(now()));
    deleted.operator_secret = OperatorSecretState::Present {
        owner_uids: vec!["0b6e0c52-1f7e-4d8e-9a61-3f1d2c4b5a69".into()],
    };
    let mut seq = Sequence::new();
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_release_secret()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|ns, name, uid| {
            (ns, name, uid)
                == (
                    "shop",
                    "orders-operator",
                    "0b6e0c52-1f7e-4d8e-9a61-3f1d2c4b5a69",
                )
        })
        .returning(|_, _, _| Ok(None));
    io.expect_remove_finalizer()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(None));
    reconcile(&io, &NoMembers, &deleted).await.unwrap();

    // A failed release keeps the finalizer (the Secret would go with the cluster otherwise).
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    io.expect_release_secret()
        .times(1)
        .returning(|ns, name, _| {
            Err(Error::api(
                "release",
                "Secret",
                ns,
                name,
                api_error(500, "boom"),
            ))
        });
    io.expect_remove_finalizer().never();
    assert!(reconcile(&io, &NoMembers, &deleted).await.is_err());
}

#[test]
fn the_release_patch_removes_only_the_owner_reference_of_the_cluster() {
    assert_eq!(
        crate::io::release_patch("uid-1"),
        serde_json::json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "uid-1"}]}})
    );
}
