//! The prober: every `--probe-interval` it probes each member of each cluster in the cache
//! through [`Members`] (a bounded number at once, each with a short connect timeout so a hung
//! server counts as unreachable quickly), turns what it found into the core's
//! [`MemberFacts`](database_operator_core::MemberFacts) and stores them in the context's
//! [`FactsCache`](crate::members::FactsCache), which `gather()` reads. A reconcile still reads
//! only caches.
//!
//! Between two full rounds it probes the suspect clusters every [`SUSPECT_INTERVAL`] (0.5 s):
//! those whose pod labelled primary failed its last probe or with an operation in flight, so
//! a lost primary's failover is decided and carried out at that pace without probing every
//! cluster that often.
//!
//! It asks for a reconcile of a cluster when its facts changed materially (reachable, role,
//! read-only, source, replication running or failing; not a position that moved) and after
//! every round while `status.failover` has an operation in flight (each step of a failover
//! waits for a probe taken after it). Both are the core's answers
//! ([`database_operator_core::probing`]): the prober only asks.
//!
//! A cluster whose operator Secret does not exist has no facts (the core then does nothing
//! about failover); that is said once at info, then at debug.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use database_operator_api::DatabaseCluster;
use database_operator_core::MemberRole;
use database_operator_core::render::labels;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use crate::database::{DatabaseIo, DbErrorKind, MemberFacts};
use crate::members::{MemberError, Members, PodAddress, Purpose, core_facts, source_member};

/// The reconcile requests the prober sends to the controller.
pub type Trigger = UnboundedSender<ObjectRef<DeserializeGuard<DatabaseCluster>>>;

/// A bound on one whole probe (connect, queries), above the drivers' own timeouts.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

/// How often the members of a suspect cluster are probed, between the full rounds: one whose
/// pod labelled primary failed its last probe, or with a failover or switchover in flight
/// (each of its steps waits for a probe taken after it). Never slower than the full rounds.
pub const SUSPECT_INTERVAL: Duration = Duration::from_millis(500);

/// A cluster by namespace and name.
type Key = (String, String);

/// What one probe of one member gave.
enum Probed {
    /// The server answered, or did not (reachable: false).
    Facts(Box<MemberFacts>),
    /// The member could not be dialled (no credentials, no address): no facts.
    NotDialled(MemberError),
    /// The server answered but the probe failed (bad credentials, a failing query): no facts,
    /// so no decision reads it as down.
    Failed(DbErrorKind, String),
}

/// One member to probe.
struct Job {
    cluster: Arc<DeserializeGuard<DatabaseCluster>>,
    pod: String,
    uid: String,
}

/// What the prober remembers between rounds: what was already said, so a persistent problem
/// is logged once, not every round.
#[derive(Default)]
struct Said {
    no_credentials: HashSet<(String, String)>,
    failures: HashMap<(String, String, String), String>,
}

/// Probes every member every `ctx.probe.interval` until dropped (the controller's future owns
/// it: it stops with the controller, on shutdown or when the lease is lost). An interval of
/// zero disables probing.
pub async fn run<I, S, M: Members>(ctx: Arc<Context<I, S, M>>, trigger: Trigger) {
    if ctx.probe.interval.is_zero() {
        tracing::info!("member probing disabled (--probe-interval=0): failover never starts");
        return futures::future::pending().await;
    }
    ctx.synced.wait().await;
    let mut ticker = tokio::time::interval(ctx.probe.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let fast = SUSPECT_INTERVAL.min(ctx.probe.interval);
    let mut said = Said::default();
    let mut suspect: HashSet<Key> = HashSet::new();
    loop {
        // Every member at the full interval; between those, only the suspect clusters.
        let only = if suspect.is_empty() {
            ticker.tick().await;
            None
        } else {
            tokio::select! {
                _ = ticker.tick() => None,
                () = tokio::time::sleep(fast) => Some(std::mem::take(&mut suspect)),
            }
        };
        let started = Instant::now();
        let (probed, next) = round(&ctx, &trigger, &mut said, only.as_ref()).await;
        suspect = next;
        tracing::debug!(
            members = probed,
            partial = only.is_some(),
            suspect = suspect.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "probe round"
        );
    }
}

fn key(cluster: &DeserializeGuard<DatabaseCluster>) -> (String, String) {
    (cluster.namespace().unwrap_or_default(), cluster.name_any())
}

/// Each member's facts of one round, by cluster: pod -> (pod uid, facts).
type RoundFacts = HashMap<Key, BTreeMap<String, (String, database_operator_core::MemberFacts)>>;

/// One round over every cluster, or only over `only`: the number of members probed and the
/// clusters found suspect ([`SUSPECT_INTERVAL`]).
async fn round<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    trigger: &Trigger,
    said: &mut Said,
    only: Option<&HashSet<Key>>,
) -> (usize, HashSet<Key>) {
    let clusters = clusters_to_probe(ctx, only);
    let live: HashSet<Key> = clusters.iter().map(|c| key(c)).collect();
    if only.is_none() {
        ctx.facts
            .retain(|ns, name| live.contains(&(ns.to_owned(), name.to_owned())));
        ctx.members
            .forget_credentials(&mut |ns, name| live.contains(&(ns.to_owned(), name.to_owned())));
    }
    let (jobs, addresses) = members_to_probe(ctx, &clusters);
    let count = jobs.len();
    let (results, leases) = futures::join!(
        probe_all(ctx, jobs),
        read_leases(ctx, &clusters, &addresses)
    );
    let lease_changed = record_leases(ctx, said, leases);
    let (rounds, dialled, lags) = record_probes(said, &addresses, &live, results);
    let found = Found {
        addresses,
        rounds,
        dialled,
        lease_changed,
    };
    let suspect = conclude(ctx, trigger, said, &clusters, found);
    if only.is_none() {
        ctx.metrics.set_replication_lags(ctx.scope.label(), &lags);
        said.no_credentials.retain(|k| live.contains(k));
        said.failures
            .retain(|(ns, name, _), _| live.contains(&(ns.clone(), name.clone())));
    }
    (count, suspect)
}

/// The cached clusters of this round that are not being deleted (only those in `only`, when
/// given).
fn clusters_to_probe<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    only: Option<&HashSet<Key>>,
) -> Vec<Arc<DeserializeGuard<DatabaseCluster>>> {
    ctx.stores
        .clusters
        .state()
        .into_iter()
        .filter(|c| {
            c.0.as_ref()
                .is_ok_and(|c| c.metadata.deletion_timestamp.is_none())
        })
        .filter(|c| only.is_none_or(|o| o.contains(&key(c))))
        .collect()
}

/// The member pods of `clusters` to probe, and each cluster's pods as a replica's source host
/// is matched against.
fn members_to_probe<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    clusters: &[Arc<DeserializeGuard<DatabaseCluster>>],
) -> (Vec<Job>, HashMap<Key, Vec<PodAddress>>) {
    let mut jobs = Vec::new();
    let mut addresses: HashMap<Key, Vec<PodAddress>> = HashMap::new();
    for cluster in clusters {
        let (namespace, name) = key(cluster);
        let mut pods = Vec::new();
        for pod in ctx.stores.pod_index.pods_of(&namespace, &name) {
            let Some(cached) = ctx
                .stores
                .pods
                .get(&ObjectRef::new(&pod).within(&namespace))
            else {
                continue;
            };
            let member = cached.member();
            if member.labels.get(labels::CLUSTER) != Some(&name)
                || member.labels.get(labels::COMPONENT).map(String::as_str)
                    != Some(labels::COMPONENT_DATABASE)
            {
                continue;
            }
            pods.push(PodAddress {
                name: pod.clone(),
                ip: cached.pod_ip().map(str::to_owned),
                primary_label: member.labels.get(labels::ROLE).map(String::as_str)
                    == Some(MemberRole::Primary.as_str()),
            });
            jobs.push(Job {
                cluster: cluster.clone(),
                pod,
                uid: cached.uid().unwrap_or_default(),
            });
        }
        addresses.insert((namespace, name), pods);
    }
    (jobs, addresses)
}

/// Probes `jobs`, a bounded number at once. Each fact is stamped with the moment its probe
/// was sent, not when the round ended: a decision asks whether a fact was taken after it (a
/// promotion, a fence), and an answer sent before that moment must never pass for one taken
/// after it.
async fn probe_all<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    jobs: Vec<Job>,
) -> Vec<(Job, Timestamp, Probed)> {
    futures::stream::iter(jobs)
        .map(|job| async move {
            let sent = Timestamp::now();
            let probed = probe(ctx, &job).await;
            (job, sent, probed)
        })
        .buffer_unordered(ctx.probe.concurrency.max(1))
        .collect()
        .await
}

/// What one round found, per cluster.
struct Found {
    /// The member pods, as a replica's source host is matched against.
    addresses: HashMap<Key, Vec<PodAddress>>,
    /// The facts of each member probed.
    rounds: RoundFacts,
    /// The clusters whose members could be dialled.
    dialled: HashSet<Key>,
    /// The clusters whose primary Lease changed.
    lease_changed: HashSet<Key>,
}

/// One read of a primary Lease: the cluster, when it was sent, what it gave.
type LeaseReadAt = (
    Key,
    Timestamp,
    Result<Option<crate::members::LeaseRead>, String>,
);

/// The primary Leases of self-fencing clusters, read alongside the probes (a GET each:
/// whether one expired is decided on a read made after the expiry). A cluster without member
/// pods yet has no primary whose Lease could matter: no GET for it.
async fn read_leases<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    clusters: &[Arc<DeserializeGuard<DatabaseCluster>>],
    addresses: &HashMap<Key, Vec<PodAddress>>,
) -> Vec<LeaseReadAt> {
    let fencing: Vec<Arc<DeserializeGuard<DatabaseCluster>>> = clusters
        .iter()
        .filter(|c| c.0.as_ref().is_ok_and(|c| c.spec.self_fencing()))
        .filter(|c| addresses.get(&key(c)).is_some_and(|pods| !pods.is_empty()))
        .cloned()
        .collect();
    futures::stream::iter(fencing)
        .map(|cluster| async move {
            let sent = Timestamp::now();
            let read = match cluster.0.as_ref() {
                Ok(c) => tokio::time::timeout(PROBE_LIMIT, ctx.members.primary_lease(c))
                    .await
                    .unwrap_or_else(|_| Err("timed out".to_owned())),
                Err(_) => Ok(None),
            };
            (key(&cluster), sent, read)
        })
        .buffer_unordered(ctx.probe.concurrency.max(1))
        .collect()
        .await
}

/// Records the Lease reads in the facts cache: the clusters whose Lease appeared, went,
/// changed holder or expired. A failed read is said once; the last sighting stays.
fn record_leases<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    said: &mut Said,
    leases: Vec<LeaseReadAt>,
) -> HashSet<Key> {
    let mut lease_changed: HashSet<Key> = HashSet::new();
    for (k, sent, read) in leases {
        let failure_key = (k.0.clone(), k.1.clone(), String::new());
        match read {
            Ok(Some(read)) => {
                said.failures.remove(&failure_key);
                if ctx.facts.record_lease(&k.0, &k.1, read, sent) {
                    lease_changed.insert(k);
                }
            }
            Ok(None) => {}
            Err(error) => {
                // The last sighting stays: its `checked_at` does not move, so nothing is
                // concluded from a read that failed.
                if said.failures.get(&failure_key) != Some(&error) {
                    tracing::warn!(namespace = %k.0, cluster = %k.1, %error, "primary Lease not read");
                    said.failures.insert(failure_key, error);
                }
            }
        }
    }
    lease_changed
}

/// Turns the probes' results into the core's facts per cluster (every live cluster has an
/// entry), the clusters whose members could be dialled, and the replicas' lags; a failure is
/// said once.
fn record_probes(
    said: &mut Said,
    addresses: &HashMap<Key, Vec<PodAddress>>,
    live: &HashSet<Key>,
    results: Vec<(Job, Timestamp, Probed)>,
) -> (RoundFacts, HashSet<Key>, crate::metrics::ReplicationLags) {
    let mut rounds: RoundFacts = live.iter().map(|k| (k.clone(), BTreeMap::new())).collect();
    let mut dialled: HashSet<Key> = HashSet::new();
    let mut lags = crate::metrics::ReplicationLags::new();
    for (job, sent, probed) in results {
        let k = key(&job.cluster);
        let Ok(cluster) = job.cluster.0.as_ref() else {
            continue;
        };
        let failure_key = (k.0.clone(), k.1.clone(), job.pod.clone());
        match probed {
            Probed::Facts(facts) => {
                said.failures.remove(&failure_key);
                dialled.insert(k.clone());
                let pods = addresses.get(&k).map(Vec::as_slice).unwrap_or_default();
                let source = facts
                    .source_host
                    .as_deref()
                    .and_then(|h| source_member(h, &k.1, &k.0, pods));
                let core = core_facts(&facts, cluster.spec.engine, source, sent);
                if core.role == Some(database_operator_core::ServerRole::Replica)
                    && let Some(lag) = core.lag_seconds
                {
                    let lag = i64::try_from(lag).unwrap_or(i64::MAX);
                    lags.insert((k.0.clone(), k.1.clone(), job.pod.clone()), lag);
                }
                if let Some(entry) = rounds.get_mut(&k) {
                    entry.insert(job.pod.clone(), (job.uid.clone(), core));
                }
            }
            Probed::NotDialled(
                MemberError::NoCredentials { .. } | MemberError::KeyMissing { .. },
            ) => {}
            Probed::NotDialled(error) => {
                dialled.insert(k.clone());
                let message = error.to_string();
                if said.failures.get(&failure_key) != Some(&message) {
                    tracing::warn!(namespace = %k.0, cluster = %k.1, member = %job.pod, kind = error.kind(), %error, "member not probed");
                    said.failures.insert(failure_key, message);
                }
            }
            Probed::Failed(kind, message) => {
                dialled.insert(k.clone());
                if said.failures.get(&failure_key) != Some(&message) {
                    tracing::warn!(namespace = %k.0, cluster = %k.1, member = %job.pod, kind = kind.as_str(), error = %message, "member probe failed; its facts are left out");
                    said.failures.insert(failure_key, message);
                }
            }
        }
    }
    (rounds, dialled, lags)
}

/// Per cluster: says once that it has no operator credentials, stores the round's facts,
/// logs the material changes, and asks for a reconcile when its facts or Lease changed or an
/// operation is in flight ([`database_operator_core::probing`]). Returns the suspect clusters
/// (pod labelled primary unreachable, or an operation in flight).
fn conclude<I, S, M: Members>(
    ctx: &Context<I, S, M>,
    trigger: &Trigger,
    said: &mut Said,
    clusters: &[Arc<DeserializeGuard<DatabaseCluster>>],
    found: Found,
) -> HashSet<Key> {
    let Found {
        addresses,
        mut rounds,
        dialled,
        lease_changed,
    } = found;
    let mut suspect: HashSet<Key> = HashSet::new();
    for cluster in clusters {
        let k = key(cluster);
        let has_pods = addresses.get(&k).is_some_and(|p| !p.is_empty());
        if has_pods && !dialled.contains(&k) {
            if said.no_credentials.insert(k.clone()) {
                tracing::info!(namespace = %k.0, cluster = %k.1, "no operator credentials for this cluster yet (Secret {}-operator): its members are not probed and failover does not act", k.1);
            } else {
                tracing::debug!(namespace = %k.0, cluster = %k.1, "members not probed: no operator credentials");
            }
        } else if dialled.contains(&k) {
            said.no_credentials.remove(&k);
        }
        let round = rounds.remove(&k).unwrap_or_default();
        let primary_down = addresses.get(&k).is_some_and(|pods| {
            pods.iter()
                .filter(|p| p.primary_label)
                .any(|p| round.get(&p.name).is_some_and(|(_, f)| !f.reachable))
        });
        let changes = ctx.facts.replace(&k.0, &k.1, round);
        for change in changes.iter().filter(|c| !c.what.is_empty()) {
            // What a decision reads changed: said once, at info (a steady cluster says nothing).
            tracing::info!(namespace = %k.0, cluster = %k.1, member = %change.pod, change = %change.what.join(", "), "member's server changed");
        }
        let changed = !changes.is_empty() || lease_changed.contains(&k);
        let in_flight = cluster
            .0
            .as_ref()
            .is_ok_and(|c| database_operator_core::probing::operation_in_flight(c.status.as_ref()));
        if primary_down || in_flight {
            suspect.insert(k.clone());
        }
        if changed || in_flight {
            tracing::debug!(namespace = %k.0, cluster = %k.1, changed, in_flight, "probe asks for a reconcile");
            let _ = trigger.unbounded_send(ObjectRef::new(&k.1).within(&k.0));
        }
    }
    suspect
}

async fn probe<I, S, M: Members>(ctx: &Context<I, S, M>, job: &Job) -> Probed {
    let started = Instant::now();
    let probed = probe_once(ctx, job).await;
    let outcome = match &probed {
        Probed::Facts(f) if f.reachable => "reachable",
        Probed::Facts(_) => "unreachable",
        Probed::Failed(..) => "failed",
        Probed::NotDialled(_) => "not_dialled",
    };
    ctx.metrics.probed(outcome, started.elapsed());
    probed
}

async fn probe_once<I, S, M: Members>(ctx: &Context<I, S, M>, job: &Job) -> Probed {
    let Ok(cluster) = job.cluster.0.as_ref() else {
        return Probed::Failed(DbErrorKind::Other, "unreadable cluster".to_owned());
    };
    let io = match ctx.members.dial(cluster, &job.pod, Purpose::Probe).await {
        Ok(io) => io,
        Err(e) => return Probed::NotDialled(e),
    };
    match tokio::time::timeout(PROBE_LIMIT, io.probe()).await {
        Ok(Ok(facts)) => Probed::Facts(Box::new(facts)),
        Ok(Err(e)) if e.kind == DbErrorKind::Unreachable => {
            Probed::Facts(Box::new(MemberFacts::unreachable()))
        }
        Ok(Err(e)) => Probed::Failed(e.kind, e.to_string()),
        Err(_) => Probed::Facts(Box::new(MemberFacts::unreachable())),
    }
}
