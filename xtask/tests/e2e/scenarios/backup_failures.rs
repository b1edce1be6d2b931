//! Backups that fail, on the PostgreSQL cluster of the backups scenario (its backups already in
//! the bucket): wrong S3 credentials fail the Job at once (its pod failure policy on the exit
//! code of the cause) with `BackupHealthy=False` `BackupStorageDenied`, and leave every stored
//! object as it was; a backup whose process is killed in the middle of its multipart upload
//! leaves no object that counts as a backup; a new cluster bootstrapped from a cluster without
//! backups is Degraded `RestoreFailed`, never Running.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::Ctx;
use crate::scenarios::backups::{LocalS3, backup_list, stored};
use crate::scenarios::databases::{Engine, container_pid, members, pod_ip, sql};
use crate::util::{Check, ROLE_LABEL, api, condition, kubectl, wait_for};

/// What the failure cases need of the backups scenario's cluster.
pub(crate) struct Source<'a> {
    pub(crate) env: &'a Env,
    pub(crate) s3: &'a LocalS3,
    pub(crate) ns: &'a str,
    pub(crate) name: &'a str,
    pub(crate) root: &'a PathBuf,
    pub(crate) password: &'a str,
}

/// Each stored object of the cluster's prefix with its size and SHA-256.
fn fingerprint(src: &Source<'_>) -> Result<BTreeMap<String, (u64, String)>> {
    use sha2::{Digest as _, Sha256};
    let mut out = BTreeMap::new();
    for (key, path) in stored(src.env, src.s3, src.ns, src.name)? {
        let bytes = fs::read(&path)?;
        let sum: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.insert(key, (bytes.len() as u64, sum));
    }
    Ok(out)
}

async fn set_secret_key(src: &Source<'_>, secret_access_key: &str) -> Result<()> {
    let secrets: Api<Secret> = api(src.env, src.ns);
    let patch = serde_json::json!({"stringData": {"AWS_SECRET_ACCESS_KEY": secret_access_key}});
    secrets
        .patch("local-s3", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn create_job(src: &Source<'_>, job: &str) -> Result<()> {
    let out = kubectl(
        src.env,
        &[
            "create",
            "job",
            "-n",
            src.ns,
            &format!("--from=cronjob/{}-backup", src.name),
            job,
        ],
        None,
    )?;
    ensure!(out.ok, "kubectl create job: {}", out.stderr);
    Ok(())
}

/// Wrong keys: the Job fails with its first pod, the condition names the cause, nothing in the
/// bucket changed.
async fn wrong_credentials(ctx: &Ctx, src: &Source<'_>) -> Result<()> {
    let before = fingerprint(src)?;
    let listed_before = backups_listed(&backup_list(src.env, src.s3, src.ns, src.name)?);
    ensure!(!before.is_empty(), "no backups to keep intact");
    set_secret_key(src, "not-the-secret-key").await?;
    let job = "backup-denied";
    let started = Instant::now();
    create_job(src, job)?;
    let jobs: Api<Job> = api(src.env, src.ns);
    let status = wait_for(
        &format!("Job {job} to fail"),
        Duration::from_secs(90),
        async || {
            let status = jobs.get(job).await?.status.unwrap_or_default();
            if status.succeeded.unwrap_or(0) > 0 {
                bail!("Job {job} succeeded with wrong credentials");
            }
            let failed = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Failed" && c.status == "True");
            Ok(if failed {
                Check::Done(status)
            } else {
                Check::Pending(format!(
                    "active {:?}, failed {:?}",
                    status.active, status.failed
                ))
            })
        },
    )
    .await?;
    let failed_condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed")
        .cloned()
        .context("no Failed condition")?;
    ensure!(
        status.failed == Some(1) && failed_condition.reason.as_deref() == Some("PodFailurePolicy"),
        "the Job was not failed at its first pod by the pod failure policy: {status:?}"
    );
    ctx.note(format!(
        "wrong S3 key: Job {job} failed {:.1}s after creation ({})",
        started.elapsed().as_secs_f64(),
        failed_condition.message.unwrap_or_default()
    ));
    let clusters: Api<DatabaseCluster> = api(src.env, src.ns);
    let message = wait_for(
        "BackupHealthy=False BackupStorageDenied",
        Duration::from_secs(30),
        async || {
            let dbc = clusters.get(src.name).await?;
            let c = condition(&dbc, "BackupHealthy").cloned();
            Ok(match c {
                Some(c) if c.status == "False" && c.reason == "BackupStorageDenied" => {
                    Check::Done(c.message)
                }
                other => Check::Pending(format!(
                    "{:?}",
                    other.map(|c| (c.status, c.reason, c.message))
                )),
            })
        },
    )
    .await?;
    ensure!(
        message.contains(job) && message.contains("credentials"),
        "{message}"
    );
    let after = fingerprint(src)?;
    ensure!(
        after == before,
        "the bucket changed under a failed backup: before {before:?}, after {after:?}"
    );
    ensure!(
        backups_listed(&backup_list(src.env, src.s3, src.ns, src.name)?) == listed_before,
        "the catalog changed"
    );
    ctx.step(format!("BackupHealthy: {message}"));
    set_secret_key(src, &src.s3.secret_access_key).await?;
    Ok(())
}

/// Files in hidden directories of the bucket (the S3 server's multipart staging area) of at
/// least `min` bytes.
fn staged_bytes(dir: &Path, hidden: bool) -> u64 {
    let mut total = 0;
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let inside = hidden || name.starts_with('.');
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            total += staged_bytes(&entry.path(), inside);
        } else if kind.is_file() && inside {
            total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}

fn phase_of(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("no phase")
}

/// A pod's name, phase, node, and each container's state, for a line of a wait.
fn pod_summary(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("unscheduled");
    let containers = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| {
            let state = c.state.as_ref();
            let what = if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                format!(
                    "exited {} {}",
                    t.exit_code,
                    t.reason.as_deref().unwrap_or("")
                )
            } else if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
                format!("waiting {}", w.reason.as_deref().unwrap_or(""))
            } else if state.and_then(|s| s.running.as_ref()).is_some() {
                "running".to_owned()
            } else {
                "unknown".to_owned()
            };
            format!("{} {}", c.name, what.trim_end())
        })
        .collect::<Vec<_>>()
        .join(", ");
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .and_then(|c| c.message.clone())
        .map(|m| format!(", unschedulable: {m}"))
        .unwrap_or_default();
    format!(
        "{} {} on {node}: {containers}{unschedulable}",
        pod.name_any(),
        phase_of(pod)
    )
}

/// A dump of tens of MiB, its process killed once parts of it are in the S3 server's staging
/// area: no object appears under the prefix, and the catalog is what it was.
async fn killed_mid_upload(ctx: &Ctx, src: &Source<'_>) -> Result<()> {
    let (_, primary) = members(src.env, src.ns, src.name).await?;
    let primary_ip = pod_ip(&primary)?;
    // About 70 MiB of SQL that gzip cannot shrink much: several 8 MiB parts.
    sql(
        Engine::Postgresql,
        src.root,
        &primary_ip,
        src.password,
        "create table big as select g as id, md5(g::text || random()::text) || md5(random()::text) as a from generate_series(1, 900000) g",
    )?;
    // The cluster label is on the backup Jobs' pods too: the replica by its role.
    let (pods, _) = members(src.env, src.ns, src.name).await?;
    let replica = pods
        .iter()
        .find(|p| p.labels().get(ROLE_LABEL).map(String::as_str) == Some("replica"))
        .context("no pod labelled replica")?;
    let replica_ip = pod_ip(replica)?;
    wait_for(
        "the big table on the replica",
        Duration::from_secs(60),
        async || {
            let n = sql(
                Engine::Postgresql,
                src.root,
                &replica_ip,
                src.password,
                "select count(*) from big",
            )?;
            Ok(if n == "900000" {
                Check::Done(())
            } else {
                Check::Pending(n)
            })
        },
    )
    .await?;
    let before = fingerprint(src)?;
    let listed_before = backups_listed(&backup_list(src.env, src.s3, src.ns, src.name)?);
    let bucket_dir = src.env.state_dir.join("s3").join(&src.s3.bucket);
    let staged_before = staged_bytes(&bucket_dir, false);
    let job = "backup-killed";
    create_job(src, job)?;
    let pods: Api<Pod> = api(src.env, src.ns);
    let selector = ListParams::default().labels(&format!("job-name={job}"));
    let (pid, staged) = wait_for(
        "parts of the dump staged by the S3 server",
        Duration::from_secs(90),
        async || {
            let list = pods.list(&selector).await?;
            let pid = list.items.iter().find_map(|p| container_pid(p, "backup"));
            let staged = staged_bytes(&bucket_dir, false).saturating_sub(staged_before);
            if fingerprint(src)?.len() != before.len() {
                bail!("the backup completed before it could be killed; make the table bigger");
            }
            if let Some(ended) = list.items.iter().find(|p| phase_of(p) == "Failed") {
                let name = ended.name_any();
                let log = crate::util::container_log(src.env, src.ns, &name, "backup");
                bail!(
                    "the backup pod {name} ended before it could be killed ({}); its log:\n{}",
                    pod_summary(ended),
                    log.trim_end()
                );
            }
            Ok(match pid {
                Some(pid) if staged >= 4 << 20 => Check::Done((pid, staged)),
                _ => Check::Pending(format!(
                    "pid {pid:?}, {staged} bytes staged; pods: [{}]",
                    list.items
                        .iter()
                        .map(pod_summary)
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
            })
        },
    )
    .await?;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {pid} failed");
    // The Job would retry: delete it (and its pods) before a retry gets far.
    api::<Job>(src.env, src.ns)
        .delete(
            job,
            &DeleteParams {
                propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
                ..DeleteParams::default()
            },
        )
        .await?;
    ctx.step(format!(
        "killed the backup process {pid} with {staged} bytes of its upload staged"
    ));
    wait_for("the killed Job gone", Duration::from_secs(60), async || {
        let left = pods.list(&selector).await?.items.len();
        Ok(if left == 0 {
            Check::Done(())
        } else {
            Check::Pending(format!("{left} pod(s)"))
        })
    })
    .await?;
    let after = fingerprint(src)?;
    ensure!(
        after == before,
        "a killed backup left objects: before {:?}, after {:?}",
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    let listed = backups_listed(&backup_list(src.env, src.s3, src.ns, src.name)?);
    ensure!(
        listed == listed_before,
        "the catalog changed:\n{listed_before}\n{listed}"
    );
    ctx.note(format!(
        "backup killed mid-upload ({} MiB staged): no object under the prefix, {} complete backups as before",
        staged >> 20,
        listed.split_whitespace().next().unwrap_or("?")
    ));
    sql(
        Engine::Postgresql,
        src.root,
        &primary_ip,
        src.password,
        "drop table big",
    )?;
    Ok(())
}

/// Both failure cases, in order.
/// A new cluster bootstrapped from a cluster that has no backups: its first member's restore
/// fails in the init container, and the cluster is Degraded `RestoreFailed`, never Running.
async fn failed_restore(ctx: &Ctx, src: &Source<'_>) -> Result<()> {
    let clusters: Api<DatabaseCluster> = api(src.env, src.ns);
    let dbc = clusters.get(src.name).await?;
    let name = "unrestorable";
    let manifest = super::backups::restore_manifest(
        name,
        src.ns,
        "postgresql",
        &dbc,
        "no-such-cluster",
        src.s3,
    );
    ctx.relevant("databasecluster", src.ns, name);
    let started = Instant::now();
    src.env.cluster.apply(&manifest)?;
    let (phase, message) = wait_for(
        "Degraded RestoreFailed",
        Duration::from_secs(90),
        async || {
            let dbc = clusters.get(name).await?;
            let phase = crate::util::phase(&dbc);
            ensure!(phase != "Running", "{name} is Running without its backup");
            let c = condition(&dbc, "Degraded").cloned();
            Ok(match c {
                Some(c) if c.status == "True" && c.reason == "RestoreFailed" => {
                    Check::Done((phase, c.message))
                }
                other => Check::Pending(format!(
                    "phase {phase}, Degraded {:?}",
                    other.map(|c| (c.status, c.reason, c.message))
                )),
            })
        },
    )
    .await?;
    ensure!(
        phase == "Degraded" && message.contains(&format!("{name}-0")),
        "phase {phase}: {message}"
    );
    ctx.note(format!(
        "a restore of a cluster without backups: Degraded RestoreFailed {:.1}s after apply ({message})",
        started.elapsed().as_secs_f64()
    ));
    clusters.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// The failure cases, in order.
pub(crate) async fn run(ctx: &Ctx, src: &Source<'_>) -> Result<()> {
    wrong_credentials(ctx, src).await?;
    killed_mid_upload(ctx, src).await?;
    failed_restore(ctx, src).await
}

/// `backup list`'s output without its last line about the WAL archive: the archive grows while
/// the server writes (a failed backup must leave the backups as they were, not the archive).
fn backups_listed(listed: &str) -> String {
    listed
        .lines()
        .filter(|l| !l.starts_with("WAL archive: "))
        .map(|l| format!("{l}\n"))
        .collect()
}
