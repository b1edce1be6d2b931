//! deploy/rbac and deploy/manager agree with the code, and deploy/default renders.

use std::path::{Path, PathBuf};
use std::process::Command;

use database_operator_runtime::rbac::{self, CLUSTER_RULES, LEADER_ELECTION_RULES};
use serde_json::Value;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn documents(rel: &str) -> Vec<Value> {
    let path = repo(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn granted(role: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for rule in role["rules"].as_array().expect("rules") {
        let strings = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .unwrap_or_else(|| panic!("{key} in {rule}"))
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                assert_ne!(resource, "*", "no wildcard resources");
                for verb in strings("verbs") {
                    assert_ne!(verb, "*", "no wildcard verbs");
                    out.push((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn cluster_role_grants_exactly_what_the_code_uses() {
    let role = &documents("deploy/rbac/cluster_role.yaml")[0];
    assert_eq!(role["kind"], "ClusterRole");
    assert_eq!(granted(role), rbac::triples(CLUSTER_RULES));
}

#[test]
fn leader_election_role_is_namespaced_and_exact() {
    let role = &documents("deploy/rbac/leader_election_role.yaml")[0];
    assert_eq!(role["kind"], "Role");
    assert_eq!(role["metadata"]["namespace"], "database-operator-system");
    assert_eq!(granted(role), rbac::triples(LEADER_ELECTION_RULES));
}

#[test]
fn secrets_and_pvcs_are_never_updated_or_deleted() {
    let all = rbac::triples(CLUSTER_RULES);
    let secret_verbs: Vec<&str> = all
        .iter()
        .filter(|t| t.1 == "secrets")
        .map(|t| t.2.as_str())
        .collect();
    // create: the operator Secret, once; patch: its owner reference goes with a deleted
    // cluster. Never update or delete: no Secret's values are ever rewritten or removed.
    assert_eq!(secret_verbs, ["create", "get", "list", "patch", "watch"]);
    let claim_verbs: Vec<&str> = all
        .iter()
        .filter(|t| t.1 == "persistentvolumeclaims")
        .map(|t| t.2.as_str())
        .collect();
    // Watched, and grown with a patch of their request: never created, updated or deleted (the
    // data outlives the cluster).
    assert_eq!(claim_verbs, ["list", "patch", "watch"]);
    assert!(
        !all.iter().any(|t| t.1 == "statefulsets" && t.2 == "delete"),
        "StatefulSets go only by garbage collection"
    );
}

#[test]
fn bindings_point_at_the_service_account() {
    for (file, kind) in [
        ("deploy/rbac/cluster_role_binding.yaml", "ClusterRole"),
        ("deploy/rbac/leader_election_role_binding.yaml", "Role"),
    ] {
        let binding = &documents(file)[0];
        assert_eq!(binding["roleRef"]["kind"], kind);
        assert_eq!(binding["subjects"][0]["name"], "database-operator");
        assert_eq!(
            binding["subjects"][0]["namespace"],
            "database-operator-system"
        );
    }
}

#[test]
fn deployment_is_locked_down_and_probed_on_the_health_port() {
    let deployment = &documents("deploy/manager/deployment.yaml")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "database-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let manager = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("container manager");
    let sc = &manager["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    // The backup Jobs copy the binary from the image the operator runs.
    let operator_image = manager["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "OPERATOR_IMAGE")
        .expect("OPERATOR_IMAGE");
    assert_eq!(operator_image["value"], manager["image"]);
    assert_eq!(
        manager["image"],
        database_operator_core::DEFAULT_OPERATOR_IMAGE
    );
    assert_eq!(manager["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(manager["readinessProbe"]["httpGet"]["path"], "/readyz");
    let health = manager["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "health")
        .unwrap();
    assert_eq!(health["containerPort"], 8081);
    // Both endpoints listen on the pod IP only, which the downward API provides.
    let args = manager["args"].as_array().unwrap();
    assert!(
        args.iter().any(|a| a == "--health-addr=$(POD_IP):8081"),
        "{args:?}"
    );
    assert!(
        args.iter().any(|a| a == "--metrics-addr=$(POD_IP):8080"),
        "{args:?}"
    );
    let pod_ip = manager["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "POD_IP")
        .expect("env POD_IP");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert!(manager["resources"]["requests"]["memory"].is_string());
    assert!(manager["resources"]["limits"]["memory"].is_string());
    let env: Vec<&str> = manager["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for name in ["POD_NAME", "POD_NAMESPACE", "DATABASE_OPERATOR_WEBHOOK"] {
        assert!(env.contains(&name), "env {name}");
    }
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "database-operator"
    );
}

/// `kubectl kustomize deploy/default` renders the whole installation. kubectl must be on PATH
/// (CI provides it; `cargo xtask` builds one into ~/.cache/database-operator/control-plane/).
#[test]
fn default_overlay_renders_with_kubectl_kustomize() {
    let crds = repo("deploy/crds/kustomization.yaml");
    assert!(
        crds.exists(),
        "{} is missing: deploy/default lists ../crds, and kustomize loads only directories with a kustomization",
        crds.display()
    );
    let output = match Command::new("kubectl")
        .arg("kustomize")
        .arg(repo("deploy/default"))
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!(
            "kubectl is needed to render deploy/default (`kubectl kustomize`) and could not be run: {e}. \
             Install kubectl on PATH (CI must provide it)."
        ),
    };
    assert!(
        output.status.success(),
        "kubectl kustomize failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(output.stdout).unwrap()).unwrap();
    let has = |kind: &str, name: &str| {
        docs.iter()
            .any(|d| d["kind"] == kind && d["metadata"]["name"] == name)
    };
    for (kind, name) in [
        (
            "CustomResourceDefinition",
            "databaseclusters.database.example.com",
        ),
        ("Namespace", "database-operator-system"),
        ("ServiceAccount", "database-operator"),
        ("ClusterRole", "database-operator"),
        ("ClusterRoleBinding", "database-operator"),
        ("Role", "database-operator-leader-election"),
        ("RoleBinding", "database-operator-leader-election"),
        ("Deployment", "database-operator"),
    ] {
        assert!(has(kind, name), "deploy/default lacks {kind} {name}");
    }
}
