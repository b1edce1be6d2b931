//! What a run does to the cluster: the CRD, RBAC and namespace installed, the operator's
//! webhook registered, the clusters created and patched with kubectl.

use crate::bench::operator::WebhookServing;

use super::*;

/// What the seed design's kubebuilder markers grant (get and update besides our verbs),
/// bound to the same user as ours so that the audit log counts both alike.
pub(super) const SEED_DESIGN_RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: seed-design-bench
rules:
  - apiGroups: [\"database.example.com\"]
    resources: [\"databaseclusters\", \"databaseclusters/status\", \"databaseclusters/finalizers\"]
    verbs: [\"get\", \"list\", \"watch\", \"update\", \"patch\"]
  - apiGroups: [\"apps\"]
    resources: [\"statefulsets\"]
    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]
  - apiGroups: [\"\"]
    resources: [\"services\", \"configmaps\", \"secrets\", \"persistentvolumeclaims\"]
    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]
  - apiGroups: [\"\"]
    resources: [\"pods\"]
    verbs: [\"get\", \"list\", \"watch\"]
  - apiGroups: [\"batch\"]
    resources: [\"cronjobs\"]
    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: seed-design-bench
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: seed-design-bench
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: ";

/// The CRD, the ClusterRole and its binding to the operator's user, the namespace.
pub(super) fn install(
    cluster: &LocalCluster,
    workspace_root: &Path,
    subject: Subject,
) -> Result<()> {
    let crd = workspace_root
        .join("deploy/crds")
        .join(database_operator_api::crd::CRD_FILE_NAME);
    let role = workspace_root.join("deploy/rbac/cluster_role.yaml");
    for file in [&crd, &role] {
        cluster
            .kubectl_output(&["apply", "-f", &file.to_string_lossy()])
            .with_context(|| format!("applying {}", file.display()))?;
    }
    cluster.apply(&crate::cluster::operator_user_binding(
        "database-operator-bench",
    ))?;
    if subject == Subject::SeedDesign {
        cluster.apply(&format!("{SEED_DESIGN_RBAC}{}\n", operator::USER))?;
    }
    cluster.apply(&workload::namespace_manifest())?;
    cluster.kubectl_output(&[
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "customresourcedefinition/databaseclusters.database.example.com",
    ])?;
    Ok(())
}

/// A serving certificate for 127.0.0.1 from the cluster CA in `scratch/webhook-certs`, and a
/// free port: where the operator serves its webhook (the restarted process reuses both).
pub(super) fn webhook_serving(cluster: &LocalCluster, scratch: &Path) -> Result<WebhookServing> {
    let cert_dir = scratch.join("webhook-certs");
    cluster.write_webhook_cert(&cert_dir)?;
    let port = crate::cluster::free_ports(1)?[0];
    Ok(WebhookServing {
        addr: format!("127.0.0.1:{port}"),
        cert_dir,
    })
}

/// Registers the operator's webhooks by URL for the benchmark's namespace and waits until the
/// API server calls them: a server-side dry run of a cluster comes back with the finalizer the
/// mutating webhook adds.
pub(super) fn register_webhook(cluster: &LocalCluster, serving: &WebhookServing) -> Result<()> {
    cluster.apply(&crate::cluster::webhook_registrations(
        "database-operator-bench",
        &serving.addr,
        &cluster.ca_pem()?,
        NAMESPACE,
    ))?;
    let probe = scratch_cluster_manifest();
    let waited = Instant::now();
    loop {
        let out = cluster.kubectl_with_input(
            &[
                "create",
                "--dry-run=server",
                "-o",
                "jsonpath={.metadata.finalizers}",
                "-f",
                "-",
            ],
            &probe,
        );
        if let Ok(text) = &out
            && text.contains(database_operator_api::FINALIZER)
        {
            return Ok(());
        }
        if waited.elapsed() > Duration::from_secs(60) {
            bail!("the API server did not call the operator's webhook within 60 s: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The first workload cluster without its Secret, for a dry run.
fn scratch_cluster_manifest() -> String {
    workload::cluster_manifest(0)
        .split("\n---\n")
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// Creates every Secret and cluster with a few `kubectl create` processes at once.
pub(super) fn create_all(cluster: &LocalCluster, scratch: &Path, clusters: usize) -> Result<()> {
    let chunks = (clusters / 100).clamp(1, 4);
    let mut children: Vec<(PathBuf, Child)> = Vec::new();
    for k in 0..chunks {
        let mut text = String::new();
        for i in (k..clusters).step_by(chunks) {
            text.push_str(&workload::cluster_manifest(i));
        }
        let file = scratch.join(format!("objects-{k}.yaml"));
        fs::write(&file, text)?;
        let child = cluster
            .kubectl()
            .args(["create", "-f", &file.to_string_lossy(), "-o", "name"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kubectl create")?;
        children.push((file, child));
    }
    for (file, child) in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl create -f {} failed: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

/// One `kubectl patch` per kind of change and engine, all at once.
pub(super) fn patch_all(cluster: &LocalCluster, plan: &[(usize, Churn)]) -> Result<()> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, churn) in plan {
        let (patch, _) = workload::churn_patch(*i, *churn);
        groups.entry(patch).or_default().push(workspace_name(*i));
    }
    let mut children = Vec::new();
    for (patch, names) in &groups {
        let mut cmd = cluster.kubectl();
        cmd.args(["patch", "databaseclusters", "--namespace", NAMESPACE])
            .args(names)
            .args(["--type=merge", "-p", patch])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        children.push((patch.clone(), cmd.spawn().context("running kubectl patch")?));
    }
    for (patch, child) in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl patch {patch} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}
