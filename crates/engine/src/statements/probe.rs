//! What the prober asks a server: its role, position and timeline history.

use super::*;

/// The statements whose results make up a probe, in the order the driver reads them.
///
/// PostgreSQL: one row. `timeline` is exact on a primary (from the current WAL file name; the
/// checkpoint's timeline lags behind a promotion); a standby reports the timeline it receives,
/// and while it receives nothing (its primary is gone) the latest of its last restartpoint's,
/// its minimum recovery point's and its newest WAL segment's timelines: the restartpoint's
/// alone (and the minimum recovery point's too) still named the old timeline after a standby had
/// followed a promotion, and made it look diverged from the new primary in the next failover
/// (seen on real servers); the WAL it received is written in segments named by its timeline.
/// `replay_delay_seconds` is the age of the last replayed transaction only while the standby
/// has received WAL it has not replayed yet, else 0: with no writes on the primary that age
/// grows without bound, and an idle, caught-up standby looked minutes behind (an upgrade's
/// health gate paused on it; `status.members` would have climbed its lag steps).
/// MySQL and MariaDB: the server variables, then the replica status (no row on a primary), then
/// the semi-synchronous switches (no row on a MySQL server without the plugins).
pub fn probe(dialect: Engine) -> Vec<Statement> {
    match dialect {
        Engine::Postgresql => vec![Statement::plain(
            dialect,
            "SELECT pg_is_in_recovery() AS in_recovery, \
             current_setting('default_transaction_read_only') = 'on' AS read_only, \
             current_setting('server_version') AS version, \
             (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier, \
             CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END AS current_lsn, \
             pg_last_wal_receive_lsn()::text AS receive_lsn, \
             pg_last_wal_replay_lsn()::text AS replay_lsn, \
             CASE WHEN pg_is_in_recovery() \
               THEN COALESCE(NULLIF((SELECT received_tli FROM pg_stat_wal_receiver), 0), \
                             GREATEST((SELECT timeline_id FROM pg_control_checkpoint()), \
                                      (SELECT min_recovery_end_timeline FROM pg_control_recovery()), \
                                      (SELECT ('x' || lpad(substr(max(name), 1, 8), 16, '0'))::bit(64)::bigint \
                                         FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$')))::bigint \
               ELSE ('x' || lpad(substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8), 16, '0'))::bit(64)::bigint \
             END AS timeline, \
             CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 \
               ELSE floor(EXTRACT(EPOCH FROM (now() - pg_last_xact_replay_timestamp())))::bigint \
             END AS replay_delay_seconds, \
             pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint AS replay_lag_bytes, \
             (SELECT sender_host FROM pg_stat_wal_receiver) AS source_host, \
             (SELECT sender_port FROM pg_stat_wal_receiver) AS source_port, \
             (SELECT status FROM pg_stat_wal_receiver) AS receiver_status",
        )],
        Engine::Mysql => vec![
            Statement::plain(
                dialect,
                "SELECT @@GLOBAL.server_uuid, @@GLOBAL.server_id, @@GLOBAL.read_only, \
                 @@GLOBAL.super_read_only, @@GLOBAL.gtid_executed, @@GLOBAL.version",
            ),
            Statement::plain(dialect, "SHOW REPLICA STATUS"),
            Statement::plain(
                dialect,
                "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_%enabled'",
            ),
        ],
        Engine::Mariadb => vec![
            Statement::plain(
                dialect,
                "SELECT @@GLOBAL.server_id, @@GLOBAL.read_only, @@GLOBAL.gtid_current_pos, \
                 @@GLOBAL.gtid_slave_pos, @@GLOBAL.version",
            ),
            Statement::plain(dialect, "SHOW SLAVE STATUS"),
            Statement::plain(
                dialect,
                "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_%enabled'",
            ),
        ],
    }
}

/// PostgreSQL: the history file of `timeline` (superuser or `pg_read_server_files`).
pub fn timeline_history(timeline: u32) -> Statement {
    Statement::bound(
        Engine::Postgresql,
        "SELECT pg_read_file('pg_wal/' || lpad(upper(to_hex($1::int)), 8, '0') || '.history')",
        vec![Value::Int(i64::from(timeline))],
    )
}

/// The words the MySQL family's replica status names its columns with, `(replica, source)` as
/// in `{replica}_IO_Running` and `Seconds_Behind_{source}`: MySQL's `Replica` and `Source`
/// (`SHOW REPLICA STATUS`), MariaDB's `Slave` and `Master` (`SHOW SLAVE STATUS`). PostgreSQL
/// has no replica status: `None`.
pub fn replica_status_words(dialect: Engine) -> Option<(&'static str, &'static str)> {
    match dialect {
        Engine::Postgresql => None,
        Engine::Mysql => Some(("Replica", "Source")),
        Engine::Mariadb => Some(("Slave", "Master")),
    }
}

/// The statement that bounds every later statement of the session to `limit` (zero: no
/// bound): MySQL's `max_execution_time` (milliseconds), MariaDB's `max_statement_time`
/// (seconds), PostgreSQL's `statement_timeout` (milliseconds).
pub fn session_time_limit(dialect: Engine, limit: std::time::Duration) -> String {
    match dialect {
        Engine::Postgresql => format!("SET statement_timeout = {}", limit.as_millis()),
        Engine::Mysql => format!("SET SESSION max_execution_time = {}", limit.as_millis()),
        Engine::Mariadb => format!("SET SESSION max_statement_time = {}", limit.as_secs_f64()),
    }
}
