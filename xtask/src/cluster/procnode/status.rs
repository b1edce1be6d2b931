//! Pure parts of the pod status: container states, phase, conditions with
//! their transition times, restart back-off and probe thresholds.

use std::time::Duration;

use serde_json::{Value, json};

/// One container's state as the pod status shows it. Times are RFC 3339.
#[derive(Debug, Clone, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: String,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        reason: String,
        started_at: String,
        finished_at: String,
        /// What the container wrote to its `terminationMessagePath`.
        message: Option<String>,
    },
}

impl CState {
    pub fn waiting(reason: &str, message: Option<String>) -> CState {
        CState::Waiting {
            reason: reason.to_string(),
            message,
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                let mut w = json!({ "reason": reason });
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({ "waiting": w })
            }
            CState::Running { started_at } => json!({ "running": { "startedAt": started_at } }),
            CState::Terminated {
                exit_code,
                signal,
                reason,
                started_at,
                finished_at,
                message,
            } => {
                let mut t = json!({
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": started_at,
                    "finishedAt": finished_at,
                });
                if let Some(s) = signal {
                    t["signal"] = json!(s);
                }
                if let Some(m) = message {
                    t["message"] = json!(m);
                }
                json!({ "terminated": t })
            }
        }
    }

    fn succeeded(&self) -> bool {
        matches!(self, CState::Terminated { exit_code: 0, .. })
    }
}

/// Terminated reason for an exit: `Completed` for 0, else `Error`.
pub fn exit_reason(code: i32) -> &'static str {
    if code == 0 { "Completed" } else { "Error" }
}

/// A container as the status reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct CView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub state: CState,
    pub last: Option<CState>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
}

impl CView {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id,
            "state": self.state.to_json(),
            "lastState": self.last.as_ref().map(CState::to_json).unwrap_or_else(|| json!({})),
            "restartCount": self.restart_count,
            "ready": self.ready,
            "started": self.started,
        });
        if let Some(id) = &self.container_id {
            v["containerID"] = json!(id);
        }
        v
    }
}

/// True when every init container has terminated with exit code 0.
pub fn initialized(init: &[CView]) -> bool {
    init.iter().all(|c| c.state.succeeded())
}

/// The pod phase from its containers, as the kubelet's `getPhase` computes
/// it (restartPolicy `Always`, `OnFailure` or `Never`).
pub fn phase(init: &[CView], containers: &[CView], restart_policy: &str) -> &'static str {
    if !initialized(init) {
        let failed_for_good = restart_policy == "Never"
            && init
                .iter()
                .any(|c| matches!(c.state, CState::Terminated { exit_code, .. } if exit_code != 0));
        return if failed_for_good { "Failed" } else { "Pending" };
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in containers {
        match &c.state {
            CState::Running { .. } => running += 1,
            CState::Terminated { .. } => {
                stopped += 1;
                if c.state.succeeded() {
                    succeeded += 1;
                }
            }
            CState::Waiting { .. } => {
                if c.last.is_some() {
                    stopped += 1;
                    if c.last.as_ref().is_some_and(CState::succeeded) {
                        succeeded += 1;
                    }
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        match restart_policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        }
    } else {
        "Pending"
    }
}

/// One pod condition with its transition time.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub last_transition_time: String,
    pub reason: Option<String>,
}

impl Condition {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "type": self.type_,
            "status": self.status,
            "lastTransitionTime": self.last_transition_time,
            "lastProbeTime": null,
        });
        if let Some(r) = &self.reason {
            v["reason"] = json!(r);
        }
        v
    }
}

/// The conditions the agent owns: PodReadyToStartContainers, Initialized,
/// ContainersReady, Ready. The transition time moves only when a status
/// changes; `prev` holds the pod's current conditions.
pub fn conditions(
    prev: &[Condition],
    init: &[CView],
    containers: &[CView],
    now: &str,
) -> Vec<Condition> {
    let is_init = initialized(init);
    let containers_ready = is_init && containers.iter().all(|c| c.ready);
    let want: [(&str, bool, Option<&str>); 4] = [
        ("PodReadyToStartContainers", true, None),
        (
            "Initialized",
            is_init,
            (!is_init).then_some("ContainersNotInitialized"),
        ),
        (
            "ContainersReady",
            containers_ready,
            (!containers_ready).then_some("ContainersNotReady"),
        ),
        (
            "Ready",
            containers_ready,
            (!containers_ready).then_some("ContainersNotReady"),
        ),
    ];
    want.iter()
        .map(|(type_, ok, reason)| {
            let status = if *ok { "True" } else { "False" };
            let ltt = prev
                .iter()
                .find(|c| c.type_ == *type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.to_string());
            Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                last_transition_time: ltt,
                reason: reason.map(str::to_string),
            }
        })
        .collect()
}

/// Restart back-off: the first restart is immediate, then 10 s doubling up
/// to 5 minutes; a container that ran 10 minutes starts over.
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    next: Duration,
}

pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

impl Backoff {
    /// The delay before restarting a container that exited after `ran_for`.
    pub fn on_exit(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= 2 * BACKOFF_MAX {
            self.next = Duration::ZERO;
        }
        let delay = self.next;
        self.next = if delay.is_zero() {
            BACKOFF_INITIAL
        } else {
            (delay * 2).min(BACKOFF_MAX)
        };
        delay
    }
}

/// A probe's result after its success and failure thresholds.
#[derive(Debug, Clone)]
pub struct ProbeTracker {
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    result: bool,
}

impl ProbeTracker {
    /// `initial` is the result before any probe ran (false for readiness and
    /// startup, true for liveness).
    pub fn new(success_threshold: i32, failure_threshold: i32, initial: bool) -> Self {
        Self {
            success_threshold: success_threshold.max(1) as u32,
            failure_threshold: failure_threshold.max(1) as u32,
            successes: 0,
            failures: 0,
            result: initial,
        }
    }

    /// Records one probe outcome; returns the result.
    pub fn record(&mut self, ok: bool) -> bool {
        if ok {
            self.failures = 0;
            self.successes += 1;
            if self.successes >= self.success_threshold {
                self.result = true;
            }
        } else {
            self.successes = 0;
            self.failures += 1;
            if self.failures >= self.failure_threshold {
                self.result = false;
            }
        }
        self.result
    }

    pub fn result(&self) -> bool {
        self.result
    }

    /// The failure threshold is reached (for a startup probe, whose result
    /// is false from the start).
    pub fn failed(&self) -> bool {
        self.failures >= self.failure_threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, state: CState, last: Option<CState>, ready: bool) -> CView {
        CView {
            name: name.into(),
            image: "img".into(),
            image_id: "img@1".into(),
            container_id: None,
            state,
            last,
            restart_count: 0,
            ready,
            started: ready,
        }
    }

    fn running() -> CState {
        CState::Running {
            started_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    fn exited(code: i32) -> CState {
        CState::Terminated {
            exit_code: code,
            signal: None,
            reason: exit_reason(code).into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:00:01Z".into(),
            message: None,
        }
    }

    #[test]
    fn phase_follows_init_then_containers() {
        let waiting = CState::waiting("PodInitializing", None);
        let init_running = [view("init", running(), None, false)];
        let init_done = [view("init", exited(0), None, false)];
        let init_failed = [view("init", exited(1), None, false)];
        let main_waiting = [view("main", waiting.clone(), None, false)];
        assert_eq!(phase(&init_running, &main_waiting, "Always"), "Pending");
        assert_eq!(phase(&init_failed, &main_waiting, "Always"), "Pending");
        assert_eq!(phase(&init_failed, &main_waiting, "Never"), "Failed");
        assert_eq!(phase(&init_done, &main_waiting, "Always"), "Pending");
        let main_running = [view("main", running(), None, true)];
        assert_eq!(phase(&init_done, &main_running, "Always"), "Running");
        // Crash-looping (waiting with a last state) stays Running.
        let crash = [view(
            "main",
            CState::waiting("CrashLoopBackOff", None),
            Some(exited(1)),
            false,
        )];
        assert_eq!(phase(&[], &crash, "Always"), "Running");
        assert_eq!(
            phase(&[], &[view("main", exited(0), None, false)], "Never"),
            "Succeeded"
        );
        assert_eq!(
            phase(&[], &[view("main", exited(2), None, false)], "Never"),
            "Failed"
        );
        assert_eq!(
            phase(&[], &[view("main", exited(2), None, false)], "OnFailure"),
            "Running"
        );
    }

    #[test]
    fn conditions_keep_transition_time_until_status_changes() {
        let t0 = "2026-01-01T00:00:00Z";
        let t1 = "2026-01-01T00:00:05Z";
        let t2 = "2026-01-01T00:00:09Z";
        let not_ready = [view("main", running(), None, false)];
        let ready = [view("main", running(), None, true)];
        let c0 = conditions(&[], &[], &not_ready, t0);
        let get = |cs: &[Condition], t: &str| cs.iter().find(|c| c.type_ == t).cloned().unwrap();
        assert_eq!(get(&c0, "Ready").status, "False");
        assert_eq!(get(&c0, "Initialized").status, "True");
        let c1 = conditions(&c0, &[], &ready, t1);
        assert_eq!(get(&c1, "Ready").status, "True");
        assert_eq!(get(&c1, "Ready").last_transition_time, t1);
        assert_eq!(get(&c1, "Initialized").last_transition_time, t0);
        let c2 = conditions(&c1, &[], &ready, t2);
        assert_eq!(c2, c1);
        let c3 = conditions(&c2, &[], &not_ready, t2);
        assert_eq!(get(&c3, "ContainersReady").status, "False");
        assert_eq!(get(&c3, "ContainersReady").last_transition_time, t2);
        assert_eq!(
            get(&c3, "ContainersReady").reason.as_deref(),
            Some("ContainersNotReady")
        );
    }

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let mut b = Backoff::default();
        let s = Duration::from_secs;
        let delays: Vec<u64> = (0..8).map(|_| b.on_exit(s(1)).as_secs()).collect();
        assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(b.on_exit(s(600)), Duration::ZERO);
        assert_eq!(b.on_exit(s(1)), s(10));
    }

    #[test]
    fn probe_thresholds() {
        let mut readiness = ProbeTracker::new(2, 3, false);
        assert!(!readiness.record(true));
        assert!(readiness.record(true));
        assert!(readiness.record(false));
        assert!(readiness.record(false));
        assert!(!readiness.record(false));
        assert!(!readiness.record(true));
        assert!(readiness.record(true));
        let mut startup = ProbeTracker::new(1, 2, false);
        assert!(!startup.record(false));
        assert!(!startup.failed());
        assert!(!startup.record(false));
        assert!(startup.failed());
        let mut liveness = ProbeTracker::new(1, 1, true);
        assert!(liveness.result());
        assert!(!liveness.record(false));
        assert!(liveness.record(true));
    }

    #[test]
    fn container_json_has_the_kubelet_fields() {
        let mut v = view("main", running(), Some(exited(137)), true);
        v.container_id = Some("process://42".into());
        v.restart_count = 1;
        let j = v.to_json();
        assert_eq!(j["containerID"], "process://42");
        assert_eq!(j["restartCount"], 1);
        assert_eq!(j["state"]["running"]["startedAt"], "2026-01-01T00:00:00Z");
        assert_eq!(j["lastState"]["terminated"]["exitCode"], 137);
        assert_eq!(j["lastState"]["terminated"]["reason"], "Error");
    }
}
