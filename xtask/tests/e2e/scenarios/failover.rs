//! Failover and switchover on real servers (process nodes): a writer inserts numbered rows
//! through the pod labelled primary while a monitor polls every member's read-only state; the
//! primary's server is frozen with SIGSTOP (a hung primary) for longer than
//! `spec.failover.delaySeconds`, or a switchover is requested by annotation. The scenarios
//! print the write gap and the rows lost, and fail on two writable primaries at any moment.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::failover::{
    FailoverKind, FailoverOutcome, FailoverPhase, FailoverRecord,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::{Ctx, Handed, lock};
use crate::scenarios::databases::{
    Engine, adopt_example, apply_until_running, container_pid, example_in, image_root, password_of,
    pod_ip, restarts, sql, sql_within,
};
use crate::util::{Check, ROLE_LABEL, api, describe, events_about, phase, wait_for};

mod insistent;
mod lost_node;
mod partition;
mod proofs;
mod self_fence;
mod sync;
use insistent::{Insistent, insistent_rows_lost};
pub use lost_node::postgresql_lost_node_fails_over;
pub use partition::{
    mariadb_partitioned_primary_self_fences, mysql_partitioned_primary_self_fences,
    postgresql_partitioned_primary_self_fences, postgresql_partitioned_primary_waits_for_its_fence,
    postgresql_partitioned_replica_catches_up,
};
use proofs::{kill_the_operator_mid_failover, make_a_replica_lag, resume_once_chosen};
pub use self_fence::{
    mariadb_lost_node_self_fences, mysql_lost_node_self_fences, postgresql_lost_node_self_fences,
};
pub use sync::{
    mariadb_sync_switchover_and_failover_lose_nothing,
    mysql_sync_switchover_and_failover_lose_nothing,
    postgresql_sync_switchover_and_failover_lose_nothing,
};

/// `spec.failover.delaySeconds` of the scenarios' clusters.
pub(crate) const DELAY_SECONDS: u64 = 5;
/// `spec.failover.delaySeconds` of the bench's clusters: the default.
const BENCH_DELAY_SECONDS: u64 = 10;
/// How long a failover may take from the freeze until the writer succeeds on a new primary.
pub(crate) const FAILOVER_TIMEOUT: Duration = Duration::from_secs(90);

/// What the writer saw: every acknowledged id with when, and the longest gap between two
/// acknowledged writes.
#[derive(Default)]
pub(crate) struct Writes {
    pub(crate) acked: Vec<(u64, Instant, String)>,
    pub(crate) failures: u64,
    /// Every failed attempt: when it ended, on which IP, and the client's last line.
    pub(crate) errors: Vec<(Instant, String, String)>,
}

impl Writes {
    /// The longest time between two acknowledged writes after `from`.
    pub(crate) fn gap_after(&self, from: Instant) -> Duration {
        let mut last: Option<Instant> = None;
        let mut gap = Duration::ZERO;
        for (_, at, _) in &self.acked {
            if let Some(prev) = last
                && *at >= from
            {
                gap = gap.max(at.duration_since(prev));
            }
            last = Some(*at);
        }
        gap
    }

    pub(crate) fn acked_on(&self, ip: &str, after: Instant) -> usize {
        self.acked
            .iter()
            .filter(|(_, at, on)| on == ip && *at > after)
            .count()
    }
}

/// The shared state of a running writer and monitor.
pub(crate) struct Load {
    root: PathBuf,
    password: String,
    /// The IP of the pod labelled primary, as last listed.
    primary_ip: Arc<Mutex<Option<String>>>,
    /// Every member's IP, as last listed.
    member_ips: Arc<Mutex<Vec<(String, String)>>>,
    pub(crate) writes: Arc<Mutex<Writes>>,
    /// Moments at which more than one member answered as a writable primary.
    violations: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

pub(crate) fn table(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgresql => "fo_rows",
        Engine::Mariadb | Engine::Mysql => "fo.fo_rows",
    }
}

/// `1` when the server accepts writes from ordinary clients, `0` when not.
fn writable_query(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgresql => {
            "select case when pg_is_in_recovery() or current_setting('default_transaction_read_only') = 'on' then 0 else 1 end"
        }
        Engine::Mariadb => "select if(@@global.read_only, 0, 1)",
        Engine::Mysql => "select if(@@global.read_only or @@global.super_read_only, 0, 1)",
    }
}

impl Load {
    pub(crate) fn start(engine: Engine, root: PathBuf, password: String) -> Load {
        let mut load = Load {
            root,
            password,
            primary_ip: Arc::default(),
            member_ips: Arc::default(),
            writes: Arc::default(),
            violations: Arc::default(),
            stop: Arc::default(),
            threads: Vec::new(),
        };
        // The writer: one numbered row at a time through the labelled primary's IP.
        let (root, password, primary, writes, stop) = (
            load.root.clone(),
            load.password.clone(),
            load.primary_ip.clone(),
            load.writes.clone(),
            load.stop.clone(),
        );
        load.threads.push(std::thread::spawn(move || {
            let mut next = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let Some(ip) = lock(&primary).clone() else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let text = format!("insert into {} values ({next})", table(engine));
                // A statement cut off mid-way (a partition) would wait for ever: killed after
                // 10 s, it counts as not acknowledged.
                let side = crate::scenarios::databases::ClientSide {
                    kill_after: Some(10),
                    ..Default::default()
                };
                match crate::scenarios::databases::sql_from(
                    side, engine, &root, &ip, &password, &text, 2,
                ) {
                    Ok(_) => {
                        lock(&writes).acked.push((next, Instant::now(), ip));
                        next += 1;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => {
                        let line = format!("{e:#}")
                            .lines()
                            .last()
                            .unwrap_or_default()
                            .to_owned();
                        lock(&writes).errors.push((Instant::now(), ip, line));
                        // Not acknowledged, but it may have committed (a commit can reach a
                        // replica and the server die before answering): the next attempt takes
                        // the next id, so a retry never fails on its own row.
                        lock(&writes).failures += 1;
                        next += 1;
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        }));
        // The monitor: every member's read-only state, each in its own thread so a frozen
        // server does not hide the others.
        let (root, password, members, violations, stop) = (
            load.root.clone(),
            load.password.clone(),
            load.member_ips.clone(),
            load.violations.clone(),
            load.stop.clone(),
        );
        load.threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ips = lock(&members).clone();
                let answers: Vec<(String, bool)> = std::thread::scope(|s| {
                    let handles: Vec<_> = ips
                        .iter()
                        .map(|(pod, ip)| {
                            let (root, password) = (&root, &password);
                            s.spawn(move || {
                                let got = sql_within(
                                    engine,
                                    root,
                                    ip,
                                    password,
                                    writable_query(engine),
                                    1,
                                );
                                (pod.clone(), got.is_ok_and(|v| v.trim() == "1"))
                            })
                        })
                        .collect();
                    handles.into_iter().filter_map(|h| h.join().ok()).collect()
                });
                let writable: Vec<&str> = answers
                    .iter()
                    .filter(|(_, w)| *w)
                    .map(|(p, _)| p.as_str())
                    .collect();
                if writable.len() > 1 {
                    lock(&violations).push(format!("writable at once: {writable:?}"));
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }));
        load
    }

    /// Stops the writer and the pod follower, then `result`, unless the monitor saw two
    /// writable primaries at once (that fails the scenario whatever else happened).
    pub(crate) fn finish_checked<T>(
        self,
        pods_task: tokio::task::JoinHandle<()>,
        result: Result<T>,
    ) -> Result<T> {
        let (_, violations) = self.finish();
        pods_task.abort();
        ensure!(
            violations.is_empty(),
            "two writable primaries: {violations:?}"
        );
        result
    }

    /// Waits (at most `timeout`) until the writer has had its first ten rows acknowledged.
    pub(crate) async fn first_rows(&self, timeout: Duration) -> Result<()> {
        wait_for("the writer's first rows", timeout, async || {
            let n = lock(&self.writes).acked.len();
            Ok(if n >= 10 {
                Check::Done(())
            } else {
                Check::Pending(format!("{n} rows"))
            })
        })
        .await
    }

    pub(crate) fn finish(mut self) -> (Writes, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let writes = std::mem::take(&mut *lock(&self.writes));
        let violations = lock(&self.violations).clone();
        (writes, violations)
    }
}

/// Keeps the writer's and the monitor's view of the pods current until `stop`.
pub(crate) fn follow_pods(
    env: Arc<Env>,
    ns: String,
    name: String,
    load: &Load,
) -> tokio::task::JoinHandle<()> {
    let (primary, members, stop) = (
        load.primary_ip.clone(),
        load.member_ips.clone(),
        load.stop.clone(),
    );
    tokio::spawn(async move {
        let pods: Api<Pod> = api(&env, &ns);
        while !stop.load(Ordering::Relaxed) {
            if let Ok(list) = pods
                .list(
                    &ListParams::default().labels(&format!("database.example.com/cluster={name}")),
                )
                .await
            {
                let labelled: Vec<&Pod> = list
                    .items
                    .iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.labels().get(ROLE_LABEL).map(String::as_str) == Some("primary")
                    })
                    .collect();
                *lock(&primary) = match labelled.as_slice() {
                    [one] => pod_ip(one).ok(),
                    _ => None,
                };
                *lock(&members) = list
                    .items
                    .iter()
                    .filter_map(|p| Some((p.name_any(), pod_ip(p).ok()?)))
                    .collect();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// Sets `spec.failover.delaySeconds` of a running cluster (the operator reads it when it
/// decides; the pods do not change) and waits until the operator has observed the new
/// generation with the cluster still Running.
async fn with_delay(env: &Env, ns: &str, name: &str, delay: u64) -> Result<DatabaseCluster> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let patch = serde_json::json!({"spec": {"failover": {"delaySeconds": delay}}});
    let patched = clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let generation = patched.metadata.generation.unwrap_or_default();
    wait_for(
        &format!("{name} to observe generation {generation} (delaySeconds {delay})"),
        Duration::from_secs(30),
        async || {
            let dbc = clusters.get(name).await?;
            let observed = crate::util::condition(&dbc, "Ready")
                .and_then(|c| c.observed_generation)
                .unwrap_or_default();
            Ok(if observed >= generation && phase(&dbc) == "Running" {
                Check::Done(dbc)
            } else {
                Check::Pending(format!(
                    "Ready observed generation {observed}; {}",
                    describe(&dbc)
                ))
            })
        },
    )
    .await
}

/// The example of `engine` with `spec.failover.delaySeconds: delay`, Running, its operator
/// Secret present and a table for the writer.
pub(crate) async fn running(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
    delay: u64,
) -> Result<(Arc<Env>, String, String, String, PathBuf)> {
    running_with(ctx, engine, suffix, delay, "").await
}

/// [`running`] with `spec_lines` (YAML at the spec's indentation) added to the spec.
pub(crate) async fn running_with(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
    delay: u64,
    spec_lines: &str,
) -> Result<(Arc<Env>, String, String, String, PathBuf)> {
    running_sized(ctx, engine, suffix, delay, spec_lines, None).await
}

/// [`running_with`], with `spec.storage.size` set to `storage` when given (a new cluster).
pub(crate) async fn running_sized(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
    delay: u64,
    spec_lines: &str,
    storage: Option<&str>,
) -> Result<(Arc<Env>, String, String, String, PathBuf)> {
    running_prepared(ctx, engine, suffix, delay, spec_lines, storage, None).await
}

/// What a scenario prepares for a new cluster before it is applied, given the environment, the
/// namespace and the cluster's name (objects, mounts).
pub(crate) type Prepare<'a> = &'a (dyn Fn(&Env, &str, &str) -> Result<()> + Sync);

/// [`running_sized`], with `prepare` run before a new cluster is applied (always a new cluster
/// then).
pub(crate) async fn running_prepared(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
    delay: u64,
    spec_lines: &str,
    storage: Option<&str>,
    prepare: Option<Prepare<'_>>,
) -> Result<(Arc<Env>, String, String, String, PathBuf)> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let root = image_root(engine).await?;
    // The example as an earlier scenario left it, when it did: the same spec once the delay is
    // set (spec_lines change the pods, so those clusters are always new).
    let adopted = if spec_lines.is_empty() && storage.is_none() && prepare.is_none() {
        adopt_example(ctx, &env, engine).await?
    } else {
        None
    };
    let (ns, name, dbc) = match adopted {
        Some((ns, name, _)) => {
            ctx.retire_on_success(&ns);
            let dbc = with_delay(&env, &ns, &name, delay).await?;
            ctx.step(format!(
                "{ns}/{name}: spec.failover.delaySeconds {delay}, observed by the operator"
            ));
            (ns, name, dbc)
        }
        None => {
            let ns = ctx.namespace(suffix).await?;
            ctx.retire_on_success(&ns);
            let (manifest, name) = example_in(engine, &ns)?;
            ensure!(
                manifest.contains("  replicas: 3\n"),
                "the example no longer has 3 replicas"
            );
            let mut manifest = manifest.replace(
                "  replicas: 3\n",
                &format!("  replicas: 3\n  failover:\n    delaySeconds: {delay}\n{spec_lines}"),
            );
            if let Some(size) = storage {
                let (before, after) = manifest
                    .split_once("    size: ")
                    .context("the example has no storage size")?;
                let rest = after.split_once('\n').map_or("", |(_, r)| r);
                manifest = format!("{before}    size: {size}\n{rest}");
            }
            ctx.relevant("databasecluster", &ns, &name);
            if let Some(prepare) = prepare {
                prepare(&env, &ns, &name)?;
            }
            let (dbc, took) = apply_until_running(&env, &ns, &name, &manifest).await?;
            ctx.note(format!(
                "{engine:?}: Running {:.1}s after apply",
                took.as_secs_f64()
            ));
            (ns, name, dbc)
        }
    };
    let secrets: Api<Secret> = api(&env, &ns);
    let operator_secret = format!("{name}-operator");
    wait_for(
        &format!("Secret {operator_secret} (the operator's credentials)"),
        Duration::from_secs(30),
        async || {
            Ok(match secrets.get_opt(&operator_secret).await? {
                Some(_) => Check::Done(()),
                None => Check::Pending("absent".into()),
            })
        },
    )
    .await?;
    let password = password_of(&env, &ns, &dbc).await?;
    let primary = primary_pod(&env, &ns, &name).await?;
    let ip = pod_ip(&primary)?;
    // A cluster taken over may hold an earlier scenario's rows: the writer starts on a new table.
    let create = match engine {
        Engine::Postgresql => {
            "drop table if exists fo_rows; create table fo_rows (id bigint primary key)"
        }
        Engine::Mariadb | Engine::Mysql => {
            "drop database if exists fo; create database fo; create table fo.fo_rows (id bigint primary key)"
        }
    };
    sql(engine, &root, &ip, &password, create)?;
    Ok((env, ns, name, password, root))
}

pub(crate) async fn primary_pod(env: &Env, ns: &str, name: &str) -> Result<Pod> {
    let pods: Api<Pod> = api(env, ns);
    let list = pods
        .list(&ListParams::default().labels(&format!(
            "database.example.com/cluster={name},{ROLE_LABEL}=primary"
        )))
        .await?
        .items;
    match list.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!("{} pods labelled primary", other.len()),
    }
}

/// The process group of the database server of `pod` (every process of its container).
pub(crate) fn server_group(pod: &Pod, engine: Engine) -> Result<u32> {
    let pid = container_pid(pod, engine.server_container())
        .with_context(|| format!("no server pid in {}", pod.name_any()))?;
    process_group(pid)
}

/// The process group of `pid` (every process of the container).
pub(crate) fn process_group(pid: u32) -> Result<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("odd /proc stat")?.1;
    after
        .split_whitespace()
        .nth(2)
        .context("no pgrp")?
        .parse()
        .context("pgrp")
}

pub(crate) fn signal_group(pgid: u32, signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([signal, "--", &format!("-{pgid}")])
        .status()?;
    ensure!(status.success(), "kill {signal} -{pgid} failed");
    Ok(())
}

/// Sends `signal` to `pid` and every process below it. PostgreSQL's postmaster makes each child
/// the leader of a process group of its own, so [`signal_group`] of its group reaches the
/// postmaster only: its WAL sender and receiver, startup process and backends run on.
pub(crate) fn signal_tree(pid: u32, signal: &str) -> Result<()> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(child) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(parent) = parent {
            parents.push((child, parent));
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, q)| *q == p).map(|(c, _)| *c));
        i += 1;
    }
    let kill = |pids: &[u32]| {
        std::process::Command::new("kill")
            .arg(signal)
            .arg("--")
            .args(pids.iter().map(u32::to_string))
            .stderr(std::process::Stdio::null())
            .status()
    };
    if kill(&tree)?.success() {
        return Ok(());
    }
    // A process of the tree may be gone by now (a backend whose client left, even while
    // frozen: SIGKILL reaches a stopped process): those that are still there must get it.
    let alive: Vec<u32> = tree
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        .collect();
    ensure!(
        alive.contains(&pid) && kill(&alive)?.success(),
        "kill {signal} {alive:?} (of {tree:?}) failed"
    );
    Ok(())
}

/// Waits for `status.failover.last` to record a completed operation of `kind` started after
/// `after_start` (as the status names it).
pub(crate) async fn completed(
    env: &Env,
    ns: &str,
    name: &str,
    kind: FailoverKind,
    from: &str,
    timeout: Duration,
) -> Result<FailoverRecord> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    wait_for(
        &format!("a completed {kind:?} from {from}"),
        timeout,
        async || {
            let dbc = clusters.get(name).await?;
            let failover = dbc.status.as_ref().and_then(|s| s.failover.clone());
            let last = failover.as_ref().and_then(|f| f.last.clone());
            Ok(match last {
                Some(r)
                    if r.kind == kind
                        && r.from == from
                        && r.outcome == FailoverOutcome::Completed =>
                {
                    Check::Done(r)
                }
                _ => Check::Pending(format!(
                    "operation {:?}; last {:?}",
                    failover
                        .as_ref()
                        .and_then(|f| f.operation.as_ref())
                        .map(|o| (&o.phase, &o.from, &o.to)),
                    failover
                        .as_ref()
                        .and_then(|f| f.last.as_ref())
                        .map(|l| (&l.kind, &l.outcome, &l.from, &l.to))
                )),
            })
        },
    )
    .await
}

/// Waits for a completed `kind` from `from` ([`completed`]), checks that the primary label is on
/// the member the record names, and waits for the writer to succeed on it after `since`;
/// returns the record, the new primary and its IP.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serving_after(
    env: &Env,
    ns: &str,
    name: &str,
    load: &Load,
    kind: FailoverKind,
    from: &str,
    since: Instant,
    timeout: Duration,
) -> Result<(FailoverRecord, String, String)> {
    let record = completed(env, ns, name, kind, from, timeout).await?;
    let new_name = record.to.clone().context("no new primary in the record")?;
    let new_ip = writer_on(env, ns, name, load, &new_name, since).await?;
    Ok((record, new_name, new_ip))
}

/// Checks that the primary label is on `new_name` and waits for the writer to succeed on it
/// after `since`; returns its IP.
async fn writer_on(
    env: &Env,
    ns: &str,
    name: &str,
    load: &Load,
    new_name: &str,
    since: Instant,
) -> Result<String> {
    // The label follows the status in the same pass, or a retry later when its write failed
    // (an API server answering errors): the writer, which follows the label, waits as clients
    // of the read-write Service do, and the gap it measures includes that wait.
    let new = wait_for(
        "the primary label on the member status names",
        Duration::from_secs(30),
        async || {
            Ok(match primary_pod(env, ns, name).await {
                Ok(pod) if pod.name_any() == new_name => Check::Done(pod),
                Ok(pod) => Check::Pending(format!(
                    "the primary label is on {}, status says {new_name}",
                    pod.name_any()
                )),
                Err(e) => Check::Pending(format!("{e:#}, status says {new_name}")),
            })
        },
    )
    .await?;
    let new_ip = pod_ip(&new)?;
    wait_for(
        "the writer on the new primary",
        Duration::from_secs(30),
        async || {
            let n = lock(&load.writes).acked_on(&new_ip, since);
            Ok(if n >= 5 {
                Check::Done(())
            } else {
                Check::Pending(format!("{n} rows on {new_ip}"))
            })
        },
    )
    .await?;
    Ok(new_ip)
}

/// The rows the writer had acknowledged, and those of them missing on `ip` (a second after,
/// so the last acknowledged row has landed).
pub(crate) async fn rows_lost(
    load: &Load,
    engine: Engine,
    root: &PathBuf,
    ip: &str,
    password: &str,
) -> Result<(usize, Vec<u64>)> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let acked: BTreeSet<u64> = lock(&load.writes)
        .acked
        .iter()
        .map(|(id, _, _)| *id)
        .collect();
    let present = ids_on(engine, root, ip, password)?;
    Ok((acked.len(), acked.difference(&present).copied().collect()))
}

/// The ids in the table on `ip`.
fn ids_on(engine: Engine, root: &PathBuf, ip: &str, password: &str) -> Result<BTreeSet<u64>> {
    let out = sql(
        engine,
        root,
        ip,
        password,
        &format!("select id from {}", table(engine)),
    )?;
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse::<u64>().context("an id"))
        .collect()
}

/// Waits until `pod` (its current incarnation) is Ready, not labelled primary, and its server
/// answers read-only; returns its label.
pub(crate) async fn rejoined(
    env: &Env,
    engine: Engine,
    root: &PathBuf,
    password: &str,
    ns: &str,
    pod: &str,
) -> Result<String> {
    let pods: Api<Pod> = api(env, ns);
    wait_for(
        &format!("{pod} back as a replica (or quarantined)"),
        Duration::from_secs(120),
        async || {
            let Some(p) = pods.get_opt(pod).await? else {
                return Ok(Check::Pending("no pod".into()));
            };
            let ready = crate::scenarios::process_nodes::ready(&p);
            let role = p.labels().get(ROLE_LABEL).cloned().unwrap_or_default();
            if !ready || role == "primary" || p.metadata.deletion_timestamp.is_some() {
                return Ok(Check::Pending(format!("ready {ready}, role {role:?}")));
            }
            let Ok(ip) = pod_ip(&p) else {
                return Ok(Check::Pending("no IP".into()));
            };
            let writable = sql_within(engine, root, &ip, password, writable_query(engine), 2)
                .map(|v| v.trim() == "1");
            Ok(match writable {
                Ok(false) => Check::Done(role),
                other => Check::Pending(format!("role {role:?}, writable {other:?}")),
            })
        },
    )
    .await
}

/// A crash of the primary's server whose container restarts within delaySeconds: no failover
/// (no operation recorded, the same primary), the writer goes on.
async fn crash_within_delay_is_ridden_out(
    ctx: &Ctx,
    env: &Env,
    engine: Engine,
    ns: &str,
    name: &str,
    load: &Load,
) -> Result<()> {
    let primary = primary_pod(env, ns, name).await?;
    let primary_name = primary.name_any();
    let container = engine.server_container();
    let pid = container_pid(&primary, container).context("no server pid")?;
    let before = restarts(&primary, container);
    // A cluster taken over from an earlier scenario has a record already: it must not change.
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let last_before = clusters
        .get(name)
        .await?
        .status
        .and_then(|s| s.failover)
        .and_then(|f| f.last);
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -9 {pid} failed");
    let killed = Instant::now();
    let ip = pod_ip(&primary)?;
    wait_for(
        &format!("the writer on {primary_name} again after the crash"),
        Duration::from_secs(DELAY_SECONDS + 20),
        async || {
            let n = lock(&load.writes).acked_on(&ip, killed + Duration::from_millis(100));
            Ok(if n >= 3 {
                Check::Done(())
            } else {
                Check::Pending(format!("{n} rows since the crash"))
            })
        },
    )
    .await?;
    let back = killed.elapsed();
    let pods: Api<Pod> = api(env, ns);
    let pod = pods.get(&primary_name).await?;
    ensure!(
        restarts(&pod, container) > before,
        "{primary_name}'s server did not restart"
    );
    // Longer than a probe round and the delay would take, had the crash counted.
    tokio::time::sleep(Duration::from_secs(DELAY_SECONDS + 3)).await;
    let dbc = clusters.get(name).await?;
    let failover = dbc.status.as_ref().and_then(|s| s.failover.clone());
    let started = failover.as_ref().is_some_and(|f| {
        f.last != last_before
            || f.operation
                .as_ref()
                .is_some_and(|o| o.phase != FailoverPhase::Detecting)
    });
    ensure!(
        !started,
        "a crash that restarted in {:.1}s caused a failover: {failover:?}",
        back.as_secs_f64()
    );
    ensure!(
        primary_pod(env, ns, name).await?.name_any() == primary_name,
        "the primary label moved after a crash within delaySeconds"
    );
    ctx.note(format!(
        "{engine:?}: kill -9 of the primary's server: writes back on it {:.1}s later, no failover (delaySeconds {DELAY_SECONDS})",
        back.as_secs_f64()
    ));
    Ok(())
}

/// A hung primary (SIGSTOP for longer than delaySeconds): a replica is promoted, the others
/// follow, the writer resumes; the old primary comes back as a replica (or quarantined). First,
/// with `crash_first`, a crash that restarts within delaySeconds changes nothing.
async fn hung_primary_fails_over(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
    crash_first: bool,
    lag_and_kill: bool,
) -> Result<()> {
    let (env, ns, name, password, root) = running(ctx, engine, suffix, DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        let old = primary_pod(&env, &ns, &name).await?;
        let old_name = old.name_any();
        let old_ip = pod_ip(&old)?;
        load.first_rows(Duration::from_secs(30)).await?;
        if crash_first {
            crash_within_delay_is_ridden_out(ctx, &env, engine, &ns, &name, &load).await?;
        }
        // PostgreSQL: the replica that would win a tie is made to lag first.
        let lagging = if lag_and_kill {
            Some(make_a_replica_lag(ctx, &env, &root, &password, &ns, &name, &load).await?)
        } else {
            None
        };
        let old = primary_pod(&env, &ns, &name).await?;
        let pgid = server_group(&old, engine)?;
        // Events a cluster taken over brought along: this failover must add its own.
        let events_before: BTreeSet<(String, String)> = events_about(&env, &ns, &name)
            .await?
            .into_iter()
            .map(|e| (e.reason, e.note))
            .collect();
        signal_group(pgid, "-STOP")?;
        let frozen = Instant::now();
        ctx.step(format!(
            "froze primary {old_name} ({old_ip}, process group {pgid})"
        ));
        if let Some(lagging) = &lagging {
            kill_the_operator_mid_failover(ctx, &env, &ns, &name).await?;
            resume_once_chosen(ctx, &env, &ns, &name, &old_name, lagging).await?;
        }

        let record = completed(
            &env,
            &ns,
            &name,
            FailoverKind::Failover,
            &old_name,
            FAILOVER_TIMEOUT,
        )
        .await?;
        let new_name = record.to.clone().context("no new primary in the record")?;
        // The fenced old primary takes part in the election when it is back in time; it wins
        // only when it holds more than every replica (then promoting it loses nothing).
        ensure!(
            new_name != old_name
                || record
                    .candidates
                    .iter()
                    .filter(|c| c.pod != old_name)
                    .all(|c| c.reason.starts_with("behind")),
            "the old primary was promoted again though a replica was as far: {:?}",
            record.candidates
        );
        ctx.step(format!(
            "failover {old_name} -> {new_name} completed {:.1}s after the freeze",
            frozen.elapsed().as_secs_f64()
        ));
        if let Some(lagging) = &lagging {
            let verdict = record.candidates.iter().find(|c| c.pod == lagging.pod);
            ensure!(
                new_name != lagging.pod
                    && verdict.is_some_and(|c| c.reason.starts_with("behind")),
                "the lagging replica {} (received {} bytes, the other {}) was chosen or not reported behind: to {new_name}, candidates {:?}",
                lagging.pod,
                lagging.received,
                lagging.ahead,
                record.candidates
            );
            ctx.note(format!(
                "lagging replica {} lost the election: {}",
                lagging.pod,
                verdict.map(|c| c.reason.as_str()).unwrap_or_default()
            ));
        }
        let new_ip = writer_on(&env, &ns, &name, &load, &new_name, frozen).await?;
        let gap = lock(&load.writes).gap_after(frozen);
        ctx.note(format!(
            "{engine:?} failover: write gap {:.1}s (delaySeconds {DELAY_SECONDS}); candidates: {}",
            gap.as_secs_f64(),
            record
                .candidates
                .iter()
                .map(|c| format!(
                    "{} {:?} {}",
                    c.pod,
                    c.verdict,
                    c.position.clone().unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));

        // Let the old primary go on (its pod was deleted to fence it, so its processes are
        // most likely gone; a process still there gets SIGCONT).
        let _ = signal_group(pgid, "-CONT");
        let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
        let dbc: DatabaseCluster = api(&env, &ns).get(&name).await?;
        let quarantined = dbc
            .status
            .as_ref()
            .and_then(|s| s.failover.as_ref())
            .map(|f| f.quarantined.clone())
            .unwrap_or_default();
        let events = events_about(&env, &ns, &name).await?;
        let failover_events: Vec<String> = events
            .iter()
            .filter(|e| e.reason == "Failover" || e.reason == "MemberQuarantined")
            .filter(|e| !events_before.contains(&(e.reason.clone(), e.note.clone())))
            .map(|e| format!("{}: {}", e.reason, e.note))
            .collect();
        ensure!(!failover_events.is_empty(), "no Failover event");
        ctx.note(format!(
            "{old_name} rejoined as {role}; quarantined {quarantined:?}; events: {}",
            failover_events.join(" | ")
        ));

        // Rows: every acknowledged row on the new primary (async replication: report the lost).
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        ctx.note(format!(
            "{engine:?} failover: {acked} rows acknowledged, {} lost (async replication): {:?}",
            lost.len(),
            lost.iter().take(10).collect::<Vec<_>>()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let (writes, violations) = load.finish();
    pods_task.abort();
    ctx.note(format!(
        "writer: {} rows acknowledged, {} failed attempts",
        writes.acked.len(),
        writes.failures
    ));
    ensure!(
        violations.is_empty(),
        "two writable primaries: {violations:?}"
    );
    result
}

/// examples/local/postgresql.yaml: a crash within delaySeconds changes nothing; a hung primary
/// is failed over.
pub async fn postgresql_hung_primary_fails_over(ctx: &Ctx) -> Result<()> {
    hung_primary_fails_over(ctx, Engine::Postgresql, "fo-pg", true, true).await
}

/// examples/local/mariadb.yaml: a hung primary is failed over.
pub async fn mariadb_hung_primary_fails_over(ctx: &Ctx) -> Result<()> {
    hung_primary_fails_over(ctx, Engine::Mariadb, "fo-maria", false, false).await
}

/// examples/local/mysql.yaml: a hung primary is failed over.
pub async fn mysql_hung_primary_fails_over(ctx: &Ctx) -> Result<()> {
    hung_primary_fails_over(ctx, Engine::Mysql, "fo-mysql", false, false).await
}

/// A switchover by annotation: no acknowledged row lost, the old primary becomes a replica.
async fn switchover_loses_nothing(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) = running(ctx, engine, suffix, DELAY_SECONDS).await?;
    switchover_on(ctx, engine, env, ns, name, password, root).await
}

/// [`switchover_loses_nothing`] on a cluster that is [`running`]; hands it over when it passes.
pub(crate) async fn switchover_on(
    ctx: &Ctx,
    engine: Engine,
    env: Arc<Env>,
    ns: String,
    name: String,
    password: String,
    root: PathBuf,
) -> Result<()> {
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        let old = primary_pod(&env, &ns, &name).await?;
        let old_name = old.name_any();
        load.first_rows(Duration::from_secs(30)).await?;
        // PostgreSQL: a client that writes to the old primary in explicitly read-write
        // transactions, which its read-only fence does not stop.
        let insistent = match (engine, old.status.as_ref().and_then(|s| s.pod_ip.clone())) {
            (Engine::Postgresql, Some(ip)) => {
                let w = Insistent::start(engine, root.clone(), password.clone(), ip);
                wait_for(
                    "the insistent writer's first rows",
                    Duration::from_secs(30),
                    async || {
                        let n = w.acked();
                        Ok(if n >= 5 {
                            Check::Done(())
                        } else {
                            Check::Pending(format!("{n} rows"))
                        })
                    },
                )
                .await?;
                Some(w)
            }
            _ => None,
        };
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        request_switchover(&clusters, &name).await?;
        let requested = Instant::now();
        ctx.step(format!("switchover requested from {old_name}"));
        let (_, new_name, new_ip) = serving_after(
            &env,
            &ns,
            &name,
            &load,
            FailoverKind::Switchover,
            &old_name,
            requested,
            FAILOVER_TIMEOUT,
        )
        .await?;
        let gap = lock(&load.writes).gap_after(requested);
        ctx.note(format!(
            "{engine:?} switchover {old_name} -> {new_name}: write gap {:.1}s, {:.1}s to complete",
            gap.as_secs_f64(),
            requested.elapsed().as_secs_f64()
        ));
        let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
        ensure!(role == "replica", "{old_name} is {role}, not a replica");
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        ensure!(
            lost.is_empty(),
            "a switchover lost {} acknowledged rows: {:?}",
            lost.len(),
            lost.iter().take(10).collect::<Vec<_>>()
        );
        ctx.note(format!(
            "{engine:?} switchover: {acked} rows acknowledged, none lost; {old_name} is a replica"
        ));
        if let Some(w) = insistent {
            let (acked, refused) = w.finish();
            let lost = insistent_rows_lost(engine, &root, &new_ip, &password, &acked)?;
            ensure!(
                lost.is_empty(),
                "{} of {} rows acknowledged by {old_name} in explicitly read-write transactions are not on the new primary {new_name} (the fence before the promotion was not hard): {:?}",
                lost.len(),
                acked.len(),
                lost.iter().take(10).collect::<Vec<_>>()
            );
            ctx.note(format!(
                "{engine:?} switchover: the insistent writer on {old_name} had {} rows acknowledged ({refused} attempts refused), all on {new_name}",
                acked.len()
            ));
        }
        // Intact (every member back as a replica of the new primary): the next scenario on the
        // example may take it over.
        ctx.hand_over(
            engine.example_key(),
            Handed {
                ns: ns.clone(),
                name: name.clone(),
            },
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// Requests a switchover to the most advanced replica (`auto`). A cluster taken over from an
/// earlier scenario may still carry a handled `auto`: the same value again would be no new
/// request, so the annotation is removed first and the handled value left to clear.
async fn request_switchover(clusters: &Api<DatabaseCluster>, name: &str) -> Result<()> {
    let key = database_operator_api::SWITCHOVER_ANNOTATION;
    let handled = |dbc: &DatabaseCluster| {
        dbc.status
            .as_ref()
            .and_then(|s| s.failover.as_ref())
            .and_then(|f| f.handled_switchover.clone())
    };
    let dbc = clusters.get(name).await?;
    if dbc.annotations().get(key).is_some() || handled(&dbc).is_some() {
        let remove = serde_json::json!({"metadata": {"annotations": {key: null}}});
        clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&remove))
            .await?;
        wait_for(
            "the handled switchover request to clear",
            Duration::from_secs(30),
            async || {
                let dbc = clusters.get(name).await?;
                Ok(match handled(&dbc) {
                    None => Check::Done(()),
                    Some(value) => Check::Pending(format!("handledSwitchover {value:?}")),
                })
            },
        )
        .await?;
    }
    let patch = serde_json::json!({"metadata": {"annotations": {key: "auto"}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// examples/local/postgresql.yaml: a switchover by annotation.
pub async fn postgresql_switchover_loses_nothing(ctx: &Ctx) -> Result<()> {
    switchover_loses_nothing(ctx, Engine::Postgresql, "so-pg").await
}

/// One measured failover.
struct Measured {
    gap: Duration,
    total: Duration,
    lost: usize,
    from: String,
    to: String,
    /// Power cuts: from the power-on to the old primary back as a replica.
    rejoin: Option<Duration>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The heading from which a bench report is written by hand: kept when the bench rewrites the
/// measured part above it.
const NOTES_HEADING: &str = "## Reading these numbers";

/// What the bench does to the primary each round (`FAILOVER_BENCH_CUT`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// `freeze` (the default): the primary's server processes stopped with SIGSTOP.
    Freeze,
    /// `power`: the primary's process node powered off, `nodeLoss: SelfFence`, sync.
    Power,
}

fn bench_cut() -> Result<Cut> {
    match std::env::var("FAILOVER_BENCH_CUT").as_deref() {
        Err(_) | Ok("freeze") => Ok(Cut::Freeze),
        Ok("power") => Ok(Cut::Power),
        Ok(other) => bail!("FAILOVER_BENCH_CUT must be freeze or power, not {other:?}"),
    }
}

/// The bench's time limit: two minutes per engine to start, a minute per round (two with
/// power cuts: the node's restart and the rejoin are in each round).
pub fn bench_budget() -> Duration {
    let count: u64 = std::env::var("FAILOVER_BENCH")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    let engines =
        std::env::var("FAILOVER_BENCH_ENGINES").map_or(2, |e| e.split(',').count() as u64);
    let round = if bench_cut().ok() == Some(Cut::Power) {
        120
    } else {
        60
    };
    Duration::from_secs(engines * (120 + round * count))
}

/// `FAILOVER_BENCH=<count>` (registered only then): `count` failovers in a row on each engine
/// of `FAILOVER_BENCH_ENGINES` (default `postgresql,mariadb`), each measured (write gap, rows
/// lost). `FAILOVER_BENCH_CUT=freeze` (default): a hung primary, async replication, written to
/// docs/performance/failover.md; `power`: the primary's node powered off with `nodeLoss:
/// SelfFence` and sync replication, written to docs/performance/failover-node-loss.md (and
/// failing after the report if a round lost an acknowledged row).
pub async fn bench_hung_primary_failovers(ctx: &Ctx) -> Result<()> {
    let count: usize = std::env::var("FAILOVER_BENCH")
        .context("FAILOVER_BENCH is not set")?
        .parse()
        .context("FAILOVER_BENCH must be a number")?;
    let cut = bench_cut()?;
    let engines =
        std::env::var("FAILOVER_BENCH_ENGINES").unwrap_or_else(|_| "postgresql,mariadb".to_owned());
    let mut report = String::new();
    let mut lost = 0;
    for engine in engines.split(',') {
        let engine = match engine.trim() {
            "postgresql" => Engine::Postgresql,
            "mariadb" => Engine::Mariadb,
            "mysql" => Engine::Mysql,
            other => bail!("unknown engine {other:?} in FAILOVER_BENCH_ENGINES"),
        };
        let runs = match cut {
            Cut::Freeze => bench_engine(ctx, engine, count).await?,
            Cut::Power => bench_engine_power(ctx, engine, count).await?,
        };
        lost += runs.iter().map(|r| r.lost).sum::<usize>();
        report.push_str(&bench_section(engine, cut, &runs));
    }
    let (path, text) = match cut {
        Cut::Freeze => (
            "docs/performance/failover.md",
            format!(
                "# Failover on process nodes\n\n\
                 Measured by `FAILOVER_BENCH={count} cargo xtask e2e failover::bench` (the e2e scenario\n\
                 `failover::bench_hung_primary_failovers`, registered only with `FAILOVER_BENCH` set) on the\n\
                 local control plane: a three-member cluster of `examples/local/` with\n\
                 `spec.failover.delaySeconds: {BENCH_DELAY_SECONDS}` (the default), async replication, one writer inserting numbered\n\
                 rows through the pod labelled primary (a new connection per row, 50 ms apart). Each round\n\
                 freezes the current primary's server processes with SIGSTOP (a hung primary), waits for the\n\
                 failover to complete and the writer to succeed on the new primary, then for the old primary\n\
                 to come back as a replica. The **write gap** is the longest time between two acknowledged\n\
                 rows in the round; **rows lost** counts acknowledged rows missing on the new primary. The\n\
                 budget is `delaySeconds + 10 s` = {} s. The delay counts from the operator's first failed\n\
                 probe of the server (every 2 s, every 0.5 s once the primary's probe failed); the pod must\n\
                 also be not Ready when the operator acts (readiness period 5 s, 2 failures).\n\n{report}",
                BENCH_DELAY_SECONDS + 10
            ),
        ),
        Cut::Power => (
            "docs/performance/failover-node-loss.md",
            format!(
                "# Failover from a lost node on process nodes\n\n\
                 Measured by `FAILOVER_BENCH={count} FAILOVER_BENCH_CUT=power cargo xtask e2e failover::bench`\n\
                 (the e2e scenario `failover::bench_hung_primary_failovers`, registered only with\n\
                 `FAILOVER_BENCH` set) on the local control plane: a three-member cluster of\n\
                 `examples/local/` with `spec.failover` `delaySeconds: {BENCH_DELAY_SECONDS}`, `nodeLoss: SelfFence`,\n\
                 `leaseSeconds` at its default (10), and `replication.mode: sync`; one writer inserts numbered rows\n\
                 through the pod labelled primary (a new connection per row, 50 ms apart). Each round powers\n\
                 off the process node of the current primary (`cargo xtask cluster node stop`: its processes\n\
                 killed at once, its heartbeats stopped; nobody marks it out of service), waits for the\n\
                 failover that counts on the expired primary Lease and for the writer on the new primary,\n\
                 then powers the node on and waits for the old primary to be back as a replica. The **write\n\
                 gap** is the longest time between two acknowledged rows from the power cut on; **rows\n\
                 lost** counts acknowledged rows missing on the new primary (sync: must be 0); **rejoin** is\n\
                 from the power-on to the old primary Ready, read-only and labelled replica. The budget is\n\
                 `delaySeconds + 10 s` = {} s.\n\n{report}",
                BENCH_DELAY_SECONDS + 10
            ),
        ),
    };
    let path = xtask::cluster::workspace_root().join(path);
    // The hand-written reading of the numbers, from its heading on, stays.
    let notes = std::fs::read_to_string(&path)
        .ok()
        .and_then(|old| old.find(NOTES_HEADING).map(|at| old[at..].to_owned()))
        .unwrap_or_default();
    std::fs::write(&path, format!("{text}{notes}"))
        .with_context(|| format!("writing {}", path.display()))?;
    ctx.note(format!("wrote {}", path.display()));
    ensure!(
        cut == Cut::Freeze || lost == 0,
        "{lost} acknowledged rows lost in sync mode across the power cuts (see {})",
        path.display()
    );
    Ok(())
}

async fn bench_engine_power(ctx: &Ctx, engine: Engine, count: usize) -> Result<Vec<Measured>> {
    let suffix = match engine {
        Engine::Postgresql => "bench-cut-pg",
        Engine::Mariadb => "bench-cut-maria",
        Engine::Mysql => "bench-cut-mysql",
    };
    let (env, ns, name, password, root) = running_with(
        ctx,
        engine,
        suffix,
        BENCH_DELAY_SECONDS,
        &self_fence::spec_lines(None),
    )
    .await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        let mut runs = Vec::new();
        for round in 1..=count {
            wait_writer_going(&load).await?;
            let first = primary_pod(&env, &ns, &name).await?;
            sync::wait_sync(engine, &root, &password, &first.name_any(), &pod_ip(&first)?).await?;
            let cut = self_fence::power_cut_round(ctx, &env, engine, &ns, &name, &password, &root, &load).await?;
            ctx.note(format!(
                "{engine:?} power cut {round}: {} -> {}, write gap {:.1}s, completed {:.1}s after the cut, {} of {} rows lost, rejoined {:.1}s after power-on",
                cut.from,
                cut.to,
                cut.gap.as_secs_f64(),
                cut.completed.as_secs_f64(),
                cut.lost,
                cut.acked,
                cut.rejoin.as_secs_f64()
            ));
            runs.push(Measured {
                gap: cut.gap,
                total: cut.completed,
                lost: cut.lost,
                from: cut.from,
                to: cut.to,
                rejoin: Some(cut.rejoin),
            });
        }
        Ok::<_, anyhow::Error>(runs)
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// Waits until the writer acknowledges rows again.
async fn wait_writer_going(load: &Load) -> Result<()> {
    wait_for("the writer going", Duration::from_secs(60), async || {
        let n = lock(&load.writes).acked.len();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let m = lock(&load.writes).acked.len();
        Ok(if m > n {
            Check::Done(())
        } else {
            Check::Pending(format!("{m} rows"))
        })
    })
    .await
}

fn bench_section(engine: Engine, cut: Cut, runs: &[Measured]) -> String {
    let sorted = |f: &dyn Fn(&Measured) -> Option<f64>| {
        let mut v: Vec<f64> = runs.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let gaps = sorted(&|r| Some(r.gap.as_secs_f64()));
    let totals = sorted(&|r| Some(r.total.as_secs_f64()));
    let rejoins = sorted(&|r| r.rejoin.map(|d| d.as_secs_f64()));
    let lost: usize = runs.iter().map(|r| r.lost).sum();
    let (event, rejoin_summary, rejoin_column) = match cut {
        Cut::Freeze => ("freeze", String::new(), ""),
        Cut::Power => (
            "power cut",
            format!(
                "; rejoin p50 {:.1} s, max {:.1} s",
                percentile(&rejoins, 50.0),
                rejoins.last().copied().unwrap_or_default()
            ),
            " rejoin after power-on (s) |",
        ),
    };
    let mut s = format!(
        "## {engine:?}\n\n{} failovers: write gap p50 {:.1} s, max {:.1} s; {event} to completed p50 {:.1} s, max {:.1} s; rows lost {lost} in all (max {} in one){rejoin_summary}.\n\n\
         | # | from | to | write gap (s) | {event} to completed (s) | rows lost |{rejoin_column}\n| --- | --- | --- | --- | --- | --- |{}\n",
        runs.len(),
        percentile(&gaps, 50.0),
        gaps.last().copied().unwrap_or_default(),
        percentile(&totals, 50.0),
        totals.last().copied().unwrap_or_default(),
        runs.iter().map(|r| r.lost).max().unwrap_or_default(),
        if cut == Cut::Power { " --- |" } else { "" },
    );
    for (i, r) in runs.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {} |",
            i + 1,
            r.from,
            r.to,
            r.gap.as_secs_f64(),
            r.total.as_secs_f64(),
            r.lost
        ));
        if let Some(rejoin) = r.rejoin {
            s.push_str(&format!(" {:.1} |", rejoin.as_secs_f64()));
        }
        s.push('\n');
    }
    s.push('\n');
    s
}

async fn bench_engine(ctx: &Ctx, engine: Engine, count: usize) -> Result<Vec<Measured>> {
    let suffix = match engine {
        Engine::Postgresql => "bench-pg",
        Engine::Mariadb => "bench-maria",
        Engine::Mysql => "bench-mysql",
    };
    let (env, ns, name, password, root) = running(ctx, engine, suffix, BENCH_DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        let mut runs = Vec::new();
        let mut lost_before: BTreeSet<u64> = BTreeSet::new();
        for round in 1..=count {
            wait_writer_going(&load).await?;
            let old = primary_pod(&env, &ns, &name).await?;
            let old_name = old.name_any();
            let pgid = server_group(&old, engine)?;
            signal_group(pgid, "-STOP")?;
            let frozen = Instant::now();
            let record =
                completed(&env, &ns, &name, FailoverKind::Failover, &old_name, FAILOVER_TIMEOUT).await?;
            let total = frozen.elapsed();
            let to = record.to.clone().unwrap_or_default();
            let new = primary_pod(&env, &ns, &name).await?;
            let new_ip = pod_ip(&new)?;
            wait_for("the writer on the new primary", Duration::from_secs(30), async || {
                let n = lock(&load.writes).acked_on(&new_ip, frozen);
                Ok(if n >= 3 { Check::Done(()) } else { Check::Pending(format!("{n} rows")) })
            })
            .await?;
            let gap = lock(&load.writes).gap_after(frozen);
            let _ = signal_group(pgid, "-CONT");
            let acked: BTreeSet<u64> = lock(&load.writes).acked.iter().map(|(id, _, _)| *id).collect();
            let present = ids_on(engine, &root, &new_ip, &password)?;
            let lost_now: BTreeSet<u64> = acked.difference(&present).copied().collect();
            let lost = lost_now.difference(&lost_before).count();
            lost_before = lost_now;
            ctx.note(format!(
                "{engine:?} round {round}: {old_name} -> {to}, write gap {:.1}s, completed {:.1}s after the freeze, {lost} rows lost",
                gap.as_secs_f64(),
                total.as_secs_f64()
            ));
            runs.push(Measured { gap, total, lost, from: old_name.clone(), to, rejoin: None });
            rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
            // The next round's gap is measured from its own freeze.
        }
        Ok::<_, anyhow::Error>(runs)
    }
    .await;
    load.finish_checked(pods_task, result)
}
