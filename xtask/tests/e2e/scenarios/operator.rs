//! The operator as a process: steady state without writes, a crash mid-reconcile, leader
//! election between two replicas.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use database_operator_api::{DatabaseCluster, FINALIZER};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use xtask::cluster::workspace_root;

use crate::env::{Env, OPERATOR_USER, Operator};
use crate::harness::Ctx;
use crate::util::{
    AuditCursor, Check, ROLE_LABEL, Spec, api, create_cluster, describe_audit, no_writes, owned,
    secret_manifest, wait_for, wait_running,
};

const RUNNING_TIMEOUT: Duration = Duration::from_secs(90);
const RECONCILES: &str = "controller_runtime_reconcile_total";

/// (Scenario 8) With three Running clusters (and whatever earlier scenarios left Running), the operator
/// writes nothing for a minute, as the API server's audit log records it; it keeps reconciling
/// (resync every 30 s) meanwhile.
pub async fn quiet_minute(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("quiet").await?;
    let clusters = [
        (Spec::mysql("quiet-mysql", 3, "quiet-mysql-password"), 3),
        (
            Spec::postgresql("quiet-postgres", 2, "quiet-postgres-password"),
            2,
        ),
        (Spec::mysql("quiet-single", 1, "quiet-single-password"), 1),
    ];
    for (spec, _) in &clusters {
        create_cluster(&env, &ns, spec, "pw")?;
    }
    for (spec, replicas) in &clusters {
        wait_running(ctx, &env, &ns, spec.name, *replicas, RUNNING_TIMEOUT).await?;
    }
    let all = Api::<DatabaseCluster>::all(env.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let phases: BTreeMap<String, usize> = all.iter().fold(BTreeMap::new(), |mut m, d| {
        *m.entry(crate::util::phase(d).to_string()).or_default() += 1;
        m
    });
    ctx.step(format!(
        "{} DatabaseClusters in the cluster, by phase: {phases:?}",
        all.len()
    ));

    // At 02:00 UTC the clusters' nextBackupTime moves on, which is a legitimate status write:
    // keep the measured minute clear of it.
    let utc = Timestamp::now().to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    let minute_of_day = i32::from(utc.hour()) * 60 + i32::from(utc.minute());
    if (118..=121).contains(&minute_of_day) {
        let wait = Duration::from_secs(((122 - minute_of_day) * 60) as u64);
        ctx.step(format!(
            "{utc}: waiting {}s so that the measurement does not include the 02:00 UTC backup time",
            wait.as_secs()
        ));
        tokio::time::sleep(wait).await;
    }
    // Let the last status writes of the start land, then measure.
    let settle = Duration::from_secs(5);
    wait_for(
        "the operator to make no write for 5s before the measurement",
        Duration::from_secs(60),
        async || {
            let recent = AuditCursor::since(&env, Timestamp::now() - settle)?.operator_writes()?;
            Ok(if recent.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!(
                    "{} writes in the last 5s, the last: {}",
                    recent.len(),
                    recent.last().map(describe_audit).unwrap_or_default()
                ))
            })
        },
    )
    .await?;
    let reconciles_before = env.main_operator_metric(RECONCILES)?;
    let cursor = AuditCursor::now(&env)?;
    let minute = Duration::from_secs(60);
    let started = Instant::now();
    ctx.step("measuring for 60s");
    while started.elapsed() < minute {
        tokio::time::sleep(Duration::from_secs(15).min(minute.saturating_sub(started.elapsed())))
            .await;
        let so_far = cursor.operator_writes()?.len();
        ctx.step(format!(
            "{:.0}s: {so_far} writes by {OPERATOR_USER} so far",
            started.elapsed().as_secs_f64()
        ));
    }
    let events: Vec<_> = cursor
        .events()?
        .into_iter()
        .filter(|e| e.user == OPERATOR_USER)
        .collect();
    let writes: Vec<_> = events.iter().filter(|e| e.is_write()).cloned().collect();
    let lease_writes = writes.iter().filter(|e| e.resource == "leases").count();
    let mut reads: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| !e.is_write()) {
        *reads
            .entry(format!("{} {}", e.verb, e.resource))
            .or_default() += 1;
    }
    let reconciles = env.main_operator_metric(RECONCILES)? - reconciles_before;
    no_writes(&writes, "during the quiet minute")?;
    ensure!(
        reconciles >= clusters.len() as f64,
        "only {reconciles} reconciles in 60s: the operator should have looked at each of the {} clusters at least once (resync 30s)",
        clusters.len()
    );
    let reads = if reads.is_empty() {
        "no other request either (its watches stayed open)".to_string()
    } else {
        format!("other requests: {reads:?}")
    };
    ctx.note(format!(
        "quiet minute with {} Running DatabaseClusters: 0 writes by {OPERATOR_USER} in the audit log ({lease_writes} Lease writes: leader election off), {reconciles} reconciles, {reads}",
        phases.get("Running").copied().unwrap_or(0)
    ));
    Ok(())
}

/// Expected owned objects of a cluster: (StatefulSets, Services, ConfigMaps, CronJobs, PDBs).
fn expected(spec: &Spec<'_>) -> (usize, usize, usize, usize, usize) {
    (
        1,
        3,
        1,
        usize::from(spec.backup),
        usize::from(spec.replicas > 1),
    )
}

async fn counts(env: &Env, ns: &str, name: &str) -> Result<(usize, usize, usize, usize, usize)> {
    Ok((
        owned::<StatefulSet>(env, ns, name).await?.len(),
        owned::<Service>(env, ns, name).await?.len(),
        owned::<ConfigMap>(env, ns, name).await?.len(),
        owned::<CronJob>(env, ns, name).await?.len(),
        owned::<PodDisruptionBudget>(env, ns, name).await?.len(),
    ))
}

/// Every object of kind `K` in `ns` managed by the operator: (cluster label, name, owner refs).
async fn managed<K>(env: &Env, ns: &str) -> Result<Vec<(String, String, usize)>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(api::<K>(env, ns)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=database-operator"))
        .await?
        .items
        .iter()
        .map(|o| {
            (
                o.labels()
                    .get(crate::util::CLUSTER_LABEL)
                    .cloned()
                    .unwrap_or_default(),
                o.name_any(),
                o.owner_references().len(),
            )
        })
        .collect())
}

/// (Scenario 9) The operator is killed (SIGKILL) right after clusters are created, while it is writing
/// their objects; a new process converges them with no duplicates.
pub async fn killed_mid_reconcile_converges_without_duplicates(ctx: &Ctx) -> Result<()> {
    let env = ctx.without_shared_operator().await?;
    let ns = ctx.namespace("crash").await?;
    let specs = [
        Spec::mysql("crash-a", 3, "crash-a-password"),
        Spec::postgresql("crash-b", 3, "crash-b-password"),
        Spec::mysql("crash-c", 2, "crash-c-password"),
        Spec::postgresql("crash-d", 1, "crash-d-password"),
    ];
    let mut first = ctx
        .start_operator("crash-1", &["--leader-elect=false", "--webhook=false"])
        .await?;
    let manifest: String = specs
        .iter()
        .map(|s| {
            format!(
                "{}---\n{}---\n",
                secret_manifest(&ns, s.secret, "pw"),
                s.manifest(&ns)
            )
        })
        .collect();
    env.cluster.apply(&manifest)?;
    let applied = Instant::now();
    // Kill as soon as the first owned object shows up.
    let cms = api::<ConfigMap>(&env, &ns);
    let selector = ListParams::default().labels("app.kubernetes.io/managed-by=database-operator");
    loop {
        if !cms.list(&selector).await?.items.is_empty() {
            break;
        }
        ensure!(
            applied.elapsed() < Duration::from_secs(30),
            "operator crash-1 created nothing within 30s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill();
    let killed_after = applied.elapsed().as_secs_f64();
    let mut at_kill = Vec::new();
    let mut complete = 0;
    for spec in &specs {
        let c = counts(&env, &ns, spec.name).await?;
        if c == expected(spec) {
            complete += 1;
        }
        at_kill.push(format!("{} {c:?}", spec.name));
    }
    ctx.step(format!(
        "SIGKILLed crash-1 {killed_after:.2}s after applying 4 clusters; objects (sts, svc, cm, cronjob, pdb) then: {}",
        at_kill.join(", ")
    ));
    ensure!(
        complete < specs.len(),
        "every cluster was complete before the kill: the scenario did not interrupt a reconcile"
    );

    let second = ctx
        .start_operator("crash-2", &["--leader-elect=false", "--webhook=false"])
        .await?;
    for spec in &specs {
        wait_running(ctx, &env, &ns, spec.name, spec.replicas, RUNNING_TIMEOUT).await?;
    }
    let dbcs = api::<DatabaseCluster>(&env, &ns);
    for spec in &specs {
        let dbc = dbcs.get(spec.name).await?;
        ensure!(
            dbc.finalizers() == [FINALIZER.to_string()],
            "{} finalizers: {:?}",
            spec.name,
            dbc.finalizers()
        );
        let c = counts(&env, &ns, spec.name).await?;
        ensure!(
            c == expected(spec),
            "{}: objects (sts, svc, cm, cronjob, pdb) {c:?}, expected {:?}",
            spec.name,
            expected(spec)
        );
        let pods: Vec<Pod> = owned(&env, &ns, spec.name).await?;
        let primaries = pods
            .iter()
            .filter(|p| p.labels().get(ROLE_LABEL).map(String::as_str) == Some("primary"))
            .count();
        ensure!(
            pods.len() == spec.replicas as usize && primaries == 1,
            "{}: {} pods ({} primary), expected {} with one primary",
            spec.name,
            pods.len(),
            primaries,
            spec.replicas
        );
        ensure!(
            second.reconciles_of(&ns, spec.name) > 0,
            "crash-2 logged no reconcile of {}",
            spec.name
        );
    }
    // Nothing else: every managed object belongs to one of the clusters and has one owner.
    let mut all = Vec::new();
    all.extend(managed::<StatefulSet>(&env, &ns).await?);
    all.extend(managed::<Service>(&env, &ns).await?);
    all.extend(managed::<ConfigMap>(&env, &ns).await?);
    all.extend(managed::<CronJob>(&env, &ns).await?);
    all.extend(managed::<PodDisruptionBudget>(&env, &ns).await?);
    let total: usize = specs
        .iter()
        .map(|s| {
            let e = expected(s);
            e.0 + e.1 + e.2 + e.3 + e.4
        })
        .sum();
    ensure!(
        all.len() == total && all.iter().all(|(_, _, owners)| *owners == 1),
        "managed objects in {ns}: {all:?}, expected {total} with one owner each"
    );
    ctx.note(format!(
        "killed crash-1 {killed_after:.2}s into creating 4 clusters ({complete} complete); crash-2 converged them with {total} objects, no duplicates"
    ));
    Ok(())
}

/// The Lease's holder, renew time and acquire time.
pub(crate) async fn lease_state(
    leases: &Api<Lease>,
    name: &str,
) -> Result<(Option<String>, Option<Timestamp>, Option<Timestamp>)> {
    let lease = leases.get(name).await?;
    let spec = lease.spec.unwrap_or_default();
    Ok((
        spec.holder_identity,
        spec.renew_time.map(|t| t.0),
        spec.acquire_time.map(|t| t.0),
    ))
}

pub(crate) fn holds(holder: Option<&str>, op: &Operator) -> bool {
    holder.is_some_and(|h| h.ends_with(&format!("-{}", op.pid)))
}

/// Waits (at most `timeout`) until `op` holds the Lease `name`; its acquire time.
pub(crate) async fn wait_holds(
    leases: &Api<Lease>,
    name: &str,
    op: &Operator,
    timeout: Duration,
) -> Result<Option<Timestamp>> {
    wait_for(
        &format!("operator {} to hold the Lease", op.name),
        timeout,
        async || {
            let (holder, _, acquired) = lease_state(leases, name).await?;
            Ok(if holds(holder.as_deref(), op) {
                Check::Done(acquired)
            } else {
                Check::Pending(format!("holder {holder:?}"))
            })
        },
    )
    .await
}

/// A namespace of the scenario (`suffix`) where the operator's user may hold leader Leases: the
/// shipped leader-election Role there, bound to it.
pub(crate) async fn lease_namespace(ctx: &Ctx, env: &Env, suffix: &str) -> Result<String> {
    let lease_ns = ctx.namespace(suffix).await?;
    let role = std::fs::read_to_string(
        workspace_root()
            .join("deploy")
            .join("rbac")
            .join("leader_election_role.yaml"),
    )?;
    ensure!(
        role.contains("namespace: database-operator-system"),
        "deploy/rbac/leader_election_role.yaml changed shape"
    );
    env.cluster.apply(&role.replace(
        "namespace: database-operator-system",
        &format!("namespace: {lease_ns}"),
    ))?;
    env.cluster.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: database-operator-leader-election
  namespace: {lease_ns}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: database-operator-leader-election
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: {OPERATOR_USER}
"
    ))?;
    Ok(lease_ns)
}

/// (Scenario 10) Two replicas with leader election: only the Lease holder reconciles; when it is killed
/// the other takes over within the lease duration.
pub async fn leader_election_fails_over(ctx: &Ctx) -> Result<()> {
    let env = ctx.without_shared_operator().await?;
    let lease_ns = lease_namespace(ctx, &env, "leader-lease").await?;
    let lease_name = "database-operator";
    // Long enough that the holder's renewal (a third of it before expiry) never misses on a
    // busy machine, short enough to keep the scenario quick.
    let duration = Duration::from_secs(10);
    let args = [
        "--leader-elect=true",
        "--webhook=false",
        "--lease-namespace",
        lease_ns.as_str(),
        "--lease-name",
        lease_name,
        "--lease-duration",
        "10s",
    ];
    let leases: Api<Lease> = api(&env, &lease_ns);
    ctx.relevant("lease", &lease_ns, lease_name);

    let mut a = ctx.start_operator("leader-a", &args).await?;
    wait_holds(&leases, lease_name, &a, Duration::from_secs(30)).await?;
    let b = ctx.start_operator("leader-b", &args).await?;
    ctx.step("leader-a holds the Lease; leader-b started as standby");

    let ns = ctx.namespace("leader").await?;
    let name = "elected";
    create_cluster(&env, &ns, &Spec::mysql(name, 2, "elected-password"), "pw")?;
    wait_running(ctx, &env, &ns, name, 2, RUNNING_TIMEOUT).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        a.reconciles_of(&ns, name) > 0,
        "the leader logged no reconcile of {ns}/{name}"
    );
    ensure!(
        !b.run_log().contains(" reconciled ") && b.metric(RECONCILES)? == 0.0,
        "the standby reconciled although it does not hold the Lease"
    );
    ensure!(
        a.metric("database_operator_leader")? == 1.0
            && b.metric("database_operator_leader")? == 0.0,
        "database_operator_leader should be 1 on leader-a and 0 on leader-b"
    );
    let (holder, renewed, _) = lease_state(&leases, lease_name).await?;
    ensure!(
        holds(holder.as_deref(), &a),
        "leader-a lost the Lease: {holder:?}"
    );

    a.kill();
    let killed = Instant::now();
    ctx.step(format!(
        "SIGKILLed the leader leader-a (last renewal {renewed:?})"
    ));
    let acquired = wait_holds(&leases, lease_name, &b, duration + Duration::from_secs(15)).await?;
    let takeover = killed.elapsed();
    let since_renewal = match (renewed, acquired) {
        (Some(r), Some(a)) => format!("{:.1}s", a.duration_since(r).as_secs_f64()),
        _ => "unknown".to_string(),
    };
    ensure!(
        // The standby wakes when the Lease expires (at most `duration` after the kill); allow
        // for whole-second rounding and one API round trip.
        takeover <= duration + Duration::from_secs(3),
        "leader-b took over {:.1}s after the kill; the lease duration is {}s",
        takeover.as_secs_f64(),
        duration.as_secs()
    );

    // The new leader reconciles: it puts a hand-edited StatefulSet back.
    wait_for(
        "leader-b to start its controllers",
        Duration::from_secs(30),
        async || {
            Ok(if b.run_log().contains("elected leader") {
                Check::Done(())
            } else {
                Check::Pending("no \"elected leader\" in its log".into())
            })
        },
    )
    .await?;
    env.cluster
        .kubectl_output(&["scale", "statefulset", name, "-n", &ns, "--replicas=1"])?;
    let sets = api::<StatefulSet>(&env, &ns);
    wait_for(
        "leader-b to put the StatefulSet back to 2 replicas",
        Duration::from_secs(30),
        async || {
            let replicas = sets.get(name).await?.spec.replicas.unwrap_or(1);
            Ok(if replicas == 2 && b.reconciles_of(&ns, name) > 0 {
                Check::Done(())
            } else {
                Check::Pending(format!(
                    "StatefulSet replicas {replicas}, leader-b reconciles of {name}: {}",
                    b.reconciles_of(&ns, name)
                ))
            })
        },
    )
    .await?;
    wait_running(ctx, &env, &ns, name, 2, RUNNING_TIMEOUT).await?;
    ctx.note(format!(
        "leader killed; standby took the Lease over {:.1}s later ({since_renewal} after the last renewal; lease duration {}s) and reconciles",
        takeover.as_secs_f64(),
        duration.as_secs()
    ));
    Ok(())
}

/// No write of the operator repeats its previous write to the same object (same body, nobody
/// else writing that object in between) anywhere in the audit log of the suite so far, after a
/// burst of new clusters on top (the situation in which a reconcile runs before the watches
/// have shown the one before it). The audit policy records the operator's writes with their
/// bodies (Secrets excepted).
pub async fn no_write_repeats_the_one_before(ctx: &Ctx) -> Result<()> {
    const BURST: usize = 12;
    let env = ctx.env().await?;
    ctx.operator().await?;
    let ns = ctx.namespace("repeats").await?;
    let names: Vec<String> = (0..BURST).map(|i| format!("burst-{i}")).collect();
    let secrets: Vec<String> = (0..BURST).map(|i| format!("burst-{i}-password")).collect();
    let mut manifest = String::new();
    for (name, secret) in names.iter().zip(&secrets) {
        let spec = Spec::mysql(name, 3, secret);
        manifest.push_str(&secret_manifest(&ns, secret, "pw"));
        manifest.push_str("---\n");
        manifest.push_str(&spec.manifest(&ns));
        manifest.push_str("---\n");
    }
    let applied = Instant::now();
    env.cluster.apply(&manifest)?;
    for name in &names {
        wait_running(ctx, &env, &ns, name, 3, RUNNING_TIMEOUT).await?;
    }
    ctx.step(format!(
        "{BURST} clusters of 3 members Running {:.1}s after one apply",
        applied.elapsed().as_secs_f64()
    ));
    let all = AuditCursor::since(&env, Timestamp::UNIX_EPOCH)?.events()?;
    let writes = all
        .iter()
        .filter(|e| e.is_write() && e.user == OPERATOR_USER)
        .count();
    let with_bodies = all
        .iter()
        .filter(|e| e.is_write() && e.user == OPERATOR_USER && e.request_object.is_some())
        .count();
    ensure!(
        with_bodies > 0,
        "the audit log has no request bodies of {OPERATOR_USER}'s writes: the policy should record them"
    );
    let repeated = xtask::cluster::repeated_writes(&all, OPERATOR_USER);
    ensure!(
        repeated.is_empty(),
        "{} of {writes} writes by {OPERATOR_USER} repeated the one before them:\n  {}",
        repeated.len(),
        repeated
            .iter()
            .map(|r| format!("{} at {} and again at {}", r.what, r.first, r.repeat))
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    let burst = all
        .iter()
        .filter(|e| e.is_write() && e.user == OPERATOR_USER && e.namespace == ns)
        .count();
    ctx.note(format!(
        "{writes} writes by {OPERATOR_USER} in the suite so far ({with_bodies} with bodies), none repeating the one before; the burst of {BURST} clusters took {burst} writes ({:.1} per cluster, events included)",
        burst as f64 / BURST as f64
    ));
    env.cluster
        .kubectl_output(&["delete", "namespace", &ns, "--wait=false"])?;
    Ok(())
}
