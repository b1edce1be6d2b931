//! Continuous archiving of PostgreSQL's write-ahead log (`spec.backup.archive`) on process
//! nodes: the primary's archive command (our binary, copied into the pod) uploads each segment
//! to `<bucket>/<namespace>/<name>/wal/`, and `ArchivingHealthy` follows what the primary's
//! archiver reports. The check of a working archive runs inside the PostgreSQL backups
//! scenario; the hung bucket is a matrix cell of its own (it stops the shared S3 server).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use kube::api::Api;

use crate::env::Env;
use crate::harness::Ctx;
use crate::scenarios::backups::{LocalS3, local_s3, manifest_with_backup, prefix_dir};
use crate::scenarios::databases::{
    Engine, apply_until_running, image_root, members, password_of, pod_ip, sql,
};
use crate::util::{Check, api, condition, wait_for};

/// How long an idle primary waits before it archives a partly filled segment, in the
/// scenarios' clusters.
pub(crate) const ARCHIVE_TIMEOUT_SECONDS: u32 = 10;

/// The `spec.backup.archive` lines to append to [`manifest_with_backup`]'s manifest.
pub(crate) fn archive_lines() -> String {
    format!("    archive:\n      timeoutSeconds: {ARCHIVE_TIMEOUT_SECONDS}\n")
}

/// The archived files of the cluster: the posix backend keeps each object as a file
/// `<bucket dir>/<ns>/<name>/wal/<system identifier>/<file>.gz`.
pub(crate) fn archived(
    env: &Env,
    s3: &LocalS3,
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, PathBuf>> {
    let dir = prefix_dir(env, s3, ns, name).join("wal");
    let mut found = BTreeMap::new();
    let Ok(systems) = fs::read_dir(&dir) else {
        return Ok(found);
    };
    for system in systems {
        let system = system?;
        if !system.file_type()?.is_dir() {
            continue;
        }
        for entry in fs::read_dir(system.path())? {
            let entry = entry?;
            let file = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_file() && file.ends_with(".gz") {
                found.insert(file.trim_end_matches(".gz").to_owned(), entry.path());
            }
        }
    }
    Ok(found)
}

/// The length of the decompressed `file`.
fn gunzipped_len(file: &PathBuf) -> Result<usize> {
    let out = Command::new("gzip").arg("-dc").arg(file).output()?;
    ensure!(out.status.success(), "{} is not gzip", file.display());
    Ok(out.stdout.len())
}

/// `ArchivingHealthy` as `(status, reason, message)`.
fn archiving(dbc: &DatabaseCluster) -> Option<(String, String, String)> {
    condition(dbc, "ArchivingHealthy")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits for `ArchivingHealthy` to have `status`; returns its message.
async fn wait_archiving(
    env: &Env,
    ns: &str,
    name: &str,
    status: &str,
    within: Duration,
) -> Result<String> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    wait_for(&format!("ArchivingHealthy={status}"), within, async || {
        let dbc = clusters.get(name).await?;
        Ok(match archiving(&dbc) {
            Some((s, _, message)) if s == status => Check::Done(message),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await
}

/// The name of the WAL segment the primary writes now.
fn current_segment(root: &PathBuf, ip: &str, password: &str) -> Result<String> {
    Ok(sql(
        Engine::Postgresql,
        root,
        ip,
        password,
        "select pg_walfile_name(pg_current_wal_lsn())",
    )?
    .trim()
    .to_owned())
}

/// The check of a working archive, for a PostgreSQL cluster `ns/name` with
/// `spec.backup.archive` and rows written: the primary archives within its timeout, the
/// segment is in the bucket, whole and compressed, and `ArchivingHealthy` is True.
pub(crate) async fn archive_works(
    ctx: &Ctx,
    env: &Env,
    s3: &LocalS3,
    ns: &str,
    name: &str,
    primary_ip: &str,
    password: &str,
) -> Result<()> {
    let root = image_root(Engine::Postgresql).await?;
    let written = Instant::now();
    let segment = current_segment(&root, primary_ip, password)?;
    let path = wait_for(
        &format!("segment {segment} in the archive"),
        Duration::from_secs(u64::from(ARCHIVE_TIMEOUT_SECONDS) * 6),
        async || {
            Ok(match archived(env, s3, ns, name)?.remove(&segment) {
                Some(path) => Check::Done(path),
                None => Check::Pending(format!(
                    "archived: {:?}",
                    archived(env, s3, ns, name)?.keys().collect::<Vec<_>>()
                )),
            })
        },
    )
    .await?;
    ctx.note(format!(
        "segment {segment} archived {:.1}s after the write (archive_timeout {ARCHIVE_TIMEOUT_SECONDS}s)",
        written.elapsed().as_secs_f64()
    ));
    let stored = fs::metadata(&path)?.len();
    let whole = gunzipped_len(&path)?;
    ensure!(
        whole == 16 * 1024 * 1024,
        "{segment} decompresses to {whole} bytes, not a whole 16 MiB segment"
    );
    ctx.step(format!("{segment}: {stored} bytes stored for {whole}"));
    let message = wait_archiving(env, ns, name, "True", Duration::from_secs(60)).await?;
    ctx.note(format!("ArchivingHealthy=True: {message}"));
    Ok(())
}

/// The PID of the local S3 server (versitygw) listening at `endpoint`.
fn s3_server_pid(endpoint: &str) -> Result<u32> {
    let address = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let out = Command::new("pgrep")
        .args(["-f", "--", &format!("--port={address}")])
        .output()
        .context("pgrep")?;
    let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    match pids.as_slice() {
        [pid] => Ok(*pid),
        other => anyhow::bail!("want one S3 server at {address}, found {other:?}"),
    }
}

/// Resumes a stopped process when dropped (a failed check must not leave the shared S3
/// server frozen).
struct Frozen(u32);

impl Frozen {
    fn freeze(pid: u32) -> Result<Frozen> {
        let status = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()?;
        ensure!(status.success(), "kill -STOP {pid}");
        Ok(Frozen(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// A hung bucket (the S3 server frozen): the primary's archive command fails after its
/// deadline, `ArchivingHealthy` turns False and says how many files wait, writes go on; once
/// the bucket answers again every waiting segment is archived and the condition is True.
pub async fn postgresql_hung_bucket_delays_archiving_without_stopping_writes(
    ctx: &Ctx,
) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let engine = Engine::Postgresql;
    let root = image_root(engine).await?;
    let s3 = local_s3(&env).await?;
    let ns = ctx.namespace("archiving-hung").await?;
    ctx.retire_on_success(&ns);
    let (manifest, name) = manifest_with_backup(engine, &ns, &s3)?;
    let manifest = format!("{manifest}{}", archive_lines());
    ctx.relevant("databasecluster", &ns, &name);
    let (dbc, _) = apply_until_running(&env, &ns, &name, &manifest).await?;
    let password = password_of(&env, &ns, &dbc).await?;
    let (_, primary) = members(&env, &ns, &name).await?;
    let ip = pod_ip(&primary)?;
    sql(
        engine,
        &root,
        &ip,
        &password,
        "create table t (id int primary key); insert into t select generate_series(1, 1000)",
    )?;
    archive_works(ctx, &env, &s3, &ns, &name, &ip, &password).await?;

    let frozen = Frozen::freeze(s3_server_pid(&s3.endpoint)?)?;
    let hung_at = Instant::now();
    let mut stuck = Vec::new();
    for round in 0..3 {
        stuck.push(current_segment(&root, &ip, &password)?);
        let written = Instant::now();
        sql(
            engine,
            &root,
            &ip,
            &password,
            &format!(
                "insert into t select generate_series({0}, {0} + 999); select pg_switch_wal()",
                2000 + round * 1000
            ),
        )?;
        ensure!(
            written.elapsed() < Duration::from_secs(5),
            "a write took {:.1}s with the bucket hung",
            written.elapsed().as_secs_f64()
        );
    }
    let message = wait_archiving(&env, &ns, &name, "False", Duration::from_secs(150)).await?;
    ctx.note(format!(
        "ArchivingHealthy=False {:.1}s after the bucket hung: {message}",
        hung_at.elapsed().as_secs_f64()
    ));
    ensure!(
        message.contains("wait on its volume") && message.contains("Writes go on"),
        "{message}"
    );
    let missing: Vec<&String> = stuck
        .iter()
        .filter(|s| !archived(&env, &s3, &ns, &name).is_ok_and(|a| a.contains_key(*s)))
        .collect();
    ensure!(
        !missing.is_empty(),
        "every segment reached a frozen bucket: {stuck:?}"
    );

    drop(frozen);
    let resumed = Instant::now();
    let message = wait_archiving(&env, &ns, &name, "True", Duration::from_secs(180)).await?;
    // True says the last attempt succeeded; every stuck segment follows within a minute.
    wait_for(
        "every waiting segment in the archive",
        Duration::from_secs(60),
        async || {
            let now_archived = archived(&env, &s3, &ns, &name)?;
            let lost: Vec<&String> = stuck
                .iter()
                .filter(|s| !now_archived.contains_key(*s))
                .collect();
            Ok(if lost.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("not archived yet: {lost:?}"))
            })
        },
    )
    .await?;
    ctx.note(format!(
        "the bucket answered again: {} waiting segment(s) archived, ArchivingHealthy=True {:.1}s later: {message}",
        missing.len(),
        resumed.elapsed().as_secs_f64()
    ));
    Ok(())
}
