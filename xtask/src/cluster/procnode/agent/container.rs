//! A container of a pod worker: its process, its probes and the view its status is made of.

use super::*;

impl ProbeRunner {
    pub(super) fn new(spec: &Probe, initial: bool, started: Instant) -> Self {
        Self {
            tracker: ProbeTracker::new(
                spec.success_threshold.unwrap_or(1),
                spec.failure_threshold.unwrap_or(3),
                initial,
            ),
            next_at: started
                + Duration::from_secs(spec.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            pending: None,
            spec: spec.clone(),
        }
    }

    pub(super) fn period(&self) -> Duration {
        Duration::from_secs(self.spec.period_seconds.unwrap_or(10).max(1) as u64)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.spec.timeout_seconds.unwrap_or(1).max(1) as u64)
    }

    /// Collects a finished probe, starts a due one; returns Some(result)
    /// when a probe completed in this call.
    pub(super) async fn poll(
        &mut self,
        action: impl FnOnce(&Probe) -> Option<Action>,
    ) -> Option<bool> {
        let mut completed = None;
        if let Some(h) = &self.pending
            && h.is_finished()
            && let Some(h) = self.pending.take()
        {
            let ok = h.await.unwrap_or(false);
            completed = Some(self.tracker.record(ok));
        }
        if self.pending.is_none() && Instant::now() >= self.next_at {
            self.next_at = Instant::now() + self.period();
            let timeout = self.timeout();
            match action(&self.spec) {
                Some(a) => {
                    self.pending =
                        Some(tokio::task::spawn_blocking(move || probe::run(&a, timeout)));
                }
                None => completed = Some(self.tracker.record(false)),
            }
        }
        completed
    }
}

impl Ctr {
    pub(super) fn new(spec: &Container, init: bool) -> Self {
        Self {
            spec: spec.clone(),
            init,
            proc: None,
            state: CState::waiting("PodInitializing", None),
            last: None,
            restart_count: 0,
            ever_started: false,
            backoff: Backoff::default(),
            restart_at: None,
            ready: false,
            started: false,
            image_id: String::new(),
            readiness: None,
            liveness: None,
            startup: None,
            killing_reason: None,
        }
    }

    pub(super) fn view(&self) -> CView {
        CView {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            image_id: self.image_id.clone(),
            container_id: self.proc.as_ref().map(|p| format!("process://{}", p.pid)),
            state: self.state.clone(),
            last: self.last.clone(),
            restart_count: self.restart_count,
            ready: self.ready,
            started: self.started,
        }
    }

    pub(super) fn signal(&self, sig: Signal) {
        if let Some(p) = &self.proc
            && let Some(pid) = Pid::from_raw(p.pid as i32)
        {
            let _ = kill_process_group(pid, sig);
        }
    }
}

impl ProbeRunner {
    pub(super) fn tracker_failed(&self) -> bool {
        self.tracker.failed()
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn action(
    probe: &Probe,
    nsenter: &Path,
    pid: u32,
    uid: i64,
    gid: i64,
    env: &[(String, String)],
    pod_ip: Ipv4Addr,
    ports: &[k8s_openapi::api::core::v1::ContainerPort],
) -> Option<Action> {
    let port_of = |p: &IntOrString| -> Option<u16> {
        match p {
            IntOrString::Int(n) => u16::try_from(*n).ok(),
            IntOrString::String(name) => ports
                .iter()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok()),
        }
    };
    let host_of = |h: Option<&String>| -> Option<Ipv4Addr> {
        match h.filter(|h| !h.is_empty()) {
            None => Some(pod_ip),
            Some(h) => h.parse().ok(),
        }
    };
    if let Some(e) = &probe.exec {
        return Some(Action::Exec {
            nsenter: nsenter.to_path_buf(),
            pid,
            uid,
            gid,
            argv: e.command.clone().unwrap_or_default(),
            env: env.to_vec(),
        });
    }
    if let Some(t) = &probe.tcp_socket {
        let ip = host_of(t.host.as_ref())?;
        return Some(Action::Tcp {
            addr: SocketAddr::from((ip, port_of(&t.port)?)),
        });
    }
    if let Some(h) = &probe.http_get {
        let ip = host_of(h.host.as_ref())?;
        let port = port_of(&h.port)?;
        return Some(Action::Http {
            addr: SocketAddr::from((ip, port)),
            host: format!("{ip}:{port}"),
            path: h.path.clone().unwrap_or_else(|| "/".into()),
        });
    }
    None
}
