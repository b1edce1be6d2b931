//! The caches one controller reads, and the lookups a reconcile makes in them. No IO: every
//! lookup is by name (or through an index), so its cost does not grow with the number of
//! clusters in the cache.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::{self, OperatorSecretState};
use database_operator_core::render::{cleanup_job, labels};
use database_operator_core::{
    ClassExpansion, KindVisitor, MemberPod, MemberVolume, OwnedKind, OwnedObjects, OwnedResource,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PartialObjectMeta;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::cache::{self, Cached, CachedClaim, CachedPod, Compact};
use crate::index::PodIndex;

/// Removes what the operator never reads from a cached object's metadata.
pub fn strip<K: Resource>(obj: &mut K) {
    cache::strip_meta(obj.meta_mut());
}

/// Reduces a Secret's cached metadata to its identity (name, namespace, uid, resourceVersion),
/// and, for a Secret named like an operator Secret (`<cluster>-operator`), its owner references
/// (whether it still belongs to its cluster decides what happens to it at deletion); for one
/// named like a TLS Secret ([`database_operator_core::tls::cluster_of_secret`]) its owner
/// references and the annotations that describe its certificate
/// ([`database_operator_core::tls::ANNOTATIONS`]).
pub fn strip_secret(obj: &mut PartialObjectMeta<Secret>) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.labels = None;
    let name = meta.name.as_deref().unwrap_or_default();
    let operator_secret = name.ends_with(credentials::OPERATOR_SECRET_SUFFIX);
    let tls_secret = database_operator_core::tls::cluster_of_secret(name).is_some();
    match meta.annotations.as_mut() {
        Some(annotations) if tls_secret => {
            annotations
                .retain(|k, _| database_operator_core::tls::ANNOTATIONS.contains(&k.as_str()));
        }
        _ => meta.annotations = None,
    }
    if !operator_secret && !tls_secret {
        meta.owner_references = None;
    }
}

/// The cluster an operator Secret (`<cluster>-operator`) or a TLS Secret is named for, when that
/// cluster is in the cache.
pub fn cluster_of_operator_secret(
    clusters: &Store<DeserializeGuard<DatabaseCluster>>,
    secret: &PartialObjectMeta<Secret>,
) -> Option<ObjectRef<DeserializeGuard<DatabaseCluster>>> {
    let name = secret.metadata.name.as_deref()?;
    let cluster = name
        .strip_suffix(credentials::OPERATOR_SECRET_SUFFIX)
        .or_else(|| database_operator_core::tls::cluster_of_secret(name))?;
    let reference = ObjectRef::new(cluster).within(secret.metadata.namespace.as_deref()?);
    clusters.get(&reference).map(|_| reference)
}

/// The operator Secret of `cluster` as the metadata watch shows it: whether it exists and the
/// uids of its owner references.
pub fn operator_secret_of(stores: &Stores, cluster: &DatabaseCluster) -> OperatorSecretState {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = credentials::operator_secret_name(&cluster.name_any());
    match stores
        .secrets
        .get(&ObjectRef::new(&name).within(&namespace))
    {
        None => OperatorSecretState::Missing,
        Some(meta) => OperatorSecretState::present(&meta.metadata),
    }
}

/// What the Secret cache shows of the cluster's TLS Secrets ([`database_operator_core::tls`]):
/// their annotations and owners, never their values.
pub fn tls_of(
    stores: &Stores,
    cluster: &DatabaseCluster,
) -> database_operator_core::tls::TlsObserved {
    use database_operator_core::tls;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let uid = cluster.uid().unwrap_or_default();
    let sighting = |secret: String| {
        let meta = stores
            .secrets
            .get(&ObjectRef::new(&secret).within(&namespace))?;
        tls::CertSighting::from_metadata(&meta.metadata, &uid)
    };
    tls::TlsObserved {
        ca: sighting(tls::ca_key_secret_name(&name)),
        server: sighting(tls::server_secret_name(&name)),
        published: sighting(tls::ca_secret_name(&name)),
        // Filled by the reconcile when a certificate is provided (it may read the Secret).
        provided: None,
    }
}

/// The cache of each owned kind, found by its type.
#[derive(Clone, Default)]
pub struct OwnedStores {
    by_kind: HashMap<OwnedKind, Arc<dyn Any + Send + Sync>>,
}

impl OwnedStores {
    /// Adds the cache of `K`.
    pub fn insert<K: Cached>(&mut self, store: Store<Compact<K>>) {
        self.by_kind.insert(K::OWNED_KIND, Arc::new(store));
    }

    /// The cache of `K`, when there is one.
    pub fn get<K: Cached>(&self) -> Option<&Store<Compact<K>>> {
        self.by_kind.get(&K::OWNED_KIND)?.downcast_ref()
    }
}

/// The caches one controller reads.
#[derive(Clone)]
pub struct Stores {
    /// DatabaseClusters.
    pub clusters: Store<DeserializeGuard<DatabaseCluster>>,
    /// Owned objects, by kind.
    pub owned: OwnedStores,
    /// Pods of clusters, as far as the core reads them.
    pub pods: Store<CachedPod>,
    /// The names of each cluster's pods, fed by the same watch as `pods`.
    pub pod_index: PodIndex,
    /// Secret metadata.
    pub secrets: Store<PartialObjectMeta<Secret>>,
    /// Backup cleanup Jobs.
    pub jobs: Store<Job>,
    /// The members' data volume claims (every claim with the cluster label).
    pub claims: Store<CachedClaim>,
    /// StorageClasses (whether a claim may grow).
    pub storage_classes: Store<StorageClass>,
}

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
                kind = K::OWNED_KIND.as_str(),
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
    names: &[String],
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
/// ([`OwnedResource::names`]), kept when their controller owner reference is the cluster.
/// A lookup by name costs the same with 10 or 10,000 clusters in the cache; an object the
/// cluster controls under another name is not seen (the operator never creates one).
pub fn owned_objects(stores: &Stores, cluster: &DatabaseCluster) -> OwnedObjects {
    struct Collect<'a> {
        stores: &'a OwnedStores,
        owned: &'a mut OwnedObjects,
        namespace: &'a str,
        uid: &'a str,
        name: &'a str,
    }
    impl KindVisitor for &mut Collect<'_> {
        type Output = ();
        fn visit<K: OwnedResource>(self) {
            if let Some(store) = self.stores.get::<K>() {
                *K::items_mut(self.owned) =
                    owned_from(store, self.namespace, self.uid, &K::names(self.name));
            }
        }
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let uid = cluster.uid().unwrap_or_default();
    let mut owned = OwnedObjects::default();
    if uid.is_empty() {
        return owned;
    }
    let name = cluster.name_any();
    let mut collect = Collect {
        stores: &stores.owned,
        owned: &mut owned,
        namespace: &namespace,
        uid: &uid,
        name: &name,
    };
    for kind in OwnedKind::all() {
        kind.visit(&mut collect);
    }
    owned
}

/// The pods labelled with the cluster's name in its namespace, from the cache: looked up
/// through [`PodIndex`], so the cost is the cluster's pods, not every pod in the cache (the
/// scan this replaced was most of a steady reconcile's CPU with 300 clusters).
pub fn pods_of(stores: &Stores, cluster: &DatabaseCluster) -> Vec<MemberPod> {
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
        .map(|p| p.member().clone())
        .collect()
}

/// The data volume claims of the members of `cluster` in spec (ordinals below
/// `spec.replicas`), from the cache, looked up by name and kept when they carry the cluster's
/// label; each with whether its StorageClass, from the class cache, allows expansion.
pub fn volumes_of(stores: &Stores, cluster: &DatabaseCluster) -> Vec<MemberVolume> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    (0..cluster.spec.replicas)
        .filter_map(|ordinal| {
            let claim = database_operator_core::storage::claim_name(&name, ordinal);
            stores
                .claims
                .get(&ObjectRef::new(&claim).within(&namespace))
        })
        .filter(|c| c.labels().get(labels::CLUSTER) == Some(&name))
        .map(|c| {
            let mut volume = c.volume().clone();
            volume.expansion = match &volume.storage_class {
                Some(class) => ClassExpansion::of(
                    stores
                        .storage_classes
                        .get(&ObjectRef::new(class))
                        .as_deref(),
                ),
                None => ClassExpansion::Unknown,
            };
            volume
        })
        .collect()
}

/// The clusters a StorageClass change concerns: those whose `StorageResized` condition says
/// their volumes cannot grow (`ExpansionNotSupported`), in `clusters`. A scan of the cached
/// clusters, on a change that is rare (a class is edited or created).
pub fn clusters_waiting_for_a_class(
    clusters: &Store<DeserializeGuard<DatabaseCluster>>,
) -> Vec<ObjectRef<DeserializeGuard<DatabaseCluster>>> {
    use database_operator_api::conditions::{STORAGE_RESIZED, reasons};
    clusters
        .state()
        .iter()
        .filter(|guarded| {
            guarded.0.as_ref().is_ok_and(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == STORAGE_RESIZED && c.reason == reasons::EXPANSION_NOT_SUPPORTED
                    })
                })
            })
        })
        .map(|guarded| ObjectRef::from_obj(guarded.as_ref()))
        .collect()
}

/// The backup Jobs of `cluster` (component `backup`: the CronJob's and on-demand ones; and
/// `backup-verify`: the restore drills), from
/// the cache. A scan of the cached Jobs: only the operator's backup and cleanup Jobs are
/// cached, a few per cluster (the CronJob keeps three of each outcome).
pub fn backup_jobs_of(
    stores: &Stores,
    cluster: &DatabaseCluster,
) -> Vec<database_operator_core::BackupJob> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    stores
        .jobs
        .state()
        .iter()
        .filter(|job| {
            job.namespace().as_deref() == Some(namespace.as_str())
                && job.labels().get(labels::CLUSTER) == Some(&name)
                && matches!(
                    job.labels().get(labels::COMPONENT).map(String::as_str),
                    Some(labels::COMPONENT_BACKUP | labels::COMPONENT_BACKUP_VERIFY)
                )
        })
        .map(|job| database_operator_core::BackupJob::from_job(job))
        .collect()
}

/// The backup cleanup Job of `cluster`, from the cache, when there is one.
pub fn cleanup_job_of(stores: &Stores, cluster: &DatabaseCluster) -> Option<Job> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cleanup_job::name(&cluster.name_any());
    stores
        .jobs
        .get(&ObjectRef::new(&name).within(&namespace))
        .map(|job| job.as_ref().clone())
}
