//! The PostgreSQL hung-primary scenario's further proofs: a replica made to lag is never
//! chosen while a more advanced one answers (issue 14, done-when 3), and an operator SIGKILLed
//! in the middle of a failover finishes it after restart without two writable primaries at any
//! moment (done-when 6; the monitor of [`super::Load`] polls every member throughout).

use super::*;

/// A replica made to lag: its WAL receiver stopped, the writer ahead of it.
pub(super) struct Lagging {
    pub(super) pod: String,
    /// Its WAL receiver's pid (SIGSTOPped).
    pub(super) receiver: u32,
    /// Bytes of WAL it had received when the primary was frozen, and the other replica.
    pub(super) received: u64,
    pub(super) ahead: u64,
}

/// The parent of process `pid`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The pid of the WAL receiver among the descendants of the container's main process `pid`
/// (PostgreSQL's children each start their own session, so the process group does not find
/// them).
fn wal_receiver(pid: u32) -> Result<Option<u32>> {
    for entry in std::fs::read_dir("/proc")? {
        let Ok(p) = entry?.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut up = parent(p);
        let mut descends = false;
        for _ in 0..4 {
            match up {
                Some(a) if a == pid => {
                    descends = true;
                    break;
                }
                Some(a) if a > 1 => up = parent(a),
                _ => break,
            }
        }
        if !descends {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("walreceiver") {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Bytes of WAL the PostgreSQL server on `ip` has received (a standby).
fn received_bytes(root: &PathBuf, ip: &str, password: &str) -> Result<u64> {
    let out = sql(
        Engine::Postgresql,
        root,
        ip,
        password,
        "select pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::bigint",
    )?;
    out.trim().parse().context("received bytes")
}

/// Stops the WAL receiver of the replica that would win a tie (the lowest ordinal) while the
/// writer goes on, until the other replica has received more.
pub(super) async fn make_a_replica_lag(
    ctx: &Ctx,
    env: &Env,
    root: &PathBuf,
    password: &str,
    ns: &str,
    name: &str,
    load: &Load,
) -> Result<Lagging> {
    let pods: Api<Pod> = api(env, ns);
    let mut replicas: Vec<Pod> = pods
        .list(&ListParams::default().labels(&format!(
            "database.example.com/cluster={name},{ROLE_LABEL}=replica"
        )))
        .await?
        .items;
    replicas.sort_by_key(|p| p.name_any());
    let [first, second] = replicas.as_slice() else {
        bail!("{} replicas, expected 2", replicas.len());
    };
    let pid =
        container_pid(first, Engine::Postgresql.server_container()).context("no server pid")?;
    let receiver = wait_for(
        &format!("the WAL receiver of {}", first.name_any()),
        Duration::from_secs(30),
        async || {
            Ok(match wal_receiver(pid)? {
                Some(p) => Check::Done(p),
                None => Check::Pending("no walreceiver process".into()),
            })
        },
    )
    .await?;
    let status = std::process::Command::new("kill")
        .args(["-STOP", &receiver.to_string()])
        .status()?;
    ensure!(status.success(), "kill -STOP {receiver} failed");
    let stopped = Instant::now();
    let (first_ip, second_ip) = (pod_ip(first)?, pod_ip(second)?);
    let (received, ahead) = wait_for(
        "the other replica ahead",
        Duration::from_secs(30),
        async || {
            let acked = lock(&load.writes)
                .acked
                .iter()
                .filter(|(_, at, _)| *at > stopped)
                .count();
            let lag = received_bytes(root, &first_ip, password)?;
            let other = received_bytes(root, &second_ip, password)?;
            Ok(if acked >= 20 && other > lag {
                Check::Done((lag, other))
            } else {
                Check::Pending(format!("{acked} rows since, received {lag} vs {other}"))
            })
        },
    )
    .await?;
    ctx.step(format!(
        "stopped the WAL receiver of {} (pid {receiver}): it received {received} bytes of WAL, {} has {ahead}",
        first.name_any(),
        second.name_any()
    ));
    Ok(Lagging {
        pod: first.name_any(),
        receiver,
        received,
        ahead,
    })
}

/// SIGKILLs the shared operator once the failover is past `Detecting` (the old primary's pod
/// stopped, nothing promoted yet or promoting), then starts it again: the new process must
/// finish the failover from `status.failover` alone (the monitor checks that no two members
/// are writable at any moment).
pub(super) async fn kill_the_operator_mid_failover(
    ctx: &Ctx,
    env: &Arc<Env>,
    ns: &str,
    name: &str,
) -> Result<()> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let phase = wait_for("the failover in progress", FAILOVER_TIMEOUT, async || {
        let dbc = clusters.get(name).await?;
        let op = dbc
            .status
            .as_ref()
            .and_then(|s| s.failover.as_ref())
            .and_then(|f| f.operation.clone());
        Ok(match op {
            Some(op) if op.phase != FailoverPhase::Detecting => Check::Done(op.phase),
            other => Check::Pending(format!("{:?}", other.map(|o| o.phase))),
        })
    })
    .await?;
    let pid = env
        .kill_main_operator()
        .context("the shared operator does not run")?;
    let killed = Instant::now();
    ctx.step(format!(
        "SIGKILLed the operator (pid {pid}) in phase {phase:?}"
    ));
    ctx.operator().await?;
    ctx.note(format!(
        "operator killed during {phase:?}, a new one ready {:.1}s later",
        killed.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Resumes the lagging replica's WAL receiver once a candidate was chosen (it must follow the
/// new primary for the failover to complete).
pub(super) async fn resume_once_chosen(
    ctx: &Ctx,
    env: &Env,
    ns: &str,
    name: &str,
    from: &str,
    lagging: &Lagging,
) -> Result<()> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let to = wait_for("a candidate chosen", FAILOVER_TIMEOUT, async || {
        let dbc = clusters.get(name).await?;
        let failover = dbc.status.as_ref().and_then(|s| s.failover.clone());
        let chosen = failover
            .as_ref()
            .and_then(|f| f.operation.as_ref())
            .and_then(|o| o.to.clone());
        let done = failover
            .as_ref()
            .and_then(|f| f.last.as_ref())
            .filter(|l| l.from == from)
            .and_then(|l| l.to.clone());
        Ok(match chosen.or(done) {
            Some(to) => Check::Done(to),
            None => Check::Pending("no candidate chosen yet".into()),
        })
    })
    .await?;
    let status = std::process::Command::new("kill")
        .args(["-CONT", &lagging.receiver.to_string()])
        .status()?;
    ensure!(status.success(), "kill -CONT {} failed", lagging.receiver);
    ctx.step(format!(
        "{to} chosen; resumed the WAL receiver of {}",
        lagging.pod
    ));
    Ok(())
}
