//! `cargo xtask e2e`: the end-to-end suite (`xtask/tests/e2e`) against a fresh local control
//! plane, with the operator running as a process.
//!
//! Builds what the suite needs first, each step timed: the control-plane binaries (only when
//! not cached; the first build takes about 8 minutes on 2 cores), the operator binary, then runs
//! `cargo test -p xtask --features e2e --test e2e`. Words after `e2e` go to the suite: scenario
//! name filters (`cargo xtask e2e lifecycle::`), `--list`, `--exact`, `--skip NAME`.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xtask::cluster::Progress;

/// Runs the suite; `args` are passed to the test harness.
pub fn run(args: &[String], workspace_root: &Path) -> Result<()> {
    let progress = Progress::new(false);
    progress.step("control plane binaries (built from Go modules when not cached)");
    let bin_dir = xtask::cluster::ensure_binaries(false)?.bin_dir();
    progress.step(format!("control plane binaries in {}", bin_dir.display()));

    crate::demo::build_operator(workspace_root, &progress)?;

    let mut cargo_args = vec![
        "test".to_string(),
        "-p".to_string(),
        "xtask".to_string(),
        "--features".to_string(),
        "e2e".to_string(),
        "--test".to_string(),
        "e2e".to_string(),
    ];
    if !args.is_empty() {
        cargo_args.push("--".to_string());
        cargo_args.extend(args.iter().cloned());
    }
    progress.step(format!("cargo {}", cargo_args.join(" ")));
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let status = crate::demo::cargo_command()
        .current_dir(workspace_root)
        .args(&cargo_args)
        .status()
        .context("running cargo test")?;
    progress.step(format!(
        "end-to-end suite finished in {:.1}s (total {:.1}s)",
        started.elapsed().as_secs_f64(),
        progress.elapsed_secs()
    ));
    match status.code() {
        Some(0) => Ok(()),
        Some(130) => {
            bail!("the end-to-end suite was interrupted; it stopped its operators and its cluster")
        }
        _ => {
            // The failures again, last: a CI log is often read from its tail only.
            let failures =
                xtask::timing::SuiteTimes::read(&xtask::timing::times_path(workspace_root))
                    .ok()
                    // A table from an earlier run says nothing about this one.
                    .filter(|t| t.started_unix >= started_unix)
                    .map(|t| t.failures_summary())
                    .unwrap_or_default();
            bail!(
                "the end-to-end suite failed ({status}); scenario diagnostics are printed above, logs are in target/e2e-cluster/logs/\n{failures}"
            )
        }
    }
}
