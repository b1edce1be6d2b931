//! The markdown summary and the plots, drawn from every run's JSON file.

mod summary;
mod tables;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use super::criterion::Estimate;
use super::operator::Subject;
use super::plot::{self, Series};
use super::result::{Restart, RunResult, Spread};
use super::run::mib;
use summary::summary_table;
use tables::{all_clients_table, budgets, request_table, runs_table};

/// Where the criterion numbers are kept, relative to the output directory.
pub const CRITERION_FILE: &str = "plan-criterion.json";
/// The generated summary, relative to the output directory.
pub const SUMMARY_FILE: &str = "results.md";

/// The criterion run as stored next to the scale runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CriterionRun {
    /// UTC, RFC 3339.
    pub taken_at: String,
    /// Load average when it started.
    pub load_average_at_start: [f64; 3],
    /// Shorter sampling (`--quick`).
    pub quick: bool,
    /// The estimates.
    pub estimates: Vec<Estimate>,
}

/// Reads every `runs/*.json` under `out`, oldest first.
pub fn load_runs(out: &Path) -> Result<Vec<RunResult>> {
    let dir = out.join("runs");
    let mut runs = Vec::new();
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(runs);
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            match serde_json::from_str::<RunResult>(&text) {
                Ok(run) => runs.push(run),
                // A run written by an earlier layout of this file (or a damaged one) must not
                // cost the run that just finished its report: left out, and said so.
                Err(e) => eprintln!(
                    "warning: leaving {} out of the report: it does not parse as a run of this \
                     version ({e}); delete it or move it away",
                    path.display()
                ),
            }
        }
    }
    runs.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    Ok(runs)
}

/// Writes `results.md` and the SVG plots into `out` from `runs` and the criterion numbers.
pub fn write(out: &Path, runs: &[RunResult], criterion: Option<&CriterionRun>) -> Result<()> {
    fs::create_dir_all(out)?;
    let by_n = group(runs);
    let mut plots = Vec::new();
    for (n, group) in &by_n {
        for (file, svg) in plots_for(*n, group)? {
            fs::write(out.join(&file), svg)?;
            plots.push((*n, file));
        }
    }
    let text = markdown(&by_n, criterion, &plots, &guide_link(out));
    fs::write(out.join(SUMMARY_FILE), text)
        .with_context(|| format!("writing {}", out.join(SUMMARY_FILE).display()))
}

/// The relative link from `out` to `docs/performance.md`: the first ancestor of `out` that
/// holds `performance.md` (outputs live under `docs/performance/`, some a level deeper).
fn guide_link(out: &Path) -> String {
    let mut up = String::new();
    for dir in out.ancestors().skip(1) {
        up.push_str("../");
        if dir.join("performance.md").is_file() {
            return format!("{up}performance.md");
        }
    }
    "../performance.md".to_string()
}

fn group(runs: &[RunResult]) -> BTreeMap<usize, Vec<&RunResult>> {
    let mut by_n: BTreeMap<usize, Vec<&RunResult>> = BTreeMap::new();
    for r in runs {
        by_n.entry(r.clusters).or_default().push(r);
    }
    by_n
}

fn plots_for(n: usize, runs: &[&RunResult]) -> Result<Vec<(String, String)>> {
    let curves: Vec<Series> = runs
        .iter()
        .enumerate()
        .map(|(k, r)| Series {
            name: format!("run {} ({})", k + 1, short_time(&r.started_at)),
            points: r
                .converge
                .curve
                .iter()
                .map(|(t, c)| (*t, *c as f64))
                .collect(),
        })
        .collect();
    let converge = plot::line_chart(
        &format!("{n} DatabaseClusters created at once: clusters Running"),
        "seconds since the first create",
        "clusters Running",
        &curves,
        plot::Legend::LowerRight,
    )?;
    let Some(median) = median_run(runs) else {
        return Ok(vec![(format!("convergence-n{n}.svg"), converge)]);
    };
    // Cumulative CPU per process and operator RSS over the whole median run.
    let start = median.samples.first().map_or(0.0, |s| s.t);
    let mut names: Vec<&str> = vec!["operator", "kube-apiserver", "etcd"];
    for extra in ["kube-controller-manager", "kube-scheduler", "kwok"] {
        names.push(extra);
    }
    let cpu_series: Vec<Series> = names
        .iter()
        .map(|name| {
            let base = median
                .samples
                .iter()
                .find_map(|s| s.procs.get(*name))
                .map_or(0.0, |p| p.cpu_seconds);
            Series {
                name: name.to_string(),
                points: median
                    .samples
                    .iter()
                    .filter_map(|s| {
                        s.procs
                            .get(*name)
                            .map(|p| (s.t - start, p.cpu_seconds - base))
                    })
                    .collect(),
            }
        })
        .collect();
    let cpu = plot::line_chart(
        &format!(
            "{n} clusters: CPU seconds used since the run started (run {})",
            median.id
        ),
        "seconds since the run started",
        "CPU seconds (cumulative)",
        &cpu_series,
        plot::Legend::UpperLeft,
    )?;
    let rss = plot::line_chart(
        &format!("{n} clusters: operator resident memory (run {})", median.id),
        "seconds since the run started",
        "RSS (MiB)",
        &[Series {
            name: "operator RSS".into(),
            points: median
                .samples
                .iter()
                .filter_map(|s| {
                    s.procs
                        .get("operator")
                        .map(|p| (s.t - start, mib(p.rss_bytes)))
                })
                .collect(),
        }],
        plot::Legend::LowerRight,
    )?;
    Ok(vec![
        (format!("convergence-n{n}.svg"), converge),
        (format!("cpu-n{n}.svg"), cpu),
        (format!("operator-rss-n{n}.svg"), rss),
    ])
}

/// The run whose convergence time is the median (timeouts count as slowest).
pub fn median_run<'a>(runs: &[&'a RunResult]) -> Option<&'a RunResult> {
    let mut sorted: Vec<&RunResult> = runs.to_vec();
    sorted.sort_by(|a, b| {
        let key = |r: &RunResult| r.converge.seconds.unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

fn short_time(rfc3339: &str) -> String {
    rfc3339.get(..16).unwrap_or(rfc3339).replace('T', " ")
}

/// The median alone.
fn spread_median(values: &[f64], decimals: usize) -> String {
    Spread::of(values).map_or("-".to_string(), |s| format!("{:.*}", decimals, s.median))
}

/// `min / median / max`, or the one value.
fn spread(values: &[f64], decimals: usize) -> String {
    match Spread::of(values) {
        None => "-".to_string(),
        Some(s) if s.n == 1 => format!("{:.*}", decimals, s.median),
        Some(s) => format!(
            "{:.*} / {:.*} / {:.*}",
            decimals, s.min, decimals, s.median, decimals, s.max
        ),
    }
}

fn row(out: &mut String, label: &str, cells: &[String]) {
    let _ = writeln!(out, "| {label} | {} |", cells.join(" | "));
}

fn markdown(
    by_n: &BTreeMap<usize, Vec<&RunResult>>,
    criterion: Option<&CriterionRun>,
    plots: &[(usize, String)],
    guide: &str,
) -> String {
    let mut out = String::new();
    let all: Vec<&RunResult> = by_n.values().flatten().copied().collect();
    let _ = writeln!(out, "# Scale benchmark: results\n");
    let seed_runs = all
        .iter()
        .filter(|r| r.operator.subject == Subject::SeedDesign)
        .count();
    if seed_runs > 0 {
        let _ = writeln!(
            out,
            "**{seed_runs} of these {} runs measured `xtask/seed-design`** (the tutorial's \
             design built with controller-runtime, `--operator=seed-design`), not this \
             project's operator.\n",
            all.len()
        );
    }
    let _ = writeln!(
        out,
        "Generated by `cargo xtask bench` from the JSON files in `runs/` (one per run); do not edit \
         by hand. What the numbers mean, how they were taken and how to reproduce them: \
         [docs/performance.md]({guide}).\n"
    );
    if let Some(first) = all.first() {
        let loads: Vec<f64> = all.iter().map(|r| r.load_average_at_start[0]).collect();
        let _ = writeln!(
            out,
            "Machine: {}, {} CPUs, {:.1} GiB RAM, {}. Load average (1 min) at the start of the \
             runs: {} (a run that follows another in the same invocation starts while the load of \
             the previous one decays; on 2 CPUs, a value well above 2 means other work was \
             running).\n",
            first.machine.cpu_model,
            first.machine.cpus,
            first.machine.memory_bytes as f64 / (1024.0 * 1024.0 * 1024.0),
            first.machine.kernel,
            spread(&loads, 2),
        );
        let _ = writeln!(
            out,
            "Control plane: Kubernetes {}, etcd {}, kwok {}. Operator: `{}`.\n",
            first.control_plane.kubernetes,
            first.control_plane.etcd,
            first.control_plane.kwok,
            first
                .operator
                .args
                .iter()
                .filter(|a| !a.starts_with("--kubeconfig"))
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
        );
        let _ = writeln!(out, "Relaxed for the scale runs:\n");
        for (component, flags) in &first.control_plane.relaxed {
            let _ = writeln!(out, "- {component}: `{}`", flags.join(" "));
        }
        for note in &first.control_plane.notes {
            let _ = writeln!(out, "- {note}");
        }
        let _ = writeln!(out, "- operator client: {}\n", first.operator.client);
    }

    if !by_n.is_empty() {
        summary_table(&mut out, by_n);
        budgets(&mut out, by_n);
        request_table(&mut out, by_n);
        all_clients_table(&mut out, by_n);
        runs_table(&mut out, &all);
    } else {
        let _ = writeln!(out, "No scale runs recorded yet.\n");
    }

    if let Some(c) = criterion {
        let _ = writeln!(
            out,
            "## `plan()` (criterion)\n\n`cargo bench -p database-operator-core --bench plan`, \
             taken {} (load average {:.2}){}. One call of the pure planning core on a steady \
             cluster of 1, 3 and 9 replicas, and its parts.\n",
            short_time(&c.taken_at),
            c.load_average_at_start[0],
            if c.quick {
                ", short sampling (--quick)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "| benchmark | median | mean (95 % CI) |\n| --- | ---: | ---: |"
        );
        for e in &c.estimates {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} ({} – {}) |",
                e.id,
                duration_ns(e.median_ns),
                duration_ns(e.mean_ns),
                duration_ns(e.mean_ci_ns[0]),
                duration_ns(e.mean_ci_ns[1])
            );
        }
        out.push('\n');
    }

    if !plots.is_empty() {
        let _ = writeln!(out, "## Plots\n");
        for (n, file) in plots {
            let _ = writeln!(out, "![{file} ({n} clusters)]({file})\n");
        }
    }
    out
}

fn duration_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// The operator's share of the CPU the operator and the control plane used in `phase` (the
/// benchmark's own watches, `bench-*`, left out).
pub fn operator_share(r: &RunResult, phase: &str) -> f64 {
    let Some(p) = r.phase(phase) else { return 0.0 };
    let total: f64 = p
        .cpu_seconds
        .iter()
        .filter(|(name, _)| !name.starts_with("bench-"))
        .map(|(_, cpu)| cpu)
        .sum();
    if total <= 0.0 {
        return 0.0;
    }
    p.cpu_seconds.get("operator").copied().unwrap_or(0.0) / total
}

fn per_cluster(r: &RunResult, phase: &str, f: impl Fn(&super::result::Phase) -> u64) -> f64 {
    r.phase(phase)
        .map_or(0.0, |p| f(p) as f64 / r.clusters.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::observe::Sample;
    use crate::bench::operator::{OperatorMetrics, OperatorSettings};
    use crate::bench::procfs::{Machine, ProcSample};
    use crate::bench::requests::RequestCounts;
    use crate::bench::result::*;

    fn run(n: usize, converge: Option<f64>, quiet_writes: u64, peak_mib: u64) -> RunResult {
        let proc = |cpu: f64, rss: u64| ProcSample {
            rss_bytes: rss,
            hwm_bytes: rss,
            // Not kept in the samples of a run file (below: read back equal).
            anon_bytes: 0,
            cpu_seconds: cpu,
        };
        let sample = |t: f64, running: usize, k: f64| Sample {
            t,
            running,
            procs: BTreeMap::from([
                ("operator".to_string(), proc(k, peak_mib << 20)),
                ("kube-apiserver".to_string(), proc(5.0 * k, 300 << 20)),
                ("etcd".to_string(), proc(2.0 * k, 50 << 20)),
            ]),
        };
        let phase = |name: &str, op: f64, api: f64, writes: u64| Phase {
            name: name.into(),
            start: 0.0,
            end: 20.0,
            start_at: "2026-01-01T00:00:00Z".into(),
            end_at: "2026-01-01T00:00:20Z".into(),
            cpu_seconds: BTreeMap::from([
                ("operator".to_string(), op),
                ("kube-apiserver".to_string(), api),
                ("etcd".to_string(), api / 3.0),
            ]),
            requests: RequestCounts {
                total: writes + 2,
                writes,
                reads: 2,
                errors_by_code: BTreeMap::new(),
                by_verb_resource: BTreeMap::from([
                    ("patch statefulsets.apps".to_string(), writes),
                    ("get secrets".to_string(), 2),
                ]),
            },
            operator_metrics: OperatorMetrics::default(),
            apiserver_requests: BTreeMap::from([
                ("patch pods/status".to_string(), 70.0 * n as f64),
                ("apply statefulsets.apps".to_string(), 30.0 * n as f64),
            ]),
            reconcile_times: ReconcileTimes {
                with_writes: 10,
                with_writes_ms: BTreeMap::from([("p50".to_string(), 104.0)]),
                without_writes: 20,
                without_writes_ms: BTreeMap::from([("p50".to_string(), 2.0)]),
            },
        };
        RunResult {
            format: FORMAT,
            id: format!("n{n}-x"),
            started_at: "2026-01-01T00:00:00Z".into(),
            git: GitInfo::default(),
            machine: Machine {
                cpu_model: "Test CPU".into(),
                cpus: 2,
                memory_bytes: 1 << 30,
                kernel: "Linux".into(),
            },
            load_average_at_start: [1.0, 2.0, 3.0],
            quick: false,
            clusters: n,
            replicas: 3,
            nodes: 3,
            control_plane: ControlPlane {
                kubernetes: "v1.37.2".into(),
                etcd: "v3.7.3".into(),
                kwok: "v0.8.0".into(),
                relaxed: BTreeMap::from([(
                    "kube-apiserver".to_string(),
                    vec!["--max-requests-inflight=0".to_string()],
                )]),
                notes: vec!["etcd on tmpfs".into()],
            },
            operator: OperatorSettings {
                subject: Default::default(),
                concurrency: 5,
                resync_seconds: 30,
                args: vec!["run".into(), "--concurrency=5".into()],
                client: "no limiter".into(),
            },
            converge: Converge {
                submit_seconds: 1.0,
                seconds: converge,
                timeout_seconds: 100.0,
                running_at_end: n,
                first_running_quantiles: BTreeMap::from([("p50".to_string(), 5.0)]),
                running_lag_quantiles: BTreeMap::from([
                    ("p50".to_string(), 0.2),
                    ("p99".to_string(), 0.9),
                ]),
                slowest_reactions: Vec::new(),
                curve: vec![(0.0, 0), (10.0, n)],
            },
            quiet: Quiet {
                seconds: 120.0,
                writes: quiet_writes,
                reads: 0,
                operator_cpu_seconds: 0.5,
                reconciles: 4.0 * n as f64,
                operator_rss_bytes: peak_mib << 20,
            },
            churn: ChurnResult {
                clusters: n / 10,
                scaled: n / 20,
                resized: n / 20,
                submit_seconds: 0.5,
                seconds: Some(12.0),
                timeout_seconds: 100.0,
                settled_at_end: n / 10,
                settle_quantiles: BTreeMap::new(),
            },
            restart: None,
            phases: vec![
                phase("converge", 2.0, 20.0, 7 * n as u64),
                phase("quiet", 0.5, 3.0, quiet_writes),
            ],
            operator_memory: Memory {
                idle_rss_bytes: 10 << 20,
                peak_rss_bytes: peak_mib << 20,
                steady_rss_bytes: peak_mib << 20,
                idle_anon_bytes: 5 << 20,
                peak_anon_bytes: peak_mib << 19,
                steady_anon_bytes: peak_mib << 19,
            },
            samples: vec![sample(0.0, 0, 0.0), sample(10.0, n, 1.0)],
        }
    }

    #[test]
    fn summary_shows_spread_budgets_and_requests() {
        let runs = [
            run(100, Some(20.0), 0, 30),
            run(100, Some(30.0), 1, 31),
            run(100, Some(25.0), 0, 32),
            // Did not converge: its quiet period is no steady state.
            run(1000, None, 5, 120),
        ];
        let by_n = group(&runs);
        let text = markdown(&by_n, None, &[], "../performance.md");
        assert!(
            text.contains(
                "| **every cluster Running after** | 20.0 / 25.0 / 30.0 | - (1 timed out: not measured) |"
            ),
            "{text}"
        );
        assert!(text.contains("100 clusters (3 runs)"));
        assert!(
            text.contains("| 0 writes in steady state | 1 writes in 360 quiet seconds over 3 runs (audit log); 1 run(s) that did not converge left out | **not met** |"),
            "{text}"
        );
        assert!(
            text.contains("| **operator writes, quiet period** (budget 0) | 0 / 0 / 1 | - (1 timed out: not measured) |"),
            "{text}"
        );
        assert!(text.contains(
            "operator RSS under 100 MiB with 1,000 clusters | 1000 clusters: peak 120.0 MiB (creating them, or restarting with them in place, whichever is higher), at the end of the quiet period 120.0 MiB (1000 of 1000 clusters Running when the run stopped waiting, so the peak is a lower bound) | **not met** |"
        ), "{text}");
        assert!(
            text.contains("| `patch statefulsets.apps` | 7.00 | 7.00 |"),
            "{text}"
        );
        assert!(text.contains("timeout (1000/1000 after 100)"));
        assert!(
            text.contains(
                "| reconciles that wrote: median / 90th percentile duration (ms) | 104 / - |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| `patch pods/status` | 70.00 | 70.00 |"),
            "{text}"
        );
        assert!(
            text.contains("| API server requests from every client per cluster, convergence | 100.0 / 100.0 / 100.0 | 100.0 |"),
            "{text}"
        );
        assert!(
            text.contains("| operator's share of those requests | 7.0 / 7.0 / 7.0 % | 7.0 % |"),
            "{text}"
        );
        assert!(
            text.contains("operator reaction: 99th percentile | 0.90 / 0.90 / 0.90 | 0.90 |"),
            "{text}"
        );
        assert!(text.contains("a value well above 2 means other work was running"));
        // The median run of the three 100-cluster runs converged in 25 s.
        let hundred: Vec<&RunResult> = by_n[&100].clone();
        assert_eq!(median_run(&hundred).unwrap().converge.seconds, Some(25.0));
    }

    #[test]
    fn the_restart_phase_is_reported_and_its_peak_counts_against_the_memory_budget() {
        let restart = |peak_mib: u64, writes: u64| Restart {
            ready_seconds: 4.0,
            reconciled_all_seconds: Some(9.5),
            seconds: 20.0,
            reconciles: 1000.0,
            writes,
            reads: 40,
            operator_cpu_seconds: 3.25,
            peak_rss_bytes: peak_mib << 20,
        };
        let mut with = run(1000, Some(900.0), 0, 80);
        with.restart = Some(restart(110, 0));
        let older = run(1000, Some(950.0), 0, 70);
        let runs = [with, older];
        let text = markdown(&group(&runs), None, &[], "../performance.md");
        assert!(
            text.contains("| **restart: new operator ready** (every watch listed) | 4.0 (1 run(s) from before the restart phase) |"),
            "{text}"
        );
        assert!(
            text.contains("| **restart: peak RSS of the new process** | 110.0 (1 run(s) from before the restart phase) |"),
            "{text}"
        );
        assert!(
            text.contains("| 0 writes when the operator restarts (ours, not the issue's) | 0 writes over 1 restarts (audit log) | met |"),
            "{text}"
        );
        // 80 MiB while creating, 110 MiB when restarting: the budget sees 110.
        assert!(
            text.contains("1000 clusters: peak 70.0 / 90.0 / 110.0 MiB (creating them"),
            "{text}"
        );
        assert!(
            text.contains("with 1,000 clusters") && text.contains("| **not met** |"),
            "{text}"
        );

        let mut writing = run(100, Some(20.0), 0, 30);
        writing.restart = Some(restart(30, 3));
        let text = markdown(&group(&[writing]), None, &[], "../performance.md");
        assert!(
            text.contains("| 0 writes when the operator restarts (ours, not the issue's) | 3 writes over 1 restarts (audit log) | **not met** |"),
            "{text}"
        );
    }

    #[test]
    fn writes_json_runs_back_into_a_report_with_plots() {
        let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
        fs::create_dir_all(dir.join("runs")).unwrap();
        let r = run(50, Some(10.0), 0, 20);
        fs::write(
            dir.join("runs").join(format!("{}.json", r.id)),
            to_json(&r).unwrap(),
        )
        .unwrap();
        let text = fs::read_to_string(dir.join("runs").join(format!("{}.json", r.id))).unwrap();
        assert!(text.contains("\"t\": [0.0, 10.0]"), "{text}");
        assert!(
            text.contains("\"operator\": [10.0, 20.0]")
                || text.contains("\"operator\": [0.0, 1.0]"),
            "{text}"
        );
        assert!(text.lines().count() < 400, "{} lines", text.lines().count());
        // A run file of an older layout is left out, not fatal.
        fs::write(
            dir.join("runs").join("n50-old.json"),
            r#"{"format": 1, "samples": [{"t": 0.0}]}"#,
        )
        .unwrap();
        let runs = load_runs(&dir).unwrap();
        assert_eq!(runs, vec![r.clone()]);
        let criterion = CriterionRun {
            taken_at: "2026-01-01T00:00:00Z".into(),
            load_average_at_start: [1.0, 1.0, 1.0],
            quick: false,
            estimates: vec![Estimate {
                id: "plan/3".into(),
                median_ns: 12_345.0,
                mean_ns: 12_400.0,
                mean_ci_ns: [12_300.0, 12_500.0],
            }],
        };
        write(&dir, &runs, Some(&criterion)).unwrap();
        let md = fs::read_to_string(dir.join(SUMMARY_FILE)).unwrap();
        assert!(md.contains("| `plan/3` | 12.3 µs |"), "{md}");
        assert!(md.contains("![convergence-n50.svg"));
        for f in ["convergence-n50.svg", "cpu-n50.svg", "operator-rss-n50.svg"] {
            assert!(fs::read_to_string(dir.join(f)).unwrap().starts_with("<svg"));
        }
        assert!(!md.contains("seed-design"), "{md}");
        // Runs of the seed design say so at the top.
        let mut seed = r.clone();
        seed.operator.subject = Subject::SeedDesign;
        write(&dir, &[seed, r.clone()], None).unwrap();
        let md = fs::read_to_string(dir.join(SUMMARY_FILE)).unwrap();
        let head: String = md.lines().take(5).collect::<Vec<_>>().join("\n");
        assert!(
            head.contains("**1 of these 2 runs measured `xtask/seed-design`**"),
            "{head}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_guide_is_linked_from_any_depth_below_docs() {
        let root = std::env::temp_dir().join(format!("bench-guide-{}", std::process::id()));
        let deep = root.join("docs/performance/seed-design");
        fs::create_dir_all(&deep).unwrap();
        fs::write(root.join("docs/performance.md"), "# Performance").unwrap();
        assert_eq!(
            guide_link(&root.join("docs/performance")),
            "../performance.md"
        );
        assert_eq!(guide_link(&deep), "../../performance.md");
        // No guide above (a scratch directory): the default layout's link.
        assert_eq!(guide_link(Path::new("/nonexistent/x")), "../performance.md");
        fs::remove_dir_all(&root).unwrap();
    }
}
