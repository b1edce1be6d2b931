//! One scale run: a fresh local control plane, the operator, N clusters created at once, the
//! quiet period, the churn, and what it all cost.
//!
//! [`run_once`] runs the phases in order (`phases`: startup, convergence, tail and quiet period,
//! churn, restart) while a `Recorder` marks the moments between them; `setup` holds what the
//! run does to the cluster (install, webhook, create, patch), `waiting` how it waits, `summary`
//! how the marks, samples and audit log become the [`RunResult`].

mod phases;
mod setup;
mod summary;
mod waiting;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::{ClusterGuard, LocalCluster, Progress, UpOptions, down_state_dir};
use anyhow::{Context, Result, bail};
use jiff::Timestamp;

use super::observe::{ClusterWatch, Sample, Sampler, WatchState};
use super::operator::{self, Launch, Operator, OperatorMetrics, OperatorSettings, Subject};
use super::pprof;
use super::procfs;
use super::requests;
use super::result::{RunResult, quantile_time};
use super::workload::{self, Churn, Expected, NAMESPACE};
use phases::{Churned, Converged, Reactions, churn, converge, quiet, restart_phase, startup};
use setup::{create_all, install, patch_all, register_webhook, webhook_serving};
use summary::rss_of;
use waiting::{restart, settled_count, shared_lock, shared_running, sleep_checking, wait_until};

/// Pods per fake node the run plans for. A fake node offers 32 CPUs and 110 pods; a database
/// pod requests 500m CPU by default, so CPU runs out first, at 64 pods.
const PODS_PER_NODE: f64 = 60.0;
/// How long after convergence the quiet period starts: the operator's last writes of the
/// burst (the status patch that reports Running, its event) land in this gap and are counted
/// apart.
const TAIL: Duration = Duration::from_secs(10);
/// Sampler name of the operator process started for the restart phase.
const RESTARTED: &str = "operator-restarted";
/// Sampling interval of memory and CPU.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Polling interval of the watch state.
const POLL: Duration = Duration::from_millis(250);

/// Flags added to the control plane for scale runs. These follow kwokctl's
/// `--disable-qps-limits`: without them the controller-manager (20 QPS) and the scheduler (50
/// QPS) throttle themselves, and the API server's in-flight limits (400 + 200) queue the burst,
/// so the run would measure those defaults instead of the operator.
pub fn relaxed_flags() -> BTreeMap<String, Vec<String>> {
    let v = |flags: &[&str]| flags.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    BTreeMap::from([
        (
            "kube-apiserver".to_string(),
            v(&[
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                "--enable-priority-and-fairness=false",
            ]),
        ),
        (
            "kube-controller-manager".to_string(),
            v(&[
                "--kube-api-qps=5000",
                "--kube-api-burst=10000",
                "--concurrent-statefulset-syncs=20",
            ]),
        ),
        (
            "kube-scheduler".to_string(),
            v(&["--kube-api-qps=5000", "--kube-api-burst=10000"]),
        ),
    ])
}

/// Records only the operator's requests, so that auditing does not load the API server with
/// the controllers' and kwok's traffic: its writes with their bodies (`Request`, to find writes
/// that repeat the one before, [`crate::cluster::audit::repeated_writes`]), Secrets and reads at
/// Metadata (a Secret's body would hold its values).
fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: Metadata
  users: [\"{user}\"]
  resources: [{{group: \"\", resources: [secrets]}}]
- level: Request
  users: [\"{user}\"]
  verbs: [create, update, patch, delete, deletecollection]
- level: Metadata
  users: [\"{user}\"]
- level: None
",
        user = operator::USER
    )
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The workspace.
    pub workspace_root: PathBuf,
    /// Which operator runs.
    pub subject: Subject,
    /// The release operator binary (of `subject`).
    pub operator_bin: PathBuf,
    /// Where logs and scratch files go (`target/bench/<id>`).
    pub scratch_root: PathBuf,
    /// State directory of the control plane.
    pub state_dir: PathBuf,
    /// Clusters to create.
    pub clusters: usize,
    /// Length of the quiet period.
    pub quiet: Duration,
    /// Convergence timeout.
    pub converge_timeout: Duration,
    /// Churn timeout.
    pub churn_timeout: Duration,
    /// `--concurrency` of the operator.
    pub concurrency: u16,
    /// `--resync` of the operator, seconds.
    pub resync_seconds: u64,
    /// More flags for the operator's `run`.
    pub operator_args: Vec<String>,
    /// Our operator serves its admission webhook, registered by URL as the default
    /// installation registers it (the mutating webhook adds the finalizer on create).
    pub webhook: bool,
    /// `--quick` run.
    pub quick: bool,
    /// CPU profiles of the control plane for this many seconds from the create
    /// ([`super::pprof`]).
    pub pprof_seconds: Option<u64>,
}

/// A named moment of the run.
#[derive(Debug, Clone)]
struct Mark {
    name: &'static str,
    wall: Timestamp,
    sample: Sample,
    /// `apiserver_request_total` per `verb resource` (empty when the scrape failed).
    apiserver: BTreeMap<String, f64>,
}

/// Runs once and returns the result (also when convergence or churn timed out: the result
/// says so).
pub fn run_once(cfg: &RunConfig, progress: &Progress) -> Result<RunResult> {
    let start = RunStart::new(cfg, progress)?;
    let nodes = nodes_for(cfg.clusters);
    let relaxed = relaxed_flags_of(cfg);
    let cluster = start_cluster(cfg, nodes, &relaxed)?;
    let scratch = start.scratch.clone();
    let user_kubeconfig = scratch.join("operator.kubeconfig");
    cluster.write_user_kubeconfig(&user_kubeconfig, operator::USER, &[])?;

    let epoch = Instant::now();
    let watch = ClusterWatch::start(
        cluster.kubectl_path(),
        cluster.kubeconfig().to_path_buf(),
        NAMESPACE,
        workload::REPLICAS as usize,
        epoch,
    )?;
    let shared = watch.shared();
    let sampler = start_sampler(&cluster, &watch, &shared, epoch)?;
    let mut rec = Recorder {
        cluster: &cluster,
        sampler: &sampler,
        shared: &shared,
        marks: Vec::new(),
        op_metrics: Vec::new(),
    };
    let (launch, mut op) = startup(
        cfg,
        &cluster,
        &scratch,
        &user_kubeconfig,
        &mut rec,
        progress,
    )?;
    let idle_rss = last_rss(&rec.marks);
    progress.step(format!(
        "operator ready (pid {}, RSS {:.1} MiB)",
        op.pid(),
        mib(idle_rss)
    ));
    let converged = converge(cfg, &cluster, &scratch, epoch, &mut op, &mut rec, progress)?;
    quiet(cfg, &mut op, &mut rec, progress)?;
    let churned = churn(cfg, &cluster, &converged, &mut op, &mut rec, progress)?;
    let running_at_end_of_converge = rec
        .marks
        .iter()
        .find(|m| m.name == "converged")
        .map_or(0, |m| m.sample.running);
    let (operator, restarted) = restart_phase(
        cfg,
        &launch,
        &user_kubeconfig,
        &scratch,
        op,
        &mut rec,
        progress,
    );
    let Recorder {
        marks, op_metrics, ..
    } = rec;
    let samples = sampler.finish();
    let reactions = Reactions::read(&shared_lock(&shared), converged.create_t);
    drop(watch);

    let phases = summary::phases(
        &cluster,
        &scratch,
        &marks,
        &op_metrics,
        restarted.as_ref().map(|(_, m)| m),
    )?;
    let state = cluster.state().clone();
    drop(cluster);
    for line in converged
        .profiles
        .as_deref()
        .map(pprof::summarize)
        .unwrap_or_default()
    {
        progress.step(format!("profile {line}"));
    }
    Ok(summary::result(
        cfg,
        summary::Measured {
            start,
            nodes,
            relaxed,
            state,
            operator,
            converged,
            reactions,
            churned,
            running_at_end_of_converge,
            idle_rss,
            marks,
            samples,
            phases,
            restarted,
        },
    ))
}

/// The run's name, start, load and scratch directory.
struct RunStart {
    id: String,
    started_at: Timestamp,
    load: [f64; 3],
    scratch: PathBuf,
}

impl RunStart {
    fn new(cfg: &RunConfig, progress: &Progress) -> Result<Self> {
        let load = procfs::load_average()?;
        let started_at = Timestamp::now();
        let id = format!(
            "n{}-{}{}",
            cfg.clusters,
            cfg.subject.id_infix(),
            started_at.strftime("%Y%m%dT%H%M%SZ")
        );
        let scratch = cfg.scratch_root.join(&id);
        fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        progress.step(format!(
            "run {id}: {} clusters, load average {:.2} {:.2} {:.2}, scratch {}",
            cfg.clusters,
            load[0],
            load[1],
            load[2],
            scratch.display()
        ));
        Ok(Self {
            id,
            started_at,
            load,
            scratch,
        })
    }
}

/// [`relaxed_flags`], and the profiling flag of the profiled components when profiles are
/// taken.
fn relaxed_flags_of(cfg: &RunConfig) -> BTreeMap<String, Vec<String>> {
    let mut relaxed = relaxed_flags();
    if cfg.pprof_seconds.is_some() {
        for component in pprof::PROFILED {
            relaxed
                .entry(component.to_string())
                .or_default()
                .push(pprof::FLAG.to_string());
        }
    }
    relaxed
}

/// A fresh control plane of `nodes` fake nodes with the `relaxed` flags and the operator's
/// audit policy, the CRD, RBAC and namespace installed.
fn start_cluster(
    cfg: &RunConfig,
    nodes: usize,
    relaxed: &BTreeMap<String, Vec<String>>,
) -> Result<ClusterGuard> {
    down_state_dir(&cfg.state_dir, true)?;
    let cluster = LocalCluster::up(&UpOptions {
        workspace_root: cfg.workspace_root.clone(),
        state_dir: Some(cfg.state_dir.clone()),
        audit_log: true,
        audit_policy: Some(audit_policy()),
        nodes,
        // The benchmark's pods all land on kwok nodes; no node agent watching every pod.
        process_nodes: 0,
        quiet: false,
        extra_apiserver_args: relaxed["kube-apiserver"].clone(),
        extra_controller_manager_args: relaxed["kube-controller-manager"].clone(),
        extra_scheduler_args: relaxed["kube-scheduler"].clone(),
    })?
    .into_guard();
    install(&cluster, &cfg.workspace_root, cfg.subject)?;
    Ok(cluster)
}

/// The sampler of the control plane's processes and of the benchmark's own observers, sampled
/// so that their cost is visible (not counted in the operator's share).
fn start_sampler(
    cluster: &LocalCluster,
    watch: &ClusterWatch,
    shared: &Arc<Mutex<WatchState>>,
    epoch: Instant,
) -> Result<Sampler> {
    let pids: Vec<(String, u32)> = cluster
        .state()
        .components
        .iter()
        .map(|c| (c.name.clone(), c.pid))
        .collect();
    let sampler = Sampler::start(pids, shared.clone(), epoch, SAMPLE_EVERY)?;
    let waited = Instant::now();
    while watch.pids().len() < 2 && waited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (name, pid) in ["bench-watch-clusters", "bench-watch-pods"]
        .iter()
        .zip(watch.pids())
    {
        sampler.track(name, pid);
    }
    Ok(sampler)
}

/// The operator's metrics at a mark, by the mark's name.
type MetricsAt = Vec<(&'static str, OperatorMetrics)>;

/// The restart phase's (seconds until ready, seconds until every cluster was reconciled) and
/// the new operator's metrics.
type Restarted = ((f64, Option<f64>), OperatorMetrics);

/// Marks the moments of a run: the time, a sample of every process, the API server's request
/// counters; and the operator's metrics at some of them.
struct Recorder<'a> {
    cluster: &'a LocalCluster,
    sampler: &'a Sampler,
    shared: &'a Arc<Mutex<WatchState>>,
    marks: Vec<Mark>,
    op_metrics: MetricsAt,
}

impl Recorder<'_> {
    fn mark(&mut self, name: &'static str) {
        let (wall, sample) = (Timestamp::now(), self.sampler.now(self.shared));
        let apiserver = self
            .cluster
            .kubectl_output(&["get", "--raw", "/metrics"])
            .map(|text| requests::parse_apiserver_requests(&text))
            .unwrap_or_default();
        self.marks.push(Mark {
            name,
            wall,
            sample,
            apiserver,
        });
    }

    /// Marks `name` and keeps the operator's metrics at that moment.
    fn mark_with_metrics(&mut self, name: &'static str, op: &Operator) -> Result<()> {
        self.mark(name);
        self.op_metrics.push((name, op.scrape()?));
        Ok(())
    }
}

/// p50, p90, p99 and p100 of sorted `times` out of `total` (a quantile never reached is left
/// out).
fn quantiles_of(sorted: &[f64], total: usize) -> BTreeMap<String, f64> {
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p100", 1.0)]
        .iter()
        .filter_map(|(k, f)| quantile_time(sorted, total, *f).map(|t| (k.to_string(), t)))
        .collect()
}

fn workspace_name(i: usize) -> String {
    workload::cluster_name(i)
}

/// Nodes for `clusters` clusters of 3 pods (a twentieth scaled to 5), at most
/// [`PODS_PER_NODE`] each, plus one.
pub fn nodes_for(clusters: usize) -> usize {
    let pods = clusters as f64 * (workload::REPLICAS as f64 + 0.2);
    ((pods / PODS_PER_NODE).ceil() as usize + 1).max(3)
}

fn last_rss(marks: &[Mark]) -> u64 {
    marks.last().map_or(0, |m| rss_of(&m.sample))
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::setup::SEED_DESIGN_RBAC;
    use super::*;

    #[test]
    fn the_seed_design_role_grants_what_its_controller_calls() {
        let text = format!("{SEED_DESIGN_RBAC}{}\n", operator::USER);
        let docs: Vec<serde_json::Value> = text
            .split("\n---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 2);
        let rules = docs[0]["rules"].as_array().unwrap();
        let grants = |resource: &str, verb: &str| {
            rules.iter().any(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == resource)
                    && r["verbs"].as_array().unwrap().iter().any(|x| x == verb)
            })
        };
        // Finalizer and status by Update, CreateOrUpdate = get + create/update.
        for (resource, verb) in [
            ("databaseclusters", "update"),
            ("databaseclusters/status", "update"),
            ("statefulsets", "get"),
            ("statefulsets", "update"),
            ("services", "update"),
            ("cronjobs", "update"),
            ("pods", "list"),
        ] {
            assert!(grants(resource, verb), "{resource} {verb}");
        }
        assert_eq!(docs[1]["subjects"][0]["name"], operator::USER);
        assert_eq!(docs[1]["roleRef"]["name"], docs[0]["metadata"]["name"]);
    }

    #[test]
    fn nodes_leave_room_for_every_pod() {
        assert_eq!(nodes_for(10), 3);
        for n in [10, 50, 100, 1000, 2000] {
            let nodes = nodes_for(n);
            // Every cluster scaled would be the worst case; a tenth is churned, half of it scaled.
            let pods = n * 3 + n.div_ceil(10) * 2;
            // 32 CPUs per node, 500m per pod; and 110 pods per node.
            assert!(nodes * 64 >= pods, "{n} clusters on {nodes} nodes: CPU");
            assert!(nodes * 110 >= pods, "{n} clusters on {nodes} nodes: pods");
        }
        assert!(nodes_for(1000) <= 60, "not wastefully many nodes");
    }

    #[test]
    fn relaxed_flags_name_each_component() {
        let flags = relaxed_flags();
        assert!(flags["kube-apiserver"].contains(&"--max-requests-inflight=0".to_string()));
        assert!(
            flags["kube-controller-manager"]
                .iter()
                .any(|f| f.starts_with("--kube-api-qps="))
        );
        assert!(
            flags["kube-scheduler"]
                .iter()
                .any(|f| f.starts_with("--kube-api-burst="))
        );
    }

    #[test]
    fn audit_policy_records_only_the_operator() {
        let p = audit_policy();
        assert!(p.contains("users: [\"database-operator\"]"));
        assert!(p.trim_end().ends_with("- level: None"));
    }
}
