//! `database-operator run`: the client, the admin and webhook servers, leader election and the
//! controllers, with a graceful shutdown on SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use database_operator_core::OperatorConfig;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::Reporter;
use kube::{Client, Config};

use crate::controller::{self, Readiness, Settings};
use crate::error::Backoff;
use crate::io::KubeIo;
use crate::leader::{self, LeaseSettings};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::telemetry::LogFormat;
use crate::webhook;

/// `--member-address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MemberAddressFlag {
    /// `<pod>.<name>-headless.<namespace>.svc`.
    Dns,
    /// The pod IP.
    PodIp,
}

impl From<MemberAddressFlag> for crate::database::MemberAddress {
    fn from(flag: MemberAddressFlag) -> Self {
        match flag {
            MemberAddressFlag::Dns => crate::database::MemberAddress::Dns,
            MemberAddressFlag::PodIp => crate::database::MemberAddress::PodIp,
        }
    }
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig file (default: in-cluster service account, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: the current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Namespace to watch; repeat for several. Default: all namespaces.
    #[arg(long = "namespace", short = 'n', value_name = "NS")]
    pub namespaces: Vec<String>,

    /// Reconciles that write objects (a new cluster's StatefulSet, Services, ...) at the same
    /// time, per watched namespace; up to four times as many run in all, so that passes that
    /// only write status or pod labels never wait behind a burst of new clusters.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub concurrency: u16,

    /// How long a cluster's reconcile waits after the last change that asked for it, so that a
    /// burst of changes (three members becoming Ready together) is one reconcile (0s: none).
    /// Changes arriving more often than this keep delaying it.
    #[arg(long, default_value = "0s", value_parser = parse_duration_or_zero)]
    pub debounce: Duration,

    /// How often every cluster is looked at even when nothing changed (e.g. 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub resync: Duration,

    /// Address of the Prometheus metrics endpoint (/metrics). Port 0 picks a free port (logged).
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,

    /// Serve /metrics over HTTPS, only to readers with a bearer token the API server accepts
    /// and whose user may `get /metrics` [default: true in a cluster, false outside].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub metrics_secure: Option<bool>,

    /// With --metrics-secure: a directory with the serving certificate (tls.crt, tls.key),
    /// reloaded on change [default: a self-signed certificate made at start].
    #[arg(long, value_name = "DIR")]
    pub metrics_cert_dir: Option<PathBuf>,

    /// Address of the health endpoints (/healthz, /readyz). Port 0 picks a free port (logged).
    #[arg(long, default_value = "0.0.0.0:8081", value_name = "ADDR")]
    pub health_addr: SocketAddr,

    /// Reconcile only while holding the leader Lease [default: true in a cluster, false outside].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: Option<bool>,

    /// Name of the leader Lease.
    #[arg(long, default_value = "database-operator", value_name = "NAME")]
    pub lease_name: String,

    /// Namespace of the leader Lease [default: the pod's namespace, else database-operator-system].
    #[arg(long, value_name = "NS")]
    pub lease_namespace: Option<String>,

    /// How long the Lease is valid without renewal; a standby takes over at most this long after
    /// the leader dies.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Serve the admission webhook (HTTPS) [default: true in a cluster, false outside].
    #[arg(
        long,
        env = "DATABASE_OPERATOR_WEBHOOK",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub webhook: Option<bool>,

    /// Address of the admission webhook.
    #[arg(long, default_value_t = crate::webhook::DEFAULT_ADDR, value_name = "ADDR")]
    pub webhook_addr: SocketAddr,

    /// Directory with the webhook's serving certificate (tls.crt, tls.key), reloaded on change.
    #[arg(long, default_value = crate::webhook::DEFAULT_CERT_DIR, value_name = "DIR")]
    pub webhook_cert_dir: PathBuf,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// How often every member's database server is probed (failover reads these facts; 0
    /// disables probing, and with it failover).
    #[arg(long, default_value = "2s", value_parser = parse_duration_or_zero)]
    pub probe_interval: Duration,

    /// How members are dialled: `dns` (`<pod>.<name>-headless.<namespace>.svc`) or `pod-ip`
    /// (the pod's IP; for clusters without cluster DNS, such as the local control plane).
    #[arg(long, value_enum, default_value_t = MemberAddressFlag::Dns)]
    pub member_address: MemberAddressFlag,

    /// The flags that shape what is rendered.
    #[command(flatten)]
    pub render: RenderFlags,
}

impl RunArgs {
    /// The settings passed to the core.
    pub fn operator_config(&self) -> OperatorConfig {
        OperatorConfig {
            resync: self.resync,
            ..self.render.operator_config()
        }
    }
}

pub use database_operator_common::flags::{RenderFlags, parse_duration, parse_duration_or_zero};

/// Namespace of the Lease when neither a flag nor the pod says otherwise.
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "database-operator-system";
/// Name the operator reports events as.
pub const REPORTER: &str = "database-operator";

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Whether the process runs in a pod (the API server's in-cluster variables are set).
pub fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// The namespace the operator runs in: `$POD_NAMESPACE`, the service account's namespace, or
/// [`DEFAULT_OPERATOR_NAMESPACE`].
pub fn operator_namespace() -> String {
    if let Ok(ns) = std::env::var("POD_NAMESPACE")
        && !ns.is_empty()
    {
        return ns;
    }
    match std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE) {
        Ok(ns) if !ns.trim().is_empty() => ns.trim().to_owned(),
        _ => DEFAULT_OPERATOR_NAMESPACE.to_owned(),
    }
}

/// This replica's identity: `$POD_NAME`, else host name and process id (unique on one machine).
pub fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "database-operator".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A client from `--kubeconfig`/`--context`, or inferred (in-cluster, then $KUBECONFIG).
pub async fn client(args: &RunArgs) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .context("loading kubeconfig")?,
        None => Config::infer()
            .await
            .context("finding the cluster (in-cluster or kubeconfig)")?,
    };
    let mut config = config;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&user_agent(
            std::env::var("POD_NAME").ok().as_deref(),
            std::process::id(),
        ))
        .context("the client's User-Agent")?,
    ));
    Client::try_from(config).context("building the Kubernetes client")
}

/// The `User-Agent` of the operator's requests: the program, its version, and which process
/// (the pod, when it runs in one, and the process id), so that an audit log tells two replicas,
/// or a process and the one that replaced it, apart
/// (`database-operator/0.1.0 (database-operator-5d9f-x2x; pid 1)`).
pub fn user_agent(pod: Option<&str>, pid: u32) -> String {
    let host = pod
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("-");
    format!(
        "database-operator/{} ({host}; pid {pid})",
        env!("CARGO_PKG_VERSION")
    )
}

/// Runs the operator until SIGTERM/SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    args.render.install_versions()?;
    let inside = in_cluster() && args.kubeconfig.is_none();
    let leader_elect = args.leader_elect.unwrap_or(inside);
    let serve_webhook = args.webhook.unwrap_or(inside);
    let metrics_secure = args.metrics_secure.unwrap_or(inside);
    let identity = identity();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %identity,
        leader_elect,
        webhook = serve_webhook,
        metrics_secure,
        namespaces = ?args.namespaces,
        concurrency = args.concurrency,
        resync_secs = args.resync.as_secs(),
        probe_interval_ms = args.probe_interval.as_millis() as u64,
        member_address = ?args.member_address,
        "starting database-operator"
    );

    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    // From the first scrape, not only once a controller runs.
    metrics.set_max_concurrent_reconciles(crate::controller::WriteLane::controller_slots(
        args.concurrency,
    ));
    let readiness = Arc::new(Readiness::default());
    if !leader_elect {
        // Without leader election this process leads from the start, before its admin endpoints
        // answer: /readyz is 503 until the caches have synced (no "standby" window answering
        // 200) and database_operator_leader is 1 from the first scrape.
        readiness.start_leading();
        metrics.set_leader(true);
    }
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let secure_metrics = metrics_secure
        .then(|| crate::admin::SecureMetrics::new(client.clone(), args.metrics_cert_dir.as_deref()))
        .transpose()?;
    let mut servers = serve(
        &args,
        serve_webhook,
        secure_metrics,
        (&metrics, &readiness),
        &shutdown,
    )
    .await?;

    let reporter = Reporter {
        controller: REPORTER.to_owned(),
        instance: Some(identity.clone()),
    };
    let lease = leader_elect.then(|| LeaseSettings {
        name: args.lease_name.clone(),
        namespace: args
            .lease_namespace
            .clone()
            .unwrap_or_else(operator_namespace),
        identity,
        duration: args.lease_duration,
    });
    let leading = Leading {
        client: client.clone(),
        io: KubeIo::new(client.clone(), reporter, metrics.clone()),
        settings: Settings {
            leadership: lease.clone(),
            ..controller_settings(&args)
        },
        metrics: metrics.clone(),
        readiness: readiness.clone(),
    };
    let lead = move |stop: Shutdown| leading.clone().lead(stop);
    let on_change = {
        let (metrics, readiness) = (metrics.clone(), readiness.clone());
        move |leading: bool| {
            metrics.set_leader(leading);
            if leading {
                readiness.start_leading();
            } else {
                readiness.stop_leading();
                metrics.clear_clusters();
            }
        }
    };

    if let Some(lease) = lease {
        leader::run_with_lease(client, &lease, shutdown.clone(), lead, on_change).await;
    } else {
        on_change(true);
        lead(shutdown.clone()).await;
        on_change(false);
    }
    shutdown.trigger();
    while servers.join_next().await.is_some() {}
    tracing::info!("stopped");
    Ok(())
}

/// Starts the admin servers (metrics, health) and, when asked, the admission webhook; each
/// stops when `shutdown` is triggered.
async fn serve(
    args: &RunArgs,
    serve_webhook: bool,
    secure_metrics: Option<crate::admin::SecureMetrics>,
    (metrics, readiness): (&Arc<Metrics>, &Arc<Readiness>),
    shutdown: &Shutdown,
) -> anyhow::Result<tokio::task::JoinSet<()>> {
    let mut servers = tokio::task::JoinSet::new();
    for server in crate::admin::bind(
        args.metrics_addr,
        args.health_addr,
        metrics.clone(),
        readiness.clone(),
        secure_metrics,
    )
    .await?
    {
        let stop = shutdown.future();
        servers.spawn(async move {
            if let Err(e) = server.run(stop).await {
                tracing::error!(error = %e, "admin server failed");
            }
        });
    }
    if serve_webhook {
        let config = webhook::WebhookConfig {
            addr: args.webhook_addr,
            cert_dir: args.webhook_cert_dir.clone(),
            scheduling: args.render.operator_config().scheduling,
            ..webhook::WebhookConfig::default()
        };
        let server = webhook::WebhookServer::bind(config)
            .await
            .context("starting the admission webhook")?;
        let stop = shutdown.future();
        servers.spawn(async move {
            if let Err(e) = server.run(stop).await {
                tracing::error!(error = %e, "admission webhook failed");
            }
        });
    }
    Ok(servers)
}

/// How the controllers run, from the flags.
fn controller_settings(args: &RunArgs) -> Settings {
    Settings {
        namespaces: args.namespaces.clone(),
        concurrency: args.concurrency,
        debounce: args.debounce,
        operator: args.operator_config(),
        backoff: Backoff::default(),
        probe: controller::ProbeSettings {
            interval: args.probe_interval,
            ..controller::ProbeSettings::default()
        },
        member_address: args.member_address.into(),
        leadership: None,
    }
}

/// What the leader runs: the controllers, with what they need.
#[derive(Clone)]
struct Leading {
    client: Client,
    io: KubeIo,
    settings: Settings,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
}

impl Leading {
    /// Runs the controllers until `stop` is triggered, then gives in-flight reconciles
    /// [`controller::SHUTDOWN_GRACE`] to finish.
    async fn lead(self, stop: Shutdown) {
        let run = controller::run(
            self.client,
            self.io,
            self.settings,
            self.metrics,
            self.readiness.clone(),
            stop.future(),
        );
        let readiness = self.readiness;
        tokio::select! {
            () = run => {}
            () = async {
                stop.wait().await;
                // Before the caches synced no reconcile has started (kube holds them
                // until then), so there is nothing to wait for.
                if readiness.is_synced() {
                    tokio::time::sleep(controller::SHUTDOWN_GRACE).await;
                    tracing::warn!("in-flight reconciles did not finish in time; stopping anyway");
                }
            } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_process() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            user_agent(Some("database-operator-5d9f-x2x"), 1),
            format!("database-operator/{version} (database-operator-5d9f-x2x; pid 1)")
        );
        assert_eq!(
            user_agent(None, 4242),
            format!("database-operator/{version} (-; pid 4242)")
        );
        // Nothing a header cannot carry.
        assert_eq!(
            user_agent(Some("bad\nname"), 7),
            format!("database-operator/{version} (-; pid 7)")
        );
        assert!(http::HeaderValue::from_str(&user_agent(Some("p"), 1)).is_ok());
    }

    /// Every default of `run` parses: a default its own parser refuses makes the binary exit
    /// at start with no flag given.
    #[test]
    fn run_starts_with_every_default() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let cli = Cli::try_parse_from(["database-operator"]).expect("defaults parse");
        assert_eq!(cli.run.debounce, Duration::ZERO);
        assert_eq!(cli.run.concurrency, 5);
    }
}
