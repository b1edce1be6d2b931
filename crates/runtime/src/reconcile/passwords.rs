//! Carrying out the password commands the core plans ([`DatabaseCommand::SetPassword`],
//! [`DatabaseCommand::DiscardOldPassword`]) on the primary, with the operator's own account, and
//! reporting what happened as a [`PasswordOutcome`] (how the core learns a password was
//! applied; it never assumes so).
//!
//! - The value is read from the referenced Secret at the moment of the command, and only applied
//!   when its fingerprint is still the one the core planned: a Secret that moved on in between
//!   is skipped (no outcome), and the next pass plans the newer value.
//! - A failure is an outcome with the driver's error (never holding a password), not a
//!   [`super::DatabaseFailure`]: the core shows it in the `PasswordApplied` condition and plans
//!   the command again after its retry delay.

use database_operator_api::DatabaseCluster;
use database_operator_core::{DatabaseCommand, PasswordAccount, PasswordAction, PasswordOutcome};
use k8s_openapi::jiff::Timestamp;

use crate::database::{Account, DatabaseIo, Secret};
use crate::members::{Members, Purpose};

/// The driver's account for a core [`PasswordAccount`].
pub(crate) fn account(a: &PasswordAccount) -> Account {
    Account {
        unix_socket: a.keep_unix_socket,
        ..Account::at(
            a.user.clone(),
            a.host.clone().unwrap_or_else(|| "%".to_owned()),
        )
    }
}

/// Carries out a password command; `None` for any other command, and for a `SetPassword` whose
/// Secret no longer has the planned fingerprint.
pub(crate) async fn password_command<M: Members>(
    members: &M,
    cluster: &DatabaseCluster,
    command: &DatabaseCommand,
) -> Option<PasswordOutcome> {
    let (action, pod, accounts, fingerprint, retain_old) = match command {
        DatabaseCommand::SetPassword {
            pod,
            accounts,
            fingerprint,
            retain_old,
        } => (PasswordAction::Set, pod, accounts, fingerprint, *retain_old),
        DatabaseCommand::DiscardOldPassword {
            pod,
            accounts,
            fingerprint,
        } => (
            PasswordAction::DiscardOld,
            pod,
            accounts,
            fingerprint,
            false,
        ),
        _ => return None,
    };
    let password = match action {
        PasswordAction::DiscardOld => None,
        PasswordAction::Set => match members.superuser_password(cluster).await {
            Ok(Some((current, password))) if current == *fingerprint => Some(password),
            Ok(_) => {
                tracing::info!(
                    %pod,
                    planned = %fingerprint,
                    "the password Secret changed since the step was planned: skipped, the next pass plans the new value"
                );
                return None;
            }
            Err(e) => return Some(outcome(action, fingerprint, Some(e.to_string()))),
        },
    };
    let result = apply(
        members,
        cluster,
        pod,
        accounts,
        password.as_ref(),
        retain_old,
    )
    .await;
    match &result {
        Ok(()) => tracing::info!(%pod, ?action, %fingerprint, "password step carried out"),
        Err(error) => tracing::warn!(%pod, ?action, %fingerprint, %error, "password step failed"),
    }
    Some(outcome(action, fingerprint, result.err()))
}

/// Dials `pod` and sets `password` (or, without one, discards the old password) for every
/// account in order, stopping at the first error.
async fn apply<M: Members>(
    members: &M,
    cluster: &DatabaseCluster,
    pod: &str,
    accounts: &[PasswordAccount],
    password: Option<&Secret>,
    retain_old: bool,
) -> Result<(), String> {
    let io = members
        .dial(cluster, pod, Purpose::Command)
        .await
        .map_err(|e| e.to_string())?;
    for a in accounts {
        let account = account(a);
        match password {
            Some(password) => io.set_password(&account, password, retain_old).await,
            None => io.discard_old_password(&account).await,
        }
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn outcome(action: PasswordAction, fingerprint: &str, error: Option<String>) -> PasswordOutcome {
    PasswordOutcome {
        action,
        fingerprint: fingerprint.to_owned(),
        at: Timestamp::now(),
        error,
    }
}
