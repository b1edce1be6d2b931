//! Scaling down past the primary (docs/reliability.md): a smaller `spec.replicas` whose
//! StatefulSet would remove the member that is primary. The operator switches over to a member
//! that stays first and only then lets the StatefulSet shrink, so the write gap is a
//! switchover's and the removed pod is a replica.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::failover::{FailoverKind, FailoverOutcome};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::harness::{Ctx, Handed, lock};
use crate::scenarios::databases::{Engine, pod_ip};
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, primary_pod, rejoined, rows_lost, running,
};
use crate::scenarios::safety::{ROLL_WRITE_GAP, Replacements, watch_replacements};
use crate::scenarios::stale_leader::{switch_to, switched_to};
use crate::util::{Check, api, describe, phase, wait_for};

async fn scale(clusters: &Api<DatabaseCluster>, name: &str, replicas: i32) -> Result<()> {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The PostgreSQL example with its primary on member 2, scaled to 2 members under the writer:
/// a switchover to member 0 or 1 must come first (its reason names the scale-down), member 2's
/// pod must go only once it is a replica, the write gap must be a switchover's, no row lost;
/// scaled back to 3, member 2 comes back as a replica.
pub async fn postgresql_scale_down_past_the_primary_switches_over_first(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) = running(ctx, engine, "scale-pg", DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let seen = Arc::new(std::sync::Mutex::new(Replacements::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let last = format!("{name}-2");
        let old = primary_pod(&env, &ns, &name).await?.name_any();
        if old != last {
            rejoined(&env, engine, &root, &password, &ns, &last).await?;
            switch_to(&clusters, &name, &last).await?;
            switched_to(&clusters, &name, &last).await?;
            rejoined(&env, engine, &root, &password, &ns, &old).await?;
            ctx.step(format!("primary moved to {last} (the member a scale-down to 2 removes)"));
        }
        let watcher = watch_replacements(env.clone(), ns.clone(), name.clone(), seen.clone(), stop.clone());
        let started = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
        scale(&clusters, &name, 2).await?;
        let scaled = Instant::now();
        ctx.step(format!("spec.replicas 3 -> 2 with {last} primary"));
        let sets: Api<StatefulSet> = api(&env, &ns);
        let pods: Api<Pod> = api(&env, &ns);
        let record = wait_for("the scale-down done: 2 members Running, the switchover recorded", Duration::from_secs(120), async || {
            let dbc = clusters.get(&name).await?;
            let replicas = sets.get(&name).await?.spec.replicas;
            let gone = pods.get_opt(&last).await?.is_none();
            let ready = dbc.status.as_ref().map_or(0, |s| s.ready_replicas);
            let record = dbc.status.as_ref().and_then(|s| s.failover.as_ref()).and_then(|f| f.last.clone())
                .filter(|l| l.kind == FailoverKind::Switchover && l.outcome == FailoverOutcome::Completed && l.started.0 >= started);
            Ok(match record {
                Some(r) if replicas == Some(2) && gone && ready == 2 && phase(&dbc) == "Running" => Check::Done(r),
                other => Check::Pending(format!("StatefulSet replicas {replicas:?}, {last} gone {gone}, switchover {:?}; {}", other.map(|r| r.to), describe(&dbc))),
            })
        })
        .await?;
        stop.store(true, Ordering::Relaxed);
        let _ = watcher.await;
        let took = scaled.elapsed();
        let gap = lock(&load.writes).gap_after(scaled);
        let replaced = std::mem::take(&mut lock(&seen).replaced);
        ctx.note(format!(
            "scale-down past the primary: switchover {last} -> {:?} ({}), 2 members Running {:.1}s after the change, write gap {:.1}s; pods gone (pod, role): {replaced:?}",
            record.to, record.reason, took.as_secs_f64(), gap.as_secs_f64()
        ));
        ensure!(record.reason.contains("scale-down"), "the switchover does not say it is the scale-down's: {}", record.reason);
        ensure!(
            !replaced.iter().any(|(pod, role)| pod == &last && role == "primary"),
            "{last} was removed while labelled primary: {replaced:?}"
        );
        ensure!(gap <= ROLL_WRITE_GAP, "write gap {:.1}s over {}s", gap.as_secs_f64(), ROLL_WRITE_GAP.as_secs());
        let primary = primary_pod(&env, &ns, &name).await?;
        let (acked, lost) = rows_lost(&load, engine, &root, &pod_ip(&primary)?, &password).await?;
        ensure!(lost.is_empty(), "{} of {acked} acknowledged rows lost: {:?}", lost.len(), lost.iter().take(10).collect::<Vec<_>>());
        scale(&clusters, &name, 3).await?;
        let up = Instant::now();
        rejoined(&env, engine, &root, &password, &ns, &last).await?;
        wait_for("3 members Running", Duration::from_secs(120), async || {
            let dbc = clusters.get(&name).await?;
            let ready = dbc.status.as_ref().map_or(0, |s| s.ready_replicas);
            Ok(if ready == 3 && phase(&dbc) == "Running" { Check::Done(()) } else { Check::Pending(describe(&dbc)) })
        })
        .await?;
        ctx.note(format!(
            "{acked} rows acknowledged, none lost; scaled back to 3: {last} a replica again {:.1}s later",
            up.elapsed().as_secs_f64()
        ));
        ctx.hand_over(engine.example_key(), Handed { ns: ns.clone(), name: name.clone() });
        Ok::<_, anyhow::Error>(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    load.finish_checked(pods_task, result)
}
