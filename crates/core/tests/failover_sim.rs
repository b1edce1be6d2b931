//! A deterministic simulation of failover: a seeded model of N PostgreSQL-like members (writes
//! advancing positions, replication, crashes and restarts within and after the delay, pods
//! that stay Ready while the operator cannot reach their server and the reverse, slow and
//! stale probes, operator restarts that keep only the status, steps lost mid-pass) driving
//! `failover::step` pass after pass, with the model carrying out its intents.
//!
//! Checked on every pass of every seed:
//! 1. never two members that the model considers writable at once;
//! 2. a promotion never picks a candidate behind another member the operator saw reachable
//!    (by the model's true positions);
//! 3. a failover leaves `Detecting` only on both signals (pod not Ready or gone AND a fresh
//!    failed probe), after the delay, and with a majority reachable;
//! 4. after the faults stop (every member back, probes reliable), exactly one writable primary,
//!    the one status names, every other member following it, no operation in flight.
//!
//! `FAILOVER_SIM_SEEDS` sets the number of seeds (default 1500); `FAILOVER_SIM_SEED` runs one.
//!
//! Assumption of the model, as of Kubernetes: a pod object disappears only after its containers
//! stopped (no force deletion, no lost node), and a recreated pod starts as the primary only if
//! it carries the primary label (the init scripts' rule).

use std::collections::BTreeMap;
use std::time::Duration;

use database_operator_api::Engine;
use database_operator_api::failover::{FailoverKind, FailoverPhase, FailoverSpec, FailoverStatus};
use database_operator_core::failover::{self, Inputs, Outcome};
use database_operator_core::members::Member;
use database_operator_core::position::{Lsn, PgPosition, Position};
use database_operator_core::{DatabaseStep, MemberFacts, ServerRole};
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
    /// The pod's role label: primary or not.
    label_primary: bool,
    /// The operator cannot reach the server (the pod may stay Ready).
    cut_until: u64,
    /// The readiness probe fails while the server runs.
    unready_until: u64,
    /// Probes of this member are slow: its facts are not refreshed.
    slow_until: u64,
}

impl Node {
    fn running(&self) -> bool {
        self.up && self.starting == 0
    }
    fn writable(&self) -> bool {
        self.running() && self.role == ServerRole::Primary && !self.read_only
    }
    fn ready(&self, tick: u64) -> bool {
        self.pod && self.terminating.is_none() && self.running() && tick >= self.unready_until
    }
    fn reachable(&self, tick: u64) -> bool {
        self.pod && self.running() && tick >= self.cut_until
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
                label_primary: i == 0,
                cut_until: 0,
                unready_until: 0,
                slow_until: 0,
            })
            .collect();
        let delay = 1 + rng.below(5) as i32;
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
        }
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
                if node.crashed_until.is_some() {
                    node.crashed_until = Some(t);
                }
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
            if source.running() && node.lsn <= source.lsn {
                let catch_up = self.rng.below(6);
                let target = source.lsn;
                let node = &mut self.nodes[i];
                node.lsn = target.min(node.lsn + catch_up);
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
                    position: Some(Position::Postgresql(PgPosition::new(1, Lsn(node.lsn)))),
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
                created: Some(at(n.created)),
                node: None,
                deletion: None,
            })
            .collect()
    }

    fn pass(&mut self) -> Outcome {
        let members = self.members();
        let spec = FailoverSpec {
            delay_seconds: self.delay,
            ..FailoverSpec::default()
        };
        failover::step(&Inputs {
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
            lease: None,
            has_run: true,
            now: at(self.tick),
        })
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
        eprintln!(
            "t={} {} op={op:?} steps={:?}",
            self.tick,
            nodes.join(" "),
            out.steps
        );
    }

    /// Rules 2 and 3, on the decision before it is carried out.
    fn check_decision(&self, seed: u64, out: &Outcome) {
        let n = self.nodes.len();
        let reachable = (0..n)
            .filter(|&i| self.fresh_reachable(&self.nodes[i].name))
            .count();
        for step in &out.steps {
            if let DatabaseStep::Promote { pod } = step {
                let to = self.index(pod);
                for (i, other) in self.nodes.iter().enumerate() {
                    if i != to && self.fresh_reachable(&other.name) {
                        assert!(
                            other.lsn <= self.nodes[to].lsn,
                            "seed {seed} tick {}: promoted {pod} at {} behind reachable {} at {}",
                            self.tick,
                            self.nodes[to].lsn,
                            other.name,
                            other.lsn
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
            assert!(
                !(node.pod && node.ready(self.tick)) && self.fresh_unreachable(&a.from),
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
            assert!(
                (n - reachable) * 2 <= n,
                "seed {seed} tick {}: failover acted with {}/{n} members unreachable",
                self.tick,
                n - reachable
            );
        }
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
        for step in &out.steps {
            match step {
                DatabaseStep::Fence { pod } => {
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.reachable(t) {
                        node.read_only = true;
                    }
                }
                DatabaseStep::Unfence { pod } => {
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.reachable(t) && node.role == ServerRole::Primary {
                        node.read_only = false;
                    }
                }
                DatabaseStep::StopPod { pod } => {
                    let grace = self.rng.below(3) as u32;
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.pod && node.terminating.is_none() {
                        node.terminating = Some(grace);
                    }
                }
                DatabaseStep::Promote { pod } => {
                    let i = self.index(pod);
                    let node = &mut self.nodes[i];
                    if node.reachable(t) {
                        if node.role != ServerRole::Primary || node.read_only {
                            self.promotions += 1;
                        }
                        node.role = ServerRole::Primary;
                        node.read_only = false;
                        node.source = None;
                    }
                }
                DatabaseStep::Follow {
                    pod,
                    source,
                    rewind,
                } => {
                    let i = self.index(pod);
                    let s = self.index(source);
                    let source_lsn = self.nodes[s].lsn;
                    let node = &mut self.nodes[i];
                    if node.reachable(t) && (node.lsn <= source_lsn || *rewind) {
                        node.lsn = node.lsn.min(source_lsn);
                        node.role = ServerRole::Replica;
                        node.read_only = true;
                        node.source = Some(s);
                    }
                }
                DatabaseStep::Quarantine { pod } => panic!("quarantine of {pod} in PostgreSQL"),
                DatabaseStep::SetPassword { .. }
                | DatabaseStep::DiscardOldPassword { .. }
                | DatabaseStep::SetSemiSync { .. } => {
                    panic!("failover planned a step that is not its own: {step:?}")
                }
            }
        }
        for node in &mut self.nodes {
            if node.pod {
                node.label_primary = out.label_primary.as_deref() == Some(node.name.as_str());
            }
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

fn run(seed: u64) -> u32 {
    let mut sim = Sim::new(seed);
    let end = sim.heal_at + 150;
    while sim.tick < end {
        sim.faults();
        sim.evolve();
        sim.probe();
        // The operator is sometimes down for a few passes.
        if sim.healing() || !sim.rng.chance_permille(20) {
            let out = sim.pass();
            if std::env::var("FAILOVER_SIM_TRACE").is_ok() {
                sim.trace(&out);
            }
            sim.check_decision(seed, &out);
            sim.apply(out);
        }
        sim.check_state(seed);
        sim.tick += 1;
    }
    sim.check_converged(seed);
    sim.promotions
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
    let mut promotions = 0;
    for &seed in &seeds {
        promotions += run(seed);
    }
    // The faults must actually exercise failover, not only steady passes.
    assert!(
        seeds.len() < 100 || promotions as usize > seeds.len() / 4,
        "only {promotions} promotions over {} seeds: the faults do not exercise failover",
        seeds.len()
    );
}
