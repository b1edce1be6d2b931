//! The rendered shell scripts: `shellcheck` clean, and doing what they say when run with fake
//! database and S3 tools (no network, no database: every tool they call is a stub that records
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
    for cluster in [common::mysql(), common::postgresql()] {
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
    assert_eq!(
        checked, 4,
        "expected init.sh and backup.sh for both engines"
    );
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
// backup.sh

fn backup_sandbox(name: &str, dump_exit: i32) -> PathBuf {
    let dir = sandbox(name);
    fake(
        &dir,
        "mysqldump",
        &format!("echo \"mysqldump $*\" >>\"$SANDBOX/calls\"\necho '-- dump'\nexit {dump_exit}"),
    );
    fake(
        &dir,
        "pg_dumpall",
        "echo \"pg_dumpall $*\" >>\"$SANDBOX/calls\"\necho '-- dump'",
    );
    fake(
        &dir,
        "aws",
        r#"echo "aws $*" >>"$SANDBOX/calls"
for last; do :; done
case "$*" in
    *"s3 cp - "*)
        gzip -dc >"$SANDBOX/uploaded"
        echo "${last#s3://backups/}" >>"$SANDBOX/keys"
        ;;
    *"s3api list-objects-v2"*) tr '\n' '\t' <"$SANDBOX/keys" ;;
esac"#,
    );
    fs::write(
        dir.join("keys"),
        "ns/db/20260103T020000Z.sql.gz\nns/db/notes.txt\nns/db/20260101T020000Z.sql.gz\nns/db/20260104T020000Z.sql.gz\nns/db/20260102T020000Z.sql.gz\n",
    )
    .unwrap();
    dir
}

fn backup_env(engine: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ENGINE", engine.into()),
        ("BACKUP_HOST", "db-replicas.ns.svc".into()),
        ("DB_PASSWORD", "s3cr3t".into()),
        ("S3_BUCKET", "backups".into()),
        ("S3_PREFIX", "ns/db/".into()),
        ("RETENTION", "2".into()),
        ("S3_ENDPOINT", "http://127.0.0.1:9".into()),
    ]
}

#[test]
fn backup_dumps_uploads_and_keeps_the_newest() {
    let dir = backup_sandbox("backup-ok", 0);
    let out = run(&dir, scripts::BACKUP, &backup_env("mysql"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(
        calls.contains(
            "mysqldump --host=db-replicas.ns.svc --port=3306 --user=root --single-transaction"
        ),
        "{calls}"
    );
    assert!(
        !calls.contains("s3cr3t"),
        "the password must not be on a command line"
    );
    assert_eq!(read(dir.join("uploaded")), "-- dump\n");
    assert!(
        calls.contains("aws --endpoint-url http://127.0.0.1:9 s3 cp - s3://backups/ns/db/"),
        "{calls}"
    );
    let removed: Vec<&str> = calls.lines().filter(|l| l.contains(" s3 rm ")).collect();
    assert_eq!(
        removed,
        [
            "aws --endpoint-url http://127.0.0.1:9 s3 rm s3://backups/ns/db/20260101T020000Z.sql.gz",
            "aws --endpoint-url http://127.0.0.1:9 s3 rm s3://backups/ns/db/20260102T020000Z.sql.gz",
            "aws --endpoint-url http://127.0.0.1:9 s3 rm s3://backups/ns/db/20260103T020000Z.sql.gz",
        ],
        "{calls}"
    );
}

#[test]
fn backup_failure_removes_the_partial_upload_and_prunes_nothing() {
    let dir = backup_sandbox("backup-fail", 3);
    let out = run(&dir, scripts::BACKUP, &backup_env("mysql"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the dump failed (exit status 3)"));
    let calls = read(dir.join("calls"));
    assert!(!calls.contains("list-objects"), "{calls}");
    let removed: Vec<&str> = calls.lines().filter(|l| l.contains(" s3 rm ")).collect();
    assert_eq!(removed.len(), 1, "{calls}");
    assert!(
        removed[0].ends_with(".sql.gz") && !removed[0].contains("20260101"),
        "{calls}"
    );
}

#[test]
fn backup_of_postgresql_uses_pg_dumpall() {
    let dir = backup_sandbox("backup-pg", 0);
    let mut env = backup_env("postgresql");
    env.retain(|(k, _)| *k != "S3_ENDPOINT");
    env.push(("RETENTION", "10".into()));
    let out = run(&dir, scripts::BACKUP, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(
        calls.contains("pg_dumpall --host=db-replicas.ns.svc --port=5432 --username=postgres"),
        "{calls}"
    );
    assert!(calls.contains("aws s3 cp - s3://backups/ns/db/"), "{calls}");
    assert!(
        !calls.contains(" s3 rm "),
        "nothing to prune below retention: {calls}"
    );
    assert!(
        calls.contains("list-objects-v2 --bucket backups --prefix ns/db/"),
        "{calls}"
    );
}

// ---------------------------------------------------------------------------------------------
// postgresql init.sh

fn pg_sandbox(name: &str, label: Option<&str>) -> (PathBuf, Vec<(&'static str, String)>) {
    let dir = sandbox(name);
    fake(
        &dir,
        "pg_basebackup",
        r#"echo "pg_basebackup $*" >>"$SANDBOX/calls"
for arg; do
    case $arg in --pgdata=*) target=${arg#--pgdata=} ;; esac
done
mkdir -p "$target"
echo 16 >"$target/PG_VERSION"
touch "$target/standby.signal""#,
    );
    fs::create_dir_all(dir.join("data")).unwrap();
    if let Some(role) = label {
        fs::write(
            dir.join("labels"),
            format!(
                "app.kubernetes.io/name=\"postgresql\"\ndatabase.example.com/role=\"{role}\"\n"
            ),
        )
        .unwrap();
    }
    let env = vec![
        ("POD_NAME", "db-1".into()),
        ("PRIMARY_HOST", "db.ns.svc".into()),
        ("PGDATA", dir.join("data/pgdata").display().to_string()),
        ("PGPASSWORD", "pw".into()),
        ("PODINFO_LABELS", dir.join("labels").display().to_string()),
        ("ROLE_WAIT_SECONDS", "0".into()),
    ];
    (dir, env)
}

#[test]
fn postgresql_replica_seeds_from_the_primary() {
    let (dir, env) = pg_sandbox("pg-replica", Some("replica"));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = read(dir.join("calls"));
    assert!(calls.contains("--host=db.ns.svc"), "{calls}");
    assert!(
        calls.contains("--write-recovery-conf") && calls.contains("--wal-method=stream"),
        "{calls}"
    );
    let pgdata = dir.join("data/pgdata");
    assert_eq!(read(pgdata.join("PG_VERSION")), "16\n");
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

#[test]
fn postgresql_primary_is_left_to_initdb() {
    let (dir, env) = pg_sandbox("pg-primary", Some("primary"));
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(dir.join("calls")), "");
}

#[test]
fn postgresql_without_a_label_ordinal_zero_bootstraps_the_others_seed() {
    let (dir, mut env) = pg_sandbox("pg-nolabel-0", None);
    env.retain(|(k, _)| *k != "POD_NAME");
    env.push(("POD_NAME", "db-0".into()));
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert_eq!(read(dir.join("calls")), "");
    let (dir, env) = pg_sandbox("pg-nolabel-1", None);
    assert!(run(&dir, scripts::POSTGRESQL_INIT, &env).status.success());
    assert!(read(dir.join("calls")).contains("pg_basebackup"));
}

#[test]
fn postgresql_refuses_a_data_directory_it_does_not_recognise() {
    let (dir, env) = pg_sandbox("pg-garbage", Some("replica"));
    fs::create_dir_all(dir.join("data/pgdata")).unwrap();
    fs::write(dir.join("data/pgdata/precious"), "keep me").unwrap();
    let out = run(&dir, scripts::POSTGRESQL_INIT, &env);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to touch it"));
    assert_eq!(read(dir.join("data/pgdata/precious")), "keep me");
    assert_eq!(read(dir.join("calls")), "");
}

// ---------------------------------------------------------------------------------------------
// mysql init.sh

fn mysql_sandbox(name: &str, pod: &str, role: &str) -> (PathBuf, Vec<(&'static str, String)>) {
    let dir = sandbox(name);
    // A fake server: initializing creates the data directory; running it returns at once.
    fake(
        &dir,
        "mysqld",
        r#"echo "mysqld $*" >>"$SANDBOX/calls"
for arg; do
    case $arg in --datadir=*) datadir=${arg#--datadir=} ;; esac
done
case "$*" in *--initialize-insecure*) mkdir -p "$datadir/mysql" ;; esac"#,
    );
    fake(
        &dir,
        "mysqladmin",
        r#"echo "mysqladmin $*" >>"$SANDBOX/calls""#,
    );
    fake(
        &dir,
        "mysql",
        r#"sql=$(cat)
printf '%s\n' "$sql" >>"$SANDBOX/sql"
case $sql in *"CLONE INSTANCE"*) mkdir -p "$SEED_DIR/mysql" ;; esac"#,
    );
    fs::create_dir_all(dir.join("config")).unwrap();
    fs::create_dir_all(dir.join("conf.d")).unwrap();
    fs::create_dir_all(dir.join("lib")).unwrap();
    fs::write(dir.join("config/my.cnf"), "[mysqld]\ngtid_mode = ON\n").unwrap();
    fs::write(
        dir.join("labels"),
        format!("database.example.com/role=\"{role}\"\n"),
    )
    .unwrap();
    let path = |p: &str| dir.join(p).display().to_string();
    let env = vec![
        ("POD_NAME", pod.into()),
        ("PRIMARY_HOST", "db.ns.svc".into()),
        ("HEADLESS_DOMAIN", "db-headless.ns.svc".into()),
        ("MYSQL_ROOT_PASSWORD", r"it's\secret".into()),
        ("CONFIG_DIR", path("config")),
        ("PODINFO_LABELS", path("labels")),
        ("CONF_D", path("conf.d")),
        ("DATA_DIR", path("lib/data")),
        ("SEED_DIR", path("lib/seed")),
        ("ROLE_WAIT_SECONDS", "0".into()),
    ];
    (dir, env)
}

#[test]
fn mysql_member_settings_follow_ordinal_and_role() {
    let (dir, env) = mysql_sandbox("mysql-settings", "db-2", "replica");
    fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
    let out = run(&dir, scripts::MYSQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = read(dir.join("conf.d/20-member.cnf"));
    assert!(member.contains("server_id = 102"), "{member}");
    assert!(
        member.contains("report_host = db-2.db-headless.ns.svc"),
        "{member}"
    );
    assert!(member.contains("super_read_only = ON"), "{member}");
    assert_eq!(
        read(dir.join("conf.d/10-database-operator.cnf")),
        "[mysqld]\ngtid_mode = ON\n"
    );
    assert_eq!(read(dir.join("calls")), "", "data present: nothing to seed");

    let (dir, env) = mysql_sandbox("mysql-primary", "db-0", "primary");
    let out = run(&dir, scripts::MYSQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = read(dir.join("conf.d/20-member.cnf"));
    assert!(
        member.contains("server_id = 100") && !member.contains("read_only"),
        "{member}"
    );
    assert_eq!(
        read(dir.join("calls")),
        "",
        "an empty primary is initialized by the server itself"
    );
}

#[test]
fn mysql_replica_clones_then_replicates_with_auto_positioning() {
    let (dir, env) = mysql_sandbox("mysql-clone", "db-1", "replica");
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
        sql.contains("INSTALL PLUGIN clone SONAME 'mysql_clone.so';"),
        "{sql}"
    );
    assert!(
        sql.contains("SET GLOBAL clone_valid_donor_list = 'db.ns.svc:3306';"),
        "{sql}"
    );
    assert!(
        sql.contains(&format!(r"CLONE INSTANCE FROM 'root'@'db.ns.svc':3306 IDENTIFIED BY 'it\'s\\secret' DATA DIRECTORY = '{seed}';")),
        "{sql}"
    );
    assert!(sql.contains(r"SOURCE_PASSWORD = 'it\'s\\secret'"), "{sql}");
    assert!(sql.contains("SOURCE_AUTO_POSITION = 1"), "{sql}");
    let calls = read(dir.join("calls"));
    assert!(calls.contains("--skip-replica-start"), "{calls}");
    assert!(
        !calls.contains("secret"),
        "the password must not be on a command line: {calls}"
    );
}

#[test]
fn mysql_refuses_a_data_directory_it_does_not_recognise() {
    let (dir, env) = mysql_sandbox("mysql-garbage", "db-1", "replica");
    fs::create_dir_all(dir.join("lib/data")).unwrap();
    fs::write(dir.join("lib/data/ibdata1"), "keep me").unwrap();
    let out = run(&dir, scripts::MYSQL_INIT, &env);
    assert!(!out.status.success());
    assert_eq!(read(dir.join("lib/data/ibdata1")), "keep me");
    assert_eq!(read(dir.join("sql")), "");
}

#[test]
fn mysql_without_a_label_existing_data_starts_read_only() {
    let (dir, env) = mysql_sandbox("mysql-nolabel", "db-0", "unknown");
    fs::create_dir_all(dir.join("lib/data/mysql")).unwrap();
    let out = run(&dir, scripts::MYSQL_INIT, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(read(dir.join("conf.d/20-member.cnf")).contains("super_read_only = ON"));
}
