//! Snapshots of every rendered object for the reference manifests. `cargo xtask snapshots` runs
//! these (every test here has `snapshot` in its name) and fails on any unreviewed change.

mod common;

use common::{Pods, converge, observed};
use database_operator_api::DatabaseCluster;
use database_operator_core::{OwnedKind, Plan, plan};

/// Snapshots each object of the first plan for `cluster`, plus the plan's outline, under
/// `<prefix>__<kind>_<name>`.
fn snapshot_plan(prefix: &str, cluster: DatabaseCluster) -> Plan {
    snapshot_kinds(prefix, cluster, &OwnedKind::all())
}

/// [`snapshot_plan`] for the objects of `kinds` only (the rest is as another snapshot shows).
fn snapshot_kinds(prefix: &str, cluster: DatabaseCluster, kinds: &[OwnedKind]) -> Plan {
    let plan = plan(&observed(cluster));
    for planned in plan
        .objects
        .iter()
        .filter(|o| kinds.contains(&o.object.kind()))
    {
        let key = planned.object.key();
        let kind = key.kind.as_str().to_lowercase();
        let mut value = planned.object.to_value();
        if key.kind == OwnedKind::ConfigMap {
            // Files as text snapshots a reviewer can read; the object lists their names.
            let data = value["data"].as_object_mut().expect("ConfigMap data");
            for (file, content) in data.iter_mut() {
                insta::assert_snapshot!(
                    format!("{prefix}__file_{file}"),
                    content.as_str().expect("text")
                );
                *content = serde_json::json!(format!("<snapshot {prefix}__file_{file}>"));
            }
        }
        insta::assert_yaml_snapshot!(format!("{prefix}__{kind}_{}", key.name), value);
    }
    insta::assert_yaml_snapshot!(format!("{prefix}__outline"), common::summary(&plan));
    plan
}

#[test]
fn snapshot_mysql_example() {
    let plan = snapshot_plan("mysql_example", common::mysql());
    // Every kind the operator owns appears in the seed's manifest, but what only
    // `nodeLoss: SelfFence` adds (snapshot_self_fencing_postgresql).
    for kind in OwnedKind::all() {
        assert_eq!(
            plan.objects.iter().any(|o| o.object.kind() == kind),
            !SELF_FENCE_KINDS.contains(&kind),
            "{kind:?}"
        );
    }
}

const SELF_FENCE_KINDS: [OwnedKind; 4] = [
    OwnedKind::ServiceAccount,
    OwnedKind::Role,
    OwnedKind::RoleBinding,
    OwnedKind::Lease,
];

#[test]
fn snapshot_self_fencing_postgresql() {
    let mut cluster = common::postgresql();
    cluster.spec.failover = Some(database_operator_api::FailoverSpec {
        node_loss: database_operator_api::NodeLossPolicy::SelfFence,
        lease_seconds: 8,
        ..Default::default()
    });
    // What differs from snapshot_postgresql_example: the agents' objects and the StatefulSet.
    let mut kinds = SELF_FENCE_KINDS.to_vec();
    kinds.push(OwnedKind::StatefulSet);
    let plan = snapshot_kinds("self_fencing_postgresql", cluster, &kinds);
    for kind in SELF_FENCE_KINDS {
        assert!(
            plan.objects.iter().any(|o| o.object.kind() == kind),
            "{kind:?} missing"
        );
    }
}

#[test]
fn snapshot_postgresql_example() {
    snapshot_plan("postgresql_example", common::postgresql());
}

#[test]
fn snapshot_single_replica_without_backup() {
    let plan = snapshot_plan("single_replica", common::single());
    assert!(
        !plan
            .objects
            .iter()
            .any(|o| o.object.kind() == OwnedKind::PodDisruptionBudget)
    );
    assert!(
        !plan
            .objects
            .iter()
            .any(|o| o.object.kind() == OwnedKind::CronJob)
    );
}

#[test]
fn snapshot_backup_cleanup_job() {
    // The Job `deletionPolicy: Delete` starts when the cluster is deleted: not an owned object,
    // so not in the plans above.
    let cluster = common::postgresql();
    let config = database_operator_core::OperatorConfig::default();
    let ctx = database_operator_core::render::RenderContext {
        tls_blocked: false,
        name: "orders-db",
        namespace: "default",
        uid: "uid-1",
        engine: cluster.spec.engine,
        version: &cluster.spec.version,
        spec: &cluster.spec,
        config: &config,
    };
    let job = database_operator_core::render::cleanup_job::render(
        &ctx,
        cluster.spec.backup.as_ref().expect("the example backs up"),
    );
    insta::assert_yaml_snapshot!("postgresql_example__job_orders-db-cleanup", job);
}

#[test]
fn snapshot_bootstrap_from_backup() {
    // A new PostgreSQL cluster restored from the newest backup of another cluster.
    let mut cluster = common::postgresql();
    cluster.spec.bootstrap = Some(
        serde_json::from_value(serde_json::json!({"fromBackup": {
            "cluster": "orders-old",
            "namespace": "archive",
            "s3Bucket": "orders-db-backups",
            "endpoint": "https://minio.backup.svc:9000",
            "credentialsSecretRef": {"name": "orders-db-backup-credentials"}
        }}))
        .expect("a bootstrap"),
    );
    let sts = bootstrap_statefulset(cluster);
    let pod = &sts["spec"]["template"]["spec"];
    insta::assert_yaml_snapshot!(
        "bootstrap_from_backup__init_containers",
        serde_json::json!({"initContainers": pod["initContainers"], "volumes": pod["volumes"]})
    );
}

/// The StatefulSet the plan renders for `cluster`.
fn bootstrap_statefulset(cluster: database_operator_api::DatabaseCluster) -> serde_json::Value {
    plan(&observed(cluster))
        .objects
        .iter()
        .find(|o| o.object.kind() == OwnedKind::StatefulSet)
        .expect("a StatefulSet")
        .object
        .to_value()
}

/// The signing key and signature check a bootstrap restore gets, for `from_backup`.
fn restore_signing_env(from_backup: serde_json::Value) -> Vec<serde_json::Value> {
    let mut cluster = common::postgresql();
    cluster.spec.bootstrap =
        Some(serde_json::from_value(serde_json::json!({ "fromBackup": from_backup })).unwrap());
    let sts = bootstrap_statefulset(cluster);
    sts["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .expect("init containers")
        .iter()
        .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("BACKUP_S"))
        })
        .collect()
}

#[test]
fn a_bootstrap_restore_checks_the_signature_with_the_sources_key() {
    let key_ref = |name: &str, key: &str, optional: bool| {
        serde_json::json!({"name": "BACKUP_SIGNING_KEY", "valueFrom": {"secretKeyRef": {
            "name": name, "key": key, "optional": optional}}})
    };
    // The source in this namespace: its operator Secret's key, optional (a missing one makes
    // the restore say so instead of the pod not starting).
    let same = serde_json::json!({"cluster": "orders-old", "s3Bucket": "old-backups"});
    assert_eq!(
        restore_signing_env(same),
        [key_ref("orders-old-operator", "backup-signing-key", true)]
    );
    let named = serde_json::json!({"cluster": "orders-old", "namespace": "default", "s3Bucket": "old-backups"});
    assert_eq!(
        restore_signing_env(named),
        [key_ref("orders-old-operator", "backup-signing-key", true)]
    );
    // In another namespace its Secret cannot be read: only a named key.
    let other = serde_json::json!({"cluster": "orders-old", "namespace": "archive", "s3Bucket": "old-backups"});
    assert_eq!(restore_signing_env(other), Vec::<serde_json::Value>::new());
    let given = serde_json::json!({"cluster": "orders-old", "namespace": "archive", "s3Bucket": "old-backups",
        "signingKeySecretRef": {"name": "kept-keys", "key": "orders-old"}});
    assert_eq!(
        restore_signing_env(given),
        [key_ref("kept-keys", "orders-old", false)]
    );
    // Skipping the check is said to the restore.
    let skip = serde_json::json!({"cluster": "orders-old", "namespace": "archive", "s3Bucket": "old-backups",
        "signatureCheck": "Skip"});
    assert_eq!(
        restore_signing_env(skip),
        [serde_json::json!({"name": "BACKUP_SKIP_SIGNATURE_CHECK", "value": "true"})]
    );
}

#[test]
fn snapshot_continuous_archiving() {
    // The PostgreSQL example with its write-ahead log archived: the binary is copied into the
    // pod, the server gets the bucket's environment and runs it as its archive command.
    let mut cluster = common::postgresql();
    cluster
        .spec
        .backup
        .as_mut()
        .expect("the example backs up")
        .archive = Some(serde_json::from_value(serde_json::json!({"timeoutSeconds": 30})).unwrap());
    let plan = plan(&observed(cluster));
    let object = |kind| {
        plan.objects
            .iter()
            .find(|o| o.object.kind() == kind)
            .expect("rendered")
            .object
            .to_value()
    };
    let sts = object(OwnedKind::StatefulSet);
    let pod = &sts["spec"]["template"]["spec"];
    let server = &pod["containers"][0];
    insta::assert_yaml_snapshot!(
        "continuous_archiving__pod",
        serde_json::json!({
            "initContainers": pod["initContainers"].as_array().map(|c| c.iter().map(|c| &c["name"]).collect::<Vec<_>>()),
            "volumes": pod["volumes"],
            "server": {"env": server["env"], "volumeMounts": server["volumeMounts"]},
        })
    );
    let config = object(OwnedKind::ConfigMap);
    let conf = config["data"]["postgresql.conf"]
        .as_str()
        .expect("postgresql.conf");
    let archive: Vec<&str> = conf.lines().filter(|l| l.starts_with("archive_")).collect();
    assert_eq!(
        archive,
        [
            "archive_mode = on",
            "archive_command = '/operator/database-operator backup wal-push %p %f'",
            "archive_timeout = 30s",
        ]
    );
}

#[test]
fn snapshot_explicit_resources() {
    snapshot_plan("explicit_resources", common::with_resources());
}

#[test]
fn snapshot_status_through_first_start() {
    // Status after each pass while the seed's cluster comes up: Pending, then Running with a
    // primary; events alongside.
    let (_, plans) = converge(observed(common::mysql()), Pods::Ready, 6);
    let history: Vec<_> = plans
        .iter()
        .map(|p| {
            serde_json::json!({
                "status": p.status,
                "statusChanged": p.status_changed,
                "actions": format!("{:?}", p.pod_actions),
                "events": p.events.iter().map(|e| format!("{:?} {}: {}", e.type_, e.reason, e.message)).collect::<Vec<_>>(),
                "requeueAfterSeconds": p.requeue_after.unwrap_or_default().as_secs(),
                "changes": common::summary(p),
            })
        })
        .collect();
    insta::assert_yaml_snapshot!("status_through_first_start", history);
}

#[test]
fn snapshot_sync_replication_config() {
    // `spec.replication.mode: sync`: the lines each engine's configuration gains (and only
    // those: every other line is the async one), and nothing with a single member.
    for cluster in [common::postgresql(), common::mysql(), common::mariadb()] {
        let file = |mode: &str, replicas: i32| {
            let mut cluster = cluster.clone();
            cluster.spec.replicas = replicas;
            cluster.spec.replication =
                Some(serde_json::from_value(serde_json::json!({"mode": mode})).expect("a mode"));
            let config = database_operator_core::OperatorConfig::default();
            let ctx = database_operator_core::render::RenderContext {
                tls_blocked: false,
                name: "db",
                namespace: "default",
                uid: "uid-1",
                engine: cluster.spec.engine,
                version: &cluster.spec.version,
                spec: &cluster.spec,
                config: &config,
            };
            let data = database_operator_core::render::config_map::data(&ctx);
            data.get("postgresql.conf")
                .or(data.get("my.cnf"))
                .expect("a configuration file")
                .clone()
        };
        let (base, sync) = (file("async", 3), file("sync", 3));
        assert_eq!(file("sync", 1), base, "a single member stays asynchronous");
        let added: Vec<&str> = sync
            .lines()
            .filter(|l| !base.lines().any(|b| b == *l))
            .collect();
        assert!(
            base.lines().all(|l| sync.lines().any(|s| s == l)),
            "sync only adds lines"
        );
        insta::assert_snapshot!(
            format!("sync_replication__{}", cluster.spec.engine.as_str()),
            added.join("\n")
        );
    }
}
