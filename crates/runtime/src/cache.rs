//! The form objects take in the operator's watch caches.
//!
//! A typed Kubernetes object in memory is several times the size of its JSON: every optional
//! field of every nested struct takes its space whether set or not (a `Volume` alone has some
//! thirty optional sources), and every string and map is an allocation of its own. With
//! 1,000 clusters the typed caches were most of the operator's memory (docs/performance.md).
//!
//! [`Compact`] keeps an object's metadata typed (the controller and the caches look things up
//! by name, namespace, owner and labels) and the rest as one JSON string. The typed object is
//! rebuilt, on demand, for the clusters a reconcile looks at. ConfigMap data, whose scripts are
//! the same for every cluster of an engine, is interned: one copy of each distinct value,
//! however many clusters share it.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use database_operator_core::render::labels;
use database_operator_core::{ClassExpansion, MemberPod, MemberVolume, OwnedResource};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The annotation `kubectl apply` writes: a second copy of the object, never read.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes what the operator never reads from an object's metadata: managed fields and the
/// last-applied annotation.
pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// A kind the operator caches in [`Compact`] form: every owned kind.
pub trait Cached: OwnedResource {
    /// Drops what the operator never reads: managed fields and the last-applied annotation.
    fn reduce(&mut self) {
        strip_meta(self.metadata_mut());
        self.clear_volatile();
    }

    /// Takes out the part of the object that is kept interned (see [`Compact`]).
    fn take_shared(&mut self) -> BTreeMap<String, String> {
        self.shared_data_mut()
            .and_then(Option::take)
            .unwrap_or_default()
    }

    /// Puts back what [`Cached::take_shared`] took.
    fn restore_shared(&mut self, shared: BTreeMap<String, String>) {
        if let Some(data) = self.shared_data_mut() {
            *data = (!shared.is_empty()).then_some(shared);
        }
    }
}

impl<K: OwnedResource> Cached for K {}

/// The metadata a cache keeps of a pod or claim: name, namespace, resourceVersion, uid and the
/// cluster label.
fn identity(meta: &ObjectMeta) -> ObjectMeta {
    let cluster_label = meta
        .labels
        .as_ref()
        .and_then(|l| l.get_key_value(labels::CLUSTER))
        .map(|(k, v)| BTreeMap::from([(k.clone(), v.clone())]));
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        resource_version: meta.resource_version.clone(),
        uid: meta.uid.clone(),
        labels: cluster_label,
        ..ObjectMeta::default()
    }
}

/// A pod as the pod cache holds it: what the core reads of it ([`MemberPod`], built by the
/// core's own [`MemberPod::from_pod`]) and, for lookups, its name, namespace, resourceVersion,
/// uid and cluster label, and its IP (the prober dials members by it with
/// `--member-address=pod-ip`). A database pod as stored is several kilobytes of spec and status
/// (volumes, environment, probes, container statuses); none of it is kept.
#[derive(Clone, Debug)]
pub struct CachedPod {
    meta: ObjectMeta,
    member: MemberPod,
    pod_ip: Option<String>,
    tls_secret: Option<String>,
}

impl CachedPod {
    /// The cached form of `pod`.
    pub fn new(pod: &Pod) -> Self {
        Self {
            meta: identity(&pod.metadata),
            member: MemberPod::from_pod(pod),
            pod_ip: pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty()),
            tls_secret: pod
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .and_then(|v| {
                    v.iter()
                        .find(|v| v.name == database_operator_core::tls::VOLUME)
                })
                .and_then(|v| v.secret.as_ref()?.secret_name.clone()),
        }
    }

    /// The Secret the pod mounts as its server certificate (the volume
    /// [`database_operator_core::tls::VOLUME`]): its server was started with TLS.
    pub fn tls_secret(&self) -> Option<&str> {
        self.tls_secret.as_deref()
    }

    /// What the core reads of the pod.
    pub fn member(&self) -> &MemberPod {
        &self.member
    }

    /// `status.podIP`, once the pod has one.
    pub fn pod_ip(&self) -> Option<&str> {
        self.pod_ip.as_deref()
    }
}

/// A member's data volume claim as the claim cache holds it: what the core reads of it
/// ([`MemberVolume`], built by the core's own [`MemberVolume::from_claim`]; whether its class
/// allows expansion is filled in from the StorageClass cache when a reconcile reads it) and, for
/// lookups, its name, namespace, resourceVersion, uid and cluster label.
#[derive(Clone, Debug)]
pub struct CachedClaim {
    meta: ObjectMeta,
    volume: MemberVolume,
}

impl CachedClaim {
    /// The cached form of `claim`.
    pub fn new(claim: &PersistentVolumeClaim) -> Self {
        Self {
            meta: identity(&claim.metadata),
            volume: MemberVolume::from_claim(claim, ClassExpansion::Unknown),
        }
    }

    /// What the core reads of the claim (its class's expansion not filled in).
    pub fn volume(&self) -> &MemberVolume {
        &self.volume
    }
}

/// The API identity of a cached form (`$cached`) of `$kind`, built from the object with
/// `$cached::new` when a watch delivers it: what kube's watcher and reflector need.
macro_rules! cached_form {
    ($cached:ident, $kind:ty) => {
        impl k8s_openapi::Resource for $cached {
            const API_VERSION: &'static str = <$kind as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$kind as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$kind as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$kind as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$kind as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$kind as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::ListableResource for $cached {
            const LIST_KIND: &'static str = <$kind as k8s_openapi::ListableResource>::LIST_KIND;
        }

        impl k8s_openapi::Metadata for $cached {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.meta
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.meta
            }
        }

        impl<'de> Deserialize<'de> for $cached {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <$kind>::deserialize(deserializer).map(|object| $cached::new(&object))
            }
        }
    };
}

cached_form!(CachedPod, Pod);
cached_form!(CachedClaim, PersistentVolumeClaim);

/// An object as the caches hold it: typed metadata, the rest as JSON (see the module docs).
pub struct Compact<K> {
    meta: ObjectMeta,
    body: Box<str>,
    shared: Box<[(Box<str>, Arc<str>)]>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Cached> Compact<K> {
    /// The compact form of `object`, reduced first ([`Cached::reduce`]).
    pub fn new(mut object: K) -> Result<Self, serde_json::Error> {
        object.reduce();
        let meta = std::mem::take(object.metadata_mut());
        let shared = object
            .take_shared()
            .into_iter()
            .map(|(key, value)| (key.into_boxed_str(), intern(&value)))
            .collect();
        let body = serde_json::to_string(&object)?.into_boxed_str();
        Ok(Self {
            meta,
            body,
            shared,
            kind: PhantomData,
        })
    }

    /// The typed object again: as it was passed to [`Compact::new`], after
    /// [`Cached::reduce`].
    pub fn object(&self) -> Result<K, serde_json::Error> {
        let mut object: K = serde_json::from_str(&self.body)?;
        *object.metadata_mut() = self.meta.clone();
        if !self.shared.is_empty() {
            object.restore_shared(
                self.shared
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            );
        }
        Ok(object)
    }
}

impl<K: Cached> Compact<K> {
    /// A digest of what the operator reads of the object, for kinds with fields another
    /// writer moves on its own schedule ([`OwnedResource::VOLATILE`]): those are cleared, so an
    /// event that changed only them (a Lease renewal) has the digest of the one before and
    /// asks for no pass. `None` for every other kind: each of its events counts.
    pub fn trigger_digest(&self) -> Option<u64> {
        if !K::VOLATILE {
            return None;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.body.hash(&mut hasher);
        self.shared.hash(&mut hasher);
        self.meta.labels.hash(&mut hasher);
        self.meta.annotations.hash(&mut hasher);
        self.meta
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0)
            .hash(&mut hasher);
        if let Some(owners) = &self.meta.owner_references {
            for owner in owners {
                (&owner.uid, &owner.controller).hash(&mut hasher);
            }
        }
        Some(hasher.finish())
    }
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            body: self.body.clone(),
            shared: self.shared.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: k8s_openapi::Resource> fmt::Debug for Compact<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compact")
            .field("kind", &K::KIND)
            .field("name", &self.meta.name)
            .field("namespace", &self.meta.namespace)
            .field("resource_version", &self.meta.resource_version)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Compact<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::ListableResource> k8s_openapi::ListableResource for Compact<K> {
    const LIST_KIND: &'static str = K::LIST_KIND;
}

impl<K: k8s_openapi::Resource> k8s_openapi::Metadata for Compact<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.meta
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl<'de, K: Cached> Deserialize<'de> for Compact<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = K::deserialize(deserializer)?;
        Compact::new(object).map_err(D::Error::custom)
    }
}

/// The intern table: every distinct shared value once. Entries nobody else holds are dropped
/// when the table has doubled since the last sweep.
struct Interned {
    values: HashSet<Key>,
    swept_at: usize,
}

/// `Arc<str>` hashed and compared by content, so the table can be searched with a `&str`.
#[derive(Clone, PartialEq, Eq)]
struct Key(Arc<str>);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

static INTERNED: Mutex<Option<Interned>> = Mutex::new(None);

/// The shared copy of `value`.
fn intern(value: &str) -> Arc<str> {
    let mut guard = INTERNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let table = guard.get_or_insert_with(|| Interned {
        values: HashSet::new(),
        swept_at: 0,
    });
    if let Some(found) = table.values.get(value) {
        return found.0.clone();
    }
    if table.values.len() >= 2 * table.swept_at.max(64) {
        table.values.retain(|key| Arc::strong_count(&key.0) > 1);
        table.swept_at = table.values.len();
    }
    let shared: Arc<str> = Arc::from(value);
    table.values.insert(Key(shared.clone()));
    shared
}

/// Distinct values in the intern table (including ones no longer used and not yet swept).
#[cfg(test)]
fn interned_values() -> usize {
    INTERNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_ref()
        .map_or(0, |t| t.values.len())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
    use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ManagedFieldsEntry};

    use super::*;

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            resource_version: Some("42".into()),
            labels: Some(BTreeMap::from([("app".into(), name.into())])),
            annotations: Some(BTreeMap::from([
                (LAST_APPLIED.into(), "{\"big\": true}".into()),
                ("kept".into(), "yes".into()),
            ])),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("kubectl".into()),
                ..ManagedFieldsEntry::default()
            }]),
            ..ObjectMeta::default()
        }
    }

    fn stateful_set() -> StatefulSet {
        StatefulSet {
            metadata: meta("orders"),
            spec: StatefulSetSpec {
                replicas: Some(3),
                selector: LabelSelector::default(),
                service_name: Some("orders-headless".into()),
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "mysql".into(),
                            image: Some("mysql:8.0.36".into()),
                            ..Container::default()
                        }],
                        volumes: Some(vec![Volume {
                            name: "config".into(),
                            ..Volume::default()
                        }]),
                        ..PodSpec::default()
                    }),
                    ..PodTemplateSpec::default()
                },
                ..StatefulSetSpec::default()
            },
            ..StatefulSet::default()
        }
    }

    #[test]
    fn an_object_comes_back_as_it_went_in_less_what_is_stripped() {
        let original = stateful_set();
        let compact = Compact::new(original.clone()).unwrap();
        let back = compact.object().unwrap();
        let mut expected = original;
        expected.metadata.managed_fields = None;
        expected
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(LAST_APPLIED);
        assert_eq!(back, expected);
        assert!(!compact.body.contains("metadata\":{\""), "{}", compact.body);
    }

    #[test]
    fn deserializing_gives_the_compact_form() {
        let json = serde_json::to_string(&stateful_set()).unwrap();
        let compact: Compact<StatefulSet> = serde_json::from_str(&json).unwrap();
        assert_eq!(compact.meta.name.as_deref(), Some("orders"));
        assert!(compact.meta.managed_fields.is_none());
        assert_eq!(
            compact.object().unwrap().spec.replicas,
            Some(3),
            "the body keeps the spec"
        );
    }

    #[test]
    fn a_body_of_the_wrong_kind_is_an_error_not_a_panic() {
        let err = serde_json::from_str::<Compact<StatefulSet>>(
            r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}"#,
        );
        assert!(err.is_err());
    }

    #[test]
    fn config_map_data_is_shared_between_objects_with_the_same_values() {
        let script = "#!/bin/sh\n# a script every cluster of an engine has\n".repeat(50);
        let config_map = |name: &str, server_id: &str| ConfigMap {
            metadata: meta(name),
            data: Some(BTreeMap::from([
                ("init.sh".into(), script.clone()),
                ("my.cnf".into(), format!("server-id-base={server_id}\n")),
            ])),
            ..ConfigMap::default()
        };
        let a = Compact::new(config_map("a", "1")).unwrap();
        let b = Compact::new(config_map("b", "2")).unwrap();
        let shared = |c: &Compact<ConfigMap>, key: &str| {
            c.shared
                .iter()
                .find(|(k, _)| &**k == key)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert!(Arc::ptr_eq(&shared(&a, "init.sh"), &shared(&b, "init.sh")));
        assert!(!Arc::ptr_eq(&shared(&a, "my.cnf"), &shared(&b, "my.cnf")));
        assert!(!a.body.contains("a script"), "{}", a.body);
        assert_eq!(a.object().unwrap(), {
            let mut c = config_map("a", "1");
            c.reduce();
            c
        });
        assert_eq!(
            b.object().unwrap().data.unwrap()["my.cnf"],
            "server-id-base=2\n"
        );
    }

    #[test]
    fn unused_interned_values_are_swept() {
        // Many distinct values, each dropped at once: the table must not keep them all.
        for i in 0..5_000 {
            drop(intern(&format!("unused-value-{i}")));
        }
        assert!(
            interned_values() < 2_500,
            "{} values kept for 5,000 dropped",
            interned_values()
        );
    }
}
