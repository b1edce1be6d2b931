//! Failpoints: named places where a test makes this process stop, to prove what happens when
//! the operator pauses (a long garbage-collection-like stall, a frozen node, a cut-off
//! network) at the worst moment.
//!
//! `DATABASE_OPERATOR_FAILPOINTS` is a comma-separated list of `<point>=<action>`; at the first
//! pass through a listed point the action is taken and the point disarmed. Actions: `stop`, the
//! process sends itself SIGSTOP (after SIGCONT it goes on); `crash`, it exits at once with
//! status [`CRASH_STATUS`] (no shutdown, no Lease release: an operator killed at that point). Unset (every installation):
//! nothing is armed and [`hit`] is a lookup in an empty list. The points are named in
//! [`POINTS`].

use std::sync::{Mutex, OnceLock};

/// The exit status of a `crash` failpoint.
pub const CRASH_STATUS: i32 = 99;

/// The environment variable that arms failpoints.
pub const ENV: &str = "DATABASE_OPERATOR_FAILPOINTS";

/// The points the operator passes through:
/// - `database-step:<command>`: a database step that talks to a server (`promote`, `fence`,
///   `stop_server`, ...; the names of [`database_operator_core::DatabaseCommand::name`]), its
///   status already written and its member dialled, before the leadership check and the
///   statements.
/// - `write:<Kind>`: right after a write of a reconcile succeeded (`StatefulSet`, `Service`,
///   `Pod`, `DatabaseCluster` for the status and the finalizer, `PersistentVolumeClaim`, ...:
///   [`crate::echo::Target::kind`]), before anything else of the pass.
pub const POINTS: &[&str] = &["database-step:<command>", "write:<Kind>"];

/// What an armed point does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// SIGSTOP to this process.
    Stop,
    /// Exit this process at once.
    Crash,
}

fn armed() -> &'static Mutex<Vec<(String, Action)>> {
    static ARMED: OnceLock<Mutex<Vec<(String, Action)>>> = OnceLock::new();
    ARMED.get_or_init(|| Mutex::new(parse(std::env::var(ENV).ok().as_deref())))
}

/// The points `value` arms (entries other than `<point>=stop|crash` are ignored, with a
/// warning).
fn parse(value: Option<&str>) -> Vec<(String, Action)> {
    let Some(value) = value else {
        return Vec::new();
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .filter_map(|entry| match entry.split_once('=') {
            Some((point, "stop")) => Some((point.to_owned(), Action::Stop)),
            Some((point, "crash")) => Some((point.to_owned(), Action::Crash)),
            _ => {
                tracing::warn!(entry, "{ENV}: not <point>=stop|crash; ignored");
                None
            }
        })
        .collect()
}

/// Passes through the point `point()` names: takes its action if that point is armed, once.
/// The name is made only while some point is armed (never in an installation).
pub fn hit_named(point: impl FnOnce() -> String) {
    let any = !armed().lock().unwrap_or_else(|e| e.into_inner()).is_empty();
    if any {
        hit(&point());
    }
}

/// Passes through `point`: takes its action if `point` is armed, once.
pub fn hit(point: &str) {
    let fire = {
        let mut armed = armed().lock().unwrap_or_else(|e| e.into_inner());
        armed
            .iter()
            .position(|(p, _)| p == point)
            .map(|i| armed.remove(i).1)
    };
    if fire == Some(Action::Crash) {
        tracing::warn!(point, "failpoint: aborting this process");
        std::process::exit(CRASH_STATUS);
    }
    if fire == Some(Action::Stop) {
        let pid = std::process::id();
        tracing::warn!(point, pid, "failpoint: stopping this process (SIGSTOP)");
        let sent = std::time::Instant::now();
        if let Err(e) = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
        {
            tracing::error!(point, error = %e, "failpoint: could not stop this process");
        }
        // The stop reaches this thread when the kernel next delivers signals to it, which may be
        // a few milliseconds after `kill` returned: nothing of the pass may run before it (a CI
        // run saw the step's leadership check pass in those milliseconds, and the stall land
        // after it). Wait here, at most 2 s, so the stall falls at this point.
        while sent.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        tracing::warn!(point, "failpoint: resumed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stop_and_crash_entries_arm_a_point() {
        assert_eq!(
            parse(Some(
                "database-step:promote=stop, x=explode,,database-step:fence=crash"
            )),
            [
                ("database-step:promote".to_owned(), Action::Stop),
                ("database-step:fence".to_owned(), Action::Crash)
            ]
        );
        assert!(parse(None).is_empty());
        assert!(parse(Some("")).is_empty());
    }

    #[test]
    fn an_unarmed_point_does_nothing() {
        // Nothing armed in the test environment: passing returns at once.
        hit("database-step:promote");
    }
}
