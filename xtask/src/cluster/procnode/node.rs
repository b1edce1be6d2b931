//! The process nodes as Node objects: labels, taint, status and Lease
//! heartbeats, as a kubelet keeps them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{FIELD_MANAGER, PROCESS_NODE_LABEL, now_micro, now_rfc3339};
use crate::cluster::NODE_LEASE_SECONDS;

/// Creates or updates the Node objects (idempotent).
pub async fn register(client: &Client, nodes: &[(String, Ipv4Addr)]) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for (i, (name, _)) in nodes.iter().enumerate() {
        let zone = format!("zone-{}", (b'a' + (i % 26) as u8) as char);
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": { "node.alpha.kubernetes.io/ttl": "0" },
                "labels": {
                    "type": "process",
                    PROCESS_NODE_LABEL: "true",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "topology.kubernetes.io/region": "local",
                    "topology.kubernetes.io/zone": zone,
                },
            },
            "spec": {
                "taints": [{ "key": PROCESS_NODE_LABEL, "value": "true", "effect": "NoSchedule" }],
            },
        });
        api.patch(name, &pp, &Patch::Apply(&node))
            .await
            .with_context(|| format!("registering node {name}"))?;
    }
    update_status(client, nodes).await
}

/// Ready and the other conditions, addresses, capacity.
pub async fn update_status(client: &Client, nodes: &[(String, Ipv4Addr)]) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let now = now_rfc3339();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    for (name, ip) in nodes {
        let cond = |type_: &str, status: &str, reason: &str, message: &str| {
            json!({
                "type": type_, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            })
        };
        let resources =
            json!({ "cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi" });
        let status = json!({
            "status": {
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "process node has sufficient memory"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "process node has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "process node has sufficient PID available"),
                    cond("Ready", "True", "KubeletReady", "process-node agent is posting ready status"),
                ],
                "addresses": [
                    { "type": "InternalIP", "address": ip.to_string() },
                    { "type": "Hostname", "address": name },
                ],
                "capacity": resources,
                "allocatable": resources,
                "daemonEndpoints": { "kubeletEndpoint": { "Port": 0 } },
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "containerRuntimeVersion": "process://local",
                    "kernelVersion": kernel.trim(),
                    "kubeProxyVersion": "",
                    "kubeletVersion": "process-node-agent",
                    "machineID": "",
                    "operatingSystem": "linux",
                    "osImage": "local processes",
                    "systemUUID": "",
                },
            }
        });
        // Merge patch: the conditions list is replaced as a whole; the
        // transition times only matter on the first post (always Ready).
        let existing = api.get_opt(name).await?;
        let keep_transitions = existing
            .as_ref()
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let mut status = status;
        if keep_transitions
            && let Some(existing) = existing
            && let Some(cs) = existing.status.and_then(|s| s.conditions)
            && let Some(list) = status["status"]["conditions"].as_array_mut()
        {
            for c in list.iter_mut() {
                if let Some(old) = cs
                    .iter()
                    .find(|o| Some(o.type_.as_str()) == c["type"].as_str())
                    && Some(old.status.as_str()) == c["status"].as_str()
                    && let Some(t) = &old.last_transition_time
                {
                    c["lastTransitionTime"] = serde_json::to_value(t)?;
                }
            }
        }
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("posting the status of node {name}"))?;
    }
    Ok(())
}

/// Renews every node's Lease in `kube-node-lease` (owned by its Node, whose
/// uid is looked up once and kept in `uids`).
pub async fn renew_leases(
    client: &Client,
    nodes: &[(String, Ipv4Addr)],
    uids: &mut BTreeMap<String, String>,
) -> Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes_api: Api<Node> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for (name, _) in nodes {
        if !uids.contains_key(name)
            && let Some(uid) = nodes_api.get_opt(name).await?.and_then(|n| n.metadata.uid)
        {
            uids.insert(name.clone(), uid);
        }
        let uid = uids.get(name).cloned().unwrap_or_default();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": "kube-node-lease",
                "ownerReferences": [{ "apiVersion": "v1", "kind": "Node", "name": name, "uid": uid }],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": NODE_LEASE_SECONDS,
                "renewTime": now_micro(),
            },
        });
        api.patch(name, &pp, &Patch::Apply(&lease))
            .await
            .with_context(|| format!("renewing the lease of node {name}"))?;
    }
    Ok(())
}
