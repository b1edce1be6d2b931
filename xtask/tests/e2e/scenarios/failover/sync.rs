//! `spec.replication.mode: sync` on real servers: a three-member cluster with a writer inserting
//! numbered rows through the primary; the scenario checks that synchronous replication is in
//! effect on the primary (PostgreSQL: a standby in `pg_stat_replication` with `sync_state`
//! `quorum` or `sync`; MySQL/MariaDB: the semi-synchronous source status `ON` with at least one
//! client), then switches over by annotation, checks again on the new primary, freezes that
//! primary's processes (SIGSTOP) until it is failed over, and after each change of primary
//! requires every acknowledged row on the new primary.

use super::*;

/// The spec lines that turn synchronous replication on.
pub(super) const SYNC: &str = "  replication:\n    mode: sync\n";
/// How long sync may take to be in effect on a primary (PostgreSQL: a standby streaming;
/// MySQL/MariaDB: a probe round seeing a replica, the operator's switch, one commit).
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// One line saying whether commits wait for a replica: PostgreSQL `<standbys in quorum or
/// sync> <synchronous_commit>`, MySQL/MariaDB `<source status> <clients>`.
fn sync_state_query(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgresql => {
            "select (select count(*) from pg_stat_replication where sync_state in ('quorum', 'sync')) \
             || ' ' || current_setting('synchronous_commit')"
        }
        Engine::Mariadb => {
            "select concat(max(if(upper(variable_name) = 'RPL_SEMI_SYNC_MASTER_STATUS', variable_value, null)), ' ', \
             max(if(upper(variable_name) = 'RPL_SEMI_SYNC_MASTER_CLIENTS', variable_value, null))) \
             from information_schema.global_status"
        }
        Engine::Mysql => {
            "select concat(max(if(upper(variable_name) = 'RPL_SEMI_SYNC_SOURCE_STATUS', variable_value, null)), ' ', \
             max(if(upper(variable_name) = 'RPL_SEMI_SYNC_SOURCE_CLIENTS', variable_value, null))) \
             from performance_schema.global_status"
        }
    }
}

/// Whether the answer of [`sync_state_query`] says commits wait for at least one replica.
fn sync_in_effect(engine: Engine, answer: &str) -> bool {
    let mut words = answer.split_whitespace();
    let (a, b) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let count = |s: &str| s.parse::<u64>().is_ok_and(|n| n >= 1);
    match engine {
        Engine::Postgresql => count(a) && b == "on",
        Engine::Mariadb | Engine::Mysql => a.eq_ignore_ascii_case("ON") && count(b),
    }
}

/// Waits until synchronous replication is in effect on `pod` (at `ip`); returns the answer.
pub(super) async fn wait_sync(
    engine: Engine,
    root: &PathBuf,
    password: &str,
    pod: &str,
    ip: &str,
) -> Result<String> {
    wait_for(
        &format!("synchronous replication in effect on {pod}"),
        SYNC_TIMEOUT,
        async || {
            let answer = sql_within(engine, root, ip, password, sync_state_query(engine), 2)
                .map(|a| a.trim().to_owned());
            Ok(match answer {
                Ok(a) if sync_in_effect(engine, &a) => Check::Done(a),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await
}

/// Every row the writer saw acknowledged is on `ip`.
pub(super) fn nothing_lost(
    engine: Engine,
    root: &PathBuf,
    password: &str,
    load: &Load,
    ip: &str,
    what: &str,
) -> Result<usize> {
    let acked: BTreeSet<u64> = lock(&load.writes)
        .acked
        .iter()
        .map(|(id, _, _)| *id)
        .collect();
    let present = ids_on(engine, root, ip, password)?;
    let lost: Vec<u64> = acked.difference(&present).copied().collect();
    ensure!(
        lost.is_empty(),
        "{what} lost {} of {} acknowledged rows in sync mode: {:?}",
        lost.len(),
        acked.len(),
        lost.iter().take(10).collect::<Vec<_>>()
    );
    Ok(acked.len())
}

/// Waits for `n` acknowledged rows on `ip` after `after`.
async fn writer_on(load: &Load, ip: &str, after: Instant, n: usize) -> Result<()> {
    wait_for(&format!("the writer on {ip}"), SYNC_TIMEOUT, async || {
        let got = lock(&load.writes).acked_on(ip, after);
        Ok(if got >= n {
            Check::Done(())
        } else {
            Check::Pending(format!("{got} rows on {ip}"))
        })
    })
    .await
}

async fn sync_switchover_and_failover(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) =
        running_with(ctx, engine, suffix, DELAY_SECONDS, SYNC).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let mut frozen_group = None;
    let result = async {
        let first = primary_pod(&env, &ns, &name).await?;
        let first_name = first.name_any();
        let first_ip = pod_ip(&first)?;
        load.first_rows(SYNC_TIMEOUT).await?;
        let state = wait_sync(engine, &root, &password, &first_name, &first_ip).await?;
        ctx.step(format!("sync in effect on {first_name}: {state}"));

        // A switchover by annotation.
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        let patch = serde_json::json!({"metadata": {"annotations": {
            database_operator_api::SWITCHOVER_ANNOTATION: "auto"}}});
        clusters
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let requested = Instant::now();
        let record = completed(
            &env,
            &ns,
            &name,
            FailoverKind::Switchover,
            &first_name,
            FAILOVER_TIMEOUT,
        )
        .await?;
        let second_name = record.to.clone().context("no target in the record")?;
        let second = primary_pod(&env, &ns, &name).await?;
        ensure!(
            second.name_any() == second_name,
            "the primary label is on {}, status says {second_name}",
            second.name_any()
        );
        let second_ip = pod_ip(&second)?;
        writer_on(&load, &second_ip, requested, 5).await?;
        let acked = nothing_lost(
            engine,
            &root,
            &password,
            &load,
            &second_ip,
            "the switchover",
        )?;
        ctx.note(format!(
            "{engine:?} sync switchover {first_name} -> {second_name}: write gap {:.1}s, \
             {acked} rows acknowledged, none lost",
            lock(&load.writes).gap_after(requested).as_secs_f64()
        ));
        // The failover needs a majority answering: the old primary back as a replica first (it
        // may restart to follow, and a standby that starts needs its primary to answer).
        let role = rejoined(&env, engine, &root, &password, &ns, &first_name).await?;
        ctx.step(format!("{first_name} back as {role}"));
        let state = wait_sync(engine, &root, &password, &second_name, &second_ip).await?;
        ctx.step(format!("sync in effect on {second_name}: {state}"));

        // A hung primary.
        let pgid = server_group(&second, engine)?;
        signal_group(pgid, "-STOP")?;
        frozen_group = Some(pgid);
        let frozen = Instant::now();
        ctx.step(format!(
            "froze primary {second_name} (process group {pgid})"
        ));
        let record = completed(
            &env,
            &ns,
            &name,
            FailoverKind::Failover,
            &second_name,
            FAILOVER_TIMEOUT,
        )
        .await?;
        let third_name = record.to.clone().context("no new primary in the record")?;
        let third = primary_pod(&env, &ns, &name).await?;
        ensure!(
            third.name_any() == third_name,
            "the primary label is on {}, status says {third_name}",
            third.name_any()
        );
        let third_ip = pod_ip(&third)?;
        writer_on(&load, &third_ip, frozen, 5).await?;
        let acked = nothing_lost(engine, &root, &password, &load, &third_ip, "the failover")?;
        ctx.note(format!(
            "{engine:?} sync failover {second_name} -> {third_name}: write gap {:.1}s, \
             {acked} rows acknowledged, none lost",
            lock(&load.writes).gap_after(frozen).as_secs_f64()
        ));
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Some(pgid) = frozen_group {
        // Its pod was deleted to fence it, so its processes are most likely gone.
        let _ = signal_group(pgid, "-CONT");
    }
    let (writes, violations) = load.finish();
    pods_task.abort();
    ctx.note(format!(
        "writer: {} rows acknowledged, {} failed attempts",
        writes.acked.len(),
        writes.failures
    ));
    ensure!(
        violations.is_empty(),
        "two writable primaries: {violations:?}"
    );
    result
}

/// examples/local/postgresql.yaml in sync mode: `synchronous_standby_names = 'ANY 1 (...)'`.
pub async fn postgresql_sync_switchover_and_failover_lose_nothing(ctx: &Ctx) -> Result<()> {
    sync_switchover_and_failover(ctx, Engine::Postgresql, "sync-pg").await
}

/// examples/local/mariadb.yaml in sync mode: semi-synchronous replication.
pub async fn mariadb_sync_switchover_and_failover_lose_nothing(ctx: &Ctx) -> Result<()> {
    sync_switchover_and_failover(ctx, Engine::Mariadb, "sync-maria").await
}

/// examples/local/mysql.yaml in sync mode: semi-synchronous replication (the plugins).
pub async fn mysql_sync_switchover_and_failover_lose_nothing(ctx: &Ctx) -> Result<()> {
    sync_switchover_and_failover(ctx, Engine::Mysql, "sync-mysql").await
}
