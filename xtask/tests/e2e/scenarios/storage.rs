//! Storage growth (docs/reliability.md, docs/operations.md "Growing the storage"): a larger
//! `spec.storage.size` grows every member's claim with the servers running, once the claims'
//! StorageClass allows expansion; until then the condition and a Warning event name the class;
//! a smaller size is refused by the API server.
//!
//! The local control plane's volumes are kwok's (the process nodes keep the data in
//! directories), and no external resizer runs for them: the scenario plays the storage
//! provider's part as CSI's external-resizer would, growing each PersistentVolume and the
//! claim's `status.capacity` once the operator asked for the size. Everything the operator does
//! (watching the class and the claims, the request, the condition, the events) runs as in
//! production.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::{Ctx, Handed, lock};
use crate::scenarios::databases::{Engine, pod_ip};
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, primary_pod, rows_lost, running,
};
use crate::util::{Check, api, condition, describe, events_about, wait_for};

/// The size the example asks for (`examples/local/postgresql.yaml`) and the one it grows to.
const FROM: &str = "1Gi";
const TO: &str = "2Gi";
/// The longest write gap growing the volumes may cause: none is expected (nothing restarts);
/// this is the writer's own jitter on a loaded machine.
const GROWTH_WRITE_GAP: Duration = Duration::from_secs(2);

/// The StorageClass `name`'s `allowVolumeExpansion` set to `allow`.
async fn allow_expansion(env: &Env, class: &str, allow: bool) -> Result<()> {
    let classes: Api<StorageClass> = Api::all(env.client.clone());
    let patch = serde_json::json!({"allowVolumeExpansion": allow});
    classes
        .patch(class, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting allowVolumeExpansion {allow} on StorageClass {class}"))?;
    Ok(())
}

/// The cluster's member claims (`data-<name>-<ordinal>`), by name.
async fn claims(
    env: &Env,
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, PersistentVolumeClaim>> {
    let api: Api<PersistentVolumeClaim> = api(env, ns);
    let mut out = BTreeMap::new();
    for ordinal in 0..3 {
        let claim = format!("data-{name}-{ordinal}");
        out.insert(claim.clone(), api.get(&claim).await?);
    }
    Ok(out)
}

fn requested(claim: &PersistentVolumeClaim) -> String {
    claim
        .spec
        .as_ref()
        .and_then(|s| {
            s.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("storage")
                .cloned()
        })
        .map(|q| q.0)
        .unwrap_or_default()
}

/// What CSI's external-resizer and the kubelet would do once a claim asks for more: the volume
/// grows, then the claim's capacity.
async fn grow_like_a_resizer(env: &Env, ns: &str, claim: &PersistentVolumeClaim) -> Result<()> {
    let size = requested(claim);
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .context("a bound claim names its volume")?;
    let volumes: Api<PersistentVolume> = Api::all(env.client.clone());
    let patch = serde_json::json!({"spec": {"capacity": {"storage": size}}});
    volumes
        .patch(&volume, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let claims: Api<PersistentVolumeClaim> = api(env, ns);
    let status = serde_json::json!({"status": {"capacity": {"storage": size}}});
    claims
        .patch_status(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    Ok(())
}

/// Waits for the `StorageResized` condition with `reason`, and returns its message.
async fn resized_reason(env: &Env, ns: &str, name: &str, reason: &str) -> Result<String> {
    let clusters: Api<DatabaseCluster> = api(env, ns);
    wait_for(
        &format!("StorageResized {reason}"),
        Duration::from_secs(60),
        async || {
            let dbc = clusters.get(name).await?;
            Ok(match condition(&dbc, "StorageResized") {
                Some(c) if c.reason == reason => Check::Done(c.message.clone()),
                Some(c) => Check::Pending(format!("{} {}: {}", c.status, c.reason, c.message)),
                None => Check::Pending(format!("no StorageResized condition; {}", describe(&dbc))),
            })
        },
    )
    .await
}

/// Waits for an event `reason` of `type_` whose note contains `part`.
async fn event(
    env: &Env,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
    part: &str,
) -> Result<()> {
    wait_for(
        &format!("{type_} event {reason}"),
        Duration::from_secs(30),
        async || {
            let events = events_about(env, ns, name).await?;
            Ok(
                match events
                    .iter()
                    .find(|e| e.reason == reason && e.note.contains(part))
                {
                    Some(e) if e.type_ == type_ => Check::Done(()),
                    Some(e) => Check::Pending(format!("{} {}: {}", e.type_, e.reason, e.note)),
                    None => Check::Pending(format!(
                        "{} events, no {reason} naming {part}",
                        events.len()
                    )),
                },
            )
        },
    )
    .await
}

/// Each member pod's (uid, restarts of its containers), by name.
async fn incarnations(env: &Env, ns: &str, name: &str) -> Result<BTreeMap<String, (String, i32)>> {
    let pods: Api<Pod> = api(env, ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("database.example.com/cluster={name}")))
        .await?;
    Ok(list
        .items
        .iter()
        .map(|p| {
            let restarts = p
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .map(|c| c.restart_count)
                .sum();
            (p.name_any(), (p.uid().unwrap_or_default(), restarts))
        })
        .collect())
}

/// `spec.storage.size` grown on a running 3-member PostgreSQL cluster under a writer: while the
/// claims' StorageClass does not allow expansion nothing is asked of them and the condition and
/// a Warning event name the class; once it does, every claim is asked for the new size, the
/// volumes grow (the scenario plays the resizer), the condition turns True, no pod restarts, no
/// acknowledged row is lost; a smaller size is refused by the API server.
pub async fn postgresql_storage_growth_grows_every_claim(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) = running(ctx, engine, "grow-pg", DELAY_SECONDS).await?;
    let before = claims(&env, &ns, &name).await?;
    let class = before
        .values()
        .next()
        .and_then(|c| c.spec.as_ref()?.storage_class_name.clone())
        .context("the claims name their StorageClass")?;
    ensure!(
        before.values().all(|c| requested(c) == FROM),
        "the claims do not ask for {FROM}: {:?}",
        before.values().map(requested).collect::<Vec<_>>()
    );
    // The class as this scenario needs it first; set back whatever happens.
    allow_expansion(&env, &class, false).await?;
    let result = grow(ctx, &env, engine, (&ns, &name), &class, (&password, &root)).await;
    let restored = allow_expansion(&env, &class, true).await;
    result?;
    restored?;
    ctx.hand_over(engine.example_key(), Handed { ns, name });
    Ok(())
}

async fn grow(
    ctx: &Ctx,
    env: &std::sync::Arc<Env>,
    engine: Engine,
    (ns, name): (&str, &str),
    class: &str,
    (password, root): (&str, &std::path::PathBuf),
) -> Result<()> {
    let load = Load::start(engine, root.clone(), password.to_owned());
    let pods_task = follow_pods(env.clone(), ns.to_owned(), name.to_owned(), &load);
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let pods_before = incarnations(env, ns, name).await?;
        let clusters: Api<DatabaseCluster> = api(env, ns);
        let patch = serde_json::json!({"spec": {"storage": {"size": TO}}});
        clusters.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        let grown_at = Instant::now();
        ctx.step(format!("spec.storage.size {FROM} -> {TO}; StorageClass {class} without allowVolumeExpansion"));
        let message = resized_reason(env, ns, name, "ExpansionNotSupported").await?;
        ensure!(message.contains(&format!("StorageClass {class} does not set allowVolumeExpansion")), "{message}");
        event(env, ns, name, "Warning", "StorageResizeNotApplied", class).await?;
        let untouched = claims(env, ns, name).await?;
        ensure!(
            untouched.values().all(|c| requested(c) == FROM),
            "a claim was asked for more although its class does not allow it: {:?}",
            untouched.values().map(requested).collect::<Vec<_>>()
        );
        ctx.note(format!("class without expansion: ExpansionNotSupported {:.1}s after the change, claims untouched", grown_at.elapsed().as_secs_f64()));

        allow_expansion(env, class, true).await?;
        let allowed_at = Instant::now();
        let asked = wait_for("every claim asked for the new size", Duration::from_secs(60), async || {
            let now = claims(env, ns, name).await?;
            let sizes: Vec<String> = now.values().map(requested).collect();
            Ok(if sizes.iter().all(|s| s == TO) { Check::Done(now) } else { Check::Pending(format!("{sizes:?}")) })
        })
        .await?;
        ctx.note(format!("class allows expansion: every claim asks for {TO} {:.1}s later", allowed_at.elapsed().as_secs_f64()));
        resized_reason(env, ns, name, "Resizing").await?;
        event(env, ns, name, "Normal", "StorageExpanding", TO).await?;
        for claim in asked.values() {
            grow_like_a_resizer(env, ns, claim).await?;
        }
        let grown = Instant::now();
        let message = resized_reason(env, ns, name, "Resized").await?;
        ensure!(message.contains(TO), "{message}");
        event(env, ns, name, "Normal", "StorageResized", TO).await?;
        ctx.note(format!("volumes grown: StorageResized True {:.1}s later", grown.elapsed().as_secs_f64()));

        let pods_after = incarnations(env, ns, name).await?;
        ensure!(pods_after == pods_before, "members restarted while the volumes grew: before {pods_before:?}, after {pods_after:?}");
        let gap = lock(&load.writes).gap_after(grown_at);
        ensure!(gap <= GROWTH_WRITE_GAP, "write gap {:.1}s while the volumes grew", gap.as_secs_f64());
        let primary = primary_pod(env, ns, name).await?;
        let (acked, lost) = rows_lost(&load, engine, root, &pod_ip(&primary)?, password).await?;
        ensure!(lost.is_empty(), "{} acknowledged rows lost: {:?}", lost.len(), lost.iter().take(10).collect::<Vec<_>>());
        ctx.note(format!("storage growth: no pod restarted, write gap {:.1}s, {acked} rows acknowledged, none lost", gap.as_secs_f64()));

        // Never smaller: the API server refuses it and names the field.
        let shrink = serde_json::json!({"spec": {"storage": {"size": FROM}}});
        let refused = clusters.patch(name, &PatchParams::default(), &Patch::Merge(&shrink)).await;
        let refusal = match refused {
            Ok(_) => anyhow::bail!("spec.storage.size {TO} -> {FROM} was accepted"),
            Err(kube::Error::Api(status)) => status.message,
            Err(e) => e.to_string(),
        };
        ensure!(refusal.contains("spec.storage.size"), "the refusal does not name the field: {refusal}");
        ctx.note(format!("shrinking refused: {refusal}"));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}
