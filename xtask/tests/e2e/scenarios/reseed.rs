//! A replica that fell further behind than the primary keeps WAL for it (the fault matrix's
//! "replica lag" cell, docs/reliability.md), then a reseed asked for by hand.
//!
//! A three-member PostgreSQL cluster on a 1Gi volume (so `max_slot_wal_keep_size` is 256MB and
//! `wal_keep_size` 128MB) under the writer: a replica is cut off from the primary (the
//! replication account may not log in and its WAL sender is ended, as for a replica away for a
//! long time), the primary writes WAL (`pg_switch_wal` and checkpoints) until its oldest WAL
//! segment starts after everything the replica can have received, then the replica may connect
//! again.
//!
//! Not a freeze (SIGSTOP) of the replica: PostgreSQL 15 then stalls the primary's checkpoint for
//! as long as the replica stays frozen, because the checkpoint that invalidates the slot waits
//! for its WAL sender to exit, and the sender, told to exit, blocks on a socket the frozen
//! replica no longer reads (seen here: a CHECKPOINT waiting over 80 s; docs/reliability.md). It can never stream again: the
//! operator must see that, seed it again from the primary on its own (status.failover.reseed,
//! `Automatic`), and the copy must hold every acknowledged row; nothing else may move (no
//! failover, no lost row, the writer not held up). Then `kubectl dbc reseed` asks for another
//! member, which is copied again the same way (`Requested`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::{DatabaseCluster, ReseedTrigger};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use xtask::cluster::workspace_root;

use crate::env::{Env, build_binary};
use crate::harness::{Ctx, lock};
use crate::scenarios::databases::{Engine, members, pod_ip, sql};
use crate::scenarios::failover::{DELAY_SECONDS, Load, follow_pods, rows_lost, running_sized};
use crate::scenarios::plugin::dbc;
use crate::scenarios::replica_faults::{caught_up, last_failover};
use crate::util::{Check, api, wait_for};

/// How long the operator may take from the replica's resumption to a new copy that streams.
const RESEED_TIMEOUT: Duration = Duration::from_secs(180);

/// An LSN (`X/Y`) as a number.
fn lsn(text: &str) -> Result<u64> {
    let (hi, lo) = text.trim().split_once('/').context("not an LSN")?;
    Ok((u64::from_str_radix(hi, 16)? << 32) | u64::from_str_radix(lo, 16)?)
}

/// Where the primary's oldest WAL segment starts.
fn oldest_wal(root: &std::path::PathBuf, ip: &str, password: &str) -> Result<u64> {
    let row = sql(
        Engine::Postgresql,
        root,
        ip,
        password,
        "select (select min(substr(name, 9)) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$') \
         || ' ' || pg_size_bytes(current_setting('wal_segment_size'))",
    )?;
    let (name, size) = row.split_once(' ').context("no WAL segment")?;
    let log = u64::from_str_radix(&name[..8], 16)?;
    let segment = u64::from_str_radix(&name[8..], 16)?;
    Ok((log << 32) | (segment * size.parse::<u64>()?))
}

/// `status.failover.reseed` once it is finished for `member` with `trigger`.
async fn reseeded(
    clusters: &Api<DatabaseCluster>,
    name: &str,
    member: &str,
    trigger: ReseedTrigger,
) -> Result<String> {
    wait_for(
        &format!("{member} seeded again ({trigger:?})"),
        RESEED_TIMEOUT,
        async || {
            let dbc = clusters.get(name).await?;
            let reseed = dbc.status.and_then(|s| s.failover).and_then(|f| f.reseed);
            Ok(match reseed {
                Some(r) if r.member == member && r.trigger == trigger && r.finished.is_some() => {
                    Check::Done(r.reason)
                }
                Some(r) => Check::Pending(format!(
                    "{} {:?} since {}, finished {:?}",
                    r.member, r.trigger, r.started.0, r.finished
                )),
                None => Check::Pending("no reseed in status".into()),
            })
        },
    )
    .await
}

/// The primary's pod name and IP, and the replicas' pod names in order.
async fn roles(env: &Env, ns: &str, name: &str) -> Result<(String, String, Vec<String>)> {
    let (all, primary) = members(env, ns, name).await?;
    let primary_name = primary.name_any();
    let mut replicas: Vec<String> = all
        .iter()
        .map(ResourceExt::name_any)
        .filter(|p| *p != primary_name)
        .collect();
    replicas.sort();
    ensure!(
        replicas.len() >= 2,
        "{name} has {} replicas",
        replicas.len()
    );
    Ok((primary_name, pod_ip(&primary)?, replicas))
}

pub async fn postgresql_replica_past_its_wal_is_reseeded(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) =
        running_sized(ctx, engine, "reseed-pg", DELAY_SECONDS, "", Some("1Gi")).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(60)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let pods: Api<Pod> = api(&env, &ns);
        let before = last_failover(&clusters, &name).await?;
        let (primary_name, primary_ip, replicas) = roles(&env, &ns, &name).await?;
        let (lagging, other) = (replicas[0].clone(), replicas[1].clone());
        let slot = format!("member_{}", lagging.rsplit('-').next().unwrap_or_default());

        // The replica streams through its own slot on the primary.
        wait_for(
            &format!("{lagging} streaming through slot {slot}"),
            Duration::from_secs(60),
            async || {
                let active = sql(
                    engine,
                    &root,
                    &primary_ip,
                    &password,
                    &format!(
                        "select coalesce((select active::text from pg_replication_slots where slot_name = '{slot}'), 'none')"
                    ),
                )?;
                Ok(if active == "true" {
                    Check::Done(())
                } else {
                    Check::Pending(format!("slot {slot}: {active}"))
                })
            },
        )
        .await?;

        // Cut off from the primary: the replication account may not log in for a while and the
        // replica's WAL sender is ended (the other replica's connection stays), as a replica
        // away for a long time. Then the primary writes WAL until it no longer has what the
        // replica needs. (Freezing the replica's processes instead stalls the primary: see above.)
        let cut = Instant::now();
        sql(
            engine,
            &root,
            &primary_ip,
            &password,
            "alter role replicator nologin",
        )?;
        sql(
            engine,
            &root,
            &primary_ip,
            &password,
            &format!(
                "select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = '{slot}' and active"
            ),
        )?;
        let at_most = lsn(&sql(
            engine,
            &root,
            &primary_ip,
            &password,
            "select pg_current_wal_lsn()",
        )?)?;
        ctx.step(format!(
            "cut {lagging} off the primary; it has at most {:X}/{:X}",
            at_most >> 32,
            at_most & 0xffff_ffff
        ));
        sql(
            engine,
            &root,
            &primary_ip,
            &password,
            "create table if not exists wal_filler (i int)",
        )?;
        let mut rounds = 0;
        while oldest_wal(&root, &primary_ip, &password)? <= at_most {
            ensure!(
                rounds < 40,
                "the primary still keeps the replica's WAL after {rounds} rounds"
            );
            sql(
                engine,
                &root,
                &primary_ip,
                &password,
                "do $$ begin for i in 1..8 loop insert into wal_filler values (i); perform pg_switch_wal(); end loop; end $$",
            )?;
            sql(engine, &root, &primary_ip, &password, "checkpoint")?;
            rounds += 1;
        }
        let slot_state = sql(
            engine,
            &root,
            &primary_ip,
            &password,
            &format!(
                "select coalesce((select wal_status from pg_replication_slots where slot_name = '{slot}'), 'gone')"
            ),
        )?;
        ctx.note(format!(
            "{lagging} cut off; the primary wrote {rounds}x8 WAL segments and checkpointed {:.1}s: its oldest WAL now starts after the replica's position; slot {slot}: {slot_state}",
            cut.elapsed().as_secs_f64()
        ));
        // Its account back: it asks for WAL the primary no longer has.
        sql(engine, &root, &primary_ip, &password, "alter role replicator login")?;
        let resumed = Instant::now();
        ctx.step(format!("{lagging} may connect again: it cannot stream any more"));

        let reason = reseeded(&clusters, &name, &lagging, ReseedTrigger::Automatic).await?;
        let took = resumed.elapsed();
        let catch_up = caught_up(engine, &root, &password, &load, &lagging, &pods).await?;
        ctx.note(format!(
            "{lagging} reseeded automatically {:.1}s after it resumed ({reason}); every acknowledged row there {:.1}s later",
            took.as_secs_f64(),
            catch_up.as_secs_f64()
        ));
        let gap = lock(&load.writes).gap_after(cut);
        ensure!(
            gap <= Duration::from_secs(3),
            "the lagging replica and its reseed held the writer up {:.1}s",
            gap.as_secs_f64()
        );

        // By hand: kubectl dbc reseed the other replica.
        let bin = tokio::task::spawn_blocking(|| {
            build_binary(&workspace_root(), "kubectl-dbc", "kubectl-dbc")
        })
        .await??;
        let asked = Instant::now();
        let out = tokio::task::spawn_blocking({
            let (bin, kubeconfig, ns, name, other) = (
                bin.clone(),
                env.cluster.kubeconfig().to_path_buf(),
                ns.clone(),
                name.clone(),
                other.clone(),
            );
            move || dbc(&bin, &kubeconfig, &ns, &["reseed", &name, &other, "--timeout", "3m"])
        })
        .await??;
        ensure!(out.contains("seeded again"), "kubectl dbc reseed said: {out}");
        reseeded(&clusters, &name, &other, ReseedTrigger::Requested).await?;
        let catch_up = caught_up(engine, &root, &password, &load, &other, &pods).await?;
        ctx.note(format!(
            "kubectl dbc reseed {other}: done {:.1}s after the request, caught up {:.1}s later",
            asked.elapsed().as_secs_f64(),
            catch_up.as_secs_f64()
        ));
        // A request for the primary is refused before anything is written.
        let refused = tokio::task::spawn_blocking({
            let (bin, kubeconfig, ns, name, primary) = (
                bin,
                env.cluster.kubeconfig().to_path_buf(),
                ns.clone(),
                name.clone(),
                primary_name.clone(),
            );
            move || dbc(&bin, &kubeconfig, &ns, &["reseed", &name, &primary])
        })
        .await?;
        ensure!(
            refused.as_ref().is_err_and(|e| format!("{e:#}").contains("is the primary")),
            "a reseed of the primary was not refused: {refused:?}"
        );

        // Nothing else moved.
        ensure!(
            last_failover(&clusters, &name).await? == before,
            "a reseed started a failover or switchover"
        );
        let now_primary = members(&env, &ns, &name).await?.1.name_any();
        ensure!(now_primary == primary_name, "the primary moved to {now_primary}");
        let (acked, lost) = rows_lost(&load, engine, &root, &primary_ip, &password).await?;
        ensure!(lost.is_empty(), "{} of {acked} acknowledged rows lost", lost.len());
        let gap = lock(&load.writes).gap_after(cut);
        ctx.note(format!(
            "{acked} rows acknowledged, none lost; longest write gap since the cut {:.1}s; no failover",
            gap.as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// The MariaDB cell (registered with `E2E_MATRIX=1`, a command of its own: `E2E_MATRIX=1 cargo
/// xtask e2e mariadb_replica_past_its_binary_logs_is_reseeded`): a replica's receiving thread
/// stopped while the primary purges the binary logs it needs; started again, its source refuses
/// it with error 1236, and the operator
/// must reseed it on its own (a consistent dump of the primary), with every acknowledged row.
pub async fn mariadb_replica_past_its_binary_logs_is_reseeded(ctx: &Ctx) -> Result<()> {
    past_binary_logs(ctx, Engine::Mariadb, "reseed-mdb").await
}

/// The same for MySQL (`E2E_MATRIX=1`): the copy is a clone of the primary.
pub async fn mysql_replica_past_its_binary_logs_is_reseeded(ctx: &Ctx) -> Result<()> {
    past_binary_logs(ctx, Engine::Mysql, "reseed-my").await
}

async fn past_binary_logs(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) =
        running_sized(ctx, engine, suffix, DELAY_SECONDS, "", None).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(60)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let pods: Api<Pod> = api(&env, &ns);
        let before = last_failover(&clusters, &name).await?;
        let (_, primary_ip, replicas) = roles(&env, &ns, &name).await?;
        let lagging = replicas[0].clone();
        let lagging_ip = pod_ip(&pods.get(&lagging).await?)?;
        let on_primary = |text: &str| sql(engine, &root, &primary_ip, &password, text);

        let on_lagging = |text: &str| sql(engine, &root, &lagging_ip, &password, text);
        let (stop, start) = match engine {
            Engine::Mysql => ("stop replica io_thread", "start replica io_thread"),
            _ => ("stop slave io_thread", "start slave io_thread"),
        };
        // Its receiving stopped (the operator leaves a replica that names the primary alone).
        let cut = Instant::now();
        on_lagging(stop)?;
        ctx.step(format!("stopped {lagging}'s receiving thread"));
        // Writes it will need, then the logs that hold them purged.
        tokio::time::sleep(Duration::from_secs(3)).await;
        on_primary("flush binary logs")?;
        on_primary("flush binary logs")?;
        // PURGE ... BEFORE compares file times in whole seconds: the logs just closed are older
        // than now only a second later.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        on_primary("purge binary logs before now()")?;
        let logs = on_primary("show binary logs")?;
        ctx.note(format!(
            "purged the primary's binary logs; left: {}",
            logs.lines().count()
        ));
        on_lagging(start)?;
        let resumed = Instant::now();
        ctx.step(format!("{lagging} may connect again: its source no longer has its binary logs"));

        let reason = reseeded(&clusters, &name, &lagging, ReseedTrigger::Automatic).await?;
        let took = resumed.elapsed();
        let catch_up = caught_up(engine, &root, &password, &load, &lagging, &pods).await?;
        ctx.note(format!(
            "{lagging} reseeded automatically {:.1}s after it could connect again ({reason}); every acknowledged row there {:.1}s later",
            took.as_secs_f64(),
            catch_up.as_secs_f64()
        ));
        ensure!(
            last_failover(&clusters, &name).await? == before,
            "a reseed started a failover or switchover"
        );
        let (acked, lost) = rows_lost(&load, engine, &root, &primary_ip, &password).await?;
        ensure!(lost.is_empty(), "{} of {acked} acknowledged rows lost", lost.len());
        let gap = lock(&load.writes).gap_after(cut);
        ensure!(
            gap <= Duration::from_secs(3),
            "the cut-off replica and its reseed held the writer up {:.1}s",
            gap.as_secs_f64()
        );
        ctx.note(format!(
            "{acked} rows acknowledged, none lost; longest write gap since the cut {:.1}s; no failover",
            gap.as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}
