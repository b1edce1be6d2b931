//! ConfigMap `<name>-config`: the engine configuration and the scripts.
//!
//! The files are the engine crate's ([`database_operator_engine::config`]: the replication
//! settings of each engine, GTID replication for MySQL and MariaDB, streaming replication with
//! hot standbys for PostgreSQL; the memory the engine caches data in, a share of the
//! container's memory; the client authentication rules; and the init script). This module
//! gives them the cluster's values (names, memory, sync mode, mount paths) and puts them in the
//! ConfigMap. [`config_hash`] is what rolls the pods when any of it changes.

use std::collections::BTreeMap;

use database_operator_engine::config::{self, ConfigInputs};
use k8s_openapi::api::core::v1::ConfigMap;

use super::labels::COMPONENT_DATABASE;
use super::{RenderContext, quantity, scripts, statefulset};

pub use database_operator_engine::config::{MY_CNF, PG_HBA_CONF, POSTGRESQL_CONF};

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

/// The files of the ConfigMap, by key, for members whose volumes have `spec.storage.size`.
pub fn data(cluster: &RenderContext<'_>) -> BTreeMap<String, String> {
    data_for_volume(cluster, volume_bytes(cluster, None))
}

/// The size of each member's data volume, in bytes, that the configuration is rendered for
/// (PostgreSQL's WAL retention is a share of it): the data claim template of the StatefulSet
/// as observed (`observed`), else `spec.storage.size`. The template is immutable once the
/// StatefulSet exists, so a later change of `spec.storage.size` does not change this, and does
/// not roll the members.
pub fn volume_bytes(
    cluster: &RenderContext<'_>,
    observed: Option<&[k8s_openapi::api::core::v1::PersistentVolumeClaim]>,
) -> i128 {
    observed
        .into_iter()
        .flatten()
        .find(|c| c.metadata.name.as_deref() == Some(statefulset::DATA_VOLUME))
        .and_then(|c| c.spec.as_ref()?.resources.as_ref()?.requests.as_ref())
        .and_then(|r| quantity::value(&r.get("storage")?.0))
        .or_else(|| quantity::value(&cluster.spec.storage.size.0))
        .unwrap_or(1024 * MIB)
}

/// The files of the ConfigMap, by key, for members whose data volumes hold `storage_bytes`
/// ([`volume_bytes`]).
pub fn data_for_volume(
    cluster: &RenderContext<'_>,
    storage_bytes: i128,
) -> BTreeMap<String, String> {
    let primary_host = cluster.primary_host();
    let program = super::cron_job::copied_binary();
    let inputs = ConfigInputs {
        namespace: cluster.namespace,
        name: cluster.name,
        replicas: cluster.spec.replicas,
        memory_bytes: container_memory(cluster),
        storage_bytes,
        sync_replication: cluster.sync_replication(),
        primary_host: &primary_host,
        config_dir: super::CONFIG_MOUNT_PATH,
        run_dir: statefulset::RUN_MOUNT_PATH,
        archive: super::archive(cluster).map(|a| config::Archive {
            program: &program,
            timeout_seconds: a.timeout_seconds,
        }),
        tls_dir: super::tls::wanted(cluster).then_some(super::tls::MOUNT_PATH),
        allow_plaintext: !database_operator_api::TlsSpec::refuses_plaintext(
            cluster.spec.tls.as_ref(),
        ),
    };
    let mut data: BTreeMap<String, String> = cluster
        .engine_def()
        .config_files(&inputs)
        .into_iter()
        .map(|(key, file)| (key.to_owned(), file))
        .collect();
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
    config::innodb_buffer_pool_mib(container_memory(cluster))
}

/// PostgreSQL `shared_buffers`: a quarter of the container memory (the PostgreSQL manual's
/// starting point), at least 128 MiB.
pub fn shared_buffers_mib(cluster: &RenderContext<'_>) -> i128 {
    config::shared_buffers_mib(container_memory(cluster))
}

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
