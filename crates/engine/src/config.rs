//! The engines' server configuration files, rendered from plain values (the core puts them in
//! the ConfigMap `<name>-config` and hashes them to roll the pods when they change).

use crate::{EngineDef, REPLICATION_ACCOUNT};

/// ConfigMap key of the MySQL and MariaDB server configuration.
pub const MY_CNF: &str = "my.cnf";
/// ConfigMap key of the PostgreSQL server configuration.
pub const POSTGRESQL_CONF: &str = "postgresql.conf";
/// ConfigMap key of the PostgreSQL client authentication rules.
pub const PG_HBA_CONF: &str = "pg_hba.conf";
/// ConfigMap key of PostgreSQL's TLS settings (a cluster with TLS): init.sh copies it into the
/// run directory only when the pod mounts the certificate, and `postgresql.conf` includes it
/// from there if it exists, so a pod of an earlier template (no certificate) still starts.
pub const PG_TLS_CONF: &str = "tls.conf";
/// ConfigMap key of PostgreSQL's client authentication rules with TLS (a cluster with TLS):
/// [`PG_TLS_CONF`] names it as `hba_file`, so only a server that offers TLS uses it, and a pod
/// of an earlier template (no certificate) keeps [`PG_HBA_CONF`], which accepts plain
/// connections.
pub const PG_HBA_TLS_CONF: &str = "pg_hba_tls.conf";

const MIB: i128 = 1024 * 1024;

/// The most members a cluster can have (`spec.replicas` is 1 to 9).
const MAX_MEMBERS: i32 = 9;

/// What the configuration files of a cluster are rendered from.
#[derive(Clone, Copy, Debug)]
pub struct ConfigInputs<'a> {
    /// The cluster's namespace (named in the files' header).
    pub namespace: &'a str,
    /// The cluster's name (the header; PostgreSQL's synchronous standby names are its pods').
    pub name: &'a str,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The memory the database container may use, in bytes.
    pub memory_bytes: i128,
    /// The size of each member's data volume (`spec.storage.size`), in bytes: what the WAL a
    /// PostgreSQL primary keeps for its replicas is bounded by ([`wal_retention_mib`]).
    pub storage_bytes: i128,
    /// Whether commits wait for a replica (`spec.replication.mode: sync`, two members or
    /// more).
    pub sync_replication: bool,
    /// The host replicas replicate from (the read-write Service).
    pub primary_host: &'a str,
    /// Where the ConfigMap is mounted.
    pub config_dir: &'a str,
    /// The members' run directory (where init.sh writes the effective files).
    pub run_dir: &'a str,
    /// Continuous archiving of the write-ahead log (PostgreSQL), when the cluster has it.
    pub archive: Option<Archive<'a>>,
    /// Where the server certificate (`tls.crt`), its key (`tls.key`) and the cluster's
    /// certificate authority (`ca.crt`) are mounted, when the cluster has TLS
    /// (`spec.tls`): the servers offer TLS with them and replicas check their source's
    /// certificate against the authority.
    pub tls_dir: Option<&'a str>,
    /// With [`ConfigInputs::tls_dir`]: whether accounts other than the superuser, the
    /// operator's and the replication account may still connect without TLS
    /// (`spec.tls.allowPlaintext`). `false`: every network connection must use TLS.
    pub allow_plaintext: bool,
}

/// File name of the server certificate in [`ConfigInputs::tls_dir`].
pub const TLS_CERT_FILE: &str = "tls.crt";
/// File name of the server certificate's private key in [`ConfigInputs::tls_dir`].
pub const TLS_KEY_FILE: &str = "tls.key";
/// File name of the cluster's certificate authority in [`ConfigInputs::tls_dir`].
pub const TLS_CA_FILE: &str = "ca.crt";

/// How the PostgreSQL primary archives its write-ahead log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Archive<'a> {
    /// The program that uploads one segment, run as `<program> backup wal-push %p %f`.
    pub program: &'a str,
    /// `archive_timeout`, in seconds: the longest an idle primary waits before it switches
    /// (and archives) a partly filled segment.
    pub timeout_seconds: i32,
}

/// InnoDB buffer pool: half of the container memory, a multiple of 128 MiB (the default
/// `innodb_buffer_pool_chunk_size`), at least 128 MiB.
pub fn innodb_buffer_pool_mib(memory_bytes: i128) -> i128 {
    let half = memory_bytes / 2 / MIB;
    (half / 128 * 128).max(128)
}

/// PostgreSQL `shared_buffers`: a quarter of the container memory (the PostgreSQL manual's
/// starting point), at least 128 MiB.
pub fn shared_buffers_mib(memory_bytes: i128) -> i128 {
    (memory_bytes / 4 / MIB).max(128)
}

/// PostgreSQL's WAL retention for a volume of `storage_bytes`, in MiB: `(wal_keep_size,
/// max_slot_wal_keep_size)`. `wal_keep_size` (kept for every standby and for `pg_rewind`, with
/// or without a slot) is an eighth of the volume, at most 1 GiB; the replication slots keep
/// at most a quarter of the volume for a standby that fell behind, so that a stopped or slow
/// standby can never fill the primary's volume. Both at least 64 MiB (four WAL segments).
/// A standby that falls further behind loses its slot and is seeded again by the operator.
pub fn wal_retention_mib(storage_bytes: i128) -> (i128, i128) {
    let keep = (storage_bytes / 8 / MIB).clamp(64, 1024);
    let slots = (storage_bytes / 4 / MIB).max(64);
    (keep, slots)
}

/// The MySQL family's `my.cnf`: the shared header, then the member's `replication` and, when
/// commits wait for a replica, `semi_sync` sections.
pub(crate) fn my_cnf(
    engine: &dyn EngineDef,
    inputs: &ConfigInputs<'_>,
    replication: &str,
    semi_sync: &str,
) -> String {
    let header = format!(
        "\
# Rendered by database-operator for {namespace}/{name}; edits are overwritten.
# Every member shares this file; init.sh copies it to {run}/my.cnf and adds server_id,
# report_host and, on replicas, read_only. The server reads only that file
# (--defaults-file) and listens on the pod IP only (--bind-address on its command line).
[client]
socket = {socket_dir}/mysqld.sock

[mysqld]
datadir = {data_dir}
port = {port}
socket = {socket_dir}/mysqld.sock
pid_file = {socket_dir}/mysqld.pid
skip_name_resolve = ON

# Half of the container memory (limit, else request, else 1Gi).
innodb_buffer_pool_size = {pool}M
sync_binlog = 1
innodb_flush_log_at_trx_commit = 1
",
        namespace = inputs.namespace,
        name = inputs.name,
        run = inputs.run_dir,
        socket_dir = engine.socket_dir(),
        data_dir = engine.data_dir(),
        port = engine.port(),
        pool = innodb_buffer_pool_mib(inputs.memory_bytes),
    );
    let semi_sync = if inputs.sync_replication {
        semi_sync
    } else {
        ""
    };
    let tls = inputs
        .tls_dir
        .map(|dir| my_cnf_tls(dir, inputs.allow_plaintext))
        .unwrap_or_default();
    [header.as_str(), tls.as_str(), replication, semi_sync].concat()
}

/// The MySQL family's TLS lines (`spec.tls`): the server offers TLS with the cluster's
/// certificate; `ALTER INSTANCE RELOAD TLS` (MySQL) and `FLUSH SSL` (MariaDB) pick up a renewed
/// one without a restart. Unless `allow_plaintext`, `require_secure_transport` refuses every
/// plain TCP connection (the Unix socket stays open to the pod's own tools). init.sh keeps these
/// lines only in a pod that mounts the certificate.
fn my_cnf_tls(dir: &str, allow_plaintext: bool) -> String {
    let require = if allow_plaintext {
        "# spec.tls.allowPlaintext: plain TCP connections are accepted too.\n"
    } else {
        "# Plain TCP connections are refused (spec.tls.allowPlaintext: false).\nrequire_secure_transport = ON\n"
    };
    format!(
        "
# TLS (spec.tls): the cluster's server certificate, renewed by the operator and reloaded
# without a restart.
ssl_ca = {dir}/{TLS_CA_FILE}
ssl_cert = {dir}/{TLS_CERT_FILE}
ssl_key = {dir}/{TLS_KEY_FILE}
tls_version = TLSv1.2,TLSv1.3
{require}"
    )
}

/// MariaDB's replication section of `my.cnf`.
pub(crate) const MARIADB_REPLICATION: &str = "
# GTID replication: every member logs its changes so any replica can become the primary;
# replicas follow the primary by GTID (MASTER_USE_GTID = slave_pos). MariaDB always assigns
# GTIDs; strict mode refuses a transaction that would make a member's history diverge.
log_bin = binlog
log_basename = mariadb
binlog_format = ROW
log_slave_updates = ON
relay_log = relay-bin
gtid_strict_mode = ON
binlog_expire_logs_seconds = 604800
";

/// MySQL's replication section of `my.cnf`.
pub(crate) const MYSQL_REPLICATION: &str = "
# GTID-based replication: every member logs its changes so any replica can become the primary,
# and replicas find their position by GTID (SOURCE_AUTO_POSITION) instead of file offsets.
gtid_mode = ON
enforce_gtid_consistency = ON
log_bin = binlog
log_replica_updates = ON
relay_log = relay-bin
binlog_expire_logs_seconds = 604800

log_error_verbosity = 2

# The X protocol would listen on every address (port 33060): off, members share nothing but
# the classic protocol on their own pod IP.
mysqlx = OFF

# New replicas copy the primary with the CLONE plugin (init.sh); the OS user mysql logs in over
# the socket without a password (auth_socket), for probes and kubectl exec.
plugin_load_add = mysql_clone.so
plugin_load_add = auth_socket.so
";

/// Semi-synchronous replication (`spec.replication.mode: sync`, two members or more). Every
/// member acknowledges what it receives (the replica side); the source side, which makes a
/// commit wait for that acknowledgement, is switched on by the operator on the primary only,
/// once a replica replicates from it (so a lone primary never stalls), and off on every other
/// member. The source waits after the binary log is synced and before the commit is visible
/// (`AFTER_SYNC`, lossless), at most the timeout: then it falls back to asynchronous
/// replication until a replica catches up again. MariaDB's section.
pub(crate) const MARIADB_SEMI_SYNC: &str = "
# Semi-synchronous replication (spec.replication.mode: sync): every member acknowledges what it
# receives; the operator enables the source side on the primary once a replica replicates.
# A commit waits at most 10 s for an acknowledgement, then replication is asynchronous until a
# replica catches up.
rpl_semi_sync_slave_enabled = ON
rpl_semi_sync_master_enabled = OFF
rpl_semi_sync_master_timeout = 10000
rpl_semi_sync_master_wait_point = AFTER_SYNC
";

/// MySQL's semi-synchronous section (see [`MARIADB_SEMI_SYNC`]).
pub(crate) const MYSQL_SEMI_SYNC: &str = "
# Semi-synchronous replication (spec.replication.mode: sync): every member acknowledges what it
# receives; the operator enables the source side on the primary once a replica replicates.
# A commit waits at most 10 s for an acknowledgement, then replication is asynchronous until a
# replica catches up.
# (loose_: a server that has not loaded the plugins, as mysqld --initialize may, starts anyway.)
plugin_load_add = semisync_source.so
plugin_load_add = semisync_replica.so
loose_rpl_semi_sync_replica_enabled = ON
loose_rpl_semi_sync_source_enabled = OFF
loose_rpl_semi_sync_source_timeout = 10000
loose_rpl_semi_sync_source_wait_point = AFTER_SYNC
";

/// PostgreSQL's `postgresql.conf`.
pub(crate) fn postgresql_conf(engine: &dyn EngineDef, inputs: &ConfigInputs<'_>) -> String {
    // One WAL sender per replica plus headroom for pg_basebackup and a backup; the same for slots.
    let senders = (inputs.replicas.max(1) + 4).max(10);
    let (keep, slots) = wal_retention_mib(inputs.storage_bytes);
    format!(
        "\
# Rendered by database-operator for {namespace}/{name}; edits are overwritten.
# The server listens on its pod IP only: the command line sets listen_addresses=$(POD_IP).
listen_addresses = ''
port = {port}
unix_socket_directories = '{socket_dir}'
hba_file = '{config_dir}/pg_hba.conf'
password_encryption = scram-sha-256

# Streaming replication: replicas are hot standbys that serve reads. A standby follows the
# read-write Service, which points at the primary; the password file is written by init.sh.
wal_level = replica
hot_standby = on
max_wal_senders = {senders}
max_replication_slots = {senders}
hot_standby_feedback = on
# Every standby streams through a physical slot of its own (member_<ordinal>, set by init.sh;
# the operator creates them on the primary), so the primary keeps the WAL a standby has not
# received yet, but never more than max_slot_wal_keep_size (a quarter of the volume): a standby
# further behind loses its slot and is seeded again, the primary's volume never fills up.
wal_keep_size = {keep}MB
max_slot_wal_keep_size = {slots}MB
# A standby whose source is not there yet (its slot is created just after a promotion) tries
# again after a second, not five.
wal_retrieve_retry_interval = 1s
primary_conninfo = 'host={primary_host} port={port} user={replication_user} passfile={run}/pgpass'
# pg_rewind (used to rejoin a former primary) needs hint bits in the WAL.
wal_log_hints = on

# A quarter of the container memory (limit, else request, else 1Gi).
shared_buffers = {shared_buffers}MB
{tls}{sync}{archive}
log_destination = 'stderr'
logging_collector = off
",
        namespace = inputs.namespace,
        name = inputs.name,
        port = engine.port(),
        socket_dir = engine.socket_dir(),
        config_dir = inputs.config_dir,
        primary_host = inputs.primary_host,
        replication_user = REPLICATION_ACCOUNT,
        run = inputs.run_dir,
        shared_buffers = shared_buffers_mib(inputs.memory_bytes),
        sync = postgresql_sync(inputs),
        archive = postgresql_archive(inputs),
        tls = postgresql_tls_include(inputs),
        keep = keep,
        slots = slots,
    )
}

/// The include of [`postgresql_tls`] from the run directory (when the cluster has TLS).
fn postgresql_tls_include(inputs: &ConfigInputs<'_>) -> String {
    if inputs.tls_dir.is_none() {
        return String::new();
    }
    format!(
        "
# TLS (spec.tls): {PG_TLS_CONF}, which init.sh copies here when the pod mounts the certificate.
include_if_exists = '{run}/{PG_TLS_CONF}'
",
        run = inputs.run_dir
    )
}

/// TLS (`spec.tls`): the server offers TLS with the cluster's certificate (TLS 1.2 or newer);
/// `pg_reload_conf()` picks up a renewed one without a restart. A standby starts streaming
/// libpq's way (`sslmode=prefer`: encrypted, not checked) and the operator points it again with
/// `sslmode=verify-full` once it streams (`core::tls::secure_replication`): a standby started
/// before its primary served TLS (a cluster switching TLS on) must still stream.
pub(crate) fn postgresql_tls(inputs: &ConfigInputs<'_>) -> String {
    let Some(dir) = inputs.tls_dir else {
        return String::new();
    };
    format!(
        "# Rendered by database-operator; edits are overwritten.
# TLS (spec.tls): the cluster's server certificate, renewed by the operator and reloaded
# without a restart.
ssl = on
ssl_cert_file = '{dir}/{TLS_CERT_FILE}'
ssl_key_file = '{dir}/{TLS_KEY_FILE}'
ssl_ca_file = '{dir}/{TLS_CA_FILE}'
ssl_min_protocol_version = 'TLSv1.2'
# Client authentication with TLS: read at server start only, so a pod of an earlier template
# (no certificate, no copy of this file) keeps the rules that accept plain connections.
hba_file = '{config_dir}/{PG_HBA_TLS_CONF}'
",
        config_dir = inputs.config_dir,
    )
}

/// `spec.replication.mode: sync` (with two members or more): a commit returns once one other
/// member has flushed it. Every member gets the same lines, a standby ignores them, so a promoted
/// standby waits for the others from its first commit on, without the operator doing anything.
/// The list names every pod the cluster can ever have (each standby's `application_name` is its
/// `cluster_name`, the pod name), so scaling does not change the file and roll the pods; the
/// primary's own name never matches a connected standby, and walsenders that are not members
/// (`pg_basebackup`, backups) never count.
fn postgresql_sync(inputs: &ConfigInputs<'_>) -> String {
    if !inputs.sync_replication {
        return String::new();
    }
    let names: Vec<String> = (0..MAX_MEMBERS)
        .map(|ordinal| format!("\"{}-{ordinal}\"", inputs.name))
        .collect();
    format!(
        "
# Synchronous replication (spec.replication.mode: sync): a commit waits until any one other
# member has flushed it; while no standby is connected, commits wait (they are not lost).
synchronous_standby_names = 'ANY 1 ({names})'
synchronous_commit = on
",
        names = names.join(", ")
    )
}

/// Continuous archiving (`spec.backup.archive`): the primary runs the operator's binary for
/// every completed segment (and every timeline history file); a standby archives nothing
/// (`archive_mode = on`), so after a failover the new primary continues the archive on its new
/// timeline. A failed upload is retried by the server, the segment stays in `pg_wal` until it
/// succeeds, writes go on.
fn postgresql_archive(inputs: &ConfigInputs<'_>) -> String {
    let Some(archive) = inputs.archive else {
        return String::new();
    };
    format!(
        "
# Continuous archiving (spec.backup.archive) to the backup bucket; the environment of the
# server (bucket, endpoint, keys) is the archive command's.
archive_mode = on
archive_command = '{program} backup wal-push %p %f'
archive_timeout = {timeout}s
",
        program = archive.program,
        timeout = archive.timeout_seconds,
    )
}

/// Client authentication: over the unix socket the OS user `postgres` is the superuser (peer:
/// probes and `kubectl exec ... psql`), everyone else needs a password; over the network
/// everything needs the password (SCRAM), replication only as the replication role, and the
/// replication role nothing but replication (its password is on every member's volume).
pub(crate) const PG_HBA: &str = "\
# Rendered by database-operator; edits are overwritten.
# TYPE  DATABASE     USER        ADDRESS  METHOD
local   all          postgres             peer
local   all          all                  scram-sha-256
host    replication  replicator  all      scram-sha-256
host    all          replicator  all      reject
host    all          all         all      scram-sha-256
";

/// Client authentication of a server that offers TLS ([`PG_HBA_TLS_CONF`]): as [`PG_HBA`], but
/// over the network the superuser, the operator's and the replication accounts connect only
/// with TLS, and, unless `allow_plaintext` (`spec.tls.allowPlaintext`), every other account
/// too. A refused plain connection is told so by a `reject` rule.
pub(crate) fn pg_hba_tls(allow_plaintext: bool) -> String {
    let (replication, operator) = (REPLICATION_ACCOUNT, crate::OPERATOR_ACCOUNT);
    let mut rules = vec![
        ["local", "all", "postgres", "", "peer"],
        ["local", "all", "all", "", "scram-sha-256"],
        [
            "hostssl",
            "replication",
            replication,
            "all",
            "scram-sha-256",
        ],
        ["hostnossl", "replication", "all", "all", "reject"],
        ["host", "all", replication, "all", "reject"],
        ["hostnossl", "all", "postgres", "all", "reject"],
        ["hostnossl", "all", operator, "all", "reject"],
    ];
    if allow_plaintext {
        rules.push(["host", "all", "all", "all", "scram-sha-256"]);
    } else {
        rules.push(["hostssl", "all", "all", "all", "scram-sha-256"]);
        rules.push(["hostnossl", "all", "all", "all", "reject"]);
    }
    let mut out = format!(
        "# Rendered by database-operator; edits are overwritten.\n\
         # With TLS (spec.tls): over the network the superuser, the operator's and the\n\
         # replication accounts connect only with TLS; {others}.\n",
        others = if allow_plaintext {
            "the other accounts may connect without it (spec.tls.allowPlaintext)"
        } else {
            "every other account too"
        }
    );
    out.push_str(&hba_rows(
        std::iter::once(["# TYPE", "DATABASE", "USER", "ADDRESS", "METHOD"]).chain(rules),
    ));
    out
}

/// `pg_hba.conf` rows, each column padded to its widest value.
fn hba_rows(rows: impl Iterator<Item = [&'static str; 5]> + Clone) -> String {
    let mut widths = [0usize; 5];
    for row in rows.clone() {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    rows.map(|row| {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        format!("{}\n", line.join("  ").trim_end())
    })
    .collect()
}
