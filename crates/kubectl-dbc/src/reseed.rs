//! `kubectl dbc reseed <name> <pod>`: asks the operator to seed a member again from the primary
//! (the `database.example.com/reseed` annotation) and follows `status.failover.reseed` until the
//! new copy streams.
//!
//! The operator's contract (crates/core/src/failover/reseed.rs): it acts on an annotation value
//! it has not handled yet, records it in `status.failover.handledReseed` (started or refused; a
//! refusal is a Warning event `MemberReseeding`), and reports the reseed in
//! `status.failover.reseed` (`finished` once the copy streams). One reseed at a time. The data
//! directory of the member is discarded: the plugin refuses a quarantined member (which holds
//! transactions the primary lacks) unless `--discard-diverged` says that is intended.
//!
//! [`start`] and [`observe`] decide from the cluster as read (pure, unit-tested); [`run`] does the
//! reads and writes.

use std::io::Write;

use database_operator_api::{DatabaseCluster, RESEED_ANNOTATION, Reseed};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cli::{Progress, get_cluster};
use crate::switchover::{Timing, annotation_value, events, explain, failover};

/// What to do before writing the request, decided from the cluster as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// The same member is being reseeded (or the same request waits): just follow it.
    Attach,
    /// Write the annotation.
    Write,
    /// The same value was handled before: remove the annotation, wait until the operator clears
    /// `handledReseed`, then write it again.
    ClearThenWrite,
}

/// Where the request stands in one read of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not finished; the line says where it is.
    Pending(String),
    /// The new copy streams from the primary.
    Done {
        /// How the operator put it.
        reason: String,
        /// Seconds from the decision to the new copy streaming.
        seconds: i64,
    },
    /// The operator refused the request (its event says why).
    Refused,
}

fn annotation(cluster: &DatabaseCluster) -> Option<&str> {
    annotation_value(cluster, RESEED_ANNOTATION)
}

/// Decides how to start, or refuses what the operator would refuse and what would discard data
/// nobody said could go.
pub fn start(
    cluster: &DatabaseCluster,
    pod: &str,
    discard_diverged: bool,
) -> anyhow::Result<Start> {
    let name = cluster.name_any();
    let replicas = cluster.spec.replicas;
    let ordinal = pod
        .strip_prefix(&format!("{name}-"))
        .and_then(|o| o.parse::<i32>().ok());
    if !ordinal.is_some_and(|o| (0..replicas).contains(&o)) {
        anyhow::bail!(
            "{pod}: not a member of {name} (members are {name}-0 to {name}-{}; `kubectl dbc \
             status {name}` shows their roles)",
            replicas - 1
        );
    }
    let primary = cluster
        .status
        .as_ref()
        .and_then(|s| s.primary_pod.as_deref());
    if primary == Some(pod) {
        anyhow::bail!(
            "{pod} is the primary of {name}: switch over first (`kubectl dbc switchover {name}`), \
             then reseed it"
        );
    }
    let status = failover(cluster);
    if status.quarantined.iter().any(|q| q == pod) && !discard_diverged {
        anyhow::bail!(
            "{pod} is quarantined: it holds transactions the primary lacks, and a reseed \
             discards them. Inspect it first (`kubectl dbc status {name}`, the MemberQuarantined \
             event); add --discard-diverged when they may go"
        );
    }
    if let Some(r) = status.reseed.as_ref().filter(|r| r.finished.is_none()) {
        if r.member == pod {
            return Ok(Start::Attach);
        }
        anyhow::bail!(
            "{} of {name} is being reseeded (since {}): one at a time; wait for it (`kubectl dbc \
             status {name}`), then ask again",
            r.member,
            r.started.0
        );
    }
    match annotation(cluster) {
        Some(value) if value == pod => {
            if status.handled_reseed.as_deref() == Some(pod) {
                Ok(Start::ClearThenWrite)
            } else {
                Ok(Start::Attach)
            }
        }
        Some(value) if status.handled_reseed.as_deref() != Some(value) => anyhow::bail!(
            "{name} already has a reseed request ({RESEED_ANNOTATION}={value}) the operator has \
             not handled yet: wait for it, or remove it with `kubectl annotate databasecluster \
             {name} {RESEED_ANNOTATION}-`"
        ),
        _ => Ok(Start::Write),
    }
}

/// Where the request for `pod` stands; `before` is `status.failover.reseed` as it was before
/// the request was written (a reseed started later is this request's).
pub fn observe(cluster: &DatabaseCluster, pod: &str, before: Option<&Time>) -> Seen {
    let status = failover(cluster);
    let ours = |r: &&Reseed| r.member == pod && before.is_none_or(|b| r.started.0 > b.0);
    match status.reseed.as_ref().filter(ours) {
        Some(Reseed {
            finished: Some(finished),
            reason,
            started,
            ..
        }) => Seen::Done {
            reason: reason.clone(),
            seconds: finished.0.as_second() - started.0.as_second(),
        },
        Some(r) => Seen::Pending(format!(
            "discarding the data of {pod} and copying the primary (since {})",
            r.started.0
        )),
        None if status.handled_reseed.as_deref() == Some(pod) => Seen::Refused,
        None => Seen::Pending("waiting for the operator to pick up the request".to_owned()),
    }
}

/// Requests the reseed and follows it, writing progress lines to `out`. Returns the closing
/// message, whether it succeeded, and what explains a failure (conditions, events).
pub async fn run(
    client: &Client,
    namespace: &str,
    name: &str,
    pod: &str,
    discard_diverged: bool,
    timing: Timing,
    out: &mut dyn Write,
) -> anyhow::Result<((String, bool), Vec<String>)> {
    let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), namespace);
    let mut progress = Progress::start();
    let started = progress.started();
    let mut cluster = get_cluster(&api, namespace, name, "").await?;
    let annotate = async |value: Option<&str>| {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {RESEED_ANNOTATION: value}}})),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "annotating DatabaseCluster {namespace}/{name} (you need `patch` on \
                 databaseclusters): {e}"
            )
        })
    };
    let start = start(&cluster, pod, discard_diverged)?;
    let before = failover(&cluster)
        .reseed
        .filter(|r| !(start == Start::Attach && r.member == pod && r.finished.is_none()))
        .map(|r| r.started);
    match start {
        Start::Attach => progress.say(
            out,
            &format!("reseed of {pod} already requested; following it"),
        ),
        Start::ClearThenWrite | Start::Write => {
            if start == Start::ClearThenWrite {
                progress.say(
                    out,
                    &format!("{RESEED_ANNOTATION}={pod} was handled before; asking again"),
                );
                annotate(None).await?;
                while failover(&cluster).handled_reseed.is_some() {
                    if started.elapsed() >= timing.timeout {
                        anyhow::bail!("the operator did not clear the handled request in time");
                    }
                    tokio::time::sleep(timing.poll).await;
                    cluster = get_cluster(&api, namespace, name, "").await?;
                }
            }
            annotate(Some(pod)).await?;
            progress.say(
                out,
                &format!("requested a reseed of {pod}: its data directory is discarded and copied from the primary"),
            );
        }
    }
    loop {
        match observe(&cluster, pod, before.as_ref()) {
            Seen::Done { reason, seconds } => {
                return Ok((
                    (
                        format!(
                            "{pod} of {name} seeded again and streaming after {seconds} s ({reason})"
                        ),
                        true,
                    ),
                    Vec::new(),
                ));
            }
            Seen::Refused => {
                let details = explain(&cluster, &events(client, namespace, name).await?);
                return Ok((
                    (format!("reseed of {pod} refused by the operator"), false),
                    details,
                ));
            }
            Seen::Pending(line) => progress.update(out, line),
        }
        if started.elapsed() >= timing.timeout {
            let details = explain(&cluster, &events(client, namespace, name).await?);
            return Ok((
                (
                    format!(
                        "reseed of {pod} not finished within --timeout (last seen: {}); the \
                         operator carries on: follow it with `kubectl dbc status {name}`",
                        progress.last()
                    ),
                    false,
                ),
                details,
            ));
        }
        tokio::time::sleep(timing.poll).await;
        cluster = get_cluster(&api, namespace, name, "").await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use database_operator_api::ReseedTrigger;

    fn cluster(status: serde_json::Value, annotation: Option<&str>) -> DatabaseCluster {
        let mut c: DatabaseCluster = serde_json::from_value(json!({
            "apiVersion": "database.example.com/v1alpha1",
            "kind": "DatabaseCluster",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {
                "engine": "postgresql", "version": "15", "replicas": 3,
                "storage": {"size": "1Gi"},
                "passwordSecretRef": {"name": "pw", "key": "password"}
            },
            "status": status,
        }))
        .unwrap();
        if let Some(a) = annotation {
            c.metadata.annotations = Some([(RESEED_ANNOTATION.to_owned(), a.to_owned())].into());
        }
        c
    }

    fn reseed(member: &str, started: i64, finished: Option<i64>) -> serde_json::Value {
        let t = |s: i64| jiff::Timestamp::from_second(s).unwrap().to_string();
        let mut r = json!({
            "member": member, "trigger": ReseedTrigger::Requested, "reason": "asked",
            "started": t(started),
        });
        if let Some(f) = finished {
            r["finished"] = json!(t(f));
        }
        r
    }

    #[test]
    fn start_refuses_what_the_operator_would_and_what_loses_data_unasked() {
        let running = cluster(json!({"primaryPod": "orders-0"}), None);
        assert_eq!(start(&running, "orders-2", false).unwrap(), Start::Write);
        for (pod, says) in [
            ("orders-0", "is the primary"),
            ("orders-3", "not a member"),
            ("other-1", "not a member"),
        ] {
            let e = start(&running, pod, false).unwrap_err().to_string();
            assert!(e.contains(says), "{pod}: {e}");
        }
        let quarantined = cluster(
            json!({"primaryPod": "orders-0", "failover": {"quarantined": ["orders-2"]}}),
            None,
        );
        let e = start(&quarantined, "orders-2", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--discard-diverged"), "{e}");
        assert_eq!(start(&quarantined, "orders-2", true).unwrap(), Start::Write);

        let busy = cluster(
            json!({"primaryPod": "orders-0", "failover": {"reseed": reseed("orders-1", 100, None)}}),
            None,
        );
        assert_eq!(start(&busy, "orders-1", false).unwrap(), Start::Attach);
        let e = start(&busy, "orders-2", false).unwrap_err().to_string();
        assert!(e.contains("one at a time"), "{e}");

        let handled = cluster(
            json!({"primaryPod": "orders-0", "failover": {"handledReseed": "orders-2"}}),
            Some("orders-2"),
        );
        assert_eq!(
            start(&handled, "orders-2", false).unwrap(),
            Start::ClearThenWrite
        );
        let waiting = cluster(json!({"primaryPod": "orders-0"}), Some("orders-1"));
        assert_eq!(start(&waiting, "orders-1", false).unwrap(), Start::Attach);
        let e = start(&waiting, "orders-2", false).unwrap_err().to_string();
        assert!(e.contains("not handled yet"), "{e}");
    }

    #[test]
    fn observe_follows_the_reseed_started_after_the_request() {
        let before = Some(Time(jiff::Timestamp::from_second(100).unwrap()));
        let old = cluster(
            json!({"failover": {"reseed": reseed("orders-2", 100, Some(150))}}),
            Some("orders-2"),
        );
        assert!(matches!(
            observe(&old, "orders-2", before.as_ref()),
            Seen::Pending(_)
        ));
        let running = cluster(
            json!({"failover": {"reseed": reseed("orders-2", 200, None), "handledReseed": "orders-2"}}),
            Some("orders-2"),
        );
        assert!(
            matches!(observe(&running, "orders-2", before.as_ref()), Seen::Pending(l) if l.contains("copying"))
        );
        let done = cluster(
            json!({"failover": {"reseed": reseed("orders-2", 200, Some(242)), "handledReseed": "orders-2"}}),
            Some("orders-2"),
        );
        assert_eq!(
            observe(&done, "orders-2", before.as_ref()),
            Seen::Done {
                reason: "asked".into(),
                seconds: 42
            }
        );
        let refused = cluster(
            json!({"failover": {"handledReseed": "orders-2"}}),
            Some("orders-2"),
        );
        assert_eq!(observe(&refused, "orders-2", None), Seen::Refused);
    }
}
