//! The operator behind a faulty API server: every request of the operator goes through the
//! suite's fault proxy ([`crate::fault_proxy`]), which answers one in 5 with 500, one in 7 with
//! 429, holds one in 11 for 5 s before a 504, and cuts every watch 10 s after it started. Under
//! that, with leader election on as installed, the operator must take the Lease, reconcile a
//! spec change, fail a frozen primary over (never two writable members), and bring the old
//! primary back as a replica. The write gap is compared with the clean hung-primary cell.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::failover::FailoverKind;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};

use crate::fault_proxy::{FaultProxy, Faults};
use crate::harness::{Ctx, lock};
use crate::scenarios::databases::Engine;
use crate::scenarios::failover::{
    DELAY_SECONDS, FAILOVER_TIMEOUT, Load, follow_pods, primary_pod, rejoined, rows_lost,
    running_with, server_group, serving_after, signal_group,
};
use crate::scenarios::operator::lease_namespace;
use crate::util::{Check, api, wait_for};

/// The faults of this cell.
fn faults() -> Faults {
    Faults {
        error_every: 5,
        throttle_every: 7,
        stall_every: 11,
        stall: Duration::from_secs(5),
        watch_cut_after: Some(Duration::from_secs(10)),
    }
}

/// See the module documentation.
pub async fn postgresql_failover_through_a_faulty_api_server(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (_, ns, name, password, root) = running_with(
        ctx,
        engine,
        "api-faults",
        DELAY_SECONDS,
        "  replication:\n    mode: async\n",
    )
    .await?;
    let env = ctx.without_shared_operator().await?;
    let lease_ns = lease_namespace(ctx, &env, "api-faults-lease").await?;
    let proxy = FaultProxy::start(&env, "api-faults", faults()).await?;
    let args = [
        "--leader-elect=true",
        "--webhook=false",
        "--lease-namespace",
        lease_ns.as_str(),
    ];
    let _operator = ctx
        .start_operator_through("api-faults", &args, &[], &proxy.kubeconfig)
        .await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(60)).await?;
        // It leads and reconciles through the proxy: a spec change is observed.
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let started = Instant::now();
        let delay = DELAY_SECONDS + 1;
        let patch = serde_json::json!({"spec": {"failover": {"delaySeconds": delay}}});
        let changed = clusters
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let generation = changed.metadata.generation;
        wait_for(
            "the spec change observed through the proxy",
            Duration::from_secs(120),
            async || {
                let dbc = clusters.get(&name).await?;
                let observed = dbc.status.as_ref().and_then(|s| s.observed_generation);
                Ok(if observed == generation {
                    Check::Done(())
                } else {
                    Check::Pending(format!(
                        "observedGeneration {observed:?}, want {generation:?}"
                    ))
                })
            },
        )
        .await?;
        let leases: Api<Lease> = api(&env, &lease_ns);
        let holder = leases
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .find_map(|l| l.spec.and_then(|s| s.holder_identity))
            .context("no leader Lease held: the operator did not lead through the proxy")?;
        ctx.step(format!(
            "delaySeconds {delay} observed {:.1}s after the change, the leader Lease held by \
             {holder} ({})",
            started.elapsed().as_secs_f64(),
            proxy.counts.summary()
        ));

        let old = primary_pod(&env, &ns, &name).await?;
        let old_name = old.name_any();
        let pgid = server_group(&old, engine)?;
        signal_group(pgid, "-STOP")?;
        let frozen = Instant::now();
        ctx.step(format!("froze primary {old_name} (process group {pgid})"));
        let served = serving_after(
            &env,
            &ns,
            &name,
            &load,
            FailoverKind::Failover,
            &old_name,
            frozen,
            FAILOVER_TIMEOUT,
        )
        .await;
        let _ = signal_group(pgid, "-CONT");
        let (_, new_name, new_ip) = served?;
        let gap = lock(&load.writes).gap_after(frozen);
        let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        let counts = &proxy.counts;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        ensure!(
            get(&counts.errors) > 0
                && get(&counts.throttled) > 0
                && get(&counts.stalled) > 0
                && get(&counts.watches_cut) > 0,
            "not every fault was injected: {}",
            counts.summary()
        );
        ctx.note(format!(
            "failover through a faulty API server: {old_name} -> {new_name}, write gap {:.1}s \
             (delaySeconds {delay}); {acked} rows acknowledged, {} lost (async); {old_name} \
             back as {role}; the proxy: {}",
            gap.as_secs_f64(),
            lost.len(),
            counts.summary()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}
