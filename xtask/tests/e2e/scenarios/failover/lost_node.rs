//! A primary whose process node is powered off (`cargo xtask cluster node stop`): its server
//! dies with the node, Kubernetes marks the node lost and the pod not Ready, and the failover
//! stops the pod. A lost node never confirms the stop (the pod stays Terminating), so the
//! operator reports `FailoverBlocked` `FenceUnconfirmed` naming the node and promotes nothing;
//! the test then does what the message tells an administrator whose node is down (the
//! `out-of-service` taint), Kubernetes removes the pod, and the failover completes. The node
//! powered on again, the old primary rejoins as a replica.

use database_operator_api::conditions::{self, reasons};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use xtask::cluster::procnode;

use super::*;
use crate::util::condition;

/// The taint an administrator puts on a node that is shut down (Kubernetes' non-graceful
/// node shutdown): its Terminating pods are then removed.
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// How long after the power cut the operator may take to say it cannot confirm the fence:
/// the node is seen lost after the controller manager's grace period (tens of seconds), then
/// `delaySeconds`, the stop, and the pod's grace period plus ten seconds.
const BLOCKED_TIMEOUT: Duration = Duration::from_secs(150);

async fn set_out_of_service(env: &Env, node: &str, on: bool) -> Result<()> {
    use k8s_openapi::api::core::v1::Taint;
    let nodes: Api<Node> = Api::all(env.client.clone());
    for _ in 0..10 {
        // A replace carries the resourceVersion read: a change by the node controller meanwhile
        // (its own taints) is a conflict, and the taints are read again.
        let mut current = nodes.get(node).await?;
        let spec = current.spec.get_or_insert_default();
        let taints = spec.taints.get_or_insert_default();
        taints.retain(|t| t.key != OUT_OF_SERVICE);
        if on {
            taints.push(Taint {
                key: OUT_OF_SERVICE.to_owned(),
                value: Some("nodeshutdown".to_owned()),
                effect: "NoExecute".to_owned(),
                time_added: None,
            });
        }
        match nodes.replace(node, &PostParams::default(), &current).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    bail!("could not change the taints of node {node}")
}

/// The node `primary` runs on, after checking that no other member of cluster `name` runs
/// there too (a power cut must take the primary alone).
pub(super) async fn node_of_primary_alone(
    env: &Env,
    ns: &str,
    name: &str,
    primary: &Pod,
) -> Result<String> {
    let primary_name = primary.name_any();
    let node = primary
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("the primary has no node")?;
    let pods: Api<Pod> = api(env, ns);
    let sharing: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("database.example.com/cluster={name}")))
        .await?
        .items
        .iter()
        .filter(|p| p.name_any() != primary_name)
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
        .map(|p| p.name_any())
        .collect();
    ensure!(
        sharing.is_empty(),
        "{sharing:?} run on {node} with the primary: a power cut needs the replicas elsewhere"
    );
    Ok(node)
}

pub(super) fn set_power(env: &Env, node: &str, on: bool) -> Result<()> {
    let state =
        xtask::cluster::State::load(&env.state_dir)?.context("no state of the e2e cluster")?;
    procnode::set_node_stopped(&env.state_dir, &state.process_nodes, node, !on)
}

/// examples/local/postgresql.yaml: the primary's node is powered off.
pub async fn postgresql_lost_node_fails_over(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let (env, ns, name, password, root) = running(ctx, engine, "node-pg", DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let mut powered_off: Option<String> = None;
    let result = async {
        load.first_rows(Duration::from_secs(30)).await?;
        let old = primary_pod(&env, &ns, &name).await?;
        let old_name = old.name_any();
        let node = node_of_primary_alone(&env, &ns, &name, &old).await?;

        set_power(&env, &node, false)?;
        powered_off = Some(node.clone());
        let cut = Instant::now();
        ctx.step(format!("powered off {node}, the node of primary {old_name}"));

        // Nothing is promoted while the stop is unconfirmed; the condition says why and what to do.
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let message = wait_for(
            "FailoverBlocked FenceUnconfirmed",
            BLOCKED_TIMEOUT,
            async || {
                let dbc = clusters.get(&name).await?;
                let blocked = condition(&dbc, conditions::FAILOVER_BLOCKED)
                    .filter(|c| c.status == "True" && c.reason == reasons::FENCE_UNCONFIRMED);
                let op = dbc.status.as_ref().and_then(|s| s.failover.as_ref()).and_then(|f| f.operation.as_ref());
                Ok(match blocked {
                    Some(c) => Check::Done(c.message.clone()),
                    None => Check::Pending(format!(
                        "operation {:?}; {}",
                        op.map(|o| (&o.phase, &o.from)),
                        describe(&dbc)
                    )),
                })
            },
        )
        .await?;
        let blocked_after = cut.elapsed();
        ensure!(
            message.contains(&node) && message.contains(OUT_OF_SERVICE) && message.contains(&old_name),
            "the message does not name the node, the pod and the way out: {message}"
        );
        let dbc = clusters.get(&name).await?;
        let failover = dbc.status.as_ref().and_then(|s| s.failover.clone()).unwrap_or_default();
        let op = failover.operation.context("no operation in flight")?;
        ensure!(
            op.phase == FailoverPhase::Fencing && op.from == old_name && op.to.is_none(),
            "blocked, but the operation is {:?} from {} to {:?}",
            op.phase,
            op.from,
            op.to
        );
        let labelled = primary_pod(&env, &ns, &name).await;
        ensure!(labelled.is_err(), "a pod is labelled primary while the fence is unconfirmed");
        ctx.step(format!(
            "{:.1}s after the cut: FenceUnconfirmed, nothing promoted: {message}",
            blocked_after.as_secs_f64()
        ));
        let events = events_about(&env, &ns, &name).await?;
        ensure!(
            events.iter().any(|e| e.reason == "FailoverBlocked" && e.note.contains(&node)),
            "no FailoverBlocked event naming {node}"
        );

        // The administrator's answer for a node that is down.
        set_out_of_service(&env, &node, true).await?;
        let tainted = Instant::now();
        ctx.step(format!("{node} tainted {OUT_OF_SERVICE}"));
        let (_, new_name, new_ip) = serving_after(&env, &ns, &name, &load, FailoverKind::Failover, &old_name, cut, Duration::from_secs(120)).await?;
        let gap = lock(&load.writes).gap_after(cut);
        ctx.note(format!(
            "lost node: {old_name} -> {new_name}; FenceUnconfirmed {:.1}s after the cut, completed {:.1}s after the taint; write gap {:.1}s (most of it waiting for the administrator)",
            blocked_after.as_secs_f64(),
            tainted.elapsed().as_secs_f64(),
            gap.as_secs_f64()
        ));

        // Powered on again: the old primary rejoins as a replica.
        set_power(&env, &node, true)?;
        set_out_of_service(&env, &node, false).await?;
        powered_off = None;
        ctx.step(format!("powered {node} on again"));
        if new_name != old_name {
            let role = rejoined(&env, engine, &root, &password, &ns, &old_name).await?;
            ensure!(role == "replica", "{old_name} came back as {role}");
        }
        let (acked, lost) = rows_lost(&load, engine, &root, &new_ip, &password).await?;
        ctx.note(format!(
            "lost node: {acked} rows acknowledged, {} lost (async replication; the node died with what it had not sent)",
            lost.len()
        ));
        // The old primary is a replica again: the next scenario on the example may take the
        // cluster over (it checks that every member is Ready first).
        ctx.hand_over(engine.example_key(), Handed { ns: ns.clone(), name: name.clone() });
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Some(node) = powered_off {
        // Whatever failed, the shared cluster gets its node back.
        let _ = set_power(&env, &node, true);
        let _ = set_out_of_service(&env, &node, false).await;
    }
    load.finish_checked(pods_task, result)
}
