//! Real databases through the operator: the clusters of `examples/local/` on process nodes run
//! real PostgreSQL and MariaDB servers that replicate; a killed server restarts with its data; a
//! deleted member comes back on its own volume; the operator itself runs in the cluster from
//! `deploy/`; and nothing of the local cluster talks to an address outside 127.0.0.0/8.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use xtask::cluster::images::{ImageTable, default_cache_dir};
use xtask::cluster::workspace_root;

use crate::env::{Env, OPERATOR_NAMESPACE, http_get_at, https_get_at};
use crate::harness::{Ctx, Handed};
use crate::scenarios::process_nodes::{process_alive, ready, summary};
use crate::util::{Check, ROLE_LABEL, api, describe, kubectl, phase, wait_for};

/// A three-member cluster on process nodes: three servers start one after another, the
/// replicas copying the primary first.
pub(crate) const RUNNING_TIMEOUT: Duration = Duration::from_secs(240);
/// How long a row written on the primary may take to show on a replica.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(20);

/// The engines of `examples/local/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    Postgresql,
    Mariadb,
    Mysql,
}

impl Engine {
    fn example(self) -> PathBuf {
        let file = match self {
            Engine::Postgresql => "postgresql.yaml",
            Engine::Mariadb => "mariadb.yaml",
            Engine::Mysql => "mysql.yaml",
        };
        workspace_root().join("examples/local").join(file)
    }

    /// The image whose root holds the engine's client (the same root the pods run).
    fn client_image(self) -> &'static str {
        match self {
            Engine::Postgresql => "docker.io/library/postgres:15",
            Engine::Mariadb => "docker.io/library/mariadb:10.11",
            Engine::Mysql => "docker.io/library/mysql:9.7",
        }
    }

    /// The key under which a passed scenario leaves the engine's example cluster running for
    /// the next one ([`Ctx::hand_over`]).
    pub(crate) fn example_key(self) -> &'static str {
        match self {
            Engine::Postgresql => "the PostgreSQL example",
            Engine::Mariadb => "the MariaDB example",
            Engine::Mysql => "the MySQL example",
        }
    }

    pub(crate) fn server_container(self) -> &'static str {
        match self {
            Engine::Postgresql => "postgresql",
            Engine::Mariadb => "mariadb",
            Engine::Mysql => "mysql",
        }
    }
}

/// Runs one SQL text against `ip` with the engine's own client, chrooted into the image root
/// the pods run (so the test needs no client on the machine), the password in the client's
/// environment (never on argv). Returns the rows, tab-separated, without headers.
pub(crate) fn sql(
    engine: Engine,
    root: &PathBuf,
    ip: &str,
    password: &str,
    text: &str,
) -> Result<String> {
    sql_within(engine, root, ip, password, text, 5)
}

/// [`sql`] with a connect timeout of `connect_timeout` seconds.
pub(crate) fn sql_within(
    engine: Engine,
    root: &PathBuf,
    ip: &str,
    password: &str,
    text: &str,
    connect_timeout: u32,
) -> Result<String> {
    sql_from(
        ClientSide::default(),
        engine,
        root,
        ip,
        password,
        text,
        connect_timeout,
    )
}

/// Where and how long a SQL client of [`sql_from`] runs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClientSide<'a> {
    /// The `cgroup.procs` of a process node's cgroup, to be on its side of a partition.
    pub(crate) cgroup: Option<&'a std::path::Path>,
    /// Killed (SIGKILL) after this many seconds: a statement whose answer never comes (its
    /// server cut off mid-statement) counts as failed, as a client's own timeout would make it.
    pub(crate) kill_after: Option<u32>,
    /// How the client uses TLS.
    pub(crate) tls: ClientTls<'a>,
}

/// How a SQL client of [`sql_from`] uses TLS.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum ClientTls<'a> {
    /// TLS when the server offers it, unchecked (each client's default; MariaDB's `--ssl`).
    #[default]
    Offered,
    /// No TLS at all (a plain connection).
    Plain,
    /// TLS with the server's certificate checked against the authority in this file (a path
    /// inside the image root), not its name: libpq's `verify-ca`, MySQL's `VERIFY_CA`,
    /// MariaDB's `--ssl-ca`.
    VerifyCa(&'a str),
}

/// [`sql_within`], the client started as `side` says.
pub(crate) fn sql_from(
    side: ClientSide<'_>,
    engine: Engine,
    root: &PathBuf,
    ip: &str,
    password: &str,
    text: &str,
    connect_timeout: u32,
) -> Result<String> {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if let Some(seconds) = side.kill_after {
        argv.extend([
            "timeout".into(),
            "-s".into(),
            "KILL".into(),
            seconds.to_string().into(),
        ]);
    }
    if let Some(procs) = side.cgroup {
        argv.extend([
            "/bin/sh".into(),
            "-c".into(),
            "echo $$ > \"$0\" && exec \"$@\"".into(),
            procs.into(),
        ]);
    }
    argv.push("chroot".into());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd.arg(root);
    match engine {
        Engine::Postgresql => {
            cmd.args([
                "psql", "-h", ip, "-U", "postgres", "-d", "postgres", "-XAtq",
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-c", text])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", connect_timeout.to_string());
            match side.tls {
                ClientTls::Offered => cmd.env("PGSSLMODE", "prefer"),
                ClientTls::Plain => cmd.env("PGSSLMODE", "disable"),
                ClientTls::VerifyCa(ca) => {
                    cmd.env("PGSSLMODE", "verify-ca").env("PGSSLROOTCERT", ca)
                }
            };
        }
        Engine::Mariadb | Engine::Mysql => {
            let client = if engine == Engine::Mysql {
                "mysql"
            } else {
                "mariadb"
            };
            cmd.args([client, "-h", ip, "-u", "root", "-N", "-B"])
                .arg(format!("--connect-timeout={connect_timeout}"));
            match (side.tls, engine) {
                (ClientTls::Offered, Engine::Mysql) => cmd.arg("--ssl-mode=PREFERRED"),
                (ClientTls::Offered, _) => cmd.arg("--ssl"),
                (ClientTls::Plain, Engine::Mysql) => cmd.arg("--ssl-mode=DISABLED"),
                (ClientTls::Plain, _) => cmd.arg("--skip-ssl"),
                (ClientTls::VerifyCa(ca), Engine::Mysql) => cmd
                    .arg("--ssl-mode=VERIFY_CA")
                    .arg(format!("--ssl-ca={ca}")),
                (ClientTls::VerifyCa(ca), _) => cmd.arg("--ssl").arg(format!("--ssl-ca={ca}")),
            };
            cmd.args(["-e", text]).env("MYSQL_PWD", password);
        }
    }
    let out = cmd.output().context("running the SQL client with chroot")?;
    if !out.status.success() {
        bail!(
            "{engine:?} client on {ip}: {text:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds (first time on a machine) or finds the engine's image root.
pub(crate) async fn image_root(engine: Engine) -> Result<PathBuf> {
    tokio::task::spawn_blocking(move || {
        let (recipe, _) = ImageTable::recipe_for(engine.client_image())
            .context("no image recipe for the engine")?;
        ImageTable::new(default_cache_dir()?, None)
            .ensure(recipe)
            .map(|(root, _)| root)
    })
    .await?
}

/// Applies `manifest` and waits until cluster `ns/name` reports phase Running; returns it and
/// how long that took.
pub(crate) async fn apply_until_running(
    env: &Env,
    ns: &str,
    name: &str,
    manifest: &str,
) -> Result<(DatabaseCluster, Duration)> {
    let started = Instant::now();
    env.cluster.apply(manifest)?;
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let dbc = wait_for(&format!("{name} Running"), RUNNING_TIMEOUT, async || {
        let dbc = clusters.get(name).await?;
        Ok(if phase(&dbc) == "Running" {
            Check::Done(dbc)
        } else {
            Check::Pending(describe(&dbc))
        })
    })
    .await?;
    Ok((dbc, started.elapsed()))
}

/// How long a cluster taken over from an earlier scenario may take to be healthy.
const ADOPT_TIMEOUT: Duration = Duration::from_secs(60);

/// The example cluster of `engine` that an earlier, passed scenario left running, once it is
/// healthy: Running, every member Ready, one pod labelled primary, no failover in flight.
/// `None` when none was left, or when it did not get healthy within a minute (its namespace is
/// then retired and the caller makes a cluster of its own, as it would alone).
pub(crate) async fn adopt_example(
    ctx: &Ctx,
    env: &Env,
    engine: Engine,
) -> Result<Option<(String, String, DatabaseCluster)>> {
    let Some(handed) = ctx.take_over(engine.example_key()) else {
        return Ok(None);
    };
    let (ns, name) = (handed.ns, handed.name);
    ctx.relevant("databasecluster", &ns, &name);
    let clusters: Api<DatabaseCluster> = api(env, &ns);
    let healthy = wait_for(
        &format!("{ns}/{name} (taken over) healthy"),
        ADOPT_TIMEOUT,
        async || {
            let dbc = clusters.get(&name).await?;
            let primaries = member_pods(env, &ns, &name)
                .await?
                .iter()
                .filter(|p| labelled_primary(p))
                .count();
            let wanted = dbc.spec.replicas;
            let ready = dbc.status.as_ref().map_or(0, |s| s.ready_replicas);
            let in_flight = dbc
                .status
                .as_ref()
                .and_then(|s| s.failover.as_ref())
                .is_some_and(|f| f.operation.is_some());
            Ok(
                if phase(&dbc) == "Running" && ready == wanted && primaries == 1 && !in_flight {
                    Check::Done(dbc)
                } else {
                    Check::Pending(format!(
                        "{}; {primaries} pods labelled primary; failover in flight: {in_flight}",
                        describe(&dbc)
                    ))
                },
            )
        },
    )
    .await;
    match healthy {
        Ok(dbc) => Ok(Some((ns, name, dbc))),
        Err(e) => {
            ctx.step(format!(
                "{ns}/{name} is not healthy ({e:#}); starting a cluster of this scenario's own"
            ));
            ctx.retire_on_success(&ns);
            Ok(None)
        }
    }
}

/// The pods of cluster `name` (by its cluster label).
pub(crate) async fn member_pods(env: &Env, ns: &str, name: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = api(env, ns);
    Ok(pods
        .list(&ListParams::default().labels(&format!("database.example.com/cluster={name}")))
        .await?
        .items)
}

fn labelled_primary(pod: &Pod) -> bool {
    pod.labels().get(ROLE_LABEL).map(String::as_str) == Some("primary")
}

/// The example's manifest moved to namespace `ns`; returns it with the cluster's name.
pub(crate) fn example_in(engine: Engine, ns: &str) -> Result<(String, String)> {
    let text = fs::read_to_string(engine.example())?;
    ensure!(
        text.contains("namespace: default"),
        "{} no longer names namespace default",
        engine.example().display()
    );
    let name = text
        .split("kind: DatabaseCluster")
        .nth(1)
        .and_then(|rest| rest.lines().find_map(|l| l.trim().strip_prefix("name: ")))
        .context("no DatabaseCluster name in the example")?
        .trim()
        .to_string();
    Ok((
        text.replace("namespace: default", &format!("namespace: {ns}")),
        name,
    ))
}

pub(crate) async fn password_of(env: &Env, ns: &str, dbc: &DatabaseCluster) -> Result<String> {
    let reference = &dbc.spec.password_secret_ref;
    let secret: Secret = api(env, ns).get(&reference.name).await?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&reference.key))
        .context("the password Secret has no such key")?;
    Ok(String::from_utf8(bytes.0.clone())?)
}

pub(crate) fn pod_ip(pod: &Pod) -> Result<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .with_context(|| format!("pod {} has no IP", pod.name_any()))
}

pub(crate) fn container_pid(pod: &Pod, container: &str) -> Option<u32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .container_id
        .as_deref()?
        .strip_prefix("process://")?
        .parse()
        .ok()
}

pub(crate) fn restarts(pod: &Pod, container: &str) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .map_or(-1, |c| c.restart_count)
}

/// The cluster's member pods by name, and the one labelled primary.
pub(crate) async fn members(env: &Env, ns: &str, name: &str) -> Result<(Vec<Pod>, Pod)> {
    let list = member_pods(env, ns, name).await?;
    let primary = list
        .iter()
        .find(|p| labelled_primary(p))
        .cloned()
        .context("no pod labelled primary")?;
    Ok((list, primary))
}

/// Applies the example, waits for Running, writes a row on the primary and reads it on every
/// replica; returns what later steps need.
struct Running {
    ns: String,
    name: String,
    password: String,
    root: PathBuf,
}

async fn replicates(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<Running> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let root = image_root(engine).await?;
    let (ns, name, dbc) = match adopt_example(ctx, &env, engine).await? {
        Some(adopted) => adopted,
        None => {
            let ns = ctx.namespace(suffix).await?;
            let (manifest, name) = example_in(engine, &ns)?;
            ctx.relevant("databasecluster", &ns, &name);
            let (dbc, took) = apply_until_running(&env, &ns, &name, &manifest).await?;
            ctx.note(format!(
                "{engine:?}: 3 members Running {:.1}s after apply",
                took.as_secs_f64()
            ));
            (ns, name, dbc)
        }
    };
    let password = password_of(&env, &ns, &dbc).await?;
    let (pods, primary) = members(&env, &ns, &name).await?;
    ensure!(pods.len() == 3, "{} member pods, want 3", pods.len());
    for pod in &pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        ensure!(
            node.as_deref().is_some_and(|n| n.starts_with("proc-")),
            "{} is on {node:?}, not a process node",
            pod.name_any()
        );
        let pid = container_pid(pod, engine.server_container())
            .with_context(|| format!("{}: no server pid", pod.name_any()))?;
        ensure!(
            process_alive(pid),
            "{}: pid {pid} is not running",
            pod.name_any()
        );
    }
    let primary_ip = pod_ip(&primary)?;
    ctx.step(format!("primary {} at {primary_ip}", primary.name_any()));
    members_serve_the_clusters_certificate(ctx, &env, engine, &ns, &name, &pods).await?;

    // The password from the Secret logs in; a wrong one does not.
    ensure!(
        sql(engine, &root, &primary_ip, "not-the-password", "select 1").is_err(),
        "a wrong password logged in on {primary_ip}"
    );
    plain_connections_refused(ctx, &env, engine, &root, &ns, &name, &password, &pods).await?;
    // A cluster taken over may have the table of an earlier scenario: a new one each time.
    let write = match engine {
        Engine::Postgresql => {
            "drop table if exists e2e_rows; create table e2e_rows (id int primary key, note text); insert into e2e_rows values (1, 'written on the primary')"
        }
        Engine::Mariadb | Engine::Mysql => {
            "drop database if exists e2e; create database e2e; create table e2e.e2e_rows (id int primary key, note text); insert into e2e.e2e_rows values (1, 'written on the primary')"
        }
    };
    sql(engine, &root, &primary_ip, &password, write)?;
    let read = match engine {
        Engine::Postgresql => "select note from e2e_rows where id = 1",
        Engine::Mariadb | Engine::Mysql => "select note from e2e.e2e_rows where id = 1",
    };
    let written = Instant::now();
    for replica in pods.iter().filter(|p| p.name_any() != primary.name_any()) {
        let ip = pod_ip(replica)?;
        let root = root.clone();
        let password = password.clone();
        wait_for(
            &format!("the row on replica {} ({ip})", replica.name_any()),
            REPLICATION_TIMEOUT,
            async || {
                let got = sql(engine, &root, &ip, &password, read)?;
                Ok(if got == "written on the primary" {
                    Check::Done(())
                } else {
                    Check::Pending(format!("read {got:?}"))
                })
            },
        )
        .await?;
        // A replica refuses writes.
        let denied = match engine {
            Engine::Postgresql => "insert into e2e_rows values (2, 'on a replica')",
            Engine::Mariadb | Engine::Mysql => {
                "insert into e2e.e2e_rows values (2, 'on a replica')"
            }
        };
        ensure!(
            sql(engine, &root, &ip, &password, denied).is_err(),
            "replica {} accepted a write",
            replica.name_any()
        );
    }
    ctx.note(format!(
        "{engine:?}: the row was on both replicas {:.1}s after the write",
        written.elapsed().as_secs_f64()
    ));
    replicas_check_their_source(ctx, engine, &root, &password, &pods, &primary).await?;
    Ok(Running {
        ns,
        name,
        password,
        root,
    })
}

/// Every replica's replication connection checks its source's certificate (the operator points
/// it again once it streams: `SecureReplication`), as the replica's own server reports it:
/// PostgreSQL's WAL receiver connects with `sslmode=verify-full`, the MySQL and MariaDB channels
/// with a CA file and `..._SSL_Verify_Server_Cert: Yes`.
async fn replicas_check_their_source(
    ctx: &Ctx,
    engine: Engine,
    root: &PathBuf,
    password: &str,
    pods: &[Pod],
    primary: &Pod,
) -> Result<()> {
    let started = Instant::now();
    for replica in pods.iter().filter(|p| p.name_any() != primary.name_any()) {
        let ip = pod_ip(replica)?;
        let (query, want): (&str, &[&str]) = match engine {
            Engine::Postgresql => (
                "select conninfo ~ 'sslmode=verify-full' and conninfo ~ 'sslrootcert=' from pg_stat_wal_receiver where status = 'streaming'",
                &["t"],
            ),
            Engine::Mysql => (
                "select concat(ssl_allowed, ' ', ssl_verify_server_certificate, ' ', ssl_ca_file <> '') from performance_schema.replication_connection_configuration",
                &["YES YES 1"],
            ),
            Engine::Mariadb => ("show slave status", &[]),
        };
        wait_for(
            &format!(
                "replica {} checking its source's certificate",
                replica.name_any()
            ),
            Duration::from_secs(60),
            async || {
                let got = match engine {
                    Engine::Mariadb => {
                        // The vertical form names every column of SHOW SLAVE STATUS (with
                        // column names: `sql` leaves them out).
                        let out = Command::new("chroot")
                            .arg(root)
                            .args([
                                "mariadb",
                                "-h",
                                &ip,
                                "-u",
                                "root",
                                "--ssl",
                                "--connect-timeout=5",
                            ])
                            .args(["-e", "show slave status\\G"])
                            .env("MYSQL_PWD", password)
                            .output()?;
                        let text = String::from_utf8_lossy(&out.stdout).into_owned();
                        let field = |name: &str| {
                            text.lines()
                                .find_map(|l| {
                                    l.trim()
                                        .strip_prefix(&format!("{name}: "))
                                        .map(str::to_owned)
                                })
                                .unwrap_or_default()
                        };
                        format!(
                            "{} {} {}",
                            field("Master_SSL_Allowed"),
                            field("Master_SSL_Verify_Server_Cert"),
                            field("Master_SSL_CA_File")
                        )
                    }
                    _ => sql(engine, root, &ip, password, query)?,
                };
                let checked = match engine {
                    Engine::Mariadb => got.starts_with("Yes Yes /"),
                    _ => want.contains(&got.as_str()),
                };
                Ok(if checked {
                    Check::Done(())
                } else {
                    Check::Pending(format!("reports {got:?}"))
                })
            },
        )
        .await?;
    }
    ctx.note(format!(
        "{engine:?}: every replica checks its source's certificate ({:.1}s after the replicas had the row)",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The authority cluster `ns/name` publishes for its clients: `ca.crt` of Secret `<name>-ca`.
pub(crate) async fn published_ca(env: &Env, ns: &str, name: &str) -> Result<Vec<u8>> {
    let secrets: Api<Secret> = api(env, ns);
    let ca = secrets
        .get(&format!("{name}-ca"))
        .await
        .with_context(|| format!("Secret {ns}/{name}-ca"))?;
    ca.data
        .and_then(|mut d| d.remove("ca.crt"))
        .map(|pem| pem.0)
        .with_context(|| format!("Secret {ns}/{name}-ca has no ca.crt"))
}

/// TLS required by default (`spec.tls.allowPlaintext: false`): on every member a plain
/// connection is refused even with the right password (PostgreSQL `hostnossl ... reject`,
/// MySQL/MariaDB `require_secure_transport`), and a client that holds only the authority of
/// `<name>-ca` and checks the server's certificate against it (libpq `sslmode=verify-ca`, MySQL
/// `--ssl-mode=VERIFY_CA`, MariaDB `--ssl-ca`) logs in over TLS.
#[allow(clippy::too_many_arguments)]
async fn plain_connections_refused(
    ctx: &Ctx,
    env: &Env,
    engine: Engine,
    root: &std::path::Path,
    ns: &str,
    name: &str,
    password: &str,
    pods: &[Pod],
) -> Result<()> {
    let pem = published_ca(env, ns, name).await?;
    // Inside the image root the chrooted client runs in.
    let inside = format!("/tmp/e2e-ca-{ns}-{name}.crt");
    fs::write(root.join(inside.trim_start_matches('/')), &pem)?;
    let root = root.to_path_buf();
    let session = match engine {
        Engine::Postgresql => "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
        Engine::Mariadb | Engine::Mysql => "show session status like 'Ssl_version'",
    };
    for pod in pods {
        let ip = pod_ip(pod)?;
        let side = |tls| ClientSide {
            tls,
            ..ClientSide::default()
        };
        let plain = sql_from(
            side(ClientTls::Plain),
            engine,
            &root,
            &ip,
            password,
            "select 1",
            5,
        );
        let Err(refused) = plain else {
            bail!("{} ({ip}) accepted a plain connection", pod.name_any());
        };
        let checked = sql_from(
            side(ClientTls::VerifyCa(&inside)),
            engine,
            &root,
            &ip,
            password,
            session,
            5,
        )
        .with_context(|| {
            format!(
                "{} ({ip}): a client checking the certificate against {name}-ca",
                pod.name_any()
            )
        })?;
        ensure!(
            checked == "t" || checked.starts_with("Ssl_version\tTLSv1."),
            "{} ({ip}): the checked session is not TLS: {checked:?}",
            pod.name_any()
        );
        ctx.step(format!(
            "{}: plain connection refused ({}), checked TLS session ({})",
            pod.name_any(),
            refused
                .to_string()
                .lines()
                .last()
                .unwrap_or_default()
                .trim(),
            checked.replace('\t', " ")
        ));
    }
    let _ = fs::remove_file(root.join(inside.trim_start_matches('/')));
    ctx.note(format!(
        "{engine:?}: every member refuses plain connections; a client checking {name}-ca's authority logs in"
    ));
    Ok(())
}

/// TLS by default (`spec.tls`): the Secret `<name>-ca` publishes the cluster's authority, and
/// every member serves a certificate that a client holding only that file accepts for the
/// member's DNS name (`openssl s_client` with the engine's STARTTLS, `-verify_return_error`,
/// `-verify_hostname`), and refuses for another name.
pub(crate) async fn members_serve_the_clusters_certificate(
    ctx: &Ctx,
    env: &Env,
    engine: Engine,
    ns: &str,
    name: &str,
    pods: &[Pod],
) -> Result<()> {
    let pem = published_ca(env, ns, name).await?;
    let dir = std::env::temp_dir().join(format!("e2e-tls-{ns}-{name}"));
    fs::create_dir_all(&dir)?;
    let ca_file = dir.join("ca.crt");
    fs::write(&ca_file, &pem)?;
    let (port, starttls) = match engine {
        Engine::Postgresql => ("5432", "postgres"),
        Engine::Mariadb | Engine::Mysql => ("3306", "mysql"),
    };
    let verify = |ip: &str, hostname: &str| -> Result<(bool, String)> {
        let out = Command::new("openssl")
            .args(["s_client", "-brief", "-connect"])
            .arg(format!("{ip}:{port}"))
            .args(["-starttls", starttls, "-verify_return_error", "-CAfile"])
            .arg(&ca_file)
            .args(["-verify_hostname", hostname])
            .stdin(std::process::Stdio::null())
            .output()
            .context("running openssl s_client")?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((said.contains("Verification: OK"), said))
    };
    for pod in pods {
        let ip = pod_ip(pod)?;
        let member = format!("{}.{name}-headless.{ns}.svc", pod.name_any());
        let (ok, said) = verify(&ip, &member)?;
        ensure!(
            ok,
            "{} ({ip}) does not serve a certificate of {ns}/{name}-ca for {member}: {}",
            pod.name_any(),
            said.trim()
        );
        let (ok, _) = verify(&ip, "someone-else.example")?;
        ensure!(
            !ok,
            "{} ({ip}): its certificate passed for a name it does not carry",
            pod.name_any()
        );
    }
    let _ = fs::remove_dir_all(&dir);
    ctx.note(format!(
        "{engine:?}: every member serves TLS with a certificate that {name}-ca verifies for the member's DNS name (and not for another)"
    ));
    Ok(())
}

/// examples/local/postgresql.yaml: three real PostgreSQL servers, replication, a killed primary
/// server restarted with its data, a deleted replica back on its own volume.
pub async fn postgresql_example_replicates_and_survives(ctx: &Ctx) -> Result<()> {
    let engine = Engine::Postgresql;
    let running = replicates(ctx, engine, "pg-local").await?;
    let env = ctx.env().await?;
    let Running {
        ns,
        name,
        password,
        root,
    } = running;
    let pods: Api<Pod> = api(&env, &ns);
    let container = engine.server_container();

    // kill -9 of the primary's server: NotReady, restarted in place, the row still there.
    let (_, primary) = members(&env, &ns, &name).await?;
    let primary_name = primary.name_any();
    let ip = pod_ip(&primary)?;
    let pid = container_pid(&primary, container).context("no primary pid")?;
    let before = restarts(&primary, container);
    let uid = primary.uid();
    ensure!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()?
            .success(),
        "kill -9 {pid} failed"
    );
    let killed = Instant::now();
    let pod = wait_for(
        &format!("{primary_name} restarted and Ready"),
        Duration::from_secs(90),
        async || {
            let pod = pods.get(&primary_name).await?;
            Ok(if ready(&pod) && restarts(&pod, container) > before {
                Check::Done(pod)
            } else {
                Check::Pending(summary(&pod))
            })
        },
    )
    .await?;
    ensure!(
        pod.uid() == uid,
        "the pod was replaced, not restarted in place"
    );
    ensure!(!process_alive(pid), "the killed server {pid} still runs");
    ensure!(
        sql(
            engine,
            &root,
            &ip,
            &password,
            "select note from e2e_rows where id = 1"
        )? == "written on the primary",
        "the row is gone after the restart"
    );
    ctx.note(format!(
        "kill -9 of the primary's server: restartCount {before} -> {}, Ready again after {:.1}s, data intact",
        restarts(&pod, container),
        killed.elapsed().as_secs_f64()
    ));

    // Deleting a replica pod: its processes stop, the StatefulSet's replacement runs on the
    // same claim and still has the row (no copy from the primary: the data was already there).
    let (members_now, primary) = members(&env, &ns, &name).await?;
    let replica = members_now
        .iter()
        .find(|p| p.name_any() != primary.name_any())
        .context("no replica")?
        .clone();
    let replica_name = replica.name_any();
    let replica_pid = container_pid(&replica, container).context("no replica pid")?;
    let claim = format!("data-{replica_name}");
    let claims: Api<PersistentVolumeClaim> = api(&env, &ns);
    let volume_before = claims.get(&claim).await?.spec.and_then(|s| s.volume_name);
    let deleted = Instant::now();
    pods.delete(&replica_name, &DeleteParams::default()).await?;
    let replacement = wait_for(
        &format!("a new {replica_name} Ready"),
        Duration::from_secs(120),
        async || {
            let pod = pods.get(&replica_name).await?;
            Ok(if pod.uid() != replica.uid() && ready(&pod) {
                Check::Done(pod)
            } else {
                Check::Pending(summary(&pod))
            })
        },
    )
    .await?;
    ensure!(
        !process_alive(replica_pid),
        "the deleted pod's server {replica_pid} still runs"
    );
    let volume_after = claims.get(&claim).await?.spec.and_then(|s| s.volume_name);
    ensure!(
        volume_before.is_some() && volume_before == volume_after,
        "claim {claim} changed volume: {volume_before:?} -> {volume_after:?}"
    );
    let new_ip = pod_ip(&replacement)?;
    ensure!(
        sql(
            engine,
            &root,
            &new_ip,
            &password,
            "select note from e2e_rows where id = 1"
        )? == "written on the primary",
        "the replacement of {replica_name} does not have the row"
    );
    let log = env
        .state_dir
        .join("pods")
        .join(format!("{ns}_{replica_name}"))
        .join("init.log");
    let init_log = fs::read_to_string(&log).unwrap_or_default();
    ensure!(
        init_log.contains("nothing to seed") || init_log.contains("data directory present"),
        "the replacement's init did not find its data in place; {} says:\n{init_log}",
        log.display()
    );
    ctx.note(format!(
        "deleted replica back on volume {} with its data in {:.1}s",
        volume_after.unwrap_or_default(),
        deleted.elapsed().as_secs_f64()
    ));
    // Intact again (three members Ready): the next PostgreSQL scenario may take it over.
    ctx.hand_over(engine.example_key(), Handed { ns, name });
    Ok(())
}

/// examples/local/mariadb.yaml: three real MariaDB servers replicating with GTIDs.
pub async fn mariadb_example_replicates(ctx: &Ctx) -> Result<()> {
    let running = replicates(ctx, Engine::Mariadb, "mariadb-local").await?;
    // Left running for the engine's failover scenario, which takes it over.
    ctx.hand_over(
        Engine::Mariadb.example_key(),
        Handed {
            ns: running.ns,
            name: running.name,
        },
    );
    Ok(())
}

/// examples/local/mysql.yaml: three real MySQL 9.7 servers replicating with GTIDs (replicas
/// seeded with the CLONE plugin), the replicas `super_read_only`.
pub async fn mysql_example_replicates(ctx: &Ctx) -> Result<()> {
    let running = replicates(ctx, Engine::Mysql, "mysql-local").await?;
    // Left running for the engine's failover scenario, which takes it over.
    ctx.hand_over(
        Engine::Mysql.example_key(),
        Handed {
            ns: running.ns,
            name: running.name,
        },
    );
    Ok(())
}

/// The kustomization the in-cluster scenario applies: `deploy/crds`, `deploy/rbac` and
/// `deploy/manager` as shipped, plus what only this machine needs (one replica, the process
/// nodes' taint and label). The webhook component needs cert-manager, which is not here.
fn in_cluster_overlay() -> String {
    "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../deploy/crds
  - ../../deploy/rbac
  - ../../deploy/manager
patches:
  - target: {kind: Deployment, name: database-operator}
    patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: database-operator, namespace: database-operator-system}
      spec:
        replicas: 1
        template:
          spec:
            nodeSelector: {database.example.com/process-node: \"true\"}
            tolerations:
              - {key: database.example.com/process-node, operator: Equal, value: \"true\", effect: NoSchedule}
  # No cluster DNS here: members are dialled at their (loopback) pod IPs.
  - target: {kind: Deployment, name: database-operator}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --member-address=pod-ip
"
    .to_string()
}

/// The shipped operator serves /metrics over HTTPS to authorized readers only: no token 401,
/// a ServiceAccount without the metrics-reader ClusterRole 403, one bound to it 200.
async fn metrics_need_an_authorized_token(ctx: &Ctx, env: &Env, ip: Ipv4Addr) -> Result<()> {
    let ns = ctx.namespace("metrics-readers").await?;
    env.cluster.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: prometheus, namespace: {ns}}}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: web, namespace: {ns}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata: {{name: e2e-metrics-reader}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: database-operator-metrics-reader}}\n\
         subjects: [{{kind: ServiceAccount, name: prometheus, namespace: {ns}}}]\n"
    ))?;
    let token = |account: &str| -> Result<String> {
        let out = kubectl(env, &["create", "token", account, "-n", &ns], None)?;
        ensure!(out.ok, "kubectl create token {account}: {}", out.stderr);
        Ok(out.stdout.trim().to_owned())
    };
    let (prometheus, web) = (token("prometheus")?, token("web")?);
    let (code, body) = https_get_at(ip, 8080, "/metrics", None).await?;
    ensure!(
        code == 401,
        "GET /metrics without a token: {code} {body:.200}"
    );
    let (code, body) = https_get_at(ip, 8080, "/metrics", Some(&web)).await?;
    ensure!(
        code == 403 && body.contains("may not get /metrics"),
        "GET /metrics as web: {code} {body:.200}"
    );
    // The binding may take a moment to reach the authorizer's cache.
    wait_for(
        "/metrics to answer the metrics reader",
        Duration::from_secs(30),
        async || {
            let (code, body) = https_get_at(ip, 8080, "/metrics", Some(&prometheus)).await?;
            Ok(
                if code == 200 && body.contains("controller_runtime_reconcile_total") {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{code} {body:.200}"))
                },
            )
        },
    )
    .await?;
    let plain = http_get_at(ip, 8080, "/metrics");
    ensure!(
        !matches!(plain, Ok((200, _))),
        "plain HTTP answered /metrics: {plain:?}"
    );
    ctx.step(
        "/metrics over HTTPS: no token 401, a ServiceAccount without the reader role 403, one \
         bound to database-operator-metrics-reader 200; plain HTTP refused",
    );
    kubectl(
        env,
        &["delete", "clusterrolebinding", "e2e-metrics-reader"],
        None,
    )?;
    Ok(())
}

/// `kubectl apply -k` of deploy/ starts the operator as a pod on a process node (in-cluster
/// config from the projected token), which takes the leader Lease, reconciles a cluster to
/// Running and answers /healthz and /readyz on its pod IP, /metrics over HTTPS to an authorized
/// reader only.
pub async fn operator_runs_in_cluster_from_deploy(ctx: &Ctx) -> Result<()> {
    let env = ctx.without_shared_operator().await?;
    let overlay = workspace_root().join("target/e2e-in-cluster");
    fs::create_dir_all(&overlay)?;
    fs::write(overlay.join("kustomization.yaml"), in_cluster_overlay())?;
    let applied = env.cluster.kubectl_output(&[
        "apply",
        "--server-side",
        "-k",
        &overlay.to_string_lossy(),
    ])?;
    ctx.step(format!(
        "kubectl apply -k {}:\n{applied}",
        overlay.display()
    ));
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    let result = async {
        let started = Instant::now();
        let pod = wait_for(
            "the operator pod Ready",
            Duration::from_secs(120),
            async || {
                let list = pods
                    .list(&ListParams::default().labels("app.kubernetes.io/name=database-operator"))
                    .await?
                    .items;
                Ok(match list.iter().find(|p| ready(p)) {
                    Some(p) => Check::Done(p.clone()),
                    None => {
                        Check::Pending(list.iter().map(summary).collect::<Vec<_>>().join(" | "))
                    }
                })
            },
        )
        .await?;
        let pod_name = pod.name_any();
        ctx.watch_log(
            env.state_dir
                .join("pods")
                .join(format!("{OPERATOR_NAMESPACE}_{pod_name}"))
                .join("manager.log"),
        );
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        ensure!(node.starts_with("proc-"), "the operator runs on {node}");
        let ip = pod_ip(&pod)?;
        ctx.note(format!(
            "operator pod {pod_name} Ready on {node} at {ip} {:.1}s after apply",
            started.elapsed().as_secs_f64()
        ));
        for (port, path, want) in [(8081, "/healthz", "ok"), (8081, "/readyz", "ok")] {
            let (code, body) = http_get_at(ip.parse()?, port, path)?;
            ensure!(
                code == 200 && body.contains(want),
                "GET {ip}:{port}{path}: {code} {body:.200}"
            );
        }
        metrics_need_an_authorized_token(ctx, &env, ip.parse()?).await?;

        // It reconciles: a one-member PostgreSQL cluster reaches Running.
        let ns = ctx.namespace("in-cluster").await?;
        let (manifest, name) = example_in(Engine::Postgresql, &ns)?;
        env.cluster
            .apply(&manifest.replace("replicas: 3", "replicas: 1"))?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        wait_for(
            &format!("{name} Running (reconciled by the in-cluster operator)"),
            Duration::from_secs(120),
            async || {
                let dbc = clusters.get(&name).await?;
                Ok(if phase(&dbc) == "Running" {
                    Check::Done(())
                } else {
                    Check::Pending(describe(&dbc))
                })
            },
        )
        .await?;
        let log = fs::read_to_string(
            env.state_dir
                .join("pods")
                .join(format!("{OPERATOR_NAMESPACE}_{pod_name}"))
                .join("manager.log"),
        )
        .unwrap_or_default();
        ensure!(
            log.contains(&name),
            "the in-cluster operator's log does not mention {name}"
        );
        clusters.delete(&name, &DeleteParams::default()).await?;
        wait_for(
            &format!("{name} deleted through the finalizer"),
            Duration::from_secs(60),
            async || {
                Ok(match clusters.get_opt(&name).await? {
                    None => Check::Done(()),
                    Some(dbc) => Check::Pending(describe(&dbc)),
                })
            },
        )
        .await?;
        Ok(())
    }
    .await;
    // Only the Deployment goes: the CRD and RBAC are the shared environment's.
    deployments
        .delete("database-operator", &DeleteParams::default())
        .await
        .context("deleting the in-cluster operator")?;
    wait_for(
        "the in-cluster operator pod gone",
        Duration::from_secs(60),
        async || {
            let left = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=database-operator"))
                .await?
                .items;
            Ok(if left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("{} pods left", left.len()))
            })
        },
    )
    .await?;
    result
}

/// The processes of the local cluster: the components in its state file, every process they
/// started (pods' servers included), and the e2e operators; by walking parent pids.
fn cluster_pids(env: &Env) -> Result<BTreeSet<u32>> {
    let state = env.cluster.state();
    let mut roots: BTreeSet<u32> = state.components.iter().map(|c| c.pid).collect();
    roots.insert(std::process::id());
    let mut parent_of = BTreeMap::new();
    for entry in fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.insert(pid, ppid);
        }
    }
    let mut pids = roots.clone();
    loop {
        let before = pids.len();
        for (pid, ppid) in &parent_of {
            if pids.contains(ppid) {
                pids.insert(*pid);
            }
        }
        if pids.len() == before {
            break;
        }
    }
    Ok(pids)
}

/// The socket inodes a process holds.
fn socket_inodes(pid: u32) -> BTreeSet<u64> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    dir.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// A remote address of /proc/net/{tcp,udp}[6] (hex, as the kernel prints it) in words, and
/// whether it is loopback (or unset: a listening or unconnected socket).
fn remote_is_loopback(hex: &str) -> (String, bool) {
    let (addr, _port) = hex.split_once(':').unwrap_or((hex, ""));
    let bytes: Vec<u8> = (0..addr.len() / 2)
        .filter_map(|i| u8::from_str_radix(&addr[2 * i..2 * i + 2], 16).ok())
        .collect();
    if bytes.iter().all(|b| *b == 0) {
        return ("unset".into(), true);
    }
    match bytes.len() {
        4 => {
            // Little-endian per 32-bit word.
            let ip = Ipv4Addr::new(bytes[3], bytes[2], bytes[1], bytes[0]);
            (ip.to_string(), ip.is_loopback())
        }
        16 => {
            let mut octets = [0u8; 16];
            for word in 0..4 {
                for i in 0..4 {
                    octets[word * 4 + i] = bytes[word * 4 + 3 - i];
                }
            }
            let ip = std::net::Ipv6Addr::from(octets);
            let loopback =
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback());
            (ip.to_string(), loopback)
        }
        _ => (hex.to_string(), false),
    }
}

/// Every pod IP and node address of the local cluster is loopback, and no socket of any of its
/// processes (control plane, kwok, the node agent, the database servers, the operator) is
/// connected to an address outside 127.0.0.0/8, with real databases running and replicating.
pub async fn nothing_leaves_loopback(ctx: &Ctx) -> Result<()> {
    // The decoding the check relies on, on addresses whose answer is known.
    for (hex, want) in [
        ("0100007F:1F90", ("127.0.0.1", true)),
        ("01000A7F:1538", ("127.10.0.1", true)),
        ("0101A8C0:0050", ("192.168.1.1", false)),
        ("00000000000000000000000001000000:1538", ("::1", true)),
        (
            "B80D0120000000000000000001000000:0050",
            ("2001:db8::1", false),
        ),
    ] {
        let got = remote_is_loopback(hex);
        ensure!(
            got == (want.0.to_string(), want.1),
            "decoding {hex}: {got:?}, want {want:?}"
        );
    }
    let env = ctx.env().await?;
    ctx.operator().await?;
    // Traffic to look at: a PostgreSQL cluster replicating while the check runs.
    let running = replicates(ctx, Engine::Postgresql, "loopback").await?;

    let pods: Api<Pod> = Api::all(env.client.clone());
    let all = pods.list(&ListParams::default()).await?.items;
    let mut checked = 0;
    for pod in &all {
        if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
            let addr: Ipv4Addr = ip.parse().with_context(|| format!("pod IP {ip}"))?;
            ensure!(
                addr.is_loopback(),
                "pod {}/{} has IP {ip}, outside 127.0.0.0/8",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            );
            checked += 1;
        }
    }
    let nodes: Api<Node> = Api::all(env.client.clone());
    for node in nodes.list(&ListParams::default()).await?.items {
        for address in node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
        {
            if address.type_ == "InternalIP" || address.type_ == "ExternalIP" {
                let addr: Ipv4Addr = address.address.parse()?;
                ensure!(
                    addr.is_loopback(),
                    "node {} has {} {}",
                    node.name_any(),
                    address.type_,
                    address.address
                );
            }
        }
    }

    // Sockets, sampled a few times while replication and the watches run.
    let pids = cluster_pids(&env)?;
    let mut sockets_seen = 0;
    for _ in 0..5 {
        let mut inodes = BTreeSet::new();
        for pid in &pids {
            inodes.extend(socket_inodes(*pid));
        }
        for table in ["tcp", "tcp6", "udp", "udp6"] {
            let text = fs::read_to_string(format!("/proc/net/{table}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                if fields.len() < 10 {
                    continue;
                }
                let Ok(inode) = fields[9].parse::<u64>() else {
                    continue;
                };
                if !inodes.contains(&inode) {
                    continue;
                }
                sockets_seen += 1;
                let (remote, ok) = remote_is_loopback(fields[2]);
                ensure!(
                    ok,
                    "a socket of the local cluster ({table}, inode {inode}) is connected to {remote}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ensure!(
        sockets_seen > 50,
        "only {sockets_seen} sockets of {} processes seen: the check looked at nothing",
        pids.len()
    );
    ctx.note(format!(
        "{checked} pod IPs loopback; {sockets_seen} socket observations of {} processes, all loopback",
        pids.len()
    ));
    ctx.hand_over(
        Engine::Postgresql.example_key(),
        Handed {
            ns: running.ns,
            name: running.name,
        },
    );
    Ok(())
}
