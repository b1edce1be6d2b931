//! A local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok (fake nodes).
//!
//! Here: the options, the state file and [`LocalCluster`]; `starter` starts the components in
//! order, `teardown` stops them and removes the state, `kubectl` runs kubectl against the
//! cluster.

mod kubectl;
mod starter;
mod teardown;

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

use kubectl::{api_ready, kubectl_command, run_kubectl};
use starter::Starter;
pub use teardown::down_state_dir;
use teardown::{remove_state, stop_components};

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
