//! A pod worker's life: created for a pod, it mounts the volumes, writes the hosts files,
//! runs the init containers then the containers, and reaps what exits.

use super::*;

impl PodWorker {
    pub(super) fn new(ctx: &Ctx, pod: &Pod, ips: &mut IpAllocator) -> Self {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let status = pod.status.as_ref();
        // Keep an address the pod already has (agent restarted).
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| ips.claim(*ip))
            .or_else(|| ips.allocate());
        let spec = pod.spec.clone().unwrap_or_default();
        let conditions = status
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .map(|c| Condition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        last_transition_time: c
                            .last_transition_time
                            .as_ref()
                            .and_then(|t| serde_json::to_value(t).ok())
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        reason: c.reason.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            dir: pods_dir(&ctx.state_dir).join(format!("{namespace}_{name}")),
            host_ip: ctx.node_ip(&node).unwrap_or(Ipv4Addr::LOCALHOST),
            namespace,
            name,
            node,
            ip,
            start_time: status
                .and_then(|s| s.start_time.as_ref())
                .and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(now_rfc3339),
            init: spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| Ctr::new(c, true))
                .collect(),
            main: spec.containers.iter().map(|c| Ctr::new(c, false)).collect(),
            volumes: BTreeMap::new(),
            volumes_ok: false,
            last_full_volume_sync: None,
            tokens: Tokens::default(),
            mount_error: None,
            hosts_text: String::new(),
            last_status: None,
            conditions,
            warned: BTreeSet::new(),
            terminating_since: None,
            finished: false,
        }
    }

    pub(super) fn ip_string(&self) -> String {
        self.ip.map(|i| i.to_string()).unwrap_or_default()
    }

    pub(super) fn any_running(&mut self) -> bool {
        let mut any = false;
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            if let Some(p) = &mut c.proc {
                if matches!(p.child.try_wait(), Ok(Some(_))) {
                    c.signal(Signal::KILL);
                    c.proc = None;
                    remove_pid_file(&self.dir, &c.spec.name);
                } else {
                    any = true;
                }
            }
        }
        any
    }

    pub(super) fn signal_all(&self, sig: Signal) {
        for c in self.init.iter().chain(self.main.iter()) {
            c.signal(sig);
        }
    }

    /// SIGKILL to every container's process group; waits up to `wait`.
    pub(super) async fn kill_all(&mut self, wait: Duration) {
        self.signal_all(Signal::KILL);
        let deadline = Instant::now() + wait;
        while self.any_running() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes what the pod had on disk, except the logs.
    pub(super) fn cleanup(&self) {
        for sub in ["containers", "volumes"] {
            let _ = fs::remove_dir_all(self.dir.join(sub));
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_file() && p.extension().is_none_or(|x| x != "log") {
                    let _ = fs::remove_file(p);
                }
            }
        }
    }

    pub(super) async fn event(
        &mut self,
        ctx: &Ctx,
        pod: &Pod,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        let now = now_rfc3339();
        let ev = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "generateName": format!("{}.", self.name), "namespace": self.namespace },
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "namespace": self.namespace,
                "name": self.name, "uid": pod.uid().unwrap_or_default(),
            },
            "type": type_,
            "reason": reason,
            "message": message,
            "source": { "component": AGENT_NAME, "host": self.node },
            "reportingComponent": AGENT_NAME,
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let api: Api<Event> = Api::namespaced(ctx.client.clone(), &self.namespace);
        match serde_json::from_value::<Event>(ev) {
            Ok(ev) => {
                if let Err(e) = api.create(&PostParams::default(), &ev).await {
                    eprintln!(
                        "{AGENT_NAME}: event {reason} on {}/{}: {e}",
                        self.namespace, self.name
                    );
                }
            }
            Err(e) => eprintln!("{AGENT_NAME}: building event {reason}: {e}"),
        }
    }

    pub(super) async fn sync(
        &mut self,
        ctx: &Ctx,
        pod: &Pod,
        pods: &[PodEntry],
        services: &[ServiceEntry],
    ) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(ctx, pod).await;
        }
        let Some(ip) = self.ip else {
            anyhow::bail!(
                "no free pod IP in {}",
                crate::cluster::procnode::ipam::POD_RANGE
            );
        };
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        self.write_hosts(pod, pods, services)?;

        // Volumes: the downward API every pass, the rest every 10 s.
        let full = self
            .last_full_volume_sync
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10));
        if full || self.volumes_ok {
            let cx = VolumeCtx {
                client: &ctx.client,
                pod,
                pod_dir: &self.dir,
                pv_root: &volumes_dir(&ctx.state_dir),
                pod_ip: &ip.to_string(),
                host_ip: &self.host_ip.to_string(),
                full,
            };
            if full {
                self.last_full_volume_sync = Some(Instant::now());
            }
            match volumes::sync(&cx, &mut self.tokens, &mut self.volumes).await {
                Ok(()) => {
                    self.volumes_ok = true;
                    self.mount_error = None;
                }
                Err(e) => {
                    if !self.volumes_ok && self.mount_error.as_ref() != Some(&e) {
                        self.event(ctx, pod, "Warning", "FailedMount", &e).await;
                    }
                    if !self.volumes_ok {
                        self.mount_error = Some(e);
                    }
                }
            }
        }

        if self.volumes_ok {
            self.run_containers(ctx, pod).await;
        } else {
            let msg = self.mount_error.clone();
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                if c.proc.is_none() && !c.ever_started {
                    c.state = CState::waiting("ContainerCreating", msg.clone());
                }
            }
        }
        self.patch_status(ctx, pod).await
    }

    fn write_hosts(
        &mut self,
        pod: &Pod,
        pods: &[PodEntry],
        services: &[ServiceEntry],
    ) -> Result<()> {
        let own = pod_entry(pod);
        let text = hosts::render(&own, &self.ip_string(), pods, services);
        if text != self.hosts_text {
            // In place (same inode): the file is bind-mounted into running containers.
            let path = self.dir.join("hosts");
            fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
            self.hosts_text = text;
        }
        let resolv = self.dir.join("resolv.conf");
        if !resolv.exists() {
            fs::write(
                &resolv,
                format!(
                    "# No DNS on the local cluster: names come from /etc/hosts.\nsearch {}.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:1\n",
                    self.namespace
                ),
            )?;
        }
        Ok(())
    }

    async fn run_containers(&mut self, ctx: &Ctx, pod: &Pod) {
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        // Exits first.
        for i in 0..self.init.len() + self.main.len() {
            self.reap(ctx, pod, i, &policy).await;
        }
        // Init containers one at a time, in order.
        let mut initialized = true;
        for i in 0..self.init.len() {
            let c = &self.init[i];
            if matches!(c.state, CState::Terminated { exit_code: 0, .. }) {
                continue;
            }
            initialized = false;
            if c.proc.is_none() && c.restart_at.is_none_or(|t| Instant::now() >= t) {
                let failed_for_good = policy == "Never" && c.ever_started;
                if !failed_for_good {
                    self.start(ctx, pod, i).await;
                }
            }
            break;
        }
        if !initialized {
            return;
        }
        for j in 0..self.main.len() {
            let i = self.init.len() + j;
            let c = &self.main[j];
            let due = c.restart_at.is_some_and(|t| Instant::now() >= t);
            if c.proc.is_none() && (!c.ever_started || due) {
                self.start(ctx, pod, i).await;
            } else if c.proc.is_none() && !c.ever_started {
                // keep waiting state
            }
        }
        self.probe_all(ctx, pod).await;
    }

    pub(super) fn ctr(&mut self, i: usize) -> &mut Ctr {
        if i < self.init.len() {
            &mut self.init[i]
        } else {
            let j = i - self.init.len();
            &mut self.main[j]
        }
    }

    /// Notices an exited container and decides on its restart.
    async fn reap(&mut self, ctx: &Ctx, pod: &Pod, i: usize, policy: &str) {
        let dir = self.dir.clone();
        let pod_ref = format!(
            "{}_{}({})",
            self.name,
            self.namespace,
            pod.uid().unwrap_or_default()
        );
        let pod_name = self.name.clone();
        let c = self.ctr(i);
        let Some(p) = &mut c.proc else {
            return;
        };
        let Ok(Some(exit)) = p.child.try_wait() else {
            // Still running: enforce a stop deadline.
            if p.stop_deadline.is_some_and(|d| Instant::now() >= d) {
                c.signal(Signal::KILL);
            }
            return;
        };
        let ran_for = p.started.elapsed();
        let started_at = p.started_at.clone();
        // Whatever else runs in the container's process group goes too.
        c.signal(Signal::KILL);
        c.proc = None;
        remove_pid_file(&dir, &c.spec.name);
        let (code, signal) = match (exit.code(), exit.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(sig)),
            _ => (255, None),
        };
        let terminated = CState::Terminated {
            exit_code: code,
            signal,
            reason: status::exit_reason(code).to_string(),
            started_at,
            finished_at: now_rfc3339(),
            message: termination_message(&dir, &c.spec.name).or_else(|| {
                (code != 0
                    && c.spec.termination_message_policy.as_deref()
                        == Some("FallbackToLogsOnError"))
                .then(|| log_tail(&dir, &c.spec.name))
                .flatten()
            }),
        };
        c.ready = false;
        c.started = false;
        c.readiness = None;
        c.liveness = None;
        c.startup = None;
        let killed_by_probe = c.killing_reason.take();
        let restart = match policy {
            "Never" => false,
            "OnFailure" => code != 0 || killed_by_probe.is_some(),
            _ => !c.init || code != 0,
        };
        let name = c.spec.name.clone();
        if restart {
            let delay = c.backoff.on_exit(ran_for);
            c.last = Some(terminated);
            c.restart_at = Some(Instant::now() + delay);
            if delay.is_zero() {
                c.state = CState::waiting("ContainerCreating", None);
            } else {
                let msg = format!(
                    "back-off {}s restarting failed container={name} pod={pod_ref}",
                    delay.as_secs(),
                );
                c.state = CState::waiting("CrashLoopBackOff", Some(msg.clone()));
                self.event(
                    ctx,
                    pod,
                    "Warning",
                    "BackOff",
                    &format!("Back-off restarting failed container {name} in pod {pod_name}",),
                )
                .await;
            }
        } else {
            c.state = terminated;
            c.restart_at = None;
        }
    }
}
