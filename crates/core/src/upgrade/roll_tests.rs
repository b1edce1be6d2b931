//! The roll against a simulated StatefulSet controller (partition semantics, one pod at a time,
//! a pod that is not Ready blocks the roll), servers that report their version, and instant
//! switchovers.

use proptest::prelude::*;

use super::*;

const T0: i64 = 1_800_000_000;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(T0 + s).unwrap()
}

/// The template hash the simulation gives a version when nothing else changes.
fn hash_of(version: &str) -> String {
    format!("template-{version}")
}

#[derive(Clone, Debug)]
struct Pod {
    version: String,
    /// The hash of the template it runs.
    hash: String,
    ready: bool,
    /// Seconds until a replaced pod is Ready (never, on a broken version).
    starting: Option<u32>,
    /// Deleted and not created again yet (the StatefulSet controller's gap): the operator sees
    /// a member that is down with an unknown version, as `plan` passes it.
    missing: bool,
    /// The old primary right after a switchover: the failover restarts it as a replica of the
    /// new one in the next second; until then it does not follow.
    rejoining: bool,
}

#[derive(Clone, Debug)]
struct Sim {
    pods: Vec<Pod>,
    primary: usize,
    /// The template's version, its hash and the partition the operator applied.
    template: String,
    hash: String,
    partition: i32,
    current: Option<String>,
    status: Option<UpgradeStatus>,
    broken: Option<String>,
    /// A switchover requested in the previous pass completes in this one.
    switchover: Option<usize>,
    tick: i64,
    /// Every replacement: (ordinal, it was the primary while another member was not on the
    /// template).
    replaced: Vec<(usize, bool)>,
    /// Members the roll replaced while the failover was restarting them to follow.
    restarted_twice: Vec<usize>,
    /// Members replaced while they were the primary of a cluster of more than one member (a
    /// restart in place: a write outage).
    primary_restarted: Vec<usize>,
}

impl Sim {
    fn new(n: usize, version: &str, primary: usize) -> Sim {
        Sim {
            pods: (0..n)
                .map(|_| Pod {
                    version: version.into(),
                    hash: hash_of(version),
                    ready: true,
                    starting: None,
                    missing: false,
                    rejoining: false,
                })
                .collect(),
            primary,
            template: version.into(),
            hash: hash_of(version),
            partition: 0,
            current: Some(version.into()),
            status: None,
            broken: None,
            switchover: None,
            tick: 0,
            replaced: Vec::new(),
            restarted_twice: Vec::new(),
            primary_restarted: Vec::new(),
        }
    }

    fn names(&self) -> Vec<String> {
        (0..self.pods.len()).map(|i| format!("db-{i}")).collect()
    }

    /// One operator pass rendering `target` (its template hash follows the version), then one
    /// second of the world.
    fn pass(&mut self, target: &str) -> Outcome {
        self.pass_with(target, &hash_of(target))
    }

    /// One operator pass rendering `target` with the template hash `hash`, then one second of
    /// the world.
    fn pass_with(&mut self, target: &str, hash: &str) -> Outcome {
        self.template = target.to_owned();
        self.hash = hash.to_owned();
        let names = self.names();
        let members: Vec<RollMember<'_>> = self
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| RollMember {
                name: &names[i],
                ordinal: i as i32,
                ready: p.ready,
                terminating: false,
                pod_version: (!p.missing).then_some(p.version.as_str()),
                pod_template: (!p.missing).then_some(p.hash.as_str()),
                server_version: p.ready.then_some(p.version.as_str()),
                caught_up: p.ready,
                follows: !p.rejoining,
            })
            .collect();
        let primary = names[self.primary].clone();
        let out = roll(&Inputs {
            cluster: "shop/db",
            members,
            replicas: self.pods.len() as i32,
            primary: &primary,
            target,
            template: hash,
            current_version: self.current.as_deref(),
            previous: self.status.as_ref(),
            step_timeout: Duration::from_secs(30),
            failover_in_flight: self.switchover.is_some(),
            switchover_failed_at: None,
            now: at(self.tick),
        });
        self.status = out.status.clone();
        self.partition = out.partition;
        // The world: a switchover requested in the last pass completes (below) when its target
        // is Ready.
        let switching = self.switchover.take();
        if let Some(to) = &out.switchover_to {
            self.switchover = Some(names.iter().position(|n| n == to).unwrap());
        }
        for s in &out.commands {
            if let DatabaseCommand::StopPod { pod } = s {
                let i = names.iter().position(|n| n == pod).unwrap();
                self.replace(i);
            }
        }
        self.controller();
        // The failover restarts a rejoining old primary as a replica (a PostgreSQL primary
        // becomes a standby by restarting), keeping its version, while the StatefulSet
        // controller acts on the partition.
        for p in &mut self.pods {
            if std::mem::take(&mut p.rejoining) {
                p.ready = false;
                p.starting = Some(1);
                p.missing = true;
            }
        }
        // The old primary rejoins from the next second on.
        if let Some(to) = switching
            && self.pods[to].ready
        {
            self.pods[self.primary].rejoining = true;
            self.primary = to;
        }
        for p in &mut self.pods {
            if p.missing {
                p.missing = false;
                continue;
            }
            match p.starting {
                Some(0) => {
                    p.ready = true;
                    p.starting = None;
                }
                Some(n) => p.starting = Some(n - 1),
                None => {}
            }
        }
        if self.pods.iter().all(|p| p.version == target && p.ready) {
            self.current = Some(target.to_owned());
        }
        self.tick += 1;
        out
    }

    fn replace(&mut self, i: usize) {
        let others_on_template = self
            .pods
            .iter()
            .enumerate()
            .all(|(j, p)| j == i || self.on_template(p));
        self.replaced
            .push((i, i == self.primary && !others_on_template));
        if self.pods[i].rejoining {
            self.restarted_twice.push(i);
        }
        if i == self.primary && self.pods.len() > 1 {
            self.primary_restarted.push(i);
        }
        let broken = self.broken.as_deref() == Some(self.template.as_str());
        self.pods[i] = Pod {
            version: self.template.clone(),
            hash: self.hash.clone(),
            ready: false,
            starting: (!broken).then_some(2),
            missing: true,
            rejoining: false,
        };
    }

    /// RollingUpdate: the highest ordinal at or above the partition not on the template is
    /// replaced, unless some pod is not Ready (the controller waits).
    fn controller(&mut self) {
        if self.pods.iter().any(|p| !p.ready) {
            return;
        }
        let next = (0..self.pods.len())
            .rev()
            .filter(|i| *i as i32 >= self.partition)
            .find(|i| !self.on_template(&self.pods[*i]));
        if let Some(i) = next {
            self.replace(i);
        }
    }

    fn on_template(&self, p: &Pod) -> bool {
        p.version == self.template && p.hash == self.hash
    }

    fn down(&self) -> usize {
        self.pods.iter().filter(|p| !p.ready).count()
    }
}

#[test]
fn replicas_from_the_highest_ordinal_then_a_switchover_then_the_old_primary() {
    let mut sim = Sim::new(3, "16.2", 0);
    let mut order = Vec::new();
    let mut waits = std::collections::BTreeSet::new();
    let mut steps = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let before: Vec<String> = sim.pods.iter().map(|p| p.version.clone()).collect();
        sim.pass("16.4");
        waits.extend(sim.status.as_ref().and_then(|s| s.waiting.clone()));
        steps.extend(
            sim.status
                .as_ref()
                .and_then(|s| s.waiting.clone().map(|w| (format!("{:?}", s.step), w))),
        );
        for (i, p) in sim.pods.iter().enumerate() {
            if p.version != before[i] {
                order.push(i);
            }
        }
    }
    assert_eq!(order, [2, 1, 0]);
    assert_eq!(
        sim.primary, 1,
        "switched over to the lowest upgraded replica"
    );
    assert_eq!(sim.current.as_deref(), Some("16.4"));
    assert!(sim.status.is_none());
    assert_eq!(sim.partition, 0);
    assert!(sim.replaced.iter().all(|(_, early)| !early));
    assert_eq!(
        sim.restarted_twice,
        Vec::<usize>::new(),
        "the old primary was replaced while the failover restarted it to follow"
    );
    // The status says what each wait was for.
    assert!(
        waits.contains("waiting for db-0 to follow the primary db-1"),
        "{waits:?}"
    );
    assert!(
        waits.contains("db-2 runs 16.4 but is not Ready"),
        "{waits:?}"
    );
    // The old primary rejoining after the switchover is the roll's Primary step.
    let rejoining: Vec<&String> = steps
        .iter()
        .filter(|(_, w)| w == "waiting for db-0 to follow the primary db-1")
        .map(|(step, _)| step)
        .collect();
    assert_eq!(rejoining, ["Primary"], "{steps:?}");
}

#[test]
fn a_primary_in_the_middle_hands_over_to_the_lowest_old_member_first() {
    let mut sim = Sim::new(3, "16.2", 1);
    let mut switchovers: Vec<String> = Vec::new();
    for _ in 0..80 {
        let out = sim.pass("16.4");
        if let Some(to) = out.switchover_to
            && switchovers.last() != Some(&to)
        {
            switchovers.push(to);
        }
    }
    assert_eq!(switchovers, ["db-0", "db-1"]);
    assert!(sim.pods.iter().all(|p| p.version == "16.4" && p.ready));
    assert!(sim.replaced.iter().all(|(_, early)| !early));
}

#[test]
fn a_broken_version_pauses_after_the_first_replica_and_reverting_brings_it_back() {
    let mut sim = Sim::new(3, "16.2", 0);
    sim.broken = Some("16.4".into());
    let mut paused_events = 0;
    for _ in 0..60 {
        let out = sim.pass("16.4");
        paused_events += out
            .events
            .iter()
            .filter(|e| e.reason == EventReason::UpgradePaused)
            .count();
    }
    let status = sim.status.clone().unwrap();
    assert_eq!(status.step, RollPhase::Paused);
    assert_eq!(status.member.as_deref(), Some("db-2"));
    assert_eq!(
        status.waiting, None,
        "a paused roll says why in pausedReason"
    );
    assert!(
        status.paused_reason.as_deref().unwrap().contains("db-2"),
        "{status:?}"
    );
    assert_eq!(paused_events, 1);
    assert_eq!(sim.pods[0].version, "16.2", "the primary is untouched");
    assert_eq!(sim.pods[1].version, "16.2");
    assert_eq!(sim.partition, 2);

    // Revert: db-2 is deleted (the controller would wait for it forever) and comes back.
    for _ in 0..30 {
        sim.pass("16.2");
    }
    assert!(
        sim.pods.iter().all(|p| p.version == "16.2" && p.ready),
        "{:?}",
        sim.pods
    );
    assert!(sim.status.is_none());
    assert_eq!(sim.primary, 0);
}

#[test]
fn a_single_member_is_replaced_in_place() {
    let mut sim = Sim::new(1, "8.4.7", 0);
    for _ in 0..10 {
        sim.pass("9.7.4");
    }
    assert_eq!(sim.pods[0].version, "9.7.4");
    assert_eq!(sim.current.as_deref(), Some("9.7.4"));
}

#[test]
fn a_steady_cluster_does_not_roll() {
    let names = ["db-0".to_owned(), "db-1".to_owned()];
    let member = |i: usize| RollMember {
        name: &names[i],
        ordinal: i as i32,
        ready: true,
        terminating: false,
        pod_version: Some("16.4"),
        pod_template: Some("t"),
        server_version: Some("16.4"),
        caught_up: true,
        follows: true,
    };
    let out = roll(&Inputs {
        cluster: "shop/db",
        members: vec![member(0), member(1)],
        replicas: 2,
        primary: "db-0",
        target: "16.4",
        template: "t",
        current_version: Some("16.4"),
        previous: None,
        step_timeout: Duration::from_secs(30),
        failover_in_flight: false,
        switchover_failed_at: None,
        now: at(0),
    });
    assert_eq!(out.partition, 0);
    assert_eq!(out.status, None);
    assert!(out.commands.is_empty() && out.switchover_to.is_none());
}

proptest! {
    /// Whatever the size, the primary's place and whether the new version works: the primary's
    /// pod is never replaced while another member is not on the target, never more than one
    /// member is down, a member is never replaced while the failover restarts it to follow, a
    /// good version completes, and a broken one stops with the primary on the
    /// old version and rolls back when the spec is reverted.
    #[test]
    fn roll_rules_hold(n in 1usize..6, primary in 0usize..6, broken in prop::bool::ANY) {
        let primary = primary % n;
        let mut sim = Sim::new(n, "16.2", primary);
        if broken {
            sim.broken = Some("16.4".into());
        }
        for _ in 0..(40 * n) {
            sim.pass("16.4");
            prop_assert!(sim.down() <= 1, "{} members down: {:?}", sim.down(), sim.pods);
        }
        prop_assert!(sim.replaced.iter().all(|(_, early)| !early), "primary replaced early: {:?}", sim.replaced);
        prop_assert!(sim.restarted_twice.is_empty(), "replaced while rejoining: {:?}", sim.restarted_twice);
        if !broken {
            prop_assert!(sim.pods.iter().all(|p| p.version == "16.4" && p.ready), "{:?}", sim.pods);
            prop_assert_eq!(sim.current.as_deref(), Some("16.4"));
        } else if n > 1 {
            prop_assert_eq!(&sim.pods[sim.primary].version, "16.2");
            prop_assert_eq!(sim.pods.iter().filter(|p| p.version == "16.4").count(), 1);
            prop_assert_eq!(sim.status.as_ref().map(|s| s.step), Some(RollPhase::Paused));
            for _ in 0..(20 * n) {
                sim.pass("16.2");
                prop_assert!(sim.down() <= 1);
            }
            prop_assert!(sim.pods.iter().all(|p| p.version == "16.2" && p.ready), "{:?}", sim.pods);
        }
    }
}

#[test]
fn a_template_change_without_a_version_change_rolls_as_a_version_change_does() {
    let mut sim = Sim::new(3, "16.4", 0);
    let mut order = Vec::new();
    let mut partitions = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let before: Vec<String> = sim.pods.iter().map(|p| p.hash.clone()).collect();
        sim.pass_with("16.4", "template-more-memory");
        partitions.insert(sim.partition);
        for (i, p) in sim.pods.iter().enumerate() {
            if p.hash != before[i] {
                order.push(i);
            }
        }
    }
    assert_eq!(order, [2, 1, 0], "replicas first, the primary last");
    assert_eq!(sim.primary, 1, "the primary moved before its restart");
    assert_eq!(
        sim.primary_restarted,
        Vec::<usize>::new(),
        "a primary restarted in place"
    );
    assert!(
        sim.replaced.iter().all(|(_, early)| !early),
        "the primary was restarted while a replica ran the old template: {:?}",
        sim.replaced
    );
    assert!(
        sim.pods
            .iter()
            .all(|p| p.hash == "template-more-memory" && p.ready)
    );
    assert!(
        !partitions.contains(&0) || sim.status.is_none(),
        "partition 0 only once the roll is over"
    );
    assert!(sim.status.is_none());
    assert_eq!(sim.partition, 0);
    assert_eq!(sim.current.as_deref(), Some("16.4"));
}

#[test]
fn pods_of_an_earlier_release_without_the_template_label_roll_once_primary_last() {
    let mut sim = Sim::new(3, "16.4", 0);
    for p in &mut sim.pods {
        // What a pod made before the label existed reports.
        p.hash = String::new();
    }
    for _ in 0..60 {
        sim.pass("16.4");
    }
    assert!(
        sim.replaced.iter().all(|(_, early)| !early),
        "{:?}",
        sim.replaced
    );
    assert_eq!(
        sim.primary_restarted,
        Vec::<usize>::new(),
        "a primary restarted in place"
    );
    assert_eq!(
        sim.replaced.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [2, 1, 0]
    );
    assert!(sim.pods.iter().all(|p| p.hash == hash_of("16.4")));
    assert!(sim.status.is_none());
}

#[test]
fn a_new_cluster_does_not_roll_on_a_template_change() {
    let mut sim = Sim::new(3, "16.4", 0);
    sim.current = None;
    let out = sim.pass_with("16.4", "another-template");
    assert_eq!(out.partition, 0);
    assert_eq!(out.status, None);
}
