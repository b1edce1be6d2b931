//! Process nodes: a plain Pod (not made by the operator) runs a real PostgreSQL server as local
//! processes; a killed server is restarted with its data; deletion stops every process; an image
//! without local binaries stays waiting with a Warning event naming it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use xtask::cluster::images::{ImageTable, default_cache_dir};
use xtask::cluster::procnode::PROCESS_NODE_LABEL;

use crate::env::Env;
use crate::harness::Ctx;
use crate::util::{Check, events_about, wait_for};

/// The tag the local postgres root serves (`15` matches any 15.x, as a floating tag does).
const POSTGRES_IMAGE: &str = "docker.io/library/postgres:15";

/// A container's settings under the restricted Pod Security Standard (the namespace enforces it).
const SECURE: &str = "{allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}";

fn pod_manifest(ns: &str, name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{app: {name}}}
spec:
  nodeSelector: {{"{PROCESS_NODE_LABEL}": "true"}}
  tolerations:
  - {{key: "{PROCESS_NODE_LABEL}", operator: Equal, value: "true", effect: NoSchedule}}
  terminationGracePeriodSeconds: 10
  securityContext: {{runAsUser: 999, runAsGroup: 999, runAsNonRoot: true, seccompProfile: {{type: RuntimeDefault}}}}
  volumes:
  - {{name: data, emptyDir: {{}}}}
  initContainers:
  - name: initdb
    image: {image}
    command:
    - sh
    - -c
    - |
      set -e
      test -s /data/pgdata/PG_VERSION && exit 0
      initdb -D /data/pgdata -U postgres --auth=trust >/dev/null
      echo "host all all 127.0.0.0/8 trust" >> /data/pgdata/pg_hba.conf
    securityContext: {SECURE}
    volumeMounts: [{{name: data, mountPath: /data}}]
  containers:
  - name: postgres
    image: {image}
    env:
    - name: POD_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    command: [postgres, -D, /data/pgdata, -c, "listen_addresses=$(POD_IP)", -c, unix_socket_directories=/tmp, -c, shared_buffers=16MB, -c, fsync=off]
    readinessProbe:
      exec: {{command: [pg_isready, -h, /tmp, -U, postgres]}}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      tcpSocket: {{port: 5432}}
      periodSeconds: 5
      failureThreshold: 3
    securityContext: {SECURE}
    volumeMounts: [{{name: data, mountPath: /data}}]
"#
    )
}

pub fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn summary(pod: &Pod) -> String {
    let Some(s) = &pod.status else {
        return "no status".into();
    };
    let containers: Vec<String> = s
        .init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .map(|c| {
            let state = c.state.as_ref().map_or("?".to_string(), |st| {
                if let Some(w) = &st.waiting {
                    format!(
                        "waiting {} {}",
                        w.reason.clone().unwrap_or_default(),
                        w.message.clone().unwrap_or_default()
                    )
                } else if st.running.is_some() {
                    "running".into()
                } else if let Some(t) = &st.terminated {
                    format!("terminated {}", t.exit_code)
                } else {
                    "?".into()
                }
            });
            format!(
                "{}: {state}, ready {}, restarts {}",
                c.name, c.ready, c.restart_count
            )
        })
        .collect();
    format!(
        "phase {:?}, ip {:?}, ready {}, [{}]",
        s.phase,
        s.pod_ip,
        ready(pod),
        containers.join("; ")
    )
}

fn server_pid(pod: &Pod) -> Option<u32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "postgres")?
        .container_id
        .as_deref()?
        .strip_prefix("process://")?
        .parse()
        .ok()
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "postgres"))
        .map_or(-1, |c| c.restart_count)
}

/// `psql` from the postgres image root (chrooted: the machine needs no client of its own).
fn psql(ip: &str, sql: &str) -> Result<String> {
    let (recipe, _) =
        ImageTable::recipe_for(POSTGRES_IMAGE).context("no recipe serves postgres:15")?;
    let (root, _) = ImageTable::new(default_cache_dir()?, None).ensure(recipe)?;
    // A bare PostgreSQL pod, no DatabaseCluster: plain TCP on purpose.
    let _exempt = crate::scenarios::capture::exempt(ip);
    let out = Command::new("chroot")
        .arg(root)
        .args([
            "psql", "-h", ip, "-U", "postgres", "-d", "postgres", "-XAtc", sql,
        ])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .context("running psql in the postgres image root")?;
    if !out.status.success() {
        bail!(
            "psql -h {ip} -c {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

async fn wait_ready(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<Pod> {
    wait_for(&format!("pod {name} Ready"), timeout, async || {
        let pod = pods.get(name).await?;
        Ok(if ready(&pod) {
            Check::Done(pod)
        } else {
            Check::Pending(summary(&pod))
        })
    })
    .await
}

/// Ensures the postgres root is built (minutes the first time on a machine, then cached), so
/// that the pod's timings measure the pod.
async fn warm_image() -> Result<()> {
    tokio::task::spawn_blocking(|| {
        let (recipe, _) =
            ImageTable::recipe_for(POSTGRES_IMAGE).context("no recipe serves postgres:15")?;
        ImageTable::new(default_cache_dir()?, None)
            .ensure(recipe)
            .map(|_| ())
    })
    .await?
}

pub fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
}

/// A PostgreSQL pod on a process node: Ready with a real server on its own loopback IP,
/// restarted with its data after `kill -9`, its processes gone after deletion.
pub async fn postgres_pod_runs_restarts_and_stops(ctx: &Ctx) -> Result<()> {
    let env: std::sync::Arc<Env> = ctx.env().await?;
    let ns = ctx.namespace("procnode").await?;
    warm_image().await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let started = Instant::now();
    env.cluster
        .apply(&pod_manifest(&ns, "pg", POSTGRES_IMAGE))?;
    let pod = wait_ready(&pods, "pg", Duration::from_secs(60)).await?;
    ctx.note(format!(
        "postgres pod Ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    ));
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    ensure!(node.starts_with("proc-"), "pod pg landed on {node}");
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("no podIP")?;
    ensure!(
        ip.starts_with("127.10."),
        "pod IP {ip} is not in 127.10.0.0/16"
    );
    let host_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.host_ip.clone())
        .unwrap_or_default();
    ensure!(host_ip.starts_with("127.0.2."), "host IP {host_ip}");
    ctx.step(format!("pg Ready on {node} at {ip}"));

    ensure!(
        psql(&ip, "select 1")? == "1",
        "the server on {ip} answers wrongly"
    );
    psql(
        &ip,
        "create table kept (v int); insert into kept values (42)",
    )?;
    let pid = server_pid(&pod).context("no containerID process://<pid>")?;
    ensure!(process_alive(pid), "server pid {pid} is not running");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    ensure!(
        exe.to_string_lossy().contains("postgres"),
        "pid {pid} runs {}, not postgres",
        exe.display()
    );

    // kill -9 of the server: NotReady, restarted (restartCount 1), data intact.
    let killed_at = k8s_openapi::jiff::Timestamp::now();
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -9 {pid} failed");
    let seen_not_ready = wait_for(
        "pg NotReady after kill -9",
        Duration::from_secs(15),
        async || {
            let pod = pods.get("pg").await?;
            Ok(if !ready(&pod) || restart_count(&pod) >= 1 {
                Check::Done(!ready(&pod))
            } else {
                Check::Pending(summary(&pod))
            })
        },
    )
    .await?;
    let restarted = Instant::now();
    let pod = wait_for(
        "pg Ready again with restartCount 1",
        Duration::from_secs(60),
        async || {
            let pod = pods.get("pg").await?;
            Ok(if ready(&pod) && restart_count(&pod) == 1 {
                Check::Done(pod)
            } else {
                Check::Pending(summary(&pod))
            })
        },
    )
    .await?;
    // Ready went False and back to True after the kill, even when no poll saw the False.
    let ready_since = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
        .context("Ready has no lastTransitionTime")?;
    ensure!(
        ready_since.as_second() >= killed_at.as_second(),
        "Ready has not transitioned since the kill (last transition {ready_since}, kill at {killed_at})"
    );
    let new_pid = server_pid(&pod).context("no containerID after the restart")?;
    ensure!(new_pid != pid, "containerID still names pid {pid}");
    ensure!(!process_alive(pid), "killed pid {pid} still runs");
    ensure!(
        psql(&ip, "select v from kept")? == "42",
        "the row written before the kill is gone"
    );
    ctx.note(format!(
        "after kill -9: NotReady {} by polling, Ready again {:.1}s later, restartCount 1, data kept",
        if seen_not_ready { "seen" } else { "not seen (Ready's transition time moved)" },
        restarted.elapsed().as_secs_f64()
    ));

    // Deletion: SIGTERM (postgres shuts down fast), processes gone, pod gone.
    let deleting = Instant::now();
    pods.delete("pg", &DeleteParams::default()).await?;
    wait_for("pod pg gone", Duration::from_secs(30), async || {
        Ok(match pods.get_opt("pg").await? {
            None => Check::Done(()),
            Some(p) => Check::Pending(summary(&p)),
        })
    })
    .await?;
    ensure!(
        !process_alive(new_pid),
        "server pid {new_pid} still runs after the pod was deleted"
    );
    let pod_dir = env.state_dir.join("pods").join(format!("{ns}_pg"));
    ensure!(
        pod_dir.join("postgres.log").is_file(),
        "no log at {}",
        pod_dir.join("postgres.log").display()
    );
    let log = std::fs::read_to_string(pod_dir.join("postgres.log"))?;
    ensure!(
        log.matches("database system is ready to accept connections")
            .count()
            >= 2,
        "the log does not show two server starts (append across restarts)"
    );
    ctx.note(format!(
        "pod deleted and its processes gone in {:.1}s",
        deleting.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// An image without local binaries: the container waits with reason ImageNotAvailable, the pod
/// gets one Warning event naming the image, and nothing pretends to run.
pub async fn unknown_image_waits_with_a_warning(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    let ns = ctx.namespace("procimg").await?;
    let image = "registry.example.invalid/no-such-image:1.0";
    env.cluster.apply(&pod_manifest(&ns, "ghost", image))?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let message = wait_for(
        "ghost waiting ImageNotAvailable",
        Duration::from_secs(30),
        async || {
            let pod = pods.get("ghost").await?;
            let waiting = pod
                .status
                .as_ref()
                .and_then(|s| s.init_container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.waiting.clone());
            Ok(match waiting {
                Some(w) if w.reason.as_deref() == Some("ImageNotAvailable") => {
                    Check::Done(w.message.unwrap_or_default())
                }
                _ => Check::Pending(summary(&pod)),
            })
        },
    )
    .await?;
    ensure!(
        message.contains(image),
        "waiting message {message:?} does not name the image"
    );
    let events = wait_for(
        "a Warning event naming the image",
        Duration::from_secs(15),
        async || {
            let events = events_about(&env, &ns, "ghost").await?;
            let matching: Vec<_> = events
                .iter()
                .filter(|e| {
                    e.type_ == "Warning"
                        && e.reason == "ImageNotAvailable"
                        && e.note.contains(image)
                })
                .cloned()
                .collect();
            Ok(if matching.is_empty() {
                Check::Pending(format!("{} events, none matching", events.len()))
            } else {
                Check::Done(matching)
            })
        },
    )
    .await?;
    // Seconds later: still waiting, still not Ready, and the event was not repeated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = pods.get("ghost").await?;
    ensure!(!ready(&pod), "ghost is Ready: {}", summary(&pod));
    ensure!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"),
        "ghost is not Pending: {}",
        summary(&pod)
    );
    let again = events_about(&env, &ns, "ghost")
        .await?
        .into_iter()
        .filter(|e| e.reason == "ImageNotAvailable")
        .count();
    ensure!(
        again == events.len(),
        "the ImageNotAvailable event was repeated ({again} events)"
    );
    pods.delete("ghost", &DeleteParams::default()).await?;
    wait_for("pod ghost gone", Duration::from_secs(30), async || {
        Ok(match pods.get_opt("ghost").await? {
            None => Check::Done(()),
            Some(p) => Check::Pending(summary(&p)),
        })
    })
    .await?;
    Ok(())
}

fn statefulset_manifest(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec: {{clusterIP: None, selector: {{app: web}}, publishNotReadyAddresses: true, ports: [{{port: 80}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web-primary, namespace: {ns}}}
spec: {{selector: {{app: web, role: primary}}, ports: [{{port: 80}}]}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web, namespace: {ns}}}
spec:
  serviceName: web
  replicas: 2
  podManagementPolicy: Parallel
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{"{PROCESS_NODE_LABEL}": "true"}}
      tolerations:
      - {{key: "{PROCESS_NODE_LABEL}", operator: Equal, value: "true", effect: NoSchedule}}
      terminationGracePeriodSeconds: 2
      securityContext: {{runAsUser: 999, runAsGroup: 999, fsGroup: 2000, runAsNonRoot: true, seccompProfile: {{type: RuntimeDefault}}}}
      volumes:
      - name: podinfo
        downwardAPI: {{items: [{{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}]}}
      containers:
      - name: main
        image: {POSTGRES_IMAGE}
        command:
        - sh
        - -c
        - |
          while true; do
            cat /etc/podinfo/labels > /data/labels.txt
            getent hosts web-0.web.{ns}.svc web-1.web.{ns}.svc web-primary > /data/hosts.txt || true
            id -G > /data/groups.txt
            sleep 0.5
          done
        readinessProbe:
          exec: {{command: [test, -s, /data/labels.txt]}}
          periodSeconds: 1
        securityContext: {SECURE}
        volumeMounts:
        - {{name: data, mountPath: /data}}
        - {{name: podinfo, mountPath: /etc/podinfo}}
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{accessModes: [ReadWriteOnce], storageClassName: fast-ssd, resources: {{requests: {{storage: 1Gi}}}}}}
"#
    )
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

/// A StatefulSet on process nodes: its pods resolve each other and Services through their hosts
/// files, see a label change through the downward API, write with their fsGroup into
/// PersistentVolume directories that outlive them and go with the PV.
pub async fn statefulset_names_labels_and_volumes(ctx: &Ctx) -> Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use std::os::unix::fs::MetadataExt as _;

    let env = ctx.env().await?;
    let ns = ctx.namespace("procsts").await?;
    warm_image().await?;
    env.cluster.apply(&statefulset_manifest(&ns))?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let web0 = wait_ready(&pods, "web-0", Duration::from_secs(60)).await?;
    let web1 = wait_ready(&pods, "web-1", Duration::from_secs(30)).await?;
    let (ip0, ip1) = (pod_ip(&web0), pod_ip(&web1));
    ensure!(
        ip0 != ip1 && ip0.starts_with("127.10.") && ip1.starts_with("127.10."),
        "pod IPs {ip0} {ip1}"
    );
    ctx.step(format!("web-0 at {ip0}, web-1 at {ip1}"));

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), &ns);
    let pv = claims
        .get("data-web-0")
        .await?
        .spec
        .and_then(|s| s.volume_name)
        .context("claim data-web-0 is not bound")?;
    let data = env.state_dir.join("volumes").join(&pv);
    let read = |file: &str| std::fs::read_to_string(data.join(file)).unwrap_or_default();

    // Names: the peers through the headless Service; no primary Service address yet.
    wait_for(
        "web-0 resolving both peers",
        Duration::from_secs(15),
        async || {
            let hosts = read("hosts.txt");
            let has = |ip: &str, name: &str| {
                hosts
                    .lines()
                    .any(|l| l.starts_with(&format!("{ip} ")) && l.contains(name))
            };
            Ok(
                if has(&ip0, &format!("web-0.web.{ns}.svc"))
                    && has(&ip1, &format!("web-1.web.{ns}.svc"))
                {
                    Check::Done(())
                } else {
                    Check::Pending(format!("getent hosts in web-0: {hosts:?}"))
                },
            )
        },
    )
    .await?;
    ensure!(
        !read("hosts.txt").contains("web-primary"),
        "web-primary resolves before any pod is labelled primary: {}",
        read("hosts.txt")
    );

    // A label change reaches the downward API file, and the Service selecting it.
    env.cluster
        .kubectl_output(&["label", "pod", "web-0", "role=primary", "-n", &ns])?;
    let labelled = Instant::now();
    wait_for(
        "web-0 seeing role=primary",
        Duration::from_secs(15),
        async || {
            let labels = read("labels.txt");
            let hosts = read("hosts.txt");
            Ok(
                if labels.contains("role=\"primary\"")
                    && hosts
                        .lines()
                        .any(|l| l.starts_with(&format!("{ip0} ")) && l.contains("web-primary"))
                {
                    Check::Done(())
                } else {
                    Check::Pending(format!("labels {labels:?}, hosts {hosts:?}"))
                },
            )
        },
    )
    .await?;
    ctx.note(format!(
        "label change seen in the downward API file and the hosts file within {:.1}s",
        labelled.elapsed().as_secs_f64()
    ));

    // fsGroup: a supplementary group of the process, and the group of what it writes.
    let groups = read("groups.txt");
    ensure!(
        groups.split_whitespace().any(|g| g == "2000"),
        "the container's groups {groups:?} lack fsGroup 2000"
    );
    let gid = std::fs::metadata(data.join("labels.txt"))?.gid();
    ensure!(
        gid == 2000,
        "a file written in the volume has group {gid}, not the fsGroup"
    );

    // The volume outlives its pods and goes with its PV.
    env.cluster
        .kubectl_output(&["delete", "statefulset", "web", "-n", &ns, "--wait=true"])?;
    wait_for("web pods gone", Duration::from_secs(30), async || {
        let left = pods.list(&Default::default()).await?.items.len();
        Ok(if left == 0 {
            Check::Done(())
        } else {
            Check::Pending(format!("{left} pods"))
        })
    })
    .await?;
    ensure!(
        data.join("labels.txt").is_file(),
        "the PV directory {} lost its data with the pods",
        data.display()
    );
    claims
        .delete("data-web-0", &DeleteParams::default())
        .await?;
    let deleted = Instant::now();
    wait_for(
        "the PV directory removed with its PV",
        Duration::from_secs(60),
        async || {
            Ok(if data.exists() {
                Check::Pending(format!("{} still exists", data.display()))
            } else {
                Check::Done(())
            })
        },
    )
    .await?;
    ctx.note(format!(
        "PV directory removed {:.1}s after its claim was deleted",
        deleted.elapsed().as_secs_f64()
    ));
    Ok(())
}
