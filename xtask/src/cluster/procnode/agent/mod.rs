//! The agent's loop: pods bound to process nodes run as local processes, with
//! the status, probes, restarts and deletion a kubelet gives them.
//!
//! Here: the watch loop ([`run`]), the agent's pods and Services, and the types of a pod
//! worker. Its methods are split by what they do: `worker` (a pod's life: volumes, hosts
//! files, init containers then containers, reaping), `spawn` (starting one container),
//! `lifecycle` (probes, the pod's status, graceful deletion); `container` holds a container's
//! process and probe runners.

mod container;
mod lifecycle;
mod spawn;
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Event, PersistentVolume, Pod, Probe, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Client, ResourceExt as _};
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::envvars::{expand, resolve_in_order};
use super::hosts::{self, PodEntry, ServiceEntry};
use super::ipam::IpAllocator;
use super::launch::{self, LaunchSpec, Mount, Tools};
use super::partition::{NodeCgroups, partitioned_nodes};
use super::probe::{self, Action};
use super::status::{self, Backoff, CState, CView, Condition, ProbeTracker};
use super::volumes::{self, Tokens, VolumeCtx};
use super::{AGENT_NAME, node, now_rfc3339, pid_file_line, pods_dir, volumes_dir};
use crate::cluster::images::{ImageRootfs, ImageTable, Resolution};
use container::action;

/// Shared by every pod worker.
pub struct Ctx {
    pub client: Client,
    pub tools: Tools,
    pub images: ImageTable,
    pub state_dir: PathBuf,
    pub nodes: Vec<(String, Ipv4Addr)>,
    pub api_port: u16,
    /// The nodes' cgroups, where this machine has a writable cgroup v2 hierarchy (needed by
    /// partitions, [`super::partition`]).
    pub cgroups: Option<NodeCgroups>,
}

impl Ctx {
    fn node_ip(&self, node: &str) -> Option<Ipv4Addr> {
        self.nodes
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, ip)| *ip)
    }

    /// The nodes that are powered on and reach the API server now
    /// ([`super::stopped_marker`], [`super::partition::partitioned_marker`]).
    fn running_nodes(&self) -> Vec<(String, Ipv4Addr)> {
        let stopped = super::stopped_nodes(&self.state_dir);
        let cut = partitioned_nodes(&self.state_dir);
        self.nodes
            .iter()
            .filter(|(n, _)| !stopped.contains(n) && !cut.contains(n))
            .cloned()
            .collect()
    }
}

/// Runs until SIGTERM/SIGINT; then stops every container it started.
pub async fn run(ctx: Ctx) -> Result<()> {
    let ctx = Arc::new(ctx);
    node::register(&ctx.client, &ctx.nodes).await?;
    let mut node_uids = BTreeMap::new();
    node::renew_leases(&ctx.client, &ctx.nodes, &mut node_uids).await?;
    eprintln!(
        "{AGENT_NAME}: nodes {} registered",
        ctx.nodes
            .iter()
            .map(|(n, ip)| format!("{n} ({ip})"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let notify = Arc::new(Notify::new());
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (services, svc_writer) = reflector::store::<Service>();
    {
        let n = notify.clone();
        let stream = reflector(
            pod_writer,
            watcher(
                Api::<Pod>::all(ctx.client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    eprintln!("{AGENT_NAME}: pod watch: {e}");
                }
                n.notify_one();
            }
        });
        let n = notify.clone();
        let stream = reflector(
            svc_writer,
            watcher(
                Api::<Service>::all(ctx.client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    eprintln!("{AGENT_NAME}: service watch: {e}");
                }
                n.notify_one();
            }
        });
    }
    // Heartbeats of the nodes that are powered on: Lease every 10 s (at once for a node
    // powered on again, with its status), node status every minute.
    {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut tick = 0u64;
            let mut was_running = ctx.running_nodes();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let running = ctx.running_nodes();
                let back: Vec<_> = running
                    .iter()
                    .filter(|n| !was_running.contains(n))
                    .cloned()
                    .collect();
                was_running = running.clone();
                if !back.is_empty() {
                    let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
                    eprintln!(
                        "{AGENT_NAME}: node {} powered on or reconnected",
                        names.join(", ")
                    );
                    if let Err(e) = node::renew_leases(&ctx.client, &back, &mut node_uids).await {
                        eprintln!("{AGENT_NAME}: {e:#}");
                    }
                    if let Err(e) = node::update_status(&ctx.client, &back).await {
                        eprintln!("{AGENT_NAME}: {e:#}");
                    }
                }
                tick += 1;
                if !tick.is_multiple_of(10) {
                    continue;
                }
                if let Err(e) = node::renew_leases(&ctx.client, &running, &mut node_uids).await {
                    eprintln!("{AGENT_NAME}: {e:#}");
                }
                if tick.is_multiple_of(60)
                    && let Err(e) = node::update_status(&ctx.client, &running).await
                {
                    eprintln!("{AGENT_NAME}: {e:#}");
                }
            }
        });
    }

    let mut agent = Agent {
        ctx: ctx.clone(),
        workers: BTreeMap::new(),
        done: BTreeSet::new(),
        ips: IpAllocator::default(),
        last_pv_gc: Instant::now(),
        parked: BTreeMap::new(),
        cut: BTreeMap::new(),
    };
    // A table left by an agent that was killed: no partition survives a restart.
    if let Some(cgroups) = &ctx.cgroups
        && let Err(e) = cgroups.apply(&ctx.state_dir, &BTreeMap::new())
    {
        eprintln!("{AGENT_NAME}: clearing partitions: {e:#}");
    }
    pods.wait_until_ready()
        .await
        .context("first list of pods")?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = notify.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
        agent.sync_all(&pods.state(), &services.state()).await;
        // Coalesce bursts of watch events.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("{AGENT_NAME}: stopping every container");
    agent.shutdown().await;
    Ok(())
}

struct Agent {
    ctx: Arc<Ctx>,
    workers: BTreeMap<String, PodWorker>,
    /// Pods whose deletion this agent completed (their DELETED event may lag).
    done: BTreeSet<String>,
    ips: IpAllocator,
    last_pv_gc: Instant,
    /// Pods of powered-off nodes, by uid: their node and the address they keep (their status
    /// still shows it, so no other pod may get it while the node is off).
    parked: BTreeMap<String, (String, Option<Ipv4Addr>)>,
    /// Partitioned nodes and the pod addresses cut with them, as applied.
    cut: BTreeMap<String, Vec<Ipv4Addr>>,
}

impl Agent {
    async fn sync_all(&mut self, pods: &[Arc<Pod>], services: &[Arc<Service>]) {
        let entries: Vec<PodEntry> = pods.iter().map(|p| pod_entry(p)).collect();
        let svc_entries: Vec<ServiceEntry> = services.iter().map(|s| service_entry(s)).collect();
        let mut seen = BTreeSet::new();
        let stopped = super::stopped_nodes(&self.ctx.state_dir);
        let partitioned = partitioned_nodes(&self.ctx.state_dir);
        // A node powered on again: its pods take their addresses back when they start.
        let live_uids: BTreeSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        let released: Vec<String> = self
            .parked
            .iter()
            .filter(|(uid, (node, _))| !stopped.contains(node) || !live_uids.contains(*uid))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in released {
            if let Some((_, Some(ip))) = self.parked.remove(&uid) {
                self.ips.release(ip);
            }
        }
        for pod in pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if self.ctx.node_ip(node).is_none() {
                continue;
            }
            let uid = pod.uid().unwrap_or_default();
            seen.insert(uid.clone());
            if self.done.contains(&uid) {
                continue;
            }
            if partitioned.contains(node) {
                // Cut off: its processes run on unsupervised, and it sees no change (a new pod
                // waits, a deletion is seen when the partition heals).
                continue;
            }
            if stopped.contains(node) {
                // Powered off: whatever ran is gone at once; nothing is reported or deleted.
                if let Some(mut w) = self.workers.remove(&uid) {
                    eprintln!(
                        "{AGENT_NAME}: node {node} powered off: pod {}/{} killed",
                        w.namespace, w.name
                    );
                    w.kill_all(Duration::from_secs(2)).await;
                    w.cleanup();
                    self.parked.insert(uid.clone(), (node.to_owned(), w.ip));
                }
                continue;
            }
            if !self.workers.contains_key(&uid) {
                let worker = PodWorker::new(&self.ctx, pod, &mut self.ips);
                self.workers.insert(uid.clone(), worker);
            }
            let Some(worker) = self.workers.get_mut(&uid) else {
                continue;
            };
            if let Err(e) = worker.sync(&self.ctx, pod, &entries, &svc_entries).await {
                eprintln!(
                    "{AGENT_NAME}: pod {}/{}: {e:#}",
                    worker.namespace, worker.name
                );
            }
        }
        self.done.retain(|uid| seen.contains(uid));
        // Gone from the API (deleted by us, or force-deleted): nothing may run.
        let gone: Vec<String> = self
            .workers
            .iter()
            .filter(|(uid, w)| {
                (!seen.contains(*uid) || w.finished) && !partitioned.contains(&w.node)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(mut w) = self.workers.remove(&uid) {
                if w.finished {
                    self.done.insert(uid.clone());
                }
                w.kill_all(Duration::from_secs(2)).await;
                w.cleanup();
                if let Some(ip) = w.ip {
                    self.ips.release(ip);
                }
            }
        }
        self.apply_partitions(&partitioned);
        if self.last_pv_gc.elapsed() > Duration::from_secs(15) {
            self.last_pv_gc = Instant::now();
            if let Err(e) = gc_volumes(&self.ctx).await {
                eprintln!("{AGENT_NAME}: volume clean-up: {e:#}");
            }
        }
    }

    /// Brings the nftables rules in line with the partition markers: the addresses cut with a
    /// node are those of its pods when it was cut (nothing of it changes while it is).
    fn apply_partitions(&mut self, partitioned: &BTreeSet<String>) {
        if self.cut.keys().eq(partitioned.iter()) {
            return;
        }
        let cut: BTreeMap<String, Vec<Ipv4Addr>> = partitioned
            .iter()
            .map(|node| {
                let ips = self
                    .workers
                    .values()
                    .filter(|w| &w.node == node)
                    .filter_map(|w| w.ip)
                    .collect();
                (node.clone(), ips)
            })
            .collect();
        let Some(cgroups) = &self.ctx.cgroups else {
            let _ = fs::write(
                self.ctx.state_dir.join("partitioned-nodes.applied"),
                "error: this machine has no writable cgroup v2 hierarchy under /sys/fs/cgroup\n",
            );
            return;
        };
        match cgroups.apply(&self.ctx.state_dir, &cut) {
            Ok(()) => {
                eprintln!(
                    "{AGENT_NAME}: partitioned nodes now: {:?}",
                    cut.iter().collect::<Vec<_>>()
                );
                self.cut = cut;
            }
            Err(e) => eprintln!("{AGENT_NAME}: partition: {e:#}"),
        }
    }

    async fn shutdown(&mut self) {
        for w in self.workers.values_mut() {
            w.signal_all(Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(8);
        while Instant::now() < deadline && self.workers.values_mut().any(|w| w.any_running()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for w in self.workers.values_mut() {
            w.kill_all(Duration::from_secs(2)).await;
        }
        if let Some(cgroups) = &self.ctx.cgroups {
            if !self.cut.is_empty() {
                let _ = cgroups.apply(&self.ctx.state_dir, &BTreeMap::new());
            }
            cgroups.remove_empty();
        }
    }
}

/// Removes the data of PersistentVolumes that no longer exist.
async fn gc_volumes(ctx: &Ctx) -> Result<()> {
    let root = volumes_dir(&ctx.state_dir);
    let Ok(entries) = fs::read_dir(&root) else {
        return Ok(());
    };
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let names: BTreeSet<String> = pvs
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !names.contains(&name) {
            eprintln!("{AGENT_NAME}: PersistentVolume {name} is gone; removing its data");
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    Ok(())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_entry(pod: &Pod) -> PodEntry {
    let spec = pod.spec.as_ref();
    PodEntry {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        hostname: spec.and_then(|s| s.hostname.clone()),
        subdomain: spec.and_then(|s| s.subdomain.clone()),
        ip: pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        ready: pod_ready(pod) && pod.metadata.deletion_timestamp.is_none(),
        labels: pod.labels().clone(),
    }
}

fn service_entry(svc: &Service) -> ServiceEntry {
    let spec = svc.spec.as_ref();
    ServiceEntry {
        namespace: svc.namespace().unwrap_or_default(),
        name: svc.name_any(),
        selector: spec.and_then(|s| s.selector.clone()).unwrap_or_default(),
        publish_not_ready: spec
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false),
    }
}

/// A running container process.
struct Proc {
    child: Child,
    pid: u32,
    started: Instant,
    started_at: String,
    stop_deadline: Option<Instant>,
    uid: i64,
    gid: i64,
    env: Vec<(String, String)>,
}

struct ProbeRunner {
    spec: Probe,
    tracker: ProbeTracker,
    next_at: Instant,
    pending: Option<JoinHandle<bool>>,
}

struct Ctr {
    spec: Container,
    init: bool,
    proc: Option<Proc>,
    state: CState,
    last: Option<CState>,
    restart_count: i32,
    ever_started: bool,
    backoff: Backoff,
    restart_at: Option<Instant>,
    ready: bool,
    started: bool,
    image_id: String,
    readiness: Option<ProbeRunner>,
    liveness: Option<ProbeRunner>,
    startup: Option<ProbeRunner>,
    /// The container is being stopped because a probe failed.
    killing_reason: Option<String>,
}

struct PodWorker {
    namespace: String,
    name: String,
    dir: PathBuf,
    node: String,
    host_ip: Ipv4Addr,
    ip: Option<Ipv4Addr>,
    start_time: String,
    init: Vec<Ctr>,
    main: Vec<Ctr>,
    volumes: BTreeMap<String, PathBuf>,
    volumes_ok: bool,
    last_full_volume_sync: Option<Instant>,
    tokens: Tokens,
    mount_error: Option<String>,
    hosts_text: String,
    last_status: Option<Value>,
    conditions: Vec<Condition>,
    warned: BTreeSet<String>,
    terminating_since: Option<Instant>,
    finished: bool,
}

fn grace_period(pod: &Pod) -> Duration {
    Duration::from_secs(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64,
    )
}

/// `<pod dir>/<container>.termination-message`: what the container sees at its
/// `terminationMessagePath`.
fn termination_file(dir: &Path, container: &str) -> PathBuf {
    dir.join(format!("{container}.termination-message"))
}

/// What the container left in its termination message file: at most 4096 bytes (the
/// kubelet's limit), `None` when empty or absent.
fn termination_message(dir: &Path, container: &str) -> Option<String> {
    let bytes = fs::read(termination_file(dir, container)).ok()?;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]).into_owned();
    (!text.trim().is_empty()).then_some(text)
}

/// The end of the container's log, as a kubelet keeps it for a failed container with
/// `terminationMessagePolicy: FallbackToLogsOnError`: the last 80 lines, at most 2048 bytes;
/// `None` when the log is empty or absent.
fn log_tail(dir: &Path, container: &str) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(dir.join(format!("{container}.log"))).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(2048))).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    (!tail.trim().is_empty()).then_some(tail)
}

fn remove_pid_file(dir: &Path, container: &str) {
    let _ = fs::remove_file(dir.join(format!("{container}.pid")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_termination_message_is_what_the_container_wrote_up_to_4096_bytes() {
        let dir = std::env::temp_dir().join(format!("procnode-term-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(termination_message(&dir, "backup"), None, "no file");
        fs::write(termination_file(&dir, "backup"), "  \n").unwrap();
        assert_eq!(termination_message(&dir, "backup"), None, "blank");
        fs::write(termination_file(&dir, "backup"), "{\"id\":\"x\"}").unwrap();
        assert_eq!(
            termination_message(&dir, "backup").as_deref(),
            Some("{\"id\":\"x\"}")
        );
        fs::write(termination_file(&dir, "backup"), "a".repeat(5000)).unwrap();
        assert_eq!(
            termination_message(&dir, "backup").map(|m| m.len()),
            Some(4096)
        );
        assert_eq!(termination_message(&dir, "other"), None, "per container");
    }

    #[test]
    fn a_log_tail_is_the_last_80_lines_within_2048_bytes() {
        let dir = std::env::temp_dir().join(format!("agent-log-tail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(log_tail(&dir, "db"), None, "no log");
        let lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        fs::write(dir.join("db.log"), lines.join("\n") + "\n").unwrap();
        let tail = log_tail(&dir, "db").unwrap();
        assert_eq!(tail.lines().count(), 80);
        assert_eq!(tail.lines().last(), Some("line 99"));
        fs::write(
            dir.join("db.log"),
            "x".repeat(5000) + "\nPANIC: No space left on device\n",
        )
        .unwrap();
        let tail = log_tail(&dir, "db").unwrap();
        assert!(tail.len() <= 2048, "{}", tail.len());
        assert!(tail.ends_with("PANIC: No space left on device"), "{tail}");
        fs::remove_dir_all(&dir).unwrap();
        let _ = fs::remove_dir_all(&dir);
    }
}
