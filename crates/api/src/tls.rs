//! `spec.tls`: encryption of the connections to the members' servers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// TLS on the database port. On by default: the operator keeps a certificate authority for the
/// cluster (Secret `<name>-ca-key`, read by the operator only), a server certificate signed by
/// it (Secret `<name>-tls`, mounted by the members) whose names cover the cluster's Services and
/// members, and publishes the authority's certificate for clients in the Secret `<name>-ca`
/// (key `ca.crt`). The server certificate is renewed when a third of its life is left and the
/// servers reload it without a restart.
///
/// The operator connects with TLS and checks each member's certificate against the cluster's
/// authority for the member's DNS name (`<pod>.<name>-headless.<namespace>.svc`, while it dials
/// the pod address); replicas, backups and the member agents check theirs too.
///
/// Absent: the same as `{enabled: true}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, garde::Validate)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// `false`: the servers offer no TLS and every connection is plain TCP (the certificates
    /// the operator made before stay until the cluster is deleted). Default `true`.
    #[serde(default = "enabled")]
    #[garde(skip)]
    pub enabled: bool,

    /// How long each server certificate the operator issues is valid, in seconds: it is issued
    /// again when a third of that is left, and the servers reload it without a restart. 300 to
    /// 157680000 (five years), default 7776000 (90 days). Never longer than the cluster's
    /// authority has left.
    #[serde(default = "default_lifetime_seconds")]
    #[schemars(range(min = 300, max = 157_680_000))]
    #[garde(range(min = 300, max = 157_680_000))]
    pub server_certificate_lifetime_seconds: i64,

    /// Whether application accounts may still connect without TLS. Default `false`: with TLS
    /// on, every network connection to a member must use TLS (PostgreSQL `hostssl` rules only,
    /// MySQL and MariaDB `require_secure_transport = ON`); only the Unix socket inside the pod
    /// is exempt. `true` is for moving clients over: plain connections of other accounts are
    /// accepted again; on PostgreSQL the superuser, the operator's and the replication accounts
    /// stay TLS-only, on MySQL and MariaDB every account may connect plainly. Ignored with
    /// `enabled: false`.
    #[serde(default)]
    #[garde(skip)]
    pub allow_plaintext: bool,

    /// A Secret of the cluster's namespace holding the servers' certificate, for a platform
    /// whose certificates come from its own authority (cert-manager, Vault, a corporate CA)
    /// instead of the operator's. The keys of a `kubernetes.io/tls` Secret, as cert-manager
    /// writes them: `tls.crt` (the server certificate, then any intermediates), `tls.key` (its
    /// private key) and `ca.crt` (the authority clients and replicas check it against).
    ///
    /// The certificate must cover every name the cluster is reached by: its Services
    /// (`<name>`, `<name>-replicas`, `<name>-headless`, each bare, `.<namespace>`,
    /// `.<namespace>.svc` and `.<namespace>.svc.cluster.local`) and its members
    /// (`<pod>.<name>-headless.<namespace>.svc[.cluster.local]`, a wildcard such as
    /// `*.<name>-headless.<namespace>.svc` covers them). The operator checks the certificate,
    /// the key and the chain before the servers see them; a Secret that fails a check is not
    /// used, the servers keep the certificate they have, and the cluster's `Degraded` condition
    /// says which check failed. A renewed certificate in the Secret is loaded by the servers
    /// without a restart. The operator makes no authority of its own then, and never renews
    /// this certificate: whoever writes the Secret does.
    ///
    /// Absent: the operator's own authority and certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(inner(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    ))]
    pub certificate_secret: Option<String>,
}

/// The default lifetime of a server certificate: 90 days.
pub const DEFAULT_SERVER_CERTIFICATE_LIFETIME_SECONDS: i64 = 90 * 86_400;

fn default_lifetime_seconds() -> i64 {
    DEFAULT_SERVER_CERTIFICATE_LIFETIME_SECONDS
}

impl Default for TlsSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            server_certificate_lifetime_seconds: DEFAULT_SERVER_CERTIFICATE_LIFETIME_SECONDS,
            allow_plaintext: false,
            certificate_secret: None,
        }
    }
}

fn enabled() -> bool {
    true
}

impl TlsSpec {
    /// Whether a cluster with `spec` (its `spec.tls`) has TLS.
    pub fn wanted(spec: Option<&TlsSpec>) -> bool {
        spec.is_none_or(|s| s.enabled)
    }

    /// Whether a cluster with `spec` (its `spec.tls`) refuses plain connections: TLS on and
    /// `allowPlaintext` not set.
    pub fn refuses_plaintext(spec: Option<&TlsSpec>) -> bool {
        Self::wanted(spec) && !spec.is_some_and(|s| s.allow_plaintext)
    }

    /// The Secret with the servers' certificate that the user provides
    /// ([`TlsSpec::certificate_secret`]), when TLS is on and one is named.
    pub fn provided_secret(spec: Option<&TlsSpec>) -> Option<&str> {
        spec.filter(|s| s.enabled)?.certificate_secret.as_deref()
    }

    /// The lifetime of the server certificates of a cluster with `spec` (its `spec.tls`), in
    /// seconds.
    pub fn server_lifetime_seconds(spec: Option<&TlsSpec>) -> i64 {
        spec.map_or(DEFAULT_SERVER_CERTIFICATE_LIFETIME_SECONDS, |s| {
            s.server_certificate_lifetime_seconds
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_unless_switched_off() {
        assert!(TlsSpec::wanted(None));
        assert!(TlsSpec::wanted(Some(&TlsSpec::default())));
        assert!(!TlsSpec::wanted(Some(&TlsSpec {
            enabled: false,
            ..TlsSpec::default()
        })));
        let parsed: TlsSpec = serde_json::from_str("{}").unwrap();
        assert!(parsed.enabled, "an empty tls object keeps TLS on");
        assert_eq!(TlsSpec::server_lifetime_seconds(Some(&parsed)), 90 * 86_400);
    }

    #[test]
    fn plain_connections_refused_unless_allowed_or_tls_off() {
        assert!(TlsSpec::refuses_plaintext(None));
        let parsed: TlsSpec = serde_json::from_str("{}").unwrap();
        assert!(TlsSpec::refuses_plaintext(Some(&parsed)));
        let allowed: TlsSpec = serde_json::from_str(r#"{"allowPlaintext": true}"#).unwrap();
        assert!(TlsSpec::wanted(Some(&allowed)));
        assert!(!TlsSpec::refuses_plaintext(Some(&allowed)));
        let off: TlsSpec = serde_json::from_str(r#"{"enabled": false}"#).unwrap();
        assert!(!TlsSpec::refuses_plaintext(Some(&off)));
    }
}
