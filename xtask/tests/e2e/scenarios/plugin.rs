//! `kubectl dbc` (crates/kubectl-dbc) against a real three-member PostgreSQL cluster on process
//! nodes: `status` shows the primary the pods say and three Ready members; `switchover --to`
//! reports the operator's outcome (and the primary moved when it completed); `plan` of the live
//! cluster finds nothing to write (it gathers what the operator gathers); `plan -f` of a changed
//! manifest lists exactly the objects that then change when the manifest is applied. In a
//! 100-column tmux pane (a real terminal), the status screen is coloured and no line wraps.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use serde_json::Value;
use xtask::cluster::workspace_root;

use crate::env::build_binary;
use crate::harness::Ctx;
use crate::scenarios::databases::{Engine, RUNNING_TIMEOUT, example_in, members};
use crate::util::{Check, api, describe, phase, wait_for};

/// How long the operator may take to apply a changed spec.
const APPLIED_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the plugin with the admin kubeconfig; returns stdout, failing with stderr.
pub(crate) fn dbc(bin: &Path, kubeconfig: &Path, ns: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", ns])
        .args(args)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    ensure!(
        out.status.success(),
        "kubectl-dbc {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `status NAME` in a detached tmux pane of 100 columns (a terminal: colour on) on a
/// private server; returns the screen with wrapped lines joined, and with colour codes.
fn tmux_status(bin: &Path, kubeconfig: &Path, ns: &str, name: &str) -> Result<(String, String)> {
    let socket = format!("dbc-e2e-{}", std::process::id());
    let tmux = |args: &[&str]| -> Result<String> {
        let out = Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .context("running tmux")?;
        ensure!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let command = format!(
        "env -u NO_COLOR {} --kubeconfig {} -n {ns} status {name}; echo END-OF-STATUS; sleep 60",
        bin.display(),
        kubeconfig.display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        "status",
        "-x",
        "100",
        "-y",
        "60",
        &command,
    ])?;
    let result = (|| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let joined = tmux(&["capture-pane", "-p", "-J", "-t", "status"])?;
            if joined.contains("END-OF-STATUS") {
                let coloured = tmux(&["capture-pane", "-p", "-e", "-t", "status"])?;
                return Ok((joined, coloured));
            }
            ensure!(
                Instant::now() < deadline,
                "the status screen did not finish in the tmux pane:\n{joined}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    })();
    let _ = tmux(&["kill-server"]);
    result
}

/// `Kind/name` -> `change` of every object in a `plan -o json` answer (one cluster).
fn planned(json: &str) -> Result<BTreeMap<String, String>> {
    let reports: Value = serde_json::from_str(json).context("plan -o json is JSON")?;
    let objects = reports[0]["objects"]
        .as_array()
        .context("no objects in the plan")?;
    Ok(objects
        .iter()
        .map(|o| {
            (
                o["object"].as_str().unwrap_or_default().to_owned(),
                o["change"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}

/// What moves when an object's spec is written: `metadata.generation` where the kind has one
/// (status updates of StatefulSets and budgets leave it alone), else `resourceVersion`.
async fn write_markers(
    client: &kube::Client,
    ns: &str,
    objects: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for key in objects.keys() {
        let (kind, name) = key.split_once('/').context("Kind/name")?;
        let (group, version, plural) = match kind {
            "ConfigMap" => ("", "v1", "configmaps"),
            "Service" => ("", "v1", "services"),
            "StatefulSet" => ("apps", "v1", "statefulsets"),
            "PodDisruptionBudget" => ("policy", "v1", "poddisruptionbudgets"),
            "NetworkPolicy" => ("networking.k8s.io", "v1", "networkpolicies"),
            "CronJob" => ("batch", "v1", "cronjobs"),
            other => anyhow::bail!("unexpected kind {other} in the plan"),
        };
        let resource = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.to_owned(),
            plural: plural.to_owned(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let marker = match api.get_opt(name).await? {
            Some(o) => match o.metadata.generation {
                Some(g) => format!("generation {g}"),
                None => format!(
                    "resourceVersion {}",
                    o.resource_version().unwrap_or_default()
                ),
            },
            None => "absent".to_owned(),
        };
        out.insert(key.clone(), marker);
    }
    Ok(out)
}

pub async fn status_and_plan_match_the_cluster(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let started = Instant::now();
    let bin = tokio::task::spawn_blocking(|| {
        build_binary(&workspace_root(), "kubectl-dbc", "kubectl-dbc")
    })
    .await??;
    ctx.step(format!(
        "built {} ({:.1}s)",
        bin.display(),
        started.elapsed().as_secs_f64()
    ));
    let kubeconfig = env.cluster.kubeconfig().to_path_buf();
    let ns = ctx.namespace("dbc-plugin").await?;
    // Its servers would otherwise run through every later scenario (the quiet minute included).
    ctx.retire_on_success(&ns);
    let (manifest, name) = example_in(Engine::Postgresql, &ns)?;
    ctx.relevant("databasecluster", &ns, &name);
    env.cluster.apply(&manifest)?;
    let clusters: Api<DatabaseCluster> = api(&env, &ns);
    wait_for(&format!("{name} Running"), RUNNING_TIMEOUT, async || {
        let dbc = clusters.get(&name).await?;
        Ok(if phase(&dbc) == "Running" {
            Check::Done(())
        } else {
            Check::Pending(describe(&dbc))
        })
    })
    .await?;
    ctx.step(format!("{name} Running"));

    // status: the primary the pods' role labels name, three members Ready.
    let (pods, primary) = members(&env, &ns, &name).await?;
    ensure!(pods.len() == 3, "{} member pods, want 3", pods.len());
    let text = dbc(&bin, &kubeconfig, &ns, &["status", &name])?;
    eprintln!("{text}");
    ensure!(
        text.contains("3/3 ready"),
        "status does not say 3/3 ready:\n{text}"
    );
    ensure!(
        text.contains(&format!("primary     {}", primary.name_any())),
        "status does not name the primary {}:\n{text}",
        primary.name_any()
    );
    ensure!(
        text.lines().all(|l| l.chars().count() <= 100),
        "a status line is wider than 100 columns:\n{text}"
    );
    ensure!(!text.contains('\u{1b}'), "colour in piped output");
    let (screen, coloured) = tmux_status(&bin, &kubeconfig, &ns, &name)?;
    let wrapped: Vec<&str> = screen.lines().filter(|l| l.chars().count() > 100).collect();
    ensure!(
        wrapped.is_empty(),
        "lines wrap in a 100-column terminal: {wrapped:#?}\n{screen}"
    );
    ensure!(
        screen.contains("3/3 ready") && coloured.contains('\u{1b}'),
        "the status screen in the terminal is not the coloured screen:\n{coloured}"
    );
    let json: Value = serde_json::from_str(&dbc(
        &bin,
        &kubeconfig,
        &ns,
        &["status", &name, "-o", "json"],
    )?)?;
    let shown = &json[0]["members"];
    let ready = shown
        .as_array()
        .context("members")?
        .iter()
        .filter(|m| m["ready"] == true)
        .count();
    ensure!(
        ready == 3,
        "status -o json shows {ready} ready members: {shown}"
    );
    let roles: Vec<(&str, &str)> = shown
        .as_array()
        .context("members")?
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or(""),
                m["role"].as_str().unwrap_or(""),
            )
        })
        .collect();
    ensure!(
        roles
            .iter()
            .filter(|(_, r)| *r == "primary")
            .collect::<Vec<_>>()
            == [&(primary.name_any().as_str(), "primary")],
        "roles in status: {roles:?}"
    );

    // The servers' own view (status.members, from the operator's probes): every member
    // answers, the labelled primary says it is the primary, the replicas report their lag.
    let servers = wait_for(
        "status -o json to show each member's role and lag as its server reports them",
        Duration::from_secs(60),
        async || {
            let json: Value = serde_json::from_str(&dbc(
                &bin,
                &kubeconfig,
                &ns,
                &["status", &name, "-o", "json"],
            )?)?;
            let members = json[0]["members"].as_array().cloned().unwrap_or_default();
            let seen: Vec<(String, String, String)> = members
                .iter()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("").to_owned(),
                        m["serverRole"].as_str().unwrap_or("-").to_owned(),
                        m["lagSeconds"].to_string(),
                    )
                })
                .collect();
            let primary_name = primary.name_any();
            let right = seen.len() == 3
                && seen.iter().all(|(pod, role, lag)| {
                    if *pod == primary_name {
                        role == "primary" && lag == "null"
                    } else {
                        role == "replica" && lag.parse::<u64>().is_ok()
                    }
                });
            Ok(if right {
                Check::Done(seen)
            } else {
                Check::Pending(format!("{seen:?}"))
            })
        },
    )
    .await?;
    ctx.step(format!(
        "status shows the servers' roles and lag (seconds): {servers:?}"
    ));

    // switchover: the plugin writes the request and follows the operator's failover state
    // phase by phase until it completes: the primary moved, the plugin said so and exited 0.
    let target = pods
        .iter()
        .map(|p| p.name_any())
        .find(|p| *p != primary.name_any())
        .context("a replica")?;
    let switched = Instant::now();
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["-n", &ns])
        .args(["switchover", &name, "--to", &target, "--timeout", "120s"])
        .output()
        .context("running kubectl-dbc switchover")?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    eprintln!("{stdout}{stderr}");
    ensure!(
        stdout.contains(&format!(
            "requested a switchover of {name} from {} to {target}",
            primary.name_any()
        )),
        "switchover did not say what it requested:\n{stdout}{stderr}"
    );
    let after = clusters.get(&name).await?;
    let failover = after
        .status
        .as_ref()
        .and_then(|s| s.failover.clone())
        .context("no status.failover after the switchover")?;
    ensure!(
        failover.handled_switchover.as_deref() == Some(target.as_str()),
        "the plugin returned before the operator handled the request: {failover:?}"
    );
    let last = failover.last.context("no status.failover.last")?;
    let outcome = format!("{:?}", last.outcome);
    ensure!(
        outcome == "Completed",
        "the operator ended the switchover {outcome} ({}); the plugin said:\n{stdout}{stderr}",
        last.reason
    );
    ensure!(
        out.status.success()
            && stdout.contains(&format!(
                "switchover of {name} done: {target} is the primary"
            )),
        "the operator completed the switchover but the plugin said:\n{stdout}{stderr}"
    );
    wait_for(
        &format!("{target} labelled primary and {name} Running"),
        Duration::from_secs(60),
        async || {
            // No pod is labelled primary for a moment during the move.
            let labelled = members(&env, &ns, &name)
                .await
                .ok()
                .map(|(_, p)| p.name_any());
            let dbc = clusters.get(&name).await?;
            Ok(
                if labelled.as_deref() == Some(target.as_str()) && phase(&dbc) == "Running" {
                    Check::Done(())
                } else {
                    Check::Pending(format!("primary label on {labelled:?}; {}", describe(&dbc)))
                },
            )
        },
    )
    .await?;
    ctx.note(format!(
        "kubectl dbc switchover --to {target}: the operator's outcome {outcome} ({}) reported in {:.1}s",
        last.reason,
        switched.elapsed().as_secs_f64()
    ));

    // plan of the live cluster: the operator has nothing to write.
    let live = planned(&dbc(
        &bin,
        &kubeconfig,
        &ns,
        &["plan", &name, "-o", "json"],
    )?)?;
    ensure!(
        live.values().all(|c| c == "unchanged"),
        "plan of the steady cluster wants writes: {live:?}\n{}",
        dbc(&bin, &kubeconfig, &ns, &["plan", &name])?
    );

    // plan -f of a changed manifest (more memory), then apply it: exactly those objects change.
    let changed = manifest.replace("limits: {memory: 512Mi}", "limits: {memory: 640Mi}");
    ensure!(
        changed != manifest,
        "the example no longer limits memory to 512Mi"
    );
    let file = env.state_dir.join(format!("{ns}-changed.yaml"));
    std::fs::write(&file, &changed)?;
    let file_arg = file.to_string_lossy().into_owned();
    eprintln!(
        "{}",
        dbc(&bin, &kubeconfig, &ns, &["plan", "-f", &file_arg])?
    );
    let plan = planned(&dbc(
        &bin,
        &kubeconfig,
        &ns,
        &["plan", "-f", &file_arg, "-o", "json"],
    )?)?;
    let to_write: Vec<&String> = plan
        .iter()
        .filter(|(_, c)| c.as_str() != "unchanged")
        .map(|(k, _)| k)
        .collect();
    ensure!(
        to_write.contains(&&format!("StatefulSet/{name}")),
        "the plan does not update the StatefulSet: {plan:?}"
    );
    let before = write_markers(&env.client, &ns, &plan).await?;
    let generation = clusters.get(&name).await?.metadata.generation.unwrap_or(0);
    env.cluster.apply(&changed)?;
    wait_for(
        &format!("the operator to apply generation {}", generation + 1),
        APPLIED_TIMEOUT,
        async || {
            let dbc = clusters.get(&name).await?;
            let observed = dbc.status.as_ref().and_then(|s| s.observed_generation);
            Ok(if observed > Some(generation) {
                Check::Done(())
            } else {
                Check::Pending(format!("observedGeneration {observed:?}"))
            })
        },
    )
    .await?;
    let after = write_markers(&env.client, &ns, &plan).await?;
    let written: Vec<&String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    ensure!(
        written == to_write,
        "the plan listed {to_write:?} but applying changed {written:?} (before {before:?}, after {after:?})"
    );
    ctx.note(format!(
        "plan -f listed and applying wrote exactly {to_write:?}"
    ));
    // The memory change rolls every member; the cluster goes, so that no roll of real servers
    // outlives the scenario (later scenarios measure a quiet operator).
    clusters
        .delete(&name, &kube::api::DeleteParams::default())
        .await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = api(&env, &ns);
    wait_for(
        &format!("{name} and its pods gone"),
        Duration::from_secs(120),
        async || {
            let left = pods
                .list(&kube::api::ListParams::default())
                .await?
                .items
                .len();
            let cluster = clusters.get_opt(&name).await?;
            Ok(if left == 0 && cluster.is_none() {
                Check::Done(())
            } else {
                Check::Pending(format!(
                    "{left} pods, cluster present: {}",
                    cluster.is_some()
                ))
            })
        },
    )
    .await?;
    Ok(())
}
