//! `spec.failover.nodeLoss: SelfFence` with synchronous replication, on each engine: every
//! member runs the `member-agent` sidecar, and the primary's renews the Lease `<name>-primary`.
//!
//! 1. The agent renews: the Lease names the primary and its `renewTime` moves.
//! 2. The agent of the primary is frozen (SIGSTOP) for longer than half the lease: woken, it
//!    makes its server read-only before anything else (the writer is refused, "read-only"),
//!    renews, and the operator gives the writes back to the same primary (no failover).
//! 3. The primary's process node is powered off. Nobody marks it out of service: the operator
//!    sees the Lease go unrenewed for the lease plus its margin, counts the old primary as
//!    fenced by its agent, and promotes a replica. The write gap must stay within
//!    `delaySeconds + 10 s`; no acknowledged row is lost (sync).
//! 4. The node powered on again, the old primary rejoins as a replica.
//!
//! [`power_cut_round`] (steps 3 and 4) is also the round of the node-loss bench
//! (`FAILOVER_BENCH_CUT=power`).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use super::lost_node::{node_of_primary_alone, set_power};
use super::sync::{SYNC, wait_sync};
use super::*;

/// `spec.failover.leaseSeconds` of the scenario's cluster.
const LEASE_SECONDS: u64 = 6;

/// The spec lines of a self-fencing cluster with sync replication; `lease_seconds` `None` keeps
/// the default lease.
pub(super) fn spec_lines(lease_seconds: Option<u64>) -> String {
    let lease = lease_seconds.map_or(String::new(), |s| format!("    leaseSeconds: {s}\n"));
    format!("    nodeLoss: SelfFence\n{lease}{SYNC}")
}

/// The Lease's `renewTime`, after checking that it names `holder`.
async fn renew_time(leases: &Api<Lease>, name: &str, holder: &str) -> Result<Option<Timestamp>> {
    let lease = leases.get(name).await?;
    let spec = lease.spec.unwrap_or_default();
    ensure!(
        spec.holder_identity.as_deref() == Some(holder),
        "Lease {name} names {:?}, the primary is {holder}",
        spec.holder_identity
    );
    Ok(spec.renew_time.map(|t| t.0))
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill {sig} {pid} failed");
    Ok(())
}

/// See the module documentation (PostgreSQL).
pub async fn postgresql_lost_node_self_fences(ctx: &Ctx) -> Result<()> {
    lost_node_self_fences(ctx, Engine::Postgresql, "fence-pg").await
}

/// See the module documentation (MariaDB: the agent fences with `read_only`, semi-sync).
pub async fn mariadb_lost_node_self_fences(ctx: &Ctx) -> Result<()> {
    lost_node_self_fences(ctx, Engine::Mariadb, "fence-maria").await
}

/// See the module documentation (MySQL 9.7: `super_read_only`, semi-sync, GTID election).
pub async fn mysql_lost_node_self_fences(ctx: &Ctx) -> Result<()> {
    lost_node_self_fences(ctx, Engine::Mysql, "fence-mysql").await
}

async fn lost_node_self_fences(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) = running_with(
        ctx,
        engine,
        suffix,
        DELAY_SECONDS,
        &spec_lines(Some(LEASE_SECONDS)),
    )
    .await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let mut stopped_agent: Option<u32> = None;
    let result = async {
        let first = primary_pod(&env, &ns, &name).await?;
        let first_name = first.name_any();
        let first_ip = pod_ip(&first)?;
        load.first_rows(Duration::from_secs(30)).await?;
        let state = wait_sync(engine, &root, &password, &first_name, &first_ip).await?;
        ctx.step(format!("sync in effect on {first_name}: {state}"));

        // 1. The primary's agent renews its Lease.
        let leases: Api<Lease> = api(&env, &ns);
        let lease_name = format!("{name}-primary");
        let before = renew_time(&leases, &lease_name, &first_name).await?;
        let renewed = wait_for("a renewal of the primary Lease", Duration::from_secs(20), async || {
            let now = renew_time(&leases, &lease_name, &first_name).await?;
            Ok(if now.is_some() && now != before {
                Check::Done(now)
            } else {
                Check::Pending(format!("renewTime {now:?}"))
            })
        })
        .await?;
        ctx.step(format!("Lease {lease_name} held by {first_name}, renewed ({before:?} -> {renewed:?})"));

        // 2. The agent frozen beyond half the lease fences its server when it wakes; the
        // operator gives the writes back.
        let agent_pid = container_pid(&first, "member-agent").context("no member-agent pid")?;
        signal(agent_pid, "-STOP")?;
        stopped_agent = Some(agent_pid);
        tokio::time::sleep(Duration::from_secs(LEASE_SECONDS / 2 + 2)).await;
        signal(agent_pid, "-CONT")?;
        stopped_agent = None;
        let woken = Instant::now();
        let refused = wait_for("the writer refused by the self-fenced primary", Duration::from_secs(20), async || {
            let writes = lock(&load.writes);
            Ok(match writes.errors.iter().find(|(at, ip, line)| *at >= woken && ip == &first_ip && line.contains("read-only")) {
                Some((at, _, line)) => Check::Done((*at, line.clone())),
                None => Check::Pending(format!("{} errors since", writes.errors.iter().filter(|(at, _, _)| *at >= woken).count())),
            })
        })
        .await?;
        wait_for("writes back on the same primary", Duration::from_secs(30), async || {
            let n = lock(&load.writes).acked_on(&first_ip, refused.0);
            Ok(if n >= 5 { Check::Done(()) } else { Check::Pending(format!("{n} rows")) })
        })
        .await?;
        let still = primary_pod(&env, &ns, &name).await?;
        ensure!(still.name_any() == first_name, "the primary moved to {} after the agent's fence", still.name_any());
        let fence_gap = lock(&load.writes).gap_after(woken);
        ctx.note(format!(
            "self-fence: the agent frozen {}s fenced {first_name} on waking ({}); writes back after a {:.1}s gap, no failover",
            LEASE_SECONDS / 2 + 2,
            refused.1.trim(),
            fence_gap.as_secs_f64()
        ));

        // 3. The primary's node powered off: a failover without anyone marking the node;
        // 4. powered on again: the old primary rejoins as a replica.
        let cut = power_cut_round(ctx, &env, engine, &ns, &name, &password, &root, &load).await?;
        ensure!(
            cut.gap <= Duration::from_secs(DELAY_SECONDS + 10),
            "write gap {:.1}s over the budget of delaySeconds + 10 s",
            cut.gap.as_secs_f64()
        );
        ensure!(cut.lost == 0, "the self-fenced failover lost {} of {} acknowledged rows in sync mode", cut.lost, cut.acked);
        ctx.note(format!(
            "{engine:?} self-fence lost node: {} -> {} without an administrator; write gap {:.1}s (delaySeconds {DELAY_SECONDS}, leaseSeconds {LEASE_SECONDS}); {} rows acknowledged, none lost (sync); {} back as a replica {:.1}s after power-on",
            cut.from,
            cut.to,
            cut.gap.as_secs_f64(),
            cut.acked,
            cut.from,
            cut.rejoin.as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Some(pid) = stopped_agent {
        let _ = signal(pid, "-CONT");
    }
    load.finish_checked(pods_task, result)
}

/// What one power cut of the primary's node measured ([`power_cut_round`]).
pub(super) struct PowerCut {
    pub(super) from: String,
    pub(super) to: String,
    /// The longest time between two acknowledged rows from the cut on.
    pub(super) gap: Duration,
    /// From the cut to the failover recorded as completed.
    pub(super) completed: Duration,
    /// Rows the writer saw acknowledged so far, and how many of them the new primary lacks.
    pub(super) acked: usize,
    pub(super) lost: usize,
    /// From the power-on to the old primary Ready and read-only, labelled replica.
    pub(super) rejoin: Duration,
}

/// Powers off the process node of the current primary of a `nodeLoss: SelfFence` cluster
/// (checking that no other member runs there), waits for the failover that counts on the
/// expired Lease (the record must say so) and for the writer on the new primary, counts the
/// acknowledged rows the new primary lacks, checks that the new primary's agent holds the
/// Lease, then powers the node on and waits for the old primary to rejoin as a replica. The
/// node is powered on again whatever fails.
#[allow(clippy::too_many_arguments)]
pub(super) async fn power_cut_round(
    ctx: &Ctx,
    env: &Env,
    engine: Engine,
    ns: &str,
    name: &str,
    password: &str,
    root: &PathBuf,
    load: &Load,
) -> Result<PowerCut> {
    let first = primary_pod(env, ns, name).await?;
    let first_name = first.name_any();
    let node = node_of_primary_alone(env, ns, name, &first).await?;
    // The old primary's agent dies with its node: a renewal stamped after this moment can only
    // be the new primary's agent's.
    let cut_wall = Timestamp::now();
    set_power(env, &node, false)?;
    let cut = Instant::now();
    ctx.step(format!(
        "powered off {node}, the node of primary {first_name}"
    ));
    let failed_over = async {
        let (record, new_name, new_ip) = serving_after(
            env,
            ns,
            name,
            load,
            FailoverKind::Failover,
            &first_name,
            cut,
            Duration::from_secs(90),
        )
        .await?;
        let completed = cut.elapsed();
        let gap = lock(&load.writes).gap_after(cut);
        ensure!(
            record.reason.contains("Lease"),
            "the failover does not say it counted on the lease: {}",
            record.reason
        );
        let (acked, lost) = rows_lost(load, engine, root, &new_ip, password).await?;
        let leases: Api<Lease> = api(env, ns);
        let lease_name = format!("{name}-primary");
        wait_for(
            &format!("Lease {lease_name} held by {new_name} and renewed after the cut"),
            Duration::from_secs(30),
            async || {
                Ok(match renew_time(&leases, &lease_name, &new_name).await {
                    Ok(Some(t)) if t > cut_wall => Check::Done(t),
                    other => Check::Pending(format!("{other:?}")),
                })
            },
        )
        .await?;
        Ok::<_, anyhow::Error>((new_name, gap, completed, acked, lost.len()))
    }
    .await;
    // Whatever failed, the shared cluster gets its node back.
    let powered_on = set_power(env, &node, true);
    let (to, gap, completed, acked, lost) = failed_over?;
    powered_on?;
    let on = Instant::now();
    ctx.step(format!("powered {node} on again"));
    let role = rejoined(env, engine, root, password, ns, &first_name).await?;
    ensure!(role == "replica", "{first_name} came back as {role}");
    Ok(PowerCut {
        from: first_name,
        to,
        gap,
        completed,
        acked,
        lost,
        rejoin: on.elapsed(),
    })
}
