//! The agent's loop: pods bound to process nodes run as local processes, with
//! the status, probes, restarts and deletion a kubelet gives them.

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
use super::probe::{self, Action};
use super::status::{self, Backoff, CState, CView, Condition, ProbeTracker};
use super::volumes::{self, Tokens, VolumeCtx};
use super::{AGENT_NAME, node, now_rfc3339, pid_file_line, pods_dir, volumes_dir};
use crate::cluster::images::{ImageRootfs, ImageTable, Resolution};

/// Shared by every pod worker.
pub struct Ctx {
    pub client: Client,
    pub tools: Tools,
    pub images: ImageTable,
    pub state_dir: PathBuf,
    pub nodes: Vec<(String, Ipv4Addr)>,
    pub api_port: u16,
}

impl Ctx {
    fn node_ip(&self, node: &str) -> Option<Ipv4Addr> {
        self.nodes
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, ip)| *ip)
    }

    /// The nodes that are powered on now ([`super::stopped_marker`]).
    fn running_nodes(&self) -> Vec<(String, Ipv4Addr)> {
        let stopped = super::stopped_nodes(&self.state_dir);
        self.nodes
            .iter()
            .filter(|(n, _)| !stopped.contains(n))
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
                    eprintln!("{AGENT_NAME}: node {} powered on", names.join(", "));
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
    };
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
}

impl Agent {
    async fn sync_all(&mut self, pods: &[Arc<Pod>], services: &[Arc<Service>]) {
        let entries: Vec<PodEntry> = pods.iter().map(|p| pod_entry(p)).collect();
        let svc_entries: Vec<ServiceEntry> = services.iter().map(|s| service_entry(s)).collect();
        let mut seen = BTreeSet::new();
        let stopped = super::stopped_nodes(&self.ctx.state_dir);
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
            .filter(|(uid, w)| !seen.contains(*uid) || w.finished)
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
        if self.last_pv_gc.elapsed() > Duration::from_secs(15) {
            self.last_pv_gc = Instant::now();
            if let Err(e) = gc_volumes(&self.ctx).await {
                eprintln!("{AGENT_NAME}: volume clean-up: {e:#}");
            }
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

impl ProbeRunner {
    fn new(spec: &Probe, initial: bool, started: Instant) -> Self {
        Self {
            tracker: ProbeTracker::new(
                spec.success_threshold.unwrap_or(1),
                spec.failure_threshold.unwrap_or(3),
                initial,
            ),
            next_at: started
                + Duration::from_secs(spec.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            pending: None,
            spec: spec.clone(),
        }
    }

    fn period(&self) -> Duration {
        Duration::from_secs(self.spec.period_seconds.unwrap_or(10).max(1) as u64)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.spec.timeout_seconds.unwrap_or(1).max(1) as u64)
    }

    /// Collects a finished probe, starts a due one; returns Some(result)
    /// when a probe completed in this call.
    async fn poll(&mut self, action: impl FnOnce(&Probe) -> Option<Action>) -> Option<bool> {
        let mut completed = None;
        if let Some(h) = &self.pending
            && h.is_finished()
            && let Some(h) = self.pending.take()
        {
            let ok = h.await.unwrap_or(false);
            completed = Some(self.tracker.record(ok));
        }
        if self.pending.is_none() && Instant::now() >= self.next_at {
            self.next_at = Instant::now() + self.period();
            let timeout = self.timeout();
            match action(&self.spec) {
                Some(a) => {
                    self.pending =
                        Some(tokio::task::spawn_blocking(move || probe::run(&a, timeout)));
                }
                None => completed = Some(self.tracker.record(false)),
            }
        }
        completed
    }
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

impl Ctr {
    fn new(spec: &Container, init: bool) -> Self {
        Self {
            spec: spec.clone(),
            init,
            proc: None,
            state: CState::waiting("PodInitializing", None),
            last: None,
            restart_count: 0,
            ever_started: false,
            backoff: Backoff::default(),
            restart_at: None,
            ready: false,
            started: false,
            image_id: String::new(),
            readiness: None,
            liveness: None,
            startup: None,
            killing_reason: None,
        }
    }

    fn view(&self) -> CView {
        CView {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            image_id: self.image_id.clone(),
            container_id: self.proc.as_ref().map(|p| format!("process://{}", p.pid)),
            state: self.state.clone(),
            last: self.last.clone(),
            restart_count: self.restart_count,
            ready: self.ready,
            started: self.started,
        }
    }

    fn signal(&self, sig: Signal) {
        if let Some(p) = &self.proc
            && let Some(pid) = Pid::from_raw(p.pid as i32)
        {
            let _ = kill_process_group(pid, sig);
        }
    }
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

impl PodWorker {
    fn new(ctx: &Ctx, pod: &Pod, ips: &mut IpAllocator) -> Self {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let status = pod.status.as_ref();
        // Keep an address the pod already has (agent restarted).
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| ips.claim(*ip))
            .or_else(|| ips.allocate());
        let spec = pod.spec.clone().unwrap_or_default();
        let conditions = status
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .map(|c| Condition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        last_transition_time: c
                            .last_transition_time
                            .as_ref()
                            .and_then(|t| serde_json::to_value(t).ok())
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        reason: c.reason.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            dir: pods_dir(&ctx.state_dir).join(format!("{namespace}_{name}")),
            host_ip: ctx.node_ip(&node).unwrap_or(Ipv4Addr::LOCALHOST),
            namespace,
            name,
            node,
            ip,
            start_time: status
                .and_then(|s| s.start_time.as_ref())
                .and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(now_rfc3339),
            init: spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| Ctr::new(c, true))
                .collect(),
            main: spec.containers.iter().map(|c| Ctr::new(c, false)).collect(),
            volumes: BTreeMap::new(),
            volumes_ok: false,
            last_full_volume_sync: None,
            tokens: Tokens::default(),
            mount_error: None,
            hosts_text: String::new(),
            last_status: None,
            conditions,
            warned: BTreeSet::new(),
            terminating_since: None,
            finished: false,
        }
    }

    fn ip_string(&self) -> String {
        self.ip.map(|i| i.to_string()).unwrap_or_default()
    }

    fn any_running(&mut self) -> bool {
        let mut any = false;
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let Some(p) = &mut c.proc {
                if matches!(p.child.try_wait(), Ok(Some(_))) {
                    c.signal(Signal::KILL);
                    c.proc = None;
                    remove_pid_file(&self.dir, &c.spec.name);
                } else {
                    any = true;
                }
            }
        }
        any
    }

    fn signal_all(&self, sig: Signal) {
        for c in self.init.iter().chain(self.main.iter()) {
            c.signal(sig);
        }
    }

    /// SIGKILL to every container's process group; waits up to `wait`.
    async fn kill_all(&mut self, wait: Duration) {
        self.signal_all(Signal::KILL);
        let deadline = Instant::now() + wait;
        while self.any_running() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes what the pod had on disk, except the logs.
    fn cleanup(&self) {
        for sub in ["containers", "volumes"] {
            let _ = fs::remove_dir_all(self.dir.join(sub));
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_file() && p.extension().is_none_or(|x| x != "log") {
                    let _ = fs::remove_file(p);
                }
            }
        }
    }

    async fn event(&mut self, ctx: &Ctx, pod: &Pod, type_: &str, reason: &str, message: &str) {
        let now = now_rfc3339();
        let ev = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "generateName": format!("{}.", self.name), "namespace": self.namespace },
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "namespace": self.namespace,
                "name": self.name, "uid": pod.uid().unwrap_or_default(),
            },
            "type": type_,
            "reason": reason,
            "message": message,
            "source": { "component": AGENT_NAME, "host": self.node },
            "reportingComponent": AGENT_NAME,
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let api: Api<Event> = Api::namespaced(ctx.client.clone(), &self.namespace);
        match serde_json::from_value::<Event>(ev) {
            Ok(ev) => {
                if let Err(e) = api.create(&PostParams::default(), &ev).await {
                    eprintln!(
                        "{AGENT_NAME}: event {reason} on {}/{}: {e}",
                        self.namespace, self.name
                    );
                }
            }
            Err(e) => eprintln!("{AGENT_NAME}: building event {reason}: {e}"),
        }
    }

    async fn sync(
        &mut self,
        ctx: &Ctx,
        pod: &Pod,
        pods: &[PodEntry],
        services: &[ServiceEntry],
    ) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(ctx, pod).await;
        }
        let Some(ip) = self.ip else {
            anyhow::bail!("no free pod IP in {}", super::ipam::POD_RANGE);
        };
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        self.write_hosts(pod, pods, services)?;

        // Volumes: the downward API every pass, the rest every 10 s.
        let full = self
            .last_full_volume_sync
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10));
        if full || self.volumes_ok {
            let cx = VolumeCtx {
                client: &ctx.client,
                pod,
                pod_dir: &self.dir,
                pv_root: &volumes_dir(&ctx.state_dir),
                pod_ip: &ip.to_string(),
                host_ip: &self.host_ip.to_string(),
                full,
            };
            if full {
                self.last_full_volume_sync = Some(Instant::now());
            }
            match volumes::sync(&cx, &mut self.tokens, &mut self.volumes).await {
                Ok(()) => {
                    self.volumes_ok = true;
                    self.mount_error = None;
                }
                Err(e) => {
                    if !self.volumes_ok && self.mount_error.as_ref() != Some(&e) {
                        self.event(ctx, pod, "Warning", "FailedMount", &e).await;
                    }
                    if !self.volumes_ok {
                        self.mount_error = Some(e);
                    }
                }
            }
        }

        if self.volumes_ok {
            self.run_containers(ctx, pod).await;
        } else {
            let msg = self.mount_error.clone();
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                if c.proc.is_none() && !c.ever_started {
                    c.state = CState::waiting("ContainerCreating", msg.clone());
                }
            }
        }
        self.patch_status(ctx, pod).await
    }

    fn write_hosts(
        &mut self,
        pod: &Pod,
        pods: &[PodEntry],
        services: &[ServiceEntry],
    ) -> Result<()> {
        let own = pod_entry(pod);
        let text = hosts::render(&own, &self.ip_string(), pods, services);
        if text != self.hosts_text {
            // In place (same inode): the file is bind-mounted into running containers.
            let path = self.dir.join("hosts");
            fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
            self.hosts_text = text;
        }
        let resolv = self.dir.join("resolv.conf");
        if !resolv.exists() {
            fs::write(
                &resolv,
                format!(
                    "# No DNS on the local cluster: names come from /etc/hosts.\nsearch {}.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:1\n",
                    self.namespace
                ),
            )?;
        }
        Ok(())
    }

    async fn run_containers(&mut self, ctx: &Ctx, pod: &Pod) {
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        // Exits first.
        for i in 0..self.init.len() + self.main.len() {
            self.reap(ctx, pod, i, &policy).await;
        }
        // Init containers one at a time, in order.
        let mut initialized = true;
        for i in 0..self.init.len() {
            let c = &self.init[i];
            if matches!(c.state, CState::Terminated { exit_code: 0, .. }) {
                continue;
            }
            initialized = false;
            if c.proc.is_none() && c.restart_at.is_none_or(|t| Instant::now() >= t) {
                let failed_for_good = policy == "Never" && c.ever_started;
                if !failed_for_good {
                    self.start(ctx, pod, i).await;
                }
            }
            break;
        }
        if !initialized {
            return;
        }
        for j in 0..self.main.len() {
            let i = self.init.len() + j;
            let c = &self.main[j];
            let due = c.restart_at.is_some_and(|t| Instant::now() >= t);
            if c.proc.is_none() && (!c.ever_started || due) {
                self.start(ctx, pod, i).await;
            } else if c.proc.is_none() && !c.ever_started {
                // keep waiting state
            }
        }
        self.probe_all(ctx, pod).await;
    }

    fn ctr(&mut self, i: usize) -> &mut Ctr {
        if i < self.init.len() {
            &mut self.init[i]
        } else {
            let j = i - self.init.len();
            &mut self.main[j]
        }
    }

    /// Notices an exited container and decides on its restart.
    async fn reap(&mut self, ctx: &Ctx, pod: &Pod, i: usize, policy: &str) {
        let dir = self.dir.clone();
        let pod_ref = format!(
            "{}_{}({})",
            self.name,
            self.namespace,
            pod.uid().unwrap_or_default()
        );
        let pod_name = self.name.clone();
        let c = self.ctr(i);
        let Some(p) = &mut c.proc else {
            return;
        };
        let Ok(Some(exit)) = p.child.try_wait() else {
            // Still running: enforce a stop deadline.
            if p.stop_deadline.is_some_and(|d| Instant::now() >= d) {
                c.signal(Signal::KILL);
            }
            return;
        };
        let ran_for = p.started.elapsed();
        let started_at = p.started_at.clone();
        // Whatever else runs in the container's process group goes too.
        c.signal(Signal::KILL);
        c.proc = None;
        remove_pid_file(&dir, &c.spec.name);
        let (code, signal) = match (exit.code(), exit.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(sig)),
            _ => (255, None),
        };
        let terminated = CState::Terminated {
            exit_code: code,
            signal,
            reason: status::exit_reason(code).to_string(),
            started_at,
            finished_at: now_rfc3339(),
            message: termination_message(&dir, &c.spec.name),
        };
        c.ready = false;
        c.started = false;
        c.readiness = None;
        c.liveness = None;
        c.startup = None;
        let killed_by_probe = c.killing_reason.take();
        let restart = match policy {
            "Never" => false,
            "OnFailure" => code != 0 || killed_by_probe.is_some(),
            _ => !c.init || code != 0,
        };
        let name = c.spec.name.clone();
        if restart {
            let delay = c.backoff.on_exit(ran_for);
            c.last = Some(terminated);
            c.restart_at = Some(Instant::now() + delay);
            if delay.is_zero() {
                c.state = CState::waiting("ContainerCreating", None);
            } else {
                let msg = format!(
                    "back-off {}s restarting failed container={name} pod={pod_ref}",
                    delay.as_secs(),
                );
                c.state = CState::waiting("CrashLoopBackOff", Some(msg.clone()));
                self.event(
                    ctx,
                    pod,
                    "Warning",
                    "BackOff",
                    &format!("Back-off restarting failed container {name} in pod {pod_name}",),
                )
                .await;
            }
        } else {
            c.state = terminated;
            c.restart_at = None;
        }
    }

    async fn start(&mut self, ctx: &Ctx, pod: &Pod, i: usize) {
        let image_ref = self.ctr(i).spec.image.clone().unwrap_or_default();
        let image = match ctx.images.resolve(&image_ref) {
            Resolution::Ready(img) => img,
            Resolution::Preparing => {
                self.ctr(i).state = CState::waiting(
                    "ContainerCreating",
                    Some(format!("preparing the local root of image {image_ref}")),
                );
                return;
            }
            Resolution::Unavailable { reason } => {
                self.ctr(i).state = CState::waiting("ImageNotAvailable", Some(reason.clone()));
                if self.warned.insert(image_ref.clone()) {
                    self.event(ctx, pod, "Warning", "ImageNotAvailable", &reason)
                        .await;
                }
                return;
            }
        };
        match self.spawn(ctx, pod, i, &image).await {
            Ok(()) => {
                let c = self.ctr(i);
                let name = c.spec.name.clone();
                let pid = c.proc.as_ref().map(|p| p.pid).unwrap_or(0);
                self.event(
                    ctx,
                    pod,
                    "Normal",
                    "Started",
                    &format!("Started container {name} (process {pid})"),
                )
                .await;
            }
            Err((reason, message)) => {
                let c = self.ctr(i);
                let name = c.spec.name.clone();
                c.state = CState::waiting(&reason, Some(message.clone()));
                c.restart_at = Some(Instant::now() + Duration::from_secs(2));
                if self.warned.insert(format!("{reason}/{name}/{message}")) {
                    self.event(
                        ctx,
                        pod,
                        "Warning",
                        "Failed",
                        &format!("container {name}: {message}"),
                    )
                    .await;
                }
            }
        }
    }

    /// Launches container `i`; an error is (waiting reason, message).
    async fn spawn(
        &mut self,
        ctx: &Ctx,
        pod: &Pod,
        i: usize,
        image: &ImageRootfs,
    ) -> std::result::Result<(), (String, String)> {
        let spec = self.ctr(i).spec.clone();
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let ip = self.ip_string();
        let config_err = |m: String| ("CreateContainerConfigError".to_string(), m);
        let env = container_env(ctx, pod, &spec, image, &ip, &self.host_ip.to_string())
            .await
            .map_err(config_err)?;
        let vars: BTreeMap<String, String> = env.iter().cloned().collect();
        let command: Vec<String> = spec
            .command
            .iter()
            .flatten()
            .map(|s| expand(s, &vars))
            .collect();
        let args: Vec<String> = spec
            .args
            .iter()
            .flatten()
            .map(|s| expand(s, &vars))
            .collect();
        let argv: Vec<String> = if !command.is_empty() {
            command.into_iter().chain(args).collect()
        } else if !args.is_empty() {
            image.entrypoint.iter().cloned().chain(args).collect()
        } else {
            image
                .entrypoint
                .iter()
                .chain(image.cmd.iter())
                .cloned()
                .collect()
        };
        if argv.is_empty() {
            return Err(config_err(format!(
                "no command specified and image {} has none",
                image.image
            )));
        }
        let psc = pod_spec.security_context.clone().unwrap_or_default();
        let csc = spec.security_context.clone().unwrap_or_default();
        let uid = csc.run_as_user.or(psc.run_as_user).unwrap_or(0);
        let gid = csc.run_as_group.or(psc.run_as_group).unwrap_or(0);
        if csc.run_as_non_root.or(psc.run_as_non_root).unwrap_or(false) && uid == 0 {
            return Err(config_err(
                "container has runAsNonRoot and image will run as root".into(),
            ));
        }
        let mut groups: Vec<i64> = psc.fs_group.into_iter().collect();
        groups.extend(psc.supplemental_groups.iter().flatten().copied());

        let cdir = self.dir.join("containers").join(&spec.name);
        // A fresh writable layer for every start, as a new container has.
        let _ = fs::remove_dir_all(&cdir);
        let (upper, work, merged) = (cdir.join("upper"), cdir.join("work"), cdir.join("merged"));
        for d in [&upper, &work, &merged] {
            fs::create_dir_all(d)
                .map_err(|e| config_err(format!("creating {}: {e}", d.display())))?;
        }
        let mut mounts = Vec::new();
        for vm in spec.volume_mounts.iter().flatten() {
            let Some(src) = self.volumes.get(&vm.name) else {
                return Err(config_err(format!("volume {} is not defined", vm.name)));
            };
            let sub = vm
                .sub_path
                .as_deref()
                .map(|s| expand(s, &vars))
                .filter(|s| !s.is_empty());
            let source = match &sub {
                Some(s) if s.split('/').any(|c| c == "..") => {
                    return Err(config_err(format!("subPath {s} leaves its volume")));
                }
                Some(s) => {
                    let p = src.join(s);
                    if !p.exists() {
                        let _ = fs::create_dir_all(&p);
                    }
                    p
                }
                None => src.clone(),
            };
            mounts.push(Mount {
                file: source.is_file(),
                source,
                target: vm.mount_path.clone(),
                read_only: vm.read_only.unwrap_or(false),
            });
        }
        mounts.push(Mount {
            source: self.dir.join("hosts"),
            target: "/etc/hosts".into(),
            read_only: false,
            file: true,
        });
        mounts.push(Mount {
            source: self.dir.join("resolv.conf"),
            target: "/etc/resolv.conf".into(),
            read_only: false,
            file: true,
        });
        // The termination message file, empty at every start, as a kubelet mounts it. Not
        // under /dev or /proc: those are the host's here (the default /dev/termination-log
        // is not supported; the pods of this project that report set their own path).
        if let Some(path) = spec
            .termination_message_path
            .as_deref()
            .filter(|p| p.starts_with('/') && !p.starts_with("/dev/") && !p.starts_with("/proc/"))
        {
            let file = termination_file(&self.dir, &spec.name);
            fs::write(&file, b"")
                .and_then(|()| fs::set_permissions(&file, fs::Permissions::from_mode(0o666)))
                .map_err(|e| config_err(format!("termination message file: {e}")))?;
            mounts.push(Mount {
                source: file,
                target: path.to_owned(),
                read_only: false,
                file: true,
            });
        }
        let hostname = pod_spec
            .hostname
            .clone()
            .unwrap_or_else(|| self.name.clone());
        let launch = LaunchSpec {
            lower: image.root.clone(),
            upper,
            work,
            merged,
            hostname,
            mounts,
            uid,
            gid,
            groups,
            working_dir: spec.working_dir.clone(),
            argv,
            read_only_root: csc.read_only_root_filesystem.unwrap_or(false),
        };
        let script_path = self.dir.join(format!("{}.launch.sh", spec.name));
        let script = launch::script(&launch, &ctx.tools);
        fs::write(&script_path, script)
            .and_then(|_| fs::set_permissions(&script_path, fs::Permissions::from_mode(0o700)))
            .map_err(|e| config_err(format!("writing {}: {e}", script_path.display())))?;
        let log_path = self.dir.join(format!("{}.log", spec.name));
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| config_err(format!("opening {}: {e}", log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| config_err(format!("{}: {e}", log_path.display())))?;
        let child = Command::new(&ctx.tools.unshare)
            .args([
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
            ])
            .arg(&script_path)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                (
                    "RunContainerError".to_string(),
                    format!("starting {}: {e}", ctx.tools.unshare.display()),
                )
            })?;
        let pid = child.id();
        let _ = fs::write(
            self.dir.join(format!("{}.pid", spec.name)),
            pid_file_line(pid),
        );
        let now = Instant::now();
        let c = self.ctr(i);
        if c.ever_started {
            c.restart_count += 1;
        }
        c.ever_started = true;
        c.restart_at = None;
        c.image_id = image.image_id.clone();
        c.state = CState::Running {
            started_at: now_rfc3339(),
        };
        c.startup = spec
            .startup_probe
            .as_ref()
            .filter(|_| !c.init)
            .map(|p| ProbeRunner::new(p, false, now));
        c.liveness = spec
            .liveness_probe
            .as_ref()
            .filter(|_| !c.init)
            .map(|p| ProbeRunner::new(p, true, now));
        c.readiness = spec
            .readiness_probe
            .as_ref()
            .filter(|_| !c.init)
            .map(|p| ProbeRunner::new(p, false, now));
        c.started = !c.init && c.startup.is_none();
        c.ready = false;
        c.proc = Some(Proc {
            child,
            pid,
            started: now,
            started_at: match &c.state {
                CState::Running { started_at } => started_at.clone(),
                _ => now_rfc3339(),
            },
            stop_deadline: None,
            uid,
            gid,
            env,
        });
        Ok(())
    }

    async fn probe_all(&mut self, ctx: &Ctx, pod: &Pod) {
        let ip = self.ip.unwrap_or(Ipv4Addr::LOCALHOST);
        let grace = grace_period(pod);
        for j in 0..self.main.len() {
            let c = &mut self.main[j];
            let Some(p) = &c.proc else {
                continue;
            };
            if p.stop_deadline.is_some() {
                continue;
            }
            let (pid, uid, gid, env) = (p.pid, p.uid, p.gid, p.env.clone());
            let ports = c.spec.ports.clone().unwrap_or_default();
            let nsenter = ctx.tools.nsenter.clone();
            let make = |probe: &Probe| action(probe, &nsenter, pid, uid, gid, &env, ip, &ports);
            let mut failed: Option<String> = None;
            if !c.started {
                if let Some(r) = &mut c.startup
                    && let Some(res) = r.poll(make).await
                {
                    if res {
                        c.started = true;
                    } else if r.tracker_failed() {
                        failed = Some("Startup probe failed".into());
                    }
                }
            } else {
                if let Some(r) = &mut c.liveness
                    && let Some(false) = r.poll(make).await
                {
                    failed = Some("Liveness probe failed".into());
                }
                match &mut c.readiness {
                    Some(r) => {
                        if let Some(res) = r.poll(make).await {
                            c.ready = res;
                        }
                    }
                    None => c.ready = true,
                }
            }
            if let Some(reason) = failed {
                let name = c.spec.name.clone();
                c.ready = false;
                c.killing_reason = Some(reason.clone());
                c.signal(Signal::TERM);
                if let Some(p) = &mut c.proc {
                    p.stop_deadline = Some(Instant::now() + grace);
                }
                self.event(
                    ctx,
                    pod,
                    "Warning",
                    "Unhealthy",
                    &format!("{reason}; container {name} will be restarted"),
                )
                .await;
            }
        }
    }

    async fn patch_status(&mut self, ctx: &Ctx, pod: &Pod) -> Result<()> {
        let now = now_rfc3339();
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let init: Vec<CView> = self.init.iter().map(Ctr::view).collect();
        let mut main: Vec<CView> = self.main.iter().map(Ctr::view).collect();
        let initialized = status::initialized(&init);
        if !initialized {
            for (m, c) in main.iter_mut().zip(&self.main) {
                if !c.ever_started {
                    m.state = CState::waiting("PodInitializing", None);
                }
            }
        }
        let phase = status::phase(&init, &main, &policy);
        let conds = status::conditions(&self.conditions, &init, &main, &now);
        let mut cond_json: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .filter(|c| c.type_ == "PodScheduled")
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect()
            })
            .unwrap_or_default();
        cond_json.extend(conds.iter().map(Condition::to_json));
        let ip = self.ip_string();
        let host = self.host_ip.to_string();
        let body = json!({
            "status": {
                "phase": phase,
                "conditions": cond_json,
                "hostIP": host,
                "hostIPs": [{ "ip": host }],
                "podIP": ip,
                "podIPs": [{ "ip": ip }],
                "startTime": self.start_time,
                "initContainerStatuses": init.iter().map(CView::to_json).collect::<Vec<_>>(),
                "containerStatuses": main.iter().map(CView::to_json).collect::<Vec<_>>(),
            }
        });
        if self.last_status.as_ref() == Some(&body) {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        api.patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .with_context(|| {
                format!(
                    "patching the status of pod {}/{}",
                    self.namespace, self.name
                )
            })?;
        self.conditions = conds;
        self.last_status = Some(body);
        Ok(())
    }

    /// deletionTimestamp is set: SIGTERM, SIGKILL after the grace period,
    /// then the final delete (grace 0, this pod's UID).
    async fn terminate(&mut self, ctx: &Ctx, pod: &Pod) -> Result<()> {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or_else(|| grace_period(pod));
        if self.terminating_since.is_none() {
            self.terminating_since = Some(Instant::now());
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                c.restart_at = None;
                if c.proc.is_some() {
                    c.signal(Signal::TERM);
                }
            }
            let names: Vec<String> = self
                .main
                .iter()
                .filter(|c| c.proc.is_some())
                .map(|c| c.spec.name.clone())
                .collect();
            if !names.is_empty() {
                self.event(
                    ctx,
                    pod,
                    "Normal",
                    "Killing",
                    &format!("Stopping container {}", names.join(", ")),
                )
                .await;
            }
        }
        let since = self.terminating_since.unwrap_or_else(Instant::now);
        if self.any_running() {
            if since.elapsed() < grace {
                return Ok(());
            }
            self.kill_all(Duration::from_secs(5)).await;
        }
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e).context("completing the pod's deletion"),
        }
        self.finished = true;
        Ok(())
    }
}

impl ProbeRunner {
    fn tracker_failed(&self) -> bool {
        self.tracker.failed()
    }
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

fn remove_pid_file(dir: &Path, container: &str) {
    let _ = fs::remove_file(dir.join(format!("{container}.pid")));
}

#[allow(clippy::too_many_arguments)]
fn action(
    probe: &Probe,
    nsenter: &Path,
    pid: u32,
    uid: i64,
    gid: i64,
    env: &[(String, String)],
    pod_ip: Ipv4Addr,
    ports: &[k8s_openapi::api::core::v1::ContainerPort],
) -> Option<Action> {
    let port_of = |p: &IntOrString| -> Option<u16> {
        match p {
            IntOrString::Int(n) => u16::try_from(*n).ok(),
            IntOrString::String(name) => ports
                .iter()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok()),
        }
    };
    let host_of = |h: Option<&String>| -> Option<Ipv4Addr> {
        match h.filter(|h| !h.is_empty()) {
            None => Some(pod_ip),
            Some(h) => h.parse().ok(),
        }
    };
    if let Some(e) = &probe.exec {
        return Some(Action::Exec {
            nsenter: nsenter.to_path_buf(),
            pid,
            uid,
            gid,
            argv: e.command.clone().unwrap_or_default(),
            env: env.to_vec(),
        });
    }
    if let Some(t) = &probe.tcp_socket {
        let ip = host_of(t.host.as_ref())?;
        return Some(Action::Tcp {
            addr: SocketAddr::from((ip, port_of(&t.port)?)),
        });
    }
    if let Some(h) = &probe.http_get {
        let ip = host_of(h.host.as_ref())?;
        let port = port_of(&h.port)?;
        return Some(Action::Http {
            addr: SocketAddr::from((ip, port)),
            host: format!("{ip}:{port}"),
            path: h.path.clone().unwrap_or_else(|| "/".into()),
        });
    }
    None
}

/// The container's environment: the image's, the agent's
/// (`KUBERNETES_SERVICE_*`, `HOSTNAME`), `envFrom`, then `env` in order.
async fn container_env(
    ctx: &Ctx,
    pod: &Pod,
    spec: &Container,
    image: &ImageRootfs,
    pod_ip: &str,
    host_ip: &str,
) -> std::result::Result<Vec<(String, String)>, String> {
    let ns = pod.namespace().unwrap_or_default();
    let mut base: Vec<(String, String)> = image.env.clone();
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.name_any());
    for (k, v) in [
        ("HOSTNAME", hostname),
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT", ctx.api_port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", ctx.api_port.to_string()),
    ] {
        base.retain(|(n, _)| n != k);
        base.push((k.to_string(), v));
    }
    if !base.iter().any(|(k, _)| k == "PATH") {
        base.push((
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ));
    }
    let mut ordered: Vec<(String, String)> = Vec::new();
    // Values from objects are literal: escape `$` so expansion leaves them.
    let lit = |s: String| s.replace('$', "$$");
    for from in spec.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
            match api.get_opt(&r.name).await.map_err(|e| e.to_string())? {
                Some(cm) => ordered.extend(
                    cm.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (format!("{prefix}{k}"), lit(v))),
                ),
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            match api.get_opt(&r.name).await.map_err(|e| e.to_string())? {
                Some(s) => ordered.extend(s.data.unwrap_or_default().into_iter().map(|(k, v)| {
                    (
                        format!("{prefix}{k}"),
                        lit(String::from_utf8_lossy(&v.0).into_owned()),
                    )
                })),
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }
    for e in spec.env.iter().flatten() {
        if let Some(v) = &e.value {
            ordered.push((e.name.clone(), v.clone()));
            continue;
        }
        let Some(from) = &e.value_from else {
            ordered.push((e.name.clone(), String::new()));
            continue;
        };
        let value = if let Some(f) = &from.field_ref {
            volumes::field_value(pod, &f.field_path, pod_ip, host_ip)
                .ok_or_else(|| format!("unsupported fieldRef {}", f.field_path))?
        } else if let Some(s) = &from.secret_key_ref {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            let secret = api.get_opt(&s.name).await.map_err(|e| e.to_string())?;
            match secret.and_then(|sec| sec.data.and_then(|d| d.get(&s.key).cloned())) {
                Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                None if s.optional == Some(true) => continue,
                None => {
                    return Err(format!(
                        "couldn't find key {} in Secret {ns}/{}",
                        s.key, s.name
                    ));
                }
            }
        } else if let Some(c) = &from.config_map_key_ref {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
            let cm = api.get_opt(&c.name).await.map_err(|e| e.to_string())?;
            match cm.and_then(|m| m.data.and_then(|d| d.get(&c.key).cloned())) {
                Some(v) => v,
                None if c.optional == Some(true) => continue,
                None => {
                    return Err(format!(
                        "couldn't find key {} in ConfigMap {ns}/{}",
                        c.key, c.name
                    ));
                }
            }
        } else if let Some(r) = &from.resource_field_ref {
            resource_value(spec, &r.resource)
        } else {
            String::new()
        };
        ordered.push((e.name.clone(), lit(value)));
    }
    Ok(resolve_in_order(&base, &ordered))
}

/// `resourceFieldRef`: the container's limit (or request), else the node's
/// capacity; cpu in whole cores, memory in bytes.
fn resource_value(spec: &Container, resource: &str) -> String {
    let res = spec.resources.as_ref();
    let pick = |map: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                key: &str| map.and_then(|m| m.get(key)).map(|q| q.0.clone());
    let (kind, key) = resource.split_once('.').unwrap_or(("limits", resource));
    let v = match kind {
        "requests" => pick(res.and_then(|r| r.requests.as_ref()), key),
        _ => pick(res.and_then(|r| r.limits.as_ref()), key),
    };
    v.unwrap_or_else(|| match key {
        "cpu" => "8".into(),
        "memory" => (32u64 << 30).to_string(),
        _ => "0".into(),
    })
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
        let _ = fs::remove_dir_all(&dir);
    }
}
