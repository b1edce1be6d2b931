//! The serving certificate: loaded from `<cert_dir>/tls.crt` and `tls.key`, and swapped for a
//! new pair when the files change, so cert-manager's rotations need no restart.
//!
//! A background task reads both files every reload interval and compares their bytes with the
//! pair in service (contents, not modification times: Secret volumes swap a symlink, and two
//! writes within one second share an mtime). A changed pair is parsed and checked (the key must
//! belong to the certificate) before it replaces the old one; a pair that does not load — such as
//! a half-written rotation — is logged and the previous certificate stays in service until a good
//! pair appears. Handshakes only read the current pair from memory.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{CERT_FILE, KEY_FILE, WebhookError};

/// Where the pair lives.
#[derive(Clone, Debug)]
pub(crate) struct CertPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertPaths {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            cert: dir.join(CERT_FILE),
            key: dir.join(KEY_FILE),
        }
    }

    fn read(&self) -> Result<(Vec<u8>, Vec<u8>), WebhookError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| WebhookError::ReadCertificate {
                path: path.to_owned(),
                source,
            })
        };
        Ok((read(&self.cert)?, read(&self.key)?))
    }
}

/// Parses a PEM certificate chain and key, checking that they belong together.
pub(crate) fn parse_pair(
    paths: &CertPaths,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, WebhookError> {
    let invalid = |path: &Path, reason: String| WebhookError::InvalidCertificate {
        path: path.to_owned(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&paths.cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(
            &paths.cert,
            "contains no PEM CERTIFICATE block".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
        invalid(
            &paths.key,
            format!("no usable PEM private key (PKCS#8, PKCS#1 or SEC1 expected): {e}"),
        )
    })?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        invalid(
            &paths.key,
            format!(
                "does not match the certificate in {}: {e}",
                paths.cert.display()
            ),
        )
    })?;
    Ok(Arc::new(certified))
}

/// Hands the current certificate to every handshake.
#[derive(Debug)]
pub(crate) struct ReloadingResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingResolver {
    fn current(&self) -> Arc<CertifiedKey> {
        // A poisoned lock only means a writer panicked mid-swap; the Arc inside is still whole.
        match self.current.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    fn replace(&self, key: Arc<CertifiedKey>) {
        match self.current.write() {
            Ok(mut guard) => *guard = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
    }
}

impl ReloadingResolver {
    /// A resolver that always serves the pair in `cert_pem` and `key_pem` (a certificate made
    /// at start, with nothing to reload).
    pub(crate) fn fixed(
        cert_pem: &[u8],
        key_pem: &[u8],
        provider: &CryptoProvider,
    ) -> Result<Arc<Self>, WebhookError> {
        let paths = CertPaths {
            cert: PathBuf::from("(generated certificate)"),
            key: PathBuf::from("(generated key)"),
        };
        Ok(Arc::new(Self {
            current: RwLock::new(parse_pair(&paths, cert_pem, key_pem, provider)?),
        }))
    }
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// What one check of the files found.
#[derive(Debug)]
pub(crate) enum Reload {
    /// Same bytes as the pair in service (or as the last pair that failed to load).
    Unchanged,
    /// A new pair is in service.
    Reloaded,
    /// The files changed but do not load; the previous pair stays in service.
    Failed(WebhookError),
}

/// Owns the files' last seen contents and the resolver it updates.
pub(crate) struct CertReloader {
    paths: CertPaths,
    provider: Arc<CryptoProvider>,
    resolver: Arc<ReloadingResolver>,
    seen: (Vec<u8>, Vec<u8>),
}

impl CertReloader {
    /// Loads the pair for the first time; a missing or bad pair is an error (the server cannot
    /// start without one).
    pub fn load(paths: CertPaths, provider: Arc<CryptoProvider>) -> Result<Self, WebhookError> {
        let (cert, key) = paths.read()?;
        let certified = parse_pair(&paths, &cert, &key, &provider)?;
        Ok(Self {
            paths,
            provider,
            resolver: Arc::new(ReloadingResolver {
                current: RwLock::new(certified),
            }),
            seen: (cert, key),
        })
    }

    pub fn resolver(&self) -> Arc<ReloadingResolver> {
        Arc::clone(&self.resolver)
    }

    /// Checks the files once (blocking file reads of two small files).
    pub fn check(&mut self) -> Reload {
        let (cert, key) = match self.paths.read() {
            Ok(pair) => pair,
            Err(e) => return Reload::Failed(e),
        };
        if (&cert, &key) == (&self.seen.0, &self.seen.1) {
            return Reload::Unchanged;
        }
        let result = parse_pair(&self.paths, &cert, &key, &self.provider);
        self.seen = (cert, key);
        match result {
            Ok(certified) => {
                self.resolver.replace(certified);
                Reload::Reloaded
            }
            Err(e) => Reload::Failed(e),
        }
    }

    /// Checks the files every `interval`, forever (abort the task to stop it).
    pub async fn run(mut self, interval: Duration) {
        let mut last_error: Option<String> = None;
        loop {
            tokio::time::sleep(interval).await;
            let (reloader, outcome) = match tokio::task::spawn_blocking(move || {
                let outcome = self.check();
                (self, outcome)
            })
            .await
            {
                Ok(done) => done,
                Err(e) => {
                    // The closure does not panic (file reads and parsing return errors), so this
                    // is a runtime shutting down; there is nothing left to reload for.
                    tracing::debug!(error = %e, "certificate reload task stopped");
                    return;
                }
            };
            self = reloader;
            match outcome {
                Reload::Unchanged => {}
                Reload::Reloaded => {
                    last_error = None;
                    tracing::info!(cert = %self.paths.cert.display(), "webhook serving certificate reloaded");
                }
                Reload::Failed(e) => {
                    let text = e.to_string();
                    // Say it once per distinct problem, not every interval.
                    if last_error.as_deref() != Some(text.as_str()) {
                        tracing::warn!(error = %text, "webhook serving certificate not reloaded; the previous one stays in service");
                        last_error = Some(text);
                    }
                }
            }
        }
    }
}
