//! Failpoints: named places where a test makes this process stop, to prove what happens when
//! the operator pauses (a long garbage-collection-like stall, a frozen node, a cut-off
//! network) at the worst moment.
//!
//! `DATABASE_OPERATOR_FAILPOINTS` is a comma-separated list of `<point>=stop`; at the first
//! pass through a listed point the process sends itself SIGSTOP (and the point is disarmed, so
//! after SIGCONT it goes on). Unset (every installation): nothing is armed and [`hit`] is a
//! lookup in an empty list. The points are named in [`POINTS`].

use std::sync::{Mutex, OnceLock};

/// The environment variable that arms failpoints.
pub const ENV: &str = "DATABASE_OPERATOR_FAILPOINTS";

/// The points the operator passes through:
/// - `database-step:<command>`: a database step that talks to a server (`promote`, `fence`,
///   `stop_server`, ...; the names of [`database_operator_core::DatabaseCommand::name`]), its
///   status already written and its member dialled, before the leadership check and the
///   statements.
pub const POINTS: &[&str] = &["database-step:<command>"];

fn armed() -> &'static Mutex<Vec<String>> {
    static ARMED: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    ARMED.get_or_init(|| Mutex::new(parse(std::env::var(ENV).ok().as_deref())))
}

/// The points `value` arms (entries other than `<point>=stop` are ignored, with a warning).
fn parse(value: Option<&str>) -> Vec<String> {
    let Some(value) = value else {
        return Vec::new();
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .filter_map(|entry| match entry.split_once('=') {
            Some((point, "stop")) => Some(point.to_owned()),
            _ => {
                tracing::warn!(entry, "{ENV}: not <point>=stop; ignored");
                None
            }
        })
        .collect()
}

/// Passes through `point`: stops this process (SIGSTOP) if `point` is armed, once.
pub fn hit(point: &str) {
    let fire = {
        let mut armed = armed().lock().unwrap_or_else(|e| e.into_inner());
        match armed.iter().position(|p| p == point) {
            Some(i) => {
                armed.remove(i);
                true
            }
            None => false,
        }
    };
    if fire {
        let pid = std::process::id();
        tracing::warn!(point, pid, "failpoint: stopping this process (SIGSTOP)");
        if let Err(e) = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
        {
            tracing::error!(point, error = %e, "failpoint: could not stop this process");
        }
        tracing::warn!(point, "failpoint: resumed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stop_entries_arm_a_point() {
        assert_eq!(
            parse(Some(
                "database-step:promote=stop, x=crash,,database-step:fence=stop"
            )),
            ["database-step:promote", "database-step:fence"]
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
