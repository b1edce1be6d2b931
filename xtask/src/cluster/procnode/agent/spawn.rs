//! Starting a container: its image resolved, its environment, command, identity and mounts
//! worked out, the launch script written and the process started under `unshare`.

use k8s_openapi::api::core::v1::PodSpec;

use super::*;

impl PodWorker {
    pub(super) async fn start(&mut self, ctx: &Ctx, pod: &Pod, i: usize) {
        let image_ref = self.ctr(i).spec.image.clone().unwrap_or_default();
        let image = match ctx.images.resolve(&image_ref) {
            Resolution::Ready(img) => img,
            Resolution::Preparing => {
                self.ctr(i).state = CState::waiting(
                    "ContainerCreating",
                    Some(format!("preparing the local root of image {image_ref}")),
                );
                return;
            }
            Resolution::Unavailable { reason } => {
                self.ctr(i).state = CState::waiting("ImageNotAvailable", Some(reason.clone()));
                if self.warned.insert(image_ref.clone()) {
                    self.event(ctx, pod, "Warning", "ImageNotAvailable", &reason)
                        .await;
                }
                return;
            }
        };
        match self.spawn(ctx, pod, i, &image).await {
            Ok(()) => {
                let c = self.ctr(i);
                let name = c.spec.name.clone();
                let pid = c.proc.as_ref().map(|p| p.pid).unwrap_or(0);
                self.event(
                    ctx,
                    pod,
                    "Normal",
                    "Started",
                    &format!("Started container {name} (process {pid})"),
                )
                .await;
            }
            Err((reason, message)) => {
                let c = self.ctr(i);
                let name = c.spec.name.clone();
                c.state = CState::waiting(&reason, Some(message.clone()));
                c.restart_at = Some(Instant::now() + Duration::from_secs(2));
                if self.warned.insert(format!("{reason}/{name}/{message}")) {
                    self.event(
                        ctx,
                        pod,
                        "Warning",
                        "Failed",
                        &format!("container {name}: {message}"),
                    )
                    .await;
                }
            }
        }
    }

    /// Launches container `i`; an error is (waiting reason, message).
    pub(super) async fn spawn(
        &mut self,
        ctx: &Ctx,
        pod: &Pod,
        i: usize,
        image: &ImageRootfs,
    ) -> std::result::Result<(), (String, String)> {
        let spec = self.ctr(i).spec.clone();
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let ip = self.ip_string();
        let env = container_env(ctx, pod, &spec, image, &ip, &self.host_ip.to_string())
            .await
            .map_err(config_err)?;
        let vars: BTreeMap<String, String> = env.iter().cloned().collect();
        let argv = argv(&spec, image, &vars).map_err(config_err)?;
        let identity = Identity::of(&pod_spec, &spec).map_err(config_err)?;

        let cdir = self.dir.join("containers").join(&spec.name);
        // A fresh writable layer for every start, as a new container has.
        let _ = fs::remove_dir_all(&cdir);
        let (upper, work, merged) = (cdir.join("upper"), cdir.join("work"), cdir.join("merged"));
        for d in [&upper, &work, &merged] {
            fs::create_dir_all(d)
                .map_err(|e| config_err(format!("creating {}: {e}", d.display())))?;
        }
        let mounts = self.mounts(&spec, &vars).map_err(config_err)?;
        let hostname = pod_spec
            .hostname
            .clone()
            .unwrap_or_else(|| self.name.clone());
        let launch = LaunchSpec {
            lower: image.root.clone(),
            upper,
            work,
            merged,
            hostname,
            mounts,
            uid: identity.uid,
            gid: identity.gid,
            groups: identity.groups,
            working_dir: spec.working_dir.clone(),
            argv,
            read_only_root: identity.read_only_root,
        };
        let child = self.launch(ctx, &spec.name, &launch, &env)?;
        self.record_start(i, &spec, image, child, (identity.uid, identity.gid), env);
        Ok(())
    }

    /// The container's mounts: its volume mounts (a `subPath` expanded with `vars` and kept
    /// inside its volume), the pod's hosts and resolv.conf files, and its termination message
    /// file.
    fn mounts(
        &self,
        spec: &Container,
        vars: &BTreeMap<String, String>,
    ) -> std::result::Result<Vec<Mount>, String> {
        let mut mounts = Vec::new();
        for vm in spec.volume_mounts.iter().flatten() {
            let Some(src) = self.volumes.get(&vm.name) else {
                return Err(format!("volume {} is not defined", vm.name));
            };
            let sub = vm
                .sub_path
                .as_deref()
                .map(|s| expand(s, vars))
                .filter(|s| !s.is_empty());
            let source = match &sub {
                Some(s) if s.split('/').any(|c| c == "..") => {
                    return Err(format!("subPath {s} leaves its volume"));
                }
                Some(s) => {
                    let p = src.join(s);
                    if !p.exists() {
                        let _ = fs::create_dir_all(&p);
                    }
                    p
                }
                None => src.clone(),
            };
            mounts.push(Mount {
                file: source.is_file(),
                source,
                target: vm.mount_path.clone(),
                read_only: vm.read_only.unwrap_or(false),
            });
        }
        mounts.push(Mount {
            source: self.dir.join("hosts"),
            target: "/etc/hosts".into(),
            read_only: false,
            file: true,
        });
        mounts.push(Mount {
            source: self.dir.join("resolv.conf"),
            target: "/etc/resolv.conf".into(),
            read_only: false,
            file: true,
        });
        // The termination message file, empty at every start, as a kubelet mounts it. Not
        // under /dev or /proc: those are the host's here (the default /dev/termination-log
        // is not supported; the pods of this project that report set their own path).
        if let Some(path) = spec
            .termination_message_path
            .as_deref()
            .filter(|p| p.starts_with('/') && !p.starts_with("/dev/") && !p.starts_with("/proc/"))
        {
            let file = termination_file(&self.dir, &spec.name);
            fs::write(&file, b"")
                .and_then(|()| fs::set_permissions(&file, fs::Permissions::from_mode(0o666)))
                .map_err(|e| format!("termination message file: {e}"))?;
            mounts.push(Mount {
                source: file,
                target: path.to_owned(),
                read_only: false,
                file: true,
            });
        }
        Ok(mounts)
    }

    /// Writes the launch script of container `name` and starts it under `unshare` in a process
    /// group of its own, its output appended to `<name>.log`.
    fn launch(
        &self,
        ctx: &Ctx,
        name: &str,
        launch: &LaunchSpec,
        env: &[(String, String)],
    ) -> std::result::Result<Child, (String, String)> {
        let script_path = self.dir.join(format!("{name}.launch.sh"));
        let script = launch::script(launch, &ctx.tools);
        fs::write(&script_path, script)
            .and_then(|_| fs::set_permissions(&script_path, fs::Permissions::from_mode(0o700)))
            .map_err(|e| config_err(format!("writing {}: {e}", script_path.display())))?;
        let log_path = self.dir.join(format!("{name}.log"));
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| config_err(format!("opening {}: {e}", log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| config_err(format!("{}: {e}", log_path.display())))?;
        // In the node's cgroup when there is one (what a partition tells its processes by):
        // the shell moves itself there before it becomes `unshare`, so every child is inside.
        let mut command = match &ctx.cgroups {
            Some(cgroups) => {
                let procs = cgroups
                    .procs_file(&self.node)
                    .map_err(|e| config_err(format!("{e:#}")))?;
                let mut c = Command::new("/bin/sh");
                c.args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
                    .arg(procs)
                    .arg(&ctx.tools.unshare);
                c
            }
            None => Command::new(&ctx.tools.unshare),
        };
        command
            .args([
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
            ])
            .arg(&script_path)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                (
                    "RunContainerError".to_string(),
                    format!("starting {}: {e}", ctx.tools.unshare.display()),
                )
            })
    }

    /// Records that container `i` runs `child`: its pid file, restart count, state, and
    /// probes started afresh.
    fn record_start(
        &mut self,
        i: usize,
        spec: &Container,
        image: &ImageRootfs,
        child: Child,
        (uid, gid): (i64, i64),
        env: Vec<(String, String)>,
    ) {
        let pid = child.id();
        let _ = fs::write(
            self.dir.join(format!("{}.pid", spec.name)),
            pid_file_line(pid),
        );
        let now = Instant::now();
        let c = self.ctr(i);
        if c.ever_started {
            c.restart_count += 1;
        }
        c.ever_started = true;
        c.restart_at = None;
        c.image_id = image.image_id.clone();
        c.state = CState::Running {
            started_at: now_rfc3339(),
        };
        c.startup = spec
            .startup_probe
            .as_ref()
            .filter(|_| !c.init)
            .map(|p| ProbeRunner::new(p, false, now));
        c.liveness = spec
            .liveness_probe
            .as_ref()
            .filter(|_| !c.init)
            .map(|p| ProbeRunner::new(p, true, now));
        c.readiness = spec
            .readiness_probe
            .as_ref()
            .filter(|_| !c.init)
            .map(|p| ProbeRunner::new(p, false, now));
        c.started = !c.init && c.startup.is_none();
        c.ready = false;
        c.proc = Some(Proc {
            child,
            pid,
            started: now,
            started_at: match &c.state {
                CState::Running { started_at } => started_at.clone(),
                _ => now_rfc3339(),
            },
            stop_deadline: None,
            uid,
            gid,
            env,
        });
    }
}

/// A configuration error, as a waiting reason and message.
fn config_err(message: String) -> (String, String) {
    ("CreateContainerConfigError".to_string(), message)
}

/// The command line: the container's `command` and `args` (expanded with `vars`), else the
/// image's entrypoint with the container's `args`, else the image's entrypoint and `CMD`.
fn argv(
    spec: &Container,
    image: &ImageRootfs,
    vars: &BTreeMap<String, String>,
) -> std::result::Result<Vec<String>, String> {
    let command: Vec<String> = spec
        .command
        .iter()
        .flatten()
        .map(|s| expand(s, vars))
        .collect();
    let args: Vec<String> = spec
        .args
        .iter()
        .flatten()
        .map(|s| expand(s, vars))
        .collect();
    let argv: Vec<String> = if !command.is_empty() {
        command.into_iter().chain(args).collect()
    } else if !args.is_empty() {
        image.entrypoint.iter().cloned().chain(args).collect()
    } else {
        image
            .entrypoint
            .iter()
            .chain(image.cmd.iter())
            .cloned()
            .collect()
    };
    if argv.is_empty() {
        return Err(format!(
            "no command specified and image {} has none",
            image.image
        ));
    }
    Ok(argv)
}

/// Who a container runs as, from its security context and the pod's.
struct Identity {
    uid: i64,
    gid: i64,
    groups: Vec<i64>,
    read_only_root: bool,
}

impl Identity {
    fn of(pod_spec: &PodSpec, spec: &Container) -> std::result::Result<Self, String> {
        let psc = pod_spec.security_context.clone().unwrap_or_default();
        let csc = spec.security_context.clone().unwrap_or_default();
        let uid = csc.run_as_user.or(psc.run_as_user).unwrap_or(0);
        let gid = csc.run_as_group.or(psc.run_as_group).unwrap_or(0);
        if csc.run_as_non_root.or(psc.run_as_non_root).unwrap_or(false) && uid == 0 {
            return Err("container has runAsNonRoot and image will run as root".into());
        }
        let mut groups: Vec<i64> = psc.fs_group.into_iter().collect();
        groups.extend(psc.supplemental_groups.iter().flatten().copied());
        Ok(Self {
            uid,
            gid,
            groups,
            read_only_root: csc.read_only_root_filesystem.unwrap_or(false),
        })
    }
}

/// The container's environment: the image's, the agent's
/// (`KUBERNETES_SERVICE_*`, `HOSTNAME`), `envFrom`, then `env` in order.
async fn container_env(
    ctx: &Ctx,
    pod: &Pod,
    spec: &Container,
    image: &ImageRootfs,
    pod_ip: &str,
    host_ip: &str,
) -> std::result::Result<Vec<(String, String)>, String> {
    let ns = pod.namespace().unwrap_or_default();
    let mut base: Vec<(String, String)> = image.env.clone();
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.name_any());
    for (k, v) in [
        ("HOSTNAME", hostname),
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT", ctx.api_port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", ctx.api_port.to_string()),
    ] {
        base.retain(|(n, _)| n != k);
        base.push((k.to_string(), v));
    }
    if !base.iter().any(|(k, _)| k == "PATH") {
        base.push((
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ));
    }
    let mut ordered: Vec<(String, String)> = Vec::new();
    // Values from objects are literal: escape `$` so expansion leaves them.
    let lit = |s: String| s.replace('$', "$$");
    for from in spec.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
            match api.get_opt(&r.name).await.map_err(|e| e.to_string())? {
                Some(cm) => ordered.extend(
                    cm.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (format!("{prefix}{k}"), lit(v))),
                ),
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            match api.get_opt(&r.name).await.map_err(|e| e.to_string())? {
                Some(s) => ordered.extend(s.data.unwrap_or_default().into_iter().map(|(k, v)| {
                    (
                        format!("{prefix}{k}"),
                        lit(String::from_utf8_lossy(&v.0).into_owned()),
                    )
                })),
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }
    for e in spec.env.iter().flatten() {
        if let Some(v) = &e.value {
            ordered.push((e.name.clone(), v.clone()));
            continue;
        }
        let Some(from) = &e.value_from else {
            ordered.push((e.name.clone(), String::new()));
            continue;
        };
        let value = if let Some(f) = &from.field_ref {
            volumes::field_value(pod, &f.field_path, pod_ip, host_ip)
                .ok_or_else(|| format!("unsupported fieldRef {}", f.field_path))?
        } else if let Some(s) = &from.secret_key_ref {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            let secret = api.get_opt(&s.name).await.map_err(|e| e.to_string())?;
            match secret.and_then(|sec| sec.data.and_then(|d| d.get(&s.key).cloned())) {
                Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                None if s.optional == Some(true) => continue,
                None => {
                    return Err(format!(
                        "couldn't find key {} in Secret {ns}/{}",
                        s.key, s.name
                    ));
                }
            }
        } else if let Some(c) = &from.config_map_key_ref {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
            let cm = api.get_opt(&c.name).await.map_err(|e| e.to_string())?;
            match cm.and_then(|m| m.data.and_then(|d| d.get(&c.key).cloned())) {
                Some(v) => v,
                None if c.optional == Some(true) => continue,
                None => {
                    return Err(format!(
                        "couldn't find key {} in ConfigMap {ns}/{}",
                        c.key, c.name
                    ));
                }
            }
        } else if let Some(r) = &from.resource_field_ref {
            resource_value(spec, &r.resource)
        } else {
            String::new()
        };
        ordered.push((e.name.clone(), lit(value)));
    }
    Ok(resolve_in_order(&base, &ordered))
}

/// `resourceFieldRef`: the container's limit (or request), else the node's
/// capacity; cpu in whole cores, memory in bytes.
fn resource_value(spec: &Container, resource: &str) -> String {
    let res = spec.resources.as_ref();
    let pick = |map: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                key: &str| map.and_then(|m| m.get(key)).map(|q| q.0.clone());
    let (kind, key) = resource.split_once('.').unwrap_or(("limits", resource));
    let v = match kind {
        "requests" => pick(res.and_then(|r| r.requests.as_ref()), key),
        _ => pick(res.and_then(|r| r.limits.as_ref()), key),
    };
    v.unwrap_or_else(|| match key {
        "cpu" => "8".into(),
        "memory" => (32u64 << 30).to_string(),
        _ => "0".into(),
    })
}
