//! `database-operator backup` against real servers on loopback: a PostgreSQL 15 on
//! 127.10.30.1 and the local S3 server (versitygw, as `cargo xtask cluster up` builds and
//! caches it) on 127.0.0.1. Four backups, retention 2, a failing dump that leaves nothing, and
//! a restore of the newest backup with psql that gives back the data it was taken from.
//!
//! Skips, saying why, when the binaries are absent (no PostgreSQL 15, no cached S3 server, not
//! root, no `postgres` OS user).

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

#[test]
fn postgresql_backups_go_to_s3_and_restore() {
    let s3_server = match missing_prerequisite() {
        Ok(path) => path,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
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

    // The S3 server, with its bucket.
    let s3_data = root.join("s3");
    std::fs::create_dir_all(s3_data.join(BUCKET)).expect("bucket dir");
    let s3_port = free_port("127.0.0.1");
    let s3_log = std::fs::File::create(root.join("s3.log")).expect("log");
    servers.children.push(
        Command::new(&s3_server)
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

    // PostgreSQL 15 on 127.10.30.1, as the postgres user.
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
    let pg_port = free_port(PG_HOST);
    let pg_log = std::fs::File::create(root.join("postgres.log")).expect("log");
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
    psql(pg_port, "postgres", "CREATE DATABASE shop");
    psql(
        pg_port,
        "shop",
        "CREATE TABLE items (id int PRIMARY KEY, name text); \
         INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 5000) g",
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
    let store = S3Store::new(&S3Config {
        bucket: BUCKET.to_owned(),
        endpoint: Some(format!("http://127.0.0.1:{s3_port}")),
        region: Some("us-east-1".to_owned()),
        credentials: Some(S3Credentials {
            access_key_id: ACCESS_KEY.to_owned(),
            secret_access_key: Secret::new(SECRET_KEY),
        }),
    })
    .expect("store");
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

    // Restore the newest after changing the data; the checksum comes back.
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
    psql(pg_port, "shop", "DELETE FROM items WHERE id % 2 = 0");
    assert_ne!(checksum(pg_port), sums[3]);
    let mut restore = Command::new(Path::new(PG_BIN).join("psql"))
        .args([
            &format!("--host={PG_HOST}"),
            &format!("--port={pg_port}"),
            "--username=postgres",
            "--dbname=postgres",
            "--no-psqlrc",
            "--quiet",
            "--set=ON_ERROR_STOP=1",
        ])
        .env("PGPASSWORD", PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql restore");
    {
        use std::io::Write as _;
        let mut stdin = restore.stdin.take().expect("stdin");
        // pg_dumpall recreates the role it connects as; skip those two statements.
        let text = String::from_utf8(sql).expect("utf-8 dump");
        for line in text.lines() {
            if line.starts_with("DROP ROLE IF EXISTS postgres;")
                || line.starts_with("CREATE ROLE postgres;")
            {
                continue;
            }
            writeln!(stdin, "{line}").expect("write");
        }
    }
    let out = restore.wait_with_output().expect("psql");
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(checksum(pg_port), sums[3]);

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
