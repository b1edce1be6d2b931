//! Events with client-go's folding (see [`Events`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};

/// Events with client-go's folding: the same note again about the same object (same type and
/// reason) becomes a series on the Event already written; another note is a new Event. kube's
/// `Recorder` alone folds every event of one type and reason about an object within minutes
/// into the first one's series, keeping the first note (a second backup, a second failed step
/// on another member would show the first one's message).
#[derive(Clone)]
pub(super) struct Events {
    client: Client,
    reporter: Reporter,
    inner: Arc<std::sync::Mutex<EventsInner>>,
}

struct EventsInner {
    recorder: Recorder,
    notes: NoteLog,
}

/// An event's key: (namespace, name, Warning, reason).
type NoteKey = (String, String, bool, String);

/// The hash of the last note by (object, type, reason), and when it was published. Entries
/// older than [`NoteLog::KEEP`] are dropped once there are more than [`NoteLog::PRUNE_ABOVE`]
/// (deleted clusters, reasons not seen again), so the log does not grow with every cluster
/// that ever existed.
#[derive(Default)]
struct NoteLog {
    last: std::collections::HashMap<NoteKey, (u64, std::time::Instant)>,
    /// When the log was last pruned: at most once per [`NoteLog::KEEP`], so a large log of
    /// recent keys is not scanned on every event.
    pruned_at: Option<std::time::Instant>,
}

impl NoteLog {
    const PRUNE_ABOVE: usize = 4096;
    const KEEP: std::time::Duration = std::time::Duration::from_secs(3600);

    /// Records `note` for `key` at `now`; whether the recorder must start over: the note
    /// differs from the last one of its key, or entries were dropped (their series may still
    /// be in the recorder's cache, and a different note must not join them).
    fn record(&mut self, key: NoteKey, note: u64, now: std::time::Instant) -> bool {
        let mut pruned = false;
        let due = self
            .pruned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= Self::KEEP);
        if due && self.last.len() > Self::PRUNE_ABOVE {
            self.pruned_at = Some(now);
            let before = self.last.len();
            self.last
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < Self::KEEP);
            pruned = self.last.len() < before;
        }
        let changed = self
            .last
            .insert(key, (note, now))
            .is_some_and(|(before, _)| before != note);
        changed || pruned
    }
}

impl Events {
    pub(super) fn new(client: Client, reporter: Reporter) -> Self {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            inner: Arc::new(std::sync::Mutex::new(EventsInner {
                recorder,
                notes: NoteLog::default(),
            })),
        }
    }

    /// The recorder to publish `event` about `regarding` with: the current one when the note
    /// is the one last published for its key (or the first), else a fresh one (its empty
    /// cache makes the event a new Event; every other key starts over with it).
    pub(super) fn recorder_for(&self, regarding: &ObjectReference, event: &Event) -> Recorder {
        let key = (
            regarding.namespace.clone().unwrap_or_default(),
            regarding.name.clone().unwrap_or_default(),
            matches!(event.type_, KubeEventType::Warning),
            event.reason.clone(),
        );
        let note = database_operator_core::hash::hash_parts([event
            .note
            .as_deref()
            .unwrap_or_default()
            .as_bytes()]) as u64;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.notes.record(key, note, std::time::Instant::now()) {
            inner.recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        }
        inner.recorder.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{NoteKey, NoteLog};

    fn key(name: &str) -> NoteKey {
        ("shop".into(), name.into(), false, "BackupSucceeded".into())
    }

    #[test]
    fn a_new_note_starts_over_and_the_same_note_does_not() {
        let mut log = NoteLog::default();
        let t = Instant::now();
        assert!(!log.record(key("orders"), 1, t), "the first note of a key");
        assert!(
            !log.record(key("orders"), 1, t),
            "the same note again: a series"
        );
        assert!(log.record(key("orders"), 2, t), "another note: a new Event");
        assert!(!log.record(key("payments"), 3, t));
    }

    #[test]
    fn old_keys_are_dropped_once_the_log_is_large() {
        let mut log = NoteLog::default();
        let t = Instant::now();
        for i in 0..=NoteLog::PRUNE_ABOVE {
            assert!(!log.record(key(&format!("gone-{i}")), 1, t));
        }
        // Below the age limit nothing goes (the log is scanned once, then not for an hour).
        let soon = t + Duration::from_secs(60);
        assert!(!log.record(key("fresh"), 1, soon));
        assert_eq!(log.last.len(), NoteLog::PRUNE_ABOVE + 2);
        let mid = t + NoteLog::KEEP / 2;
        assert!(!log.record(key("recent"), 1, mid));
        // An hour after that scan, the keys older than an hour go, and the recorder starts over.
        let later = soon + NoteLog::KEEP;
        assert!(log.record(key("new"), 1, later));
        assert_eq!(log.last.len(), 2, "only the keys seen within the hour stay");
        assert!(log.last.contains_key(&key("recent")));
        // Grown again within the hour: not scanned again until an hour after the last prune.
        for i in 0..=NoteLog::PRUNE_ABOVE {
            log.record(key(&format!("again-{i}")), 1, later);
        }
        let before = log.last.len();
        let old_now = later + NoteLog::KEEP - Duration::from_secs(1);
        assert!(!log.record(key("x"), 1, old_now));
        assert_eq!(log.last.len(), before + 1, "no prune within the hour");
    }
}
