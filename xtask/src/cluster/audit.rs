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
        }
    }
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
