//! The checks on a certificate the user provides (`spec.tls.certificateSecret`) before the
//! servers see it ([`database_operator_core::tls::ProvidedCert`]): the Secret has the three
//! keys, `tls.key` is the private key of the certificate in `tls.crt`, and the certificate (with
//! any intermediates that follow it in `tls.crt`) verifies against `ca.crt` now, for TLS server
//! use, as a client of the cluster would check it. Which names it must cover is the core's
//! decision ([`database_operator_core::tls::required_names`]); this reports the names it has.
//!
//! Each failure is one sentence naming the key and the check, for the cluster's `Degraded`
//! condition; the values of the keys never appear in it. The operator and `kubectl dbc plan`
//! run the same checks.

use std::sync::Arc;
use std::time::SystemTime;

use database_operator_core::tls::{self, ProvidedFacts};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use sha2::{Digest as _, Sha256};

/// Checks the material of the user's Secret `secret` at `now`.
pub fn check(secret: &Secret, now: SystemTime) -> Result<ProvidedFacts, String> {
    let data = secret.data.as_ref();
    let key = |name: &str| -> Result<&[u8], String> {
        data.and_then(|d| d.get(name))
            .map(|v| v.0.as_slice())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("it has no key {name}"))
    };
    check_material(
        key(tls::CERT_KEY)?,
        key(tls::PRIVATE_KEY_KEY)?,
        key(tls::CA_CERT_KEY)?,
        now,
    )
}

/// Checks a certificate chain (`cert_pem`: the server certificate first), its private key and
/// the authorities it must verify against, at `now`.
pub fn check_material(
    cert_pem: &[u8],
    key_pem: &[u8],
    ca_pem: &[u8],
    now: SystemTime,
) -> Result<ProvidedFacts, String> {
    let chain = certificates(cert_pem, tls::CERT_KEY)?;
    let authorities = certificates(ca_pem, tls::CA_CERT_KEY)?;
    let leaf = &chain[0];
    let (_, x509) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("the first certificate of tls.crt does not parse: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
        "tls.key holds no private key (PEM PKCS#8, PKCS#1 or SEC1 expected)".to_owned()
    })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("tls.key is not a key the servers can use: {e}"))?;
    let public = signing
        .public_key()
        .ok_or_else(|| "the public key of tls.key cannot be derived".to_owned())?;
    if public.as_ref() != x509.public_key().raw {
        return Err("tls.key is not the private key of the certificate in tls.crt".to_owned());
    }
    let mut names = Vec::new();
    if let Ok(Some(san)) = x509.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    // The chain is checked for one of its own names (the first that is a valid DNS name);
    // which names it must have is the core's.
    if names.is_empty() {
        return Err("the certificate in tls.crt has no DNS name (subjectAltName)".to_owned());
    }
    let probe = names.iter().find_map(|name| {
        let name = match name.strip_prefix("*.") {
            Some(rest) => format!("member.{rest}"),
            None => name.clone(),
        };
        ServerName::try_from(name).ok()
    });
    let Some(server_name) = probe else {
        return Err(format!(
            "none of the certificate's names is a valid DNS name: {}",
            names.join(", ")
        ));
    };
    let mut roots = RootCertStore::empty();
    for (i, ca) in authorities.iter().enumerate() {
        roots.add(ca.clone()).map_err(|e| {
            format!(
                "certificate {} of ca.crt cannot be a trust anchor: {e}",
                i + 1
            )
        })?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("ca.crt: {e}"))?;
    verifier
        .verify_server_cert(
            leaf,
            &chain[1..],
            &server_name,
            &[],
            UnixTime::since_unix_epoch(
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default(),
            ),
        )
        .map_err(|e| {
            format!("the certificate in tls.crt does not verify against ca.crt now: {e}")
        })?;
    let time = |t: i64| Timestamp::from_second(t).unwrap_or(Timestamp::UNIX_EPOCH);
    Ok(ProvidedFacts {
        names,
        not_before: time(x509.validity().not_before.timestamp()),
        not_after: time(x509.validity().not_after.timestamp()),
        ca_sha256: database_operator_core::backup::hex(&Sha256::digest(authorities[0].as_ref())),
    })
}

/// The certificates of the PEM `pem` (the value of key `key`), at least one.
fn certificates(pem: &[u8], key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{key} is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} holds no CERTIFICATE"));
    }
    Ok(certs)
}
