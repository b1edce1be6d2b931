//! What the prober asks a server: its role, position and timeline history.

use super::*;
use crate::position::{GtidSet, MariadbGtidPos};

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
/// On a primary, `member_slots` lists its member slots that can still serve their standby
/// (comma-separated, empty when none; a lost slot is left out) and `oldest_wal_segment` the
/// oldest WAL segment it still has (without its timeline: log and segment number), which with
/// `wal_segment_bytes` gives the oldest LSN a standby can still stream from.
/// With continuous archiving on a primary, `archive_waiting` counts the WAL files waiting to be
/// archived (`.ready` in `pg_wal/archive_status`) and `archived_count` is set; the other
/// archiver columns are `pg_stat_archiver`'s, with the times as ages in seconds (the operator's
/// clock is never compared with the server's), and `archive_failing` says whether the last
/// attempt failed (compared on the server's timestamps, not on the rounded ages).
/// MySQL and MariaDB: the server variables, then the replica status (no row on a primary), then
/// the semi-synchronous switches (no row on a MySQL server without the plugins), then the
/// expiry of the certificate the server serves (`Ssl_server_not_after`, empty without TLS).
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
             (SELECT status FROM pg_stat_wal_receiver) AS receiver_status, \
             (SELECT conninfo ~ 'sslmode=verify-(ca|full)' FROM pg_stat_wal_receiver) \
               AS receiver_checks_tls, \
             CASE WHEN pg_is_in_recovery() THEN NULL ELSE \
               COALESCE((SELECT string_agg(slot_name, ',' ORDER BY slot_name) FROM pg_replication_slots \
                 WHERE slot_type = 'physical' AND slot_name ~ '^member_[0-9]+$' \
                 AND wal_status IS DISTINCT FROM 'lost'), '') END AS member_slots, \
             CASE WHEN pg_is_in_recovery() THEN NULL ELSE \
               (SELECT min(substr(name, 9)) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$') \
             END AS oldest_wal_segment, \
             pg_size_bytes(current_setting('wal_segment_size')) AS wal_segment_bytes, \
             CASE WHEN NOT pg_is_in_recovery() AND current_setting('archive_mode') <> 'off' THEN \
               (SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name ~ '[.]ready$') \
             END AS archive_waiting, \
             CASE WHEN NOT pg_is_in_recovery() AND current_setting('archive_mode') <> 'off' THEN \
               archived_count END AS archived_count, \
             last_archived_wal, \
             GREATEST(0, floor(EXTRACT(EPOCH FROM (clock_timestamp() - last_archived_time))))::bigint \
               AS last_archived_age, \
             failed_count, \
             last_failed_wal, \
             GREATEST(0, floor(EXTRACT(EPOCH FROM (clock_timestamp() - last_failed_time))))::bigint \
               AS last_failed_age, \
             COALESCE(last_failed_time > COALESCE(last_archived_time, '-infinity'), false) \
               AS archive_failing \
             FROM pg_stat_archiver",
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
            // When the certificate the server serves expires (empty without TLS).
            Statement::plain(dialect, "SHOW GLOBAL STATUS LIKE 'Ssl_server_not_after'"),
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
            // When the certificate the server serves expires (empty without TLS).
            Statement::plain(dialect, "SHOW GLOBAL STATUS LIKE 'Ssl_server_not_after'"),
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

/// How the MySQL family's probe results read ([`probe`]'s rows), as the MySQL-protocol driver
/// needs it: the columns of the server variables row, the replica status column that holds
/// the received GTIDs, and how the received position joins the applied one. Reached through
/// [`EngineDef::probe_reading`](crate::EngineDef::probe_reading).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReading {
    /// Column of `server_id` in the variables row.
    pub server_id: usize,
    /// Column of `read_only`.
    pub read_only: usize,
    /// Column of the applied position (`gtid_executed`, MariaDB's `gtid_current_pos`).
    pub position: usize,
    /// Column of `version`.
    pub version: usize,
    /// The replica status column with what the replica has received but maybe not applied
    /// (`Retrieved_Gtid_Set`, MariaDB's `Gtid_IO_Pos`).
    pub received_column: &'static str,
    gtids: Gtids,
}

/// How the family writes positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gtids {
    /// MySQL's GTID sets.
    Sets,
    /// MariaDB's GTID position, one GTID per domain.
    Domains,
}

/// MySQL: `server_uuid, server_id, read_only, super_read_only, gtid_executed, version`.
pub(crate) const MYSQL_PROBE: ProbeReading = ProbeReading {
    server_id: 0,
    read_only: 2,
    position: 4,
    version: 5,
    received_column: "Retrieved_Gtid_Set",
    gtids: Gtids::Sets,
};

/// MariaDB: `server_id, read_only, gtid_current_pos, gtid_slave_pos, version`.
pub(crate) const MARIADB_PROBE: ProbeReading = ProbeReading {
    server_id: 0,
    read_only: 1,
    position: 2,
    version: 4,
    received_column: "Gtid_IO_Pos",
    gtids: Gtids::Domains,
};

impl ProbeReading {
    /// The applied position as the variables row reads it, in the form positions parse from:
    /// MySQL prints a long GTID set over several lines (the whitespace is removed); MariaDB's
    /// is taken as it is.
    pub fn position(&self, raw: String) -> String {
        match self.gtids {
            Gtids::Sets => raw.split_whitespace().collect(),
            Gtids::Domains => raw,
        }
    }

    /// What a replica has received: its `applied` position joined with the `received` column
    /// of its replica status (MySQL: the union of the two GTID sets; MariaDB: per domain the
    /// later GTID); `None` when either does not parse.
    pub fn received_position(&self, applied: &str, received: &str) -> Option<String> {
        match self.gtids {
            Gtids::Sets => merge_gtids(applied, received),
            Gtids::Domains => merge_mariadb(applied, received),
        }
    }
}

/// `executed ∪ retrieved` (MySQL), canonical; `None` when either does not parse.
fn merge_gtids(executed: &str, retrieved: &str) -> Option<String> {
    let a: GtidSet = executed.parse().ok()?;
    let b: GtidSet = retrieved.parse().ok()?;
    Some(a.union(&b).to_string())
}

/// Per domain, the later of the applied and the received GTID (MariaDB); `None` when either
/// does not parse.
fn merge_mariadb(applied: &str, received: &str) -> Option<String> {
    let mut out: MariadbGtidPos = applied.parse().ok()?;
    let io: MariadbGtidPos = received.parse().ok()?;
    for g in io.iter() {
        if out.get(g.domain).is_none_or(|mine| mine.seq < g.seq) {
            out.set(*g);
        }
    }
    Some(out.to_string())
}
