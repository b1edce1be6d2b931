//! CPU profiles of the control plane during a run (`cargo xtask bench --pprof-seconds S`).
//!
//! The local control plane runs with `--profiling=false`; with this option the benchmark turns
//! profiling on for kube-apiserver, kube-controller-manager and kube-scheduler and, when the
//! workload is created, asks each for a CPU profile of the next S seconds (the Go runtime's
//! sampling profiler, `/debug/pprof/profile`). The profiles are written into the run's scratch
//! directory with `go tool pprof -top` summaries beside them, to say where the control plane
//! spends the CPU that bounds convergence on a small machine.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail};

use crate::cluster::LocalCluster;

/// Components that serve `/debug/pprof` once `--profiling=true` is set.
pub const PROFILED: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The flag that turns profiling on (it comes after the cluster's own `--profiling=false`, and
/// the last occurrence of a flag wins).
pub const FLAG: &str = "--profiling=true";

/// Profiles being taken, one thread per component.
pub struct Capture {
    threads: Vec<(Taken, JoinHandle<Result<()>>)>,
}

/// A profile written by [`Capture`], or why there is none.
pub struct Taken {
    /// The component profiled.
    pub component: &'static str,
    /// Its binary (symbols for the summary).
    pub binary: Option<PathBuf>,
    /// Where the profile is (`<dir>/<component>.pprof`).
    pub path: PathBuf,
    /// Why there is no profile.
    pub failed: Option<String>,
}

/// The URL path of a CPU profile of `seconds`.
pub fn profile_path(seconds: u64) -> String {
    format!("/debug/pprof/profile?seconds={seconds}")
}

impl Capture {
    /// Starts a CPU profile of `seconds` on every profiled component, written to
    /// `<dir>/<component>.pprof`. kube-apiserver is asked through kubectl (admin kubeconfig);
    /// the controller-manager and the scheduler authenticate the cluster's admin client
    /// certificate (delegated to the API server) on their secure ports, on 127.0.0.1.
    pub fn start(cluster: &LocalCluster, dir: &Path, seconds: u64) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let pki = cluster.pki();
        let mut threads = Vec::new();
        for component in PROFILED {
            let state = cluster
                .state()
                .component(component)
                .with_context(|| format!("{component} is not in the cluster's state"))?;
            let mut cmd = if component == "kube-apiserver" {
                let mut c = cluster.kubectl();
                c.args(["get", "--raw", &profile_path(seconds)]);
                c
            } else {
                let port = state
                    .ports
                    .get("secure")
                    .with_context(|| format!("{component} has no secure port in the state"))?;
                let mut c = Command::new("curl");
                // Their serving certificates are self-signed (no --tls-cert-file): the
                // client certificate authenticates, the loopback address is not verified.
                c.arg("-sfk")
                    .arg("--cert")
                    .arg(pki.client_cert("admin"))
                    .arg("--key")
                    .arg(pki.client_key("admin"))
                    .arg(format!("https://127.0.0.1:{port}{}", profile_path(seconds)));
                c
            };
            let path = dir.join(format!("{component}.pprof"));
            let out = path.clone();
            let handle = std::thread::spawn(move || -> Result<()> {
                let output = cmd
                    .output()
                    .with_context(|| format!("asking {component} for a profile"))?;
                if !output.status.success() || output.stdout.is_empty() {
                    bail!(
                        "no profile ({}): {}",
                        output.status,
                        String::from_utf8_lossy(&output.stderr).trim()
                    );
                }
                fs::write(&out, &output.stdout)
                    .with_context(|| format!("writing {}", out.display()))
            });
            let taken = Taken {
                component,
                binary: Some(state.binary.clone()),
                path,
                failed: None,
            };
            threads.push((taken, handle));
        }
        Ok(Self { threads })
    }

    /// Waits for every profile (they end `seconds` after [`Capture::start`]).
    pub fn finish(self) -> Vec<Taken> {
        self.threads
            .into_iter()
            .map(|(mut taken, handle)| {
                let result = handle
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the profiling thread panicked")));
                taken.failed = result.err().map(|e| format!("{e:#}"));
                taken
            })
            .collect()
    }
}

/// Writes `<component>.top.txt` beside each profile (`go tool pprof -top`, when Go is
/// installed) and returns a line per component saying where its profile and summary are, or
/// why there is none; a missing profile or summary does not fail the run. Symbolizing takes
/// tens of seconds per profile, so the run calls this at its end, not between its phases.
pub fn summarize(taken: &[Taken]) -> Vec<String> {
    taken
        .iter()
        .map(|t| {
            let component = t.component;
            if let Some(why) = &t.failed {
                return format!("{component}: {why}");
            }
            let top = t.path.with_extension("top.txt");
            match write_top(t.binary.as_deref(), &t.path, &top) {
                Ok(()) => format!("{component}: {} (top: {})", t.path.display(), top.display()),
                Err(e) => format!("{component}: {} (no summary: {e:#})", t.path.display()),
            }
        })
        .collect()
}

/// `go tool pprof -top` of a profile (flat and cumulative), into `out`.
fn write_top(binary: Option<&Path>, profile: &Path, out: &Path) -> Result<()> {
    let mut text = String::new();
    for (label, extra) in [("flat", None), ("cumulative", Some("-cum"))] {
        let mut cmd = Command::new("go");
        cmd.args(["tool", "pprof", "-top", "-nodecount=60"]);
        if let Some(flag) = extra {
            cmd.arg(flag);
        }
        if let Some(bin) = binary {
            cmd.arg(bin);
        }
        cmd.arg(profile);
        let output = cmd.output().context("running go tool pprof")?;
        if !output.status.success() {
            bail!(
                "go tool pprof: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        text.push_str(&format!("## {label}\n"));
        text.push_str(&String::from_utf8_lossy(&output.stdout));
        text.push('\n');
    }
    fs::write(out, text).with_context(|| format!("writing {}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_path_names_its_length() {
        assert_eq!(profile_path(45), "/debug/pprof/profile?seconds=45");
    }
}
