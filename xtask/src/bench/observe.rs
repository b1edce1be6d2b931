//! Watching the benchmark's DatabaseClusters and their pods (`kubectl get --watch` as the admin,
//! so it never counts as the operator's traffic) and sampling the processes' memory and CPU.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::procfs::{self, ProcSample};
use super::workload::Expected;

/// Fields printed per cluster by the watch, `|`-separated so empty ones keep their place.
const JSONPATH: &str = "jsonpath={.metadata.name}|{.metadata.generation}|{.spec.replicas}|{.spec.version}|{.status.observedGeneration}|{.status.phase}|{.status.readyReplicas}|{.status.currentVersion}{\"\\n\"}";

/// The latest state of one cluster as the watch saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.replicas`.
    pub spec_replicas: i32,
    /// `spec.version`.
    pub spec_version: String,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `status.phase` (empty before the first status).
    pub phase: String,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// `status.currentVersion`.
    pub current_version: String,
}

impl Seen {
    /// Parses one line of the watch output; `None` for anything else.
    pub fn parse(line: &str) -> Option<(String, Seen)> {
        let f: Vec<&str> = line.trim_end().split('|').collect();
        if f.len() != 8 || f[0].is_empty() {
            return None;
        }
        let seen = Seen {
            generation: f[1].parse().ok()?,
            spec_replicas: f[2].parse().ok()?,
            spec_version: f[3].to_string(),
            observed_generation: f[4].parse().ok(),
            phase: f[5].to_string(),
            ready_replicas: f[6].parse().unwrap_or(0),
            current_version: f[7].to_string(),
        };
        Some((f[0].to_string(), seen))
    }

    /// Reports `Running`.
    pub fn running(&self) -> bool {
        self.phase == "Running"
    }

    /// The spec is `expected`, the operator has observed it, and the status shows it done.
    pub fn settled(&self, expected: &Expected) -> bool {
        self.spec_replicas == expected.replicas
            && self.spec_version == expected.version
            && self.observed_generation == Some(self.generation)
            && self.running()
            && self.ready_replicas == expected.replicas
            && self.current_version == expected.version
    }
}

/// Fields printed per pod: name, owning cluster (label), Ready condition.
const POD_JSONPATH: &str = "jsonpath={.metadata.name}|{.metadata.labels.database\\.example\\.com/cluster}|{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}";

/// One line of the pod watch: pod name, cluster name, Ready.
pub fn parse_pod_line(line: &str) -> Option<(String, String, bool)> {
    let f: Vec<&str> = line.trim_end().split('|').collect();
    if f.len() != 3 || f[0].is_empty() || f[1].is_empty() {
        return None;
    }
    Some((f[0].to_string(), f[1].to_string(), f[2] == "True"))
}

/// What the watches have seen so far.
#[derive(Debug, Default)]
pub struct WatchState {
    /// Latest state per cluster name.
    pub clusters: HashMap<String, Seen>,
    /// Seconds (since the watch's epoch) at which each cluster first reported Running.
    pub first_running: HashMap<String, f64>,
    /// Ready per pod, and the pod's cluster.
    pub pods: HashMap<String, (String, bool)>,
    /// Seconds at which each cluster first had [`WatchState::replicas_for_lag`] pods Ready.
    pub pods_ready: HashMap<String, f64>,
    /// Ready pods a cluster needs for [`WatchState::pods_ready`].
    pub replicas_for_lag: usize,
    /// Times kubectl had to be restarted.
    pub restarts: u32,
}

impl WatchState {
    /// Clusters reporting Running now.
    pub fn running(&self) -> usize {
        self.clusters.values().filter(|s| s.running()).count()
    }

    fn pod_seen(&mut self, pod: String, cluster: String, ready: bool, at: f64) {
        self.pods.insert(pod, (cluster.clone(), ready));
        if self.pods_ready.contains_key(&cluster) || !ready {
            return;
        }
        let ready_pods = self
            .pods
            .values()
            .filter(|(c, r)| *r && *c == cluster)
            .count();
        if ready_pods >= self.replicas_for_lag {
            self.pods_ready.insert(cluster, at);
        }
    }

    /// Per cluster that has both: seconds from its pods all being Ready to it reporting
    /// Running (how long the operator took to notice and say so), sorted.
    /// The clusters whose reaction was slowest, slowest first: (name, seconds from its pods
    /// all Ready to Running, seconds since the epoch it reported Running).
    pub fn slowest_reactions(&self, n: usize) -> Vec<(String, f64, f64)> {
        let mut lags: Vec<(String, f64, f64)> = self
            .first_running
            .iter()
            .filter_map(|(c, run)| {
                self.pods_ready
                    .get(c)
                    .map(|ready| (c.clone(), (run - ready).max(0.0), *run))
            })
            .collect();
        lags.sort_by(|a, b| b.1.total_cmp(&a.1));
        lags.truncate(n);
        lags
    }

    pub fn running_lags(&self) -> Vec<f64> {
        let mut lags: Vec<f64> = self
            .first_running
            .iter()
            .filter_map(|(c, run)| self.pods_ready.get(c).map(|ready| (run - ready).max(0.0)))
            .collect();
        lags.sort_by(f64::total_cmp);
        lags
    }
}

/// `kubectl get databaseclusters --watch` and `kubectl get pods --watch`, restarted when they
/// end, feeding [`WatchState`].
pub struct ClusterWatch {
    state: Arc<Mutex<WatchState>>,
    stop: Arc<AtomicBool>,
    children: Vec<Arc<Mutex<Option<Child>>>>,
    threads: Vec<JoinHandle<()>>,
}

impl ClusterWatch {
    /// Starts watching `namespace`; times are seconds since `epoch`. A cluster's pods count as
    /// all Ready once `replicas` of them are.
    pub fn start(
        kubectl: PathBuf,
        kubeconfig: PathBuf,
        namespace: &str,
        replicas: usize,
        epoch: Instant,
    ) -> Result<ClusterWatch> {
        let state = Arc::new(Mutex::new(WatchState {
            replicas_for_lag: replicas,
            ..WatchState::default()
        }));
        let mut watch = ClusterWatch {
            state: state.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            children: Vec::new(),
            threads: Vec::new(),
        };
        let clusters_state = state.clone();
        watch.spawn(
            &kubectl,
            &kubeconfig,
            vec![
                "get".into(),
                "databaseclusters".into(),
                "--namespace".into(),
                namespace.into(),
                "--watch".into(),
                "--output".into(),
                JSONPATH.into(),
            ],
            move |line| {
                if let Some((name, seen)) = Seen::parse(line) {
                    let at = epoch.elapsed().as_secs_f64();
                    let mut st = lock(&clusters_state);
                    if seen.running() {
                        st.first_running.entry(name.clone()).or_insert(at);
                    }
                    st.clusters.insert(name, seen);
                }
            },
        )?;
        let pods_state = state;
        watch.spawn(
            &kubectl,
            &kubeconfig,
            vec![
                "get".into(),
                "pods".into(),
                "--namespace".into(),
                namespace.into(),
                "--watch".into(),
                "--output".into(),
                POD_JSONPATH.into(),
            ],
            move |line| {
                if let Some((pod, cluster, ready)) = parse_pod_line(line) {
                    let at = epoch.elapsed().as_secs_f64();
                    lock(&pods_state).pod_seen(pod, cluster, ready, at);
                }
            },
        )?;
        Ok(watch)
    }

    fn spawn(
        &mut self,
        kubectl: &Path,
        kubeconfig: &Path,
        args: Vec<String>,
        mut on_line: impl FnMut(&str) + Send + 'static,
    ) -> Result<()> {
        let child: Arc<Mutex<Option<Child>>> = Arc::new(Mutex::new(None));
        let (stop, slot, state) = (self.stop.clone(), child.clone(), self.state.clone());
        let (kubectl, kubeconfig) = (kubectl.to_path_buf(), kubeconfig.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("bench-watch".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let spawned = Command::new(&kubectl)
                        .arg("--kubeconfig")
                        .arg(&kubeconfig)
                        .args(&args)
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn();
                    let Ok(mut proc) = spawned else {
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    };
                    let stdout = proc.stdout.take();
                    *lock(&slot) = Some(proc);
                    if let Some(stdout) = stdout {
                        for line in BufReader::new(stdout).lines() {
                            let Ok(line) = line else { break };
                            on_line(&line);
                        }
                    }
                    if let Some(mut proc) = lock(&slot).take() {
                        let _ = proc.kill();
                        let _ = proc.wait();
                    }
                    if !stop.load(Ordering::SeqCst) {
                        lock(&state).restarts += 1;
                        std::thread::sleep(Duration::from_millis(500));
                    }
                }
            })
            .context("starting a watch thread")?;
        self.children.push(child);
        self.threads.push(thread);
        Ok(())
    }

    /// The state, locked.
    pub fn state(&self) -> MutexGuard<'_, WatchState> {
        lock(&self.state)
    }

    /// Shared handle for the sampler.
    pub fn shared(&self) -> Arc<Mutex<WatchState>> {
        self.state.clone()
    }

    /// Process ids of the kubectl watches running now (clusters first, then pods).
    pub fn pids(&self) -> Vec<u32> {
        self.children
            .iter()
            .filter_map(|c| lock(c).as_ref().map(Child::id))
            .collect()
    }
}

impl Drop for ClusterWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for child in &self.children {
            if let Some(proc) = lock(child).as_mut() {
                let _ = proc.kill();
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A mutex poisoned by a panicking thread still holds usable data here.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One sample of every tracked process and of the clusters' phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the run's epoch.
    pub t: f64,
    /// Clusters reporting Running.
    pub running: usize,
    /// Per process name (`operator`, `kube-apiserver`, `etcd`, ...).
    pub procs: BTreeMap<String, ProcSample>,
}

/// Samples the processes every `interval` on a thread until dropped.
pub struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pids: Arc<Mutex<Vec<(String, u32)>>>,
    epoch: Instant,
}

impl Sampler {
    /// Starts sampling `pids` (name, pid) and the watch's Running count.
    pub fn start(
        pids: Vec<(String, u32)>,
        watch: Arc<Mutex<WatchState>>,
        epoch: Instant,
        interval: Duration,
    ) -> Result<Sampler> {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let pids = Arc::new(Mutex::new(pids));
        let ticks = procfs::clock_ticks();
        let thread = {
            let (samples, stop, pids) = (samples.clone(), stop.clone(), pids.clone());
            std::thread::Builder::new()
                .name("bench-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let sample = take_sample(&lock(&pids), &watch, epoch, ticks);
                        lock(&samples).push(sample);
                        // Sleep in short steps so that stopping is quick.
                        let until = Instant::now() + interval;
                        while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                })
                .context("starting the sampler thread")?
        };
        Ok(Sampler {
            samples,
            stop,
            thread: Some(thread),
            pids,
            epoch,
        })
    }

    /// Adds a process to sample from now on.
    pub fn track(&self, name: &str, pid: u32) {
        lock(&self.pids).push((name.to_string(), pid));
    }

    /// A sample taken now, outside the periodic ones (phase boundaries).
    pub fn now(&self, watch: &Arc<Mutex<WatchState>>) -> Sample {
        let sample = take_sample(&lock(&self.pids), watch, self.epoch, procfs::clock_ticks());
        lock(&self.samples).push(sample.clone());
        sample
    }

    /// Stops sampling and returns every sample in time order.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut samples = std::mem::take(&mut *lock(&self.samples));
        samples.sort_by(|a, b| a.t.total_cmp(&b.t));
        samples
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn take_sample(
    pids: &[(String, u32)],
    watch: &Arc<Mutex<WatchState>>,
    epoch: Instant,
    ticks: f64,
) -> Sample {
    let t = epoch.elapsed().as_secs_f64();
    let procs = pids
        .iter()
        .filter_map(|(name, pid)| procfs::sample(*pid, ticks).ok().map(|s| (name.clone(), s)))
        .collect();
    Sample {
        t,
        running: lock(watch).running(),
        procs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_watch_lines_and_judges_settled() {
        let (name, seen) = Seen::parse("bench-0001|2|5|8.4.0|2|Running|5|8.4.0\n").unwrap();
        assert_eq!(name, "bench-0001");
        let want = Expected {
            replicas: 5,
            version: "8.4.0".into(),
        };
        assert!(seen.running());
        assert!(seen.settled(&want));
        // Running, but still on the old generation's status.
        let (_, stale) = Seen::parse("bench-0001|2|5|8.4.0|1|Running|3|8.4.0").unwrap();
        assert!(stale.running());
        assert!(!stale.settled(&want));
        // No status yet.
        let (_, fresh) = Seen::parse("bench-0002|1|3|16.2||||").unwrap();
        assert_eq!(fresh.observed_generation, None);
        assert!(!fresh.running());
        assert!(Seen::parse("error: the server doesn't have a resource type").is_none());
        assert!(Seen::parse("|1|3|16.2||||").is_none());
    }

    #[test]
    fn lag_runs_from_the_last_pod_ready_to_running() {
        let mut st = WatchState {
            replicas_for_lag: 3,
            ..WatchState::default()
        };
        let line = |pod: &str, ready: &str| format!("{pod}|bench-0001|{ready}");
        for (pod, ready, at) in [
            ("bench-0001-0", "False", 1.0),
            ("bench-0001-0", "True", 2.0),
            ("bench-0001-1", "True", 3.0),
            // Not ready yet: the cluster is not all Ready at 3.5.
            ("bench-0001-2", "", 3.5),
            ("bench-0001-2", "True", 4.0),
            // A later change does not move the moment.
            ("bench-0001-1", "True", 9.0),
        ] {
            let (p, c, r) = parse_pod_line(&line(pod, ready)).unwrap();
            st.pod_seen(p, c, r, at);
        }
        assert_eq!(st.pods_ready.get("bench-0001"), Some(&4.0));
        st.first_running.insert("bench-0001".into(), 4.75);
        // A cluster whose pods were never seen all Ready has no lag.
        st.first_running.insert("bench-0002".into(), 5.0);
        assert_eq!(st.running_lags(), vec![0.75]);
        assert!(parse_pod_line("bench-0001-0||True").is_none());
    }
}
