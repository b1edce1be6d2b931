//! The operator's accounts on the members, from the `<name>-operator` Secret
//! ([`database_operator_core::credentials`]). Read with a GET only when the Secret's
//! resourceVersion (from the metadata watch) moved; the values live only in this cache and in
//! the drivers, and are never logged (`Debug` prints `<redacted>`).
//!
//! The values last read stay in memory after the Secret is gone ([`Remembered`]): the servers
//! know these passwords and no others, so the operator keeps dialling with them and the plan
//! creates the Secret again with exactly these bytes
//! ([`database_operator_core::credentials::SecretChange::Restore`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use database_operator_core::credentials::{
    ADMIN_PASSWORD_KEY, ADMIN_USERNAME_KEY, REPLICATION_PASSWORD_KEY, REPLICATION_USERNAME_KEY,
    SIGNING_KEY_KEY,
};
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kube::ResourceExt;

use super::MemberError;
use crate::database::Secret;
use crate::secrets::SecretSource;

/// The operator's accounts on one cluster's servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The admin account the operator connects as.
    pub admin_user: String,
    /// Its password.
    pub admin_password: Secret,
    /// The account replicas connect to their source as.
    pub replication_user: String,
    /// Its password.
    pub replication_password: Secret,
}

impl Credentials {
    /// The credentials in `secret` (`namespace/name`, for errors).
    pub fn from_secret(secret: &KubeSecret) -> Result<Credentials, MemberError> {
        let data = secret.data.as_ref();
        let value = |key: &'static str| -> Result<String, MemberError> {
            data.and_then(|d| d.get(key))
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| MemberError::KeyMissing {
                    namespace: secret.namespace().unwrap_or_default(),
                    name: secret.name_any(),
                    key,
                })
        };
        Ok(Credentials {
            admin_user: value(ADMIN_USERNAME_KEY)?,
            admin_password: Secret::new(value(ADMIN_PASSWORD_KEY)?),
            replication_user: value(REPLICATION_USERNAME_KEY)?,
            replication_password: Secret::new(value(REPLICATION_PASSWORD_KEY)?),
        })
    }
}

/// Adds the backup signing key to an operator Secret created before backups were signed
/// ([`SIGNING_KEY_KEY`]): the key alone, once (the patch names the resourceVersion read), never
/// replacing one. The watch then sees the new resourceVersion and the Secret is read again. A
/// failure is logged and tried again at the Secret's next change or the operator's next start;
/// meanwhile backups are stored unsigned.
async fn add_signing_key<S: SecretSource>(source: &S, secret: &KubeSecret) {
    let has_key = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SIGNING_KEY_KEY))
        .is_some_and(|v| !v.0.is_empty());
    if has_key {
        return;
    }
    let namespace = secret.namespace().unwrap_or_default();
    let name = secret.name_any();
    let Some(version) = secret.resource_version() else {
        return;
    };
    let added = match crate::credentials::generate_signing_key() {
        Ok(value) => {
            source
                .add_key(&namespace, &name, &version, SIGNING_KEY_KEY, &value)
                .await
        }
        Err(error) => Err(error),
    };
    match added {
        Ok(()) => {
            tracing::info!(%namespace, secret = %name, key = SIGNING_KEY_KEY, "added the backup signing key to the operator Secret")
        }
        Err(error) => {
            tracing::warn!(%namespace, secret = %name, %error, "could not add the backup signing key to the operator Secret; backups stay unsigned until it is added")
        }
    }
}

/// What is known of one operator Secret: the resourceVersion read and its credentials.
type Entry = Option<(String, Arc<Credentials>)>;

/// The data of an operator Secret as last read, kept after the Secret is gone: what a restored
/// Secret holds, byte for byte. `Debug` prints the keys only.
#[derive(Clone, PartialEq, Eq)]
pub struct Remembered {
    /// The credentials read from it.
    pub credentials: Arc<Credentials>,
    /// The Secret's data, every key.
    pub data: std::collections::BTreeMap<String, k8s_openapi::ByteString>,
}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// (namespace, Secret) -> its entry, behind a lock of its own that is held across the GET.
type BySecret = HashMap<(String, String), Arc<tokio::sync::Mutex<Entry>>>;

/// Credentials per operator Secret, read again only when its resourceVersion moves.
///
/// The members of a cluster are dialled together (one probe each); the first caller reads the
/// Secret while the others wait for it and take what it read, so a cluster's Secret is read once
/// per resourceVersion, not once per member.
#[derive(Debug, Default)]
pub struct CredentialsCache {
    cache: Mutex<BySecret>,
    remembered: Mutex<HashMap<(String, String), Arc<Remembered>>>,
}

impl CredentialsCache {
    /// The credentials in Secret `namespace/name`, given its resourceVersion as watched
    /// (`None`: the watch has no such Secret: then those last read from it, if any).
    pub async fn get<S: SecretSource>(
        &self,
        source: &S,
        namespace: &str,
        name: &str,
        watched_resource_version: Option<&str>,
    ) -> Result<Arc<Credentials>, MemberError> {
        let id = (namespace.to_owned(), name.to_owned());
        let missing = || MemberError::NoCredentials {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let Some(version) = watched_resource_version else {
            self.lock().remove(&id);
            return self
                .remembered(namespace, name)
                .map(|r| r.credentials.clone())
                .ok_or_else(missing);
        };
        let slot = self.lock().entry(id.clone()).or_default().clone();
        let mut entry = slot.lock().await;
        if let Some((cached, credentials)) = entry.as_ref()
            && cached == version
        {
            return Ok(credentials.clone());
        }
        let secret = source
            .get(namespace, name)
            .await
            .map_err(|e| MemberError::Secret(Box::new(e)))?;
        let Some(secret) = secret else {
            *entry = None;
            return self
                .remembered(namespace, name)
                .map(|r| r.credentials.clone())
                .ok_or_else(missing);
        };
        let credentials = Arc::new(Credentials::from_secret(&secret)?);
        add_signing_key(source, &secret).await;
        self.memory().insert(
            id.clone(),
            Arc::new(Remembered {
                credentials: credentials.clone(),
                data: secret.data.clone().unwrap_or_default(),
            }),
        );
        let read = secret
            .resource_version()
            .unwrap_or_else(|| version.to_owned());
        *entry = Some((read, credentials.clone()));
        Ok(credentials)
    }

    /// What was last read from Secret `namespace/name`, also after it is gone.
    pub fn remembered(&self, namespace: &str, name: &str) -> Option<Arc<Remembered>> {
        self.memory()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Forgets the Secrets `keep` says no to (by namespace and Secret name): those of deleted
    /// clusters.
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.memory().retain(|(ns, name), _| keep(ns, name));
        self.lock().retain(|(ns, name), _| keep(ns, name));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BySecret> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Remembered>>> {
        self.remembered.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    struct Source {
        gets: AtomicUsize,
        secret: Option<KubeSecret>,
        /// The keys added: (resourceVersion, key, value).
        added: std::sync::Mutex<Vec<(String, String, String)>>,
    }

    impl Source {
        fn new(secret: Option<KubeSecret>) -> Source {
            Source {
                gets: AtomicUsize::new(0),
                secret,
                added: std::sync::Mutex::default(),
            }
        }
    }

    impl SecretSource for Source {
        async fn get(&self, _: &str, _: &str) -> Result<Option<KubeSecret>, crate::Error> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            // A round trip to the API server: other callers run meanwhile.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Ok(self.secret.clone())
        }

        async fn add_key(
            &self,
            _: &str,
            _: &str,
            version: &str,
            key: &str,
            value: &str,
        ) -> Result<(), crate::Error> {
            self.added
                .lock()
                .unwrap()
                .push((version.to_owned(), key.to_owned(), value.to_owned()));
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_secret_without_a_signing_key_gets_one_and_one_with_a_key_keeps_it() {
        let source = Source::new(Some(secret("7", &ALL)));
        let cache = CredentialsCache::default();
        cache
            .get(&source, "shop", "orders-operator", Some("7"))
            .await
            .unwrap();
        {
            let added = source.added.lock().unwrap();
            assert_eq!(added.len(), 1, "{added:?}");
            let (version, key, value) = &added[0];
            assert_eq!((version.as_str(), key.as_str()), ("7", SIGNING_KEY_KEY));
            assert_eq!(value.len(), 64);
        }
        let mut with_key = ALL.to_vec();
        with_key.push((
            SIGNING_KEY_KEY,
            "an-existing-key-that-must-never-be-replaced",
        ));
        let source = Source::new(Some(secret("9", &with_key)));
        cache
            .get(&source, "shop", "orders-operator", Some("9"))
            .await
            .unwrap();
        assert!(source.added.lock().unwrap().is_empty());
    }

    fn secret(version: &str, keys: &[(&str, &str)]) -> KubeSecret {
        KubeSecret {
            metadata: ObjectMeta {
                name: Some("orders-operator".into()),
                namespace: Some("shop".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            data: Some(
                keys.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..KubeSecret::default()
        }
    }

    const ALL: [(&str, &str); 4] = [
        ("admin-username", "database_operator"),
        ("admin-password", "s3cret-admin"),
        ("replication-username", "replicator"),
        ("replication-password", "s3cret-repl"),
    ];

    #[tokio::test]
    async fn read_once_per_resource_version_and_never_printed() {
        let source = Source::new(Some(secret("7", &ALL)));
        let cache = CredentialsCache::default();
        let c = cache
            .get(&source, "shop", "orders-operator", Some("7"))
            .await
            .unwrap();
        assert_eq!(c.admin_user, "database_operator");
        assert_eq!(c.replication_password.expose(), "s3cret-repl");
        cache
            .get(&source, "shop", "orders-operator", Some("7"))
            .await
            .unwrap();
        assert_eq!(source.gets.load(Ordering::SeqCst), 1);
        cache
            .get(&source, "shop", "orders-operator", Some("8"))
            .await
            .unwrap();
        assert_eq!(source.gets.load(Ordering::SeqCst), 2);
        let shown = format!("{c:?} {:?}", cache);
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[tokio::test]
    async fn members_dialled_together_read_the_secret_once() {
        let source = Source::new(Some(secret("7", &ALL)));
        let cache = CredentialsCache::default();
        let get = || cache.get(&source, "shop", "orders-operator", Some("7"));
        let (a, b, c) = tokio::join!(get(), get(), get());
        for got in [a, b, c] {
            assert_eq!(got.unwrap().admin_password.expose(), "s3cret-admin");
        }
        assert_eq!(source.gets.load(Ordering::SeqCst), 1);
        // Another cluster's Secret is not held up by this one and is read on its own.
        let other = cache.get(&source, "shop", "payments-operator", Some("7"));
        let (x, y) = tokio::join!(get(), other);
        x.unwrap();
        y.unwrap();
        assert_eq!(source.gets.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn the_values_last_read_outlive_the_secret_until_the_cluster_goes() {
        let source = Source::new(Some(secret("7", &ALL)));
        let cache = CredentialsCache::default();
        assert!(cache.remembered("shop", "orders-operator").is_none());
        cache
            .get(&source, "shop", "orders-operator", Some("7"))
            .await
            .unwrap();
        // The watch no longer has it: the members are still dialled with what the servers know.
        let c = cache
            .get(&source, "shop", "orders-operator", None)
            .await
            .unwrap();
        assert_eq!(c.admin_password.expose(), "s3cret-admin");
        let gone = Source::new(None);
        let c = cache
            .get(&gone, "shop", "orders-operator", Some("8"))
            .await
            .unwrap();
        assert_eq!(c.replication_password.expose(), "s3cret-repl");
        // Every key, byte for byte, for the restored Secret; never printed.
        let remembered = cache.remembered("shop", "orders-operator").unwrap();
        assert_eq!(Some(&remembered.data), secret("7", &ALL).data.as_ref());
        let shown = format!("{remembered:?} {cache:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        // Forgotten with the cluster.
        cache.retain(|_, name| name != "orders-operator");
        assert!(cache.remembered("shop", "orders-operator").is_none());
        let e = cache
            .get(&gone, "shop", "orders-operator", None)
            .await
            .unwrap_err();
        assert!(matches!(e, MemberError::NoCredentials { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_missing_secret_or_key_is_no_credentials() {
        let source = Source::new(None);
        let cache = CredentialsCache::default();
        let e = cache
            .get(&source, "shop", "orders-operator", None)
            .await
            .unwrap_err();
        assert!(matches!(e, MemberError::NoCredentials { .. }), "{e}");
        assert_eq!(source.gets.load(Ordering::SeqCst), 0);
        let e = cache
            .get(&source, "shop", "orders-operator", Some("1"))
            .await
            .unwrap_err();
        assert!(matches!(e, MemberError::NoCredentials { .. }), "{e}");
        let source = Source::new(Some(secret("2", &ALL[..3])));
        let e = cache
            .get(&source, "shop", "orders-operator", Some("2"))
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Secret shop/orders-operator has no key replication-password"
        );
    }
}
