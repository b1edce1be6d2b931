//! The admission webhook: HTTPS endpoints the API server calls before it stores a
//! `DatabaseCluster`.
//!
//! - `POST /mutate` fills in the defaults the CRD schema declares (engine, replicas, backup
//!   retention and deletion policy, the key names of the backup credentials Secret) as a JSON
//!   patch, so an object looks the same whichever path it was written through.
//! - `POST /validate` runs [`database_operator_api::validate`] — the same functions
//!   `database-operator validate` runs — and answers with every broken rule in one denial, or an
//!   admission with warnings (scale-down, backups removed, ...).
//!
//! The pieces, each in its own module:
//!
//! | module | does | touches |
//! | --- | --- | --- |
//! | `admission` | AdmissionReview bytes in, AdmissionReview JSON out | nothing (pure) |
//! | `defaults` | the defaults of the generated CRD schema, as JSON patch operations | nothing (pure) |
//! | `tls` | loads `tls.crt`/`tls.key` and swaps in a rotated pair without a restart | files |
//! | `server` | the axum router and the TLS accept loop | the network |
//!
//! Where each rule is enforced (schema, CEL, webhook) and what a user sees is documented in
//! `docs/webhook-rules.md`.

mod admission;
mod defaults;
mod server;
pub(crate) mod tls;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use database_operator_api::scheduling::SchedulingPolicy;

pub use admission::{Admission, BadReview, Endpoint};
pub use defaults::SchemaDefaults;
pub use server::{WebhookServer, router, router_with, serve};

/// Address the webhook listens on unless told otherwise: every interface, port 9443 (the
/// webhook Service maps port 443 to it).
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9443);

/// Directory the serving certificate is read from unless told otherwise; the deployment mounts
/// the cert-manager Secret `database-operator-webhook-tls` here.
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// Largest AdmissionReview body accepted: 1 MiB. A `DatabaseCluster` review is a few KiB; the
/// API server itself caps objects at 1.5 MiB of etcd value, and a review carries two objects.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How often the certificate files are checked for a rotation.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// File name of the serving certificate chain (PEM) inside the certificate directory.
pub const CERT_FILE: &str = "tls.crt";

/// File name of the serving private key (PEM: PKCS#8, PKCS#1 or SEC1) inside the certificate
/// directory.
pub const KEY_FILE: &str = "tls.key";

/// How the webhook server is run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Address to listen on (`--webhook-addr`).
    pub addr: SocketAddr,
    /// Directory holding [`CERT_FILE`] and [`KEY_FILE`] (`--webhook-cert-dir`).
    pub cert_dir: PathBuf,
    /// Largest request body accepted; larger ones get HTTP 413.
    pub max_body_bytes: usize,
    /// How often the certificate files are checked for a rotation.
    pub reload_interval: Duration,
    /// What `spec.scheduling` may ask for (the operator's scheduling flags).
    pub scheduling: SchedulingPolicy,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            addr: DEFAULT_ADDR,
            cert_dir: PathBuf::from(DEFAULT_CERT_DIR),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            scheduling: SchedulingPolicy::default(),
        }
    }
}

/// Why the webhook could not start (once started, it does not fail: bad requests get HTTP
/// errors or denials, and a bad rotated certificate keeps the previous one in service).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A certificate file could not be read.
    #[error("reading {path}: {source}")]
    ReadCertificate {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate file was read but is not usable.
    #[error("{path}: {reason}")]
    InvalidCertificate {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The listening socket could not be opened.
    #[error("listening on {addr} for the admission webhook: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The generated CRD does not have the shape the defaulting code expects.
    #[error("reading defaults from the generated CRD schema: {0}")]
    Schema(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn serve_can_run_on_a_spawned_task() {
        // The runtime spawns the webhook beside the controller: the future must be Send.
        let future = serve(WebhookConfig::default(), async {});
        assert_send(&future);
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = WebhookConfig::default();
        assert_eq!(config.addr.to_string(), "0.0.0.0:9443");
        assert_eq!(
            config.cert_dir,
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs")
        );
        assert_eq!(config.max_body_bytes, 1_048_576);
        assert_eq!(config.reload_interval, Duration::from_secs(10));
    }
}
