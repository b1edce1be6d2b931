//! `cargo xtask bench`: what the operator costs to run, measured on the local control plane.
//!
//! For each cluster count N (default 100 and 1,000; 50 with `--quick`), and `--repeat` times:
//! a fresh control plane (`target/bench-cluster`, limits relaxed, audit log of the operator's
//! user), the release operator as a process, N DatabaseClusters with their Secrets created at
//! once, the time until every one reports Running, a quiet period, and a churn of a tenth of the
//! clusters. Before that, the core's criterion benchmark of `plan()`.
//!
//! Output: `runs/<id>.json` per run, `plan-criterion.json`, `results.md` and SVG plots in the
//! output directory (`docs/performance/`, or `target/bench/` with `--quick`). The summary is
//! drawn from every JSON file in `runs/`, so runs of separate invocations add up; delete the
//! files of runs that should no longer count.
//!
//! # A product of its own: the benchmark suite
//!
//! **Boundary.** The suite runs on the local Kubernetes distribution through its public surface
//! ([`crate::cluster`]: `LocalCluster`, `UpOptions`, the audit log, the webhook and RBAC
//! objects) and builds with [`crate::cargo`]; it names nothing else of xtask (not the demo, the
//! e2e suite, `prebuild` or `timing`), which `xtask/tests/structure.rs` checks.
//!
//! **Public surface**: [`run()`] with [`BenchArgs`] (`cargo xtask bench`); for tools that read
//! results, the run file's format ([`result`]), the report ([`report`]: `load_runs`, `write`)
//! and one run ([`run::run_once`] with [`run::RunConfig`]).
//!
//! Inside: [`run`](mod@run) (one scale run, phase by phase), [`observe`] (the watches and the
//! sampler), [`operator`] (the operator under test as a process, its metrics and log),
//! [`requests`] (the audit log counted per phase), [`procfs`], [`pprof`], [`workload`],
//! [`criterion`], and the report with its [`plot`]s.

pub mod criterion;
pub mod observe;
pub mod operator;
pub mod plot;
pub mod pprof;
pub mod procfs;
pub mod report;
pub mod requests;
pub mod result;
pub mod run;
pub mod workload;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use jiff::Timestamp;

use crate::cluster::Progress;
use operator::Subject;
use report::CriterionRun;
use run::RunConfig;

/// Flags of `cargo xtask bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Cluster counts to run, e.g. `--clusters 100,1000` [default: 100 and 1000; 50 with
    /// --quick].
    #[arg(long, value_delimiter = ',', value_name = "N")]
    pub clusters: Vec<usize>,
    /// A short run anyone can do in under 5 minutes: 50 clusters, a 20 s quiet period, short
    /// criterion sampling (plan() only); results go to target/bench unless --out says otherwise.
    #[arg(long)]
    pub quick: bool,
    /// Runs per cluster count; the summary shows min / median / max over them.
    #[arg(long, default_value_t = 1, value_name = "R")]
    pub repeat: usize,
    /// Length of the quiet period after convergence [default: 120; 20 with --quick].
    #[arg(long, value_name = "SECS")]
    pub quiet_seconds: Option<u64>,
    /// Give up waiting for every cluster to be Running after this long [default: 60 + 2.5 s
    /// per cluster; on 2 CPUs 1,000 clusters needed more than 1,560 s].
    #[arg(long, value_name = "SECS")]
    pub converge_timeout: Option<u64>,
    /// Give up waiting for the churn to settle after this long [default: 60 + 0.5 s per
    /// cluster, at least 300].
    #[arg(long, value_name = "SECS")]
    pub churn_timeout: Option<u64>,
    /// The operator's --concurrency.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub concurrency: u16,
    /// The operator's --resync, seconds.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub resync: u64,
    /// One more flag for the operator's `run` (repeat for several), e.g.
    /// `--operator-arg=--debounce=200ms`; recorded with the run.
    #[arg(long = "operator-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub operator_args: Vec<String>,
    /// Our operator serves its admission webhook, registered by URL on 127.0.0.1, as the
    /// default installation runs it (the mutating webhook adds the finalizer on create, so the
    /// operator has no finalizer patch to make); `--webhook=false` for runs comparable with
    /// those before 2026-12-05, which ran without it. The seed design has no webhook.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub webhook: bool,
    /// Take CPU profiles of kube-apiserver, kube-controller-manager and kube-scheduler for
    /// this many seconds from the moment the workload is created (profiling turned on for the
    /// run; profiles and `go tool pprof -top` summaries in the run's scratch directory).
    #[arg(long, value_name = "SECS")]
    pub pprof_seconds: Option<u64>,
    /// Output directory [default: docs/performance; target/bench with --quick].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Skip the criterion benchmark of plan().
    #[arg(long)]
    pub no_criterion: bool,
    /// Only the criterion benchmark, no scale runs.
    #[arg(long, conflicts_with = "no_criterion")]
    pub criterion_only: bool,
    /// Only regenerate results.md and the plots from the JSON files already in the output
    /// directory.
    #[arg(long)]
    pub report_only: bool,
    /// State directory of the benchmark's control plane (stopped and recreated per run).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Which operator to measure: ours, or `seed-design` (the tutorial's design built with
    /// controller-runtime from `xtask/seed-design`, for the side-by-side comparison; its runs
    /// go to docs/performance/seed-design unless --out says otherwise).
    #[arg(long, value_enum, default_value_t = Subject::DatabaseOperator)]
    pub operator: Subject,
}

impl BenchArgs {
    fn cluster_counts(&self) -> Vec<usize> {
        if !self.clusters.is_empty() {
            self.clusters.clone()
        } else if self.quick {
            vec![50]
        } else {
            vec![100, 1000]
        }
    }

    fn out_dir(&self, root: &Path) -> PathBuf {
        match &self.out {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => root.join(dir),
            None if self.quick => root.join("target/bench"),
            None if self.operator == Subject::SeedDesign => {
                root.join("docs/performance/seed-design")
            }
            None => root.join("docs/performance"),
        }
    }
}

/// Runs the benchmark.
pub fn run(args: &BenchArgs, workspace_root: &Path) -> Result<()> {
    let progress = Progress::new(false);
    let out = args.out_dir(workspace_root);
    let counts = args.cluster_counts();
    if counts.contains(&0) {
        bail!("--clusters: every count must be at least 1");
    }
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    fs::create_dir_all(out.join("runs"))
        .with_context(|| format!("creating {}", out.join("runs").display()))?;
    let criterion_file = out.join(report::CRITERION_FILE);

    if !args.report_only {
        if !args.no_criterion {
            let load = procfs::load_average()?;
            let taken_at = Timestamp::now().to_string();
            let estimates = criterion::run(workspace_root, args.quick)?;
            let wanted: Vec<_> = estimates
                .into_iter()
                .filter(|e| !args.quick || e.id.starts_with("plan/"))
                .collect();
            let record = CriterionRun {
                taken_at,
                load_average_at_start: load,
                quick: args.quick,
                estimates: wanted,
            };
            fs::write(&criterion_file, serde_json::to_string_pretty(&record)?)?;
            for e in &record.estimates {
                progress.step(format!("{}: median {:.1} µs", e.id, e.median_ns / 1000.0));
            }
        }
        if !args.criterion_only {
            let operator_bin = match args.operator {
                Subject::DatabaseOperator => {
                    progress.step("building the operator (release)");
                    operator::build(workspace_root)?
                }
                Subject::SeedDesign => {
                    progress.step("building xtask/seed-design (go build)");
                    operator::build_seed_design(workspace_root)?
                }
            };
            let state_dir = args
                .state_dir
                .clone()
                .unwrap_or_else(|| workspace_root.join("target/bench-cluster"));
            for &n in &counts {
                for k in 0..args.repeat {
                    let cfg = RunConfig {
                        workspace_root: workspace_root.to_path_buf(),
                        subject: args.operator,
                        operator_bin: operator_bin.clone(),
                        scratch_root: workspace_root.join("target/bench/scratch"),
                        state_dir: state_dir.clone(),
                        clusters: n,
                        quiet: Duration::from_secs(args.quiet_seconds.unwrap_or(if args.quick {
                            20
                        } else {
                            120
                        })),
                        converge_timeout: Duration::from_secs(
                            args.converge_timeout
                                .unwrap_or(60 + (n as u64 * 5).div_ceil(2)),
                        ),
                        churn_timeout: Duration::from_secs(
                            args.churn_timeout.unwrap_or((60 + n as u64 / 2).max(300)),
                        ),
                        concurrency: args.concurrency,
                        resync_seconds: args.resync,
                        operator_args: args.operator_args.clone(),
                        webhook: args.webhook,
                        quick: args.quick,
                        pprof_seconds: args.pprof_seconds,
                    };
                    progress.step(format!(
                        "scale run {} of {} with {n} clusters",
                        k + 1,
                        args.repeat
                    ));
                    let result = run::run_once(&cfg, &progress).with_context(|| {
                        format!(
                            "scale run with {n} clusters (a control plane may be left in {}; \
                             `cargo xtask cluster down --state-dir {}` stops it)",
                            state_dir.display(),
                            state_dir.display()
                        )
                    })?;
                    let file = out.join("runs").join(format!("{}.json", result.id));
                    fs::write(&file, result::to_json(&result)?)
                        .with_context(|| format!("writing {}", file.display()))?;
                    progress.step(format!(
                        "{}: Running after {}, peak RSS {:.1} MiB ({:.1} anonymous at most), quiet writes {}, churn {}; wrote {}",
                        result.id,
                        result
                            .converge
                            .seconds
                            .map_or("timeout".to_string(), |s| format!("{s:.1}s")),
                        run::mib(result.operator_memory.peak_rss_bytes),
                        run::mib(result.operator_memory.peak_anon_bytes),
                        result.quiet.writes,
                        match (result.churn.seconds, result.converge.seconds) {
                            (Some(s), _) => format!("{s:.1}s"),
                            (None, None) => "skipped".to_string(),
                            (None, Some(_)) => "timeout".to_string(),
                        },
                        file.display()
                    ));
                }
            }
        }
    }

    let runs = report::load_runs(&out)?;
    let criterion = match fs::read_to_string(&criterion_file) {
        Ok(text) => Some(
            serde_json::from_str::<CriterionRun>(&text)
                .with_context(|| format!("parsing {}", criterion_file.display()))?,
        ),
        Err(_) => None,
    };
    report::write(&out, &runs, criterion.as_ref())?;
    progress.step(format!(
        "wrote {} ({} runs)",
        out.join(report::SUMMARY_FILE).display(),
        runs.len()
    ));
    Ok(())
}
