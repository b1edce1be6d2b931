//! `database-operator run`: the client, the admin and webhook servers, leader election and the
//! controllers, with a graceful shutdown on SIGTERM.

use std::sync::Arc;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::Reporter;
use kube::{Client, Config};

use crate::cli::RunArgs;
use crate::controller::{self, Readiness, Settings};
use crate::error::Backoff;
use crate::io::KubeIo;
use crate::leader::{self, LeaseSettings};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::webhook;

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
    Client::try_from(config).context("building the Kubernetes client")
}

/// Runs the operator until SIGTERM/SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let inside = in_cluster() && args.kubeconfig.is_none();
    let leader_elect = args.leader_elect.unwrap_or(inside);
    let serve_webhook = args.webhook.unwrap_or(inside);
    let identity = identity();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %identity,
        leader_elect,
        webhook = serve_webhook,
        namespaces = ?args.namespaces,
        concurrency = args.concurrency,
        resync_secs = args.resync.as_secs(),
        "starting database-operator"
    );

    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());
    let shutdown = Shutdown::new();
    shutdown.on_signals();

    let mut servers = tokio::task::JoinSet::new();
    for server in crate::admin::bind(
        args.metrics_addr,
        args.health_addr,
        metrics.clone(),
        readiness.clone(),
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

    let settings = Settings {
        namespaces: args.namespaces.clone(),
        concurrency: args.concurrency,
        operator: args.operator_config(),
        backoff: Backoff::default(),
    };
    let reporter = Reporter {
        controller: REPORTER.to_owned(),
        instance: Some(identity.clone()),
    };
    let io = KubeIo::new(
        client.clone(),
        reporter,
        metrics.clone(),
        settings.operator.clone(),
    );
    let lead = {
        let (client, io, settings, metrics, readiness) = (
            client.clone(),
            io,
            settings,
            metrics.clone(),
            readiness.clone(),
        );
        move |stop: Shutdown| {
            let run = controller::run(
                client.clone(),
                io.clone(),
                settings.clone(),
                metrics.clone(),
                readiness.clone(),
                stop.future(),
            );
            let readiness = readiness.clone();
            async move {
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
    };
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

    if leader_elect {
        let lease = LeaseSettings {
            name: args.lease_name.clone(),
            namespace: args
                .lease_namespace
                .clone()
                .unwrap_or_else(operator_namespace),
            identity,
            duration: args.lease_duration,
        };
        leader::run_with_lease(client, &lease, shutdown.clone(), lead, on_change).await?;
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
