//! The database steps of a pass: each command of the plan carried out on its member (or, for
//! the fences that stop a pod, through the API server), in order, only within this replica's
//! confirmed term as leader.

use super::*;
use crate::database::SourceTls;

fn db_failure(pod: &str, command: &'static str, e: &DbError) -> DatabaseFailure {
    DatabaseFailure {
        pod: pod.to_owned(),
        command,
        kind: e.kind.as_str(),
        message: e.to_string(),
    }
}

fn member_failure(pod: &str, command: &'static str, e: &MemberError) -> DatabaseFailure {
    DatabaseFailure {
        pod: pod.to_owned(),
        command,
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// What one database command turned into.
enum Done {
    /// Carried out on the server.
    Server,
    /// The pod was deleted.
    PodDeleted,
}

/// `Err(Error::Leadership)` when this replica's confirmed term as leader (`term`, `None`:
/// no leader election) is over: `command` must not be carried out.
fn within_term(term: Option<Instant>, command: &DatabaseCommand) -> Result<(), Error> {
    match term {
        Some(end) if Instant::now() >= end => Err(Error::Leadership {
            why: format!(
                "the term confirmed from the leader Lease ended {}ms before the step {}",
                Instant::now().duration_since(end).as_millis(),
                command.name()
            ),
        }),
        _ => Ok(()),
    }
}

/// Carries out one database command. `Err(Ok(..))`: the command failed on the member;
/// `Err(Err(..))`: deleting a pod failed (an API error, reported like any other).
async fn database_command<I: ClusterIo, M: Members>(
    io: &I,
    members: &M,
    cluster: &DatabaseCluster,
    command: &DatabaseCommand,
    term: Option<Instant>,
) -> Result<Done, Result<DatabaseFailure, Error>> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = command.name();
    // Dialled, then the term checked again (connecting may take seconds).
    let dial = |pod: &str| {
        let pod = pod.to_owned();
        async move {
            let db = members
                .dial(cluster, &pod, Purpose::Command)
                .await
                .map_err(|e| Ok(member_failure(&pod, name, &e)))?;
            crate::failpoint::hit(&format!("database-step:{name}"));
            within_term(term, command).map_err(Err)?;
            Ok::<_, Result<DatabaseFailure, Error>>(db)
        }
    };
    let server = |pod: &str, r: Result<(), DbError>| {
        r.map(|()| Done::Server)
            .map_err(|e| Ok(db_failure(pod, name, &e)))
    };
    let delete = |pod: String, grace: Option<u32>| {
        let namespace = namespace.clone();
        async move {
            io.delete_pod(&namespace, &pod, grace)
                .await
                .map(|_| Done::PodDeleted)
                .map_err(Err)
        }
    };
    match command {
        DatabaseCommand::StopPod { pod } => delete(pod.clone(), Some(FENCE_GRACE_SECONDS)).await,
        // A switchover's hard fence: end the sessions opened since the first fence (best
        // effort: the stop is what counts), then a clean shutdown within a short grace period.
        DatabaseCommand::StopServer { pod } => {
            match dial(pod).await {
                Ok(db) => {
                    if let Err(e) = db.fence().await {
                        tracing::info!(pod = %pod, error = %e, "ending sessions before the stop failed; stopping anyway");
                    }
                }
                Err(_) => {
                    tracing::info!(pod = %pod, "not reachable before the stop; stopping anyway")
                }
            }
            delete(pod.clone(), Some(STOP_SERVER_GRACE_SECONDS)).await
        }
        DatabaseCommand::Fence { pod } => server(pod, dial(pod).await?.fence().await),
        // A quarantined member keeps its data, stays read-only and stops replicating; its
        // label takes it out of both Services.
        DatabaseCommand::Quarantine { pod } => server(pod, dial(pod).await?.quarantine().await),
        // Promoting a primary only lifts its fence: the same call undoes one.
        DatabaseCommand::Promote { pod } | DatabaseCommand::Unfence { pod } => {
            server(pod, dial(pod).await?.promote().await)
        }
        DatabaseCommand::Follow {
            pod,
            source,
            rewind,
        } => match follow_by(cluster.spec.engine, *rewind) {
            FollowBy::Restart => delete(pod.clone(), None).await,
            FollowBy::Repoint { restart_if_refused } => {
                let port = database_operator_engine::of(cluster.spec.engine).port();
                // Over TLS that checks the source for its DNS name when both serve TLS (the
                // replica resolves the name); otherwise as the address resolver says, over TLS
                // when the source serves it (it may refuse plain connections).
                let followed = if members.both_serve_tls(cluster, pod, source) {
                    follow_checked(&dial(pod).await?, cluster, source).await
                } else {
                    let host = members
                        .host(cluster, source)
                        .map_err(|e| Ok(member_failure(pod, name, &e)))?;
                    let tls = if members.serves_tls(cluster, source) {
                        SourceTls::Encrypted
                    } else {
                        SourceTls::Plain
                    };
                    dial(pod).await?.follow(&host, port, &tls).await
                };
                match followed {
                    Err(e) if restart_if_refused && e.kind == DbErrorKind::NotSupported => {
                        delete(pod.clone(), None).await
                    }
                    other => server(pod, other),
                }
            }
        },
        DatabaseCommand::ReloadTls { pod } => server(pod, dial(pod).await?.reload_tls().await),
        // The source by the DNS name its certificate carries (the replica resolves it), the
        // authority from the replica's own volume.
        DatabaseCommand::SecureReplication { pod, source }
            if !members.both_serve_tls(cluster, pod, source) =>
        {
            // Their pods do not both mount the cluster's certificate (yet): nothing to check with.
            tracing::debug!(%pod, %source, "replication not secured: a pod without the cluster's certificate");
            Ok(Done::Server)
        }
        DatabaseCommand::SecureReplication { pod, source } => server(
            pod,
            follow_checked(&dial(pod).await?, cluster, source).await,
        ),
        DatabaseCommand::SetSemiSync { pod, enabled } => {
            server(pod, dial(pod).await?.set_semi_sync(*enabled).await)
        }
        DatabaseCommand::KeepMemberSlots { pod, slots } => {
            server(pod, dial(pod).await?.keep_member_slots(slots).await)
        }
        // Carried out by `passwords::password_command` (see `database_commands`): their outcome is
        // reported to the core, not as a failure.
        DatabaseCommand::SetPassword { .. } | DatabaseCommand::DiscardOldPassword { .. } => {
            Ok(Done::Server)
        }
    }
}

/// Points the replica behind `io` at `source` over TLS that checks the source's certificate: by
/// the DNS name it carries (the replica resolves it), with the authorities of the replica's own
/// volume.
async fn follow_checked<D: DatabaseIo>(
    io: &D,
    cluster: &DatabaseCluster,
    source: &str,
) -> Result<(), DbError> {
    let host = database_operator_core::tls::member_dns_name(
        &cluster.name_any(),
        &cluster.namespace().unwrap_or_default(),
        source,
    );
    let port = database_operator_engine::of(cluster.spec.engine).port();
    let tls = SourceTls::Checked {
        ca_file: database_operator_core::tls::replica_ca_file(),
    };
    io.follow(&host, port, &tls).await
}

/// What the database commands of a pass did.
#[derive(Default)]
pub(super) struct CommandsDone {
    /// Writes (deleted pods).
    pub(super) writes: usize,
    /// The command that failed on its member, if one did (the later ones were not tried).
    pub(super) failure: Option<DatabaseFailure>,
    /// The outcome of a password command, if one ran.
    pub(super) password: Option<PasswordOutcome>,
}

/// Carries out `commands` in order, stopping at the first that fails on its member. A password
/// command reports an outcome instead of failing (see [`passwords`]).
pub(super) async fn database_commands<I: ClusterIo, M: Members>(
    io: &I,
    members: &M,
    cluster: &DatabaseCluster,
    commands: &[DatabaseCommand],
    term: Option<Instant>,
) -> Result<CommandsDone, Error> {
    let mut done = CommandsDone::default();
    for command in commands {
        within_term(term, command)?;
        if command.is_password() {
            if let Some(outcome) = passwords::password_command(members, cluster, command).await {
                done.password = Some(outcome);
            }
            continue;
        }
        match database_command(io, members, cluster, command, term).await {
            Ok(result) => {
                tracing::info!(
                    step = ?command,
                    pod_deleted = matches!(result, Done::PodDeleted),
                    "database step carried out"
                );
                if matches!(result, Done::PodDeleted) {
                    done.writes += 1;
                }
            }
            Err(Ok(failure)) => {
                done.failure = Some(failure);
                return Ok(done);
            }
            Err(Err(error)) => return Err(error),
        }
    }
    Ok(done)
}
