//! Issue 34, item 1: the primary's volume comes back empty (a lost disk, a replaced or deleted
//! PersistentVolumeClaim). A member of a cluster that has held data never initializes a new
//! database: the replaced primary waits, the operator fails over to a replica that has the data,
//! and the emptied member is seeded from it as a replica.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::failover::FailoverKind;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use crate::harness::{Ctx, lock};
use crate::scenarios::databases::Engine;
use crate::scenarios::failover::{
    DELAY_SECONDS, FAILOVER_TIMEOUT, Load, follow_pods, primary_pod, rejoined, rows_lost, running,
    server_group, serving_after, signal_group,
};
use crate::util::api;

/// The longest write gap accepted: the failover delay, the fence and the promotion (12.2 s
/// measured with delaySeconds 5; a hung primary's takes delaySeconds + 4-5 s here), with room
/// for a loaded machine; the fence's second stop, which a replacement created in the second of
/// the stop used to cause, alone added 30 s.
const EMPTIED_WRITE_GAP: Duration = Duration::from_secs(DELAY_SECONDS + 15);

/// The PostgreSQL example: under the writer, the primary's server is frozen, everything on its
/// volume removed and its pod deleted, as when a node loses its disk. The StatefulSet recreates
/// the pod on the empty volume, labelled primary until the failover moves the label. It must not
/// create an empty database (before the change it did: `initdb`, an empty writable primary
/// behind the read-write Service, the acknowledged rows gone from it); a replica is promoted
/// within the failover delay and a few seconds, no acknowledged row is lost, and the emptied
/// member comes back as a replica seeded from the new primary.
pub async fn postgresql_emptied_primary_volume_fails_over(ctx: &Ctx) -> Result<()> {
    emptied_primary_volume_fails_over(ctx, Engine::Postgresql, "empty-pg").await
}

/// The same on MariaDB (`E2E_MATRIX=1`): the init script's rule is shared, the server's is not.
pub async fn mariadb_emptied_primary_volume_fails_over(ctx: &Ctx) -> Result<()> {
    emptied_primary_volume_fails_over(ctx, Engine::Mariadb, "empty-mdb").await
}

/// The same on MySQL (`E2E_MATRIX=1`).
pub async fn mysql_emptied_primary_volume_fails_over(ctx: &Ctx) -> Result<()> {
    emptied_primary_volume_fails_over(ctx, Engine::Mysql, "empty-my").await
}

async fn emptied_primary_volume_fails_over(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) = running(ctx, engine, suffix, DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let old = primary_pod(&env, &ns, &name).await?;
        let old_name = old.name_any();
        let pvcs: Api<PersistentVolumeClaim> = api(&env, &ns);
        let claim = format!("data-{old_name}");
        let volume = pvcs
            .get(&claim)
            .await?
            .spec
            .and_then(|s| s.volume_name)
            .with_context(|| format!("PersistentVolumeClaim {claim} is not bound"))?;
        let dir = env.state_dir.join("volumes").join(&volume);
        ensure!(dir.is_dir(), "no directory {} for {volume}", dir.display());
        let pgid = server_group(&old, engine)?;
        signal_group(pgid, "-STOP")?;
        let cut = Instant::now();
        let mut removed = 0;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
            removed += 1;
        }
        let pods: Api<Pod> = api(&env, &ns);
        pods.delete(&old_name, &DeleteParams::default().grace_period(1))
            .await?;
        ctx.step(format!(
            "froze primary {old_name}, removed the {removed} entries of its volume {volume}, deleted its pod"
        ));
        let (record, new_name, new_ip) = serving_after(
            &env,
            &ns,
            &name,
            &load,
            FailoverKind::Failover,
            &old_name,
            cut,
            FAILOVER_TIMEOUT,
        )
        .await?;
        let gap = lock(&load.writes).gap_after(cut);
        ensure!(
            new_name != old_name,
            "the emptied member {old_name} was made primary again: {record:?}"
        );
        ctx.note(format!(
            "{engine:?} emptied primary {old_name}: {new_name} promoted, write gap {:.1}s (delaySeconds {DELAY_SECONDS})",
            gap.as_secs_f64()
        ));
        ensure!(
            gap <= EMPTIED_WRITE_GAP,
            "write gap {:.1}s, more than {}s",
            gap.as_secs_f64(),
            EMPTIED_WRITE_GAP.as_secs()
        );
        let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
        ensure!(role == "replica", "{old_name} is {role}, not a replica");
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        ensure!(
            lost.is_empty(),
            "{} of {acked} acknowledged rows lost: {:?}",
            lost.len(),
            lost.iter().take(10).collect::<Vec<_>>()
        );
        // The emptied member was seeded from the new primary: it has the rows too.
        let seeded = pods.get(&old_name).await?;
        let seeded_ip = crate::scenarios::databases::pod_ip(&seeded)?;
        let (_, missing) = rows_lost(&load, engine, &root, &seeded_ip, &password).await?;
        ensure!(
            missing.len() < acked,
            "{old_name} came back without the cluster's rows ({} of {acked} missing): it was not seeded from the primary",
            missing.len()
        );
        ctx.note(format!(
            "{acked} rows acknowledged, none lost; {old_name} back as a replica seeded from {new_name} ({} rows still streaming to it)",
            missing.len()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}
