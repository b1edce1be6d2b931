//! Makes the certificates the core asks for ([`database_operator_core::tls::TlsChange`]): a
//! new authority, a server certificate signed by it, the authority's certificate published for
//! clients. The core decided when from the Secrets' annotations; this module generates the
//! keys (the only randomness), reads the clock, and writes each Secret with its material and the
//! annotations the core reads next time ([`tls::NOT_AFTER_ANNOTATION`],
//! [`tls::CA_SHA256_ANNOTATION`], [`tls::NAMES_ANNOTATION`]).
//!
//! Order: the authority first (a server certificate is never written before the authority that
//! signed it is stored), then the server certificate with the authority beside it (`ca.crt`),
//! then the published authority. A pass that fails half way leaves Secrets the core recognises
//! as outdated, and the next pass finishes the work.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use database_operator_core::tls::{self, TlsChange};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;

use crate::certs::{self, CaMaterial};
use crate::echo::Target;
use crate::error::Error;
use crate::io::{ClusterIo, Version};

/// A Secret written, and the version it left (for [`crate::echo`]).
pub type Written = (Target, Version);

/// Carries out `change` for the cluster `cluster` in `namespace` at `now`.
pub async fn carry_out<I: ClusterIo>(
    io: &I,
    namespace: &str,
    cluster: &str,
    change: &TlsChange,
    now: SystemTime,
) -> Result<Vec<Written>, Error> {
    let fail = |message: String| certificate_error(namespace, cluster, message);
    if let Some(provided) = &change.provided {
        return copy_provided(io, namespace, cluster, change, provided, now).await;
    }
    let mut written = Vec::new();
    let ca = match &change.new_ca {
        Some(secret) => {
            let ca = certs::new_ca(
                cluster,
                namespace,
                now,
                Duration::from_secs(tls::CA_LIFETIME_SECONDS.unsigned_abs()),
            )
            .map_err(|e| fail(e.to_string()))?;
            let facts = certs::inspect(&ca.cert_pem).map_err(|e| fail(e.to_string()))?;
            let secret = with_material(
                secret,
                [
                    (tls::CERT_KEY, ca.cert_pem.as_str()),
                    (tls::PRIVATE_KEY_KEY, ca.key_pem.as_str()),
                ],
                facts.not_after_unix,
                &facts.sha256,
            );
            written.push(put(io, namespace, &secret).await?);
            tracing::info!(
                namespace,
                cluster,
                reason = change.reason,
                "made the cluster's TLS authority"
            );
            ca
        }
        None => stored_ca(io, namespace, cluster).await?,
    };
    let ca_facts = certs::inspect(&ca.cert_pem).map_err(|e| fail(e.to_string()))?;
    // The current authority first, then the earlier ones still valid (from what is published).
    let published = published_authorities(io, namespace, cluster).await?;
    let bundle = if change.new_ca.is_some() || change.publish.is_some() {
        bundle(&ca.cert_pem, &published.unwrap_or_default(), now)
    } else {
        published
            .filter(|b| b.starts_with(ca.cert_pem.trim_end()))
            .unwrap_or_else(|| ca.cert_pem.clone())
    };
    if let Some(secret) = &change.server {
        let leaf = certs::issue_server(
            &ca,
            &change.names,
            now,
            Duration::from_secs(change.server_lifetime_seconds.unsigned_abs()),
        )
        .map_err(|e| fail(e.to_string()))?;
        let facts = certs::inspect(&leaf.cert_pem).map_err(|e| fail(e.to_string()))?;
        let secret = with_material(
            secret,
            [
                (tls::CERT_KEY, leaf.cert_pem.as_str()),
                (tls::PRIVATE_KEY_KEY, leaf.key_pem.as_str()),
                (tls::CA_CERT_KEY, bundle.as_str()),
            ],
            facts.not_after_unix,
            &ca_facts.sha256,
        );
        written.push(put(io, namespace, &secret).await?);
        tracing::info!(
            namespace,
            cluster,
            reason = change.reason,
            "issued the members' server certificate"
        );
    }
    if let Some(secret) = &change.publish {
        let secret = with_material(
            secret,
            [(tls::CA_CERT_KEY, bundle.as_str())],
            ca_facts.not_after_unix,
            &ca_facts.sha256,
        );
        written.push(put(io, namespace, &secret).await?);
    }
    Ok(written)
}

/// Copies the version of the user's Secret that the core saw checked (`provided`) into
/// `<name>-tls` and its `ca.crt` into `<name>-ca`, after checking it again (the core decided on
/// what the previous read found; the copy is of what is read now). A Secret that changed since
/// is left for the next pass, which checks the new version first.
async fn copy_provided<I: ClusterIo>(
    io: &I,
    namespace: &str,
    cluster: &str,
    change: &TlsChange,
    provided: &tls::ProvidedCopy,
    now: SystemTime,
) -> Result<Vec<Written>, Error> {
    let fail = |message: String| certificate_error(namespace, cluster, message);
    let named = format!(
        "Secret {namespace}/{} (spec.tls.certificateSecret)",
        provided.secret
    );
    let Some(secret) = io.read_secret(namespace, &provided.secret).await? else {
        return Err(fail(format!("{named} is gone")));
    };
    if secret.metadata.resource_version.as_deref() != Some(provided.resource_version.as_str()) {
        tracing::info!(namespace, cluster, secret = %provided.secret, "the provided certificate changed since it was checked; the next pass checks the new version");
        return Ok(Vec::new());
    }
    let facts = crate::provided_cert::check(&secret, now)
        .map_err(|why| fail(format!("{named} cannot be used: {why}")))?;
    let value = |key: &str| {
        secret_text(&secret, key).ok_or_else(|| fail(format!("{named} key {key} is not text")))
    };
    let (cert, key, ca) = (
        value(tls::CERT_KEY)?,
        value(tls::PRIVATE_KEY_KEY)?,
        value(tls::CA_CERT_KEY)?,
    );
    // Only the certificates of `ca.crt` are published: anything else in it (a key pasted in by
    // mistake) stays in the user's Secret.
    let ca = format!("{}\n", pem_blocks(&ca).join("\n"));
    // Your authorities first, then every earlier one still valid (the operator's, before a
    // switch): the members serve the earlier certificate until they reload, and the operator,
    // the replicas and clients must still trust it meanwhile.
    let published = published_authorities(io, namespace, cluster).await?;
    let trusted = bundle(&ca, &published.unwrap_or_default(), now);
    let mut written = Vec::new();
    if let Some(server) = &change.server {
        let mut server = with_material(
            server,
            [
                (tls::CERT_KEY, cert.as_str()),
                (tls::PRIVATE_KEY_KEY, key.as_str()),
                (tls::CA_CERT_KEY, trusted.as_str()),
            ],
            facts.not_after.as_second(),
            &facts.ca_sha256,
        );
        let annotations = server
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        annotations.insert(tls::NAMES_ANNOTATION.to_owned(), facts.names.join(","));
        annotations.insert(
            tls::SOURCE_VERSION_ANNOTATION.to_owned(),
            provided.resource_version.clone(),
        );
        annotations.insert(
            tls::NOT_BEFORE_ANNOTATION.to_owned(),
            facts.not_before.to_string(),
        );
        written.push(put(io, namespace, &server).await?);
        tracing::info!(namespace, cluster, secret = %provided.secret, version = %provided.resource_version, reason = change.reason, "copied the provided server certificate");
    }
    if let Some(publish) = &change.publish {
        let ca_not_after = certs::inspect(&ca)
            .map(|f| f.not_after_unix)
            .map_err(|e| fail(format!("{named} key {}: {e}", tls::CA_CERT_KEY)))?;
        let publish = with_material(
            publish,
            [(tls::CA_CERT_KEY, trusted.as_str())],
            ca_not_after,
            &facts.ca_sha256,
        );
        written.push(put(io, namespace, &publish).await?);
    }
    Ok(written)
}

/// `current` (PEM, one certificate or several) followed by each certificate of `earlier` (a PEM bundle) that is another
/// certificate and has not expired at `now`: the trust bundle after a new authority.
pub fn bundle(current: &str, earlier: &str, now: SystemTime) -> String {
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let current = current.trim_end();
    let mut out = vec![current.to_owned()];
    for block in pem_blocks(earlier) {
        if current.contains(&block) || out.contains(&block) {
            continue;
        }
        match certs::inspect(&block) {
            Ok(facts) if facts.not_after_unix > now => out.push(block),
            _ => {}
        }
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// The `CERTIFICATE` blocks of a PEM bundle, each trimmed.
fn pem_blocks(text: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let stop = start + end + END.len();
        blocks.push(rest[start..stop].to_owned());
        rest = &rest[stop..];
    }
    blocks
}

/// The authority stored in `<cluster>-ca-key`.
async fn stored_ca<I: ClusterIo>(
    io: &I,
    namespace: &str,
    cluster: &str,
) -> Result<CaMaterial, Error> {
    let name = tls::ca_key_secret_name(cluster);
    let fail = |what: &str| {
        certificate_error(
            namespace,
            cluster,
            format!("Secret {namespace}/{name} {what}"),
        )
    };
    let secret = io
        .read_secret(namespace, &name)
        .await?
        .ok_or_else(|| fail("is gone (a new authority is made on the next pass)"))?;
    let text = |key: &str| {
        secret_text(&secret, key).ok_or_else(|| fail(&format!("has no readable key {key}")))
    };
    Ok(CaMaterial {
        cert_pem: text(tls::CERT_KEY)?,
        key_pem: text(tls::PRIVATE_KEY_KEY)?,
    })
}

/// The error of a certificate step of `cluster` in `namespace`.
fn certificate_error(namespace: &str, cluster: &str, message: String) -> Error {
    Error::Certificate {
        namespace: namespace.to_owned(),
        name: cluster.to_owned(),
        message,
    }
}

/// The value of `key` in `secret`, when it is text.
fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    let value = secret.data.as_ref()?.get(key)?;
    String::from_utf8(value.0.clone()).ok()
}

/// What `<cluster>-ca` publishes now (`ca.crt`), if anything: the earlier authorities a new
/// bundle keeps while they are valid.
async fn published_authorities<I: ClusterIo>(
    io: &I,
    namespace: &str,
    cluster: &str,
) -> Result<Option<String>, Error> {
    let published = io
        .read_secret(namespace, &tls::ca_secret_name(cluster))
        .await?;
    Ok(published.and_then(|s| secret_text(&s, tls::CA_CERT_KEY)))
}

/// `secret` (as the core rendered it) with its data and the annotations the core reads.
fn with_material<const N: usize>(
    secret: &Secret,
    data: [(&str, &str); N],
    not_after_unix: i64,
    ca_sha256: &str,
) -> Secret {
    let mut secret = secret.clone();
    secret.data = Some(
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    let not_after = Timestamp::from_second(not_after_unix)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string();
    let annotations = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(tls::NOT_AFTER_ANNOTATION.to_owned(), not_after);
    annotations.insert(tls::CA_SHA256_ANNOTATION.to_owned(), ca_sha256.to_owned());
    secret
}

async fn put<I: ClusterIo>(io: &I, namespace: &str, secret: &Secret) -> Result<Written, Error> {
    let version = io.put_secret(namespace, secret).await?;
    Ok((
        Target::Secret(secret.metadata.name.clone().unwrap_or_default()),
        version,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use database_operator_core::tls::TlsObserved;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::io::MockClusterIo;

    const NOW: u64 = 1_800_000_000;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn secret(name: &str) -> Box<Secret> {
        Box::new(Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        })
    }

    fn data(secret: &Secret, key: &str) -> String {
        String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
    }

    /// A ClusterIo that stores the Secrets written, and reads them back.
    fn recording_io(stored: Arc<Mutex<Vec<Secret>>>) -> MockClusterIo {
        let mut io = MockClusterIo::new();
        let written = stored.clone();
        io.expect_put_secret().returning(move |_, s| {
            let mut all = written.lock().unwrap();
            all.retain(|old| old.metadata.name != s.metadata.name);
            all.push(s.clone());
            Ok(Some("1".into()))
        });
        io.expect_read_secret().returning(move |_, name| {
            Ok(stored
                .lock()
                .unwrap()
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(name))
                .cloned())
        });
        io
    }

    fn first_change() -> TlsChange {
        TlsChange {
            new_ca: Some(secret("orders-ca-key")),
            server: Some(secret("orders-tls")),
            publish: Some(secret("orders-ca")),
            names: vec![
                "*.orders-headless.shop.svc".into(),
                "orders.shop.svc".into(),
            ],
            server_lifetime_seconds: tls::SERVER_LIFETIME_SECONDS,
            reason: "created",
            provided: None,
        }
    }

    #[tokio::test]
    async fn a_new_cluster_gets_an_authority_a_certificate_it_signed_and_the_published_authority() {
        let stored = Arc::new(Mutex::new(Vec::new()));
        let io = recording_io(stored.clone());
        let written = carry_out(&io, "shop", "orders", &first_change(), at(NOW))
            .await
            .unwrap();
        assert_eq!(written.len(), 3);
        let all = stored.lock().unwrap().clone();
        let get = |name: &str| {
            all.iter()
                .find(|s| s.metadata.name.as_deref() == Some(name))
                .unwrap()
                .clone()
        };
        let (ca, server, published) = (get("orders-ca-key"), get("orders-tls"), get("orders-ca"));
        let ca_pem = data(&ca, tls::CERT_KEY);
        let leaf = data(&server, tls::CERT_KEY);
        assert!(certs::signed_by(&leaf, &ca_pem).unwrap());
        let facts = certs::inspect(&leaf).unwrap();
        assert_eq!(
            facts.names,
            ["*.orders-headless.shop.svc", "orders.shop.svc"]
        );
        assert_eq!(
            facts.not_after_unix,
            (NOW as i64) + tls::SERVER_LIFETIME_SECONDS
        );
        assert_eq!(
            data(&server, tls::CA_CERT_KEY),
            data(&published, tls::CA_CERT_KEY)
        );
        assert!(data(&published, tls::CA_CERT_KEY).starts_with(ca_pem.trim_end()));
        assert!(
            !published
                .data
                .as_ref()
                .unwrap()
                .contains_key(tls::PRIVATE_KEY_KEY)
        );
        // The core reads back exactly what it asked for.
        let uid = "";
        let sighting = |s: &Secret| {
            let mut meta = s.metadata.clone();
            meta.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    uid: "u1".into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]);
            let _ = uid;
            tls::CertSighting::from_metadata(&meta, "u1").unwrap()
        };
        let observed = TlsObserved {
            ca: Some(sighting(&ca)),
            server: Some(sighting(&server)),
            published: Some(sighting(&published)),
            provided: None,
        };
        let ca_sha = &observed.ca.as_ref().unwrap().ca_sha256;
        assert_eq!(&observed.server.as_ref().unwrap().ca_sha256, ca_sha);
        assert_eq!(&observed.published.as_ref().unwrap().ca_sha256, ca_sha);
        assert_eq!(
            observed.server.as_ref().unwrap().not_after.as_second(),
            facts.not_after_unix
        );
    }

    #[tokio::test]
    async fn a_renewed_certificate_is_signed_by_the_stored_authority() {
        let stored = Arc::new(Mutex::new(Vec::new()));
        let io = recording_io(stored.clone());
        carry_out(&io, "shop", "orders", &first_change(), at(NOW))
            .await
            .unwrap();
        let ca_before = data(&stored.lock().unwrap()[0], tls::CERT_KEY);
        let renew = TlsChange {
            new_ca: None,
            publish: None,
            reason: "renewed",
            ..first_change()
        };
        carry_out(&io, "shop", "orders", &renew, at(NOW + 86_400))
            .await
            .unwrap();
        let all = stored.lock().unwrap().clone();
        let server = all
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some("orders-tls"))
            .unwrap();
        let leaf = data(server, tls::CERT_KEY);
        assert!(certs::signed_by(&leaf, &ca_before).unwrap());
        assert_eq!(
            certs::inspect(&leaf).unwrap().not_after_unix,
            (NOW as i64) + 86_400 + tls::SERVER_LIFETIME_SECONDS
        );
        assert!(data(server, tls::CA_CERT_KEY).starts_with(ca_before.trim_end()));
    }

    #[tokio::test]
    async fn a_new_authority_keeps_the_earlier_ones_trusted_until_they_expire() {
        let stored = Arc::new(Mutex::new(Vec::new()));
        let io = recording_io(stored.clone());
        carry_out(&io, "shop", "orders", &first_change(), at(NOW))
            .await
            .unwrap();
        let first_ca = data(&stored.lock().unwrap()[0], tls::CERT_KEY);
        carry_out(&io, "shop", "orders", &first_change(), at(NOW + 10))
            .await
            .unwrap();
        let all = stored.lock().unwrap().clone();
        let get = |name: &str| {
            all.iter()
                .find(|s| s.metadata.name.as_deref() == Some(name))
                .unwrap()
                .clone()
        };
        let second_ca = data(&get("orders-ca-key"), tls::CERT_KEY);
        assert_ne!(first_ca, second_ca);
        let published = data(&get("orders-ca"), tls::CA_CERT_KEY);
        assert!(
            published.starts_with(second_ca.trim_end()),
            "the new one first"
        );
        assert!(
            published.contains(first_ca.trim_end()),
            "the earlier one kept"
        );
        assert_eq!(data(&get("orders-tls"), tls::CA_CERT_KEY), published);
        // Once the earlier authority has expired it is dropped.
        let later = at(NOW + tls::CA_LIFETIME_SECONDS as u64 + 60);
        let trimmed = bundle(&second_ca, &published, later);
        assert!(!trimmed.contains(first_ca.trim_end()));
    }

    #[tokio::test]
    async fn a_lost_authority_key_is_an_error_that_names_the_secret() {
        let io = recording_io(Arc::new(Mutex::new(Vec::new())));
        let renew = TlsChange {
            new_ca: None,
            publish: None,
            ..first_change()
        };
        let e = carry_out(&io, "shop", "orders", &renew, at(NOW))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("Secret shop/orders-ca-key is gone"),
            "{e}"
        );
    }

    fn get_now(stored: &Arc<Mutex<Vec<Secret>>>, name: &str) -> Secret {
        stored
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap()
            .clone()
    }

    #[tokio::test]
    async fn a_provided_certificate_is_copied_with_its_version_and_published() {
        let ca = certs::new_ca("corp", "shop", at(NOW), Duration::from_secs(365 * 86_400)).unwrap();
        let names = vec![
            "orders.shop.svc".to_owned(),
            "*.orders-headless.shop.svc".to_owned(),
        ];
        let leaf =
            certs::issue_server(&ca, &names, at(NOW), Duration::from_secs(30 * 86_400)).unwrap();
        let mut user = *secret("orders-cert");
        user.metadata.resource_version = Some("41".to_owned());
        user.data = Some(
            [
                (tls::CERT_KEY, &leaf.cert_pem),
                (tls::PRIVATE_KEY_KEY, &leaf.key_pem),
                (tls::CA_CERT_KEY, &ca.cert_pem),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        );
        // The operator's authority, published before the switch.
        let earlier =
            certs::new_ca("orders", "shop", at(NOW), Duration::from_secs(365 * 86_400)).unwrap();
        let mut published = *secret("orders-ca");
        published.data = Some(
            [(
                tls::CA_CERT_KEY.to_owned(),
                ByteString(earlier.cert_pem.clone().into_bytes()),
            )]
            .into(),
        );
        let stored = Arc::new(Mutex::new(vec![user.clone(), published]));
        let io = recording_io(stored.clone());
        let copy = |version: &str| TlsChange {
            new_ca: None,
            server: Some(secret("orders-tls")),
            publish: Some(secret("orders-ca")),
            names: Vec::new(),
            server_lifetime_seconds: 0,
            reason: "provided certificate copied",
            provided: Some(tls::ProvidedCopy {
                secret: "orders-cert".to_owned(),
                resource_version: version.to_owned(),
            }),
        };
        // A version other than the one checked: nothing is written.
        let written = carry_out(&io, "shop", "orders", &copy("40"), at(NOW))
            .await
            .unwrap();
        assert!(written.is_empty());
        let written = carry_out(&io, "shop", "orders", &copy("41"), at(NOW))
            .await
            .unwrap();
        assert_eq!(written.len(), 2);
        let server = get_now(&stored, "orders-tls");
        assert_eq!(data(&server, tls::CERT_KEY), leaf.cert_pem);
        assert_eq!(data(&server, tls::PRIVATE_KEY_KEY), leaf.key_pem);
        // The user's authority first, the earlier one still trusted while members reload.
        let trusted = format!(
            "{}\n{}\n",
            ca.cert_pem.trim_end(),
            earlier.cert_pem.trim_end()
        );
        assert_eq!(data(&server, tls::CA_CERT_KEY), trusted);
        let sighting = tls::CertSighting::from_metadata(&server.metadata, "").unwrap();
        assert_eq!(sighting.source_version.as_deref(), Some("41"));
        assert_eq!(
            sighting.not_before.map(|t| t.as_second()),
            Some(certs::inspect(&leaf.cert_pem).unwrap().not_before_unix)
        );
        assert_eq!(
            sighting.names,
            ["*.orders-headless.shop.svc", "orders.shop.svc"]
        );
        assert_eq!(
            sighting.not_after.as_second(),
            certs::inspect(&leaf.cert_pem).unwrap().not_after_unix
        );
        let ca_sha = certs::inspect(&ca.cert_pem).unwrap().sha256;
        assert_eq!(sighting.ca_sha256, ca_sha);
        let published = get_now(&stored, "orders-ca");
        assert_eq!(data(&published, tls::CA_CERT_KEY), trusted);
        assert_eq!(
            tls::CertSighting::from_metadata(&published.metadata, "")
                .unwrap()
                .ca_sha256,
            ca_sha
        );
        assert!(
            stored
                .lock()
                .unwrap()
                .iter()
                .all(|s| s.metadata.name.as_deref() != Some("orders-ca-key")),
            "no authority of the operator's"
        );
        // A Secret whose key is not its certificate's is never copied.
        let mut bad = user.clone();
        let other = certs::issue_server(&ca, &names, at(NOW), Duration::from_secs(86_400)).unwrap();
        bad.metadata.resource_version = Some("42".to_owned());
        bad.data.as_mut().unwrap().insert(
            tls::PRIVATE_KEY_KEY.to_owned(),
            ByteString(other.key_pem.into_bytes()),
        );
        stored
            .lock()
            .unwrap()
            .retain(|s| s.metadata.name.as_deref() != Some("orders-cert"));
        stored.lock().unwrap().push(bad);
        let error = carry_out(&io, "shop", "orders", &copy("42"), at(NOW))
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("tls.key is not the private key"),
            "{error}"
        );
        assert_eq!(
            data(&get_now(&stored, "orders-tls"), tls::PRIVATE_KEY_KEY),
            leaf.key_pem
        );
    }
}
