//! The fault matrix's operator crash points in the switchover flow (docs/reliability.md): the
//! operator aborted (a failpoint, `crash`) right before each database step of a switchover,
//! its status already written. A fresh operator must finish the switchover from the status: no
//! two writable members at any moment, no acknowledged row lost.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use kube::ResourceExt;
use kube::api::Api;

use crate::harness::Ctx;
use crate::scenarios::databases::{Engine, members, pod_ip};
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, rejoined, rows_lost, running_with,
};
use crate::scenarios::stale_leader::{switch_to, switched_to};
use crate::util::{Check, api, wait_for};

/// The steps of a PostgreSQL switchover, in order: the read-only fence, the stop of the old
/// primary's server, the promotion.
const POINTS: [&str; 3] = ["fence", "stop_server", "promote"];

/// Waits, at most a minute, for `operator` (armed with a `crash` failpoint) to exit, and checks
/// that it exited at its failpoint.
async fn aborted_at_failpoint(operator: &mut crate::env::Operator, name: &str) -> Result<()> {
    wait_for(
        &format!("operator {name} to abort at its failpoint"),
        Duration::from_secs(60),
        async || {
            Ok(if operator.is_running() {
                Check::Pending("running".into())
            } else {
                Check::Done(())
            })
        },
    )
    .await?;
    ensure!(
        operator.log_text().contains("failpoint: aborting"),
        "operator {name} exited, but not at its failpoint"
    );
    Ok(())
}

/// PostgreSQL, its own cluster: three switchovers, the operator aborted before a different step
/// of each; a fresh operator (no failpoint) completes each one.
pub async fn postgresql_switchover_survives_operator_crashes(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (_, ns, name, password, root) = running_with(
        ctx,
        engine,
        "crash-pg",
        DELAY_SECONDS,
        "  replication:\n    mode: async\n",
    )
    .await?;
    let env = ctx.without_shared_operator().await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(60)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let args = ["--leader-elect=false", "--webhook=false"];
        for point in POINTS {
            let (all, primary) = members(&env, &ns, &name).await?;
            let target = all
                .iter()
                .map(ResourceExt::name_any)
                .find(|p| *p != primary.name_any())
                .context("no replica")?;
            // The last round's old primary may still be coming back: a switchover to a member
            // that is not a Ready replica is refused.
            rejoined(&env, engine, &root, &password, &ns, &target).await?;
            let failpoint = format!("database-step:{point}=crash");
            let mut crashing = ctx
                .start_operator_with_env(
                    &format!("crash-{point}"),
                    &args,
                    &[("DATABASE_OPERATOR_FAILPOINTS", &failpoint)],
                )
                .await?;
            switch_to(&clusters, &name, &target).await?;
            let requested = Instant::now();
            aborted_at_failpoint(&mut crashing, &format!("crash-{point}")).await?;
            ctx.step(format!(
                "switchover {} -> {target}: the operator aborted before {point} {:.1}s after the request",
                primary.name_any(),
                requested.elapsed().as_secs_f64()
            ));
            let fresh = ctx.start_operator(&format!("after-{point}"), &args).await?;
            switched_to(&clusters, &name, &target).await?;
            ctx.note(format!(
                "aborted before {point}: a fresh operator completed the switchover to {target}, {:.1}s after the request",
                requested.elapsed().as_secs_f64()
            ));
            drop(fresh);
        }
        let (_, primary) = members(&env, &ns, &name).await?;
        let (acked, lost) =
            rows_lost(&load, engine, &root, &pod_ip(&primary)?, &password).await?;
        ensure!(
            lost.is_empty(),
            "{} of {acked} acknowledged rows lost",
            lost.len()
        );
        ctx.note(format!(
            "{} switchovers, each with the operator aborted before one step: {acked} rows acknowledged, none lost",
            POINTS.len()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// The rounds of [`postgresql_roll_and_scale_survive_operator_crashes`]: what is changed, as a
/// merge patch of the spec, and the members it ends with.
const ROUNDS: [(&str, &str, i32); 3] = [
    (
        "a restart roll",
        r#"{"spec":{"resources":{"requests":{"cpu":"120m"}}}}"#,
        3,
    ),
    ("a scale-down", r#"{"spec":{"replicas":2}}"#, 2),
    ("a scale-up", r#"{"spec":{"replicas":3}}"#, 3),
];

/// Whether the cluster converged on `members` members: Running on its latest generation, every
/// member Ready and on the StatefulSet's pod template, the StatefulSet at that size.
async fn converged(env: &crate::env::Env, ns: &str, name: &str, members: i32) -> Result<Check<()>> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let dbc = clusters.get(name).await?;
    let generation = dbc.metadata.generation.unwrap_or_default();
    let observed = crate::util::condition(&dbc, "Ready")
        .and_then(|c| c.observed_generation)
        .unwrap_or_default();
    let sts: k8s_openapi::api::apps::v1::StatefulSet = api(env, ns).get(name).await?;
    let template = sts
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get("database.example.com/template").cloned());
    let pods = crate::scenarios::databases::member_pods(env, ns, name).await?;
    let current = pods
        .iter()
        .filter(|p| {
            crate::scenarios::process_nodes::ready(p)
                && p.labels().get("database.example.com/template") == template.as_ref()
        })
        .count();
    let ready = dbc.status.as_ref().map_or(0, |s| s.ready_replicas);
    Ok(
        if observed >= generation
            && crate::util::phase(&dbc) == "Running"
            && ready == members
            && sts.spec.replicas == Some(members)
            && current == usize::try_from(members).unwrap_or_default()
            && pods.len() == current
        {
            Check::Done(())
        } else {
            Check::Pending(format!(
                "{current} of {} pods Ready on the template, StatefulSet replicas {:?}; {}",
                pods.len(),
                sts.spec.replicas,
                crate::util::describe(&dbc)
            ))
        },
    )
}

/// PostgreSQL, its own cluster, under the writer (`E2E_MATRIX=1`): a restart roll, a
/// scale-down and a scale-up, the operator aborted (a failpoint, `crash`) right after its first
/// StatefulSet write of each; a fresh operator (no failpoint) finishes each one: the members on
/// the new template or count, no two writable members, no acknowledged row lost.
pub async fn postgresql_roll_and_scale_survive_operator_crashes(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (_, ns, name, password, root) = running_with(
        ctx,
        engine,
        "crash-roll",
        DELAY_SECONDS,
        "  replication:\n    mode: async\n",
    )
    .await?;
    let env = ctx.without_shared_operator().await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(60)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let args = ["--leader-elect=false", "--webhook=false"];
        for (what, patch, members) in ROUNDS {
            let label = what.replace(' ', "-");
            let mut crashing = ctx
                .start_operator_with_env(
                    &format!("crash-{label}"),
                    &args,
                    &[("DATABASE_OPERATOR_FAILPOINTS", "write:StatefulSet=crash")],
                )
                .await?;
            let patch: serde_json::Value = serde_json::from_str(patch)?;
            clusters
                .patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                .await?;
            let changed = Instant::now();
            aborted_at_failpoint(&mut crashing, &format!("crash-{label}")).await?;
            ctx.step(format!(
                "{what}: the operator aborted after its StatefulSet write, {:.1}s after the change",
                changed.elapsed().as_secs_f64()
            ));
            let fresh = ctx.start_operator(&format!("after-{label}"), &args).await?;
            wait_for(&format!("{what} finished by a fresh operator"), Duration::from_secs(300), async || {
                converged(&env, &ns, &name, members).await
            })
            .await?;
            ctx.note(format!(
                "{what}, the operator aborted after its StatefulSet write: finished by a fresh operator {:.1}s after the change, write gap {:.1}s",
                changed.elapsed().as_secs_f64(),
                crate::harness::lock(&load.writes).gap_after(changed).as_secs_f64()
            ));
            drop(fresh);
        }
        let (_, primary) = members(&env, &ns, &name).await?;
        let (acked, lost) =
            rows_lost(&load, engine, &root, &pod_ip(&primary)?, &password).await?;
        ensure!(
            lost.is_empty(),
            "{} of {acked} acknowledged rows lost",
            lost.len()
        );
        ctx.note(format!(
            "a roll, a scale-down and a scale-up, each with the operator aborted after its StatefulSet write: {acked} rows acknowledged, none lost"
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}
