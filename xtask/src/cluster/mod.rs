//! `cargo xtask cluster up | down | status | build`: a real local Kubernetes
//! control plane on 127.0.0.1, built from Go modules (see
//! `docs/development.md`).
//!
//! # A product of its own: the local Kubernetes distribution
//!
//! This module is a small Kubernetes distribution for this machine: the control plane
//! (`local`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok's fake nodes),
//! its PKI (`pki`), the binaries built from Go modules (`binaries`), process nodes whose pods run
//! as real local processes ([`procnode`]) from image roots built with mmdebstrap ([`images`],
//! recipes read from the engine table), an S3 server for backups ([`s3`]), Helm ([`helm`]) and
//! the audit log (`audit`).
//!
//! **Boundary.** It names nothing else of xtask (not the benchmark, the demo, the e2e suite,
//! `prebuild` or `timing`); `xtask/tests/structure.rs` checks it. What it needs from a caller
//! (a workspace root, extra flags, an audit policy) comes in through [`UpOptions`] and function
//! arguments. Of the workspace's crates it reads only the engine table
//! (`database-operator-api`'s engines, `database-operator-engine`'s facts) for the image
//! recipes.
//!
//! **Public surface**, used by the `cargo xtask` commands, the benchmark and the e2e suite:
//! - [`LocalCluster`] (`up`, `attach`, `kubectl*`, `apply`, `health`, `down`, `into_guard`),
//!   [`UpOptions`], [`State`], [`ClusterGuard`], [`down_state_dir`], [`default_state_dir`],
//!   [`workspace_root`], [`ensure_binaries`], [`run`] (the `cluster` subcommand);
//! - objects to apply: [`operator_user_binding`], [`webhook_registrations`],
//!   [`STORAGE_CLASSES`], [`OPERATOR_USER`];
//! - the audit log: [`read_audit_log`], [`repeated_writes`], [`AuditEvent`];
//! - the modules [`images`] (the image table, `describe`, the recipes), [`procnode`] (the node
//!   agent's names and entry), [`s3`], [`helm`], [`apt`]; and [`Progress`], [`free_ports`],
//!   [`CertPair`].
//!
//! For tests and other xtask commands:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use xtask::cluster::{LocalCluster, UpOptions};
//! let cluster = LocalCluster::up(&UpOptions { audit_log: true, ..UpOptions::default() })?
//!     .into_guard(); // goes down when dropped
//! cluster.kubectl_output(&["get", "nodes"])?;
//! # Ok(()) }
//! ```

pub mod apt;
mod audit;
mod binaries;
pub mod helm;
pub mod images;
mod local;
mod manifests;
mod pki;
mod process;
pub mod procnode;
mod progress;
pub mod s3;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

pub use audit::{AuditEvent, RepeatedWrite, read_audit_log, repeated_writes};
pub use binaries::{Binaries, Versions, cache_base};
pub use local::{
    ClusterGuard, ComponentHealth, ComponentState, KWOK_NODE_IP, LocalCluster, NODE_LEASE_SECONDS,
    POD_CIDR, SERVICE_CLUSTER_IP_RANGE, State, UpOptions, default_state_dir, down_state_dir,
    workspace_root,
};
pub use manifests::{
    KWOK_PROVISIONER, OPERATOR_USER, STORAGE_CLASSES, operator_user_binding, webhook_registrations,
};
pub use pki::CertPair;
pub use process::free_ports;
pub use progress::Progress;

/// Builds (when not cached) and returns the control-plane binaries.
pub fn ensure_binaries(quiet: bool) -> Result<Binaries> {
    binaries::ensure(&workspace_root(), &Progress::new(quiet))
}

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask cluster",
    bin_name = "cargo xtask cluster",
    about = "A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) on 127.0.0.1"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build the binaries when needed, start the cluster, write the kubeconfig.
    Up {
        /// Write the apiserver audit log to <state-dir>/logs/audit.log.
        #[arg(long)]
        audit_log: bool,
        /// Number of fake nodes.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Number of process nodes (pods bound to them run as local processes).
        #[arg(long, default_value_t = 3)]
        process_nodes: usize,
        /// State directory (default: target/local-cluster).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Print nothing but errors.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Stop every process the cluster started and remove its state (logs stay).
    Down {
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Show what runs, where, and whether it is healthy.
    Status {
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Only build (or locate) the cached binaries and print their directory.
    Build,
    /// Power a process node off or on: `stop` kills its pods' processes at once (a power cut)
    /// and stops its heartbeats, so Kubernetes sees the node lost and its pods stay as they
    /// were (a deletion stays Terminating); `start` brings it back like a reboot.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// The process-node agent; `up` starts it.
    #[command(hide = true)]
    NodeAgent(procnode::AgentArgs),
    /// Build (or locate) the root filesystems that process nodes run images from, and print
    /// which image references each serves (docs/development.md, "Images").
    Images {
        /// Only this recipe (e.g. postgres-bookworm).
        #[arg(long)]
        only: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum NodeAction {
    /// Power the node off.
    Stop {
        /// A process node (`proc-0`, ...).
        node: String,
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Power the node on again.
    Start {
        node: String,
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Cut the node off the network: its pods reach only each other, nothing reaches them,
    /// its heartbeats stop; its processes keep running.
    Partition {
        node: String,
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// End the node's partition.
    Heal {
        node: String,
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
}

/// Entry point for `cargo xtask cluster ...`; `args` are the words after
/// `cluster`.
pub fn run<I, S>(args: I) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString> + Clone,
{
    let args = std::iter::once(OsString::from("cluster")).chain(args.into_iter().map(Into::into));
    let cli = Cli::parse_from(args);
    let root = workspace_root();
    match cli.command {
        Cmd::Up {
            audit_log,
            nodes,
            process_nodes,
            state_dir,
            quiet,
        } => {
            let started = Instant::now();
            let opts = UpOptions {
                workspace_root: root,
                state_dir,
                audit_log,
                nodes,
                process_nodes,
                quiet,
                extra_apiserver_args: Vec::new(),
                ..UpOptions::default()
            };
            let cluster = LocalCluster::up(&opts)?;
            if !quiet {
                eprintln!(
                    "\nLocal cluster up in {:.1}s. Use it with:\n  export KUBECONFIG={}\n  {} get nodes\n\
                     kwok-node-* are fakes: pods get scheduled and reported Running/Ready, but no container runs.\n\
                     proc-* are process nodes (tainted {}=true:NoSchedule): their pods run as local processes.\n\
                     Logs: {}\nStop: cargo xtask cluster down",
                    started.elapsed().as_secs_f64(),
                    cluster.kubeconfig().display(),
                    cluster.kubectl_path().display(),
                    procnode::PROCESS_NODE_LABEL,
                    cluster.logs_dir().display()
                );
                if let Some(audit) = cluster.audit_log() {
                    eprintln!("Audit log: {}", audit.display());
                }
            }
            Ok(())
        }
        Cmd::Down { state_dir } => {
            let dir = state_dir.unwrap_or_else(|| default_state_dir(&root));
            let started = Instant::now();
            if down_state_dir(&dir, false)? {
                eprintln!(
                    "local cluster down in {:.1}s (logs kept in {})",
                    started.elapsed().as_secs_f64(),
                    dir.join("logs").display()
                );
            } else {
                eprintln!("no local cluster state in {}", dir.display());
            }
            Ok(())
        }
        Cmd::Status { state_dir } => {
            let dir = state_dir.unwrap_or_else(|| default_state_dir(&root));
            print_status(&dir)
        }
        Cmd::NodeAgent(args) => procnode::run_agent(args),
        Cmd::Node { action } => {
            let (node, state_dir) = match &action {
                NodeAction::Stop { node, state_dir }
                | NodeAction::Start { node, state_dir }
                | NodeAction::Partition { node, state_dir }
                | NodeAction::Heal { node, state_dir } => (node.clone(), state_dir.clone()),
            };
            let dir = state_dir.unwrap_or_else(|| default_state_dir(&root));
            let state = State::load(&dir)?
                .with_context(|| format!("no local cluster in {}", dir.display()))?;
            let nodes = &state.process_nodes;
            let done = match action {
                NodeAction::Stop { .. } => {
                    procnode::set_node_stopped(&dir, nodes, &node, true)?;
                    "stopped: its processes are killed, its heartbeats stop"
                }
                NodeAction::Start { .. } => {
                    procnode::set_node_stopped(&dir, nodes, &node, false)?;
                    "started: its pods run again"
                }
                NodeAction::Partition { .. } => {
                    procnode::partition::set_node_partitioned(&dir, nodes, &node, true)?;
                    "partitioned: its pods reach only each other, its heartbeats stop"
                }
                NodeAction::Heal { .. } => {
                    procnode::partition::set_node_partitioned(&dir, nodes, &node, false)?;
                    "reconnected"
                }
            };
            eprintln!("{node} {done}");
            Ok(())
        }
        Cmd::Build => {
            let binaries = ensure_binaries(false)?;
            println!("{}", binaries.bin_dir().display());
            Ok(())
        }
        Cmd::Images { only } => {
            let operator = images::default_operator_binary(&root);
            let table = images::ImageTable::new(
                images::default_cache_dir()?,
                operator.exists().then_some(operator),
            );
            print!("{}", images::describe(&table, only.as_deref())?);
            Ok(())
        }
    }
}

fn print_status(dir: &std::path::Path) -> Result<()> {
    let Some(cluster) = LocalCluster::attach(dir)? else {
        match State::load(dir)? {
            Some(_) => println!(
                "local cluster in {} is not running (stale state; `cargo xtask cluster down` cleans it)",
                dir.display()
            ),
            None => println!("no local cluster in {}", dir.display()),
        }
        return Ok(());
    };
    let state = cluster.state();
    println!("server:      {}", state.server);
    println!("kubeconfig:  {}", state.kubeconfig.display());
    println!(
        "versions:    kubernetes {}, etcd {}, kwok {}",
        state.kubernetes_version, state.etcd_version, state.kwok_version
    );
    println!("binaries:    {}", state.bin_dir.display());
    println!("etcd data:   {}", state.etcd_data_dir.display());
    println!(
        "audit log:   {}",
        state
            .audit_log
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "off".into())
    );
    println!("logs:        {}", cluster.logs_dir().display());
    println!();
    println!(
        "{:<24} {:>8}  {:<28} {:<8} DETAIL",
        "COMPONENT", "PID", "PORTS (127.0.0.1)", "HEALTH"
    );
    let health = cluster.health();
    for (c, h) in state.components.iter().zip(&health) {
        let ports: Vec<String> = c.ports.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "{:<24} {:>8}  {:<28} {:<8} {}",
            c.name,
            c.pid,
            ports.join(","),
            if h.healthy {
                "ok"
            } else if h.running {
                "unhealthy"
            } else {
                "down"
            },
            h.detail
        );
    }
    if cluster.api_ready() {
        println!();
        match cluster.kubectl_output(&["get", "nodes", "-o", "wide"]) {
            Ok(out) => print!("{out}"),
            Err(e) => println!("nodes: {e:#}"),
        }
    }
    Ok(())
}
