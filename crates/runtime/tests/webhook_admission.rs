//! The admission webhook in process: AdmissionReview fixtures in, AdmissionReviews out.
//!
//! Each file in `tests/fixtures/admission/` holds a request (`request`, or `rawBody` for bodies
//! that are not JSON), the endpoint, the `api::validate` rules it exercises, and the exact
//! expected answer (`expect`: the HTTP status and either the AdmissionReview, with the JSON patch
//! shown decoded, or the text body). After a deliberate change of messages, rewrite the
//! expectations with `UPDATE_FIXTURES=1 cargo test -p database-operator-runtime --test
//! webhook_admission` and review the diff.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use base64::Engine as _;
use database_operator_api::DatabaseCluster;
use database_operator_api::scheduling::SchedulingPolicy;
use database_operator_api::validate::{
    ValidationErrors, Warning, parse_cluster, validate_create, validate_update, with_more_errors,
};
use database_operator_runtime::webhook::{DEFAULT_MAX_BODY_BYTES, router, router_with};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// Every rule of `api::validate` (and the schema rules it repeats); each must be reached through
/// the webhook by at least one fixture.
const RULES: &[&str] = &[
    "metadata.name format",
    "metadata.name length",
    "spec.engine enum",
    "spec.engine immutable",
    "spec.version pattern",
    "spec.version supported",
    "spec.version downgrade",
    "spec.version postgresql major",
    "spec.version mysql series warning",
    "spec.replicas range",
    "spec.replicas scale-down warning",
    "spec.storage.size quantity",
    "spec.storage.size positive",
    "spec.storage.size no shrink",
    "spec.storage.size growth warning",
    "spec.storage.storageClassName pattern",
    "spec.storage.storageClassName immutable",
    "spec.passwordSecretRef.name",
    "spec.passwordSecretRef.key",
    "spec.backup.schedule pattern",
    "spec.backup.schedule cron",
    "spec.backup.schedule never runs",
    "spec.backup.retention minimum",
    "spec.backup.s3Bucket naming",
    "spec.backup.endpoint pattern",
    "spec.backup.endpoint http warning",
    "spec.backup.region pattern",
    "spec.backup.credentialsSecretRef",
    "spec.backup.deletionPolicy enum",
    "spec.backup.deletionPolicy Delete warning",
    "spec.backup removed warning",
    "spec.scheduling policy",
    "field types",
    "required fields",
];

struct Fixture {
    path: PathBuf,
    doc: Value,
}

impl Fixture {
    fn name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn body(&self) -> Vec<u8> {
        match self.doc.get("rawBody") {
            Some(Value::String(raw)) => raw.clone().into_bytes(),
            _ => serde_json::to_vec(&self.doc["request"]).expect("fixture request serialises"),
        }
    }

    fn endpoint(&self) -> &str {
        self.doc["endpoint"]
            .as_str()
            .expect("fixture has an endpoint")
    }
}

fn fixtures() -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let doc =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Fixture { path, doc }
        })
        .collect()
}

/// Sends one body to the in-process router.
async fn post(path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let app = router(DEFAULT_MAX_BODY_BYTES).expect("router builds");
    send(app, Method::POST, path, body).await
}

async fn send(
    app: axum::Router,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request builds");
    let response = app
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body reads")
        .to_bytes();
    (status, bytes.to_vec())
}

/// The answer as a fixture records it: the patch decoded from base64 into JSON.
fn readable(status: StatusCode, body: &[u8]) -> Value {
    if status != StatusCode::OK {
        return json!({"httpStatus": status.as_u16(), "body": String::from_utf8_lossy(body)});
    }
    let mut review: Value = serde_json::from_slice(body).expect("a 200 answer is JSON");
    if let Some(patch) = review.pointer_mut("/response/patch") {
        let encoded = patch
            .as_str()
            .expect("the patch is a base64 string, as the API server reads []byte");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("the patch is valid base64");
        *patch = serde_json::from_slice(&decoded).expect("the patch is a JSON document");
    }
    json!({"httpStatus": 200, "review": review})
}

#[tokio::test]
async fn fixtures_get_their_expected_answers() {
    let update = std::env::var_os("UPDATE_FIXTURES").is_some();
    let all = fixtures();
    assert!(
        all.len() >= 40,
        "expected the full fixture set, found {}",
        all.len()
    );
    let mut failures = Vec::new();
    for mut fixture in all {
        let (status, body) = post(fixture.endpoint(), fixture.body()).await;
        let got = readable(status, &body);
        if update {
            fixture.doc["expect"] = got;
            let text =
                serde_json::to_string_pretty(&fixture.doc).expect("fixture serialises") + "\n";
            std::fs::write(&fixture.path, text).expect("fixture writes");
            continue;
        }
        let want = fixture.doc.get("expect").unwrap_or(&Value::Null);
        if &got != want {
            failures.push(format!(
                "{}:\n  want {}\n  got  {}",
                fixture.name(),
                serde_json::to_string(want).unwrap_or_default(),
                serde_json::to_string(&got).unwrap_or_default()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_rule_is_reached_through_the_webhook() {
    let known: BTreeSet<&str> = RULES.iter().copied().collect();
    let mut reached: BTreeSet<String> = BTreeSet::new();
    for fixture in fixtures() {
        for rule in fixture.doc["rules"]
            .as_array()
            .expect("fixture lists its rules")
        {
            let rule = rule.as_str().expect("rule names are strings");
            assert!(
                known.contains(rule),
                "{}: unknown rule {rule:?}",
                fixture.name()
            );
            reached.insert(rule.to_owned());
        }
    }
    let missing: Vec<&&str> = known.iter().filter(|r| !reached.contains(**r)).collect();
    assert!(missing.is_empty(), "rules no fixture reaches: {missing:?}");
}

/// A fixture that claims a rule must show it: the rule's field is named in a denial cause or a
/// warning of the answer.
#[test]
fn fixtures_show_the_rules_they_claim() {
    for fixture in fixtures() {
        let review = &fixture.doc["expect"]["review"]["response"];
        let mut said: Vec<String> = review["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        said.extend(
            review["status"]["details"]["causes"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .filter_map(|c| c["field"].as_str())
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        );
        for rule in fixture.doc["rules"].as_array().expect("rules") {
            let rule = rule.as_str().expect("rule");
            let field = match rule {
                "field types" | "required fields" => "spec",
                _ => rule.split(' ').next().unwrap_or(rule),
            };
            assert!(
                said.iter().any(|s| s.starts_with(field)),
                "{}: claims {rule:?} but the answer says nothing about {field}: {said:?}",
                fixture.name()
            );
        }
    }
}

/// The webhook's denials are word for word what `api::validate` (and so the CLI) says.
#[test]
fn denial_messages_are_the_ones_validate_gives() {
    let mut compared = 0;
    for fixture in fixtures() {
        let response = &fixture.doc["expect"]["review"]["response"];
        if fixture.endpoint() != "/validate"
            || response["allowed"] != json!(false)
            || response["status"]["reason"] != "Invalid"
        {
            continue;
        }
        let request = &fixture.doc["request"]["request"];
        let new = parse_cluster(request["object"].clone());
        let expected = match (request["operation"].as_str(), new) {
            (_, Err(e)) => e.to_string(),
            (Some("CREATE"), Ok(new)) => with_policy(validate_create(&new), &new)
                .expect_err("denied")
                .to_string(),
            (Some("UPDATE"), Ok(new)) => {
                let old = parse_cluster(request["oldObject"].clone()).expect("old object parses");
                match with_policy(validate_update(&old, &new), &new) {
                    Err(e) => e.to_string(),
                    // Ratcheting may drop errors about unchanged fields; then the denial lists the rest.
                    Ok(_) => panic!(
                        "{}: validate_update accepts what the webhook denied",
                        fixture.name()
                    ),
                }
            }
            (op, _) => panic!("{}: unexpected operation {op:?}", fixture.name()),
        };
        assert_eq!(
            response["status"]["message"],
            json!(expected),
            "{}",
            fixture.name()
        );
        assert_eq!(response["status"]["code"], json!(422), "{}", fixture.name());
        compared += 1;
    }
    assert!(compared >= 25, "only {compared} denials compared");
}

/// The operator's scheduling flags reach the webhook: what the default policy refuses, an
/// allow list naming it admits, and one naming something else refuses with that list.
#[tokio::test]
async fn the_scheduling_allow_list_decides_what_is_admitted() {
    let fixture = fixtures()
        .into_iter()
        .find(|f| f.name().contains("create-scheduling-not-allowed"))
        .expect("the fixture exists");
    let allowed = |classes: &[&str], keys: &[&str]| {
        let set = |names: &[&str]| Some(names.iter().map(|n| (*n).to_owned()).collect());
        SchedulingPolicy::allow_list(set(classes), set(keys))
    };
    let answer = |policy: SchedulingPolicy| {
        let body = fixture.body();
        async move {
            let app = router_with(DEFAULT_MAX_BODY_BYTES, policy).expect("router builds");
            let (status, body) = send(app, Method::POST, "/validate", body).await;
            readable(status, &body)["review"]["response"].clone()
        }
    };
    let admitted = answer(allowed(
        &["system-cluster-critical"],
        &["node-role.kubernetes.io/control-plane"],
    ))
    .await;
    assert_eq!(admitted["allowed"], json!(true), "{admitted}");
    let refused = answer(allowed(&["batch"], &["*"])).await;
    assert_eq!(refused["allowed"], json!(false));
    let message = refused["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("1 validation error: spec.scheduling.priorityClassName: priority class not allowed by the operator's --allowed-priority-classes (allowed: batch)"),
        "{message}"
    );
}

/// `outcome` with the refusals of the default scheduling policy (the webhook's without flags).
fn with_policy(
    outcome: Result<Vec<Warning>, ValidationErrors>,
    cluster: &DatabaseCluster,
) -> Result<Vec<Warning>, ValidationErrors> {
    with_more_errors(
        outcome,
        SchedulingPolicy::default().check(cluster.spec.scheduling.as_ref()),
    )
}

/// Applying a /mutate patch gives exactly what reading the object into the API types (with their
/// serde defaults) gives: the webhook and the types agree on every default.
#[test]
fn mutate_patches_produce_the_typed_defaults() {
    let mut patched_count = 0;
    for fixture in fixtures() {
        let Some(patch) = fixture.doc["expect"]["review"]["response"].get("patch") else {
            continue;
        };
        let mut object = fixture.doc["request"]["request"]["object"].clone();
        let patch: json_patch::Patch = serde_json::from_value(patch.clone()).expect("a JSON patch");
        json_patch::patch(&mut object, &patch).expect("the patch applies");
        if let Ok(typed) = parse_cluster(object.clone()) {
            assert_eq!(
                object["spec"],
                serde_json::to_value(&typed.spec).unwrap(),
                "{}",
                fixture.name()
            );
        }
        // Patching again adds nothing: the defaults are complete.
        let mut again = fixture.doc["request"].clone();
        again["request"]["object"] = object;
        patched_count += 1;
        let again_ops = database_operator_runtime::webhook::SchemaDefaults::generated()
            .expect("defaults")
            .patch_for(&again["request"]["object"]);
        assert!(
            again_ops.is_empty(),
            "{}: second patch {again_ops:?}",
            fixture.name()
        );
    }
    assert!(patched_count >= 3, "only {patched_count} patches checked");
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413_and_one_at_the_limit_is_read() {
    let app = router(64 * 1024).expect("router builds");
    let (status, body) = send(
        app.clone(),
        Method::POST,
        "/validate",
        vec![b' '; 64 * 1024 + 1],
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        String::from_utf8_lossy(&body).contains("65536-byte limit"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    // Exactly at the limit the body is read (and, being only spaces, is malformed).
    let (status, body) = send(app, Method::POST, "/validate", vec![b' '; 64 * 1024]).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(String::from_utf8_lossy(&body).starts_with("malformed AdmissionReview"));
}

#[tokio::test]
async fn the_default_limit_is_one_mebibyte() {
    let (status, _) = post("/mutate", vec![b' '; DEFAULT_MAX_BODY_BYTES + 1]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn only_post_on_the_two_paths() {
    let app = router(DEFAULT_MAX_BODY_BYTES).expect("router builds");
    let (status, _) = send(app.clone(), Method::GET, "/validate", Vec::new()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = send(app, Method::POST, "/convert", b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Garbage of every shape gets an HTTP error or a denial, never a panic or a 5xx.
#[tokio::test]
async fn hostile_bodies_never_panic() {
    let valid = fixtures()
        .into_iter()
        .find(|f| f.name() == "create-valid-mysql")
        .expect("the valid fixture exists")
        .doc["request"]
        .clone();
    let mut bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"{\"apiVersion\":1}".to_vec(),
        vec![0xff, 0xfe, 0x00],
        "{\"a\":".repeat(10_000).into_bytes(),
    ];
    // Replace each leaf of a valid review with values of other types.
    let mut pointers = Vec::new();
    collect_pointers(&valid, String::new(), &mut pointers);
    for pointer in &pointers {
        for replacement in [json!(null), json!(7), json!("x"), json!([]), json!({})] {
            let mut v = valid.clone();
            if let Some(slot) = v.pointer_mut(pointer) {
                *slot = replacement;
            }
            bodies.push(serde_json::to_vec(&v).expect("serialises"));
        }
    }
    assert!(bodies.len() > 100);
    for endpoint in ["/validate", "/mutate"] {
        for body in &bodies {
            let (status, answer) = post(endpoint, body.clone()).await;
            assert!(
                status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
                "{endpoint}: {status} for {}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)]),
                String::from_utf8_lossy(&answer)
            );
        }
    }
}

fn collect_pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                collect_pointers(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}
