//! `helm template` of deploy/helm/database-operator with its switches on and off: what each one
//! adds or removes. (`cargo xtask helm-check` compares the defaults with `deploy/`.) Uses the
//! helm built from `xtask/go/helm`, building it on first use.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use xtask::cluster::Progress;
use xtask::cluster::helm::{self, CHART_DIR, HelmBinary};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Built once per test process (the tests run in parallel; one build, not five).
fn helm() -> &'static HelmBinary {
    static HELM: OnceLock<HelmBinary> = OnceLock::new();
    HELM.get_or_init(|| {
        helm::ensure(&root(), &Progress::new(true)).expect("helm from xtask/go/helm")
    })
}

fn render(sets: &[&str]) -> Vec<Value> {
    helm()
        .template(&root().join(CHART_DIR), sets)
        .unwrap_or_else(|e| panic!("helm template --set {}: {e:#}", sets.join(",")))
}

fn kinds(objects: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["metadata"]["name"]))
        .collect();
    kinds.sort();
    kinds
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn manager(objects: &[Value]) -> &Value {
    &find(objects, "Deployment", "database-operator").expect("the Deployment")["spec"]["template"]["spec"]
        ["containers"][0]
}

fn env(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .map(str::to_string)
}

fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

const WEBHOOK_OBJECTS: &[(&str, &str)] = &[
    ("Issuer", "database-operator-selfsigned"),
    ("Issuer", "database-operator-webhook-ca"),
    ("Certificate", "database-operator-webhook-ca"),
    ("Certificate", "database-operator-webhook"),
    ("Service", "database-operator-webhook"),
    ("MutatingWebhookConfiguration", "database-operator-mutating"),
    (
        "ValidatingWebhookConfiguration",
        "database-operator-validating",
    ),
];

#[test]
fn webhook_on_adds_cert_manager_objects_the_service_and_the_mounted_certificate() {
    let objects = render(&[]);
    for (kind, name) in WEBHOOK_OBJECTS {
        assert!(
            find(&objects, kind, name).is_some(),
            "{kind} {name} missing: {:?}",
            kinds(&objects)
        );
    }
    let certificate = find(&objects, "Certificate", "database-operator-webhook").unwrap();
    assert_eq!(
        certificate["spec"]["dnsNames"][0],
        "database-operator-webhook.database-operator-system.svc"
    );
    let mutating = find(
        &objects,
        "MutatingWebhookConfiguration",
        "database-operator-mutating",
    )
    .unwrap();
    assert_eq!(
        mutating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "database-operator-system/database-operator-webhook"
    );
    let container = manager(&objects);
    assert_eq!(
        env(container, "DATABASE_OPERATOR_WEBHOOK").as_deref(),
        Some("true")
    );
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["containerPort"] == 9443)
    );
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        "/tmp/k8s-webhook-server/serving-certs"
    );
    let deployment = find(&objects, "Deployment", "database-operator").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "database-operator-webhook-tls"
    );
    // The CRD comes from crds/ (only with --include-crds, which template() passes).
    assert!(
        find(
            &objects,
            "CustomResourceDefinition",
            "databaseclusters.database.example.com"
        )
        .is_some()
    );
    // No Namespace unless asked for: `helm install --create-namespace` makes it.
    assert!(objects.iter().all(|o| o["kind"] != "Namespace"));
}

#[test]
fn webhook_off_renders_none_of_it_and_tells_the_operator() {
    let objects = render(&["webhook.enabled=false"]);
    for (kind, name) in WEBHOOK_OBJECTS {
        assert!(
            find(&objects, kind, name).is_none(),
            "{kind} {name} rendered with the webhook off"
        );
    }
    assert!(
        objects
            .iter()
            .all(|o| o["apiVersion"].as_str() != Some("cert-manager.io/v1"))
    );
    let container = manager(&objects);
    assert_eq!(
        env(container, "DATABASE_OPERATOR_WEBHOOK").as_deref(),
        Some("false")
    );
    assert!(container.get("volumeMounts").is_none());
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["containerPort"] != 9443)
    );
}

#[test]
fn service_monitor_on_scrapes_the_manager_pods_metrics_port() {
    let off = render(&[]);
    assert!(off.iter().all(|o| o["kind"] != "ServiceMonitor"));
    assert!(find(&off, "Service", "database-operator-metrics").is_none());

    let on = render(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prometheus",
        "metrics.serviceMonitor.interval=15s",
    ]);
    let monitor = find(&on, "ServiceMonitor", "database-operator").expect("the ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "15s");
    // The operator serves /metrics over HTTPS to authorized tokens: Prometheus sends its own,
    // and the role it needs is shipped.
    assert_eq!(monitor["spec"]["endpoints"][0]["scheme"], "https");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert!(args(manager(&on)).contains(&"--metrics-secure=true".to_string()));
    // metrics.secure=false: plain HTTP, and the ServiceMonitor scrapes it so.
    let plain = render(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.secure=false",
    ]);
    assert!(args(manager(&plain)).contains(&"--metrics-secure=false".to_string()));
    let monitor = find(&plain, "ServiceMonitor", "database-operator").unwrap();
    assert!(
        monitor["spec"]["endpoints"][0]["scheme"].is_null(),
        "{monitor}"
    );
    let reader = find(&on, "ClusterRole", "database-operator-metrics-reader")
        .expect("the metrics reader ClusterRole");
    assert_eq!(
        reader["rules"],
        serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let service = find(&on, "Service", "database-operator-metrics").expect("the metrics Service");
    // The ServiceMonitor selects the Service, the Service selects the operator pods.
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][key], value, "label {key}");
    }
    let deployment = find(&on, "Deployment", "database-operator").unwrap();
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[key], value, "pod label {key}");
    }
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
}

#[test]
fn admission_policy_on_names_the_releases_service_account_and_off_renders_none() {
    let on = render(&[]);
    let policy = find(
        &on,
        "ValidatingAdmissionPolicy",
        "database-operator-least-privilege",
    )
    .expect("the policy by default");
    let condition = policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap_or_default();
    assert!(
        condition.contains("system:serviceaccount:database-operator-system:database-operator"),
        "{condition}"
    );
    let binding = find(
        &on,
        "ValidatingAdmissionPolicyBinding",
        "database-operator-least-privilege",
    )
    .expect("its binding");
    assert_eq!(
        binding["spec"]["policyName"],
        "database-operator-least-privilege"
    );
    assert_eq!(binding["spec"]["validationActions"][0], "Deny");
    // The member agents' policy, bound too: only the operator's Leases, only `*-member` tokens.
    let members = find(
        &on,
        "ValidatingAdmissionPolicy",
        "database-operator-member-leases",
    )
    .expect("the member Lease policy by default");
    assert_eq!(
        members["spec"]["matchConstraints"]["objectSelector"]["matchLabels"]["app.kubernetes.io/managed-by"],
        "database-operator"
    );
    let binding = find(
        &on,
        "ValidatingAdmissionPolicyBinding",
        "database-operator-member-leases",
    )
    .expect("its binding");
    assert_eq!(
        binding["spec"]["policyName"],
        "database-operator-member-leases"
    );
    let off = render(&["admissionPolicy.enabled=false"]);
    let kinds = kinds(&off);
    assert!(
        !kinds
            .iter()
            .any(|k| k.starts_with("ValidatingAdmissionPolicy")),
        "{kinds:?}"
    );
}

#[test]
fn values_reach_the_operator_flags() {
    let objects = render(&[
        "image.repository=registry.internal/database-operator",
        "image.tag=9.9.9",
        "replicas=1",
        "leaderElection.enabled=false",
        "watchNamespaces={team-a,team-b}",
        "extraArgs={--resync=1m,--member-address=dns}",
        "logFormat=text",
        "imagePullSecrets[0].name=regcred",
        "podAnnotations.team=db",
        "podLabels.cost-center=42",
        "priorityClassName=system-cluster-critical",
    ]);
    let deployment = find(&objects, "Deployment", "database-operator").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["metadata"]["annotations"]["team"], "db");
    assert_eq!(pod["metadata"]["labels"]["cost-center"], "42");
    // The selector stays that of deploy/: extra pod labels never change it.
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        serde_json::json!({"app.kubernetes.io/name": "database-operator",
                           "app.kubernetes.io/component": "manager"})
    );
    let container = manager(&objects);
    assert_eq!(
        container["image"],
        "registry.internal/database-operator:9.9.9"
    );
    let args = args(container);
    for want in [
        "--leader-elect=false",
        "--log-format=text",
        "--namespace=team-a",
        "--namespace=team-b",
        "--resync=1m",
        "--member-address=dns",
    ] {
        assert!(args.contains(&want.to_string()), "{want} not in {args:?}");
    }
    assert_eq!(args[0], "run");
}

/// Every (apiGroup, resource, verb) a role's rules grant, sorted.
fn grants(role: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        let list = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default()
        };
        for group in list("apiGroups") {
            for resource in list("resources") {
                for verb in list("verbs") {
                    out.push((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn watch_namespaces_grant_the_namespaced_rules_in_roles_of_those_namespaces_only() {
    let shipped = grants(
        &serde_saphyr::from_str::<Value>(
            &std::fs::read_to_string(root().join("deploy/rbac/cluster_role.yaml")).unwrap(),
        )
        .unwrap(),
    );
    // Without watchNamespaces: one ClusterRole, as deploy/ ships it.
    let all = render(&[]);
    let cluster_role = find(&all, "ClusterRole", "database-operator").unwrap();
    assert_eq!(grants(cluster_role), shipped);
    assert!(find(&all, "Role", "database-operator").is_none());

    let scoped = render(&["watchNamespaces={team-a,team-b}"]);
    let cluster_role = find(&scoped, "ClusterRole", "database-operator").unwrap();
    let cluster_wide = grants(cluster_role);
    // Only what has no namespace stays cluster-wide: StorageClasses and the metrics reviews.
    let kinds: Vec<&str> = cluster_wide.iter().map(|(_, r, _)| r.as_str()).collect();
    assert!(
        kinds
            .iter()
            .all(|r| ["storageclasses", "tokenreviews", "subjectaccessreviews"].contains(r)),
        "{cluster_wide:?}"
    );
    for ns in ["team-a", "team-b"] {
        let role = scoped
            .iter()
            .find(|o| {
                o["kind"] == "Role"
                    && o["metadata"]["name"] == "database-operator"
                    && o["metadata"]["namespace"] == ns
            })
            .unwrap_or_else(|| panic!("a Role in {ns}"));
        let mut union = grants(role);
        union.extend(cluster_wide.iter().cloned());
        union.sort();
        assert_eq!(
            union, shipped,
            "the Role in {ns} and the ClusterRole grant what deploy/ does"
        );
        let binding = scoped
            .iter()
            .find(|o| {
                o["kind"] == "RoleBinding"
                    && o["metadata"]["name"] == "database-operator"
                    && o["metadata"]["namespace"] == ns
            })
            .unwrap_or_else(|| panic!("a RoleBinding in {ns}"));
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(binding["subjects"][0]["name"], "database-operator");
    }
    let roles = scoped
        .iter()
        .filter(|o| o["kind"] == "Role" && o["metadata"]["name"] == "database-operator")
        .count();
    assert_eq!(roles, 2, "one Role per watched namespace, none elsewhere");
}

#[test]
fn scheduling_allow_lists_reach_the_flags_only_when_set() {
    let unset = args(manager(&render(&[])));
    assert!(
        !unset.iter().any(|a| a.starts_with("--allowed-")),
        "{unset:?}"
    );
    let set = args(manager(&render(&[
        "scheduling.allowedPriorityClasses={databases,batch}",
        "scheduling.allowedTolerationKeys={}",
    ])));
    assert!(
        set.contains(&"--allowed-priority-classes=databases,batch".to_string()),
        "{set:?}"
    );
    // An empty list allows nothing: the flag with an empty value.
    assert!(
        set.contains(&"--allowed-toleration-keys=".to_string()),
        "{set:?}"
    );
}

#[test]
fn several_replicas_without_leader_election_are_refused() {
    let err = helm()
        .template(
            &root().join(CHART_DIR),
            &["replicas=2", "leaderElection.enabled=false"],
        )
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("replicas > 1 needs leaderElection.enabled"),
        "{err:#}"
    );
    let err = helm()
        .template(&root().join(CHART_DIR), &["logFormat=xml"])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("logFormat must be json or text"),
        "{err:#}"
    );
}
