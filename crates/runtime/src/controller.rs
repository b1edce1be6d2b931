//! The watches, the caches and the reconcile loop around [`crate::reconcile`].
//!
//! One controller per watched scope (all namespaces, or each `--namespace`), each with:
//! - the `DatabaseCluster` watch (as [`DeserializeGuard`], so one unreadable object fails alone)
//!   feeding the store and the Secret reverse index;
//! - watches of the owned kinds (StatefulSet, Service, ConfigMap, CronJob,
//!   PodDisruptionBudget), filtered by `app.kubernetes.io/managed-by=database-operator` and mapped
//!   to their owner;
//! - a watch of the pods that carry `database.example.com/cluster`, mapped by that label;
//! - a metadata-only watch of Secrets, mapped through [`SecretIndex`] to exactly the clusters
//!   that reference the Secret.
//!
//! Every cached object has its `managedFields` (and the bulky last-applied annotation) removed;
//! owned objects and pods are held in [`Compact`] form (typed metadata, the rest as JSON) and
//! rebuilt for the cluster a reconcile looks at.
//! A reconcile reads only these caches, plus one GET of the password Secret when its
//! resourceVersion moved ([`Fingerprints`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use database_operator_api::DatabaseCluster;
use database_operator_core::render;
use database_operator_core::{
    EventType, Observed, OperatorConfig, OwnedKind, OwnedObjects, PlannedEvent,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PartialObjectMeta};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tracing::Instrument;

use crate::cache::{self, Cached, Compact};
use crate::error::{Backoff, Error};
use crate::index::PodIndex;
use crate::io::{ClusterIo, KubeIo};
use crate::labels;
use crate::metrics::{Metrics, Outcome};
use crate::reconcile::{self, Failures, KnownMatches};
use crate::secrets::{Fingerprints, KubeSecrets, SecretIndex, SecretSource};

/// Which namespaces one controller watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace (one cluster-wide watch per kind).
    All,
    /// One namespace.
    Namespace(String),
}

impl Scope {
    /// The scopes for the `--namespace` flags given (none: all namespaces).
    pub fn from_namespaces(namespaces: &[String]) -> Vec<Scope> {
        if namespaces.is_empty() {
            return vec![Scope::All];
        }
        let mut unique: Vec<String> = namespaces.to_vec();
        unique.sort();
        unique.dedup();
        unique.into_iter().map(Scope::Namespace).collect()
    }

    fn api<K>(&self, client: Client) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self {
            Scope::All => Api::all(client),
            Scope::Namespace(ns) => Api::namespaced(client, ns),
        }
    }

    /// A label for logs and metrics: `*` or the namespace.
    pub fn label(&self) -> &str {
        match self {
            Scope::All => "*",
            Scope::Namespace(ns) => ns,
        }
    }
}

/// Removes what the operator never reads from a cached object's metadata.
pub fn strip<K: Resource>(obj: &mut K) {
    cache::strip_meta(obj.meta_mut());
}

/// Reduces a Secret's cached metadata to its identity (name, namespace, uid, resourceVersion).
pub fn strip_secret(obj: &mut PartialObjectMeta<Secret>) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    meta.owner_references = None;
}

/// The caches one controller reads.
#[derive(Clone)]
pub struct Stores {
    /// DatabaseClusters.
    pub clusters: Store<DeserializeGuard<DatabaseCluster>>,
    /// Owned StatefulSets.
    pub stateful_sets: Store<Compact<StatefulSet>>,
    /// Owned Services.
    pub services: Store<Compact<Service>>,
    /// Owned ConfigMaps.
    pub config_maps: Store<Compact<ConfigMap>>,
    /// Owned CronJobs.
    pub cron_jobs: Store<Compact<CronJob>>,
    /// Owned PodDisruptionBudgets.
    pub pod_disruption_budgets: Store<Compact<PodDisruptionBudget>>,
    /// Pods of clusters.
    pub pods: Store<Compact<Pod>>,
    /// The names of each cluster's pods, fed by the same watch as `pods`.
    pub pod_index: PodIndex,
    /// Secret metadata.
    pub secrets: Store<PartialObjectMeta<Secret>>,
}

/// Whether every watch of one controller has delivered its first complete list, fed by the
/// watch streams (after the event reached the cache). Any number of tasks can wait on it:
/// kube's `Store::wait_until_ready` sits on a one-shot channel that wakes only the last of
/// several waiters, so reconciles waiting on it next to the readiness probe never woke.
#[derive(Clone, Debug)]
pub struct Synced {
    inner: Arc<SyncedInner>,
}

#[derive(Debug)]
struct SyncedInner {
    pending: Mutex<std::collections::BTreeSet<&'static str>>,
    tx: tokio::sync::watch::Sender<bool>,
}

impl Synced {
    /// Waiting for the first list of each of `watches`; with none, synced at once.
    pub fn new(watches: &[&'static str]) -> Self {
        let pending: std::collections::BTreeSet<&'static str> = watches.iter().copied().collect();
        let (tx, _) = tokio::sync::watch::channel(pending.is_empty());
        Self {
            inner: Arc::new(SyncedInner {
                pending: Mutex::new(pending),
                tx,
            }),
        }
    }

    /// `watch` has delivered a complete list (later relists change nothing).
    pub fn listed(&self, watch: &'static str) {
        let mut pending = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pending.remove(watch) && pending.is_empty() {
            self.inner.tx.send_replace(true);
        }
    }

    /// Waits until every watch has listed.
    pub async fn wait(&self) {
        let mut rx = self.inner.tx.subscribe();
        // The sender lives as long as `self`: this cannot fail.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Marks `watch` listed when `event` completes its first list.
    fn observe<K>(&self, watch: &'static str, event: &watcher::Event<K>) {
        if matches!(event, watcher::Event::InitDone) {
            self.listed(watch);
        }
    }
}

/// Names of the watches one controller waits for, in [`Synced`].
pub const WATCHES: [&str; 8] = [
    "databaseclusters",
    "statefulsets",
    "services",
    "configmaps",
    "cronjobs",
    "poddisruptionbudgets",
    "pods",
    "secrets",
];

fn controlled_by<K: Resource>(obj: &K, namespace: &str, uid: &str) -> bool {
    obj.meta().namespace.as_deref() == Some(namespace)
        && obj
            .owner_references()
            .iter()
            .any(|r| r.uid == uid && r.controller == Some(true))
}

/// The typed object of a cache entry; an entry that cannot be rebuilt (it was written by this
/// process, so that would be a bug) is logged and left out.
fn rebuilt<K: Cached>(entry: &Compact<K>) -> Option<K> {
    match entry.object() {
        Ok(object) => Some(object),
        Err(e) => {
            tracing::error!(
                kind = K::KIND,
                name = entry.meta().name.as_deref().unwrap_or_default(),
                error = %e,
                "a cached object could not be rebuilt; left out of this reconcile"
            );
            None
        }
    }
}

/// The objects of `store` called one of `names` in `namespace` whose controller is `uid`, by name.
fn owned_from<K: Cached>(
    store: &Store<Compact<K>>,
    namespace: &str,
    uid: &str,
    names: &[&str],
) -> Vec<K> {
    let mut objects: Vec<K> = names
        .iter()
        .filter_map(|name| store.get(&ObjectRef::new(name).within(namespace)))
        .filter(|o| controlled_by(o.as_ref(), namespace, uid))
        .filter_map(|o| rebuilt(o.as_ref()))
        .collect();
    objects.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    objects
}

/// The objects `cluster` controls, from the caches: looked up by the names the core gives them
/// ([`render::owned_object_keys`]), kept when their controller owner reference is the cluster.
/// A lookup by name costs the same with 10 or 10,000 clusters in the cache; an object the
/// cluster controls under another name is not seen (the operator never creates one).
pub fn owned_objects(stores: &Stores, cluster: &DatabaseCluster) -> OwnedObjects {
    let namespace = cluster.namespace().unwrap_or_default();
    let uid = cluster.uid().unwrap_or_default();
    if uid.is_empty() {
        return OwnedObjects::default();
    }
    let keys = render::owned_object_keys(&cluster.name_any());
    let names = |kind: OwnedKind| -> Vec<&str> {
        keys.iter()
            .filter(|k| k.kind == kind)
            .map(|k| k.name.as_str())
            .collect()
    };
    OwnedObjects {
        stateful_sets: owned_from(
            &stores.stateful_sets,
            &namespace,
            &uid,
            &names(OwnedKind::StatefulSet),
        ),
        services: owned_from(
            &stores.services,
            &namespace,
            &uid,
            &names(OwnedKind::Service),
        ),
        config_maps: owned_from(
            &stores.config_maps,
            &namespace,
            &uid,
            &names(OwnedKind::ConfigMap),
        ),
        cron_jobs: owned_from(
            &stores.cron_jobs,
            &namespace,
            &uid,
            &names(OwnedKind::CronJob),
        ),
        pod_disruption_budgets: owned_from(
            &stores.pod_disruption_budgets,
            &namespace,
            &uid,
            &names(OwnedKind::PodDisruptionBudget),
        ),
    }
}

/// The pods labelled with the cluster's name in its namespace, from the cache: looked up
/// through [`PodIndex`], so the cost is the cluster's pods, not every pod in the cache (the
/// scan this replaced was most of a steady reconcile's CPU with 300 clusters).
pub fn pods_of(stores: &Stores, cluster: &DatabaseCluster) -> Vec<Pod> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    // Sorted by name already; the label is checked again against the cached pod, as the index
    // can hold more than the cache while a relist is under way.
    stores
        .pod_index
        .pods_of(&namespace, &name)
        .iter()
        .filter_map(|pod| stores.pods.get(&ObjectRef::new(pod).within(&namespace)))
        .filter(|p| p.labels().get(labels::CLUSTER) == Some(&name))
        .filter_map(|p| rebuilt(p.as_ref()))
        .collect()
}

/// Everything one reconcile needs.
pub struct Context<I = KubeIo, S = KubeSecrets> {
    /// Cluster writes.
    pub io: I,
    /// Where Secrets are read from when a fingerprint is stale.
    pub secret_source: S,
    /// Fingerprint cache.
    pub fingerprints: Fingerprints,
    /// The caches.
    pub stores: Stores,
    /// Failures per cluster, for backoff and once-only reporting.
    pub failures: Failures,
    /// Comparisons of owned objects the last reconciles found unchanged.
    pub known_matches: KnownMatches,
    /// When the cluster gauge was last recounted.
    pub gauge_refreshed: Mutex<Option<Instant>>,
    /// Retry delays.
    pub backoff: Backoff,
    /// Installation settings passed to the core.
    pub config: OperatorConfig,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The scope, for the cluster gauge.
    pub scope: Scope,
    /// Unreadable objects already reported, by (namespace, name) -> resourceVersion.
    pub invalid_reported: Mutex<HashMap<(String, String), String>>,
    /// Whether every watch has its first complete list; reconciles wait for it.
    pub synced: Synced,
}

/// Builds the Observed for `cluster` from the caches (and the fingerprint cache).
pub async fn gather<I, S: SecretSource>(
    ctx: &Context<I, S>,
    cluster: &DatabaseCluster,
) -> Result<Observed, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let secret_ref = &cluster.spec.password_secret_ref;
    let watched = ctx
        .stores
        .secrets
        .get(&ObjectRef::new(&secret_ref.name).within(&namespace));
    let secret = ctx
        .fingerprints
        .state(
            &ctx.secret_source,
            &namespace,
            &secret_ref.name,
            &secret_ref.key,
            watched
                .as_ref()
                .and_then(|m| m.metadata.resource_version.as_deref()),
        )
        .await?;
    Ok(Observed {
        cluster: cluster.clone(),
        owned: owned_objects(&ctx.stores, cluster),
        pods: pods_of(&ctx.stores, cluster),
        secret,
        members: BTreeMap::new(),
        now: Timestamp::now(),
        config: ctx.config.clone(),
        known_matches: ctx.known_matches.get(&namespace, &cluster.name_any()),
    })
}

/// How often at most the cluster gauge is recounted: counting walks every cluster in the cache,
/// which after every reconcile would make each reconcile cost O(clusters).
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

fn refresh_cluster_gauge<I, S>(ctx: &Context<I, S>) {
    {
        let mut last = ctx
            .gauge_refreshed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_some_and(|at| at.elapsed() < GAUGE_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
    }
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for obj in ctx.stores.clusters.state() {
        let phase = match &obj.0 {
            Ok(c) => c
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or("Unknown", |p| p.as_str()),
            Err(_) => "Invalid",
        };
        *counts
            .entry((obj.namespace().unwrap_or_default(), phase.to_owned()))
            .or_default() += 1;
    }
    ctx.metrics.set_clusters(ctx.scope.label(), &counts);
}

fn invalid_reference(obj: &DeserializeGuard<DatabaseCluster>) -> ObjectReference {
    ObjectReference {
        api_version: Some(DatabaseCluster::api_version(&()).into_owned()),
        kind: Some(DatabaseCluster::kind(&()).into_owned()),
        name: obj.meta().name.clone(),
        namespace: obj.meta().namespace.clone(),
        uid: obj.meta().uid.clone(),
        resource_version: obj.meta().resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// One reconcile of one watched object: the span, the metrics, the log line and the error
/// handling around [`reconcile::reconcile`].
pub async fn reconcile_object<I: ClusterIo, S: SecretSource>(
    obj: Arc<DeserializeGuard<DatabaseCluster>>,
    ctx: Arc<Context<I, S>>,
) -> Result<Action, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let span = tracing::info_span!("reconcile", namespace = %namespace, name = %name);
    async move {
        // Decisions are made from the caches only, so not before every watch has its first
        // complete list: the cluster watch can deliver a cluster before the pod watch has
        // listed its pods, and a missing pod or object would look like a real absence. After
        // a restart that flipped conditions, emitted events and re-applied CronJobs for some
        // clusters, only to flip back on the next pass (the restart phase of the 1,000-cluster
        // benchmark). Synced once; afterwards this returns at once.
        ctx.synced.wait().await;
        let _worker = ctx.metrics.worker();
        let started = Instant::now();
        let cluster = match &obj.0 {
            Ok(cluster) => cluster,
            Err(invalid) => {
                report_invalid(&ctx, &obj, &invalid.error).await;
                ctx.metrics.reconciled(&namespace, Outcome::Error, started.elapsed());
                return Ok(Action::await_change());
            }
        };
        let result = match gather(&ctx, cluster).await {
            Ok(observed) => reconcile::reconcile(&ctx.io, &observed).await,
            Err(e) => Err(e),
        };
        let action = match result {
            Ok(done) => {
                ctx.failures.reset(&namespace, &name);
                ctx.known_matches.set(&namespace, &name, done.known_matches);
                ctx.metrics.reconciled(&namespace, Outcome::Success, started.elapsed());
                tracing::info!(
                    writes = done.writes,
                    requeue_after_secs = done.requeue_after.map(|d| d.as_secs()),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "reconciled"
                );
                done.requeue_after.map_or_else(Action::await_change, Action::requeue)
            }
            Err(error) => {
                ctx.metrics.error(error.category());
                let failure = ctx.failures.record(&namespace, &name, &error.to_string());
                let delay = reconcile::report_error(&ctx.io, cluster, &error, &failure, &ctx.backoff, Timestamp::now()).await;
                if error.is_conflict() {
                    ctx.metrics.reconciled(&namespace, Outcome::Conflict, started.elapsed());
                    tracing::debug!(%error, retry_in_ms = delay.as_millis() as u64, "conflict; retrying");
                } else {
                    ctx.metrics.reconciled(&namespace, Outcome::Error, started.elapsed());
                    tracing::warn!(
                        %error,
                        category = error.category().as_str(),
                        failures = failure.count,
                        retry_in_secs = delay.as_secs(),
                        "reconcile failed"
                    );
                }
                Action::requeue(delay)
            }
        };
        refresh_cluster_gauge(&ctx);
        Ok(action)
    }
    .instrument(span)
    .await
}

async fn report_invalid<I: ClusterIo, S>(
    ctx: &Context<I, S>,
    obj: &DeserializeGuard<DatabaseCluster>,
    message: &str,
) {
    let id = (obj.namespace().unwrap_or_default(), obj.name_any());
    let version = obj.resource_version().unwrap_or_default();
    {
        let mut reported = ctx
            .invalid_reported
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if reported.get(&id) == Some(&version) {
            return;
        }
        reported.insert(id.clone(), version);
    }
    let error = Error::InvalidObject {
        namespace: id.0,
        name: id.1,
        message: message.to_owned(),
    };
    ctx.metrics.error(error.category());
    tracing::warn!(%error, "cannot read DatabaseCluster; waiting for it to change");
    let event = PlannedEvent {
        type_: EventType::Warning,
        reason: error.category().event_reason().to_owned(),
        message: format!("{error}. Fix the object; it is looked at again when it changes."),
    };
    if let Err(e) = ctx.io.publish(&invalid_reference(obj), &event).await {
        tracing::warn!(error = %e, "could not publish event");
    }
}

fn error_policy<I, S>(
    _obj: Arc<DeserializeGuard<DatabaseCluster>>,
    error: &Error,
    ctx: Arc<Context<I, S>>,
) -> Action {
    // reconcile_object handles its errors itself and returns Ok; this only runs if that changes.
    tracing::warn!(%error, "reconcile failed");
    Action::requeue(ctx.backoff.initial)
}

/// Health as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Readiness {
    leading: AtomicBool,
    synced: AtomicBool,
}

impl Readiness {
    /// Ready: a standby replica (nothing to sync), or a leader whose caches have synced.
    pub fn is_ready(&self) -> bool {
        !self.leading.load(Ordering::SeqCst) || self.synced.load(Ordering::SeqCst)
    }

    /// Whether the caches of the running controllers have synced.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Marks the start of leading (caches not yet synced).
    pub fn start_leading(&self) {
        self.synced.store(false, Ordering::SeqCst);
        self.leading.store(true, Ordering::SeqCst);
    }

    /// Marks every cache as synced.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Marks the end of leading.
    pub fn stop_leading(&self) {
        self.leading.store(false, Ordering::SeqCst);
        self.synced.store(false, Ordering::SeqCst);
    }
}

/// How the controllers run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespaces to watch (empty: all).
    pub namespaces: Vec<String>,
    /// Reconciles in flight at once, per controller.
    pub concurrency: u16,
    /// Installation settings passed to the core.
    pub operator: OperatorConfig,
    /// Retry delays.
    pub backoff: Backoff,
}

/// Objects per page of a watch's initial list. A page is read whole and parsed at once, and
/// the watches of all kinds list together when the operator starts, so the page size bounds
/// the memory a restart needs on top of the caches (docs/performance.md: with kube's default
/// of 500 and typed caches, a restart with 300 clusters peaked at 107 MB of heap). 100 costs a
/// few more LIST requests.
pub const LIST_PAGE_SIZE: u32 = 100;

fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

fn owned_stream<K>(
    client: &Client,
    scope: &Scope,
    synced: &Synced,
    watch: &'static str,
) -> (
    Store<Compact<K>>,
    impl futures::Stream<Item = Result<Compact<K>, watcher::Error>> + Send + 'static,
)
where
    K: Cached + k8s_openapi::Resource<Scope = NamespaceResourceScope> + std::fmt::Debug,
{
    let (reader, writer) = reflector::store();
    let config = watch_config().labels(&labels::managed_selector());
    let synced = synced.clone();
    let stream = watcher(scope.api::<Compact<K>>(client.clone()), config)
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |event| synced.observe(watch, event))
        .touched_objects();
    (reader, stream)
}

/// Runs one controller per scope until `shutdown` completes (in-flight reconciles finish) or
/// the returned future is dropped (everything stops at once: used when the lease is lost).
pub async fn run(
    client: Client,
    io: KubeIo,
    settings: Settings,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    metrics.set_max_concurrent_reconciles(settings.concurrency);
    let scopes = Scope::from_namespaces(&settings.namespaces);
    let mut controllers = Vec::new();
    let mut all_synced = Vec::new();
    for scope in scopes {
        let (synced, controller) = build(
            &client,
            io.clone(),
            &settings,
            &metrics,
            scope,
            shutdown.clone(),
        );
        all_synced.push(synced);
        controllers.push(controller);
    }
    let sync = async {
        futures::future::join_all(all_synced.iter().map(Synced::wait)).await;
        tracing::info!("every watch has synced");
        readiness.mark_synced();
        // Stay pending: the controllers decide when this ends.
        futures::future::pending::<()>().await;
    };
    tokio::select! {
        _ = futures::future::join_all(controllers) => {}
        _ = sync => {}
    }
}

fn build(
    client: &Client,
    io: KubeIo,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    scope: Scope,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (Synced, impl Future<Output = ()> + Send + 'static) {
    let index = SecretIndex::default();
    let synced = Synced::new(&WATCHES);

    let (clusters, cluster_writer) = reflector::store::<DeserializeGuard<DatabaseCluster>>();
    let feed = index.clone();
    let cluster_stream = watcher(
        scope.api::<DeserializeGuard<DatabaseCluster>>(client.clone()),
        watch_config(),
    )
    .default_backoff()
    .modify(strip::<DeserializeGuard<DatabaseCluster>>)
    .map_ok(move |event| {
        feed.apply(&event);
        event
    })
    .reflect(cluster_writer)
    .inspect_ok({
        let synced = synced.clone();
        move |event| synced.observe("databaseclusters", event)
    })
    .applied_objects();

    let (stateful_sets, sts_stream) =
        owned_stream::<StatefulSet>(client, &scope, &synced, "statefulsets");
    let (services, svc_stream) = owned_stream::<Service>(client, &scope, &synced, "services");
    let (config_maps, cm_stream) = owned_stream::<ConfigMap>(client, &scope, &synced, "configmaps");
    let (cron_jobs, cj_stream) = owned_stream::<CronJob>(client, &scope, &synced, "cronjobs");
    let (pod_disruption_budgets, pdb_stream) =
        owned_stream::<PodDisruptionBudget>(client, &scope, &synced, "poddisruptionbudgets");

    let (pods, pod_writer) = reflector::store::<Compact<Pod>>();
    let pod_index = PodIndex::default();
    let pod_stream = watcher(
        scope.api::<Compact<Pod>>(client.clone()),
        watch_config().labels(&labels::pod_selector()),
    )
    .default_backoff()
    .reflect(pod_writer)
    .inspect_ok({
        let synced = synced.clone();
        let pod_index = pod_index.clone();
        move |event| {
            // After the cache, before the controller hears of the event and before Synced,
            // so a reconcile it triggers finds the pod through the index. During a relist the
            // index holds listed pods before the cache swaps them in; `pods_of` skips those.
            pod_index.apply(event);
            synced.observe("pods", event);
        }
    })
    .touched_objects();

    let (secrets, secret_writer) = reflector::store::<PartialObjectMeta<Secret>>();
    let secret_stream = watcher(
        scope.api::<PartialObjectMeta<Secret>>(client.clone()),
        watch_config(),
    )
    .default_backoff()
    .modify(strip_secret)
    .reflect(secret_writer)
    .inspect_ok({
        let synced = synced.clone();
        move |event| synced.observe("secrets", event)
    })
    .touched_objects();

    let stores = Stores {
        clusters: clusters.clone(),
        stateful_sets,
        services,
        config_maps,
        cron_jobs,
        pod_disruption_budgets,
        pods,
        pod_index,
        secrets,
    };
    let ctx = Arc::new(Context {
        io,
        secret_source: KubeSecrets::new(client.clone()),
        fingerprints: Fingerprints::default(),
        stores: stores.clone(),
        failures: Failures::default(),
        known_matches: KnownMatches::default(),
        gauge_refreshed: Mutex::new(None),
        backoff: settings.backoff,
        config: settings.operator.clone(),
        metrics: metrics.clone(),
        scope: scope.clone(),
        invalid_reported: Mutex::new(HashMap::new()),
        synced: synced.clone(),
    });

    let controller = Controller::for_stream(cluster_stream, clusters)
        .with_config(ControllerConfig::default().concurrency(settings.concurrency))
        .owns_stream(sts_stream)
        .owns_stream(svc_stream)
        .owns_stream(cm_stream)
        .owns_stream(cj_stream)
        .owns_stream(pdb_stream)
        .watches_stream(pod_stream, |pod: Compact<Pod>| {
            let namespace = pod.namespace();
            pod.labels().get(labels::CLUSTER).map(|cluster| {
                let r = ObjectRef::new(cluster);
                match namespace {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
        })
        .watches_stream(secret_stream, move |secret: PartialObjectMeta<Secret>| {
            index.clusters_for(&secret.namespace().unwrap_or_default(), &secret.name_any())
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile_object, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) => {}
                Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
                    tracing::debug!(object = %r, "queued object is gone");
                }
                Err(e) => tracing::warn!(error = %e, "controller"),
            }
        });
    tracing::info!(scope = scope.label(), "controller started");
    (synced, controller)
}

/// How long [`run`] waits for in-flight reconciles after a shutdown request before it is
/// stopped anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    use database_operator_core::SecretState;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use kube::runtime::reflector::store::Writer;

    use super::*;
    use crate::io::MockClusterIo;

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
                vec![m]
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
        Stores {
            clusters: store_of(clusters),
            stateful_sets: compact_store_of(Vec::<StatefulSet>::new()),
            services: compact_store_of(vec![
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
            ]),
            config_maps: compact_store_of(Vec::<ConfigMap>::new()),
            cron_jobs: compact_store_of(Vec::<CronJob>::new()),
            pod_disruption_budgets: compact_store_of(Vec::<PodDisruptionBudget>::new()),
            pods,
            pod_index,
            secrets: store_of(secrets),
        }
    }

    /// The pod cache and its index, fed with the same first list as the pod watch feeds them.
    fn pod_store_of(pods: Vec<Pod>) -> (Store<Compact<Pod>>, PodIndex) {
        let index = PodIndex::default();
        index.apply(&watcher::Event::Init);
        for pod in &pods {
            index.apply(&watcher::Event::InitApply(
                Compact::new(pod.clone()).unwrap(),
            ));
        }
        index.apply(&watcher::Event::InitDone);
        (compact_store_of(pods), index)
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

    fn context(io: MockClusterIo, stores: Stores) -> Arc<Context<MockClusterIo, FakeSecrets>> {
        Arc::new(Context {
            io,
            secret_source: FakeSecrets::default(),
            fingerprints: Fingerprints::default(),
            stores,
            failures: Failures::default(),
            known_matches: KnownMatches::default(),
            gauge_refreshed: Mutex::new(None),
            backoff: Backoff::default(),
            config: OperatorConfig::default(),
            metrics: Arc::new(Metrics::new()),
            scope: Scope::All,
            invalid_reported: Mutex::new(HashMap::new()),
            synced: Synced::new(&[]),
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
        let pods: Vec<_> = observed
            .pods
            .iter()
            .map(|p| (p.name_any(), p.namespace().unwrap()))
            .collect();
        assert_eq!(
            pods,
            [
                ("orders-0".to_owned(), "shop".to_owned()),
                ("orders-1".to_owned(), "shop".to_owned())
            ],
            "the cluster's pods in its namespace, sorted by name"
        );
        assert_eq!(
            observed.secret,
            SecretState::Present {
                fingerprint: crate::secrets::fingerprint("secret-uid", b"hunter2")
            }
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
        let (a, b, c, d, e) = (
            count(&writes),
            count(&writes),
            count(&writes),
            count(&writes),
            count(&writes),
        );
        io.expect_add_finalizer().returning(move |_| {
            a();
            Ok(())
        });
        io.expect_apply().returning(move |_, _| {
            b();
            Ok(())
        });
        io.expect_patch_status().returning(move |_, _| {
            c();
            Ok(())
        });
        io.expect_publish().returning(move |_, _| {
            d();
            Ok(())
        });
        io.expect_label_pod().returning(move |_, _, _| {
            e();
            Ok(())
        });
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
        use database_operator_core::DesiredObject;
        fn round_trip<K: Cached + PartialEq + std::fmt::Debug>(object: &K) {
            let back = Compact::new(object.clone()).unwrap().object().unwrap();
            assert_eq!(&back, object, "{}", K::KIND);
        }
        let ctx = context(MockClusterIo::new(), stores(vec![], Some("5")));
        let observed = gather(&ctx, &cluster()).await.unwrap();
        let plan = database_operator_core::plan(&observed);
        let mut kinds = std::collections::BTreeSet::new();
        for planned in &plan.objects {
            kinds.insert(planned.object.kind());
            match &planned.object {
                DesiredObject::StatefulSet(o) => round_trip(o.as_ref()),
                DesiredObject::Service(o) => round_trip(o.as_ref()),
                DesiredObject::ConfigMap(o) => round_trip(o.as_ref()),
                DesiredObject::CronJob(o) => round_trip(o.as_ref()),
                DesiredObject::PodDisruptionBudget(o) => round_trip(o.as_ref()),
            }
        }
        assert_eq!(kinds.len(), 5, "every owned kind rendered: {kinds:?}");
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
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "mysql", "ready": true, "restartCount": 0, "image": "x", "imageID": "y"}]}
        }))
        .unwrap();
        let labels = pod.metadata.labels.clone();
        let pod = Compact::new(pod).unwrap().object().unwrap();
        assert_eq!(pod.metadata.labels, labels);
        assert!(pod.metadata.managed_fields.is_none());
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some("docker.io/library/mysql:8.4.0")
        );
        assert!(spec.containers[0].env.is_none() && spec.volumes.is_none());
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.conditions.as_ref().unwrap()[0].type_, "Ready");
        assert!(status.pod_ip.is_none() && status.container_statuses.is_none());
        // The core sees the same member.
        let members = database_operator_core::plan::members(
            "db",
            database_operator_api::Engine::Mysql,
            std::slice::from_ref(&pod),
        );
        assert_eq!(members.len(), 1);
        assert!(members[0].ready);
        assert_eq!(members[0].role, Some("primary"));
        assert_eq!(members[0].version.as_deref(), Some("8.4.0"));
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
                Ok(())
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
        io.expect_patch_status().returning(|_, _| Ok(()));
        io.expect_apply().returning(|_, _| Ok(()));
        // The cached pod orders-0 gets its role.
        io.expect_label_pod().returning(|_, _, _| Ok(()));
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
}
