//! Progress lines with elapsed time, printed to stderr.

use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a wait goes unannounced before [`Progress::waiting`] says what it waits for, and
/// how often it says so again.
const SILENCE: Duration = Duration::from_secs(10);

/// Prints `[ 12.3s] message` lines; silent when `quiet` is set.
#[derive(Debug, Clone)]
pub struct Progress {
    started: Instant,
    quiet: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        Self {
            started: Instant::now(),
            quiet,
        }
    }

    /// Seconds since this progress was created.
    pub fn elapsed_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// One step, prefixed by the elapsed time.
    pub fn step(&self, message: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("[{:6.1}s] {}", self.elapsed_secs(), message.as_ref());
        }
    }

    /// A paragraph for the reader (no time prefix).
    pub fn say(&self, message: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", message.as_ref());
        }
    }

    /// Runs `f`; while it runs longer than a few seconds, says every 10 s what it waits for
    /// (`still waiting for <what> (20s)`), so that no wait is silent.
    pub fn waiting<T>(&self, what: &str, f: impl FnOnce() -> T) -> T {
        if self.quiet {
            return f();
        }
        let (done, finished) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let started = Instant::now();
                while let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(SILENCE) {
                    self.step(format!(
                        "still waiting for {what} ({:.0}s)",
                        started.elapsed().as_secs_f64()
                    ));
                }
            });
            let out = f();
            drop(done);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_returns_what_the_wait_returned() {
        let progress = Progress::new(false);
        assert_eq!(progress.waiting("nothing", || 7), 7);
        assert_eq!(Progress::new(true).waiting("nothing", || "quiet"), "quiet");
    }
}
