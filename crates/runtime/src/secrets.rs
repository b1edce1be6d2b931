//! The password Secrets clusters reference: which clusters a Secret change concerns, and a
//! fingerprint of the referenced key that changes when the password does.
//!
//! Secrets are watched as metadata only: the watch tells *when* a Secret changed (its
//! `resourceVersion`), [`SecretIndex`] tells *which* clusters reference it, and
//! [`Fingerprints`] reads the one Secret with a GET only when its `resourceVersion` differs from
//! the one its fingerprint was computed at. The value itself is hashed and dropped at once: it
//! is never logged, cached, or passed to the core.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use database_operator_api::DatabaseCluster;
use database_operator_core::SecretState;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::error::Error;
use crate::index::GroupIndex;

pub use database_operator_common::fingerprint::{
    FINGERPRINT_LEN, fingerprint, fingerprints, keyed_fingerprint, state_of, state_of_keyed,
};
use database_operator_core::backup::signature::SigningKey;

/// Where Secrets are read from (a kube client, or a fake in tests). Used through generics.
#[allow(async_fn_in_trait)]
pub trait SecretSource: Send + Sync {
    /// The Secret, or `None` when it does not exist.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error>;

    /// Adds `key` with `value` to the Secret, provided it is still at `resource_version` (a
    /// merge patch that names it, so that two writers never both add one): no other key is
    /// touched. Sources that cannot write leave the Secret as it is.
    async fn add_key(
        &self,
        _namespace: &str,
        _name: &str,
        _resource_version: &str,
        _key: &str,
        _value: &str,
    ) -> Result<(), Error> {
        Ok(())
    }
}

/// [`SecretSource`] over a kube client.
#[derive(Clone)]
pub struct KubeSecrets {
    client: Client,
}

impl KubeSecrets {
    /// Reads Secrets with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl SecretSource for KubeSecrets {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name).await.map_err(|source| Error::Secret {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        })
    }

    async fn add_key(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
        key: &str,
        value: &str,
    ) -> Result<(), Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": resource_version},
            "stringData": {key: value},
        });
        let params = kube::api::PatchParams {
            field_manager: Some(database_operator_api::FIELD_MANAGER.to_owned()),
            ..kube::api::PatchParams::default()
        };
        api.patch(name, &params, &kube::api::Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|source| Error::Secret {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source: Box::new(source),
            })
    }
}

#[derive(Debug)]
struct Cached {
    resource_version: String,
    /// Which fingerprint key the states were computed with ([`key_id`]).
    key: Option<[u8; 32]>,
    /// By key of the Secret: the state and the unkeyed fingerprint beside a keyed one.
    states: BTreeMap<String, (SecretState, Option<String>)>,
}

/// What tells two fingerprint keys apart in the cache (a MAC of a constant, never the key).
fn key_id(key: Option<&SigningKey>) -> Option<[u8; 32]> {
    key.map(|k| k.mac(b"fingerprint cache"))
}

/// Fingerprints of referenced Secret keys, recomputed only when a Secret's resourceVersion
/// changes. Holds one entry per referenced Secret, never a value.
#[derive(Debug, Default)]
pub struct Fingerprints {
    cache: Mutex<HashMap<(String, String), Cached>>,
}

impl Fingerprints {
    /// The state of `key` in Secret `namespace/name`, given the Secret's metadata as watched
    /// (`None`: the watch has no such Secret), fingerprinted with the cluster's
    /// `fingerprint_key` when it has one; with it, the unkeyed fingerprint of the same value.
    pub async fn state<S: SecretSource>(
        &self,
        source: &S,
        namespace: &str,
        name: &str,
        key: &str,
        watched_resource_version: Option<&str>,
        fingerprint_key: Option<&SigningKey>,
    ) -> Result<(SecretState, Option<String>), Error> {
        let id = (namespace.to_owned(), name.to_owned());
        let Some(resource_version) = watched_resource_version else {
            self.lock().remove(&id);
            return Ok((SecretState::Missing, None));
        };
        let key_id = key_id(fingerprint_key);
        if let Some(cached) = self.lock().get(&id)
            && cached.resource_version == resource_version
            && cached.key == key_id
            && let Some(state) = cached.states.get(key)
        {
            return Ok(state.clone());
        }
        let Some(secret) = source.get(namespace, name).await? else {
            self.lock().remove(&id);
            return Ok((SecretState::Missing, None));
        };
        let state = state_of_keyed(&secret, key, fingerprint_key);
        let read_version = secret.resource_version().unwrap_or_default();
        drop(secret);
        let mut cache = self.lock();
        let entry = cache.entry(id).or_insert_with(|| Cached {
            resource_version: read_version.clone(),
            key: key_id,
            states: BTreeMap::new(),
        });
        if entry.resource_version != read_version || entry.key != key_id {
            entry.resource_version = read_version;
            entry.key = key_id;
            entry.states.clear();
        }
        entry.states.insert(key.to_owned(), state.clone());
        Ok(state)
    }

    /// Number of Secrets with a cached fingerprint.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Cached>> {
        // A panic while holding this lock leaves a consistent map (every write is one insert or
        // remove), so a poisoned lock is safe to keep using.
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Reverse index Secret -> clusters referencing it (their password Secret, and the certificate
/// Secret of `spec.tls.certificateSecret`), fed by the DatabaseCluster watch events.
#[derive(Clone, Debug, Default)]
pub struct SecretIndex {
    passwords: GroupIndex,
    certificates: GroupIndex,
}

impl SecretIndex {
    /// Updates the index with one watch event.
    pub fn apply(&self, event: &watcher::Event<DeserializeGuard<DatabaseCluster>>) {
        self.passwords.apply(event, |obj| {
            obj.0
                .as_ref()
                .ok()
                .map(|c| c.spec.password_secret_ref.name.clone())
        });
        self.certificates.apply(event, |obj| {
            let cluster = obj.0.as_ref().ok()?;
            database_operator_api::TlsSpec::provided_secret(cluster.spec.tls.as_ref())
                .map(str::to_owned)
        });
    }

    /// The clusters that reference Secret `namespace/name`.
    pub fn clusters_for(
        &self,
        namespace: &str,
        name: &str,
    ) -> Vec<ObjectRef<DeserializeGuard<DatabaseCluster>>> {
        let mut clusters = self.passwords.members(namespace, name);
        clusters.extend(self.certificates.members(namespace, name));
        clusters.sort();
        clusters.dedup();
        clusters
            .iter()
            .map(|cluster| ObjectRef::new(cluster).within(namespace))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn fingerprint_is_salted_short_hex_and_stable() {
        let a = fingerprint("uid-1", b"hunter2");
        assert_eq!(a.len(), FINGERPRINT_LEN);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(a, fingerprint("uid-1", b"hunter2"));
        assert_ne!(a, fingerprint("uid-2", b"hunter2"));
        assert_ne!(a, fingerprint("uid-1", b"hunter3"));
        // `printf 'u:v' | sha256sum` = afad6b066cc1a03e2abad1293182...
        assert_eq!(fingerprint("u", b"v"), "afad6b066cc1a03e");
    }

    struct FakeSecrets {
        secret: Mutex<Option<Secret>>,
        gets: AtomicUsize,
    }

    impl SecretSource for FakeSecrets {
        async fn get(&self, _: &str, _: &str) -> Result<Option<Secret>, Error> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            Ok(self.secret.lock().unwrap().clone())
        }
    }

    fn secret(rv: &str, password: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("pw".into()),
                namespace: Some("db".into()),
                uid: Some("uid-1".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(password.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    #[tokio::test]
    async fn reads_a_secret_only_when_its_version_changes() {
        let source = FakeSecrets {
            secret: Mutex::new(Some(secret("1", "a"))),
            gets: AtomicUsize::new(0),
        };
        let fps = Fingerprints::default();
        let first = fps
            .state(&source, "db", "pw", "password", Some("1"), None)
            .await
            .unwrap();
        assert_eq!(
            first,
            (
                SecretState::Present {
                    fingerprint: fingerprint("uid-1", b"a")
                },
                None
            )
        );
        let again = fps
            .state(&source, "db", "pw", "password", Some("1"), None)
            .await
            .unwrap();
        assert_eq!(again, first);
        assert_eq!(
            source.gets.load(Ordering::SeqCst),
            1,
            "same resourceVersion: no second GET"
        );

        *source.secret.lock().unwrap() = Some(secret("2", "b"));
        let changed = fps
            .state(&source, "db", "pw", "password", Some("2"), None)
            .await
            .unwrap();
        assert_ne!(changed, first);
        assert_eq!(source.gets.load(Ordering::SeqCst), 2);

        let missing_key = fps
            .state(&source, "db", "pw", "other", Some("2"), None)
            .await
            .unwrap();
        assert_eq!(missing_key, (SecretState::KeyMissing, None));
        assert_eq!(
            source.gets.load(Ordering::SeqCst),
            3,
            "a new key is read once"
        );

        assert_eq!(
            fps.state(&source, "db", "pw", "password", None, None)
                .await
                .unwrap(),
            (SecretState::Missing, None)
        );
        assert!(fps.is_empty(), "a vanished Secret leaves nothing cached");
        assert_eq!(source.gets.load(Ordering::SeqCst), 3, "not watched: no GET");
    }

    #[tokio::test]
    async fn cache_never_holds_the_value() {
        let source = FakeSecrets {
            secret: Mutex::new(Some(secret("1", "s3cr3t-value"))),
            gets: AtomicUsize::new(0),
        };
        let fps = Fingerprints::default();
        fps.state(&source, "db", "pw", "password", Some("1"), None)
            .await
            .unwrap();
        let dump = format!("{fps:?}");
        assert!(!dump.contains("s3cr3t-value"), "{dump}");
    }

    /// With the cluster's key the fingerprint is keyed (the unkeyed one beside it); a new key
    /// computes it again without a new resourceVersion, and the cache holds no key.
    #[tokio::test]
    async fn a_keyed_fingerprint_is_cached_per_key() {
        let source = FakeSecrets {
            secret: Mutex::new(Some(secret("1", "a"))),
            gets: AtomicUsize::new(0),
        };
        let fps = Fingerprints::default();
        let key = SigningKey::new(&[3u8; 64]).unwrap();
        let keyed = fps
            .state(&source, "db", "pw", "password", Some("1"), Some(&key))
            .await
            .unwrap();
        assert_eq!(
            keyed,
            (
                SecretState::Present {
                    fingerprint: keyed_fingerprint(&key, "uid-1", b"a")
                },
                Some(fingerprint("uid-1", b"a"))
            )
        );
        let unkeyed = fps
            .state(&source, "db", "pw", "password", Some("1"), None)
            .await
            .unwrap();
        assert_eq!(unkeyed.1, None);
        assert_eq!(
            source.gets.load(Ordering::SeqCst),
            2,
            "another key: read again"
        );
        let other = SigningKey::new(&[4u8; 64]).unwrap();
        let rekeyed = fps
            .state(&source, "db", "pw", "password", Some("1"), Some(&other))
            .await
            .unwrap();
        assert_ne!(rekeyed.0, keyed.0);
        let dump = format!("{fps:?}");
        assert!(!dump.contains("[3, 3, 3"), "{dump}");
    }

    fn cluster(ns: &str, name: &str, secret: &str) -> DeserializeGuard<DatabaseCluster> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"engine": "mysql", "version": "8.4.0", "storage": {"size": "1Gi"},
                     "passwordSecretRef": {"name": secret, "key": "password"}}
        }))
        .unwrap()
    }

    fn names(refs: Vec<ObjectRef<DeserializeGuard<DatabaseCluster>>>) -> Vec<String> {
        let mut v: Vec<String> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn index_follows_cluster_events() {
        let index = SecretIndex::default();
        index.apply(&watcher::Event::Apply(cluster("a", "one", "pw")));
        index.apply(&watcher::Event::Apply(cluster("a", "two", "pw")));
        index.apply(&watcher::Event::Apply(cluster("b", "three", "pw")));
        assert_eq!(names(index.clusters_for("a", "pw")), ["a/one", "a/two"]);
        assert_eq!(names(index.clusters_for("b", "pw")), ["b/three"]);

        // A cluster switching to another Secret leaves the old one's list.
        index.apply(&watcher::Event::Apply(cluster("a", "two", "other")));
        assert_eq!(names(index.clusters_for("a", "pw")), ["a/one"]);
        assert_eq!(names(index.clusters_for("a", "other")), ["a/two"]);

        index.apply(&watcher::Event::Delete(cluster("a", "one", "pw")));
        assert!(index.clusters_for("a", "pw").is_empty());
        assert_eq!(
            index.passwords.groups(),
            2,
            "Secrets referenced by a cluster"
        );
        assert_eq!(
            index.certificates.groups(),
            0,
            "no cluster provides a certificate"
        );
    }

    #[test]
    fn relist_drops_clusters_deleted_meanwhile() {
        let index = SecretIndex::default();
        index.apply(&watcher::Event::Apply(cluster("a", "gone", "pw")));
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(cluster("a", "kept", "pw")));
        assert_eq!(
            names(index.clusters_for("a", "pw")),
            ["a/gone", "a/kept"],
            "old entries stay until the list is complete"
        );
        index.apply(&watcher::Event::InitDone);
        assert_eq!(names(index.clusters_for("a", "pw")), ["a/kept"]);
    }

    #[test]
    fn unreadable_cluster_references_nothing() {
        let index = SecretIndex::default();
        index.apply(&watcher::Event::Apply(cluster("a", "one", "pw")));
        let broken: DeserializeGuard<DatabaseCluster> = serde_json::from_value(serde_json::json!({
            "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
            "metadata": {"name": "one", "namespace": "a"},
            "spec": {"engine": "oracle"}
        }))
        .unwrap();
        assert!(broken.0.is_err());
        index.apply(&watcher::Event::Apply(broken));
        assert!(index.clusters_for("a", "pw").is_empty());
    }
}
