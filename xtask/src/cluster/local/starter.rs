//! `cluster up`: the components started in order (etcd, kube-apiserver, the controllers and
//! kwok, the process nodes' agent, the S3 server), each recorded in `state.json` as it starts.

use super::*;

/// Starts the components in order and records them in `state.json` as it
/// goes, so that a failure half-way can be cleaned up by `down`.
pub(super) struct Starter<'a> {
    pub(super) opts: &'a UpOptions,
    pub(super) binaries: &'a Binaries,
    pub(super) progress: Progress,
    pub(super) state: State,
    pub(super) children: Vec<(String, Child)>,
    pub(super) pki: PkiFiles,
    /// The S3 server to start, when built.
    pub(super) s3: Option<crate::cluster::s3::S3Binary>,
}

impl<'a> Starter<'a> {
    pub(super) fn new(
        opts: &'a UpOptions,
        state_dir: &Path,
        binaries: &'a Binaries,
        progress: Progress,
    ) -> Result<Self> {
        let logs = state_dir.join("logs");
        fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        for entry in fs::read_dir(&logs)? {
            let path = entry?.path();
            if path.is_file() {
                fs::remove_file(&path)?;
            }
        }
        let state_dir = fs::canonicalize(state_dir)?;
        let state = State {
            format: STATE_FORMAT,
            kubernetes_version: binaries.versions.kubernetes.clone(),
            etcd_version: binaries.versions.etcd.clone(),
            kwok_version: binaries.versions.kwok.clone(),
            bin_dir: binaries.bin_dir(),
            kubeconfig: state_dir.join("kubeconfig"),
            server: String::new(),
            etcd_data_dir: etcd_data_dir(&state_dir),
            audit_log: opts
                .audit_log
                .then(|| state_dir.join("logs").join("audit.log")),
            nodes: manifests::node_names(opts.nodes),
            process_nodes: procnode::node_names(opts.process_nodes),
            started_at_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            ready: false,
            components: Vec::new(),
            state_dir: state_dir.clone(),
        };
        let pki = PkiFiles {
            dir: state_dir.join("pki"),
        };
        Ok(Self {
            opts,
            binaries,
            progress,
            state,
            children: Vec::new(),
            pki,
            s3: None,
        })
    }

    fn dir(&self) -> &Path {
        &self.state.state_dir
    }

    pub(super) fn start_all(&mut self) -> Result<()> {
        pki::generate(&self.pki.dir)?;
        let ports = free_ports(8)?;
        let [
            etcd_client,
            etcd_peer,
            apiserver,
            kcm,
            scheduler,
            kwok_server,
            s3_port,
            ..,
        ] = ports[..]
        else {
            unreachable!("free_ports(8) returns 8 ports");
        };
        self.state.server = format!("https://127.0.0.1:{apiserver}");
        self.write_kubeconfigs()?;
        self.progress.step(format!(
            "PKI and kubeconfig written to {}",
            self.dir().display()
        ));
        self.start_etcd(etcd_client, etcd_peer)?;
        self.start_apiserver(etcd_client, apiserver)?;
        self.start_controllers(kcm, scheduler, kwok_server)?;
        self.create_bootstrap_objects()?;
        self.wait_for_controllers(scheduler)?;
        if !self.state.process_nodes.is_empty() {
            self.start_node_agent()?;
        }
        if let Some(s3) = self.s3.clone() {
            let (kubectl, kubeconfig) = self.kubectl();
            self.start_s3(&s3, s3_port, &kubectl, &kubeconfig)?;
        }
        self.state.ready = true;
        self.state.save()
    }

    /// The kubectl binary and the admin kubeconfig.
    fn kubectl(&self) -> (PathBuf, PathBuf) {
        (self.binaries.kubectl(), self.state.kubeconfig.clone())
    }

    /// etcd on a fresh data directory, its client and peer URLs on `client` and `peer`.
    fn start_etcd(&mut self, client: u16, peer: u16) -> Result<()> {
        if self.state.etcd_data_dir.exists() {
            fs::remove_dir_all(&self.state.etcd_data_dir)?;
        }
        fs::create_dir_all(&self.state.etcd_data_dir)?;
        let etcd_args = vec![
            "--name=local".to_string(),
            format!("--data-dir={}", self.state.etcd_data_dir.display()),
            format!("--listen-client-urls=http://127.0.0.1:{client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=local=http://127.0.0.1:{peer}"),
            "--initial-cluster-state=new".to_string(),
            "--unsafe-no-fsync=true".to_string(),
            "--log-level=warn".to_string(),
        ];
        self.start(
            "etcd",
            self.binaries.etcd(),
            etcd_args,
            &[("client", client), ("peer", peer)],
        )?;
        self.wait("etcd", Duration::from_secs(60), |_| {
            matches!(
                http_get_loopback(client, "/health", Duration::from_secs(2)),
                Ok((200, body)) if body.contains("\"health\":\"true\"")
            )
        })?;

        Ok(())
    }

    /// kube-apiserver on `port`, storing in etcd at `etcd_client`, with the audit log when asked.
    fn start_apiserver(&mut self, etcd_client: u16, port: u16) -> Result<()> {
        let p = self.pki.clone();
        let mut api_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={port}"),
            "--endpoint-reconciler-type=none".to_string(),
            format!("--tls-cert-file={}", p.apiserver_cert().display()),
            format!("--tls-private-key-file={}", p.apiserver_key().display()),
            format!("--client-ca-file={}", p.ca_cert().display()),
            format!("--service-account-key-file={}", p.sa_pub().display()),
            format!(
                "--service-account-signing-key-file={}",
                p.sa_key().display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--authorization-mode=Node,RBAC".to_string(),
            "--allow-privileged=true".to_string(),
            "--profiling=false".to_string(),
        ];
        if let Some(audit) = &self.state.audit_log {
            let policy = self.dir().join("audit-policy.yaml");
            let text = self
                .opts
                .audit_policy
                .as_deref()
                .unwrap_or(manifests::AUDIT_POLICY);
            fs::write(&policy, text)?;
            api_args.extend([
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit.display()),
                "--audit-log-format=json".to_string(),
                "--audit-log-mode=blocking".to_string(),
                "--audit-log-maxsize=0".to_string(),
            ]);
        }
        api_args.extend(self.opts.extra_apiserver_args.iter().cloned());
        self.start(
            "kube-apiserver",
            self.binaries.kube_apiserver(),
            api_args,
            &[("secure", port)],
        )?;
        let (kubectl, kubeconfig) = self.kubectl();
        self.wait("kube-apiserver", Duration::from_secs(180), |_| {
            api_ready(&kubectl, &kubeconfig)
        })?;

        Ok(())
    }

    /// kube-controller-manager, kube-scheduler and kwok (the fake nodes), started without
    /// waiting for them.
    fn start_controllers(&mut self, kcm: u16, scheduler: u16, kwok_server: u16) -> Result<()> {
        let p = self.pki.clone();
        let kcm_kubeconfig = self.dir().join("kube-controller-manager.kubeconfig");
        let mut kcm_args = vec![
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kcm_kubeconfig.display()),
            // No front-proxy CA is configured, so do not look up the
            // requestheader settings in the cluster; trust the cluster CA.
            "--authentication-skip-lookup=true".to_string(),
            format!("--client-ca-file={}", p.ca_cert().display()),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={kcm}"),
            "--leader-elect=false".to_string(),
            // EndpointSlices and Endpoints reject loopback addresses, and every pod IP here is
            // one; nothing reads them (no kube-proxy, no DNS), so their controllers stay off
            // instead of failing and retrying for every Service.
            "--controllers=*,-endpointslice-controller,-endpointslice-mirroring-controller,-endpoints-controller".to_string(),
            "--use-service-account-credentials=true".to_string(),
            format!(
                "--service-account-private-key-file={}",
                p.sa_key().display()
            ),
            format!("--root-ca-file={}", p.ca_cert().display()),
            format!("--cluster-signing-cert-file={}", p.ca_cert().display()),
            format!("--cluster-signing-key-file={}", p.ca_key().display()),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--profiling=false".to_string(),
        ];
        kcm_args.extend(self.opts.extra_controller_manager_args.iter().cloned());
        self.start(
            "kube-controller-manager",
            self.binaries.kube_controller_manager(),
            kcm_args,
            &[("secure", kcm)],
        )?;
        let sched_kubeconfig = self.dir().join("kube-scheduler.kubeconfig");
        let mut sched_args = vec![
            format!("--kubeconfig={}", sched_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", sched_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", sched_kubeconfig.display()),
            "--authentication-skip-lookup=true".to_string(),
            format!("--client-ca-file={}", p.ca_cert().display()),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={scheduler}"),
            "--leader-elect=false".to_string(),
            "--profiling=false".to_string(),
        ];
        sched_args.extend(self.opts.extra_scheduler_args.iter().cloned());
        self.start(
            "kube-scheduler",
            self.binaries.kube_scheduler(),
            sched_args,
            &[("secure", scheduler)],
        )?;
        let kwok_config = self.dir().join("kwok.yaml");
        manifests::write_kwok_config(&self.opts.workspace_root, self.binaries, &kwok_config)?;
        let kwok_args = vec![
            format!("--config={}", kwok_config.display()),
            format!(
                "--kubeconfig={}",
                self.dir().join("kwok.kubeconfig").display()
            ),
            // Only the fake nodes: process nodes belong to the node agent.
            format!(
                "--manage-nodes-with-label-selector={}",
                procnode::KWOK_NODE_SELECTOR
            ),
            format!("--node-ip={KWOK_NODE_IP}"),
            format!("--server-address=127.0.0.1:{kwok_server}"),
            format!("--node-lease-duration-seconds={NODE_LEASE_SECONDS}"),
            format!("--cidr={POD_CIDR}"),
        ];
        self.start(
            "kwok",
            self.binaries.kwok(),
            kwok_args,
            &[("server", kwok_server)],
        )?;

        Ok(())
    }

    /// The fake nodes and the StorageClasses.
    fn create_bootstrap_objects(&mut self) -> Result<()> {
        let (kubectl, kubeconfig) = self.kubectl();
        let bootstrap = self.dir().join("bootstrap.yaml");
        fs::write(&bootstrap, manifests::bootstrap_objects(self.opts.nodes))?;
        run_kubectl(
            &kubectl,
            &kubeconfig,
            &["apply", "-f", &bootstrap.to_string_lossy()],
            None,
        )
        .context("creating the fake nodes and StorageClasses")?;
        self.progress.step(format!(
            "created {} fake nodes and StorageClasses {}",
            self.opts.nodes,
            manifests::STORAGE_CLASSES
                .iter()
                .map(|(n, d)| if *d {
                    format!("{n} (default)")
                } else {
                    n.to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));

        Ok(())
    }

    /// Waits until the scheduler listens, the controller-manager made the default
    /// ServiceAccount and kwok made the fake nodes Ready.
    fn wait_for_controllers(&mut self, scheduler: u16) -> Result<()> {
        let (kubectl, kubeconfig) = self.kubectl();
        self.wait("kube-scheduler", Duration::from_secs(60), |_| {
            port_open(scheduler)
        })?;
        self.wait("kube-controller-manager", Duration::from_secs(120), |_| {
            run_kubectl(
                &kubectl,
                &kubeconfig,
                &[
                    "get",
                    "serviceaccount",
                    "default",
                    "--namespace=default",
                    "-o=name",
                ],
                None,
            )
            .is_ok()
        })?;
        let nodes = self.state.nodes.clone();
        self.wait("kwok", Duration::from_secs(120), |_| {
            nodes_ready(&kubectl, &kubeconfig, &nodes)
        })?;
        Ok(())
    }

    /// The process nodes' agent (`cargo xtask cluster node-agent`), on a fresh pods directory;
    /// waits until its nodes are Ready.
    fn start_node_agent(&mut self) -> Result<()> {
        let (kubectl, kubeconfig) = self.kubectl();
        let agent = agent_binary()?;
        let args = vec![
            "cluster".to_string(),
            "node-agent".to_string(),
            format!("--state-dir={}", self.dir().display()),
            format!(
                "--kubeconfig={}",
                self.dir().join("node-agent.kubeconfig").display()
            ),
            format!("--nodes={}", self.state.process_nodes.len()),
            format!(
                "--operator-binary={}",
                crate::cluster::images::default_operator_binary(&self.opts.workspace_root)
                    .display()
            ),
        ];
        let pods = procnode::pods_dir(self.dir());
        if pods.exists() {
            fs::remove_dir_all(&pods).with_context(|| format!("removing {}", pods.display()))?;
        }
        self.start("node-agent", agent, args, &[])?;
        let nodes = self.state.process_nodes.clone();
        self.wait("node-agent", Duration::from_secs(60), |_| {
            nodes_ready(&kubectl, &kubeconfig, &nodes)
        })?;
        Ok(())
    }

    /// Starts the S3 server on `127.0.0.1:<port>` with fresh credentials (in its environment,
    /// never its argv), creates the bucket, and writes the Secret `default/local-s3`.
    fn start_s3(
        &mut self,
        s3: &crate::cluster::s3::S3Binary,
        port: u16,
        kubectl: &Path,
        kubeconfig: &Path,
    ) -> Result<()> {
        let data = self.dir().join("s3");
        if data.exists() {
            fs::remove_dir_all(&data).with_context(|| format!("removing {}", data.display()))?;
        }
        fs::create_dir_all(data.join(crate::cluster::s3::BUCKET))?;
        let credentials = crate::cluster::s3::Credentials::generate()?;
        let args = crate::cluster::s3::server_args(port, &data);
        self.start_with_env(
            "s3",
            s3.path(),
            args,
            &credentials.server_env(),
            &[("s3", port)],
        )?;
        self.wait("s3", Duration::from_secs(60), |_| port_open(port))?;
        run_kubectl(
            kubectl,
            kubeconfig,
            &["apply", "-f", "-"],
            Some(&crate::cluster::s3::secret_manifest(port, &credentials)),
        )
        .context("writing the S3 Secret")?;
        self.progress.step(format!(
            "S3 server on http://127.0.0.1:{port}, bucket {}, Secret {}/{}",
            crate::cluster::s3::BUCKET,
            crate::cluster::s3::SECRET_NAMESPACE,
            crate::cluster::s3::SECRET_NAME
        ));
        Ok(())
    }

    fn write_kubeconfigs(&self) -> Result<()> {
        let ca = fs::read_to_string(self.pki.ca_cert())?;
        for (stem, user, _) in pki::CLIENTS {
            let cert = fs::read_to_string(self.pki.client_cert(stem))?;
            let key = fs::read_to_string(self.pki.client_key(stem))?;
            let text = manifests::kubeconfig(&self.state.server, &ca, user, &cert, &key);
            let path = if *stem == "admin" {
                self.state.kubeconfig.clone()
            } else {
                self.dir().join(format!("{stem}.kubeconfig"))
            };
            fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    fn start(
        &mut self,
        name: &str,
        binary: PathBuf,
        args: Vec<String>,
        ports: &[(&str, u16)],
    ) -> Result<()> {
        self.start_with_env(name, binary, args, &[], ports)
    }

    fn start_with_env(
        &mut self,
        name: &str,
        binary: PathBuf,
        args: Vec<String>,
        env: &[(String, String)],
        ports: &[(&str, u16)],
    ) -> Result<()> {
        let log = self.dir().join("logs").join(format!("{name}.log"));
        let child = process::spawn(&binary, &args, env, &log)
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id();
        self.children.push((name.to_string(), child));
        self.state.components.push(ComponentState {
            name: name.to_string(),
            pid,
            binary,
            log,
            ports: ports.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            args,
        });
        self.state.save()?;
        let port_list: Vec<String> = ports.iter().map(|(k, v)| format!("{k} {v}")).collect();
        self.progress.step(if port_list.is_empty() {
            format!("started {name} (pid {pid})")
        } else {
            format!(
                "started {name} (pid {pid}, 127.0.0.1 ports: {})",
                port_list.join(", ")
            )
        });
        Ok(())
    }

    /// Polls `ready` until it holds; fails early when the component exits.
    fn wait(
        &mut self,
        name: &str,
        timeout: Duration,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> Result<()> {
        let started = Instant::now();
        loop {
            if ready(self) {
                self.progress.step(format!(
                    "{name} ready ({:.1}s)",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            let component = self
                .state
                .component(name)
                .ok_or_else(|| anyhow!("unknown component {name}"))?
                .clone();
            if let Some((_, child)) = self.children.iter_mut().find(|(n, _)| n == name)
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!(
                    "{name} exited ({status}) during startup; see {}. Last lines:\n{}",
                    component.log.display(),
                    process::tail(&component.log, 25)
                );
            }
            if started.elapsed() > timeout {
                bail!(
                    "{name} was not ready after {}s; see {}. Last lines:\n{}",
                    timeout.as_secs(),
                    component.log.display(),
                    process::tail(&component.log, 25)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops what was started and removes the state; logs stay.
    pub(super) fn abort(&mut self) {
        stop_components(&self.state, &mut self.children);
        let _ = remove_state(&self.state.state_dir, &self.state.etcd_data_dir);
    }
}

/// True when every named node has condition Ready=True.
fn nodes_ready(kubectl: &Path, kubeconfig: &Path, nodes: &[String]) -> bool {
    let Ok(out) = run_kubectl(
        kubectl,
        kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ],
        None,
    ) else {
        return false;
    };
    let ready: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_suffix("=True"))
        .collect();
    nodes.iter().all(|n| ready.contains(&n.as_str()))
}

/// The xtask binary, which runs the node agent (`cluster node-agent`): this
/// process when it is xtask, else (a test binary in `target/<profile>/deps`)
/// the xtask binary cargo built beside it.
fn agent_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the running binary")?;
    if exe.file_stem().is_some_and(|s| s == "xtask") {
        return Ok(exe);
    }
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("xtask"))
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "process nodes need the xtask binary to run their agent; none at {} (build it with `cargo build -p xtask`)",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        })
}
