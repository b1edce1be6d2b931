//! Point-in-time recovery on the PostgreSQL cluster of the backups scenario (archiving on, its
//! logical backups in the bucket): switched to `spec.backup.method: physical`, its CronJob
//! takes a base backup from the primary as the replication account (`<id>.base.tar.gz`, a
//! manifest with its WAL range); rows written one transaction each before and after a moment T
//! (a second apart), then the table dropped; the WAL switched and archived. A new cluster
//! bootstrapped with `targetTime: T` holds exactly the rows committed before T and the table,
//! and its `status.restoredFrom` names the base backup and the target.

use std::fs;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{Api, Patch, PatchParams};

use crate::harness::Ctx;
use crate::scenarios::archiving::archived;
use crate::scenarios::backup_failures::Source;
use crate::scenarios::backups::{
    await_restored_from, await_running, restore_manifest, run_backup_job, stored,
};
use crate::scenarios::databases::{Engine, members, pod_ip, sql};
use crate::util::{Check, api, wait_for};

/// The CronJob's backup container environment value `name`.
fn cron_env(cron: &CronJob, name: &str) -> Option<String> {
    cron.spec
        .job_template
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// Runs the case on `src`'s cluster.
pub(crate) async fn run(ctx: &Ctx, src: &Source<'_>) -> Result<()> {
    let (env, ns, name) = (src.env, src.ns, src.name);
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let patch = serde_json::json!({"spec": {"backup": {"method": "physical"}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let cron_name = format!("{name}-backup");
    let cron_jobs: Api<CronJob> = api(env, ns);
    let primary_host = format!("{name}.{ns}.svc");
    wait_for(
        "the CronJob to take physical backups from the primary",
        Duration::from_secs(30),
        async || {
            let cron = cron_jobs.get(&cron_name).await?;
            let (method, host) = (
                cron_env(&cron, "BACKUP_METHOD"),
                cron_env(&cron, "BACKUP_HOST"),
            );
            Ok(
                if method.as_deref() == Some("physical") && host.as_deref() == Some(&primary_host) {
                    Check::Done(())
                } else {
                    Check::Pending(format!("BACKUP_METHOD {method:?}, BACKUP_HOST {host:?}"))
                },
            )
        },
    )
    .await?;
    let seconds = run_backup_job(ctx, env, ns, &cron_name, "backup-physical").await?;
    let objects = stored(env, src.s3, ns, name)?;
    let base = objects
        .keys()
        .find(|k| k.ends_with(".base.tar.gz"))
        .with_context(|| format!("no base backup stored: {:?}", objects.keys()))?
        .clone();
    let id = base.trim_end_matches(".base.tar.gz").to_owned();
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(&objects[&format!("{id}.manifest.json")])?)?;
    ensure!(
        doc["method"] == "physical"
            && doc["wal"]["start"].is_string()
            && doc["wal"]["end"].is_string(),
        "the base backup's manifest: {doc}"
    );
    ctx.note(format!(
        "physical backup {id} from the primary in {seconds:.1}s: WAL {} to {} on timeline {}",
        doc["wal"]["start"], doc["wal"]["end"], doc["wal"]["timeline"]
    ));

    // Rows before T and after it, one transaction each, a second apart from T.
    let (_, primary) = members(env, ns, name).await?;
    let ip = pod_ip(&primary)?;
    let run_sql = |text: &str| sql(Engine::Postgresql, src.root, &ip, src.password, text);
    run_sql("CREATE TABLE pitr (id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")?;
    for id in 1..=5 {
        run_sql(&format!("INSERT INTO pitr (id) VALUES ({id})"))?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let target = run_sql(
        "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    )?
    .trim()
    .to_owned();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in 6..=8 {
        run_sql(&format!("INSERT INTO pitr (id) VALUES ({id})"))?;
    }
    run_sql("DROP TABLE pitr")?;
    let segment = run_sql("SELECT pg_walfile_name(pg_current_wal_lsn())")?
        .trim()
        .to_owned();
    run_sql("SELECT pg_switch_wal()")?;
    wait_for(
        &format!("segment {segment} in the archive"),
        Duration::from_secs(60),
        async || {
            Ok(if archived(env, src.s3, ns, name)?.contains_key(&segment) {
                Check::Done(())
            } else {
                Check::Pending("not yet".into())
            })
        },
    )
    .await?;
    ctx.step(format!(
        "rows 1-5 before {target}, 6-8 after, the table dropped; {segment} archived"
    ));

    // A new cluster recovered to T.
    let source = clusters.get(name).await?;
    let restored = "pitr";
    let manifest = restore_manifest(restored, ns, "postgresql", &source, name, src.s3)
        + &format!("      targetTime: \"{target}\"\n");
    ctx.relevant("databasecluster", ns, restored);
    let started = Instant::now();
    env.cluster.apply(&manifest)?;
    await_running(&clusters, restored).await?;
    let (_, restored_primary) = members(env, ns, restored).await?;
    let rows = sql(
        Engine::Postgresql,
        src.root,
        &pod_ip(&restored_primary)?,
        src.password,
        "SELECT count(*) || ' ' || max(id) FROM pitr",
    )?;
    ensure!(
        rows.trim() == "5 5",
        "recovered to {target}: rows {rows:?}, want 5 rows up to id 5"
    );
    let recorded = await_restored_from(&clusters, restored).await?;
    // The point reached: row 5's commit, a second before the target (so not on a later day).
    let day = &target[..10];
    ensure!(
        recorded.backup == id
            && recorded.key.ends_with(".base.tar.gz")
            && recorded
                .target
                .as_deref()
                .is_some_and(|t| t.starts_with("time "))
            && recorded
                .reached
                .as_deref()
                .is_some_and(|r| r.len() >= 19 && r[..10] <= *day),
        "status.restoredFrom {recorded:?}, want base backup {id}, the target time and the point reached"
    );
    ctx.note(format!(
        "a new cluster recovered to {target} from base backup {id} and the archive was Running {:.1}s after apply, with rows 1-5 and the table; status.restoredFrom.reached {:?}",
        started.elapsed().as_secs_f64(),
        recorded.reached
    ));
    Ok(())
}
