//! The elector against an in-memory Lease with the API server's optimistic concurrency
//! (resourceVersion), and faults per replica: failed or unanswered requests in time windows.
//! Time is tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Requests fail at once.
    Fail,
    /// Requests never answer.
    Hang,
    /// Requests answer after this long (and are carried out).
    Slow(Duration),
}

#[derive(Default)]
struct State {
    lease: Option<Lease>,
    version: u64,
    /// Per identity: faults in [from, until).
    faults: BTreeMap<String, Vec<(Instant, Instant, Fault)>>,
    /// Per identity: when each write (create or replace) was attempted, failed or not.
    writes: BTreeMap<String, Vec<Instant>>,
}

#[derive(Clone)]
struct FakeStore {
    state: Arc<Mutex<State>>,
    who: String,
}

impl FakeStore {
    async fn fault(&self) -> Result<(), StoreError> {
        let fault = {
            let state = self.state.lock().unwrap();
            let now = Instant::now();
            state.faults.get(&self.who).and_then(|windows| {
                windows
                    .iter()
                    .find(|(from, until, _)| *from <= now && now < *until)
                    .map(|w| w.2)
            })
        };
        match fault {
            None => Ok(()),
            Some(Fault::Fail) => Err(StoreError::Failed("injected".into())),
            Some(Fault::Hang) => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Err(StoreError::Failed("hung".into()))
            }
            Some(Fault::Slow(delay)) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
        }
    }

    fn attempt(&self) {
        let mut state = self.state.lock().unwrap();
        state
            .writes
            .entry(self.who.clone())
            .or_default()
            .push(Instant::now());
    }

    fn write(&self, lease: &Lease, create: bool) -> Result<Lease, StoreError> {
        let mut state = self.state.lock().unwrap();
        let current = state
            .lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let matches = if create {
            current.is_none()
        } else {
            current.is_some() && current == lease.metadata.resource_version
        };
        if !matches {
            return Err(StoreError::Conflict);
        }
        state.version += 1;
        let mut written = lease.clone();
        written.metadata.resource_version = Some(state.version.to_string());
        state.lease = Some(written.clone());
        Ok(written)
    }
}

impl LeaseStore for FakeStore {
    async fn get(&self) -> Result<Option<Lease>, StoreError> {
        self.fault().await?;
        Ok(self.state.lock().unwrap().lease.clone())
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError> {
        self.attempt();
        self.fault().await?;
        self.write(lease, true)
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, StoreError> {
        self.attempt();
        self.fault().await?;
        self.write(lease, false)
    }
}

const TERM: Duration = Duration::from_secs(15);

/// An elector for `who` on `state`, with the transitions of its leadership recorded (from
/// the test's start) by a watcher that holds the only receiver: aborting it is how the
/// replica is asked to stop.
struct Replica {
    transitions: Arc<Mutex<Vec<(Duration, bool)>>>,
    watcher: tokio::task::JoinHandle<()>,
    task: tokio::task::JoinHandle<()>,
}

fn start(state: &Arc<Mutex<State>>, who: &str, t0: Instant) -> Replica {
    let store = FakeStore {
        state: state.clone(),
        who: who.to_owned(),
    };
    let me = Candidate {
        name: "operator".into(),
        namespace: "ops".into(),
        identity: who.to_owned(),
        timing: Timing::for_duration(TERM),
    };
    let (tx, mut rx) = watch::channel(false);
    let task = tokio::spawn(elect(store, me, tx));
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let log = transitions.clone();
    let watcher = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let leading = *rx.borrow_and_update();
            log.lock().unwrap().push((t0.elapsed(), leading));
        }
    });
    Replica {
        transitions,
        watcher,
        task,
    }
}

impl Replica {
    fn leading(&self) -> bool {
        self.transitions().last().is_some_and(|t| t.1)
    }

    fn transitions(&self) -> Vec<(Duration, bool)> {
        self.transitions.lock().unwrap().clone()
    }
}

fn held_by(state: &Arc<Mutex<State>>) -> Option<String> {
    state
        .lock()
        .unwrap()
        .lease
        .as_ref()
        .and_then(holder)
        .map(str::to_owned)
}

fn inject(state: &Arc<Mutex<State>>, who: &str, from: Instant, until: Instant, fault: Fault) {
    state
        .lock()
        .unwrap()
        .faults
        .entry(who.to_owned())
        .or_default()
        .push((from, until, fault));
}

#[test]
fn timing_follows_the_duration() {
    let t = Timing::for_duration(Duration::from_secs(15));
    assert_eq!(t.renew_every, Duration::from_secs(5));
    assert_eq!(t.retry, Duration::from_secs(1));
    assert_eq!(t.renew_deadline, Duration::from_secs(13));
    assert_eq!(t.request_timeout, Duration::from_secs(5));
    let short = Timing::for_duration(Duration::from_secs(3));
    assert!(short.renew_deadline < short.duration && short.renew_deadline > short.renew_every);
    assert!(short.request_timeout <= short.renew_every);
}

#[tokio::test(start_paused = true)]
async fn a_lone_candidate_creates_the_lease_and_renews_a_third_into_its_term() {
    let state = Arc::new(Mutex::new(State::default()));
    let t0 = Instant::now();
    let a = start(&state, "a", t0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a.leading());
    assert_eq!(held_by(&state).as_deref(), Some("a"));
    tokio::time::sleep(Duration::from_secs(31)).await;
    let writes = state.lock().unwrap().writes["a"].len();
    // The create, then a renewal every 5 s: at 5, 10, ..., 30.
    assert_eq!(writes, 7, "one create and six renewals in 31 s");
    assert_eq!(a.transitions(), [(Duration::ZERO, true)]);
}

/// The fault that lost the Lease before: bursts of failed requests, many over the process's
/// life, each shorter than the term. Retries stay a second apart however many bursts came
/// before, so the holder keeps the Lease through every one.
#[tokio::test(start_paused = true)]
async fn bursts_of_failed_renewals_never_lose_the_lease() {
    let state = Arc::new(Mutex::new(State::default()));
    let t0 = Instant::now();
    let a = start(&state, "a", t0);
    // Ten bursts of 9 s each, 20 s apart: each begins just after a renewal.
    for burst in 0..10u32 {
        let from = t0 + Duration::from_secs(u64::from(burst) * 20 + 6);
        inject(
            &state,
            "a",
            from,
            from + Duration::from_secs(9),
            Fault::Fail,
        );
    }
    tokio::time::sleep(Duration::from_secs(210)).await;
    assert_eq!(
        a.transitions(),
        [(Duration::ZERO, true)],
        "never stepped down"
    );
    // Within the last burst the holder retried every second.
    let last = t0 + Duration::from_secs(186);
    let writes: Vec<_> = state.lock().unwrap().writes["a"]
        .iter()
        .filter(|w| **w >= last && **w < last + Duration::from_secs(9))
        .map(|w| w.duration_since(last))
        .collect();
    assert!(
        writes.len() >= 4,
        "retries within the last burst: {writes:?}"
    );
    assert!(
        writes
            .windows(2)
            .all(|w| w[1] - w[0] <= Duration::from_secs(1)),
        "retries a second apart: {writes:?}"
    );
}

/// A holder cut off from the API server steps down before its term ends; a standby takes
/// the Lease only after that, so two replicas never lead at once.
#[tokio::test(start_paused = true)]
async fn a_holder_cut_off_steps_down_before_a_standby_takes_over() {
    for fault in [Fault::Fail, Fault::Hang] {
        let state = Arc::new(Mutex::new(State::default()));
        let t0 = Instant::now();
        let a = start(&state, "a", t0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let b = start(&state, "b", t0);
        let forever = t0 + Duration::from_secs(3600);
        inject(&state, "a", t0 + Duration::from_secs(11), forever, fault);
        tokio::time::sleep(Duration::from_secs(60)).await;

        // a's last renewal started at 10 s: it steps down by 10 + 13 s.
        let a_log = a.transitions();
        assert_eq!(a_log.len(), 2, "{fault:?}: {a_log:?}");
        let stepped_down = a_log[1].0;
        assert!(!a_log[1].1);
        assert!(
            stepped_down <= Duration::from_secs(23) + Duration::from_millis(100),
            "{fault:?}: a stepped down at {stepped_down:?}"
        );
        let b_log = b.transitions();
        assert_eq!(b_log.len(), 1, "{fault:?}: {b_log:?}");
        assert!(b_log[0].1);
        assert!(
            b_log[0].0 > stepped_down,
            "{fault:?}: b took over at {:?}, a stepped down at {stepped_down:?}",
            b_log[0].0
        );
        // b saw a's last renewal (at 10 s) and waited a whole term from when it saw it.
        assert!(b_log[0].0 >= Duration::from_secs(25), "{b_log:?}");
        assert!(b_log[0].0 <= Duration::from_secs(28), "{b_log:?}");
        assert_eq!(held_by(&state).as_deref(), Some("b"));
    }
}

/// An API server that answers every request after 3 s: slow, but the holder keeps the Lease
/// and a standby never takes it.
#[tokio::test(start_paused = true)]
async fn a_slow_api_server_keeps_its_holder() {
    let state = Arc::new(Mutex::new(State::default()));
    let t0 = Instant::now();
    let forever = t0 + Duration::from_secs(3600);
    inject(
        &state,
        "a",
        t0,
        forever,
        Fault::Slow(Duration::from_secs(3)),
    );
    inject(
        &state,
        "b",
        t0,
        forever,
        Fault::Slow(Duration::from_secs(3)),
    );
    let a = start(&state, "a", t0);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let b = start(&state, "b", t0);
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(a.transitions().len(), 1, "{:?}", a.transitions());
    assert!(a.leading());
    assert!(b.transitions().is_empty(), "{:?}", b.transitions());
}

#[tokio::test(start_paused = true)]
async fn two_candidates_for_a_free_lease_make_one_leader() {
    let state = Arc::new(Mutex::new(State::default()));
    let t0 = Instant::now();
    let a = start(&state, "a", t0);
    let b = start(&state, "b", t0);
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_ne!(a.leading(), b.leading(), "exactly one leads");
    let winner = if a.leading() { &a } else { &b };
    assert_eq!(winner.transitions().len(), 1);
    let loser = if a.leading() { &b } else { &a };
    assert!(loser.transitions().is_empty(), "{:?}", loser.transitions());
}

#[tokio::test(start_paused = true)]
async fn a_stopping_holder_releases_and_the_standby_takes_over_at_its_next_read() {
    let state = Arc::new(Mutex::new(State::default()));
    let t0 = Instant::now();
    let mut a = start(&state, "a", t0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = start(&state, "b", t0);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(a.leading() && !b.leading());

    a.watcher.abort();
    let stopped = t0.elapsed();
    tokio::time::timeout(Duration::from_secs(5), &mut a.task)
        .await
        .expect("the elector returns once its receivers are gone")
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b_log = b.transitions();
    assert_eq!(b_log.len(), 1, "{b_log:?}");
    assert!(
        b_log[0].0 - stopped <= Duration::from_secs(2) + Duration::from_millis(100),
        "b took over {:?} after a stopped, not a term later",
        b_log[0].0 - stopped
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_held_by_a_replica_that_is_gone_is_taken_a_whole_term_after_it_was_seen() {
    let state = Arc::new(Mutex::new(State::default()));
    // Written by a replica whose clock is a day ahead: only the local clock counts.
    let mut gone = Candidate {
        name: "operator".into(),
        namespace: "ops".into(),
        identity: "gone".into(),
        timing: Timing::for_duration(TERM),
    }
    .taken(None);
    if let Some(spec) = gone.spec.as_mut() {
        spec.renew_time = Some(MicroTime(
            Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(24),
        ));
    }
    gone.metadata.resource_version = Some("1".into());
    state.lock().unwrap().lease = Some(gone);
    let t0 = Instant::now();
    let b = start(&state, "b", t0);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let b_log = b.transitions();
    assert_eq!(b_log.len(), 1, "{b_log:?}");
    assert!(
        b_log[0].0 >= TERM && b_log[0].0 <= TERM + Duration::from_secs(2),
        "took over at {:?}",
        b_log[0].0
    );
    let lease = state.lock().unwrap().lease.clone().unwrap();
    assert_eq!(lease.spec.unwrap().lease_transitions, Some(1));
}

#[test]
fn a_replacing_patch_names_the_version_and_writes_every_field() {
    let me = Candidate {
        name: "operator".into(),
        namespace: "ops".into(),
        identity: "a".into(),
        timing: Timing::for_duration(TERM),
    };
    let mut lease = me.taken(None);
    lease.metadata.resource_version = Some("42".into());
    let patch = replace_patch(&lease);
    assert_eq!(patch["metadata"]["resourceVersion"], "42");
    assert_eq!(patch["spec"]["holderIdentity"], "a");
    assert_eq!(patch["spec"]["leaseDurationSeconds"], 15);
    assert!(patch["spec"]["renewTime"].is_string(), "{patch}");
    // A release removes the holder: null, not left out (a merge patch keeps what it omits).
    let released = replace_patch(&me.released(&lease));
    let spec = released["spec"].as_object().unwrap();
    assert_eq!(spec.get("holderIdentity"), Some(&serde_json::Value::Null));
    assert_eq!(released["metadata"]["resourceVersion"], "42");
}
