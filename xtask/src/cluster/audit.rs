//! Reading the apiserver audit log written with `--audit-log`.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// One audit event (policy level Metadata, so no bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// Authenticated user name, e.g. `kubernetes-admin`,
    /// `system:serviceaccount:kube-system:statefulset-controller`.
    pub user: String,
    pub user_agent: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// `ResponseComplete`, `ResponseStarted` (watches) or `Panic`.
    pub stage: String,
    pub code: Option<u16>,
    /// RFC 3339 with microseconds, as written by the apiserver.
    pub stage_timestamp: String,
    /// The request body, when the policy logs it (level `Request` or above).
    pub request_object: Option<Value>,
}

impl AuditEvent {
    /// A completed mutating request.
    pub fn is_write(&self) -> bool {
        self.stage == "ResponseComplete"
            && matches!(
                self.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
    }

    fn from_json(v: &Value) -> Self {
        let s = |ptr: &str| {
            v.pointer(ptr)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Self {
            verb: s("/verb"),
            user: s("/user/username"),
            user_agent: s("/userAgent"),
            api_group: s("/objectRef/apiGroup"),
            resource: s("/objectRef/resource"),
            subresource: s("/objectRef/subresource"),
            namespace: s("/objectRef/namespace"),
            name: s("/objectRef/name"),
            stage: s("/stage"),
            code: v
                .pointer("/responseStatus/code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok()),
            stage_timestamp: s("/stageTimestamp"),
            request_object: v.pointer("/requestObject").cloned(),
        }
    }

    /// The object a request wrote, with its subresource: `statefulsets.apps shop/orders`,
    /// `databaseclusters.database.example.com/status shop/orders`.
    pub fn object(&self) -> String {
        format!("{} {}/{}", self.resource_key(), self.namespace, self.name)
    }

    /// The resource as `kubectl` spells it, with its subresource: `statefulsets.apps`, `pods`,
    /// `databaseclusters.database.example.com/status`; `(non-resource)` for a path.
    pub fn resource_key(&self) -> String {
        let mut key = self.resource.clone();
        if !self.api_group.is_empty() {
            key.push('.');
            key.push_str(&self.api_group);
        }
        if !self.subresource.is_empty() {
            key.push('/');
            key.push_str(&self.subresource);
        }
        if key.is_empty() {
            key.push_str("(non-resource)");
        }
        key
    }
}

/// A write that said again what the same user's previous write to the same object had said,
/// with nobody else writing that object (and subresource) in between: it changed nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct RepeatedWrite {
    /// `verb resource namespace/name`.
    pub what: String,
    /// When the first of the two was answered.
    pub first: String,
    /// When the repeat was answered.
    pub repeat: String,
}

/// The writes of `user` that repeat that user's previous successful write to the same object
/// with the same body, from the same process (its `User-Agent`, which names the process), nobody
/// having written it in between. Needs the request bodies (the policy's
/// level `Request` for `user`'s writes); events (each one new) and deletions (a fence repeats
/// a deletion on purpose when the pod did not go) are not counted.
pub fn repeated_writes(events: &[AuditEvent], user: &str) -> Vec<RepeatedWrite> {
    let mut writes: Vec<&AuditEvent> = events
        .iter()
        // Only writes that took effect: a request cut off (a killed process's in-flight writes
        // end as 504) is retried, and that is no repeat.
        .filter(|e| {
            e.is_write()
                && e.code.is_some_and(|c| c < 400)
                && !e.resource.starts_with("events")
                && !e.name.is_empty()
        })
        .collect();
    writes.sort_by(|a, b| a.stage_timestamp.cmp(&b.stage_timestamp));
    let mut last: std::collections::HashMap<String, &AuditEvent> = std::collections::HashMap::new();
    let mut repeated = Vec::new();
    for write in writes {
        let object = write.object();
        // The same process: a write another process repeats (one that replaced a killed
        // operator, a standby taking over) was planned from that process's own first listing,
        // not from a cache that missed its own write.
        if let Some(previous) = last.get(&object)
            && write.user == user
            && previous.user == user
            && write.user_agent == previous.user_agent
            && write.verb != "delete"
            && write.verb == previous.verb
            && write.request_object.is_some()
            && write.request_object == previous.request_object
        {
            repeated.push(RepeatedWrite {
                what: format!("{} {object}", write.verb),
                first: previous.stage_timestamp.clone(),
                repeat: write.stage_timestamp.clone(),
            });
        }
        last.insert(object, write);
    }
    repeated
}

/// Parses every line of the audit log; lines that are not JSON are skipped
/// (the last line may be half-written).
pub fn read_audit_log(path: &Path) -> Result<Vec<AuditEvent>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|v| AuditEvent::from_json(&v))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(
        user: &str,
        verb: &str,
        resource: &str,
        name: &str,
        at: &str,
        body: Value,
    ) -> AuditEvent {
        AuditEvent {
            verb: verb.into(),
            user: user.into(),
            user_agent: String::new(),
            api_group: String::new(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: "shop".into(),
            name: name.into(),
            stage: "ResponseComplete".into(),
            code: Some(200),
            stage_timestamp: at.into(),
            request_object: Some(body),
        }
    }

    #[test]
    fn a_write_repeating_the_last_one_is_found_unless_someone_wrote_in_between() {
        let op = "database-operator";
        let label = |role: &str| serde_json::json!({"metadata": {"labels": {"role": role}}});
        let events = vec![
            write(
                op,
                "patch",
                "pods",
                "orders-0",
                "2026-01-01T00:00:00.100000Z",
                label("primary"),
            ),
            // 40 ms later, the same label again: a repeat.
            write(
                op,
                "patch",
                "pods",
                "orders-0",
                "2026-01-01T00:00:00.140000Z",
                label("primary"),
            ),
            // Another pod, another object.
            write(
                op,
                "patch",
                "pods",
                "orders-1",
                "2026-01-01T00:00:00.150000Z",
                label("primary"),
            ),
            // Someone relabels orders-1 by hand; the operator puts it back: not a repeat.
            write(
                "admin",
                "patch",
                "pods",
                "orders-1",
                "2026-01-01T00:00:01.000000Z",
                label("x"),
            ),
            write(
                op,
                "patch",
                "pods",
                "orders-1",
                "2026-01-01T00:00:01.100000Z",
                label("primary"),
            ),
            // A different body is a change, not a repeat.
            write(
                op,
                "patch",
                "pods",
                "orders-0",
                "2026-01-01T00:00:02.000000Z",
                label("replica"),
            ),
            // A write that failed (a killed client's, answered 504) and its retry: no repeat.
            AuditEvent {
                code: Some(504),
                ..write(
                    op,
                    "patch",
                    "services",
                    "orders",
                    "2026-01-01T00:00:02.500000Z",
                    label("x"),
                )
            },
            write(
                op,
                "patch",
                "services",
                "orders",
                "2026-01-01T00:00:02.600000Z",
                label("x"),
            ),
            // The process that replaced a killed one writes what its predecessor wrote last,
            // from its own first listing: not a repeat of its own.
            write(
                op,
                "patch",
                "services",
                "orders-primary",
                "2026-01-01T00:00:02.700000Z",
                label("x"),
            ),
            AuditEvent {
                user_agent: "database-operator/0.1.0 (-; pid 2)".into(),
                ..write(
                    op,
                    "patch",
                    "services",
                    "orders-primary",
                    "2026-01-01T00:00:02.800000Z",
                    label("x"),
                )
            },
            // Deletions are left out (a fence retries them on purpose).
            write(
                op,
                "delete",
                "pods",
                "orders-2",
                "2026-01-01T00:00:03.000000Z",
                Value::Null,
            ),
            write(
                op,
                "delete",
                "pods",
                "orders-2",
                "2026-01-01T00:00:04.000000Z",
                Value::Null,
            ),
        ];
        let repeated = repeated_writes(&events, op);
        assert_eq!(
            repeated,
            [RepeatedWrite {
                what: "patch pods shop/orders-0".into(),
                first: "2026-01-01T00:00:00.100000Z".into(),
                repeat: "2026-01-01T00:00:00.140000Z".into(),
            }]
        );
    }

    #[test]
    fn parses_a_metadata_event() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"x","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/configmaps","verb":"create","user":{"username":"kubernetes-admin","groups":["system:masters"]},"userAgent":"kubectl","objectRef":{"resource":"configmaps","namespace":"default","name":"a","apiVersion":"v1"},"responseStatus":{"code":201},"stageTimestamp":"2026-01-01T00:00:00.000000Z"}"#;
        let event = AuditEvent::from_json(&serde_json::from_str(line).unwrap());
        assert!(event.is_write());
        assert_eq!(event.user, "kubernetes-admin");
        assert_eq!(event.resource, "configmaps");
        assert_eq!(event.code, Some(201));
    }
}
