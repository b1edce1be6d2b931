//! The write lane: reconciles that write objects (a new cluster's StatefulSet, Services and
//! the rest, or a spec change) take one of `--concurrency` places; reconciles that only write
//! status, pod labels or events, or nothing, do not wait for one.
//!
//! Why: the controller runs reconciles in arrival order, at most so many at once. Under a burst
//! of new clusters every slot held a creation (a few round trips each), and the reconcile that
//! turns a cluster Running once its pods are Ready waited behind all of them: 15 s at 100
//! clusters on two cores, minutes at 1,000. Now the controller runs [`SLOTS_PER_WRITER`] times
//! as many reconciles as there are writers; object writes keep the old bound (what the API
//! server is asked at once during a burst does not grow), and at most as many again wait for
//! a place, so the remaining slots stay free for status-only passes. A writer that finds the
//! lane and its queue full is put off for [`LANE_RECHECK`] without writing anything.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Controller slots per place in the lane: writers, writers waiting, and twice as many for
/// passes that write no object.
pub const SLOTS_PER_WRITER: u16 = 4;

/// How long a writer that found the lane full is put off.
pub const LANE_RECHECK: Duration = Duration::from_millis(250);

/// Places for object-writing reconciles, and a bounded queue for them.
#[derive(Debug)]
pub struct WriteLane {
    places: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// The answer of [`WriteLane::enter`].
#[derive(Debug)]
pub enum Entry<'a> {
    /// The pass writes no object: it needs no place.
    NotNeeded,
    /// A place, held until dropped.
    Granted(SemaphorePermit<'a>),
    /// Every place is taken and as many passes wait already: try again later.
    Full,
}

impl WriteLane {
    /// A lane of `writers` places (at least one) with as many waiting.
    pub fn new(writers: usize) -> Self {
        let writers = writers.max(1);
        Self {
            places: Semaphore::new(writers),
            waiting: AtomicUsize::new(0),
            max_waiting: writers,
        }
    }

    /// The controller's concurrency for a lane of `writers` places.
    pub fn controller_slots(writers: u16) -> u16 {
        writers.max(1).saturating_mul(SLOTS_PER_WRITER)
    }

    /// A place for a pass that writes objects (`writes_objects`), waiting for one while the
    /// queue has room.
    pub async fn enter(&self, writes_objects: bool) -> Entry<'_> {
        if !writes_objects {
            return Entry::NotNeeded;
        }
        if let Ok(permit) = self.places.try_acquire() {
            return Entry::Granted(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Entry::Full;
        }
        let permit = self.places.acquire().await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match permit {
            Ok(permit) => Entry::Granted(permit),
            // The semaphore is never closed; were it, the pass must not write unbounded.
            Err(_) => Entry::Full,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn passes_without_object_writes_never_wait() {
        let lane = WriteLane::new(1);
        let _held = lane.enter(true).await;
        assert!(matches!(lane.enter(false).await, Entry::NotNeeded));
    }

    #[tokio::test]
    async fn writers_beyond_the_places_and_the_queue_are_put_off() {
        let lane = Arc::new(WriteLane::new(2));
        let a = lane.enter(true).await;
        let b = lane.enter(true).await;
        assert!(matches!(a, Entry::Granted(_)) && matches!(b, Entry::Granted(_)));
        // Two more may wait for a place...
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let lane = Arc::clone(&lane);
                tokio::spawn(async move { matches!(lane.enter(true).await, Entry::Granted(_)) })
            })
            .collect();
        while lane.waiting.load(Ordering::Acquire) < 2 {
            tokio::task::yield_now().await;
        }
        // ...the fifth is turned away at once.
        assert!(matches!(lane.enter(true).await, Entry::Full));
        drop(a);
        drop(b);
        for waiter in waiters {
            assert!(waiter.await.unwrap(), "a waiting writer gets a freed place");
        }
        assert_eq!(lane.waiting.load(Ordering::Acquire), 0);
        assert!(matches!(lane.enter(true).await, Entry::Granted(_)));
    }

    #[test]
    fn the_controller_runs_four_slots_per_writer() {
        assert_eq!(WriteLane::controller_slots(5), 20);
        assert_eq!(WriteLane::controller_slots(0), 4);
        assert_eq!(WriteLane::controller_slots(u16::MAX), u16::MAX);
    }
}
