//! Health as `/readyz` reports it. No IO.

use std::sync::atomic::{AtomicBool, Ordering};

/// Health as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Readiness {
    leading: AtomicBool,
    synced: AtomicBool,
}

impl Readiness {
    /// Ready: a standby replica (nothing to sync), or a leader whose caches have synced.
    pub fn is_ready(&self) -> bool {
        !self.leading.load(Ordering::SeqCst) || self.synced.load(Ordering::SeqCst)
    }

    /// Whether the caches of the running controllers have synced.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Marks the start of leading (caches not yet synced).
    pub fn start_leading(&self) {
        self.synced.store(false, Ordering::SeqCst);
        self.leading.store(true, Ordering::SeqCst);
    }

    /// Marks every cache as synced.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Marks the end of leading.
    pub fn stop_leading(&self) {
        self.leading.store(false, Ordering::SeqCst);
        self.synced.store(false, Ordering::SeqCst);
    }
}
