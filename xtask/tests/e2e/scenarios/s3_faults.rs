//! The S3 server refusing connections or hanging (docs/reliability.md): a backup or a restore
//! drill against it must end, on its own and within a bound, as a failed Job with `BackupHealthy=False`
//! `BackupStorageUnreachable`, never run for the Job's whole deadline (six hours) or report
//! success; the cluster goes on serving. A new cluster bootstrapped from a backup through such
//! an endpoint must end up Degraded `RestoreFailed` within the same bound, never Running and
//! never waiting for ever, its restore's log naming the storage.
//!
//! Both faults are made here, on loopback: a port nothing listens on (refused), and a listener
//! that accepts connections and never answers (a hung server or a black-holed network path).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};

use crate::env::Env;
use crate::harness::Ctx;
use crate::scenarios::backups::{local_s3, manifest_with_backup};
use crate::scenarios::databases::{Engine, apply_until_running};
use crate::util::{Check, api, condition, kubectl, wait_for};

/// How long a backup against an S3 server that does not answer may take to fail: the client's
/// request timeout (30 s) and retries (at most 3 min of them), with room for the Job's start.
const FAIL_WITHIN: Duration = Duration::from_secs(6 * 60);

/// A listener on loopback that accepts connections and never answers, until dropped.
struct BlackHole {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    async fn start() -> Result<BlackHole> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                // Kept open and never read from or written to.
                held.push(socket);
            }
        });
        Ok(BlackHole { port, task })
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A port on loopback nothing listens on: bound, then closed.
fn refusing_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Points the cluster's backups at `endpoint`, starts a backup Job from its CronJob, and waits
/// for the Job to fail and `BackupHealthy` to say the storage is unreachable; returns how long
/// that took and the condition's message.
async fn backup_against(
    env: &Env,
    ns: &str,
    name: &str,
    endpoint: &str,
    job: &str,
) -> Result<(Duration, String)> {
    job_against(env, ns, name, endpoint, Flow::Backup, job).await
}

/// The Job a fault cell starts: a backup or a restore drill.
#[derive(Clone, Copy)]
enum Flow {
    /// From `<name>-backup`; reported in `BackupHealthy`.
    Backup,
    /// From `<name>-verify`; reported in `BackupVerified`.
    Drill,
}

impl Flow {
    fn cron_job(self, name: &str) -> String {
        match self {
            Flow::Backup => format!("{name}-backup"),
            Flow::Drill => format!("{name}-verify"),
        }
    }

    fn condition(self) -> &'static str {
        match self {
            Flow::Backup => "BackupHealthy",
            Flow::Drill => "BackupVerified",
        }
    }
}

/// [`backup_against`] for either flow: `job` from the flow's CronJob must fail within
/// [`FAIL_WITHIN`], never succeed, and the flow's condition must say `BackupStorageUnreachable`
/// naming it.
async fn job_against(
    env: &Env,
    ns: &str,
    name: &str,
    endpoint: &str,
    flow: Flow,
    job: &str,
) -> Result<(Duration, String)> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let patch = serde_json::json!({"spec": {"backup": {"endpoint": endpoint}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let cron_jobs: Api<k8s_openapi::api::batch::v1::CronJob> = api(env, ns);
    let cron_job = flow.cron_job(name);
    wait_for(
        &format!("CronJob {cron_job} to use {endpoint}"),
        Duration::from_secs(30),
        async || {
            let text = serde_json::to_string(&cron_jobs.get(&cron_job).await?)?;
            Ok(if text.contains(endpoint) {
                Check::Done(())
            } else {
                Check::Pending("the old endpoint".into())
            })
        },
    )
    .await?;
    let started = Instant::now();
    let out = kubectl(
        env,
        &[
            "create",
            "job",
            "-n",
            ns,
            &format!("--from=cronjob/{cron_job}"),
            job,
        ],
        None,
    )?;
    anyhow::ensure!(out.ok, "kubectl create job: {}", out.stderr);
    let jobs: Api<Job> = api(env, ns);
    let message = wait_for(
        &format!(
            "Job {job} to fail and {} to name the storage",
            flow.condition()
        ),
        FAIL_WITHIN,
        async || {
            let status = jobs.get(job).await?.status.unwrap_or_default();
            if status.succeeded.unwrap_or(0) > 0 {
                bail!("Job {job} succeeded against {endpoint}");
            }
            let dbc = clusters.get(name).await?;
            Ok(match condition(&dbc, flow.condition()) {
                Some(c) if c.reason == "BackupStorageUnreachable" && c.message.contains(job) => {
                    Check::Done(c.message.clone())
                }
                other => Check::Pending(format!(
                    "Job active {:?} failed {:?}; {} {:?}",
                    status.active,
                    status.failed,
                    flow.condition(),
                    other.map(|c| (c.status.clone(), c.reason.clone()))
                )),
            })
        },
    )
    .await?;
    Ok((started.elapsed(), message))
}

/// PostgreSQL, two members, backups and restore drills to an S3 endpoint that refuses
/// connections, then to one that accepts them and never answers: each fails on its own, within
/// [`FAIL_WITHIN`], with `BackupStorageUnreachable` naming the Job (`BackupHealthy`,
/// `BackupVerified`); the cluster stays Running. A cell of the matrix run
/// with `E2E_MATRIX=1`.
pub async fn postgresql_backup_to_a_refusing_or_hung_s3_fails_in_bounded_time(
    ctx: &Ctx,
) -> Result<()> {
    let engine = Engine::Postgresql;
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("s3-hang").await?;
    ctx.retire_on_success(&ns);
    let s3 = local_s3(&env).await?;
    let (manifest, name) = manifest_with_backup(engine, &ns, &s3)?;
    ctx.relevant("databasecluster", &ns, &name);
    apply_until_running(&env, &ns, &name, &manifest).await?;

    let refused = format!("http://127.0.0.1:{}", refusing_port()?);
    let (took, message) = backup_against(&env, &ns, &name, &refused, "backup-refused").await?;
    ctx.note(format!(
        "S3 refusing connections: the backup failed {:.1}s after its Job was created: {message}",
        took.as_secs_f64()
    ));
    let (took, message) =
        job_against(&env, &ns, &name, &refused, Flow::Drill, "drill-refused").await?;
    ctx.note(format!(
        "S3 refusing connections: the restore drill failed {:.1}s after its Job was created: {message}",
        took.as_secs_f64()
    ));

    let hole = BlackHole::start().await?;
    let hung = format!("http://127.0.0.1:{}", hole.port);
    let (took, message) = backup_against(&env, &ns, &name, &hung, "backup-hung").await?;
    ctx.note(format!(
        "S3 accepting connections and never answering: the backup failed {:.1}s after its Job was created: {message}",
        took.as_secs_f64()
    ));
    let (took, message) = job_against(&env, &ns, &name, &hung, Flow::Drill, "drill-hung").await?;
    ctx.note(format!(
        "S3 accepting connections and never answering: the restore drill failed {:.1}s after its Job was created: {message}",
        took.as_secs_f64()
    ));
    drop(hole);

    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    let dbc = clusters.get(&name).await?;
    let phase = crate::util::phase(&dbc);
    anyhow::ensure!(
        phase == "Running",
        "the cluster is {phase} after the failed backups"
    );

    // Restores through the same faults.
    let (took, message, log) =
        restore_through(ctx, &env, &ns, &dbc, &s3, "restore-refused", &refused).await?;
    anyhow::ensure!(
        message.contains("the bucket could not be reached"),
        "RestoreFailed does not name the unreachable bucket: {message}"
    );
    ctx.note(format!(
        "restore from S3 refusing connections: Degraded RestoreFailed {:.1}s after apply ({message}); the restore's log: {log}",
        took.as_secs_f64()
    ));
    let hole = BlackHole::start().await?;
    let hung = format!("http://127.0.0.1:{}", hole.port);
    let (took, message, log) =
        restore_through(ctx, &env, &ns, &dbc, &s3, "restore-hung", &hung).await?;
    anyhow::ensure!(
        message.contains("the bucket could not be reached"),
        "RestoreFailed does not name the unreachable bucket: {message}"
    );
    ctx.note(format!(
        "restore from S3 accepting connections and never answering: Degraded RestoreFailed {:.1}s after apply ({message}); the restore's log: {log}",
        took.as_secs_f64()
    ));
    drop(hole);
    Ok(())
}

/// A new one-member cluster `name` bootstrapped from `source`'s backups through `endpoint`:
/// waits for Degraded `RestoreFailed` (never Running) within [`FAIL_WITHIN`], then deletes it;
/// returns how long that took, the condition's message and the last line of the restore's log.
async fn restore_through(
    ctx: &Ctx,
    env: &Env,
    ns: &str,
    source: &DatabaseCluster,
    s3: &crate::scenarios::backups::LocalS3,
    name: &str,
    endpoint: &str,
) -> Result<(Duration, String, String)> {
    use kube::ResourceExt as _;
    let manifest = crate::scenarios::backups::restore_manifest(
        name,
        ns,
        "postgresql",
        source,
        &source.name_any(),
        s3,
    )
    .replace(
        &format!("endpoint: {}", s3.endpoint),
        &format!("endpoint: {endpoint}"),
    );
    anyhow::ensure!(
        manifest.contains(&format!("endpoint: {endpoint}")),
        "the restore manifest does not name {endpoint}"
    );
    ctx.relevant("databasecluster", ns, name);
    let started = Instant::now();
    env.cluster.apply(&manifest)?;
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let message = wait_for(
        &format!("{name} Degraded RestoreFailed"),
        FAIL_WITHIN,
        async || {
            let dbc = clusters.get(name).await?;
            let phase = crate::util::phase(&dbc);
            if phase == "Running" {
                bail!("{name} is Running though its backup could not be read");
            }
            Ok(match condition(&dbc, "Degraded") {
                Some(c) if c.status == "True" && c.reason == "RestoreFailed" => {
                    Check::Done(c.message.clone())
                }
                other => Check::Pending(format!(
                    "phase {phase}, Degraded {:?}",
                    other.map(|c| (c.status.clone(), c.reason.clone()))
                )),
            })
        },
    )
    .await?;
    let took = started.elapsed();
    let pod = format!("{name}-0");
    let text = crate::util::container_log(env, ns, &pod, "init");
    // The restore's own verdict (the container restarted after it and logged its start).
    let log = text
        .lines()
        .rev()
        .find(|l| l.contains("restoring backup") && l.contains("failed"))
        .unwrap_or("(no failed restore in the init container's log)")
        .trim()
        .to_owned();
    clusters
        .delete(name, &kube::api::DeleteParams::default())
        .await?;
    Ok((took, message, log))
}
