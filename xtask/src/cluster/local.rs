//! A local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok (fake nodes).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::binaries::{self, Binaries};
use super::manifests;
use super::pki::{self, Ca, CertPair, PkiFiles};
use super::process::{self, free_ports, http_get_loopback, is_running, port_open};
use super::procnode;
use super::progress::Progress;

/// Service ClusterIP range. The addresses are fake: nothing routes them and
/// nothing may dial them.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/16";
/// Pod IP range handed out by kwok: loopback, so that no pod anywhere has an
/// address off this machine (kwok's are never dialled). Process pods take
/// theirs from 127.10.0.0/16 (see `procnode`).
pub const POD_CIDR: &str = "127.128.0.0/10";
/// The InternalIP of every kwok node (and the hostIP of their pods).
pub const KWOK_NODE_IP: &str = "127.0.1.1";
/// Lease duration of the fake nodes; kwok renews the Leases.
pub const NODE_LEASE_SECONDS: u32 = 40;

const STATE_FORMAT: u32 = 1;

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Root of the cargo workspace (holds `xtask/go/`).
    pub workspace_root: PathBuf,
    /// Where kubeconfig, state.json, PKI and logs go. Default:
    /// `<workspace>/target/local-cluster`.
    pub state_dir: Option<PathBuf>,
    /// Write the apiserver audit log (Metadata level, every request) to
    /// `<state_dir>/logs/audit.log`.
    pub audit_log: bool,
    /// Number of fake nodes kwok keeps Ready.
    pub nodes: usize,
    /// Number of process nodes (`proc-0`, ...) whose pods run as local
    /// processes; 0 starts no agent.
    pub process_nodes: usize,
    /// Suppress progress output.
    pub quiet: bool,
    /// Extra kube-apiserver flags (e.g. `--feature-gates=...`).
    pub extra_apiserver_args: Vec<String>,
    /// Extra kube-controller-manager flags (e.g. `--kube-api-qps=...` for scale runs).
    pub extra_controller_manager_args: Vec<String>,
    /// Extra kube-scheduler flags.
    pub extra_scheduler_args: Vec<String>,
    /// Audit policy YAML used instead of the default (every request at Metadata level) when
    /// `audit_log` is on, e.g. to record only one user's requests.
    pub audit_policy: Option<String>,
}

impl Default for UpOptions {
    fn default() -> Self {
        Self {
            workspace_root: workspace_root(),
            state_dir: None,
            audit_log: false,
            nodes: 3,
            process_nodes: 3,
            quiet: false,
            extra_apiserver_args: Vec::new(),
            extra_controller_manager_args: Vec::new(),
            extra_scheduler_args: Vec::new(),
            audit_policy: None,
        }
    }
}

impl UpOptions {
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| default_state_dir(&self.workspace_root))
    }
}

/// The workspace root, from the location of the xtask crate.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `<workspace>/target/local-cluster`.
pub fn default_state_dir(workspace_root: &Path) -> PathBuf {
    workspace_root.join("target").join("local-cluster")
}

/// One running component as recorded in `state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComponentState {
    pub name: String,
    pub pid: u32,
    pub binary: PathBuf,
    pub log: PathBuf,
    /// Named ports on 127.0.0.1, e.g. `client`, `secure`.
    pub ports: BTreeMap<String, u16>,
    pub args: Vec<String>,
}

/// Contents of `<state_dir>/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub format: u32,
    pub kubernetes_version: String,
    pub etcd_version: String,
    pub kwok_version: String,
    pub bin_dir: PathBuf,
    pub state_dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
    pub etcd_data_dir: PathBuf,
    pub audit_log: Option<PathBuf>,
    pub nodes: Vec<String>,
    /// Process nodes served by the `node-agent` component.
    #[serde(default)]
    pub process_nodes: Vec<String>,
    pub started_at_unix: u64,
    /// Set once every component is up and the nodes are Ready.
    #[serde(default)]
    pub ready: bool,
    pub components: Vec<ComponentState>,
}

impl State {
    pub fn component(&self, name: &str) -> Option<&ComponentState> {
        self.components.iter().find(|c| c.name == name)
    }

    fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("state.json")
    }

    /// Reads `state.json`; `None` when there is none.
    pub fn load(state_dir: &Path) -> Result<Option<State>> {
        let path = Self::path(state_dir);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("parsing {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn save(&self) -> Result<()> {
        let path = Self::path(&self.state_dir);
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
    }
}

/// Health of one component, as reported by `status`.
#[derive(Debug, Clone)]
pub struct ComponentHealth {
    pub name: String,
    pub pid: u32,
    pub running: bool,
    pub healthy: bool,
    pub detail: String,
}

/// A running local cluster. Dropping it leaves the processes running (that is
/// what `cargo xtask cluster up` wants); call [`LocalCluster::down`] or use
/// [`LocalCluster::into_guard`] to stop it.
#[derive(Debug)]
pub struct LocalCluster {
    state: State,
    children: Vec<(String, Child)>,
}

impl LocalCluster {
    /// Builds the binaries when needed and starts a fresh cluster. When a
    /// healthy cluster with the same audit setting already runs in the state
    /// directory, attaches to it instead.
    pub fn up(opts: &UpOptions) -> Result<LocalCluster> {
        let progress = Progress::new(opts.quiet);
        let state_dir = opts.state_dir();
        if let Some(existing) = Self::attach(&state_dir)?
            && existing.state.ready
        {
            let wants_audit = opts.audit_log;
            let has_audit = existing.state.audit_log.is_some();
            if existing.api_ready() && wants_audit == has_audit {
                progress.step(format!(
                    "a cluster already runs in {} (server {}); reusing it",
                    state_dir.display(),
                    existing.state.server
                ));
                return Ok(existing);
            }
            bail!(
                "a cluster already runs in {} (audit log {}); run `cargo xtask cluster down` first",
                state_dir.display(),
                if has_audit { "on" } else { "off" }
            );
        }
        // Leftovers of a crashed or interrupted start: stop whatever still
        // runs, then clean.
        down_state_dir(&state_dir, true)?;

        let binaries = binaries::ensure(&opts.workspace_root, &progress)?;
        let s3_binary = super::s3::ensure(&opts.workspace_root, &progress)?;
        let mut starter = Starter::new(opts, &state_dir, &binaries, progress)?;
        starter.s3 = Some(s3_binary);
        match starter.start_all() {
            Ok(()) => {
                let Starter {
                    state,
                    children,
                    progress,
                    ..
                } = starter;
                progress.step(format!(
                    "cluster ready: {} nodes, server {}",
                    state.nodes.len(),
                    state.server
                ));
                Ok(LocalCluster { state, children })
            }
            Err(err) => {
                starter.abort();
                Err(err)
            }
        }
    }

    /// Attaches to the cluster recorded in `state_dir/state.json` when at
    /// least one of its processes still runs.
    pub fn attach(state_dir: &Path) -> Result<Option<LocalCluster>> {
        let Some(state) = State::load(state_dir)? else {
            return Ok(None);
        };
        if !state
            .components
            .iter()
            .any(|c| is_running(c.pid, &c.binary))
        {
            return Ok(None);
        }
        Ok(Some(LocalCluster {
            state,
            children: Vec::new(),
        }))
    }

    pub fn state(&self) -> &State {
        &self.state
    }
    /// The admin kubeconfig (user `kubernetes-admin`, group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.state.kubeconfig
    }
    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.state.server
    }
    /// The apiserver audit log when the cluster was started with one.
    pub fn audit_log(&self) -> Option<&Path> {
        self.state.audit_log.as_deref()
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.state.state_dir.join("logs")
    }
    pub fn pki(&self) -> PkiFiles {
        PkiFiles {
            dir: self.state.state_dir.join("pki"),
        }
    }
    /// PEM of the cluster CA (also the `certificate-authority-data`).
    pub fn ca_pem(&self) -> Result<String> {
        let path = self.pki().ca_cert();
        fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }
    /// A serving certificate signed by the cluster CA, e.g. for a webhook
    /// registered with `clientConfig.url: https://127.0.0.1:<port>/...` and
    /// `caBundle` = [`LocalCluster::ca_pem`].
    pub fn issue_serving_cert(&self, names: &[&str]) -> Result<CertPair> {
        Ca::load(&self.pki())?.issue_serving(names.first().copied().unwrap_or("local"), names)
    }
    /// A serving certificate for 127.0.0.1 ([`LocalCluster::issue_serving_cert`]) written to
    /// `dir` as `tls.crt` and `tls.key`, the files the operator's `--webhook-cert-dir` reads.
    pub fn write_webhook_cert(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let cert = self.issue_serving_cert(&["127.0.0.1"])?;
        fs::write(dir.join("tls.crt"), &cert.cert_pem)?;
        fs::write(dir.join("tls.key"), &cert.key_pem)?;
        Ok(())
    }
    /// A kubeconfig for another user (CN = user, O = groups), signed by the
    /// cluster CA and written to `path`.
    pub fn write_user_kubeconfig(&self, path: &Path, user: &str, groups: &[&str]) -> Result<()> {
        let ca = Ca::load(&self.pki())?;
        let pair = ca.issue_client(user, groups)?;
        let text = manifests::kubeconfig(
            &self.state.server,
            &ca.cert_pem,
            user,
            &pair.cert_pem,
            &pair.key_pem,
        );
        fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
    /// The cached kubectl of the same Kubernetes version.
    pub fn kubectl_path(&self) -> PathBuf {
        self.state.bin_dir.join("kubectl")
    }
    /// `kubectl --kubeconfig <admin kubeconfig>`, ready for more args.
    pub fn kubectl(&self) -> Command {
        kubectl_command(&self.kubectl_path(), &self.state.kubeconfig)
    }
    /// Runs kubectl with `args`, returns stdout, fails with stderr.
    pub fn kubectl_output(&self, args: &[&str]) -> Result<String> {
        run_kubectl(&self.kubectl_path(), &self.state.kubeconfig, args, None)
    }
    /// Runs kubectl with `args` and `input` on stdin, returns stdout, fails with stderr.
    pub fn kubectl_with_input(&self, args: &[&str], input: &str) -> Result<String> {
        run_kubectl(
            &self.kubectl_path(),
            &self.state.kubeconfig,
            args,
            Some(input),
        )
    }
    /// `kubectl apply -f -` with `manifest` on stdin.
    pub fn apply(&self, manifest: &str) -> Result<String> {
        self.kubectl_with_input(&["apply", "-f", "-"], manifest)
    }

    /// True when `/readyz` answers `ok`.
    pub fn api_ready(&self) -> bool {
        api_ready(&self.kubectl_path(), &self.state.kubeconfig)
    }

    /// Health of every component (process alive, endpoint answering).
    pub fn health(&self) -> Vec<ComponentHealth> {
        self.state
            .components
            .iter()
            .map(|c| {
                let running = is_running(c.pid, &c.binary);
                let (healthy, detail) = if !running {
                    (false, "not running".to_string())
                } else {
                    self.probe(c)
                };
                ComponentHealth {
                    name: c.name.clone(),
                    pid: c.pid,
                    running,
                    healthy,
                    detail,
                }
            })
            .collect()
    }

    fn probe(&self, c: &ComponentState) -> (bool, String) {
        match c.name.as_str() {
            "etcd" => match http_get_loopback(c.ports["client"], "/health", Duration::from_secs(2))
            {
                Ok((200, body)) if body.contains("\"health\":\"true\"") => {
                    (true, "/health ok".into())
                }
                Ok((code, body)) => (false, format!("/health {code}: {}", body.trim())),
                Err(e) => (false, format!("/health: {e}")),
            },
            "kube-apiserver" => {
                if self.api_ready() {
                    (true, "/readyz ok".into())
                } else {
                    (false, "/readyz not ok".into())
                }
            }
            "kwok" => {
                match http_get_loopback(c.ports["server"], "/healthz", Duration::from_secs(2)) {
                    Ok((200, _)) => (true, "/healthz ok".into()),
                    Ok((code, body)) => (false, format!("/healthz {code}: {}", body.trim())),
                    Err(e) => (false, format!("/healthz: {e}")),
                }
            }
            "s3" => {
                let port = c.ports.get("s3").copied().unwrap_or(0);
                if port_open(port) {
                    (true, format!("S3 on http://127.0.0.1:{port}"))
                } else {
                    (false, format!("nothing listens on 127.0.0.1:{port}"))
                }
            }
            "node-agent" => (
                true,
                format!("process nodes {}", self.state.process_nodes.join(", ")),
            ),
            _ => {
                let port = c.ports.get("secure").copied().unwrap_or(0);
                if port_open(port) {
                    (true, format!("listening on 127.0.0.1:{port}"))
                } else {
                    (false, format!("nothing listens on 127.0.0.1:{port}"))
                }
            }
        }
    }

    /// Stops every process and removes the state (keeps `logs/`).
    pub fn down(mut self) -> Result<()> {
        stop_components(&self.state, &mut self.children);
        remove_state(&self.state.state_dir, &self.state.etcd_data_dir)
    }

    /// Wraps the cluster so that it goes down when the guard is dropped
    /// (end of a test, panic included).
    pub fn into_guard(self) -> ClusterGuard {
        ClusterGuard {
            cluster: Some(self),
        }
    }
}

/// Stops the cluster on drop.
#[derive(Debug)]
pub struct ClusterGuard {
    cluster: Option<LocalCluster>,
}

impl std::ops::Deref for ClusterGuard {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        self.cluster.as_ref().expect("cluster present until drop")
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster.take()
            && let Err(e) = cluster.down()
        {
            eprintln!("stopping the local cluster: {e:#}");
        }
    }
}

/// Stops whatever `state_dir/state.json` records and removes the state.
/// Returns true when a state file was found.
pub fn down_state_dir(state_dir: &Path, quiet: bool) -> Result<bool> {
    let Some(state) = State::load(state_dir)? else {
        return Ok(false);
    };
    let stopped = stop_components(&state, &mut Vec::new());
    if !quiet {
        for name in &stopped {
            eprintln!("stopped {name}");
        }
    }
    remove_state(state_dir, &state.etcd_data_dir)?;
    Ok(true)
}

fn stop_components(state: &State, children: &mut Vec<(String, Child)>) -> Vec<String> {
    let mut stopped = Vec::new();
    // Reverse start order: kwok and the controllers first, etcd last.
    for c in state.components.iter().rev() {
        let child = children
            .iter_mut()
            .find(|(name, _)| name == &c.name)
            .map(|(_, child)| child);
        // The agent stops its containers first (SIGTERM, then SIGKILL after 8 s).
        let grace = if c.name == "node-agent" { 15 } else { 10 };
        if process::stop(c.pid, &c.binary, Duration::from_secs(grace), child) {
            stopped.push(format!("{} (pid {})", c.name, c.pid));
        }
    }
    children.clear();
    // Whatever container processes the agent could not stop (it crashed, or
    // was killed): their process groups are recorded beside their pods.
    for leftover in procnode::kill_leftovers(&state.state_dir) {
        stopped.push(leftover);
    }
    stopped
}

fn remove_state(state_dir: &Path, etcd_data_dir: &Path) -> Result<()> {
    for name in [
        "state.json",
        "kubeconfig",
        "kube-controller-manager.kubeconfig",
        "kube-scheduler.kubeconfig",
        "kwok.kubeconfig",
        "node-agent.kubeconfig",
        "kwok.yaml",
        "audit-policy.yaml",
        "bootstrap.yaml",
    ] {
        let path = state_dir.join(name);
        if path.exists() {
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    // Process pods: their layers and volumes go, their logs stay.
    if let Ok(pods) = fs::read_dir(procnode::pods_dir(state_dir)) {
        for pod in pods.flatten() {
            for sub in ["containers", "volumes"] {
                let dir = pod.path().join(sub);
                if dir.exists() {
                    fs::remove_dir_all(&dir)
                        .with_context(|| format!("removing {}", dir.display()))?;
                }
            }
        }
    }
    for dir in [
        state_dir.join("pki"),
        etcd_data_dir.to_path_buf(),
        procnode::volumes_dir(state_dir),
    ] {
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    // The /dev/shm parent is ours alone; remove it when empty.
    if let Some(parent) = etcd_data_dir.parent()
        && parent.starts_with("/dev/shm")
    {
        let _ = fs::remove_dir(parent);
    }
    Ok(())
}

fn kubectl_command(kubectl: &Path, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(kubeconfig);
    cmd
}

fn run_kubectl(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String> {
    use std::io::Write;
    let mut cmd = kubectl_command(kubectl, kubeconfig);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {}", kubectl.display()))?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn api_ready(kubectl: &Path, kubeconfig: &Path) -> bool {
    matches!(
        run_kubectl(kubectl, kubeconfig, &["get", "--raw=/readyz", "--request-timeout=5s"], None),
        Ok(body) if body.trim() == "ok"
    )
}

/// Places etcd's data on tmpfs when `/dev/shm` is writable.
fn etcd_data_dir(state_dir: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let probe = shm.join(format!(".database-operator-probe-{}", std::process::id()));
    if fs::create_dir_all(&probe).is_ok() {
        let _ = fs::remove_dir(&probe);
        let digest = Sha256::digest(state_dir.to_string_lossy().as_bytes());
        let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        shm.join(format!("database-operator-{tag}")).join("etcd")
    } else {
        state_dir.join("etcd-data")
    }
}

/// Starts the components in order and records them in `state.json` as it
/// goes, so that a failure half-way can be cleaned up by `down`.
struct Starter<'a> {
    opts: &'a UpOptions,
    binaries: &'a Binaries,
    progress: Progress,
    state: State,
    children: Vec<(String, Child)>,
    pki: PkiFiles,
    /// The S3 server to start, when built.
    s3: Option<super::s3::S3Binary>,
}

impl<'a> Starter<'a> {
    fn new(
        opts: &'a UpOptions,
        state_dir: &Path,
        binaries: &'a Binaries,
        progress: Progress,
    ) -> Result<Self> {
        let logs = state_dir.join("logs");
        fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        for entry in fs::read_dir(&logs)? {
            let path = entry?.path();
            if path.is_file() {
                fs::remove_file(&path)?;
            }
        }
        let state_dir = fs::canonicalize(state_dir)?;
        let state = State {
            format: STATE_FORMAT,
            kubernetes_version: binaries.versions.kubernetes.clone(),
            etcd_version: binaries.versions.etcd.clone(),
            kwok_version: binaries.versions.kwok.clone(),
            bin_dir: binaries.bin_dir(),
            kubeconfig: state_dir.join("kubeconfig"),
            server: String::new(),
            etcd_data_dir: etcd_data_dir(&state_dir),
            audit_log: opts
                .audit_log
                .then(|| state_dir.join("logs").join("audit.log")),
            nodes: manifests::node_names(opts.nodes),
            process_nodes: procnode::node_names(opts.process_nodes),
            started_at_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            ready: false,
            components: Vec::new(),
            state_dir: state_dir.clone(),
        };
        let pki = PkiFiles {
            dir: state_dir.join("pki"),
        };
        Ok(Self {
            opts,
            binaries,
            progress,
            state,
            children: Vec::new(),
            pki,
            s3: None,
        })
    }

    fn dir(&self) -> &Path {
        &self.state.state_dir
    }

    fn start_all(&mut self) -> Result<()> {
        pki::generate(&self.pki.dir)?;
        let ports = free_ports(8)?;
        let [
            etcd_client,
            etcd_peer,
            apiserver,
            kcm,
            scheduler,
            kwok_server,
            s3_port,
            ..,
        ] = ports[..]
        else {
            unreachable!("free_ports(8) returns 8 ports");
        };
        self.state.server = format!("https://127.0.0.1:{apiserver}");
        self.write_kubeconfigs()?;
        self.progress.step(format!(
            "PKI and kubeconfig written to {}",
            self.dir().display()
        ));

        // etcd
        if self.state.etcd_data_dir.exists() {
            fs::remove_dir_all(&self.state.etcd_data_dir)?;
        }
        fs::create_dir_all(&self.state.etcd_data_dir)?;
        let etcd_args = vec![
            "--name=local".to_string(),
            format!("--data-dir={}", self.state.etcd_data_dir.display()),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-cluster=local=http://127.0.0.1:{etcd_peer}"),
            "--initial-cluster-state=new".to_string(),
            "--unsafe-no-fsync=true".to_string(),
            "--log-level=warn".to_string(),
        ];
        self.start(
            "etcd",
            self.binaries.etcd(),
            etcd_args,
            &[("client", etcd_client), ("peer", etcd_peer)],
        )?;
        self.wait("etcd", Duration::from_secs(60), |_| {
            matches!(
                http_get_loopback(etcd_client, "/health", Duration::from_secs(2)),
                Ok((200, body)) if body.contains("\"health\":\"true\"")
            )
        })?;

        // kube-apiserver
        let p = self.pki.clone();
        let mut api_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={apiserver}"),
            "--endpoint-reconciler-type=none".to_string(),
            format!("--tls-cert-file={}", p.apiserver_cert().display()),
            format!("--tls-private-key-file={}", p.apiserver_key().display()),
            format!("--client-ca-file={}", p.ca_cert().display()),
            format!("--service-account-key-file={}", p.sa_pub().display()),
            format!(
                "--service-account-signing-key-file={}",
                p.sa_key().display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--authorization-mode=Node,RBAC".to_string(),
            "--allow-privileged=true".to_string(),
            "--profiling=false".to_string(),
        ];
        if let Some(audit) = &self.state.audit_log {
            let policy = self.dir().join("audit-policy.yaml");
            let text = self
                .opts
                .audit_policy
                .as_deref()
                .unwrap_or(manifests::AUDIT_POLICY);
            fs::write(&policy, text)?;
            api_args.extend([
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit.display()),
                "--audit-log-format=json".to_string(),
                "--audit-log-mode=blocking".to_string(),
                "--audit-log-maxsize=0".to_string(),
            ]);
        }
        api_args.extend(self.opts.extra_apiserver_args.iter().cloned());
        self.start(
            "kube-apiserver",
            self.binaries.kube_apiserver(),
            api_args,
            &[("secure", apiserver)],
        )?;
        let kubectl = self.binaries.kubectl();
        let kubeconfig = self.state.kubeconfig.clone();
        self.wait("kube-apiserver", Duration::from_secs(180), |_| {
            api_ready(&kubectl, &kubeconfig)
        })?;

        // controller-manager, scheduler, kwok
        let kcm_kubeconfig = self.dir().join("kube-controller-manager.kubeconfig");
        let mut kcm_args = vec![
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kcm_kubeconfig.display()),
            // No front-proxy CA is configured, so do not look up the
            // requestheader settings in the cluster; trust the cluster CA.
            "--authentication-skip-lookup=true".to_string(),
            format!("--client-ca-file={}", p.ca_cert().display()),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={kcm}"),
            "--leader-elect=false".to_string(),
            // EndpointSlices and Endpoints reject loopback addresses, and every pod IP here is
            // one; nothing reads them (no kube-proxy, no DNS), so their controllers stay off
            // instead of failing and retrying for every Service.
            "--controllers=*,-endpointslice-controller,-endpointslice-mirroring-controller,-endpoints-controller".to_string(),
            "--use-service-account-credentials=true".to_string(),
            format!(
                "--service-account-private-key-file={}",
                p.sa_key().display()
            ),
            format!("--root-ca-file={}", p.ca_cert().display()),
            format!("--cluster-signing-cert-file={}", p.ca_cert().display()),
            format!("--cluster-signing-key-file={}", p.ca_key().display()),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--profiling=false".to_string(),
        ];
        kcm_args.extend(self.opts.extra_controller_manager_args.iter().cloned());
        self.start(
            "kube-controller-manager",
            self.binaries.kube_controller_manager(),
            kcm_args,
            &[("secure", kcm)],
        )?;
        let sched_kubeconfig = self.dir().join("kube-scheduler.kubeconfig");
        let mut sched_args = vec![
            format!("--kubeconfig={}", sched_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", sched_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", sched_kubeconfig.display()),
            "--authentication-skip-lookup=true".to_string(),
            format!("--client-ca-file={}", p.ca_cert().display()),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={scheduler}"),
            "--leader-elect=false".to_string(),
            "--profiling=false".to_string(),
        ];
        sched_args.extend(self.opts.extra_scheduler_args.iter().cloned());
        self.start(
            "kube-scheduler",
            self.binaries.kube_scheduler(),
            sched_args,
            &[("secure", scheduler)],
        )?;
        let kwok_config = self.dir().join("kwok.yaml");
        manifests::write_kwok_config(&self.opts.workspace_root, self.binaries, &kwok_config)?;
        let kwok_args = vec![
            format!("--config={}", kwok_config.display()),
            format!(
                "--kubeconfig={}",
                self.dir().join("kwok.kubeconfig").display()
            ),
            // Only the fake nodes: process nodes belong to the node agent.
            format!(
                "--manage-nodes-with-label-selector={}",
                procnode::KWOK_NODE_SELECTOR
            ),
            format!("--node-ip={KWOK_NODE_IP}"),
            format!("--server-address=127.0.0.1:{kwok_server}"),
            format!("--node-lease-duration-seconds={NODE_LEASE_SECONDS}"),
            format!("--cidr={POD_CIDR}"),
        ];
        self.start(
            "kwok",
            self.binaries.kwok(),
            kwok_args,
            &[("server", kwok_server)],
        )?;

        let bootstrap = self.dir().join("bootstrap.yaml");
        fs::write(&bootstrap, manifests::bootstrap_objects(self.opts.nodes))?;
        run_kubectl(
            &kubectl,
            &kubeconfig,
            &["apply", "-f", &bootstrap.to_string_lossy()],
            None,
        )
        .context("creating the fake nodes and StorageClasses")?;
        self.progress.step(format!(
            "created {} fake nodes and StorageClasses {}",
            self.opts.nodes,
            manifests::STORAGE_CLASSES
                .iter()
                .map(|(n, d)| if *d {
                    format!("{n} (default)")
                } else {
                    n.to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));

        self.wait("kube-scheduler", Duration::from_secs(60), |_| {
            port_open(scheduler)
        })?;
        self.wait("kube-controller-manager", Duration::from_secs(120), |_| {
            run_kubectl(
                &kubectl,
                &kubeconfig,
                &[
                    "get",
                    "serviceaccount",
                    "default",
                    "--namespace=default",
                    "-o=name",
                ],
                None,
            )
            .is_ok()
        })?;
        let nodes = self.state.nodes.clone();
        self.wait("kwok", Duration::from_secs(120), |_| {
            nodes_ready(&kubectl, &kubeconfig, &nodes)
        })?;
        if !self.state.process_nodes.is_empty() {
            let agent = agent_binary()?;
            let args = vec![
                "cluster".to_string(),
                "node-agent".to_string(),
                format!("--state-dir={}", self.dir().display()),
                format!(
                    "--kubeconfig={}",
                    self.dir().join("node-agent.kubeconfig").display()
                ),
                format!("--nodes={}", self.state.process_nodes.len()),
                format!(
                    "--operator-binary={}",
                    super::images::default_operator_binary(&self.opts.workspace_root).display()
                ),
            ];
            let pods = procnode::pods_dir(self.dir());
            if pods.exists() {
                fs::remove_dir_all(&pods)
                    .with_context(|| format!("removing {}", pods.display()))?;
            }
            self.start("node-agent", agent, args, &[])?;
            let nodes = self.state.process_nodes.clone();
            self.wait("node-agent", Duration::from_secs(60), |_| {
                nodes_ready(&kubectl, &kubeconfig, &nodes)
            })?;
        }
        if let Some(s3) = self.s3.clone() {
            self.start_s3(&s3, s3_port, &kubectl, &kubeconfig)?;
        }
        self.state.ready = true;
        self.state.save()
    }

    /// Starts the S3 server on `127.0.0.1:<port>` with fresh credentials (in its environment,
    /// never its argv), creates the bucket, and writes the Secret `default/local-s3`.
    fn start_s3(
        &mut self,
        s3: &super::s3::S3Binary,
        port: u16,
        kubectl: &Path,
        kubeconfig: &Path,
    ) -> Result<()> {
        let data = self.dir().join("s3");
        if data.exists() {
            fs::remove_dir_all(&data).with_context(|| format!("removing {}", data.display()))?;
        }
        fs::create_dir_all(data.join(super::s3::BUCKET))?;
        let credentials = super::s3::Credentials::generate()?;
        let args = super::s3::server_args(port, &data);
        self.start_with_env(
            "s3",
            s3.path(),
            args,
            &credentials.server_env(),
            &[("s3", port)],
        )?;
        self.wait("s3", Duration::from_secs(60), |_| port_open(port))?;
        run_kubectl(
            kubectl,
            kubeconfig,
            &["apply", "-f", "-"],
            Some(&super::s3::secret_manifest(port, &credentials)),
        )
        .context("writing the S3 Secret")?;
        self.progress.step(format!(
            "S3 server on http://127.0.0.1:{port}, bucket {}, Secret {}/{}",
            super::s3::BUCKET,
            super::s3::SECRET_NAMESPACE,
            super::s3::SECRET_NAME
        ));
        Ok(())
    }

    fn write_kubeconfigs(&self) -> Result<()> {
        let ca = fs::read_to_string(self.pki.ca_cert())?;
        for (stem, user, _) in pki::CLIENTS {
            let cert = fs::read_to_string(self.pki.client_cert(stem))?;
            let key = fs::read_to_string(self.pki.client_key(stem))?;
            let text = manifests::kubeconfig(&self.state.server, &ca, user, &cert, &key);
            let path = if *stem == "admin" {
                self.state.kubeconfig.clone()
            } else {
                self.dir().join(format!("{stem}.kubeconfig"))
            };
            fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    fn start(
        &mut self,
        name: &str,
        binary: PathBuf,
        args: Vec<String>,
        ports: &[(&str, u16)],
    ) -> Result<()> {
        self.start_with_env(name, binary, args, &[], ports)
    }

    fn start_with_env(
        &mut self,
        name: &str,
        binary: PathBuf,
        args: Vec<String>,
        env: &[(String, String)],
        ports: &[(&str, u16)],
    ) -> Result<()> {
        let log = self.dir().join("logs").join(format!("{name}.log"));
        let child = process::spawn(&binary, &args, env, &log)
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id();
        self.children.push((name.to_string(), child));
        self.state.components.push(ComponentState {
            name: name.to_string(),
            pid,
            binary,
            log,
            ports: ports.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            args,
        });
        self.state.save()?;
        let port_list: Vec<String> = ports.iter().map(|(k, v)| format!("{k} {v}")).collect();
        self.progress.step(if port_list.is_empty() {
            format!("started {name} (pid {pid})")
        } else {
            format!(
                "started {name} (pid {pid}, 127.0.0.1 ports: {})",
                port_list.join(", ")
            )
        });
        Ok(())
    }

    /// Polls `ready` until it holds; fails early when the component exits.
    fn wait(
        &mut self,
        name: &str,
        timeout: Duration,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> Result<()> {
        let started = Instant::now();
        loop {
            if ready(self) {
                self.progress.step(format!(
                    "{name} ready ({:.1}s)",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            let component = self
                .state
                .component(name)
                .ok_or_else(|| anyhow!("unknown component {name}"))?
                .clone();
            if let Some((_, child)) = self.children.iter_mut().find(|(n, _)| n == name)
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!(
                    "{name} exited ({status}) during startup; see {}. Last lines:\n{}",
                    component.log.display(),
                    process::tail(&component.log, 25)
                );
            }
            if started.elapsed() > timeout {
                bail!(
                    "{name} was not ready after {}s; see {}. Last lines:\n{}",
                    timeout.as_secs(),
                    component.log.display(),
                    process::tail(&component.log, 25)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops what was started and removes the state; logs stay.
    fn abort(&mut self) {
        stop_components(&self.state, &mut self.children);
        let _ = remove_state(&self.state.state_dir, &self.state.etcd_data_dir);
    }
}

/// True when every named node has condition Ready=True.
fn nodes_ready(kubectl: &Path, kubeconfig: &Path, nodes: &[String]) -> bool {
    let Ok(out) = run_kubectl(
        kubectl,
        kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ],
        None,
    ) else {
        return false;
    };
    let ready: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_suffix("=True"))
        .collect();
    nodes.iter().all(|n| ready.contains(&n.as_str()))
}

/// The xtask binary, which runs the node agent (`cluster node-agent`): this
/// process when it is xtask, else (a test binary in `target/<profile>/deps`)
/// the xtask binary cargo built beside it.
fn agent_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the running binary")?;
    if exe.file_stem().is_some_and(|s| s == "xtask") {
        return Ok(exe);
    }
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("xtask"))
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "process nodes need the xtask binary to run their agent; none at {} (build it with `cargo build -p xtask`)",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        })
}
