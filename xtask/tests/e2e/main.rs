//! End-to-end suite: the operator as a process against a real local control plane
//! (kube-apiserver, etcd, controller-manager, scheduler, kwok). Run with `cargo xtask e2e`
//! (see docs/development.md); the target needs `--features e2e`, so `cargo test --workspace`
//! never runs it.
//!
//! A custom harness (`harness = false`): every scenario shares one cluster, runs on its own
//! namespace, and is reported on its own line; scenarios without database servers run in a side
//! lane beside the others; see `harness.rs`.

mod admission_policy;
mod env;
mod fault_proxy;
mod harness;
mod scenarios;
mod util;

fn main() -> std::process::ExitCode {
    let mut scenarios = vec![
        // The local control plane itself and the demo: clusters of their own, whose process
        // pods would take the same loopback addresses as the shared cluster's (so alone).
        scenario!(cluster::up_with_audit_log_and_down).alone(),
        scenario!(cluster::failing_component_is_named_with_its_log).alone(),
        scenario!(demo::runs_until_running_and_tears_down).alone(),
        // From here on, a packet capture of the database ports: no password and no SQL text in
        // clear (checked at the end).
        scenario!(capture::begins),
        // Process nodes on the shared cluster: real processes for pods.
        scenario!(process_nodes::postgres_pod_runs_restarts_and_stops),
        scenario!(process_nodes::unknown_image_waits_with_a_warning),
        scenario!(process_nodes::statefulset_names_labels_and_volumes),
        // Real databases through the operator (examples/local/ on process nodes). Each engine's
        // example cluster passes from one scenario to the next while they leave it intact
        // (`Ctx::hand_over`); the hung primary, which may leave a member quarantined, is the
        // last to use it.
        scenario!(databases::postgresql_example_replicates_and_survives),
        scenario!(databases::nothing_leaves_loopback),
        scenario!(failover::postgresql_switchover_loses_nothing),
        scenario!(safety::postgresql_resources_change_switches_over_first),
        scenario!(safety::postgresql_deleted_operator_secret_is_restored),
        scenario!(tls::postgresql_certificate_renewed_under_a_writer),
        scenario!(storage::postgresql_storage_growth_grows_every_claim),
        scenario!(scaling::postgresql_scale_down_past_the_primary_switches_over_first),
        scenario!(databases::mariadb_example_replicates),
        scenario!(failover::mariadb_hung_primary_fails_over),
        scenario!(databases::mysql_example_replicates),
        scenario!(failover::mysql_hung_primary_fails_over),
        // Sync mode: clusters of their own (the mode is in the pods' configuration).
        scenario!(failover::postgresql_sync_switchover_and_failover_lose_nothing),
        scenario!(failover::mariadb_sync_switchover_and_failover_lose_nothing),
        scenario!(failover::mysql_sync_switchover_and_failover_lose_nothing),
        // A replica frozen and killed under the writer (clusters of their own; a bound on the
        // writer's gap: alone).
        scenario!(replica_faults::postgresql_replica_freeze_and_kill).alone(),
        scenario!(replica_faults::mariadb_sync_replica_freeze_and_kill).alone(),
        scenario!(replica_faults::mysql_sync_replica_freeze_and_kill).alone(),
        // A replica further behind than its slot keeps WAL for, reseeded on its own, then one
        // reseeded by `kubectl dbc reseed` (a cluster of its own on a 1Gi volume; alone).
        scenario!(reseed::postgresql_replica_past_its_wal_is_reseeded).alone(),
        scenario!(reseed::mariadb_replica_past_its_binary_logs_is_reseeded).alone(),
        // Power cuts of a process node would take side-lane pods down with it: alone.
        scenario!(failover::postgresql_lost_node_fails_over).alone(),
        // It kills the shared operator mid-failover.
        scenario!(failover::postgresql_hung_primary_fails_over).alone(),
        // The PostgreSQL example's primary loses its volume (after the hung primary: it may
        // leave the example with any member as primary).
        scenario!(emptied::postgresql_emptied_primary_volume_fails_over).alone(),
        scenario!(emptied::mariadb_emptied_primary_volume_fails_over).alone(),
        // Self-fencing: power cuts, and a write gap bound that load would blur.
        scenario!(failover::postgresql_lost_node_self_fences).alone(),
        scenario!(failover::mariadb_lost_node_self_fences).alone(),
        scenario!(failover::mysql_lost_node_self_fences).alone(),
        // A network partition of the primary's node (nftables on the node's cgroup; a cut and a
        // write gap bound: alone).
        scenario!(failover::postgresql_partitioned_primary_self_fences).alone(),
        scenario!(failover::mariadb_partitioned_primary_self_fences).alone(),
        // 136-159 s warm; on a fresh machine without the prebuild the 15.18 process-node root is
        // built inside it and its first start takes minutes (a cold run ran out of the default
        // 300 s by seconds). Its own operator (the shared one stopped), and a bound on the
        // writer's gap: alone.
        harness::Scenario {
            budget: Some(std::time::Duration::from_secs(480)),
            ..scenario!(upgrades::postgresql_minor_upgrade_rolls_and_switches_over)
        }
        .alone(),
        // Its own operators (the shared one stopped), aborted before each step of switchovers.
        scenario!(crash_points::postgresql_switchover_survives_operator_crashes).alone(),
        scenario!(crash_points::postgresql_roll_and_scale_survive_operator_crashes).alone(),
        // Its own two operators (the shared one stopped), one of them stopped mid-switchover.
        scenario!(stale_leader::postgresql_stalled_leader_takes_no_database_step).alone(),
        // The whole cluster from here on: after the side lane, nothing beside.
        scenario!(operator::quiet_minute).after_side(),
        scenario!(operator::killed_mid_reconcile_converges_without_duplicates).after_side(),
        scenario!(operator::leader_election_fails_over).after_side(),
        scenario!(databases::operator_runs_in_cluster_from_deploy).after_side(),
        scenario!(helm::operator_installed_with_helm).after_side(),
        scenario!(admission::webhook_by_url_denies_unsupported_version).after_side(),
        // Everything since `capture::begins`, the side lane's backups and rotations included.
        scenario!(capture::nothing_in_clear_on_the_database_ports).after_side(),
        // Last: it checks the audit log of everything before it.
        scenario!(operator::no_write_repeats_the_one_before).after_side(),
        // The side lane (`Lane::Side`): beside the main lane's scenarios above that welcome
        // company; each reads and writes only its own namespaces and leaves the shared operator
        // alone. First the lifecycle scenarios in its order (fake nodes, no servers),
        // then the backup, rotation and plugin scenarios on real servers.
        scenario!(lifecycle::seed_manifest_creates_everything).beside(),
        scenario!(admission::api_server_rejects_bad_objects).beside(),
        scenario!(lifecycle::scale_up_and_down_keeps_volumes).beside(),
        scenario!(lifecycle::deleted_pod_degrades_then_recovers).beside(),
        scenario!(lifecycle::hand_edited_replicas_are_put_back).beside(),
        scenario!(lifecycle::secret_change_restarts_nothing).beside(),
        scenario!(safety::unusable_password_is_refused).beside(),
        scenario!(safety::foreign_objects_are_never_taken_over).beside(),
        scenario!(lifecycle::delete_runs_finalizer_and_keeps_volumes).beside(),
        // Backups to the local S3 server through the CronJob's Job (real PostgreSQL, MariaDB).
        scenario!(backups::postgresql_backup_to_local_s3).beside(),
        scenario!(backups::mariadb_backup_to_local_s3).beside(),
        // Password rotation on real servers of the three engines.
        scenario!(rotation::password_rotation_reaches_the_database).beside(),
        // `kubectl dbc` against a real PostgreSQL cluster.
        scenario!(plugin::status_and_plan_match_the_cluster).beside(),
    ];
    // Cells of the fault matrix that run as a command of their own (`E2E_MATRIX=1 cargo xtask
    // e2e <scenario>`; docs/reliability.md), not in CI: those over a minute, and the other
    // engines' copies of cells above (the suite's warm-run budget; docs/development.md).
    if std::env::var_os("E2E_MATRIX").is_some() {
        scenarios.push(scenario!(reseed::mysql_replica_past_its_binary_logs_is_reseeded).alone());
        scenarios.push(scenario!(replica_faults::postgresql_sync_replica_freeze_and_kill).alone());
        scenarios.push(scenario!(replica_faults::mariadb_replica_freeze_and_kill).alone());
        scenarios.push(scenario!(replica_faults::mysql_replica_freeze_and_kill).alone());
        scenarios.push(scenario!(emptied::mysql_emptied_primary_volume_fails_over).alone());
        scenarios.push(scenario!(disk_full::postgresql_primary_volume_full).alone());
        scenarios.push(scenario!(disk_full::mariadb_primary_volume_full).alone());
        scenarios.push(scenario!(disk_full::mysql_primary_volume_full).alone());
        scenarios.push(scenario!(failover::mysql_partitioned_primary_self_fences).alone());
        scenarios
            .push(scenario!(failover::postgresql_partitioned_primary_waits_for_its_fence).alone());
        scenarios.push(scenario!(failover::postgresql_partitioned_replica_catches_up).alone());
        scenarios
            .push(scenario!(api_faults::postgresql_failover_through_a_faulty_api_server).alone());
        // It freezes the shared S3 server for about two minutes.
        scenarios.push(
            harness::Scenario {
                budget: Some(std::time::Duration::from_secs(600)),
                ..scenario!(
                    archiving::postgresql_hung_bucket_delays_archiving_without_stopping_writes
                )
            }
            .alone(),
        );
        // Two backups and two restores against S3 faults, the hung ones bound by the client's
        // retries (about 3 minutes each).
        scenarios.push(
            harness::Scenario {
                budget: Some(std::time::Duration::from_secs(900)),
                ..scenario!(
                    s3_faults::postgresql_backup_to_a_refusing_or_hung_s3_fails_in_bounded_time
                )
            }
            .beside(),
        );
    }
    // A measurement, not a check: only on request (`FAILOVER_BENCH=<count>`).
    if std::env::var_os("FAILOVER_BENCH").is_some() {
        scenarios.push(harness::Scenario {
            budget: Some(scenarios::failover::bench_budget()),
            ..scenario!(failover::bench_hung_primary_failovers)
        });
    }
    harness::main(scenarios)
}
