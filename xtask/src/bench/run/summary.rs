//! What a run measured, summarised: the phases between its marks (CPU, the operator's requests
//! from the audit log, its metrics, its reconciles from its log), and the [`RunResult`].

use crate::cluster::{State, read_audit_log};

use super::super::procfs::Machine;
use super::super::requests::Window;
use super::super::result::{
    ChurnResult, ControlPlane, Converge, FORMAT, GitInfo, Memory, Phase, Quiet, ReconcileTimes,
    Restart, thin,
};
use super::*;

/// Everything [`run_once`] measured, for [`result`].
pub(super) struct Measured {
    pub(super) start: RunStart,
    pub(super) nodes: usize,
    pub(super) relaxed: BTreeMap<String, Vec<String>>,
    /// The control plane's state (versions), read before it went down.
    pub(super) state: State,
    /// The settings of the operator that ran last.
    pub(super) operator: OperatorSettings,
    pub(super) converged: Converged,
    pub(super) reactions: Reactions,
    pub(super) churned: Churned,
    pub(super) running_at_end_of_converge: usize,
    pub(super) idle_rss: u64,
    pub(super) marks: Vec<Mark>,
    pub(super) samples: Vec<Sample>,
    pub(super) phases: Vec<Phase>,
    pub(super) restarted: Option<Restarted>,
}

/// The phases between the marks: CPU per process, the operator's requests (from the audit log),
/// its metrics, the API server's request counters and the reconciles the operator logged.
pub(super) fn phases(
    cluster: &LocalCluster,
    scratch: &Path,
    marks: &[Mark],
    op_metrics: &MetricsAt,
    restarted: Option<&OperatorMetrics>,
) -> Result<Vec<Phase>> {
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
    let reconcile_times = |w: &Window| reconcile_times(&reconciles, w);
    let metric_at = |name: &str| {
        op_metrics
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    };
    Ok(phase_names
        .iter()
        .filter_map(|(phase, a, b)| {
            let (ma, mb) = (find(a)?, find(b)?);
            let operator_metrics = match *phase {
                "startup" => metric_at("ready"),
                "converge" => metric_at("converged").since(&metric_at("ready")),
                "tail" => metric_at("quiet-start").since(&metric_at("converged")),
                "quiet" => metric_at("quiet-end").since(&metric_at("quiet-start")),
                "churn" => metric_at("churned").since(&metric_at("quiet-end")),
                "restart" => restarted.cloned().unwrap_or_default(),
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
        .collect())
}

/// The durations of the reconciles logged in window `w`, with and without writes.
fn reconcile_times(reconciles: &[operator::LoggedReconcile], w: &Window) -> ReconcileTimes {
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
}

/// The run's result from what it measured.
pub(super) fn result(cfg: &RunConfig, m: Measured) -> RunResult {
    let find = |name: &str| m.marks.iter().find(|mark| mark.name == name);
    let quiet_end_rss = find("quiet-end").map_or(0, |mark| rss_of(&mark.sample));
    let converge = converge_result(cfg, &m);
    let quiet = quiet_result(&m.phases, quiet_end_rss);
    let churn = churn_result(cfg, &m.churned);
    let restart = restart_result(&m.phases, m.restarted.as_ref(), &m.samples);
    let operator_memory = memory(&m, quiet_end_rss);
    RunResult {
        format: FORMAT,
        id: m.start.id,
        started_at: m.start.started_at.to_string(),
        git: git_info(&cfg.workspace_root),
        machine: Machine::describe(),
        load_average_at_start: m.start.load,
        quick: cfg.quick,
        clusters: cfg.clusters,
        replicas: workload::REPLICAS,
        nodes: m.nodes,
        control_plane: control_plane(m.state, m.relaxed, m.nodes),
        operator: m.operator,
        converge,
        quiet,
        churn,
        restart,
        phases: m.phases,
        operator_memory,
        samples: thin(&m.samples, 600),
    }
}

/// The control plane's versions, relaxed flags, and what differs from a production one.
fn control_plane(
    state: State,
    relaxed: BTreeMap<String, Vec<String>>,
    nodes: usize,
) -> ControlPlane {
    ControlPlane {
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
    }
}

/// The convergence: how long, how many Running, the quantiles and the curve of Running
/// clusters until the quiet period.
fn converge_result(cfg: &RunConfig, m: &Measured) -> Converge {
    let create_t = m.converged.create_t;
    let curve_end = m
        .marks
        .iter()
        .find(|mark| mark.name == "quiet-start")
        .map_or(f64::INFINITY, |mark| mark.sample.t);
    let curve: Vec<(f64, usize)> = m
        .samples
        .iter()
        .filter(|s| s.t >= create_t && s.t <= curve_end)
        .map(|s| (s.t - create_t, s.running))
        .collect();
    let lags = &m.reactions.running_lags;
    Converge {
        submit_seconds: m.converged.submit_seconds,
        seconds: m.converged.seconds,
        timeout_seconds: cfg.converge_timeout.as_secs_f64(),
        running_at_end: m.running_at_end_of_converge,
        first_running_quantiles: quantiles_of(&m.reactions.first_running, cfg.clusters),
        running_lag_quantiles: quantiles_of(lags, lags.len()),
        slowest_reactions: m.reactions.slowest.clone(),
        curve: thin(&curve, 600),
    }
}

/// The quiet period: its length, the operator's requests, CPU and reconciles.
fn quiet_result(phases: &[Phase], quiet_end_rss: u64) -> Quiet {
    let quiet_phase = phases.iter().find(|p| p.name == "quiet");
    Quiet {
        seconds: quiet_phase.map_or(0.0, |p| p.end - p.start),
        writes: quiet_phase.map_or(0, |p| p.requests.writes),
        reads: quiet_phase.map_or(0, |p| p.requests.reads),
        operator_cpu_seconds: quiet_phase
            .and_then(|p| p.cpu_seconds.get("operator"))
            .copied()
            .unwrap_or(0.0),
        reconciles: quiet_phase.map_or(0.0, |p| p.operator_metrics.reconciles_total()),
        operator_rss_bytes: quiet_end_rss,
    }
}

/// The churn: how many clusters changed and how, and how long they took to settle.
fn churn_result(cfg: &RunConfig, churned: &Churned) -> ChurnResult {
    let plan = &churned.plan;
    let mut settle_sorted: Vec<f64> = churned.settle_times.values().copied().collect();
    settle_sorted.sort_by(f64::total_cmp);
    let scale_churn = plan.iter().filter(|(_, c)| *c == Churn::Scale).count();
    ChurnResult {
        clusters: plan.len(),
        scaled: scale_churn,
        resized: plan.len() - scale_churn,
        submit_seconds: churned.submit_seconds,
        seconds: churned.seconds,
        timeout_seconds: cfg.churn_timeout.as_secs_f64(),
        settled_at_end: churned.settled_at_end,
        settle_quantiles: quantiles_of(&settle_sorted, plan.len()),
    }
}

/// The restart phase, when it worked.
fn restart_result(
    phases: &[Phase],
    restarted: Option<&Restarted>,
    samples: &[Sample],
) -> Option<Restart> {
    phases
        .iter()
        .find(|p| p.name == "restart")
        .zip(restarted)
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
        )
}

/// The operator's memory: before any cluster, at its peak, at the end of the quiet period.
fn memory(m: &Measured, quiet_end_rss: u64) -> Memory {
    let find = |name: &str| m.marks.iter().find(|mark| mark.name == name);
    let operator_peak = |of: fn(&procfs::ProcSample) -> u64| {
        m.samples
            .iter()
            .filter_map(|s| s.procs.get("operator"))
            .map(of)
            .max()
            .unwrap_or(0)
    };
    Memory {
        idle_rss_bytes: m.idle_rss,
        peak_rss_bytes: operator_peak(|p| p.hwm_bytes),
        steady_rss_bytes: quiet_end_rss,
        idle_anon_bytes: find("ready").map_or(0, |mark| anon_of(&mark.sample)),
        peak_anon_bytes: operator_peak(|p| p.anon_bytes),
        steady_anon_bytes: find("quiet-end").map_or(0, |mark| anon_of(&mark.sample)),
    }
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

pub(super) fn rss_of(sample: &Sample) -> u64 {
    sample.procs.get("operator").map_or(0, |p| p.rss_bytes)
}

fn anon_of(sample: &Sample) -> u64 {
    sample.procs.get("operator").map_or(0, |p| p.anon_bytes)
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
