//! The per-pod hosts file: the names cluster DNS would answer, as there is no
//! DNS on the local cluster.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What the hosts file needs to know about a pod (any node, any namespace).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEntry {
    pub namespace: String,
    pub name: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ip: Option<String>,
    pub ready: bool,
    pub labels: BTreeMap<String, String>,
}

impl PodEntry {
    /// `spec.hostname`, or the pod name.
    pub fn host_name(&self) -> &str {
        self.hostname.as_deref().unwrap_or(&self.name)
    }
}

/// A Service with a selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceEntry {
    pub namespace: String,
    pub name: String,
    pub selector: BTreeMap<String, String>,
    pub publish_not_ready: bool,
}

/// `<hostname>.<subdomain>.<ns>.svc.cluster.local` or nothing.
pub fn fqdn(pod: &PodEntry) -> Option<String> {
    pod.subdomain.as_ref().map(|sub| {
        format!(
            "{}.{sub}.{}.svc.cluster.local",
            pod.host_name(),
            pod.namespace
        )
    })
}

/// The hosts file of `own` (whose IP is `own_ip`) given every pod and
/// Service. Several addresses for one name come as several lines, ready pods
/// first; glibc's `files` backend answers the first line that matches.
pub fn render(
    own: &PodEntry,
    own_ip: &str,
    pods: &[PodEntry],
    services: &[ServiceEntry],
) -> String {
    let mut out = String::from(
        "# Written by the process-node agent of the local cluster; rewritten when pods or Services change.\n127.0.0.1\tlocalhost\n",
    );
    match fqdn(own) {
        Some(f) => {
            let short = format!(
                "{}.{}.{}.svc",
                own.host_name(),
                own.subdomain.as_deref().unwrap_or_default(),
                own.namespace
            );
            let _ = writeln!(out, "{own_ip}\t{f} {short} {}", own.host_name());
        }
        None => {
            let _ = writeln!(out, "{own_ip}\t{}", own.host_name());
        }
    }
    let _ = writeln!(
        out,
        "127.0.0.1\tkubernetes.default.svc.cluster.local kubernetes.default.svc kubernetes.default{}",
        if own.namespace == "default" {
            " kubernetes"
        } else {
            ""
        }
    );

    let mut sorted: Vec<&PodEntry> = pods.iter().filter(|p| p.ip.is_some()).collect();
    sorted
        .sort_by(|a, b| (!a.ready, &a.namespace, &a.name).cmp(&(!b.ready, &b.namespace, &b.name)));
    for pod in &sorted {
        if pod.namespace != own.namespace
            || pod.hostname.is_none()
            || pod.subdomain.is_none()
            || pod.name == own.name
        {
            continue;
        }
        let sub = pod.subdomain.as_deref().unwrap_or_default();
        let host = pod.host_name();
        let _ = writeln!(
            out,
            "{}\t{host}.{sub}.{ns}.svc {host}.{sub}.{ns}.svc.cluster.local",
            pod.ip.as_deref().unwrap_or_default(),
            ns = pod.namespace
        );
    }
    let mut services: Vec<&ServiceEntry> =
        services.iter().filter(|s| !s.selector.is_empty()).collect();
    services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    for svc in services {
        let names = if svc.namespace == own.namespace {
            format!(
                "{n}.{ns}.svc {n}.{ns}.svc.cluster.local {n}",
                n = svc.name,
                ns = svc.namespace
            )
        } else {
            format!(
                "{n}.{ns}.svc {n}.{ns}.svc.cluster.local",
                n = svc.name,
                ns = svc.namespace
            )
        };
        for pod in &sorted {
            let selected = pod.namespace == svc.namespace
                && svc
                    .selector
                    .iter()
                    .all(|(k, v)| pod.labels.get(k) == Some(v));
            if selected && (pod.ready || svc.publish_not_ready) {
                let _ = writeln!(out, "{}\t{names}", pod.ip.as_deref().unwrap_or_default());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, ip: &str, ready: bool, role: &str) -> PodEntry {
        PodEntry {
            namespace: ns.into(),
            name: name.into(),
            hostname: Some(name.into()),
            subdomain: Some("db-headless".into()),
            ip: Some(ip.into()),
            ready,
            labels: [
                ("app".to_string(), "db".to_string()),
                ("role".to_string(), role.to_string()),
            ]
            .into(),
        }
    }

    fn svc(ns: &str, name: &str, role: Option<&str>, publish: bool) -> ServiceEntry {
        let mut selector: BTreeMap<String, String> = [("app".to_string(), "db".to_string())].into();
        if let Some(r) = role {
            selector.insert("role".into(), r.into());
        }
        ServiceEntry {
            namespace: ns.into(),
            name: name.into(),
            selector,
            publish_not_ready: publish,
        }
    }

    #[test]
    fn renders_own_peers_and_services() {
        let own = pod("ns1", "db-0", "127.10.0.1", true, "primary");
        let pods = vec![
            own.clone(),
            pod("ns1", "db-1", "127.10.0.2", false, "replica"),
            pod("ns1", "db-2", "127.10.0.3", true, "replica"),
            pod("ns2", "db-0", "127.10.0.9", true, "primary"),
            PodEntry {
                ip: None,
                ..pod("ns1", "db-3", "", true, "replica")
            },
        ];
        let services = vec![
            svc("ns1", "db", Some("primary"), false),
            svc("ns1", "db-replicas", Some("replica"), false),
            svc("ns1", "db-headless", None, true),
            svc("ns2", "db", Some("primary"), false),
            ServiceEntry {
                selector: BTreeMap::new(),
                ..svc("ns1", "external", None, false)
            },
        ];
        let text = render(&own, "127.10.0.1", &pods, &services);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            vec![
                "127.0.0.1\tlocalhost",
                "127.10.0.1\tdb-0.db-headless.ns1.svc.cluster.local db-0.db-headless.ns1.svc db-0",
                "127.0.0.1\tkubernetes.default.svc.cluster.local kubernetes.default.svc kubernetes.default",
                "127.10.0.3\tdb-2.db-headless.ns1.svc db-2.db-headless.ns1.svc.cluster.local",
                "127.10.0.2\tdb-1.db-headless.ns1.svc db-1.db-headless.ns1.svc.cluster.local",
                "127.10.0.1\tdb.ns1.svc db.ns1.svc.cluster.local db",
                "127.10.0.1\tdb-headless.ns1.svc db-headless.ns1.svc.cluster.local db-headless",
                "127.10.0.3\tdb-headless.ns1.svc db-headless.ns1.svc.cluster.local db-headless",
                "127.10.0.2\tdb-headless.ns1.svc db-headless.ns1.svc.cluster.local db-headless",
                "127.10.0.3\tdb-replicas.ns1.svc db-replicas.ns1.svc.cluster.local db-replicas",
                "127.10.0.9\tdb.ns2.svc db.ns2.svc.cluster.local",
            ]
        );
    }

    #[test]
    fn pod_without_subdomain_has_only_its_name() {
        let own = PodEntry {
            namespace: "default".into(),
            name: "solo".into(),
            ..PodEntry::default()
        };
        let text = render(&own, "127.10.0.7", &[], &[]);
        assert!(text.contains("127.10.0.7\tsolo\n"), "{text}");
        assert!(text.contains("kubernetes.default kubernetes\n"), "{text}");
    }
}
