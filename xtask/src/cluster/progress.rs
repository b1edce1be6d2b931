//! Progress lines with elapsed time, printed to stderr.

use std::time::Instant;

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
}
