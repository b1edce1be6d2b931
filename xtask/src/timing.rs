//! The end-to-end suite's clock: every run writes a per-scenario timing table
//! (`target/e2e-times.json`), prints its slowest scenarios, and fails when the whole suite took
//! longer than its budget, naming the scenarios that cost the most. The budget catches growth
//! the day it happens, long before CI's hard limit: CI runs the suite after the builds, and a
//! suite past [`DEFAULT_SUITE_BUDGET_SECS`] leaves too little of the 90 minutes for a machine
//! that must build everything first.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The suite's budget on the CI machine (2 cores), in seconds, unless
/// [`SUITE_BUDGET_ENV`] says otherwise.
pub const DEFAULT_SUITE_BUDGET_SECS: f64 = 2_400.0;

/// The environment variable that overrides the suite's budget (seconds; `0` turns the guard off,
/// for a measurement such as the failover benchmark whose length the caller chose).
pub const SUITE_BUDGET_ENV: &str = "E2E_SUITE_BUDGET_SECS";

/// How many of the slowest scenarios a run prints, and a guard failure names.
pub const SLOWEST_SHOWN: usize = 10;

/// How much of a failure message the summary at the end of a run repeats.
pub const FAILURE_CHARS: usize = 1_500;

/// `message` cut to [`FAILURE_CHARS`] characters (on a character boundary), with its line
/// breaks kept.
pub fn short_failure(message: &str) -> String {
    match message.char_indices().nth(FAILURE_CHARS) {
        Some((at, _)) => format!("{} [... cut]", &message[..at]),
        None => message.to_owned(),
    }
}

/// One scenario's time in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioTime {
    /// `module::function`.
    pub name: String,
    /// Wall-clock seconds from its start to its end (its diagnostics and clean-up included).
    pub seconds: f64,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed (its error, first lines), for the summary that ends a run: CI logs are
    /// often read from their tail only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Whether it ran in the side lane, beside the main lane's scenarios (its time overlaps
    /// theirs: the scenarios' times add up to more than the total).
    #[serde(default)]
    pub beside: bool,
}

/// The timing table of one run of the suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteTimes {
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    /// Wall-clock seconds of the whole run: the scenarios, the shared cluster's start and stop.
    pub total_seconds: f64,
    /// The budget the run was held to (seconds; 0 means none).
    pub budget_seconds: f64,
    /// Whether every scenario of the suite ran (no name filter or skip): such a run is held
    /// to the budget.
    pub whole_suite: bool,
    /// Whether the budget came from [`SUITE_BUDGET_ENV`]: then a filtered run is held to it
    /// too (how the guard is shown to fire: a small budget and one scenario).
    pub budget_from_env: bool,
    /// Scenarios in the order they ran.
    pub scenarios: Vec<ScenarioTime>,
}

impl SuiteTimes {
    /// The `n` slowest scenarios, slowest first (ties keep the run's order).
    pub fn slowest(&self, n: usize) -> Vec<&ScenarioTime> {
        let mut sorted: Vec<&ScenarioTime> = self.scenarios.iter().collect();
        sorted.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        sorted.truncate(n);
        sorted
    }

    /// The table printed at the end of a run: the slowest scenarios with their share of the
    /// total.
    pub fn slowest_table(&self, n: usize) -> String {
        let mut out = format!(
            "slowest {} of {} scenarios ({:.1}s in all):\n",
            n.min(self.scenarios.len()),
            self.scenarios.len(),
            self.total_seconds
        );
        for s in self.slowest(n) {
            let share = if self.total_seconds > 0.0 {
                100.0 * s.seconds / self.total_seconds
            } else {
                0.0
            };
            let mark = if s.passed { "ok" } else { "FAILED" };
            let lane = if s.beside { "  (side lane)" } else { "" };
            let _ = writeln!(
                out,
                "  {:7.1}s  {share:4.1}%  {mark:6}  {}{lane}",
                s.seconds, s.name
            );
        }
        out
    }

    /// `Err` with a message naming the total, the budget and the slowest scenarios when a whole
    /// run of the suite (or any run, with the budget from [`SUITE_BUDGET_ENV`]) took longer than
    /// its budget; `Ok` otherwise (a filtered run under the default budget, or no budget).
    pub fn check_budget(&self) -> Result<()> {
        if !(self.whole_suite || self.budget_from_env) || self.budget_seconds <= 0.0 {
            return Ok(());
        }
        if self.total_seconds <= self.budget_seconds {
            return Ok(());
        }
        bail!(
            "the end-to-end suite took {:.0}s, over its budget of {:.0}s ({SUITE_BUDGET_ENV}): \
             CI must finish within 90 minutes on a fresh machine, so make the slowest scenarios \
             cheaper (share a running cluster, shorten a wait) before adding more.\n{}",
            self.total_seconds,
            self.budget_seconds,
            self.slowest_table(SLOWEST_SHOWN)
        )
    }

    /// One line per failed scenario with the first line of its error (at most
    /// [`FAILURE_CHARS`] characters), empty when every scenario passed: the last words of a
    /// failed run, so that a log read from its tail still says what went wrong.
    pub fn failures_summary(&self) -> String {
        let mut out = String::new();
        for s in self.scenarios.iter().filter(|s| !s.passed) {
            let why = s.failure.as_deref().unwrap_or("(no message recorded)");
            let _ = writeln!(out, "  {}: {}", s.name, short_failure(why));
        }
        out
    }

    /// Writes the table as pretty JSON to `path` (its directory is created).
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let json = serde_json::to_string_pretty(self).context("encoding the timing table")?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
    }

    /// Reads a table written by [`SuiteTimes::write`].
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

/// The suite's budget and whether it was set: [`SUITE_BUDGET_ENV`] when set, else
/// [`DEFAULT_SUITE_BUDGET_SECS`].
pub fn suite_budget_from_env() -> Result<(f64, bool)> {
    match std::env::var(SUITE_BUDGET_ENV) {
        Ok(v) => Ok((parse_budget(&v)?, true)),
        Err(std::env::VarError::NotPresent) => Ok((DEFAULT_SUITE_BUDGET_SECS, false)),
        Err(e) => bail!("{SUITE_BUDGET_ENV}: {e}"),
    }
}

fn parse_budget(value: &str) -> Result<f64> {
    let secs: f64 = value.trim().parse().with_context(|| {
        format!("{SUITE_BUDGET_ENV}={value:?}: expected a number of seconds (0 turns it off)")
    })?;
    if !secs.is_finite() || secs < 0.0 {
        bail!("{SUITE_BUDGET_ENV}={value:?}: expected a number of seconds, 0 or more");
    }
    Ok(secs)
}

/// Where a run of the suite in `workspace_root` writes its table.
pub fn times_path(workspace_root: &Path) -> PathBuf {
    workspace_root.join("target").join("e2e-times.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(total: f64, whole_suite: bool, budget: f64) -> SuiteTimes {
        SuiteTimes {
            started_unix: 0,
            total_seconds: total,
            budget_seconds: budget,
            whole_suite,
            budget_from_env: false,
            scenarios: vec![
                ScenarioTime {
                    name: "lifecycle::quick".into(),
                    seconds: 3.0,
                    passed: true,
                    failure: None,
                    beside: true,
                },
                ScenarioTime {
                    name: "upgrades::slow".into(),
                    seconds: 140.0,
                    passed: true,
                    failure: None,
                    beside: false,
                },
                ScenarioTime {
                    name: "failover::middle".into(),
                    seconds: 80.0,
                    passed: false,
                    failure: Some("wal not archived\nsecond line".into()),
                    beside: false,
                },
            ],
        }
    }

    #[test]
    fn the_guard_fires_past_a_small_budget_and_names_the_slowest() {
        let err = times(223.0, true, 100.0).check_budget().unwrap_err();
        let message = format!("{err:#}");
        assert!(message.contains("took 223s"), "{message}");
        assert!(message.contains("budget of 100s"), "{message}");
        let slow = message.find("upgrades::slow").expect("names the slowest");
        let middle = message.find("failover::middle").expect("names the next");
        assert!(slow < middle, "slowest first: {message}");
        assert!(message.contains("FAILED  failover::middle"), "{message}");
    }

    #[test]
    fn the_guard_holds_within_budget_for_filtered_runs_and_when_off() {
        times(223.0, true, 223.0).check_budget().unwrap();
        times(5_000.0, false, 100.0).check_budget().unwrap();
        times(5_000.0, true, 0.0).check_budget().unwrap();
    }

    #[test]
    fn a_budget_set_by_hand_holds_a_filtered_run_too() {
        let mut one = times(223.0, false, 100.0);
        one.budget_from_env = true;
        assert!(one.check_budget().is_err());
    }

    #[test]
    fn the_summary_names_each_failure_with_its_message() {
        let t = times(223.0, true, 0.0);
        let summary = t.failures_summary();
        assert_eq!(
            summary, "  failover::middle: wal not archived\nsecond line\n",
            "{summary}"
        );
        let long = "x".repeat(FAILURE_CHARS + 10);
        assert!(short_failure(&long).ends_with("[... cut]"));
        assert_eq!(short_failure("é short"), "é short");
        let mut all_passed = t.clone();
        all_passed.scenarios.retain(|s| s.passed);
        assert_eq!(all_passed.failures_summary(), "");
    }

    #[test]
    fn slowest_sorts_and_truncates() {
        let t = times(223.0, true, 0.0);
        let names: Vec<&str> = t.slowest(2).iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["upgrades::slow", "failover::middle"]);
        assert_eq!(t.slowest(10).len(), 3);
        let table = t.slowest_table(2);
        assert!(
            table.starts_with("slowest 2 of 3 scenarios (223.0s in all)"),
            "{table}"
        );
        assert!(table.contains("62.8%"), "{table}");
    }

    #[test]
    fn the_table_survives_a_round_trip_through_its_file() {
        let dir = std::env::temp_dir().join(format!("xtask-timing-{}", std::process::id()));
        let path = dir.join("nested").join("e2e-times.json");
        let t = times(223.0, true, 2_400.0);
        t.write(&path).unwrap();
        let read = SuiteTimes::read(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read.unwrap(), t);
    }

    #[test]
    fn budgets_are_seconds_and_never_negative() {
        assert_eq!(parse_budget("2400").unwrap(), 2_400.0);
        assert_eq!(parse_budget(" 0 ").unwrap(), 0.0);
        let bad = format!("{:#}", parse_budget("40m").unwrap_err());
        assert!(
            bad.contains(SUITE_BUDGET_ENV) && bad.contains("40m"),
            "{bad}"
        );
        assert!(parse_budget("-1").is_err());
    }
}
