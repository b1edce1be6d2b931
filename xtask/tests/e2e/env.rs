//! The shared environment: a local cluster (audit log on) in `target/e2e-cluster`, the CRD and
//! the RBAC from `deploy/`, a client-certificate user `database-operator` bound to the shipped
//! ClusterRole (not `system:masters`), and operator processes running as that user.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustix::process::{Pid, Signal, kill_process};
use xtask::cluster::{
    ClusterGuard, LocalCluster, UpOptions, down_state_dir, operator_user_binding, workspace_root,
};

use crate::harness::lock;

/// The operator's user name (client certificate CN); the audit log is filtered on it.
pub use xtask::cluster::OPERATOR_USER;
/// Where the RBAC of `deploy/rbac` puts the operator's namespaced objects.
pub const OPERATOR_NAMESPACE: &str = "database-operator-system";

/// The leader-election RoleBinding of the shipped Role to [`OPERATOR_USER`] (the ClusterRole
/// binding is [`operator_user_binding`]).
const LEADER_ELECTION_BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: database-operator-e2e-user-leader-election
  namespace: database-operator-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: database-operator-leader-election
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: database-operator
";

/// `target/e2e-cluster`.
pub fn state_dir() -> PathBuf {
    workspace_root().join("target").join("e2e-cluster")
}

/// Pids of every operator process started, for the Ctrl-C handler.
static OPERATOR_PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// On SIGINT/SIGTERM: kill the operators, stop the cluster, exit 130. The cluster's processes
/// run in their own process groups, so without this a Ctrl-C would leave them running.
pub fn install_interrupt_handler() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("cannot catch Ctrl-C: the cluster would survive an interrupt");
        return;
    };
    let signals = {
        let _guard = runtime.enter();
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    let (Ok(mut int), Ok(mut term)) = signals else {
        eprintln!("cannot catch Ctrl-C: the cluster would survive an interrupt");
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("e2e-signals".into())
        .spawn(move || {
            runtime.block_on(async {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            });
            eprintln!("\ninterrupted: stopping the operators and the local cluster");
            for pid in lock(&OPERATOR_PIDS).iter() {
                if let Some(p) = i32::try_from(*pid).ok().and_then(Pid::from_raw) {
                    let _ = kill_process(p, Signal::KILL);
                }
            }
            if let Err(e) = down_state_dir(&state_dir(), false) {
                eprintln!("stopping the local cluster: {e:#}");
            }
            std::process::exit(130);
        });
    if spawned.is_err() {
        eprintln!("cannot catch Ctrl-C: the cluster would survive an interrupt");
    }
}

/// The shared cluster and what runs against it.
pub struct Env {
    pub cluster: ClusterGuard,
    /// Admin client (`system:masters`), for the tests' own reads and writes.
    pub client: Client,
    pub operator_bin: PathBuf,
    pub operator_kubeconfig: PathBuf,
    pub state_dir: PathBuf,
    main_operator: Mutex<Option<Operator>>,
    /// Held while the shared operator is being started: two lanes asking at once start one.
    main_operator_start: tokio::sync::Mutex<()>,
}

impl Env {
    /// Builds the operator (a no-op when it is fresh), starts the cluster, installs the CRD and
    /// the RBAC, writes the operator's kubeconfig.
    pub async fn start() -> Result<Env> {
        let root = workspace_root();
        let started = Instant::now();
        let operator_bin = build_operator(&root)?;
        eprintln!(
            "    operator binary {} ({:.1}s)",
            operator_bin.display(),
            started.elapsed().as_secs_f64()
        );
        let state_dir = state_dir();
        // A run that was killed may have left a cluster behind; `up` would reuse it.
        down_state_dir(&state_dir, true)?;
        let started = Instant::now();
        eprintln!(
            "    starting the shared local cluster in {}",
            state_dir.display()
        );
        let cluster = LocalCluster::up(&UpOptions {
            state_dir: Some(state_dir.clone()),
            audit_log: true,
            quiet: false,
            ..UpOptions::default()
        })?
        .into_guard();
        eprintln!("    cluster up in {:.1}s", started.elapsed().as_secs_f64());

        let crd = root
            .join("deploy")
            .join("crds")
            .join(database_operator_api::crd::CRD_FILE_NAME);
        cluster.kubectl_output(&["apply", "--server-side", "-f", &crd.to_string_lossy()])?;
        cluster.kubectl_output(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "customresourcedefinition/databaseclusters.database.example.com",
        ])?;
        cluster.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {OPERATOR_NAMESPACE}\n"
        ))?;
        let rbac = root.join("deploy").join("rbac");
        cluster.kubectl_output(&["apply", "-k", &rbac.to_string_lossy()])?;
        cluster.apply(&operator_user_binding("database-operator-e2e-user"))?;
        cluster.apply(LEADER_ELECTION_BINDING)?;
        let operator_kubeconfig = state_dir.join("operator.kubeconfig");
        cluster.write_user_kubeconfig(&operator_kubeconfig, OPERATOR_USER, &[])?;
        crate::admission_policy::install_and_check(
            &cluster,
            &root,
            &operator_kubeconfig,
            &state_dir,
        )?;
        eprintln!(
            "    installed the CRD and the RBAC from {}; operator user {OPERATOR_USER} ({})",
            rbac.display(),
            operator_kubeconfig.display()
        );

        let env = Env {
            client: admin_client(cluster.kubeconfig()).await?,
            cluster,
            operator_bin,
            operator_kubeconfig,
            state_dir,
            main_operator: Mutex::new(None),
            main_operator_start: tokio::sync::Mutex::new(()),
        };
        // The operator is not cluster admin: it has exactly what the ClusterRole grants.
        ensure!(
            env.operator_can(&["create", "namespaces"])? == "no"
                && env.operator_can(&["delete", "statefulsets", "-A"])? == "no"
                && env.operator_can(&["patch", "statefulsets", "-A"])? == "yes",
            "user {OPERATOR_USER} should have exactly the ClusterRole's rights"
        );
        Ok(env)
    }

    /// `kubectl auth can-i <args>` as the operator's user: `yes` or `no`.
    pub fn operator_can(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(self.cluster.kubectl_path())
            .arg("--kubeconfig")
            .arg(&self.operator_kubeconfig)
            .args(["auth", "can-i"])
            .args(args)
            .output()
            .context("running kubectl auth can-i")?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Starts the shared operator unless it runs; returns its log file.
    pub async fn ensure_main_operator(&self) -> Result<PathBuf> {
        let _starting = self.main_operator_start.lock().await;
        {
            let mut slot = lock(&self.main_operator);
            if let Some(op) = slot.as_mut() {
                if op.is_running() {
                    return Ok(op.log.clone());
                }
                eprintln!(
                    "    the shared operator had exited; last lines of {}:\n{}",
                    op.log.display(),
                    tail(&op.log, 20)
                );
                *slot = None;
            }
        }
        let mut op = Operator::spawn(self, "shared", &["--leader-elect=false", "--webhook=false"])?;
        eprintln!(
            "    started the shared operator (pid {}, log {})",
            op.pid,
            op.log.display()
        );
        op.wait_ready(Duration::from_secs(60)).await?;
        let log = op.log.clone();
        *lock(&self.main_operator) = Some(op);
        Ok(log)
    }

    /// A metric of the shared operator (sum over label sets); fails when it does not run.
    pub fn main_operator_metric(&self, metric: &str) -> Result<f64> {
        let mut slot = lock(&self.main_operator);
        let Some(op) = slot.as_mut() else {
            bail!("the shared operator does not run");
        };
        ensure!(op.is_running(), "the shared operator has exited");
        op.metric(metric)
    }

    /// SIGKILLs the shared operator (no graceful shutdown, nothing flushed); its pid when it
    /// was running. [`Env::ensure_main_operator`] starts a new one.
    pub fn kill_main_operator(&self) -> Option<u32> {
        let mut op = lock(&self.main_operator).take()?;
        let pid = op.pid;
        op.kill();
        Some(pid)
    }

    /// Stops the shared operator; returns its log when it was running.
    pub fn stop_main_operator(&self) -> Option<PathBuf> {
        let op = lock(&self.main_operator).take();
        op.map(|mut op| {
            op.stop();
            op.log.clone()
        })
    }

    /// Stops the shared operator, then the cluster; removes the operator's credentials (the
    /// logs stay).
    pub fn shutdown(self) {
        self.stop_main_operator();
        drop(self.cluster);
        let _ = fs::remove_file(&self.operator_kubeconfig);
        let _ = fs::remove_dir_all(self.state_dir.join("webhook-certs"));
    }

    /// The API server's audit log.
    pub fn audit_log(&self) -> Result<PathBuf> {
        self.cluster
            .audit_log()
            .map(Path::to_path_buf)
            .ok_or_else(|| anyhow!("the shared cluster runs without an audit log"))
    }
}

async fn admin_client(kubeconfig: &Path) -> Result<Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

/// `cargo build -p database-operator-runtime --bin database-operator` (fast when nothing
/// changed), so the suite never runs a stale operator; returns the executable.
pub fn build_operator(root: &Path) -> Result<PathBuf> {
    build_binary(root, "database-operator-runtime", "database-operator")
}

/// `cargo build -p <package> --bin <bin>` (fast when nothing changed); returns the executable.
pub fn build_binary(root: &Path, package: &str, bin: &str) -> Result<PathBuf> {
    let output = cargo_command()
        .current_dir(root)
        .args([
            "build",
            "--quiet",
            "-p",
            package,
            "--bin",
            bin,
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running cargo build for {bin}"))?;
    if !output.status.success() {
        bail!("building {bin} failed ({})", output.status);
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bin)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| anyhow!("cargo build did not report the {bin} executable"))
}

/// `cargo` (the one running this task) without the variables Cargo sets for the program it
/// runs (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...). Build scripts such as ring's watch some of
/// them, so inheriting them would make this build and a build from a plain shell invalidate
/// each other's artifacts and recompile on every switch.
pub fn cargo_command() -> Command {
    xtask::cargo::command()
}

/// `cmd` without the variables Cargo sets for the program it runs ([`xtask::cargo::scrub_env`]).
pub fn scrub_cargo_env(cmd: Command) -> Command {
    xtask::cargo::scrub_env(cmd)
}

/// One `database-operator run` process, logging to `<state>/logs/operator-<name>.log`, with
/// its metrics and health endpoints on one loopback port. Stopped (SIGTERM, then SIGKILL) when
/// dropped.
pub struct Operator {
    pub name: String,
    pub pid: u32,
    pub log: PathBuf,
    /// Port of `/metrics`, `/healthz` and `/readyz` on 127.0.0.1.
    pub port: u16,
    child: Option<Child>,
}

impl Operator {
    /// Starts `database-operator run --kubeconfig <operator user> --metrics-addr ...
    /// --health-addr ... <args>`.
    pub fn spawn(env: &Env, name: &str, args: &[&str]) -> Result<Operator> {
        Operator::spawn_with_env(env, name, args, &[])
    }

    /// [`Operator::spawn`] with `envs` added to its environment (failpoints).
    pub fn spawn_with_env(
        env: &Env,
        name: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Operator> {
        Operator::spawn_through(env, name, args, envs, &env.operator_kubeconfig)
    }

    /// [`Operator::spawn_with_env`] with its own kubeconfig (one that points at a fault proxy).
    pub fn spawn_through(
        env: &Env,
        name: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        kubeconfig: &Path,
    ) -> Result<Operator> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let logs = env.state_dir.join("logs");
        fs::create_dir_all(&logs)?;
        let log_path = logs.join(format!("operator-{name}.log"));
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        writeln!(log, "=== e2e: starting operator {name}: {}", args.join(" "))?;
        let child = Command::new(&env.operator_bin)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-addr", &addr, "--health-addr", &addr])
            // No cluster DNS here: members are dialled at their (loopback) pod IPs.
            .arg("--member-address=pod-ip")
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", env.operator_bin.display()))?;
        let pid = child.id();
        lock(&OPERATOR_PIDS).push(pid);
        Ok(Operator {
            name: name.to_string(),
            pid,
            log: log_path,
            port,
            child: Some(child),
        })
    }

    /// Waits until `/readyz` answers 200 (watch caches synced, or standby).
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            if !self.is_running() {
                bail!(
                    "operator {} exited during startup; last lines of {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            if matches!(http_get(self.port, "/readyz"), Ok((200, _))) {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "operator {} did not answer 200 on http://127.0.0.1:{}/readyz within {}s; last lines of {}:\n{}",
                    self.name,
                    self.port,
                    timeout.as_secs(),
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Whether the process is stopped (SIGSTOP: state `T` in /proc).
    pub fn is_stopped(&self) -> bool {
        fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
            })
            .is_some_and(|state| state == "T")
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = i32::try_from(self.pid)
            .ok()
            .and_then(Pid::from_raw)
            .context("an operator pid")?;
        kill_process(pid, signal).with_context(|| format!("signalling operator {}", self.name))
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// SIGKILL: no graceful shutdown, no Lease release.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        forget_pid(self.pid);
    }

    /// SIGTERM, then SIGKILL after 25 s (the operator's own grace is 20 s).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(None))
            && let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw)
        {
            let _ = kill_process(pid, Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(25);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        forget_pid(self.pid);
    }

    /// The whole log so far.
    pub fn log_text(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Log lines of this run (after the last `=== e2e: starting` marker).
    pub fn run_log(&self) -> String {
        let text = self.log_text();
        match text.rfind("=== e2e: starting operator") {
            Some(i) => text[i..].to_string(),
            None => text,
        }
    }

    /// Number of successful reconciles of `namespace/name` this run logged.
    pub fn reconciles_of(&self, namespace: &str, name: &str) -> usize {
        let span = format!("reconcile{{namespace={namespace} name={name}}}");
        self.run_log()
            .lines()
            .filter(|l| l.contains(&span) && l.contains(" reconciled "))
            .count()
    }

    /// `/metrics` text.
    pub fn metrics(&self) -> Result<String> {
        match http_get(self.port, "/metrics")? {
            (200, body) => Ok(body),
            (code, body) => bail!("GET /metrics: HTTP {code}: {body}"),
        }
    }

    /// Sum of the samples of `metric` (all label sets).
    pub fn metric(&self, metric: &str) -> Result<f64> {
        Ok(metric_sum(&self.metrics()?, metric))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn forget_pid(pid: u32) {
    lock(&OPERATOR_PIDS).retain(|p| *p != pid);
}

/// Sum of every sample of `metric` in Prometheus/OpenMetrics text.
pub fn metric_sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A free TCP port on 127.0.0.1 (released before it is returned).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A plain-HTTP GET on 127.0.0.1:`port`: status code and body.
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    http_get_at(Ipv4Addr::LOCALHOST, port, path)
}

/// A plain-HTTP GET on `ip:port`, a loopback address (a process pod's IP): status code and body.
pub fn http_get_at(ip: Ipv4Addr, port: u16, path: &str) -> Result<(u16, String)> {
    anyhow::ensure!(ip.is_loopback(), "{ip} is not a loopback address");
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&SocketAddr::from((ip, port)), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// `GET https://<ip>:<port><path>` (loopback only) with `token` as a bearer token, not checking
/// the server's certificate (the operator's secure /metrics serves one it made at start):
/// status and body.
pub async fn https_get_at(
    ip: Ipv4Addr,
    port: u16,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    anyhow::ensure!(ip.is_loopback(), "{ip} is not a loopback address");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(5))
        .build()?;
    let mut request = client.get(format!("https://{ip}:{port}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let code = response.status().as_u16();
    Ok((code, response.text().await?))
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
