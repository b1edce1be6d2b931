//! The rendered shell scripts: `shellcheck` clean, and doing what they say when run with fake
//! database tools (no network, no database: every tool they call is a stub that records
//! its arguments).
//!
//! `shellcheck` must be installed (`apt-get install shellcheck`); the test fails, not skips,
//! without it.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use database_operator_core::render::scripts;
use database_operator_core::{OwnedKind, plan};

#[test]
fn rendered_scripts_pass_shellcheck() {
    let dir = sandbox("shellcheck");
    let mut checked = 0;
    for cluster in [common::mysql(), common::postgresql(), common::mariadb()] {
        let engine = cluster.spec.engine;
        let p = plan(&common::observed(cluster));
        let cm = p
            .objects
            .iter()
            .find(|o| o.object.kind() == OwnedKind::ConfigMap)
            .unwrap()
            .object
            .to_value();
        for (key, content) in cm["data"].as_object().unwrap() {
            if !key.ends_with(".sh") {
                continue;
            }
            let content = content.as_str().unwrap();
            assert!(
                content.starts_with("#!/bin/sh\n"),
                "{key} is not a POSIX sh script"
            );
            let path = dir.join(format!("{engine}-{key}"));
            fs::write(&path, content).unwrap();
            let out = Command::new("shellcheck")
                .args(["--shell=sh", "--severity=style"])
                .arg(&path)
                .output()
                .unwrap_or_else(|e| panic!("shellcheck could not run ({e}): install it with `apt-get install shellcheck`"));
            assert!(
                out.status.success(),
                "shellcheck found problems in {key}:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 3, "expected init.sh for every engine");
}

// ---------------------------------------------------------------------------------------------
// A sandbox with fake tools.

fn sandbox(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("core-scripts")
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("bin")).unwrap();
    dir
}

fn fake(dir: &Path, tool: &str, body: &str) {
    let path = dir.join("bin").join(tool);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn run(dir: &Path, script: &str, env: &[(&str, String)]) -> Output {
    let path = dir.join("script.sh");
    fs::write(&path, script).unwrap();
    let mut cmd = Command::new("sh");
    cmd.arg(&path).env_clear();
    cmd.env(
        "PATH",
        format!("{}:/usr/bin:/bin", dir.join("bin").display()),
    );
    cmd.env("SANDBOX", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path.as_ref()).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// postgresql init.sh

/// A sandbox for the PostgreSQL init script: fake `initdb`, `postgres` (returns at once),
/// `pg_isready` (always ready), `psql` (records its SQL) and `pg_basebackup` (lays out a copy).
fn pg_sandbox(name: &str, label: Option<&str>) -> (PathBuf, Vec<(&'static str, String)>) {
    let dir = sandbox(name);
    fake(
        &dir,
        "pg_basebackup",
        r#"echo "pg_basebackup $* PGPASSFILE=$PGPASSFILE" >>"$SANDBOX/calls"
for arg; do
    case $arg in --pgdata=*) target=${arg#--pgdata=} ;; esac
done
mkdir -p "$target"
echo 15 >"$target/PG_VERSION"
touch "$target/standby.signal""#,
    );
    fake(
        &dir,
        "initdb",
        r#"echo "initdb $*" >>"$SANDBOX/calls"
for arg; do
    case $arg in
        --pgdata=*) target=${arg#--pgdata=} ;;
        --pwfile=*) cp "${arg#--pwfile=}" "$SANDBOX/pwfile-seen" ;;
    esac
done
mkdir -p "$target"
echo 15 >"$target/PG_VERSION""#,
    );
    fake(&dir, "postgres", r#"echo "postgres $*" >>"$SANDBOX/calls""#);
    fake(&dir, "pg_isready", "exit 0");
    // The state a data directory was left in: `shut down` unless the test says otherwise.
    fake(
        &dir,
        "pg_controldata",
        r#"echo "Database cluster state:               $(cat "$SANDBOX/state" 2>/dev/null || echo 'shut down')"
echo "Latest checkpoint's TimeLineID:       $(cat "$SANDBOX/timeline" 2>/dev/null || echo 1)""#,
    );
    // Records its arguments and the password file it was given; fails with the exit status in
    // $SANDBOX/rewind-exit (for the dry run when it ends in -dry).
    fake(
        &dir,
        "pg_rewind",
        r#"echo "pg_rewind $*" >>"$SANDBOX/calls"
for arg; do
    case $arg in --source-server=*) passfile=${arg##*passfile=} ;; esac
done
cp "$passfile" "$SANDBOX/rewind-passfile-seen"
case "$*" in
    *--dry-run*) exit "$(cat "$SANDBOX/dry-run-exit" 2>/dev/null || echo 0)" ;;
esac
# As the real one: the target becomes the source's copy, a primary's (no standby.signal).
for arg; do
    case $arg in --target-pgdata=*) rm -f "${arg#--target-pgdata=}/standby.signal" ;; esac
done
echo "pg_rewind: Done!"
exit "$(cat "$SANDBOX/rewind-exit" 2>/dev/null || echo 0)""#,
    );
    // Records its SQL; answers with $SANDBOX/primary-timeline when there is one (the
    // primary's timeline query).
    fake(
        &dir,
        "psql",
        r#"cat >>"$SANDBOX/sql"; cat "$SANDBOX/primary-timeline" 2>/dev/null || true"#,
    );
    fs::create_dir_all(dir.join("data")).unwrap();
    if let Some(role) = label {
        fs::write(dir.join("labels"), labels_file(role)).unwrap();
    }
    let env = vec![
        ("POD_NAME", "db-1".into()),
        ("PRIMARY_HOST", "db.ns.svc".into()),
        ("PGDATA", dir.join("data/pgdata").display().to_string()),
        ("POSTGRES_PASSWORD", "super:secret".into()),
        ("REPLICATION_USER", "replicator".into()),
        ("REPLICATION_PASSWORD", r"re:pl\pw".into()),
        ("ADMIN_USER", "database_operator".into()),
        ("ADMIN_PASSWORD", "adm:in-pw".into()),
        ("REWIND_WAIT_SECONDS", "0".into()),
        ("PODINFO_LABELS", dir.join("labels").display().to_string()),
        ("RUN_DIR", dir.join("run").display().to_string()),
        ("CONFIG_DIR", dir.join("config").display().to_string()),
        ("ROLE_WAIT_SECONDS", "0".into()),
    ];
    (dir, env)
}

/// The downward API's labels file of a member with `role`; a primary is the first of a new
/// cluster (allowed to initialize), unless `role` is `primary-of-a-cluster-that-ran`.
fn labels_file(role: &str) -> String {
    let mut labels = String::from("app.kubernetes.io/name=\"db\"\n");
    let role = match role {
        "primary" => {
            labels.push_str("database.example.com/initialize=\"allowed\"\n");
            "primary"
        }
        "primary-of-a-cluster-that-ran" => "primary",
        other => other,
    };
    labels.push_str(&format!("database.example.com/role=\"{role}\"\n"));
    labels
}

fn with_pod(mut env: Vec<(&'static str, String)>, pod: &str) -> Vec<(&'static str, String)> {
    env.retain(|(k, _)| *k != "POD_NAME");
    env.push(("POD_NAME", pod.into()));
    env
}

#[test]
fn postgresql_replica_seeds_from_the_primary_as_the_replication_user() {
    let (dir, env) = pg_sandbox("pg-replica", Some("replica"));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(calls.contains("--host=db.ns.svc"), "{calls}");
    assert!(calls.contains("--username=replicator"), "{calls}");
    assert!(
        calls.contains("--write-recovery-conf") && calls.contains("--wal-method=stream"),
        "{calls}"
    );
    let pgpass = dir.join("run/pgpass");
    assert!(
        calls.contains(&format!("PGPASSFILE={}", pgpass.display())),
        "{calls}"
    );
    // .pgpass escaping: a colon and a backslash in the password.
    assert_eq!(read(&pgpass), "*:*:*:replicator:re\\:pl\\\\pw\n");
    assert_eq!(
        fs::metadata(&pgpass).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!calls.contains("pl\\pw"), "no password on a command line");
    let pgdata = dir.join("data/pgdata");
    assert_eq!(read(pgdata.join("PG_VERSION")), "15\n");
    assert!(pgdata.join("standby.signal").exists());
    assert_eq!(
        fs::metadata(&pgdata).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Run again: the data is there, nothing is copied twice.
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(out.status.success());
    assert_eq!(read(dir.join("calls")).lines().count(), 1);
}

/// The restore of `spec.bootstrap.fromBackup`: a fake operator binary that records its
/// arguments, checks that the server it restores into is not yet the data directory, and
/// fails when `$SANDBOX/restore-fails` exists.
fn pg_restore_sandbox(name: &str) -> (PathBuf, Vec<(&'static str, String)>) {
    let (dir, mut env) = pg_sandbox(name, Some("primary"));
    fake(
        &dir,
        "database-operator",
        r#"echo "database-operator $* TMPDIR=$TMPDIR" >>"$SANDBOX/calls"
if [ "$2" = choose ]; then echo "logical 20260301T020000Z"; exit 0; fi
if [ -e "$SANDBOX/data/pgdata/PG_VERSION" ]; then echo "restoring into the live data directory" >&2; exit 3; fi
if [ -e "$SANDBOX/restore-fails" ]; then echo "sha256 mismatch" >&2; exit 1; fi
touch "$SANDBOX/data/pgdata.restore/restored""#,
    );
    env.extend([
        (
            "RESTORE_BINARY",
            dir.join("bin/database-operator").display().to_string(),
        ),
        ("RESTORE_FROM_NAMESPACE", "archive".into()),
        ("RESTORE_FROM_CLUSTER", "orders-old".into()),
        ("RESTORE_BACKUP", "latest".into()),
        ("RESTORE_S3_BUCKET", "backups".into()),
        ("RESTORE_S3_ENDPOINT", "http://127.0.0.1:9000".into()),
    ]);
    (dir, env)
}

/// Runs the PostgreSQL init script with `$SANDBOX/<marker>` present (the fake that fails on it
/// fails): the script fails saying the data directory was not created, and `said`, and leaves
/// none. The marker is removed again.
fn fails_without_data(dir: &Path, env: &[(&str, String)], marker: &str, said: &[&str]) {
    fs::write(dir.join(marker), "").unwrap();
    let out = run(dir, scripts::POSTGRESQL_INIT, env);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for text in said.iter().chain(&["the data directory was not created"]) {
        assert!(stderr.contains(text), "{text}: {stderr}");
    }
    assert!(!dir.join("data/pgdata/PG_VERSION").exists());
    fs::remove_file(dir.join(marker)).unwrap();
}

#[test]
fn postgresql_primary_restores_a_backup_beside_the_data_directory_then_renames_it() {
    let (dir, env) = pg_restore_sandbox("pg-restore");
    // A failed restore leaves no data directory: the next start tries again.
    fails_without_data(&dir, &env, "restore-fails", &[]);
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    let restore = calls
        .lines()
        .rfind(|l| l.starts_with("database-operator backup restore"))
        .expect("a restore");
    for arg in [
        "--namespace=archive",
        "--cluster=orders-old",
        "--bucket=backups",
        // The id `backup choose` resolved `latest` to: a backup stored meanwhile changes nothing.
        "--backup=20260301T020000Z",
        "--user=postgres",
        "--engine=postgresql",
        "--endpoint=http://127.0.0.1:9000",
    ] {
        assert!(restore.contains(arg), "{arg} missing: {restore}");
    }
    // Into the temporary server's socket, the download on the data volume.
    assert!(
        restore.contains(&format!("--host={}", dir.join("run/init.").display())),
        "{restore}"
    );
    assert!(
        restore.contains(&format!(
            "TMPDIR={}",
            dir.join("data/pgdata.download").display()
        )),
        "{restore}"
    );
    // The restored copy became the data directory; nothing is left beside it.
    assert!(dir.join("data/pgdata/restored").exists());
    assert!(dir.join("data/pgdata/PG_VERSION").exists());
    assert!(!dir.join("data/pgdata.restore").exists());
    assert!(!dir.join("data/pgdata.download").exists());
    // Started again with its data: no second restore.
    let before = read(dir.join("calls")).lines().count();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(out.status.success());
    assert_eq!(read(dir.join("calls")).lines().count(), before);
}

/// The physical path of `spec.bootstrap.fromBackup`: `backup choose` says physical, `backup
/// unpack` writes the directory beside the data directory, a temporary server recovers it
/// (`$SANDBOX/recovery-fails`: the fake server exits at once, as one whose recovery failed).
fn pg_physical_sandbox(name: &str) -> (PathBuf, Vec<(&'static str, String)>) {
    let (dir, mut env) = pg_restore_sandbox(name);
    fake(
        &dir,
        "database-operator",
        r#"echo "database-operator $* TMPDIR=${TMPDIR:-}" >>"$SANDBOX/calls"
case $2 in
    choose) echo "physical 20260301T020000Z" ;;
    unpack)
        for arg; do
            case $arg in --data-dir=*) target=${arg#--data-dir=} ;; esac
        done
        mkdir -p "$target"
        echo 15 >"$target/PG_VERSION"
        touch "$target/backup_label" "$target/recovery.signal"
        echo '{"restored":"20260301T020000Z"}' >"$BACKUP_REPORT_FILE" ;;
    *) echo "unexpected $2" >&2; exit 9 ;;
esac"#,
    );
    fake(
        &dir,
        "postgres",
        r#"echo "postgres $*" >>"$SANDBOX/calls"
[ "$1" = --version ] && exit 0
[ -e "$SANDBOX/recovery-fails" ] && { echo "FATAL:  recovery ended before configured recovery target was reached"; exit 1; }
# A server started in the background of a script ignores SIGINT: this one ends once its SQL ran.
until [ -e "$SANDBOX/sql-done" ]; do sleep 0.1; done"#,
    );
    fake(
        &dir,
        "psql",
        r#"[ -e "$SANDBOX/recovery-fails" ] && { echo "could not connect" >&2; exit 2; }
case "$*" in
    *pg_is_in_recovery*) echo f ;;
    *pg_last_xact_replay_timestamp*) echo "2026-03-01 04:04:00+00" ;;
    *) cat >>"$SANDBOX/sql"; touch "$SANDBOX/sql-done" ;;
esac"#,
    );
    env.extend([
        ("RESTORE_TARGET_TIME", "2026-03-01T04:04:00Z".into()),
        (
            "BACKUP_REPORT_FILE",
            dir.join("report").display().to_string(),
        ),
    ]);
    (dir, env)
}

#[test]
fn postgresql_primary_recovers_a_physical_backup_to_its_target() {
    let (dir, env) = pg_physical_sandbox("pg-physical");
    // A recovery that fails leaves no data directory and no report.
    fails_without_data(
        &dir,
        &env,
        "recovery-fails",
        &["recovery ended before configured recovery target was reached"],
    );
    assert!(!dir.join("data/pgdata.restore").exists());
    assert!(!dir.join("report").exists());

    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(!calls.contains("initdb"), "no initdb: {calls}");
    let unpack = calls
        .lines()
        .rfind(|l| l.starts_with("database-operator backup unpack"))
        .expect("an unpack");
    for arg in [
        "--namespace=archive".to_owned(),
        "--cluster=orders-old".to_owned(),
        "--bucket=backups".to_owned(),
        "--backup=20260301T020000Z".to_owned(),
        "--endpoint=http://127.0.0.1:9000".to_owned(),
        format!("--data-dir={}", dir.join("data/pgdata.restore").display()),
        format!("--program={}", dir.join("bin/database-operator").display()),
        // The download on the data volume, in a directory emptied before and after.
        format!("TMPDIR={}", dir.join("data/pgdata.download").display()),
    ] {
        assert!(unpack.contains(&arg), "{arg} missing: {unpack}");
    }
    assert!(!dir.join("data/pgdata.download").exists());
    // The temporary server recovers the unpacked directory on a private socket, archiving off.
    let server = calls
        .lines()
        .rfind(|l| l.starts_with("postgres -D"))
        .expect("a temporary server");
    assert!(
        server.contains(&format!("-D {}", dir.join("data/pgdata.restore").display())),
        "{server}"
    );
    for setting in [
        "-c listen_addresses= ",
        "-c archive_mode=off",
        "-c synchronous_standby_names= ",
    ] {
        assert!(server.contains(setting), "{setting}: {server}");
    }
    let sql = read(dir.join("sql"));
    assert!(
        sql.contains("ALTER ROLE postgres PASSWORD :'postgres_password';"),
        "{sql}"
    );
    assert!(sql.contains("ALTER SYSTEM RESET ALL;"), "{sql}");
    assert!(
        !sql.contains("super:secret") && !sql.contains("adm:in-pw"),
        "{sql}"
    );
    // The recovered copy is the data directory, and the report reached the termination message.
    assert!(dir.join("data/pgdata/backup_label").exists());
    assert!(!dir.join("data/pgdata.restore").exists());
    // The point the promoted server says it reached, added to the unpack's report.
    assert_eq!(
        read(dir.join("report")),
        "{\"restored\":\"20260301T020000Z\",\"reached\":\"2026-03-01 04:04:00+00\"}\n"
    );
    let left: Vec<String> = fs::read_dir(dir.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("init."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn postgresql_primary_initializes_with_the_password_from_a_file() {
    let (dir, env) = pg_sandbox("pg-primary", Some("primary"));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(calls.contains("initdb "), "{calls}");
    assert!(calls.contains("--auth-host=scram-sha-256"), "{calls}");
    assert!(calls.contains("--data-checksums"), "{calls}");
    assert!(
        !calls.contains("super:secret"),
        "no password on a command line: {calls}"
    );
    assert_eq!(read(dir.join("pwfile-seen")), "super:secret\n");
    // The temporary server listens on no TCP address.
    assert!(calls.contains("postgres -D"), "{calls}");
    assert!(calls.contains("-c listen_addresses= "), "{calls}");
    let sql = read(dir.join("sql"));
    assert!(
        sql.contains("\\getenv repl_password REPLICATION_PASSWORD"),
        "{sql}"
    );
    assert!(
        sql.contains(
            "CREATE ROLE :\"repl_user\" WITH REPLICATION LOGIN PASSWORD :'repl_password';"
        ),
        "{sql}"
    );
    assert!(
        sql.contains("\\getenv admin_password ADMIN_PASSWORD")
            && sql.contains(
                "CREATE ROLE :\"admin_user\" WITH SUPERUSER LOGIN PASSWORD :'admin_password';"
            ),
        "the operator's role: {sql}"
    );
    assert!(
        !sql.contains("pl\\pw") && !sql.contains("adm:in-pw"),
        "the SQL reads the passwords from the environment"
    );
    // Nothing of the initialization is left in the run directory but the password file.
    let left: Vec<String> = fs::read_dir(dir.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["pgpass"]);
}

/// A PostgreSQL sandbox whose data directory holds a cluster (with `standby.signal` when
/// `standby`, and `auto_conf` as its postgresql.auto.conf).
fn pg_with_data(
    name: &str,
    role: &str,
    standby: bool,
    auto_conf: &str,
) -> (PathBuf, Vec<(&'static str, String)>, PathBuf) {
    let (dir, env) = pg_sandbox(name, Some(role));
    let pgdata = dir.join("data/pgdata");
    fs::create_dir_all(&pgdata).unwrap();
    fs::write(pgdata.join("PG_VERSION"), "15\n").unwrap();
    fs::write(pgdata.join("postgresql.auto.conf"), auto_conf).unwrap();
    if standby {
        fs::write(pgdata.join("standby.signal"), "").unwrap();
    }
    (dir, env, pgdata)
}

const SEEDED_AUTO_CONF: &str = "# Do not edit this file manually!\nwork_mem = '8MB'\nprimary_conninfo = 'user=replicator host=db.ns.svc'\n";

#[test]
fn postgresql_former_primary_is_rewound_and_starts_as_a_standby_of_the_primary() {
    let (dir, env, pgdata) = pg_with_data("pg-former-primary", "replica", false, SEEDED_AUTO_CONF);
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(pgdata.join("standby.signal").exists());
    assert!(stderr.contains("not writable"), "{stderr}");
    let calls = read(dir.join("calls"));
    let passfile = dir.join("run/admin-pgpass").display().to_string();
    let source = format!(
        "--source-server=host=db.ns.svc port=5432 user=database_operator dbname=postgres passfile={passfile}"
    );
    let pgdata_arg = format!("--target-pgdata={}", pgdata.display());
    assert_eq!(
        calls,
        format!("pg_rewind {pgdata_arg} {source} --dry-run\npg_rewind {pgdata_arg} {source}\n"),
        "a dry run, then the rewind; no crash recovery after a clean shutdown"
    );
    // A checkpoint on the primary first, as the operator's account, the SQL on stdin.
    assert_eq!(read(dir.join("sql")), "CHECKPOINT;\n");
    // The admin password reached pg_rewind through a file, which is gone afterwards.
    assert_eq!(
        read(dir.join("rewind-passfile-seen")),
        "*:*:*:database_operator:adm\\:in-pw\n"
    );
    assert!(!dir.join("run/admin-pgpass").exists());
    assert!(!calls.contains("adm:in-pw") && !stderr.contains("adm:in-pw"));
    // Streams from PRIMARY_HOST with the replication password file; other settings are kept.
    let auto = read(pgdata.join("postgresql.auto.conf"));
    let pgpass = dir.join("run/pgpass").display().to_string();
    assert_eq!(
        auto,
        format!(
            "# Do not edit this file manually!\nwork_mem = '8MB'\nprimary_conninfo = 'host=db.ns.svc port=5432 user=replicator passfile={pgpass}'\nprimary_slot_name = 'member_1'\n"
        )
    );

    // The primary keeps its data as it is.
    let (dir, env, pgdata) = pg_with_data("pg-primary-restart", "primary", false, "");
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert!(!pgdata.join("standby.signal").exists());
    assert_eq!(read(dir.join("calls")), "");
    // A standby restarting as a replica is left as it is: no rewind, its conninfo kept (its
    // slot named).
    let (dir, env, pgdata) = pg_with_data("pg-standby-restart", "replica", true, SEEDED_AUTO_CONF);
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert_eq!(read(dir.join("calls")), "");
    assert_eq!(
        read(pgdata.join("postgresql.auto.conf")),
        format!("{SEEDED_AUTO_CONF}primary_slot_name = 'member_1'\n")
    );
}

#[test]
fn postgresql_standby_on_an_older_timeline_than_the_primary_is_rewound() {
    // Stopped cleanly on timeline 1 while the primary runs timeline 2 (a promotion happened).
    let (dir, env, pgdata) = pg_with_data("pg-standby-behind", "replica", true, SEEDED_AUTO_CONF);
    fs::write(dir.join("state"), "shut down in recovery").unwrap();
    fs::write(dir.join("primary-timeline"), "2\n").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("standby on timeline 1, the primary db.ns.svc on 2"),
        "{stderr}"
    );
    let calls = read(dir.join("calls"));
    assert_eq!(calls.matches("pg_rewind").count(), 2, "{calls}");
    assert!(
        calls.lines().next().unwrap().ends_with("--dry-run"),
        "{calls}"
    );
    // A standby again (pg_rewind removed standby.signal), streaming from PRIMARY_HOST; the
    // admin password file is gone.
    assert!(pgdata.join("standby.signal").exists(), "{stderr}");
    assert!(stderr.contains("not writable"), "{stderr}");
    let pgpass = dir.join("run/pgpass").display().to_string();
    assert!(
        read(pgdata.join("postgresql.auto.conf")).contains(&format!(
            "primary_conninfo = 'host=db.ns.svc port=5432 user=replicator passfile={pgpass}'"
        )),
        "{}",
        read(pgdata.join("postgresql.auto.conf"))
    );
    assert!(!dir.join("run/admin-pgpass").exists());
    assert!(!stderr.contains("adm:in-pw"));

    // On the primary's timeline: nothing to do, one question asked.
    let (dir, env, _) = pg_with_data("pg-standby-same-tli", "replica", true, SEEDED_AUTO_CONF);
    fs::write(dir.join("state"), "shut down in recovery").unwrap();
    fs::write(dir.join("primary-timeline"), "1\n").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(out.status.success());
    assert_eq!(read(dir.join("calls")), "");
    // The primary does not answer: start as it is.
    let (dir, env, _) = pg_with_data("pg-standby-no-primary", "replica", true, SEEDED_AUTO_CONF);
    fs::write(dir.join("state"), "shut down in recovery").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(out.status.success());
    assert_eq!(read(dir.join("calls")), "");
    // Not shut down cleanly (a crash): never rewound here, the server recovers by itself.
    let (dir, env, _) = pg_with_data("pg-standby-crashed", "replica", true, SEEDED_AUTO_CONF);
    fs::write(dir.join("state"), "in archive recovery").unwrap();
    fs::write(dir.join("primary-timeline"), "2\n").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(out.status.success());
    assert_eq!(read(dir.join("calls")), "");
}

#[test]
fn postgresql_former_primary_left_unclean_gets_crash_recovery_before_the_rewind() {
    let (dir, env, pgdata) = pg_with_data("pg-former-primary-crashed", "replica", false, "");
    fs::write(dir.join("state"), "in production").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let calls = read(dir.join("calls"));
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 3, "{calls}");
    assert_eq!(
        lines[0],
        format!(
            "postgres --single -D {} -c config_file={}/postgresql.conf template1",
            pgdata.display(),
            dir.join("config").display()
        )
    );
    assert!(lines[1].starts_with("pg_rewind ") && lines[1].ends_with("--dry-run"));
    assert!(lines[2].starts_with("pg_rewind "));
    assert!(
        stderr.contains("crash recovery in single-user mode"),
        "{stderr}"
    );
    assert!(pgdata.join("standby.signal").exists());
}

#[test]
fn postgresql_former_primary_that_cannot_be_rewound_keeps_its_data_and_starts_as_a_standby() {
    for (name, file) in [("refused", "dry-run-exit"), ("failed", "rewind-exit")] {
        let (dir, env, pgdata) = pg_with_data(&format!("pg-rewind-{name}"), "replica", false, "");
        fs::write(pgdata.join("base-file"), "the data").unwrap();
        fs::write(dir.join(file), "1").unwrap();
        let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("pg_rewind from db.ns.svc {name}")),
            "{stderr}"
        );
        assert!(
            stderr.contains("not rewound: starting as a standby anyway"),
            "{stderr}"
        );
        assert_eq!(read(pgdata.join("base-file")), "the data");
        assert!(pgdata.join("standby.signal").exists());
        assert!(
            read(pgdata.join("postgresql.auto.conf"))
                .contains("primary_conninfo = 'host=db.ns.svc")
        );
        let rewinds = read(dir.join("calls")).matches("pg_rewind").count();
        assert_eq!(
            rewinds,
            if name == "refused" { 1 } else { 2 },
            "a refused dry run stops there"
        );
        assert!(!dir.join("run/admin-pgpass").exists());
    }
}

/// The labels file of a replica the operator asks to reseed with `token`.
fn reseed_labels(token: &str) -> String {
    format!(
        "{}database.example.com/reseed=\"{token}\"\n",
        labels_file("replica")
    )
}

#[test]
fn postgresql_replica_streams_through_its_own_slot_and_holds_none() {
    let (dir, env, pgdata) = pg_with_data("pg-slot", "replica", true, SEEDED_AUTO_CONF);
    // A slot left from the time it was a primary.
    fs::create_dir_all(pgdata.join("pg_replslot/member_2")).unwrap();
    fs::write(pgdata.join("pg_replslot/member_2/state"), "x").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let auto = read(pgdata.join("postgresql.auto.conf"));
    assert!(auto.ends_with("primary_slot_name = 'member_1'\n"), "{auto}");
    assert_eq!(auto.matches("primary_slot_name").count(), 1, "{auto}");
    assert_eq!(fs::read_dir(pgdata.join("pg_replslot")).unwrap().count(), 0);
    // Again: one setting, not two.
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    let auto = read(pgdata.join("postgresql.auto.conf"));
    assert_eq!(auto.matches("primary_slot_name").count(), 1, "{auto}");
    // Quarantined: it streams from nobody, through no slot.
    fs::write(dir.join("labels"), labels_file("quarantined")).unwrap();
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    let auto = read(pgdata.join("postgresql.auto.conf"));
    assert!(!auto.contains("primary_slot_name"), "{auto}");
}

#[test]
fn postgresql_replica_asked_to_reseed_discards_its_data_once_and_copies_the_primary() {
    let (dir, env, pgdata) = pg_with_data("pg-reseed", "replica", true, SEEDED_AUTO_CONF);
    fs::write(pgdata.join("base-file"), "stale").unwrap();
    // Without a request its data stays.
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert_eq!(read(pgdata.join("base-file")), "stale");
    assert_eq!(read(dir.join("calls")), "");

    fs::write(dir.join("labels"), reseed_labels("1800000100")).unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("request 1800000100"), "{stderr}");
    assert!(
        !pgdata.join("base-file").exists(),
        "the old data directory is gone"
    );
    assert_eq!(read(pgdata.join("PG_VERSION")), "15\n");
    assert!(pgdata.join("standby.signal").exists());
    let calls = read(dir.join("calls"));
    assert_eq!(calls.matches("pg_basebackup").count(), 1, "{calls}");
    assert_eq!(read(dir.join("data/pgdata.reseeded")), "1800000100\n");
    assert!(read(pgdata.join("postgresql.auto.conf")).contains("primary_slot_name = 'member_1'"));

    // The container starts again with the label still on: done already, nothing copied.
    fs::write(pgdata.join("new-file"), "fresh").unwrap();
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert_eq!(read(pgdata.join("new-file")), "fresh");
    assert_eq!(read(dir.join("calls")).matches("pg_basebackup").count(), 1);

    // A primary never discards its data, whatever its labels say.
    fs::write(
        dir.join("labels"),
        format!(
            "{}database.example.com/reseed=\"1800000200\"\n",
            labels_file("primary-of-a-cluster-that-ran")
        ),
    )
    .unwrap();
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert_eq!(read(pgdata.join("new-file")), "fresh");
}

#[test]
fn mysql_family_replica_asked_to_reseed_discards_its_data_once_and_copies_the_primary() {
    for (tools, script) in [
        (&MYSQL_TOOLS, scripts::MYSQL_INIT),
        (&MARIADB_TOOLS, scripts::MARIADB_INIT),
    ] {
        let (dir, env) = mysql_sandbox(
            &format!("reseed-{}", tools.server),
            tools,
            "db-1",
            "replica",
        );
        fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
        fs::write(dir.join("lib/data/stale"), "stale").unwrap();
        assert!(run(&dir, script, &env).status.success());
        assert!(dir.join("lib/data/stale").exists());
        assert!(
            !dir.join("calls").exists()
                || !read(dir.join("calls")).contains("dump")
                    && !read(dir.join("sql")).contains("CLONE")
        );

        fs::write(dir.join("labels"), reseed_labels("1800000100")).unwrap();
        let out = run(&dir, script, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", tools.server);
        assert!(!dir.join("lib/data/stale").exists(), "{}", tools.server);
        assert!(dir.join("lib/data/mysql").is_dir(), "{}", tools.server);
        assert_eq!(read(dir.join("lib/data.reseeded")), "1800000100\n");
        let copies = |dir: &Path| {
            let sql = fs::read_to_string(dir.join("sql")).unwrap_or_default();
            let calls = read(dir.join("calls"));
            sql.matches("CLONE INSTANCE").count() + calls.matches("dump ").count()
        };
        assert_eq!(copies(&dir), 1, "{}", tools.server);
        assert_no_password_on_a_command_line(&dir);

        // Started again with the label on: nothing copied twice.
        fs::write(dir.join("lib/data/new"), "fresh").unwrap();
        assert!(run(&dir, script, &env).status.success());
        assert!(dir.join("lib/data/new").exists());
        assert_eq!(copies(&dir), 1, "{}", tools.server);
    }
}

#[test]
fn postgresql_quarantined_member_starts_read_only_replicating_from_nobody() {
    // A former primary as much as a standby: neither is rewound nor streams.
    for standby in [false, true] {
        let (dir, env, pgdata) = pg_with_data(
            &format!("pg-quarantined-{standby}"),
            "quarantined",
            standby,
            SEEDED_AUTO_CONF,
        );
        fs::write(pgdata.join("base-file"), "the data").unwrap();
        let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("quarantined"), "{stderr}");
        assert!(pgdata.join("standby.signal").exists());
        assert_eq!(
            read(pgdata.join("postgresql.auto.conf")),
            "# Do not edit this file manually!\nwork_mem = '8MB'\nprimary_conninfo = ''\n"
        );
        assert_eq!(read(pgdata.join("base-file")), "the data");
        assert_eq!(
            read(dir.join("calls")),
            "",
            "nothing rewound, copied or removed"
        );

        // Back as a replica: the empty primary_conninfo goes, the configured one applies.
        fs::write(
            dir.join("labels"),
            "database.example.com/role=\"replica\"\n",
        )
        .unwrap();
        assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
        let auto = read(pgdata.join("postgresql.auto.conf"));
        assert!(!auto.contains("primary_conninfo = ''"), "{auto}");
    }
    // Without data there is nothing to quarantine: it says so and touches nothing.
    let (dir, env) = pg_sandbox("pg-quarantined-empty", Some("quarantined"));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("quarantined member without data"));
    assert_eq!(read(dir.join("calls")), "");
}

#[test]
fn postgresql_without_a_label_ordinal_zero_bootstraps_the_others_seed() {
    // No role label in time: ordinal 0 without data is the primary, and initializes only with
    // the operator's permission.
    let (dir, env) = pg_sandbox("pg-nolabel-0", None);
    fs::write(
        dir.join("labels"),
        "database.example.com/initialize=\"allowed\"\n",
    )
    .unwrap();
    assert!(
        run(&dir, scripts::POSTGRESQL_INIT, &with_pod(env, "db-0"))
            .status
            .success()
    );
    let calls = read(dir.join("calls"));
    assert!(
        calls.contains("initdb") && !calls.contains("pg_basebackup"),
        "{calls}"
    );
    let (dir, env) = pg_sandbox("pg-nolabel-0-not-allowed", None);
    let mut env = with_pod(env, "db-0");
    env.push(("EMPTY_PRIMARY_WAIT_SECONDS", "0".into()));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(!out.status.success());
    assert_eq!(read(dir.join("calls")), "");
    let (dir, env) = pg_sandbox("pg-nolabel-1", None);
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    let calls = read(dir.join("calls"));
    assert!(
        calls.contains("pg_basebackup") && !calls.contains("initdb"),
        "{calls}"
    );
}

#[test]
fn postgresql_refuses_a_data_directory_it_does_not_recognise() {
    for role in ["replica", "primary"] {
        let (dir, env) = pg_sandbox(&format!("pg-garbage-{role}"), Some(role));
        fs::create_dir_all(dir.join("data/pgdata")).unwrap();
        fs::write(dir.join("data/pgdata/precious"), "keep me").unwrap();
        let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to touch it"));
        assert_eq!(read(dir.join("data/pgdata/precious")), "keep me");
        assert_eq!(read(dir.join("calls")), "");
    }
}

// ---------------------------------------------------------------------------------------------
// mysql and mariadb init.sh

/// The MySQL-family binaries an init script calls.
struct Tools {
    server: &'static str,
    admin: &'static str,
    client: &'static str,
}

const MYSQL_TOOLS: Tools = Tools {
    server: "mysqld",
    admin: "mysqladmin",
    client: "mysql",
};

const MARIADB_TOOLS: Tools = Tools {
    server: "mariadbd",
    admin: "mariadb-admin",
    client: "mariadb",
};

/// A sandbox with a fake server (initializing creates the data directory; running it returns
/// at once), admin tool (always answers), client (records its SQL; a CLONE lays out the copy)
/// and, for MariaDB, `mariadb-install-db` and `mariadb-dump`.
fn mysql_sandbox(
    name: &str,
    tools: &Tools,
    pod: &str,
    role: &str,
) -> (PathBuf, Vec<(&'static str, String)>) {
    let dir = sandbox(name);
    fake(
        &dir,
        tools.server,
        r#"echo "server $*" >>"$SANDBOX/calls"
for arg; do
    case $arg in --defaults-file=*) defaults=${arg#--defaults-file=} ;; esac
done
datadir=$(sed -n 's/^datadir = //p' "$defaults" | tail -n 1)
case "$*" in *--initialize-insecure*) mkdir -p "$datadir/mysql" ;; esac"#,
    );
    fake(&dir, tools.admin, r#"echo "admin $*" >>"$SANDBOX/calls""#);
    fake(
        &dir,
        tools.client,
        r#"echo "client $*" >>"$SANDBOX/calls"
case "$*" in *Ssl_version*)
    # The question whether the primary serves TLS: FAKE_TLS is its answer, FAKE_TLS_FAILS
    # makes it fail.
    [ -z "${FAKE_TLS_FAILS:-}" ] || { echo "ERROR 2013: lost connection" >&2; exit 1; }
    [ -z "${FAKE_TLS:-}" ] || printf 'Ssl_version\t%s\n' "$FAKE_TLS"
    exit 0 ;;
esac
sql=$(cat)
printf '%s\n' "$sql" >>"$SANDBOX/sql"
case $sql in *"CLONE INSTANCE"*) mkdir -p "$SEED_DIR/mysql" ;; esac"#,
    );
    fake(
        &dir,
        "mariadb-install-db",
        r#"echo "install-db $*" >>"$SANDBOX/calls"
for arg; do
    case $arg in --datadir=*) mkdir -p "${arg#--datadir=}/mysql" ;; esac
done"#,
    );
    fake(
        &dir,
        "mariadb-dump",
        r#"echo "dump $*" >>"$SANDBOX/calls"
echo '-- the dump'"#,
    );
    for d in ["config", "run", "lib"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    let data = dir.join("lib/data").display().to_string();
    fs::write(
        dir.join("config/my.cnf"),
        format!("[mysqld]\ndatadir = {data}\ngtid_mode = ON\n"),
    )
    .unwrap();
    fs::write(dir.join("labels"), labels_file(role)).unwrap();
    let path = |p: &str| dir.join(p).display().to_string();
    let password_env = if tools.server == "mariadbd" {
        "MARIADB_ROOT_PASSWORD"
    } else {
        "MYSQL_ROOT_PASSWORD"
    };
    let env = vec![
        ("POD_NAME", pod.into()),
        ("PRIMARY_HOST", "db.ns.svc".into()),
        ("HEADLESS_DOMAIN", "db-headless.ns.svc".into()),
        (password_env, r"it's\secret".into()),
        ("REPLICATION_USER", "replicator".into()),
        ("REPLICATION_PASSWORD", "repl'pw".into()),
        ("ADMIN_USER", "database_operator".into()),
        ("ADMIN_PASSWORD", "admin'secret".into()),
        ("CONFIG_DIR", path("config")),
        ("PODINFO_LABELS", path("labels")),
        ("RUN_DIR", path("run")),
        ("DATA_DIR", data),
        ("SEED_DIR", path("lib/seed")),
        ("ROLE_WAIT_SECONDS", "0".into()),
    ];
    (dir, env)
}

fn assert_no_password_on_a_command_line(dir: &Path) {
    let calls = read(dir.join("calls"));
    assert!(
        !calls.contains("secret") && !calls.contains("repl'pw"),
        "a password is on a command line: {calls}"
    );
}

#[test]
fn mysql_family_member_settings_follow_ordinal_and_role() {
    for (tools, script, read_only) in [
        (&MYSQL_TOOLS, scripts::MYSQL_INIT, "super_read_only = ON"),
        (&MARIADB_TOOLS, scripts::MARIADB_INIT, "read_only = ON"),
    ] {
        let (dir, env) = mysql_sandbox(
            &format!("{}-settings", tools.server),
            tools,
            "db-2",
            "replica",
        );
        fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
        let out = run(&dir, script, &env);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cnf = read(dir.join("run/my.cnf"));
        assert!(cnf.starts_with("[mysqld]\ndatadir = "), "{cnf}");
        assert!(cnf.contains("gtid_mode = ON"), "the shared settings: {cnf}");
        assert!(cnf.contains("server_id = 102"), "{cnf}");
        assert!(
            cnf.contains("report_host = db-2.db-headless.ns.svc"),
            "{cnf}"
        );
        assert!(cnf.contains(read_only), "{cnf}");
        assert_eq!(read(dir.join("calls")), "", "data present: nothing to seed");

        // A member with data and no known role starts read-only.
        let (dir, env) = mysql_sandbox(
            &format!("{}-nolabel", tools.server),
            tools,
            "db-0",
            "unknown",
        );
        fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
        assert!(run(&dir, script, &env).status.success());
        assert!(read(dir.join("run/my.cnf")).contains(read_only));

        let (dir, env) = mysql_sandbox(
            &format!("{}-primary-settings", tools.server),
            tools,
            "db-0",
            "primary",
        );
        fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
        assert!(run(&dir, script, &env).status.success());
        let cnf = read(dir.join("run/my.cnf"));
        assert!(
            cnf.contains("server_id = 100") && !cnf.contains("read_only"),
            "{cnf}"
        );
    }
}

#[test]
fn mysql_family_quarantined_member_starts_read_only_without_replication() {
    for (tools, script, read_only, no_replication) in [
        (
            &MYSQL_TOOLS,
            scripts::MYSQL_INIT,
            "super_read_only = ON",
            "skip_replica_start = ON",
        ),
        (
            &MARIADB_TOOLS,
            scripts::MARIADB_INIT,
            "read_only = ON",
            "skip-slave-start",
        ),
    ] {
        let (dir, env) = mysql_sandbox(
            &format!("{}-quarantined", tools.server),
            tools,
            "db-1",
            "quarantined",
        );
        fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
        fs::write(dir.join("lib/data/ibdata1"), "keep me").unwrap();
        let out = run(&dir, script, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("quarantined"), "{stderr}");
        let cnf = read(dir.join("run/my.cnf"));
        assert!(
            cnf.contains(read_only) && cnf.contains(no_replication),
            "{cnf}"
        );
        assert_eq!(read(dir.join("calls")), "", "nothing seeded");
        assert_eq!(read(dir.join("lib/data/ibdata1")), "keep me");

        // Back as a replica: replication starts with the server again.
        fs::write(
            dir.join("labels"),
            "database.example.com/role=\"replica\"\n",
        )
        .unwrap();
        assert!(run(&dir, script, &env).status.success());
        let cnf = read(dir.join("run/my.cnf"));
        assert!(
            cnf.contains(read_only) && !cnf.contains(no_replication),
            "{cnf}"
        );

        // Without data: refused, nothing created.
        let (dir, env) = mysql_sandbox(
            &format!("{}-quarantined-empty", tools.server),
            tools,
            "db-1",
            "quarantined",
        );
        let out = run(&dir, script, &env);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("quarantined member without data"));
        assert_eq!(read(dir.join("calls")), "");
    }
}

#[test]
fn mysql_family_refuses_a_data_directory_it_does_not_recognise() {
    for (tools, script) in [
        (&MYSQL_TOOLS, scripts::MYSQL_INIT),
        (&MARIADB_TOOLS, scripts::MARIADB_INIT),
    ] {
        for role in ["replica", "primary"] {
            let (dir, env) = mysql_sandbox(
                &format!("{}-garbage-{role}", tools.server),
                tools,
                "db-1",
                role,
            );
            fs::create_dir_all(dir.join("lib/data")).unwrap();
            fs::write(dir.join("lib/data/ibdata1"), "keep me").unwrap();
            let out = run(&dir, script, &env);
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to touch it"));
            assert_eq!(read(dir.join("lib/data/ibdata1")), "keep me");
            assert_eq!(read(dir.join("sql")), "");
        }
    }
}

#[test]
fn mysql_primary_initializes_and_creates_its_users() {
    let (dir, env) = mysql_sandbox("mysql-primary", &MYSQL_TOOLS, "db-0", "primary");
    let out = run(&dir, scripts::MYSQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("lib/data/mysql").is_dir());
    let calls = read(dir.join("calls"));
    assert!(calls.contains("--initialize-insecure"), "{calls}");
    assert!(calls.contains("--skip-networking"), "{calls}");
    assert_no_password_on_a_command_line(&dir);
    let sql = read(dir.join("sql"));
    let grant = format!(
        "GRANT {} ON *.* TO 'database_operator'@'%';",
        database_operator_engine::of(database_operator_api::Engine::Mysql)
            .operator_privileges()
            .expect("a list")
    );
    for statement in [
        "SET SESSION sql_log_bin = 0;",
        r"ALTER USER root@localhost IDENTIFIED BY 'it\'s\\secret';",
        r"CREATE USER root@'%' IDENTIFIED BY 'it\'s\\secret';",
        r"CREATE USER 'replicator'@'%' IDENTIFIED BY 'repl\'pw';",
        "GRANT REPLICATION SLAVE, BACKUP_ADMIN ON *.* TO 'replicator'@'%';",
        "CREATE USER mysql@localhost IDENTIFIED WITH auth_socket;",
        r"CREATE USER 'database_operator'@'%' IDENTIFIED BY 'admin\'secret';",
        grant.as_str(),
    ] {
        assert!(sql.contains(statement), "{statement} missing in {sql}");
    }
    assert!(
        !sql.contains("TO 'database_operator'@'%' WITH GRANT OPTION"),
        "{sql}"
    );
}

#[test]
fn mysql_replica_clones_then_replicates_with_auto_positioning() {
    let (dir, env) = mysql_sandbox("mysql-clone", &MYSQL_TOOLS, "db-1", "replica");
    let out = run(&dir, scripts::MYSQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.join("lib/data/mysql").is_dir(),
        "the clone became the data directory"
    );
    assert!(!dir.join("lib/seed").exists());
    let sql = read(dir.join("sql"));
    let seed = dir.join("lib/seed").display().to_string();
    assert!(
        sql.contains("SET GLOBAL clone_valid_donor_list = 'db.ns.svc:3306';"),
        "{sql}"
    );
    assert!(
        sql.contains(&format!(r"CLONE INSTANCE FROM 'replicator'@'db.ns.svc':3306 IDENTIFIED BY 'repl\'pw' DATA DIRECTORY = '{seed}';")),
        "{sql}"
    );
    assert!(sql.contains("CHANGE REPLICATION SOURCE TO"), "{sql}");
    assert!(sql.contains("SOURCE_USER = 'replicator'"), "{sql}");
    assert!(sql.contains(r"SOURCE_PASSWORD = 'repl\'pw'"), "{sql}");
    assert!(sql.contains("SOURCE_AUTO_POSITION = 1"), "{sql}");
    assert!(
        !sql.contains("MASTER"),
        "8.4 removed the MASTER statements: {sql}"
    );
    let calls = read(dir.join("calls"));
    assert!(calls.contains("--skip-replica-start"), "{calls}");
    assert_no_password_on_a_command_line(&dir);
    // The credential files are gone with the work directory.
    let left: Vec<String> = fs::read_dir(dir.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["my.cnf"]);
}

#[test]
fn mariadb_primary_initializes_and_creates_its_users() {
    let (dir, env) = mysql_sandbox("mariadb-primary", &MARIADB_TOOLS, "db-0", "primary");
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(calls.contains("install-db"), "{calls}");
    assert!(calls.contains("--auth-root-socket-user=mysql"), "{calls}");
    assert_no_password_on_a_command_line(&dir);
    let sql = read(dir.join("sql"));
    let grant = format!(
        "GRANT {} ON *.* TO 'database_operator'@'%';",
        database_operator_engine::of(database_operator_api::Engine::Mariadb)
            .operator_privileges()
            .expect("a list")
    );
    for statement in [
        "SET SESSION sql_log_bin = 0;",
        r"ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('it\'s\\secret') OR unix_socket;",
        r"CREATE USER 'replicator'@'%' IDENTIFIED BY 'repl\'pw';",
        "GRANT REPLICATION SLAVE ON *.* TO 'replicator'@'%';",
        r"CREATE USER 'database_operator'@'%' IDENTIFIED BY 'admin\'secret';",
        grant.as_str(),
    ] {
        assert!(sql.contains(statement), "{statement} missing in {sql}");
    }
    assert!(
        !sql.contains("ALL PRIVILEGES ON *.* TO 'database_operator'"),
        "{sql}"
    );
}

/// A primary that serves TLS may refuse plain connections: the new replica's channel uses TLS.
/// A question that gets no answer fails the init (it starts again), never a plain channel.
#[test]
fn mariadb_replica_replicates_over_tls_from_a_primary_that_serves_it() {
    let (dir, mut env) = mysql_sandbox("mariadb-replica-tls", &MARIADB_TOOLS, "db-1", "replica");
    env.push(("FAKE_TLS", "TLSv1.3".into()));
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sql = read(dir.join("sql"));
    assert!(sql.contains("MASTER_SSL = 1,"), "{sql}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("the primary serves TLS"));

    let (dir, mut env) = mysql_sandbox(
        "mariadb-replica-tls-unknown",
        &MARIADB_TOOLS,
        "db-1",
        "replica",
    );
    env.push(("FAKE_TLS_FAILS", "1".into()));
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("could not ask db.ns.svc whether it serves TLS"),
        "{said}"
    );
    assert!(
        !read(dir.join("sql")).contains("CHANGE MASTER"),
        "no channel set up"
    );
}

#[test]
fn mariadb_replica_loads_a_consistent_dump_then_replicates_by_gtid() {
    let (dir, env) = mysql_sandbox("mariadb-replica", &MARIADB_TOOLS, "db-1", "replica");
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.join("lib/data/mysql").is_dir(),
        "the copy became the data directory"
    );
    assert!(!dir.join("lib/seed").exists());
    let calls = read(dir.join("calls"));
    let dump = calls
        .lines()
        .find(|l| l.starts_with("dump "))
        .expect("a dump");
    for flag in [
        "--host=db.ns.svc",
        "--single-transaction",
        "--gtid",
        "--master-data=1",
        "--all-databases",
        "--defaults-extra-file=",
    ] {
        assert!(dump.contains(flag), "{flag} missing: {dump}");
    }
    assert_no_password_on_a_command_line(&dir);
    let sql = read(dir.join("sql"));
    let load = sql
        .find("SET SESSION sql_log_bin = 0;\n-- the dump")
        .expect("the dump, off the binlog");
    let change = sql.find("CHANGE MASTER TO").expect("CHANGE MASTER");
    assert!(load < change, "{sql}");
    assert!(sql.contains("MASTER_HOST = 'db.ns.svc'"), "{sql}");
    assert!(sql.contains("MASTER_USER = 'replicator'"), "{sql}");
    assert!(sql.contains(r"MASTER_PASSWORD = 'repl\'pw'"), "{sql}");
    assert!(sql.contains("MASTER_USE_GTID = slave_pos"), "{sql}");
    // A primary without TLS (of an earlier template) is replicated from plainly.
    assert!(sql.contains("MASTER_SSL = 0,"), "{sql}");
    let left: Vec<String> = fs::read_dir(dir.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["my.cnf"], "the credential files are gone");
}

#[test]
fn mariadb_primary_restores_a_backup_beside_the_data_directory_then_renames_it() {
    let (dir, mut env) = mysql_sandbox("mariadb-restore", &MARIADB_TOOLS, "db-0", "primary");
    fake(
        &dir,
        "database-operator",
        r#"echo "database-operator $* TMPDIR=$TMPDIR" >>"$SANDBOX/calls"
if [ -e "$SANDBOX/lib/data/mysql" ]; then echo "restoring into the live data directory" >&2; exit 3; fi
if [ -e "$SANDBOX/restore-fails" ]; then echo "sha256 mismatch" >&2; exit 1; fi
touch "$SANDBOX/lib/restore/restored""#,
    );
    env.extend([
        (
            "RESTORE_BINARY",
            dir.join("bin/database-operator").display().to_string(),
        ),
        ("RESTORE_DIR", dir.join("lib/restore").display().to_string()),
        ("RESTORE_FROM_NAMESPACE", "archive".into()),
        ("RESTORE_FROM_CLUSTER", "orders-old".into()),
        ("RESTORE_BACKUP", "latest".into()),
        ("RESTORE_S3_BUCKET", "backups".into()),
        ("RESTORE_S3_ENDPOINT", "http://127.0.0.1:9000".into()),
    ]);
    // A failed restore leaves no data directory: the next start tries again.
    fs::write(dir.join("restore-fails"), "").unwrap();
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the data directory was not created"),
        "{stderr}"
    );
    assert!(!dir.join("lib/data/mysql").exists());
    fs::remove_file(dir.join("restore-fails")).unwrap();
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    let restore = calls
        .lines()
        .rfind(|l| l.starts_with("database-operator backup restore"))
        .expect("a restore");
    for arg in [
        "--namespace=archive",
        "--cluster=orders-old",
        "--bucket=backups",
        "--backup=latest",
        "--user=mysql",
        "--engine=mariadb",
        "--endpoint=http://127.0.0.1:9000",
    ] {
        assert!(restore.contains(arg), "{arg} missing: {restore}");
    }
    // Into the temporary server's socket, which runs on the side directory.
    assert!(
        restore.contains(&format!("--host={}", dir.join("run/init.").display())),
        "{restore}"
    );
    assert!(restore.contains("/mysqld.sock"), "{restore}");
    let server = calls
        .lines()
        .rfind(|l| l.starts_with("server ") && l.contains("--skip-networking"))
        .expect("a temporary server");
    let defaults = server
        .split_whitespace()
        .find_map(|a| a.strip_prefix("--defaults-file="))
        .expect("its option file");
    assert!(defaults.ends_with("/restore.cnf"), "{server}");
    // The users exist before the restore, which leaves them alone (the operator's account
    // keeps this cluster's password).
    let sql = read(dir.join("sql"));
    assert!(sql.contains("CREATE USER 'database_operator'@'%'"), "{sql}");
    // The restored copy became the data directory; nothing is left beside it.
    assert!(dir.join("lib/data/restored").exists());
    assert!(dir.join("lib/data/mysql").is_dir());
    assert!(!dir.join("lib/restore").exists());
    assert!(!dir.join("lib/data.download").exists());
    assert_no_password_on_a_command_line(&dir);
    // Started again with its data: no second restore.
    let before = read(dir.join("calls")).lines().count();
    let out = run(&dir, scripts::MARIADB_INIT, &env);
    assert!(out.status.success());
    assert_eq!(read(dir.join("calls")).lines().count(), before);
}

#[test]
fn a_primary_whose_volume_came_back_empty_never_initializes_a_new_database() {
    // PostgreSQL: the label says primary, the volume is empty, and the cluster has run (no
    // permission): nothing is created, the script says why.
    let (dir, mut env) = pg_sandbox("pg-empty-primary", Some("primary-of-a-cluster-that-ran"));
    env.push(("EMPTY_PRIMARY_WAIT_SECONDS", "0".into()));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("this cluster has held data"), "{stderr}");
    assert_eq!(read(dir.join("calls")), "");
    assert!(!dir.join("data/pgdata").exists());
    // MySQL and MariaDB the same.
    for (tools, script, name) in [
        (&MYSQL_TOOLS, scripts::MYSQL_INIT, "mysql-empty-primary"),
        (
            &MARIADB_TOOLS,
            scripts::MARIADB_INIT,
            "mariadb-empty-primary",
        ),
    ] {
        let (dir, mut env) = mysql_sandbox(name, tools, "db-0", "primary-of-a-cluster-that-ran");
        env.push(("EMPTY_PRIMARY_WAIT_SECONDS", "0".into()));
        let out = run(&dir, script, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains("this cluster has held data"),
            "{name}: {stderr}"
        );
        assert!(!dir.join("lib/data/mysql").exists(), "{name} initialized");
        assert!(!read(dir.join("calls")).contains("initialize"), "{name}");
    }
}

#[test]
fn an_empty_primary_that_the_operator_makes_a_replica_is_seeded_from_the_new_primary() {
    let (dir, mut env) = pg_sandbox(
        "pg-empty-primary-seeded",
        Some("primary-of-a-cluster-that-ran"),
    );
    env.push(("EMPTY_PRIMARY_WAIT_SECONDS", "30".into()));
    let labels = dir.join("labels");
    // The operator fails over and labels this member a replica while the script waits.
    let relabel = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(3));
        fs::write(labels, labels_file("replica")).unwrap();
    });
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    relabel.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let calls = read(dir.join("calls"));
    assert!(
        calls.contains("pg_basebackup") && !calls.contains("initdb"),
        "{calls}"
    );
    assert!(stderr.contains("this cluster has held data"), "{stderr}");
}
