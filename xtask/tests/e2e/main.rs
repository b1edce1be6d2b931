//! End-to-end suite: the operator as a process against a real local control plane
//! (kube-apiserver, etcd, controller-manager, scheduler, kwok). Run with `cargo xtask e2e`
//! (see docs/development.md); the target needs `--features e2e`, so `cargo test --workspace`
//! never runs it.
//!
//! A custom harness (`harness = false`): every scenario shares one cluster, runs on its own
//! namespace, and is reported on its own line; see `harness.rs`.

mod env;
mod harness;
mod scenarios;
mod util;

fn main() -> std::process::ExitCode {
    let mut scenarios = vec![
        // The local control plane itself (own clusters, started and stopped here).
        scenario!(cluster::up_with_audit_log_and_down),
        scenario!(cluster::failing_component_is_named_with_its_log),
        // `cargo xtask demo --exit-after-ready` (own cluster).
        scenario!(demo::runs_until_running_and_tears_down),
        // Process nodes on the shared cluster: real processes for pods.
        scenario!(process_nodes::postgres_pod_runs_restarts_and_stops),
        scenario!(process_nodes::unknown_image_waits_with_a_warning),
        scenario!(process_nodes::statefulset_names_labels_and_volumes),
        // Real databases through the operator (examples/local/ on process nodes).
        scenario!(databases::postgresql_example_replicates_and_survives),
        scenario!(databases::mariadb_example_replicates),
        scenario!(databases::mysql_example_replicates),
        scenario!(databases::nothing_leaves_loopback),
        // Backups to the local S3 server through the CronJob's Job (real PostgreSQL, MariaDB).
        scenario!(backups::postgresql_backup_to_local_s3),
        scenario!(backups::mariadb_backup_to_local_s3),
        // Failover and switchover on real servers.
        scenario!(failover::postgresql_hung_primary_fails_over),
        scenario!(failover::mariadb_hung_primary_fails_over),
        scenario!(failover::mysql_hung_primary_fails_over),
        scenario!(failover::postgresql_switchover_loses_nothing),
        scenario!(failover::postgresql_lost_node_fails_over),
        scenario!(failover::postgresql_lost_node_self_fences),
        scenario!(failover::mariadb_lost_node_self_fences),
        scenario!(failover::mysql_lost_node_self_fences),
        scenario!(failover::postgresql_sync_switchover_and_failover_lose_nothing),
        scenario!(failover::mariadb_sync_switchover_and_failover_lose_nothing),
        scenario!(failover::mysql_sync_switchover_and_failover_lose_nothing),
        // Password rotation and rolling upgrades on real servers.
        scenario!(rotation::password_rotation_reaches_the_database),
        // 136-144 s warm; on a fresh machine the 15.18 process-node root is built inside it and
        // its first start takes minutes (a cold run ran out of the default 300 s by seconds).
        harness::Scenario {
            budget: Some(std::time::Duration::from_secs(480)),
            ..scenario!(upgrades::postgresql_minor_upgrade_rolls_and_switches_over)
        },
        // The shared cluster from here on; the scenarios in its order.
        scenario!(lifecycle::seed_manifest_creates_everything),
        scenario!(admission::api_server_rejects_bad_objects),
        scenario!(lifecycle::scale_up_and_down_keeps_volumes),
        scenario!(lifecycle::deleted_pod_degrades_then_recovers),
        scenario!(lifecycle::hand_edited_replicas_are_put_back),
        scenario!(lifecycle::secret_change_restarts_nothing),
        scenario!(lifecycle::delete_runs_finalizer_and_keeps_volumes),
        scenario!(operator::quiet_minute),
        scenario!(operator::killed_mid_reconcile_converges_without_duplicates),
        scenario!(operator::leader_election_fails_over),
        scenario!(databases::operator_runs_in_cluster_from_deploy),
        scenario!(helm::operator_installed_with_helm),
        scenario!(admission::webhook_by_url_denies_unsupported_version),
        // `kubectl dbc` against a real PostgreSQL cluster (last: its cluster rolls real servers).
        scenario!(plugin::status_and_plan_match_the_cluster),
        // Last: it checks the audit log of everything before it.
        scenario!(operator::no_write_repeats_the_one_before),
    ];
    // A measurement, not a check: only on request (`FAILOVER_BENCH=<count>`).
    if std::env::var_os("FAILOVER_BENCH").is_some() {
        scenarios.push(harness::Scenario {
            budget: Some(scenarios::failover::bench_budget()),
            ..scenario!(failover::bench_hung_primary_failovers)
        });
    }
    harness::main(scenarios)
}
