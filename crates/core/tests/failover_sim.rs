//! A deterministic simulation of failover: a seeded model of N PostgreSQL-like members (writes
//! advancing positions, replication, crashes and restarts within and after the delay, pods
//! that stay Ready while the operator cannot reach their server and the reverse, slow and
//! stale probes, operator restarts that keep only the status, steps lost mid-pass) driving
//! `failover::advance` pass after pass, with the model carrying out its intents.
//!
//! Checked on every pass of every seed:
//! 1. never two members that the model considers writable at once;
//! 2. a promotion never picks a candidate behind another member the operator saw reachable
//!    (by the model's true positions and timelines: the other has all its WAL and more);
//! 3. a failover leaves `Detecting` only on both signals (pod not Ready or gone AND a fresh
//!    failed probe), after the delay, and with a majority reachable;
//! 4. after the faults stop (every member back, probes reliable), exactly one writable primary,
//!    the one status names, every other member following it, no operation in flight.
//!
//! Half the seeds run with `nodeLoss: SelfFence`: each member has an agent that renews the
//! primary Lease while its pod holds it and fences its own server (if primary) after half the
//! lease without a renewal, or when the Lease moved away after it held it; the runtime's Lease
//! reads (which may fail) give the core its [`LeaseSighting`], forgotten on an operator
//! restart. Every seed also loses whole nodes: the kubelet is gone (a Terminating pod stays,
//! readiness freezes as it was until the node controller's 40 s), the operator cannot reach
//! the server, the agent cannot reach the API server, and the server is either powered off or
//! keeps running and taking writes (a partition), which is what rule 1 then guards; and cuts
//! the agent alone off the API server. Rule 3 then reads: pod not Ready or the lease fenced.
//!
//! `FAILOVER_SIM_SEEDS` sets the number of seeds (default 1500); `FAILOVER_SIM_SEED` runs one.
//!
//! Assumptions of the model, as of Kubernetes: a pod object disappears only after its
//! containers stopped (no force deletion; a lost node's pods stay Terminating until it is
//! back), and a recreated pod starts as the primary only if it carries the primary label (the
//! init scripts' rule). One clock for every process; an agent stops only with its node (the
//! residual risks of `docs/decisions/2026-12-04-self-fencing-on-node-loss.md` are not
//! modelled).

use std::collections::BTreeMap;
use std::time::Duration;

use database_operator_api::Engine;
use database_operator_api::NodeLossPolicy;
use database_operator_api::failover::{FailoverKind, FailoverPhase, FailoverSpec, FailoverStatus};
use database_operator_core::failover::{self, Inputs, Outcome};
use database_operator_core::members::Member;
use database_operator_core::position::{
    Lsn, PgPosition, Position, TimelineHistory, TimelineId, TimelineSwitch,
};
use database_operator_core::{DatabaseCommand, LeaseSighting, MemberFacts, ServerRole};
use k8s_openapi::jiff::Timestamp;

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(1000) < percent * 10
    }
    fn chance_permille(&mut self, permille: u64) -> bool {
        self.below(1000) < permille
    }
}

#[derive(Clone, Debug)]
struct Node {
    name: String,
    /// The server process runs.
    up: bool,
    /// The pod object exists.
    pod: bool,
    /// Ticks left of a Terminating pod's grace period (the process still runs).
    terminating: Option<u32>,
    /// Ticks until a removed pod is recreated.
    absent: u32,
    /// The tick the pod object was (re)created.
    created: u64,
    /// Ticks until a (re)started server answers.
    starting: u32,
    /// A crashed process restarts at this tick (same pod).
    crashed_until: Option<u64>,
    role: ServerRole,
    read_only: bool,
    source: Option<usize>,
    lsn: u64,
    /// The timeline its WAL is on (a promotion starts a new one at its LSN).
    timeline: u32,
    /// The pod's role label: primary or not.
    label_primary: bool,
    /// The operator cannot reach the server (the pod may stay Ready).
    cut_until: u64,
    /// The readiness probe fails while the server runs.
    unready_until: u64,
    /// Probes of this member are slow: its facts are not refreshed.
    slow_until: u64,
    /// The whole node is lost until then (no kubelet, no network to the operator or the API
    /// server); `lost_since` when it started.
    lost_until: u64,
    lost_since: u64,
    /// The agent alone cannot reach the API server.
    api_cut_until: u64,
    /// The agent's last renewal (`nodeLoss: SelfFence`).
    agent_renewed: Option<u64>,
    /// The agent owes its server a fence: the Lease moved away after it held it.
    agent_owes_fence: bool,
}

impl Node {
    fn running(&self) -> bool {
        self.up && self.starting == 0
    }
    fn writable(&self) -> bool {
        self.running() && self.role == ServerRole::Primary && !self.read_only
    }
    fn lost(&self, tick: u64) -> bool {
        tick < self.lost_until
    }
    fn ready(&self, tick: u64) -> bool {
        if self.lost(tick) {
            // Nobody updates the pod: Ready as before, until the node controller's grace.
            return self.pod
                && self.terminating.is_none()
                && tick < self.lost_since + 40
                && self.lost_since >= self.unready_until;
        }
        self.pod && self.terminating.is_none() && self.running() && tick >= self.unready_until
    }
    fn reachable(&self, tick: u64) -> bool {
        self.pod && self.running() && tick >= self.cut_until && !self.lost(tick)
    }
    /// The agent fences: its server refuses writes, if it runs as a primary.
    fn fence(&mut self) -> bool {
        if self.running() && self.role == ServerRole::Primary {
            self.read_only = true;
            true
        } else {
            self.running()
        }
    }
}

struct Sim {
    rng: Rng,
    tick: u64,
    nodes: Vec<Node>,
    facts: BTreeMap<String, MemberFacts>,
    /// What survives an operator restart: the status.
    status: Option<FailoverStatus>,
    primary: String,
    blocked: Option<&'static str>,
    delay: i32,
    /// The prober's runs of failed probes: member -> tick of the first failure of the run.
    down_run: BTreeMap<String, u64>,
    heal_at: u64,
    promotions: u32,
    /// `nodeLoss: SelfFence` and its lease (seconds = ticks).
    self_fence: bool,
    lease_seconds: u64,
    /// The Lease as stored: holder, last renewal.
    lease_holder: Option<String>,
    lease_renewed: Option<u64>,
    /// The runtime's last sighting of it.
    sighting: Option<LeaseSighting>,
    /// The history of each timeline, by id (index 0 unused, 1 is empty).
    histories: Vec<TimelineHistory>,
}

const BASE: i64 = 1_800_000_000;

fn at(tick: u64) -> Timestamp {
    Timestamp::from_second(BASE + i64::try_from(tick).unwrap()).unwrap()
}

fn name(i: usize) -> String {
    format!("db-{i}")
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng(seed);
        let n = 2 + rng.below(4) as usize; // 2..=5 members
        let nodes = (0..n)
            .map(|i| Node {
                name: name(i),
                up: true,
                pod: true,
                terminating: None,
                absent: 0,
                created: 0,
                starting: 0,
                crashed_until: None,
                role: if i == 0 {
                    ServerRole::Primary
                } else {
                    ServerRole::Replica
                },
                read_only: i != 0,
                source: (i != 0).then_some(0),
                lsn: 100,
                timeline: 1,
                label_primary: i == 0,
                cut_until: 0,
                unready_until: 0,
                slow_until: 0,
                lost_until: 0,
                lost_since: 0,
                api_cut_until: 0,
                agent_renewed: (i == 0).then_some(0),
                agent_owes_fence: false,
            })
            .collect();
        let delay = 1 + rng.below(5) as i32;
        let self_fence = seed % 2 == 1;
        let lease_seconds = 4 + rng.below(5);
        Sim {
            rng,
            tick: 0,
            nodes,
            facts: BTreeMap::new(),
            status: None,
            primary: name(0),
            blocked: None,
            delay,
            down_run: BTreeMap::new(),
            heal_at: 250,
            promotions: 0,
            self_fence,
            lease_seconds,
            lease_holder: self_fence.then(|| name(0)),
            lease_renewed: self_fence.then_some(0),
            sighting: None,
            histories: vec![TimelineHistory::default(), TimelineHistory::default()],
        }
    }

    /// Whether WAL up to `lsn` on `timeline` is a prefix of the WAL of `source` (so a server
    /// with it can stream from `source` without a rewind).
    fn on_history(&self, timeline: u32, lsn: u64, source: &Node) -> bool {
        lsn <= source.lsn && lsn <= self.common_end(timeline, source.timeline)
    }

    /// The WAL of `timeline` as segments: each ancestor up to its switch point, then the
    /// timeline itself without end.
    fn segments(&self, timeline: u32) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = self.histories[timeline as usize]
            .switches
            .iter()
            .map(|s| (s.parent.0, s.switch_lsn.0))
            .collect();
        out.push((timeline, u64::MAX));
        out
    }

    /// Up to which LSN the WAL of timelines `a` and `b` is the same.
    fn common_end(&self, a: u32, b: u32) -> u64 {
        let (sa, sb) = (self.segments(a), self.segments(b));
        let mut end = 0;
        for (x, y) in sa.iter().zip(&sb) {
            if x.0 != y.0 {
                return end;
            }
            if x.1 != y.1 {
                return x.1.min(y.1);
            }
            end = x.1;
        }
        end
    }

    fn healing(&self) -> bool {
        self.tick >= self.heal_at
    }

    /// Faults: crashes, pod deletions, cuts, readiness failures, slow probes.
    fn faults(&mut self) {
        if self.healing() {
            return;
        }
        let n = self.nodes.len();
        let i = self.rng.below(n as u64) as usize;
        let t = self.tick;
        match self.rng.below(400) {
            // A crash, restarting within or after the delay.
            0..=5 => {
                let back = t + 1 + self.rng.below(u64::try_from(self.delay).unwrap() * 4 + 10);
                let node = &mut self.nodes[i];
                if node.up {
                    node.up = false;
                    node.crashed_until = Some(back);
                }
            }
            // The operator cannot reach the server; the pod stays Ready.
            6..=9 => self.nodes[i].cut_until = t + 1 + self.rng.below(40),
            // The pod is not Ready while its server answers.
            10..=12 => self.nodes[i].unready_until = t + 1 + self.rng.below(40),
            // Both signals fail while the server still runs (a readiness failure plus a cut).
            13..=14 => {
                let until = t + 1 + self.rng.below(40);
                self.nodes[i].cut_until = until;
                self.nodes[i].unready_until = until;
            }
            // Slow probes: the facts of this member go stale.
            15..=19 => self.nodes[i].slow_until = t + 1 + self.rng.below(50),
            // The whole node is lost: powered off, or cut off while its server runs.
            21..=23 => {
                let until = t + 5 + self.rng.below(60);
                let off = self.rng.chance(50);
                let node = &mut self.nodes[i];
                if !node.lost(t) {
                    node.lost_since = t;
                    node.lost_until = until;
                    if off {
                        node.up = false;
                        node.crashed_until = None;
                    }
                }
            }
            // The agent alone is cut off the API server.
            24..=25 => self.nodes[i].api_cut_until = t + 1 + self.rng.below(30),
            // Someone deletes the pod.
            20 => {
                let grace = self.rng.below(3) as u32;
                let node = &mut self.nodes[i];
                if node.pod && node.terminating.is_none() {
                    node.terminating = Some(grace);
                }
            }
            _ => {}
        }
    }

    /// Processes, pods, writes and replication move on by one tick.
    fn evolve(&mut self) {
        let t = self.tick;
        let heal = self.healing();
        for i in 0..self.nodes.len() {
            let label_primary_pod = self.nodes.iter().position(|n| n.label_primary && n.pod);
            let start_delay = 1 + self.rng.below(3) as u32;
            let recreate = self.rng.below(3) as u32;
            let node = &mut self.nodes[i];
            if heal {
                node.cut_until = node.cut_until.min(t);
                node.unready_until = node.unready_until.min(t);
                node.slow_until = node.slow_until.min(t);
                node.api_cut_until = node.api_cut_until.min(t);
                node.lost_until = node.lost_until.min(t);
                if node.crashed_until.is_some() {
                    node.crashed_until = Some(t);
                }
            }
            if node.lost(t) {
                // No kubelet: nothing starts, stops or is removed.
                continue;
            }
            if node.lost_until == t && t > 0 && node.pod && !node.up && node.terminating.is_none() {
                // Back from a power cut: the kubelet starts the pod's containers again, its
                // agent with the role label it has now.
                node.crashed_until = Some(t);
                node.agent_renewed = node.label_primary.then_some(t);
                node.agent_owes_fence = false;
            }
            if let Some(left) = node.terminating {
                if left == 0 {
                    // Removed: the containers stopped first.
                    node.terminating = None;
                    node.pod = false;
                    node.up = false;
                    node.crashed_until = None;
                    node.absent = recreate;
                    node.label_primary = false;
                } else {
                    node.terminating = Some(left - 1);
                }
                continue;
            }
            if !node.pod {
                if node.absent == 0 {
                    node.pod = true;
                    node.created = t;
                    node.agent_renewed = None;
                    node.agent_owes_fence = false;
                    start(node, start_delay);
                } else {
                    node.absent -= 1;
                }
                continue;
            }
            if node.crashed_until.is_some_and(|b| b <= t) {
                node.crashed_until = None;
                start(node, start_delay);
                continue;
            }
            if node.up && node.starting > 0 {
                node.starting -= 1;
                if node.starting == 0 {
                    decide_role(node, label_primary_pod);
                }
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].writable() {
                let step = self.rng.below(4);
                self.nodes[i].lsn += step;
            }
        }
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            let Some(s) = node.source else { continue };
            if !node.running() || node.role != ServerRole::Replica || s == i {
                continue;
            }
            let source = &self.nodes[s];
            // A lost node neither sends nor receives; a standby past the fork of its source's
            // timeline is refused.
            if source.running()
                && !source.lost(t)
                && !node.lost(t)
                && self.on_history(node.timeline, node.lsn, source)
            {
                let catch_up = self.rng.below(6);
                let (target, timeline) = (source.lsn, source.timeline);
                let node = &mut self.nodes[i];
                node.lsn = target.min(node.lsn + catch_up);
                node.timeline = timeline;
            }
        }
    }

    /// The prober: fresh facts for each member, unless its probes are slow.
    fn probe(&mut self) {
        let t = self.tick;
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            if t < node.slow_until || (!self.healing() && self.rng.chance(10)) {
                continue;
            }
            let facts = if node.reachable(t) {
                self.down_run.remove(&node.name);
                MemberFacts {
                    reachable: true,
                    role: Some(node.role),
                    read_only: Some(node.read_only),
                    position: Some(Position::Postgresql(PgPosition {
                        history: Some(self.histories[node.timeline as usize].clone()),
                        ..PgPosition::new(node.timeline, Lsn(node.lsn))
                    })),
                    source: node.source.map(name),
                    replicating: (node.role == ServerRole::Replica).then_some(true),
                    down_since: None,
                    ..MemberFacts::unreachable(at(t))
                }
            } else {
                // The runtime's cache: a failed probe continues the run of failed probes of
                // the same pod incarnation before it.
                let run = match self.down_run.get(&node.name) {
                    Some(&since) if since >= node.created => since,
                    _ => t,
                };
                self.down_run.insert(node.name.clone(), run);
                MemberFacts {
                    down_since: Some(at(run)),
                    ..MemberFacts::unreachable(at(t))
                }
            };
            self.facts.insert(node.name.clone(), facts);
        }
    }

    /// The member agents (`nodeLoss: SelfFence`), each every quarter of the lease: a fence
    /// first when the last renewal is half a lease old, then read the Lease; renew it when it
    /// names this pod, fence when it moved away after this one held it.
    fn agents(&mut self) {
        if !self.self_fence {
            return;
        }
        let t = self.tick;
        let d = self.lease_seconds;
        let every = (d / 4).max(1);
        for i in 0..self.nodes.len() {
            let holder = self.lease_holder.clone();
            let node = &mut self.nodes[i];
            // On a lost node the agent runs as long as its server does (a partition), cut off
            // from the API server.
            if !node.pod || (node.lost(t) && !node.up) || !(t + i as u64).is_multiple_of(every) {
                continue;
            }
            if node.agent_renewed.is_some_and(|r| t - r >= d / 2) {
                node.fence();
            }
            if t < node.api_cut_until || node.lost(t) {
                continue;
            }
            if holder.as_deref() == Some(node.name.as_str()) {
                node.agent_renewed = Some(t);
                node.agent_owes_fence = false;
                self.lease_renewed = Some(t);
            } else {
                if node.agent_renewed.take().is_some() {
                    node.agent_owes_fence = true;
                }
                if node.agent_owes_fence && node.fence() {
                    node.agent_owes_fence = false;
                }
            }
        }
    }

    /// The prober's GET of the Lease (it may fail), as the runtime's LeaseCache records it.
    fn read_lease(&mut self) {
        if !self.self_fence || (!self.healing() && self.rng.chance(10)) {
            return;
        }
        let t = at(self.tick);
        let holder = self.lease_holder.clone();
        let renew = self.lease_renewed.map(at);
        let duration = Duration::from_secs(self.lease_seconds);
        self.sighting = Some(match self.sighting.take() {
            Some(s) if s.holder == holder && s.renew_time == renew => {
                LeaseSighting { checked_at: t, ..s }
            }
            before => LeaseSighting {
                observed_renewal: before.is_some_and(|b| b.holder == holder) && renew.is_some(),
                holder,
                renew_time: renew,
                renewal_seen_at: t,
                checked_at: t,
                duration,
            },
        });
    }

    fn members(&self) -> Vec<Member<'_>> {
        let t = self.tick;
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.pod)
            .map(|(i, n)| Member {
                name: &n.name,
                ordinal: i32::try_from(i).unwrap(),
                ready: n.ready(t),
                terminating: n.terminating.is_some(),
                role: Some(if n.label_primary {
                    "primary"
                } else {
                    "replica"
                }),
                version: None,
                template: None,
                created: Some(at(n.created)),
                node: None,
                deletion: None,
                initialize: false,
                reseed: None,
                server_exit: None,
            })
            .collect()
    }

    fn pass(&mut self) -> Outcome {
        let members = self.members();
        let spec = FailoverSpec {
            delay_seconds: self.delay,
            node_loss: if self.self_fence {
                NodeLossPolicy::SelfFence
            } else {
                NodeLossPolicy::Wait
            },
            lease_seconds: i32::try_from(self.lease_seconds).unwrap(),
            ..FailoverSpec::default()
        };
        failover::advance(&Inputs {
            cluster: "sim/db",
            engine: Engine::Postgresql,
            spec,
            replicas: i32::try_from(self.nodes.len()).unwrap(),
            members: &members,
            facts: &self.facts,
            primary: &self.primary,
            previous: self.status.as_ref(),
            blocked_before: self.blocked,
            switchover: None,
            upgrade_switchover: None,
            planned_for: "",
            reseed_request: None,
            lease: self.sighting.as_ref(),
            has_run: true,
            now: at(self.tick),
        })
    }

    /// The last LSN members `a` and `b` have in common (by timelines and switch points).
    fn fork(&self, a: usize, b: usize) -> u64 {
        let (na, nb) = (&self.nodes[a], &self.nodes[b]);
        self.common_end(na.timeline, nb.timeline)
            .min(na.lsn)
            .min(nb.lsn)
    }

    fn index(&self, pod: &str) -> usize {
        self.nodes.iter().position(|n| n.name == pod).unwrap()
    }

    /// The operator's view: its pod exists and a fresh probe answered.
    fn fresh_reachable(&self, pod: &str) -> bool {
        self.nodes[self.index(pod)].pod
            && self.facts.get(pod).is_some_and(|f| {
                f.reachable
                    && Duration::try_from(at(self.tick).duration_since(f.probed_at))
                        .unwrap_or_default()
                        <= MemberFacts::STALE_AFTER
            })
    }

    fn fresh_unreachable(&self, pod: &str) -> bool {
        self.facts.get(pod).is_some_and(|f| {
            !f.reachable
                && Duration::try_from(at(self.tick).duration_since(f.probed_at)).unwrap_or_default()
                    <= MemberFacts::STALE_AFTER
        })
    }

    /// One line per pass (`FAILOVER_SIM_TRACE=1`).
    fn trace(&self, out: &Outcome) {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                let f = self.facts.get(&n.name).map_or("-".to_owned(), |f| {
                    format!(
                        "{}@{}",
                        f.position
                            .as_ref()
                            .map_or("?".to_owned(), ToString::to_string),
                        f.probed_at.as_second() - BASE
                    )
                });
                format!(
                    "{}[{}{}{} lsn={} f={f}]",
                    n.name,
                    if n.writable() { "W" } else { "r" },
                    if n.ready(self.tick) { "R" } else { "-" },
                    if n.reachable(self.tick) { "P" } else { "-" },
                    n.lsn
                )
            })
            .collect();
        let op = out
            .status
            .as_ref()
            .and_then(|s| s.operation.as_ref())
            .map(|o| format!("{:?} {}->{:?}", o.phase, o.from, o.to));
        let histories: Vec<String> = self
            .histories
            .iter()
            .skip(2)
            .map(|h| {
                h.switches
                    .iter()
                    .map(|s| format!("{}@{}", s.parent.0, s.switch_lsn.0))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        eprintln!(
            "t={} {} op={op:?} steps={:?} histories={histories:?}",
            self.tick,
            nodes.join(" "),
            out.commands
        );
    }

    /// Rules 2 and 3, on the decision before it is carried out; whether it started fencing a
    /// primary whose pod was still Ready, on its expired lease alone.
    fn check_decision(&self, seed: u64, out: &Outcome) -> bool {
        let n = self.nodes.len();
        let reachable = (0..n)
            .filter(|&i| self.fresh_reachable(&self.nodes[i].name))
            .count();
        for step in &out.commands {
            if let DatabaseCommand::Promote { pod } = step {
                let to = self.index(pod);
                let chosen = &self.nodes[to];
                for (i, other) in self.nodes.iter().enumerate() {
                    if i != to && self.fresh_reachable(&other.name) {
                        // Behind means: everything it has, `other` has too, and more (a
                        // member on a diverged timeline is not ahead of it).
                        let extends = other.lsn > chosen.lsn
                            && self.on_history(chosen.timeline, chosen.lsn, other);
                        assert!(
                            !extends,
                            "seed {seed} tick {}: promoted {pod} at {} behind reachable {} at {}",
                            self.tick, self.nodes[to].lsn, other.name, other.lsn
                        );
                    }
                }
                assert!(
                    (n - reachable) * 2 <= n,
                    "seed {seed} tick {}: promoted {pod} with {}/{n} members unreachable",
                    self.tick,
                    n - reachable
                );
            }
        }
        let before = self.status.as_ref().and_then(|s| s.operation.as_ref());
        let after = out.status.as_ref().and_then(|s| s.operation.as_ref());
        // Into Fencing from Idle (the delay already ran out when the pod went not Ready) or
        // from Detecting.
        if let Some(a) = after
            && before.is_none_or(|b| b.phase == FailoverPhase::Detecting)
            && a.phase == FailoverPhase::Fencing
            && a.kind == FailoverKind::Failover
        {
            let from = self.index(&a.from);
            let node = &self.nodes[from];
            let down_since = self.down_run.get(&a.from).map(|&r| at(r));
            let lease_fenced = self.self_fence
                && self
                    .sighting
                    .as_ref()
                    .is_some_and(|l| l.fenced(&a.from, down_since));
            assert!(
                (!(node.pod && node.ready(self.tick)) || lease_fenced)
                    && self.fresh_unreachable(&a.from),
                "seed {seed} tick {}: failover of {} acted on one signal",
                self.tick,
                a.from
            );
            // The delay counts from the first failed probe of the current run: every probe of
            // the server since then failed.
            let run = self.down_run.get(&a.from).copied().unwrap_or(self.tick);
            assert!(
                self.tick - run >= u64::try_from(self.delay).unwrap(),
                "seed {seed} tick {}: failover acted {}s into a run of failed probes < delay {}s",
                self.tick,
                self.tick - run,
                self.delay
            );
            let on_lease = node.pod && node.ready(self.tick);
            assert!(
                (n - reachable) * 2 <= n,
                "seed {seed} tick {}: failover acted with {}/{n} members unreachable",
                self.tick,
                n - reachable
            );
            return on_lease;
        }
        false
    }

    /// Carries out a pass's outcome; an operator crash loses the steps or the whole pass.
    fn apply(&mut self, out: Outcome) {
        // An operator restart in the middle of a pass. The runtime writes status before it
        // carries out database steps (write-ahead), so a crash loses the steps of a written
        // status, or the whole pass.
        if !self.healing() && self.rng.chance(3) {
            return;
        }
        let lose_steps = !self.healing() && self.rng.chance(5);
        self.status = out.status.clone();
        self.primary = out.primary.clone();
        self.blocked = out.blocked.as_ref().map(|b| b.reason);
        if lose_steps {
            return;
        }
        let t = self.tick;
        for step in &out.commands {
            match step {
                DatabaseCommand::Fence { pod } => {
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.reachable(t) {
                        node.read_only = true;
                    }
                }
                DatabaseCommand::Unfence { pod } => {
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.reachable(t) && node.role == ServerRole::Primary {
                        node.read_only = false;
                    }
                }
                // The simulation never asks for a switchover: a switchover's stop is a stop.
                DatabaseCommand::StopPod { pod } | DatabaseCommand::StopServer { pod } => {
                    let grace = self.rng.below(3) as u32;
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.pod && node.terminating.is_none() {
                        node.terminating = Some(grace);
                    }
                }
                DatabaseCommand::Promote { pod } => {
                    let i = self.index(pod);
                    let next = u32::try_from(self.histories.len()).unwrap();
                    let node = &mut self.nodes[i];
                    if node.reachable(t) {
                        if node.role != ServerRole::Primary {
                            // A standby's promotion starts a new timeline at its LSN, from
                            // the timeline that LSN is on (one below the switch to its
                            // reported timeline is still on an ancestor).
                            let mut history = self.histories[node.timeline as usize].clone();
                            let mut parent = node.timeline;
                            if let Some(k) = history
                                .switches
                                .iter()
                                .position(|sw| node.lsn <= sw.switch_lsn.0)
                            {
                                parent = history.switches[k].parent.0;
                                history.switches.truncate(k);
                            }
                            history.switches.push(TimelineSwitch {
                                parent: TimelineId(parent),
                                switch_lsn: Lsn(node.lsn),
                            });
                            self.histories.push(history);
                            node.timeline = next;
                            // The promotion writes its own record on the new timeline.
                            node.lsn += 1;
                        }
                        if node.role != ServerRole::Primary || node.read_only {
                            self.promotions += 1;
                        }
                        node.role = ServerRole::Primary;
                        node.read_only = false;
                        node.source = None;
                    }
                }
                DatabaseCommand::Follow {
                    pod,
                    source,
                    rewind,
                } => {
                    let i = self.index(pod);
                    let s = self.index(source);
                    let (source_lsn, source_timeline) = (self.nodes[s].lsn, self.nodes[s].timeline);
                    let fits =
                        self.on_history(self.nodes[i].timeline, self.nodes[i].lsn, &self.nodes[s]);
                    let fork = self.fork(i, s);
                    let node = &mut self.nodes[i];
                    if node.reachable(t) && (fits || *rewind) {
                        if !fits {
                            // pg_rewind: back to where the histories part, then the source's.
                            node.lsn = fork.min(source_lsn);
                            node.timeline = source_timeline;
                        }
                        node.role = ServerRole::Replica;
                        node.read_only = true;
                        node.source = Some(s);
                    }
                }
                DatabaseCommand::Quarantine { pod } => panic!("quarantine of {pod} in PostgreSQL"),
                DatabaseCommand::SetPassword { .. }
                | DatabaseCommand::DiscardOldPassword { .. }
                | DatabaseCommand::SetSemiSync { .. }
                | DatabaseCommand::KeepMemberSlots { .. }
                | DatabaseCommand::ReloadTls { .. }
                | DatabaseCommand::SecureReplication { .. } => {
                    panic!("failover planned a step that is not its own: {step:?}")
                }
            }
        }
        for node in &mut self.nodes {
            if node.pod {
                node.label_primary = out.label_primary.as_deref() == Some(node.name.as_str());
            }
        }
        // The plan's Lease: held by the pod the primary label is on, else as it was.
        if self.self_fence
            && let Some(primary) = &out.label_primary
            && self.lease_holder.as_ref() != Some(primary)
        {
            self.lease_holder = Some(primary.clone());
        }
    }

    /// Rule 1.
    fn check_state(&self, seed: u64) {
        let writable: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.writable())
            .map(|n| n.name.as_str())
            .collect();
        assert!(
            writable.len() <= 1,
            "seed {seed} tick {}: two writable primaries {writable:?}\n{:#?}\n{:#?}",
            self.tick,
            self.nodes,
            self.status
        );
    }

    /// Rule 4.
    fn check_converged(&self, seed: u64) {
        let writable: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.writable())
            .map(|n| n.name.as_str())
            .collect();
        let context = || format!("{:#?}\n{:#?}", self.nodes, self.status);
        assert_eq!(
            writable,
            [self.primary.as_str()],
            "seed {seed}: not converged to one primary\n{}",
            context()
        );
        let p = self.index(&self.primary);
        for (i, node) in self.nodes.iter().enumerate() {
            if i != p {
                assert!(
                    node.role == ServerRole::Replica && node.source == Some(p),
                    "seed {seed}: {} does not follow the primary {}\n{}",
                    node.name,
                    self.primary,
                    context()
                );
            }
        }
        assert!(
            self.status.as_ref().is_none_or(|s| s.operation.is_none()),
            "seed {seed}: an operation is still in flight\n{}",
            context()
        );
    }
}

fn start(node: &mut Node, delay: u32) {
    node.up = true;
    node.starting = delay;
    node.role = ServerRole::Replica;
    node.read_only = true;
    node.source = None;
}

/// The init scripts' rule, once the server has waited for its role label: only a pod labelled
/// primary starts writable; the others follow the pod labelled primary.
fn decide_role(node: &mut Node, label_primary_pod: Option<usize>) {
    if node.label_primary {
        node.role = ServerRole::Primary;
        node.read_only = false;
        node.source = None;
    } else {
        node.role = ServerRole::Replica;
        node.read_only = true;
        node.source = label_primary_pod;
    }
}

/// One seed: its promotions, and its failovers of a primary whose pod was Ready (started on the
/// expired lease alone).
fn run(seed: u64) -> (u32, u32) {
    let mut sim = Sim::new(seed);
    let mut on_lease = 0;
    let end = sim.heal_at + 150;
    while sim.tick < end {
        sim.faults();
        sim.evolve();
        sim.agents();
        sim.probe();
        sim.read_lease();
        // The operator is sometimes down for a few passes (a restart forgets the Lease).
        if !sim.healing() && sim.rng.chance_permille(20) {
            sim.sighting = None;
        } else {
            let out = sim.pass();
            if std::env::var("FAILOVER_SIM_TRACE").is_ok() {
                sim.trace(&out);
            }
            if sim.check_decision(seed, &out) {
                on_lease += 1;
            }
            sim.apply(out);
        }
        sim.check_state(seed);
        sim.tick += 1;
    }
    sim.check_converged(seed);
    (sim.promotions, on_lease)
}

#[test]
fn failover_simulation() {
    let seeds: Vec<u64> = match std::env::var("FAILOVER_SIM_SEED") {
        Ok(one) => vec![one.parse().expect("FAILOVER_SIM_SEED is a number")],
        Err(_) => {
            let n = std::env::var("FAILOVER_SIM_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1500u64);
            (0..n).collect()
        }
    };
    let (mut promotions, mut on_lease) = (0, 0);
    for &seed in &seeds {
        let (p, l) = run(seed);
        promotions += p;
        on_lease += l;
    }
    // Lost nodes with self-fencing must fail over on the lease, with the pod still Ready.
    assert!(
        seeds.len() < 100 || on_lease as usize > seeds.len() / 20,
        "only {on_lease} failovers on an expired lease over {} seeds",
        seeds.len()
    );
    // The faults must actually exercise failover, not only steady passes.
    assert!(
        seeds.len() < 100 || promotions as usize > seeds.len() / 4,
        "only {promotions} promotions over {} seeds: the faults do not exercise failover",
        seeds.len()
    );
}
