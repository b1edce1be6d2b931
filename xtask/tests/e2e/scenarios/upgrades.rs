//! Rolling upgrades on real servers (process nodes): a PostgreSQL cluster created at 15.18 (the
//! `postgres-15.18-bookworm` root: Debian bookworm's packages, pinned) moves to 15.20 (the
//! default root, bookworm-security), a real binary change, under a writer; then to a version
//! the catalog has (through the operator's `--versions-file`) but this machine has no root for,
//! whose pods never start, and back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::conditions;
use database_operator_api::failover::FailoverKind;
use database_operator_api::upgrade::RollPhase;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::{Ctx, lock};
use crate::scenarios::databases::{
    Engine, RUNNING_TIMEOUT, container_pid, example_in, image_root, members, password_of, pod_ip,
    sql,
};
use crate::scenarios::failover::{Load, completed, follow_pods, table};
use crate::scenarios::process_nodes::ready;
use crate::util::{Check, api, condition, describe, events_about, phase, wait_for};

const FROM: &str = "15.18";
const TO: &str = "15.20";
/// In the catalog through `--versions-file`, without a local root: its pods never start.
const MISSING: &str = "15.21";
/// `spec.upgrade.stepTimeoutSeconds` (the smallest allowed).
const STEP_TIMEOUT_SECONDS: u64 = 30;
const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// One distinct state of the roll, as a watch of the cluster and its pods saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RollState {
    phase: String,
    current_version: Option<String>,
    step: Option<RollPhase>,
    member: Option<String>,
    done: Vec<String>,
    primary: Option<String>,
}

impl std::fmt::Display for RollState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} current={} step={:?} member={} done={:?} primary={}",
            self.phase,
            self.current_version.as_deref().unwrap_or("-"),
            self.step,
            self.member.as_deref().unwrap_or("-"),
            self.done,
            self.primary.as_deref().unwrap_or("-")
        )
    }
}

/// Polls the cluster every 200 ms and records each distinct roll state and, per pod, when its
/// version label first showed each version.
struct Watch {
    states: Arc<Mutex<Vec<(Instant, RollState)>>>,
    versions: Arc<Mutex<Vec<(Instant, String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    fn start(env: Arc<Env>, ns: String, name: String) -> Watch {
        let states: Arc<Mutex<Vec<(Instant, RollState)>>> = Arc::default();
        let versions: Arc<Mutex<Vec<(Instant, String, String)>>> = Arc::default();
        let (s, v) = (states.clone(), versions.clone());
        let task = tokio::spawn(async move {
            let clusters: Api<DatabaseCluster> = api(&env, &ns);
            let pods: Api<Pod> = api(&env, &ns);
            loop {
                if let Ok(dbc) = clusters.get(&name).await {
                    let status = dbc.status.clone().unwrap_or_default();
                    let upgrade = status.upgrade.clone();
                    let state = RollState {
                        phase: phase(&dbc).to_owned(),
                        current_version: status.current_version.clone(),
                        step: upgrade.as_ref().map(|u| u.step),
                        member: upgrade.as_ref().and_then(|u| u.member.clone()),
                        done: upgrade.map(|u| u.members_done).unwrap_or_default(),
                        primary: status.primary_pod.clone(),
                    };
                    let mut list = lock(&s);
                    if list.last().map(|(_, l)| l) != Some(&state) {
                        list.push((Instant::now(), state));
                    }
                }
                let selector = format!("database.example.com/cluster={name}");
                if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                    let mut seen = lock(&v);
                    for p in &list.items {
                        let Some(version) = p.labels().get(VERSION_LABEL) else {
                            continue;
                        };
                        let pod = p.name_any();
                        let last = seen.iter().rev().find(|(_, n, _)| *n == pod);
                        if last.is_none_or(|(_, _, had)| had != version) {
                            seen.push((Instant::now(), pod, version.clone()));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Watch {
            states,
            versions,
            task,
        }
    }

    fn states(&self) -> Vec<(Instant, RollState)> {
        lock(&self.states).clone()
    }

    fn history(&self, since: Instant) -> String {
        self.states()
            .iter()
            .filter(|(at, _)| *at >= since)
            .map(|(at, s)| {
                format!(
                    "\n      +{:>5.1}s {s}",
                    at.duration_since(since).as_secs_f64()
                )
            })
            .collect()
    }

    /// The pods in the order their version label moved to `version` after `since`.
    fn moved_to(&self, version: &str, since: Instant) -> Vec<String> {
        lock(&self.versions)
            .iter()
            .filter(|(at, _, v)| *at >= since && v == version)
            .map(|(_, p, _)| p.clone())
            .collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `show server_version` on every member (their own answer, not a label).
fn server_versions(
    root: &std::path::PathBuf,
    password: &str,
    pods: &[Pod],
) -> Result<BTreeMap<String, String>> {
    pods.iter()
        .map(|p| {
            let ip = pod_ip(p)?;
            let v = sql(
                Engine::Postgresql,
                root,
                &ip,
                password,
                "show server_version",
            )?;
            Ok((p.name_any(), v))
        })
        .collect()
}

/// The longest time between two acknowledged writes inside `[from, to]`.
/// The longest time between two acknowledged writes both within `from..=to`.
fn gap_before(acked: &[(u64, Instant, String)], from: Instant, to: Instant) -> Duration {
    acked
        .windows(2)
        .map(|pair| (pair[0].1, pair[1].1))
        .filter(|(a, b)| *a >= from && *b <= to)
        .map(|(a, b)| b.duration_since(a))
        .max()
        .unwrap_or_default()
}

fn gap_within(acked: &[(u64, Instant, String)], from: Instant, to: Instant) -> Duration {
    let mut gap = Duration::ZERO;
    for pair in acked.windows(2) {
        let (a, b) = (pair[0].1, pair[1].1);
        if b >= from && a <= to {
            gap = gap.max(b.duration_since(a));
        }
    }
    gap
}

async fn set_version(env: &Env, ns: &str, name: &str, version: &str) -> Result<()> {
    let patch = serde_json::json!({"spec": {"version": version}});
    api::<DatabaseCluster>(env, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// 15.18 → 15.20 under a writer (replicas from the highest ordinal, a switchover, the old
/// primary), then 15.20 → 15.21 (no root: paused after the first replica, the primary
/// untouched) and back to 15.20.
pub async fn postgresql_minor_upgrade_rolls_and_switches_over(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let env = ctx.without_shared_operator().await?;
    let versions_file = env.state_dir.join("upgrades-versions.yaml");
    std::fs::write(
        &versions_file,
        format!(
            "# {MISSING}: in the catalog, but no process-node root serves postgres:{MISSING}\nversions:\n- {{engine: postgresql, version: \"{MISSING}\"}}\n"
        ),
    )?;
    let versions_arg = versions_file.display().to_string();
    let _operator = ctx
        .start_operator(
            "upgrades",
            &[
                "--leader-elect=false",
                "--webhook=false",
                "--versions-file",
                &versions_arg,
            ],
        )
        .await?;
    let root = image_root(engine).await?;
    let ns = ctx.namespace("upgrade-pg").await?;
    ctx.retire_on_success(&ns);
    let (text, name) = example_in(engine, &ns)?;
    ensure!(
        text.contains(&format!("  version: \"{TO}\"\n")),
        "examples/local/postgresql.yaml no longer asks for {TO}"
    );
    let text = text.replace(
        &format!("  version: \"{TO}\"\n"),
        &format!(
            "  version: \"{FROM}\"\n  upgrade:\n    stepTimeoutSeconds: {STEP_TIMEOUT_SECONDS}\n"
        ),
    );
    ctx.relevant("databasecluster", &ns, &name);
    ctx.relevant("statefulset", &ns, &name);
    let applied = Instant::now();
    env.cluster.apply(&text)?;
    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    let dbc = wait_for(
        &format!("{name} Running at {FROM}"),
        RUNNING_TIMEOUT,
        async || {
            let dbc = clusters.get(&name).await?;
            let current = dbc.status.as_ref().and_then(|s| s.current_version.clone());
            Ok(
                if phase(&dbc) == "Running" && current.as_deref() == Some(FROM) {
                    Check::Done(dbc)
                } else {
                    Check::Pending(describe(&dbc))
                },
            )
        },
    )
    .await?;
    ctx.note(format!(
        "3 members Running at {FROM} {:.1}s after apply",
        applied.elapsed().as_secs_f64()
    ));
    let password = password_of(&env, &ns, &dbc).await?;
    let (pods, primary) = members(&env, &ns, &name).await?;
    let first_primary = primary.name_any();
    ensure!(
        first_primary == format!("{name}-0"),
        "the primary is {first_primary}"
    );
    let versions = server_versions(&root, &password, &pods)?;
    ensure!(
        versions
            .values()
            .all(|v| v.starts_with(&format!("{FROM} "))),
        "the servers report {versions:?}, not {FROM}"
    );
    sql(
        engine,
        &root,
        &pod_ip(&primary)?,
        &password,
        &format!("create table {} (id bigint primary key)", table(engine)),
    )?;

    // 15.18 → 15.20 under the writer.
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let watch = Watch::start(env.clone(), ns.clone(), name.clone());
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let started = Instant::now();
        set_version(&env, &ns, &name, TO).await?;
        ctx.step(format!("spec.version {FROM} -> {TO}"));
        wait_for(
            &format!("every member on {TO}, the roll finished"),
            Duration::from_secs(150),
            async || {
                let dbc = clusters.get(&name).await?;
                let status = dbc.status.clone().unwrap_or_default();
                Ok(
                    if phase(&dbc) == "Running"
                        && status.current_version.as_deref() == Some(TO)
                        && status.upgrade.is_none()
                    {
                        Check::Done(())
                    } else {
                        Check::Pending(watch.history(started))
                    },
                )
            },
        )
        .await?;
        let took = started.elapsed();
        // The watch polls: let it see the last state.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let history = watch.history(started);
        let states: Vec<RollState> = watch
            .states()
            .into_iter()
            .filter(|(at, _)| *at >= started)
            .map(|(_, s)| s)
            .collect();
        // currentVersion stays 15.18 until the very end.
        let first_new = states
            .iter()
            .position(|s| s.current_version.as_deref() == Some(TO))
            .context("currentVersion never moved")?;
        ensure!(
            states[..first_new]
                .iter()
                .all(|s| s.current_version.as_deref() == Some(FROM))
                && states[first_new..].iter().all(|s| s.step.is_none()),
            "currentVersion moved before the roll ended:{history}"
        );
        ensure!(
            states.iter().any(|s| s.phase == "Upgrading"),
            "no Upgrading phase:{history}"
        );
        // The steps, in order: the replicas from the highest ordinal, the switchover, the old
        // primary. Between the switchover and the old primary's step the roll may name other
        // members in `Replicas`: it waits for them (one member down at most), never replaces
        // them. After a PostgreSQL switchover the old primary restarts as a standby, and a
        // replica that streamed the fenced primary's last WAL (a checkpoint) restarts for a
        // rewind; a replica already done is named while the health gate waits for it again.
        // `moved_to` below checks the replacements themselves, in order.
        let mut steps: Vec<(RollPhase, String)> = Vec::new();
        let mut health_waits: Vec<String> = Vec::new();
        for s in &states {
            if let (Some(step), Some(member)) = (s.step, s.member.clone()) {
                let after_switchover = steps.iter().any(|(st, _)| *st == RollPhase::Switchover);
                if step == RollPhase::Replicas && (s.done.contains(&member) || after_switchover) {
                    if !health_waits.contains(&member) {
                        health_waits.push(member);
                    }
                    continue;
                }
                if steps.last() != Some(&(step, member.clone())) {
                    steps.push((step, member));
                }
            }
        }
        if !health_waits.is_empty() {
            ctx.note(format!(
                "the roll waited for {health_waits:?} (an upgraded replica's health, or a member restarted after the switchover) before the next step"
            ));
        }
        let want = [
            (RollPhase::Replicas, format!("{name}-2")),
            (RollPhase::Replicas, format!("{name}-1")),
            (RollPhase::Switchover, format!("{name}-1")),
            (RollPhase::Primary, format!("{name}-0")),
        ];
        // The old primary's own step may not show: after a PostgreSQL switchover it restarts
        // as a standby, and when a pass runs while its pod is gone every member left is on the
        // new version, so the StatefulSet recreates it on the new template at once (one
        // restart instead of two). `moved_to` below still requires it last.
        let skipped_primary_step = steps == want[..3];
        ensure!(
            steps == want || skipped_primary_step,
            "the roll went {steps:?}, want {want:?}:{history}"
        );
        if skipped_primary_step {
            ctx.note(format!(
                "{name}-0 came back on {TO} from its restart as a standby after the switchover: no separate Primary step"
            ));
        }
        let moved = watch.moved_to(TO, started);
        ensure!(
            moved == [format!("{name}-2"), format!("{name}-1"), format!("{name}-0")],
            "pods moved to {TO} in the order {moved:?}"
        );
        let record = completed(
            &env,
            &ns,
            &name,
            FailoverKind::Switchover,
            &first_primary,
            Duration::from_secs(10),
        )
        .await?;
        ensure!(
            record.to.as_deref() == Some(&format!("{name}-1")),
            "the switchover went to {:?}",
            record.to
        );
        let (pods, primary) = members(&env, &ns, &name).await?;
        let versions = server_versions(&root, &password, &pods)?;
        ensure!(
            versions.values().all(|v| v.starts_with(&format!("{TO} "))),
            "after the roll the servers report {versions:?}"
        );
        // The writer: the longest gap while the replicas rolled, and around the switchover.
        let (acked, errors) = {
            let writes = lock(&load.writes);
            (writes.acked.clone(), writes.errors.clone())
        };
        let switchover_at = watch
            .states()
            .iter()
            .find(|(at, s)| *at >= started && s.step == Some(RollPhase::Switchover))
            .map(|(at, _)| *at)
            .context("no switchover step seen")?;
        // Only gaps that end before the switchover step was seen: the fence of the old primary
        // comes with that step (the watch polls, so it may see the step just after the fence),
        // and a gap that runs into it is the switchover's.
        let replicas_gap = gap_before(&acked, started, switchover_at);
        let rest_gap = gap_within(&acked, switchover_at, Instant::now());
        let failed_before: Vec<String> = errors
            .iter()
            .filter(|(at, _, _)| *at >= started && *at <= switchover_at)
            .map(|(at, ip, line)| {
                format!("{:.1}s on {ip}: {line}", at.duration_since(started).as_secs_f64())
            })
            .collect();
        ensure!(
            replicas_gap < Duration::from_secs(3),
            "the writer stalled {:.1}s while only replicas were replaced (failed writes after the \
             version change: {failed_before:?}):{}",
            replicas_gap.as_secs_f64(),
            watch.history(started)
        );
        ctx.note(format!(
            "{FROM} -> {TO} in {:.1}s: {}; primary now {}; servers report {:?}",
            took.as_secs_f64(),
            steps
                .iter()
                .map(|(s, m)| format!("{s:?} {m}"))
                .collect::<Vec<_>>()
                .join(" -> "),
            primary.name_any(),
            versions.values().collect::<Vec<_>>()
        ));
        ctx.note(format!(
            "writer: longest gap {:.1}s while the replicas rolled, {:.1}s from the switchover on (the switchover gap); {} rows acknowledged",
            replicas_gap.as_secs_f64(),
            rest_gap.as_secs_f64(),
            acked.len()
        ));
        Ok::<_, anyhow::Error>(primary.name_any())
    }
    .await;
    let (_, violations) = load.finish();
    pods_task.abort();
    ensure!(
        violations.is_empty(),
        "two writable primaries during the roll: {violations:?}"
    );
    let primary = result?;

    // 15.20 → 15.21: the highest replica's pod cannot start; the roll pauses there.
    let (pods, _) = members(&env, &ns, &name).await?;
    let before = uids(&pods);
    let started = Instant::now();
    set_version(&env, &ns, &name, MISSING).await?;
    ctx.step(format!(
        "spec.version {TO} -> {MISSING} (no root for it here)"
    ));
    let victim = format!("{name}-2");
    let dbc = wait_for(
        "the roll paused",
        Duration::from_secs(STEP_TIMEOUT_SECONDS + 60),
        async || {
            let dbc = clusters.get(&name).await?;
            let up = dbc.status.as_ref().and_then(|s| s.upgrade.clone());
            Ok(match up {
                Some(u) if u.step == RollPhase::Paused => Check::Done(dbc),
                _ => Check::Pending(watch.history(started)),
            })
        },
    )
    .await?;
    let paused_after = started.elapsed();
    let status = dbc.status.clone().unwrap_or_default();
    let upgrade = status.upgrade.clone().context("no status.upgrade")?;
    let why = upgrade.paused_reason.clone().unwrap_or_default();
    ensure!(
        upgrade.member.as_deref() == Some(&victim) && upgrade.from == TO && upgrade.to == MISSING,
        "paused on {:?} ({} -> {})",
        upgrade.member,
        upgrade.from,
        upgrade.to
    );
    let upgrading = condition(&dbc, conditions::UPGRADING).context("no Upgrading condition")?;
    ensure!(
        upgrading.reason == "UpgradePaused" && upgrading.message == why && why.contains(&victim),
        "Upgrading {} {}: {} (paused reason {why})",
        upgrading.status,
        upgrading.reason,
        upgrading.message
    );
    ensure!(
        status.current_version.as_deref() == Some(TO),
        "currentVersion {:?} while paused",
        status.current_version
    );
    let pods_api: Api<Pod> = api(&env, &ns);
    let stuck = pods_api.get(&victim).await?;
    let waiting = stuck
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == engine.server_container()))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    let stuck_waiting_init = stuck
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .collect::<Vec<_>>();
    ensure!(
        waiting.as_deref() == Some("ImageNotAvailable")
            || stuck_waiting_init.iter().any(|r| r == "ImageNotAvailable"),
        "{victim} waits with {waiting:?} / init {stuck_waiting_init:?}"
    );
    let (pods_now, primary_now) = members(&env, &ns, &name).await?;
    ensure!(
        primary_now.name_any() == primary,
        "the primary moved from {primary} to {} during a paused roll",
        primary_now.name_any()
    );
    for p in &pods_now {
        let pod = p.name_any();
        if pod == victim {
            continue;
        }
        ensure!(
            before.get(&pod) == Some(&p.uid().unwrap_or_default())
                && p.labels().get(VERSION_LABEL).map(String::as_str) == Some(TO),
            "{pod} was touched by the paused roll"
        );
    }
    let events = events_about(&env, &ns, &name).await?;
    ensure!(
        events
            .iter()
            .any(|e| e.reason == "UpgradePaused" && e.note.contains(&victim)),
        "no UpgradePaused event naming {victim}"
    );
    ctx.note(format!(
        "{TO} -> {MISSING}: paused {:.1}s after the change (stepTimeoutSeconds {STEP_TIMEOUT_SECONDS}), primary {primary} untouched; Upgrading: {why}",
        paused_after.as_secs_f64()
    ));

    // Back to 15.20: the stuck replica comes back on 15.20, nothing else moves.
    let reverted = Instant::now();
    set_version(&env, &ns, &name, TO).await?;
    wait_for(
        &format!("{victim} back on {TO}, the roll finished"),
        Duration::from_secs(120),
        async || {
            let dbc = clusters.get(&name).await?;
            let status = dbc.status.clone().unwrap_or_default();
            let pod = pods_api.get_opt(&victim).await?;
            let back = pod.as_ref().is_some_and(|p| {
                ready(p) && p.labels().get(VERSION_LABEL).map(String::as_str) == Some(TO)
            });
            Ok(
                if back && phase(&dbc) == "Running" && status.upgrade.is_none() {
                    Check::Done(())
                } else {
                    Check::Pending(watch.history(reverted))
                },
            )
        },
    )
    .await?;
    let (pods, primary_after) = members(&env, &ns, &name).await?;
    ensure!(
        primary_after.name_any() == primary,
        "the primary moved on the way back"
    );
    let versions = server_versions(&root, &password, &pods)?;
    ensure!(
        versions.values().all(|v| v.starts_with(&format!("{TO} "))),
        "after the revert the servers report {versions:?}"
    );
    let back = pods_api.get(&victim).await?;
    ensure!(
        container_pid(&back, engine.server_container()).is_some(),
        "{victim} has no server"
    );
    ctx.note(format!(
        "reverted to {TO}: {victim} back and Ready {:.1}s later, serving {}",
        reverted.elapsed().as_secs_f64(),
        versions.get(&victim).cloned().unwrap_or_default()
    ));
    drop(watch);
    clusters.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}
