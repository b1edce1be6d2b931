//! Backups on process nodes, per engine (PostgreSQL and MariaDB): a cluster of
//! `examples/local/` with `spec.backup` pointing at the local S3 server (Secret
//! `default/local-s3`); the backup CronJob's Job, made by hand from its template as
//! `kubectl create job --from=cronjob/...` does, runs our binary in the database image and
//! leaves a dump and its manifest in the bucket; with `retention: 2`, four runs (the last asked
//! for with `kubectl dbc backup`, which follows it to `status.lastBackup`) leave exactly the two
//! newest; a new cluster bootstrapped from the newest holds the same rows. One cluster per
//! engine serves all of it. On PostgreSQL the failure cases ([`backup_failures`]) and
//! point-in-time recovery from a physical backup ([`point_in_time`]) follow.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::{DatabaseCluster, RestoredFrom};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use sha2::{Digest as _, Sha256};
use xtask::cluster::workspace_root;

use crate::env::{Env, build_binary};
use crate::harness::Ctx;
use crate::scenarios::databases::{
    Engine, RUNNING_TIMEOUT, apply_until_running, example_in, image_root, members, password_of,
    pod_ip, sql,
};
use crate::scenarios::{archiving, backup_failures, point_in_time};
use crate::util::{Check, api, describe, kubectl, phase, wait_for};

/// A backup of a small database: copy the binary, dump, upload, manifest.
const JOB_TIMEOUT: Duration = Duration::from_secs(90);
/// The cluster's retention.
const RETENTION: usize = 2;

/// What differs between the engines in this scenario.
pub(crate) struct Case {
    pub(crate) engine: Engine,
    /// `engine` in the manifest.
    engine_name: &'static str,
    /// How the manifest's `serverVersion` starts (the example's version).
    version_prefix: &'static str,
    /// Creates `backed_up` with 2,000 rows, one of them `in the first backup`.
    setup_sql: &'static str,
    /// One line: the row count and a checksum of every row of `backed_up`, in id order.
    pub(crate) checksum_sql: &'static str,
    /// Whether the manifest's `position` looks like the engine's (an LSN, a GTID position).
    position_ok: fn(&str) -> bool,
    /// Creates the application's account `shop_app`, with a password and a grant on
    /// `backed_up`.
    account_sql: &'static str,
    /// One answer that holds `shop_app`'s password hash and its grant.
    account_check_sql: &'static str,
    /// Whether the cluster archives its write-ahead log (`spec.backup.archive`).
    archive: bool,
}

pub(crate) const POSTGRESQL: Case = Case {
    engine: Engine::Postgresql,
    engine_name: "postgresql",
    version_prefix: "15.",
    setup_sql: "create table backed_up (id int primary key, note text); insert into backed_up values (1, 'in the first backup'); insert into backed_up select g, 'row ' || g from generate_series(2, 2000) g",
    checksum_sql: "select count(*) || ':' || md5(string_agg(id || note, ',' order by id)) from backed_up",
    position_ok: |p| p.contains('/'),
    account_sql: "create role shop_app login password 'app-pw-1'; grant select on backed_up to shop_app",
    account_check_sql: "select rolpassword || ':' || has_table_privilege('shop_app', 'backed_up', 'select') from pg_authid where rolname = 'shop_app'",
    archive: true,
};

pub(crate) const MARIADB: Case = Case {
    engine: Engine::Mariadb,
    engine_name: "mariadb",
    version_prefix: "10.11.",
    setup_sql: "create database app; use app; create table app.backed_up (id int primary key, note text); insert into app.backed_up values (1, 'in the first backup'); insert into app.backed_up select seq, concat('row ', seq) from seq_2_to_2000",
    checksum_sql: "select concat(count(*), ':', md5(group_concat(concat(id, note) order by id separator ','))) from app.backed_up",
    // domain-server-sequence
    position_ok: |p| p.split('-').count() == 3,
    account_sql: "create user 'shop_app'@'%' identified by 'app-pw-1'; grant select on app.backed_up to 'shop_app'@'%'",
    account_check_sql: "show grants for 'shop_app'@'%'",
    archive: false,
};

/// What the local S3 server's Secret says.
pub(crate) struct LocalS3 {
    pub(crate) endpoint: String,
    pub(crate) bucket: String,
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
}

pub(crate) async fn local_s3(env: &Env) -> Result<LocalS3> {
    let secret: Secret = api(env, "default").get("local-s3").await?;
    let data = secret.data.unwrap_or_default();
    let get = |key: &str| -> Result<String> {
        let bytes = data
            .get(key)
            .with_context(|| format!("Secret default/local-s3 has no {key}"))?;
        Ok(String::from_utf8(bytes.0.clone())?)
    };
    Ok(LocalS3 {
        endpoint: get("endpoint")?,
        bucket: get("bucket")?,
        access_key_id: get("AWS_ACCESS_KEY_ID")?,
        secret_access_key: get("AWS_SECRET_ACCESS_KEY")?,
    })
}

/// The example with two members (a replica to dump from) and `spec.backup` to the local S3
/// server, the keys in a copy of its Secret in `ns`. The schedule never fires during the test.
pub(crate) fn manifest_with_backup(
    engine: Engine,
    ns: &str,
    s3: &LocalS3,
) -> Result<(String, String)> {
    let (text, name) = example_in(engine, ns)?;
    ensure!(
        text.trim_end().ends_with("effect: NoSchedule") && text.contains("  replicas: 3\n"),
        "examples/local/ of {engine:?} changed shape; adjust the backups scenario"
    );
    let text = text.replace("  replicas: 3\n", "  replicas: 2\n");
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: local-s3\n  namespace: {ns}\ntype: Opaque\nstringData:\n  AWS_ACCESS_KEY_ID: {}\n  AWS_SECRET_ACCESS_KEY: {}\n---\n",
        s3.access_key_id, s3.secret_access_key
    );
    let backup = format!(
        "  backup:\n    schedule: \"0 0 1 1 *\"\n    retention: {RETENTION}\n    s3Bucket: {}\n    endpoint: {}\n    region: us-east-1\n    credentialsSecretRef:\n      name: local-s3\n    verify:\n      schedule: \"0 0 1 1 *\"\n",
        s3.bucket, s3.endpoint
    );
    Ok((format!("{secret}{}\n{backup}", text.trim_end()), name))
}

/// The directory of the cluster's prefix in the bucket: the posix backend keeps each object
/// as a file `<bucket dir>/<key>`.
pub(crate) fn prefix_dir(env: &Env, s3: &LocalS3, ns: &str, name: &str) -> PathBuf {
    env.state_dir
        .join("s3")
        .join(&s3.bucket)
        .join(ns)
        .join(name)
}

/// The objects of the cluster's prefix in the bucket (not those in its folders).
pub(crate) fn stored(
    env: &Env,
    s3: &LocalS3,
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, PathBuf>> {
    let dir = prefix_dir(env, s3, ns, name);
    let mut found = BTreeMap::new();
    if let Ok(entries) = fs::read_dir(&dir) {
        for entry in entries {
            let entry = entry?;
            let file = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_file() && !file.starts_with('.') {
                found.insert(file, entry.path());
            }
        }
    }
    Ok(found)
}

/// `database-operator backup list` against the bucket, as the backup Job would see it.
pub(crate) fn backup_list(env: &Env, s3: &LocalS3, ns: &str, name: &str) -> Result<String> {
    let out = Command::new(&env.operator_bin)
        .args(["backup", "list"])
        .args([
            &format!("--namespace={ns}"),
            &format!("--cluster={name}"),
            &format!("--bucket={}", s3.bucket),
            &format!("--endpoint={}", s3.endpoint),
            "--region=us-east-1",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AWS_ACCESS_KEY_ID", &s3.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", &s3.secret_access_key)
        .output()
        .context("running database-operator backup list")?;
    ensure!(
        out.status.success(),
        "backup list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts a Job from the backup CronJob (as `kubectl create job --from=cronjob/...`) and waits
/// for it to succeed; on failure, the backup container's log.
pub(crate) async fn run_backup_job(
    ctx: &Ctx,
    env: &Env,
    ns: &str,
    cron_job: &str,
    job: &str,
) -> Result<f64> {
    let started = Instant::now();
    create_job_from(env, ns, cron_job, job)?;
    let jobs: Api<Job> = api(env, ns);
    let result = wait_for(&format!("Job {job} to succeed"), JOB_TIMEOUT, async || {
        let status = jobs.get(job).await?.status.unwrap_or_default();
        if status.succeeded.unwrap_or(0) > 0 {
            return Ok(Check::Done(()));
        }
        if status.failed.unwrap_or(0) > 0 {
            bail!("Job {job} has a failed pod");
        }
        Ok(Check::Pending(format!(
            "active {:?}, failed {:?}",
            status.active, status.failed
        )))
    })
    .await;
    if let Err(e) = result {
        let logs = pod_logs(env, ns, job);
        bail!("{e:#}\n{logs}");
    }
    let seconds = started.elapsed().as_secs_f64();
    ctx.step(format!("Job {job} succeeded in {seconds:.1}s"));
    Ok(seconds)
}

/// Creates Job `job` from CronJob `cron_job`'s template, as `kubectl create job --from` does.
fn create_job_from(env: &Env, ns: &str, cron_job: &str, job: &str) -> Result<()> {
    let from = format!("--from=cronjob/{cron_job}");
    let out = kubectl(env, &["create", "job", "-n", ns, &from, job], None)?;
    ensure!(out.ok, "kubectl create job: {}", out.stderr);
    Ok(())
}

/// The logs of the Job's pods' containers (process nodes write them under the state dir).
fn pod_logs(env: &Env, ns: &str, job: &str) -> String {
    let pods = env.state_dir.join("pods");
    let mut out = String::new();
    for entry in fs::read_dir(&pods).into_iter().flatten().flatten() {
        let dir = entry.file_name().to_string_lossy().into_owned();
        if !dir.starts_with(&format!("{ns}_{job}-")) {
            continue;
        }
        for container in ["install-operator", "backup", "verify"] {
            let path = entry.path().join(format!("{container}.log"));
            let text = fs::read_to_string(&path).unwrap_or_default();
            out.push_str(&format!("--- {}:\n{text}\n", path.display()));
        }
    }
    out
}

/// The id of the newest complete backup in `backup list`'s output.
fn newest_id(listed: &str) -> Result<String> {
    listed
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .max()
        .map(str::to_owned)
        .with_context(|| format!("no complete backup listed:\n{listed}"))
}

fn sha256_hex(path: &Path) -> Result<String> {
    let bytes = fs::read(path)?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// A PostgreSQL cluster backs up to the local S3 server through the CronJob's Job; retention
/// keeps the newest two; a new cluster restored from the newest has the same rows.
pub async fn postgresql_backup_to_local_s3(ctx: &Ctx) -> Result<()> {
    backups_restore_and_retention(ctx, &POSTGRESQL).await
}

/// The same for a MariaDB cluster.
pub async fn mariadb_backup_to_local_s3(ctx: &Ctx) -> Result<()> {
    backups_restore_and_retention(ctx, &MARIADB).await
}

async fn backups_restore_and_retention(ctx: &Ctx, case: &Case) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let engine = case.engine;
    let root = image_root(engine).await?;
    let s3 = local_s3(&env).await?;
    let ns = ctx
        .namespace(&format!("backups-{}", case.engine_name))
        .await?;
    ctx.retire_on_success(&ns);
    let (mut manifest, name) = manifest_with_backup(engine, &ns, &s3)?;
    if case.archive {
        manifest.push_str(&archiving::archive_lines());
    }
    ctx.relevant("databasecluster", &ns, &name);
    let (dbc, took) = apply_until_running(&env, &ns, &name, &manifest).await?;
    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    ctx.note(format!(
        "2 members Running {:.1}s after apply",
        took.as_secs_f64()
    ));
    let password = password_of(&env, &ns, &dbc).await?;
    let (_, primary) = members(&env, &ns, &name).await?;
    let primary_ip = pod_ip(&primary)?;
    sql(engine, &root, &primary_ip, &password, case.setup_sql)?;
    sql(engine, &root, &primary_ip, &password, case.account_sql)?;
    let source_account = sql(
        engine,
        &root,
        &primary_ip,
        &password,
        case.account_check_sql,
    )?;
    if case.archive {
        archiving::archive_works(ctx, &env, &s3, &ns, &name, &primary_ip, &password).await?;
    }

    // The CronJob dumps from the replicas once a replica is ready.
    let cron_name = format!("{name}-backup");
    let cron_jobs: Api<CronJob> = api(&env, &ns);
    // The replicas first, then the primary: the backup dumps from the first that answers.
    let replicas_host = format!("{name}-replicas.{ns}.svc,{name}.{ns}.svc");
    wait_for(
        "the CronJob to dump from the replicas",
        Duration::from_secs(30),
        async || {
            let cron = cron_jobs.get(&cron_name).await?;
            let host = cron
                .spec
                .job_template
                .spec
                .and_then(|s| s.template.spec)
                .and_then(|p| p.containers.into_iter().next())
                .and_then(|c| c.env)
                .and_then(|env| env.into_iter().find(|e| e.name == "BACKUP_HOST"))
                .and_then(|e| e.value)
                .unwrap_or_default();
            Ok(if host == replicas_host {
                Check::Done(())
            } else {
                Check::Pending(format!("BACKUP_HOST {host:?}"))
            })
        },
    )
    .await?;

    // One backup: a dump and its manifest, nothing else.
    let seconds = run_backup_job(ctx, &env, &ns, &cron_name, "backup-1").await?;
    ctx.note(format!(
        "first backup Job succeeded {seconds:.1}s after creation"
    ));
    let objects = stored(&env, &s3, &ns, &name)?;
    let names: Vec<&String> = objects.keys().collect();
    ensure!(
        objects.len() == 2,
        "want a dump and a manifest under {ns}/{name}/, found {names:?}"
    );
    let manifest_file = objects
        .keys()
        .find(|k| k.ends_with(".manifest.json"))
        .context("no manifest")?
        .clone();
    let id = manifest_file.trim_end_matches(".manifest.json").to_owned();
    let dump = objects
        .get(&format!("{id}.dump.sql.gz"))
        .with_context(|| format!("no dump beside {manifest_file}: {names:?}"))?;
    let doc: serde_json::Value = serde_json::from_slice(&fs::read(&objects[&manifest_file])?)?;
    ensure!(doc["kind"] == "database-operator.backup", "{doc}");
    ensure!(
        doc["namespace"] == ns.as_str() && doc["cluster"] == name.as_str(),
        "{doc}"
    );
    ensure!(doc["id"] == id.as_str(), "{doc}");
    ensure!(doc["engine"] == case.engine_name, "{doc}");
    ensure!(
        doc["serverVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with(case.version_prefix)),
        "{doc}"
    );
    ensure!(
        doc["position"].as_str().is_some_and(case.position_ok),
        "no replication position: {doc}"
    );
    ensure!(doc["compression"] == "gzip", "{doc}");
    ensure!(
        doc["size"].as_u64() == Some(fs::metadata(dump)?.len()),
        "{doc}"
    );
    ensure!(doc["sha256"] == sha256_hex(dump)?.as_str(), "{doc}");
    ensure!(doc["started"].as_str() <= doc["finished"].as_str(), "{doc}");
    let sql_text = Command::new("gzip").arg("-dc").arg(dump).output()?;
    ensure!(sql_text.status.success(), "the dump is not gzip");
    ensure!(
        String::from_utf8_lossy(&sql_text.stdout).contains("in the first backup"),
        "the dump does not hold the row written before it"
    );
    let listed = backup_list(&env, &s3, &ns, &name)?;
    ensure!(
        listed.starts_with(&format!("1 complete backup(s) under {ns}/{name}/")),
        "{listed}"
    );
    ctx.step(format!(
        "backup {id}: {} bytes, manifest checked",
        doc["size"]
    ));

    // Three more, the last asked for with `kubectl dbc backup` (the backup-now annotation):
    // retention keeps the newest two, the first two are gone.
    run_backup_job(ctx, &env, &ns, &cron_name, "backup-2").await?;
    let second = newest_id(&backup_list(&env, &s3, &ns, &name)?)?;
    run_backup_job(ctx, &env, &ns, &cron_name, "backup-3").await?;
    let built = Instant::now();
    let bin = tokio::task::spawn_blocking(|| {
        build_binary(&workspace_root(), "kubectl-dbc", "kubectl-dbc")
    })
    .await??;
    ctx.step(format!(
        "built {} ({:.1}s)",
        bin.display(),
        built.elapsed().as_secs_f64()
    ));
    let requested = Instant::now();
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["-n", &ns])
        .args(["backup", &name, "--timeout"])
        .arg(format!("{}s", JOB_TIMEOUT.as_secs()))
        .output()
        .context("running kubectl-dbc backup")?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    eprintln!("{stdout}{stderr}");
    ensure!(
        out.status.success(),
        "kubectl dbc backup failed ({}):\n{stdout}{stderr}",
        out.status
    );
    let done_prefix = format!("backup of {name} done: Job ");
    let job_name = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&done_prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("kubectl dbc backup did not name its Job:\n{stdout}"))?
        .to_owned();
    ensure!(
        stdout.contains("running (started "),
        "kubectl dbc backup did not show the Job running:\n{stdout}"
    );
    let jobs: Api<Job> = api(&env, &ns);
    let job = jobs.get(&job_name).await?;
    ensure!(
        job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0,
        "the plugin reported {job_name} done but the Job has not succeeded: {:?}",
        job.status
    );
    let value = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("database.example.com/backup-now"))
        .cloned()
        .with_context(|| format!("Job {job_name} has no backup-now annotation"))?;
    let dbc = clusters.get(&name).await?;
    let status = dbc.status.clone().unwrap_or_default();
    ensure!(
        status.handled_backup_now.as_deref() == Some(value.as_str()),
        "status.handledBackupNow is {:?}, the Job's request {value}",
        status.handled_backup_now
    );
    ensure!(
        status.last_backup.as_ref().map(|l| l.job.as_str()) == Some(job_name.as_str()),
        "kubectl dbc backup returned before status.lastBackup named {job_name}: {:?}",
        status.last_backup
    );
    ctx.note(format!(
        "kubectl dbc backup: Job {job_name} (backup-now={value}) reported in status.lastBackup \
         {:.1}s after the request",
        requested.elapsed().as_secs_f64()
    ));
    // The status follows the Jobs: the last backup is that Job's, and backups are healthy.
    wait_for(
        "status.lastBackup and BackupHealthy=True",
        Duration::from_secs(20),
        async || {
            let dbc = clusters.get(&name).await?;
            let status = dbc.status.clone().unwrap_or_default();
            let last = status.last_backup.as_ref().map(|l| l.job.clone());
            let healthy = status
                .conditions
                .iter()
                .find(|c| c.type_ == "BackupHealthy")
                .map(|c| (c.status.clone(), c.reason.clone()));
            Ok(
                if last.as_deref() == Some(job_name.as_str())
                    && healthy == Some(("True".into(), "BackupSucceeded".into()))
                {
                    Check::Done(())
                } else {
                    Check::Pending(format!("lastBackup {last:?}, BackupHealthy {healthy:?}"))
                },
            )
        },
    )
    .await?;
    // Each backup is one event naming its Job.
    let event = wait_for(
        &format!("a BackupCompleted event naming {job_name}"),
        Duration::from_secs(20),
        async || {
            let events = crate::util::events_about(&env, &ns, &name).await?;
            let named: Vec<_> = events
                .iter()
                .filter(|e| e.reason == "BackupCompleted" && e.note.contains(job_name.as_str()))
                .collect();
            Ok(match named.as_slice() {
                [one] => Check::Done(one.note.clone()),
                [] => Check::Pending(format!(
                    "{} BackupCompleted events, none for this Job",
                    events
                        .iter()
                        .filter(|e| e.reason == "BackupCompleted")
                        .count()
                )),
                many => bail!("{} BackupCompleted events for {job_name}", many.len()),
            })
        },
    )
    .await?;
    ctx.note(format!("event BackupCompleted: {event}"));
    let listed = backup_list(&env, &s3, &ns, &name)?;
    // The Job's report (its termination message) reaches the status: the key and size of
    // this backup, and how many retention kept.
    let reported = wait_for(
        "status.lastBackup.key and status.backupCount from the Job's report",
        Duration::from_secs(20),
        async || {
            let status = clusters.get(&name).await?.status.unwrap_or_default();
            let last = status.last_backup.clone();
            Ok(match (&last, status.backup_count) {
                (Some(l), Some(count)) if l.job == job_name && l.key.is_some() => {
                    Check::Done((l.clone(), count))
                }
                _ => Check::Pending(format!(
                    "lastBackup {last:?}, backupCount {:?}",
                    status.backup_count
                )),
            })
        },
    )
    .await?;
    let (last, count) = reported;
    let key = last.key.clone().unwrap_or_default();
    let file = key.rsplit('/').next().unwrap_or_default().to_owned();
    let on_disk = stored(&env, &s3, &ns, &name)?
        .get(&file)
        .map(|p| fs::metadata(p).map(|m| m.len()))
        .transpose()?;
    ensure!(
        key.starts_with(&format!("{ns}/{name}/"))
            && listed.contains(file.trim_end_matches(".dump.sql.gz"))
            && on_disk.is_some()
            && last.size_bytes == on_disk.and_then(|n| i64::try_from(n).ok()),
        "status.lastBackup {last:?} does not match the bucket (object {file}: {on_disk:?} bytes):\n{listed}"
    );
    ensure!(
        count == i32::try_from(RETENTION)?,
        "status.backupCount is {count}, retention keeps {RETENTION}"
    );
    ctx.note(format!(
        "status: lastBackup {key} ({} bytes), backupCount {count}",
        last.size_bytes.unwrap_or_default()
    ));
    ensure!(
        listed.starts_with(&format!(
            "{RETENTION} complete backup(s) under {ns}/{name}/"
        )),
        "{listed}"
    );
    ensure!(!listed.contains("incomplete"), "{listed}");
    let objects = stored(&env, &s3, &ns, &name)?;
    ensure!(
        objects.len() == 2 * RETENTION
            && !objects
                .keys()
                .any(|k| k.starts_with(&id) || k.starts_with(&second)),
        "after 4 runs with retention {RETENTION} ({id} and {second} expired): {:?}",
        objects.keys().collect::<Vec<_>>()
    );
    ctx.note(format!(
        "4 backups, retention {RETENTION}: the first two removed, {} objects left",
        objects.len()
    ));

    // A new cluster starts from the newest backup and holds exactly the same rows.
    let checksum = case.checksum_sql;
    let source_sum = sql(engine, &root, &primary_ip, &password, checksum)?;
    let restored = "restored";
    let manifest = restore_manifest(restored, &ns, case.engine_name, &dbc, &name, &s3);
    ctx.relevant("databasecluster", &ns, restored);
    let started = Instant::now();
    env.cluster.apply(&manifest)?;
    await_running(&clusters, restored).await?;
    let (_, restored_primary) = members(&env, &ns, restored).await?;
    let restored_sum = sql(
        engine,
        &root,
        &pod_ip(&restored_primary)?,
        &password,
        checksum,
    )?;
    ensure!(
        restored_sum == source_sum,
        "the restored cluster holds {restored_sum}, the source {source_sum}"
    );
    // The application's account came back with its password hash and its grant.
    let restored_account = sql(
        engine,
        &root,
        &pod_ip(&restored_primary)?,
        &password,
        case.account_check_sql,
    )?;
    ensure!(
        !source_account.trim().is_empty() && restored_account == source_account,
        "the application's account shop_app: restored {restored_account:?}, source {source_account:?}"
    );
    ctx.note("the application's account shop_app came back with the same password hash and grant");
    ctx.note(format!(
        "a new cluster from the newest backup was Running with the same rows ({source_sum}) {:.1}s after apply",
        started.elapsed().as_secs_f64()
    ));
    // Its status names the backup `latest` resolved to (the restore's report).
    let newest = newest_id(&backup_list(&env, &s3, &ns, &name)?)?;
    let recorded = await_restored_from(&clusters, restored).await?;
    ensure!(
        recorded.backup == newest
            && recorded.cluster == format!("{ns}/{name}")
            && recorded.key.ends_with(&format!("{newest}.dump.sql.gz")),
        "status.restoredFrom {recorded:?}, the newest backup of {ns}/{name} is {newest}"
    );
    ctx.note(format!(
        "status.restoredFrom: backup {} of {} ({})",
        recorded.backup, recorded.cluster, recorded.key
    ));

    restore_drills(ctx, &env, &s3, &ns, &name, case).await?;

    // The operator exports the last backup's time (recounted with the phase gauge).
    wait_for(
        "database_cluster_last_backup_timestamp_seconds",
        Duration::from_secs(40),
        async || {
            let value =
                env.main_operator_metric("database_cluster_last_backup_timestamp_seconds")?;
            Ok(if value > 1.0e9 {
                Check::Done(())
            } else {
                Check::Pending(format!("{value}"))
            })
        },
    )
    .await?;

    // The failure cases need one engine only: they are in the binary and the Job, not the dump.
    if engine == Engine::Postgresql {
        let source = backup_failures::Source {
            env: &env,
            s3: &s3,
            ns: &ns,
            name: &name,
            root: &root,
            password: &password,
        };
        backup_failures::run(ctx, &source).await?;
        point_in_time::run(ctx, &source).await?;
    }
    Ok(())
}

/// Waits for the cluster `name` to be Running.
pub(crate) async fn await_running(clusters: &Api<DatabaseCluster>, name: &str) -> Result<()> {
    wait_for(&format!("{name} Running"), RUNNING_TIMEOUT, async || {
        let dbc = clusters.get(name).await?;
        Ok(if phase(&dbc) == "Running" {
            Check::Done(())
        } else {
            Check::Pending(describe(&dbc))
        })
    })
    .await
}

/// Waits for the restored cluster `name`'s `status.restoredFrom` (its restore's report).
pub(crate) async fn await_restored_from(
    clusters: &Api<DatabaseCluster>,
    name: &str,
) -> Result<RestoredFrom> {
    wait_for(
        &format!("{name}'s status.restoredFrom"),
        Duration::from_secs(20),
        async || {
            let status = clusters.get(name).await?.status.unwrap_or_default();
            Ok(match status.restored_from {
                Some(r) => Check::Done(r),
                None => Check::Pending("no restoredFrom".into()),
            })
        },
    )
    .await
}

/// Restore drills from the drill CronJob `<name>-verify`: one on the newest backup succeeds
/// (the restored table and its rows named in the log, `status.lastVerifiedBackup`,
/// `BackupVerified=True`); with one byte of that backup's dump changed in the bucket the next
/// one fails with `BackupMismatch`, the last success kept. The byte is put back afterwards.
async fn restore_drills(
    ctx: &Ctx,
    env: &Env,
    s3: &LocalS3,
    ns: &str,
    name: &str,
    case: &Case,
) -> Result<()> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let cron_name = format!("{name}-verify");
    let verified = |want: (&'static str, &'static str), job: &'static str| {
        let clusters = clusters.clone();
        async move {
            wait_for(
                &format!("BackupVerified {want:?} for {job}"),
                Duration::from_secs(30),
                async || {
                    let dbc = clusters.get(name).await?;
                    let status = dbc.status.clone().unwrap_or_default();
                    let last = status.last_verified_backup.clone();
                    let condition = status
                        .conditions
                        .iter()
                        .find(|c| c.type_ == "BackupVerified")
                        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
                    Ok(match (&last, &condition) {
                        (Some(l), Some((s, r, m)))
                            if l.job == job && (s.as_str(), r.as_str()) == want =>
                        {
                            Check::Done((l.clone(), m.clone()))
                        }
                        _ => Check::Pending(format!("{last:?} {condition:?}")),
                    })
                },
            )
            .await
        }
    };
    // Each drill is one event naming its Job, Normal or Warning as it ended.
    let drill_event = async |reason: &str, job: &str| -> Result<String> {
        wait_for(
            &format!("a {reason} event naming {job}"),
            Duration::from_secs(20),
            async || {
                let events = crate::util::events_about(env, ns, name).await?;
                let named: Vec<_> = events
                    .iter()
                    .filter(|e| e.reason == reason && e.note.contains(job))
                    .collect();
                Ok(match named.as_slice() {
                    [one] => Check::Done(format!("{} {}: {}", one.type_, one.reason, one.note)),
                    [] => Check::Pending(format!("no {reason} event for {job}")),
                    many => bail!("{} {reason} events for {job}", many.len()),
                })
            },
        )
        .await
    };
    let seconds = run_backup_job(ctx, env, ns, &cron_name, "drill-1").await?;
    let log = pod_logs(env, ns, "drill-1");
    let table_line = match case.engine {
        Engine::Postgresql => "postgres.public.backed_up: 2000 rows",
        Engine::Mariadb | Engine::Mysql => "app.backed_up: 2000 rows",
    };
    ensure!(
        log.contains(table_line) && log.contains("every one matching the manifest"),
        "the drill's log does not show {table_line:?} matched:\n{log}"
    );
    let (last, message) = verified(("True", "RestoreDrillPassed"), "drill-1").await?;
    ensure!(
        last.succeeded && last.last_success.as_ref() == Some(&last.finished),
        "{last:?}"
    );
    ctx.note(format!(
        "restore drill on the newest backup passed in {seconds:.1}s ({table_line}): {message}"
    ));
    let event = drill_event("RestoreDrillPassed", "drill-1").await?;
    ensure!(event.starts_with("Normal"), "{event}");

    // One byte of the newest dump changed: the next drill refuses it.
    let newest = newest_id(&backup_list(env, s3, ns, name)?)?;
    let objects = stored(env, s3, ns, name)?;
    let dump = objects
        .get(&format!("{newest}.dump.sql.gz"))
        .with_context(|| format!("no dump of {newest}"))?
        .clone();
    let original = fs::read(&dump)?;
    let mut corrupted = original.clone();
    let middle = corrupted.len() / 2;
    corrupted[middle] ^= 0x5a;
    fs::write(&dump, &corrupted)?;
    let failing_drill = async |job: &str| -> Result<()> {
        create_job_from(env, ns, &cron_name, job)?;
        let jobs: Api<Job> = api(env, ns);
        wait_for(&format!("{job} to fail"), JOB_TIMEOUT, async || {
            let status = jobs.get(job).await?.status.unwrap_or_default();
            ensure!(
                status.succeeded.unwrap_or(0) == 0,
                "the drill of a corrupted backup succeeded:\n{}",
                pod_logs(env, ns, job)
            );
            let failed = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Failed" && c.status == "True");
            Ok(if failed {
                Check::Done(())
            } else {
                Check::Pending(format!("active {:?}", status.active))
            })
        })
        .await
    };
    let result = async {
        failing_drill("drill-2").await?;
        let (last, message) = verified(("False", "BackupMismatch"), "drill-2").await?;
        ensure!(
            !last.succeeded && last.last_success.is_some() && message.contains("drill-2"),
            "{last:?}: {message}"
        );
        let log = pod_logs(env, ns, "drill-2");
        ensure!(
            log.contains(&newest) && log.contains("sha256"),
            "the failed drill's log does not name the backup and the checksum:\n{log}"
        );
        ctx.note(format!(
            "restore drill on backup {newest} with one byte changed failed: {message}"
        ));
        let event = drill_event("RestoreDrillFailed", "drill-2").await?;
        ensure!(event.starts_with("Warning"), "{event}");
        Ok(())
    }
    .await;
    fs::write(&dump, &original)?;
    result?;

    // The dump intact but the manifest's row count of the table one lower: the drill restores
    // it and finds the table holds one row more than the backup says.
    let manifest_file = objects
        .get(&format!("{newest}.manifest.json"))
        .with_context(|| format!("no manifest of {newest}"))?
        .clone();
    let original = fs::read(&manifest_file)?;
    let mut doc: serde_json::Value = serde_json::from_slice(&original)?;
    let table = table_line.split(':').next().unwrap_or_default();
    let rows = doc["tables"][table]["rows"]
        .as_u64()
        .with_context(|| format!("the manifest has no rows for {table}: {doc}"))?;
    doc["tables"][table]["rows"] = serde_json::json!(rows - 1);
    let altered = serde_json::to_vec_pretty(&doc)?;
    fs::write(&manifest_file, &altered)?;
    let result = async {
        // Written by someone without the cluster's signing key: refused before the download.
        failing_drill("drill-3").await?;
        let (_, message) = verified(("False", "BackupMismatch"), "drill-3").await?;
        let log = pod_logs(env, ns, "drill-3");
        ensure!(
            log.contains("signature does not match the signing key"),
            "the drill's log does not refuse the altered manifest's signature:\n{log}"
        );
        ctx.note(format!(
            "restore drill with the manifest altered (rows of {table}) and not signed again: refused by its signature ({message})"
        ));
        // Signed again with the cluster's key (from its operator Secret): the drill restores
        // it and finds the table holds one row more than the backup says.
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = api(env, ns);
        let secret = secrets.get(&format!("{name}-operator")).await?;
        let key = secret
            .data
            .as_ref()
            .and_then(|d| d.get("backup-signing-key"))
            .context("the operator Secret has no backup-signing-key")?;
        let key = database_operator_core::backup::signature::SigningKey::new(&key.0)?;
        let signed = database_operator_core::backup::signature::sign(&altered, &key)?;
        fs::write(&manifest_file, signed)?;
        failing_drill("drill-4").await?;
        let (_, message) = verified(("False", "BackupMismatch"), "drill-4").await?;
        let log = pod_logs(env, ns, "drill-4");
        let want = format!("table {table}: {} rows in the backup, {rows} restored", rows - 1);
        ensure!(
            log.contains(&want),
            "the drill's log does not say {want:?}:\n{log}"
        );
        ctx.note(format!(
            "restore drill with the manifest saying {} rows for {table}: failed naming the table ({message})",
            rows - 1
        ));
        Ok(())
    }
    .await;
    fs::write(&manifest_file, &original)?;
    result
}

/// A one-member cluster `name` in `ns` of `engine_name`, with the version and password Secret of
/// `source`, bootstrapped from the newest backup of cluster `from` in the local S3 bucket.
pub(crate) fn restore_manifest(
    name: &str,
    ns: &str,
    engine_name: &str,
    source: &DatabaseCluster,
    from: &str,
    s3: &LocalS3,
) -> String {
    format!(
        "apiVersion: database.example.com/v1alpha1
kind: DatabaseCluster
metadata:
  name: {name}
  namespace: {ns}
spec:
  engine: {engine_name}
  version: \"{version}\"
  replicas: 1
  storage:
    size: 1Gi
  passwordSecretRef:
    name: {secret}
    key: {key}
  scheduling:
    nodeSelector:
      database.example.com/process-node: \"true\"
    tolerations:
      - key: database.example.com/process-node
        operator: Equal
        value: \"true\"
        effect: NoSchedule
  bootstrap:
    fromBackup:
      cluster: {from}
      s3Bucket: {bucket}
      endpoint: {endpoint}
      region: us-east-1
      credentialsSecretRef:
        name: local-s3
",
        version = source.spec.version,
        secret = source.spec.password_secret_ref.name,
        key = source.spec.password_secret_ref.key,
        bucket = s3.bucket,
        endpoint = s3.endpoint,
    )
}
