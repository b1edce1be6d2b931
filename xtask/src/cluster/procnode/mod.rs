//! Process nodes: Nodes of the local cluster whose pods run as real local
//! processes (see `docs/development.md`, "Process nodes").
//!
//! `cargo xtask cluster up` starts the agent (`cargo xtask cluster node-agent`, hidden) as one
//! more component. It registers the nodes, keeps their Leases, and for every pod bound to them
//! does what a kubelet does for the pods this project runs: volumes, init containers, containers
//! (each under `unshare` in its own mount namespace, chrooted into an overlay of the image's
//! root), probes, restarts with back-off, status, and graceful deletion.

mod agent;
pub mod envvars;
pub mod hosts;
pub mod ipam;
pub mod launch;
mod node;
pub mod partition;
mod probe;
pub mod status;
mod volumes;

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rustix::process::{Pid, Signal, kill_process_group};

/// The name the agent goes by (events, field manager, logs).
pub const AGENT_NAME: &str = "process-node-agent";
pub const FIELD_MANAGER: &str = AGENT_NAME;
/// Label (value "true") and taint key (`=true:NoSchedule`) of process nodes.
pub const PROCESS_NODE_LABEL: &str = "database.example.com/process-node";
/// The label kwok selects the nodes it manages by (`type=kwok`); process
/// nodes carry `type=process`.
pub const KWOK_NODE_SELECTOR: &str = "type=kwok";

/// `proc-0`, `proc-1`, ...
pub fn node_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("proc-{i}")).collect()
}

/// The node's InternalIP: 127.0.2.<i+1>.
pub fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 2, (i % 254 + 1) as u8)
}

/// `<state>/pods`: one directory per pod (`<namespace>_<name>`) with its
/// logs, volumes, hosts file and container layers.
pub fn pods_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("pods")
}

/// `<state>/stopped-nodes/<node>`: the node is powered off (`cargo xtask cluster node stop`).
/// The agent kills its pods' processes at once (SIGKILL, as a power cut does), stops renewing
/// its Lease and posting its status, and leaves its pods alone (a deletion stays Terminating)
/// until the file is removed (`node start`); then it runs the pods still bound to it again,
/// as a rebooted kubelet does.
pub fn stopped_marker(state_dir: &Path, node: &str) -> PathBuf {
    state_dir.join("stopped-nodes").join(node)
}

/// The process nodes that are stopped now ([`stopped_marker`]).
pub fn stopped_nodes(state_dir: &Path) -> std::collections::BTreeSet<String> {
    marked_nodes(&state_dir.join("stopped-nodes"))
}

/// The names of the marker files in `dir` (none when it does not exist).
pub(crate) fn marked_nodes(dir: &Path) -> std::collections::BTreeSet<String> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Powers a process node off (`stop: true`) or on again: writes or removes its marker.
/// Refuses a name that is no process node of this state directory's cluster.
pub fn set_node_stopped(state_dir: &Path, nodes: &[String], node: &str, stop: bool) -> Result<()> {
    anyhow::ensure!(
        nodes.iter().any(|n| n == node),
        "{node} is not a process node of this cluster (they are {})",
        nodes.join(", ")
    );
    let marker = stopped_marker(state_dir, node);
    if stop {
        if let Some(dir) = marker.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        fs::write(&marker, now_rfc3339()).with_context(|| format!("writing {}", marker.display()))
    } else {
        match fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", marker.display()))
            }
            _ => Ok(()),
        }
    }
}

/// `<state>/volumes`: one directory per PersistentVolume.
pub fn volumes_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("volumes")
}

pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(crate) fn now_micro() -> String {
    let now = jiff::Timestamp::now();
    format!(
        "{}.{:06}Z",
        now.strftime("%Y-%m-%dT%H:%M:%S"),
        now.subsec_microsecond()
    )
}

/// `<pid> <start time in clock ticks>`: identifies a process even after its
/// pid is reused.
pub(crate) fn pid_file_line(pid: u32) -> String {
    format!("{pid} {}\n", start_time(pid).unwrap_or(0))
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Kills (SIGKILL, whole process group) every container process recorded
/// under `<state>/pods/*/*.pid` that still runs; for `down` when the agent
/// could not do it, and for an agent that starts over. Returns what it
/// killed.
pub fn kill_leftovers(state_dir: &Path) -> Vec<String> {
    let mut killed = Vec::new();
    let Ok(pods) = fs::read_dir(pods_dir(state_dir)) else {
        return killed;
    };
    let mut pending = Vec::new();
    for pod in pods.flatten() {
        let Ok(files) = fs::read_dir(pod.path()) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            if path.extension().is_none_or(|e| e != "pid") {
                continue;
            }
            let text = fs::read_to_string(&path).unwrap_or_default();
            let mut words = text.split_whitespace();
            let pid: Option<u32> = words.next().and_then(|w| w.parse().ok());
            let started: Option<u64> = words.next().and_then(|w| w.parse().ok());
            if let (Some(pid), Some(started)) = (pid, started)
                && start_time(pid) == Some(started)
                && let Some(p) = Pid::from_raw(pid as i32)
            {
                let _ = kill_process_group(p, Signal::KILL);
                killed.push(format!(
                    "{} (pid {pid}) of pod {}",
                    path.file_stem().unwrap_or_default().to_string_lossy(),
                    pod.file_name().to_string_lossy()
                ));
                pending.push((pid, started));
            }
            let _ = fs::remove_file(&path);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && pending
            .iter()
            .any(|(pid, started)| start_time(*pid) == Some(*started) && !zombie(*pid))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    killed
}

fn zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(true)
}

/// Arguments of the hidden `cargo xtask cluster node-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// The cluster's state directory (pods/ and volumes/ go there).
    #[arg(long)]
    pub state_dir: PathBuf,
    /// Kubeconfig the agent authenticates with.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Number of process nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// The operator binary that the operator's image runs.
    #[arg(long)]
    pub operator_binary: Option<PathBuf>,
}

/// Runs the agent until SIGTERM.
pub fn run_agent(args: AgentArgs) -> Result<()> {
    let tools = launch::Tools::locate()?;
    let leftovers = kill_leftovers(&args.state_dir);
    for l in &leftovers {
        eprintln!("{AGENT_NAME}: killed leftover {l}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
            .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        let api_port = config.cluster_url.port_u16().unwrap_or(443);
        let client = kube::Client::try_from(config)?;
        let images = crate::cluster::images::ImageTable::new(
            crate::cluster::images::default_cache_dir()?,
            args.operator_binary.clone().filter(|p| p.exists()),
        );
        let ctx = agent::Ctx {
            client,
            tools,
            images,
            state_dir: args.state_dir.clone(),
            nodes: node_names(args.nodes)
                .into_iter()
                .enumerate()
                .map(|(i, n)| (n, node_ip(i)))
                .collect(),
            api_port,
            cgroups: partition::NodeCgroups::discover(&args.state_dir),
        };
        agent::run(ctx).await
    })
}
