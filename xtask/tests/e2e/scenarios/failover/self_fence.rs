//! `spec.failover.nodeLoss: SelfFence` on PostgreSQL with synchronous replication: every
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

use k8s_openapi::api::coordination::v1::Lease;

use super::lost_node::set_power;
use super::sync::{SYNC, nothing_lost, wait_sync};
use super::*;

/// `spec.failover.leaseSeconds` of the scenario's cluster.
const LEASE_SECONDS: u64 = 6;

fn spec_lines() -> String {
    format!("    nodeLoss: SelfFence\n    leaseSeconds: {LEASE_SECONDS}\n{SYNC}")
}

async fn renew_time(leases: &Api<Lease>, name: &str, holder: &str) -> Result<Option<String>> {
    let lease = leases.get(name).await?;
    let spec = lease.spec.unwrap_or_default();
    ensure!(
        spec.holder_identity.as_deref() == Some(holder),
        "Lease {name} names {:?}, the primary is {holder}",
        spec.holder_identity
    );
    Ok(spec.renew_time.map(|t| t.0.to_string()))
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill {sig} {pid} failed");
    Ok(())
}

/// See the module documentation.
pub async fn postgresql_lost_node_self_fences(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) =
        running_with(ctx, engine, "fence-pg", DELAY_SECONDS, &spec_lines()).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let mut powered_off: Option<String> = None;
    let mut stopped_agent: Option<u32> = None;
    let result = async {
        let first = primary_pod(&env, &ns, &name).await?;
        let first_name = first.name_any();
        let first_ip = pod_ip(&first)?;
        wait_for("the writer's first rows", Duration::from_secs(30), async || {
            let n = lock(&load.writes).acked.len();
            Ok(if n >= 10 { Check::Done(()) } else { Check::Pending(format!("{n} rows")) })
        })
        .await?;
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

        // 3. The primary's node powered off: a failover without anyone marking the node.
        let node = first.spec.as_ref().and_then(|s| s.node_name.clone()).context("the primary has no node")?;
        let pods: Api<Pod> = api(&env, &ns);
        let sharing: Vec<String> = pods
            .list(&ListParams::default().labels(&format!("database.example.com/cluster={name}")))
            .await?
            .items
            .iter()
            .filter(|p| p.name_any() != first_name)
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
            .map(|p| p.name_any())
            .collect();
        ensure!(sharing.is_empty(), "{sharing:?} run on {node} with the primary: the scenario needs the replicas elsewhere");
        set_power(&env, &node, false)?;
        powered_off = Some(node.clone());
        let cut = Instant::now();
        ctx.step(format!("powered off {node}, the node of primary {first_name}"));
        let (record, new_name, new_ip) = serving_after(&env, &ns, &name, &load, FailoverKind::Failover, &first_name, cut, Duration::from_secs(60)).await?;
        let gap = lock(&load.writes).gap_after(cut);
        ensure!(
            record.reason.contains("Lease"),
            "the failover does not say it counted on the lease: {}",
            record.reason
        );
        ensure!(
            gap <= Duration::from_secs(DELAY_SECONDS + 10),
            "write gap {:.1}s over the budget of delaySeconds + 10 s",
            gap.as_secs_f64()
        );
        let acked = nothing_lost(engine, &root, &password, &load, &new_ip, "the self-fenced failover")?;
        ctx.note(format!(
            "self-fence lost node: {first_name} -> {new_name} without an administrator; write gap {:.1}s (delaySeconds {DELAY_SECONDS}, leaseSeconds {LEASE_SECONDS}); {acked} rows acknowledged, none lost (sync)",
            gap.as_secs_f64()
        ));
        renew_time(&leases, &lease_name, &new_name).await?;

        // 4. Powered on again: the old primary rejoins as a replica.
        set_power(&env, &node, true)?;
        powered_off = None;
        ctx.step(format!("powered {node} on again"));
        let role = rejoined(&env, engine, &root, &password, &ns, &first_name).await?;
        ensure!(role == "replica", "{first_name} came back as {role}");
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Some(pid) = stopped_agent {
        let _ = signal(pid, "-CONT");
    }
    if let Some(node) = powered_off {
        // Whatever failed, the shared cluster gets its node back.
        let _ = set_power(&env, &node, true);
    }
    load.finish_checked(pods_task, result)
}
