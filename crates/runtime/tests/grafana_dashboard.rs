//! deploy/grafana/database-operator.json queries only metrics the operator exports: every metric
//! name in every panel query and template variable is one `Metrics::encode` writes (with the
//! `_total`, `_bucket`, `_sum` and `_count` names Prometheus stores for counters and histograms).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use database_operator_runtime::error::ErrorCategory;
use database_operator_runtime::metrics::{Metrics, Outcome};
use serde_json::Value;

fn dashboard() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/database-operator.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The series names a Prometheus scraping `/metrics` stores, from an operator that has done
/// one of everything (a family without samples is not written).
fn exported() -> BTreeSet<String> {
    let metrics = Metrics::new();
    metrics.set_max_concurrent_reconciles(5);
    metrics.set_leader(true);
    {
        let _busy = metrics.worker();
        metrics.reconciled("shop", Outcome::Success, Duration::from_millis(3));
    }
    metrics.reconciled("shop", Outcome::Error, Duration::from_millis(3));
    metrics.error(ErrorCategory::Kube);
    metrics.api_write("StatefulSet", "apply");
    metrics.set_clusters(
        "*",
        &BTreeMap::from([(("shop".to_owned(), "Running".to_owned()), 2)]),
    );
    let text = metrics.encode().expect("encode");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    names.insert(format!("{}_total", name.trim_end_matches("_total")));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_owned());
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            names.insert(name);
        }
    }
    names
}

/// Drops `"strings"`, `{label matchers}` and `[ranges]`.
fn strip(expr: &str) -> String {
    let mut out = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_string = false;
    for c in expr.chars() {
        match c {
            '"' if depth_brace == 0 => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            c => out.push(c),
        }
    }
    out
}

/// The metric names a PromQL expression selects: identifiers that are not functions or
/// aggregations (followed by `(`), not keywords, and not the labels of `by (...)` and friends.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &["and", "or", "unless", "offset", "bool"];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let text = strip(expr);
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let rest: String = chars[i..].iter().collect();
            let rest = rest.trim_start();
            // `sum by (le) (...)`: an aggregation with its label list first.
            let aggregation = ["by", "without"].iter().any(|k| {
                rest.strip_prefix(k)
                    .is_some_and(|r| r.trim_start().starts_with('('))
            });
            if LABEL_LISTS.contains(&word.as_str()) {
                skip_list = true;
            } else if rest.starts_with('(') || aggregation || KEYWORDS.contains(&word.as_str()) {
                // a function, an aggregation or a keyword
            } else {
                names.insert(word);
            }
            continue;
        }
        if c == '(' && skip_list {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_list = false;
        }
        i += 1;
    }
    names
}

/// Every PromQL expression of the dashboard: panel targets and query variables.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            panels.extend(inner);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(
                target["expr"]
                    .as_str()
                    .expect("a target with expr")
                    .to_owned(),
            );
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] == "query" {
            let query = variable["definition"].as_str().unwrap();
            // label_values(metric, label): the metric is the first argument.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.split_once(','))
                .map(|(metric, _)| metric.to_owned())
                .unwrap_or_else(|| query.to_owned());
            out.push(inner);
        }
    }
    out
}

#[test]
fn the_extractor_finds_metrics_and_skips_functions_labels_and_matchers() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{namespace=~"$ns", x="y{z}"}[5m]))) / on (pod) b_total or vector(0)"#
        ),
        BTreeSet::from(["a_seconds_bucket".to_owned(), "b_total".to_owned()])
    );
    assert_eq!(
        metric_names("sum without (le, pod) (c) unless d offset 5m"),
        BTreeSet::from(["c".to_owned(), "d".to_owned()])
    );
}

#[test]
fn every_dashboard_query_uses_only_exported_metrics() {
    let exported = exported();
    // The operator's own series must all be there, or the extraction is broken.
    for name in [
        "database_clusters_total",
        "controller_runtime_reconcile_total",
        "database_cluster_reconcile_duration_seconds_bucket",
        "database_operator_leader",
    ] {
        assert!(exported.contains(name), "{name} not in {exported:?}");
    }
    let dashboard = dashboard();
    let queries = queries(&dashboard);
    assert!(queries.len() >= 10, "only {} queries found", queries.len());
    let mut used = BTreeSet::new();
    for query in &queries {
        let names = metric_names(query);
        assert!(!names.is_empty(), "no metric in {query}");
        for name in names {
            assert!(
                exported.contains(&name),
                "the dashboard queries {name} (in `{query}`), which the operator does not export; \
                 exported: {exported:?}"
            );
            used.insert(name);
        }
    }
    // A made-up name is caught the same way.
    assert!(!exported.contains("database_operator_made_up_total"));
    // The dashboard shows each of the operator's metric families.
    for family in [
        "database_clusters_total",
        "database_cluster_reconcile_duration_seconds",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds",
        "controller_runtime_max_concurrent_reconciles",
        "controller_runtime_active_workers",
        "database_operator_reconcile_errors_total",
        "database_operator_api_writes_total",
        "database_operator_leader",
    ] {
        assert!(
            used.iter().any(|u| u.starts_with(family)),
            "no panel shows {family}"
        );
    }
}

#[test]
fn the_dashboard_is_importable() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "database-operator");
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_i64().unwrap()),
            "duplicate panel id {}",
            panel["id"]
        );
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "panel {} does not use the data source variable",
                panel["title"]
            );
        }
    }
    assert!(
        dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "datasource" && v["type"] == "datasource")
    );
}
