//! The names, keys and paths of a cluster's TLS Secrets and the names its server certificate
//! covers: what the pod template mounts and what the decisions in [`crate::tls`] make (which
//! re-exports all of it).

use database_operator_api::TlsSpec;

use super::RenderContext;

/// Suffix of the Secret with the cluster's certificate authority and its key: `<name>-ca-key`.
pub const CA_KEY_SECRET_SUFFIX: &str =
    database_operator_api::rules::OPERATOR_TLS_SECRET_SUFFIXES[2];
/// Suffix of the Secret with the members' server certificate: `<name>-tls`.
pub const SERVER_SECRET_SUFFIX: &str =
    database_operator_api::rules::OPERATOR_TLS_SECRET_SUFFIXES[0];
/// Suffix of the Secret that publishes the authority's certificate for clients: `<name>-ca`.
pub const CA_SECRET_SUFFIX: &str = database_operator_api::rules::OPERATOR_TLS_SECRET_SUFFIXES[1];
/// Key of a certificate (PEM) in the authority's and the server's Secret.
pub const CERT_KEY: &str = "tls.crt";
/// Key of a private key (PEM) in the authority's and the server's Secret.
pub const PRIVATE_KEY_KEY: &str = "tls.key";
/// Key of the authorities' certificates (PEM) in the server's and the published Secret: the
/// current authority first, then every earlier one that has not expired, so that a member still
/// serving a certificate of the earlier authority stays trusted until it restarts.
pub const CA_CERT_KEY: &str = "ca.crt";
/// Where the members mount `<name>-tls` (read-only).
pub const MOUNT_PATH: &str = "/etc/database-operator-tls";
/// Name of the members' volume of `<name>-tls`.
pub const VOLUME: &str = "tls";
/// Component label of the three Secrets.
pub const COMPONENT_TLS: &str = "tls";

/// Annotation the runtime writes on each certificate's Secret: when the certificate expires
/// (RFC 3339).
pub const NOT_AFTER_ANNOTATION: &str = "database.example.com/not-after";
/// Annotation on each Secret: the SHA-256 (hex) of the authority's certificate it holds or was
/// signed by.
pub const CA_SHA256_ANNOTATION: &str = "database.example.com/ca-sha256";
/// Annotation on the server certificate's Secret: the names it was issued for, comma-separated
/// (the core renders it, the runtime issues for exactly these).
pub const NAMES_ANNOTATION: &str = "database.example.com/names";

/// The name of the Secret with the authority and its key.
pub fn ca_key_secret_name(cluster: &str) -> String {
    [cluster, CA_KEY_SECRET_SUFFIX].concat()
}

/// The name of the members' server certificate Secret.
pub fn server_secret_name(cluster: &str) -> String {
    [cluster, SERVER_SECRET_SUFFIX].concat()
}

/// The name of the Secret that publishes the authority's certificate for clients.
///
/// ```
/// assert_eq!(database_operator_core::tls::ca_secret_name("orders"), "orders-ca");
/// ```
pub fn ca_secret_name(cluster: &str) -> String {
    [cluster, CA_SECRET_SUFFIX].concat()
}

/// The cluster a Secret named like one of a cluster's TLS Secrets (`<cluster>-ca-key`,
/// `<cluster>-tls`, `<cluster>-ca`) would belong to.
///
/// ```
/// use database_operator_core::tls::cluster_of_secret;
/// assert_eq!(cluster_of_secret("orders-ca-key"), Some("orders"));
/// assert_eq!(cluster_of_secret("orders-ca"), Some("orders"));
/// assert_eq!(cluster_of_secret("orders-password"), None);
/// ```
pub fn cluster_of_secret(name: &str) -> Option<&str> {
    [CA_KEY_SECRET_SUFFIX, SERVER_SECRET_SUFFIX, CA_SECRET_SUFFIX]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .filter(|cluster| !cluster.is_empty())
}

/// Annotation on `<name>-tls` when it is a copy of the user's Secret
/// (`spec.tls.certificateSecret`): that Secret's `resourceVersion` at the copy.
pub const SOURCE_VERSION_ANNOTATION: &str = "database.example.com/source-version";

/// Annotation on `<name>-tls` when it is a copy of the user's Secret: when the certificate
/// became valid (RFC 3339), for the share of its life that is left.
pub const NOT_BEFORE_ANNOTATION: &str = "database.example.com/not-before";

/// The annotations of a TLS Secret the core reads ([`CertSighting::from_metadata`]).
pub const ANNOTATIONS: [&str; 5] = [
    NOT_AFTER_ANNOTATION,
    CA_SHA256_ANNOTATION,
    NAMES_ANNOTATION,
    SOURCE_VERSION_ANNOTATION,
    NOT_BEFORE_ANNOTATION,
];

/// The DNS name of the member `pod` of the cluster `cluster` in `namespace`, which the server
/// certificate covers: `<pod>.<cluster>-headless.<namespace>.svc`.
pub fn member_dns_name(cluster: &str, namespace: &str, pod: &str) -> String {
    format!(
        "{pod}.{cluster}{}.{namespace}.svc",
        database_operator_api::rules::HEADLESS_SERVICE_SUFFIX
    )
}

/// The authorities' file on a member (`ca.crt` of its mounted `<name>-tls`).
pub fn replica_ca_file() -> String {
    format!("{MOUNT_PATH}/{CA_CERT_KEY}")
}

/// Whether the cluster has TLS (`spec.tls`, on unless switched off).
pub fn wanted(ctx: &RenderContext<'_>) -> bool {
    TlsSpec::wanted(ctx.spec.tls.as_ref()) && !ctx.tls_blocked
}

/// The names the server certificate covers, sorted: the read-write Service `<name>`, the
/// read-only Service `<name>-replicas` and the headless Service, each as `<service>`,
/// `<service>.<namespace>`, `<service>.<namespace>.svc` and with `.cluster.local`, and every
/// member, present or future, through `*.<name>-headless.<namespace>.svc` (and
/// `.cluster.local`), so scaling never needs a new certificate.
pub fn server_names(ctx: &RenderContext<'_>) -> Vec<String> {
    let ns = ctx.namespace;
    let mut names = Vec::new();
    for service in [
        ctx.name.to_owned(),
        ctx.replicas_service_name(),
        ctx.headless_service_name(),
    ] {
        names.push(service.clone());
        names.push(format!("{service}.{ns}"));
        names.push(format!("{service}.{ns}.svc"));
        names.push(format!("{service}.{ns}.svc.cluster.local"));
    }
    let headless = ctx.headless_domain();
    names.push(format!("*.{headless}"));
    names.push(format!("*.{headless}.cluster.local"));
    names.sort();
    names.dedup();
    names
}
