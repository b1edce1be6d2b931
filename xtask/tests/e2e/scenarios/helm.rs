//! The Helm chart installed for real: `helm install` of deploy/helm/database-operator (webhook
//! off: there is no cert-manager here) into its own namespace starts the operator as a pod on a
//! process node, which becomes Ready and reconciles a cluster; `helm uninstall` removes it.

use std::fs;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use xtask::cluster::Progress;
use xtask::cluster::helm::{self, CHART_DIR};
use xtask::cluster::workspace_root;

use crate::env::http_get_at;
use crate::harness::Ctx;
use crate::scenarios::databases::{Engine, example_in, pod_ip};
use crate::scenarios::process_nodes::{ready, summary};
use crate::util::{Check, api, describe, kubectl, phase, wait_for};

/// The release: its name is also the prefix of its objects' names (it contains the chart's
/// name), so nothing collides with the shared environment's `database-operator` RBAC.
const RELEASE: &str = "database-operator-helm";
/// The release namespace, created by `helm install --create-namespace`.
const NAMESPACE: &str = "database-operator-helm";

/// What only this machine needs: one replica on a process node, no webhook.
const VALUES: &str = "replicas: 1
webhook:
  enabled: false
nodeSelector:
  database.example.com/process-node: \"true\"
tolerations:
  - key: database.example.com/process-node
    operator: Equal
    value: \"true\"
    effect: NoSchedule
";

/// `helm install` starts the operator (image as in values.yaml, mapped to this checkout's
/// binary by the process node) watching one namespace (`watchNamespaces`: a Role there, only
/// cluster-scoped rules in its ClusterRole), it answers /readyz on its pod IP and reconciles a
/// one-member PostgreSQL cluster to Running; `helm uninstall` takes the pod and the
/// cluster-scoped RBAC.
pub async fn operator_installed_with_helm(ctx: &Ctx) -> Result<()> {
    let env = ctx.without_shared_operator().await?;
    let helm = helm::ensure(&workspace_root(), &Progress::new(true))?;
    let dir = workspace_root().join("target/e2e-helm");
    fs::create_dir_all(&dir)?;
    let values = dir.join("values.yaml");
    fs::write(&values, VALUES)?;
    let kubeconfig = env.cluster.kubeconfig().to_string_lossy().into_owned();
    let chart = workspace_root().join(CHART_DIR);
    // The operator watches only the scenario's namespace, with a Role there (watchNamespaces).
    let ns = ctx.namespace("helm").await?;
    let watch = format!("watchNamespaces={{{ns}}}");
    let started = Instant::now();
    let installed = helm.run(&[
        "install",
        RELEASE,
        &chart.to_string_lossy(),
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--values",
        &values.to_string_lossy(),
        "--set",
        &watch,
    ])?;
    ctx.step(format!(
        "helm install {RELEASE} ({:.1}s):\n{installed}",
        started.elapsed().as_secs_f64()
    ));
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let selector = "app.kubernetes.io/name=database-operator,app.kubernetes.io/instance=database-operator-helm";
    let result = async {
        let pod = wait_for(
            "the Helm-installed operator pod Ready",
            Duration::from_secs(90),
            async || {
                let list = pods
                    .list(&ListParams::default().labels(selector))
                    .await?
                    .items;
                Ok(match list.iter().find(|p| ready(p)) {
                    Some(p) => Check::Done(p.clone()),
                    None => {
                        Check::Pending(list.iter().map(summary).collect::<Vec<_>>().join(" | "))
                    }
                })
            },
        )
        .await?;
        let pod_name = pod.name_any();
        let log_path = env
            .state_dir
            .join("pods")
            .join(format!("{NAMESPACE}_{pod_name}"))
            .join("manager.log");
        ctx.watch_log(log_path.clone());
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        ensure!(node.starts_with("proc-"), "the operator runs on {node}");
        let ip = pod_ip(&pod)?;
        let (code, body) = http_get_at(ip.parse()?, 8081, "/readyz")?;
        ensure!(code == 200, "GET {ip}:8081/readyz: {code} {body:.200}");
        ctx.note(format!(
            "operator pod {pod_name} Ready on {node} at {ip} {:.1}s after helm install",
            started.elapsed().as_secs_f64()
        ));

        // Least privilege: Secrets in the watched namespace only, none elsewhere.
        let account = format!("--as=system:serviceaccount:{NAMESPACE}:{RELEASE}");
        for (scope, want) in [(vec!["-n", ns.as_str()], "yes"), (vec!["-A"], "no")] {
            let mut args = vec!["auth", "can-i", "list", "secrets", account.as_str()];
            args.extend(scope.iter().copied());
            let out = kubectl(&env, &args, None)?;
            ensure!(
                out.stdout.trim() == want,
                "kubectl {}: {} {}",
                args.join(" "),
                out.stdout.trim(),
                out.stderr.trim()
            );
        }
        ctx.step(format!(
            "watchNamespaces={ns}: the operator's account lists Secrets in {ns} only (a Role there)"
        ));
        let (manifest, name) = example_in(Engine::Postgresql, &ns)?;
        env.cluster
            .apply(&manifest.replace("replicas: 3", "replicas: 1"))?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        wait_for(
            &format!("{name} Running (reconciled by the Helm-installed operator)"),
            Duration::from_secs(90),
            async || {
                let dbc = clusters.get(&name).await?;
                Ok(if phase(&dbc) == "Running" {
                    Check::Done(())
                } else {
                    Check::Pending(describe(&dbc))
                })
            },
        )
        .await?;
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        ensure!(
            log.contains(&name),
            "the Helm-installed operator's log ({}) does not mention {name}",
            log_path.display()
        );
        ctx.note(format!(
            "{name} Running {:.1}s after helm install",
            started.elapsed().as_secs_f64()
        ));
        clusters.delete(&name, &DeleteParams::default()).await?;
        wait_for(
            &format!("{name} deleted through the finalizer"),
            Duration::from_secs(60),
            async || {
                Ok(match clusters.get_opt(&name).await? {
                    None => Check::Done(()),
                    Some(dbc) => Check::Pending(describe(&dbc)),
                })
            },
        )
        .await?;
        Ok(())
    }
    .await;
    let uninstalled = helm
        .run(&[
            "uninstall",
            RELEASE,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "60s",
        ])
        .context("helm uninstall");
    ctx.step(format!("helm uninstall {RELEASE}: {uninstalled:?}"));
    result?;
    uninstalled?;
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    ensure!(
        roles.get_opt(RELEASE).await?.is_none(),
        "helm uninstall left ClusterRole {RELEASE}"
    );
    wait_for(
        "the Helm-installed operator pod gone",
        Duration::from_secs(60),
        async || {
            let left = pods
                .list(&ListParams::default().labels(selector))
                .await?
                .items;
            Ok(if left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("{} pods left", left.len()))
            })
        },
    )
    .await?;
    Ok(())
}
