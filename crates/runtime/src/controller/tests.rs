//! Tests of the caches, the Synced barrier and the reconcile handler.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::OperatorSecretState;
use database_operator_core::render::labels;
use database_operator_core::{EventType, OperatorConfig, SecretState};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PartialObjectMeta;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::*;
use crate::cache::{self, Cached, CachedClaim, CachedPod, Compact};
use crate::database::MemberAddress;
use crate::error::{Backoff, Error};
use crate::index::PodIndex;
use crate::io::MockClusterIo;
use crate::members::{FactsCache, KubeMembers};
use crate::metrics::Metrics;
use crate::reconcile::{Failures, KnownMatches, PasswordOutcomes};
use crate::secrets::{Fingerprints, SecretSource};
use crate::stores::{OwnedStores, Stores, cluster_of_operator_secret, strip, strip_secret};

const UID: &str = "uid-orders";

fn cluster_json() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "orders", "namespace": "shop", "uid": UID, "generation": 1, "resourceVersion": "10"},
        "spec": {"engine": "mysql", "version": "8.4.0", "replicas": 3, "storage": {"size": "20Gi"},
                 "passwordSecretRef": {"name": "orders-pw", "key": "password"},
                 "backup": {"schedule": "0 2 * * *", "s3Bucket": "orders-backups"}}
    })
}

fn guard(value: serde_json::Value) -> DeserializeGuard<DatabaseCluster> {
    serde_json::from_value(value).unwrap()
}

fn meta(name: &str, namespace: &str, owner: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        owner_references: owner.map(|uid| {
            vec![OwnerReference {
                api_version: "database.example.com/v1alpha1".into(),
                kind: "DatabaseCluster".into(),
                name: "orders".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        }),
        ..ObjectMeta::default()
    }
}

fn store_of<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    // As a watcher delivers a first list: the store is ready after it.
    let mut writer: Writer<K> = Writer::default();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    writer.as_reader()
}

fn compact_store_of<K: Cached>(objects: Vec<K>) -> Store<Compact<K>> {
    store_of(
        objects
            .into_iter()
            .map(|o| Compact::new(o).unwrap())
            .collect(),
    )
}

fn stores(
    clusters: Vec<DeserializeGuard<DatabaseCluster>>,
    secret_version: Option<&str>,
) -> Stores {
    let secrets = secret_version
        .map(|rv| {
            let m = PartialObjectMeta::<Secret> {
                metadata: ObjectMeta {
                    resource_version: Some(rv.into()),
                    ..meta("orders-pw", "shop", None)
                },
                ..PartialObjectMeta::default()
            };
            // The operator Secret exists once the password Secret does (as the operator
            // creates it on the first pass).
            let operator = PartialObjectMeta::<Secret> {
                metadata: meta("orders-operator", "shop", Some(UID)),
                ..PartialObjectMeta::default()
            };
            vec![m, operator]
        })
        .unwrap_or_default();
    let pod = |name: &str, ns: &str, cluster: &str| Pod {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([(
                labels::CLUSTER.to_owned(),
                cluster.to_owned(),
            )])),
            ..meta(name, ns, None)
        },
        ..Pod::default()
    };
    let (pods, pod_index) = pod_store_of(vec![
        pod("orders-1", "shop", "orders"),
        pod("orders-0", "shop", "orders"),
        pod("orders-0", "elsewhere", "orders"),
        pod("x-0", "shop", "x"),
    ]);
    let mut owned = OwnedStores::default();
    owned.insert(compact_store_of(Vec::<StatefulSet>::new()));
    owned.insert(compact_store_of(vec![
        Service {
            metadata: meta("orders", "shop", Some(UID)),
            ..Service::default()
        },
        Service {
            metadata: meta("orders-other", "shop", Some("another-uid")),
            ..Service::default()
        },
        Service {
            metadata: meta("orders", "elsewhere", Some(UID)),
            ..Service::default()
        },
    ]));
    owned.insert(compact_store_of(Vec::<ConfigMap>::new()));
    owned.insert(compact_store_of(Vec::<CronJob>::new()));
    owned.insert(compact_store_of(Vec::<PodDisruptionBudget>::new()));
    Stores {
        clusters: store_of(clusters),
        owned,
        pods,
        pod_index,
        secrets: store_of(secrets),
        jobs: store_of(Vec::<Job>::new()),
        claims: store_of(Vec::<CachedClaim>::new()),
        storage_classes: store_of(Vec::<StorageClass>::new()),
    }
}

/// The pod cache and its index, fed with the same first list as the pod watch feeds them.
fn pod_store_of(pods: Vec<Pod>) -> (Store<CachedPod>, PodIndex) {
    let index = PodIndex::default();
    index.apply(&watcher::Event::Init);
    for pod in &pods {
        index.apply(&watcher::Event::InitApply(CachedPod::new(pod)));
    }
    index.apply(&watcher::Event::InitDone);
    (store_of(pods.iter().map(CachedPod::new).collect()), index)
}

#[derive(Default)]
struct FakeSecrets {
    gets: AtomicUsize,
}

impl SecretSource for FakeSecrets {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
        self.gets.fetch_add(1, AtomicOrdering::SeqCst);
        Ok(Some(Secret {
            metadata: ObjectMeta {
                uid: Some("secret-uid".into()),
                resource_version: Some("5".into()),
                ..meta(name, namespace, None)
            },
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(b"hunter2".to_vec()),
            )])),
            ..Secret::default()
        }))
    }
}

type TestContext = Context<MockClusterIo, FakeSecrets, KubeMembers<FakeSecrets>>;

fn context(io: MockClusterIo, stores: Stores) -> Arc<TestContext> {
    Arc::new(Context {
        io,
        members: KubeMembers::new(stores.clone(), FakeSecrets::default(), MemberAddress::PodIp),
        facts: FactsCache::default(),
        database_failures: Failures::default(),
        password_outcomes: PasswordOutcomes::default(),
        probe: ProbeSettings::default(),
        secret_source: FakeSecrets::default(),
        fingerprints: Fingerprints::default(),
        provided_certs: crate::provided_cert::Checked::default(),
        stores,
        failures: Failures::default(),
        known_matches: KnownMatches::default(),
        echoes: crate::echo::Echoes::default(),
        gauge_refreshed: Mutex::new(None),
        backoff: Backoff::default(),
        config: OperatorConfig::default(),
        metrics: Arc::new(Metrics::new()),
        scope: Scope::All,
        invalid_reported: Mutex::new(HashMap::new()),
        synced: Synced::new(&[]),
        lane: super::lane::WriteLane::new(5),
    })
}

fn cluster() -> DatabaseCluster {
    serde_json::from_value(cluster_json()).unwrap()
}

#[tokio::test]
async fn gather_reads_only_the_clusters_own_objects_from_the_caches() {
    let ctx = context(MockClusterIo::new(), stores(vec![], Some("5")));
    let observed = gather(&ctx, &cluster()).await.unwrap();
    let services: Vec<_> = observed
        .owned
        .services
        .iter()
        .map(|s| (s.name_any(), s.namespace().unwrap()))
        .collect();
    assert_eq!(
        services,
        [("orders".to_owned(), "shop".to_owned())],
        "controlled by this uid, in its namespace"
    );
    let pods: Vec<_> = observed.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        pods,
        ["orders-0", "orders-1"],
        "the cluster's pods in its namespace (not orders-0 of another namespace), sorted by name"
    );
    assert_eq!(
        observed.secret,
        SecretState::Present {
            fingerprint: crate::secrets::fingerprint("secret-uid", b"hunter2")
        }
    );
    assert_eq!(
        observed.operator_secret,
        OperatorSecretState::Present {
            owner_uids: vec![UID.to_owned()]
        },
        "from the metadata watch, never read"
    );
    // Same resourceVersion: no second read.
    gather(&ctx, &cluster()).await.unwrap();
    assert_eq!(ctx.secret_source.gets.load(AtomicOrdering::SeqCst), 1);
}

#[tokio::test]
async fn gather_without_the_secret_in_the_cache_reads_nothing() {
    let ctx = context(MockClusterIo::new(), stores(vec![], None));
    let observed = gather(&ctx, &cluster()).await.unwrap();
    assert_eq!(observed.secret, SecretState::Missing);
    assert_eq!(observed.operator_secret, OperatorSecretState::Missing);
    assert_eq!(ctx.secret_source.gets.load(AtomicOrdering::SeqCst), 0);
}

#[tokio::test]
async fn a_reconcile_waits_until_every_watch_has_listed() {
    let writes = Arc::new(AtomicUsize::new(0));
    let mut io = MockClusterIo::new();
    let count = |w: &Arc<AtomicUsize>| {
        let w = w.clone();
        move || {
            w.fetch_add(1, AtomicOrdering::SeqCst);
        }
    };
    let (a, b, b2, c, d, e) = (
        count(&writes),
        count(&writes),
        count(&writes),
        count(&writes),
        count(&writes),
        count(&writes),
    );
    io.expect_add_finalizer().returning(move |_| {
        a();
        Ok(None)
    });
    io.expect_apply().returning(move |_, _| {
        b();
        Ok(None)
    });
    // A new cluster's TLS Secrets (tls_issuer).
    io.expect_put_secret().returning(|_, _| Ok(None));
    io.expect_read_secret().returning(|_, _| Ok(None));
    io.expect_create().returning(move |_, _| {
        b2();
        Ok(None)
    });
    io.expect_patch_status().returning(move |_, _| {
        c();
        Ok(None)
    });
    io.expect_publish().returning(move |_, _| {
        d();
        Ok(())
    });
    io.expect_label_pod().returning(move |_, _, _| {
        e();
        Ok(None)
    });
    // The new cluster's first primary may initialize its database.
    io.expect_set_pod_label()
        .withf(|_, pod, key, value| {
            pod == "orders-0" && key == labels::INITIALIZE && *value == Some("allowed")
        })
        .returning(|_, _, _, _| Ok(None));
    let mut ctx = context(io, stores(vec![guard(cluster_json())], Some("5")));
    let synced = Synced::new(&["pods", "services"]);
    Arc::get_mut(&mut ctx).unwrap().synced = synced.clone();
    let obj = Arc::new(guard(cluster_json()));
    // Several reconciles wait at once (kube's store readiness wakes only one of them).
    let pending: Vec<_> = (0..3)
        .map(|_| tokio::spawn(reconcile_object(obj.clone(), ctx.clone())))
        .collect();
    synced.listed("services");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        pending.iter().all(|p| !p.is_finished()),
        "reconciled before the pods were listed"
    );
    assert_eq!(writes.load(AtomicOrdering::SeqCst), 0);

    // The pod list arrives: every waiting reconcile runs and writes.
    synced.listed("pods");
    for p in pending {
        tokio::time::timeout(Duration::from_secs(5), p)
            .await
            .expect("every reconcile went on once every watch had listed")
            .unwrap()
            .unwrap();
    }
    assert!(writes.load(AtomicOrdering::SeqCst) > 0);
}

/// Every kind the operator renders comes back from the cache equal to what was rendered:
/// a field lost on the way would show as drift and a write on every reconcile.
#[tokio::test]
async fn rendered_objects_survive_the_compact_cache_unchanged() {
    use database_operator_core::{ObjectVisitor, OwnedKind, OwnedResource};
    struct RoundTrip;
    impl ObjectVisitor<'_> for RoundTrip {
        type Output = ();
        fn visit<K: OwnedResource>(self, object: &K) {
            let back = Compact::new(object.clone()).unwrap().object().unwrap();
            assert_eq!(&back, object, "{}", K::OWNED_KIND.as_str());
        }
    }
    let ctx = context(MockClusterIo::new(), stores(vec![], Some("5")));
    // Self-fencing, so that the member agents' objects and the Lease are rendered too.
    let mut cluster = cluster();
    cluster.spec.failover = Some(database_operator_api::FailoverSpec {
        node_loss: database_operator_api::NodeLossPolicy::SelfFence,
        ..Default::default()
    });
    let observed = gather(&ctx, &cluster).await.unwrap();
    let plan = database_operator_core::plan(&observed);
    let mut kinds = std::collections::BTreeSet::new();
    for planned in &plan.objects {
        kinds.insert(planned.object.kind());
        planned.object.visit(RoundTrip);
    }
    assert_eq!(
        kinds.len(),
        OwnedKind::all().len(),
        "every owned kind rendered: {kinds:?}"
    );
}

#[test]
fn a_cached_pod_keeps_what_the_core_reads() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db-0", "namespace": "shop",
                     "labels": {"database.example.com/role": "primary"},
                     "managedFields": [{"manager": "kubelet"}]},
        "spec": {"containers": [{"name": "mysql", "image": "docker.io/library/mysql:8.4.0",
                                 "env": [{"name": "A", "value": "b"}], "args": ["--x"]}],
                 "volumes": [{"name": "data", "emptyDir": {}}], "nodeName": "n1"},
        "status": {"phase": "Running", "podIP": "127.0.0.9",
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "mysql", "ready": true, "restartCount": 0, "image": "x", "imageID": "y"}]}
    }))
    .unwrap();
    let cached = CachedPod::new(&pod);
    // Exactly what the core reads, built by the core.
    assert_eq!(
        cached.member(),
        &database_operator_core::MemberPod::from_pod(&pod)
    );
    assert_eq!(cached.member().name, "db-0");
    assert!(cached.member().ready && !cached.member().terminating);
    assert_eq!(
        cached.member().images["mysql"],
        "docker.io/library/mysql:8.4.0"
    );
    // For lookups: identity and the cluster label only.
    assert!(cached.meta().managed_fields.is_none());
    assert_eq!(cached.meta().labels, None, "no cluster label on this pod");
    // The core sees the same member.
    let members = database_operator_core::members::members(
        "db",
        database_operator_api::Engine::Mysql,
        std::slice::from_ref(cached.member()),
    );
    assert_eq!(members.len(), 1);
    assert!(members[0].ready);
    assert_eq!(members[0].role, Some("primary"));
    assert_eq!(members[0].version.as_deref(), Some("8.4.0"));
}

#[test]
fn member_volumes_come_from_the_claim_cache_with_their_class() {
    let claim = |name: &str,
                 cluster: &str,
                 class: &str|
     -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": "5",
                         "labels": {"database.example.com/cluster": cluster, "app": "x"},
                         "managedFields": [{"manager": "kube-controller-manager"}]},
            "spec": {"storageClassName": class, "resources": {"requests": {"storage": "20Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "20Gi"},
                       "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}
        }))
        .unwrap()
    };
    let class = |name: &str, expand: Option<bool>| StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        provisioner: "example.com/disk".into(),
        allow_volume_expansion: expand,
        ..StorageClass::default()
    };
    let mut stores = stores(vec![], Some("5"));
    stores.claims = store_of(
        [
            claim("data-orders-0", "orders", "fast"),
            claim("data-orders-1", "orders", "fixed"),
            claim("data-orders-2", "orders", "gone"),
            // Scaled away (spec.replicas is 3), another cluster's label, another name.
            claim("data-orders-3", "orders", "fast"),
            claim("data-x-0", "x", "fast"),
        ]
        .iter()
        .map(CachedClaim::new)
        .collect(),
    );
    stores.storage_classes = store_of(vec![class("fast", Some(true)), class("fixed", None)]);
    let cached = stores
        .claims
        .get(&kube::runtime::reflector::ObjectRef::new("data-orders-0").within("shop"))
        .unwrap();
    assert!(cached.meta().managed_fields.is_none());
    assert_eq!(cached.meta().labels.as_ref().map(BTreeMap::len), Some(1));
    let volumes = crate::stores::volumes_of(&stores, &cluster());
    let seen: Vec<_> = volumes
        .iter()
        .map(|v| (v.claim.as_str(), v.expansion))
        .collect();
    use database_operator_core::ClassExpansion::*;
    assert_eq!(
        seen,
        [
            ("data-orders-0", Allowed),
            ("data-orders-1", NotAllowed),
            ("data-orders-2", Unknown)
        ]
    );
    assert_eq!(volumes[0].capacity.as_deref(), Some("20Gi"));
    assert!(volumes[0].file_system_pending);
}

#[test]
fn strip_drops_managed_fields_and_last_applied() {
    let mut svc = Service {
        metadata: meta("a", "b", None),
        ..Service::default()
    };
    svc.metadata.managed_fields = Some(vec![Default::default()]);
    svc.metadata.annotations = Some(BTreeMap::from([
        (cache::LAST_APPLIED.to_owned(), "{...}".to_owned()),
        ("keep".to_owned(), "me".to_owned()),
    ]));
    strip(&mut svc);
    assert!(svc.metadata.managed_fields.is_none());
    assert_eq!(
        svc.metadata
            .annotations
            .unwrap()
            .into_keys()
            .collect::<Vec<_>>(),
        ["keep"]
    );
}

#[test]
fn only_operator_secrets_keep_their_owner_references_in_the_cache() {
    let secret = |name: &str| {
        let mut m = PartialObjectMeta::<Secret> {
            metadata: meta(name, "shop", Some(UID)),
            ..PartialObjectMeta::default()
        };
        m.metadata.labels = Some(BTreeMap::from([("a".to_owned(), "b".to_owned())]));
        strip_secret(&mut m);
        m
    };
    let operator = secret("orders-operator");
    assert_eq!(operator.metadata.owner_references.unwrap()[0].uid, UID);
    assert!(operator.metadata.labels.is_none());
    assert!(secret("orders-pw").metadata.owner_references.is_none());
    // TLS Secrets keep their owners and the annotations that describe the certificate.
    let mut tls = PartialObjectMeta::<Secret> {
        metadata: meta("orders-tls", "shop", Some(UID)),
        ..PartialObjectMeta::default()
    };
    tls.metadata.annotations = Some(BTreeMap::from([
        (
            database_operator_core::tls::NOT_AFTER_ANNOTATION.to_owned(),
            "2027-01-01T00:00:00Z".to_owned(),
        ),
        (
            "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
            "{}".to_owned(),
        ),
    ]));
    strip_secret(&mut tls);
    assert_eq!(tls.metadata.owner_references.unwrap()[0].uid, UID);
    assert_eq!(
        tls.metadata
            .annotations
            .unwrap()
            .into_keys()
            .collect::<Vec<_>>(),
        [database_operator_core::tls::NOT_AFTER_ANNOTATION]
    );
}

#[test]
fn an_operator_secret_maps_to_its_cluster_when_that_cluster_is_cached() {
    let stores = stores(vec![guard(cluster_json())], None);
    let secret = |name: &str, ns: &str| PartialObjectMeta::<Secret> {
        metadata: meta(name, ns, None),
        ..PartialObjectMeta::default()
    };
    for name in [
        "orders-operator",
        "orders-tls",
        "orders-ca",
        "orders-ca-key",
    ] {
        let found = cluster_of_operator_secret(&stores.clusters, &secret(name, "shop"));
        assert_eq!(
            found.map(|r| (r.name, r.namespace)),
            Some(("orders".to_owned(), Some("shop".to_owned()))),
            "{name}"
        );
    }
    for (name, ns) in [
        ("orders-operator", "elsewhere"),
        ("other-operator", "shop"),
        ("orders", "shop"),
    ] {
        assert!(
            cluster_of_operator_secret(&stores.clusters, &secret(name, ns)).is_none(),
            "{ns}/{name}"
        );
    }
}

#[test]
fn scopes_from_flags() {
    assert_eq!(Scope::from_namespaces(&[]), [Scope::All]);
    let scopes = Scope::from_namespaces(&["b".into(), "a".into(), "b".into()]);
    assert_eq!(
        scopes,
        [Scope::Namespace("a".into()), Scope::Namespace("b".into())]
    );
}

#[tokio::test]
async fn failures_back_off_report_once_and_reset_on_success() {
    let mut io = MockClusterIo::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    // Finalizer fails twice with a server error, then works.
    io.expect_add_finalizer().times(3).returning(move |_| {
        if c.fetch_add(1, AtomicOrdering::SeqCst) < 2 {
            Err(Error::api(
                "add finalizer to",
                "DatabaseCluster",
                "shop",
                "orders",
                kube::Error::Api(Box::new(kube::core::Status {
                    code: 500,
                    message: "boom".into(),
                    ..Default::default()
                })),
            ))
        } else {
            Ok(None)
        }
    });
    let warnings = Arc::new(AtomicUsize::new(0));
    let w = warnings.clone();
    io.expect_publish().returning(move |_, e| {
        if e.type_ == EventType::Warning {
            w.fetch_add(1, AtomicOrdering::SeqCst);
        }
        Ok(())
    });
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_apply().returning(|_, _| Ok(None));
    io.expect_create().returning(|_, _| Ok(None));
    // A new cluster's TLS Secrets (tls_issuer).
    io.expect_put_secret().returning(|_, _| Ok(None));
    io.expect_read_secret().returning(|_, _| Ok(None));
    // The cached pod orders-0 gets its role, and as the first primary the label that lets it
    // initialize.
    io.expect_label_pod().returning(|_, _, _| Ok(None));
    io.expect_set_pod_label().returning(|_, _, _, _| Ok(None));
    let obj = Arc::new(guard(cluster_json()));
    let ctx = context(io, stores(vec![guard(cluster_json())], Some("5")));

    let first = reconcile_object(obj.clone(), ctx.clone()).await.unwrap();
    assert_eq!(first, Action::requeue(Duration::from_secs(5)));
    let second = reconcile_object(obj.clone(), ctx.clone()).await.unwrap();
    assert_eq!(second, Action::requeue(Duration::from_secs(10)));
    assert_eq!(
        warnings.load(AtomicOrdering::SeqCst),
        1,
        "the same error is reported once"
    );
    let third = reconcile_object(obj, ctx.clone()).await.unwrap();
    assert_eq!(
        third,
        Action::requeue(Duration::from_secs(30)),
        "success: the plan's resync"
    );
    assert_eq!(
        ctx.failures.record("shop", "orders", "x").count,
        1,
        "success reset the failures"
    );

    let text = ctx.metrics.encode().unwrap();
    assert!(
        text.contains(
            "controller_runtime_reconcile_errors_total{controller=\"databasecluster\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"success\"} 1"), "{text}");
    assert!(
        text.contains("database_operator_reconcile_errors_total{category=\"Kube\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("database_clusters_total{namespace=\"shop\",phase=\"Unknown\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn unreadable_object_is_reported_once_and_waits_for_a_change() {
    let mut bad = cluster_json();
    bad["spec"]["engine"] = "oracle".into();
    let mut io = MockClusterIo::new();
    io.expect_publish()
        .times(1)
        .withf(|r, e| {
            r.name.as_deref() == Some("orders")
                && e.reason == "InvalidObject"
                && e.message.contains("oracle")
        })
        .returning(|_, _| Ok(()));
    let ctx = context(io, stores(vec![], None));
    let obj = Arc::new(guard(bad));
    assert!(obj.0.is_err());
    assert_eq!(
        reconcile_object(obj.clone(), ctx.clone()).await.unwrap(),
        Action::await_change()
    );
    assert_eq!(
        reconcile_object(obj, ctx).await.unwrap(),
        Action::await_change()
    );
}

/// A reconcile that runs before the watches show the previous reconcile's writes would plan
/// them again (the caches still show the old state): it is deferred and writes nothing.
#[tokio::test]
async fn a_reconcile_before_the_watches_show_the_last_writes_is_deferred() {
    let writes = Arc::new(AtomicUsize::new(0));
    let mut io = MockClusterIo::new();
    let counted = |w: &Arc<AtomicUsize>, version: &'static str| {
        let w = w.clone();
        move || {
            w.fetch_add(1, AtomicOrdering::SeqCst);
            Ok(Some(version.to_owned()))
        }
    };
    let (a, b, b2, c, d) = (
        counted(&writes, "11"),
        counted(&writes, "21"),
        counted(&writes, "21"),
        counted(&writes, "12"),
        counted(&writes, "31"),
    );
    io.expect_add_finalizer().returning(move |_| a());
    io.expect_apply().returning(move |_, _| b());
    // A new cluster's TLS Secrets (tls_issuer).
    io.expect_put_secret().returning(|_, _| Ok(None));
    io.expect_read_secret().returning(|_, _| Ok(None));
    io.expect_create().returning(move |_, _| b2());
    io.expect_patch_status().returning(move |_, _| c());
    io.expect_label_pod().returning(move |_, _, _| d());
    io.expect_set_pod_label().returning(|_, _, _, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let ctx = context(io, stores(vec![guard(cluster_json())], Some("5")));
    let obj = Arc::new(guard(cluster_json()));

    reconcile_object(obj.clone(), ctx.clone()).await.unwrap();
    let first = writes.load(AtomicOrdering::SeqCst);
    assert!(first > 0, "a new cluster is written");

    // The caches (static here) never show those writes: the next reconcile waits.
    let action = reconcile_object(obj.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(crate::echo::ECHO_RECHECK));
    assert_eq!(
        writes.load(AtomicOrdering::SeqCst),
        first,
        "nothing written twice"
    );
    let text = ctx.metrics.encode().unwrap();
    assert!(
        text.contains("database_operator_reconciles_deferred_total 1"),
        "{text}"
    );

    // Without remembered writes (another process, or after ECHO_WAIT) it plans again.
    ctx.echoes.forget("shop", "orders");
    reconcile_object(obj, ctx.clone()).await.unwrap();
    assert!(writes.load(AtomicOrdering::SeqCst) > first);
}
