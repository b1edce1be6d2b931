//! `xtask::cluster` itself: starting a cluster with an audit log, stopping every process, and a
//! component that fails to start. These use their own small clusters (one node), not the shared
//! one.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, ensure};
use xtask::cluster::{LocalCluster, UpOptions, down_state_dir, read_audit_log, workspace_root};

use crate::harness::Ctx;

fn opts(tag: &str) -> UpOptions {
    UpOptions {
        state_dir: Some(
            workspace_root()
                .join("target")
                .join(format!("e2e-cluster-{tag}")),
        ),
        nodes: 1,
        process_nodes: 1,
        quiet: true,
        ..UpOptions::default()
    }
}

/// Whether `pid` still runs `binary` (and is not a zombie).
fn runs(pid: u32, binary: &Path) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.trim_start().chars().next().unwrap_or('X'))
        .unwrap_or('X');
    if state == 'Z' || state == 'X' {
        return false;
    }
    fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
        let exe = exe.to_string_lossy();
        let exe = Path::new(exe.trim_end_matches(" (deleted)"));
        exe == binary || fs::canonicalize(binary).is_ok_and(|b| b == exe)
    })
}

/// `up` with an audit log records a write by the admin; dropping the guard stops every
/// component process and removes the state.
pub async fn up_with_audit_log_and_down(ctx: &Ctx) -> Result<()> {
    let opts = UpOptions {
        audit_log: true,
        ..opts("audit")
    };
    down_state_dir(&opts.state_dir(), true)?;
    let cluster = LocalCluster::up(&opts)?.into_guard();
    ctx.step(format!("cluster up on {}", cluster.server()));
    ensure!(cluster.api_ready(), "/readyz is not ok right after up");
    cluster.kubectl_output(&["create", "configmap", "audit-probe", "-n", "default"])?;
    let audit = cluster
        .audit_log()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("started with audit_log but has no audit log path"))?;
    let events = read_audit_log(&audit)?;
    ensure!(
        events.iter().any(|e| e.is_write()
            && e.resource == "configmaps"
            && e.name == "audit-probe"
            && e.user == "kubernetes-admin"),
        "the audit log {} has no create of configmap audit-probe by kubernetes-admin ({} events)",
        audit.display(),
        events.len()
    );
    let pids: Vec<(String, u32, PathBuf)> = cluster
        .state()
        .components
        .iter()
        .map(|c| (c.name.clone(), c.pid, c.binary.clone()))
        .collect();
    let names: Vec<&str> = pids.iter().map(|(name, _, _)| name.as_str()).collect();
    ensure!(
        names
            == [
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok",
                "node-agent",
                "s3",
            ],
        "expected the 7 components (with the node agent and the S3 server), state has {pids:?}"
    );
    for (name, pid, binary) in &pids {
        ensure!(runs(*pid, binary), "{name} (pid {pid}) is not running");
    }
    let state_dir = cluster.state().state_dir.clone();
    drop(cluster);
    let still: Vec<_> = pids
        .iter()
        .filter(|(_, pid, binary)| runs(*pid, binary))
        .collect();
    ensure!(still.is_empty(), "still running after down: {still:?}");
    ensure!(
        !state_dir.join("state.json").exists(),
        "state.json was not removed"
    );
    ensure!(
        state_dir.join("logs").join("kube-apiserver.log").exists(),
        "logs should be kept after down"
    );
    ctx.step("every component stopped, state removed, logs kept");
    Ok(())
}

/// A component that cannot start fails `up` with its name and log, and nothing is left
/// running.
pub async fn failing_component_is_named_with_its_log(ctx: &Ctx) -> Result<()> {
    let opts = UpOptions {
        extra_apiserver_args: vec!["--no-such-flag".to_string()],
        ..opts("fail")
    };
    down_state_dir(&opts.state_dir(), true)?;
    let err = match LocalCluster::up(&opts) {
        Ok(cluster) => {
            cluster.down()?;
            anyhow::bail!("up succeeded although kube-apiserver got an unknown flag");
        }
        Err(e) => e,
    };
    let text = format!("{err:#}");
    ctx.step(format!(
        "up failed as expected: {}",
        text.lines().next().unwrap_or("")
    ));
    ensure!(text.contains("kube-apiserver"), "{text}");
    ensure!(text.contains("kube-apiserver.log"), "{text}");
    ensure!(
        text.contains("no-such-flag"),
        "the error should quote the log: {text}"
    );
    ensure!(
        !opts.state_dir().join("state.json").exists(),
        "state.json left behind after a failed up"
    );
    ensure!(
        LocalCluster::attach(&opts.state_dir())?.is_none(),
        "something still runs"
    );
    Ok(())
}
