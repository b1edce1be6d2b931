//! The certificate material of a database cluster's TLS: a self-signed CA per cluster and the
//! server certificates it signs, made with rcgen (ECDSA P-256, keys from the operating system's
//! random source through ring), and read back with x509-parser so the operator can decide
//! whether to renew one ([`inspect`], [`signed_by`]).
//!
//! The clock is an argument (`now`): nothing here reads it. Every certificate starts
//! [`BACKDATE`] before `now`, for the clocks of the members that lag the operator's; its
//! lifetime counts from `now`. A server certificate never outlives its CA.
//!
//! Certificates and keys are PEM text, as a Secret holds them. [`CaMaterial`] and
//! [`LeafMaterial`] do not print their keys in `Debug`.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, DnsName};
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

/// How long before `now` every certificate starts: the members' clocks may lag the operator's.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// The Organization (O) of every certificate made here.
pub const ORGANIZATION: &str = "database-operator";

/// The last second a certificate can hold (9999-12-31T23:59:59Z: GeneralizedTime has four
/// digits of year).
const MAX_UNIX: i64 = 253_402_300_799;

/// A CA's certificate and private key, PEM (the key PKCS#8, "PRIVATE KEY").
///
/// `Debug` does not print the key.
#[derive(Clone, PartialEq, Eq)]
pub struct CaMaterial {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    /// The CA's private key, PKCS#8 PEM.
    pub key_pem: String,
}

impl fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaMaterial")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A leaf (server) certificate and its private key, PEM (the key PKCS#8, "PRIVATE KEY").
///
/// `Debug` does not print the key.
#[derive(Clone, PartialEq, Eq)]
pub struct LeafMaterial {
    /// The server certificate, PEM.
    pub cert_pem: String,
    /// The server's private key, PKCS#8 PEM.
    pub key_pem: String,
}

impl fmt::Debug for LeafMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafMaterial")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What the operator needs to know of a certificate to decide whether to renew it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFacts {
    /// notBefore, in seconds since the Unix epoch.
    pub not_before_unix: i64,
    /// notAfter, in seconds since the Unix epoch.
    pub not_after_unix: i64,
    /// DNS names and IP addresses of the subjectAltName, as text, sorted.
    pub names: Vec<String>,
    /// Hex SHA-256 of the DER of the certificate (lowercase).
    pub sha256: String,
    /// Whether it is a CA (basicConstraints cA).
    pub is_ca: bool,
}

/// What failed while making or reading certificate material.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Generating a key pair failed.
    #[error("generating the {what} key pair failed: {source}")]
    KeyGeneration {
        /// Whose key: "CA", "server".
        what: &'static str,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// The operating system's random source failed.
    #[error("the random source failed while making the serial number of the {what}: {reason}")]
    Random {
        /// Which certificate: "CA certificate", "server certificate".
        what: &'static str,
        /// getrandom's error, as text.
        reason: String,
    },
    /// Building or signing a certificate failed.
    #[error("signing the {what} failed: {source}")]
    Signing {
        /// Which certificate: "CA certificate", "server certificate".
        what: &'static str,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// A PEM does not parse, or what it holds is not a certificate (or a key) that can be read.
    #[error("{what} does not parse: {reason}")]
    Parse {
        /// Which PEM: "the CA certificate", "the CA key", "the certificate"...
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A server certificate was asked for no names.
    #[error("a server certificate needs at least one name")]
    NoNames,
    /// A name is neither a DNS name nor an IP address.
    #[error("the certificate name {name:?} is neither a DNS name nor an IP address")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// A time does not fit in a certificate (before 1970 or after 9999).
    #[error("{what} is out of the range a certificate can hold (1970 to 9999)")]
    TimeOutOfRange {
        /// Which time: "now", "the end of the lifetime".
        what: &'static str,
    },
    /// The CA certificate given to sign with is not a CA certificate.
    #[error("the CA certificate is not a CA (no basicConstraints cA)")]
    NotACa,
    /// The CA key given is not the key of the CA certificate given: what it signed would not
    /// verify against that certificate.
    #[error("the CA key is not the key of the CA certificate")]
    CaKeyMismatch,
    /// The CA certificate has expired: a server certificate it signed would be valid for no time.
    #[error(
        "the CA certificate expired at {not_after_unix} (Unix seconds), at or before now ({now_unix})"
    )]
    CaExpired {
        /// The CA's notAfter, in seconds since the Unix epoch.
        not_after_unix: i64,
        /// `now`, in seconds since the Unix epoch.
        now_unix: i64,
    },
    /// A signature could not be checked (not: the signature is wrong, which is an answer).
    #[error("checking the signature of {what} failed: {reason}")]
    Verification {
        /// Which certificate.
        what: &'static str,
        /// x509-parser's error, as text.
        reason: String,
    },
}

/// A new self-signed CA for the cluster `cluster` in namespace `namespace`.
///
/// CN "`<cluster>.<namespace>` database CA", O [`ORGANIZATION`], an ECDSA P-256 key,
/// basicConstraints cA with pathLen 0 (critical), keyUsage keyCertSign and cRLSign, a
/// subjectKeyIdentifier (truncated SHA-256 of the key), a random positive 128-bit serial. Valid
/// from `now` - [`BACKDATE`] to `now` + `lifetime` (whole seconds: the fraction of `now` is
/// dropped).
pub fn new_ca(
    cluster: &str,
    namespace: &str,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CaMaterial, CertError> {
    let now_unix = unix_seconds(now)?;
    let not_after = end_of_lifetime(now_unix, lifetime)?;

    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(&format!("{cluster}.{namespace} database CA"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(random_serial("CA certificate")?);
    params.not_before = asn1_time(backdated(now_unix), "now")?.to_datetime();
    params.not_after = asn1_time(not_after, "the end of the lifetime")?.to_datetime();

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|source| CertError::KeyGeneration { what: "CA", source })?;
    let cert = params
        .self_signed(&key)
        .map_err(|source| CertError::Signing {
            what: "CA certificate",
            source,
        })?;
    Ok(CaMaterial {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A server certificate signed by `ca` for `names`.
///
/// Each name is an IP address (an IP subjectAltName) or a DNS name (a DNS subjectAltName; a
/// leading `*.` label makes it a wildcard); a name given twice goes in once. CN is the first
/// name, O [`ORGANIZATION`]. An ECDSA P-256 key, keyUsage digitalSignature, extendedKeyUsage
/// serverAuth and clientAuth (replicas present it to their source), basicConstraints cA false,
/// the CA's key identifier as authorityKeyIdentifier, a random positive 128-bit serial. Valid
/// from `now` - [`BACKDATE`] to `now` + `lifetime`, cut to the CA's notAfter.
///
/// Errors: no names or an invalid one; `ca` that does not parse, is not a CA, whose key is not
/// the certificate's, or that has expired at `now`.
pub fn issue_server(
    ca: &CaMaterial,
    names: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<LeafMaterial, CertError> {
    let sans = subject_alt_names(names)?;
    let Some(first) = names.first() else {
        return Err(CertError::NoNames);
    };
    let now_unix = unix_seconds(now)?;

    let ca_der = first_certificate(&ca.cert_pem, "the CA certificate")?;
    let ca_x509 = parse_der(&ca_der, "the CA certificate")?;
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(|e| CertError::Parse {
        what: "the CA key",
        reason: e.to_string(),
    })?;
    if !is_ca(&ca_x509, "the CA certificate")? {
        return Err(CertError::NotACa);
    }
    if ca_x509.public_key().subject_public_key.data.as_ref() != ca_key.public_key_raw() {
        return Err(CertError::CaKeyMismatch);
    }
    let ca_not_after = ca_x509.validity().not_after.timestamp();
    if ca_not_after <= now_unix {
        return Err(CertError::CaExpired {
            not_after_unix: ca_not_after,
            now_unix,
        });
    }
    let not_after = end_of_lifetime(now_unix, lifetime)?.min(ca_not_after);
    let issuer = Issuer::from_ca_cert_der(&ca_der, ca_key).map_err(|e| CertError::Parse {
        what: "the CA certificate",
        reason: e.to_string(),
    })?;

    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(first);
    params.subject_alt_names = sans;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial("server certificate")?);
    params.not_before = asn1_time(backdated(now_unix), "now")?.to_datetime();
    params.not_after = asn1_time(not_after, "the end of the lifetime")?.to_datetime();

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|source| {
        CertError::KeyGeneration {
            what: "server",
            source,
        }
    })?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| CertError::Signing {
            what: "server certificate",
            source,
        })?;
    Ok(LeafMaterial {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The facts of the first certificate in `pem` (other sections, such as a key, are skipped).
pub fn inspect(pem: &str) -> Result<CertFacts, CertError> {
    const WHAT: &str = "the certificate";
    let der = first_certificate(pem, WHAT)?;
    let x509 = parse_der(&der, WHAT)?;
    let validity = x509.validity();
    let mut names = Vec::new();
    let san = x509
        .subject_alternative_name()
        .map_err(|e| parse_error(WHAT, &e))?;
    for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(dns) => names.push((*dns).to_owned()),
            GeneralName::IPAddress(octets) => names.push(ip_text(octets, WHAT)?),
            _ => {}
        }
    }
    names.sort();
    Ok(CertFacts {
        not_before_unix: validity.not_before.timestamp(),
        not_after_unix: validity.not_after.timestamp(),
        names,
        sha256: database_operator_core::backup::hex(&Sha256::digest(der.as_ref())),
        is_ca: is_ca(&x509, WHAT)?,
    })
}

/// When the certificate `der` (DER) expires, in seconds since the Unix epoch: what a server
/// presented in a handshake, compared with the cluster's current certificate.
pub fn not_after_of_der(der: &CertificateDer<'_>) -> Result<i64, CertError> {
    let x509 = parse_der(der, "the server's certificate")?;
    Ok(x509.validity().not_after.timestamp())
}

/// Whether the first certificate of `leaf_pem` is signed by the key of the first certificate
/// of `ca_cert_pem` (a signature check: names, validity and extensions are not looked at), so a
/// server certificate from an older CA is recognised as such.
///
/// A signature made with an algorithm that cannot be checked against the CA's key (another
/// key type, an algorithm ring does not support) is not the CA's: `false`.
pub fn signed_by(leaf_pem: &str, ca_cert_pem: &str) -> Result<bool, CertError> {
    let leaf_der = first_certificate(leaf_pem, "the leaf certificate")?;
    let leaf = parse_der(&leaf_der, "the leaf certificate")?;
    let ca_der = first_certificate(ca_cert_pem, "the CA certificate")?;
    let ca = parse_der(&ca_der, "the CA certificate")?;
    match leaf.verify_signature(Some(ca.public_key())) {
        Ok(()) => Ok(true),
        Err(X509Error::SignatureVerificationError | X509Error::SignatureUnsupportedAlgorithm) => {
            Ok(false)
        }
        Err(e) => Err(CertError::Verification {
            what: "the leaf certificate",
            reason: e.to_string(),
        }),
    }
}

/// CN `common_name`, O [`ORGANIZATION`].
fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn
}

/// The subjectAltNames of `names`, in order, each once.
fn subject_alt_names(names: &[String]) -> Result<Vec<SanType>, CertError> {
    let mut sans = Vec::with_capacity(names.len());
    for name in names {
        let invalid = || CertError::InvalidName { name: name.clone() };
        let san = if let Ok(ip) = name.parse::<IpAddr>() {
            SanType::IpAddress(ip)
        } else {
            let rest = name.strip_prefix("*.").unwrap_or(name);
            DnsName::try_from(rest).map_err(|_| invalid())?;
            SanType::DnsName(name.as_str().try_into().map_err(|_| invalid())?)
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    Ok(sans)
}

/// 16 random bytes, a positive serial number (rcgen encodes it as an unsigned INTEGER); never
/// zero.
fn random_serial(what: &'static str) -> Result<SerialNumber, CertError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| CertError::Random {
        what,
        reason: e.to_string(),
    })?;
    if bytes.iter().all(|b| *b == 0) {
        bytes[15] = 1;
    }
    Ok(SerialNumber::from_slice(&bytes))
}

/// `t` in whole seconds since the Unix epoch (the fraction dropped).
fn unix_seconds(t: SystemTime) -> Result<i64, CertError> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| i64::try_from(since.as_secs()).ok())
        .filter(|s| *s <= MAX_UNIX)
        .ok_or(CertError::TimeOutOfRange { what: "now" })
}

/// `now_unix` - [`BACKDATE`], not before the epoch.
fn backdated(now_unix: i64) -> i64 {
    let backdate = i64::try_from(BACKDATE.as_secs()).unwrap_or(0);
    now_unix.saturating_sub(backdate).max(0)
}

/// `now_unix` + `lifetime` (whole seconds), if a certificate can hold it.
fn end_of_lifetime(now_unix: i64, lifetime: Duration) -> Result<i64, CertError> {
    i64::try_from(lifetime.as_secs())
        .ok()
        .and_then(|l| now_unix.checked_add(l))
        .filter(|t| *t <= MAX_UNIX)
        .ok_or(CertError::TimeOutOfRange {
            what: "the end of the lifetime",
        })
}

/// `secs` as the time type rcgen takes (through x509-parser, which uses the same `time` crate).
fn asn1_time(secs: i64, what: &'static str) -> Result<ASN1Time, CertError> {
    if !(0..=MAX_UNIX).contains(&secs) {
        return Err(CertError::TimeOutOfRange { what });
    }
    ASN1Time::from_timestamp(secs).map_err(|_| CertError::TimeOutOfRange { what })
}

/// The DER of the first CERTIFICATE section of `pem`.
fn first_certificate(pem: &str, what: &'static str) -> Result<CertificateDer<'static>, CertError> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| CertError::Parse {
        what,
        reason: match e {
            rustls_pki_types::pem::Error::NoItemsFound => "no CERTIFICATE section".to_owned(),
            e => format!("not PEM: {e}"),
        },
    })
}

/// `der` parsed as an X.509 certificate, nothing after it.
fn parse_der<'a>(
    der: &'a CertificateDer<'_>,
    what: &'static str,
) -> Result<X509Certificate<'a>, CertError> {
    let (rest, x509) =
        x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| CertError::Parse {
            what,
            reason: format!("not an X.509 certificate: {e}"),
        })?;
    if !rest.is_empty() {
        return Err(CertError::Parse {
            what,
            reason: format!("{} bytes after the certificate", rest.len()),
        });
    }
    Ok(x509)
}

/// Whether `x509` has basicConstraints cA.
fn is_ca(x509: &X509Certificate<'_>, what: &'static str) -> Result<bool, CertError> {
    let bc = x509
        .basic_constraints()
        .map_err(|e| parse_error(what, &e))?;
    Ok(bc.is_some_and(|ext| ext.value.ca))
}

/// The text of an IP subjectAltName.
fn ip_text(octets: &[u8], what: &'static str) -> Result<String, CertError> {
    if let Ok(v4) = <[u8; 4]>::try_from(octets) {
        Ok(IpAddr::from(v4).to_string())
    } else if let Ok(v6) = <[u8; 16]>::try_from(octets) {
        Ok(IpAddr::from(v6).to_string())
    } else {
        Err(CertError::Parse {
            what,
            reason: format!("an IP address subjectAltName of {} bytes", octets.len()),
        })
    }
}

/// A [`CertError::Parse`] for an extension of `what` that x509-parser rejects.
fn parse_error(what: &'static str, e: &X509Error) -> CertError {
    CertError::Parse {
        what,
        reason: format!("its extensions: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// 2026-01-01T00:00:00.5Z: a fraction, to see it dropped.
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_767_225_600_500)
    }

    fn now_unix() -> i64 {
        1_767_225_600
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn make_ca() -> CaMaterial {
        new_ca("pg", "prod", now(), 365 * DAY).unwrap()
    }

    fn der_of(pem: &str) -> CertificateDer<'static> {
        first_certificate(pem, "test").unwrap()
    }

    /// rustls (webpki, ring) verifies `leaf` against a root store holding only `ca`, for
    /// `name`, at `at_unix`.
    fn rustls_verify(
        ca_pem: &str,
        leaf_pem: &str,
        name: &str,
        at_unix: i64,
    ) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(first_certificate(ca_pem, "CA").unwrap()).unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = first_certificate(leaf_pem, "leaf").unwrap();
        let server_name = ServerName::try_from(name.to_owned()).unwrap();
        let at = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(at_unix).unwrap()));
        verifier
            .verify_server_cert(&leaf, &[], &server_name, &[], at)
            .map(|_| ())
    }

    #[test]
    fn ca_is_a_ca_with_path_len_zero_and_the_requested_lifetime() {
        let ca = make_ca();
        let facts = inspect(&ca.cert_pem).unwrap();
        assert!(facts.is_ca);
        assert_eq!(facts.not_before_unix, now_unix() - 300);
        let lifetime = i64::try_from((365 * DAY).as_secs()).unwrap();
        assert!((facts.not_after_unix - (now_unix() + lifetime)).abs() <= 1);
        assert!(facts.names.is_empty(), "{:?}", facts.names);

        let der = der_of(&ca.cert_pem);
        let (_, x509) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        let bc = x509.basic_constraints().unwrap().unwrap();
        assert!(bc.critical);
        assert!(bc.value.ca);
        assert_eq!(bc.value.path_len_constraint, Some(0));
        let ku = x509.key_usage().unwrap().unwrap().value;
        assert!(ku.key_cert_sign() && ku.crl_sign());
        assert!(!ku.digital_signature());
        let subject = x509.subject().to_string();
        assert!(subject.contains("CN=pg.prod database CA"), "{subject}");
        assert!(subject.contains("O=database-operator"), "{subject}");
        assert_eq!(x509.subject(), x509.issuer());
        // ECDSA P-256 with SHA-256, a positive serial of at most 17 octets (128 random bits).
        assert_eq!(
            x509.signature_algorithm.algorithm,
            x509_parser::oid_registry::OID_SIG_ECDSA_WITH_SHA256
        );
        let serial = x509.raw_serial();
        assert!(serial.len() <= 17 && serial[0] & 0x80 == 0, "{serial:?}");
        // Self-signed.
        assert!(signed_by(&ca.cert_pem, &ca.cert_pem).unwrap());
    }

    #[test]
    fn two_cas_have_different_serials_and_keys() {
        let a = make_ca();
        let b = make_ca();
        let da = der_of(&a.cert_pem);
        let db = der_of(&b.cert_pem);
        let (_, xa) = x509_parser::parse_x509_certificate(da.as_ref()).unwrap();
        let (_, xb) = x509_parser::parse_x509_certificate(db.as_ref()).unwrap();
        assert_ne!(xa.raw_serial(), xb.raw_serial());
        assert_ne!(a.key_pem, b.key_pem);
        assert_ne!(
            inspect(&a.cert_pem).unwrap().sha256,
            inspect(&b.cert_pem).unwrap().sha256
        );
    }

    #[test]
    fn leaf_has_exactly_the_names_asked_and_is_not_a_ca() {
        let ca = make_ca();
        let asked = names(&[
            "pg-rw.prod.svc",
            "127.10.0.7",
            "*.pg-headless.prod.svc",
            "::1",
        ]);
        let leaf = issue_server(&ca, &asked, now(), 30 * DAY).unwrap();
        let facts = inspect(&leaf.cert_pem).unwrap();
        assert_eq!(
            facts.names,
            names(&[
                "*.pg-headless.prod.svc",
                "127.10.0.7",
                "::1",
                "pg-rw.prod.svc"
            ])
        );
        assert!(!facts.is_ca);
        assert_eq!(facts.not_before_unix, now_unix() - 300);
        assert_eq!(facts.not_after_unix, now_unix() + 30 * 24 * 3600);

        let der = der_of(&leaf.cert_pem);
        let (_, x509) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        // The IP names are IP subjectAltNames, not DNS names that look like addresses.
        let san = x509.subject_alternative_name().unwrap().unwrap();
        let ips: Vec<_> = san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::IPAddress(o) => Some(o.len()),
                _ => None,
            })
            .collect();
        assert_eq!(ips, vec![4, 16]);
        assert!(!x509.basic_constraints().unwrap().unwrap().value.ca);
        let eku = x509.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth);
        let ku = x509.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && !ku.key_cert_sign());
        assert!(x509.subject().to_string().contains("CN=pg-rw.prod.svc"));
        // authorityKeyIdentifier = the CA's subjectKeyIdentifier.
        let ca_der = der_of(&ca.cert_pem);
        let (_, ca_x509) = x509_parser::parse_x509_certificate(ca_der.as_ref()).unwrap();
        let ski = ca_x509
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0),
                _ => None,
            })
            .unwrap();
        let aki = x509
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0)
                }
                _ => None,
            })
            .unwrap();
        assert_eq!(aki, ski);
        assert_eq!(x509.issuer(), ca_x509.subject());
    }

    #[test]
    fn a_name_given_twice_goes_in_once() {
        let leaf =
            issue_server(&make_ca(), &names(&["a.b", "a.b", "127.1.2.3"]), now(), DAY).unwrap();
        assert_eq!(
            inspect(&leaf.cert_pem).unwrap().names,
            names(&["127.1.2.3", "a.b"])
        );
    }

    #[test]
    fn leaf_not_after_is_cut_at_the_ca_not_after() {
        let ca = new_ca("pg", "prod", now(), 10 * DAY).unwrap();
        let ca_facts = inspect(&ca.cert_pem).unwrap();
        let leaf = issue_server(&ca, &names(&["pg.prod.svc"]), now(), 90 * DAY).unwrap();
        let facts = inspect(&leaf.cert_pem).unwrap();
        assert_eq!(facts.not_after_unix, ca_facts.not_after_unix);
        // A day later, still cut at the same instant.
        let later = issue_server(&ca, &names(&["pg.prod.svc"]), now() + DAY, 90 * DAY).unwrap();
        assert_eq!(
            inspect(&later.cert_pem).unwrap().not_after_unix,
            ca_facts.not_after_unix
        );
    }

    #[test]
    fn an_expired_ca_issues_nothing() {
        let ca = new_ca("pg", "prod", now(), DAY).unwrap();
        let err = issue_server(&ca, &names(&["pg.prod.svc"]), now() + 2 * DAY, DAY).unwrap_err();
        assert!(matches!(err, CertError::CaExpired { .. }), "{err}");
    }

    #[test]
    fn signed_by_its_ca_and_not_by_another() {
        let ca = make_ca();
        let other = make_ca();
        let leaf = issue_server(&ca, &names(&["pg.prod.svc"]), now(), DAY).unwrap();
        assert!(signed_by(&leaf.cert_pem, &ca.cert_pem).unwrap());
        // Same subject name, another key: an older CA's certificate is not this one's.
        assert!(!signed_by(&leaf.cert_pem, &other.cert_pem).unwrap());
        let err = signed_by("nope", &ca.cert_pem).unwrap_err();
        assert!(err.to_string().contains("the leaf certificate"), "{err}");
        let err = signed_by(&leaf.cert_pem, "nope").unwrap_err();
        assert!(err.to_string().contains("the CA certificate"), "{err}");
    }

    #[test]
    fn rustls_accepts_the_leaf_for_its_names_only() {
        let ca = make_ca();
        let leaf = issue_server(
            &ca,
            &names(&["pg-rw.prod.svc", "*.pg-headless.prod.svc", "127.10.0.7"]),
            now(),
            30 * DAY,
        )
        .unwrap();
        let inside = now_unix() + 3600;
        rustls_verify(&ca.cert_pem, &leaf.cert_pem, "pg-rw.prod.svc", inside).unwrap();
        rustls_verify(
            &ca.cert_pem,
            &leaf.cert_pem,
            "pg-0.pg-headless.prod.svc",
            inside,
        )
        .unwrap();
        rustls_verify(&ca.cert_pem, &leaf.cert_pem, "127.10.0.7", inside).unwrap();
        // Inside the backdate too.
        rustls_verify(
            &ca.cert_pem,
            &leaf.cert_pem,
            "pg-rw.prod.svc",
            now_unix() - 60,
        )
        .unwrap();

        let err = rustls_verify(&ca.cert_pem, &leaf.cert_pem, "pg-ro.prod.svc", inside);
        assert!(
            matches!(
                err,
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                        | rustls::CertificateError::NotValidForNameContext { .. }
                ))
            ),
            "{err:?}"
        );
        let err = rustls_verify(&ca.cert_pem, &leaf.cert_pem, "127.10.0.8", inside);
        assert!(err.is_err());
        // After notAfter.
        let err = rustls_verify(
            &ca.cert_pem,
            &leaf.cert_pem,
            "pg-rw.prod.svc",
            now_unix() + 31 * 24 * 3600,
        );
        assert!(err.is_err());
        // Against another CA.
        let other = new_ca("pg", "prod", now(), 365 * DAY).unwrap();
        let err = rustls_verify(&other.cert_pem, &leaf.cert_pem, "pg-rw.prod.svc", inside);
        assert!(err.is_err());
    }

    #[test]
    fn ca_key_round_trips_through_its_pem_strings() {
        let ca = make_ca();
        let rebuilt = CaMaterial {
            cert_pem: ca.cert_pem.as_str().to_owned(),
            key_pem: ca.key_pem.as_str().to_owned(),
        };
        let leaf = issue_server(&rebuilt, &names(&["pg.prod.svc"]), now(), DAY).unwrap();
        rustls_verify(&ca.cert_pem, &leaf.cert_pem, "pg.prod.svc", now_unix() + 60).unwrap();
        assert!(signed_by(&leaf.cert_pem, &ca.cert_pem).unwrap());
        // The leaf key is a PKCS#8 key rustls loads.
        rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    }

    #[test]
    fn a_ca_key_of_another_ca_is_refused() {
        let ca = make_ca();
        let other = make_ca();
        let mixed = CaMaterial {
            cert_pem: ca.cert_pem.clone(),
            key_pem: other.key_pem,
        };
        let err = issue_server(&mixed, &names(&["pg.prod.svc"]), now(), DAY).unwrap_err();
        assert!(matches!(err, CertError::CaKeyMismatch), "{err}");
    }

    #[test]
    fn a_leaf_is_not_a_ca_to_sign_with() {
        let ca = make_ca();
        let leaf = issue_server(&ca, &names(&["pg.prod.svc"]), now(), DAY).unwrap();
        let as_ca = CaMaterial {
            cert_pem: leaf.cert_pem,
            key_pem: leaf.key_pem,
        };
        let err = issue_server(&as_ca, &names(&["x.y"]), now(), DAY).unwrap_err();
        assert!(matches!(err, CertError::NotACa), "{err}");
    }

    #[test]
    fn garbage_is_an_error_naming_the_pem() {
        let err = inspect("garbage").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the certificate does not parse"),
            "{err}"
        );
        // A PEM with a certificate label and no certificate inside.
        let err =
            inspect("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap_err();
        assert!(
            err.to_string().contains("not an X.509 certificate"),
            "{err}"
        );

        let ca = make_ca();
        let bad_key = CaMaterial {
            cert_pem: ca.cert_pem.clone(),
            key_pem: "garbage".to_owned(),
        };
        let err = issue_server(&bad_key, &names(&["a.b"]), now(), DAY).unwrap_err();
        assert!(
            err.to_string().starts_with("the CA key does not parse"),
            "{err}"
        );
        let bad_cert = CaMaterial {
            cert_pem: "garbage".to_owned(),
            key_pem: ca.key_pem,
        };
        let err = issue_server(&bad_cert, &names(&["a.b"]), now(), DAY).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the CA certificate does not parse"),
            "{err}"
        );
    }

    #[test]
    fn inspect_reads_the_first_certificate_and_hashes_its_der() {
        let ca = make_ca();
        let leaf = issue_server(&ca, &names(&["pg.prod.svc"]), now(), DAY).unwrap();
        // A bundle: key first, then the leaf, then the CA.
        let bundle = format!("{}{}{}", leaf.key_pem, leaf.cert_pem, ca.cert_pem);
        let facts = inspect(&bundle).unwrap();
        assert_eq!(facts, inspect(&leaf.cert_pem).unwrap());
        let der = der_of(&leaf.cert_pem);
        let expected = database_operator_core::backup::hex(&Sha256::digest(der.as_ref()));
        assert_eq!(facts.sha256, expected);
        assert_eq!(facts.sha256.len(), 64);
    }

    #[test]
    fn bad_names_and_times_are_refused() {
        let ca = make_ca();
        assert!(matches!(
            issue_server(&ca, &[], now(), DAY),
            Err(CertError::NoNames)
        ));
        for bad in ["", "a..b", "bad name", "é.example", "-a.b"] {
            let err = issue_server(&ca, &names(&[bad]), now(), DAY).unwrap_err();
            assert!(
                matches!(err, CertError::InvalidName { .. }),
                "{bad:?}: {err}"
            );
        }
        let err = new_ca("pg", "prod", UNIX_EPOCH - DAY, DAY).unwrap_err();
        assert!(
            matches!(err, CertError::TimeOutOfRange { what: "now" }),
            "{err}"
        );
        let err = new_ca("pg", "prod", now(), Duration::MAX).unwrap_err();
        assert!(matches!(err, CertError::TimeOutOfRange { .. }), "{err}");
    }

    #[test]
    fn debug_does_not_print_keys() {
        let ca = make_ca();
        let leaf = issue_server(&ca, &names(&["pg.prod.svc"]), now(), DAY).unwrap();
        for (debug, key) in [
            (format!("{ca:?}"), &ca.key_pem),
            (format!("{leaf:?}"), &leaf.key_pem),
        ] {
            assert!(!debug.contains("PRIVATE KEY"), "{debug}");
            let body: String = key.lines().nth(1).unwrap().to_owned();
            assert!(!debug.contains(&body), "{debug}");
            assert!(debug.contains("<redacted>"));
        }
    }
}
