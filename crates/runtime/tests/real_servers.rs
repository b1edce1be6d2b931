//! The rendered pods run real database servers: three-member PostgreSQL and MariaDB clusters
//! from `examples/local/`, rendered by `database-operator render`'s code, run on this machine
//! the way a process node runs pods.
//!
//! For each member, in ordinal order (a StatefulSet starts them in parallel; a replica's init waits for the primary, so one after another is a case of that): the ConfigMap's files,
//! the downward-API labels file and empty volumes are laid out in a directory; the init container
//! and then the database container run with the rendered command, arguments and environment
//! (`$(VAR)` expanded, the Secret's value where a `secretKeyRef` points), as the engine's user,
//! in a private mount namespace where each volume is bind-mounted at its mount path and a hosts
//! file maps the member and Service names to the members' loopback IPs (127.10.9.x), as ready
//! pods are added. The next member starts once the rendered startup probe passes. Then a row
//! written on the primary's IP with the Secret's password must appear on both replicas, the
//! operator's account (from the operator Secret `<name>-operator`, here with fixed test values)
//! must log in over TCP on every member, a quarantined member must start read-only and not
//! replicating, and (PostgreSQL) a former primary that wrote past a promotion must be rewound
//! with pg_rewind and rejoin as a standby of the new primary.
//!
//! Needs root (mount namespaces, switching users), `unshare` and `setpriv`, and the server
//! binaries (Debian's `postgresql-15`, `mariadb-server`); without them each test says why and
//! passes without running.

mod common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use database_operator_core::OperatorConfig;
use database_operator_runtime::offline;
use serde_json::Value;

/// Tests share the host's mount points and loopback ports: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What differs between the engines for this test.
struct EngineCase {
    example: &'static str,
    /// The OS user the image runs the server as (uid 999 in the images; here the host's user
    /// of the same name).
    user: &'static str,
    /// The image's PATH.
    path: &'static str,
    /// Binaries that must exist for the test to run.
    needs: &'static [&'static str],
    /// First octet of the members' loopback IPs after 127.10.9.
    first_ip: u8,
    port: u16,
}

const POSTGRESQL: EngineCase = EngineCase {
    example: "examples/local/postgresql.yaml",
    user: "postgres",
    path: "/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    needs: &[
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/lib/postgresql/15/bin/initdb",
        "/usr/lib/postgresql/15/bin/pg_basebackup",
        "/usr/lib/postgresql/15/bin/psql",
    ],
    first_ip: 1,
    port: 5432,
};

const MARIADB: EngineCase = EngineCase {
    example: "examples/local/mariadb.yaml",
    user: "mysql",
    path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    needs: &[
        "/usr/sbin/mariadbd",
        "/usr/bin/mariadb-install-db",
        "/usr/bin/mariadb",
        "/usr/bin/mariadb-dump",
        "/usr/bin/mariadb-admin",
    ],
    first_ip: 11,
    port: 3306,
};

fn workspace_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Why the test cannot run here, if it cannot.
fn missing_prerequisite(case: &EngineCase) -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("needs root (mount namespaces, switching users)".into());
    }
    for tool in ["/usr/bin/unshare", "/usr/bin/setpriv", "/usr/bin/mount"] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} is not installed"));
        }
    }
    for binary in case.needs {
        if !Path::new(binary).exists() {
            return Some(format!("{binary} is not installed"));
        }
    }
    let user = Command::new("id").arg(case.user).output().ok()?;
    if !user.status.success() {
        return Some(format!("no OS user {}", case.user));
    }
    None
}

/// The files of `<name>-tls` as the operator makes them ([`database_operator_runtime::certs`]):
/// a new authority and a server certificate for the Services and the members' names.
fn tls_files(rendered: &Rendered) -> Vec<(&'static str, String)> {
    use database_operator_runtime::certs;
    let (name, ns) = (&rendered.name, &rendered.namespace);
    let now = std::time::SystemTime::now();
    let ca = certs::new_ca(name, ns, now, Duration::from_secs(86_400)).expect("authority");
    let names = [
        format!("{name}.{ns}.svc"),
        format!("{name}-replicas.{ns}.svc"),
        format!("*.{name}-headless.{ns}.svc"),
    ];
    let leaf = certs::issue_server(&ca, &names, now, Duration::from_secs(3_600)).expect("server");
    vec![
        ("tls.crt", leaf.cert_pem),
        ("tls.key", leaf.key_pem),
        ("ca.crt", ca.cert_pem),
    ]
}

/// The Secret's password and the rendered ConfigMap and StatefulSet of the example.
struct Rendered {
    name: String,
    namespace: String,
    password: String,
    /// The values of the operator Secret `<name>-operator`, by key.
    operator_secret: BTreeMap<String, String>,
    config: BTreeMap<String, String>,
    statefulset: Value,
}

fn render(case: &EngineCase) -> Rendered {
    let text = std::fs::read_to_string(workspace_file(case.example)).expect("example");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("example YAML");
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret")
        .expect("a Secret");
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "DatabaseCluster")
        .expect("a DatabaseCluster");
    let key = cluster["spec"]["passwordSecretRef"]["key"]
        .as_str()
        .expect("key");
    let password = secret["stringData"][key]
        .as_str()
        .expect("password")
        .to_owned();
    let rendered = offline::render(
        &text,
        case.example,
        "2026-12-01T00:00:00Z".parse().expect("time"),
        &OperatorConfig::default(),
    )
    .expect("renders");
    let objects: Vec<Value> = serde_saphyr::from_multiple(&rendered.yaml).expect("rendered YAML");
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("ConfigMap");
    let config = serde_json::from_value(config_map["data"].clone()).expect("data");
    let statefulset = objects
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .expect("StatefulSet")
        .clone();
    Rendered {
        name: cluster["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned(),
        namespace: cluster["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        password,
        operator_secret: BTreeMap::from([
            ("admin-password".to_owned(), ADMIN_PASSWORD.to_owned()),
            ("admin-username".to_owned(), "database_operator".to_owned()),
            (
                "replication-password".to_owned(),
                REPLICATION_PASSWORD.to_owned(),
            ),
            ("replication-username".to_owned(), "replicator".to_owned()),
        ]),
        config,
        statefulset,
    }
}

/// The operator Secret's admin password in these tests (the operator generates one).
const ADMIN_PASSWORD: &str = "AdminTestPassw0rdOfTheOperator42";
/// The operator Secret's replication password in these tests.
const REPLICATION_PASSWORD: &str = "Replicat1onTestPassw0rdOfMembers";
/// The operator's account.
const ADMIN_USER: &str = "database_operator";

/// Expands `$(VAR)` the way the kubelet does in command and args.
fn expand(arg: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("$(") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find(')') {
            Some(end) if env.contains_key(&after[..end]) => {
                out.push_str(&env[&after[..end]]);
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("$(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// One pod: its directories, IP and running server.
struct Member {
    pod: String,
    ip: String,
    root: PathBuf,
    server: Option<Child>,
}

/// A running cluster; dropping it stops every server it started and removes its files.
struct LocalCluster {
    case: &'static EngineCase,
    rendered: Rendered,
    dir: tempfile::TempDir,
    hosts: PathBuf,
    members: Vec<Member>,
    /// The member the read-write Service points at.
    primary: usize,
    created_mount_points: Vec<PathBuf>,
    /// The files of the Secret `<name>-tls` the operator would make (certificate, key,
    /// authority), by file name.
    tls: Vec<(&'static str, String)>,
    /// The lock that keeps the tests apart (they share mount points and addresses); the last
    /// field, so it is released after `drop` has stopped the servers and removed the mount
    /// points.
    _serial: MutexGuard<'static, ()>,
}

impl LocalCluster {
    fn new(case: &'static EngineCase) -> Self {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let rendered = render(case);
        let dir = tempfile::tempdir().expect("tempdir");
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n").expect("hosts");
        let tls = tls_files(&rendered);
        let mut cluster = Self {
            case,
            rendered,
            dir,
            hosts,
            members: Vec::new(),
            primary: 0,
            created_mount_points: Vec::new(),
            tls,
            _serial: serial,
        };
        // Mount points the pod's volumes need on this machine's filesystem (removed at the end
        // when this test created them).
        for path in cluster.mount_paths() {
            let path = PathBuf::from(path);
            if !path.exists() {
                let mut missing = vec![];
                let mut p = path.as_path();
                while !p.exists() {
                    missing.push(p.to_path_buf());
                    p = p.parent().expect("parent");
                }
                std::fs::create_dir_all(&path).expect("mount point");
                cluster.created_mount_points.extend(missing);
            }
        }
        cluster
    }

    fn pod_spec(&self) -> &Value {
        &self.rendered.statefulset["spec"]["template"]["spec"]
    }

    fn mount_paths(&self) -> Vec<String> {
        let spec = self.pod_spec();
        let mut paths: Vec<String> = ["initContainers", "containers"]
            .iter()
            .flat_map(|k| spec[*k].as_array().cloned().unwrap_or_default())
            .flat_map(|c| c["volumeMounts"].as_array().cloned().unwrap_or_default())
            .map(|m| m["mountPath"].as_str().expect("mountPath").to_owned())
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    fn member_host(&self, pod: &str) -> String {
        format!(
            "{pod}.{}-headless.{}.svc",
            self.rendered.name, self.rendered.namespace
        )
    }

    /// Rewrites the hosts file in place (bind mounts see the same file): every member by its
    /// headless name, the read-write Service on the primary once it is ready, the read-only
    /// Service on the ready replicas.
    fn write_hosts(&self, ready: usize) {
        let (name, ns) = (&self.rendered.name, &self.rendered.namespace);
        let mut text = String::from("127.0.0.1 localhost\n");
        for (i, m) in self.members.iter().enumerate() {
            text.push_str(&format!("{} {}\n", m.ip, self.member_host(&m.pod)));
            if i < ready {
                let service = if i == self.primary {
                    format!("{name}.{ns}.svc")
                } else {
                    format!("{name}-replicas.{ns}.svc")
                };
                text.push_str(&format!("{} {service}\n", m.ip));
            }
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&self.hosts)
            .expect("hosts");
        f.write_all(text.as_bytes()).expect("hosts");
    }

    fn add_member(&mut self, ordinal: usize) {
        let pod = format!("{}-{ordinal}", self.rendered.name);
        let ip = format!("127.10.9.{}", self.case.first_ip as usize + ordinal);
        let root = self.dir.path().join(&pod);
        for d in ["data", "config", "run", "socket", "podinfo", "tls"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        // As the kubelet writes a Secret volume with `defaultMode: 0440` and the pod's fsGroup
        // (the server's group): owned by root, readable by the group.
        for (file, text) in &self.tls {
            let path = root.join("tls").join(file);
            std::fs::write(&path, text).expect("tls file");
            let status = Command::new("chown")
                .arg(format!("root:{}", self.case.user))
                .arg(&path)
                .status()
                .expect("chown");
            assert!(status.success());
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o440))
                .expect("chmod");
        }
        for (key, value) in &self.rendered.config {
            std::fs::write(root.join("config").join(key), value).expect("config file");
        }
        // A new cluster: its first primary carries the operator's permission to initialize.
        let labels = if ordinal == 0 {
            "database.example.com/initialize=\"allowed\"\ndatabase.example.com/role=\"primary\"\n"
        } else {
            "database.example.com/role=\"replica\"\n"
        };
        std::fs::write(root.join("podinfo/labels"), labels).expect("labels");
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{0}:{0}", self.case.user))
            .args(["data", "run", "socket"].map(|d| root.join(d)))
            .status()
            .expect("chown");
        assert!(status.success());
        self.members.push(Member {
            pod,
            ip,
            root,
            server: None,
        });
    }

    /// The environment of `container` in member `index`, as the kubelet would set it.
    fn env(&self, index: usize, container: &Value) -> BTreeMap<String, String> {
        let m = &self.members[index];
        let mut env = BTreeMap::from([
            ("PATH".to_owned(), self.case.path.to_owned()),
            ("HOSTNAME".to_owned(), m.pod.clone()),
            ("HOME".to_owned(), "/tmp".to_owned()),
        ]);
        for e in container["env"].as_array().cloned().unwrap_or_default() {
            let name = e["name"].as_str().expect("env name").to_owned();
            let value = if let Some(v) = e["value"].as_str() {
                expand(v, &env)
            } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                match path {
                    "metadata.name" => m.pod.clone(),
                    "status.podIP" => m.ip.clone(),
                    other => panic!("fieldRef {other} not provided by this test"),
                }
            } else if e["valueFrom"]["secretKeyRef"].is_object() {
                let reference = &e["valueFrom"]["secretKeyRef"];
                if reference["name"] == format!("{}-operator", self.rendered.name) {
                    let key = reference["key"].as_str().expect("key");
                    self.rendered.operator_secret[key].clone()
                } else {
                    self.rendered.password.clone()
                }
            } else {
                panic!("env {name}: unsupported source {e}")
            };
            env.insert(name, value);
        }
        env
    }

    /// A command that runs `argv` of `container` in member `index`'s mount namespace as the
    /// engine's user.
    fn command(&self, index: usize, container: &Value, argv: &[String]) -> Command {
        let m = &self.members[index];
        let mut mounts = String::from("set -e\n");
        for vm in container["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let volume = vm["name"].as_str().expect("volume");
            let target = vm["mountPath"].as_str().expect("mountPath");
            mounts.push_str(&format!(
                "mount --bind '{}' '{target}'\n",
                m.root.join(volume).display()
            ));
        }
        mounts.push_str(&format!(
            "mount --bind '{}' /etc/hosts\n",
            self.hosts.display()
        ));
        mounts.push_str(&format!(
            "exec setpriv --reuid={0} --regid={0} --init-groups -- \"$@\"\n",
            self.case.user
        ));
        let env = self.env(index, container);
        let mut cmd = Command::new("/usr/bin/unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(mounts)
            .arg("sh")
            .args(argv)
            .env_clear()
            .envs(&env)
            .current_dir("/");
        cmd
    }

    fn argv(container: &Value, env: &BTreeMap<String, String>) -> Vec<String> {
        ["command", "args"]
            .iter()
            .flat_map(|k| container[*k].as_array().cloned().unwrap_or_default())
            .map(|a| expand(a.as_str().expect("string arg"), env))
            .collect()
    }

    /// The command of `container` in member `index`, its output appended to the member's log
    /// `log_name`, and the log's path.
    fn logged_command(
        &self,
        index: usize,
        container: &Value,
        log_name: &str,
    ) -> (Command, PathBuf) {
        let env = self.env(index, container);
        let argv = Self::argv(container, &env);
        let log = self.members[index].root.join(log_name);
        let mut cmd = self.command(index, container, &argv);
        cmd.stdout(log_file(&log)).stderr(log_file(&log));
        (cmd, log)
    }

    /// Runs the init container of member `index` to completion, then starts its server and
    /// waits for the startup probe.
    fn start_member(&mut self, index: usize) {
        let spec = self.pod_spec().clone();
        for init in spec["initContainers"].as_array().expect("init containers") {
            let (mut cmd, log) = self.logged_command(index, init, "init.log");
            let out = cmd.status().expect("init runs");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                out.success(),
                "{} init failed ({out}):\n{text}",
                self.members[index].pod
            );
            for secret in [
                &self.rendered.password,
                ADMIN_PASSWORD,
                REPLICATION_PASSWORD,
            ] {
                assert!(
                    !text.contains(secret),
                    "the init log shows a password:\n{text}"
                );
            }
        }
        let container = &spec["containers"][0];
        let (mut cmd, log) = self.logged_command(index, container, "server.log");
        let child = cmd.spawn().expect("server starts");
        self.members[index].server = Some(child);

        let env = self.env(index, container);
        let probe = Self::argv(&container["startupProbe"]["exec"], &env);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ok = self
                .command(index, container, &probe)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("probe runs")
                .success();
            if ok {
                break;
            }
            if let Some(status) = self.members[index]
                .server
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "{} server exited ({status}):\n{}",
                    self.members[index].pod,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} never passed its startup probe {probe:?}:\n{}",
                self.members[index].pod,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Starts `replicas` members one after the other, each once the previous one is ready;
    /// `on_primary` runs once the primary is ready, before any replica is seeded.
    fn start(&mut self, on_primary: impl FnOnce(&str, &str)) {
        let mut on_primary = Some(on_primary);
        let replicas = self.rendered.statefulset["spec"]["replicas"]
            .as_u64()
            .expect("replicas") as usize;
        for i in 0..replicas {
            self.add_member(i);
        }
        for i in 0..replicas {
            self.write_hosts(i);
            self.start_member(i);
            if i == 0
                && let Some(f) = on_primary.take()
            {
                f(&self.members[0].ip, &self.rendered.password);
            }
        }
        self.write_hosts(replicas);
        // No argv of a running server shows the password.
        for m in &self.members {
            let pid = m.server.as_ref().expect("server").id();
            for proc_pid in descendants(pid) {
                let cmdline =
                    std::fs::read(format!("/proc/{proc_pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                for secret in [
                    &self.rendered.password,
                    ADMIN_PASSWORD,
                    REPLICATION_PASSWORD,
                ] {
                    assert!(
                        !cmdline.contains(secret),
                        "{}: a password is on a command line",
                        m.pod
                    );
                }
            }
        }
    }

    fn ips(&self) -> Vec<String> {
        self.members.iter().map(|m| m.ip.clone()).collect()
    }
}

/// `pid` and every process below it.
fn descendants(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", all[i]))
            .unwrap_or_default();
        all.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
        i += 1;
    }
    all
}

/// Stops a server the way the kubelet does: SIGTERM, SIGKILL after the grace period (30 s here).
/// The server is the last exec of the child (unshare -> sh -> setpriv -> server), so the
/// child's pid is the server's.
fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    common::wait_or_kill(&mut child, Duration::from_secs(30));
}

impl LocalCluster {
    /// Stops member `index`, gives it the role label `role` and starts it again (init
    /// container, then server), as when a pod is recreated after the operator relabelled it.
    fn restart_as(&mut self, index: usize, role: &str) {
        if let Some(child) = self.members[index].server.take() {
            stop(child);
        }
        std::fs::write(
            self.members[index].root.join("podinfo/labels"),
            format!("database.example.com/role=\"{role}\"\n"),
        )
        .expect("labels");
        self.start_member(index);
    }
}

impl LocalCluster {
    /// Kills member `index`'s server and every process below it (SIGKILL): a crash, the data
    /// directory left as it was.
    fn crash(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].server.take() {
            for pid in descendants(child.id()) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            let _ = child.wait();
        }
    }

    /// The init log of member `index`.
    fn init_log(&self, index: usize) -> String {
        std::fs::read_to_string(self.members[index].root.join("init.log")).unwrap_or_default()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for m in self.members.iter_mut().rev() {
            if let Some(child) = m.server.take() {
                stop(child);
            }
            if std::thread::panicking() {
                for log in ["init.log", "server.log"] {
                    let text = std::fs::read_to_string(m.root.join(log)).unwrap_or_default();
                    eprintln!("--- {} {log}\n{text}", m.pod);
                }
            }
        }
        for p in self.created_mount_points.iter().rev() {
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// Polls `check` until it returns true or `timeout` passes.
fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Nothing answers on `port` at an address that belongs to no member: no server listens on
/// every address.
fn assert_listens_on_pod_ips_only(port: u16) {
    let addr: SocketAddr = format!("127.10.9.99:{port}").parse().expect("addr");
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "something accepts connections on {addr}: a server listens on all addresses"
    );
}

/// `log` opened for appending (created if missing), as a process's stdout or stderr.
fn log_file(log: &Path) -> Stdio {
    Stdio::from(
        std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("log"),
    )
}

/// An engine's command-line client: runs `sql` on the member at `ip` as the superuser with
/// `password`, answering its output or its error.
type SqlClient = fn(&EngineCase, &str, &str, &str) -> Result<String, String>;

/// The members of `case` started in ordinal order, the primary holding what `create` writes
/// (with the engine's client `sql` and the Secret's password) before the replicas start;
/// `None` when a prerequisite is missing (skipped, or a failure under REQUIRE_REAL_SERVERS).
fn started_cluster(
    case: &'static EngineCase,
    sql: SqlClient,
    create: &str,
) -> Option<LocalCluster> {
    if let Some(reason) = missing_prerequisite(case) {
        skip(&reason);
        return None;
    }
    let mut cluster = LocalCluster::new(case);
    cluster.start(|ip, password| {
        sql(case, ip, password, create).expect("write on the primary with the Secret's password");
    });
    Some(cluster)
}

/// What both engines' replication tests check first, with the engine's client `sql`, once the
/// primary holds row 0 ('before the replicas'): the server listens on the pod IPs only, row 1
/// is written on the primary (`insert`), a wrong password is refused, and every replica answers
/// `select_notes` with the notes of rows 0 and 1 within 15 s. Answers the password and the
/// members' IPs.
fn write_on_primary_and_see_it_replicated(
    cluster: &LocalCluster,
    sql: SqlClient,
    insert: &str,
    select_notes: &str,
) -> (String, Vec<String>) {
    let case = cluster.case;
    let password = cluster.rendered.password.clone();
    let ips = cluster.ips();
    assert_listens_on_pod_ips_only(case.port);

    sql(case, &ips[0], &password, insert).expect("write on the primary");
    assert!(
        sql(case, &ips[0], "not-the-password", "SELECT 1").is_err(),
        "a wrong password is refused"
    );
    for ip in &ips[1..] {
        let mut last = String::new();
        let found = eventually(Duration::from_secs(15), || {
            match sql(case, ip, &password, select_notes) {
                Ok(v) => {
                    last = v;
                    last == "before the replicas,written on the primary"
                }
                Err(e) => {
                    last = e;
                    false
                }
            }
        });
        assert!(found, "the row never reached the replica {ip}: {last}");
    }
    (password, ips)
}

fn psql(case: &EngineCase, ip: &str, password: &str, sql: &str) -> Result<String, String> {
    psql_as(case, ip, "postgres", password, sql)
}

/// `psql` over TCP as `user` (TLS when the server offers it: libpq's `sslmode=prefer`).
fn psql_as(
    case: &EngineCase,
    ip: &str,
    user: &str,
    password: &str,
    sql: &str,
) -> Result<String, String> {
    psql_with(case, ip, user, password, sql, "prefer")
}

/// [`psql_as`] with libpq's `sslmode`.
fn psql_with(
    case: &EngineCase,
    ip: &str,
    user: &str,
    password: &str,
    sql: &str,
    sslmode: &str,
) -> Result<String, String> {
    let out = Command::new("/usr/lib/postgresql/15/bin/psql")
        .args([
            "--no-psqlrc",
            "--tuples-only",
            "--no-align",
            "--set=ON_ERROR_STOP=1",
            &format!("--host={ip}"),
            &format!("--port={}", case.port),
            &format!("--username={user}"),
            "--dbname=postgres",
            "--command",
            sql,
        ])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "5")
        .env("PGSSLMODE", sslmode)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn mariadb(case: &EngineCase, ip: &str, password: &str, sql: &str) -> Result<String, String> {
    mariadb_as(case, ip, "root", password, sql)
}

/// The `mariadb` client over TCP as `user` (TLS when the server offers it, the client's default).
fn mariadb_as(
    case: &EngineCase,
    ip: &str,
    user: &str,
    password: &str,
    sql: &str,
) -> Result<String, String> {
    mariadb_with(case, ip, user, password, sql, &[])
}

/// [`mariadb_as`] with more client options.
fn mariadb_with(
    case: &EngineCase,
    ip: &str,
    user: &str,
    password: &str,
    sql: &str,
    options: &[&str],
) -> Result<String, String> {
    let out = Command::new("/usr/bin/mariadb")
        .arg("--no-defaults")
        .args(options)
        .args([
            &format!("--host={ip}"),
            &format!("--port={}", case.port),
            &format!("--user={user}"),
            "--batch",
            "--skip-column-names",
            "--connect-timeout=5",
            "--execute",
            sql,
        ])
        .env("MYSQL_PWD", password)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Skips with the reason, unless `REQUIRE_REAL_SERVERS` is set (CI sets it after installing the
/// servers): then a missing prerequisite fails the test instead of hiding it.
fn skip(reason: &str) {
    assert!(
        std::env::var_os("REQUIRE_REAL_SERVERS").is_none(),
        "REQUIRE_REAL_SERVERS is set but: {reason}"
    );
    eprintln!("skipped: {reason}");
}

#[test]
fn postgresql_members_replicate_a_row_written_on_the_primary() {
    let case = &POSTGRESQL;
    // A row from before the replicas exist reaches them through the copy they seed from.
    let Some(mut cluster) = started_cluster(
        case,
        psql,
        "CREATE TABLE orders (id int PRIMARY KEY, note text); \
         INSERT INTO orders VALUES (0, 'before the replicas');",
    ) else {
        return;
    };
    let (password, ips) = write_on_primary_and_see_it_replicated(
        &cluster,
        psql,
        "INSERT INTO orders VALUES (1, 'written on the primary');",
        "SELECT string_agg(note, ',' ORDER BY id) FROM orders",
    );
    for ip in &ips[1..] {
        let err = psql(case, ip, &password, "INSERT INTO orders VALUES (2, 'x')")
            .expect_err("a replica refuses writes");
        assert!(err.contains("read-only"), "{err}");
    }
    let streaming = psql(
        case,
        &ips[0],
        &password,
        "SELECT string_agg(application_name, ',' ORDER BY application_name) \
         FROM pg_stat_replication WHERE state = 'streaming'",
    )
    .expect("pg_stat_replication");
    let pods: Vec<String> = cluster.members[1..].iter().map(|m| m.pod.clone()).collect();
    assert_eq!(streaming, pods.join(","));

    // The operator's account logs in over TCP (pg_hba: scram) on the primary and, cloned with
    // the data, on the replicas; it is a superuser. A wrong password is refused.
    for ip in &ips {
        assert_eq!(
            psql_as(
                case,
                ip,
                ADMIN_USER,
                ADMIN_PASSWORD,
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
            )
            .as_deref(),
            Ok("t"),
            "{ip}"
        );
    }
    assert!(psql_as(case, &ips[0], ADMIN_USER, "wrong", "SELECT 1").is_err());
    // The replication role replicates (above) and does nothing else: pg_hba rejects it for a
    // database, with the right password.
    let refused = psql_as(
        case,
        &ips[0],
        "replicator",
        REPLICATION_PASSWORD,
        "SELECT count(*) FROM orders",
    )
    .expect_err("the replication role may not open a database session");
    assert!(
        refused.contains("pg_hba.conf rejects connection"),
        "{refused}"
    );
    // The members serve the cluster's certificate: over TLS every account logs in (above, the
    // client's sslmode=prefer), a plain connection is refused for every account.
    for ip in &ips {
        assert_eq!(
            psql(
                case,
                ip,
                &password,
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
            )
            .as_deref(),
            Ok("t"),
            "{ip}: the session uses TLS"
        );
        for (user, secret) in [
            ("postgres", password.as_str()),
            (ADMIN_USER, ADMIN_PASSWORD),
        ] {
            let plain = psql_with(case, ip, user, secret, "SELECT 1", "disable")
                .expect_err("a plain connection is refused");
            assert!(
                plain.contains("rejects connection") && plain.contains("no encryption"),
                "{ip} {user}: {plain}"
            );
        }
    }

    // A quarantined member starts read-only and replicates from nobody; relabelled a replica,
    // it streams again.
    let wal_receivers = "SELECT count(*) FROM pg_stat_wal_receiver";
    cluster.restart_as(2, "quarantined");
    assert_eq!(
        psql(case, &ips[2], &password, "SELECT pg_is_in_recovery()").as_deref(),
        Ok("t")
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        psql(case, &ips[2], &password, wal_receivers).as_deref(),
        Ok("0"),
        "a quarantined member does not replicate"
    );
    cluster.restart_as(2, "replica");
    assert!(
        eventually(Duration::from_secs(20), || {
            psql(case, &ips[2], &password, wal_receivers).as_deref() == Ok("1")
        }),
        "back as a replica, it streams again"
    );

    // A failover elsewhere: member 1 is promoted (as the operator would, with its account) and
    // the read-write Service points at it, while the old primary still takes a write the new
    // one never sees, then crashes. Relabelled a replica, it is rewound (after crash recovery)
    // and rejoins as a standby of the new primary: the diverged row is gone, the new primary's
    // rows arrive, and it is never writable.
    assert_eq!(
        psql_as(
            case,
            &ips[1],
            ADMIN_USER,
            ADMIN_PASSWORD,
            "SELECT pg_promote()"
        )
        .as_deref(),
        Ok("t")
    );
    cluster.primary = 1;
    cluster.write_hosts(ips.len());
    // As the operator does once the new primary answers writable: a slot for each other
    // member (KeepMemberSlots), which the standbys stream through (primary_slot_name).
    psql_as(
        case,
        &ips[1],
        ADMIN_USER,
        ADMIN_PASSWORD,
        "SELECT count(pg_create_physical_replication_slot(s, true)) FROM unnest(ARRAY['member_0', 'member_2']) AS s",
    )
    .expect("member slots on the new primary");
    psql(
        case,
        &ips[1],
        &password,
        "INSERT INTO orders VALUES (4, 'on the new primary')",
    )
    .expect("the new primary takes writes");
    psql(
        case,
        &ips[0],
        &password,
        "INSERT INTO orders VALUES (3, 'diverged')",
    )
    .expect("the old primary, not fenced in this test, still takes a write");
    cluster.crash(0);
    cluster.restart_as(0, "replica");
    let log = cluster.init_log(0);
    assert!(log.contains("crash recovery in single-user mode"), "{log}");
    assert!(log.contains("rewound to the history of"), "{log}");
    assert_eq!(
        psql(case, &ips[0], &password, "SELECT pg_is_in_recovery()").as_deref(),
        Ok("t")
    );
    let mut last = String::new();
    let rejoined = eventually(Duration::from_secs(30), || {
        last = psql(
            case,
            &ips[0],
            &password,
            "SELECT string_agg(note, ',' ORDER BY id) FROM orders",
        )
        .unwrap_or_else(|e| e);
        last == "before the replicas,written on the primary,on the new primary"
    });
    assert!(rejoined, "the rewound member never caught up: {last}");
    let err = psql(
        case,
        &ips[0],
        &password,
        "INSERT INTO orders VALUES (5, 'x')",
    )
    .expect_err("a former primary refuses writes");
    assert!(err.contains("read-only"), "{err}");
    let rewound_pod = cluster.members[0].pod.clone();
    assert!(
        eventually(Duration::from_secs(20), || {
            psql(
                case,
                &ips[1],
                &password,
                &format!(
                    "SELECT count(*) FROM pg_stat_replication \
                     WHERE application_name = '{rewound_pod}' AND state = 'streaming'"
                ),
            )
            .as_deref()
                == Ok("1")
        }),
        "the new primary streams to the rewound member"
    );
}

#[test]
fn mariadb_members_replicate_a_row_written_on_the_primary() {
    let case = &MARIADB;
    // A row from before the replicas exist reaches them through the dump they seed from; had
    // the dump's GTID position been lost, replication would replay CREATE DATABASE and stop.
    let Some(mut cluster) = started_cluster(
        case,
        mariadb,
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, note text); \
         INSERT INTO shop.orders VALUES (0, 'before the replicas');",
    ) else {
        return;
    };
    let (password, ips) = write_on_primary_and_see_it_replicated(
        &cluster,
        mariadb,
        "INSERT INTO shop.orders VALUES (1, 'written on the primary');",
        "SELECT GROUP_CONCAT(note ORDER BY id) FROM shop.orders",
    );
    for ip in &ips[1..] {
        let state = mariadb(
            case,
            ip,
            &password,
            "SELECT @@global.read_only, @@global.gtid_slave_pos <> ''",
        )
        .expect("replica state");
        assert_eq!(state, "1\t1", "{ip}: read_only and a GTID position");
        let status = mariadb(case, ip, &password, "SHOW SLAVE STATUS").expect("slave status");
        assert!(
            status.contains("\tYes\tYes\t") && status.contains("Slave_Pos"),
            "{ip}: both replication threads running, by GTID: {status}"
        );
    }

    // Every member serves the cluster's certificate and refuses plain TCP connections
    // (require_secure_transport): the replicas' channels above replicate over TLS (init.sh saw
    // that the primary serves it: MASTER_SSL = 1), every client session here is encrypted (the
    // client's default), a plain one is refused for every account.
    for ip in &ips {
        assert!(
            mariadb(
                case,
                ip,
                &password,
                "SHOW SESSION STATUS LIKE 'Ssl_version'"
            )
            .is_ok_and(|v| v.starts_with("Ssl_version\tTLSv1.")),
            "{ip}: the session uses TLS"
        );
        for (user, secret) in [("root", password.as_str()), (ADMIN_USER, ADMIN_PASSWORD)] {
            mariadb_with(case, ip, user, secret, "SELECT 1", &["--skip-ssl"])
                .expect_err("a plain connection is refused");
        }
    }
    assert!(
        cluster.init_log(1).contains("the primary serves TLS"),
        "{}",
        cluster.init_log(1)
    );

    // The operator's account logs in over TCP on every member (replicas got it with the dump)
    // and may change read_only on a read-only replica (READ_ONLY ADMIN: fencing, promotion).
    for ip in &ips {
        assert_eq!(
            mariadb_as(
                case,
                ip,
                ADMIN_USER,
                ADMIN_PASSWORD,
                "SELECT CURRENT_USER()"
            )
            .as_deref(),
            Ok("database_operator@%"),
            "{ip}"
        );
    }
    assert_eq!(
        mariadb_as(
            case,
            &ips[1],
            ADMIN_USER,
            ADMIN_PASSWORD,
            "SET GLOBAL read_only = OFF; SET GLOBAL read_only = ON; SELECT @@global.read_only"
        )
        .as_deref(),
        Ok("1")
    );
    assert!(mariadb_as(case, &ips[0], ADMIN_USER, "wrong", "SELECT 1").is_err());

    // A quarantined member starts read-only without replication; relabelled a replica, it
    // replicates again.
    cluster.restart_as(2, "quarantined");
    assert_eq!(
        mariadb(case, &ips[2], &password, "SELECT @@global.read_only").as_deref(),
        Ok("1")
    );
    let status = mariadb(case, &ips[2], &password, "SHOW SLAVE STATUS").expect("slave status");
    assert!(
        status.contains("\tNo\tNo\t"),
        "a quarantined member does not replicate: {status}"
    );
    cluster.restart_as(2, "replica");
    assert!(
        eventually(Duration::from_secs(20), || {
            mariadb(case, &ips[2], &password, "SHOW SLAVE STATUS")
                .is_ok_and(|s| s.contains("\tYes\tYes\t"))
        }),
        "back as a replica, it replicates again"
    );

    // The operator relabels the primary a replica: when it comes back it is read-only.
    cluster.restart_as(0, "replica");
    assert_eq!(
        mariadb(case, &ips[0], &password, "SELECT @@global.read_only").as_deref(),
        Ok("1")
    );
}
