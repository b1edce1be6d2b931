//! The summary table of the report: one column per cluster count, each cell the spread over
//! that count's runs, one group of rows per phase of a run.

use super::*;

/// The summary table: a header, then each group of rows.
pub(super) fn summary_table(out: &mut String, by_n: &BTreeMap<usize, Vec<&RunResult>>) {
    let _ = writeln!(
        out,
        "## Summary\n\nEach cell: min / median / max over the runs (one value when there was one \
         run). Times in seconds from the first create; CPU in CPU-seconds; memory in MiB.\n"
    );
    let header: Vec<String> = by_n
        .iter()
        .map(|(n, runs)| {
            format!(
                "{n} clusters ({} run{})",
                runs.len(),
                if runs.len() == 1 { "" } else { "s" }
            )
        })
        .collect();
    row(out, "", &header);
    row(
        out,
        "---",
        &header
            .iter()
            .map(|_| "---:".to_string())
            .collect::<Vec<_>>(),
    );
    let c = Columns { by_n };
    convergence_rows(out, &c);
    reconcile_rows(out, &c);
    cpu_rows(out, &c);
    request_rows(out, &c);
    memory_rows(out, &c);
    quiet_rows(out, &c);
    churn_rows(out, &c);
    restart_rows(out, &c);
    out.push('\n');
}

/// The columns of the summary, one per cluster count.
struct Columns<'a, 'r> {
    by_n: &'a BTreeMap<usize, Vec<&'r RunResult>>,
}

impl Columns<'_, '_> {
    /// A cell per column: the spread of `f` over the runs, with the runs `f` has no value for
    /// (timed out) counted.
    fn col(&self, f: &dyn Fn(&RunResult) -> Option<f64>, d: usize) -> Vec<String> {
        self.by_n
            .values()
            .map(|runs| {
                let values: Vec<f64> = runs.iter().filter_map(|r| f(r)).collect();
                let missing = runs.len() - values.len();
                let mut cell = spread(&values, d);
                if missing > 0 {
                    let _ = write!(cell, " ({missing} timed out: not measured)");
                }
                cell
            })
            .collect()
    }

    /// [`Columns::col`] over the runs that converged: the quiet period and the churn mean
    /// something only after convergence.
    fn after(&self, f: &dyn Fn(&RunResult) -> Option<f64>, d: usize) -> Vec<String> {
        self.col(
            &|r: &RunResult| {
                if r.converge.seconds.is_some() {
                    f(r)
                } else {
                    None
                }
            },
            d,
        )
    }

    /// A cell per column over the runs' restart phase: only runs made since it exists have it.
    fn restart(&self, f: &dyn Fn(&Restart) -> Option<f64>, d: usize) -> Vec<String> {
        self.by_n
            .values()
            .map(|runs| {
                let with: Vec<&Restart> = runs.iter().filter_map(|r| r.restart.as_ref()).collect();
                let values: Vec<f64> = with.iter().filter_map(|r| f(r)).collect();
                let mut cell = if values.is_empty() {
                    "not measured".to_string()
                } else {
                    spread(&values, d)
                };
                if with.len() < runs.len() {
                    let _ = write!(
                        cell,
                        " ({} run(s) from before the restart phase)",
                        runs.len() - with.len()
                    );
                }
                cell
            })
            .collect()
    }
}

/// The CPU-seconds `p` used in `phase`.
fn cpu(phase: &'static str, p: &'static str) -> impl Fn(&RunResult) -> Option<f64> {
    move |r: &RunResult| Some(r.cpu(phase, p))
}

/// How fast the clusters became Running, and how fast the operator reacted to Ready pods.
fn convergence_rows(out: &mut String, c: &Columns<'_, '_>) {
    let q =
        |k: &'static str| move |r: &RunResult| r.converge.first_running_quantiles.get(k).copied();
    row(
        out,
        "**every cluster Running after**",
        &c.col(&|r| r.converge.seconds, 1),
    );
    row(out, "half of them Running after", &c.col(&q("p50"), 1));
    row(out, "90 % Running after", &c.col(&q("p90"), 1));
    let lag =
        |k: &'static str| move |r: &RunResult| r.converge.running_lag_quantiles.get(k).copied();
    row(
        out,
        "operator reaction, a cluster's pods all Ready -> it reports Running: median",
        &c.col(&lag("p50"), 2),
    );
    row(
        out,
        "operator reaction: 99th percentile",
        &c.col(&lag("p99"), 2),
    );
    row(
        out,
        "operator reaction: slowest cluster",
        &c.col(&lag("p100"), 2),
    );
}

/// The reconciles of the convergence, with and without writes, and the time to submit the objects.
fn reconcile_rows(out: &mut String, c: &Columns<'_, '_>) {
    let rt = |with: bool, k: &'static str| {
        move |r: &RunResult| {
            let t = &r.phase("converge")?.reconcile_times;
            if with {
                &t.with_writes_ms
            } else {
                &t.without_writes_ms
            }
            .get(k)
            .copied()
        }
    };
    row(
        out,
        "reconciles that wrote, convergence: count per cluster",
        &c.col(
            &|r| {
                r.phase("converge")
                    .map(|p| p.reconcile_times.with_writes as f64 / r.clusters.max(1) as f64)
            },
            1,
        ),
    );
    row(
        out,
        "reconciles that wrote: median / 90th percentile duration (ms)",
        &c.by_n
            .values()
            .map(|runs| {
                let a: Vec<f64> = runs.iter().filter_map(|r| rt(true, "p50")(r)).collect();
                let b: Vec<f64> = runs.iter().filter_map(|r| rt(true, "p90")(r)).collect();
                format!("{} / {}", spread_median(&a, 0), spread_median(&b, 0))
            })
            .collect::<Vec<_>>(),
    );
    row(
        out,
        "reconciles that wrote nothing: count per cluster, median duration (ms)",
        &c.by_n
            .values()
            .map(|runs| {
                let n: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| {
                        r.phase("converge").map(|p| {
                            p.reconcile_times.without_writes as f64 / r.clusters.max(1) as f64
                        })
                    })
                    .collect();
                let a: Vec<f64> = runs.iter().filter_map(|r| rt(false, "p50")(r)).collect();
                format!("{}, {}", spread_median(&n, 1), spread_median(&a, 1))
            })
            .collect::<Vec<_>>(),
    );
    row(
        out,
        "submitting Secrets + clusters (kubectl create)",
        &c.col(&|r| Some(r.converge.submit_seconds), 1),
    );
}

/// The CPU every process used during the convergence, and the operator's share of it.
fn cpu_rows(out: &mut String, c: &Columns<'_, '_>) {
    row(
        out,
        "operator CPU, convergence",
        &c.col(&cpu("converge", "operator"), 2),
    );
    row(
        out,
        "kube-apiserver CPU, convergence",
        &c.col(&cpu("converge", "kube-apiserver"), 2),
    );
    row(
        out,
        "etcd CPU, convergence",
        &c.col(&cpu("converge", "etcd"), 2),
    );
    row(
        out,
        "kube-controller-manager CPU, convergence",
        &c.col(&cpu("converge", "kube-controller-manager"), 2),
    );
    row(
        out,
        "kube-scheduler CPU, convergence",
        &c.col(&cpu("converge", "kube-scheduler"), 2),
    );
    row(
        out,
        "kwok CPU, convergence",
        &c.col(&cpu("converge", "kwok"), 2),
    );
    row(
        out,
        "the benchmark's two kubectl watches, convergence",
        &c.col(
            &|r| {
                Some(
                    r.cpu("converge", "bench-watch-clusters")
                        + r.cpu("converge", "bench-watch-pods"),
                )
            },
            2,
        ),
    );
    row(
        out,
        "operator share of all CPU used, convergence",
        &c.col(&|r| Some(100.0 * operator_share(r, "converge")), 1)
            .iter()
            .map(|c| format!("{c} %"))
            .collect::<Vec<_>>(),
    );
}

/// The API requests of the convergence: the operator's and every client's, per cluster.
fn request_rows(out: &mut String, c: &Columns<'_, '_>) {
    row(
        out,
        "operator requests per cluster, convergence",
        &c.col(
            &|r| Some(per_cluster(r, "converge", |p| p.requests.total)),
            1,
        ),
    );
    row(
        out,
        "operator writes per cluster, convergence",
        &c.col(
            &|r| Some(per_cluster(r, "converge", |p| p.requests.writes)),
            1,
        ),
    );
    row(
        out,
        "API server requests from every client per cluster, convergence",
        &c.col(
            &|r| {
                r.phase("converge")
                    .map(|p| p.apiserver_requests_total() / r.clusters.max(1) as f64)
            },
            1,
        ),
    );
    row(
        out,
        "operator's share of those requests",
        &c.col(
            &|r| {
                let p = r.phase("converge")?;
                let all = p.apiserver_requests_total();
                (all > 0.0).then(|| 100.0 * p.requests.total as f64 / all)
            },
            1,
        )
        .iter()
        .map(|c| format!("{c} %"))
        .collect::<Vec<_>>(),
    );
}

/// The operator's memory: before any cluster, at its peak, at the end of the quiet period.
fn memory_rows(out: &mut String, c: &Columns<'_, '_>) {
    row(
        out,
        "operator RSS before any cluster",
        &c.col(&|r| Some(mib(r.operator_memory.idle_rss_bytes)), 1),
    );
    row(
        out,
        "**operator peak RSS**",
        &c.col(&|r| Some(mib(r.operator_memory.peak_rss_bytes)), 1),
    );
    row(
        out,
        "**operator steady RSS** (end of the quiet period)",
        &c.col(&|r| Some(mib(r.operator_memory.steady_rss_bytes)), 1),
    );
}

/// The quiet period after convergence, when the operator should write nothing.
fn quiet_rows(out: &mut String, c: &Columns<'_, '_>) {
    row(
        out,
        "quiet period length",
        &c.after(&|r| Some(r.quiet.seconds), 0),
    );
    row(
        out,
        "**operator writes, quiet period** (budget 0)",
        &c.after(&|r| Some(r.quiet.writes as f64), 0),
    );
    row(
        out,
        "operator reads, quiet period",
        &c.after(&|r| Some(r.quiet.reads as f64), 0),
    );
    row(
        out,
        "operator reconciles, quiet period (resyncs)",
        &c.after(&|r| Some(r.quiet.reconciles), 0),
    );
    row(
        out,
        "operator CPU per minute, quiet period",
        &c.after(
            &|r| {
                (r.quiet.seconds > 0.0)
                    .then(|| r.quiet.operator_cpu_seconds * 60.0 / r.quiet.seconds)
            },
            2,
        ),
    );
    row(
        out,
        "kube-apiserver CPU per minute, quiet period",
        &c.after(
            &|r| {
                let p = r.phase("quiet")?;
                let len = p.end - p.start;
                (len > 0.0).then(|| r.cpu("quiet", "kube-apiserver") * 60.0 / len)
            },
            2,
        ),
    );
    row(
        out,
        "writes after Running (10 s tail)",
        &c.after(&|r| r.phase("tail").map(|p| p.requests.writes as f64), 0),
    );
}

/// The churn phase: clusters scaled and rolled, until settled.
fn churn_rows(out: &mut String, c: &Columns<'_, '_>) {
    row(
        out,
        "churn: clusters changed (scaled 3->5 / rolled)",
        &c.by_n
            .values()
            .map(|runs| {
                runs.first().map_or("-".to_string(), |r| {
                    format!(
                        "{} ({} / {})",
                        r.churn.clusters, r.churn.scaled, r.churn.resized
                    )
                })
            })
            .collect::<Vec<_>>(),
    );
    row(
        out,
        "**churn: settled after**",
        &c.after(&|r| r.churn.seconds, 1),
    );
    row(
        out,
        "churn: median changed cluster settled after",
        &c.after(&|r| r.churn.settle_quantiles.get("p50").copied(), 1),
    );
    row(
        out,
        "churn: operator writes",
        &c.after(&|r| r.phase("churn").map(|p| p.requests.writes as f64), 0),
    );
    row(
        out,
        "churn: operator CPU",
        &c.after(&cpu("churn", "operator"), 2),
    );
    row(
        out,
        "churn: kube-apiserver CPU",
        &c.after(&cpu("churn", "kube-apiserver"), 2),
    );
}

/// The restart phase: a new operator process over every cluster.
fn restart_rows(out: &mut String, c: &Columns<'_, '_>) {
    row(
        out,
        "**restart: new operator ready** (every watch listed)",
        &c.restart(&|r| Some(r.ready_seconds), 1),
    );
    row(
        out,
        "restart: every cluster reconciled once after",
        &c.restart(&|r| r.reconciled_all_seconds, 1),
    );
    row(
        out,
        "**restart: operator writes** (expected 0)",
        &c.restart(&|r| Some(r.writes as f64), 0),
    );
    row(
        out,
        "restart: operator reads",
        &c.restart(&|r| Some(r.reads as f64), 0),
    );
    row(
        out,
        "restart: operator CPU",
        &c.restart(&|r| Some(r.operator_cpu_seconds), 2),
    );
    row(
        out,
        "**restart: peak RSS of the new process**",
        &c.restart(&|r| Some(mib(r.peak_rss_bytes)), 1),
    );
}
