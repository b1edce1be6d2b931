//! Why a member's server stopped on its own: the failed exits of a pod's containers, as the
//! kubelet reports them (`state.terminated` or `lastState.terminated`), with the cause read
//! from the exit's reason and message. The database container's message is the end of its log
//! when the server wrote no termination message (`terminationMessagePolicy:
//! FallbackToLogsOnError`), so a server that exits on a full volume says so there.

use super::*;

/// What an exit says about its cause, when it is one the operator can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCause {
    /// The server could not write: its file system is full (`No space left on device`, errno
    /// 28 in MySQL's and MariaDB's words).
    VolumeFull,
    /// The kernel killed it for exceeding its memory limit (reason `OOMKilled`).
    OutOfMemory,
}

/// A container's last exit that was a failure (non-zero code, or killed for memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerExit {
    /// Its exit code (128 + the signal's number when a signal ended it).
    pub code: i32,
    /// The cause, when the reason or the message names one.
    pub cause: Option<ExitCause>,
    /// The line of the message that names the cause (at most [`ContainerExit::LINE_BYTES`]
    /// bytes), when one does.
    pub line: Option<String>,
}

/// Log lines that say the file system is full, in the words of the three servers (and of the
/// C library under them).
const VOLUME_FULL_MARKERS: [&str; 3] = ["No space left on device", "Errcode: 28", "errno: 28"];

impl ContainerExit {
    /// The longest line kept from a message (the cache holds this for every failed pod).
    pub const LINE_BYTES: usize = 200;

    /// The failed exit `terminated` records, `None` for a clean one (code 0, not killed for
    /// memory).
    pub fn from_terminated(
        terminated: &k8s_openapi::api::core::v1::ContainerStateTerminated,
    ) -> Option<Self> {
        let oom = terminated.reason.as_deref() == Some("OOMKilled");
        if terminated.exit_code == 0 && !oom {
            return None;
        }
        let full_line = terminated.message.as_deref().and_then(|message| {
            message
                .lines()
                .rev()
                .find(|l| VOLUME_FULL_MARKERS.iter().any(|m| l.contains(m)))
        });
        let cause = if oom {
            Some(ExitCause::OutOfMemory)
        } else {
            full_line.map(|_| ExitCause::VolumeFull)
        };
        Some(Self {
            code: terminated.exit_code,
            cause,
            line: full_line
                .filter(|_| !oom)
                .map(|l| truncate(l.trim(), Self::LINE_BYTES)),
        })
    }

    /// The exit in words, after "its server": `exited with 1: its volume is full (...)`.
    pub fn describe(&self) -> String {
        match self.cause {
            Some(ExitCause::OutOfMemory) => format!(
                "was killed for exceeding its memory limit (OOMKilled, exit {}): raise spec.resources.limits.memory or lower the server's memory settings",
                self.code
            ),
            Some(ExitCause::VolumeFull) => format!(
                "exited with {}: its volume is full ({}): free space on it or grow spec.storage.size",
                self.code,
                self.line.as_deref().unwrap_or("No space left on device")
            ),
            None => format!("exited with {}", self.code),
        }
    }
}

/// At most `max` bytes of `line`, cut at a character boundary.
fn truncate(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_owned();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// The failed exit of each container of `pod` (not init containers) whose current state or,
/// while it runs or waits again, last state is a failure.
pub(super) fn container_exits(pod: &Pod) -> BTreeMap<String, ContainerExit> {
    let Some(statuses) = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
    else {
        return BTreeMap::new();
    };
    statuses
        .iter()
        .filter_map(|c| {
            let terminated = c
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.last_state.as_ref()?.terminated.as_ref())?;
            Some((c.name.clone(), ContainerExit::from_terminated(terminated)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerStateTerminated;

    fn terminated(code: i32, reason: &str, message: Option<&str>) -> ContainerStateTerminated {
        ContainerStateTerminated {
            exit_code: code,
            reason: Some(reason.to_owned()),
            message: message.map(str::to_owned),
            ..ContainerStateTerminated::default()
        }
    }

    #[test]
    fn a_full_volume_is_named_with_the_servers_line() {
        let pg = "LOG:  database system is ready\nPANIC:  could not write to file \"pg_wal/xlogtemp.81\": No space left on device\nLOG:  server process (PID 81) was terminated by signal 6: Aborted\n";
        let exit = ContainerExit::from_terminated(&terminated(1, "Error", Some(pg))).unwrap();
        assert_eq!(exit.cause, Some(ExitCause::VolumeFull));
        assert_eq!(
            exit.line.as_deref(),
            Some("PANIC:  could not write to file \"pg_wal/xlogtemp.81\": No space left on device")
        );
        assert!(
            exit.describe()
                .starts_with("exited with 1: its volume is full (PANIC:")
        );
        assert!(
            exit.describe().contains("spec.storage.size"),
            "{}",
            exit.describe()
        );
        let mysql = "2026-12-06T10:00:00Z 0 [ERROR] [MY-000035] [Server] Disk is full writing './binlog.000002' (OS errno 28 - No space left on device).";
        let exit = ContainerExit::from_terminated(&terminated(1, "Error", Some(mysql))).unwrap();
        assert_eq!(exit.cause, Some(ExitCause::VolumeFull));
        let maria = "[ERROR] mariadbd: Error writing file './mysql-bin.000002' (Errcode: 28 \"No space left on device\")";
        let exit = ContainerExit::from_terminated(&terminated(1, "Error", Some(maria))).unwrap();
        assert_eq!(exit.cause, Some(ExitCause::VolumeFull));
    }

    #[test]
    fn out_of_memory_and_plain_failures_and_clean_exits() {
        let exit = ContainerExit::from_terminated(&terminated(137, "OOMKilled", None)).unwrap();
        assert_eq!(exit.cause, Some(ExitCause::OutOfMemory));
        assert!(
            exit.describe().contains("OOMKilled, exit 137"),
            "{}",
            exit.describe()
        );
        let exit =
            ContainerExit::from_terminated(&terminated(1, "Error", Some("FATAL: bad config")))
                .unwrap();
        assert_eq!((exit.cause, exit.line.as_deref()), (None, None));
        assert_eq!(exit.describe(), "exited with 1");
        assert_eq!(
            ContainerExit::from_terminated(&terminated(0, "Completed", None)),
            None
        );
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary() {
        let line = format!("{}é No space left on device", "x".repeat(199));
        let exit = ContainerExit::from_terminated(&terminated(1, "Error", Some(&line))).unwrap();
        let kept = exit.line.unwrap();
        assert!(
            kept.len() <= ContainerExit::LINE_BYTES + '…'.len_utf8(),
            "{kept}"
        );
        assert!(kept.ends_with('…'), "{kept}");
    }

    #[test]
    fn the_last_failed_exit_of_each_container_is_read() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0"},
            "status": {"containerStatuses": [
                {"name": "postgresql", "ready": false, "restartCount": 2, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                    "message": "PANIC: could not write to file: No space left on device"}}},
                {"name": "member-agent", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}},
                 "lastState": {}}
            ]}
        }))
        .unwrap();
        let exits = container_exits(&pod);
        assert_eq!(exits.len(), 1, "{exits:?}");
        assert_eq!(exits["postgresql"].cause, Some(ExitCause::VolumeFull));
    }
}
