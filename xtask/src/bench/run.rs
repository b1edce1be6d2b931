//! One scale run: a fresh local control plane, the operator, N clusters created at once, the
//! quiet period, the churn, and what it all cost.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::{LocalCluster, Progress, UpOptions, down_state_dir, read_audit_log};
use anyhow::{Context, Result, bail};
use jiff::Timestamp;

use super::observe::{ClusterWatch, Sample, Sampler, WatchState};
use super::operator::{self, Launch, Operator, OperatorMetrics, Subject, WebhookServing};
use super::pprof;
use super::procfs::{self, Machine};
use super::requests::{self, Window};
use super::result::{
    ChurnResult, ControlPlane, Converge, FORMAT, GitInfo, Memory, Phase, Quiet, ReconcileTimes,
    Restart, RunResult, quantile_time, thin,
};
use super::workload::{self, Churn, Expected, NAMESPACE};

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

    let nodes = nodes_for(cfg.clusters);
    let mut relaxed = relaxed_flags();
    if cfg.pprof_seconds.is_some() {
        for component in pprof::PROFILED {
            relaxed
                .entry(component.to_string())
                .or_default()
                .push(pprof::FLAG.to_string());
        }
    }
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
    let pids: Vec<(String, u32)> = cluster
        .state()
        .components
        .iter()
        .map(|c| (c.name.clone(), c.pid))
        .collect();
    let sampler = Sampler::start(pids, shared.clone(), epoch, SAMPLE_EVERY)?;
    // The benchmark's own observers, sampled so that their cost is visible (not counted in the
    // operator's share).
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
    let mut marks: Vec<Mark> = Vec::new();
    let mark = |marks: &mut Vec<Mark>, name: &'static str| {
        let (wall, sample) = (Timestamp::now(), sampler.now(&shared));
        let apiserver = cluster
            .kubectl_output(&["get", "--raw", "/metrics"])
            .map(|text| requests::parse_apiserver_requests(&text))
            .unwrap_or_default();
        marks.push(Mark {
            name,
            wall,
            sample,
            apiserver,
        });
    };
    let mut op_metrics: Vec<(&'static str, OperatorMetrics)> = Vec::new();

    let webhook = if cfg.webhook && cfg.subject == Subject::DatabaseOperator {
        Some(webhook_serving(&cluster, &scratch)?)
    } else {
        None
    };

    // Startup: the operator lists and watches an empty namespace.
    mark(&mut marks, "start");
    let launch = Launch {
        subject: cfg.subject,
        bin: cfg.operator_bin.clone(),
        concurrency: cfg.concurrency,
        resync_seconds: cfg.resync_seconds,
        webhook,
        extra: cfg.operator_args.clone(),
    };
    let mut op = Operator::start(&launch, &user_kubeconfig, &scratch.join("operator.log"))?;
    sampler.track("operator", op.pid());
    if let Some(serving) = &launch.webhook {
        register_webhook(&cluster, serving)?;
        progress.step(format!(
            "webhooks registered at https://{}/validate and /mutate",
            serving.addr
        ));
    }
    std::thread::sleep(Duration::from_secs(2));
    mark(&mut marks, "ready");
    op_metrics.push(("ready", op.scrape()?));
    let idle_rss = last_rss(&marks);
    progress.step(format!(
        "operator ready (pid {}, RSS {:.1} MiB)",
        op.pid(),
        mib(idle_rss)
    ));

    // Converge.
    let expected: HashMap<String, Expected> = (0..cfg.clusters)
        .map(|i| (workspace_name(i), workload::initial(i)))
        .collect();
    let created = Instant::now();
    let create_t = epoch.elapsed().as_secs_f64();
    mark(&mut marks, "create");
    let profiles = match cfg.pprof_seconds {
        Some(seconds) => Some(pprof::Capture::start(
            &cluster,
            &scratch.join("pprof"),
            seconds,
        )?),
        None => None,
    };
    create_all(&cluster, &scratch, cfg.clusters)?;
    let submit_seconds = created.elapsed().as_secs_f64();
    progress.step(format!(
        "created {} Secrets and DatabaseClusters in {submit_seconds:.1}s; waiting for Running",
        cfg.clusters
    ));
    let converged = wait_until(
        &mut op,
        &shared,
        cfg.converge_timeout.saturating_sub(created.elapsed()),
        progress,
        "Running",
        cfg.clusters,
        |st| st.running(),
    )?;
    let converge_seconds = converged.then(|| created.elapsed().as_secs_f64());
    mark(&mut marks, "converged");
    op_metrics.push(("converged", op.scrape()?));
    match converge_seconds {
        Some(s) => progress.step(format!(
            "all {} clusters Running after {s:.1}s",
            cfg.clusters
        )),
        None => progress.step(format!(
            "timeout: {} of {} clusters Running after {:.0}s",
            shared_running(&shared),
            cfg.clusters,
            created.elapsed().as_secs_f64()
        )),
    }

    // The profiles end `--pprof-seconds` after the create; their summaries wait for the end
    // of the run.
    let profiles = profiles.map(pprof::Capture::finish);

    // Tail, then quiet.
    std::thread::sleep(TAIL);
    mark(&mut marks, "quiet-start");
    op_metrics.push(("quiet-start", op.scrape()?));
    progress.step(format!(
        "quiet period: {}s without changes",
        cfg.quiet.as_secs()
    ));
    sleep_checking(&mut op, cfg.quiet)?;
    mark(&mut marks, "quiet-end");
    op_metrics.push(("quiet-end", op.scrape()?));

    // Churn, only on a converged set: changing clusters that never became Running measures
    // nothing.
    let plan = if converged {
        workload::churn_plan(cfg.clusters)
    } else {
        progress.step("skipping the churn: convergence did not finish");
        Vec::new()
    };
    let mut churn_expected = expected.clone();
    let churned: Vec<String> = plan.iter().map(|(i, _)| workspace_name(*i)).collect();
    for (i, churn) in &plan {
        churn_expected.insert(workspace_name(*i), workload::churn_patch(*i, *churn).1);
    }
    mark(&mut marks, "churn");
    let churn_started = Instant::now();
    patch_all(&cluster, &plan)?;
    let churn_submit = churn_started.elapsed().as_secs_f64();
    progress.step(format!(
        "patched {} clusters in {churn_submit:.1}s; waiting for them to settle",
        plan.len()
    ));
    let mut settle_times: HashMap<String, f64> = HashMap::new();
    let settled = !plan.is_empty() && {
        let expected = churn_expected.clone();
        let churned = churned.clone();
        wait_until(
            &mut op,
            &shared,
            cfg.churn_timeout,
            progress,
            "settled",
            churned.len(),
            |st| {
                for name in &churned {
                    if !settle_times.contains_key(name)
                        && let (Some(seen), Some(want)) =
                            (st.clusters.get(name), expected.get(name))
                        && seen.settled(want)
                    {
                        settle_times.insert(name.clone(), churn_started.elapsed().as_secs_f64());
                    }
                }
                settled_count(st, &churned, &expected, true)
            },
        )?
    };
    let churn_seconds = settled.then(|| churn_started.elapsed().as_secs_f64());
    mark(&mut marks, "churned");
    op_metrics.push(("churned", op.scrape()?));
    match churn_seconds {
        Some(s) => progress.step(format!("churn settled after {s:.1}s")),
        None if plan.is_empty() => {}
        None => progress.step("timeout: churn did not settle"),
    }
    let settled_at_end = settled_count(&shared_lock(&shared), &churned, &churn_expected, false);
    let running_at_end_of_converge = marks
        .iter()
        .find(|m| m.name == "converged")
        .map_or(0, |m| m.sample.running);

    // Restart: a new operator process finds every cluster in place, as after a rollout of the
    // operator or a lost lease. It lists every watch, reconciles every cluster once, and must
    // write nothing. A failure here is reported and leaves the phase out; the run's other
    // results stand.
    mark(&mut marks, "restart");
    op.stop(Duration::from_secs(25));
    let restarted = restart(cfg, &launch, &user_kubeconfig, &scratch, &sampler, progress);
    mark(&mut marks, "restarted");
    let restarted = match restarted {
        Ok((new_op, timing)) => {
            op = new_op;
            let metrics = op.scrape().unwrap_or_default();
            Some((timing, metrics))
        }
        Err(e) => {
            progress.step(format!("restart phase failed, left out of the run: {e:#}"));
            None
        }
    };
    op.stop(Duration::from_secs(25));
    mark(&mut marks, "end");
    let samples = sampler.finish();
    let (running_lags, first_running, slowest_reactions) = {
        let st = shared_lock(&shared);
        let lags = st.running_lags();
        let slowest: Vec<(String, f64, f64)> = st
            .slowest_reactions(10)
            .into_iter()
            .map(|(c, lag, at)| (c, lag, at - create_t))
            .collect();
        let mut v: Vec<f64> = st
            .first_running
            .values()
            .map(|t| t - create_t)
            .filter(|t| *t >= 0.0)
            .collect();
        v.sort_by(f64::total_cmp);
        (lags, v, slowest)
    };
    drop(watch);

    // Requests from the audit log.
    let audit_path = cluster
        .audit_log()
        .context("the cluster has no audit log")?
        .to_path_buf();
    let events = read_audit_log(&audit_path)?;
    let phase_names = [
        ("startup", "start", "create"),
        ("converge", "create", "converged"),
        ("tail", "converged", "quiet-start"),
        ("quiet", "quiet-start", "quiet-end"),
        ("churn", "churn", "churned"),
        ("restart", "restart", "restarted"),
    ];
    let find = |name: &str| marks.iter().find(|m| m.name == name);
    let windows: Vec<Window> = phase_names
        .iter()
        .filter_map(|(phase, a, b)| {
            Some(Window {
                name: phase.to_string(),
                start: find(a)?.wall,
                end: find(b)?.wall,
            })
        })
        .collect();
    let mut counts = requests::count_by_window(&events, operator::USER, &windows)?;
    let reconciles =
        operator::logged_reconciles(&fs::read_to_string(scratch.join("operator.log"))?);
    let reconcile_times = |w: &Window| {
        let mut with: Vec<f64> = Vec::new();
        let mut without: Vec<f64> = Vec::new();
        for r in reconciles
            .iter()
            .filter(|r| w.start <= r.at && r.at < w.end)
        {
            if r.writes > 0 {
                with.push(r.elapsed_ms);
            } else {
                without.push(r.elapsed_ms);
            }
        }
        with.sort_by(f64::total_cmp);
        without.sort_by(f64::total_cmp);
        ReconcileTimes {
            with_writes: with.len(),
            with_writes_ms: quantiles_of(&with, with.len()),
            without_writes: without.len(),
            without_writes_ms: quantiles_of(&without, without.len()),
        }
    };
    let metric_at = |name: &str| {
        op_metrics
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    };
    let phases: Vec<Phase> = phase_names
        .iter()
        .filter_map(|(phase, a, b)| {
            let (ma, mb) = (find(a)?, find(b)?);
            let operator_metrics = match *phase {
                "startup" => metric_at("ready"),
                "converge" => metric_at("converged").since(&metric_at("ready")),
                "tail" => metric_at("quiet-start").since(&metric_at("converged")),
                "quiet" => metric_at("quiet-end").since(&metric_at("quiet-start")),
                "churn" => metric_at("churned").since(&metric_at("quiet-end")),
                "restart" => restarted
                    .as_ref()
                    .map(|(_, m)| m.clone())
                    .unwrap_or_default(),
                _ => OperatorMetrics::default(),
            };
            Some(Phase {
                name: phase.to_string(),
                start: ma.sample.t,
                end: mb.sample.t,
                start_at: ma.wall.to_string(),
                end_at: mb.wall.to_string(),
                cpu_seconds: cpu_between(&ma.sample, &mb.sample),
                requests: counts.remove(*phase).unwrap_or_default(),
                operator_metrics,
                apiserver_requests: requests::delta(&mb.apiserver, &ma.apiserver),
                reconcile_times: windows
                    .iter()
                    .find(|w| w.name == *phase)
                    .map(reconcile_times)
                    .unwrap_or_default(),
            })
        })
        .collect();

    let quiet_phase = phases.iter().find(|p| p.name == "quiet");
    let quiet_end_rss = find("quiet-end").map_or(0, |m| rss_of(&m.sample));
    let quiet_end_anon = find("quiet-end").map_or(0, |m| anon_of(&m.sample));
    let idle_anon = find("ready").map_or(0, |m| anon_of(&m.sample));
    let operator_peak = |of: fn(&procfs::ProcSample) -> u64| {
        samples
            .iter()
            .filter_map(|s| s.procs.get("operator"))
            .map(of)
            .max()
            .unwrap_or(0)
    };
    let peak_anon = operator_peak(|p| p.anon_bytes);
    let peak_rss = operator_peak(|p| p.hwm_bytes);
    let curve_end = find("quiet-start").map_or(f64::INFINITY, |m| m.sample.t);
    let curve: Vec<(f64, usize)> = samples
        .iter()
        .filter(|s| s.t >= create_t && s.t <= curve_end)
        .map(|s| (s.t - create_t, s.running))
        .collect();
    let quantiles = quantiles_of(&first_running, cfg.clusters);
    let lag_quantiles = quantiles_of(&running_lags, running_lags.len());
    let mut settle_sorted: Vec<f64> = settle_times.values().copied().collect();
    settle_sorted.sort_by(f64::total_cmp);
    let settle_quantiles = quantiles_of(&settle_sorted, plan.len());

    let restart = phases
        .iter()
        .find(|p| p.name == "restart")
        .zip(restarted.as_ref())
        .map(
            |(p, ((ready_seconds, reconciled_all_seconds), metrics))| Restart {
                ready_seconds: *ready_seconds,
                reconciled_all_seconds: *reconciled_all_seconds,
                seconds: p.end - p.start,
                reconciles: metrics.reconciles_total(),
                writes: p.requests.writes,
                reads: p.requests.reads,
                operator_cpu_seconds: p.cpu_seconds.get(RESTARTED).copied().unwrap_or(0.0),
                peak_rss_bytes: samples
                    .iter()
                    .filter_map(|s| s.procs.get(RESTARTED))
                    .map(|p| p.hwm_bytes)
                    .max()
                    .unwrap_or(0),
            },
        );

    let state = cluster.state().clone();
    drop(cluster);
    for line in profiles
        .as_deref()
        .map(pprof::summarize)
        .unwrap_or_default()
    {
        progress.step(format!("profile {line}"));
    }
    let scale_churn = plan.iter().filter(|(_, c)| *c == Churn::Scale).count();
    Ok(RunResult {
        format: FORMAT,
        id,
        started_at: started_at.to_string(),
        git: git_info(&cfg.workspace_root),
        machine: Machine::describe(),
        load_average_at_start: load,
        quick: cfg.quick,
        clusters: cfg.clusters,
        replicas: workload::REPLICAS,
        nodes,
        control_plane: ControlPlane {
            kubernetes: state.kubernetes_version,
            etcd: state.etcd_version,
            kwok: state.kwok_version,
            relaxed,
            notes: vec![
                "etcd data on tmpfs (/dev/shm) with --unsafe-no-fsync: disk is not measured"
                    .to_string(),
                format!(
                    "audit log (blocking mode) records only user {} at Metadata level",
                    operator::USER
                ),
                "kwok talks to the API server without a client-side rate limit (its default)"
                    .to_string(),
                format!(
                    "{nodes} fake nodes of 32 CPUs and 110 pods each; a database pod requests \
                     500m CPU by default, so 64 fit on a node"
                ),
            ],
        },
        operator: op.settings.clone(),
        converge: Converge {
            submit_seconds,
            seconds: converge_seconds,
            timeout_seconds: cfg.converge_timeout.as_secs_f64(),
            running_at_end: running_at_end_of_converge,
            first_running_quantiles: quantiles,
            running_lag_quantiles: lag_quantiles,
            slowest_reactions,
            curve: thin(&curve, 600),
        },
        quiet: Quiet {
            seconds: quiet_phase.map_or(0.0, |p| p.end - p.start),
            writes: quiet_phase.map_or(0, |p| p.requests.writes),
            reads: quiet_phase.map_or(0, |p| p.requests.reads),
            operator_cpu_seconds: quiet_phase
                .and_then(|p| p.cpu_seconds.get("operator"))
                .copied()
                .unwrap_or(0.0),
            reconciles: quiet_phase.map_or(0.0, |p| p.operator_metrics.reconciles_total()),
            operator_rss_bytes: quiet_end_rss,
        },
        churn: ChurnResult {
            clusters: plan.len(),
            scaled: scale_churn,
            resized: plan.len() - scale_churn,
            submit_seconds: churn_submit,
            seconds: churn_seconds,
            timeout_seconds: cfg.churn_timeout.as_secs_f64(),
            settled_at_end,
            settle_quantiles,
        },
        restart,
        phases,
        operator_memory: Memory {
            idle_rss_bytes: idle_rss,
            peak_rss_bytes: peak_rss,
            steady_rss_bytes: quiet_end_rss,
            idle_anon_bytes: idle_anon,
            peak_anon_bytes: peak_anon,
            steady_anon_bytes: quiet_end_anon,
        },
        samples: thin(&samples, 600),
    })
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

/// What the seed design's kubebuilder markers grant (get and update besides our verbs),
/// bound to the same user as ours so that the audit log counts both alike.
const SEED_DESIGN_RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: seed-design-bench
rules:
  - apiGroups: [\"database.example.com\"]
    resources: [\"databaseclusters\", \"databaseclusters/status\", \"databaseclusters/finalizers\"]
    verbs: [\"get\", \"list\", \"watch\", \"update\", \"patch\"]
  - apiGroups: [\"apps\"]
    resources: [\"statefulsets\"]
    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]
  - apiGroups: [\"\"]
    resources: [\"services\", \"configmaps\", \"secrets\", \"persistentvolumeclaims\"]
    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]
  - apiGroups: [\"\"]
    resources: [\"pods\"]
    verbs: [\"get\", \"list\", \"watch\"]
  - apiGroups: [\"batch\"]
    resources: [\"cronjobs\"]
    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: seed-design-bench
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: seed-design-bench
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: ";

/// The CRD, the ClusterRole and its binding to the operator's user, the namespace.
fn install(cluster: &LocalCluster, workspace_root: &Path, subject: Subject) -> Result<()> {
    let crd = workspace_root
        .join("deploy/crds")
        .join(database_operator_api::crd::CRD_FILE_NAME);
    let role = workspace_root.join("deploy/rbac/cluster_role.yaml");
    for file in [&crd, &role] {
        cluster
            .kubectl_output(&["apply", "-f", &file.to_string_lossy()])
            .with_context(|| format!("applying {}", file.display()))?;
    }
    cluster.apply(&crate::cluster::operator_user_binding(
        "database-operator-bench",
    ))?;
    if subject == Subject::SeedDesign {
        cluster.apply(&format!("{SEED_DESIGN_RBAC}{}\n", operator::USER))?;
    }
    cluster.apply(&workload::namespace_manifest())?;
    cluster.kubectl_output(&[
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "customresourcedefinition/databaseclusters.database.example.com",
    ])?;
    Ok(())
}

/// A serving certificate for 127.0.0.1 from the cluster CA in `scratch/webhook-certs`, and a
/// free port: where the operator serves its webhook (the restarted process reuses both).
fn webhook_serving(cluster: &LocalCluster, scratch: &Path) -> Result<WebhookServing> {
    let cert_dir = scratch.join("webhook-certs");
    cluster.write_webhook_cert(&cert_dir)?;
    let port = crate::cluster::free_ports(1)?[0];
    Ok(WebhookServing {
        addr: format!("127.0.0.1:{port}"),
        cert_dir,
    })
}

/// Registers the operator's webhooks by URL for the benchmark's namespace and waits until the
/// API server calls them: a server-side dry run of a cluster comes back with the finalizer the
/// mutating webhook adds.
fn register_webhook(cluster: &LocalCluster, serving: &WebhookServing) -> Result<()> {
    cluster.apply(&crate::cluster::webhook_registrations(
        "database-operator-bench",
        &serving.addr,
        &cluster.ca_pem()?,
        NAMESPACE,
    ))?;
    let probe = scratch_cluster_manifest();
    let waited = Instant::now();
    loop {
        let out = cluster.kubectl_with_input(
            &[
                "create",
                "--dry-run=server",
                "-o",
                "jsonpath={.metadata.finalizers}",
                "-f",
                "-",
            ],
            &probe,
        );
        if let Ok(text) = &out
            && text.contains(database_operator_api::FINALIZER)
        {
            return Ok(());
        }
        if waited.elapsed() > Duration::from_secs(60) {
            bail!("the API server did not call the operator's webhook within 60 s: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The first workload cluster without its Secret, for a dry run.
fn scratch_cluster_manifest() -> String {
    workload::cluster_manifest(0)
        .split("\n---\n")
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// Creates every Secret and cluster with a few `kubectl create` processes at once.
fn create_all(cluster: &LocalCluster, scratch: &Path, clusters: usize) -> Result<()> {
    let chunks = (clusters / 100).clamp(1, 4);
    let mut children: Vec<(PathBuf, Child)> = Vec::new();
    for k in 0..chunks {
        let mut text = String::new();
        for i in (k..clusters).step_by(chunks) {
            text.push_str(&workload::cluster_manifest(i));
        }
        let file = scratch.join(format!("objects-{k}.yaml"));
        fs::write(&file, text)?;
        let child = cluster
            .kubectl()
            .args(["create", "-f", &file.to_string_lossy(), "-o", "name"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kubectl create")?;
        children.push((file, child));
    }
    for (file, child) in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl create -f {} failed: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

/// One `kubectl patch` per kind of change and engine, all at once.
fn patch_all(cluster: &LocalCluster, plan: &[(usize, Churn)]) -> Result<()> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, churn) in plan {
        let (patch, _) = workload::churn_patch(*i, *churn);
        groups.entry(patch).or_default().push(workspace_name(*i));
    }
    let mut children = Vec::new();
    for (patch, names) in &groups {
        let mut cmd = cluster.kubectl();
        cmd.args(["patch", "databaseclusters", "--namespace", NAMESPACE])
            .args(names)
            .args(["--type=merge", "-p", patch])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        children.push((patch.clone(), cmd.spawn().context("running kubectl patch")?));
    }
    for (patch, child) in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl patch {patch} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

fn shared_lock(shared: &Arc<Mutex<WatchState>>) -> std::sync::MutexGuard<'_, WatchState> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

fn shared_running(shared: &Arc<Mutex<WatchState>>) -> usize {
    shared_lock(shared).running()
}

/// Churned clusters settled on their new spec; with `all_running`, 0 unless every cluster is
/// Running as well.
fn settled_count(
    st: &WatchState,
    churned: &[String],
    expected: &HashMap<String, Expected>,
    all_running: bool,
) -> usize {
    if all_running && st.running() < expected.len() {
        return 0;
    }
    churned
        .iter()
        .filter(|name| {
            matches!(
                (st.clusters.get(*name), expected.get(*name)),
                (Some(seen), Some(want)) if seen.settled(want)
            )
        })
        .count()
}

/// Polls until `count(state) >= target`, printing progress every 10 s; false on timeout.
fn wait_until(
    op: &mut Operator,
    shared: &Arc<Mutex<WatchState>>,
    timeout: Duration,
    progress: &Progress,
    what: &str,
    target: usize,
    mut count: impl FnMut(&WatchState) -> usize,
) -> Result<bool> {
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let n = count(&shared_lock(shared));
        if n >= target {
            return Ok(true);
        }
        op.check_alive()?;
        if started.elapsed() >= timeout {
            return Ok(false);
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            progress.step(format!(
                "  {n}/{target} {what} after {:.0}s",
                started.elapsed().as_secs_f64()
            ));
            last_report = Instant::now();
        }
        std::thread::sleep(POLL);
    }
}

/// Starts a second operator process and watches it until it has reconciled every cluster once,
/// plus a tail. Returns it (still running) with the seconds until ready and until every cluster
/// was reconciled (`None` when that did not happen within the wait).
fn restart(
    cfg: &RunConfig,
    launch: &Launch,
    kubeconfig: &Path,
    scratch: &Path,
    sampler: &Sampler,
    progress: &Progress,
) -> Result<(Operator, (f64, Option<f64>))> {
    let started = Instant::now();
    let mut op = Operator::start(launch, kubeconfig, &scratch.join("operator-restarted.log"))?;
    let ready_seconds = started.elapsed().as_secs_f64();
    sampler.track(RESTARTED, op.pid());
    progress.step(format!(
        "operator restarted (pid {}), ready after {ready_seconds:.1}s; waiting for a reconcile \
         of every cluster",
        op.pid()
    ));
    let until = Instant::now() + cfg.converge_timeout.min(Duration::from_secs(600));
    let reconciled_all = loop {
        op.check_alive()?;
        if op.scrape()?.reconciles_total() >= cfg.clusters as f64 {
            break Some(started.elapsed().as_secs_f64());
        }
        if Instant::now() >= until {
            break None;
        }
        std::thread::sleep(POLL);
    };
    sleep_checking(&mut op, TAIL)?;
    Ok((op, (ready_seconds, reconciled_all)))
}

fn sleep_checking(op: &mut Operator, d: Duration) -> Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        op.check_alive()?;
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
    Ok(())
}

fn cpu_between(a: &Sample, b: &Sample) -> BTreeMap<String, f64> {
    b.procs
        .iter()
        .map(|(name, end)| {
            let start = a.procs.get(name).map_or(0.0, |s| s.cpu_seconds);
            (
                name.clone(),
                ((end.cpu_seconds - start) * 100.0).round() / 100.0,
            )
        })
        .collect()
}

fn rss_of(sample: &Sample) -> u64 {
    sample.procs.get("operator").map_or(0, |p| p.rss_bytes)
}

fn anon_of(sample: &Sample) -> u64 {
    sample.procs.get("operator").map_or(0, |p| p.anon_bytes)
}

fn last_rss(marks: &[Mark]) -> u64 {
    marks.last().map_or(0, |m| rss_of(&m.sample))
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn git_info(root: &Path) -> GitInfo {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .current_dir(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    GitInfo {
        commit: git(&["rev-parse", "HEAD"]).unwrap_or_default(),
        dirty: git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty()),
    }
}

#[cfg(test)]
mod tests {
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
