//! A cluster's life with the shared operator: creation from the seed manifest, scaling, a lost
//! pod, drift, a password change, deletion.

use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::{DatabaseCluster, FINALIZER, conditions};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::ListParams;
use xtask::cluster::workspace_root;

use crate::env::Env;
use crate::harness::Ctx;
use crate::util::{
    AuditCursor, Check, EventInfo, ROLE_LABEL, Recorder, Spec, api, condition, create_cluster,
    describe, describe_audit, events_about, kubectl, operator_events, owned, phase, ready_replicas,
    wait_for, wait_running,
};

const RUNNING_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a test watch may lag behind a GET that already saw the change.
const WATCH_CATCH_UP: Duration = Duration::from_secs(10);

/// The owner reference is exactly one controller reference to the cluster (by uid).
fn check_owner(what: &str, meta: &ObjectMeta, dbc: &DatabaseCluster) -> Result<()> {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    ensure!(
        refs.len() == 1,
        "{what} should have exactly one owner reference, has {refs:?}"
    );
    let r = &refs[0];
    ensure!(
        r.kind == "DatabaseCluster"
            && r.api_version == "database.example.com/v1alpha1"
            && Some(&r.name) == dbc.metadata.name.as_ref()
            && Some(&r.uid) == dbc.metadata.uid.as_ref()
            && r.controller == Some(true),
        "{what}: owner reference {r:?} does not point at DatabaseCluster {} (uid {:?}) as controller",
        dbc.name_any(),
        dbc.metadata.uid
    );
    Ok(())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn role(pod: &Pod) -> Option<&str> {
    pod.labels().get(ROLE_LABEL).map(String::as_str)
}

/// Exactly `replicas` member pods `<name>-0..`, all Ready, exactly one labelled primary.
async fn check_members(env: &Env, namespace: &str, name: &str, replicas: i32) -> Result<()> {
    let pods: Vec<Pod> = owned(env, namespace, name).await?;
    let names: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();
    let want: BTreeSet<String> = (0..replicas).map(|i| format!("{name}-{i}")).collect();
    ensure!(
        names == want,
        "pods of {name}: {names:?}, expected {want:?}"
    );
    let not_ready: Vec<String> = pods
        .iter()
        .filter(|p| !pod_ready(p))
        .map(|p| p.name_any())
        .collect();
    ensure!(not_ready.is_empty(), "pods not Ready: {not_ready:?}");
    let primaries: Vec<String> = pods
        .iter()
        .filter(|p| role(p) == Some("primary"))
        .map(|p| p.name_any())
        .collect();
    ensure!(
        primaries.len() == 1,
        "exactly one pod of {name} should be labelled primary: {primaries:?}"
    );
    Ok(())
}

/// The StatefulSet's `spec.replicas`.
async fn sts_replicas(env: &Env, namespace: &str, name: &str) -> Result<i32> {
    let sts = api::<StatefulSet>(env, namespace).get(name).await?;
    Ok(sts.spec.replicas.unwrap_or(1))
}

async fn pvc_names(env: &Env, namespace: &str) -> Result<BTreeSet<String>> {
    Ok(api::<PersistentVolumeClaim>(env, namespace)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect())
}

/// (Scenario 1) The seed manifest: every owned object with its owner reference, pods Ready, status
/// Running with readyReplicas 3, primaryPod and Ready=True, and the printer columns.
pub async fn seed_manifest_creates_everything(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("seed").await?;
    let name = "my-mysql";
    let manifest = fs::read_to_string(workspace_root().join("examples").join("mysql.yaml"))?;
    ensure!(
        manifest.matches("namespace: default").count() == 2,
        "examples/mysql.yaml no longer has the Secret and the cluster in namespace default"
    );
    env.cluster
        .apply(&manifest.replace("namespace: default", &format!("namespace: {ns}")))?;
    ctx.step(format!("applied examples/mysql.yaml in {ns}"));
    let started = Instant::now();
    let dbc = wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    ctx.note(format!(
        "seed manifest Running with 3/3 ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    ));
    ctx.relevant("statefulset", &ns, name);

    let status = dbc.status.clone().context("no status")?;
    let primary = status
        .primary_pod
        .clone()
        .context("status.primaryPod is not set")?;
    ensure!(
        status.current_version.as_deref() == Some(dbc.spec.version.as_str()),
        "status.currentVersion is {:?}, the example asks for {}",
        status.current_version,
        dbc.spec.version
    );
    ensure!(
        status.next_backup_time.is_some(),
        "status.nextBackupTime is not set although backups are configured"
    );
    let ready = condition(&dbc, conditions::READY).context("no Ready condition")?;
    ensure!(
        ready.status == "True"
            && ready.reason == conditions::reasons::ALL_REPLICAS_READY
            && ready.observed_generation == dbc.metadata.generation,
        "Ready condition: {ready:?} (generation {:?})",
        dbc.metadata.generation
    );
    let degraded = condition(&dbc, conditions::DEGRADED).context("no Degraded condition")?;
    ensure!(
        degraded.status == "False",
        "Degraded condition: {degraded:?}"
    );
    ensure!(
        dbc.finalizers().iter().any(|f| f == FINALIZER),
        "finalizer {FINALIZER} missing: {:?}",
        dbc.finalizers()
    );

    // Owned objects: exactly these, each controlled by the cluster.
    let sts = api::<StatefulSet>(&env, &ns).get(name).await?;
    check_owner("StatefulSet my-mysql", &sts.metadata, &dbc)?;
    let spec = &sts.spec;
    ensure!(
        spec.replicas == Some(3),
        "StatefulSet replicas {:?}",
        spec.replicas
    );
    ensure!(
        spec.service_name.as_deref() == Some("my-mysql-headless"),
        "governing Service {:?}",
        spec.service_name
    );
    let claim = spec
        .volume_claim_templates
        .as_deref()
        .and_then(|t| t.first())
        .context("no volumeClaimTemplate")?;
    let claim_spec = claim
        .spec
        .as_ref()
        .context("volumeClaimTemplate without spec")?;
    ensure!(
        claim_spec.storage_class_name.as_deref() == Some("fast-ssd"),
        "volume class {:?}",
        claim_spec.storage_class_name
    );
    let services = api::<Service>(&env, &ns);
    for (svc, selects) in [
        ("my-mysql", Some("primary")),
        ("my-mysql-replicas", Some("replica")),
        ("my-mysql-headless", None),
    ] {
        let s = services.get(svc).await?;
        check_owner(&format!("Service {svc}"), &s.metadata, &dbc)?;
        let spec = s.spec.context("Service without spec")?;
        let role = spec
            .selector
            .as_ref()
            .and_then(|sel| sel.get(ROLE_LABEL))
            .map(String::as_str);
        ensure!(
            role == selects,
            "Service {svc} selects role {role:?}, expected {selects:?}"
        );
        if selects.is_none() {
            ensure!(
                spec.cluster_ip.as_deref() == Some("None"),
                "{svc} is not headless: clusterIP {:?}",
                spec.cluster_ip
            );
        }
    }
    let cm = api::<ConfigMap>(&env, &ns).get("my-mysql-config").await?;
    check_owner("ConfigMap my-mysql-config", &cm.metadata, &dbc)?;
    let cron = api::<CronJob>(&env, &ns).get("my-mysql-backup").await?;
    check_owner("CronJob my-mysql-backup", &cron.metadata, &dbc)?;
    ensure!(
        cron.spec.schedule == "0 2 * * *",
        "CronJob schedule {:?}",
        cron.spec.schedule
    );
    let pdb = api::<PodDisruptionBudget>(&env, &ns).get(name).await?;
    check_owner("PodDisruptionBudget my-mysql", &pdb.metadata, &dbc)?;
    network_policy_follows_the_spec(ctx, &env, &ns, &dbc).await?;
    let counts = (
        owned::<StatefulSet>(&env, &ns, name).await?.len(),
        owned::<Service>(&env, &ns, name).await?.len(),
        owned::<ConfigMap>(&env, &ns, name).await?.len(),
        owned::<CronJob>(&env, &ns, name).await?.len(),
        owned::<PodDisruptionBudget>(&env, &ns, name).await?.len(),
    );
    ensure!(
        counts == (1, 3, 1, 1, 1),
        "objects labelled for my-mysql (sts, svc, cm, cronjob, pdb): {counts:?}, expected (1, 3, 1, 1, 1)"
    );

    // Pods and volumes.
    check_members(&env, &ns, name, 3).await?;
    let primary_pod = api::<Pod>(&env, &ns).get(&primary).await?;
    ensure!(
        role(&primary_pod) == Some("primary"),
        "status.primaryPod {primary} is labelled {:?}",
        role(&primary_pod)
    );
    let pvcs = api::<PersistentVolumeClaim>(&env, &ns)
        .list(&ListParams::default())
        .await?
        .items;
    let bound: BTreeSet<String> = pvcs
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
                == Some("fast-ssd")
        })
        .map(|p| p.name_any())
        .collect();
    let want: BTreeSet<String> = (0..3).map(|i| format!("data-my-mysql-{i}")).collect();
    ensure!(
        bound == want,
        "Bound fast-ssd PVCs {bound:?}, expected {want:?}"
    );

    // What `kubectl get dbc` prints.
    let table = env.cluster.kubectl_output(&["get", "dbc", "-n", &ns])?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    ensure!(
        header == ["NAME", "ENGINE", "REPLICAS", "READY", "PHASE", "AGE"],
        "kubectl get dbc columns: {header:?}"
    );
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    ensure!(
        row.get(..5) == Some(&["my-mysql", "mysql", "3", "3", "Running"][..]),
        "kubectl get dbc row: {row:?}"
    );
    ctx.step(format!("kubectl get dbc:\n{}", table.trim_end()));

    // A normal creation is nothing to act on: no Warning events (docs: "Warning only for
    // something to act on").
    let events = events_about(&env, &ns, name).await?;
    let reasons: Vec<String> = events
        .iter()
        .filter(|e| e.reporter == "database-operator")
        .map(|e| format!("{} {}", e.type_, e.reason))
        .collect();
    ctx.step(format!("the operator's events: {reasons:?}"));
    let warnings: Vec<&EventInfo> = events
        .iter()
        .filter(|e| e.reporter == "database-operator" && e.type_ == "Warning")
        .collect();
    ensure!(
        warnings.is_empty(),
        "a normal creation produced Warning events: {warnings:?}"
    );
    Ok(())
}

/// The NetworkPolicy `my-mysql-access` as the API server stored it: the database port from the
/// namespace and the operator's namespace; `enabled: false` deletes it, `allowFrom` widens it.
async fn network_policy_follows_the_spec(
    ctx: &Ctx,
    env: &Env,
    ns: &str,
    dbc: &DatabaseCluster,
) -> Result<()> {
    let name = dbc.name_any();
    let policies = api::<NetworkPolicy>(env, ns);
    let policy_name = format!("{name}-access");
    let policy = policies.get(&policy_name).await?;
    check_owner("NetworkPolicy my-mysql-access", &policy.metadata, dbc)?;
    let stored = serde_json::to_value(&policy.spec)?;
    ensure!(
        stored["policyTypes"] == serde_json::json!(["Ingress"])
            && stored["ingress"][0]["ports"]
                == serde_json::json!([{"port": 3306, "protocol": "TCP"}])
            && stored["ingress"][0]["from"]
                == serde_json::json!([
                    {"podSelector": {}},
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "database-operator-system"}}}
                ])
            && stored["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "database",
        "NetworkPolicy my-mysql: {stored}"
    );
    let patch = |body: &str| {
        kubectl(
            env,
            &[
                "patch",
                "databasecluster",
                &name,
                "-n",
                ns,
                "--type=merge",
                "-p",
                body,
            ],
            None,
        )
    };
    let out = patch(r#"{"spec":{"networkPolicy":{"enabled":false}}}"#)?;
    ensure!(out.ok, "disabling the NetworkPolicy: {}", out.stderr);
    wait_for(
        "the NetworkPolicy to be deleted",
        WATCH_CATCH_UP,
        async || {
            Ok(match policies.get_opt(&policy_name).await? {
                None => Check::Done(()),
                Some(_) => Check::Pending("still there".to_owned()),
            })
        },
    )
    .await?;
    let out = patch(
        r#"{"spec":{"networkPolicy":{"enabled":true,"allowFrom":[{"namespaceSelector":{"matchLabels":{"team":"web"}}}]}}}"#,
    )?;
    ensure!(out.ok, "widening the NetworkPolicy: {}", out.stderr);
    wait_for(
        "the NetworkPolicy with allowFrom",
        WATCH_CATCH_UP,
        async || {
            let from = policies
                .get_opt(&policy_name)
                .await?
                .and_then(|p| p.spec)
                .and_then(|s| s.ingress)
                .and_then(|i| i.into_iter().next())
                .and_then(|r| r.from)
                .unwrap_or_default();
            Ok(if from.len() == 3 {
                Check::Done(())
            } else {
                Check::Pending(format!("{} sources", from.len()))
            })
        },
    )
    .await?;
    ctx.step("NetworkPolicy: the database port from the namespace and the operator's; removed with enabled: false, widened by allowFrom");
    Ok(())
}

/// (Scenario 3) Scale 3 → 5 → 3: the StatefulSet follows, the volumes of the removed members stay, the
/// scale-down is reported.
pub async fn scale_up_and_down_keeps_volumes(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("scale").await?;
    let name = "scaled";
    create_cluster(
        &env,
        &ns,
        &Spec::mysql(name, 3, "scaled-password"),
        "pw-one",
    )?;
    wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    ctx.relevant("statefulset", &ns, name);

    let patch = |n: i32| {
        kubectl(
            &env,
            &[
                "patch",
                "databasecluster",
                name,
                "-n",
                &ns,
                "--type=merge",
                "-p",
                &format!("{{\"spec\":{{\"replicas\":{n}}}}}"),
            ],
            None,
        )
    };
    let out = patch(5)?;
    ensure!(out.ok, "scaling to 5 failed: {}", out.stderr);
    wait_running(ctx, &env, &ns, name, 5, RUNNING_TIMEOUT).await?;
    ensure!(
        sts_replicas(&env, &ns, name).await? == 5,
        "StatefulSet not at 5"
    );
    check_members(&env, &ns, name, 5).await?;
    let pvcs = pvc_names(&env, &ns).await?;
    ensure!(pvcs.len() == 5, "PVCs after scaling up: {pvcs:?}");

    let out = patch(3)?;
    ensure!(out.ok, "scaling to 3 failed: {}", out.stderr);
    ctx.step(format!(
        "scaled down to 3 (kubectl said: {}{})",
        out.stdout.trim(),
        if out.stderr.trim().is_empty() {
            String::new()
        } else {
            format!("; {}", out.stderr.trim())
        }
    ));
    wait_for(
        "the StatefulSet and its pods to go back to 3",
        Duration::from_secs(60),
        async || {
            let replicas = sts_replicas(&env, &ns, name).await?;
            let pods = owned::<Pod>(&env, &ns, name).await?.len();
            Ok(if replicas == 3 && pods == 3 {
                Check::Done(())
            } else {
                Check::Pending(format!("StatefulSet replicas {replicas}, {pods} pods"))
            })
        },
    )
    .await?;
    wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    check_members(&env, &ns, name, 3).await?;
    let pvcs = pvc_names(&env, &ns).await?;
    let want: BTreeSet<String> = (0..5).map(|i| format!("data-{name}-{i}")).collect();
    ensure!(
        pvcs == want,
        "after scaling back to 3 the PVCs are {pvcs:?}; all 5 should be kept"
    );

    let scaled_up = operator_events(&env, &ns, name, "ScaledUp").await?;
    ensure!(
        scaled_up.iter().any(|e| e.note.contains("from 3 to 5")),
        "no ScaledUp event from 3 to 5: {scaled_up:?}"
    );
    let scaled_down = wait_for(
        "the operator's ScaledDown event",
        Duration::from_secs(10),
        async || {
            let events = operator_events(&env, &ns, name, "ScaledDown").await?;
            Ok(
                match events.into_iter().find(|e| e.note.contains("from 5 to 3")) {
                    Some(e) => Check::Done(e),
                    None => Check::Pending("no ScaledDown event from 5 to 3".into()),
                },
            )
        },
    )
    .await?;
    ensure!(
        scaled_down.note.contains("kept"),
        "the ScaledDown event does not say the volumes are kept: {:?}",
        scaled_down.note
    );
    ctx.note(format!(
        "scale-down reported as {} event ScaledDown: {:?} (the webhook's warning is checked in admission::webhook_by_url_denies_unsupported_version)",
        scaled_down.type_, scaled_down.note
    ));
    Ok(())
}

/// Cordons every node until dropped, so that a replacement pod stays Pending.
struct Cordon<'a> {
    env: &'a Env,
    nodes: Vec<String>,
}

impl<'a> Cordon<'a> {
    fn all(env: &'a Env) -> Result<Self> {
        let nodes: Vec<String> = env
            .cluster
            .kubectl_output(&["get", "nodes", "-o", "name"])?
            .lines()
            .map(str::to_string)
            .collect();
        ensure!(!nodes.is_empty(), "no nodes");
        let mut args = vec!["cordon"];
        args.extend(nodes.iter().map(String::as_str));
        env.cluster.kubectl_output(&args)?;
        Ok(Self { env, nodes })
    }

    fn release(&mut self) -> Result<()> {
        if self.nodes.is_empty() {
            return Ok(());
        }
        let mut args = vec!["uncordon"];
        args.extend(self.nodes.iter().map(String::as_str));
        self.env.cluster.kubectl_output(&args)?;
        self.nodes.clear();
        Ok(())
    }
}

impl Drop for Cordon<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            eprintln!("uncordoning the nodes: {e:#}");
        }
    }
}

/// (Scenario 4) A member pod is deleted: the cluster reports Degraded (2/3 ready) while it cannot come
/// back, then Running again once it does. The nodes are cordoned meanwhile so that kwok does
/// not bring the replacement up within milliseconds.
pub async fn deleted_pod_degrades_then_recovers(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("pod").await?;
    let name = "wounded";
    create_cluster(&env, &ns, &Spec::mysql(name, 3, "wounded-password"), "pw")?;
    let dbc = wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    let primary = dbc
        .status
        .as_ref()
        .and_then(|s| s.primary_pod.clone())
        .context("no primary")?;
    let victim = (0..3)
        .map(|i| format!("{name}-{i}"))
        .find(|p| *p != primary)
        .context("no replica")?;
    let pods = api::<Pod>(&env, &ns);
    let old_uid = pods.get(&victim).await?.uid();

    let recorder = Recorder::start(&env, &ns, name).await?;
    let mut cordon = Cordon::all(&env)?;
    ctx.step(format!(
        "cordoned the nodes; deleting replica pod {victim} (primary is {primary})"
    ));
    env.cluster
        .kubectl_output(&["delete", "pod", &victim, "-n", &ns, "--wait=false"])?;
    let dbcs = api::<DatabaseCluster>(&env, &ns);
    let degraded = wait_for(
        &format!("{name} to report Degraded with 2/3 ready"),
        Duration::from_secs(30),
        async || {
            let dbc = dbcs.get(name).await?;
            let cond = condition(&dbc, conditions::DEGRADED).filter(|c| c.status == "True");
            Ok(match cond {
                Some(c) if phase(&dbc) == "Degraded" && ready_replicas(&dbc) == 2 => {
                    Check::Done(c.clone())
                }
                _ => Check::Pending(describe(&dbc)),
            })
        },
    )
    .await?;
    ensure!(
        degraded.reason == conditions::reasons::INSUFFICIENT_REPLICAS
            && degraded.message.contains("2/3"),
        "Degraded condition: {} {:?}",
        degraded.reason,
        degraded.message
    );
    let ready = condition(&dbcs.get(name).await?, conditions::READY)
        .map(|c| c.status.clone())
        .unwrap_or_default();
    ensure!(
        ready == "False",
        "Ready should be False while degraded, is {ready:?}"
    );
    ctx.step(format!(
        "Degraded: {} ({})",
        degraded.reason, degraded.message
    ));

    cordon.release()?;
    ctx.step("uncordoned the nodes");
    wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    let new_uid = pods.get(&victim).await?.uid();
    ensure!(
        new_uid.is_some() && new_uid != old_uid,
        "{victim} was not replaced (uid {old_uid:?} -> {new_uid:?})"
    );
    check_members(&env, &ns, name, 3).await?;
    let seen = recorder
        .wait_until(
            "the watch to see Running after Degraded",
            WATCH_CATCH_UP,
            |seen| {
                seen.iter()
                    .position(|s| s.phase == "Degraded")
                    .is_some_and(|at| seen[at..].iter().any(|s| s.phase == "Running"))
            },
        )
        .await?;
    ensure!(
        seen.iter().any(|s| s.phase == "Degraded"),
        "the watch never saw Degraded:{}",
        recorder.history()
    );
    ctx.step(format!("states seen:{}", recorder.history()));
    Ok(())
}

/// (Scenario 5) Someone scales the StatefulSet by hand: the operator puts the replicas back.
pub async fn hand_edited_replicas_are_put_back(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("drift").await?;
    let name = "drifted";
    create_cluster(&env, &ns, &Spec::mysql(name, 3, "drifted-password"), "pw")?;
    wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    ctx.relevant("statefulset", &ns, name);

    let cursor = AuditCursor::now(&env)?;
    let started = Instant::now();
    env.cluster
        .kubectl_output(&["scale", "statefulset", name, "-n", &ns, "--replicas=1"])?;
    ctx.step("kubectl scale statefulset drifted --replicas=1");
    let fixed = wait_for(
        "the operator to write the StatefulSet back to 3 replicas",
        Duration::from_secs(30),
        async || {
            let events = cursor.events()?;
            let scaled = events.iter().position(|e| {
                e.is_write()
                    && e.user == "kubernetes-admin"
                    && e.resource == "statefulsets"
                    && e.name == name
            });
            let Some(scaled) = scaled else {
                return Ok(Check::Pending("the audit log has no hand edit yet".into()));
            };
            let fix = events[scaled..].iter().find(|e| {
                e.is_write()
                    && e.user == crate::env::OPERATOR_USER
                    && e.resource == "statefulsets"
                    && e.subresource.is_empty()
                    && e.name == name
            });
            let replicas = sts_replicas(&env, &ns, name).await?;
            Ok(match fix {
                Some(fix) if replicas == 3 => Check::Done(describe_audit(fix)),
                _ => Check::Pending(format!(
                    "hand edit {}, operator write {:?}, StatefulSet replicas {replicas}",
                    describe_audit(&events[scaled]),
                    fix.map(describe_audit)
                )),
            })
        },
    )
    .await?;
    let took = started.elapsed().as_secs_f64();
    wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    check_members(&env, &ns, name, 3).await?;
    ctx.note(format!(
        "hand edit to 1 replica put back to 3 within {took:.1}s (operator write: {fixed})"
    ));
    Ok(())
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.uid()).collect()
}

/// (Scenario 6) The password Secret of one cluster changes: no pod of either cluster restarts;
/// the changed cluster records the new value as pending in `status.password` (the operator
/// applies it inside the database, on the primary) and says so with a `PasswordChanged` event;
/// the other cluster is untouched.
pub async fn secret_change_restarts_nothing(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("secret").await?;
    let alpha = Spec::mysql("alpha", 2, "alpha-password");
    let beta = Spec::postgresql("beta", 2, "beta-password");
    create_cluster(&env, &ns, &alpha, "alpha-one")?;
    create_cluster(&env, &ns, &beta, "beta-one")?;
    wait_running(ctx, &env, &ns, "alpha", 2, RUNNING_TIMEOUT).await?;
    wait_running(ctx, &env, &ns, "beta", 2, RUNNING_TIMEOUT).await?;
    ctx.relevant("statefulset", &ns, "alpha");
    ctx.relevant("statefulset", &ns, "beta");
    let sets = api::<StatefulSet>(&env, &ns);
    let clusters = api::<DatabaseCluster>(&env, &ns);
    // beta's StatefulSet settled: its controller has nothing left to write.
    let beta_before = wait_for(
        "beta's StatefulSet to settle",
        Duration::from_secs(30),
        async || {
            let sts = sets.get("beta").await?;
            let status = sts.status.clone().unwrap_or_default();
            let settled = status.observed_generation == sts.metadata.generation
                && status.ready_replicas == Some(2)
                && status.updated_replicas == Some(2)
                && status.current_revision.is_some()
                && status.current_revision == status.update_revision;
            Ok(if settled {
                Check::Done(sts)
            } else {
                Check::Pending(format!("{status:?}"))
            })
        },
    )
    .await?;
    let beta_pods = uids(&owned::<Pod>(&env, &ns, "beta").await?);
    let alpha_before = sets.get("alpha").await?;
    let alpha_pods = uids(&owned::<Pod>(&env, &ns, "alpha").await?);
    let recorded = |c: &DatabaseCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.password.clone())
            .unwrap_or_default()
    };
    let initial = recorded(&clusters.get("alpha").await?)
        .fingerprint
        .context("alpha's status records no password fingerprint after initialization")?;

    let cursor = AuditCursor::now(&env)?;
    env.cluster.apply(&crate::util::secret_manifest(
        &ns,
        "alpha-password",
        "alpha-two",
    ))?;
    ctx.step("changed the password in Secret alpha-password");
    let pending = wait_for(
        "alpha's status to show the new password as pending or applied",
        Duration::from_secs(30),
        async || {
            let status = recorded(&clusters.get("alpha").await?);
            let new = status
                .pending
                .clone()
                .or(status.fingerprint.clone().filter(|fp| *fp != initial));
            Ok(match new {
                Some(fp) => Check::Done(fp),
                None => Check::Pending(format!("{status:?}")),
            })
        },
    )
    .await?;
    ensure!(
        pending != initial && !pending.contains("alpha-two"),
        "the status holds the password or an unchanged fingerprint: {pending}"
    );
    let alpha_status = clusters.get("alpha").await?.status.unwrap_or_default();
    let applied = alpha_status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::PASSWORD_APPLIED)
        .context("alpha has no PasswordApplied condition")?;
    ensure!(
        applied.message.contains("alpha-password") && !applied.message.contains("alpha-two"),
        "PasswordApplied does not name the Secret, or shows the password: {}",
        applied.message
    );
    // Give a roll the time it would take: none may happen.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let alpha_after = sets.get("alpha").await?;
    ensure!(
        alpha_after.spec.template == alpha_before.spec.template,
        "alpha's pod template changed on a password change"
    );
    let alpha_pods_after = uids(&owned::<Pod>(&env, &ns, "alpha").await?);
    ensure!(alpha_pods_after == alpha_pods, "alpha's pods were replaced");

    let changed = operator_events(&env, &ns, "alpha", "PasswordChanged").await?;
    ensure!(!changed.is_empty(), "no PasswordChanged event for alpha");
    ensure!(
        operator_events(&env, &ns, "beta", "PasswordChanged")
            .await?
            .is_empty(),
        "beta got a PasswordChanged event"
    );
    let beta_after = sets.get("beta").await?;
    ensure!(
        beta_after.metadata.resource_version == beta_before.metadata.resource_version,
        "beta's StatefulSet changed (resourceVersion {:?} -> {:?})",
        beta_before.metadata.resource_version,
        beta_after.metadata.resource_version
    );
    let beta_pods_after = uids(&owned::<Pod>(&env, &ns, "beta").await?);
    ensure!(beta_pods_after == beta_pods, "beta's pods were replaced");
    let writes = cursor.operator_writes()?;
    let on_beta: Vec<String> = writes
        .iter()
        .filter(|e| e.namespace == ns && e.name.starts_with("beta"))
        .map(describe_audit)
        .collect();
    ensure!(
        on_beta.is_empty(),
        "the operator wrote to beta's objects:\n  {}",
        on_beta.join("\n  ")
    );
    ensure!(
        !writes
            .iter()
            .any(|e| e.resource == "statefulsets" && e.name == "alpha"),
        "the operator wrote alpha's StatefulSet on a password change"
    );
    ctx.note(format!(
        "password change: alpha's status shows fingerprint {pending} (PasswordApplied {} {}), no pod restarted; beta untouched (StatefulSet resourceVersion {}, 0 operator writes)",
        applied.status,
        applied.reason,
        beta_after.metadata.resource_version.unwrap_or_default()
    ));
    Ok(())
}

/// (Scenario 7) Deleting a cluster: phase Deleting, the finalizer goes, owned objects are garbage
/// collected, the PersistentVolumeClaims stay.
pub async fn delete_runs_finalizer_and_keeps_volumes(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("delete").await?;
    let name = "doomed";
    create_cluster(&env, &ns, &Spec::mysql(name, 3, "doomed-password"), "pw")?;
    wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    let pvcs_before = pvc_names(&env, &ns).await?;
    ensure!(pvcs_before.len() == 3, "PVCs {pvcs_before:?}");

    let recorder = Recorder::start(&env, &ns, name).await?;
    let cursor = AuditCursor::now(&env)?;
    let started = Instant::now();
    env.cluster
        .kubectl_output(&["delete", "databasecluster", name, "-n", &ns, "--wait=false"])?;
    ctx.step("kubectl delete databasecluster doomed");
    let dbcs = api::<DatabaseCluster>(&env, &ns);
    wait_for(
        "the DatabaseCluster to be gone",
        Duration::from_secs(60),
        async || {
            Ok(match dbcs.get_opt(name).await? {
                None => Check::Done(()),
                Some(d) => {
                    Check::Pending(format!("{}; finalizers {:?}", describe(&d), d.finalizers()))
                }
            })
        },
    )
    .await?;
    let gone_in = started.elapsed().as_secs_f64();
    let seen = recorder
        .wait_until("the watch to see the deletion", WATCH_CATCH_UP, |seen| {
            seen.last().is_some_and(|s| s.gone)
        })
        .await?;
    ensure!(
        seen.iter().any(|s| s.phase == "Deleting"
            && s.deleting
            && s.finalizers.iter().any(|f| f == FINALIZER)),
        "the watch never saw phase Deleting with the finalizer still on:{}",
        recorder.history()
    );
    let writes = cursor.operator_writes()?;
    let on_cluster: Vec<String> = writes
        .iter()
        .filter(|e| e.resource == "databaseclusters" && e.name == name)
        .map(describe_audit)
        .collect();
    ensure!(
        writes.iter().any(|e| e.resource == "databaseclusters"
            && e.subresource.is_empty()
            && e.verb == "patch"
            && e.name == name),
        "no finalizer removal (patch databaseclusters {name}) by the operator in the audit log; its writes on the cluster: {on_cluster:?}"
    );
    for reason in ["ClusterDeleting", "BackupsRetained"] {
        let events = operator_events(&env, &ns, name, reason).await?;
        ensure!(!events.is_empty(), "no {reason} event");
    }

    wait_for(
        "the owned objects to be garbage-collected",
        Duration::from_secs(60),
        async || {
            let left = (
                owned::<StatefulSet>(&env, &ns, name).await?.len(),
                owned::<Service>(&env, &ns, name).await?.len(),
                owned::<ConfigMap>(&env, &ns, name).await?.len(),
                owned::<CronJob>(&env, &ns, name).await?.len(),
                owned::<PodDisruptionBudget>(&env, &ns, name).await?.len(),
                owned::<Pod>(&env, &ns, name).await?.len(),
            );
            Ok(if left == (0, 0, 0, 0, 0, 0) {
                Check::Done(())
            } else {
                Check::Pending(format!("left (sts, svc, cm, cronjob, pdb, pods): {left:?}"))
            })
        },
    )
    .await?;
    let pvcs = api::<PersistentVolumeClaim>(&env, &ns)
        .list(&ListParams::default())
        .await?
        .items;
    let kept: BTreeSet<String> = pvcs
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    ensure!(
        kept == pvcs_before,
        "PVCs after deletion: {kept:?}, expected all of {pvcs_before:?} kept"
    );
    ctx.note(format!(
        "deleted in {gone_in:.1}s (states:{}); owned objects collected, {} PVCs kept",
        recorder
            .seen()
            .iter()
            .map(|s| format!(" [{s}]"))
            .collect::<String>(),
        kept.len()
    ));
    Ok(())
}
