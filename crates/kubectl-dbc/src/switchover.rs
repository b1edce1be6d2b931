//! `kubectl dbc switchover <name> [--to <pod>]`: asks the operator for a planned switchover with
//! the `database.example.com/switchover` annotation and follows `status.failover` until the
//! operator reports the outcome.
//!
//! The operator's contract (crates/core/src/failover): it acts on an annotation value it has not
//! handled yet, records the value in `status.failover.handledSwitchover` when done, refused or
//! aborted, and writes the outcome to `status.failover.last` (nothing when the target already is
//! the primary). Removing the annotation clears the handled value, so asking again for the same
//! target first removes the annotation and waits for the operator to notice.
//!
//! [`start`] and [`observe`] decide from the cluster as read (pure, unit-tested); [`run`] does the
//! reads and writes (tested against kube's mock client).

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use database_operator_api::failover::{FailoverOutcome, FailoverRecord, SWITCHOVER_AUTO};
use database_operator_api::{DatabaseCluster, FailoverStatus, SWITCHOVER_ANNOTATION, conditions};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cli::{Progress, get_cluster};

/// How the switchover ended, as far as the plugin saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A new primary serves writes.
    Completed {
        /// The old primary.
        from: String,
        /// The new primary.
        to: String,
    },
    /// The requested pod already is the primary; nothing moved.
    AlreadyPrimary(String),
    /// The operator refused (`Blocked`) or stopped (`Aborted`) the switchover.
    Failed {
        /// `Blocked` or `Aborted`.
        outcome: FailoverOutcome,
        /// The operator's reason.
        reason: String,
    },
    /// `--timeout` passed first; the request stays and the operator carries on.
    TimedOut {
        /// The last progress seen.
        last_seen: String,
    },
}

/// What to do before writing the request, decided from the cluster as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Nothing to do: the target is the primary already.
    AlreadyPrimary(String),
    /// The same request is on the cluster and not handled yet (or in progress): just wait.
    Attach,
    /// Write the annotation.
    Write,
    /// The same value was handled before: remove the annotation, wait until the operator
    /// clears `handledSwitchover`, then write it again.
    ClearThenWrite,
}

/// Progress seen in one read of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not finished; the line says where it is.
    Pending(String),
    /// Finished.
    Done(Outcome),
}

/// The annotation value for `--to` (a member's pod name) or `auto` without it; refuses what
/// the operator would refuse anyway, before anything is written.
pub fn target(cluster: &DatabaseCluster, to: Option<&str>) -> anyhow::Result<String> {
    let name = cluster.name_any();
    let replicas = cluster.spec.replicas;
    if replicas < 2 {
        anyhow::bail!(
            "{name} has {replicas} member: a switchover needs a replica to promote \
             (raise spec.replicas first)"
        );
    }
    let Some(to) = to else {
        return Ok(SWITCHOVER_AUTO.to_owned());
    };
    if to == SWITCHOVER_AUTO {
        return Ok(to.to_owned());
    }
    let ordinal = to
        .strip_prefix(&format!("{name}-"))
        .and_then(|o| o.parse::<i32>().ok());
    match ordinal {
        Some(o) if (0..replicas).contains(&o) => Ok(to.to_owned()),
        _ => anyhow::bail!(
            "--to {to}: not a member of {name} (members are {name}-0 to {name}-{}; \
             `kubectl dbc status {name}` shows their roles); leave --to out to promote the most \
             advanced replica",
            replicas - 1
        ),
    }
}

/// `status.failover` of `cluster` (empty when it has none).
pub(crate) fn failover(cluster: &DatabaseCluster) -> FailoverStatus {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.failover.clone())
        .unwrap_or_default()
}

/// The value of the annotation `key` on `cluster`.
pub(crate) fn annotation_value<'a>(cluster: &'a DatabaseCluster, key: &str) -> Option<&'a str> {
    cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn annotation(cluster: &DatabaseCluster) -> Option<&str> {
    annotation_value(cluster, SWITCHOVER_ANNOTATION)
}

fn primary(cluster: &DatabaseCluster) -> Option<&str> {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.primary_pod.as_deref())
}

/// Decides how to start, or refuses (another request or a failover is under way).
pub fn start(cluster: &DatabaseCluster, target: &str) -> anyhow::Result<Start> {
    let name = cluster.name_any();
    let status = failover(cluster);
    let current = annotation(cluster);
    if let Some(op) = &status.operation {
        if op.request.as_deref() == Some(target) {
            return Ok(Start::Attach);
        }
        anyhow::bail!(
            "a {:?} of {name} is in progress ({:?}, from {}): wait for it to end \
             (`kubectl dbc status {name}`), then ask again",
            op.kind,
            op.phase,
            op.from
        );
    }
    if primary(cluster) == Some(target) {
        return Ok(Start::AlreadyPrimary(target.to_owned()));
    }
    match current {
        Some(value) if value == target => {
            if status.handled_switchover.as_deref() == Some(target) {
                Ok(Start::ClearThenWrite)
            } else {
                Ok(Start::Attach)
            }
        }
        Some(value) if status.handled_switchover.as_deref() != Some(value) => anyhow::bail!(
            "{name} already has a switchover request ({SWITCHOVER_ANNOTATION}={value}) the \
             operator has not handled yet: wait for it, or remove it with \
             `kubectl annotate databasecluster {name} {SWITCHOVER_ANNOTATION}-`"
        ),
        _ => Ok(Start::Write),
    }
}

/// Where the request stands in one read of the cluster. `last_before` is `status.failover.last`
/// as it was before the request was written: a different record is this request's outcome.
pub fn observe(
    cluster: &DatabaseCluster,
    target: &str,
    last_before: Option<&FailoverRecord>,
) -> Seen {
    let status = failover(cluster);
    if let Some(op) = &status.operation {
        let to = op.to.as_deref().unwrap_or("the most advanced replica");
        return Seen::Pending(if op.request.as_deref() == Some(target) {
            format!("{:?}: from {} to {to}", op.phase, op.from)
        } else {
            format!(
                "a {:?} is in progress ({:?}, from {}); the request waits",
                op.kind, op.phase, op.from
            )
        });
    }
    if status.handled_switchover.as_deref() == Some(target) {
        if let Some(last) = status.last.as_ref().filter(|l| Some(*l) != last_before) {
            return Seen::Done(match last.outcome {
                FailoverOutcome::Completed => Outcome::Completed {
                    from: last.from.clone(),
                    to: last.to.clone().unwrap_or_else(|| target.to_owned()),
                },
                outcome => Outcome::Failed {
                    outcome,
                    reason: last.reason.clone(),
                },
            });
        }
        if let Some(p) = primary(cluster).filter(|p| *p == target) {
            return Seen::Done(Outcome::AlreadyPrimary(p.to_owned()));
        }
        return Seen::Done(Outcome::Failed {
            outcome: FailoverOutcome::Blocked,
            reason: "the operator marked the request handled without recording an outcome"
                .to_owned(),
        });
    }
    Seen::Pending("waiting for the operator to pick up the request".to_owned())
}

/// What explains a failed or slow switchover: the `FailoverBlocked` condition when it is set,
/// any other condition that is not as expected, and the newest Switchover or Warning events.
pub fn explain(cluster: &DatabaseCluster, events: &[Event]) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(status) = &cluster.status {
        for c in &status.conditions {
            let set = c.status == "True";
            let notable = match c.type_.as_str() {
                conditions::FAILOVER_BLOCKED | conditions::DEGRADED => set,
                conditions::READY => !set,
                _ => false,
            };
            if notable {
                out.push(format!(
                    "condition {}={} ({}): {}",
                    c.type_, c.status, c.reason, c.message
                ));
            }
        }
    }
    let mut relevant: Vec<&Event> = events
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Switchover") || e.type_.as_deref() == Some("Warning")
        })
        .collect();
    relevant.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    for e in relevant.iter().rev().take(3).rev() {
        out.push(format!(
            "event {} {}: {}",
            e.type_.as_deref().unwrap_or("?"),
            e.reason.as_deref().unwrap_or("?"),
            e.message.as_deref().unwrap_or("")
        ));
    }
    out
}

/// Lists the events about a cluster (for [`explain`]).
pub async fn events(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind={},involvedObject.name={name}",
            database_operator_api::KIND
        )))
        .await
        .with_context(|| format!("listing the events of {namespace}/{name}"))?
        .items)
}

/// How long to wait and how often to look.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Give up (the request stays) after this long.
    pub timeout: Duration,
    /// Time between reads of the cluster.
    pub poll: Duration,
}

/// Requests the switchover and follows it, writing progress lines to `out`. Returns the
/// outcome and, for anything but success, what explains it (conditions, events).
pub async fn run(
    client: &Client,
    namespace: &str,
    name: &str,
    to: Option<&str>,
    timing: Timing,
    out: &mut dyn Write,
) -> anyhow::Result<(Outcome, Vec<String>)> {
    let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), namespace);
    let mut progress = Progress::start();
    let started = progress.started();
    let mut cluster = get_cluster(&api, namespace, name, "").await?;
    let target = target(&cluster, to)?;
    let annotate = async |value: Option<&str>| {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: value}}})),
        )
        .await
        .with_context(|| {
            format!(
                "annotating DatabaseCluster {namespace}/{name} (you need `patch` on \
                 databaseclusters)"
            )
        })
    };
    let from = primary(&cluster)
        .unwrap_or("(no primary reported)")
        .to_owned();
    match start(&cluster, &target)? {
        Start::AlreadyPrimary(p) => {
            progress.say(
                out,
                &format!("{p} already is the primary of {name}; nothing to do"),
            );
            return Ok((Outcome::AlreadyPrimary(p), Vec::new()));
        }
        Start::Attach => progress.say(
            out,
            &format!("switchover of {name} to {target} already requested; following it"),
        ),
        Start::ClearThenWrite => {
            progress.say(
                out,
                &format!(
                    "{SWITCHOVER_ANNOTATION}={target} was handled before; removing it so the \
                     operator sees a new request"
                ),
            );
            annotate(None).await?;
            loop {
                cluster = get_cluster(&api, namespace, name, "").await?;
                if failover(&cluster).handled_switchover.is_none() {
                    break;
                }
                if started.elapsed() >= timing.timeout {
                    let details = explain(&cluster, &events(client, namespace, name).await?);
                    return Ok((
                        Outcome::TimedOut {
                            last_seen: "the operator did not clear the handled request".to_owned(),
                        },
                        details,
                    ));
                }
                tokio::time::sleep(timing.poll).await;
            }
            annotate(Some(&target)).await?;
            progress.say(
                out,
                &format!("requested a switchover of {name} from {from} to {target}"),
            );
        }
        Start::Write => {
            annotate(Some(&target)).await?;
            progress.say(
                out,
                &format!("requested a switchover of {name} from {from} to {target}"),
            );
        }
    }
    let last_before = failover(&cluster).last;
    loop {
        match observe(&cluster, &target, last_before.as_ref()) {
            Seen::Done(outcome) => {
                let details = match outcome {
                    Outcome::Failed { .. } => {
                        explain(&cluster, &events(client, namespace, name).await?)
                    }
                    _ => Vec::new(),
                };
                return Ok((outcome, details));
            }
            Seen::Pending(line) => progress.update(out, line),
        }
        if started.elapsed() >= timing.timeout {
            let details = explain(&cluster, &events(client, namespace, name).await?);
            return Ok((
                Outcome::TimedOut {
                    last_seen: progress.last().to_owned(),
                },
                details,
            ));
        }
        tokio::time::sleep(timing.poll).await;
        cluster = get_cluster(&api, namespace, name, "").await?;
    }
}

/// The closing message for an outcome, and whether it is a success.
pub fn summary(name: &str, outcome: &Outcome) -> (String, bool) {
    match outcome {
        Outcome::Completed { from, to } => (
            format!("switchover of {name} done: {to} is the primary (was {from})"),
            true,
        ),
        Outcome::AlreadyPrimary(p) => (format!("{p} is the primary of {name}"), true),
        Outcome::Failed { outcome, reason } => {
            (format!("switchover of {name} {outcome:?}: {reason}"), false)
        }
        Outcome::TimedOut { last_seen } => (
            format!(
                "switchover of {name} not finished within --timeout (last seen: {last_seen}). \
                 The request stays and the operator carries on: follow it with `kubectl dbc \
                 status {name}`, or withdraw it before it starts with `kubectl annotate \
                 databasecluster {name} {SWITCHOVER_ANNOTATION}-`"
            ),
            false,
        ),
    }
}

#[cfg(test)]
mod tests;
