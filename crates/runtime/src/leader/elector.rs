//! The Lease elector: acquires, renews and releases the leader Lease on this process's own
//! schedule.
//!
//! The holder renews a third into its term and, when a renewal fails, retries every second
//! until [`Timing::renew_deadline`]; only then does it step down. Nothing backs off: a run of
//! failed requests (an API server restarting, a proxy dropping requests) costs one retry a
//! second, never a sleep longer than the term. A candidate reads the Lease every
//! [`Timing::retry`] and takes it when it has seen the same record for a whole lease duration
//! on its own monotonic clock (as client-go does: the holder's wall clock is never compared
//! with this one), or when the holder released it.
//!
//! Every write names the resourceVersion it read, so two candidates cannot both take the
//! Lease: the second write fails with a conflict. Writes after the first are merge patches
//! with that resourceVersion ([`replace_patch`]): the operator's role grants `patch` on
//! Leases, not `update`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// A failed read or write of the Lease.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The Lease changed since it was read (a replace named an old resourceVersion), or a
    /// create found one already there.
    #[error("the Lease changed since it was read")]
    Conflict,
    /// Any other failure: the API server refused or did not answer.
    #[error("{0}")]
    Failed(String),
}

/// Reads and writes one Lease object.
#[allow(async_fn_in_trait)]
pub trait LeaseStore: Send + Sync {
    /// The Lease, or `None` when there is none.
    async fn get(&self) -> Result<Option<Lease>, StoreError>;
    /// Creates `lease` ([`StoreError::Conflict`] when one exists).
    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError>;
    /// Replaces the Lease with `lease`, whose resourceVersion must be the current one.
    async fn replace(&self, lease: &Lease) -> Result<Lease, StoreError>;
}

/// The Lease `name` in a namespace, through the API server.
pub struct KubeLeaseStore {
    api: Api<Lease>,
    name: String,
}

impl KubeLeaseStore {
    /// The Lease `name` that `api` (namespaced) reaches.
    pub fn new(api: Api<Lease>, name: &str) -> Self {
        Self {
            api,
            name: name.to_owned(),
        }
    }
}

fn store_error(e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(s) if s.code == 409 => StoreError::Conflict,
        e => StoreError::Failed(e.to_string()),
    }
}

fn field_manager() -> PostParams {
    PostParams {
        field_manager: Some(format!(
            "{}-leader-election",
            database_operator_api::FIELD_MANAGER
        )),
        ..PostParams::default()
    }
}

impl LeaseStore for KubeLeaseStore {
    async fn get(&self) -> Result<Option<Lease>, StoreError> {
        self.api.get_opt(&self.name).await.map_err(store_error)
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, StoreError> {
        self.api
            .create(&field_manager(), lease)
            .await
            .map_err(store_error)
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, StoreError> {
        let params = kube::api::PatchParams {
            field_manager: field_manager().field_manager,
            ..kube::api::PatchParams::default()
        };
        self.api
            .patch(
                &self.name,
                &params,
                &kube::api::Patch::Merge(replace_patch(lease)),
            )
            .await
            .map_err(store_error)
    }
}

/// The merge patch that replaces the Lease's spec with `lease`'s on the condition that the
/// object is still at `lease`'s resourceVersion (the API server answers 409 otherwise): an
/// update, but through the `patch` verb, the one the operator's role grants. Every field is
/// written, an absent holder as `null` (so a release removes it).
fn replace_patch(lease: &Lease) -> serde_json::Value {
    let spec = lease.spec.clone().unwrap_or_default();
    serde_json::json!({
        "metadata": {"resourceVersion": lease.metadata.resource_version},
        "spec": {
            "holderIdentity": spec.holder_identity,
            "leaseDurationSeconds": spec.lease_duration_seconds,
            "acquireTime": spec.acquire_time,
            "renewTime": spec.renew_time,
            "leaseTransitions": spec.lease_transitions,
        },
    })
}

/// When the elector acts, all derived from the lease duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease is valid without renewal (`leaseDurationSeconds`).
    pub duration: Duration,
    /// The holder renews this long after its last successful renewal: a third of the term.
    pub renew_every: Duration,
    /// Between failed renewals, and between a candidate's reads of the Lease.
    pub retry: Duration,
    /// The holder steps down when this long has passed since the start of its last
    /// successful renewal without another succeeding: the duration less a margin (2 s, or a
    /// third of a short term), so it stops before any other replica can take the Lease.
    pub renew_deadline: Duration,
    /// A bound on each request: a third of the term (5 s of 15), so an API server that answers
    /// slowly keeps its holder, and a request that hangs is sent again. A renewal is bounded
    /// by what is left before the deadline too.
    pub request_timeout: Duration,
}

impl Timing {
    /// The timing for a lease of `duration` (at least 2 s).
    pub fn for_duration(duration: Duration) -> Self {
        let duration = duration.max(Duration::from_secs(2));
        let margin = Duration::from_secs(2).min(duration / 3);
        Self {
            duration,
            renew_every: duration / 3,
            retry: Duration::from_secs(1).min(duration / 4),
            renew_deadline: duration - margin,
            request_timeout: duration / 3,
        }
    }
}

/// Who this elector is and what it writes.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The Lease's name (for a Lease this elector creates).
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's identity, written as `holderIdentity`.
    pub identity: String,
    /// When to renew, retry and step down.
    pub timing: Timing,
}

/// What a candidate last saw of a Lease someone else holds, and since when (on this process's
/// monotonic clock).
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    holder: Option<String>,
    renewed: Option<Timestamp>,
    since: Instant,
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

fn renewed(lease: &Lease) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    spec.renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0)
}

fn lease_seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

impl Candidate {
    /// `lease` (or a new one when `None`) taken by this candidate now.
    fn taken(&self, lease: Option<&Lease>) -> Lease {
        let now = MicroTime(Timestamp::now());
        let mut lease = lease.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        let previous = holder(&lease).map(str::to_owned);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if previous.as_deref() != Some(self.identity.as_str()) {
            spec.acquire_time = Some(now.clone());
            if previous.is_some() || spec.lease_transitions.is_some() {
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(lease_seconds(self.timing.duration));
        spec.renew_time = Some(now);
        lease
    }

    /// `lease` renewed by its holder (this candidate) now.
    fn renewed(&self, lease: &Lease) -> Lease {
        let mut lease = lease.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(lease_seconds(self.timing.duration));
        lease
    }

    /// `lease` released: no holder, so a candidate takes it at its next read.
    fn released(&self, lease: &Lease) -> Lease {
        let mut lease = lease.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        lease
    }
}

/// A request bounded by the timing's request timeout.
async fn bounded<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Failed(format!(
            "no answer within {}s",
            timeout.as_secs_f32()
        ))),
    }
}

/// One candidate pass: reads the Lease and takes it when it is free, released, this
/// candidate's own (a restart with the same identity), or unchanged for a whole lease duration
/// since `seen` first showed it. Returns the Lease as written, and when the write that took it
/// was sent (the term counts from there), when this candidate now holds it.
async fn try_acquire(
    store: &impl LeaseStore,
    me: &Candidate,
    seen: &mut Option<Seen>,
) -> Result<Option<(Lease, Instant)>, StoreError> {
    let timeout = me.timing.request_timeout;
    let Some(lease) = bounded(timeout, store.get()).await? else {
        let sent = Instant::now();
        return bounded(timeout, store.create(&me.taken(None)))
            .await
            .map(|l| Some((l, sent)));
    };
    let now = Instant::now();
    let current = Seen {
        holder: holder(&lease).map(str::to_owned),
        renewed: renewed(&lease),
        since: now,
    };
    let since = match seen {
        Some(s) if s.holder == current.holder && s.renewed == current.renewed => s.since,
        _ => {
            *seen = Some(current.clone());
            now
        }
    };
    let term = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .filter(|s| *s > 0)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(me.timing.duration, Duration::from_secs);
    let free = match current.holder.as_deref() {
        None => true,
        Some(h) if h == me.identity => true,
        Some(_) => now.duration_since(since) >= term,
    };
    if !free {
        return Ok(None);
    }
    let sent = Instant::now();
    bounded(timeout, store.replace(&me.taken(Some(&lease))))
        .await
        .map(|l| Some((l, sent)))
}

/// How a term ended.
#[derive(Debug, PartialEq, Eq)]
enum TermEnd {
    /// Every receiver is gone: the process is stopping.
    Closed,
    /// Renewals failed until the deadline, or another replica holds the Lease.
    Lost(String),
}

/// Renews `lease` (as last written by a request sent at `renewed_at`) until the term is lost
/// or every receiver of `leader` is gone; returns the Lease as last written and why the term
/// ended.
async fn hold(
    store: &impl LeaseStore,
    me: &Candidate,
    mut lease: Lease,
    mut renewed_at: Instant,
    leader: &watch::Sender<bool>,
) -> (Lease, TermEnd) {
    let timing = me.timing;
    let left_now = |renewed_at: Instant| {
        timing
            .renew_deadline
            .saturating_sub(Instant::now().duration_since(renewed_at))
    };
    let mut wait = timing.renew_every;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = leader.closed() => return (lease, TermEnd::Closed),
        }
        let started = Instant::now();
        let left = timing
            .renew_deadline
            .saturating_sub(started.duration_since(renewed_at));
        if left.is_zero() {
            return (
                lease,
                TermEnd::Lost(format!(
                    "no renewal succeeded for {}s",
                    timing.renew_deadline.as_secs_f32()
                )),
            );
        }
        // A renewal that answers after the deadline is no use: the term may be over. One that
        // hangs is given up after a third of the term and sent again.
        let timeout = timing.request_timeout.min(left);
        let result = bounded(timeout, store.replace(&me.renewed(&lease))).await;
        match result {
            Ok(written) => {
                lease = written;
                renewed_at = started;
                wait = timing.renew_every;
            }
            Err(StoreError::Conflict) => {
                // Someone wrote the Lease: still ours (a write that timed out here but was
                // applied), or taken.
                match bounded(left_now(renewed_at), store.get()).await {
                    Ok(Some(current)) if holder(&current) == Some(me.identity.as_str()) => {
                        lease = current;
                        wait = Duration::ZERO;
                    }
                    Ok(current) => {
                        let by = current
                            .as_ref()
                            .and_then(holder)
                            .unwrap_or("nobody")
                            .to_owned();
                        return (
                            lease,
                            TermEnd::Lost(format!("the Lease is now held by {by}")),
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the leader Lease after a conflict");
                        wait = timing.retry.min(left_now(renewed_at));
                    }
                }
            }
            Err(StoreError::Failed(e)) => {
                let left = left_now(renewed_at);
                tracing::warn!(
                    error = %e,
                    left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    "renewing the leader Lease failed; retrying"
                );
                wait = timing.retry.min(left);
            }
        }
    }
}

/// Runs the election for `me` until every receiver of `leader` is gone, then releases the
/// Lease if this replica holds it. `leader` says whether this replica holds the Lease.
pub async fn elect(store: impl LeaseStore, me: Candidate, leader: watch::Sender<bool>) {
    let mut seen = None;
    loop {
        let acquired = tokio::select! {
            result = try_acquire(&store, &me, &mut seen) => result,
            () = leader.closed() => return,
        };
        let (lease, sent) = match acquired {
            Ok(Some(taken)) => taken,
            Ok(None) | Err(StoreError::Conflict) => {
                tokio::select! {
                    () = tokio::time::sleep(me.timing.retry * 2) => continue,
                    () = leader.closed() => return,
                }
            }
            Err(StoreError::Failed(e)) => {
                tracing::warn!(error = %e, "reading or taking the leader Lease failed");
                tokio::select! {
                    () = tokio::time::sleep(me.timing.retry * 2) => continue,
                    () = leader.closed() => return,
                }
            }
        };
        tracing::info!(identity = %me.identity, "holding the leader Lease");
        leader.send_replace(true);
        let (lease, end) = hold(&store, &me, lease, sent, &leader).await;
        match end {
            TermEnd::Closed => {
                match bounded(
                    me.timing.request_timeout,
                    store.replace(&me.released(&lease)),
                )
                .await
                {
                    Ok(_) => tracing::info!("released the leader Lease"),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "releasing the leader Lease failed; it expires on its own"
                    ),
                }
                return;
            }
            TermEnd::Lost(why) => {
                tracing::error!(reason = %why, "lost the leader Lease");
                leader.send_replace(false);
                seen = None;
            }
        }
    }
}

#[cfg(test)]
#[path = "elector_tests.rs"]
mod tests;
