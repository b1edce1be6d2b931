//! Issue 34, item 6: an operator that stalls after writing a status and before its database
//! step (a pause as long as a garbage collection gone wrong, a frozen node, a network cut that
//! heals) never carries the step out once another replica has taken the lead. The step is
//! made to be a harmful one: by the time the stalled replica wakes, the member it was about to
//! promote is a replica of another primary, so promoting it would make two writable members.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::failover::FailoverOutcome;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use rustix::process::Signal;

use crate::harness::Ctx;
use crate::scenarios::databases::{Engine, pod_ip, sql};
use crate::scenarios::failover::{
    DELAY_SECONDS, FAILOVER_TIMEOUT, Load, follow_pods, primary_pod, running_with,
};
use crate::scenarios::operator::{holds, lease_namespace, lease_state, wait_holds};
use crate::util::{Check, api, wait_for};

/// Asks for a switchover to `to` by annotation.
pub(crate) async fn switch_to(clusters: &Api<DatabaseCluster>, name: &str, to: &str) -> Result<()> {
    let key = database_operator_api::SWITCHOVER_ANNOTATION;
    let patch = serde_json::json!({"metadata": {"annotations": {key: to}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Waits until the switchover to `to` completed (`status.failover.last`).
pub(crate) async fn switched_to(
    clusters: &Api<DatabaseCluster>,
    name: &str,
    to: &str,
) -> Result<()> {
    wait_for(
        &format!("the switchover to {to} to complete"),
        FAILOVER_TIMEOUT,
        async || {
            let dbc = clusters.get(name).await?;
            let failover = dbc.status.as_ref().and_then(|s| s.failover.as_ref());
            let last = failover.and_then(|f| f.last.as_ref());
            Ok(match last {
                Some(l)
                    if l.to.as_deref() == Some(to) && l.outcome == FailoverOutcome::Completed =>
                {
                    Check::Done(())
                }
                other => Check::Pending(format!(
                    "operation {:?}, last {:?}",
                    failover.and_then(|f| f.operation.as_ref()).map(|o| o.phase),
                    other.map(|l| (l.outcome, l.to.clone()))
                )),
            })
        },
    )
    .await
}

/// Two operators with leader election; the leader (`stall`) stops itself (SIGSTOP, a
/// failpoint) right before it promotes a switchover's target, its status already written. The
/// standby takes the Lease, completes that switchover and a second one to the third member;
/// then the stalled one is woken. It must not promote its old target (a replica by then): the
/// monitor sees no two writable members, the old target stays in recovery, and the stalled
/// replica's log says why it took no step.
pub async fn postgresql_stalled_leader_takes_no_database_step(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    // A cluster of its own (the spec line only makes it new: async is the default).
    let (_, ns, name, password, root) = running_with(
        ctx,
        engine,
        "stall-pg",
        DELAY_SECONDS,
        "  replication:\n    mode: async\n",
    )
    .await?;
    let env = ctx.without_shared_operator().await?;
    let lease_ns = lease_namespace(ctx, &env, "stall-lease").await?;
    let lease_name = "database-operator";
    let args = [
        "--leader-elect=true",
        "--webhook=false",
        "--lease-namespace",
        lease_ns.as_str(),
        "--lease-name",
        lease_name,
        "--lease-duration",
        "10s",
    ];
    let leases: Api<Lease> = api(&env, &lease_ns);
    let stalling = ctx
        .start_operator_with_env(
            "stall",
            &args,
            &[("DATABASE_OPERATOR_FAILPOINTS", "database-step:promote=stop")],
        )
        .await?;
    wait_holds(&leases, lease_name, &stalling, Duration::from_secs(30)).await?;
    let standby = ctx.start_operator("standby", &args).await?;
    ctx.step("operator stall holds the Lease (failpoint before a promotion); standby waits");

    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let old = primary_pod(&env, &ns, &name).await?.name_any();
        let members: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
        let others: Vec<&String> = members.iter().filter(|m| **m != old).collect();
        let (first, second) = (others[0].clone(), others[1].clone());
        switch_to(&clusters, &name, &first).await?;
        ctx.step(format!("switchover {old} -> {first} requested"));
        wait_for(
            "operator stall to stop itself before the promotion",
            FAILOVER_TIMEOUT,
            async || {
                Ok(if stalling.is_stopped() {
                    Check::Done(())
                } else {
                    Check::Pending("running".into())
                })
            },
        )
        .await?;
        let stalled = Instant::now();
        ctx.step(format!(
            "operator stall stopped (SIGSTOP) with its promotion of {first} pending"
        ));
        switched_to(&clusters, &name, &first).await?;
        let (holder, _, _) = lease_state(&leases, lease_name).await?;
        ensure!(
            holds(holder.as_deref(), &standby),
            "the switchover completed, but the Lease is held by {holder:?}, not by the standby"
        );
        ctx.note(format!(
            "the standby took the Lease and completed the switchover to {first} {:.1}s after the leader stalled",
            stalled.elapsed().as_secs_f64()
        ));
        let pods: Api<Pod> = api(&env, &ns);
        let first_ip_then = pod_ip(&pods.get(&first).await?)?;
        switch_to(&clusters, &name, &second).await?;
        switched_to(&clusters, &name, &second).await?;
        // The switchover stopped `first`'s server; wake the stalled replica only once `first`
        // answers again as a replica, so that its stale promotion would reach a live server.
        let first_ip = wait_for(
            &format!("{first} back as a replica"),
            FAILOVER_TIMEOUT,
            async || {
                let ip = pod_ip(&pods.get(&first).await?)?;
                Ok(
                    match sql(engine, &root, &ip, &password, "select pg_is_in_recovery()") {
                        Ok(v) if v.trim() == "t" => Check::Done(ip),
                        other => Check::Pending(format!("{ip}: {other:?}")),
                    },
                )
            },
        )
        .await?;
        ctx.step(format!(
            "then {first} -> {second}: {first} is a replica again ({first_ip}; {first_ip_then} when the leader stalled)"
        ));

        stalling.signal(Signal::CONT)?;
        let woke = Instant::now();
        ctx.step("operator stall woken (SIGCONT)");
        // Long enough for a stale step to show (a promotion takes well under a second).
        tokio::time::sleep(Duration::from_secs(5)).await;
        let in_recovery = sql(engine, &root, &first_ip, &password, "select pg_is_in_recovery()")?;
        ensure!(
            in_recovery.trim() == "t",
            "{first} answers pg_is_in_recovery() = {in_recovery:?} after the stalled operator woke: it carried out its stale promotion"
        );
        let log = stalling.log_text();
        ensure!(
            log.contains("leadership not confirmed"),
            "the stalled operator's log does not say it refused the step; last lines:\n{}",
            log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
        let primary = primary_pod(&env, &ns, &name).await?.name_any();
        ensure!(
            primary == second,
            "the primary label is on {primary}, not on {second}"
        );
        ctx.note(format!(
            "woken {:.1}s later, the stalled operator promoted nothing: {first} in recovery, {second} the only primary",
            woke.elapsed().as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await
    .context("a stalled leader");
    if stalling.is_stopped() {
        let _ = stalling.signal(Signal::CONT);
    }
    drop(standby);
    drop(stalling);
    load.finish_checked(pods_task, result)
}
