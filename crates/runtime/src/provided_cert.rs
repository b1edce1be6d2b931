//! What the operator knows of the certificate a user provides (`spec.tls.certificateSecret`):
//! the version of the Secret `<name>-tls` holds a copy of, and the outcome of the checks
//! ([`database_operator_common::provided_cert`]) on a newer one, kept so that a Secret that
//! fails them is not read on every pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

pub use database_operator_common::provided_cert::{check, check_material};
use database_operator_core::tls::{ProvidedCert, ProvidedFacts};

use crate::error::Error;
use crate::secrets::SecretSource;

/// How long the outcome of the checks on one version of a user's Secret is kept: a version that
/// failed because it was not valid yet passes once it is.
const CHECK_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// The outcome of the checks on the last version read of each user's Secret, so a Secret that
/// fails its checks is not read again on every pass.
#[derive(Clone, Debug, Default)]
pub struct Checked(Arc<Mutex<HashMap<(String, String), CheckedVersion>>>);

#[derive(Clone, Debug)]
struct CheckedVersion {
    resource_version: String,
    at: SystemTime,
    outcome: Result<ProvidedFacts, String>,
}

impl Checked {
    fn get(
        &self,
        namespace: &str,
        name: &str,
        version: &str,
        now: SystemTime,
    ) -> Option<Result<ProvidedFacts, String>> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.get(&(namespace.to_owned(), name.to_owned()))?;
        let fresh = now
            .duration_since(entry.at)
            .is_ok_and(|age| age < CHECK_TTL);
        (entry.resource_version == version && fresh).then(|| entry.outcome.clone())
    }

    fn put(&self, namespace: &str, name: &str, entry: CheckedVersion) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Entries of Secrets no longer looked at (a cluster deleted, another Secret named) go
        // once they are stale.
        let now = entry.at;
        map.retain(|_, e| now.duration_since(e.at).is_ok_and(|age| age < CHECK_TTL));
        map.insert((namespace.to_owned(), name.to_owned()), entry);
    }
}

/// What the cluster's user Secret `name` in `namespace` is to the core: missing (no version in
/// the watch cache, `watched`), the version `<name>-tls` holds (`copied`), or a new version and
/// its checks (read through `source` unless `checked` has them).
pub async fn observe<S: SecretSource>(
    checked: &Checked,
    source: &S,
    namespace: &str,
    name: &str,
    watched: Option<&str>,
    copied: Option<&str>,
    now: SystemTime,
) -> Result<ProvidedCert, Error> {
    let Some(version) = watched else {
        return Ok(ProvidedCert::Missing);
    };
    if Some(version) == copied {
        return Ok(ProvidedCert::Copied);
    }
    if let Some(outcome) = checked.get(namespace, name, version, now) {
        return Ok(ProvidedCert::New {
            resource_version: version.to_owned(),
            checked: outcome,
        });
    }
    let Some(secret) = source.get(namespace, name).await? else {
        return Ok(ProvidedCert::Missing);
    };
    let resource_version = secret.metadata.resource_version.clone().unwrap_or_default();
    if Some(resource_version.as_str()) == copied {
        return Ok(ProvidedCert::Copied);
    }
    let outcome = check(&secret, now);
    if let Err(why) = &outcome {
        tracing::warn!(namespace, secret = name, %why, "the provided certificate fails a check; it is not used");
    }
    checked.put(
        namespace,
        name,
        CheckedVersion {
            resource_version: resource_version.clone(),
            at: now,
            outcome: outcome.clone(),
        },
    );
    Ok(ProvidedCert::New {
        resource_version,
        checked: outcome,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::certs;
    use k8s_openapi::api::core::v1::Secret;

    const DAY: Duration = Duration::from_secs(86_400);

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn names() -> Vec<String> {
        vec![
            "orders.shop.svc".to_owned(),
            "*.orders-headless.shop.svc".to_owned(),
        ]
    }

    #[test]
    fn a_certificate_its_key_and_authority_pass_with_their_names() {
        let ca = certs::new_ca("orders", "shop", now(), 365 * DAY).unwrap();
        let leaf = certs::issue_server(&ca, &names(), now(), 30 * DAY).unwrap();
        let facts = check_material(
            leaf.cert_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
            ca.cert_pem.as_bytes(),
            now(),
        )
        .unwrap();
        let mut expected = names();
        expected.sort();
        assert_eq!(facts.names, expected);
        assert_eq!(
            facts.ca_sha256,
            certs::inspect(&ca.cert_pem).unwrap().sha256
        );
        assert_eq!(
            facts.not_after.as_second(),
            certs::inspect(&leaf.cert_pem).unwrap().not_after_unix
        );
    }

    #[test]
    fn each_failed_check_says_which() {
        let ca = certs::new_ca("orders", "shop", now(), 365 * DAY).unwrap();
        let other_ca = certs::new_ca("other", "shop", now(), 365 * DAY).unwrap();
        let leaf = certs::issue_server(&ca, &names(), now(), 30 * DAY).unwrap();
        let other_leaf = certs::issue_server(&ca, &names(), now(), 30 * DAY).unwrap();
        let run = |cert: &str, key: &str, ca: &str, at: SystemTime| {
            check_material(cert.as_bytes(), key.as_bytes(), ca.as_bytes(), at).unwrap_err()
        };
        let cases = [
            (
                run(&leaf.cert_pem, &other_leaf.key_pem, &ca.cert_pem, now()),
                "tls.key is not the private key",
            ),
            (
                run(&leaf.cert_pem, &leaf.key_pem, &other_ca.cert_pem, now()),
                "does not verify against ca.crt",
            ),
            (
                run(
                    &leaf.cert_pem,
                    &leaf.key_pem,
                    &ca.cert_pem,
                    now() + 31 * DAY,
                ),
                "does not verify against ca.crt now",
            ),
            (
                run("not pem", &leaf.key_pem, &ca.cert_pem, now()),
                "tls.crt holds no CERTIFICATE",
            ),
            (
                run(&leaf.cert_pem, "nothing", &ca.cert_pem, now()),
                "tls.key holds no private key",
            ),
            (
                run(&leaf.cert_pem, &leaf.key_pem, "", now()),
                "ca.crt holds no CERTIFICATE",
            ),
        ];
        for (error, expected) in cases {
            assert!(error.contains(expected), "{expected:?} in {error:?}");
            assert!(!error.contains("PRIVATE KEY-----"), "{error}");
        }
    }

    #[test]
    fn a_secret_without_a_key_names_it() {
        let secret = Secret {
            data: Some(
                [("tls.crt", "x"), ("tls.key", "y")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), k8s_openapi::ByteString(v.into())))
                    .collect(),
            ),
            ..Secret::default()
        };
        assert_eq!(check(&secret, now()).unwrap_err(), "it has no key ca.crt");
        assert_eq!(
            check(&Secret::default(), now()).unwrap_err(),
            "it has no key tls.crt"
        );
    }
}
