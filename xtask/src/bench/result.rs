//! What one scale run records (written as JSON, one file per run), and the statistics drawn from
//! it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::observe::Sample;
use super::operator::{OperatorMetrics, OperatorSettings};
use super::procfs::Machine;
use super::requests::RequestCounts;

/// Version of the JSON layout.
pub const FORMAT: u32 = 1;

/// One scale run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// [`FORMAT`].
    pub format: u32,
    /// `n<clusters>-<UTC start>`.
    pub id: String,
    /// UTC, RFC 3339.
    pub started_at: String,
    /// `git rev-parse HEAD` and whether the tree had changes.
    pub git: GitInfo,
    /// The machine.
    pub machine: Machine,
    /// `/proc/loadavg` (1, 5, 15 min) just before the run started: other work on the machine.
    pub load_average_at_start: [f64; 3],
    /// `--quick`.
    pub quick: bool,
    /// Clusters created.
    pub clusters: usize,
    /// Replicas per cluster at creation.
    pub replicas: i32,
    /// Fake nodes.
    pub nodes: usize,
    /// The control plane and the limits relaxed for the run.
    pub control_plane: ControlPlane,
    /// How the operator ran.
    pub operator: OperatorSettings,
    /// Creating the clusters until every one reports Running.
    pub converge: Converge,
    /// The quiet period after convergence.
    pub quiet: Quiet,
    /// Changing a tenth of the clusters.
    pub churn: ChurnResult,
    /// The operator restarted with every cluster in place (absent in runs made before the
    /// phase existed).
    #[serde(default)]
    pub restart: Option<Restart>,
    /// Every phase: its window, CPU per process, the operator's requests (audit log) and its own
    /// counters.
    pub phases: Vec<Phase>,
    /// Operator memory over the run.
    pub operator_memory: Memory,
    /// Process samples (about one per second; thinned to at most 600 points), stored as
    /// columns: `t`, `running`, and per process `rss_mib`, `peak_rss_mib`, `cpu_seconds`.
    #[serde(with = "columns")]
    pub samples: Vec<Sample>,
}

/// Source revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitInfo {
    /// Commit hash, or empty outside a git checkout.
    pub commit: String,
    /// Uncommitted changes present.
    pub dirty: bool,
}

/// The control plane of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlPlane {
    /// Kubernetes version.
    pub kubernetes: String,
    /// etcd version.
    pub etcd: String,
    /// kwok version.
    pub kwok: String,
    /// Flags added for the scale run, per component.
    pub relaxed: BTreeMap<String, Vec<String>>,
    /// Anything else that shapes the numbers (etcd on tmpfs, audit policy, ...).
    pub notes: Vec<String>,
}

/// Convergence of the initial burst.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Converge {
    /// Seconds `kubectl create` took to submit every Secret and cluster.
    pub submit_seconds: f64,
    /// Seconds from the first create until every cluster reported Running; `None` when the
    /// timeout came first.
    pub seconds: Option<f64>,
    /// The timeout, seconds.
    pub timeout_seconds: f64,
    /// Clusters Running when the phase ended.
    pub running_at_end: usize,
    /// Seconds until the first 50 %, 90 %, 99 % and 100 % of clusters first reported Running.
    pub first_running_quantiles: BTreeMap<String, f64>,
    /// Seconds from a cluster's pods all being Ready to it reporting Running (the operator's
    /// reaction), quantiles over the clusters (`p50` ... `p100`).
    #[serde(default)]
    pub running_lag_quantiles: BTreeMap<String, f64>,
    /// The ten slowest reactions: (cluster, seconds from its pods all Ready to Running,
    /// seconds since the first create when it reported Running), to look up in the operator's
    /// log.
    #[serde(default)]
    pub slowest_reactions: Vec<(String, f64, f64)>,
    /// (seconds since the first create, clusters Running), one point per sample.
    pub curve: Vec<(f64, usize)>,
}

/// The quiet period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quiet {
    /// Length, seconds.
    pub seconds: f64,
    /// Writes by the operator's user (audit log). The budget is 0.
    pub writes: u64,
    /// Reads by the operator's user (audit log).
    pub reads: u64,
    /// Operator CPU seconds in the period.
    pub operator_cpu_seconds: f64,
    /// Reconciles the operator ran in the period (its own counter; resyncs).
    pub reconciles: f64,
    /// Operator RSS at the end, bytes.
    pub operator_rss_bytes: u64,
}

/// A second operator process started after the churn, with every cluster in place: what a
/// rollout of the operator (or a lost lease) costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// Seconds from the start of the process until `/readyz` (every watch listed and cached).
    pub ready_seconds: f64,
    /// Seconds from the start until the process had run as many reconciles as there are
    /// clusters (`None`: not within the wait).
    pub reconciled_all_seconds: Option<f64>,
    /// Length of the phase (stop of the first process to the end of a 10 s tail), seconds.
    pub seconds: f64,
    /// Reconciles the restarted process ran (its own counter).
    pub reconciles: f64,
    /// Writes by the operator's user in the phase (audit log). Expected: 0, the clusters are
    /// as the first process left them.
    pub writes: u64,
    /// Reads by the operator's user in the phase (audit log): the initial lists and watches.
    pub reads: u64,
    /// CPU seconds of the restarted process in the phase.
    pub operator_cpu_seconds: f64,
    /// Peak RSS of the restarted process (VmHWM): the initial lists of every watch at once.
    pub peak_rss_bytes: u64,
}

/// The churn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChurnResult {
    /// Clusters changed.
    pub clusters: usize,
    /// Of which scaled 3 -> 5.
    pub scaled: usize,
    /// Of which given a new memory limit (every member replaced). Runs before the change
    /// upgraded these to the next patch version instead (same replacements).
    #[serde(alias = "upgraded")]
    pub resized: usize,
    /// Seconds `kubectl patch` took.
    pub submit_seconds: f64,
    /// Seconds from the first patch until every changed cluster reported the new spec done and
    /// every other cluster was still Running; `None` on timeout.
    pub seconds: Option<f64>,
    /// The timeout, seconds.
    pub timeout_seconds: f64,
    /// Changed clusters settled when the phase ended.
    pub settled_at_end: usize,
    /// Seconds from the first patch until each changed cluster settled, quantiles.
    #[serde(default)]
    pub settle_quantiles: BTreeMap<String, f64>,
}

/// One phase of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// `startup`, `converge`, `tail`, `quiet`, `churn`.
    pub name: String,
    /// Seconds since the run's epoch.
    pub start: f64,
    /// Seconds since the run's epoch.
    pub end: f64,
    /// Start, UTC RFC 3339 (the audit log's clock).
    #[serde(default)]
    pub start_at: String,
    /// End, UTC RFC 3339.
    #[serde(default)]
    pub end_at: String,
    /// CPU seconds used in the phase, per process.
    pub cpu_seconds: BTreeMap<String, f64>,
    /// The operator's requests (audit log).
    pub requests: RequestCounts,
    /// Change of the operator's own counters.
    pub operator_metrics: OperatorMetrics,
    /// Requests the API server served in the phase from every client (its
    /// `apiserver_request_total`), per `verb resource`; verbs as the API server counts them
    /// (`post`, `put`, `apply` for server-side apply, ...).
    #[serde(default)]
    pub apiserver_requests: BTreeMap<String, f64>,
    /// How long the operator's reconciles took in the phase, from its log.
    #[serde(default)]
    pub reconcile_times: ReconcileTimes,
}

/// Reconcile durations (the operator logs `elapsed_ms` and `writes` per reconcile).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReconcileTimes {
    /// Reconciles that wrote something.
    pub with_writes: usize,
    /// Milliseconds of those, quantiles `p50` ... `p100`.
    pub with_writes_ms: BTreeMap<String, f64>,
    /// Reconciles that wrote nothing.
    pub without_writes: usize,
    /// Milliseconds of those, quantiles.
    pub without_writes_ms: BTreeMap<String, f64>,
}

impl Phase {
    /// Every request the API server served in the phase.
    pub fn apiserver_requests_total(&self) -> f64 {
        self.apiserver_requests.values().sum()
    }
}

/// Operator memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// RSS once its caches synced, before any cluster existed.
    pub idle_rss_bytes: u64,
    /// Highest RSS of the run (`VmHWM`).
    pub peak_rss_bytes: u64,
    /// RSS at the end of the quiet period.
    pub steady_rss_bytes: u64,
    /// The anonymous part (`RssAnon`) of the idle RSS (0 in runs before 2026-12-05).
    #[serde(default)]
    pub idle_anon_bytes: u64,
    /// The highest anonymous part seen in the once-a-second samples.
    #[serde(default)]
    pub peak_anon_bytes: u64,
    /// The anonymous part at the end of the quiet period.
    #[serde(default)]
    pub steady_anon_bytes: u64,
}

/// [`Sample`]s as columns (a few lines of JSON instead of thousands), values rounded to what
/// the measurement supports (10 ms, 0.01 MiB).
mod columns {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::super::observe::Sample;
    use super::super::procfs::ProcSample;

    const MIB: f64 = 1024.0 * 1024.0;

    #[derive(Serialize, Deserialize)]
    struct Columns {
        t: Vec<f64>,
        running: Vec<usize>,
        /// Per process; `null` where the process did not exist yet.
        rss_mib: BTreeMap<String, Vec<Option<f64>>>,
        peak_rss_mib: BTreeMap<String, Vec<Option<f64>>>,
        cpu_seconds: BTreeMap<String, Vec<Option<f64>>>,
    }

    fn round(x: f64) -> f64 {
        (x * 100.0).round() / 100.0
    }

    pub fn serialize<S: Serializer>(samples: &[Sample], s: S) -> Result<S::Ok, S::Error> {
        let mut names: Vec<&String> = samples.iter().flat_map(|x| x.procs.keys()).collect();
        names.sort();
        names.dedup();
        let column = |f: &dyn Fn(&ProcSample) -> f64| -> BTreeMap<String, Vec<Option<f64>>> {
            names
                .iter()
                .map(|name| {
                    let values = samples
                        .iter()
                        .map(|x| x.procs.get(*name).map(|p| round(f(p))))
                        .collect();
                    ((*name).clone(), values)
                })
                .collect()
        };
        Columns {
            t: samples.iter().map(|x| round(x.t)).collect(),
            running: samples.iter().map(|x| x.running).collect(),
            rss_mib: column(&|p| p.rss_bytes as f64 / MIB),
            peak_rss_mib: column(&|p| p.hwm_bytes as f64 / MIB),
            cpu_seconds: column(&|p| p.cpu_seconds),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Sample>, D::Error> {
        let c = Columns::deserialize(d)?;
        Ok(c.t
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let procs = c
                    .cpu_seconds
                    .iter()
                    .filter_map(|(name, cpu)| {
                        let cpu = (*cpu.get(i)?)?;
                        let mib = |m: &BTreeMap<String, Vec<Option<f64>>>| {
                            m.get(name)
                                .and_then(|v| v.get(i).copied().flatten())
                                .map_or(0, |x| (x * MIB).round() as u64)
                        };
                        Some((
                            name.clone(),
                            ProcSample {
                                rss_bytes: mib(&c.rss_mib),
                                hwm_bytes: mib(&c.peak_rss_mib),
                                anon_bytes: 0,
                                cpu_seconds: cpu,
                            },
                        ))
                    })
                    .collect();
                Sample {
                    t: *t,
                    running: c.running.get(i).copied().unwrap_or(0),
                    procs,
                }
            })
            .collect())
    }
}

/// Pretty JSON with every array that holds no object or string on one line (the sample
/// columns, the curve), so a run's file stays readable and small.
pub fn to_json(run: &RunResult) -> serde_json::Result<String> {
    let pretty = serde_json::to_string_pretty(run)?;
    Ok(collapse_flat_arrays(&pretty))
}

/// Puts every JSON array without objects or strings inside on one line.
fn collapse_flat_arrays(pretty: &str) -> String {
    let bytes = pretty.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            out.push(b);
            if b == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1]);
                i += 2;
                continue;
            }
            in_string = b != b'"';
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
        } else if b == b'[' {
            let mut depth = 0;
            let mut end = None;
            for (j, c) in bytes[i..].iter().enumerate() {
                match *c {
                    b'[' => depth += 1,
                    b']' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i + j);
                            break;
                        }
                    }
                    b'{' | b'"' => break,
                    _ => {}
                }
            }
            if let Some(end) = end {
                // Only ASCII digits, signs, dots, brackets, commas, "null" and whitespace here.
                let flat = pretty[i..=end]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .replace("[ ", "[")
                    .replace(" ]", "]");
                out.extend_from_slice(flat.as_bytes());
                i = end + 1;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    // Only whole ASCII runs were rewritten, so the bytes are still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Minimum, median and maximum of some numbers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Largest.
    pub max: f64,
    /// How many values.
    pub n: usize,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            min: v[0],
            median,
            max: v[n - 1],
            n,
        })
    }
}

/// The time at which `fraction` of `total` clusters had first reported Running, from the sorted
/// first-Running times.
pub fn quantile_time(sorted_times: &[f64], total: usize, fraction: f64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    let need = ((total as f64) * fraction).ceil().max(1.0) as usize;
    sorted_times.get(need - 1).copied()
}

/// Keeps at most `max` samples, evenly spread, always the first and the last.
pub fn thin<T: Clone>(items: &[T], max: usize) -> Vec<T> {
    if items.len() <= max || max < 2 {
        return items.to_vec();
    }
    let step = (items.len() - 1) as f64 / (max - 1) as f64;
    (0..max)
        .map(|k| items[((k as f64) * step).round() as usize].clone())
        .collect()
}

impl RunResult {
    /// The named phase.
    pub fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// CPU seconds of `process` in phase `name` (0 when unknown).
    pub fn cpu(&self, phase: &str, process: &str) -> f64 {
        self.phase(phase)
            .and_then(|p| p.cpu_seconds.get(process))
            .copied()
            .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_odd_even_and_empty() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.n), (1.0, 2.0, 3.0, 3));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn quantiles_count_clusters_not_samples() {
        let times = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(quantile_time(&times, 5, 0.5), Some(3.0));
        assert_eq!(quantile_time(&times, 5, 1.0), Some(10.0));
        // Only 5 of 10 ever ran: 90 % was never reached.
        assert_eq!(quantile_time(&times, 10, 0.9), None);
        assert_eq!(quantile_time(&times, 0, 0.5), None);
    }

    #[test]
    fn flat_arrays_go_on_one_line_and_strings_stay_intact() {
        let v = serde_json::json!({
            "a": [1.5, 2, null],
            "curve": [[0.0, 1], [2.5, 3]],
            "s": ["x [ y ]", "µs"],
            "o": [{"k": [1, 2]}],
            "t": "quote \\\" [1, 2]"
        });
        let text = collapse_flat_arrays(&serde_json::to_string_pretty(&v).unwrap());
        assert!(text.contains("\"a\": [1.5, 2, null]"), "{text}");
        assert!(text.contains("\"curve\": [[0.0, 1], [2.5, 3]]"), "{text}");
        assert!(text.contains("\"k\": [1, 2]"), "{text}");
        assert!(text.contains("\"x [ y ]\""), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn thinning_keeps_the_ends() {
        let v: Vec<u32> = (0..1000).collect();
        let t = thin(&v, 11);
        assert_eq!(t.len(), 11);
        assert_eq!(t[0], 0);
        assert_eq!(t[10], 999);
        assert_eq!(thin(&v[..5], 11), vec![0, 1, 2, 3, 4]);
    }
}
