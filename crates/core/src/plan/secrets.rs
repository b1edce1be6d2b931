//! The Secrets the members read: what stands in the way of the password Secret and the operator
//! Secret, and the change the operator Secret needs ([`crate::credentials`]).

use database_operator_api::conditions::reasons;

use crate::credentials::{self, OperatorSecretState, SecretChange};
use crate::render::{RenderContext, secret};
use crate::status::SecretProblem;
use crate::{Observed, SecretState};

/// The change the operator Secret of a live cluster needs ([`crate::credentials`]): created with
/// generated values when missing before the cluster ran, restored with the values the runtime
/// holds when it went missing later, nothing otherwise (an existing one is adopted as it is; a
/// lost one is reported by [`operator_secret_problem`]).
pub(super) fn operator_secret_change(
    ctx: &RenderContext<'_>,
    observed: &Observed,
) -> Option<SecretChange> {
    let has_run = credentials::has_run(observed.cluster.status.as_ref());
    match observed.operator_secret {
        OperatorSecretState::Missing if !has_run => {
            Some(SecretChange::Create(Box::new(secret::render(ctx))))
        }
        OperatorSecretState::MissingRemembered => {
            Some(SecretChange::Restore(Box::new(secret::render(ctx))))
        }
        OperatorSecretState::Missing | OperatorSecretState::Present { .. } => None,
    }
}

/// The operator Secret of a cluster that has run, gone with no values to restore it from: the
/// cluster is degraded until a person brings it back (generated passwords would lock the
/// operator out of its own data).
fn operator_secret_problem(
    ctx: &RenderContext<'_>,
    state: &OperatorSecretState,
    has_run: bool,
) -> Option<SecretProblem> {
    (has_run && *state == OperatorSecretState::Missing).then(|| SecretProblem {
        reason: credentials::LOST_REASON,
        message: format!(
            "Secret {}/{} (the operator's accounts on the servers) was deleted after the cluster ran, and this operator holds no copy of its values: new passwords would lock the operator, the member agents, backups and new replicas out, so none are generated; failover, switchover, rotation and backups wait until it is back (docs/operations.md, \"The operator Secret\")",
            ctx.namespace,
            credentials::operator_secret_name(ctx.name)
        ),
    })
}

/// What stands in the way of the Secrets the members read: the password Secret first, then the
/// operator Secret.
pub(super) fn secret_problem(
    cluster: &RenderContext<'_>,
    observed: &Observed,
) -> Option<SecretProblem> {
    password_secret_problem(cluster, &observed.secret)
        .or_else(|| {
            operator_secret_problem(
                cluster,
                &observed.operator_secret,
                credentials::has_run(observed.cluster.status.as_ref()),
            )
        })
        .or_else(|| tls_secret_problem(cluster, observed))
}

/// A Secret of the cluster's TLS that someone else holds: the operator writes nothing over it,
/// and the members cannot start without their certificate. Else, with a certificate the user
/// provides, why it cannot be used or needs renewing ([`crate::tls::provided_problem`]).
fn tls_secret_problem(cluster: &RenderContext<'_>, observed: &Observed) -> Option<SecretProblem> {
    if !database_operator_api::TlsSpec::wanted(cluster.spec.tls.as_ref()) {
        return None;
    }
    let Some(conflict) = observed.tls.conflict(cluster.name) else {
        return crate::tls::provided_problem(cluster, &observed.tls, observed.now)
            .map(|(reason, message)| SecretProblem { reason, message });
    };
    Some(SecretProblem {
        reason: reasons::TLS_SECRET_NOT_OWNED,
        message: format!(
            "Secret {}/{} exists and does not belong to this cluster: the operator keeps the cluster's TLS certificates under that name and writes nothing over another's Secret; rename or delete it, or set spec.tls.enabled: false",
            cluster.namespace, conflict.secret
        ),
    })
}

fn password_secret_problem(
    cluster: &RenderContext<'_>,
    secret: &SecretState,
) -> Option<SecretProblem> {
    let selector = &cluster.spec.password_secret_ref;
    let secret_name = format!("{}/{}", cluster.namespace, selector.name);
    match secret {
        SecretState::Present { .. } => None,
        SecretState::Missing => Some(SecretProblem {
            reason: reasons::SECRET_NOT_FOUND,
            message: format!(
                "Secret {secret_name} not found: the members read the password from its key {}; create it",
                selector.key
            ),
        }),
        SecretState::KeyMissing => Some(SecretProblem {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret {secret_name} has no key {}: add the password under that key",
                selector.key
            ),
        }),
        SecretState::Unusable { problem } => Some(SecretProblem {
            reason: reasons::PASSWORD_UNUSABLE,
            message: format!(
                "Secret {secret_name} key {}: the value {} and cannot be a password; put a password of one line of text under that key",
                selector.key,
                problem.describe()
            ),
        }),
    }
}
