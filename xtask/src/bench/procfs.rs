//! What the benchmark reads from `/proc`: memory and CPU time of a process, the load average and
//! a description of the machine.

use std::fs;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Memory and CPU time of one process at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    /// Resident set size now (`VmRSS`), bytes.
    pub rss_bytes: u64,
    /// Highest resident set size so far (`VmHWM`), bytes.
    pub hwm_bytes: u64,
    /// The anonymous part of the resident set now (`RssAnon`: heap, stacks), bytes; the rest
    /// is mostly the binary's code mapped from the page cache (`RssFile`: clean, shared with
    /// every process of the same binary, and given back under memory pressure without a
    /// write). Not kept in the run files' samples (0 when read back from them).
    #[serde(default)]
    pub anon_bytes: u64,
    /// User plus system CPU time since the process started, seconds.
    pub cpu_seconds: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`; 100 on Linux).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// Reads `/proc/<pid>/status` and `/proc/<pid>/stat`.
pub fn sample(pid: u32, ticks: f64) -> Result<ProcSample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let (utime, stime) = parse_stat_times(&stat)
        .with_context(|| format!("parsing /proc/{pid}/stat: {}", stat.trim()))?;
    Ok(ProcSample {
        rss_bytes: status_kib(&status, "VmRSS:").unwrap_or(0) * 1024,
        hwm_bytes: status_kib(&status, "VmHWM:").unwrap_or(0) * 1024,
        anon_bytes: status_kib(&status, "RssAnon:").unwrap_or(0) * 1024,
        cpu_seconds: (utime + stime) as f64 / ticks,
    })
}

/// A `kB` value of `/proc/<pid>/status`.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `utime` and `stime` (fields 14 and 15) of `/proc/<pid>/stat`. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat_times(stat: &str) -> Result<(u64, u64)> {
    let Some(end) = stat.rfind(')') else {
        bail!("no ')' after the command name");
    };
    // After ")": field 3 (state) is index 0, so utime (14) is index 11 and stime (15) index 12.
    let fields: Vec<&str> = stat[end + 1..].split_whitespace().collect();
    let get = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .context("too few fields")?
            .parse()
            .context("not a number")
    };
    Ok((get(11)?, get(12)?))
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> Result<[f64; 3]> {
    let text = fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    let mut it = text.split_whitespace().map(|f| f.parse::<f64>());
    let mut out = [0.0; 3];
    for slot in &mut out {
        *slot = it
            .next()
            .context("short /proc/loadavg")?
            .context("parsing /proc/loadavg")?;
    }
    Ok(out)
}

/// The machine the numbers were taken on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` of the first CPU in `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Logical CPUs the process may run on.
    pub cpus: usize,
    /// `MemTotal`, bytes.
    pub memory_bytes: u64,
    /// `uname -sr`.
    pub kernel: String,
}

impl Machine {
    /// Reads the description from `/proc` and `uname`.
    pub fn describe() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kernel = Command::new("uname")
            .arg("-sr")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: status_kib(&meminfo, "MemTotal:").unwrap_or(0) * 1024,
            kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_skip_a_command_name_with_spaces() {
        let stat = "4242 (tokio (worker) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 75 0 0 20 0 8 0 123 456 789";
        assert_eq!(parse_stat_times(stat).unwrap(), (250, 75));
        assert!(parse_stat_times("4242 no-parenthesis S 1").is_err());
        assert!(parse_stat_times("4242 (x) S 1 2").is_err());
    }

    #[test]
    fn status_values_are_kib() {
        let status = "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(10240));
        assert_eq!(status_kib(status, "VmHWM:"), Some(20480));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id(), clock_ticks()).unwrap();
        assert!(s.rss_bytes > 0);
        assert!(s.hwm_bytes >= s.rss_bytes);
        assert!(s.anon_bytes > 0 && s.anon_bytes <= s.rss_bytes);
        assert!(s.cpu_seconds >= 0.0);
    }
}
