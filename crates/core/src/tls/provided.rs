//! A server certificate the user provides (`spec.tls.certificateSecret`): a Secret written by
//! cert-manager, Vault or a person, in the layout of a `kubernetes.io/tls` Secret (`tls.crt`,
//! `tls.key`, `ca.crt`).
//!
//! The members never mount the user's Secret. The runtime reads it, checks it (the key is the
//! certificate's, the chain verifies against `ca.crt`, it is valid now) and reports what it
//! found ([`ProvidedCert`]); the core decides here whether it covers every name the cluster is
//! reached by and, when it does, has the runtime copy it into `<name>-tls` (what the members
//! mount) and its `ca.crt` into `<name>-ca` (what clients read). A Secret that fails a check is
//! never copied: the servers keep serving the certificate they have, and the cluster is
//! reported degraded with the check that failed ([`problem`]). A renewed certificate (a new
//! version of the Secret) is copied again, and the members reload it without a restart
//! ([`super::reloads`]). The copy records which version of the user's Secret it holds
//! ([`SOURCE_VERSION_ANNOTATION`]), so an unchanged Secret is read once.

use database_operator_api::conditions::reasons;
use k8s_openapi::jiff::Timestamp;

use super::{CertSighting, TlsChange, TlsConflict, TlsObserved};
use crate::render::RenderContext;
use crate::render::tls::*;

/// A provided certificate with less than this left (seven days), or less than a third of its
/// life when that is shorter, makes the cluster degraded: its writer has not renewed it
/// (cert-manager renews at two thirds of the life by default), and clients will refuse the
/// servers once it expires.
pub const EXPIRY_WARNING_SECONDS: i64 = 7 * 86_400;

/// What the runtime found of the Secret that `spec.tls.certificateSecret` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProvidedCert {
    /// No Secret of that name in the cluster's namespace.
    Missing,
    /// `<name>-tls` holds a copy of its current version.
    Copied,
    /// A version `<name>-tls` does not hold yet, with what its checks found.
    New {
        /// The Secret's `resourceVersion`.
        resource_version: String,
        /// What the certificate is, or which check failed and why.
        checked: Result<ProvidedFacts, String>,
    },
}

/// What the runtime read from a provided certificate that passed its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvidedFacts {
    /// The DNS names of its subjectAltName, sorted.
    pub names: Vec<String>,
    /// When it became valid.
    pub not_before: Timestamp,
    /// When it expires.
    pub not_after: Timestamp,
    /// The SHA-256 (hex) of the first certificate of its `ca.crt`.
    pub ca_sha256: String,
}

/// Which version of the user's Secret to copy ([`TlsChange::provided`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvidedCopy {
    /// The user's Secret, in the cluster's namespace.
    pub secret: String,
    /// The version that was checked: the runtime copies only that one (a Secret changed since
    /// is checked again on the next pass).
    pub resource_version: String,
}

/// The names a provided certificate must cover: the names the operator, the replicas and the
/// backups dial and check: each Service as `<service>.<namespace>.svc`, and each member
/// `spec.replicas` asks for as `<name>-<i>.<name>-headless.<namespace>.svc`. The other forms
/// the operator's own certificate has (bare, `.<namespace>`, `.svc.cluster.local`) are for
/// clients that dial them; many authorities refuse single-label names, and clusters whose DNS
/// domain is not `cluster.local` cannot have them issued, so they are not required.
pub fn required_names(ctx: &RenderContext<'_>) -> Vec<String> {
    let headless = ctx.headless_domain();
    let mut names: Vec<String> = [
        ctx.name.to_owned(),
        ctx.replicas_service_name(),
        ctx.headless_service_name(),
    ]
    .iter()
    .map(|service| format!("{service}.{}.svc", ctx.namespace))
    .collect();
    names.extend((0..ctx.spec.replicas).map(|i| format!("{}-{i}.{headless}", ctx.name)));
    names.sort();
    names.dedup();
    names
}

/// Whether the certificate name `san` covers `name`: the same name (in any case), or a wildcard
/// `*.<rest>` and `name` is one more label in front of `<rest>` (RFC 6125: the wildcard stands
/// for exactly one label).
pub fn covers(san: &str, name: &str) -> bool {
    if san.eq_ignore_ascii_case(name) {
        return true;
    }
    match (san.strip_prefix("*."), name.split_once('.')) {
        (Some(rest), Some((label, name_rest))) => {
            !label.is_empty() && !rest.is_empty() && rest.eq_ignore_ascii_case(name_rest)
        }
        _ => false,
    }
}

/// The names of `required` that none of `sans` covers, in order.
pub fn uncovered(sans: &[String], required: &[String]) -> Vec<String> {
    required
        .iter()
        .filter(|name| !sans.iter().any(|san| covers(san, name)))
        .cloned()
        .collect()
}

/// Why the provided certificate cannot be used (reason and message), or why the one in use
/// needs attention; `None` when there is nothing to say or no certificate is provided.
pub fn problem(
    ctx: &RenderContext<'_>,
    observed: &TlsObserved,
    now: Timestamp,
) -> Option<(&'static str, String)> {
    let secret = database_operator_api::TlsSpec::provided_secret(ctx.spec.tls.as_ref())?;
    let named = format!(
        "Secret {}/{secret} (spec.tls.certificateSecret)",
        ctx.namespace
    );
    let keeps = if observed.server.as_ref().is_some_and(|s| s.owned) {
        "the servers keep the certificate they have"
    } else {
        "the members wait for a usable certificate before they start"
    };
    let required = required_names(ctx);
    let unusable = |why: String| {
        Some((
            reasons::TLS_CERTIFICATE_UNUSABLE,
            format!("{named} cannot be used: {why}; {keeps}"),
        ))
    };
    match observed.provided.as_ref()? {
        ProvidedCert::Missing => Some((
            reasons::TLS_CERTIFICATE_NOT_FOUND,
            format!(
                "{named} does not exist: create it with keys tls.crt, tls.key and ca.crt (a cert-manager Certificate's secretName); {keeps}"
            ),
        )),
        ProvidedCert::New {
            checked: Err(why), ..
        } => unusable(why.clone()),
        ProvidedCert::New {
            checked: Ok(facts), ..
        } => match refusal(facts, &required, now) {
            Some(why) => unusable(why),
            None => expiry(&named, Some(facts.not_before), facts.not_after, now),
        },
        ProvidedCert::Copied => {
            let copy = observed.server.as_ref()?;
            let missing = uncovered(&copy.names, &required);
            if !missing.is_empty() {
                // A scale-up asks for members the certificate was not issued for.
                return Some((
                    reasons::TLS_CERTIFICATE_UNUSABLE,
                    format!(
                        "{named} {}: clients checking those names refuse the servers; issue it again for them",
                        not_covered(&missing)
                    ),
                ));
            }
            expiry(&named, copy.not_before, copy.not_after, now)
        }
    }
}

/// Why a new version that passed the runtime's checks is still not copied: names of `required`
/// it does not cover, or its end already passed at `now`.
fn refusal(facts: &ProvidedFacts, required: &[String], now: Timestamp) -> Option<String> {
    let missing = uncovered(&facts.names, required);
    if !missing.is_empty() {
        return Some(not_covered(&missing));
    }
    (facts.not_after.as_second() <= now.as_second())
        .then(|| format!("it expired at {}", facts.not_after))
}

fn not_covered(missing: &[String]) -> String {
    const SHOWN: usize = 6;
    let mut text = missing
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if missing.len() > SHOWN {
        text.push_str(&format!(" and {} more", missing.len() - SHOWN));
    }
    format!("does not cover {text}")
}

fn expiry(
    named: &str,
    not_before: Option<Timestamp>,
    not_after: Timestamp,
    now: Timestamp,
) -> Option<(&'static str, String)> {
    let left = not_after.as_second() - now.as_second();
    let window = not_before.map_or(EXPIRY_WARNING_SECONDS, |start| {
        EXPIRY_WARNING_SECONDS.min((not_after.as_second() - start.as_second()) / 3)
    });
    (left < window).then(|| {
        let when = if left <= 0 {
            format!("expired at {not_after}")
        } else {
            format!("expires at {not_after}, in {} hour(s)", left / 3600)
        };
        (
            reasons::TLS_CERTIFICATE_EXPIRING,
            format!(
                "{named} {when} and has not been renewed: whoever writes the Secret (cert-manager, a person) must renew it; the operator copies a renewed one and the servers load it without a restart"
            ),
        )
    })
}

/// The change a cluster with a provided certificate needs: copy a new version that passed every
/// check and covers the names ([`required_names`]); publish again when `<name>-ca` does not
/// hold the copy's authority. Nothing while the Secret is missing or unusable ([`problem`]
/// says why).
pub(super) fn change(
    ctx: &RenderContext<'_>,
    observed: &TlsObserved,
    secret: &str,
    now: Timestamp,
) -> Result<Option<TlsChange>, TlsConflict> {
    if let Some(conflict) = observed.conflict(ctx.name) {
        return Err(conflict);
    }
    Ok(match &observed.provided {
        Some(ProvidedCert::New {
            resource_version,
            checked: Ok(facts),
        }) if refusal(facts, &required_names(ctx), now).is_none() => Some(copy_change(
            ctx,
            secret,
            resource_version,
            facts.names.clone(),
            "provided certificate copied",
        )),
        Some(ProvidedCert::Copied) => {
            let published = |copy: &CertSighting| {
                observed
                    .published
                    .as_ref()
                    .is_some_and(|p| p.ca_sha256 == copy.ca_sha256)
            };
            // `<name>-ca` no longer holds the authority of the copy (deleted, or an earlier
            // pass stopped half way): the same version again, which publishes it.
            match observed.server.as_ref() {
                Some(copy) if !published(copy) => copy.source_version.as_deref().map(|version| {
                    copy_change(ctx, secret, version, copy.names.clone(), "published")
                }),
                _ => None,
            }
        }
        _ => None,
    })
}

/// Copy version `resource_version` of the user's Secret `secret` (certificate names `names`)
/// into `<name>-tls` and its authority into `<name>-ca`.
fn copy_change(
    ctx: &RenderContext<'_>,
    secret: &str,
    resource_version: &str,
    names: Vec<String>,
    reason: &'static str,
) -> TlsChange {
    let mut server = super::rendered_secret(ctx, server_secret_name(ctx.name));
    server.type_ = Some("kubernetes.io/tls".to_owned());
    TlsChange {
        new_ca: None,
        server: Some(server),
        server_lifetime_seconds: 0,
        publish: Some(super::rendered_secret(ctx, ca_secret_name(ctx.name))),
        names,
        reason,
        provided: Some(ProvidedCopy {
            secret: secret.to_owned(),
            resource_version: resource_version.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use database_operator_api::{DatabaseClusterSpec, Engine, TlsSpec};
    use serde_json::json;

    use super::*;
    use crate::OperatorConfig;

    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 86_400;

    fn spec(replicas: i32) -> DatabaseClusterSpec {
        let mut spec: DatabaseClusterSpec = serde_json::from_value(json!({
            "engine": "postgresql", "version": "15.10", "replicas": replicas,
            "storage": {"size": "1Gi"},
            "passwordSecretRef": {"name": "pw", "key": "password"},
            "tls": {"certificateSecret": "orders-cert"}
        }))
        .unwrap();
        spec.tls.get_or_insert_with(TlsSpec::default);
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

    /// What cert-manager would issue for the cluster: the Services and a wildcard for members.
    fn issued_names() -> Vec<String> {
        let mut names = Vec::new();
        for service in ["orders", "orders-replicas", "orders-headless"] {
            for suffix in ["", ".shop", ".shop.svc", ".shop.svc.cluster.local"] {
                names.push(format!("{service}{suffix}"));
            }
        }
        names.push("*.orders-headless.shop.svc".to_owned());
        names.push("*.orders-headless.shop.svc.cluster.local".to_owned());
        names
    }

    fn new(names: Vec<String>, left: i64) -> ProvidedCert {
        ProvidedCert::New {
            resource_version: "41".to_owned(),
            checked: Ok(ProvidedFacts {
                names,
                not_before: at(NOW - 30 * DAY),
                not_after: at(NOW + left),
                ca_sha256: "user-ca".to_owned(),
            }),
        }
    }

    fn copy(names: Vec<String>, left: i64) -> CertSighting {
        CertSighting {
            not_after: at(NOW + left),
            ca_sha256: "user-ca".to_owned(),
            names,
            owned: true,
            source_version: Some("41".to_owned()),
            not_before: None,
        }
    }

    fn observed(provided: ProvidedCert) -> TlsObserved {
        TlsObserved {
            provided: Some(provided),
            ..TlsObserved::default()
        }
    }

    #[test]
    fn wildcards_stand_for_one_label() {
        assert!(covers("*.a.svc", "x.a.svc"));
        assert!(covers("ORDERS.shop.svc", "orders.shop.svc"));
        assert!(!covers("*.a.svc", "a.svc"));
        assert!(!covers("*.a.svc", "y.x.a.svc"));
        assert!(!covers("*.a.svc", ".a.svc"));
        assert!(!covers("x.*.svc", "x.a.svc"));
    }

    #[test]
    fn the_required_names_are_the_services_and_each_member() {
        let (spec, config) = (spec(2), OperatorConfig::default());
        let names = required_names(&context(&spec, &config));
        assert_eq!(
            names,
            [
                "orders-0.orders-headless.shop.svc",
                "orders-1.orders-headless.shop.svc",
                "orders-headless.shop.svc",
                "orders-replicas.shop.svc",
                "orders.shop.svc",
            ]
        );
        assert!(uncovered(&issued_names(), &names).is_empty());
        // What a policy that refuses single-label names and `cluster.local` issues is enough.
        let svc_only: Vec<String> = issued_names()
            .into_iter()
            .filter(|n| n.ends_with(".svc"))
            .collect();
        assert!(uncovered(&svc_only, &names).is_empty(), "{svc_only:?}");
    }

    #[test]
    fn a_new_version_that_covers_every_name_is_copied_and_published() {
        let (spec, config) = (spec(3), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let observed = observed(new(issued_names(), 60 * DAY));
        let change = crate::tls::change(&ctx, &observed, at(NOW))
            .unwrap()
            .unwrap();
        assert_eq!(
            change.provided,
            Some(ProvidedCopy {
                secret: "orders-cert".to_owned(),
                resource_version: "41".to_owned()
            })
        );
        assert!(change.new_ca.is_none(), "no authority of the operator's");
        assert_eq!(
            change.server.unwrap().metadata.name.as_deref(),
            Some("orders-tls")
        );
        assert_eq!(
            change.publish.unwrap().metadata.name.as_deref(),
            Some("orders-ca")
        );
        assert_eq!(problem(&ctx, &observed, at(NOW)), None);
    }

    #[test]
    fn an_unusable_or_missing_certificate_is_never_copied_and_says_why() {
        let (spec, config) = (spec(3), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let mut names = issued_names();
        names.retain(|n| !n.starts_with("orders-replicas"));
        let cases = [
            (
                observed(ProvidedCert::Missing),
                reasons::TLS_CERTIFICATE_NOT_FOUND,
                "Secret shop/orders-cert (spec.tls.certificateSecret) does not exist",
            ),
            (
                observed(ProvidedCert::New {
                    resource_version: "42".to_owned(),
                    checked: Err(
                        "tls.key is not the private key of the certificate in tls.crt".to_owned(),
                    ),
                }),
                reasons::TLS_CERTIFICATE_UNUSABLE,
                "cannot be used: tls.key is not the private key",
            ),
            (
                observed(new(names, 60 * DAY)),
                reasons::TLS_CERTIFICATE_UNUSABLE,
                "does not cover orders-replicas",
            ),
            (
                observed(new(issued_names(), -10)),
                reasons::TLS_CERTIFICATE_UNUSABLE,
                "cannot be used: it expired at",
            ),
        ];
        for (observed, reason, text) in cases {
            assert_eq!(
                crate::tls::change(&ctx, &observed, at(NOW)),
                Ok(None),
                "{text}"
            );
            let (got, message) = problem(&ctx, &observed, at(NOW)).unwrap();
            assert_eq!(got, reason, "{message}");
            assert!(message.contains(text), "{text:?} in {message}");
            assert!(
                message.contains("the members wait for a usable certificate"),
                "{message}"
            );
        }
        // With a copy in use, the servers keep it.
        let mut with_copy = observed(ProvidedCert::Missing);
        with_copy.server = Some(copy(issued_names(), 60 * DAY));
        let (_, message) = problem(&ctx, &with_copy, at(NOW)).unwrap();
        assert!(
            message.contains("the servers keep the certificate they have"),
            "{message}"
        );
    }

    #[test]
    fn the_copy_in_use_is_watched_for_expiry_and_for_new_members() {
        let (spec3, config) = (spec(3), OperatorConfig::default());
        let ctx = context(&spec3, &config);
        let mut current = observed(ProvidedCert::Copied);
        current.server = Some(copy(issued_names(), 60 * DAY));
        current.published = Some(copy(Vec::new(), 3650 * DAY));
        assert_eq!(crate::tls::change(&ctx, &current, at(NOW)), Ok(None));
        assert_eq!(problem(&ctx, &current, at(NOW)), None);
        // Seven days before it expires, unrenewed: degraded.
        let (reason, message) = problem(&ctx, &current, at(NOW + 54 * DAY)).unwrap();
        assert_eq!(reason, reasons::TLS_CERTIFICATE_EXPIRING);
        assert!(message.contains("in 144 hour(s)"), "{message}");
        let (_, message) = problem(&ctx, &current, at(NOW + 61 * DAY)).unwrap();
        assert!(message.contains("expired at"), "{message}");
        // A short-lived certificate (three days) is renewed with a day left: only under a third of
        // its life left is late.
        let mut short = current.clone();
        short.server = Some(CertSighting {
            not_before: Some(at(NOW - 2 * DAY)),
            ..copy(issued_names(), DAY + 3600)
        });
        assert_eq!(problem(&ctx, &short, at(NOW)), None);
        let (reason, _) = problem(&ctx, &short, at(NOW + 7200)).unwrap();
        assert_eq!(reason, reasons::TLS_CERTIFICATE_EXPIRING);
        // Issued for named members only: a fourth member is not covered.
        let mut named = current.clone();
        let mut names: Vec<String> = issued_names()
            .into_iter()
            .filter(|n| !n.starts_with('*'))
            .collect();
        names.extend((0..3).map(|i| format!("orders-{i}.orders-headless.shop.svc")));
        named.server = Some(copy(names, 60 * DAY));
        assert_eq!(problem(&ctx, &named, at(NOW)), None);
        let spec4 = spec(4);
        let (_, message) = problem(&context(&spec4, &config), &named, at(NOW)).unwrap();
        assert!(
            message.contains("does not cover orders-3.orders-headless.shop.svc"),
            "{message}"
        );
    }

    #[test]
    fn a_lost_published_authority_is_copied_again_from_the_same_version() {
        let (spec, config) = (spec(3), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let mut current = observed(ProvidedCert::Copied);
        current.server = Some(copy(issued_names(), 60 * DAY));
        let change = crate::tls::change(&ctx, &current, at(NOW))
            .unwrap()
            .unwrap();
        assert_eq!(change.reason, "published");
        assert_eq!(change.provided.unwrap().resource_version, "41");
        assert!(change.publish.is_some());
    }

    #[test]
    fn with_a_provided_certificate_the_operators_authority_is_not_in_the_way() {
        let (spec, config) = (spec(3), OperatorConfig::default());
        let ctx = context(&spec, &config);
        let mut observed = observed(new(issued_names(), 60 * DAY));
        observed.ca = Some(CertSighting {
            owned: false,
            ..copy(Vec::new(), DAY)
        });
        assert!(!observed.foreign());
        assert!(
            crate::tls::change(&ctx, &observed, at(NOW))
                .unwrap()
                .is_some()
        );
        // Another owner's `<name>-tls` still is.
        observed.server = Some(CertSighting {
            owned: false,
            ..copy(Vec::new(), DAY)
        });
        assert_eq!(
            crate::tls::change(&ctx, &observed, at(NOW)),
            Err(TlsConflict {
                secret: "orders-tls".to_owned()
            })
        );
    }
}
