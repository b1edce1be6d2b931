//! `spec.failover.nodeLoss: SelfFence` in `plan()`: the member agents' ServiceAccount, Role,
//! RoleBinding and primary Lease, the agent sidecar, zero writes in steady state (renewals
//! are the agent's field), the Lease's holder following the primary label, and everything
//! removed again with `nodeLoss: Wait` (the StatefulSet's pods then lose the sidecar).

mod common;

use common::{object, running};
use database_operator_api::{DatabaseCluster, FailoverSpec, NodeLossPolicy};
use database_operator_core::{Change, ObjectKey, OwnedKind, plan};

fn self_fencing(mut cluster: DatabaseCluster) -> DatabaseCluster {
    cluster.spec.failover = Some(FailoverSpec {
        node_loss: NodeLossPolicy::SelfFence,
        lease_seconds: 6,
        ..FailoverSpec::default()
    });
    cluster
}

const AGENT_KINDS: [OwnedKind; 4] = [
    OwnedKind::ServiceAccount,
    OwnedKind::Role,
    OwnedKind::RoleBinding,
    OwnedKind::Lease,
];

#[test]
fn self_fence_renders_the_agents_access_lease_and_sidecar() {
    let cluster = self_fencing(common::postgresql());
    let name = cluster.metadata.name.clone().unwrap();
    let p = plan(&common::observed(cluster));
    let lease = object(&p, OwnedKind::Lease, &format!("{name}-primary"));
    assert_eq!(lease["spec"]["holderIdentity"], format!("{name}-0"));
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 6);
    assert!(lease["spec"].get("renewTime").is_none());
    let role = object(&p, OwnedKind::Role, &format!("{name}-member"));
    assert_eq!(
        role["rules"][0]["resourceNames"],
        serde_json::json!([format!("{name}-primary")])
    );
    object(&p, OwnedKind::ServiceAccount, &format!("{name}-member"));
    object(&p, OwnedKind::RoleBinding, &format!("{name}-member"));
    let sts = object(&p, OwnedKind::StatefulSet, &name);
    let pod = &sts["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], format!("{name}-member"));
    assert_eq!(pod["automountServiceAccountToken"], false);
    let containers = pod["containers"].as_array().unwrap();
    let agent = containers
        .iter()
        .find(|c| c["name"] == "member-agent")
        .expect("an agent container");
    assert_eq!(agent["command"][1], "member-agent");
    assert_eq!(
        agent["volumeMounts"][0]["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    // Only the agent has the token.
    for c in containers.iter().filter(|c| c["name"] != "member-agent") {
        assert!(
            !c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "member-token"),
            "{c}"
        );
    }
    // Applied before the StatefulSet, whose pods need the ServiceAccount.
    let order: Vec<OwnedKind> = p.objects.iter().map(|o| o.object.kind()).collect();
    let sts_at = order.iter().position(|k| *k == OwnedKind::StatefulSet);
    for kind in AGENT_KINDS {
        let at = order.iter().position(|k| *k == kind);
        assert!(at < sts_at, "{kind:?} after the StatefulSet: {order:?}");
    }
}

#[test]
fn wait_renders_none_of_it() {
    let cluster = common::postgresql();
    let name = cluster.metadata.name.clone().unwrap();
    let p = plan(&common::observed(cluster));
    assert!(
        p.objects
            .iter()
            .all(|o| !AGENT_KINDS.contains(&o.object.kind())),
        "{:?}",
        common::summary(&p)
    );
    let sts = object(&p, OwnedKind::StatefulSet, &name);
    assert!(sts["spec"]["template"]["spec"]["serviceAccountName"].is_null());
    assert_eq!(
        sts["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_renewed_lease_is_no_change_and_turning_it_off_deletes_what_it_added() {
    let cluster = self_fencing(common::postgresql());
    let name = cluster.metadata.name.clone().unwrap();
    // `running` converges with a Lease the API server returns with a renewTime on it.
    let steady = running(cluster);
    let p = plan(&steady);
    assert!(p.is_noop(), "{:?}", common::summary(&p));
    assert!(p.objects.iter().all(|o| o.change == Change::Unchanged));

    let mut off = steady.clone();
    off.cluster.spec.failover = Some(FailoverSpec::default());
    off.cluster.metadata.generation = Some(off.cluster.metadata.generation.unwrap_or(1) + 1);
    let p = plan(&off);
    let mut deleted = p.delete.clone();
    deleted.sort();
    let mut expected: Vec<ObjectKey> = AGENT_KINDS
        .iter()
        .map(|&kind| ObjectKey {
            kind,
            name: if kind == OwnedKind::Lease {
                format!("{name}-primary")
            } else {
                format!("{name}-member")
            },
        })
        .collect();
    expected.sort();
    assert_eq!(deleted, expected);
}
