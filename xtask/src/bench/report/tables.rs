//! The report's other tables: the budgets each run is held to, the operator's requests by
//! kind, every client's requests, and the list of runs.

use super::*;

pub(super) fn budgets(out: &mut String, by_n: &BTreeMap<usize, Vec<&RunResult>>) {
    let all: Vec<&RunResult> = by_n.values().flatten().copied().collect();
    let _ = writeln!(
        out,
        "## Budgets\n\n| budget | measured | verdict |\n| --- | --- | --- |"
    );
    // A run that did not converge never reached a steady state.
    let converged: Vec<&RunResult> = all
        .iter()
        .copied()
        .filter(|r| r.converge.seconds.is_some())
        .collect();
    let quiet_writes: u64 = converged.iter().map(|r| r.quiet.writes).sum();
    let quiet_secs: f64 = converged.iter().map(|r| r.quiet.seconds).sum();
    let skipped = all.len() - converged.len();
    let _ = writeln!(
        out,
        "| 0 writes in steady state | {quiet_writes} writes in {:.0} quiet seconds over {} runs (audit log){} | {} |",
        quiet_secs,
        converged.len(),
        if skipped > 0 {
            format!("; {skipped} run(s) that did not converge left out")
        } else {
            String::new()
        },
        if converged.is_empty() {
            "not measured"
        } else if quiet_writes == 0 {
            "met"
        } else {
            "**not met**"
        }
    );
    let restarted: Vec<&Restart> = converged
        .iter()
        .filter_map(|r| r.restart.as_ref())
        .collect();
    if !restarted.is_empty() {
        let writes: u64 = restarted.iter().map(|r| r.writes).sum();
        let _ = writeln!(
            out,
            "| 0 writes when the operator restarts (ours, not the issue's) | {writes} writes over {} restarts (audit log) | {} |",
            restarted.len(),
            if writes == 0 { "met" } else { "**not met**" }
        );
    }
    match by_n.range(1000..).next() {
        Some((n, runs)) => {
            // The higher of the first process's peak and the restarted one's: a memory limit
            // has to allow both.
            let peak: Vec<f64> = runs
                .iter()
                .map(|r| {
                    mib(r
                        .operator_memory
                        .peak_rss_bytes
                        .max(r.restart.as_ref().map_or(0, |x| x.peak_rss_bytes)))
                })
                .collect();
            let steady: Vec<f64> = runs
                .iter()
                .map(|r| mib(r.operator_memory.steady_rss_bytes))
                .collect();
            let worst = peak.iter().copied().fold(0.0, f64::max);
            let partial: Vec<String> = runs
                .iter()
                .filter(|r| r.converge.seconds.is_none())
                .map(|r| {
                    format!(
                        "{} of {} clusters Running when the run stopped waiting, so the peak is a lower bound",
                        r.converge.running_at_end, r.clusters
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "| operator RSS under 100 MiB with 1,000 clusters | {n} clusters: peak {} MiB (creating them, or restarting with them in place, whichever is higher), {} {} MiB{} | {} |",
                spread(&peak, 1),
                if partial.is_empty() {
                    "steady"
                } else {
                    "at the end of the quiet period"
                },
                spread(&steady, 1),
                if partial.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", partial.join("; "))
                },
                if worst < 100.0 { "met" } else { "**not met**" }
            );
        }
        None => {
            let _ = writeln!(
                out,
                "| operator RSS under 100 MiB with 1,000 clusters | no run with 1,000 clusters recorded | not measured |"
            );
        }
    }
    for (n, runs) in by_n {
        let op: Vec<f64> = runs.iter().map(|r| r.cpu("converge", "operator")).collect();
        let cp: Vec<f64> = runs
            .iter()
            .map(|r| r.cpu("converge", "kube-apiserver") + r.cpu("converge", "etcd"))
            .collect();
        let share: Vec<f64> = runs
            .iter()
            .map(|r| 100.0 * operator_share(r, "converge"))
            .collect();
        let bounded = runs.iter().all(|r| {
            r.cpu("converge", "operator")
                < r.cpu("converge", "kube-apiserver") + r.cpu("converge", "etcd")
        });
        let _ = writeln!(
            out,
            "| convergence bounded by the control plane, {n} clusters | operator {} CPU-s vs kube-apiserver + etcd {} CPU-s; operator {} % of the CPU the operator and the control plane used{} | {} |",
            spread(&op, 1),
            spread(&cp, 1),
            spread(&share, 1),
            if runs.iter().any(|r| r.converge.seconds.is_none()) {
                " (until the run stopped waiting)"
            } else {
                ""
            },
            if bounded { "met" } else { "**not met**" }
        );
    }
    out.push('\n');
}

pub(super) fn request_table(out: &mut String, by_n: &BTreeMap<usize, Vec<&RunResult>>) {
    let medians: Vec<(usize, &RunResult)> = by_n
        .iter()
        .filter_map(|(n, runs)| median_run(runs).map(|r| (*n, r)))
        .collect();
    for phase in ["converge", "quiet", "churn"] {
        let mut keys: Vec<String> = medians
            .iter()
            .filter_map(|(_, r)| r.phase(phase))
            .flat_map(|p| p.requests.by_verb_resource.keys().cloned())
            .collect();
        keys.sort();
        keys.dedup();
        let what = match phase {
            "converge" => "convergence, per cluster",
            "quiet" => "quiet period, total",
            _ => "churn, per changed cluster",
        };
        let _ = writeln!(
            out,
            "### Operator requests by verb and resource: {what} (audit log, median run)\n"
        );
        if keys.is_empty() {
            let _ = writeln!(out, "None.\n");
            continue;
        }
        let header: Vec<String> = medians
            .iter()
            .map(|(n, _)| format!("{n} clusters"))
            .collect();
        row(out, "request", &header);
        row(
            out,
            "---",
            &header
                .iter()
                .map(|_| "---:".to_string())
                .collect::<Vec<_>>(),
        );
        for key in &keys {
            let cells: Vec<String> = medians
                .iter()
                .map(|(_, r)| {
                    let count = r
                        .phase(phase)
                        .and_then(|p| p.requests.by_verb_resource.get(key))
                        .copied()
                        .unwrap_or(0) as f64;
                    let div = match phase {
                        "converge" => r.clusters.max(1) as f64,
                        "churn" => r.churn.clusters.max(1) as f64,
                        _ => 1.0,
                    };
                    if phase == "quiet" {
                        format!("{count:.0}")
                    } else {
                        format!("{:.2}", count / div)
                    }
                })
                .collect();
            row(out, &format!("`{key}`"), &cells);
        }
        let errors: Vec<String> = medians
            .iter()
            .map(|(_, r)| {
                r.phase(phase)
                    .map(|p| {
                        if p.requests.errors_by_code.is_empty() {
                            "none".to_string()
                        } else {
                            p.requests
                                .errors_by_code
                                .iter()
                                .map(|(c, n)| format!("{n}× {c}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    })
                    .unwrap_or_default()
            })
            .collect();
        row(out, "error responses (total)", &errors);
        out.push('\n');
    }
}

/// The API server's busiest `verb resource` pairs during convergence, every client together.
pub(super) fn all_clients_table(out: &mut String, by_n: &BTreeMap<usize, Vec<&RunResult>>) {
    let medians: Vec<(usize, &RunResult)> = by_n
        .iter()
        .filter_map(|(n, runs)| median_run(runs).map(|r| (*n, r)))
        .collect();
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    for (_, r) in &medians {
        if let Some(p) = r.phase("converge") {
            for (k, v) in &p.apiserver_requests {
                *totals.entry(k.clone()).or_default() += v / r.clusters.max(1) as f64;
            }
        }
    }
    if totals.is_empty() {
        return;
    }
    let mut keys: Vec<(String, f64)> = totals.into_iter().collect();
    keys.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let _ = writeln!(
        out,
        "### API server requests from every client: convergence, per cluster (its \
         `apiserver_request_total`, median run, busiest 15)\n"
    );
    let header: Vec<String> = medians
        .iter()
        .map(|(n, _)| format!("{n} clusters"))
        .collect();
    row(out, "request", &header);
    row(
        out,
        "---",
        &header
            .iter()
            .map(|_| "---:".to_string())
            .collect::<Vec<_>>(),
    );
    for (key, _) in keys.iter().take(15) {
        let cells: Vec<String> = medians
            .iter()
            .map(|(_, r)| {
                let v = r
                    .phase("converge")
                    .and_then(|p| p.apiserver_requests.get(key))
                    .copied()
                    .unwrap_or(0.0);
                format!("{:.2}", v / r.clusters.max(1) as f64)
            })
            .collect();
        row(out, &format!("`{key}`"), &cells);
    }
    out.push('\n');
}

pub(super) fn runs_table(out: &mut String, all: &[&RunResult]) {
    let _ = writeln!(
        out,
        "## Every run\n\n| run | clusters | load avg at start (1/5/15 min) | all Running (s) | peak RSS (MiB) | quiet writes | churn settled (s) | commit |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |"
    );
    for r in all {
        let _ = writeln!(
            out,
            "| `{}`{} | {} | {:.2} / {:.2} / {:.2} | {} | {:.1} | {} | {} | `{}`{} |",
            r.id,
            if r.quick { " (quick)" } else { "" },
            r.clusters,
            r.load_average_at_start[0],
            r.load_average_at_start[1],
            r.load_average_at_start[2],
            r.converge.seconds.map_or_else(
                || format!(
                    "timeout ({}/{} after {:.0})",
                    r.converge.running_at_end, r.clusters, r.converge.timeout_seconds
                ),
                |s| format!("{s:.1}")
            ),
            mib(r.operator_memory.peak_rss_bytes),
            r.quiet.writes,
            r.churn.seconds.map_or_else(
                || format!(
                    "timeout ({}/{} settled)",
                    r.churn.settled_at_end, r.churn.clusters
                ),
                |s| format!("{s:.1}")
            ),
            r.git.commit.get(..10).unwrap_or("unknown"),
            if r.git.dirty { " + local changes" } else { "" },
        );
    }
    out.push('\n');
}
