//! The manifests in `deploy/webhook` agree with the code: paths, port, certificate directory,
//! the resource they match, and with each other (Service, certificate, CA injection, mount).

use std::path::{Path, PathBuf};

use database_operator_api::{GROUP, VERSION};
use database_operator_runtime::webhook::{DEFAULT_ADDR, DEFAULT_CERT_DIR, Endpoint};
use serde_json::{Value, json};

const NAMESPACE: &str = "database-operator-system";
const SERVICE: &str = "database-operator-webhook";
const SECRET: &str = "database-operator-webhook-tls";

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn documents(rel: &str) -> Vec<Value> {
    let path = repo_file(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn all_webhook_documents() -> Vec<Value> {
    ["certificate.yaml", "service.yaml", "webhooks.yaml"]
        .iter()
        .flat_map(|f| documents(&format!("deploy/webhook/{f}")))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/webhook"))
}

#[test]
fn the_component_lists_every_file() {
    let k = &documents("deploy/webhook/kustomization.yaml")[0];
    assert_eq!(k["kind"], "Component");
    assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1alpha1");
    let mut listed: Vec<String> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("path").to_owned())
        .collect();
    for p in k["patches"].as_array().expect("patches") {
        listed.push(p["path"].as_str().expect("patch path").to_owned());
        assert_eq!(p["target"]["kind"], "Deployment");
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(repo_file("deploy/webhook"))
        .expect("deploy/webhook")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "kustomization.yaml" && n.ends_with(".yaml"))
        .collect();
    listed.sort();
    on_disk.sort();
    assert_eq!(
        listed, on_disk,
        "every manifest is in the component, and every listed file exists"
    );
}

#[test]
fn both_webhooks_match_only_databaseclusters_and_fail_closed() {
    let docs = all_webhook_documents();
    let plural = database_operator_api::crd::crd().spec.names.plural;
    for (kind, name, endpoint) in [
        (
            "MutatingWebhookConfiguration",
            "database-operator-mutating",
            Endpoint::Mutate,
        ),
        (
            "ValidatingWebhookConfiguration",
            "database-operator-validating",
            Endpoint::Validate,
        ),
    ] {
        let config = find(&docs, kind, name);
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            json!(format!("{NAMESPACE}/{SERVICE}")),
            "{name}: the CA comes from the serving Certificate"
        );
        let hooks = config["webhooks"].as_array().expect("webhooks");
        assert_eq!(hooks.len(), 1, "{name}");
        let hook = &hooks[0];
        assert!(
            hook["name"]
                .as_str()
                .expect("name")
                .ends_with(".database.example.com")
        );
        assert_eq!(hook["failurePolicy"], "Fail", "{name}");
        assert_eq!(hook["sideEffects"], "None", "{name}");
        assert_eq!(hook["admissionReviewVersions"], json!(["v1"]), "{name}");
        assert_eq!(hook["timeoutSeconds"], json!(10), "{name}");
        assert_eq!(
            hook["clientConfig"]["service"],
            json!({"name": SERVICE, "namespace": NAMESPACE, "path": endpoint.path(), "port": 443}),
            "{name}"
        );
        assert_eq!(
            hook["rules"],
            json!([{
                "apiGroups": [GROUP], "apiVersions": [VERSION], "operations": ["CREATE", "UPDATE"],
                "resources": [plural], "scope": "Namespaced"
            }]),
            "{name}: only the main resource, not status"
        );
    }
}

#[test]
fn service_certificate_and_mount_fit_together() {
    let docs = all_webhook_documents();
    let service = find(&docs, "Service", SERVICE);
    assert_eq!(service["metadata"]["namespace"], NAMESPACE);
    let ports = service["spec"]["ports"].as_array().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["port"], json!(443));
    let target = ports[0]["targetPort"].as_str().expect("named target port");

    let cert = find(&docs, "Certificate", SERVICE);
    assert_eq!(cert["metadata"]["namespace"], NAMESPACE);
    assert_eq!(cert["spec"]["secretName"], SECRET);
    let dns: Vec<&str> = cert["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        dns.contains(&format!("{SERVICE}.{NAMESPACE}.svc").as_str()),
        "{dns:?}"
    );
    // The serving certificate's issuer exists and is a CA issuer backed by a CA certificate.
    let issuer_name = cert["spec"]["issuerRef"]["name"].as_str().expect("issuer");
    let issuer = find(&docs, "Issuer", issuer_name);
    let ca_secret = issuer["spec"]["ca"]["secretName"]
        .as_str()
        .expect("a CA issuer");
    assert!(
        docs.iter().any(|d| d["kind"] == "Certificate"
            && d["spec"]["secretName"] == ca_secret
            && d["spec"]["isCA"] == true),
        "the CA secret {ca_secret} is issued by a CA Certificate"
    );

    let patch = &documents("deploy/webhook/manager-patch.yaml")[0];
    let pod = &patch["spec"]["template"]["spec"];
    let manager = pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("the patch targets the container named manager");
    let port = manager["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == target)
        .expect("the Service's target port");
    assert_eq!(port["containerPort"], json!(DEFAULT_ADDR.port()));
    let mount = manager["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == DEFAULT_CERT_DIR)
        .expect("mounted at the default --webhook-cert-dir");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["secret"]["secretName"], SECRET);
    assert!(
        manager["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "DATABASE_OPERATOR_WEBHOOK" && e["value"] == "true"),
        "the patch switches the webhook server on"
    );
}

/// Once the operator's own manifests exist, the webhook Service selects its pods and the default
/// kustomization includes the component.
#[test]
fn fits_the_manager_deployment_when_present() {
    let service_selector =
        find(&all_webhook_documents(), "Service", SERVICE)["spec"]["selector"].clone();
    let deployment_file = repo_file("deploy/manager/deployment.yaml");
    if deployment_file.exists() {
        let docs = documents("deploy/manager/deployment.yaml");
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        for (k, v) in service_selector.as_object().expect("selector") {
            assert_eq!(
                &labels[k], v,
                "pod label {k} selected by the webhook Service"
            );
        }
        let containers = deployment["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        assert!(
            containers.iter().any(|c| c["name"] == "manager"),
            "the patch merges into the container named manager"
        );
    }
    let default_file = repo_file("deploy/default/kustomization.yaml");
    if default_file.exists() {
        let k = &documents("deploy/default/kustomization.yaml")[0];
        let components: Vec<&str> = k["components"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(
            components.contains(&"../webhook"),
            "deploy/default includes the webhook component: {components:?}"
        );
    }
    assert!(service_selector.as_object().is_some_and(|s| !s.is_empty()));
}
