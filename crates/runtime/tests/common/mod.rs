//! Helpers the real-server tests share (`database_io.rs`, `real_servers.rs`).

use std::process::Child;
use std::time::{Duration, Instant};

/// Waits up to `grace` for `child`, already asked to stop, to exit; kills it after that (as the
/// kubelet does after the grace period) and reaps it.
pub fn wait_or_kill(child: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}
