//! A full volume under the primary (docs/reliability.md, the disk-full cell): the first
//! primary's claim is bound, before the cluster exists, to a PersistentVolume whose directory is
//! a small tmpfs of its own; under the writer, that file system is filled to the last byte by a
//! file beside the data directory (as a runaway log or a copy left behind would) and the
//! primary is made to need a new WAL segment. What the server, the operator and the clients see
//! is measured; the scenario requires what must hold whatever they do: never two writable
//! members, no acknowledged row lost, and the cluster serving writes again once the space is
//! freed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;

use crate::env::Env;
use crate::harness::{Ctx, lock};
use crate::scenarios::databases::{ClientSide, Engine, pod_ip, sql_from};
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, primary_pod, rows_lost, running_prepared,
};
use crate::util::{Check, api, describe, events_about, phase, wait_for};

/// The size of the first primary's file system.
const VOLUME_MIB: u64 = 256;
/// How long the full volume is left under the writer before the space is freed.
const FULL_FOR: Duration = Duration::from_secs(45);

/// A tmpfs mounted for the scenario, unmounted (lazily: the server may still hold files on it)
/// when dropped.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let status = Command::new(program).args(args).status()?;
    ensure!(status.success(), "{program} {args:?}: {status}");
    Ok(())
}

/// The PersistentVolume bound ahead to member 0's claim, on `class`.
fn volume_manifest(pv: &str, ns: &str, name: &str, class: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolume
metadata:
  name: {pv}
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  claimRef:
    namespace: {ns}
    name: data-{name}-0
  hostPath:
    path: /nonexistent/e2e/{pv}
"
    )
}

/// Bytes free on the file system of `dir`.
fn free_bytes(dir: &Path) -> Result<u64> {
    let out = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("df of {}: {text}", dir.display()))
}

/// Fills the file system of `dir` to the last byte with files `filler*` in it.
fn fill(dir: &Path) -> Result<u64> {
    let free = free_bytes(dir)?;
    run(
        "fallocate",
        &[
            "-l",
            &free.to_string(),
            &dir.join("filler").to_string_lossy(),
        ],
    )?;
    // Whatever a rounding left: written until the file system refuses.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4096"])
        .arg(format!("of={}", dir.join("filler-rest").display()))
        .stderr(std::process::Stdio::null())
        .status();
    Ok(free)
}

/// The first primary's volume on a 256 MiB tmpfs (PostgreSQL): filled under the writer while
/// the primary switches WAL segments; measured: the write gap, whether and when a failover
/// happened, the events; required: no two writable members, no acknowledged row lost, writes
/// served again after the space is freed, and a failover's reason naming the full volume. A
/// cell of the matrix run with `E2E_MATRIX=1`.
pub async fn postgresql_primary_volume_full(ctx: &Ctx) -> Result<()> {
    primary_volume_full(ctx, Engine::Postgresql, "full-pg").await
}

/// [`postgresql_primary_volume_full`] on MariaDB: the primary asked for new binary logs.
pub async fn mariadb_primary_volume_full(ctx: &Ctx) -> Result<()> {
    primary_volume_full(ctx, Engine::Mariadb, "full-mdb").await
}

/// [`postgresql_primary_volume_full`] on MySQL: the primary asked for new binary logs.
pub async fn mysql_primary_volume_full(ctx: &Ctx) -> Result<()> {
    primary_volume_full(ctx, Engine::Mysql, "full-my").await
}

/// The statement that makes the server start a new file of its log (what a full volume
/// refuses first).
fn new_log_file(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgresql => "select pg_switch_wal()",
        Engine::Mariadb | Engine::Mysql => "flush binary logs",
    }
}

async fn primary_volume_full(ctx: &Ctx, engine: Engine, prefix: &str) -> Result<()> {
    let mounted: Mutex<Option<Tmpfs>> = Mutex::new(None);
    let prepare = |env: &Env, ns: &str, name: &str| -> Result<()> {
        let pv = format!("{ns}-data-0");
        let dir = env.state_dir.join("volumes").join(&pv);
        std::fs::create_dir_all(&dir)?;
        let size = format!("size={VOLUME_MIB}m,mode=0777");
        run(
            "mount",
            &["-t", "tmpfs", "-o", &size, "tmpfs", &dir.to_string_lossy()],
        )?;
        *lock(&mounted) = Some(Tmpfs(dir));
        env.cluster
            .apply(&volume_manifest(&pv, ns, name, "standard"))?;
        Ok(())
    };
    let (env, ns, name, password, root) =
        running_prepared(ctx, engine, prefix, DELAY_SECONDS, "", None, Some(&prepare)).await?;
    let pv = format!("{ns}-data-0");
    let claims: Api<PersistentVolumeClaim> = api(&env, &ns);
    let bound = claims
        .get(&format!("data-{name}-0"))
        .await?
        .spec
        .and_then(|s| s.volume_name);
    ensure!(
        bound.as_deref() == Some(pv.as_str()),
        "member 0's claim is bound to {bound:?}, not the prepared volume {pv}"
    );
    let dir = env.state_dir.join("volumes").join(&pv);
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let old = primary_pod(&env, &ns, &name).await?;
        ensure!(
            old.name_any() == format!("{name}-0"),
            "the primary is {}, not member 0 on the small volume",
            old.name_any()
        );
        let old_ip = pod_ip(&old)?;
        let filled = fill(&dir)?;
        let full_at = Instant::now();
        let full_stamp = Timestamp::now();
        ctx.step(format!(
            "filled the primary's volume: {} MiB written, {} bytes free",
            filled / (1 << 20),
            free_bytes(&dir)?
        ));
        // New log files (WAL segments, binary logs) are what a primary cannot make without
        // space: ask for them while the writer writes, until the server fails.
        let mut switch_errors = Vec::new();
        while full_at.elapsed() < FULL_FOR {
            // Killed after 3 s: a server that waits for space holds the statement for good.
            let side = ClientSide { kill_after: Some(3), ..ClientSide::default() };
            if let Err(e) = sql_from(side, engine, &root, &old_ip, &password, new_log_file(engine), 2) {
                switch_errors.push(format!("{:.1}s: {e:#}", full_at.elapsed().as_secs_f64()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // What the server's threads are doing meanwhile (MySQL and MariaDB wait for space
        // rather than fail): the states a probe could tell a stalled primary by.
        let waiting = match engine {
            Engine::Postgresql => None,
            Engine::Mariadb | Engine::Mysql => {
                let side = ClientSide { kill_after: Some(3), ..ClientSide::default() };
                Some(
                    sql_from(side, engine, &root, &old_ip, &password,
                        "select state, count(*) from information_schema.processlist where state <> '' group by state", 2)
                        .unwrap_or_else(|e| format!("{e:#}"))
                        .replace('\n', "; "),
                )
            }
        };
        // Writes still acknowledged while full (a gap that is still open is measured once the
        // writes come back, below).
        let gap_full = lock(&load.writes).gap_after(full_at);
        let failed_writes = lock(&load.writes)
            .errors
            .iter()
            .filter(|(at, _, _)| *at >= full_at)
            .map(|(_, _, line)| line.clone())
            .collect::<Vec<_>>();
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let dbc = clusters.get(&name).await?;
        let last = dbc
            .status
            .as_ref()
            .and_then(|s| s.failover.as_ref())
            .and_then(|f| f.last.clone())
            .filter(|l| l.started.0 >= full_stamp - k8s_openapi::jiff::SignedDuration::from_secs(1));
        let events: Vec<String> = events_about(&env, &ns, &name)
            .await?
            .iter()
            .filter(|e| e.type_ == "Warning" || e.reason == "Failover")
            .map(|e| format!("{} {}: {}", e.type_, e.reason, e.note))
            .collect();
        ctx.note(format!(
            "volume full for {}s: longest closed write gap {:.1}s, {} failed writes (first: {:?}); `{}` failures: {} (first: {:?}); failover: {:?}; {}",
            FULL_FOR.as_secs(),
            gap_full.as_secs_f64(),
            failed_writes.len(),
            failed_writes.first(),
            new_log_file(engine),
            switch_errors.len(),
            switch_errors.first(),
            last.as_ref().map(|l| (l.kind, l.outcome, l.to.clone(), l.reason.clone())),
            describe(&dbc)
        ));
        if let Some(states) = waiting {
            ctx.note(format!("the primary's threads while full: {states}"));
        }
        ctx.note(format!("events: {events:?}"));
        // A failover of a primary whose server stopped on the full volume says so.
        if let Some(last) = &last {
            ensure!(
                last.reason.contains("volume is full"),
                "the failover's reason does not name the full volume: {:?}",
                last.reason
            );
        }

        for file in ["filler", "filler-rest"] {
            let _ = std::fs::remove_file(dir.join(file));
        }
        let freed = Instant::now();
        ctx.step(format!("freed the space: {} bytes free", free_bytes(&dir)?));
        wait_for("the cluster Running with every member ready", Duration::from_secs(180), async || {
            let dbc = clusters.get(&name).await?;
            let ready = dbc.status.as_ref().map_or(0, |s| s.ready_replicas);
            Ok(if phase(&dbc) == "Running" && ready == 3 {
                Check::Done(())
            } else {
                Check::Pending(describe(&dbc))
            })
        })
        .await?;
        let after = Instant::now();
        wait_for("the writer acknowledged after the space was freed", Duration::from_secs(60), async || {
            let n = lock(&load.writes).acked.iter().filter(|(_, at, _)| *at > after).count();
            Ok(if n >= 10 { Check::Done(()) } else { Check::Pending(format!("{n} rows")) })
        })
        .await?;
        ctx.note(format!(
            "space freed: Running with 3 ready and writes served {:.1}s later; longest write gap from the fill on {:.1}s",
            freed.elapsed().as_secs_f64(),
            lock(&load.writes).gap_after(full_at).as_secs_f64()
        ));
        let primary = primary_pod(&env, &ns, &name).await?;
        let (acked, lost) = rows_lost(&load, engine, &root, &pod_ip(&primary)?, &password).await?;
        ensure!(
            lost.is_empty(),
            "{} of {acked} acknowledged rows lost: {:?}",
            lost.len(),
            lost.iter().take(10).collect::<Vec<_>>()
        );
        ctx.note(format!(
            "{acked} rows acknowledged, none lost; primary now {}",
            primary.name_any()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let result = load.finish_checked(pods_task, result);
    // The volume goes with the scenario's namespace; the tmpfs and the retained PV with it.
    drop(lock(&mounted).take());
    let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(env.client.clone());
    let _ = volumes.delete(&pv, &Default::default()).await;
    result
}
