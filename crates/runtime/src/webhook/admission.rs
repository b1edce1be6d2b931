//! AdmissionReview in, AdmissionReview out (pure: no IO, no clock).
//!
//! [`Admission::handle`] is the whole decision; the server only reads the body and writes the
//! answer. Logs carry the request uid, operation, namespace and name, the decision and the counts
//! and field paths of errors and warnings; never object contents.

use std::fmt;

use base64::Engine as _;
use database_operator_api::scheduling::SchedulingPolicy;
use database_operator_api::validate::{
    Assessment, FieldError, ValidationErrors, assess_update, parse_cluster, validate_create,
    with_more_errors,
};
use database_operator_api::{FINALIZER, GROUP, KIND, VERSION};
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use super::WebhookError;
use super::defaults::SchemaDefaults;

/// Which webhook was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/validate`: deny invalid objects and changes, warn about consequential ones.
    Validate,
    /// `/mutate`: fill in the schema defaults as a JSON patch.
    Mutate,
}

impl Endpoint {
    /// The path it is served on.
    pub const fn path(self) -> &'static str {
        match self {
            Endpoint::Validate => "/validate",
            Endpoint::Mutate => "/mutate",
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// A request body that is not an `admission.k8s.io/v1` AdmissionReview with a request: answered
/// with HTTP 400 and this message, since there is no request uid to answer to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

/// The admission logic, built once per server.
#[derive(Clone, Debug)]
pub struct Admission {
    defaults: SchemaDefaults,
    scheduling: SchedulingPolicy,
}

/// Reason and code of a denial for objects that break a rule (what the API server itself uses for
/// schema violations).
const INVALID: (&str, u16) = ("Invalid", 422);
/// Reason and code of a denial for a request this webhook should never have been sent.
const BAD_REQUEST: (&str, u16) = ("BadRequest", 400);
/// Reason and code when the webhook fails to build its own answer.
const INTERNAL: (&str, u16) = ("InternalError", 500);

impl Admission {
    /// Builds the admission logic with the defaults of the generated CRD.
    pub fn new() -> Result<Self, WebhookError> {
        Ok(Self {
            defaults: SchemaDefaults::generated()?,
            scheduling: SchedulingPolicy::default(),
        })
    }

    /// The same, refusing what `scheduling` (the operator's `--allowed-priority-classes` and
    /// `--allowed-toleration-keys`) does not allow.
    pub fn with_scheduling(self, scheduling: SchedulingPolicy) -> Self {
        Self { scheduling, ..self }
    }

    /// Answers one AdmissionReview body with the AdmissionReview to send back (as JSON, with the
    /// patch base64-encoded as the API server expects).
    pub fn handle(&self, endpoint: Endpoint, body: &[u8]) -> Result<Value, BadReview> {
        let review = parse_review(body)?;
        let request: AdmissionRequest<DynamicObject> = review
            .try_into()
            .map_err(|_| BadReview("malformed AdmissionReview: it has no request".into()))?;
        let response = self.decide(endpoint, &request);
        log_decision(endpoint, &request, &response);
        Ok(encode(response))
    }

    fn decide(
        &self,
        endpoint: Endpoint,
        req: &AdmissionRequest<DynamicObject>,
    ) -> AdmissionResponse {
        let response = AdmissionResponse::from(req);
        if let Err(message) = check_kind(req) {
            return deny(response, BAD_REQUEST, message, None);
        }
        // Subresources (status, scale) are not ours to check, and DELETE needs no check.
        if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            return response;
        }
        let operation = match req.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete | Operation::Connect => return response,
        };
        let Some(object) = &req.object else {
            return deny(
                response,
                BAD_REQUEST,
                format!("{operation} request carries no object"),
                None,
            );
        };
        let new = match serde_json::to_value(object) {
            Ok(v) => v,
            Err(e) => return deny(response, INTERNAL, format!("reading the object: {e}"), None),
        };
        match endpoint {
            Endpoint::Mutate => {
                self.mutate(response, &new, matches!(req.operation, Operation::Create))
            }
            Endpoint::Validate => {
                let old = match (&req.operation, &req.old_object) {
                    (Operation::Update, None) => {
                        return deny(
                            response,
                            BAD_REQUEST,
                            "UPDATE request carries no oldObject",
                            None,
                        );
                    }
                    (Operation::Update, Some(old)) => match serde_json::to_value(old) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            return deny(
                                response,
                                INTERNAL,
                                format!("reading the old object: {e}"),
                                None,
                            );
                        }
                    },
                    _ => None,
                };
                validate(response, new, old, &req.name, &self.scheduling)
            }
        }
    }

    /// The schema defaults, and on CREATE the operator's finalizer: the object is stored with
    /// it, so the first reconcile has no finalizer to add (one write fewer per new cluster).
    /// Never on UPDATE: the operator removes the finalizer with an update once it has cleaned
    /// up, and adding it back would hold the deletion forever.
    fn mutate(
        &self,
        response: AdmissionResponse,
        object: &Value,
        create: bool,
    ) -> AdmissionResponse {
        let mut ops = self.defaults.patch_for(object);
        if create {
            ops.extend(finalizer_patch(object));
        }
        if ops.is_empty() {
            return response;
        }
        match response.clone().with_patch(json_patch::Patch(ops)) {
            Ok(patched) => patched,
            Err(e) => deny(response, INTERNAL, e.to_string(), None),
        }
    }
}

/// The JSON patch operation that adds [`FINALIZER`] to `object`'s finalizers, when it is not
/// there yet.
fn finalizer_patch(object: &Value) -> Option<json_patch::PatchOperation> {
    use json_patch::jsonptr::PointerBuf;
    let existing = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array);
    if existing.is_some_and(|f| f.iter().any(|f| f.as_str() == Some(FINALIZER))) {
        return None;
    }
    let (path, value) = match existing {
        Some(_) => (
            "/metadata/finalizers/-",
            Value::String(FINALIZER.to_owned()),
        ),
        None => ("/metadata/finalizers", Value::Array(vec![FINALIZER.into()])),
    };
    Some(json_patch::PatchOperation::Add(json_patch::AddOperation {
        path: PointerBuf::parse(path).ok()?,
        value,
    }))
}

/// Validates a CREATE (`old` is `None`) or an UPDATE.
///
/// UPDATE ratchets, like the API server's own CRD validation ratcheting: when `spec` did not
/// change (labels, annotations, finalizers, deletion) nothing is checked, and an error that the
/// stored object already had — same field, same message, same value — is not enforced but
/// returned as a warning. So a cluster that a newer operator no longer considers valid (a version
/// dropped from the supported list) can still be relabelled, scaled, finalized and deleted, while
/// every new error and every transition rule is enforced.
fn validate(
    response: AdmissionResponse,
    new: Value,
    old: Option<Value>,
    name: &str,
    scheduling: &SchedulingPolicy,
) -> AdmissionResponse {
    if let Some(old) = &old
        && old.get("spec") == new.get("spec")
    {
        return response;
    }
    let cluster = match parse_cluster(new.clone()) {
        Ok(cluster) => cluster,
        Err(errors) => return deny_invalid(response, &errors, name),
    };
    let mut notes = Vec::new();
    let refused = scheduling.check(cluster.spec.scheduling.as_ref());
    let outcome = match &old {
        None => with_more_errors(validate_create(&cluster), refused),
        Some(old_value) => match parse_cluster(old_value.clone()) {
            Ok(old_cluster) => {
                // The scheduling guard is not ratcheted: the planner checks every new generation
                // against it, so a change admitted with a refused value kept would stop the
                // cluster's reconciles. The change must fix it.
                let existing = validate_create(&old_cluster)
                    .err()
                    .map(|e| e.0)
                    .unwrap_or_default();
                let mut assessment = assess_update(&old_cluster, &cluster);
                assessment.errors.extend(refused);
                ratchet(assessment, &existing, &mut notes)
            }
            Err(errors) => {
                notes.push(format!(
                    "the stored object could not be read ({errors}), so the rules about changes \
                     (engine, storage class, storage size, version) were not checked by the \
                     webhook; the CRD's CEL rules still apply"
                ));
                with_more_errors(validate_create(&cluster), refused)
            }
        },
    };
    match outcome {
        Ok(warnings) => {
            let mut all: Vec<String> = warnings.iter().map(ToString::to_string).collect();
            all.extend(notes);
            with_warnings(response, all)
        }
        Err(errors) => with_warnings(deny_invalid(response, &errors, name), notes),
    }
}

/// Drops the errors the stored object already had (`existing`), turning each into a note.
///
/// When only such errors remain the change is admitted with the warnings about the change itself
/// (scale-down, ...) and the notes saying what must be fixed.
fn ratchet(
    assessment: Assessment,
    existing: &[FieldError],
    notes: &mut Vec<String>,
) -> Result<Vec<database_operator_api::Warning>, ValidationErrors> {
    let Assessment { errors, warnings } = assessment;
    let (old, new): (Vec<FieldError>, Vec<FieldError>) =
        errors.into_iter().partition(|e| existing.contains(e));
    for e in &old {
        notes.push(format!("{e}; not enforced because the stored object already has it, but it must be fixed before this field can change"));
    }
    if new.is_empty() {
        Ok(warnings)
    } else {
        Err(ValidationErrors(new))
    }
}

fn check_kind(req: &AdmissionRequest<DynamicObject>) -> Result<(), String> {
    let kind = &req.kind;
    if kind.group == GROUP && kind.version == VERSION && kind.kind == KIND {
        return Ok(());
    }
    let got = if kind.group.is_empty() {
        format!("{}/{}", kind.version, kind.kind)
    } else {
        format!("{}/{} {}", kind.group, kind.version, kind.kind)
    };
    Err(format!(
        "this webhook admits only {GROUP}/{VERSION} {KIND} objects, not {got}: check the rules of the webhook configuration"
    ))
}

fn deny(
    mut response: AdmissionResponse,
    (reason, code): (&str, u16),
    message: impl Into<String>,
    details: Option<StatusDetails>,
) -> AdmissionResponse {
    response.allowed = false;
    response.result = Status {
        status: Some(StatusSummary::Failure),
        code,
        message: message.into(),
        metadata: None,
        reason: reason.to_owned(),
        details,
    };
    response.patch = None;
    response
}

/// Denies with every error in one message (exactly the text `database-operator validate` prints)
/// and one status cause per error.
fn deny_invalid(
    response: AdmissionResponse,
    errors: &ValidationErrors,
    name: &str,
) -> AdmissionResponse {
    let causes = errors
        .errors()
        .iter()
        .map(|e| StatusCause {
            reason: "FieldValueInvalid".to_owned(),
            message: match &e.value {
                Some(v) => format!("{} (value: {v})", e.message),
                None => e.message.clone(),
            },
            field: e.field.clone(),
        })
        .collect();
    let details = StatusDetails {
        name: name.to_owned(),
        group: GROUP.to_owned(),
        kind: KIND.to_owned(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    };
    deny(response, INVALID, errors.to_string(), Some(details))
}

fn with_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

fn parse_review(body: &[u8]) -> Result<AdmissionReview<DynamicObject>, BadReview> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let review: AdmissionReview<DynamicObject> = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                BadReview(format!("malformed AdmissionReview: {}", e.into_inner()))
            } else {
                BadReview(format!(
                    "malformed AdmissionReview: {path}: {}",
                    e.into_inner()
                ))
            }
        })?;
    if review.types.kind != META_KIND || review.types.api_version != META_API_VERSION_V1 {
        return Err(BadReview(format!(
            "expected kind {META_KIND} with apiVersion {META_API_VERSION_V1}, got kind {:?} with apiVersion {:?}: set admissionReviewVersions: [v1] in the webhook configuration",
            review.types.kind, review.types.api_version
        )));
    }
    Ok(review)
}

/// Serialises the answer. `AdmissionResponse.patch` is bytes, which the API server reads from
/// JSON as a base64 string (Go's encoding of `[]byte`); serde would write an array of numbers.
fn encode(response: AdmissionResponse) -> Value {
    let patch = response.patch.clone();
    let review = response.into_review();
    let mut value = serde_json::to_value(&review).unwrap_or(Value::Null);
    if let (Some(patch), Some(slot)) = (patch, value.pointer_mut("/response/patch")) {
        *slot = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    value
}

fn log_decision(
    endpoint: Endpoint,
    req: &AdmissionRequest<DynamicObject>,
    response: &AdmissionResponse,
) {
    let namespace = req.namespace.as_deref().unwrap_or("");
    let operation = format!("{:?}", req.operation).to_uppercase();
    let warnings = response.warnings.as_ref().map_or(0, Vec::len);
    if response.allowed {
        tracing::info!(
            %endpoint, uid = %req.uid, %operation, %namespace, name = %req.name,
            warnings, patched = response.patch.is_some(), dry_run = req.dry_run,
            "admitted DatabaseCluster"
        );
    } else {
        let fields: Vec<&str> = response
            .result
            .details
            .as_ref()
            .map(|d| d.causes.iter().map(|c| c.field.as_str()).collect())
            .unwrap_or_default();
        tracing::info!(
            %endpoint, uid = %req.uid, %operation, %namespace, name = %req.name,
            reason = %response.result.reason, fields = ?fields, dry_run = req.dry_run,
            "denied DatabaseCluster"
        );
    }
}
