//! Taking a cluster down: its components stopped, its state and etcd data removed.

use super::*;

/// Stops whatever `state_dir/state.json` records and removes the state.
/// Returns true when a state file was found.
pub fn down_state_dir(state_dir: &Path, quiet: bool) -> Result<bool> {
    let Some(state) = State::load(state_dir)? else {
        return Ok(false);
    };
    let stopped = stop_components(&state, &mut Vec::new());
    if !quiet {
        for name in &stopped {
            eprintln!("stopped {name}");
        }
    }
    remove_state(state_dir, &state.etcd_data_dir)?;
    Ok(true)
}

pub(super) fn stop_components(state: &State, children: &mut Vec<(String, Child)>) -> Vec<String> {
    let mut stopped = Vec::new();
    // Reverse start order: kwok and the controllers first, etcd last.
    for c in state.components.iter().rev() {
        let child = children
            .iter_mut()
            .find(|(name, _)| name == &c.name)
            .map(|(_, child)| child);
        // The agent stops its containers first (SIGTERM, then SIGKILL after 8 s).
        let grace = if c.name == "node-agent" { 15 } else { 10 };
        if process::stop(c.pid, &c.binary, Duration::from_secs(grace), child) {
            stopped.push(format!("{} (pid {})", c.name, c.pid));
        }
    }
    children.clear();
    // Whatever container processes the agent could not stop (it crashed, or
    // was killed): their process groups are recorded beside their pods.
    for leftover in procnode::kill_leftovers(&state.state_dir) {
        stopped.push(leftover);
    }
    stopped
}

pub(super) fn remove_state(state_dir: &Path, etcd_data_dir: &Path) -> Result<()> {
    for name in [
        "state.json",
        "kubeconfig",
        "kube-controller-manager.kubeconfig",
        "kube-scheduler.kubeconfig",
        "kwok.kubeconfig",
        "node-agent.kubeconfig",
        "kwok.yaml",
        "audit-policy.yaml",
        "bootstrap.yaml",
    ] {
        let path = state_dir.join(name);
        if path.exists() {
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    // Process pods: their layers and volumes go, their logs stay.
    if let Ok(pods) = fs::read_dir(procnode::pods_dir(state_dir)) {
        for pod in pods.flatten() {
            for sub in ["containers", "volumes"] {
                let dir = pod.path().join(sub);
                if dir.exists() {
                    fs::remove_dir_all(&dir)
                        .with_context(|| format!("removing {}", dir.display()))?;
                }
            }
        }
    }
    for dir in [
        state_dir.join("pki"),
        etcd_data_dir.to_path_buf(),
        procnode::volumes_dir(state_dir),
    ] {
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    // The /dev/shm parent is ours alone; remove it when empty.
    if let Some(parent) = etcd_data_dir.parent()
        && parent.starts_with("/dev/shm")
    {
        let _ = fs::remove_dir(parent);
    }
    Ok(())
}
