//! Wiring: the watch streams of one controller, their caches and indexes, and the kube
//! `Controller` that runs [`super::handler::reconcile_object`] for each cluster.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use database_operator_api::DatabaseCluster;
use database_operator_core::render::labels;
use database_operator_core::{KindVisitor, OperatorConfig, OwnedKind, OwnedResource};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PartialObjectMeta;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::context::{Context, ProbeSettings};
use super::handler::{error_policy, reconcile_object};
use super::prober;
use super::readiness::Readiness;
use super::scope::Scope;
use super::synced::{Synced, watches};
use crate::cache::{CachedClaim, CachedPod, Compact};
use crate::database::MemberAddress;
use crate::error::Backoff;
use crate::index::PodIndex;
use crate::io::KubeIo;
use crate::members::{FactsCache, KubeMembers};
use crate::metrics::Metrics;
use crate::reconcile::{Failures, KnownMatches, PasswordOutcomes};
use crate::secrets::{Fingerprints, KubeSecrets, SecretIndex};
use crate::stores::{
    OwnedStores, Stores, cluster_of_operator_secret, clusters_waiting_for_a_class, strip,
    strip_secret,
};

/// How the controllers run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespaces to watch (empty: all).
    pub namespaces: Vec<String>,
    /// Reconciles writing objects at once, per controller ([`super::lane`]); the controller
    /// runs [`super::lane::SLOTS_PER_WRITER`] times as many reconciles in all.
    pub concurrency: u16,
    /// How long a reconcile waits for more changes before it runs (kube's trailing debounce).
    pub debounce: Duration,
    /// Installation settings passed to the core.
    pub operator: OperatorConfig,
    /// Retry delays.
    pub backoff: Backoff,
    /// How the members are probed.
    pub probe: ProbeSettings,
    /// How members are dialled.
    pub member_address: MemberAddress,
    /// With leader election: the Lease from which leadership is confirmed before database
    /// steps ([`crate::members::Members::leadership_term`]).
    pub leadership: Option<crate::leader::LeaseSettings>,
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

/// The label selector of the owned-object watches.
fn managed_selector() -> String {
    format!("{}={}", labels::MANAGED_BY, labels::OPERATOR)
}

/// The label selector of the Job watch: the backup cleanup Jobs, the backup Jobs and the
/// restore drills.
fn cleanup_job_selector() -> String {
    format!(
        "{}={},{} in ({},{},{})",
        labels::MANAGED_BY,
        labels::OPERATOR,
        labels::COMPONENT,
        labels::COMPONENT_BACKUP_CLEANUP,
        labels::COMPONENT_BACKUP,
        labels::COMPONENT_BACKUP_VERIFY
    )
}

/// The cluster a pod or Job belongs to, by its `database.example.com/cluster` label.
fn cluster_of<K: kube::Resource>(
    object: &K,
) -> Option<ObjectRef<DeserializeGuard<DatabaseCluster>>> {
    let namespace = object.namespace();
    object.labels().get(labels::CLUSTER).map(|cluster| {
        let r = ObjectRef::new(cluster);
        match namespace {
            Some(ns) => r.within(&ns),
            None => r,
        }
    })
}

type ClusterController = Controller<DeserializeGuard<DatabaseCluster>>;

/// Watches every owned kind: a cache per kind, and the controller told about changes to an
/// object through its controller owner reference.
struct OwnedWatches<'a> {
    client: &'a Client,
    scope: &'a Scope,
    synced: &'a Synced,
    stores: OwnedStores,
    controller: Option<ClusterController>,
}

impl KindVisitor for &mut OwnedWatches<'_> {
    type Output = ();
    fn visit<K: OwnedResource>(self) {
        let (store, writer) = reflector::store::<Compact<K>>();
        let synced = self.synced.clone();
        let stream = watcher(
            self.scope.api::<Compact<K>>(self.client.clone()),
            watch_config().labels(&managed_selector()),
        )
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |event| synced.observe(K::URL_PATH_SEGMENT, event))
        .touched_objects()
        // A Lease renewal (every few seconds per self-fencing cluster) is no reason for a
        // pass; its deletion may be filtered with it, which the prober's read reports.
        .predicate_filter(
            |o: &Compact<K>| o.trigger_digest(),
            kube::runtime::PredicateConfig::default(),
        );
        self.stores.insert::<K>(store);
        self.controller = self.controller.take().map(|c| c.owns_stream(stream));
    }
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
    metrics.set_max_concurrent_reconciles(super::lane::WriteLane::controller_slots(
        settings.concurrency,
    ));
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

/// One scope's controller: its watches and caches, the context its reconciles share, and the
/// prober; returns what tells when the watches have synced, and the future that runs it all.
fn build(
    client: &Client,
    io: KubeIo,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    scope: Scope,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> (Synced, impl Future<Output = ()> + Send + 'static) {
    let index = SecretIndex::default();
    let synced = Synced::new(&watches());

    let (clusters, cluster_stream) = cluster_watch(client, &scope, &synced, index.clone());
    let mut owned = OwnedWatches {
        client,
        scope: &scope,
        synced: &synced,
        stores: OwnedStores::default(),
        controller: Some(
            Controller::for_stream(cluster_stream, clusters.clone()).with_config(
                ControllerConfig::default()
                    .concurrency(super::lane::WriteLane::controller_slots(
                        settings.concurrency,
                    ))
                    .debounce(settings.debounce),
            ),
        ),
    };
    for kind in OwnedKind::all() {
        kind.visit(&mut owned);
    }
    let (pods, pod_index, pod_stream) = pod_watch(client, &scope, &synced);
    let (secrets, secret_stream) = secret_watch(client, &scope, &synced);
    let (jobs, job_stream) = job_watch(client, &scope, &synced);
    let (claims, claim_stream) = claim_watch(client, &scope, &synced);
    let (storage_classes, class_stream) = storage_class_watch(client, &synced);

    let secret_clusters = clusters.clone();
    let class_clusters = clusters.clone();
    let stores = Stores {
        clusters,
        owned: owned.stores,
        pods,
        pod_index,
        secrets,
        jobs,
        claims,
        storage_classes,
    };
    let ctx = context(client, io, settings, metrics, &scope, &synced, stores);

    // The prober asks for reconciles when member facts change.
    let (trigger, triggered) = futures::channel::mpsc::unbounded();
    let probing = prober::run(ctx.clone(), trigger);
    let controller = owned
        .controller
        .take()
        .expect("the controller is put back after each owned watch")
        .reconcile_on(triggered)
        .watches_stream(pod_stream, |pod: CachedPod| cluster_of(&pod))
        .watches_stream(job_stream, |job: Job| cluster_of(&job))
        .watches_stream(claim_stream, |claim: CachedClaim| cluster_of(&claim))
        .watches_stream(class_stream, move |_: StorageClass| {
            clusters_waiting_for_a_class(&class_clusters)
        })
        .watches_stream(secret_stream, move |secret: PartialObjectMeta<Secret>| {
            let mut clusters =
                index.clusters_for(&secret.namespace().unwrap_or_default(), &secret.name_any());
            // The operator Secret `<cluster>-operator` concerns its cluster.
            clusters.extend(cluster_of_operator_secret(&secret_clusters, &secret));
            clusters
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile_object, error_policy, ctx)
        .for_each(|result| async move { log_reconcile_result(result) });
    tracing::info!(scope = scope.label(), "controller started");
    let run = async move {
        // The prober lives as long as the controller (it never ends on its own).
        tokio::select! {
            () = controller => {}
            () = probing => {}
        }
    };
    (synced, run)
}

/// The clusters' cache and the stream of clusters to reconcile; `index` learns which Secrets
/// each cluster names.
fn cluster_watch(
    client: &Client,
    scope: &Scope,
    synced: &Synced,
    index: SecretIndex,
) -> (
    reflector::Store<DeserializeGuard<DatabaseCluster>>,
    impl futures::Stream<Item = Result<DeserializeGuard<DatabaseCluster>, watcher::Error>>
    + Send
    + 'static,
) {
    let (clusters, cluster_writer) = reflector::store::<DeserializeGuard<DatabaseCluster>>();
    let stream = watcher(
        scope.api::<DeserializeGuard<DatabaseCluster>>(client.clone()),
        watch_config(),
    )
    .default_backoff()
    .modify(strip::<DeserializeGuard<DatabaseCluster>>)
    .map_ok(move |event| {
        index.apply(&event);
        event
    })
    .reflect(cluster_writer)
    .inspect_ok({
        let synced = synced.clone();
        move |event| synced.observe("databaseclusters", event)
    })
    .applied_objects();
    (clusters, stream)
}

/// The pods' cache and index (every pod of some cluster), and the stream of changed pods.
fn pod_watch(
    client: &Client,
    scope: &Scope,
    synced: &Synced,
) -> (
    reflector::Store<CachedPod>,
    PodIndex,
    impl futures::Stream<Item = Result<CachedPod, watcher::Error>> + Send + 'static,
) {
    let (pods, pod_writer) = reflector::store::<CachedPod>();
    let pod_index = PodIndex::default();
    let stream = watcher(
        scope.api::<CachedPod>(client.clone()),
        // Every pod of some cluster.
        watch_config().labels(labels::CLUSTER),
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
    (pods, pod_index, stream)
}

/// The Secrets' metadata cache and the stream of changed Secrets.
fn secret_watch(
    client: &Client,
    scope: &Scope,
    synced: &Synced,
) -> (
    reflector::Store<PartialObjectMeta<Secret>>,
    impl futures::Stream<Item = Result<PartialObjectMeta<Secret>, watcher::Error>> + Send + 'static,
) {
    let (secrets, secret_writer) = reflector::store::<PartialObjectMeta<Secret>>();
    let stream = watcher(
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
    (secrets, stream)
}

/// The cache of the operator's backup Jobs ([`cleanup_job_selector`]) and the stream of
/// changed Jobs.
fn job_watch(
    client: &Client,
    scope: &Scope,
    synced: &Synced,
) -> (
    reflector::Store<Job>,
    impl futures::Stream<Item = Result<Job, watcher::Error>> + Send + 'static,
) {
    let (jobs, job_writer) = reflector::store::<Job>();
    let stream = watcher(
        scope.api::<Job>(client.clone()),
        watch_config().labels(&cleanup_job_selector()),
    )
    .default_backoff()
    .modify(strip::<Job>)
    .reflect(job_writer)
    .inspect_ok({
        let synced = synced.clone();
        move |event| synced.observe("jobs", event)
    })
    .touched_objects();
    (jobs, stream)
}

/// The members' data volume claims' cache (every claim with the cluster label: the
/// StatefulSet gives its claims the pod selector's labels) and the stream of changed claims.
fn claim_watch(
    client: &Client,
    scope: &Scope,
    synced: &Synced,
) -> (
    reflector::Store<CachedClaim>,
    impl futures::Stream<Item = Result<CachedClaim, watcher::Error>> + Send + 'static,
) {
    let (claims, claim_writer) = reflector::store::<CachedClaim>();
    let stream = watcher(
        scope.api::<CachedClaim>(client.clone()),
        watch_config().labels(labels::CLUSTER),
    )
    .default_backoff()
    .reflect(claim_writer)
    .inspect_ok({
        let synced = synced.clone();
        move |event| synced.observe("persistentvolumeclaims", event)
    })
    .touched_objects();
    (claims, stream)
}

/// The StorageClasses' cache (cluster-scoped, a handful) and the stream of changed classes.
fn storage_class_watch(
    client: &Client,
    synced: &Synced,
) -> (
    reflector::Store<StorageClass>,
    impl futures::Stream<Item = Result<StorageClass, watcher::Error>> + Send + 'static,
) {
    let (classes, class_writer) = reflector::store::<StorageClass>();
    let stream = watcher(Api::<StorageClass>::all(client.clone()), watch_config())
        .default_backoff()
        .modify(strip::<StorageClass>)
        .reflect(class_writer)
        .inspect_ok({
            let synced = synced.clone();
            move |event| synced.observe("storageclasses", event)
        })
        .touched_objects();
    (classes, stream)
}

/// What every reconcile of one scope shares.
fn context(
    client: &Client,
    io: KubeIo,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    scope: &Scope,
    synced: &Synced,
    stores: Stores,
) -> Arc<Context> {
    let mut members = KubeMembers::new(
        stores.clone(),
        KubeSecrets::new(client.clone()),
        settings.member_address,
    )
    .with_leases(client.clone());
    if let Some(lease) = &settings.leadership {
        members = members.with_leadership(client.clone(), lease.clone());
    }
    Arc::new(Context {
        io,
        members,
        facts: FactsCache::default(),
        database_failures: Failures::default(),
        password_outcomes: PasswordOutcomes::default(),
        probe: settings.probe,
        secret_source: KubeSecrets::new(client.clone()),
        fingerprints: Fingerprints::default(),
        provided_certs: crate::provided_cert::Checked::default(),
        stores,
        failures: Failures::default(),
        known_matches: KnownMatches::default(),
        echoes: crate::echo::Echoes::default(),
        gauge_refreshed: Mutex::new(None),
        backoff: settings.backoff,
        config: settings.operator.clone(),
        metrics: metrics.clone(),
        scope: scope.clone(),
        invalid_reported: Mutex::new(HashMap::new()),
        synced: synced.clone(),
        lane: super::lane::WriteLane::new(usize::from(settings.concurrency)),
    })
}

/// Logs what the controller reports of one reconcile besides success.
fn log_reconcile_result<T, E, Q>(result: Result<T, kube::runtime::controller::Error<E, Q>>)
where
    E: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    match result {
        Ok(_) => {}
        Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
            tracing::debug!(object = %r, "queued object is gone");
        }
        Err(e) => tracing::warn!(error = %e, "controller"),
    }
}

/// How long [`run`] waits for in-flight reconciles after a shutdown request before it is
/// stopped anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
