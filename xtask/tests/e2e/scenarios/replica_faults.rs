//! The fault matrix's replica cells (docs/reliability.md): a replica's server frozen (SIGSTOP)
//! past `delaySeconds`, then killed (`kill -9`), under the writer and the two-writable monitor.
//! A replica's faults must cost the writer nothing beyond what the replication mode promises:
//! no failover, no lost row, the replica back and caught up afterwards. In sync mode the frozen
//! replica holds no commit longer than the mode's fallback: PostgreSQL's quorum (`ANY 1`) is
//! met by the other replica, MySQL/MariaDB's semi-synchronous wait ends at its timeout.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;

use crate::harness::{Ctx, lock};
use crate::scenarios::databases::{Engine, container_pid, members, pod_ip, sql};
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, process_group, rows_lost, running_with, signal_group,
    signal_tree, table,
};
use crate::util::{Check, api, wait_for};

/// How long the replica stays frozen: past the failover delay, so a wrong reading of it as a
/// lost primary would show.
const FROZEN: Duration = Duration::from_secs(DELAY_SECONDS + 10);

/// The longest write gap a replica's fault may cause: none in async mode (the writer's own
/// pauses and a loaded machine aside), the semi-synchronous timeout in sync mode (the rendered
/// configuration's, 10 s, once), with room.
fn gap_bound(sync: bool) -> Duration {
    if sync {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(3)
    }
}

/// The failover record's start, to tell a new record from an older one.
pub(crate) async fn last_failover(
    clusters: &Api<DatabaseCluster>,
    name: &str,
) -> Result<Option<String>> {
    let dbc = clusters.get(name).await?;
    Ok(dbc
        .status
        .and_then(|s| s.failover)
        .and_then(|f| f.last)
        .map(|l| format!("{:?} {}", l.kind, l.started.0)))
}

/// The replica's copy holds every row acknowledged so far.
pub(crate) async fn caught_up(
    engine: Engine,
    root: &std::path::PathBuf,
    password: &str,
    load: &Load,
    replica: &str,
    pods: &Api<Pod>,
) -> Result<Duration> {
    let started = Instant::now();
    wait_for(
        &format!("{replica} caught up with the writer's rows"),
        Duration::from_secs(60),
        async || {
            let pod = pods.get(replica).await?;
            let Ok(ip) = pod_ip(&pod) else {
                return Ok(Check::Pending("no IP".into()));
            };
            Ok(match rows_lost(load, engine, root, &ip, password).await {
                Ok((_, missing)) if missing.is_empty() => Check::Done(()),
                Ok((acked, missing)) => {
                    Check::Pending(format!("{} of {acked} missing", missing.len()))
                }
                Err(e) => Check::Pending(format!("{e:#}")),
            })
        },
    )
    .await?;
    Ok(started.elapsed())
}

async fn replica_faults(ctx: &Ctx, engine: Engine, sync: bool, suffix: &str) -> Result<()> {
    let mode = if sync { "sync" } else { "async" };
    let spec = format!("  replication:\n    mode: {mode}\n");
    let (env, ns, name, password, root) =
        running_with(ctx, engine, suffix, DELAY_SECONDS, &spec).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(60)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let pods: Api<Pod> = api(&env, &ns);
        let before = last_failover(&clusters, &name).await?;
        let (all, primary) = members(&env, &ns, &name).await?;
        let replica = all
            .iter()
            .find(|p| p.name_any() != primary.name_any())
            .context("no replica")?
            .clone();
        let replica_name = replica.name_any();
        let pid = container_pid(&replica, engine.server_container()).context("no server pid")?;
        let pgid = process_group(pid)?;

        // 1. Frozen past the failover delay: every process of the server (PostgreSQL's children
        // lead process groups of their own).
        signal_tree(pid, "-STOP")?;
        let frozen = Instant::now();
        ctx.step(format!("froze replica {replica_name} ({mode}) for {}s", FROZEN.as_secs()));
        tokio::time::sleep(FROZEN).await;
        let freeze_gap = lock(&load.writes).gap_after(frozen);
        signal_tree(pid, "-CONT")?;
        let catch_up = caught_up(engine, &root, &password, &load, &replica_name, &pods).await?;
        ctx.note(format!(
            "{engine:?} {mode}: replica {replica_name} frozen {}s: write gap {:.1}s, caught up {:.1}s after it resumed",
            FROZEN.as_secs(),
            freeze_gap.as_secs_f64(),
            catch_up.as_secs_f64()
        ));
        ensure!(
            freeze_gap <= gap_bound(sync),
            "a frozen replica cost the writer {:.1}s (bound {}s)",
            freeze_gap.as_secs_f64(),
            gap_bound(sync).as_secs()
        );

        // 2. Killed: its container restarts on the same volume.
        let killed = Instant::now();
        signal_group(pgid, "-KILL")?;
        ctx.step(format!("killed replica {replica_name}'s server (kill -9)"));
        wait_for(
            &format!("{replica_name}'s server restarted"),
            Duration::from_secs(60),
            async || {
                let pod = pods.get(&replica_name).await?;
                let restarted = container_pid(&pod, engine.server_container())
                    .is_some_and(|p| p != pid)
                    && crate::scenarios::process_nodes::ready(&pod);
                Ok(if restarted {
                    Check::Done(())
                } else {
                    Check::Pending("not Ready again".into())
                })
            },
        )
        .await?;
        let catch_up = caught_up(engine, &root, &password, &load, &replica_name, &pods).await?;
        let kill_gap = lock(&load.writes).gap_after(killed);
        ctx.note(format!(
            "{engine:?} {mode}: replica {replica_name} killed: write gap {:.1}s, Ready and caught up {:.1}s after the kill",
            kill_gap.as_secs_f64(),
            killed.elapsed().as_secs_f64().max(catch_up.as_secs_f64())
        ));
        ensure!(
            kill_gap <= gap_bound(sync),
            "a killed replica cost the writer {:.1}s (bound {}s)",
            kill_gap.as_secs_f64(),
            gap_bound(sync).as_secs()
        );

        // Nothing else happened: no failover, the same primary, no row lost.
        ensure!(
            last_failover(&clusters, &name).await? == before,
            "a replica's fault started a failover or switchover"
        );
        let now_primary = members(&env, &ns, &name).await?.1.name_any();
        ensure!(
            now_primary == primary.name_any(),
            "the primary moved from {} to {now_primary}",
            primary.name_any()
        );
        let primary_ip = pod_ip(&pods.get(&now_primary).await?)?;
        let (acked, lost) = rows_lost(&load, engine, &root, &primary_ip, &password).await?;
        ensure!(lost.is_empty(), "{} of {acked} acknowledged rows lost", lost.len());
        let count = sql(
            engine,
            &root,
            &primary_ip,
            &password,
            &format!("select count(*) from {}", table(engine)),
        )?;
        ctx.note(format!(
            "{engine:?} {mode}: {acked} rows acknowledged, none lost ({} in the table), no failover",
            count.trim()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// PostgreSQL, asynchronous: a replica frozen, then killed.
pub async fn postgresql_replica_freeze_and_kill(ctx: &Ctx) -> Result<()> {
    replica_faults(ctx, Engine::Postgresql, false, "rf-pg").await
}

/// MariaDB, synchronous (semi-synchronous): a replica frozen, then killed.
pub async fn mariadb_sync_replica_freeze_and_kill(ctx: &Ctx) -> Result<()> {
    replica_faults(ctx, Engine::Mariadb, true, "rf-mdb").await
}

/// PostgreSQL, synchronous: a replica frozen, then killed (the other standby is the
/// synchronous one meanwhile). A cell of the matrix run with `E2E_MATRIX=1`.
pub async fn postgresql_sync_replica_freeze_and_kill(ctx: &Ctx) -> Result<()> {
    replica_faults(ctx, Engine::Postgresql, true, "rf-pgs").await
}

/// MariaDB, asynchronous: a replica frozen, then killed (`E2E_MATRIX=1`).
pub async fn mariadb_replica_freeze_and_kill(ctx: &Ctx) -> Result<()> {
    replica_faults(ctx, Engine::Mariadb, false, "rf-mdba").await
}

/// MySQL, asynchronous: a replica frozen, then killed (`E2E_MATRIX=1`).
pub async fn mysql_replica_freeze_and_kill(ctx: &Ctx) -> Result<()> {
    replica_faults(ctx, Engine::Mysql, false, "rf-my").await
}

/// MySQL, synchronous (semi-synchronous): a replica frozen, then killed (`E2E_MATRIX=1`).
pub async fn mysql_sync_replica_freeze_and_kill(ctx: &Ctx) -> Result<()> {
    replica_faults(ctx, Engine::Mysql, true, "rf-mys").await
}
