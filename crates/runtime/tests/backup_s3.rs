//! `database-operator backup` against real servers on loopback: a PostgreSQL 15 on
//! 127.10.30.1, a MariaDB 10.11 on 127.10.30.2, and the local S3 server (versitygw, as
//! `cargo xtask cluster up` builds and caches it) on 127.0.0.1. PostgreSQL: four backups,
//! retention 2, a failing dump that leaves nothing, `backup restore --backup latest` giving back
//! the data it was taken from, a restore of another engine and of a corrupted dump refused
//! with nothing applied, and a dump altered in the bucket to run a shell command through psql
//! (its manifest rewritten to match) refused before anything runs. MariaDB: a backup and
//! `backup restore` of it by id, round trip; the same alteration with the client's `system`.
//! PostgreSQL with continuous archiving (`backup wal-push` as its archive command): a switched
//! segment in the bucket, whole and compressed, as the probe's archiver columns report; the same
//! content pushed again accepted, other content refused; a refused endpoint failing the archiver
//! without stopping writes, and the waiting segment archived once the endpoint is back; a base
//! backup taken without WAL (`pg_basebackup -X none`) recovered with `backup wal-fetch` as its
//! restore command to the last archived write.
//!
//! Skips, saying why, when the binaries are absent (no PostgreSQL 15 or MariaDB, no cached S3
//! server, not root, no `postgres`/`mysql` OS user).

use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use database_operator_core::backup::Layout;
use database_operator_runtime::backup::run;
use database_operator_runtime::backup::store::{
    BackupStore as _, S3Config, S3Credentials, S3Store,
};
use database_operator_runtime::database::statements::Secret;
use sha2::{Digest as _, Sha256};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const PG_HOST: &str = "127.10.30.1";
const PASSWORD: &str = "backup-test-pw";
const ACCESS_KEY: &str = "LOCALTESTKEY";
const SECRET_KEY: &str = "local-test-secret-key-0123456789";
const BUCKET: &str = "backups";
/// The backup signing key the backups are signed and checked with (as the operator Secret's
/// `backup-signing-key`).
const SIGNING_KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// The versitygw binary `cargo xtask cluster up` caches.
fn cached_s3_server() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = base.join("database-operator").join("control-plane");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("s3-versitygw-"))
        .map(|e| e.path().join("bin").join("versitygw"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

fn missing_prerequisite() -> Result<PathBuf, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("needs root (runs PostgreSQL as the postgres user)".into());
    }
    for tool in ["initdb", "postgres", "psql", "pg_dumpall"] {
        let path = Path::new(PG_BIN).join(tool);
        if !path.exists() {
            return Err(format!("{} is not installed", path.display()));
        }
    }
    if !Path::new("/usr/bin/setpriv").exists() {
        return Err("/usr/bin/setpriv is not installed".into());
    }
    if !Command::new("id")
        .arg("postgres")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Err("no OS user postgres".into());
    }
    cached_s3_server().ok_or_else(|| {
        "the local S3 server is not cached (cargo xtask cluster up builds it)".to_owned()
    })
}

fn free_port(host: &str) -> u16 {
    TcpListener::bind((host, 0))
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Stops the servers when the test ends, passed or not.
struct Servers {
    children: Vec<Child>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let stopped = eventually(Duration::from_secs(20), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !stopped {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn as_postgres(program: &str) -> Command {
    let mut cmd = Command::new("/usr/bin/setpriv");
    cmd.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
        program,
    ]);
    cmd
}

fn psql(port: u16, db: &str, sql: &str) -> String {
    let out = Command::new(Path::new(PG_BIN).join("psql"))
        .args([
            &format!("--host={PG_HOST}"),
            &format!("--port={port}"),
            "--username=postgres",
            &format!("--dbname={db}"),
            "--no-psqlrc",
            "--tuples-only",
            "--no-align",
            "--set=ON_ERROR_STOP=1",
            "--command",
            sql,
        ])
        .env("PGPASSWORD", PASSWORD)
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// psql as postgres on the server at `port`, reading SQL from its stdin (piped, as its output),
/// stopping at the first error.
fn psql_reading_stdin(port: u16) -> Child {
    Command::new(Path::new(PG_BIN).join("psql"))
        .args([
            &format!("--host={PG_HOST}"),
            &format!("--port={port}"),
            "--username=postgres",
            "--dbname=postgres",
            "--no-psqlrc",
            "--quiet",
            "--set=ON_ERROR_STOP=1",
        ])
        .env("PGPASSWORD", PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql")
}

fn checksum(port: u16) -> String {
    psql(
        port,
        "shop",
        "SELECT count(*) || ':' || md5(string_agg(t::text, ',' ORDER BY id)) FROM items t",
    )
}

fn backup(s3_port: u16, pg_port: u16, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .args(["backup"])
        .args(args)
        .args([
            "--namespace=shop",
            "--cluster=orders",
            &format!("--bucket={BUCKET}"),
            &format!("--endpoint=http://127.0.0.1:{s3_port}"),
            "--region=us-east-1",
        ])
        .args(if args.first() == Some(&"run") {
            vec![
                "--engine=postgresql".to_owned(),
                format!("--host={PG_HOST}"),
                format!("--port={pg_port}"),
                format!("--tools={PG_BIN}"),
            ]
        } else {
            Vec::new()
        })
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DB_PASSWORD", PASSWORD)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("BACKUP_SIGNING_KEY", SIGNING_KEY)
        .output()
        .expect("database-operator backup")
}

fn succeed(out: std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "backup failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Starts the S3 server with its bucket under `root`; returns its port.
fn start_s3(s3_server: &Path, root: &Path, servers: &mut Servers) -> u16 {
    let s3_data = root.join("s3");
    std::fs::create_dir_all(s3_data.join(BUCKET)).expect("bucket dir");
    let s3_port = free_port("127.0.0.1");
    let s3_log = std::fs::File::create(root.join("s3.log")).expect("log");
    servers.children.push(
        Command::new(s3_server)
            .args([
                &format!("--port=127.0.0.1:{s3_port}"),
                "posix",
                &s3_data.display().to_string(),
            ])
            .env("ROOT_ACCESS_KEY_ID", ACCESS_KEY)
            .env("ROOT_SECRET_ACCESS_KEY", SECRET_KEY)
            .stdin(Stdio::null())
            .stdout(s3_log.try_clone().expect("log"))
            .stderr(s3_log)
            .spawn()
            .expect("start versitygw"),
    );
    let s3_addr: SocketAddr = format!("127.0.0.1:{s3_port}").parse().expect("addr");
    assert!(
        eventually(Duration::from_secs(30), || {
            TcpStream::connect_timeout(&s3_addr, Duration::from_millis(200)).is_ok()
        }),
        "the S3 server did not listen"
    );
    s3_port
}

fn store(s3_port: u16) -> S3Store {
    S3Store::new(&S3Config {
        bucket: BUCKET.to_owned(),
        endpoint: Some(format!("http://127.0.0.1:{s3_port}")),
        region: Some("us-east-1".to_owned()),
        credentials: Some(S3Credentials {
            access_key_id: ACCESS_KEY.to_owned(),
            secret_access_key: Secret::new(SECRET_KEY),
        }),
    })
    .expect("store")
}

/// `database-operator backup <args>` on the bucket, for cluster `cluster` of namespace `shop`,
/// with `password` as `DB_PASSWORD`.
fn operator_backup(
    s3_port: u16,
    cluster: &str,
    password: &str,
    args: &[String],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .arg("backup")
        .args(args)
        .args([
            "--namespace=shop",
            &format!("--cluster={cluster}"),
            &format!("--bucket={BUCKET}"),
            &format!("--endpoint=http://127.0.0.1:{s3_port}"),
            "--region=us-east-1",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DB_PASSWORD", password)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("BACKUP_SIGNING_KEY", SIGNING_KEY)
        .output()
        .expect("database-operator backup")
}

/// A test's start: the prerequisites `missing` checks (a skip, saying why, when absent), a
/// temporary directory every OS user can enter, and the S3 server started in it with its port.
/// What someone who can write to the bucket can do: `backup`'s dump (`original`, as the backup
/// Job stored it) with `injected` inserted before its last `CREATE TABLE`, stored in its place,
/// and its manifest's size and SHA-256 rewritten to match.
fn tamper(
    rt: &tokio::runtime::Runtime,
    store: &S3Store,
    backup: &database_operator_core::backup::Backup,
    original: &[u8],
    injected: &str,
) {
    use std::io::Write as _;
    let mut sql = String::new();
    flate2::read::GzDecoder::new(original)
        .read_to_string(&mut sql)
        .expect("gunzip");
    // The last one: the first may be in a part the restore leaves out (MySQL's `mysql` schema),
    // which never reaches the client.
    let at = sql.rfind("\nCREATE TABLE").expect("a CREATE TABLE") + 1;
    sql.insert_str(at, injected);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(sql.as_bytes()).expect("gzip");
    let body = gz.finish().expect("gzip");
    let digest: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let manifest = rt.block_on(store.get(&backup.manifest_key)).expect("get");
    let mut manifest: serde_json::Value = serde_json::from_slice(&manifest).expect("json");
    manifest["size"] = serde_json::json!(body.len());
    manifest["sha256"] = serde_json::json!(digest);
    rt.block_on(store.put(&backup.data_key, body)).expect("put");
    rt.block_on(store.put(
        &backup.manifest_key,
        serde_json::to_vec(&manifest).expect("json"),
    ))
    .expect("put");
}

fn prepare(missing: fn() -> Result<PathBuf, String>) -> Option<(tempfile::TempDir, Servers, u16)> {
    let s3_server = match missing() {
        Ok(path) => path,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return None;
        }
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let status = Command::new("chmod")
        .args(["0755", &root.display().to_string()])
        .status()
        .expect("chmod");
    assert!(status.success());
    let mut servers = Servers {
        children: Vec::new(),
    };
    let s3_port = start_s3(&s3_server, tmp.path(), &mut servers);
    Some((tmp, servers, s3_port))
}

/// Starts PostgreSQL 15 on 127.10.30.1 as the postgres user, data under `root/pg`, with the
/// extra `settings` (`name=value`) and environment; returns its port.
fn start_postgres(
    root: &Path,
    servers: &mut Servers,
    settings: &[String],
    env: &[(&str, String)],
) -> u16 {
    let pg_dir = root.join("pg");
    std::fs::create_dir_all(&pg_dir).expect("pg dir");
    std::fs::write(pg_dir.join("pwfile"), PASSWORD).expect("pwfile");
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres", &pg_dir.display().to_string()])
        .status()
        .expect("chown");
    assert!(status.success());
    let data = pg_dir.join("data");
    let out = as_postgres(&format!("{PG_BIN}/initdb"))
        .args([
            &format!("--pgdata={}", data.display()),
            "--username=postgres",
            "--auth=scram-sha-256",
            &format!("--pwfile={}", pg_dir.join("pwfile").display()),
            "--no-sync",
        ])
        .output()
        .expect("initdb");
    assert!(
        out.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    run_postgres(root, &data, "postgres.log", servers, settings, env)
}

/// Starts the PostgreSQL 15 of the data directory `data` (under `root/pg`, its socket there too)
/// on 127.10.30.1, logging to `root/<log>`, with the extra `settings` and environment; returns
/// its port once it listens.
fn run_postgres(
    root: &Path,
    data: &Path,
    log: &str,
    servers: &mut Servers,
    settings: &[String],
    env: &[(&str, String)],
) -> u16 {
    let pg_dir = root.join("pg");
    let pg_port = free_port(PG_HOST);
    let pg_log = std::fs::File::create(root.join(log)).expect("log");
    servers.children.push(
        as_postgres(&format!("{PG_BIN}/postgres"))
            .args([
                "-D",
                &data.display().to_string(),
                "-c",
                &format!("listen_addresses={PG_HOST}"),
                "-c",
                &format!("port={pg_port}"),
                "-c",
                &format!("unix_socket_directories={}", pg_dir.display()),
                "-c",
                "fsync=off",
            ])
            .args(settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(pg_log.try_clone().expect("log"))
            .stderr(pg_log)
            .spawn()
            .expect("start postgres"),
    );
    let pg_addr: SocketAddr = format!("{PG_HOST}:{pg_port}").parse().expect("addr");
    assert!(
        eventually(Duration::from_secs(60), || {
            TcpStream::connect_timeout(&pg_addr, Duration::from_millis(200)).is_ok()
        }),
        "PostgreSQL did not listen"
    );
    pg_port
}

#[test]
fn postgresql_backups_go_to_s3_and_restore() {
    let Some((tmp, mut servers, s3_port)) = prepare(missing_prerequisite) else {
        return;
    };
    let root = tmp.path();

    // PostgreSQL 15 on 127.10.30.1, as the postgres user.
    let pg_port = start_postgres(root, &mut servers, &[], &[]);
    psql(pg_port, "postgres", "CREATE DATABASE shop");
    psql(
        pg_port,
        "shop",
        "CREATE TABLE items (id int PRIMARY KEY, name text); \
         INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 5000) g",
    );
    // Schema whose dump holds what the restore's check of client commands must read as psql
    // does: backslashes in '…' strings (with a quote right after), E'…' strings, dollar-quoted
    // and BEGIN ATOMIC bodies, comments with quotes, non-ASCII text, COPY data with backslashes.
    psql(
        pg_port,
        "shop",
        r#"CREATE TABLE paths (p text DEFAULT 'C:	emp', note text DEFAULT E'tab	here');
         INSERT INTO paths VALUES ('a', 'ünïcødé \! not a command'), (E'\!x', NULL);
         CREATE VIEW escaped AS SELECT replace(p, '', '/') AS q FROM paths WHERE p LIKE '%\_%' ESCAPE '';
         CREATE FUNCTION twice(x int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN x > 0 THEN x * 2 ELSE 0 END; END;
         CREATE FUNCTION shout(t text) RETURNS text LANGUAGE plpgsql AS $body$ BEGIN RETURN t || '\!'; END $body$;
         COMMENT ON TABLE paths IS 'it''s a \ table -- with /* tricks */ and $$';"#,
    );

    // Four backups, the data changing between them; the fourth keeps 2.
    let mut sums = Vec::new();
    for round in 1..=4 {
        psql(
            pg_port,
            "shop",
            &format!(
                "INSERT INTO items VALUES ({}, 'round {round}')",
                100_000 + round
            ),
        );
        sums.push(checksum(pg_port));
        let retention = if round == 4 { "2" } else { "10" };
        let stdout = succeed(backup(
            s3_port,
            pg_port,
            &["run", &format!("--retention={retention}")],
        ));
        assert!(stdout.starts_with("stored shop/orders/"), "{stdout}");
        // Backups are named by the second they start.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let listed = succeed(backup(s3_port, pg_port, &["list"]));
    assert!(
        listed.starts_with("2 complete backup(s) under shop/orders/"),
        "{listed}"
    );
    assert!(!listed.contains("incomplete"), "{listed}");

    // A dump that fails (nothing listens there) leaves no object behind.
    let closed = free_port(PG_HOST);
    let out = Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .args([
            "backup",
            "run",
            "--namespace=shop",
            "--cluster=orders",
            &format!("--bucket={BUCKET}"),
            &format!("--endpoint=http://127.0.0.1:{s3_port}"),
            "--region=us-east-1",
            "--engine=postgresql",
            &format!("--host={PG_HOST}"),
            &format!("--port={closed}"),
            &format!("--tools={PG_BIN}"),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DB_PASSWORD", PASSWORD)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .output()
        .expect("backup run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pg_dumpall failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The catalog, read through the library: the two newest, nothing incomplete.
    let layout = Layout::new("shop", "orders");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = store(s3_port);
    let catalog = rt.block_on(run::catalog(&store, &layout)).expect("catalog");
    assert_eq!(catalog.complete.len(), 2, "{catalog:?}");
    assert!(catalog.incomplete.is_empty(), "{catalog:?}");
    assert!(catalog.unrecognised.is_empty(), "{catalog:?}");
    let newest = catalog.newest().expect("a backup");
    assert_eq!(newest.manifest.engine.as_str(), "postgresql");
    assert!(
        newest.manifest.server_version.starts_with("15."),
        "{:?}",
        newest.manifest
    );
    assert!(newest.manifest.position.is_some(), "{:?}", newest.manifest);

    // The stored dump is what the manifest says.
    let body = rt.block_on(store.get(&newest.data_key)).expect("get");
    assert_eq!(body.len() as u64, newest.manifest.size);
    let digest: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(digest, newest.manifest.sha256);
    let mut sql = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut sql)
        .expect("gunzip");
    assert!(String::from_utf8_lossy(&sql).contains("round 4"));

    // `backup restore --backup latest` after changing the data: the checksum comes back.
    psql(pg_port, "shop", "DELETE FROM items WHERE id % 2 = 0");
    let changed = checksum(pg_port);
    assert_ne!(changed, sums[3]);
    let restore_args = |engine: &str, backup: &str| -> Vec<String> {
        vec![
            "restore".to_owned(),
            format!("--backup={backup}"),
            format!("--engine={engine}"),
            format!("--host={PG_HOST}"),
            format!("--port={pg_port}"),
            format!("--tools={PG_BIN}"),
        ]
    };
    let out = succeed(operator_backup(
        s3_port,
        "orders",
        PASSWORD,
        &restore_args("postgresql", "latest"),
    ));
    assert!(
        out.starts_with(&format!("restored shop/orders/{} ", newest.id)),
        "{out}"
    );
    assert_eq!(checksum(pg_port), sums[3]);
    // The superuser kept its password (its role statements were left out): it still logs in.
    psql(pg_port, "postgres", "SELECT 1");

    // Refused, nothing applied: another engine, an unknown id, a corrupted dump.
    psql(pg_port, "shop", "DELETE FROM items WHERE id % 3 = 0");
    let before = checksum(pg_port);
    let out = operator_backup(
        s3_port,
        "orders",
        PASSWORD,
        &restore_args("mariadb", "latest"),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is a postgresql backup"), "{stderr}");
    let out = operator_backup(
        s3_port,
        "orders",
        PASSWORD,
        &restore_args("postgresql", "20200101T000000Z"),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no complete backup 20200101T000000Z"),
        "{stderr}"
    );
    let mut corrupted = body.clone();
    let last = corrupted.len() - 1;
    corrupted[last] ^= 0xff;
    rt.block_on(store.put(&newest.data_key, corrupted))
        .expect("put");
    let out = operator_backup(
        s3_port,
        "orders",
        PASSWORD,
        &restore_args("postgresql", newest.id.as_str()),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nothing was restored") && stderr.contains(&newest.manifest.sha256),
        "{stderr}"
    );
    assert_eq!(
        checksum(pg_port),
        before,
        "a refused restore applied something"
    );

    // The manifest is signed; without a key a restore is refused and says how to give one.
    let manifest = rt.block_on(store.get(&newest.manifest_key)).expect("get");
    assert!(
        String::from_utf8_lossy(&manifest).contains("\"signature\": \"hmac-sha256:"),
        "{}",
        String::from_utf8_lossy(&manifest)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .arg("backup")
        .args(restore_args("postgresql", newest.id.as_str()))
        .args([
            "--namespace=shop",
            "--cluster=orders",
            &format!("--bucket={BUCKET}"),
            &format!("--endpoint=http://127.0.0.1:{s3_port}"),
        ])
        .env_clear()
        .env("DB_PASSWORD", PASSWORD)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .output()
        .expect("restore");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no signing key"), "{stderr}");

    // A dump altered to run a shell command through psql, its manifest rewritten to match: the
    // signature no longer verifies; with the check skipped, the restore reads the dump through
    // before starting psql and refuses it. The file never appears.
    let pwned = root.join("pwned");
    for injected in [
        format!("\\! touch {}\n", pwned.display()),
        format!("SELECT 1; \\! touch {}\n", pwned.display()),
        format!("\\o |touch {}\n", pwned.display()),
    ] {
        tamper(&rt, &store, newest, &body, &injected);
        let out = operator_backup(
            s3_port,
            "orders",
            PASSWORD,
            &restore_args("postgresql", newest.id.as_str()),
        );
        assert!(!out.status.success(), "{injected:?} was restored");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("signature does not match the signing key"),
            "{stderr}"
        );
        let mut skipped = restore_args("postgresql", newest.id.as_str());
        skipped.push("--skip-signature-check".to_owned());
        let out = operator_backup(s3_port, "orders", PASSWORD, &skipped);
        assert!(!out.status.success(), "{injected:?} was restored");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("backup {} refused: line ", newest.id))
                && stderr.contains("holds the psql meta-command")
                && stderr.contains("nothing was applied"),
            "{stderr}"
        );
        assert!(!pwned.exists(), "{injected:?} ran");
        assert_eq!(
            checksum(pg_port),
            before,
            "a refused restore applied something"
        );
    }

    // psql's restricted mode, as a restore starts it (a key the dump cannot know): whatever the
    // text check might miss, psql itself refuses the command and the key the dump could name.
    let restricted =
        database_operator_engine::psql_restrict::Restricted::new("R4nd0mKey".into()).unwrap();
    for smuggled in [
        format!("SELECT 1;\n\\! touch {}\n", pwned.display()),
        format!("\\unrestrict dumpkey\n\\! touch {}\n", pwned.display()),
    ] {
        use std::io::Write as _;
        let mut child = psql_reading_stdin(pg_port);
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&restricted.start()).expect("write");
        stdin.write_all(smuggled.as_bytes()).expect("write");
        drop(stdin);
        let out = child.wait_with_output().expect("psql");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{smuggled:?} went through: {stderr}");
        assert!(stderr.contains("restrict"), "{stderr}");
        assert!(!pwned.exists(), "{smuggled:?} ran");
    }

    // deletionPolicy: Delete removes the prefix and only it.
    rt.block_on(store.put("shop/other/keep.txt", b"x".to_vec()))
        .expect("put");
    let out = succeed(backup(s3_port, pg_port, &["delete-prefix"]));
    assert_eq!(out.trim(), "deleted 4 object(s) under shop/orders/");
    assert!(
        rt.block_on(store.list("shop/orders/"))
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        rt.block_on(store.list("shop/other/")).expect("list").len(),
        1
    );
    drop(servers);
}

const MARIADB_HOST: &str = "127.10.30.2";

fn missing_mariadb_prerequisite() -> Result<PathBuf, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("needs root (runs MariaDB as the mysql user)".into());
    }
    for tool in [
        "/usr/sbin/mariadbd",
        "/usr/bin/mariadb-install-db",
        "/usr/bin/mariadb",
        "/usr/bin/mariadb-dump",
        "/usr/bin/setpriv",
    ] {
        if !Path::new(tool).exists() {
            return Err(format!("{tool} is not installed"));
        }
    }
    if !Command::new("id")
        .arg("mysql")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Err("no OS user mysql".into());
    }
    cached_s3_server().ok_or_else(|| {
        "the local S3 server is not cached (cargo xtask cluster up builds it)".to_owned()
    })
}

fn as_mysql(program: &str) -> Command {
    let mut cmd = Command::new("/usr/bin/setpriv");
    cmd.args([
        "--reuid=mysql",
        "--regid=mysql",
        "--init-groups",
        "--",
        program,
    ]);
    cmd
}

/// SQL as root over TCP with the password.
fn mariadb_sql(port: u16, sql: &str) -> String {
    mariadb_sql_as(port, "root", PASSWORD, sql)
}

/// SQL as `user` over TCP with `password`.
fn mariadb_sql_as(port: u16, user: &str, password: &str, sql: &str) -> String {
    let out = Command::new("/usr/bin/mariadb")
        .args([
            "--no-defaults",
            &format!("--host={MARIADB_HOST}"),
            &format!("--port={port}"),
            &format!("--user={user}"),
            "--batch",
            "--skip-column-names",
            "--execute",
            sql,
        ])
        .env("MYSQL_PWD", password)
        .output()
        .expect("mariadb");
    assert!(
        out.status.success(),
        "mariadb {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn mariadb_checksum(port: u16) -> String {
    mariadb_sql(
        port,
        "SELECT CONCAT(COUNT(*), ':', SUM(CRC32(CONCAT(id, ':', name)))) FROM shop.items",
    )
}

#[test]
fn mariadb_backup_restores_by_id() {
    let Some((tmp, mut servers, s3_port)) = prepare(missing_mariadb_prerequisite) else {
        return;
    };
    let root = tmp.path();

    // MariaDB on 127.10.30.2, as the mysql user; root@'%' with the password.
    let dir = root.join("mariadb");
    std::fs::create_dir_all(&dir).expect("dir");
    let status = Command::new("chown")
        .args(["-R", "mysql:mysql", &dir.display().to_string()])
        .status()
        .expect("chown");
    assert!(status.success());
    let data = dir.join("data");
    let out = as_mysql("/usr/bin/mariadb-install-db")
        .args([
            "--no-defaults",
            &format!("--datadir={}", data.display()),
            "--skip-test-db",
            "--auth-root-authentication-method=socket",
        ])
        .output()
        .expect("mariadb-install-db");
    assert!(
        out.status.success(),
        "mariadb-install-db: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port(MARIADB_HOST);
    let socket = dir.join("mysqld.sock");
    let log = std::fs::File::create(root.join("mariadb.log")).expect("log");
    servers.children.push(
        as_mysql("/usr/sbin/mariadbd")
            .args([
                "--no-defaults",
                &format!("--datadir={}", data.display()),
                &format!("--bind-address={MARIADB_HOST}"),
                &format!("--port={port}"),
                &format!("--socket={}", socket.display()),
                &format!("--pid-file={}", dir.join("mysqld.pid").display()),
                "--log-bin=mysql-bin",
                "--server-id=1",
                "--skip-name-resolve",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start mariadbd"),
    );
    let addr: SocketAddr = format!("{MARIADB_HOST}:{port}").parse().expect("addr");
    assert!(
        eventually(Duration::from_secs(60), || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        }),
        "MariaDB did not listen"
    );
    let out = Command::new("/usr/bin/mariadb")
        .args([
            "--no-defaults",
            &format!("--socket={}", socket.display()),
            "--user=root",
            "--execute",
            &format!(
                "CREATE USER 'root'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION; \
                 CREATE USER 'database_operator'@'%' IDENTIFIED BY '{PASSWORD}'; \
                 GRANT {operator} ON *.* TO 'database_operator'@'%'; \
                 CREATE DATABASE shop; CREATE TABLE shop.items (id int PRIMARY KEY, name text); \
                 INSERT INTO shop.items SELECT seq, CONCAT('item ', seq) FROM shop.seq_1_to_3000",
                operator = database_operator_engine::of(database_operator_api::Engine::Mariadb)
                    .operator_privileges()
                    .expect("MariaDB limits the operator's account"),
            ),
        ])
        .output()
        .expect("mariadb as root on the socket");
    assert!(
        out.status.success(),
        "setup: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The application's accounts: a role with a grant, a user with its password, grants and the
    // role as its default.
    mariadb_sql(
        port,
        "CREATE ROLE shop_reader; GRANT SELECT ON shop.* TO shop_reader; \
         CREATE USER 'shop_app'@'%' IDENTIFIED BY 'app-secret-1'; \
         GRANT INSERT, UPDATE ON shop.* TO 'shop_app'@'%'; GRANT shop_reader TO 'shop_app'@'%'; \
         SET DEFAULT ROLE shop_reader FOR 'shop_app'@'%'",
    );
    let app_grants = mariadb_sql(port, "SHOW GRANTS FOR 'shop_app'@'%'");

    // A backup over TCP as the operator's account, with only the privileges the init script
    // gives it (as a backup Job runs it).
    let run = |extra: &[&str]| -> Vec<String> {
        let mut args = vec![
            "run".to_owned(),
            "--engine=mariadb".to_owned(),
            format!("--host={MARIADB_HOST}"),
            format!("--port={port}"),
            "--tools=/usr/bin".to_owned(),
            "--retention=5".to_owned(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let backed_up = mariadb_checksum(port);
    let out = succeed(operator_backup(
        s3_port,
        "catalog",
        PASSWORD,
        &run(&["--user=database_operator"]),
    ));
    assert!(out.starts_with("stored shop/catalog/"), "{out}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let layout = Layout::new("shop", "catalog");
    let catalog = rt
        .block_on(run::catalog(&store(s3_port), &layout))
        .expect("catalog");
    let backup = catalog.newest().expect("a backup").clone();
    assert_eq!(backup.manifest.engine.as_str(), "mariadb");
    assert!(
        backup.manifest.server_version.starts_with("10.11."),
        "{:?}",
        backup.manifest
    );

    // The data changes (rows deleted, a table dropped); the restore by id brings it back.
    mariadb_sql(
        port,
        "DELETE FROM shop.items WHERE id % 2 = 0; CREATE TABLE shop.later (x int)",
    );
    assert_ne!(mariadb_checksum(port), backed_up);
    mariadb_sql(port, "DROP TABLE shop.items");
    // The accounts lost too: the restore brings them back.
    mariadb_sql(port, "DROP USER 'shop_app'@'%'; DROP ROLE shop_reader");
    let out = succeed(operator_backup(
        s3_port,
        "catalog",
        PASSWORD,
        &[
            "restore".to_owned(),
            format!("--backup={}", backup.id),
            "--engine=mariadb".to_owned(),
            format!("--host={MARIADB_HOST}"),
            format!("--port={port}"),
            "--tools=/usr/bin".to_owned(),
        ],
    ));
    assert!(
        out.starts_with(&format!("restored shop/catalog/{} ", backup.id)),
        "{out}"
    );
    assert_eq!(mariadb_checksum(port), backed_up);
    // The accounts were left alone: root still logs in with its password.
    assert_eq!(mariadb_sql(port, "SELECT 1"), "1");
    // The application's account is back with its password, its grants and its default role.
    assert_eq!(
        mariadb_sql(port, "SHOW GRANTS FOR 'shop_app'@'%'"),
        app_grants
    );
    assert_eq!(
        mariadb_sql_as(
            port,
            "shop_app",
            "app-secret-1",
            "SELECT COUNT(*) FROM shop.items"
        ),
        "3000"
    );

    // The dump altered to run a shell command through the client: refused before it starts.
    let store = store(s3_port);
    let original = rt.block_on(store.get(&backup.data_key)).expect("get");
    let pwned = tmp.path().join("pwned");
    for injected in [
        format!("system touch {}\n", pwned.display()),
        format!("\\! touch {}\n", pwned.display()),
    ] {
        tamper(&rt, &store, &backup, &original, &injected);
        let mut args = vec![
            "restore".to_owned(),
            format!("--backup={}", backup.id),
            "--engine=mariadb".to_owned(),
            format!("--host={MARIADB_HOST}"),
            format!("--port={port}"),
            "--tools=/usr/bin".to_owned(),
        ];
        let out = operator_backup(s3_port, "catalog", PASSWORD, &args);
        assert!(!out.status.success(), "{injected:?} was restored");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("signature does not match the signing key"),
            "{stderr}"
        );
        args.push("--skip-signature-check".to_owned());
        let out = operator_backup(s3_port, "catalog", PASSWORD, &args);
        assert!(!out.status.success(), "{injected:?} was restored");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("holds the client command `system`"),
            "{stderr}"
        );
        assert!(!pwned.exists(), "{injected:?} ran");
    }
    assert_eq!(mariadb_checksum(port), backed_up);
    drop(servers);
}

/// The S3 environment of a process that reaches the test bucket at `s3_port` for the cluster
/// shop/orders (what the pod gives the server for its archive command).
fn bucket_env(s3_port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("CLUSTER_NAMESPACE", "shop".to_owned()),
        ("CLUSTER_NAME", "orders".to_owned()),
        ("S3_BUCKET", BUCKET.to_owned()),
        ("S3_ENDPOINT", format!("http://127.0.0.1:{s3_port}")),
        ("AWS_DEFAULT_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
    ]
}

/// The archiver columns of the operator's probe, read from the server: `archived_count`,
/// `archive_waiting`, `last_archived_wal`, `failed_count`, `last_failed_wal`.
fn archiver(pg_port: u16) -> Vec<String> {
    let probe =
        &database_operator_engine::statements::probe(database_operator_api::Engine::Postgresql)[0];
    let row = psql(
        pg_port,
        "postgres",
        &format!(
            "SELECT archived_count, archive_waiting, coalesce(last_archived_wal, '-'), failed_count, coalesce(last_failed_wal, '-') FROM ({}) p",
            probe.sql
        ),
    );
    row.split('|').map(str::to_owned).collect()
}

#[test]
fn postgresql_archives_its_write_ahead_log_and_never_overwrites_it() {
    let Some((tmp, mut servers, s3_port)) = prepare(missing_prerequisite) else {
        return;
    };
    let root = tmp.path();
    // The binary where the server's OS user can run it, as the pod's install container copies it.
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let program = bin.join("database-operator");
    std::fs::copy(env!("CARGO_BIN_EXE_database-operator"), &program).expect("copy the binary");
    let status = Command::new("chmod")
        .args(["-R", "0755", &bin.display().to_string()])
        .status()
        .expect("chmod");
    assert!(status.success());
    let command = format!("{} backup wal-push %p %f", program.display());
    let pg_port = start_postgres(
        root,
        &mut servers,
        &["archive_mode=on".to_owned()],
        &bucket_env(s3_port),
    );
    // The command through ALTER SYSTEM, not the command line (which would outrank the change
    // below): reloaded without a restart.
    let set_command = |command: &str| {
        psql(
            pg_port,
            "postgres",
            &format!("ALTER SYSTEM SET archive_command = '{command}'"),
        );
        psql(pg_port, "postgres", "SELECT pg_reload_conf()");
    };
    set_command(&command);
    // A base backup without WAL of its own (`-X none`): a restore of it needs the archive.
    let base = root.join("pg").join("base");
    let out = as_postgres(&format!("{PG_BIN}/pg_basebackup"))
        .args([
            &format!("--pgdata={}", base.display()),
            "--wal-method=none",
            "--checkpoint=fast",
            "--no-sync",
            &format!("--host={}", root.join("pg").display()),
            &format!("--port={pg_port}"),
            "--username=postgres",
        ])
        .env("PGPASSWORD", PASSWORD)
        .output()
        .expect("pg_basebackup");
    assert!(
        out.status.success(),
        "pg_basebackup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    psql(
        pg_port,
        "postgres",
        "CREATE TABLE items AS SELECT g AS id FROM generate_series(1, 1000) g",
    );
    let segment = psql(
        pg_port,
        "postgres",
        "SELECT pg_walfile_name(pg_current_wal_lsn())",
    );
    psql(pg_port, "postgres", "SELECT pg_switch_wal()");
    assert!(
        eventually(Duration::from_secs(30), || archiver(pg_port)[2] == segment),
        "{segment} was not archived: {:?}\n{}",
        archiver(pg_port),
        std::fs::read_to_string(root.join("postgres.log")).unwrap_or_default()
    );
    let facts = archiver(pg_port);
    assert!(
        facts[0].parse::<u64>().expect("archived_count") >= 1,
        "{facts:?}"
    );
    assert_eq!(facts[3], "0", "no failed attempt: {facts:?}");

    // Stored compressed under the cluster's prefix: a whole segment of PostgreSQL 15's WAL.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = store(s3_port);
    let system = psql(
        pg_port,
        "postgres",
        "SELECT system_identifier FROM pg_control_system()",
    );
    let key = format!("shop/orders/wal/{system}/{segment}.gz");
    let stored = rt.block_on(store.get(&key)).expect("the archived segment");
    let mut content = Vec::new();
    flate2::read::GzDecoder::new(&stored[..])
        .read_to_end(&mut content)
        .expect("gunzip");
    assert_eq!(content.len(), 16 * 1024 * 1024);
    assert_eq!(
        &content[..2],
        &[0x10, 0xD1],
        "a PostgreSQL 15 WAL page header"
    );
    assert!(
        stored.len() < content.len() / 4,
        "compressed: {}",
        stored.len()
    );
    let listed = succeed(backup(s3_port, pg_port, &["list"]));
    assert!(listed.contains("WAL archive: "), "{listed}");

    // The same content again is accepted without a write; other content is refused.
    let push = |file: &Path| {
        Command::new(env!("CARGO_BIN_EXE_database-operator"))
            .args(["backup", "wal-push", &file.display().to_string(), &segment])
            .arg(format!(
                "--data-dir={}",
                root.join("pg").join("data").display()
            ))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(bucket_env(s3_port))
            .output()
            .expect("wal-push")
    };
    let same = root.join("same");
    std::fs::write(&same, &content).expect("write");
    let out = push(&same);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already archived"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut other = content.clone();
    other[4096] ^= 1;
    let diverged = root.join("diverged");
    std::fs::write(&diverged, &other).expect("write");
    let out = push(&diverged);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refusing to overwrite"), "{stderr}");
    assert_eq!(
        rt.block_on(store.get(&key)).expect("still there"),
        stored,
        "the archived segment was overwritten"
    );

    // A bucket that cannot be reached: the archiver fails and says so, writes go on, and the
    // segment is archived once the bucket answers again.
    let closed = free_port("127.0.0.1");
    set_command(&format!("S3_ENDPOINT=http://127.0.0.1:{closed} {command}"));
    psql(
        pg_port,
        "postgres",
        "INSERT INTO items SELECT g FROM generate_series(1001, 2000) g",
    );
    let stuck = psql(
        pg_port,
        "postgres",
        "SELECT pg_walfile_name(pg_current_wal_lsn())",
    );
    psql(pg_port, "postgres", "SELECT pg_switch_wal()");
    assert!(
        eventually(Duration::from_secs(90), || archiver(pg_port)[4] == stuck),
        "no failed attempt on {stuck}: {:?}",
        archiver(pg_port)
    );
    let facts = archiver(pg_port);
    assert_eq!(facts[2], segment, "{facts:?}");
    assert!(facts[1].parse::<u64>().expect("waiting") >= 1, "{facts:?}");
    psql(pg_port, "postgres", "INSERT INTO items VALUES (2001)");
    set_command(&command);
    assert!(
        eventually(Duration::from_secs(90), || archiver(pg_port)[2] == stuck),
        "{stuck} was not archived after the bucket came back: {:?}",
        archiver(pg_port)
    );
    assert!(
        rt.block_on(store.get(&format!("shop/orders/wal/{system}/{stuck}.gz")))
            .is_ok()
    );

    // The base backup and the archive replay to the last archived write: a server recovered
    // with `backup wal-fetch` as its restore command holds every row, the last one included.
    let last = psql(
        pg_port,
        "postgres",
        "SELECT pg_walfile_name(pg_current_wal_lsn())",
    );
    psql(pg_port, "postgres", "SELECT pg_switch_wal()");
    assert!(
        eventually(Duration::from_secs(30), || archiver(pg_port)[2] == last),
        "{last} was not archived: {:?}",
        archiver(pg_port)
    );
    let rows = psql(pg_port, "postgres", "SELECT count(*) FROM items");
    assert_eq!(rows, "2001");
    let signal = as_postgres("/usr/bin/touch")
        .arg(base.join("recovery.signal"))
        .status()
        .expect("touch");
    assert!(signal.success());
    let restore = format!(
        "restore_command={} backup wal-fetch %f %p",
        program.display()
    );
    let restored_port = run_postgres(
        root,
        &base,
        "restored.log",
        &mut servers,
        &[restore],
        &bucket_env(s3_port),
    );
    await_promotion(root, restored_port, "restored.log");
    assert_eq!(
        psql(restored_port, "postgres", "SELECT count(*) FROM items"),
        rows,
        "the replay lost rows:\n{}",
        std::fs::read_to_string(root.join("restored.log")).unwrap_or_default()
    );
    let log = std::fs::read_to_string(root.join("restored.log")).unwrap_or_default();
    assert!(
        log.contains(&format!("restored log file \"{last}\" from archive")),
        "{log}"
    );
    drop(servers);
}

/// `database-operator backup <args>` run as the postgres OS user (what the init container
/// is), with the bucket's environment.
fn backup_as_postgres(program: &Path, s3_port: u16, args: &[String]) -> std::process::Output {
    as_postgres(&program.display().to_string())
        .arg("backup")
        .args(args)
        .args([
            "--namespace=shop".to_owned(),
            "--cluster=orders".to_owned(),
            format!("--bucket={BUCKET}"),
            format!("--endpoint=http://127.0.0.1:{s3_port}"),
            "--region=us-east-1".to_owned(),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("BACKUP_SIGNING_KEY", SIGNING_KEY)
        .output()
        .expect("database-operator backup")
}

/// Waits until the server on `port` has left recovery; panics with its log otherwise.
fn await_promotion(root: &Path, port: u16, log: &str) {
    let promoted = eventually(Duration::from_secs(90), || {
        Command::new(Path::new(PG_BIN).join("psql"))
            .args([
                &format!("--host={PG_HOST}"),
                &format!("--port={port}"),
                "--username=postgres",
                "--dbname=postgres",
                "--tuples-only",
                "--no-align",
                "--command",
                "SELECT pg_is_in_recovery()",
            ])
            .env("PGPASSWORD", PASSWORD)
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "f")
    });
    assert!(
        promoted,
        "the restored server did not finish its recovery:\n{}",
        std::fs::read_to_string(root.join(log)).unwrap_or_default()
    );
}

/// Point-in-time recovery from a physical base backup (`backup run --method physical`) and the
/// WAL archive: restored to the commit time of row 150 it holds rows 1 to 150 exactly (the
/// target is inclusive, microseconds); restored to the LSN before a `DROP TABLE` it holds all
/// 200; a target before the base backup finished is refused with the backups there are.
#[test]
fn postgresql_recovers_to_a_point_in_time_from_a_base_backup() {
    let Some((tmp, mut servers, s3_port)) = prepare(missing_prerequisite) else {
        return;
    };
    let root = tmp.path();
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let program = bin.join("database-operator");
    std::fs::copy(env!("CARGO_BIN_EXE_database-operator"), &program).expect("copy the binary");
    let status = Command::new("chmod")
        .args(["-R", "0755", &bin.display().to_string()])
        .status()
        .expect("chmod");
    assert!(status.success());
    let pg_port = start_postgres(
        root,
        &mut servers,
        &[
            "archive_mode=on".to_owned(),
            "track_commit_timestamp=on".to_owned(),
            format!(
                "archive_command={} backup wal-push %p %f",
                program.display()
            ),
        ],
        &bucket_env(s3_port),
    );
    // Replication over TCP from loopback, as the servers' own rules allow the replication role.
    let hba = root.join("pg").join("data").join("pg_hba.conf");
    let mut rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
    rules.push_str("host replication all 127.0.0.0/8 scram-sha-256\n");
    std::fs::write(&hba, rules).expect("pg_hba.conf");
    // A setting of the source's own (ALTER SYSTEM, in its postgresql.auto.conf): not the
    // restored cluster's.
    psql(pg_port, "postgres", "ALTER SYSTEM SET work_mem = '7MB'");
    psql(pg_port, "postgres", "SELECT pg_reload_conf()");
    psql(
        pg_port,
        "postgres",
        "CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 100)",
    );

    // The base backup, as the replication account would take it.
    let out = Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .args([
            "backup",
            "run",
            "--method=physical",
            "--replication-user=postgres",
        ])
        .args([
            "--namespace=shop",
            "--cluster=orders",
            &format!("--bucket={BUCKET}"),
            &format!("--endpoint=http://127.0.0.1:{s3_port}"),
            "--region=us-east-1",
            "--engine=postgresql",
            &format!("--host={PG_HOST}"),
            &format!("--port={pg_port}"),
            &format!("--tools={PG_BIN}"),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DB_PASSWORD", PASSWORD)
        .env("REPLICATION_PASSWORD", PASSWORD)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("BACKUP_SIGNING_KEY", SIGNING_KEY)
        .output()
        .expect("backup run");
    let stored = succeed(out);
    assert!(stored.contains(".base.tar.gz"), "{stored}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let layout = Layout::new("shop", "orders");
    let catalog = rt
        .block_on(run::catalog(&store(s3_port), &layout))
        .expect("catalog");
    assert_eq!(catalog.complete.len(), 1, "{catalog:?}");
    let base = &catalog.complete[0].manifest;
    assert_eq!(base.method, database_operator_api::BackupMethod::Physical);
    let range = base.wal.clone().expect("a WAL range");
    assert_eq!(range.timeline, 1);
    assert!(base.tables.is_none());

    // Rows 101 to 200, one transaction each; T is row 150's commit time.
    let inserts: String = (101..=200)
        .map(|n| format!("INSERT INTO items VALUES ({n});\n"))
        .collect();
    // From a file (stdin), psql sends each statement on its own: one transaction each (one
    // `--command` string would be a single transaction).
    let mut child = psql_reading_stdin(pg_port);
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(inserts.as_bytes())
            .expect("write");
    }
    let out = child.wait_with_output().expect("psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let commit = |id: u32| {
        psql(
            pg_port,
            "postgres",
            &format!(
                "SELECT to_char(pg_xact_commit_timestamp(xmin) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM items WHERE id = {id}"
            ),
        )
    };
    let target = commit(150);
    assert!(
        commit(151) > target,
        "{} is not after {target}",
        commit(151)
    );
    let before_drop = psql(pg_port, "postgres", "SELECT pg_current_wal_lsn()");
    psql(pg_port, "postgres", "DROP TABLE items");
    let last = psql(
        pg_port,
        "postgres",
        "SELECT pg_walfile_name(pg_current_wal_lsn())",
    );
    psql(pg_port, "postgres", "SELECT pg_switch_wal()");
    assert!(
        eventually(Duration::from_secs(60), || archiver(pg_port)[2] == last),
        "{last} was not archived: {:?}",
        archiver(pg_port)
    );

    let version = {
        let out = Command::new(Path::new(PG_BIN).join("postgres"))
            .arg("--version")
            .output()
            .expect("postgres --version");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let chosen = backup_as_postgres(
        &program,
        s3_port,
        &["choose".to_owned(), format!("--target-time={target}")],
    );
    assert_eq!(
        succeed(chosen).trim(),
        format!("physical {}", base.id),
        "the base backup before the target"
    );
    let mut restore_to = |dir: &str, target: String| {
        let data = root.join("pg").join(dir);
        let out = backup_as_postgres(
            &program,
            s3_port,
            &[
                "unpack".to_owned(),
                target,
                format!("--data-dir={}", data.display()),
                format!("--server-version={version}"),
                format!("--program={}", program.display()),
            ],
        );
        let said = succeed(out);
        assert!(said.contains("verified"), "{said}");
        let log = format!("{dir}.log");
        let port = run_postgres(root, &data, &log, &mut servers, &[], &bucket_env(s3_port));
        await_promotion(root, port, &log);
        (
            port,
            std::fs::read_to_string(root.join(&log)).unwrap_or_default(),
        )
    };

    let (port, log) = restore_to("at-time", format!("--target-time={target}"));
    assert_eq!(
        psql(
            port,
            "postgres",
            "SELECT count(*) || ' ' || max(id) FROM items"
        ),
        "150 150",
        "recovered to {target}:\n{log}"
    );
    // PostgreSQL stops before the first commit past the target, the one at the target kept.
    assert!(
        log.contains("starting point-in-time recovery to")
            && log.contains("recovery stopping before commit"),
        "{log}"
    );
    // Nothing of the source's ALTER SYSTEM settings came along; the recovery's own are there.
    let auto = std::fs::read_to_string(root.join("pg/at-time/postgresql.auto.conf")).unwrap();
    assert!(auto.contains("recovery_target_time = '"), "{auto}");
    assert!(!auto.contains("work_mem"), "{auto}");
    assert_ne!(psql(port, "postgres", "SHOW work_mem"), "7MB");

    let (port, log) = restore_to("before-drop", format!("--target-lsn={before_drop}"));
    assert_eq!(
        psql(
            port,
            "postgres",
            "SELECT count(*) || ' ' || max(id) FROM items"
        ),
        "200 200",
        "recovered to {before_drop}:\n{log}"
    );

    // Before the base backup finished: no base backup reaches it, and nothing is written.
    let early = backup_as_postgres(
        &program,
        s3_port,
        &[
            "unpack".to_owned(),
            format!("--target-time={}", base.started),
            format!("--data-dir={}", root.join("pg/early").display()),
            format!("--server-version={version}"),
        ],
    );
    assert!(!early.status.success());
    let said = String::from_utf8_lossy(&early.stderr);
    assert!(
        said.contains("no physical backup under shop/orders/ finished before"),
        "{said}"
    );
    assert!(said.contains(&base.id.to_string()), "{said}");
    assert!(!root.join("pg/early").exists());
    // Into a server of another major release: refused before the download.
    let other = backup_as_postgres(
        &program,
        s3_port,
        &[
            "unpack".to_owned(),
            format!("--data-dir={}", root.join("pg/other").display()),
            "--server-version=postgres (PostgreSQL) 16.2".to_owned(),
        ],
    );
    assert!(!other.status.success());
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(
        said.contains("only into the same major release (15)"),
        "{said}"
    );
    drop(servers);
}
