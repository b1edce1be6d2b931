//! Fencing, promotion and following a new primary: the statements of a failover.

use super::*;

/// Makes a member refuse writes.
///
/// - MySQL: `super_read_only` (refuses writes from every account, `SUPER` included).
/// - MariaDB: `read_only` (accounts with `READ_ONLY ADMIN` can still write: the operator's own
///   account and nothing an application uses).
/// - PostgreSQL has no read-only switch for a primary. Fencing here means: new transactions
///   default to read-only (`ALTER SYSTEM` + reload: it also survives a restart), and every
///   client session is ended (waiting up to 5 s for each to exit) so none keeps writing,
///   except the operator's own (its account's): ending the prober's session in the middle of a
///   probe made the primary look unreachable and aborted the switchover being fenced for. A
///   client can still ask for a read-write transaction explicitly (`BEGIN READ WRITE`), so
///   this closes the common paths only; the guarantee is stopping the server before the
///   promotion: a failover stops the pod, a switchover stops the server once its target has
///   caught up (the core's `failover::hard_fence_by_stop`).
pub fn fence(dialect: Engine) -> Vec<Statement> {
    match dialect {
        Engine::Postgresql => vec![
            Statement::plain(
                dialect,
                "ALTER SYSTEM SET default_transaction_read_only = on",
            ),
            Statement::plain(dialect, "SELECT pg_reload_conf()"),
            Statement::plain(
                dialect,
                "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() \
                 AND usename IS DISTINCT FROM current_user",
            ),
        ],
        Engine::Mysql => vec![Statement::plain(dialect, "SET GLOBAL super_read_only = ON")],
        Engine::Mariadb => vec![Statement::plain(dialect, "SET GLOBAL read_only = ON")],
    }
}

/// Takes a diverged member out of the cluster's data flow, keeping everything it holds:
/// [`fence`] (no writes), and for MySQL/MariaDB its replication stopped (`STOP REPLICA` /
/// `STOP SLAVE`, without a reset: the source it had stays recorded for inspection), so it
/// neither applies the primary's transactions on top of its errant ones nor fails on them.
/// PostgreSQL: the fence only (a diverged PostgreSQL member is rewound, never quarantined).
pub fn quarantine(dialect: Engine) -> Vec<Statement> {
    let mut statements = fence(dialect);
    match dialect {
        Engine::Postgresql => {}
        Engine::Mysql => statements.push(Statement::plain(dialect, "STOP REPLICA")),
        Engine::Mariadb => statements.push(Statement::plain(dialect, "STOP SLAVE")),
    }
    statements
}

/// MySQL/MariaDB: switches the semi-synchronous source side on or off (`spec.replication.mode:
/// sync`: on on the primary once a replica replicates, off elsewhere; the replica side and
/// the timeout come from the rendered configuration). MySQL needs the `semisync_source` plugin,
/// which the rendered configuration loads in sync mode. Nothing for PostgreSQL (its
/// configuration does it).
pub fn set_semi_sync(dialect: Engine, enabled: bool) -> Vec<Statement> {
    let value = if enabled { "ON" } else { "OFF" };
    match dialect {
        Engine::Postgresql => Vec::new(),
        Engine::Mysql => vec![Statement::plain(
            dialect,
            format!("SET GLOBAL rpl_semi_sync_source_enabled = {value}"),
        )],
        Engine::Mariadb => vec![Statement::plain(
            dialect,
            format!("SET GLOBAL rpl_semi_sync_master_enabled = {value}"),
        )],
    }
}

/// The prefix of the physical replication slots the operator keeps on a PostgreSQL primary,
/// one per standby: `member_<ordinal>` ([`member_slot`]; init.sh sets `primary_slot_name` the
/// same way). Slots with other names (a user's) are never touched.
pub const MEMBER_SLOT_PREFIX: &str = "member_";

/// The replication slot of the member with `ordinal`.
pub fn member_slot(ordinal: i32) -> String {
    format!("{MEMBER_SLOT_PREFIX}{ordinal}")
}

/// PostgreSQL: makes the primary's member slots exactly `slots` (names of [`member_slot`]):
/// drops every member slot that is not in use and either not wanted or lost (it exceeded
/// `max_slot_wal_keep_size`: its standby can no longer stream and is reseeded; a lost slot is
/// useless to the new copy too), then creates every wanted slot that is missing, reserving WAL
/// from now on. A slot in use is never dropped (the next pass tries again). Names are bound as
/// one comma-separated parameter and only `member_<digits>` names are acted on, so nothing
/// else can reach the statement. Nothing for MySQL/MariaDB (binary logs are kept by time).
pub fn keep_member_slots(dialect: Engine, slots: &[String]) -> Vec<Statement> {
    if dialect != Engine::Postgresql {
        return Vec::new();
    }
    let wanted = slots
        .iter()
        .filter(|s| is_member_slot(s))
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    vec![
        Statement::bound(
            dialect,
            "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots \
             WHERE slot_type = 'physical' AND slot_name ~ '^member_[0-9]+$' AND NOT active \
             AND (wal_status = 'lost' OR NOT (slot_name = ANY (string_to_array($1, ','))))",
            vec![Value::Text(wanted.clone())],
        ),
        Statement::bound(
            dialect,
            "SELECT count(pg_create_physical_replication_slot(name, true)) \
             FROM unnest(string_to_array($1, ',')) AS name \
             WHERE name ~ '^member_[0-9]+$' \
             AND name NOT IN (SELECT slot_name FROM pg_replication_slots)",
            vec![Value::Text(wanted)],
        ),
    ]
}

/// Whether `name` is a member slot name: the prefix and an ordinal.
fn is_member_slot(name: &str) -> bool {
    name.strip_prefix(MEMBER_SLOT_PREFIX)
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// MySQL/MariaDB: stops receiving from the source but keeps applying what was received (the
/// first step of a promotion). Nothing for PostgreSQL (promotion replays what was received).
pub fn stop_receiving(dialect: Engine) -> Vec<Statement> {
    match dialect {
        Engine::Postgresql => Vec::new(),
        Engine::Mysql => vec![Statement::plain(dialect, "STOP REPLICA IO_THREAD")],
        Engine::Mariadb => vec![Statement::plain(dialect, "STOP SLAVE IO_THREAD")],
    }
}

/// MySQL/MariaDB: waits up to `timeout_seconds` until `position` (a GTID set / MariaDB
/// position) is applied. Returns one row: `0` when applied (MariaDB: `-1` on timeout, MySQL:
/// `1`). Nothing for PostgreSQL.
pub fn wait_applied(dialect: Engine, position: &str, timeout_seconds: u32) -> Vec<Statement> {
    let params = vec![
        Value::Text(position.to_owned()),
        Value::Int(i64::from(timeout_seconds)),
    ];
    match dialect {
        Engine::Postgresql => Vec::new(),
        Engine::Mysql => vec![Statement::bound(
            dialect,
            "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
            params,
        )],
        Engine::Mariadb => vec![Statement::bound(
            dialect,
            "SELECT MASTER_GTID_WAIT(?, ?)",
            params,
        )],
    }
}

/// Makes a replica the primary (after [`stop_receiving`] and [`wait_applied`] for MySQL and
/// MariaDB). PostgreSQL: `pg_promote` waits up to `timeout_seconds` and returns whether the
/// promotion finished; a fence left from earlier is lifted. MySQL/MariaDB: forget the source
/// entirely and accept writes.
pub fn promote(dialect: Engine, timeout_seconds: u32) -> Vec<Statement> {
    match dialect {
        Engine::Postgresql => vec![
            Statement::bound(
                dialect,
                "SELECT pg_promote(wait => true, wait_seconds => $1)",
                vec![Value::Int(i64::from(timeout_seconds))],
            ),
            Statement::plain(dialect, "ALTER SYSTEM RESET default_transaction_read_only"),
            Statement::plain(dialect, "SELECT pg_reload_conf()"),
        ],
        Engine::Mysql => vec![
            Statement::plain(dialect, "STOP REPLICA"),
            Statement::plain(dialect, "RESET REPLICA ALL"),
            Statement::plain(dialect, "SET GLOBAL super_read_only = OFF"),
            Statement::plain(dialect, "SET GLOBAL read_only = OFF"),
        ],
        Engine::Mariadb => vec![
            Statement::plain(dialect, "STOP SLAVE"),
            Statement::plain(dialect, "RESET SLAVE ALL"),
            Statement::plain(dialect, "SET GLOBAL read_only = OFF"),
        ],
    }
}

/// The TLS options of MySQL's `CHANGE REPLICATION SOURCE` (`prefix` `SOURCE`) or MariaDB's
/// `CHANGE MASTER` (`MASTER`): TLS, the authority, and the source's certificate checked for the
/// host name; without an authority, no authority and no check (a channel secured before, on a
/// cluster that switched TLS off, would otherwise look for a file it no longer has), TLS when
/// the source serves it and, on MariaDB, none when it does not (MySQL keeps the channel's TLS:
/// its servers always offer it).
fn tls_options(dialect: Engine, tls: &SourceTls) -> String {
    let prefix = if dialect == Engine::Mariadb {
        "MASTER"
    } else {
        "SOURCE"
    };
    let unchecked = format!("{prefix}_SSL_CA = '', {prefix}_SSL_VERIFY_SERVER_CERT = 0");
    match tls {
        SourceTls::Checked { ca_file } => format!(
            ", {prefix}_SSL = 1, {prefix}_SSL_CA = '{ca_file}', {prefix}_SSL_VERIFY_SERVER_CERT = 1"
        ),
        SourceTls::Encrypted => format!(", {prefix}_SSL = 1, {unchecked}"),
        SourceTls::Plain if dialect == Engine::Mariadb => {
            format!(", {prefix}_SSL = 0, {unchecked}")
        }
        SourceTls::Plain => format!(", {unchecked}"),
    }
}

/// Points a member at a new source.
///
/// - PostgreSQL: sets `primary_conninfo` and reloads (PostgreSQL 13+ applies it without a
///   restart). Only a standby can follow; a running primary must be restarted as a standby
///   (`standby.signal`), after `pg_rewind` when it diverged. The password comes from
///   `passfile`: a password here is refused, because `ALTER SYSTEM` would store it in clear.
/// - MySQL: read-only first, then `CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION = 1`
///   (GTID auto-positioning) and `START REPLICA`. `GET_SOURCE_PUBLIC_KEY = 1` lets
///   `caching_sha2_password` work without TLS.
/// - TLS as [`ReplicationSource::tls`] says ([`SourceTls`]).
/// - MariaDB: read-only first; `gtid_slave_pos` is set from `gtid_current_pos`, so a former
///   primary resumes after its own last transaction instead of from an old replica position;
///   then `CHANGE MASTER TO ... MASTER_USE_GTID = slave_pos` and `START SLAVE`.
pub fn follow(
    dialect: Engine,
    source: &ReplicationSource,
) -> Result<Vec<Statement>, StatementError> {
    let host = check_host(&source.host, "source host", false)?;
    let user = check_user(&source.user)?;
    let port = source.port;
    let password = || -> Result<Value, StatementError> {
        source.password.clone().map(Value::Secret).ok_or_else(|| {
            StatementError::NotSupported(format!(
                "{}: following needs the replication password",
                dialect.as_str()
            ))
        })
    };
    // The authority's path goes into the text quoted: an operator-chosen path, checked like a
    // host name.
    if let SourceTls::Checked { ca_file } = &source.tls {
        check_path(ca_file)?;
    }
    Ok(match dialect {
        Engine::Postgresql => {
            if source.password.is_some() {
                return Err(StatementError::NotSupported(
                    "postgresql: the replication password belongs in a passfile, not in primary_conninfo".to_owned(),
                ));
            }
            let mut conninfo = format!(
                "host={} port={port} user={}",
                conninfo_value(host),
                conninfo_value(user)
            );
            if let Some(passfile) = &source.passfile {
                conninfo.push_str(&format!(" passfile={}", conninfo_value(passfile)));
            }
            if let Some(name) = &source.application_name {
                conninfo.push_str(&format!(" application_name={}", conninfo_value(name)));
            }
            match &source.tls {
                SourceTls::Checked { ca_file } => conninfo.push_str(&format!(
                    " sslmode=verify-full sslrootcert={}",
                    conninfo_value(ca_file)
                )),
                SourceTls::Encrypted => conninfo.push_str(" sslmode=require"),
                SourceTls::Plain => {}
            }
            vec![
                Statement::inline(
                    dialect,
                    "ALTER SYSTEM SET primary_conninfo = $1",
                    vec![Value::Text(conninfo)],
                ),
                Statement::plain(dialect, "SELECT pg_reload_conf()"),
            ]
        }
        Engine::Mysql => vec![
            Statement::plain(dialect, "SET GLOBAL super_read_only = ON"),
            Statement::plain(dialect, "STOP REPLICA"),
            Statement::inline(
                dialect,
                format!(
                    "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '{host}', SOURCE_PORT = {port}, \
                     SOURCE_USER = '{user}', SOURCE_PASSWORD = ?, SOURCE_AUTO_POSITION = 1, \
                     GET_SOURCE_PUBLIC_KEY = 1, SOURCE_CONNECT_RETRY = 5{tls}",
                    tls = tls_options(dialect, &source.tls),
                ),
                vec![password()?],
            ),
            Statement::plain(dialect, "START REPLICA"),
        ],
        Engine::Mariadb => vec![
            Statement::plain(dialect, "SET GLOBAL read_only = ON"),
            Statement::plain(dialect, "STOP SLAVE"),
            Statement::plain(
                dialect,
                "SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_current_pos",
            ),
            Statement::inline(
                dialect,
                format!(
                    "CHANGE MASTER TO MASTER_HOST = '{host}', MASTER_PORT = {port}, \
                     MASTER_USER = '{user}', MASTER_PASSWORD = ?, MASTER_USE_GTID = slave_pos, \
                     MASTER_CONNECT_RETRY = 5{tls}",
                    tls = tls_options(dialect, &source.tls),
                ),
                vec![password()?],
            ),
            Statement::plain(dialect, "START SLAVE"),
        ],
    })
}
