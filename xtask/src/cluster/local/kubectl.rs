//! kubectl against the cluster, as the starter and the cluster's handle run it.

use super::*;

pub(super) fn kubectl_command(kubectl: &Path, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(kubeconfig);
    cmd
}

pub(super) fn run_kubectl(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String> {
    use std::io::Write;
    let mut cmd = kubectl_command(kubectl, kubeconfig);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {}", kubectl.display()))?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn api_ready(kubectl: &Path, kubeconfig: &Path) -> bool {
    matches!(
        run_kubectl(kubectl, kubeconfig, &["get", "--raw=/readyz", "--request-timeout=5s"], None),
        Ok(body) if body.trim() == "ok"
    )
}
