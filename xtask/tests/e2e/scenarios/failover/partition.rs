//! A network partition of the primary's process node (`cargo xtask cluster node partition`),
//! with `nodeLoss: SelfFence` and sync replication: unlike a power cut, the old primary's
//! server keeps running, and a client on its side of the cut still reaches it.
//!
//! 1. The node is cut off: nothing reaches its pods' addresses (the test checks it can no
//!    longer connect), its processes reach nothing outside the node (the API server included),
//!    its heartbeats stop. A client started in the node's cgroup (on the old primary's side)
//!    asks the old primary every 250 ms whether it accepts writes.
//! 2. The primary's agent cannot renew the Lease and fences its own server; the operator
//!    promotes a replica once the Lease has expired. **Never two writable members**: the old
//!    primary answers its own side read-only before the new primary acknowledges its first
//!    row. No acknowledged row is lost (sync).
//! 3. The partition heals: the old primary rejoins as a replica.
//!
//! A replica's node partitioned ([`postgresql_partitioned_replica_catches_up`], async and
//! sync): the writer goes on (in sync mode through the other replica), nothing fails over,
//! the replica drops out of `status.members`, and once healed it catches up on every
//! acknowledged row by itself.
//!
//! Without `nodeLoss: SelfFence` (the default, async replication), nothing on the old
//! primary's side can fence it, so the operator must not promote while it cannot confirm the
//! stop: [`postgresql_partitioned_primary_waits_for_its_fence`] checks that the failover stops
//! at `FailoverBlocked` `FenceUnconfirmed` with no member writable outside the cut (the old
//! primary still writable inside it: that is why), and that once the partition heals the stop
//! is carried out and the failover completes on its own, with no administrator.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use xtask::cluster::procnode::partition::{NodeCgroups, set_node_partitioned};

use database_operator_api::conditions::{self, reasons};
use database_operator_api::failover::FailoverPhase;

use super::lost_node::node_of_primary_alone;
use super::self_fence::spec_lines;
use super::sync::wait_sync;
use super::*;
use crate::scenarios::databases::{ClientSide, sql_from};
use crate::util::condition;

/// `spec.failover.leaseSeconds` of the scenario's cluster.
const LEASE_SECONDS: u64 = 6;

/// What the old primary answered its own side.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Writable,
    ReadOnly,
    /// No answer (connection refused, timeout), with the client's last line.
    Silent(String),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Writable => f.write_str("writable"),
            Answer::ReadOnly => f.write_str("read-only"),
            Answer::Silent(line) => {
                let cause = line.rsplit(": ").next().unwrap_or(line).trim();
                write!(f, "no answer: {cause}")
            }
        }
    }
}

/// A client on the partitioned node's side of the cut, asking one server whether it accepts
/// writes until dropped.
struct InsideProbe {
    answers: Arc<Mutex<Vec<(Instant, Answer)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InsideProbe {
    fn start(engine: Engine, root: PathBuf, password: String, ip: String, procs: PathBuf) -> Self {
        let answers: Arc<Mutex<Vec<(Instant, Answer)>>> = Arc::default();
        let stop: Arc<AtomicBool> = Arc::default();
        let (out, halt) = (answers.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let side = ClientSide {
                    cgroup: Some(&procs),
                    kill_after: Some(5),
                    ..ClientSide::default()
                };
                let got = sql_from(
                    side,
                    engine,
                    &root,
                    &ip,
                    &password,
                    writable_query(engine),
                    1,
                );
                let answer = match got {
                    Ok(v) if v.trim() == "1" => Answer::Writable,
                    Ok(_) => Answer::ReadOnly,
                    Err(e) => Answer::Silent(
                        format!("{e:#}")
                            .lines()
                            .last()
                            .unwrap_or_default()
                            .to_owned(),
                    ),
                };
                lock(&out).push((Instant::now(), answer));
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        Self {
            answers,
            stop,
            thread: Some(thread),
        }
    }

    fn answers(&self) -> Vec<(Instant, Answer)> {
        lock(&self.answers).clone()
    }
}

impl Drop for InsideProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A process node cut off the network, healed when dropped (whatever failed).
struct Partition {
    state_dir: PathBuf,
    nodes: Vec<String>,
    node: String,
    /// When the cut took effect.
    at: Instant,
    healed: bool,
}

impl Partition {
    /// Cuts off the node of member `pod` of `ns/name` (checking that no other member runs
    /// there), and proves the cut: the member's server no longer answers from outside.
    async fn member(
        ctx: &Ctx,
        env: &Env,
        (ns, name): (&str, &str),
        pod: &Pod,
        (engine, root, password): (Engine, &PathBuf, &str),
    ) -> Result<Partition> {
        let nodes = xtask::cluster::State::load(&env.state_dir)?
            .context("no state of the e2e cluster")?
            .process_nodes;
        let node = node_of_primary_alone(env, ns, name, pod).await?;
        set_node_partitioned(&env.state_dir, &nodes, &node, true)?;
        let cut = Partition {
            state_dir: env.state_dir.clone(),
            nodes,
            node,
            at: Instant::now(),
            healed: false,
        };
        ctx.step(format!(
            "partitioned {}, the node of {}",
            cut.node,
            pod.name_any()
        ));
        let outside = sql_within(engine, root, &pod_ip(pod)?, password, "select 1", 1);
        ensure!(
            outside.is_err(),
            "{} still answers outside its node: {outside:?}",
            pod.name_any()
        );
        Ok(cut)
    }

    /// A client on the node's side of the cut, asking `pod`'s server whether it takes writes.
    fn inside(
        &self,
        pod: &Pod,
        (engine, root, password): (Engine, &PathBuf, &str),
    ) -> Result<InsideProbe> {
        let procs = NodeCgroups::discover(&self.state_dir)
            .context("partitions need a writable cgroup v2 hierarchy under /sys/fs/cgroup")?
            .procs_file(&self.node)?;
        Ok(InsideProbe::start(
            engine,
            root.clone(),
            password.to_owned(),
            pod_ip(pod)?,
            procs,
        ))
    }

    /// Ends the partition; when it ended.
    fn heal(mut self, ctx: &Ctx) -> Result<Instant> {
        set_node_partitioned(&self.state_dir, &self.nodes, &self.node, false)?;
        self.healed = true;
        ctx.step(format!("healed {}", self.node));
        Ok(Instant::now())
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        if !self.healed {
            let _ = set_node_partitioned(&self.state_dir, &self.nodes, &self.node, false);
        }
    }
}

/// When the writer's first row acknowledged by `ip` after `after` was.
fn first_row_on(load: &Load, ip: &str, after: Instant) -> Result<Instant> {
    lock(&load.writes)
        .acked
        .iter()
        .find(|(_, at, on)| on == ip && *at > after)
        .map(|(_, at, _)| *at)
        .with_context(|| format!("no row acknowledged by {ip}"))
}

/// What the old primary's side saw, checked against the new primary's first row: it must have
/// stopped taking writes before (never two writable members). Returns the last writable answer
/// and the first one after it.
fn never_two_writable(
    answers: &[(Instant, Answer)],
    cut: Instant,
    (old, new): (&str, &str),
    first_new: Instant,
) -> Result<(Option<Instant>, (Instant, Answer))> {
    let (last_writable, fenced) = fence_of(answers, cut)?;
    ensure!(
        fenced.0 < first_new,
        "two writable members: {old} answered its side {} {:.1}s after the cut, {new} \
         acknowledged a row {:.1}s after it",
        fenced.1,
        fenced.0.duration_since(cut).as_secs_f64(),
        first_new.duration_since(cut).as_secs_f64()
    );
    Ok((last_writable, fenced))
}

/// See the module documentation (PostgreSQL).
pub async fn postgresql_partitioned_primary_self_fences(ctx: &Ctx) -> Result<()> {
    partitioned_primary_self_fences(ctx, Engine::Postgresql, "part-pg").await
}

/// See the module documentation (MariaDB: the agent fences with `read_only`, semi-sync).
pub async fn mariadb_partitioned_primary_self_fences(ctx: &Ctx) -> Result<()> {
    partitioned_primary_self_fences(ctx, Engine::Mariadb, "part-maria").await
}

/// See the module documentation (MySQL 9.7: `super_read_only`, semi-sync).
pub async fn mysql_partitioned_primary_self_fences(ctx: &Ctx) -> Result<()> {
    partitioned_primary_self_fences(ctx, Engine::Mysql, "part-mysql").await
}

async fn partitioned_primary_self_fences(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) = running_with(
        ctx,
        engine,
        suffix,
        DELAY_SECONDS,
        &spec_lines(Some(LEASE_SECONDS)),
    )
    .await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let old = primary_pod(&env, &ns, &name).await?;
        let (old_name, old_ip) = (old.name_any(), pod_ip(&old)?);
        let state = wait_sync(engine, &root, &password, &old_name, &old_ip).await?;
        ctx.step(format!("sync in effect on {old_name}: {state}"));

        // 1. The cut, proven both ways.
        let server = (engine, &root, password.as_str());
        let partition = Partition::member(ctx, &env, (&ns, &name), &old, server).await?;
        let cut = partition.at;
        let inside = partition.inside(&old, server)?;

        // 2. The agent's fence, then the failover on the expired Lease.
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
        ensure!(
            record.reason.contains("Lease"),
            "the failover does not say it counted on the lease: {}",
            record.reason
        );
        let gap = lock(&load.writes).gap_after(cut);
        let first_new = first_row_on(&load, &new_ip, cut)?;
        // A few more answers after the promotion: the old primary stays fenced.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let answers = inside.answers();
        drop(inside);
        let (last_writable, fenced) =
            never_two_writable(&answers, cut, (&old_name, &new_name), first_new)?;
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        ensure!(
            lost.is_empty(),
            "{} of {acked} acknowledged rows lost in sync mode: {lost:?}",
            lost.len()
        );

        // 3. Healed: the old primary back as a replica.
        let healed = partition.heal(ctx)?;
        let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
        ensure!(role == "replica", "{old_name} came back as {role}");
        let answered: Vec<String> = answers
            .iter()
            .filter(|(at, _)| *at >= fenced.0)
            .map(|(_, a)| a.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ctx.note(format!(
            "{engine:?} partitioned primary: {old_name} cut off with its node; its side last saw \
             it writable {:.1}s after the cut, then {:.1}s after it: {}; {new_name} promoted on the \
             expired Lease, its first row {:.1}s after the cut; write gap {:.1}s (delaySeconds \
             {DELAY_SECONDS}, leaseSeconds {LEASE_SECONDS}); {acked} rows acknowledged, none \
             lost (sync); {old_name} back as a replica {:.1}s after the heal",
            last_writable.map_or(0.0, |at| at.duration_since(cut).as_secs_f64()),
            fenced.0.duration_since(cut).as_secs_f64(),
            answered.join(", "),
            first_new.duration_since(cut).as_secs_f64(),
            gap.as_secs_f64(),
            healed.elapsed().as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// From the answers of the old primary's side after `cut`: the last time it answered writable
/// (if it did) and the first answer after that, which must not be writable, nor any after it.
fn fence_of(
    answers: &[(Instant, Answer)],
    cut: Instant,
) -> Result<(Option<Instant>, (Instant, Answer))> {
    let after: Vec<&(Instant, Answer)> = answers.iter().filter(|(at, _)| *at >= cut).collect();
    ensure!(
        !after.is_empty(),
        "no answer from inside the partitioned node"
    );
    let last = after.iter().rposition(|(_, a)| *a == Answer::Writable);
    let next = match last {
        Some(i) => after.get(i + 1),
        None => after.first(),
    };
    let (at, answer) = next
        .map(|(at, a)| (*at, a.clone()))
        .context("the old primary still answered writable when the probe stopped")?;
    Ok((last.map(|i| after[i].0), (at, answer)))
}

/// How long after the cut the operator may take to say it cannot confirm the fence: the node
/// is seen lost after the controller manager's grace period (tens of seconds), then
/// `delaySeconds`, the stop, and the pod's grace period plus ten seconds.
const BLOCKED_TIMEOUT: Duration = Duration::from_secs(150);

/// See the module documentation (PostgreSQL, async, no self-fencing).
pub async fn postgresql_partitioned_primary_waits_for_its_fence(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) =
        running(ctx, engine, "part-wait-pg", DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let old = primary_pod(&env, &ns, &name).await?;
        let old_name = old.name_any();
        let server = (engine, &root, password.as_str());
        let partition = Partition::member(ctx, &env, (&ns, &name), &old, server).await?;
        let cut = partition.at;
        let inside = partition.inside(&old, server)?;

        // Blocked, not promoted: the old primary may still take writes on its side.
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let message = wait_for(
            "FailoverBlocked FenceUnconfirmed",
            BLOCKED_TIMEOUT,
            async || {
                let dbc = clusters.get(&name).await?;
                let blocked = condition(&dbc, conditions::FAILOVER_BLOCKED)
                    .filter(|c| c.status == "True" && c.reason == reasons::FENCE_UNCONFIRMED);
                Ok(match blocked {
                    Some(c) => Check::Done(c.message.clone()),
                    None => Check::Pending(describe(&dbc)),
                })
            },
        )
        .await?;
        let blocked_after = cut.elapsed();
        let dbc = clusters.get(&name).await?;
        let op = dbc
            .status
            .as_ref()
            .and_then(|s| s.failover.as_ref())
            .and_then(|f| f.operation.clone())
            .context("no operation in flight")?;
        ensure!(
            op.phase == FailoverPhase::Fencing && op.from == old_name && op.to.is_none(),
            "blocked, but the operation is {:?} from {} to {:?}",
            op.phase,
            op.from,
            op.to
        );
        let writable_inside = inside
            .answers()
            .iter()
            .rev()
            .find(|(at, _)| *at >= cut)
            .map(|(_, a)| a.clone());
        ensure!(
            writable_inside == Some(Answer::Writable),
            "the old primary answers its side {writable_inside:?}: nothing fenced it, it should \
             still be writable there"
        );
        ctx.step(format!(
            "{:.1}s after the cut: FenceUnconfirmed, nothing promoted, {old_name} still writable \
             on its side: {message}",
            blocked_after.as_secs_f64()
        ));

        // Healed: the stop is carried out, then the failover completes on its own.
        let healed = partition.heal(ctx)?;
        let (_, new_name, new_ip) = serving_after(
            &env,
            &ns,
            &name,
            &load,
            FailoverKind::Failover,
            &old_name,
            cut,
            Duration::from_secs(120),
        )
        .await?;
        let first_new = first_row_on(&load, &new_ip, cut)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answers = inside.answers();
        drop(inside);
        let (last_writable, fenced) =
            never_two_writable(&answers, cut, (&old_name, &new_name), first_new)?;
        let gap = lock(&load.writes).gap_after(cut);
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        if new_name != old_name {
            let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
            ensure!(role == "replica", "{old_name} came back as {role}");
        }
        ctx.note(format!(
            "{engine:?} partitioned primary without self-fencing: FenceUnconfirmed {:.1}s after \
             the cut, nothing promoted while {old_name} stayed writable on its side (last seen \
             {:.1}s after the cut); healed after {:.1}s, {old_name} stopped ({}) {:.1}s after \
             the heal, {new_name} took its first row {:.1}s after the heal; write gap {:.1}s \
             (the partition's length); {acked} rows acknowledged, {} lost (async)",
            blocked_after.as_secs_f64(),
            last_writable.map_or(0.0, |at| at.duration_since(cut).as_secs_f64()),
            healed.duration_since(cut).as_secs_f64(),
            fenced.1,
            fenced.0.saturating_duration_since(healed).as_secs_f64(),
            first_new.duration_since(healed).as_secs_f64(),
            gap.as_secs_f64(),
            lost.len()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// See the module documentation (PostgreSQL, async and sync, one cluster each).
pub async fn postgresql_partitioned_replica_catches_up(ctx: &Ctx) -> Result<()> {
    partitioned_replica(ctx, Engine::Postgresql, "part-rep-pg", "").await?;
    partitioned_replica(
        ctx,
        Engine::Postgresql,
        "part-rep-pg-sync",
        super::sync::SYNC,
    )
    .await
}

async fn partitioned_replica(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
    spec_lines: &str,
) -> Result<()> {
    let mode = if spec_lines.is_empty() {
        "async"
    } else {
        "sync"
    };
    let (env, ns, name, password, root) =
        running_with(ctx, engine, suffix, DELAY_SECONDS, spec_lines).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let primary = primary_pod(&env, &ns, &name).await?;
        let primary_name = primary.name_any();
        let pods: Api<Pod> = api(&env, &ns);
        let replica = pods
            .list(&ListParams::default().labels(&format!(
                "database.example.com/cluster={name},{ROLE_LABEL}=replica"
            )))
            .await?
            .items
            .into_iter()
            .next()
            .context("no pod labelled replica")?;
        let (replica_name, replica_ip) = (replica.name_any(), pod_ip(&replica)?);
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let last_before = clusters
            .get(&name)
            .await?
            .status
            .and_then(|s| s.failover)
            .and_then(|f| f.last);

        let server = (engine, &root, password.as_str());
        let partition = Partition::member(ctx, &env, (&ns, &name), &replica, server).await?;
        let cut = partition.at;
        // The status says so at once (the pod stays Ready for tens of seconds: its kubelet is
        // cut off too), naming the member.
        let said = wait_for(
            &format!("Degraded naming {replica_name}, out of status.members"),
            Duration::from_secs(60),
            async || {
                let dbc = clusters.get(&name).await?;
                let listed = dbc
                    .status
                    .as_ref()
                    .is_some_and(|s| s.members.iter().any(|m| m.pod == replica_name));
                let degraded = condition(&dbc, conditions::DEGRADED).filter(|c| {
                    c.status == "True"
                        && c.message.contains(&format!(
                            "{replica_name} not answering the operator's probes"
                        ))
                });
                Ok(match degraded {
                    Some(c) if !listed => Check::Done(format!("{}: {}", c.reason, c.message)),
                    _ => Check::Pending(describe(&dbc)),
                })
            },
        )
        .await?;
        let dropped = cut.elapsed();
        // Writes go on for a while with the replica cut off.
        let rows_at_cut = lock(&load.writes).acked.len();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during = lock(&load.writes).acked.len() - rows_at_cut;
        let gap = lock(&load.writes).gap_after(cut);
        ensure!(
            gap < Duration::from_secs(DELAY_SECONDS),
            "the writer stalled {:.1}s with one replica cut off ({mode})",
            gap.as_secs_f64()
        );
        let dbc = clusters.get(&name).await?;
        let status = dbc.status.clone().unwrap_or_default();
        ensure!(
            status.primary_pod.as_deref() == Some(primary_name.as_str())
                && status.failover.as_ref().and_then(|f| f.last.clone()) == last_before
                && status
                    .failover
                    .as_ref()
                    .is_none_or(|f| f.operation.is_none()),
            "a replica's partition moved the primary or started a failover: {:?}",
            status.failover
        );

        let healed = partition.heal(ctx)?;
        let acked: BTreeSet<u64> = lock(&load.writes)
            .acked
            .iter()
            .map(|(id, _, _)| *id)
            .collect();
        let missing = wait_for(
            &format!("every acknowledged row on {replica_name}"),
            Duration::from_secs(90),
            async || {
                let Ok(present) = ids_on(engine, &root, &replica_ip, &password) else {
                    return Ok(Check::Pending("no answer".into()));
                };
                let missing = acked.difference(&present).count();
                Ok(if missing == 0 {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{missing} of {} missing", acked.len()))
                })
            },
        )
        .await;
        missing?;
        let caught_up = healed.elapsed();
        let role = rejoined(&env, engine, &root, &password, &ns, &replica_name).await?;
        ensure!(role == "replica", "{replica_name} came back as {role}");
        wait_for("Running again", Duration::from_secs(30), async || {
            let dbc = clusters.get(&name).await?;
            Ok(if phase(&dbc) == "Running" {
                Check::Done(())
            } else {
                Check::Pending(describe(&dbc))
            })
        })
        .await?;
        let running_again = healed.elapsed();
        ctx.note(format!(
            "{engine:?} partitioned replica ({mode}): {replica_name} cut off; Degraded and out \
             of status.members {:.1}s after the cut ({said}); the writer went on ({during} rows \
             in the next 10 s, longest gap {:.1}s), no failover; healed, it had every one of {} \
             acknowledged rows {:.1}s later, Running {:.1}s after the heal",
            dropped.as_secs_f64(),
            gap.as_secs_f64(),
            acked.len(),
            caught_up.as_secs_f64(),
            running_again.as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}
