//! Password rotation on real servers (process nodes): the referenced Secret changes and the
//! operator applies the new password inside the running database, on its primary, with its own
//! account. One two-member cluster per engine (PostgreSQL, MariaDB, MySQL), all three at once,
//! each with `spec.backup` to the local S3 server: the new password works and the old one fails
//! (MySQL: both work for `spec.passwordRotation.graceSeconds`, then only the new one), on the
//! replica too; no pod restarted or replaced; a session opened before the change keeps working;
//! `status.password` and `PasswordApplied` say what happened without the value; the next backup
//! succeeds. On PostgreSQL, a Secret without the key leaves the database as it is, with a
//! condition naming the Secret and the key.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::DatabaseCluster;
use database_operator_api::conditions;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::Ctx;
use crate::scenarios::backups::{LocalS3, local_s3, run_backup_job};
use crate::scenarios::databases::{
    Engine, RUNNING_TIMEOUT, example_in, image_root, members, password_of, pod_ip, restarts, sql,
};
use crate::util::{Check, api, condition, describe, events_about, phase, wait_for};

/// `spec.passwordRotation.graceSeconds` of the MySQL cluster.
const GRACE_SECONDS: u64 = 10;
/// From the Secret change until the new password works (a pass, a probe, the step).
const APPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A client session kept open across the change: the engine's own client, chrooted into the
/// image root, reading statements from a pipe.
struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    queries: u32,
}

impl Session {
    fn open(engine: Engine, root: &Path, ip: &str, password: &str) -> Result<Session> {
        let mut cmd = Command::new("chroot");
        cmd.arg(root);
        match engine {
            Engine::Postgresql => {
                cmd.args([
                    "psql", "-h", ip, "-U", "postgres", "-d", "postgres", "-XAtq",
                ])
                .env("PGPASSWORD", password);
            }
            Engine::Mariadb | Engine::Mysql => {
                let client = if engine == Engine::Mysql {
                    "mysql"
                } else {
                    "mariadb"
                };
                cmd.args([client, "-h", ip, "-u", "root", "-N", "-B", "--unbuffered"]);
                if engine == Engine::Mariadb {
                    // TLS: the servers refuse plain connections.
                    cmd.arg("--ssl");
                }
                cmd.env("MYSQL_PWD", password);
            }
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the SQL client")?;
        let stdin = child.stdin.take().context("the client's stdin")?;
        let stdout = child.stdout.take().context("the client's stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut session = Session {
            child,
            stdin,
            lines,
            queries: 0,
        };
        session.query("select 1")?;
        Ok(session)
    }

    /// Runs `text` in the open session; returns its output lines.
    fn query(&mut self, text: &str) -> Result<Vec<String>> {
        self.queries += 1;
        let marker = format!("session-marker-{}", self.queries);
        writeln!(self.stdin, "{text};\nselect '{marker}';")?;
        self.stdin.flush()?;
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.trim() == marker => return Ok(out),
                Ok(line) => out.push(line),
                Err(_) => bail!("the open session did not answer {text:?} (saw {out:?})"),
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The example of `engine` with two members, `spec.backup` to the local S3 server (its keys in
/// a copy of Secret `default/local-s3`) and, for MySQL, a short grace period.
fn manifest(engine: Engine, ns: &str, s3: &LocalS3) -> Result<(String, String)> {
    let (text, name) = example_in(engine, ns)?;
    ensure!(
        text.trim_end().ends_with("effect: NoSchedule") && text.contains("  replicas: 3\n"),
        "the example of {engine:?} changed shape; adjust the rotation scenario"
    );
    let text = text.replace("  replicas: 3\n", "  replicas: 2\n");
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: local-s3\n  namespace: {ns}\ntype: Opaque\nstringData:\n  AWS_ACCESS_KEY_ID: {}\n  AWS_SECRET_ACCESS_KEY: {}\n---\n",
        s3.access_key_id, s3.secret_access_key
    );
    let extra = format!(
        "  backup:\n    schedule: \"0 0 1 1 *\"\n    retention: 3\n    s3Bucket: {}\n    endpoint: {}\n    region: us-east-1\n    credentialsSecretRef:\n      name: local-s3\n  passwordRotation:\n    graceSeconds: {GRACE_SECONDS}\n",
        s3.bucket, s3.endpoint
    );
    Ok((format!("{secret}{}\n{extra}", text.trim_end()), name))
}

/// Whether `password` logs in on `ip`: `Ok(false)` only for a refused login.
fn logs_in(engine: Engine, root: &PathBuf, ip: &str, password: &str) -> Result<bool> {
    match sql(engine, root, ip, password, "select 1") {
        Ok(_) => Ok(true),
        Err(e) => {
            let text = format!("{e:#}");
            let refused = [
                "password authentication failed",
                "Access denied",
                "ERROR 1045",
            ]
            .iter()
            .any(|m| text.contains(m));
            if refused { Ok(false) } else { Err(e) }
        }
    }
}

/// Every member pod's UID and the server container's restart count.
fn identities(engine: Engine, pods: &[Pod]) -> BTreeMap<String, (String, i32)> {
    pods.iter()
        .map(|p| {
            (
                p.name_any(),
                (
                    p.uid().unwrap_or_default(),
                    restarts(p, engine.server_container()),
                ),
            )
        })
        .collect()
}

async fn rotate(ctx: &Ctx, env: &Env, s3: &LocalS3, engine: Engine) -> Result<()> {
    let root = image_root(engine).await?;
    let short = match engine {
        Engine::Postgresql => "pg",
        Engine::Mariadb => "maria",
        Engine::Mysql => "mysql",
    };
    let ns = ctx.namespace(&format!("rotate-{short}")).await?;
    ctx.retire_on_success(&ns);
    let (text, name) = manifest(engine, &ns, s3)?;
    ctx.relevant("databasecluster", &ns, &name);
    let applied = Instant::now();
    env.cluster.apply(&text)?;
    let clusters: Api<DatabaseCluster> = api(env, &ns);
    let dbc = wait_for(
        &format!("{name} Running with its password recorded"),
        RUNNING_TIMEOUT,
        async || {
            let dbc = clusters.get(&name).await?;
            let recorded = dbc
                .status
                .as_ref()
                .and_then(|s| s.password.as_ref())
                .and_then(|p| p.fingerprint.clone());
            Ok(if phase(&dbc) == "Running" && recorded.is_some() {
                Check::Done(dbc)
            } else {
                Check::Pending(describe(&dbc))
            })
        },
    )
    .await?;
    ctx.note(format!(
        "{engine:?}: 2 members Running {:.1}s after apply",
        applied.elapsed().as_secs_f64()
    ));
    let first = dbc
        .status
        .as_ref()
        .and_then(|s| s.password.clone())
        .unwrap_or_default();
    let old = password_of(env, &ns, &dbc).await?;
    let new = format!("rotated-{short}-{}", std::process::id());
    let (pods, primary) = members(env, &ns, &name).await?;
    ensure!(pods.len() == 2, "{} member pods, want 2", pods.len());
    let before = identities(engine, &pods);
    let primary_ip = pod_ip(&primary)?;
    let replica = pods
        .iter()
        .find(|p| p.name_any() != primary.name_any())
        .context("no replica")?;
    let replica_ip = pod_ip(replica)?;
    let mut session = Session::open(engine, &root, &primary_ip, &old)?;
    ensure!(
        logs_in(engine, &root, &replica_ip, &old)?,
        "the old password on the replica"
    );

    // The change.
    let secrets: Api<Secret> = api(env, &ns);
    let reference = &dbc.spec.password_secret_ref;
    let patch = serde_json::json!({"stringData": {&reference.key: &new}});
    secrets
        .patch(
            &reference.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let changed = Instant::now();
    ctx.step(format!(
        "{engine:?}: changed Secret {ns}/{}",
        reference.name
    ));
    wait_for(
        &format!("{engine:?}: the new password on the primary {primary_ip}"),
        APPLY_TIMEOUT,
        async || {
            Ok(if logs_in(engine, &root, &primary_ip, &new)? {
                Check::Done(())
            } else {
                Check::Pending("refused".into())
            })
        },
    )
    .await?;
    let took = changed.elapsed();
    let old_on_primary = logs_in(engine, &root, &primary_ip, &old)?;
    wait_for(
        &format!("{engine:?}: the new password on the replica {replica_ip}"),
        Duration::from_secs(20),
        async || {
            Ok(if logs_in(engine, &root, &replica_ip, &new)? {
                Check::Done(())
            } else {
                Check::Pending("refused".into())
            })
        },
    )
    .await?;
    let old_on_replica = logs_in(engine, &root, &replica_ip, &old)?;
    if engine == Engine::Mysql {
        ensure!(
            old_on_primary && old_on_replica,
            "MySQL: the old password stopped at once (primary {old_on_primary}, replica {old_on_replica}); the grace period is {GRACE_SECONDS} s"
        );
        // The operator records the outcome in status after the statement has
        // run: the new password can work a moment before status says so.
        let expires = wait_for(
            "MySQL: status.password.oldPasswordExpires during the grace period",
            Duration::from_secs(GRACE_SECONDS / 2),
            async || {
                let dbc = clusters.get(&name).await?;
                let password = dbc.status.as_ref().and_then(|s| s.password.clone());
                Ok(
                    match password
                        .as_ref()
                        .and_then(|p| p.old_password_expires.clone())
                    {
                        Some(expires) => Check::Done(expires),
                        None => Check::Pending(format!("{password:?}")),
                    },
                )
            },
        )
        .await?;
        // Both keep working until the grace period ends, then only the new one.
        let discarded = wait_for(
            "MySQL: the old password discarded",
            Duration::from_secs(GRACE_SECONDS + 40),
            async || {
                let old_works = logs_in(engine, &root, &primary_ip, &old)?;
                Ok(if old_works {
                    Check::Pending("the old password still works".into())
                } else {
                    Check::Done(changed.elapsed())
                })
            },
        )
        .await?;
        ensure!(
            discarded >= Duration::from_secs(GRACE_SECONDS),
            "MySQL: the old password stopped {:.1}s after the change, before the {GRACE_SECONDS} s grace period",
            discarded.as_secs_f64()
        );
        wait_for(
            "MySQL: the old password refused on the replica",
            Duration::from_secs(20),
            async || {
                Ok(if logs_in(engine, &root, &replica_ip, &old)? {
                    Check::Pending("still works".into())
                } else {
                    Check::Done(())
                })
            },
        )
        .await?;
        let dbc = wait_for(
            "MySQL: status.password.oldPasswordDiscardedAt",
            Duration::from_secs(20),
            async || {
                let dbc = clusters.get(&name).await?;
                let p = dbc.status.as_ref().and_then(|s| s.password.clone());
                Ok(
                    match p
                        .as_ref()
                        .and_then(|p| p.old_password_discarded_at.as_ref())
                    {
                        Some(_) if p.as_ref().is_some_and(|p| p.old_password_expires.is_none()) => {
                            Check::Done(dbc)
                        }
                        _ => Check::Pending(format!("{p:?}")),
                    },
                )
            },
        )
        .await?;
        let p = dbc.status.and_then(|s| s.password).unwrap_or_default();
        ctx.note(format!(
            "MySQL: new password working {:.1}s after the Secret change, the old one too until {} (grace {GRACE_SECONDS} s), refused {:.1}s after the change; discarded at {:?}",
            took.as_secs_f64(),
            expires.0,
            discarded.as_secs_f64(),
            p.old_password_discarded_at.map(|t| t.0.to_string())
        ));
    } else {
        ensure!(
            !old_on_primary && !old_on_replica,
            "{engine:?}: the old password still works (primary {old_on_primary}, replica {old_on_replica})"
        );
        ctx.note(format!(
            "{engine:?}: new password working {:.1}s after the Secret change; the old one refused on both members",
            took.as_secs_f64()
        ));
    }

    // The session opened before the change still works.
    let out = session.query("select 40 + 2")?;
    ensure!(
        out.iter().any(|l| l.trim() == "42"),
        "{engine:?}: the open session answered {out:?}"
    );

    // No pod restarted or replaced.
    let (pods, _) = members(env, &ns, &name).await?;
    let after = identities(engine, &pods);
    ensure!(
        before == after,
        "{engine:?}: pods changed across the rotation: {before:?} -> {after:?}"
    );

    // The status says what happened, never the value. It is written by the pass after the one
    // that changed the password (the step's outcome comes back to the core), so moments after
    // the new password works: the fingerprint keyed with the cluster's key (HMAC with the
    // operator Secret's backup-signing-key), not the unkeyed hash anyone could test guesses
    // against.
    let secret_uid = secrets
        .get(&reference.name)
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let signing = secrets
        .get(&format!("{name}-operator"))
        .await?
        .data
        .and_then(|mut d| d.remove("backup-signing-key"))
        .context("the operator Secret has no backup-signing-key")?;
    let key = database_operator_core::backup::signature::SigningKey::new(&signing.0)?;
    let keyed =
        database_operator_common::fingerprint::keyed_fingerprint(&key, &secret_uid, new.as_bytes());
    let unkeyed = database_operator_common::fingerprint::fingerprint(&secret_uid, new.as_bytes());
    let dbc = wait_for(
        &format!("{engine:?}: status.password to record the new value's keyed fingerprint"),
        Duration::from_secs(15),
        async || {
            let dbc = clusters.get(&name).await?;
            let password = dbc
                .status
                .as_ref()
                .and_then(|s| s.password.clone())
                .unwrap_or_default();
            Ok(if password.fingerprint.as_deref() == Some(keyed.as_str()) {
                Check::Done(dbc)
            } else {
                Check::Pending(format!("{first:?} -> {password:?} (want {keyed})"))
            })
        },
    )
    .await?;
    ensure!(keyed != unkeyed, "the keyed fingerprint is the unkeyed one");
    let status = dbc.status.clone().unwrap_or_default();
    let password = status.password.clone().unwrap_or_default();
    ensure!(
        password.pending.is_none(),
        "{engine:?}: still pending: {password:?}"
    );
    let applied_condition =
        condition(&dbc, conditions::PASSWORD_APPLIED).context("no PasswordApplied condition")?;
    ensure!(
        applied_condition.status == "True" && applied_condition.reason == "Applied",
        "{engine:?}: PasswordApplied {} {}: {}",
        applied_condition.status,
        applied_condition.reason,
        applied_condition.message
    );
    let status_text = serde_json::to_string(&status)?;
    // The event is published after the status that records the outcome: wait for it.
    let events = wait_for(
        &format!("{engine:?}: a PasswordApplied event"),
        Duration::from_secs(15),
        async || {
            let events = events_about(env, &ns, &name).await?;
            Ok(if events.iter().any(|e| e.reason == "PasswordApplied") {
                Check::Done(events)
            } else {
                let seen: Vec<String> = events
                    .iter()
                    .map(|e| format!("{}: {}", e.reason, e.note))
                    .collect();
                Check::Pending(format!("{seen:?}"))
            })
        },
    )
    .await?;
    let events_text: Vec<String> = events
        .iter()
        .map(|e| format!("{}: {}", e.reason, e.note))
        .collect();
    for secret in [&old, &new] {
        ensure!(
            !status_text.contains(secret.as_str())
                && !events_text.iter().any(|e| e.contains(secret.as_str())),
            "{engine:?}: a password appears in the status or an event"
        );
    }
    ensure!(
        events.iter().any(|e| e.reason == "PasswordApplied"),
        "{engine:?}: no PasswordApplied event: {events_text:?}"
    );

    // The next backup succeeds (the backup logs in with the operator's account).
    let job = format!("{name}-after-rotation");
    let secs = run_backup_job(ctx, env, &ns, &format!("{name}-backup"), &job).await?;
    ctx.note(format!(
        "{engine:?}: backup after the rotation succeeded in {secs:.1}s; PasswordApplied: {}",
        applied_condition.message
    ));

    if engine == Engine::Postgresql {
        // A Secret without the key: nothing changes in the database, the condition names both.
        let patch = serde_json::json!({"data": {&reference.key: null, "renamed": "eA=="}});
        secrets
            .patch(
                &reference.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        let why = wait_for(
            "PasswordApplied False SecretKeyMissing",
            Duration::from_secs(30),
            async || {
                let dbc = clusters.get(&name).await?;
                Ok(match condition(&dbc, conditions::PASSWORD_APPLIED) {
                    Some(c) if c.status == "False" && c.reason == "SecretKeyMissing" => {
                        Check::Done(c.message.clone())
                    }
                    other => Check::Pending(format!("{:?}", other.map(|c| &c.reason))),
                })
            },
        )
        .await?;
        ensure!(
            why.contains(&format!("{ns}/{}", reference.name)) && why.contains(&reference.key),
            "the condition does not name the Secret and key: {why}"
        );
        ensure!(
            logs_in(engine, &root, &primary_ip, &new)?,
            "the password changed without its Secret key"
        );
        ctx.note(format!("PostgreSQL, key removed: {why}"));
    }
    clusters.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// The three engines at once, each in its own namespace.
pub async fn password_rotation_reaches_the_database(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    ctx.operator().await?;
    let s3 = local_s3(&env).await?;
    let (pg, maria, my) = tokio::join!(
        rotate(ctx, &env, &s3, Engine::Postgresql),
        rotate(ctx, &env, &s3, Engine::Mariadb),
        rotate(ctx, &env, &s3, Engine::Mysql),
    );
    let failures: Vec<String> = [("PostgreSQL", pg), ("MariaDB", maria), ("MySQL", my)]
        .into_iter()
        .filter_map(|(what, r)| r.err().map(|e| format!("{what}: {e:#}")))
        .collect();
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
