//! The shipped ValidatingAdmissionPolicy (`deploy/rbac/admission_policy.yaml`) on the real API
//! server, for the operator's e2e user: installed once with the suite (a copy for that user
//! beside the shipped one, which names the ServiceAccount the in-cluster scenario runs as), so
//! every scenario runs the operator under it (a write it needs that the policy refused would
//! fail them), and checked at once with requests that must be refused and one that must not.
//! The member Lease policy (`deploy/rbac/member_lease_policy.yaml`, applied with deploy/rbac)
//! is checked the same way with tokens bound to two pods of one ServiceAccount.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use xtask::cluster::LocalCluster;

use crate::env::OPERATOR_USER;

/// The ServiceAccount the shipped policy names.
const SHIPPED_USER: &str = "system:serviceaccount:database-operator-system:database-operator";

/// The shipped policy's (and binding's) name.
const POLICY: &str = "database-operator-least-privilege";

/// Namespace of the probe objects.
const NAMESPACE: &str = "default";

/// Applies the policy of `deploy/rbac` again for [`OPERATOR_USER`] (the e2e operator's client
/// certificate user; the shipped file names the ServiceAccount) and checks it as that user with
/// `operator_kubeconfig`.
pub fn install_and_check(
    cluster: &LocalCluster,
    root: &Path,
    operator_kubeconfig: &Path,
    state_dir: &Path,
) -> Result<()> {
    let file = root.join("deploy/rbac/admission_policy.yaml");
    let shipped =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    ensure!(
        shipped.contains(SHIPPED_USER),
        "{} no longer names {SHIPPED_USER}",
        file.display()
    );
    // A copy of its own name: the shipped policy stays as `deploy/rbac` has it (the in-cluster
    // scenario applies deploy/ again, server-side, for its ServiceAccount).
    cluster.apply(
        &shipped
            .replace(SHIPPED_USER, OPERATOR_USER)
            .replace(POLICY, &format!("{POLICY}-e2e")),
    )?;

    let as_operator = |args: &[&str], input: Option<&str>| -> Result<(bool, String)> {
        let mut command = Command::new(cluster.kubectl_path());
        command
            .arg("--kubeconfig")
            .arg(operator_kubeconfig)
            .args(args);
        let out = match input {
            Some(text) => {
                use std::io::Write as _;
                let mut child = command
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()?;
                child
                    .stdin
                    .take()
                    .context("stdin")?
                    .write_all(text.as_bytes())?;
                child.wait_with_output()?
            }
            None => command.output()?,
        };
        Ok(outcome(&out))
    };

    // A token Secret: RBAC allows creating Secrets, the policy refuses this type. The policy
    // takes effect once the API server has loaded it: until then a create succeeds, and the
    // Secret is removed again.
    let token = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: e2e-operator-token\n  namespace: {NAMESPACE}\n  annotations:\n    kubernetes.io/service-account.name: default\ntype: kubernetes.io/service-account-token\n"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (created, output) = as_operator(&["create", "-f", "-"], Some(&token))?;
        if !created {
            ensure!(
                output.contains("never creates service account token Secrets"),
                "creating a token Secret as {OPERATOR_USER} failed for another reason: {output}"
            );
            break;
        }
        cluster.kubectl_output(&["delete", "secret", "-n", NAMESPACE, "e2e-operator-token"])?;
        if Instant::now() > deadline {
            bail!("the admission policy never refused a token Secret of {OPERATOR_USER}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    // A ConfigMap someone else made: neither patched nor deleted. One with the operator's
    // label: patched (the policy is not a blanket refusal).
    cluster.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e-not-the-operators\n  namespace: {NAMESPACE}\ndata:\n  a: b\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e-the-operators\n  namespace: {NAMESPACE}\n  labels:\n    app.kubernetes.io/managed-by: database-operator\ndata:\n  a: b\n"
    ))?;
    let patch = ["--type", "merge", "-p", r#"{"data":{"a":"changed"}}"#];
    let mut args = vec![
        "patch",
        "configmap",
        "-n",
        NAMESPACE,
        "e2e-not-the-operators",
    ];
    args.extend(patch);
    let (patched, output) = as_operator(&args, None)?;
    ensure!(
        !patched && output.contains("changes or deletes only objects it created"),
        "{OPERATOR_USER} patched a ConfigMap it did not create: {output}"
    );
    let (deleted, output) = as_operator(
        &[
            "delete",
            "configmap",
            "-n",
            NAMESPACE,
            "e2e-not-the-operators",
        ],
        None,
    )?;
    ensure!(
        !deleted && output.contains("changes or deletes only objects it created"),
        "{OPERATOR_USER} deleted a ConfigMap it did not create: {output}"
    );
    let mut args = vec!["patch", "configmap", "-n", NAMESPACE, "e2e-the-operators"];
    args.extend(patch);
    let (patched, output) = as_operator(&args, None)?;
    ensure!(
        patched,
        "{OPERATOR_USER} could not patch a ConfigMap with its label: {output}"
    );
    cluster.kubectl_output(&[
        "delete",
        "configmap",
        "-n",
        NAMESPACE,
        "e2e-not-the-operators",
        "e2e-the-operators",
    ])?;
    eprintln!(
        "    admission policy: {OPERATOR_USER} refused a token Secret and a change to a ConfigMap it did not create, allowed one to its own"
    );
    member_leases(cluster, state_dir)
}

/// The shipped member Lease policy (`deploy/rbac/member_lease_policy.yaml`), as a cluster's
/// member agents meet it: two pods of one ServiceAccount `probe-member` (which RBAC lets patch
/// the Lease), a Lease of the operator's naming the first. A token bound to the second pod is
/// refused a renewal; one bound to the first renews, and is refused a change of holder or of
/// the labels.
fn member_leases(cluster: &LocalCluster, state_dir: &Path) -> Result<()> {
    let ns = NAMESPACE;
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  \
             serviceAccountName: probe-member\n  nodeSelector: {{e2e/nowhere: \"true\"}}\n  \
             containers: [{{name: c, image: pause}}]\n"
        )
    };
    cluster.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: probe-member\n  namespace: {ns}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: probe-member\n  namespace: {ns}\n\
         rules: [{{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, patch]}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: probe-member\n  namespace: {ns}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: probe-member}}\n\
         subjects: [{{kind: ServiceAccount, name: probe-member, namespace: {ns}}}]\n---\n\
         apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: probe-primary\n  namespace: {ns}\n  \
         labels: {{app.kubernetes.io/managed-by: database-operator}}\n\
         spec: {{holderIdentity: probe-0, leaseDurationSeconds: 10}}\n---\n{}---\n{}",
        pod("probe-0"),
        pod("probe-1")
    ))?;
    let ca = state_dir.join("member-lease-ca.crt");
    std::fs::write(&ca, cluster.ca_pem()?)?;
    let token_for = |pod: &str| -> Result<String> {
        let uid = cluster.kubectl_output(&[
            "get",
            "pod",
            "-n",
            ns,
            pod,
            "-o",
            "jsonpath={.metadata.uid}",
        ])?;
        let token = cluster.kubectl_output(&[
            "create",
            "token",
            "probe-member",
            "-n",
            ns,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            pod,
            "--bound-object-uid",
            uid.trim(),
        ])?;
        Ok(token.trim().to_owned())
    };
    // kubectl with the token alone (no client certificate that would authenticate first).
    let patch_as = |token: &str, patch: &str| -> Result<(bool, String)> {
        let out = Command::new(cluster.kubectl_path())
            .env("KUBECONFIG", "/dev/null")
            .args(["--server", cluster.server(), "--token", token])
            .arg(format!("--certificate-authority={}", ca.display()))
            .args([
                "patch",
                "lease",
                "probe-primary",
                "-n",
                ns,
                "--type",
                "merge",
                "-p",
                patch,
            ])
            .output()?;
        Ok(outcome(&out))
    };
    let (holder, other) = (token_for("probe-0")?, token_for("probe-1")?);
    let renew = r#"{"spec":{"renewTime":"2026-12-07T10:00:00.000000Z"}}"#;
    let refused = "a member agent renews only the Lease that names its own pod";
    // Like the operator's policy, it takes effect once the API server has loaded it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (renewed, output) = patch_as(&other, renew)?;
        if !renewed {
            ensure!(
                output.contains(refused),
                "a renewal by probe-1's token failed for another reason: {output}"
            );
            break;
        }
        if Instant::now() > deadline {
            bail!("the member Lease policy never refused a renewal by another member's token");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (renewed, output) = patch_as(&holder, renew)?;
    ensure!(renewed, "the holder's own token could not renew: {output}");
    let (moved, output) = patch_as(&holder, r#"{"spec":{"holderIdentity":"probe-1"}}"#)?;
    ensure!(
        !moved && output.contains(refused),
        "the holder's token moved the Lease: {output}"
    );
    // Nor may it take the Lease out of the policy's reach by dropping the label it selects on.
    let (unlabelled, output) = patch_as(
        &holder,
        r#"{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}"#,
    )?;
    ensure!(
        !unlabelled && output.contains(refused),
        "the holder's token removed the Lease's label: {output}"
    );
    cluster
        .kubectl_output(&[
            "delete",
            "pod,lease,rolebinding,role,serviceaccount",
            "-n",
            ns,
            "probe-0",
            "probe-1",
            "probe-primary",
            "probe-member",
            "--ignore-not-found",
            "--wait=false",
        ])
        .ok();
    eprintln!(
        "    member Lease policy: another member's pod-bound token refused a renewal; the holder's renewed and was refused a change of holder and of labels"
    );
    Ok(())
}

/// Whether a command succeeded, and what it printed (stdout, then stderr).
fn outcome(out: &std::process::Output) -> (bool, String) {
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
