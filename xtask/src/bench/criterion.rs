//! The core's criterion benchmark (`crates/core/benches/plan.rs`): run it and read the
//! estimates criterion writes under `target/criterion/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// One criterion benchmark's estimates, nanoseconds per iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// `group/id`, e.g. `plan/3`.
    pub id: String,
    /// Median.
    pub median_ns: f64,
    /// Mean.
    pub mean_ns: f64,
    /// 95 % confidence interval of the mean.
    pub mean_ci_ns: [f64; 2],
}

/// Runs `cargo bench -p database-operator-core --bench plan` (shorter sampling when `quick`)
/// and returns the estimates of the groups it ran.
pub fn run(workspace_root: &Path, quick: bool) -> Result<Vec<Estimate>> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace_root).args([
        "bench",
        "-p",
        "database-operator-core",
        "--bench",
        "plan",
        "--",
    ]);
    if quick {
        cmd.args(["--warm-up-time", "1", "--measurement-time", "2"]);
    }
    println!("==> cargo bench -p database-operator-core --bench plan");
    let started = SystemTime::now();
    let status = cmd.status().context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p database-operator-core --bench plan failed ({status})");
    }
    read_estimates(&target_dir(workspace_root).join("criterion"), started)
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace when relative), else
/// `target/` in the workspace.
pub fn target_dir(workspace_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                workspace_root.join(dir)
            }
        })
        .unwrap_or_else(|| workspace_root.join("target"))
}

/// Every `<group>/<id>/new/estimates.json` under `dir` written at or after `since` (older ones
/// are benchmarks that no longer exist or did not run), sorted by id.
pub fn read_estimates(dir: &Path, since: SystemTime) -> Result<Vec<Estimate>> {
    let mut out = Vec::new();
    for group in ["plan", "plan_cold", "parts"] {
        let group_dir = dir.join(group);
        let Ok(entries) = fs::read_dir(&group_dir) else {
            continue;
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path().join("new").join("estimates.json");
            let fresh = fs::metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since);
            if !fresh {
                continue;
            }
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            let num = |p: &str| {
                v.pointer(p)
                    .and_then(serde_json::Value::as_f64)
                    .with_context(|| format!("{} has no {p}", path.display()))
            };
            out.push(Estimate {
                id: format!("{group}/{}", entry.file_name().to_string_lossy()),
                median_ns: num("/median/point_estimate")?,
                mean_ns: num("/mean/point_estimate")?,
                mean_ci_ns: [
                    num("/mean/confidence_interval/lower_bound")?,
                    num("/mean/confidence_interval/upper_bound")?,
                ],
            });
        }
    }
    out.sort_by_key(|a| natural_key(&a.id));
    Ok(out)
}

/// Sorts `plan/9` before `plan/10`.
fn natural_key(id: &str) -> (String, u64, String) {
    let (group, rest) = id.split_once('/').unwrap_or((id, ""));
    match rest.parse::<u64>() {
        Ok(n) => (group.to_string(), n, String::new()),
        Err(_) => (group.to_string(), u64::MAX, rest.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reads_criterion_estimates() {
        let dir = std::env::temp_dir().join(format!("bench-criterion-{}", std::process::id()));
        let write = |id: &str, median: f64| {
            let d = dir.join(id).join("new");
            fs::create_dir_all(&d).unwrap();
            let json = format!(
                r#"{{"mean":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":{lo},"upper_bound":{hi}}},"point_estimate":{mean},"standard_error":1.0}},"median":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0}},"point_estimate":{median},"standard_error":1.0}}}}"#,
                lo = median - 1.0,
                hi = median + 1.0,
                mean = median + 0.5,
            );
            fs::write(d.join("estimates.json"), json).unwrap();
        };
        write("parts/gone", 1.0);
        // Written before the run started: a benchmark that no longer exists.
        let since = SystemTime::now() + Duration::from_millis(20);
        std::thread::sleep(Duration::from_millis(50));
        write("plan/10", 900.0);
        write("plan/9", 800.0);
        write("parts/diff", 50.0);
        fs::create_dir_all(dir.join("plan/report")).unwrap();
        let got = read_estimates(&dir, since).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let ids: Vec<&str> = got.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["parts/diff", "plan/9", "plan/10"]);
        assert_eq!(got[1].median_ns, 800.0);
        assert_eq!(got[1].mean_ns, 800.5);
        assert_eq!(got[1].mean_ci_ns, [799.0, 801.0]);
    }
}
