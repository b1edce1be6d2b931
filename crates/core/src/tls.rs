//! TLS on the database port (`spec.tls`): which certificates a cluster needs, when they are
//! renewed, and where the members find them.
//!
//! Three Secrets, all owned by the cluster:
//!
//! | Secret | keys | read by |
//! | --- | --- | --- |
//! | `<name>-ca-key` | `tls.crt`, `tls.key`: the cluster's certificate authority | the operator only |
//! | `<name>-tls` | `tls.crt`, `tls.key`, `ca.crt`: the members' server certificate | the members (a volume at [`MOUNT_PATH`]) |
//! | `<name>-ca` | `ca.crt`: the authority's certificate | clients, the operator's checks |
//!
//! The core decides and the runtime makes: certificates need a random key and the clock, so the
//! core only says what must be made ([`TlsChange`]) from what the runtime saw of the Secrets
//! ([`TlsObserved`], read from annotations the runtime writes with each certificate, so the
//! core never needs a Secret's values); the runtime generates the keys, signs, and writes the
//! Secrets in the first wave, before the members that mount them.
//!
//! When: a missing or expiring authority ([`CA_RENEW_BEFORE_SECONDS`]) is made anew, and then
//! the server certificate too; a server certificate is issued again when it is missing, was
//! signed by another authority, names other names than the cluster needs ([`server_names`]), or
//! has less than a third of its life left ([`server_renew_before_seconds`]). The members'
//! volumes show a renewed certificate within about a minute; the operator sees from its probes
//! which certificate each server serves and has it reload its files ([`reloads`]), without a
//! restart. Until then the certificate a member serves is still valid, and still trusted:
//! `ca.crt` keeps every earlier authority that has not expired.

use std::collections::BTreeMap;

use database_operator_api::TlsSpec;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use crate::render::RenderContext;
pub use crate::render::tls::*;

mod provided;
pub use provided::{
    EXPIRY_WARNING_SECONDS, ProvidedCert, ProvidedCopy, ProvidedFacts, covers,
    problem as provided_problem, required_names, uncovered,
};

/// How soon a pass that asked a member to reload its certificate looks again (the kubelet may
/// not have shown it the new files yet).
pub const RELOAD_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How much longer than `spec.tls.serverCertificateLifetimeSeconds` a server certificate may
/// still be valid before it is issued again (the clocks of two passes).
const LIFETIME_SLACK_SECONDS: i64 = 300;

/// How long an authority the operator makes is valid: ten years.
pub const CA_LIFETIME_SECONDS: i64 = 10 * 365 * 86_400;
/// An authority with less than this left (a year), plus a server certificate's lifetime, is made
/// anew.
pub const CA_RENEW_BEFORE_SECONDS: i64 = 365 * 86_400;
/// How long a server certificate is valid by default: 90 days
/// (`spec.tls.serverCertificateLifetimeSeconds`).
pub const SERVER_LIFETIME_SECONDS: i64 =
    database_operator_api::DEFAULT_SERVER_CERTIFICATE_LIFETIME_SECONDS;

/// How long the cluster's server certificates are valid (`spec.tls.serverCertificateLifetimeSeconds`).
pub fn server_lifetime_seconds(ctx: &RenderContext<'_>) -> i64 {
    TlsSpec::server_lifetime_seconds(ctx.spec.tls.as_ref())
}

/// A server certificate with less than this left (a third of its life) is issued again.
pub fn server_renew_before_seconds(ctx: &RenderContext<'_>) -> i64 {
    server_lifetime_seconds(ctx) / 3
}

/// What the runtime saw of one certificate's Secret, from its annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSighting {
    /// When the certificate expires.
    pub not_after: Timestamp,
    /// The SHA-256 (hex) of the authority's certificate: the authority's own for
    /// `<name>-ca-key` and `<name>-ca`, its signer's for `<name>-tls`.
    pub ca_sha256: String,
    /// The names the certificate was issued for (server certificates; empty otherwise).
    pub names: Vec<String>,
    /// Whether the Secret's controller is this cluster. The operator never writes over a
    /// Secret of these names that another owner (or a person) made.
    pub owned: bool,
    /// For a copy of a certificate the user provides (`spec.tls.certificateSecret`): the
    /// version of the user's Secret it holds ([`SOURCE_VERSION_ANNOTATION`]).
    pub source_version: Option<String>,
    /// For such a copy: when the certificate became valid ([`NOT_BEFORE_ANNOTATION`]).
    pub not_before: Option<Timestamp>,
}

impl CertSighting {
    /// The sighting of a Secret with `metadata`, for the cluster with `cluster_uid`; `None`
    /// when the annotations the operator writes are missing or do not parse (the certificate
    /// is then made again, as if the Secret were missing, unless another owner holds it).
    pub fn from_metadata(metadata: &ObjectMeta, cluster_uid: &str) -> Option<CertSighting> {
        let owned =
            metadata.owner_references.iter().flatten().any(|r| {
                r.controller == Some(true) && r.uid == cluster_uid && !cluster_uid.is_empty()
            });
        let annotations = metadata.annotations.as_ref();
        let get = |key: &str| annotations.and_then(|a| a.get(key));
        let parsed = (|| {
            let not_after = get(NOT_AFTER_ANNOTATION)?.parse::<Timestamp>().ok()?;
            let ca_sha256 = get(CA_SHA256_ANNOTATION)?.clone();
            let names = get(NAMES_ANNOTATION)
                .map(|n| split_names(n))
                .unwrap_or_default();
            Some((not_after, ca_sha256, names))
        })();
        let source_version = get(SOURCE_VERSION_ANNOTATION).cloned();
        let not_before = get(NOT_BEFORE_ANNOTATION).and_then(|t| t.parse::<Timestamp>().ok());
        match parsed {
            Some((not_after, ca_sha256, names)) => Some(CertSighting {
                not_after,
                ca_sha256,
                names,
                owned,
                source_version,
                not_before,
            }),
            // A Secret of that name without our annotations: ours (an interrupted write) is
            // made again; another owner's is left alone (`owned: false`, an epoch expiry).
            None if !owned => Some(CertSighting {
                not_after: Timestamp::UNIX_EPOCH,
                ca_sha256: String::new(),
                names: Vec::new(),
                owned: false,
                source_version: None,
                not_before: None,
            }),
            None => None,
        }
    }
}

fn split_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What the runtime saw of the cluster's TLS Secrets. `Default` (nothing seen) is always
/// correct for a new cluster; for a running one it makes a new authority and certificate, which
/// the members then load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsObserved {
    /// `<name>-ca-key`.
    pub ca: Option<CertSighting>,
    /// `<name>-tls`.
    pub server: Option<CertSighting>,
    /// `<name>-ca`.
    pub published: Option<CertSighting>,
    /// The Secret `spec.tls.certificateSecret` names, when it names one: the operator then
    /// makes no authority and copies that certificate ([`ProvidedCert`]).
    pub provided: Option<ProvidedCert>,
}

impl TlsObserved {
    /// Whether one of the Secrets belongs to someone else.
    pub fn foreign(&self) -> bool {
        self.conflict("").is_some()
    }

    /// The first of the Secrets of the cluster `cluster` that belongs to someone else.
    pub fn conflict(&self, cluster: &str) -> Option<TlsConflict> {
        // With a provided certificate, `<name>-ca-key` is neither read nor written.
        let ca = if self.provided.is_some() {
            &None
        } else {
            &self.ca
        };
        [
            (ca, ca_key_secret_name(cluster)),
            (&self.server, server_secret_name(cluster)),
            (&self.published, ca_secret_name(cluster)),
        ]
        .into_iter()
        .find(|(s, _)| s.as_ref().is_some_and(|s| !s.owned))
        .map(|(_, secret)| TlsConflict { secret })
    }

    /// The Secrets of `observed`'s cluster as they are right after the runtime made them at
    /// `observed.now` (a fresh authority with fingerprint `"ca"`, a certificate for the names
    /// the cluster needs): for simulations and tests of whole passes, where the certificates are
    /// not what is looked at.
    pub fn settled(observed: &crate::Observed) -> TlsObserved {
        let ctx = RenderContext::of(observed);
        let now = observed.now.as_second();
        let until = |seconds: i64| Timestamp::from_second(now + seconds).unwrap_or(Timestamp::MAX);
        let sighting = |seconds: i64, names: Vec<String>| CertSighting {
            not_after: until(seconds),
            ca_sha256: "ca".to_owned(),
            names,
            owned: true,
            source_version: None,
            not_before: None,
        };
        TlsObserved {
            ca: Some(sighting(CA_LIFETIME_SECONDS, Vec::new())),
            server: Some(sighting(server_lifetime_seconds(&ctx), server_names(&ctx))),
            published: Some(sighting(CA_LIFETIME_SECONDS, Vec::new())),
            provided: None,
        }
    }
}

/// What the runtime must make of the cluster's TLS Secrets, in this order: the authority, the
/// server certificate, the published authority. Each Secret comes rendered without its data
/// (name, labels, owner reference, and for the server the names to issue for); the runtime adds
/// the material and the annotations of [`CertSighting`].
#[derive(Clone, Debug, PartialEq)]
pub struct TlsChange {
    /// Make a new authority (valid [`CA_LIFETIME_SECONDS`]) into this Secret; `None`: use the
    /// one in `<name>-ca-key`.
    pub new_ca: Option<Box<Secret>>,
    /// Issue a server certificate (valid [`TlsChange::server_lifetime_seconds`], never past the
    /// authority) into this Secret, for [`TlsChange::names`].
    pub server: Option<Box<Secret>>,
    /// How long the server certificate is valid ([`server_lifetime_seconds`]).
    pub server_lifetime_seconds: i64,
    /// Write the authority's certificate into this Secret (`<name>-ca`).
    pub publish: Option<Box<Secret>>,
    /// The names of the server certificate ([`server_names`]).
    pub names: Vec<String>,
    /// Why, for the log and the event: `"created"`, `"renewed"`, `"names changed"`, ...
    pub reason: &'static str,
    /// Copy the certificate the user provides instead of issuing one: `server` and `publish`
    /// get that Secret's material ([`ProvidedCopy`]); `new_ca` is `None`.
    pub provided: Option<ProvidedCopy>,
}

/// Why a Secret of the cluster's TLS stands in the way: another owner holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConflict {
    /// The Secret's name.
    pub secret: String,
}

/// The TLS change the cluster needs at `now`, if any, or the Secret that another owner holds
/// (nothing is then written, the cluster is reported degraded).
pub fn change(
    ctx: &RenderContext<'_>,
    observed: &TlsObserved,
    now: Timestamp,
) -> Result<Option<TlsChange>, TlsConflict> {
    // The spec, not `wanted`: a conflict switches `wanted` off and must still be reported.
    if !TlsSpec::wanted(ctx.spec.tls.as_ref()) {
        return Ok(None);
    }
    if let Some(secret) = TlsSpec::provided_secret(ctx.spec.tls.as_ref()) {
        return provided::change(ctx, observed, secret, now);
    }
    if let Some(conflict) = observed.conflict(ctx.name) {
        return Err(conflict);
    }
    let left = |s: &CertSighting| s.not_after.as_second() - now.as_second();
    let names = server_names(ctx);
    let (new_ca, ca_reason) = match &observed.ca {
        None => (true, "created"),
        // Early enough that a server certificate of the full lifetime still fits under it (a
        // certificate is never valid past its authority, and one cut short would be renewed on
        // every pass).
        Some(ca) if left(ca) < CA_RENEW_BEFORE_SECONDS + server_lifetime_seconds(ctx) => {
            (true, "authority renewed")
        }
        Some(_) => (false, ""),
    };
    let ca_sha = observed.ca.as_ref().map(|c| c.ca_sha256.as_str());
    let server_reason = match &observed.server {
        _ if new_ca => Some(ca_reason),
        None => Some("created"),
        Some(s) if Some(s.ca_sha256.as_str()) != ca_sha => Some("signed by another authority"),
        Some(s) if s.names != names => Some("names changed"),
        Some(s) if left(s) < server_renew_before_seconds(ctx) => Some("renewed"),
        // Valid for longer than the spec allows now (the lifetime was shortened).
        Some(s) if left(s) > server_lifetime_seconds(ctx) + LIFETIME_SLACK_SECONDS => {
            Some("lifetime shortened")
        }
        Some(_) => None,
    };
    let publish = new_ca
        || observed
            .published
            .as_ref()
            .is_none_or(|p| Some(p.ca_sha256.as_str()) != ca_sha);
    if !new_ca && server_reason.is_none() && !publish {
        return Ok(None);
    }
    let secret = |name: String| rendered_secret(ctx, name);
    let server = server_reason.map(|_| {
        let mut s = secret(server_secret_name(ctx.name));
        s.type_ = Some("kubernetes.io/tls".to_owned());
        s.metadata.annotations = Some(BTreeMap::from([(
            NAMES_ANNOTATION.to_owned(),
            names.join(","),
        )]));
        s
    });
    Ok(Some(TlsChange {
        new_ca: new_ca.then(|| {
            let mut s = secret(ca_key_secret_name(ctx.name));
            s.type_ = Some("kubernetes.io/tls".to_owned());
            s
        }),
        server,
        publish: publish.then(|| secret(ca_secret_name(ctx.name))),
        server_lifetime_seconds: server_lifetime_seconds(ctx),
        names,
        reason: server_reason.unwrap_or("published"),
        provided: None,
    }))
}

/// One of the cluster's TLS Secrets as the core renders it: name, labels, owner, no data.
fn rendered_secret(ctx: &RenderContext<'_>, name: String) -> Box<Secret> {
    Box::new(Secret {
        metadata: ctx.metadata(name, COMPONENT_TLS),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

/// The members whose servers serve another certificate than the cluster's current one (by
/// their fresh facts: [`crate::MemberFacts::tls_not_after`]), one
/// [`crate::DatabaseCommand::ReloadTls`] each, in member order. Planned again on each pass until
/// the member serves the current one: the kubelet updates a mounted Secret within about a
/// minute of its change, and a reload before that is harmless. Nothing for a member whose
/// session was not TLS (its pod was started without the certificate: the pod's next start
/// brings it) or whose facts are stale.
pub fn reloads(
    ctx: &RenderContext<'_>,
    observed: &TlsObserved,
    members: &[&str],
    facts: &BTreeMap<String, crate::MemberFacts>,
    now: Timestamp,
) -> Vec<crate::DatabaseCommand> {
    if !wanted(ctx) {
        return Vec::new();
    }
    let Some(current) = observed.server.as_ref().filter(|s| s.owned) else {
        return Vec::new();
    };
    members
        .iter()
        .filter(|pod| {
            facts.get(**pod).is_some_and(|f| {
                f.reachable
                    && f.fresh_at(now)
                    && f.tls_not_after
                        .is_some_and(|served| served.as_second() != current.not_after.as_second())
            })
        })
        .map(|pod| crate::DatabaseCommand::ReloadTls {
            pod: (*pod).to_owned(),
        })
        .collect()
}

/// The replicas to point again at their source with a checked TLS connection
/// ([`crate::DatabaseCommand::SecureReplication`]), in member order: a replica whose fresh facts
/// say it streams from the member carrying the primary label without checking its certificate
/// (`source_tls_checked: Some(false)`), where both serve TLS (so both mount the cluster's
/// certificate and authority). New replicas start replicating the engine's way (PostgreSQL's
/// `pg_basebackup` and MySQL's clone and channel, MariaDB's channel) and are secured here once
/// they stream; a cluster switching TLS on is secured once its pods have rolled. Nothing while
/// a failover or switchover is in flight.
///
/// A cluster with TLS switched off: a replica whose channel still checks a certificate (a file
/// its pod no longer mounts) is pointed at its source again without (a plain
/// [`crate::DatabaseCommand::Follow`]).
pub fn secure_replication(
    ctx: &RenderContext<'_>,
    members: &[&str],
    label_primary: Option<&str>,
    failover_in_flight: bool,
    facts: &BTreeMap<String, crate::MemberFacts>,
    now: Timestamp,
) -> Vec<crate::DatabaseCommand> {
    let Some(primary) = label_primary.filter(|_| !failover_in_flight) else {
        return Vec::new();
    };
    if !wanted(ctx) {
        return members
            .iter()
            .filter(|pod| **pod != primary)
            .filter(|pod| {
                facts.get(**pod).is_some_and(|f| {
                    f.reachable
                        && f.fresh_at(now)
                        && f.role == Some(crate::ServerRole::Replica)
                        && f.source_tls_checked == Some(true)
                })
            })
            .map(|pod| crate::DatabaseCommand::Follow {
                pod: (*pod).to_owned(),
                source: primary.to_owned(),
                rewind: false,
            })
            .collect();
    }
    let fresh = |pod: &str| {
        facts
            .get(pod)
            .filter(|f| f.reachable && f.fresh_at(now) && f.tls_not_after.is_some())
    };
    if fresh(primary).is_none() {
        return Vec::new();
    }
    members
        .iter()
        .filter(|pod| **pod != primary)
        .filter(|pod| {
            fresh(pod).is_some_and(|f| {
                f.role == Some(crate::ServerRole::Replica)
                    && f.replicating == Some(true)
                    && f.source.as_deref() == Some(primary)
                    && f.source_tls_checked == Some(false)
            })
        })
        .map(|pod| crate::DatabaseCommand::SecureReplication {
            pod: (*pod).to_owned(),
            source: primary.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use database_operator_api::{DatabaseClusterSpec, Engine};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    use super::*;
    use crate::OperatorConfig;

    const NOW: i64 = 1_800_000_000;

    fn spec(tls: Option<TlsSpec>) -> DatabaseClusterSpec {
        let mut spec: DatabaseClusterSpec = serde_json::from_value(json!({
            "engine": "postgresql", "version": "15.10",
            "storage": {"size": "1Gi"},
            "passwordSecretRef": {"name": "pw", "key": "password"}
        }))
        .unwrap();
        spec.tls = tls;
        spec
    }

    fn context<'a>(spec: &'a DatabaseClusterSpec, config: &'a OperatorConfig) -> RenderContext<'a> {
        RenderContext {
            tls_blocked: false,
            name: "orders",
            namespace: "shop",
            uid: "u1",
            engine: Engine::Postgresql,
            version: &spec.version,
            spec,
            config,
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn sighting(left: i64, ca: &str, names: Vec<String>) -> CertSighting {
        CertSighting {
            not_after: at(NOW + left),
            ca_sha256: ca.to_owned(),
            names,
            owned: true,
            source_version: None,
            not_before: None,
        }
    }

    fn current(ctx: &RenderContext<'_>) -> TlsObserved {
        TlsObserved {
            ca: Some(sighting(5 * 365 * 86_400, "aa", Vec::new())),
            server: Some(sighting(60 * 86_400, "aa", server_names(ctx))),
            published: Some(sighting(5 * 365 * 86_400, "aa", Vec::new())),
            provided: None,
        }
    }

    #[test]
    fn a_new_cluster_gets_an_authority_a_certificate_and_the_published_authority() {
        let (spec, config) = (spec(None), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let change = change(&ctx, &TlsObserved::default(), at(NOW))
            .unwrap()
            .unwrap();
        let names = |s: &Option<Box<Secret>>| s.as_ref().and_then(|s| s.metadata.name.clone());
        assert_eq!(names(&change.new_ca).as_deref(), Some("orders-ca-key"));
        assert_eq!(names(&change.server).as_deref(), Some("orders-tls"));
        assert_eq!(names(&change.publish).as_deref(), Some("orders-ca"));
        let server = change.server.as_ref().unwrap();
        assert_eq!(server.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(
            server.metadata.annotations.as_ref().unwrap()[NAMES_ANNOTATION],
            change.names.join(",")
        );
        let owner = &server.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u1", Some(true)));
    }

    #[test]
    fn the_names_cover_the_services_and_every_member() {
        let (spec, config) = (spec(None), OperatorConfig::default());
        let names = server_names(&context(&spec, &config));
        for name in [
            "orders",
            "orders.shop.svc",
            "orders-replicas.shop.svc.cluster.local",
            "orders-headless.shop",
            "*.orders-headless.shop.svc",
            "*.orders-headless.shop.svc.cluster.local",
        ] {
            assert!(
                names.contains(&name.to_owned()),
                "{name} missing: {names:?}"
            );
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn current_certificates_need_nothing_and_tls_off_needs_nothing() {
        let (on, config) = (spec(None), OperatorConfig::default());
        let ctx = context(&on, &config);
        assert_eq!(change(&ctx, &current(&ctx), at(NOW)), Ok(None));
        let off = spec(Some(TlsSpec {
            enabled: false,
            ..TlsSpec::default()
        }));
        let ctx = context(&off, &config);
        assert_eq!(change(&ctx, &TlsObserved::default(), at(NOW)), Ok(None));
    }

    #[test]
    fn each_reason_to_issue_again() {
        let (spec, config) = (spec(None), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let server_only = |observed: &TlsObserved, reason: &str| {
            let c = change(&ctx, observed, at(NOW)).unwrap().unwrap();
            assert!(c.new_ca.is_none() && c.publish.is_none(), "{c:?}");
            assert!(c.server.is_some(), "{c:?}");
            assert_eq!(c.reason, reason);
        };
        let mut expiring = current(&ctx);
        expiring.server.as_mut().unwrap().not_after = at(NOW + 30 * 86_400 - 1);
        server_only(&expiring, "renewed");
        let mut long = current(&ctx);
        long.server.as_mut().unwrap().not_after = at(NOW + 200 * 86_400);
        server_only(&long, "lifetime shortened");
        // A shorter lifetime renews sooner: a third of 600 s.
        let mut short = spec.clone();
        short.tls = Some(TlsSpec {
            server_certificate_lifetime_seconds: 600,
            ..TlsSpec::default()
        });
        let short_ctx = context(&short, &config);
        let mut fresh = current(&short_ctx);
        fresh.server.as_mut().unwrap().not_after = at(NOW + 201);
        assert_eq!(change(&short_ctx, &fresh, at(NOW)), Ok(None));
        fresh.server.as_mut().unwrap().not_after = at(NOW + 199);
        let c = change(&short_ctx, &fresh, at(NOW)).unwrap().unwrap();
        assert_eq!((c.reason, c.server_lifetime_seconds), ("renewed", 600));
        let mut renamed = current(&ctx);
        renamed.server.as_mut().unwrap().names.pop();
        server_only(&renamed, "names changed");
        let mut foreign = current(&ctx);
        foreign.server.as_mut().unwrap().ca_sha256 = "bb".into();
        server_only(&foreign, "signed by another authority");
        let mut gone = current(&ctx);
        gone.server = None;
        server_only(&gone, "created");

        let mut old_ca = current(&ctx);
        old_ca.ca.as_mut().unwrap().not_after =
            at(NOW + CA_RENEW_BEFORE_SECONDS + server_lifetime_seconds(&ctx) - 1);
        let c = change(&ctx, &old_ca, at(NOW)).unwrap().unwrap();
        assert!(c.new_ca.is_some() && c.server.is_some() && c.publish.is_some());
        assert_eq!(c.reason, "authority renewed");

        let mut unpublished = current(&ctx);
        unpublished.published.as_mut().unwrap().ca_sha256 = "old".into();
        let c = change(&ctx, &unpublished, at(NOW)).unwrap().unwrap();
        assert!(c.new_ca.is_none() && c.server.is_none() && c.publish.is_some());
    }

    #[test]
    fn a_secret_of_another_owner_is_never_written() {
        let (spec, config) = (spec(None), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let theirs = ObjectMeta {
            name: Some("orders-tls".into()),
            owner_references: Some(vec![OwnerReference {
                uid: "someone-else".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        let observed = TlsObserved {
            server: CertSighting::from_metadata(&theirs, "u1"),
            ..TlsObserved::default()
        };
        assert_eq!(
            change(&ctx, &observed, at(NOW)),
            Err(TlsConflict {
                secret: "orders-tls".into()
            })
        );
        // The members are then rendered without TLS, and the conflict is still reported.
        assert!(observed.foreign());
        let blocked = RenderContext {
            tls_blocked: observed.foreign(),
            ..ctx
        };
        assert!(!wanted(&blocked));
        assert!(change(&blocked, &observed, at(NOW)).is_err());
    }

    #[test]
    fn a_member_serving_another_certificate_is_told_to_reload() {
        let (spec, config) = (spec(None), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let observed = current(&ctx);
        let current_until = observed.server.as_ref().unwrap().not_after;
        let facts = |served: Option<Timestamp>, probed: i64| crate::MemberFacts {
            tls_not_after: served,
            ..crate::MemberFacts::unreachable(at(probed))
        };
        let mut by_pod = BTreeMap::new();
        let mut serving = |pod: &str, served, probed| {
            let mut f = facts(served, probed);
            f.reachable = true;
            by_pod.insert(pod.to_owned(), f);
        };
        serving("orders-0", Some(current_until), NOW);
        serving("orders-1", Some(at(NOW + 10)), NOW);
        serving("orders-2", None, NOW);
        serving("orders-3", Some(at(NOW + 10)), NOW - 600);
        let members = ["orders-0", "orders-1", "orders-2", "orders-3"];
        assert_eq!(
            reloads(&ctx, &observed, &members, &by_pod, at(NOW)),
            [crate::DatabaseCommand::ReloadTls {
                pod: "orders-1".into()
            }],
            "only the fresh member serving another certificate"
        );
        let off = super::tests::spec(Some(TlsSpec {
            enabled: false,
            ..TlsSpec::default()
        }));
        let ctx = context(&off, &config);
        assert!(reloads(&ctx, &observed, &members, &by_pod, at(NOW)).is_empty());
    }

    #[test]
    fn a_replica_that_does_not_check_its_tls_source_is_pointed_again() {
        let (spec, config) = (spec(None), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let served = Some(at(NOW + 86_400));
        let member = |role, source: Option<&str>, checked, tls| crate::MemberFacts {
            reachable: true,
            role: Some(role),
            replicating: (role == crate::ServerRole::Replica).then_some(true),
            source: source.map(str::to_owned),
            source_tls_checked: checked,
            tls_not_after: tls,
            ..crate::MemberFacts::unreachable(at(NOW))
        };
        let primary = crate::ServerRole::Primary;
        let replica = crate::ServerRole::Replica;
        let mut facts = BTreeMap::from([
            ("orders-0".to_owned(), member(primary, None, None, served)),
            (
                "orders-1".to_owned(),
                member(replica, Some("orders-0"), Some(false), served),
            ),
            (
                "orders-2".to_owned(),
                member(replica, Some("orders-0"), Some(true), served),
            ),
            // Started before TLS (no certificate of its own): left alone.
            (
                "orders-3".to_owned(),
                member(replica, Some("orders-0"), Some(false), None),
            ),
        ]);
        let members = ["orders-0", "orders-1", "orders-2", "orders-3"];
        let planned = |facts: &BTreeMap<String, crate::MemberFacts>, in_flight| {
            secure_replication(&ctx, &members, Some("orders-0"), in_flight, facts, at(NOW))
        };
        assert_eq!(
            planned(&facts, false),
            [crate::DatabaseCommand::SecureReplication {
                pod: "orders-1".into(),
                source: "orders-0".into()
            }]
        );
        assert!(planned(&facts, true).is_empty(), "not during a failover");
        // A source that does not serve TLS yet (a cluster switching TLS on): nothing.
        facts.get_mut("orders-0").unwrap().tls_not_after = None;
        assert!(planned(&facts, false).is_empty());
        // TLS switched off: the replica still checking is pointed again without.
        let mut off = spec.clone();
        off.tls = Some(TlsSpec {
            enabled: false,
            ..TlsSpec::default()
        });
        let off_ctx = context(&off, &config);
        assert_eq!(
            secure_replication(&off_ctx, &members, Some("orders-0"), false, &facts, at(NOW)),
            [crate::DatabaseCommand::Follow {
                pod: "orders-2".into(),
                source: "orders-0".into(),
                rewind: false
            }]
        );
    }

    #[test]
    fn sightings_read_the_annotations_the_runtime_writes() {
        let mut meta = ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                uid: "u1".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            annotations: Some(BTreeMap::from([
                (
                    NOT_AFTER_ANNOTATION.to_owned(),
                    "2027-01-01T00:00:00Z".to_owned(),
                ),
                (CA_SHA256_ANNOTATION.to_owned(), "ab".to_owned()),
                (NAMES_ANNOTATION.to_owned(), "b, a,".to_owned()),
            ])),
            ..ObjectMeta::default()
        };
        let seen = CertSighting::from_metadata(&meta, "u1").unwrap();
        assert_eq!(seen.names, ["a", "b"]);
        assert_eq!(seen.not_after, "2027-01-01T00:00:00Z".parse().unwrap());
        assert!(seen.owned);
        // Ours without annotations (a write cut short): made again, as if missing.
        meta.annotations = None;
        assert_eq!(CertSighting::from_metadata(&meta, "u1"), None);
    }
}
