//! Ordinary events that must not take the primary down or lose data (docs/reliability.md): each
//! runs on real servers (process nodes) under the failover scenarios' writer and monitor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::failover::{FailoverKind, FailoverOutcome};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::{Ctx, Handed, lock};
use crate::scenarios::databases::Engine;
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, primary_pod, rows_lost, running,
};
use crate::scenarios::process_nodes::ready;
use crate::util::{Check, ROLE_LABEL, api, describe, phase, wait_for};

/// The longest write gap a restart of every member may cause: a switchover's (about 2-5 s
/// measured), with room for a loaded machine; a primary restarted in place takes longer.
pub(crate) const ROLL_WRITE_GAP: Duration = Duration::from_secs(8);
/// How long a roll of three members may take.
const ROLL_TIMEOUT: Duration = Duration::from_secs(300);

/// What the pod watcher saw during a roll: each replaced pod incarnation with the role label it
/// last carried.
#[derive(Default)]
pub(crate) struct Replacements {
    /// (pod name, role label of the replaced incarnation).
    pub(crate) replaced: Vec<(String, String)>,
}

/// Watches the cluster's pods every 250 ms until `stop`, recording each pod replaced (same name,
/// new UID, or gone) with the role label its last incarnation carried.
pub(crate) fn watch_replacements(
    env: Arc<Env>,
    ns: String,
    name: String,
    seen: Arc<std::sync::Mutex<Replacements>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = api(&env, &ns);
        let selector = format!("database.example.com/cluster={name}");
        // name -> (uid, role label, deleting)
        let mut last: BTreeMap<String, (String, String)> = BTreeMap::new();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                let now: BTreeMap<String, (String, String)> = list
                    .items
                    .iter()
                    .map(|p| {
                        let role = p.labels().get(ROLE_LABEL).cloned().unwrap_or_default();
                        (p.name_any(), (p.uid().unwrap_or_default(), role))
                    })
                    .collect();
                for (pod, (uid, role)) in &last {
                    if now.get(pod).is_none_or(|(u, _)| u != uid) {
                        lock(&seen).replaced.push((pod.clone(), role.clone()));
                    }
                }
                last = now;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// A change of `spec.resources` restarts every member: replicas first, then a switchover, then
/// the former primary, so the write gap is a switchover's, never a primary restarted in place;
/// no acknowledged row is lost.
pub async fn postgresql_resources_change_switches_over_first(ctx: &Ctx) -> Result<()> {
    resources_change_switches_over_first(ctx, Engine::Postgresql, "roll-pg").await
}

async fn resources_change_switches_over_first(
    ctx: &Ctx,
    engine: Engine,
    suffix: &str,
) -> Result<()> {
    let (env, ns, name, password, root) = running(ctx, engine, suffix, DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let seen = Arc::new(std::sync::Mutex::new(Replacements::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_replacements(
        env.clone(),
        ns.clone(),
        name.clone(),
        seen.clone(),
        stop.clone(),
    );
    let result = async {
        let pods: Api<Pod> = api(&env, &ns);
        let selector = format!("database.example.com/cluster={name}");
        let before: BTreeMap<String, String> = pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect();
        let old = primary_pod(&env, &ns, &name).await?.name_any();
        load.first_rows(Duration::from_secs(30)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        // A CPU request no other scenario uses: the pod template changes, nothing else does.
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"cpu": "110m"}}}});
        let patched = clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        let generation = patched.metadata.generation.unwrap_or_default();
        let requested = Instant::now();
        // Status times are whole seconds of the same clock.
        let patched_at = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
        ctx.step(format!("spec.resources.requests.cpu 110m (generation {generation}); primary {old}"));
        // Every member replaced (a new UID), all Ready, the cluster Running on the new generation.
        wait_for("every member restarted with the new resources", ROLL_TIMEOUT, async || {
            let list = pods.list(&ListParams::default().labels(&selector)).await?.items;
            let renewed = list
                .iter()
                .filter(|p| before.get(&p.name_any()).is_some_and(|u| Some(u) != p.uid().as_ref()))
                .filter(|p| ready(p))
                .count();
            let dbc = clusters.get(&name).await?;
            let observed = crate::util::condition(&dbc, "Ready")
                .and_then(|c| c.observed_generation)
                .unwrap_or_default();
            Ok(if renewed == before.len() && phase(&dbc) == "Running" && observed >= generation {
                Check::Done(())
            } else {
                Check::Pending(format!("{renewed}/{} members renewed and Ready; {}", before.len(), describe(&dbc)))
            })
        })
        .await?;
        let took = requested.elapsed();
        let gap = lock(&load.writes).gap_after(requested);
        let replaced = std::mem::take(&mut lock(&seen).replaced);
        ctx.note(format!(
            "{engine:?} resources change: every member restarted in {:.1}s, write gap {:.1}s; replaced (pod, role): {replaced:?}",
            took.as_secs_f64(),
            gap.as_secs_f64()
        ));
        let in_place: Vec<&String> =
            replaced.iter().filter(|(_, role)| role == "primary").map(|(p, _)| p).collect();
        ensure!(
            in_place.is_empty(),
            "the primary was restarted in place (no switchover first): {in_place:?} replaced while labelled primary; write gap {:.1}s",
            gap.as_secs_f64()
        );
        // The role moved by switchover before the former primary restarted: one (or two, when
        // the primary was not the lowest ordinal: first to the lowest old member) since the patch.
        let dbc = clusters.get(&name).await?;
        let record = dbc.status.as_ref().and_then(|s| s.failover.as_ref()).and_then(|f| f.last.clone());
        let record = record.filter(|r| {
            r.kind == FailoverKind::Switchover
                && r.outcome == FailoverOutcome::Completed
                && r.started.0 >= patched_at
        });
        let Some(record) = record else {
            bail!("no completed Switchover since the change: status.failover {:?}", dbc.status.as_ref().and_then(|s| s.failover.as_ref()));
        };
        ensure!(
            gap <= ROLL_WRITE_GAP,
            "write gap {:.1}s over {}s during the roll (switchover {record:?})",
            gap.as_secs_f64(),
            ROLL_WRITE_GAP.as_secs()
        );
        let new = primary_pod(&env, &ns, &name).await?;
        let new_ip = crate::scenarios::databases::pod_ip(&new)?;
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        ensure!(lost.is_empty(), "the roll lost {} acknowledged rows: {:?}", lost.len(), lost.iter().take(10).collect::<Vec<_>>());
        ctx.note(format!("{engine:?} resources change: {acked} rows acknowledged, none lost; primary {old} -> {}", new.name_any()));
        ctx.hand_over(engine.example_key(), Handed { ns: ns.clone(), name: name.clone() });
        Ok::<_, anyhow::Error>(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    load.finish_checked(pods_task, result)
}

/// The operator Secret `<name>-operator` deleted under a running cluster: created again with the
/// values the servers know (never new ones, which would lock the operator, the member agents,
/// backups and new replicas out), with a Warning event; the operator still reaches the servers:
/// a switchover afterwards completes with no acknowledged row lost.
pub async fn postgresql_deleted_operator_secret_is_restored(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) = running(ctx, engine, "secret-pg", DELAY_SECONDS).await?;
    let secrets: Api<Secret> = api(&env, &ns);
    let secret_name = format!("{name}-operator");
    let before = secrets.get(&secret_name).await?;
    let before_uid = before.uid();
    secrets
        .delete(&secret_name, &DeleteParams::default())
        .await?;
    let deleted = Instant::now();
    ctx.step(format!("deleted Secret {ns}/{secret_name}"));
    let restored = wait_for(
        &format!("Secret {secret_name} back"),
        Duration::from_secs(60),
        async || {
            Ok(match secrets.get_opt(&secret_name).await? {
                Some(s) if s.uid() != before_uid => Check::Done(s),
                Some(_) => Check::Pending("the deleted Secret is still there".into()),
                None => Check::Pending("absent".into()),
            })
        },
    )
    .await?;
    let keys = |s: &Secret| {
        s.data
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    let differ: std::collections::BTreeSet<String> = keys(&before)
        .into_iter()
        .chain(keys(&restored))
        .filter(|k| {
            before.data.as_ref().and_then(|d| d.get(k))
                != restored.data.as_ref().and_then(|d| d.get(k))
        })
        .collect();
    ensure!(
        differ.is_empty(),
        "Secret {secret_name} came back {:.1}s after its deletion with other values under {differ:?}: the servers know only the old passwords",
        deleted.elapsed().as_secs_f64()
    );
    ctx.note(format!(
        "Secret {secret_name} deleted: back {:.1}s later with the same values",
        deleted.elapsed().as_secs_f64()
    ));
    wait_for(
        "a Warning event OperatorSecretRestored",
        Duration::from_secs(30),
        async || {
            let events = crate::util::events_about(&env, &ns, &name).await?;
            Ok(
                match events.iter().find(|e| e.reason == "OperatorSecretRestored") {
                    Some(e) if e.type_ == "Warning" && e.note.contains(&secret_name) => {
                        Check::Done(())
                    }
                    Some(e) => Check::Pending(format!("{} {}: {}", e.type_, e.reason, e.note)),
                    None => Check::Pending(format!(
                        "{} events, none OperatorSecretRestored",
                        events.len()
                    )),
                },
            )
        },
    )
    .await?;
    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    let dbc = clusters.get(&name).await?;
    ensure!(
        phase(&dbc) == "Running",
        "after the restore: {}",
        describe(&dbc)
    );
    // The operator's accounts still work on every server: a switchover completes.
    crate::scenarios::failover::switchover_on(ctx, engine, env, ns, name, password, root).await
}

/// A password Secret whose value holds a line break (or a NUL byte) is refused with a condition
/// naming the Secret and the key: a new cluster gets no pods that could not start with it, a
/// running one keeps its pods and the password it runs with; a one-line password lets both go
/// on. Fake nodes: the refusal happens before anything reaches a server.
pub async fn unusable_password_is_refused(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("badpw").await?;
    ctx.retire_on_success(&ns);
    let secrets: Api<Secret> = api(&env, &ns);
    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    let sets: Api<StatefulSet> = api(&env, &ns);
    let set_password = async |name: &str, value: &[u8]| -> Result<()> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(value.to_vec()),
            )])),
            ..Secret::default()
        };
        let params = PatchParams::apply("e2e").force();
        secrets.patch(name, &params, &Patch::Apply(&secret)).await?;
        Ok(())
    };
    let refused = async |name: &str, secret: &str, problem: &str| -> Result<DatabaseCluster> {
        degraded_with(&clusters, name, "PasswordUnusable", |c| {
            if c.reason != "PasswordUnusable" {
                return Ok(false);
            }
            ensure!(
                c.message
                    .contains(&format!("Secret {ns}/{secret} key password"))
                    && c.message.contains(problem),
                "the condition does not name the Secret, key and problem: {}",
                c.message
            );
            Ok(true)
        })
        .await
    };

    // A new cluster: refused before any pod exists.
    set_password("fresh-password", b"first line\nsecond line").await?;
    env.cluster
        .apply(&crate::util::Spec::postgresql("fresh", 1, "fresh-password").manifest(&ns))?;
    ctx.relevant("databasecluster", &ns, "fresh");
    refused("fresh", "fresh-password", "holds a line break").await?;
    ensure!(
        sets.get_opt("fresh").await?.is_none(),
        "a StatefulSet was created with a password its pods cannot start with"
    );
    let events = crate::util::events_about(&env, &ns, "fresh").await?;
    ensure!(
        events
            .iter()
            .any(|e| e.reason == "PasswordUnusable" && e.type_ == "Warning"),
        "no Warning event PasswordUnusable: {:?}",
        events.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    set_password("fresh-password", b"one line").await?;
    crate::util::wait_running(ctx, &env, &ns, "fresh", 1, Duration::from_secs(90)).await?;

    // A running cluster: a NUL byte is refused; its pods and its password stay.
    let template = sets.get("fresh").await?.spec.template;
    let fingerprint = |dbc: &DatabaseCluster| {
        dbc.status
            .as_ref()
            .and_then(|s| s.password.as_ref())
            .and_then(|p| p.fingerprint.clone())
    };
    let before = fingerprint(&clusters.get("fresh").await?);
    set_password("fresh-password", b"nul\0byte").await?;
    let dbc = refused("fresh", "fresh-password", "holds a NUL byte").await?;
    let applied = crate::util::condition(&dbc, "PasswordApplied");
    ensure!(
        applied.is_some_and(|c| c.status == "False" && c.reason == "PasswordUnusable"),
        "PasswordApplied does not say the password was refused: {applied:?}"
    );
    ensure!(
        fingerprint(&dbc) == before,
        "the recorded password changed: {before:?} -> {:?}",
        fingerprint(&dbc)
    );
    ensure!(
        sets.get("fresh").await?.spec.template == template,
        "the pod template changed"
    );
    set_password("fresh-password", b"one line again").await?;
    crate::util::wait_running(ctx, &env, &ns, "fresh", 1, Duration::from_secs(90)).await?;
    ctx.note("line break and NUL in the password Secret: refused by condition and event, no StatefulSet for the new cluster, the running one untouched");
    Ok(())
}

/// Objects the operator did not create are never taken over: a user's own Service named like a
/// new cluster, and cluster `x`'s read-only Service `x-replicas` when a cluster `x-replicas` is
/// created. The second owner is refused with a condition and an event naming the object; the
/// object keeps its owner, selector and resourceVersion. Fake nodes.
pub async fn foreign_objects_are_never_taken_over(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("foreign").await?;
    ctx.retire_on_success(&ns);
    let services: Api<Service> = api(&env, &ns);
    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    env.cluster.apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: taken\n  namespace: {ns}\nspec:\n  selector:\n    app: mine\n  ports:\n    - port: 8080\n"
    ))?;
    let before = services.get("taken").await?;
    // Cluster `pair` first (it owns pair-replicas), then the two that would take over.
    crate::util::create_cluster(
        &env,
        &ns,
        &crate::util::Spec::postgresql("pair", 1, "pair-password"),
        "pw-one",
    )?;
    crate::util::wait_running(ctx, &env, &ns, "pair", 1, Duration::from_secs(90)).await?;
    let pair_replicas = services.get("pair-replicas").await?;
    for (name, secret) in [
        ("taken", "taken-password"),
        ("pair-replicas", "pair-replicas-password"),
    ] {
        crate::util::create_cluster(
            &env,
            &ns,
            &crate::util::Spec::postgresql(name, 1, secret),
            "pw-two",
        )?;
        ctx.relevant("databasecluster", &ns, name);
    }
    for (name, service) in [("taken", "taken"), ("pair-replicas", "pair-replicas")] {
        let wanted = format!("Service {ns}/{service} exists and is not this cluster's");
        degraded_with(&clusters, name, "refused", |c| {
            Ok(c.message.contains(&wanted))
        })
        .await?;
        let events = crate::util::events_about(&env, &ns, name).await?;
        ensure!(
            events.iter().any(|e| e.reason == "ObjectNotOwned"
                && e.type_ == "Warning"
                && e.note.contains(&wanted)),
            "no Warning event ObjectNotOwned about {name}: {:?}",
            events
                .iter()
                .map(|e| (&e.reason, &e.note))
                .collect::<Vec<_>>()
        );
    }
    // Untouched, including after a few more passes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = services.get("taken").await?;
    ensure!(
        after.metadata.resource_version == before.metadata.resource_version
            && after.metadata.owner_references.is_none()
            && after.spec == before.spec,
        "the user's Service was written: owners {:?}, selector {:?}",
        after.metadata.owner_references,
        after.spec.as_ref().and_then(|s| s.selector.clone())
    );
    let still = services.get("pair-replicas").await?;
    ensure!(
        still.metadata.resource_version == pair_replicas.metadata.resource_version
            && still.metadata.owner_references == pair_replicas.metadata.owner_references,
        "pair's read-only Service was written: owners {:?}",
        still.metadata.owner_references
    );
    let pair = clusters.get("pair").await?;
    ensure!(phase(&pair) == "Running", "pair: {}", describe(&pair));
    ctx.note("a user's Service and another cluster's Service of the same name: both refused with Degraded and ObjectNotOwned, neither written");
    Ok(())
}

/// Waits until cluster `name` is `Degraded` with a message that `matches` accepts, and returns it.
async fn degraded_with(
    clusters: &Api<DatabaseCluster>,
    name: &str,
    what: &str,
    matches: impl Fn(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> Result<bool>,
) -> Result<DatabaseCluster> {
    wait_for(
        &format!("{name} Degraded: {what}"),
        Duration::from_secs(60),
        async || {
            let dbc = clusters.get(name).await?;
            let degraded = crate::util::condition(&dbc, "Degraded").filter(|c| c.status == "True");
            Ok(match degraded {
                Some(c) if matches(c)? => Check::Done(dbc),
                _ => Check::Pending(describe(&dbc)),
            })
        },
    )
    .await
}
