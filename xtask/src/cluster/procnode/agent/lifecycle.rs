//! A running pod's probes, the status the agent writes for it, and its graceful deletion.

use super::*;

impl PodWorker {
    pub(super) async fn probe_all(&mut self, ctx: &Ctx, pod: &Pod) {
        let ip = self.ip.unwrap_or(Ipv4Addr::LOCALHOST);
        let grace = grace_period(pod);
        for j in 0..self.main.len() {
            let c = &mut self.main[j];
            let Some(p) = &c.proc else {
                continue;
            };
            if p.stop_deadline.is_some() {
                continue;
            }
            let (pid, uid, gid, env) = (p.pid, p.uid, p.gid, p.env.clone());
            let ports = c.spec.ports.clone().unwrap_or_default();
            let nsenter = ctx.tools.nsenter.clone();
            let make = |probe: &Probe| action(probe, &nsenter, pid, uid, gid, &env, ip, &ports);
            let mut failed: Option<String> = None;
            if !c.started {
                if let Some(r) = &mut c.startup
                    && let Some(res) = r.poll(make).await
                {
                    if res {
                        c.started = true;
                    } else if r.tracker_failed() {
                        failed = Some("Startup probe failed".into());
                    }
                }
            } else {
                if let Some(r) = &mut c.liveness
                    && let Some(false) = r.poll(make).await
                {
                    failed = Some("Liveness probe failed".into());
                }
                match &mut c.readiness {
                    Some(r) => {
                        if let Some(res) = r.poll(make).await {
                            c.ready = res;
                        }
                    }
                    None => c.ready = true,
                }
            }
            if let Some(reason) = failed {
                let name = c.spec.name.clone();
                c.ready = false;
                c.killing_reason = Some(reason.clone());
                c.signal(Signal::TERM);
                if let Some(p) = &mut c.proc {
                    p.stop_deadline = Some(Instant::now() + grace);
                }
                self.event(
                    ctx,
                    pod,
                    "Warning",
                    "Unhealthy",
                    &format!("{reason}; container {name} will be restarted"),
                )
                .await;
            }
        }
    }

    pub(super) async fn patch_status(&mut self, ctx: &Ctx, pod: &Pod) -> Result<()> {
        let now = now_rfc3339();
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let init: Vec<CView> = self.init.iter().map(Ctr::view).collect();
        let mut main: Vec<CView> = self.main.iter().map(Ctr::view).collect();
        let initialized = status::initialized(&init);
        if !initialized {
            for (m, c) in main.iter_mut().zip(&self.main) {
                if !c.ever_started {
                    m.state = CState::waiting("PodInitializing", None);
                }
            }
        }
        let phase = status::phase(&init, &main, &policy);
        let conds = status::conditions(&self.conditions, &init, &main, &now);
        let mut cond_json: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .filter(|c| c.type_ == "PodScheduled")
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect()
            })
            .unwrap_or_default();
        cond_json.extend(conds.iter().map(Condition::to_json));
        let ip = self.ip_string();
        let host = self.host_ip.to_string();
        let body = json!({
            "status": {
                "phase": phase,
                "conditions": cond_json,
                "hostIP": host,
                "hostIPs": [{ "ip": host }],
                "podIP": ip,
                "podIPs": [{ "ip": ip }],
                "startTime": self.start_time,
                "initContainerStatuses": init.iter().map(CView::to_json).collect::<Vec<_>>(),
                "containerStatuses": main.iter().map(CView::to_json).collect::<Vec<_>>(),
            }
        });
        if self.last_status.as_ref() == Some(&body) {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        api.patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .with_context(|| {
                format!(
                    "patching the status of pod {}/{}",
                    self.namespace, self.name
                )
            })?;
        self.conditions = conds;
        self.last_status = Some(body);
        Ok(())
    }

    /// deletionTimestamp is set: SIGTERM, SIGKILL after the grace period,
    /// then the final delete (grace 0, this pod's UID).
    pub(super) async fn terminate(&mut self, ctx: &Ctx, pod: &Pod) -> Result<()> {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or_else(|| grace_period(pod));
        if self.terminating_since.is_none() {
            self.terminating_since = Some(Instant::now());
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                c.restart_at = None;
                if c.proc.is_some() {
                    c.signal(Signal::TERM);
                }
            }
            let names: Vec<String> = self
                .main
                .iter()
                .filter(|c| c.proc.is_some())
                .map(|c| c.spec.name.clone())
                .collect();
            if !names.is_empty() {
                self.event(
                    ctx,
                    pod,
                    "Normal",
                    "Killing",
                    &format!("Stopping container {}", names.join(", ")),
                )
                .await;
            }
        }
        let since = self.terminating_since.unwrap_or_else(Instant::now);
        if self.any_running() {
            if since.elapsed() < grace {
                return Ok(());
            }
            self.kill_all(Duration::from_secs(5)).await;
        }
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e).context("completing the pod's deletion"),
        }
        self.finished = true;
        Ok(())
    }
}
