//! PKI for the local control plane, generated with rcgen (ECDSA P-256).
//!
//! One CA signs everything: the apiserver serving certificate (127.0.0.1,
//! localhost and the in-cluster names), the admin client certificate (group
//! `system:masters`), and client certificates for the controller-manager and
//! scheduler under their well-known user names, which the apiserver's
//! bootstrap RBAC policy already grants what they need; kwok runs as
//! `kwok-controller` in `system:masters`. The service-account
//! token signing key pair is a separate key.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

const CA_COMMON_NAME: &str = "database-operator local control plane CA";

/// A certificate and its private key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Paths of the generated files.
#[derive(Debug, Clone)]
pub struct PkiFiles {
    pub dir: PathBuf,
}

impl PkiFiles {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.path("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.path("ca.key")
    }
    pub fn apiserver_cert(&self) -> PathBuf {
        self.path("apiserver.crt")
    }
    pub fn apiserver_key(&self) -> PathBuf {
        self.path("apiserver.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.path("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.path("sa.pub")
    }
    pub fn client_cert(&self, who: &str) -> PathBuf {
        self.path(&format!("{who}.crt"))
    }
    pub fn client_key(&self, who: &str) -> PathBuf {
        self.path(&format!("{who}.key"))
    }
}

/// Client identities written by [`generate`]: (file stem, CN, groups).
pub const CLIENTS: &[(&str, &str, &[&str])] = &[
    ("admin", "kubernetes-admin", &["system:masters"]),
    (
        "kube-controller-manager",
        "system:kube-controller-manager",
        &[],
    ),
    ("kube-scheduler", "system:kube-scheduler", &[]),
    // Its own user name, so its node and lease heartbeats are easy to tell
    // apart from other clients in the audit log.
    ("kwok", "kwok-controller", &["system:masters"]),
    // The process-node agent (xtask/src/cluster/procnode): posts node and pod status, completes
    // pod deletions, requests service-account tokens.
    ("node-agent", "process-node-agent", &["system:masters"]),
];

fn ca_params() -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// The CA, loaded from or written to a PKI directory.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub cert_pem: String,
}

impl Ca {
    fn generate() -> Result<Self> {
        let key = KeyPair::generate().context("generating the CA key")?;
        let params = ca_params()?;
        let cert = params.self_signed(&key).context("self-signing the CA")?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads the CA written by [`generate`] so that more certificates can be
    /// issued for a running cluster (webhook serving certs, test users).
    pub fn load(files: &PkiFiles) -> Result<Self> {
        let key_pem = fs::read_to_string(files.ca_key())
            .with_context(|| format!("reading {}", files.ca_key().display()))?;
        let cert_pem = fs::read_to_string(files.ca_cert())
            .with_context(|| format!("reading {}", files.ca_cert().display()))?;
        let key = KeyPair::from_pem(&key_pem).context("parsing the CA key")?;
        Ok(Self {
            cert_pem,
            issuer: Issuer::new(ca_params()?, key),
        })
    }

    fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A serving certificate for the given DNS names and IP addresses.
    pub fn issue_serving(&self, common_name: &str, names: &[&str]) -> Result<CertPair> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .context("building serving certificate parameters")?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        self.sign(params)
    }

    /// A client certificate: CN is the user name, O entries are the groups.
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<CertPair> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<CertPair> {
        let key = KeyPair::generate().context("generating a key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a certificate")?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Names in the apiserver serving certificate.
pub const APISERVER_NAMES: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.96.0.1",
];

/// Writes a fresh PKI into `dir`.
pub fn generate(dir: &Path) -> Result<PkiFiles> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = PkiFiles {
        dir: dir.to_path_buf(),
    };
    let ca = Ca::generate()?;
    write(&files.ca_cert(), &ca.cert_pem)?;
    write(&files.ca_key(), &ca.key_pem())?;

    let serving = ca.issue_serving("kube-apiserver", APISERVER_NAMES)?;
    write(&files.apiserver_cert(), &serving.cert_pem)?;
    write(&files.apiserver_key(), &serving.key_pem)?;

    for (stem, user, groups) in CLIENTS {
        let pair = ca.issue_client(user, groups)?;
        write(&files.client_cert(stem), &pair.cert_pem)?;
        write(&files.client_key(stem), &pair.key_pem)?;
    }

    let sa = KeyPair::generate().context("generating the service-account signing key")?;
    write(&files.sa_key(), &sa.serialize_pem())?;
    write(&files.sa_pub(), &sa.public_key_pem())?;
    Ok(files)
}

fn write(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    let mut perms = fs::metadata(path)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    fs::set_permissions(path, perms)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_and_reloads_the_ca() {
        let dir = std::env::temp_dir().join(format!("xtask-pki-test-{}", std::process::id()));
        let files = generate(&dir).unwrap();
        for name in ["ca.crt", "apiserver.key", "admin.crt", "sa.pub"] {
            assert!(files.path(name).is_file(), "{name} missing");
        }
        let ca = Ca::load(&files).unwrap();
        let pair = ca.issue_serving("webhook", &["127.0.0.1"]).unwrap();
        assert!(pair.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        fs::remove_dir_all(dir).unwrap();
    }
}
