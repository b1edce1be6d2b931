//! The database drivers against real servers on loopback: a PostgreSQL primary and standby,
//! a MariaDB primary and replica, a MySQL 9.7 primary and replica, each in its own temporary
//! directory on 127.10.20.1 and 127.10.20.2. Every `DatabaseIo` call is driven for real: probe,
//! fence, promote, follow, set_password (MySQL: with the old password retained, then
//! discarded), and a switchover from one member to the other and back into replication.
//! Each engine also runs one server with TLS only (on 127.10.20.5, a port of its own) that the
//! drivers reach with a CA trust, and refuse with another CA's.
//!
//! PostgreSQL and MariaDB are Debian's packages installed on the machine. MySQL is packaged for
//! no suite this machine's apt reaches except sid, so its servers run from the image root the
//! process nodes use (`mysql-sid`, built by `cargo xtask cluster images` and by `cargo xtask
//! test` before the tests; its path in `MYSQL_IMAGE_ROOT`, else found in the image cache):
//! `mysqld` chrooted into that root, in a private mount namespace where the test's temporary
//! directory is bind-mounted on the root's `/tmp` (the cached root itself is never written).
//!
//! When a server binary (or the MySQL root) is not there the test says so and passes; set
//! `REQUIRE_REAL_SERVERS=1` (meant for CI) to make it a failure. When the binaries are there,
//! every failure fails. Every server started here is stopped by a guard, on panic too.

mod common;

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use database_operator_api::Engine;
use database_operator_core::position::{Position, Relation};
use database_operator_runtime::database::mysql::MysqlConfig;
use database_operator_runtime::database::postgres::PostgresConfig;
use database_operator_runtime::database::tls::{ServerTrust, Verify, mysql_ssl_opts};
use database_operator_runtime::database::{
    Account, DatabaseIo, DbErrorKind, MemberFacts, MysqlIo, PostgresIo, Secret, ServerRole,
    SourceTls, Timeouts,
};

const PRIMARY_IP: &str = "127.10.20.1";
const REPLICA_IP: &str = "127.10.20.2";

/// The PostgreSQL port on both addresses: 15432 unless taken (another run of these tests).
fn pg_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| free_port(15432))
}

/// The MariaDB port on both addresses: 13306 unless taken.
fn mariadb_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| free_port(13306))
}

/// A port free on both loopback addresses: `preferred`, or one the kernel picks.
fn free_port(preferred: u16) -> u16 {
    let free_on_both = |port: u16| {
        let a = TcpListener::bind((PRIMARY_IP, port));
        let b = TcpListener::bind((
            REPLICA_IP,
            a.as_ref().map_or(port, |l| l.local_addr().unwrap().port()),
        ));
        match (a, b) {
            (Ok(a), Ok(_)) => Some(a.local_addr().unwrap().port()),
            _ => None,
        }
    };
    free_on_both(preferred)
        .or_else(|| (0..20).find_map(|_| free_on_both(0)))
        .expect("a port free on both loopback addresses")
}

// ------------------------------------------------------------------------------ servers

/// A server process, stopped when dropped (also while a test panics).
struct Server {
    label: String,
    child: Option<Child>,
    log: PathBuf,
    /// The signal for a clean stop (`INT`: PostgreSQL fast shutdown; `TERM` for MariaDB).
    stop_signal: &'static str,
}

impl Server {
    fn start(label: &str, mut cmd: Command, log: PathBuf, stop_signal: &'static str) -> Server {
        let out = fs::File::create(&log).expect("server log file");
        let err = out.try_clone().expect("server log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {label}: {e}"));
        Server {
            label: label.to_owned(),
            child: Some(child),
            log,
            stop_signal,
        }
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([format!("-{sig}"), child.id().to_string()])
                .status();
        }
    }

    /// Stops the server cleanly (within 20 s, else kills it) and waits for it to exit.
    fn stop(&mut self) {
        self.signal(self.stop_signal);
        if let Some(mut child) = self.child.take() {
            common::wait_or_kill(&mut child, Duration::from_secs(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- last lines of {} ---", self.label);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
        if let Some(mut child) = self.child.take() {
            // No clean shutdown needed: the data is thrown away. PostgreSQL's immediate
            // shutdown (QUIT) takes its backends down with it; anything still there after a
            // few seconds is killed.
            let _ = Command::new("kill")
                .args(["-QUIT", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && !matches!(child.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn running_as_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// `program args...` as the given user when running as root (PostgreSQL refuses root), and
/// killed if this process dies (`setpriv --pdeathsig`).
fn command_as(user: Option<&str>, program: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    if let Some(user) = user.filter(|_| running_as_root()) {
        cmd.args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
        ]);
    }
    cmd.args(["--pdeathsig", "KILL", "--"]).arg(program);
    cmd
}

fn run_ok(mut cmd: Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn chown_to(user: &str, path: &Path) {
    if running_as_root() {
        run_ok(
            {
                let mut c = Command::new("chown");
                c.args(["-R", &format!("{user}:"), path.to_str().unwrap()]);
                c
            },
            "chown",
        );
    }
}

/// Whether the servers' binaries are here; if not, says why. With
/// `REQUIRE_REAL_SERVERS` set, a missing binary fails the test instead.
fn present(what: &str, paths: &[&Path]) -> bool {
    let missing: Vec<String> = paths
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() && Path::new("/usr/bin/setpriv").exists() {
        return true;
    }
    let why = format!("{what}: skipped, not installed: {missing:?} (or setpriv)");
    assert!(
        std::env::var_os("REQUIRE_REAL_SERVERS").is_none(),
        "REQUIRE_REAL_SERVERS is set: {why}"
    );
    eprintln!("{why}");
    false
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not within {timeout:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(3),
        statement: Duration::from_secs(10),
        promote: Duration::from_secs(30),
    }
}

fn position(facts: &MemberFacts, engine: Engine) -> Position {
    facts
        .position(engine)
        .expect("the position parses")
        .expect("a position")
}

// ------------------------------------------------------------------------------ PostgreSQL

fn pg_bin() -> PathBuf {
    // The newest installed major version.
    let mut versions: Vec<u32> = fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    versions.sort_unstable();
    PathBuf::from(format!(
        "/usr/lib/postgresql/{}/bin",
        versions.last().copied().unwrap_or(15)
    ))
}

const PG_ADMIN_PW: &str = "admin pw with 'quote' and \\ backslash";
const PG_REPL_PW: &str = "repl-pw-1";

fn start_postgres(bin: &Path, dir: &Path, data: &str, ip: &str) -> Server {
    start_postgres_on(bin, dir, data, ip, pg_port(), &[])
}

/// [`start_postgres`] on `port`, with `extra` settings.
fn start_postgres_on(
    bin: &Path,
    dir: &Path,
    data: &str,
    ip: &str,
    port: u16,
    extra: &[String],
) -> Server {
    let mut cmd = command_as(Some("postgres"), &bin.join("postgres"));
    cmd.arg("-D").arg(dir.join(data));
    for setting in [
        format!("listen_addresses={ip}"),
        format!("port={port}"),
        // No Unix socket: both servers share a directory and a port number.
        "unix_socket_directories=".to_owned(),
        "fsync=off".to_owned(),
        "shared_buffers=16MB".to_owned(),
        "max_connections=20".to_owned(),
        "wal_keep_size=64MB".to_owned(),
        "log_min_messages=warning".to_owned(),
    ]
    .into_iter()
    .chain(extra.iter().cloned())
    {
        cmd.arg("-c").arg(setting);
    }
    Server::start(
        &format!("postgres {data}"),
        cmd,
        dir.join(format!("{data}.log")),
        "INT",
    )
}

fn pg_io(dir: &Path, ip: &str, user: &str, password: &str, name: &str) -> PostgresIo {
    PostgresIo::new(PostgresConfig {
        engine: Engine::Postgresql,
        host: ip.to_owned(),
        port: pg_port(),
        user: user.to_owned(),
        password: Secret::new(password),
        dbname: "postgres".to_owned(),
        timeouts: timeouts(),
        replication_user: "repl".to_owned(),
        replication_passfile: Some(dir.join("pgpass").display().to_string()),
        application_name: Some(name.to_owned()),
        tls: None,
    })
}

async fn pg_connect(
    ip: &str,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::Config::new()
        .host(ip)
        .port(pg_port())
        .user(user)
        .password(password)
        .dbname("postgres")
        .connect_timeout(Duration::from_secs(3))
        .connect(tokio_postgres::NoTls)
        .await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Probes the member `io` drives until its facts satisfy `ok` (20 s at most).
async fn probe_until(
    io: &impl DatabaseIo,
    what: &str,
    ok: impl Fn(&MemberFacts) -> bool,
) -> MemberFacts {
    wait_for(what, Duration::from_secs(20), || async {
        let facts = io.probe().await.map_err(|e| e.to_string())?;
        if ok(&facts) {
            Ok(facts)
        } else {
            Err(format!("{facts:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_probe_fence_promote_follow_and_password() {
    let bin = pg_bin();
    if !present(
        "PostgreSQL",
        &[
            &bin.join("initdb"),
            &bin.join("postgres"),
            &bin.join("pg_basebackup"),
        ],
    ) {
        return;
    }
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("dbio-pg-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    fs::write(dir.join("pwfile"), format!("{PG_ADMIN_PW}\n")).unwrap();
    fs::write(dir.join("pgpass"), format!("*:*:*:repl:{PG_REPL_PW}\n")).unwrap();
    fs::set_permissions(
        dir.join("pgpass"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    chown_to("postgres", &dir);

    let mut initdb = command_as(Some("postgres"), &bin.join("initdb"));
    initdb
        .args(["-U", "postgres", "--auth=scram-sha-256", "--no-sync", "-D"])
        .arg(dir.join("p1"))
        .arg(format!("--pwfile={}", dir.join("pwfile").display()));
    run_ok(initdb, "initdb");
    let hba = dir.join("p1/pg_hba.conf");
    let mut text = fs::read_to_string(&hba).unwrap();
    text.push_str(
        "host all all 127.0.0.0/8 scram-sha-256\nhost replication all 127.0.0.0/8 scram-sha-256\n",
    );
    fs::write(&hba, text).unwrap();

    let mut p1 = start_postgres(&bin, &dir, "p1", PRIMARY_IP);
    let io1 = pg_io(&dir, PRIMARY_IP, "postgres", PG_ADMIN_PW, "p1");
    let io2 = pg_io(&dir, REPLICA_IP, "postgres", PG_ADMIN_PW, "p2");

    // An address where nothing listens is reported as unreachable, not as an error.
    let nobody = pg_io(&dir, "127.10.20.9", "postgres", PG_ADMIN_PW, "x");
    assert_eq!(nobody.probe().await.unwrap(), MemberFacts::unreachable());

    let f1 = probe_until(&io1, "primary up", |f| f.reachable).await;
    assert_eq!(f1.role, Some(ServerRole::Primary));
    assert_eq!(f1.read_only, Some(false));
    assert_eq!(f1.timeline, Some(1));
    assert!(f1.version.as_deref().unwrap().starts_with(char::is_numeric));
    assert!(f1.server_id.is_some());
    let start_pos = position(&f1, Engine::Postgresql);
    // No member slots yet; the oldest WAL it has starts at or before where it is.
    assert_eq!(f1.member_slots, Some(Vec::new()));
    let oldest = f1.retained_from.clone().expect("the primary's oldest WAL");
    let oldest = Position::parse(Engine::Postgresql, &oldest, Some(1), None).unwrap();
    assert!(
        !start_pos.needs_before(&oldest),
        "{start_pos} before {oldest}"
    );

    // Member slots: made as asked, a user's own slot is never touched, unwanted ones go.
    let slots = |names: &[&str]| names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    pg_connect(PRIMARY_IP, "postgres", PG_ADMIN_PW)
        .await
        .unwrap()
        .batch_execute("SELECT pg_create_physical_replication_slot('users_own')")
        .await
        .unwrap();
    io1.keep_member_slots(&slots(&[
        "member_1",
        "member_2",
        "member_x'; DROP TABLE t; --",
    ]))
    .await
    .unwrap();
    let f = io1.probe().await.unwrap();
    assert_eq!(f.member_slots, Some(slots(&["member_1", "member_2"])));
    io1.keep_member_slots(&slots(&["member_1"])).await.unwrap();
    io1.keep_member_slots(&slots(&["member_1"])).await.unwrap();
    assert_eq!(
        io1.probe().await.unwrap().member_slots,
        Some(slots(&["member_1"]))
    );
    let all: Vec<String> = pg_connect(PRIMARY_IP, "postgres", PG_ADMIN_PW)
        .await
        .unwrap()
        .query(
            "SELECT slot_name::text FROM pg_replication_slots ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(all, ["member_1", "users_own"]);
    io1.keep_member_slots(&[]).await.unwrap();
    pg_connect(PRIMARY_IP, "postgres", PG_ADMIN_PW)
        .await
        .unwrap()
        .batch_execute("SELECT pg_drop_replication_slot('users_own')")
        .await
        .unwrap();

    // Wrong credentials are classified as such.
    let wrong = pg_io(&dir, PRIMARY_IP, "postgres", "not the password", "x");
    assert_eq!(
        wrong.probe().await.unwrap_err().kind,
        DbErrorKind::AuthFailed
    );

    let admin = pg_connect(PRIMARY_IP, "postgres", PG_ADMIN_PW)
        .await
        .unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE repl WITH REPLICATION LOGIN PASSWORD '{PG_REPL_PW}';
             CREATE ROLE app LOGIN PASSWORD 'app-old';
             CREATE TABLE t (id int PRIMARY KEY);
             GRANT SELECT, INSERT ON t TO app;"
        ))
        .await
        .unwrap();

    // The standby: a base backup of the primary, streaming from it.
    let mut basebackup = command_as(Some("postgres"), &bin.join("pg_basebackup"));
    basebackup
        .args(["-h", PRIMARY_IP, "-p", &pg_port().to_string(), "-U", "repl"])
        .args(["-X", "stream", "-R", "--no-sync", "-D"])
        .arg(dir.join("p2"))
        .env("PGPASSFILE", dir.join("pgpass"));
    run_ok(basebackup, "pg_basebackup");
    let _p2 = start_postgres(&bin, &dir, "p2", REPLICA_IP);

    let f2 = probe_until(&io2, "standby streaming", |f| f.replicating == Some(true)).await;
    // A standby lists no member slots and no oldest WAL: those are a primary's facts.
    assert_eq!(
        (f2.member_slots.clone(), f2.retained_from.clone()),
        (None, None)
    );
    assert_eq!(
        io2.keep_member_slots(&["member_0".to_owned()])
            .await
            .unwrap_err()
            .kind,
        DbErrorKind::NotSupported
    );
    assert_eq!(f2.role, Some(ServerRole::Replica));
    assert_eq!(f2.read_only, Some(true));
    assert_eq!(f2.source_host.as_deref(), Some(PRIMARY_IP));
    assert_eq!(f2.source_port, Some(pg_port()));
    assert_eq!(
        f2.server_id, f1.server_id,
        "a standby shares the system identifier"
    );

    // A write moves the primary's position; the standby receives it.
    let app = pg_connect(PRIMARY_IP, "app", "app-old").await.unwrap();
    app.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let f1 = io1.probe().await.unwrap();
    let after_write = position(&f1, Engine::Postgresql);
    assert_eq!(after_write.compare(&start_pos), Relation::Ahead);
    probe_until(&io2, "standby received the write", |f| {
        f.position(Engine::Postgresql)
            .ok()
            .flatten()
            .is_some_and(|p| p.compare(&after_write) != Relation::Behind)
    })
    .await;
    // Idle and caught up, the standby is not behind, however old its last replayed
    // transaction gets (the age alone grows with every idle second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = io2.probe().await.unwrap();
    assert_eq!(idle.lag_seconds, Some(0), "{idle:?}");

    // A new password works at once; the old one no longer does.
    io1.set_password(
        &Account::any_host("app"),
        &Secret::new("app-new 'quoted'"),
        true,
    )
    .await
    .unwrap();
    pg_connect(PRIMARY_IP, "app", "app-new 'quoted'")
        .await
        .expect("the new password logs in");
    let old = pg_connect(PRIMARY_IP, "app", "app-old").await.unwrap_err();
    assert_eq!(
        old.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD)
    );
    io1.discard_old_password(&Account::any_host("app"))
        .await
        .unwrap();

    // Fenced: new transactions are read-only, existing sessions are ended.
    io1.fence().await.unwrap();
    let fenced = probe_until(&io1, "fence visible", |f| f.read_only == Some(true)).await;
    assert_eq!(fenced.role, Some(ServerRole::Primary));
    assert!(
        app.execute("INSERT INTO t VALUES (2)", &[]).await.is_err(),
        "the old session was ended"
    );
    // The operator's own sessions (its account: a probe in flight) are not ended: a probe cut
    // off by the fence would report the primary unreachable and abort the switchover.
    admin
        .simple_query("SELECT 1")
        .await
        .expect("the operator's account keeps its session through the fence");
    let app = pg_connect(PRIMARY_IP, "app", "app-new 'quoted'")
        .await
        .unwrap();
    let refused = app
        .execute("INSERT INTO t VALUES (2)", &[])
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
    );
    let old_primary_pos = position(&fenced, Engine::Postgresql);

    // A running primary cannot follow.
    assert_eq!(
        io1.follow(REPLICA_IP, pg_port(), &SourceTls::Plain)
            .await
            .unwrap_err()
            .kind,
        DbErrorKind::NotSupported
    );

    // Switchover: stop the old primary (a clean stop sends its last WAL to the standby), then
    // promote the standby.
    drop(app);
    drop(admin);
    p1.stop();
    assert!(!io1.probe().await.unwrap().reachable);
    io2.promote().await.unwrap();
    let f2 = io2.probe().await.unwrap();
    assert_eq!(f2.role, Some(ServerRole::Primary));
    assert_eq!(f2.read_only, Some(false));
    assert_eq!(f2.timeline, Some(2));
    assert!(f2.timeline_history.is_some(), "{f2:?}");
    let new_primary_pos = position(&f2, Engine::Postgresql);
    assert_eq!(
        old_primary_pos.compare(&new_primary_pos),
        Relation::Behind,
        "{old_primary_pos} vs {new_primary_pos}"
    );
    io2.promote().await.expect("promoting a primary is a no-op");
    let app2 = pg_connect(REPLICA_IP, "app", "app-new 'quoted'")
        .await
        .expect("the password change reached the standby");
    app2.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();

    // The old primary comes back as a standby and follows the new primary onto timeline 2.
    fs::write(dir.join("p1/standby.signal"), "").unwrap();
    chown_to("postgres", &dir.join("p1/standby.signal"));
    let _p1 = start_postgres(&bin, &dir, "p1", PRIMARY_IP);
    let waiting = probe_until(&io1, "old primary up as a standby", |f| f.reachable).await;
    assert_eq!(waiting.role, Some(ServerRole::Replica));
    io1.follow(REPLICA_IP, pg_port(), &SourceTls::Plain)
        .await
        .unwrap();
    let following = probe_until(&io1, "old primary follows the new one", |f| {
        f.replicating == Some(true) && f.timeline == Some(2)
    })
    .await;
    assert_eq!(following.source_host.as_deref(), Some(REPLICA_IP));
    let reader = pg_connect(PRIMARY_IP, "postgres", PG_ADMIN_PW)
        .await
        .unwrap();
    wait_for(
        "row 3 on the old primary",
        Duration::from_secs(20),
        || async {
            let n: i64 = reader
                .query_one("SELECT count(*) FROM t WHERE id = 3", &[])
                .await
                .map_err(|e| e.to_string())?
                .get(0);
            if n == 1 {
                Ok(())
            } else {
                Err("not yet".to_owned())
            }
        },
    )
    .await;
    eprintln!("PostgreSQL scenario took {:?}", started.elapsed());
}

// ------------------------------------------------------------------------------ MariaDB

const MARIADB_BIN: &str = "/usr/sbin/mariadbd";
const MARIADB_INSTALL: &str = "/usr/bin/mariadb-install-db";
const MY_ADMIN_PW: &str = "admin pw 'quoted' \\ slash";
const MY_REPL_PW: &str = "repl-pw-1";

fn start_mariadb(dir: &Path, name: &str, ip: &str, server_id: u32) -> Server {
    start_mariadb_on(dir, name, ip, mariadb_port(), server_id, &[])
}

/// [`start_mariadb`] on `port`, with `extra` options.
fn start_mariadb_on(
    dir: &Path,
    name: &str,
    ip: &str,
    port: u16,
    server_id: u32,
    extra: &[String],
) -> Server {
    let data = dir.join(name);
    let mut cmd = command_as(None, Path::new(MARIADB_BIN));
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!(
            "--socket={}",
            dir.join(format!("{name}.sock")).display()
        ))
        .arg(format!(
            "--pid-file={}",
            dir.join(format!("{name}.pid")).display()
        ))
        .arg(format!("--log-bin={}", data.join("binlog").display()))
        .arg(format!("--tmpdir={}", private_tmpdir(dir, name).display()))
        .arg(format!("--init-file={}", dir.join("init.sql").display()))
        .arg(format!("--bind-address={ip}"))
        .arg(format!("--port={port}"))
        .arg(format!("--server-id={server_id}"))
        .args([
            "--log-slave-updates",
            "--gtid-strict-mode=1",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
        ])
        .args(extra);
    if running_as_root() {
        cmd.arg("--user=root");
    }
    Server::start(
        &format!("mariadbd {name}"),
        cmd,
        dir.join(format!("{name}.log")),
        "TERM",
    )
}

/// `init.sql` in `dir`: the MariaDB/MySQL accounts, outside the binary log (as the operator's
/// init scripts create them), so replication does not replay them: `admin` with the operator's
/// privileges for `engine` (every driver call below runs with only those), and `writer` with
/// every privilege for the tests' own tables and rows.
fn write_accounts_sql(dir: &Path, engine: Engine) {
    let sql_string = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    let privileges = database_operator_engine::of(engine)
        .operator_privileges()
        .expect("the MySQL family limits the operator's account");
    fs::write(
        dir.join("init.sql"),
        format!(
            "SET sql_log_bin = 0;
             CREATE USER IF NOT EXISTS 'admin'@'%' IDENTIFIED BY {};
             GRANT {privileges} ON *.* TO 'admin'@'%';
             CREATE USER IF NOT EXISTS 'writer'@'%' IDENTIFIED BY {};
             GRANT ALL ON *.* TO 'writer'@'%' WITH GRANT OPTION;
             CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY {};
             GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
             CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'app-old';
             GRANT SELECT, INSERT ON app.* TO 'app'@'%';
             SET sql_log_bin = 1;
            ",
            sql_string(MY_ADMIN_PW),
            sql_string(MY_ADMIN_PW),
            sql_string(MY_REPL_PW)
        ),
    )
    .unwrap();
}

/// A temporary directory of the MariaDB server `name` alone (`dir/<name>-tmp`). A server
/// removes every `#sql*` file of its temporary directory when it starts: sharing `/tmp`, one
/// test's server starting deleted the temporary tables of another's `mariadb-install-db`
/// bootstrap ("Unknown table 'mysql.tmp_user_sys'"), which then failed.
fn private_tmpdir(dir: &Path, name: &str) -> PathBuf {
    let tmp = dir.join(format!("{name}-tmp"));
    fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// An empty MariaDB data directory `dir/<name>`.
/// mariadb-install-db runs a bootstrap server on the machine's default paths: two at once (tests
/// run in parallel) make one fail, so they take turns.
static MARIADB_INSTALLS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn install_mariadb(dir: &Path, name: &str) {
    let _turn = MARIADB_INSTALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut install = Command::new(MARIADB_INSTALL);
    install
        .args([
            "--no-defaults",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ])
        .arg(format!("--datadir={}", dir.join(name).display()))
        .arg(format!("--tmpdir={}", private_tmpdir(dir, name).display()));
    if running_as_root() {
        install.arg("--user=root");
    }
    run_ok(install, "mariadb-install-db");
}

fn my_io(ip: &str, user: &str, password: &str) -> MysqlIo {
    my_io_as(Engine::Mariadb, ip, user, password)
}

fn my_io_as(engine: Engine, ip: &str, user: &str, password: &str) -> MysqlIo {
    MysqlIo::new(MysqlConfig {
        engine,
        host: ip.to_owned(),
        port: mariadb_port(),
        user: user.to_owned(),
        password: Secret::new(password),
        timeouts: timeouts(),
        replication_user: "repl".to_owned(),
        replication_password: Secret::new(MY_REPL_PW),
        tls: None,
    })
}

async fn my_connect(
    ip: &str,
    user: &str,
    password: &str,
) -> mysql_async::Result<mysql_async::Conn> {
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(ip)
        .tcp_port(mariadb_port())
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false);
    mysql_async::Conn::new(opts).await
}

fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_probe_fence_promote_follow_and_password() {
    use mysql_async::prelude::Queryable;

    if !present(
        "MariaDB",
        &[Path::new(MARIADB_BIN), Path::new(MARIADB_INSTALL)],
    ) {
        return;
    }
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("dbio-mariadb-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    // Accounts exist on every server from the start, outside the binary log (as the operator's
    // init scripts create them), so replication does not replay them.
    write_accounts_sql(&dir, Engine::Mariadb);
    install_mariadb(&dir, "m1");
    // The replica starts from the same empty system tables.
    run_ok(
        {
            let mut c = Command::new("cp");
            c.arg("-a").arg(dir.join("m1")).arg(dir.join("m2"));
            c
        },
        "copy datadir",
    );
    let mut m1 = start_mariadb(&dir, "m1", PRIMARY_IP, 1);
    let _m2 = start_mariadb(&dir, "m2", REPLICA_IP, 2);
    let io1 = my_io(PRIMARY_IP, "admin", MY_ADMIN_PW);
    let io2 = my_io(REPLICA_IP, "admin", MY_ADMIN_PW);

    let nobody = my_io("127.10.20.9", "admin", MY_ADMIN_PW);
    assert_eq!(nobody.probe().await.unwrap(), MemberFacts::unreachable());

    let f1 = probe_until(&io1, "primary up", |f| f.reachable).await;
    probe_until(&io2, "replica up", |f| f.reachable).await;
    assert_eq!(f1.role, Some(ServerRole::Primary));
    assert_eq!(f1.read_only, Some(false));
    assert!(f1.version.as_deref().unwrap().contains("MariaDB"));
    assert_eq!(f1.server_id.as_deref(), Some("1"));
    let wrong = my_io(PRIMARY_IP, "admin", "not the password");
    assert_eq!(
        wrong.probe().await.unwrap_err().kind,
        DbErrorKind::AuthFailed
    );

    // The tests' own tables and rows: the operator's account may not write them.
    let mut admin = my_connect(PRIMARY_IP, "writer", MY_ADMIN_PW).await.unwrap();
    admin
        .query_drop("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t VALUES (1)")
        .await
        .unwrap();
    let f1 = io1.probe().await.unwrap();
    let before = position(&f1, Engine::Mariadb);

    // The replica follows the primary from the start of its binary log.
    io2.follow(PRIMARY_IP, mariadb_port(), &SourceTls::Plain)
        .await
        .unwrap();
    let f2 = probe_until(&io2, "replica caught up", |f| {
        f.replicating == Some(true)
            && f.position(Engine::Mariadb)
                .ok()
                .flatten()
                .map(|p| p.compare(&before))
                == Some(Relation::Equal)
    })
    .await;
    assert_eq!(f2.role, Some(ServerRole::Replica));
    assert_eq!(f2.read_only, Some(true));
    assert_eq!(f2.source_host.as_deref(), Some(PRIMARY_IP));
    assert_eq!(f2.source_port, Some(mariadb_port()));
    assert_eq!(f2.replication_error, None);
    io2.follow(PRIMARY_IP, mariadb_port(), &SourceTls::Plain)
        .await
        .expect("following the same source again is fine");

    // A write moves the primary's position; the replica applies it.
    let mut app = my_connect(PRIMARY_IP, "app", "app-old").await.unwrap();
    app.query_drop("INSERT INTO app.t VALUES (2)")
        .await
        .unwrap();
    let after_write = position(&io1.probe().await.unwrap(), Engine::Mariadb);
    assert_eq!(after_write.compare(&before), Relation::Ahead);
    probe_until(&io2, "replica received the write", |f| {
        f.position(Engine::Mariadb)
            .ok()
            .flatten()
            .map(|p| p.compare(&after_write))
            == Some(Relation::Equal)
    })
    .await;

    // The MySQL dialect against a MariaDB server is reported as not supported.
    let as_mysql = my_io_as(Engine::Mysql, PRIMARY_IP, "admin", MY_ADMIN_PW);
    let e = as_mysql.probe().await.unwrap_err();
    assert_eq!(e.kind, DbErrorKind::NotSupported, "{e}");

    // A failed password change keeps the password out of the error message.
    let e = io1
        .set_password(
            &Account::any_host("ghost"),
            &Secret::new("never-in-a-message"),
            true,
        )
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("never-in-a-message"), "{e}");
    assert!(e.to_string().contains("server error 1396"), "{e}");

    // A new password works at once; the old one no longer does.
    io1.set_password(
        &Account::any_host("app"),
        &Secret::new("app-new 'q' \\ x"),
        true,
    )
    .await
    .unwrap();
    let mut app = my_connect(PRIMARY_IP, "app", "app-new 'q' \\ x")
        .await
        .expect("the new password logs in");
    let old = my_connect(PRIMARY_IP, "app", "app-old").await.unwrap_err();
    assert_eq!(server_code(&old), Some(1045), "{old}");
    io1.discard_old_password(&Account::any_host("app"))
        .await
        .unwrap();

    // Fenced: the application's writes are refused.
    io1.fence().await.unwrap();
    let fenced = io1.probe().await.unwrap();
    assert_eq!(fenced.read_only, Some(true));
    let refused = app
        .query_drop("INSERT INTO app.t VALUES (3)")
        .await
        .unwrap_err();
    assert_eq!(server_code(&refused), Some(1290), "{refused}");
    let old_primary_pos = position(&fenced, Engine::Mariadb);

    // Promotion: the replica applies what it received, forgets its source, accepts writes.
    io2.promote().await.unwrap();
    let f2 = io2.probe().await.unwrap();
    assert_eq!(f2.role, Some(ServerRole::Primary));
    assert_eq!(f2.read_only, Some(false));
    assert_eq!(f2.source_host, None);
    assert_eq!(
        position(&f2, Engine::Mariadb).compare(&old_primary_pos),
        Relation::Equal
    );
    io2.promote().await.expect("promoting a primary is a no-op");
    let mut app2 = my_connect(REPLICA_IP, "app", "app-new 'q' \\ x")
        .await
        .expect("the password change was replicated");
    app2.query_drop("INSERT INTO app.t VALUES (3)")
        .await
        .unwrap();
    let new_primary_pos = position(&io2.probe().await.unwrap(), Engine::Mariadb);
    assert_eq!(new_primary_pos.compare(&old_primary_pos), Relation::Ahead);

    // The old primary follows the new one, resuming after its own last transaction.
    io1.follow(REPLICA_IP, mariadb_port(), &SourceTls::Plain)
        .await
        .unwrap();
    let following = probe_until(&io1, "old primary caught up", |f| {
        f.replicating == Some(true)
            && f.position(Engine::Mariadb)
                .ok()
                .flatten()
                .map(|p| p.compare(&new_primary_pos))
                == Some(Relation::Equal)
    })
    .await;
    assert_eq!(following.role, Some(ServerRole::Replica));
    assert_eq!(following.source_host.as_deref(), Some(REPLICA_IP));
    // The position the probe compares is what was received; applying it follows.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Vec<i32> = admin
            .query("SELECT id FROM app.t ORDER BY id")
            .await
            .unwrap();
        if rows == [1, 2, 3] {
            break;
        }
        assert!(Instant::now() < deadline, "row 3 not applied: {rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Quarantined: read-only, and no longer replicating (its source stays recorded).
    io1.quarantine().await.unwrap();
    let quarantined = probe_until(&io1, "replication stopped by the quarantine", |f| {
        f.replicating == Some(false)
    })
    .await;
    assert_eq!(quarantined.read_only, Some(true));

    drop(admin);
    m1.stop();
    eprintln!("MariaDB scenario took {:?}", started.elapsed());
}

// ------------------------------------------------------------------------------ MySQL

/// The MySQL port on both addresses: 13307 unless taken.
fn mysql_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| free_port(13307))
}

/// The root filesystem holding MySQL 9.7: `MYSQL_IMAGE_ROOT`, else the newest `mysql-sid-*`
/// root in the image cache (`~/.cache/database-operator/images`) that finished building.
fn mysql_root() -> Option<PathBuf> {
    if let Some(root) = std::env::var_os("MYSQL_IMAGE_ROOT") {
        return Some(PathBuf::from(root));
    }
    let cache = PathBuf::from(std::env::var_os("HOME")?).join(".cache/database-operator/images");
    let mut built: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("mysql-sid-"))
        .filter_map(|e| {
            let done = fs::metadata(e.path().join("image.json"))
                .ok()?
                .modified()
                .ok()?;
            Some((done, e.path().join("rootfs")))
        })
        .collect();
    built.sort();
    built.pop().map(|(_, root)| root)
}

/// `mysqld <args>` of the root, chrooted, with `dir` on the root's `/tmp` in a private mount
/// namespace, killed if this process dies. Paths in `args` are as the server sees them.
fn mysqld_in(root: &Path, dir: &Path, args: &[String]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--pdeathsig", "KILL", "--"])
        .args(["unshare", "--mount", "--propagation", "private", "--"])
        .args([
            "/bin/sh",
            "-c",
            r#"mount --bind "$1" "$2/tmp" && root=$2 && shift 2 && exec chroot "$root" /usr/sbin/mysqld "$@""#,
            "mysqld-in-root",
        ])
        .arg(dir)
        .arg(root)
        .args(args);
    cmd
}

/// The options both MySQL members run with (as `my.cnf` renders them, smaller).
fn mysql_args(name: &str) -> Vec<String> {
    [
        "--no-defaults".to_owned(),
        format!("--datadir=/tmp/{name}"),
        "--user=root".to_owned(),
        "--innodb-buffer-pool-size=32M".to_owned(),
        "--innodb-redo-log-capacity=16M".to_owned(),
    ]
    .into()
}

fn start_mysql(root: &Path, dir: &Path, name: &str, ip: &str, server_id: u32) -> Server {
    start_mysql_on(root, dir, name, ip, mysql_port(), server_id, &[])
}

/// [`start_mysql`] on `port`, with `extra` options.
fn start_mysql_on(
    root: &Path,
    dir: &Path,
    name: &str,
    ip: &str,
    port: u16,
    server_id: u32,
    extra: &[String],
) -> Server {
    let mut args = mysql_args(name);
    args.extend([
        format!("--socket=/tmp/{name}.sock"),
        format!("--pid-file=/tmp/{name}.pid"),
        "--init-file=/tmp/init.sql".to_owned(),
        format!("--bind-address={ip}"),
        format!("--port={port}"),
        format!("--server-id={server_id}"),
        "--log-bin=binlog".to_owned(),
        "--gtid-mode=ON".to_owned(),
        "--enforce-gtid-consistency=ON".to_owned(),
        "--log-replica-updates=ON".to_owned(),
        "--skip-name-resolve".to_owned(),
        "--mysqlx=OFF".to_owned(),
    ]);
    args.extend_from_slice(extra);
    // No --log-error: the error log goes to stderr, the server's log file here.
    Server::start(
        &format!("mysqld {name}"),
        mysqld_in(root, dir, &args),
        dir.join(format!("{name}.log")),
        "TERM",
    )
}

/// An empty MySQL data directory `dir/<name>` (`mysqld --initialize-insecure` in the root).
fn initialize_mysql(root: &Path, dir: &Path, name: &str) {
    let mut init = mysql_args(name);
    init.extend([
        "--initialize-insecure".to_owned(),
        format!("--log-error=/tmp/{name}-initialize.err"),
    ]);
    let out = mysqld_in(root, dir, &init).output().unwrap();
    assert!(
        out.status.success(),
        "mysqld --initialize-insecure: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        fs::read_to_string(dir.join(format!("{name}-initialize.err"))).unwrap_or_default()
    );
}

fn mysql_io(ip: &str, user: &str, password: &str) -> MysqlIo {
    mysql_io_as(Engine::Mysql, ip, user, password)
}

fn mysql_io_as(engine: Engine, ip: &str, user: &str, password: &str) -> MysqlIo {
    MysqlIo::new(MysqlConfig {
        engine,
        host: ip.to_owned(),
        port: mysql_port(),
        user: user.to_owned(),
        password: Secret::new(password),
        timeouts: timeouts(),
        replication_user: "repl".to_owned(),
        replication_password: Secret::new(MY_REPL_PW),
        tls: None,
    })
}

/// A MySQL client session (TLS preferred by the server is not used: caching_sha2_password
/// fetches the server's RSA key over plain TCP, loopback only).
async fn mysql_connect(
    ip: &str,
    user: &str,
    password: &str,
) -> mysql_async::Result<mysql_async::Conn> {
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(ip)
        .tcp_port(mysql_port())
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false);
    mysql_async::Conn::new(opts).await
}

/// Whether `user`/`password` logs in on `ip` (false on 1045 access denied; panics on anything
/// else).
async fn mysql_logs_in(ip: &str, user: &str, password: &str) -> bool {
    match mysql_connect(ip, user, password).await {
        Ok(conn) => {
            let _ = conn.disconnect().await;
            true
        }
        Err(e) if server_code(&e) == Some(1045) => false,
        Err(e) => panic!("logging in as {user} on {ip}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_probe_fence_promote_follow_and_dual_passwords() {
    use mysql_async::prelude::Queryable;

    let Some(root) = mysql_root().filter(|r| r.join("usr/sbin/mysqld").exists()) else {
        present(
            "MySQL (the mysql-sid image root: cargo xtask cluster images)",
            &[Path::new("/nonexistent/mysql-image-root/usr/sbin/mysqld")],
        );
        return;
    };
    if !present(
        "MySQL",
        &[Path::new("/usr/bin/unshare"), Path::new("/usr/sbin/chroot")],
    ) {
        return;
    }
    assert!(running_as_root(), "chroot and mount need root");
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("dbio-mysql-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    // The accounts (init.sql), on both servers.
    write_accounts_sql(&dir, Engine::Mysql);
    initialize_mysql(&root, &dir, "m1");
    // The replica starts from a copy without the server UUID (a new one is generated: two
    // members with one UUID cannot replicate).
    run_ok(
        {
            let mut c = Command::new("cp");
            c.arg("-a").arg(dir.join("m1")).arg(dir.join("m2"));
            c
        },
        "copy datadir",
    );
    fs::remove_file(dir.join("m2/auto.cnf")).unwrap();
    let mut m1 = start_mysql(&root, &dir, "m1", PRIMARY_IP, 1);
    let _m2 = start_mysql(&root, &dir, "m2", REPLICA_IP, 2);
    let io1 = mysql_io(PRIMARY_IP, "admin", MY_ADMIN_PW);
    let io2 = mysql_io(REPLICA_IP, "admin", MY_ADMIN_PW);

    let nobody = mysql_io("127.10.20.9", "admin", MY_ADMIN_PW);
    assert_eq!(nobody.probe().await.unwrap(), MemberFacts::unreachable());

    let f1 = probe_until(&io1, "primary up", |f| f.reachable).await;
    let f2 = probe_until(&io2, "replica up", |f| f.reachable).await;
    assert_eq!(f1.role, Some(ServerRole::Primary));
    assert_eq!(f1.read_only, Some(false));
    let version = f1.version.clone().unwrap();
    assert!(version.starts_with("9.7."), "{version}");
    assert_ne!(f1.server_id, f2.server_id, "the server UUIDs differ");
    let wrong = mysql_io(PRIMARY_IP, "admin", "not the password");
    assert_eq!(
        wrong.probe().await.unwrap_err().kind,
        DbErrorKind::AuthFailed
    );

    // The tests' own tables and rows: the operator's account may not write them.
    let mut admin = mysql_connect(PRIMARY_IP, "writer", MY_ADMIN_PW)
        .await
        .unwrap();
    admin
        .query_drop("CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t VALUES (1)")
        .await
        .unwrap();
    // The backup's dump, as a backup Job runs it: the engine's own arguments, as the operator's
    // account with only its privileges, mysqldump of the image.
    let dump_args = database_operator_engine::of(Engine::Mysql).dump_args(
        database_operator_engine::tools::ToolTarget {
            host: PRIMARY_IP,
            port: mysql_port(),
            user: "admin",
        },
        "/dev/null",
    );
    let dumped = Command::new("chroot")
        .arg(&root)
        .arg("mysqldump")
        .args(
            dump_args
                .args
                .iter()
                .filter(|a| !a.starts_with("--defaults-extra-file")),
        )
        .env("MYSQL_PWD", MY_ADMIN_PW)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dumped.stdout);
    assert!(
        dumped.status.success() && text.contains("INSERT INTO `t` VALUES (1)"),
        "mysqldump as the operator's account: {} {}",
        dumped.status,
        String::from_utf8_lossy(&dumped.stderr)
    );
    // The application's accounts as a backup reads them (as the operator's account, hashes in
    // hex), replayed after they were dropped: the same passwords, grants and default role.
    admin
        .query_drop(
            "CREATE ROLE 'reader'@'%'; GRANT SELECT ON app.* TO 'reader'@'%'; \
             CREATE USER 'shop'@'%' IDENTIFIED BY 'shop-pw'; GRANT INSERT ON app.* TO 'shop'@'%'; \
             GRANT 'reader'@'%' TO 'shop'@'%'; SET DEFAULT ROLE 'reader'@'%' TO 'shop'@'%'",
        )
        .await
        .unwrap();
    let grants_before: Vec<String> = admin.query("SHOW GRANTS FOR 'shop'@'%'").await.unwrap();
    let managed: Vec<String> = ["root", "admin", "repl", "writer"]
        .map(str::to_owned)
        .to_vec();
    let (section, left_out) = io1.application_accounts(&managed).await.unwrap();
    assert!(left_out.is_empty(), "{left_out:?}");
    assert!(
        section.contains(
            "CREATE USER IF NOT EXISTS `shop`@`%` IDENTIFIED WITH 'caching_sha2_password' AS 0x"
        ) && section.contains("SET DEFAULT ROLE `reader`@`%` TO `shop`@`%`;"),
        "{section}"
    );
    assert!(
        !section.contains("`admin`@")
            && !section.contains("`root`@")
            && !section.contains("mysql.sys"),
        "{section}"
    );
    admin
        .query_drop("DROP USER 'shop'@'%', 'reader'@'%', 'app'@'%'")
        .await
        .unwrap();
    let left: Option<i64> = admin
        .query_first("SELECT COUNT(*) FROM mysql.user WHERE user IN ('shop', 'reader', 'app')")
        .await
        .unwrap();
    assert_eq!(left, Some(0));
    for statement in section
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("--"))
    {
        admin.query_drop(statement).await.unwrap();
    }
    let grants_after: Vec<String> = admin.query("SHOW GRANTS FOR 'shop'@'%'").await.unwrap();
    assert_eq!(grants_after, grants_before);
    assert!(mysql_logs_in(PRIMARY_IP, "shop", "shop-pw").await);
    assert!(mysql_logs_in(PRIMARY_IP, "app", "app-old").await);
    let before = position(&io1.probe().await.unwrap(), Engine::Mysql);

    // The replica follows the primary by GTID auto-positioning, super_read_only.
    io2.follow(PRIMARY_IP, mysql_port(), &SourceTls::Plain)
        .await
        .unwrap();
    let f2 = probe_until(&io2, "replica caught up", |f| {
        f.replicating == Some(true)
            && f.position(Engine::Mysql)
                .ok()
                .flatten()
                .map(|p| p.compare(&before))
                == Some(Relation::Equal)
    })
    .await;
    assert_eq!(f2.role, Some(ServerRole::Replica));
    assert_eq!(f2.read_only, Some(true));
    assert_eq!(f2.source_host.as_deref(), Some(PRIMARY_IP));
    assert_eq!(f2.source_port, Some(mysql_port()));
    assert_eq!(f2.replication_error, None);
    let mut on_replica = mysql_connect(REPLICA_IP, "writer", MY_ADMIN_PW)
        .await
        .unwrap();
    let super_read_only: Option<i64> = on_replica
        .query_first("SELECT @@GLOBAL.super_read_only")
        .await
        .unwrap();
    assert_eq!(super_read_only, Some(1));
    let refused = on_replica
        .query_drop("INSERT INTO app.t VALUES (100)")
        .await
        .unwrap_err();
    assert_eq!(server_code(&refused), Some(1290), "{refused}");
    io2.follow(PRIMARY_IP, mysql_port(), &SourceTls::Plain)
        .await
        .expect("following the same source again is fine");

    // A write moves the primary's position; the replica applies it.
    let mut app = mysql_connect(PRIMARY_IP, "app", "app-old").await.unwrap();
    app.query_drop("INSERT INTO app.t VALUES (2)")
        .await
        .unwrap();
    let after_write = position(&io1.probe().await.unwrap(), Engine::Mysql);
    assert_eq!(after_write.compare(&before), Relation::Ahead);
    probe_until(&io2, "replica received the write", |f| {
        f.position(Engine::Mysql)
            .ok()
            .flatten()
            .map(|p| p.compare(&after_write))
            == Some(Relation::Equal)
    })
    .await;

    // The MariaDB dialect against a MySQL server is reported as not supported.
    let as_mariadb = mysql_io_as(Engine::Mariadb, PRIMARY_IP, "admin", MY_ADMIN_PW);
    let e = as_mariadb.probe().await.unwrap_err();
    assert_eq!(e.kind, DbErrorKind::NotSupported, "{e}");

    // A failed password change keeps the password out of the error message.
    let e = io1
        .set_password(
            &Account::any_host("ghost"),
            &Secret::new("never-in-a-message"),
            true,
        )
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("never-in-a-message"), "{e}");
    assert!(e.to_string().contains("server error 1396"), "{e}");

    // Dual passwords: with the old one retained both log in, on the primary and (replicated)
    // on the replica; a session opened before keeps working.
    let new = "app-new 'q' \\ x";
    io1.set_password(&Account::any_host("app"), &Secret::new(new), true)
        .await
        .unwrap();
    for ip in [PRIMARY_IP, REPLICA_IP] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !mysql_logs_in(ip, "app", new).await {
            assert!(Instant::now() < deadline, "the new password on {ip}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            mysql_logs_in(ip, "app", "app-old").await,
            "the retained old password on {ip}"
        );
    }
    app.query_drop("INSERT INTO app.t VALUES (3)")
        .await
        .expect("a session opened before the change keeps working");
    // Setting the same password again with RETAIN keeps it working (a repeated step is
    // harmless) but makes the new one the retained one: the old one is gone.
    io1.set_password(&Account::any_host("app"), &Secret::new(new), true)
        .await
        .unwrap();
    assert!(mysql_logs_in(PRIMARY_IP, "app", new).await);
    // Discarded: only the new password works, on both members.
    io1.discard_old_password(&Account::any_host("app"))
        .await
        .unwrap();
    for ip in [PRIMARY_IP, REPLICA_IP] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while mysql_logs_in(ip, "app", "app-old").await {
            assert!(
                Instant::now() < deadline,
                "the old password still works on {ip}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            mysql_logs_in(ip, "app", new).await,
            "the new password on {ip}"
        );
    }
    io1.discard_old_password(&Account::any_host("app"))
        .await
        .expect("discarding twice is harmless");
    // Without RETAIN the old password stops at once.
    io1.set_password(&Account::any_host("app"), &Secret::new("app-third"), false)
        .await
        .unwrap();
    assert!(mysql_logs_in(PRIMARY_IP, "app", "app-third").await);
    assert!(!mysql_logs_in(PRIMARY_IP, "app", new).await);

    // Fenced: super_read_only refuses every write, that of an account with every privilege too.
    io1.fence().await.unwrap();
    let fenced = io1.probe().await.unwrap();
    assert_eq!(fenced.read_only, Some(true));
    let refused = app
        .query_drop("INSERT INTO app.t VALUES (4)")
        .await
        .unwrap_err();
    assert_eq!(server_code(&refused), Some(1290), "{refused}");
    let refused = admin
        .query_drop("INSERT INTO app.t VALUES (4)")
        .await
        .unwrap_err();
    assert_eq!(server_code(&refused), Some(1290), "{refused}");
    let old_primary_pos = position(&fenced, Engine::Mysql);

    // Promotion: the replica applies what it received, forgets its source, accepts writes.
    io2.promote().await.unwrap();
    let f2 = io2.probe().await.unwrap();
    assert_eq!(f2.role, Some(ServerRole::Primary));
    assert_eq!(f2.read_only, Some(false));
    assert_eq!(f2.source_host, None);
    assert_eq!(
        position(&f2, Engine::Mysql).compare(&old_primary_pos),
        Relation::Equal
    );
    io2.promote().await.expect("promoting a primary is a no-op");
    let mut app2 = mysql_connect(REPLICA_IP, "app", "app-third")
        .await
        .expect("the password change was replicated");
    app2.query_drop("INSERT INTO app.t VALUES (4)")
        .await
        .unwrap();
    let new_primary_pos = position(&io2.probe().await.unwrap(), Engine::Mysql);
    assert_eq!(new_primary_pos.compare(&old_primary_pos), Relation::Ahead);

    // The old primary follows the new one, from its own GTID set.
    io1.follow(REPLICA_IP, mysql_port(), &SourceTls::Plain)
        .await
        .unwrap();
    let following = probe_until(&io1, "old primary caught up", |f| {
        f.replicating == Some(true)
            && f.position(Engine::Mysql)
                .ok()
                .flatten()
                .map(|p| p.compare(&new_primary_pos))
                == Some(Relation::Equal)
    })
    .await;
    assert_eq!(following.role, Some(ServerRole::Replica));
    assert_eq!(following.source_host.as_deref(), Some(REPLICA_IP));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Vec<i32> = admin
            .query("SELECT id FROM app.t ORDER BY id")
            .await
            .unwrap();
        if rows == [1, 2, 3, 4] {
            break;
        }
        assert!(Instant::now() < deadline, "row 4 not applied: {rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Quarantined: read-only, and no longer replicating (its source stays recorded).
    io1.quarantine().await.unwrap();
    let quarantined = probe_until(&io1, "replication stopped by the quarantine", |f| {
        f.replicating == Some(false)
    })
    .await;
    assert_eq!(quarantined.read_only, Some(true));

    drop((admin, app, app2, on_replica));
    m1.stop();
    eprintln!("MySQL scenario ({version}) took {:?}", started.elapsed());
}

// ------------------------------------------------------------------------------ TLS

/// The address of the TLS tests' servers (each test on a port of its own).
const TLS_IP: &str = "127.10.20.5";

fn tls_port() -> u16 {
    TcpListener::bind((TLS_IP, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A test CA.
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    fn trust(&self) -> ServerTrust {
        ServerTrust::from_pem(self.pem.as_bytes()).unwrap()
    }

    /// `dir/ca.crt`, and a server certificate for `names` with its key: `dir/server.crt`,
    /// `dir/server.key` (mode 0600).
    fn write_server_files(&self, dir: &Path, names: &[&str]) {
        self.write_server_files_until(dir, names, 2099);
    }

    /// [`TestCa::write_server_files`] with a certificate that expires at the start of `year`,
    /// so two of them tell apart by their expiry.
    fn write_server_files_until(&self, dir: &Path, names: &[&str], year: i32) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        fs::write(dir.join("ca.crt"), &self.pem).unwrap();
        fs::write(dir.join("server.crt"), cert.pem()).unwrap();
        fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        fs::set_permissions(
            dir.join("server.key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_over_tls_checks_the_ca_not_the_name() {
    let bin = pg_bin();
    if !present("PostgreSQL", &[&bin.join("initdb"), &bin.join("postgres")]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("dbio-pg-tls-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let (ca, other) = (TestCa::new("members CA"), TestCa::new("another CA"));
    // The certificate names a DNS name only, not the address dialled.
    ca.write_server_files(&dir, &["member-0.example"]);
    fs::write(dir.join("pwfile"), format!("{PG_ADMIN_PW}\n")).unwrap();
    chown_to("postgres", &dir);
    let mut initdb = command_as(Some("postgres"), &bin.join("initdb"));
    initdb
        .args(["-U", "postgres", "--auth=scram-sha-256", "--no-sync", "-D"])
        .arg(dir.join("p1"))
        .arg(format!("--pwfile={}", dir.join("pwfile").display()));
    run_ok(initdb, "initdb");
    // TLS only: pg_hba.conf rejects plain connections.
    fs::write(
        dir.join("p1/pg_hba.conf"),
        "hostnossl all all all reject\nhostssl all all 127.0.0.0/8 scram-sha-256\n",
    )
    .unwrap();
    let port = tls_port();
    let ssl = [
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", dir.join("server.crt").display()),
        format!("ssl_key_file={}", dir.join("server.key").display()),
    ];
    let _server = start_postgres_on(&bin, &dir, "p1", TLS_IP, port, &ssl);
    let io = |tls: Option<ServerTrust>| {
        PostgresIo::new(PostgresConfig {
            engine: Engine::Postgresql,
            host: TLS_IP.to_owned(),
            port,
            user: "postgres".to_owned(),
            password: Secret::new(PG_ADMIN_PW),
            dbname: "postgres".to_owned(),
            timeouts: timeouts(),
            replication_user: "repl".to_owned(),
            replication_passfile: None,
            application_name: None,
            tls,
        })
    };

    // verify-ca: the driver connects over TLS (plain TCP would be rejected).
    let facts = probe_until(&io(Some(ca.trust())), "server up, over TLS", |f| {
        f.reachable
    })
    .await;
    assert_eq!(facts.role, Some(ServerRole::Primary));
    let e = io(None).probe().await.unwrap_err();
    assert!(e.message.contains("no encryption"), "{e}");
    // The session is encrypted, as the server sees it.
    let (client, connection) = tokio_postgres::Config::new()
        .host(TLS_IP)
        .port(port)
        .user("postgres")
        .password(PG_ADMIN_PW)
        .dbname("postgres")
        .ssl_mode(tokio_postgres::config::SslMode::Require)
        .connect(ca.trust())
        .await
        .unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));

    // Another CA: a verification failure, not an unreachable member.
    let e = io(Some(other.trust())).probe().await.unwrap_err();
    assert_eq!(e.kind, DbErrorKind::Other, "{e}");
    assert!(e.message.contains("TLS verification failure"), "{e}");
    // verify-full: the certificate does not name the address dialled.
    let full = ca.trust().with_verify(Verify::Full).unwrap();
    let e = io(Some(full)).probe().await.unwrap_err();
    assert_eq!(e.kind, DbErrorKind::Other, "{e}");
    assert!(e.message.contains("not valid for name"), "{e}");

    reloads_a_renewed_certificate(&io(Some(ca.trust())), &ca, &dir, &["member-0.example"]).await;
}

/// The facts name the certificate the server serves; new files are served only after
/// `reload_tls`, without a restart.
async fn reloads_a_renewed_certificate<D: DatabaseIo>(
    io: &D,
    ca: &TestCa,
    dir: &Path,
    names: &[&str],
) {
    let served = io.probe().await.unwrap().tls_not_after;
    assert_eq!(
        served,
        Some(4_070_908_800),
        "2099-01-01, the first certificate"
    );
    ca.write_server_files_until(dir, names, 2098);
    assert_eq!(
        io.probe().await.unwrap().tls_not_after,
        served,
        "new files, not reloaded: the server still serves the first certificate"
    );
    io.reload_tls().await.unwrap();
    assert_eq!(
        io.probe().await.unwrap().tls_not_after,
        Some(4_039_372_800),
        "after the reload: 2098-01-01, the renewed certificate"
    );
}

/// Drives a MySQL or MariaDB server that requires TLS, on `TLS_IP:port`, whose certificate
/// `ca` signed: the driver connects with `ca`'s trust, the session is encrypted, plain TCP and
/// another CA's trust fail.
async fn mysql_family_over_tls(engine: Engine, port: u16, ca: &TestCa, other: &TestCa, dir: &Path) {
    use mysql_async::prelude::Queryable;

    let io = |tls: Option<ServerTrust>| {
        MysqlIo::new(MysqlConfig {
            engine,
            host: TLS_IP.to_owned(),
            port,
            user: "admin".to_owned(),
            password: Secret::new(MY_ADMIN_PW),
            timeouts: timeouts(),
            replication_user: "repl".to_owned(),
            replication_password: Secret::new(MY_REPL_PW),
            tls,
        })
    };
    let facts = probe_until(&io(Some(ca.trust())), "server up, over TLS", |f| {
        f.reachable
    })
    .await;
    assert_eq!(facts.role, Some(ServerRole::Primary));
    // Plain TCP is refused (MySQL: "insecure transport are prohibited"; MariaDB: access
    // denied), so the driver above did use TLS.
    let e = io(None).probe().await.unwrap_err();
    assert!(
        e.message.contains("insecure transport") || e.kind == DbErrorKind::AuthFailed,
        "{e}"
    );

    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(TLS_IP)
        .tcp_port(port)
        .user(Some("admin"))
        .pass(Some(MY_ADMIN_PW))
        .prefer_socket(false)
        .ssl_opts(mysql_ssl_opts(&ca.trust()));
    let mut conn = mysql_async::Conn::new(opts).await.unwrap();
    let cipher: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    let cipher = cipher.map(|(_, c)| c).unwrap_or_default();
    assert!(!cipher.is_empty(), "the session is not encrypted");
    let _ = conn.disconnect().await;

    let e = io(Some(other.trust())).probe().await.unwrap_err();
    assert_eq!(e.kind, DbErrorKind::Other, "{e}");
    assert!(e.message.contains("TLS verification failure"), "{e}");

    reloads_a_renewed_certificate(
        &io(Some(ca.trust())),
        ca,
        dir,
        &["member-0.example", TLS_IP],
    )
    .await;
}

/// The server options for TLS only, with the files [`TestCa::write_server_files`] wrote into
/// `dir` (`dir` as the server sees it).
fn mysql_family_tls_args(dir: &Path) -> Vec<String> {
    vec![
        format!("--ssl-ca={}", dir.join("ca.crt").display()),
        format!("--ssl-cert={}", dir.join("server.crt").display()),
        format!("--ssl-key={}", dir.join("server.key").display()),
        "--require-secure-transport=ON".to_owned(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls_checks_the_ca() {
    if !present(
        "MariaDB",
        &[Path::new(MARIADB_BIN), Path::new(MARIADB_INSTALL)],
    ) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("dbio-mariadb-tls-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let (ca, other) = (TestCa::new("members CA"), TestCa::new("another CA"));
    // mysql_async checks the name despite verify-ca (see tls::mysql_ssl_opts): the
    // certificate names the address dialled too.
    ca.write_server_files(&dir, &["member-0.example", TLS_IP]);
    write_accounts_sql(&dir, Engine::Mariadb);
    install_mariadb(&dir, "m1");
    let port = tls_port();
    let _server = start_mariadb_on(&dir, "m1", TLS_IP, port, 1, &mysql_family_tls_args(&dir));
    mysql_family_over_tls(Engine::Mariadb, port, &ca, &other, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_over_tls_checks_the_ca() {
    let Some(root) = mysql_root().filter(|r| r.join("usr/sbin/mysqld").exists()) else {
        present(
            "MySQL (the mysql-sid image root: cargo xtask cluster images)",
            &[Path::new("/nonexistent/mysql-image-root/usr/sbin/mysqld")],
        );
        return;
    };
    if !present(
        "MySQL",
        &[Path::new("/usr/bin/unshare"), Path::new("/usr/sbin/chroot")],
    ) {
        return;
    }
    assert!(running_as_root(), "chroot and mount need root");
    let tmp = tempfile::Builder::new()
        .prefix("dbio-mysql-tls-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let (ca, other) = (TestCa::new("members CA"), TestCa::new("another CA"));
    ca.write_server_files(&dir, &["member-0.example", TLS_IP]);
    write_accounts_sql(&dir, Engine::Mysql);
    initialize_mysql(&root, &dir, "m1");
    let port = tls_port();
    let args = mysql_family_tls_args(Path::new("/tmp"));
    let _server = start_mysql_on(&root, &dir, "m1", TLS_IP, port, 1, &args);
    mysql_family_over_tls(Engine::Mysql, port, &ca, &other, &dir).await;
}

#[test]
fn a_missing_server_binary_skips_with_a_reason_or_fails_when_servers_are_required() {
    let missing = [Path::new("/nonexistent/postgres")];
    if std::env::var_os("REQUIRE_REAL_SERVERS").is_some() {
        assert!(std::panic::catch_unwind(|| present("test", &missing)).is_err());
    } else {
        assert!(!present("test", &missing));
    }
}
