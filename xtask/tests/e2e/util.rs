//! Helpers of the scenarios: deadline-bounded waits, kubectl with its exit status, manifests,
//! typed reads, the audit log, and a watch that records every state a cluster went through.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use database_operator_api::{DatabaseCluster, conditions};
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use xtask::cluster::{AuditEvent, read_audit_log};

use crate::env::{Env, OPERATOR_USER};
use crate::harness::{Ctx, lock};

/// How often waits look again.
pub const POLL: Duration = Duration::from_millis(250);

/// The label every owned object and pod of a cluster carries.
pub const CLUSTER_LABEL: &str = "database.example.com/cluster";
/// The pod label naming the member's role.
pub const ROLE_LABEL: &str = "database.example.com/role";

/// What a wait's check found.
pub enum Check<T> {
    /// The condition holds.
    Done(T),
    /// Not yet; what was seen instead (reported on timeout).
    Pending(String),
}

/// Calls `check` every [`POLL`] until it is done or `timeout` passes; a timeout fails with
/// what was awaited and what was seen last. Errors of `check` count as "not yet".
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<Check<T>>,
) -> Result<T> {
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(Check::Done(value)) => return Ok(value),
            Ok(Check::Pending(seen)) => seen,
            Err(e) => format!("error: {e:#}"),
        };
        if started.elapsed() >= timeout {
            bail!(
                "timed out after {:.1}s waiting for {what}; last seen: {last}",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The result of a kubectl run that may fail.
pub struct Kubectl {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs kubectl as admin with `args` (and `stdin`), success or not.
pub fn kubectl(env: &Env, args: &[&str], stdin: Option<&str>) -> Result<Kubectl> {
    let mut cmd = env.cluster.kubectl();
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("running kubectl")?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok(Kubectl {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A Secret with the password under key `password`.
pub fn secret_manifest(namespace: &str, name: &str, password: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: {name}
  namespace: {namespace}
type: Opaque
stringData:
  password: {password}
"
    )
}

/// The spec of a test cluster.
#[derive(Clone, Debug)]
pub struct Spec<'a> {
    pub name: &'a str,
    pub engine: &'a str,
    pub version: &'a str,
    pub replicas: i32,
    pub storage: &'a str,
    pub secret: &'a str,
    pub backup: bool,
}

impl<'a> Spec<'a> {
    /// MySQL 8.4.0, `replicas` members, 10Gi on fast-ssd, password from Secret `secret`,
    /// nightly backups.
    pub fn mysql(name: &'a str, replicas: i32, secret: &'a str) -> Self {
        Spec {
            name,
            engine: "mysql",
            version: "8.4.0",
            replicas,
            storage: "10Gi",
            secret,
            backup: true,
        }
    }

    /// PostgreSQL 16.4, no backups.
    pub fn postgresql(name: &'a str, replicas: i32, secret: &'a str) -> Self {
        Spec {
            name,
            engine: "postgresql",
            version: "16.4",
            replicas,
            storage: "10Gi",
            secret,
            backup: false,
        }
    }

    /// The DatabaseCluster manifest.
    pub fn manifest(&self, namespace: &str) -> String {
        let mut out = format!(
            "apiVersion: database.example.com/v1alpha1
kind: DatabaseCluster
metadata:
  name: {name}
  namespace: {namespace}
spec:
  engine: {engine}
  version: \"{version}\"
  replicas: {replicas}
  storage:
    size: {storage}
    storageClassName: fast-ssd
  passwordSecretRef:
    name: {secret}
    key: password
",
            name = self.name,
            engine = self.engine,
            version = self.version,
            replicas = self.replicas,
            storage = self.storage,
            secret = self.secret,
        );
        if self.backup {
            let _ = write!(
                out,
                "  backup:\n    schedule: \"0 2 * * *\"\n    retention: 7\n    s3Bucket: e2e-backups\n"
            );
        }
        out
    }
}

/// Applies a Secret and a cluster of `spec` (the Secret named by `spec.secret`).
pub fn create_cluster(env: &Env, namespace: &str, spec: &Spec<'_>, password: &str) -> Result<()> {
    env.cluster.apply(&format!(
        "{}---\n{}",
        secret_manifest(namespace, spec.secret, password),
        spec.manifest(namespace)
    ))?;
    Ok(())
}

/// A namespaced typed API.
pub fn api<K>(env: &Env, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(env.client.clone(), namespace)
}

/// Objects of kind `K` in `namespace` labelled as belonging to cluster `name`.
pub async fn owned<K>(env: &Env, namespace: &str, name: &str) -> Result<Vec<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let list = api::<K>(env, namespace)
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={name}")))
        .await?;
    Ok(list.items)
}

/// `status.phase` as written, or `""`.
pub fn phase(dbc: &DatabaseCluster) -> &'static str {
    dbc.status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or("", |p| p.as_str())
}

/// `status.readyReplicas` (0 without status).
pub fn ready_replicas(dbc: &DatabaseCluster) -> i32 {
    dbc.status.as_ref().map_or(0, |s| s.ready_replicas)
}

/// The condition of `type_`.
pub fn condition<'a>(dbc: &'a DatabaseCluster, type_: &str) -> Option<&'a Condition> {
    dbc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// A one-line summary of a cluster's status.
pub fn describe(dbc: &DatabaseCluster) -> String {
    let cond = |t: &str| {
        condition(dbc, t).map_or_else(
            || format!("{t}=?"),
            |c| format!("{t}={}({}: {})", c.status, c.reason, c.message),
        )
    };
    format!(
        "phase {:?}, {}/{} ready, primary {:?}, {}, {}",
        phase(dbc),
        ready_replicas(dbc),
        dbc.spec.replicas,
        dbc.status.as_ref().and_then(|s| s.primary_pod.clone()),
        cond(conditions::READY),
        cond(conditions::DEGRADED)
    )
}

/// Waits until cluster `name` reports Running with `replicas` ready members and Ready=True.
pub async fn wait_running(
    ctx: &Ctx,
    env: &Env,
    namespace: &str,
    name: &str,
    replicas: i32,
    timeout: Duration,
) -> Result<DatabaseCluster> {
    let api = api::<DatabaseCluster>(env, namespace);
    let started = Instant::now();
    let dbc = wait_for(
        &format!("{namespace}/{name} to be Running with {replicas}/{replicas} ready"),
        timeout,
        async || {
            let dbc = api.get(name).await?;
            let ready = condition(&dbc, conditions::READY).is_some_and(|c| c.status == "True");
            Ok(
                if phase(&dbc) == "Running"
                    && ready_replicas(&dbc) == replicas
                    && dbc.spec.replicas == replicas
                    && ready
                {
                    Check::Done(dbc)
                } else {
                    Check::Pending(describe(&dbc))
                },
            )
        },
    )
    .await?;
    ctx.step(format!(
        "{namespace}/{name} Running, {replicas}/{replicas} ready ({:.1}s)",
        started.elapsed().as_secs_f64()
    ));
    Ok(dbc)
}

/// An event (`events.k8s.io/v1`) about an object.
#[derive(Clone, Debug)]
pub struct EventInfo {
    pub type_: String,
    pub reason: String,
    pub note: String,
    pub reporter: String,
}

/// Events in `namespace` about the object named `name`.
pub async fn events_about(env: &Env, namespace: &str, name: &str) -> Result<Vec<EventInfo>> {
    let list = api::<Event>(env, namespace)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| EventInfo {
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            note: e.note.unwrap_or_default(),
            reporter: e.reporting_controller.unwrap_or_default(),
        })
        .collect())
}

/// The operator's events about `name` with `reason`.
pub async fn operator_events(
    env: &Env,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Result<Vec<EventInfo>> {
    Ok(events_about(env, namespace, name)
        .await?
        .into_iter()
        .filter(|e| e.reason == reason && e.reporter == "database-operator")
        .collect())
}

/// A point in the audit log: events after it are "since".
pub struct AuditCursor {
    path: std::path::PathBuf,
    at: Timestamp,
}

impl AuditCursor {
    pub fn now(env: &Env) -> Result<Self> {
        Ok(Self {
            path: env.audit_log()?,
            at: Timestamp::now(),
        })
    }

    /// A cursor at `at`.
    pub fn since(env: &Env, at: Timestamp) -> Result<Self> {
        Ok(Self {
            path: env.audit_log()?,
            at,
        })
    }

    /// Every audit event completed after the cursor.
    pub fn events(&self) -> Result<Vec<AuditEvent>> {
        Ok(read_audit_log(&self.path)?
            .into_iter()
            .filter(|e| {
                e.stage_timestamp
                    .parse::<Timestamp>()
                    .is_ok_and(|t| t > self.at)
            })
            .collect())
    }

    /// The operator user's completed writes after the cursor.
    pub fn operator_writes(&self) -> Result<Vec<AuditEvent>> {
        Ok(self
            .events()?
            .into_iter()
            .filter(|e| e.is_write() && e.user == OPERATOR_USER)
            .collect())
    }
}

/// `patch statefulsets e2e-x/name -> 200`.
pub fn describe_audit(e: &AuditEvent) -> String {
    let resource = if e.subresource.is_empty() {
        e.resource.clone()
    } else {
        format!("{}/{}", e.resource, e.subresource)
    };
    format!(
        "{} {} {} {}/{} -> {}",
        &e.stage_timestamp.get(11..23).unwrap_or(&e.stage_timestamp),
        e.verb,
        resource,
        e.namespace,
        e.name,
        e.code.map_or("?".to_string(), |c| c.to_string())
    )
}

/// Fails listing the operator's writes when there are any.
pub fn no_writes(writes: &[AuditEvent], during: &str) -> Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    bail!(
        "the operator wrote {} times {during}:\n  {}",
        writes.len(),
        writes
            .iter()
            .map(describe_audit)
            .collect::<Vec<_>>()
            .join("\n  ")
    )
}

/// One state of a cluster as a watch delivered it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub phase: String,
    pub ready: i32,
    pub deleting: bool,
    pub finalizers: Vec<String>,
    /// Reason and message of `Degraded` when it is True.
    pub degraded: Option<(String, String)>,
    /// The object was deleted.
    pub gone: bool,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.gone {
            return write!(f, "(deleted)");
        }
        write!(f, "{} {} ready", self.phase, self.ready)?;
        if self.deleting {
            write!(f, " deleting finalizers={:?}", self.finalizers)?;
        }
        if let Some((reason, message)) = &self.degraded {
            write!(f, " Degraded({reason}: {message})")?;
        }
        Ok(())
    }
}

/// Records every state of one cluster from a watch, until dropped.
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Starts watching `namespace/name`; returns once the initial list is in, so nothing that
    /// happens afterwards is missed.
    pub async fn start(env: &Env, namespace: &str, name: &str) -> Result<Recorder> {
        let api = api::<DatabaseCluster>(env, namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let entry = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        Some(seen_of(&o))
                    }
                    Ok(watcher::Event::Delete(_)) => Some(Seen {
                        phase: String::new(),
                        ready: 0,
                        deleting: true,
                        finalizers: Vec::new(),
                        degraded: None,
                        gone: true,
                    }),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                        None
                    }
                    Ok(watcher::Event::Init) | Err(_) => None,
                };
                if let Some(entry) = entry {
                    let mut list = lock(&record);
                    if list.last().map(ToString::to_string) != Some(entry.to_string()) {
                        list.push(entry);
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), synced_rx)
            .await
            .context("the watch did not sync within 30s")?
            .context("the watch stopped")?;
        Ok(Recorder { seen, task })
    }

    /// Every distinct state seen so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }

    /// Waits until the recorded states satisfy `done`. A GET can see a change before this
    /// watch delivers it, so a check on the watch's history after a GET-based wait must first
    /// let the watch catch up; the error lists what the watch did see.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Seen]) -> bool,
    ) -> Result<Vec<Seen>> {
        wait_for(what, timeout, async || {
            let seen = self.seen();
            Ok(if done(&seen) {
                Check::Done(seen)
            } else {
                Check::Pending(self.history())
            })
        })
        .await
    }

    /// The states as one line each, for messages.
    pub fn history(&self) -> String {
        self.seen().iter().map(|s| format!("\n      {s}")).collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn seen_of(dbc: &DatabaseCluster) -> Seen {
    Seen {
        phase: phase(dbc).to_string(),
        ready: ready_replicas(dbc),
        deleting: dbc.metadata.deletion_timestamp.is_some(),
        finalizers: dbc.finalizers().to_vec(),
        degraded: condition(dbc, conditions::DEGRADED)
            .filter(|c| c.status == "True")
            .map(|c| (c.reason.clone(), c.message.clone())),
        gone: false,
    }
}

/// The log of container `container` of process pod `ns/pod`, as its process node keeps it
/// (`<state>/pods/<ns>_<pod>/<container>.log`; `kubectl logs` needs a kubelet endpoint the
/// process nodes do not serve); empty when there is none.
pub fn container_log(env: &Env, ns: &str, pod: &str, container: &str) -> String {
    std::fs::read_to_string(
        env.state_dir
            .join("pods")
            .join(format!("{ns}_{pod}"))
            .join(format!("{container}.log")),
    )
    .unwrap_or_default()
}
