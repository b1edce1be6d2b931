//! Running `cargo` from a task.

use std::process::Command;

/// `cargo` (the one running this task) without the variables Cargo sets for the program it
/// runs (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...). Build scripts such as ring's watch some of
/// them, so inheriting them would make this build and a build from a plain shell invalidate
/// each other's artifacts and recompile on every switch.
pub fn command() -> Command {
    scrub_env(Command::new(env!("CARGO")))
}

/// `cmd` without the variables Cargo sets for the program it runs (see [`command`]).
pub fn scrub_env(mut cmd: Command) -> Command {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else {
            continue;
        };
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            )
        {
            cmd.env_remove(key);
        }
    }
    cmd
}
