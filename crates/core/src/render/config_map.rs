//! ConfigMap `<name>-config`: the engine configuration and the scripts.
//!
//! Decides the replication settings of each engine (GTID replication for MySQL, streaming
//! replication with hot standbys for PostgreSQL), the memory the engine caches data in (a share
//! of the container's memory), the client authentication rules, and which scripts ship with the
//! cluster. [`config_hash`] is what rolls the pods when any of it changes.

use std::collections::BTreeMap;

use database_operator_api::Engine;
use k8s_openapi::api::core::v1::ConfigMap;

use super::labels::COMPONENT_DATABASE;
use super::{RenderContext, quantity, scripts, statefulset};

/// ConfigMap key of the MySQL server configuration.
pub const MY_CNF: &str = "my.cnf";
/// ConfigMap key of the PostgreSQL server configuration.
pub const POSTGRESQL_CONF: &str = "postgresql.conf";
/// ConfigMap key of the PostgreSQL client authentication rules.
pub const PG_HBA_CONF: &str = "pg_hba.conf";

const MIB: i128 = 1024 * 1024;

/// The ConfigMap of the cluster.
pub fn render(cluster: &RenderContext<'_>) -> ConfigMap {
    render_with(cluster, data(cluster))
}

/// The ConfigMap of the cluster holding `data` (what [`data`] returned: a planning pass renders
/// the files once, for the hash and for the object).
pub fn render_with(cluster: &RenderContext<'_>, data: BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: cluster.metadata(cluster.config_map_name(), COMPONENT_DATABASE),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The files of the ConfigMap, by key.
pub fn data(cluster: &RenderContext<'_>) -> BTreeMap<String, String> {
    let mut data = BTreeMap::new();
    match cluster.engine {
        Engine::Mysql | Engine::Mariadb => {
            data.insert(MY_CNF.to_owned(), my_cnf(cluster));
        }
        Engine::Postgresql => {
            data.insert(POSTGRESQL_CONF.to_owned(), postgresql_conf(cluster));
            data.insert(PG_HBA_CONF.to_owned(), PG_HBA.to_owned());
        }
    }
    data.insert(
        scripts::INIT_KEY.to_owned(),
        cluster.engine_def().init_script().to_owned(),
    );
    data
}

/// A hash of everything in the ConfigMap (all of it is what the database pods use): the value of the `database.example.com/config-hash`
/// pod-template annotation, 32 hex digits. The hash is a fast non-cryptographic 128-bit hash
/// over every key and value in key order; it only has to change when the content changes.
pub fn config_hash(data: &BTreeMap<String, String>) -> String {
    let parts = data.iter().flat_map(|(k, v)| [k.as_bytes(), v.as_bytes()]);
    format!("{:032x}", crate::hash::hash_parts(parts))
}

/// The memory the database container may use, in bytes: the memory limit, else the request,
/// else the default.
fn container_memory(cluster: &RenderContext<'_>) -> i128 {
    let resources = statefulset::database_resources(cluster);
    let memory =
        |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.and_then(|m| m.get("memory"))
                .and_then(|q| quantity::value(&q.0))
        };
    memory(resources.limits.as_ref())
        .or_else(|| memory(resources.requests.as_ref()))
        .unwrap_or(1024 * MIB)
}

/// InnoDB buffer pool: half of the container memory, a multiple of 128 MiB (the default
/// `innodb_buffer_pool_chunk_size`), at least 128 MiB.
pub fn innodb_buffer_pool_mib(cluster: &RenderContext<'_>) -> i128 {
    let half = container_memory(cluster) / 2 / MIB;
    (half / 128 * 128).max(128)
}

/// PostgreSQL `shared_buffers`: a quarter of the container memory (the PostgreSQL manual's
/// starting point), at least 128 MiB.
pub fn shared_buffers_mib(cluster: &RenderContext<'_>) -> i128 {
    (container_memory(cluster) / 4 / MIB).max(128)
}

fn my_cnf(cluster: &RenderContext<'_>) -> String {
    let spec = cluster.engine_def();
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
        namespace = cluster.namespace,
        name = cluster.name,
        run = statefulset::RUN_MOUNT_PATH,
        socket_dir = spec.socket_dir(),
        data_dir = spec.data_dir(),
        port = spec.port(),
        pool = innodb_buffer_pool_mib(cluster),
    );
    let replication = if cluster.engine == Engine::Mariadb {
        "
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
"
    } else {
        "
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
"
    };
    [header.as_str(), replication, semi_sync(cluster)].concat()
}

/// Semi-synchronous replication (`spec.replication.mode: sync`, two members or more). Every
/// member acknowledges what it receives (the replica side); the source side, which makes a
/// commit wait for that acknowledgement, is switched on by the operator on the primary only,
/// once a replica replicates from it (so a lone primary never stalls), and off on every other
/// member. The source waits after the binary log is synced and before the commit is visible
/// (`AFTER_SYNC`, lossless), at most the timeout: then it falls back to asynchronous
/// replication until a replica catches up again.
fn semi_sync(cluster: &RenderContext<'_>) -> &'static str {
    if !cluster.sync_replication() {
        return "";
    }
    if cluster.engine == Engine::Mariadb {
        "
# Semi-synchronous replication (spec.replication.mode: sync): every member acknowledges what it
# receives; the operator enables the source side on the primary once a replica replicates.
# A commit waits at most 10 s for an acknowledgement, then replication is asynchronous until a
# replica catches up.
rpl_semi_sync_slave_enabled = ON
rpl_semi_sync_master_enabled = OFF
rpl_semi_sync_master_timeout = 10000
rpl_semi_sync_master_wait_point = AFTER_SYNC
"
    } else {
        "
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
"
    }
}

fn postgresql_conf(cluster: &RenderContext<'_>) -> String {
    // One WAL sender per replica plus headroom for pg_basebackup and a backup; the same for slots.
    let senders = (cluster.spec.replicas.max(1) + 4).max(10);
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
wal_keep_size = 1GB
hot_standby_feedback = on
primary_conninfo = 'host={primary_host} port={port} user={replication_user} passfile={run}/pgpass'
# pg_rewind (used to rejoin a former primary) needs hint bits in the WAL.
wal_log_hints = on

# A quarter of the container memory (limit, else request, else 1Gi).
shared_buffers = {shared_buffers}MB
{sync}
log_destination = 'stderr'
logging_collector = off
",
        namespace = cluster.namespace,
        name = cluster.name,
        port = cluster.engine_def().port(),
        socket_dir = cluster.engine_def().socket_dir(),
        config_dir = super::CONFIG_MOUNT_PATH,
        primary_host = cluster.primary_host(),
        replication_user = statefulset::REPLICATION_USER,
        run = statefulset::RUN_MOUNT_PATH,
        shared_buffers = shared_buffers_mib(cluster),
        sync = postgresql_sync(cluster),
    )
}

/// The most members a cluster can have (`spec.replicas` is 1 to 9).
const MAX_MEMBERS: i32 = 9;

/// `spec.replication.mode: sync` (with two members or more): a commit returns once one other
/// member has flushed it. Every member gets the same lines, a standby ignores them, so a promoted
/// standby waits for the others from its first commit on, without the operator doing anything.
/// The list names every pod the cluster can ever have (each standby's `application_name` is its
/// `cluster_name`, the pod name), so scaling does not change the file and roll the pods; the
/// primary's own name never matches a connected standby, and walsenders that are not members
/// (`pg_basebackup`, backups) never count.
fn postgresql_sync(cluster: &RenderContext<'_>) -> String {
    if !cluster.sync_replication() {
        return String::new();
    }
    let names: Vec<String> = (0..MAX_MEMBERS)
        .map(|ordinal| format!("\"{}\"", cluster.pod_name(ordinal)))
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

/// Client authentication: over the unix socket the OS user `postgres` is the superuser (peer:
/// probes and `kubectl exec ... psql`), everyone else needs a password; over the network
/// everything needs the password (SCRAM), replication only as the replication role.
const PG_HBA: &str = "\
# Rendered by database-operator; edits are overwritten.
# TYPE  DATABASE     USER        ADDRESS  METHOD
local   all          postgres             peer
local   all          all                  scram-sha-256
host    replication  replicator  all      scram-sha-256
host    all          all         all      scram-sha-256
";

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn config_hash_follows_what_the_database_pods_use() {
        let base = config_hash(&data(&[
            ("my.cnf", "a"),
            ("init.sh", "b"),
            ("pg_hba.conf", "c"),
        ]));
        assert_eq!(base.len(), 32);
        assert_ne!(
            base,
            config_hash(&data(&[
                ("my.cnf", "a2"),
                ("init.sh", "b"),
                ("pg_hba.conf", "c")
            ]))
        );
        assert_ne!(
            base,
            config_hash(&data(&[("my.cnf", "a"), ("init.sh", "b"), ("x", "")]))
        );
        // Key/value boundaries count.
        assert_ne!(
            config_hash(&data(&[("ab", "c")])),
            config_hash(&data(&[("a", "bc")]))
        );
    }

    #[test]
    fn config_hash_is_stable_across_releases() {
        // Changing the function rolls every member of every cluster on an operator upgrade:
        // this pins it.
        assert_eq!(config_hash(&data(&[("my.cnf", "[mysqld]\n")])), PINNED_HASH);
    }

    const PINNED_HASH: &str = "50ab5fc0740783d7ecad9684b2bb460a";
}
