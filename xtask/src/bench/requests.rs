//! API requests of one user, from the apiserver's audit log, counted per phase of a run.

use std::collections::BTreeMap;

use crate::cluster::AuditEvent;
use anyhow::{Context, Result};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Requests in one time window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    /// Every request.
    pub total: u64,
    /// create, update, patch, delete, deletecollection.
    pub writes: u64,
    /// get, list, watch (a watch counts once, when it starts).
    pub reads: u64,
    /// Requests answered with a status of 400 or more, by status code.
    pub errors_by_code: BTreeMap<u16, u64>,
    /// `verb resource` (resource as `kubectl` spells it: `statefulsets.apps`,
    /// `databaseclusters.database.example.com/status`) -> count.
    pub by_verb_resource: BTreeMap<String, u64>,
}

impl RequestCounts {
    fn add(&mut self, event: &AuditEvent) {
        self.total += 1;
        if is_write_verb(&event.verb) {
            self.writes += 1;
        } else if matches!(event.verb.as_str(), "get" | "list" | "watch") {
            self.reads += 1;
        }
        if let Some(code) = event.code.filter(|c| *c >= 400) {
            *self.errors_by_code.entry(code).or_default() += 1;
        }
        *self
            .by_verb_resource
            .entry(format!("{} {}", event.verb, resource_key(event)))
            .or_default() += 1;
    }

    /// Writes per verb and resource only.
    pub fn writes_by_verb_resource(&self) -> BTreeMap<String, u64> {
        self.by_verb_resource
            .iter()
            .filter(|(k, _)| k.split(' ').next().is_some_and(is_write_verb))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

fn is_write_verb(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// `statefulsets.apps`, `pods`, `databaseclusters.database.example.com/status`.
pub fn resource_key(event: &AuditEvent) -> String {
    event.resource_key()
}

/// One request is one event: the `ResponseStarted` stage of a watch (its `ResponseComplete`
/// comes when the watch ends), the `ResponseComplete` of anything else, and a watch that failed
/// before it started (only `ResponseComplete`, with an error code).
fn counts_as_request(event: &AuditEvent) -> bool {
    match event.stage.as_str() {
        "ResponseStarted" => event.verb == "watch",
        "ResponseComplete" => event.verb != "watch" || event.code.is_some_and(|c| c >= 400),
        "Panic" => true,
        _ => false,
    }
}

/// A named time window `[start, end)`.
#[derive(Debug, Clone)]
pub struct Window {
    /// Phase name (`converge`, `quiet`, ...).
    pub name: String,
    /// Inclusive start.
    pub start: Timestamp,
    /// Exclusive end.
    pub end: Timestamp,
}

/// Counts `user`'s requests in each window; requests outside every window land in `other`.
pub fn count_by_window(
    events: &[AuditEvent],
    user: &str,
    windows: &[Window],
) -> Result<BTreeMap<String, RequestCounts>> {
    let mut out: BTreeMap<String, RequestCounts> = windows
        .iter()
        .map(|w| (w.name.clone(), RequestCounts::default()))
        .collect();
    for event in events
        .iter()
        .filter(|e| e.user == user && counts_as_request(e))
    {
        let at: Timestamp = event
            .stage_timestamp
            .parse()
            .with_context(|| format!("audit stageTimestamp {:?}", event.stage_timestamp))?;
        let name = windows
            .iter()
            .find(|w| w.start <= at && at < w.end)
            .map_or("other", |w| w.name.as_str());
        out.entry(name.to_string()).or_default().add(event);
    }
    Ok(out)
}

/// `apiserver_request_total` from the API server's `/metrics`, summed per `VERB resource`
/// (resource spelled as in [`resource_key`]): every client's requests, for comparison with the
/// operator's.
pub fn parse_apiserver_requests(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let mut get = BTreeMap::new();
        for pair in labels.split("\",") {
            if let Some((k, v)) = pair.split_once("=\"") {
                get.insert(k.trim(), v.trim_end_matches('"'));
            }
        }
        let event = AuditEvent {
            verb: get.get("verb").copied().unwrap_or_default().to_lowercase(),
            user: String::new(),
            user_agent: String::new(),
            api_group: get.get("group").copied().unwrap_or_default().to_string(),
            resource: get.get("resource").copied().unwrap_or_default().to_string(),
            subresource: get
                .get("subresource")
                .copied()
                .unwrap_or_default()
                .to_string(),
            namespace: String::new(),
            name: String::new(),
            stage: String::new(),
            code: None,
            stage_timestamp: String::new(),
            request_object: None,
        };
        *out.entry(format!("{} {}", event.verb, resource_key(&event)))
            .or_default() += value;
    }
    out
}

/// `after - before` per key, zeros left out.
pub fn delta(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(verb: &str, resource: &str, stage: &str, at: &str, code: u16) -> AuditEvent {
        AuditEvent {
            verb: verb.into(),
            user: "database-operator".into(),
            user_agent: String::new(),
            api_group: if resource == "statefulsets" {
                "apps".into()
            } else {
                String::new()
            },
            resource: resource.into(),
            subresource: String::new(),
            namespace: "dbbench".into(),
            name: "x".into(),
            stage: stage.into(),
            code: Some(code),
            stage_timestamp: at.into(),
            request_object: None,
        }
    }

    #[test]
    fn counts_each_request_once_in_its_window() {
        let t = |s: &str| -> Timestamp { s.parse().unwrap() };
        let windows = vec![
            Window {
                name: "converge".into(),
                start: t("2026-01-01T00:00:00Z"),
                end: t("2026-01-01T00:01:00Z"),
            },
            Window {
                name: "quiet".into(),
                start: t("2026-01-01T00:01:00Z"),
                end: t("2026-01-01T00:03:00Z"),
            },
        ];
        let mut events = vec![
            event(
                "patch",
                "statefulsets",
                "ResponseComplete",
                "2026-01-01T00:00:01.5Z",
                200,
            ),
            event(
                "patch",
                "statefulsets",
                "ResponseComplete",
                "2026-01-01T00:00:02Z",
                409,
            ),
            event(
                "watch",
                "pods",
                "ResponseStarted",
                "2026-01-01T00:00:03Z",
                200,
            ),
            // The end of the same watch: not a second request.
            event(
                "watch",
                "pods",
                "ResponseComplete",
                "2026-01-01T00:01:30Z",
                200,
            ),
            event(
                "get",
                "secrets",
                "ResponseComplete",
                "2026-01-01T00:01:10.000001Z",
                200,
            ),
            event(
                "list",
                "pods",
                "ResponseComplete",
                "2026-01-01T00:05:00Z",
                200,
            ),
        ];
        let mut other_user = event(
            "create",
            "pods",
            "ResponseComplete",
            "2026-01-01T00:00:05Z",
            201,
        );
        other_user.user = "system:kube-controller-manager".into();
        events.push(other_user);

        let counts = count_by_window(&events, "database-operator", &windows).unwrap();
        let converge = &counts["converge"];
        assert_eq!((converge.total, converge.writes, converge.reads), (3, 2, 1));
        assert_eq!(converge.by_verb_resource["patch statefulsets.apps"], 2);
        assert_eq!(converge.errors_by_code[&409], 1);
        assert_eq!(
            converge
                .writes_by_verb_resource()
                .keys()
                .collect::<Vec<_>>(),
            vec!["patch statefulsets.apps"]
        );
        let quiet = &counts["quiet"];
        assert_eq!((quiet.total, quiet.writes, quiet.reads), (1, 0, 1));
        assert_eq!(counts["other"].total, 1);
    }

    #[test]
    fn sums_apiserver_request_totals_over_codes() {
        let text = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="statefulsets",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="",verb="GET",version=""} 7
apiserver_request_duration_seconds_count{verb="GET"} 99
"#;
        let got = parse_apiserver_requests(text);
        assert_eq!(got["patch pods/status"], 12.0);
        assert_eq!(got["post statefulsets.apps"], 3.0);
        assert_eq!(got["get (non-resource)"], 7.0);
        assert_eq!(got.len(), 3);
        let mut later = got.clone();
        *later.get_mut("patch pods/status").unwrap() += 5.0;
        assert_eq!(
            delta(&later, &got),
            BTreeMap::from([("patch pods/status".to_string(), 5.0)])
        );
    }

    #[test]
    fn a_bad_timestamp_is_an_error_naming_it() {
        let events = vec![event("get", "pods", "ResponseComplete", "yesterday", 200)];
        let err = count_by_window(&events, "database-operator", &[]).unwrap_err();
        assert!(format!("{err:#}").contains("yesterday"));
    }
}
