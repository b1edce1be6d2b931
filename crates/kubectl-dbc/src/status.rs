//! `kubectl dbc status`: one screen per cluster.
//!
//! [`fetch`] reads the cluster, its database pods and its events (IO); [`report`] turns them into
//! a [`StatusReport`] (pure, the `-o json|yaml` form); [`render`] lays a report out as text (pure,
//! snapshot-tested). What the operator does not report yet is shown as "not reported", never
//! guessed.

use anyhow::Context as _;
use database_operator_api::DatabaseCluster;
use database_operator_core::members::image_tag;
use database_operator_core::render::labels;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use crate::cli::get_cluster;
use crate::term::{Cell, Colour, Style, WIDTH, age, table, truncate};

/// Shown for a fact the operator does not report yet.
pub const NOT_REPORTED: &str = "not reported";
/// How many of a cluster's events the screen shows (the newest).
pub const EVENTS_SHOWN: usize = 5;

/// What `status` reads of one cluster.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The cluster.
    pub cluster: DatabaseCluster,
    /// Its database pods (labelled with the cluster, component `database`).
    pub pods: Vec<Pod>,
    /// Events about the cluster.
    pub events: Vec<Event>,
}

/// Reads `name` (or every cluster in scope when `None`) with its pods and events.
pub async fn fetch(
    client: &Client,
    namespace: Option<&str>,
    name: Option<&str>,
) -> anyhow::Result<Vec<Fetched>> {
    let clusters: Api<DatabaseCluster> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut found = match name {
        Some(name) => {
            let ns = namespace.unwrap_or("default");
            vec![
                get_cluster(
                    &clusters,
                    ns,
                    name,
                    "; pick another namespace with -n or all with -A",
                )
                .await?,
            ]
        }
        None => clusters
            .list(&ListParams::default())
            .await
            .context("listing DatabaseClusters (is the CRD installed? `kubectl get crd databaseclusters.database.example.com`)")?
            .items,
    };
    found.sort_by_key(|c| (c.namespace(), c.name_any()));
    let mut out = Vec::with_capacity(found.len());
    for cluster in found {
        let ns = cluster.namespace().unwrap_or_default();
        let name = cluster.name_any();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let selector = format!(
            "{}={name},{}={}",
            labels::CLUSTER,
            "app.kubernetes.io/component",
            labels::COMPONENT_DATABASE
        );
        let pods = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("listing the pods of {ns}/{name}"))?
            .items;
        let events: Api<Event> = Api::namespaced(client.clone(), &ns);
        let events = events
            .list(&ListParams::default().fields(&format!(
                "involvedObject.kind={},involvedObject.name={name}",
                database_operator_api::KIND
            )))
            .await
            .with_context(|| format!("listing the events of {ns}/{name}"))?
            .items;
        out.push(Fetched {
            cluster,
            pods,
            events,
        });
    }
    Ok(out)
}

/// One cluster's status, as `-o json|yaml` prints it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.engine`.
    pub engine: String,
    /// `spec.version`.
    pub version: String,
    /// `status.currentVersion`: what every ready member runs.
    pub current_version: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// `status.primaryPod`.
    pub primary: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `status.upgrade`: the version roll in progress, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeReport>,
    /// The database pods, by name.
    pub members: Vec<MemberReport>,
    /// Backups.
    pub backup: BackupReport,
    /// `status.conditions`.
    pub conditions: Vec<ConditionReport>,
    /// The newest events, oldest first.
    pub events: Vec<EventReport>,
}

/// A version roll in progress (`status.upgrade`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeReport {
    /// The version being replaced.
    pub from: String,
    /// The version being rolled out.
    pub to: String,
    /// `Replicas`, `Switchover`, `Primary` or `Paused`.
    pub step: String,
    /// The member being replaced, or the switchover target.
    pub member: Option<String>,
    /// Members done, in order.
    pub members_done: Vec<String>,
    /// What the roll waits for, while it waits.
    pub waiting: Option<String>,
    /// Why it is paused, when it is.
    pub paused_reason: Option<String>,
}

/// One member (database pod).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberReport {
    /// Pod name.
    pub name: String,
    /// `database.example.com/role` label.
    pub role: Option<String>,
    /// The pod's Ready condition is True.
    pub ready: bool,
    /// `status.phase` of the pod, `Terminating` when it is being deleted.
    pub state: String,
    /// `app.kubernetes.io/version` label, else the image tag.
    pub version: Option<String>,
    /// The role the member's server reports (`status.members`): `primary` or `replica`;
    /// `None` when its server did not answer the operator's last probe.
    pub server_role: Option<String>,
    /// A replica: how far behind the primary it applies, at least this many seconds
    /// (`status.members[].lagSeconds`, coarse steps).
    pub lag_seconds: Option<u64>,
    /// A replica: whether it is replicating.
    pub replicating: Option<bool>,
    /// Restarts of the pod's containers, summed.
    pub restarts: i32,
    /// `spec.nodeName`.
    pub node: Option<String>,
}

/// Backups of a cluster.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupReport {
    /// `spec.backup.schedule`; `None`: backups are off.
    pub schedule: Option<String>,
    /// `spec.backup.retention`.
    pub retention: Option<i32>,
    /// `spec.backup.s3Bucket`.
    pub bucket: Option<String>,
    /// `status.nextBackupTime`.
    pub next: Option<Timestamp>,
    /// `status.lastBackup.completed`: when the newest successful backup Job completed.
    pub last: Option<Timestamp>,
    /// `status.lastBackup.sizeBytes`: the stored size of that backup.
    pub last_size_bytes: Option<i64>,
    /// `status.backupCount`: complete backups after that backup's retention.
    pub count: Option<i32>,
    /// `status.lastVerifiedBackup.lastSuccess`: when a restore drill last proved a backup.
    pub last_verified_restore: Option<Timestamp>,
    /// The newest restore drill's Job when it failed (`status.lastVerifiedBackup`).
    pub failed_drill: Option<String>,
}

/// A condition.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: Timestamp,
}

/// An event about the cluster.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventReport {
    /// When it last happened.
    pub time: Option<Timestamp>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// CamelCase reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// How many times it happened.
    pub count: i32,
}

fn enum_str<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn member(pod: &Pod, servers: &[database_operator_api::MemberStatus]) -> MemberReport {
    let labels = pod.labels();
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let state = if pod.metadata.deletion_timestamp.is_some() {
        "Terminating".to_owned()
    } else {
        status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".to_owned())
    };
    let version = labels
        .get("app.kubernetes.io/version")
        .cloned()
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.as_deref())
                .and_then(image_tag)
                .map(str::to_owned)
        });
    let name = pod.name_any();
    let server = servers.iter().find(|s| s.pod == name);
    MemberReport {
        role: labels.get(labels::ROLE).cloned(),
        ready,
        state,
        version,
        server_role: server.map(|s| s.role.clone()),
        lag_seconds: server.and_then(|s| s.lag_seconds),
        replicating: server.and_then(|s| s.replicating),
        name,
        restarts: status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
    }
}

fn event_time(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The report of one fetched cluster (pure).
pub fn report(fetched: &Fetched) -> StatusReport {
    let cluster = &fetched.cluster;
    let status = cluster.status.clone().unwrap_or_default();
    let mut members: Vec<MemberReport> = fetched
        .pods
        .iter()
        .map(|pod| member(pod, &status.members))
        .collect();
    members.sort_by_key(|m| natural_key(&m.name));
    let mut events: Vec<EventReport> = fetched
        .events
        .iter()
        .map(|e| EventReport {
            time: event_time(e),
            type_: e.type_.clone().unwrap_or_else(|| "Normal".to_owned()),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            count: e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1),
        })
        .collect();
    events.sort_by_key(|e| e.time);
    let skip = events.len().saturating_sub(EVENTS_SHOWN);
    let events = events.split_off(skip);
    let backup = cluster.spec.backup.as_ref();
    StatusReport {
        namespace: cluster.namespace().unwrap_or_default(),
        name: cluster.name_any(),
        engine: cluster.spec.engine.to_string(),
        version: cluster.spec.version.clone(),
        current_version: status.current_version.clone(),
        phase: status.phase.as_ref().map(enum_str),
        replicas: cluster.spec.replicas,
        ready_replicas: status.ready_replicas,
        primary: status.primary_pod.clone(),
        generation: cluster.metadata.generation,
        observed_generation: status.observed_generation,
        upgrade: status.upgrade.as_ref().map(|u| UpgradeReport {
            from: u.from.clone(),
            to: u.to.clone(),
            step: enum_str(&u.step),
            member: u.member.clone(),
            members_done: u.members_done.clone(),
            waiting: u.waiting.clone(),
            paused_reason: u.paused_reason.clone(),
        }),
        members,
        backup: BackupReport {
            schedule: backup.map(|b| b.schedule.clone()),
            retention: backup.map(|b| b.retention),
            bucket: backup.map(|b| b.s3_bucket.clone()),
            next: status.next_backup_time.as_ref().map(|t| t.0),
            last: status.last_backup.as_ref().map(|l| l.completed.0),
            last_size_bytes: status.last_backup.as_ref().and_then(|l| l.size_bytes),
            count: status.backup_count,
            last_verified_restore: status
                .last_verified_backup
                .as_ref()
                .and_then(|v| v.last_success.as_ref())
                .map(|t| t.0),
            failed_drill: status
                .last_verified_backup
                .as_ref()
                .filter(|v| !v.succeeded)
                .map(|v| v.job.clone()),
        },
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionReport {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.0,
            })
            .collect(),
        events,
    }
}

/// `orders-10` after `orders-9`.
fn natural_key(name: &str) -> (String, u64) {
    match name.rsplit_once('-') {
        Some((base, n)) if n.parse::<u64>().is_ok() => (base.to_owned(), n.parse().unwrap_or(0)),
        _ => (name.to_owned(), 0),
    }
}

mod screen;

#[cfg(test)]
use screen::render;
pub use screen::render_all;

#[cfg(test)]
mod tests;
