//! `cargo xtask demo`: a local control plane with process nodes, the operator from this checkout
//! running against it out of cluster, and `examples/local/postgresql.yaml` (three real PostgreSQL
//! servers replicating), until Ctrl-C.
//!
//! Steps (each printed with the elapsed time): build the operator, start the local cluster
//! (building the control plane first when it is not cached), install the CRD and the RBAC from
//! `deploy/`, start `database-operator run` as its own user bound to the ClusterRole from
//! `deploy/rbac` (not as cluster admin), apply the example Secret and `DatabaseCluster`, wait until
//! it reports `Running`, print what exists, query the primary with psql (the password from the
//! Secret), then wait for Ctrl-C and tear everything down.
//!
//! The cluster's processes run in their own process groups, so a Ctrl-C in the terminal does not
//! reach them: the demo catches SIGINT/SIGTERM itself and stops the operator and the cluster.

mod show;
mod util;

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use rustix::process::{Pid, Signal, kill_process};
use xtask::cluster::images::{self, ImageTable};
use xtask::cluster::{
    LocalCluster, OPERATOR_USER, Progress, UpOptions, cache_base, default_state_dir,
};

/// Namespace and name of the example cluster (as in `examples/local/postgresql.yaml`).
use util::{Interrupt, free_port, http_get, stop_child, tail};

const NAMESPACE: &str = "default";
const CLUSTER: &str = "local-postgresql";
/// The image of the example's pods; its root also holds the `psql` the demo queries with.
const POSTGRES_IMAGE: &str = "docker.io/library/postgres:15";
/// What the demo asks the cluster once it is Running.
const QUERY: &str = "select inet_server_addr() as primary_ip, pg_is_in_recovery() as in_recovery, \
    (select count(*) from pg_stat_replication where state = 'streaming') as streaming_replicas, \
    split_part(version(), ' on ', 1) as server";
/// Namespace the RBAC in `deploy/rbac` lives in.
const OPERATOR_NAMESPACE: &str = "database-operator-system";
const POLL: Duration = Duration::from_millis(500);
/// How long the operator gets to finish in-flight reconciles on SIGTERM before SIGKILL (its own
/// grace period is 20 s).
const OPERATOR_STOP_GRACE: Duration = Duration::from_secs(25);

/// Flags of `cargo xtask demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// State directory of the local cluster (default: target/local-cluster).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Once the cluster is Running and printed, stop the operator and tear the cluster down
    /// instead of waiting for Ctrl-C (for scripts and tests).
    #[arg(long)]
    pub exit_after_ready: bool,
    /// Seconds to wait for the example cluster to report Running.
    #[arg(long, default_value_t = 180, value_name = "SECS")]
    pub timeout: u64,
}

/// Runs the demo.
pub fn run(args: &DemoArgs, workspace_root: &Path) -> Result<()> {
    let progress = Progress::new(false);
    let interrupt = Interrupt::install()?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| default_state_dir(workspace_root));
    intro(&progress);

    let operator_bin = build_operator(workspace_root, &progress)?;
    interrupt.check()?;

    stop_leftover_operator(&state_dir, &operator_bin, &progress);
    let reused = LocalCluster::attach(&state_dir)?.is_some_and(|c| c.state().ready);
    progress.step(format!(
        "starting the local control plane in {}",
        state_dir.display()
    ));
    let cluster = LocalCluster::up(&UpOptions {
        workspace_root: workspace_root.to_path_buf(),
        state_dir: Some(state_dir.clone()),
        ..UpOptions::default()
    })?;
    let mut demo = Demo {
        cluster: Some(cluster),
        reused,
        operator: None,
        state_dir,
        workspace_root: workspace_root.to_path_buf(),
        progress,
    };
    let result = demo.run(args, &operator_bin, &interrupt);
    let teardown = demo.teardown();
    match (result, teardown) {
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

fn intro(progress: &Progress) {
    progress.say(
        "database-operator demo: a Kubernetes control plane on 127.0.0.1 (etcd, kube-apiserver, \
         kube-controller-manager, kube-scheduler, kwok for fake nodes, and three process nodes \
         whose pods run as local processes), the operator from this checkout running against it \
         as an ordinary process, and examples/local/postgresql.yaml: three real PostgreSQL \
         servers that replicate.",
    );
    if !control_plane_cached() {
        progress.say(
            "\nFirst run: the control plane is built from Go sources now, once. That takes about \
             8 minutes on 2 cores (7 min 23 s measured on a fresh machine): kube-apiserver, kube-controller-manager, \
             kube-scheduler and kubectl are several thousand Go packages, and nothing is \
             downloaded prebuilt. The binaries are cached outside the repository; later runs \
             start the cluster in about 15 seconds.",
        );
    }
    progress.say(
        "\nThe example's pods land on the process nodes (they tolerate their taint): each runs \
         a real PostgreSQL server from Debian's postgresql-15, on its own loopback pod IP. The \
         demo ends with a psql query answered by the primary.\n",
    );
}

/// Whether some cached control-plane build has every binary. Only decides whether to print the
/// first-run notice; the cluster code checks the exact cache entry itself and builds if needed.
fn control_plane_cached() -> bool {
    let Ok(base) = cache_base() else {
        return false;
    };
    let Ok(entries) = fs::read_dir(base) else {
        return false;
    };
    entries.filter_map(|e| e.ok()).any(|entry| {
        let bin = entry.path().join("bin");
        [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
            "etcd",
            "kwok",
        ]
        .iter()
        .all(|b| bin.join(b).is_file())
    })
}

/// `cargo build -p database-operator-runtime --bin database-operator`; returns the executable.
pub fn build_operator(workspace_root: &Path, progress: &Progress) -> Result<PathBuf> {
    let started = Instant::now();
    progress.step(
        "building the operator: cargo build -p database-operator-runtime --bin database-operator",
    );
    let output = cargo_command()
        .current_dir(workspace_root)
        .args([
            "build",
            "-p",
            "database-operator-runtime",
            "--bin",
            "database-operator",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("building the operator failed ({})", output.status);
    }
    let executable = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact" && m["target"]["name"] == "database-operator"
        })
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow!("cargo build did not report the database-operator executable"))?;
    progress.step(format!(
        "operator built: {} ({:.1}s)",
        executable.display(),
        started.elapsed().as_secs_f64()
    ));
    Ok(executable)
}

/// `cargo` without the variables Cargo sets for the program it runs ([`xtask::cargo::command`]).
pub fn cargo_command() -> Command {
    xtask::cargo::command()
}

/// A pid file left by a demo that was killed (SIGKILL reaches no handler): stop that operator so
/// that it does not keep retrying against a cluster that is gone.
fn stop_leftover_operator(state_dir: &Path, operator_bin: &Path, progress: &Progress) {
    let pid_file = state_dir.join("operator.pid");
    let Some(pid) = fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return;
    };
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
    if exe.as_deref() == Some(operator_bin)
        && let Some(p) = Pid::from_raw(pid)
        && kill_process(p, Signal::KILL).is_ok()
    {
        progress.step(format!(
            "stopped the operator a previous demo left running (pid {pid})"
        ));
    }
    let _ = fs::remove_file(pid_file);
}

struct Demo {
    cluster: Option<LocalCluster>,
    reused: bool,
    operator: Option<Child>,
    state_dir: PathBuf,
    workspace_root: PathBuf,
    progress: Progress,
}

impl Demo {
    fn cluster(&self) -> Result<&LocalCluster> {
        self.cluster
            .as_ref()
            .ok_or_else(|| anyhow!("the local cluster is not running"))
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.cluster()?.kubectl_output(args)
    }

    fn operator_kubeconfig(&self) -> PathBuf {
        self.state_dir.join("operator.kubeconfig")
    }

    fn operator_log(&self) -> PathBuf {
        self.state_dir.join("logs").join("operator.log")
    }

    fn run(&mut self, args: &DemoArgs, operator_bin: &Path, interrupt: &Interrupt) -> Result<()> {
        interrupt.check()?;
        self.install()?;
        interrupt.check()?;
        let health_port = self.start_operator(operator_bin, interrupt)?;
        interrupt.check()?;

        let root = self.postgres_root()?;
        interrupt.check()?;
        let example = self
            .workspace_root
            .join("examples")
            .join("local")
            .join("postgresql.yaml");
        let applied = self.kubectl(&["apply", "-f", &example.to_string_lossy()])?;
        self.progress.step(format!(
            "applied {}: {}",
            example.display(),
            applied.trim().replace('\n', ", ")
        ));
        self.wait_running(Duration::from_secs(args.timeout), interrupt)?;
        self.show(health_port)?;
        self.query(&root)?;

        if args.exit_after_ready {
            self.progress
                .step("--exit-after-ready: stopping the operator and the cluster");
            return Ok(());
        }
        println!(
            "\nThe operator keeps running; press Ctrl-C to stop it and tear the cluster down."
        );
        loop {
            if interrupt.is_set() {
                println!();
                self.progress
                    .step("Ctrl-C: stopping the operator and the cluster");
                return Ok(());
            }
            self.check_operator()?;
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The CRD, the RBAC from `deploy/rbac`, a binding of the ClusterRole to the operator's
    /// user, and a kubeconfig for that user.
    fn install(&self) -> Result<()> {
        let started = Instant::now();
        let deploy = self.workspace_root.join("deploy");
        let crd = deploy
            .join("crds")
            .join(database_operator_api::crd::CRD_FILE_NAME);
        // Server-side: the CRD is larger than the client-side apply annotation allows.
        self.progress
            .step(format!("installing the CRD from {}", crd.display()));
        self.progress
            .waiting("kubectl apply --server-side of the CRD", || {
                self.kubectl(&["apply", "--server-side", "-f", &crd.to_string_lossy()])
            })?;
        self.progress
            .waiting("the API server to serve the CRD (Established)", || {
                self.kubectl(&[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "customresourcedefinition/databaseclusters.database.example.com",
                ])
            })?;
        self.progress.step(format!(
            "installed the CRD from {} ({:.1}s)",
            crd.display(),
            started.elapsed().as_secs_f64()
        ));

        let cluster = self.cluster()?;
        cluster.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {OPERATOR_NAMESPACE}\n"
        ))?;
        self.progress.waiting("kubectl apply -k deploy/rbac", || {
            self.kubectl(&["apply", "-k", &deploy.join("rbac").to_string_lossy()])
        })?;
        cluster.apply(&xtask::cluster::operator_user_binding(
            "database-operator-local-user",
        ))?;
        cluster.write_user_kubeconfig(&self.operator_kubeconfig(), OPERATOR_USER, &[])?;
        self.progress.step(format!(
            "installed the RBAC from deploy/rbac and bound ClusterRole database-operator to user \
             {OPERATOR_USER} (client certificate in {})",
            self.operator_kubeconfig().display()
        ));
        Ok(())
    }

    /// Starts the operator; returns the port of its metrics and health endpoints.
    fn start_operator(&mut self, operator_bin: &Path, interrupt: &Interrupt) -> Result<u16> {
        let started = Instant::now();
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let log_path = self.operator_log();
        if let Some(dir) = log_path.parent() {
            fs::create_dir_all(dir)?;
        }
        let log = fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let kubeconfig = self.operator_kubeconfig();
        let child = Command::new(operator_bin)
            .args([
                "run",
                "--kubeconfig",
                &kubeconfig.to_string_lossy(),
                "--leader-elect=false",
                "--webhook=false",
                // No cluster DNS here: members are dialled at their (loopback) pod IPs.
                "--member-address=pod-ip",
                "--metrics-addr",
                &addr,
                "--health-addr",
                &addr,
            ])
            .env("NO_COLOR", "1")
            // Its own process group: Ctrl-C goes to the demo only, which stops the operator
            // with SIGTERM before it tears the cluster down.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", operator_bin.display()))?;
        let pid = child.id();
        fs::write(self.state_dir.join("operator.pid"), pid.to_string())?;
        self.operator = Some(child);
        self.progress.step(format!(
            "started the operator (pid {pid}) as user {OPERATOR_USER}; log: {}",
            log_path.display()
        ));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            interrupt.check()?;
            self.check_operator()?;
            if matches!(http_get(port, "/readyz"), Ok((200, _))) {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the operator did not report ready on http://{addr}/readyz within 60s; last lines of {}:\n{}",
                    log_path.display(),
                    tail(&log_path, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        self.progress.step(format!(
            "operator ready: its watches have synced ({:.1}s; metrics on http://{addr}/metrics)",
            started.elapsed().as_secs_f64()
        ));
        Ok(port)
    }

    fn wait_running(&mut self, timeout: Duration, interrupt: &Interrupt) -> Result<()> {
        let started = Instant::now();
        self.progress.step(format!(
            "waiting for {NAMESPACE}/{CLUSTER} to report phase Running (up to {}s)",
            timeout.as_secs()
        ));
        let mut last = String::new();
        loop {
            interrupt.check()?;
            self.check_operator()?;
            let now = match self.kubectl(&[
                "get",
                "databasecluster",
                CLUSTER,
                "-n",
                NAMESPACE,
                "-o",
                "jsonpath={.status.phase}|{.status.readyReplicas}|{.spec.replicas}",
            ]) {
                Ok(out) => {
                    let mut parts = out.trim().splitn(3, '|');
                    let phase = parts.next().filter(|p| !p.is_empty());
                    let ready = parts.next().filter(|p| !p.is_empty()).unwrap_or("0");
                    let wanted = parts.next().unwrap_or("?");
                    match phase {
                        Some(phase) => format!("{phase}, {ready}/{wanted} replicas ready"),
                        None => "no status yet".to_string(),
                    }
                }
                Err(e) => format!("({e:#})"),
            };
            if now != last {
                self.progress.step(format!("{CLUSTER}: {now}"));
                last = now;
            }
            if last.starts_with("Running,") {
                self.progress.step(format!(
                    "{CLUSTER} is Running ({:.1}s after it was applied)",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "{NAMESPACE}/{CLUSTER} did not report Running within {}s (last: {last}).\n\
                     Object:\n{}\nLast lines of {}:\n{}",
                    timeout.as_secs(),
                    self.kubectl(&[
                        "get",
                        "databasecluster",
                        CLUSTER,
                        "-n",
                        NAMESPACE,
                        "-o",
                        "yaml"
                    ])
                    .unwrap_or_else(|e| format!("{e:#}")),
                    self.operator_log().display(),
                    tail(&self.operator_log(), 30)
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Fails when the operator process has exited.
    fn check_operator(&mut self) -> Result<()> {
        if let Some(child) = self.operator.as_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "the operator exited ({status}); last lines of {}:\n{}",
                self.operator_log().display(),
                tail(&self.operator_log(), 30)
            );
        }
        Ok(())
    }

    fn teardown(&mut self) -> Result<()> {
        let mut result = Ok(());
        if let Some(mut child) = self.operator.take() {
            let started = Instant::now();
            let status = stop_child(&mut child, OPERATOR_STOP_GRACE);
            self.progress.step(format!(
                "operator stopped ({}, {:.1}s)",
                status,
                started.elapsed().as_secs_f64()
            ));
        }
        let _ = fs::remove_file(self.state_dir.join("operator.pid"));
        let _ = fs::remove_file(self.operator_kubeconfig());
        if let Some(cluster) = self.cluster.take() {
            if self.reused {
                self.progress.say(format!(
                    "The cluster in {} was running before the demo started, so it keeps running \
                     (`cargo xtask cluster down` stops it).",
                    self.state_dir.display()
                ));
            } else {
                let started = Instant::now();
                result = cluster.down();
                self.progress.step(format!(
                    "local cluster down ({:.1}s); logs kept in {}",
                    started.elapsed().as_secs_f64(),
                    self.state_dir.join("logs").display()
                ));
            }
        }
        result
    }
}
