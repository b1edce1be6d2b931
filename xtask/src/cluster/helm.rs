//! The Helm chart in `deploy/helm/database-operator`: the helm CLI built from the
//! `xtask/go/helm` wrapper module into its own cache directory (as the control plane and the S3
//! server are), and `cargo xtask helm-check`, which lints the chart and compares what it renders
//! with what `kubectl kustomize` builds from `deploy/`, object by object, so the two installs
//! cannot drift apart.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::binaries::{self, GoBuild};
use super::progress::Progress;

/// The Go module whose CLI is built.
pub const MODULE: &str = "helm.sh/helm/v3";
/// Bumped whenever the way helm is built changes.
const BUILD_RECIPE: &str = "helm-recipe-1 CGO_ENABLED=0 -trimpath -ldflags=-s,-w,-X version";
/// The chart, relative to the workspace root.
pub const CHART_DIR: &str = "deploy/helm/database-operator";
/// The release name and namespace the comparison renders with: those of `deploy/`.
pub const RELEASE: &str = "database-operator";
/// The namespace of `deploy/`.
pub const NAMESPACE: &str = "database-operator-system";

/// Labels only Helm adds (release bookkeeping); dropped before comparing with `deploy/`.
pub const HELM_ONLY_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// The cached helm binary.
#[derive(Debug, Clone)]
pub struct HelmBinary {
    /// `<cache>/database-operator/control-plane/helm-<version>-<hash>/`.
    pub root: PathBuf,
    /// The helm version, from the wrapper `go.mod`.
    pub version: String,
}

impl HelmBinary {
    /// The executable.
    pub fn path(&self) -> PathBuf {
        self.root.join("bin").join("helm")
    }

    /// `helm <args>`, returning stdout; fails with stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(self.path())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.path().display()))?;
        if !out.status.success() {
            bail!(
                "helm {} failed ({}):\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `helm template` of the chart as release `RELEASE` in `NAMESPACE`, CRDs included, with
    /// `--set` values; the parsed objects.
    pub fn template(&self, chart: &Path, sets: &[&str]) -> Result<Vec<Value>> {
        let chart = chart.to_string_lossy();
        let mut args = vec![
            "template",
            RELEASE,
            chart.as_ref(),
            "--namespace",
            NAMESPACE,
            "--include-crds",
        ];
        for set in sets {
            args.push("--set");
            args.push(set);
        }
        parse_objects(&self.run(&args)?)
    }
}

/// Where helm is (or will be) cached. Builds nothing.
pub fn locate(workspace_root: &Path) -> Result<HelmBinary> {
    let module = binaries::go_dir(workspace_root).join("helm");
    let version = binaries::required_version(&module.join("go.mod"), MODULE)?;
    let mut hasher = Sha256::new();
    hasher.update(BUILD_RECIPE.as_bytes());
    for file in ["go.mod", "go.sum"] {
        let path = module.join(file);
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(format!("\0helm/{file}\0").as_bytes());
        hasher.update(&bytes);
    }
    let hash: String = hasher.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let root = binaries::cache_base()?.join(format!("helm-{version}-{hash}"));
    Ok(HelmBinary { root, version })
}

/// The cached helm, built when missing (a few minutes on 2 cores, once per version).
pub fn ensure(workspace_root: &Path, progress: &Progress) -> Result<HelmBinary> {
    let binary = locate(workspace_root)?;
    if binary.path().is_file() {
        progress.step(format!(
            "helm {} cached in {}",
            binary.version,
            binary.root.display()
        ));
        return Ok(binary);
    }
    progress.say(format!(
        "Building helm {} from its Go module; once per version, cached in {}.",
        binary.version,
        binary.root.display()
    ));
    let bin_dir = binary.root.join("bin");
    fs::create_dir_all(&bin_dir)?;
    let logs = binary.root.join("build-logs");
    fs::create_dir_all(&logs)?;
    binaries::go_build(
        &GoBuild {
            label: "helm",
            module_dir: &binaries::go_dir(workspace_root).join("helm"),
            packages: &[format!("{MODULE}/cmd/helm")],
            // Stamps the release like upstream's Makefile, so `helm version` is exact.
            ldflags: &format!(
                "-s -w -X {MODULE}/internal/version.version={}",
                binary.version
            ),
            tags: "",
            out_dir: &bin_dir,
            single_output: Some("helm"),
            log: &logs.join("helm.log"),
        },
        progress,
    )?;
    Ok(binary)
}

/// Parses a multi-document YAML stream, dropping empty documents.
pub fn parse_objects(yaml: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).context("parsing rendered YAML documents")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `kubectl kustomize <dir>`: the parsed objects.
pub fn kustomize(kubectl: &Path, dir: &Path) -> Result<Vec<Value>> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} kustomize", kubectl.display()))?;
    if !out.status.success() {
        bail!(
            "kubectl kustomize {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_objects(&String::from_utf8_lossy(&out.stdout))
}

/// `apiVersion kind namespace/name`, the identity objects are matched by.
pub fn object_key(object: &Value) -> String {
    let field = |path: &[&str]| {
        path.iter()
            .try_fold(object, |v, k| v.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let ns = field(&["metadata", "namespace"]);
    let name = field(&["metadata", "name"]);
    format!(
        "{} {} {}{}",
        field(&["apiVersion"]),
        field(&["kind"]),
        if ns.is_empty() {
            String::new()
        } else {
            format!("{ns}/")
        },
        name
    )
}

/// Drops what only Helm adds: its bookkeeping labels on objects and pod templates, and empty
/// label maps left behind.
pub fn normalize(mut object: Value) -> Value {
    fn strip(labels: Option<&mut Value>) {
        if let Some(Value::Object(map)) = labels {
            for label in HELM_ONLY_LABELS {
                map.remove(*label);
            }
        }
    }
    strip(object.pointer_mut("/metadata/labels"));
    strip(object.pointer_mut("/spec/template/metadata/labels"));
    object
}

/// Objects keyed by [`object_key`], normalized.
pub fn by_key(objects: Vec<Value>) -> Result<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for object in objects {
        let key = object_key(&object);
        if out.insert(key.clone(), normalize(object)).is_some() {
            bail!("{key} is rendered twice");
        }
    }
    Ok(out)
}

/// Every difference between two sets of objects: objects only on one side, and per object the
/// JSON paths whose values differ (`kustomize` is the reference). Empty when they agree.
pub fn differences(kustomize: &[Value], helm: &[Value]) -> Result<Vec<String>> {
    let left = by_key(kustomize.to_vec())?;
    let right = by_key(helm.to_vec())?;
    let mut out = Vec::new();
    for key in left.keys().filter(|k| !right.contains_key(*k)) {
        out.push(format!("{key}: in deploy/ only"));
    }
    for key in right.keys().filter(|k| !left.contains_key(*k)) {
        out.push(format!("{key}: in the chart only"));
    }
    for (key, want) in &left {
        if let Some(have) = right.get(key) {
            let mut paths = Vec::new();
            diff_values("", want, have, &mut paths);
            out.extend(paths.into_iter().map(|p| format!("{key}: {p}")));
        }
    }
    Ok(out)
}

fn diff_values(path: &str, want: &Value, have: &Value, out: &mut Vec<String>) {
    match (want, have) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}/{k}");
                match b.get(k) {
                    Some(w) => diff_values(&p, v, w, out),
                    None => out.push(format!("{p}: {} in deploy/, missing in the chart", v)),
                }
            }
            for (k, w) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
                out.push(format!("{path}/{k}: {w} in the chart, missing in deploy/"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            let (a, b) = (by_name(a), by_name(b));
            for (i, (v, w)) in a.iter().zip(&b).enumerate() {
                diff_values(&format!("{path}/{i}"), v, w, out);
            }
        }
        // YAML `1` and `1.0` (kustomize re-serializes numbers; helm copies the file).
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        _ if want != have => out.push(format!("{path}: deploy/ {want}, chart {have}")),
        _ => {}
    }
}

/// Lists whose items all have a `name` (containers, env, ports, volumes, mounts, webhooks) are
/// maps keyed by it to the API server, and a strategic merge patch reorders them: compared
/// sorted by name. Other lists keep their order.
fn by_name(items: &[Value]) -> Vec<&Value> {
    let mut sorted: Vec<&Value> = items.iter().collect();
    let names: Option<Vec<&str>> = items
        .iter()
        .map(|i| i.get("name").and_then(Value::as_str))
        .collect();
    if names.is_some() {
        sorted.sort_by_key(|i| i.get("name").and_then(Value::as_str));
    }
    sorted
}

/// One comparison: a kustomization and the chart values that must render the same objects.
pub struct Comparison {
    /// What is compared, for messages.
    pub name: &'static str,
    /// The kustomization (its directory's content), written under target/helm-check/<name>.
    pub kustomization: &'static str,
    /// `--set` values for the chart.
    pub sets: &'static [&'static str],
}

/// The installs `deploy/` offers and the chart values that match them. Kustomizations are
/// written to `target/helm-check/<name>/`, two levels below the workspace root.
pub const COMPARISONS: &[Comparison] = &[
    Comparison {
        name: "with-webhook",
        kustomization: "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../deploy/default
",
        sets: &["namespace.create=true"],
    },
    Comparison {
        name: "without-webhook",
        kustomization: "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../deploy/crds
  - ../../../deploy/rbac
  - ../../../deploy/manager
",
        sets: &["namespace.create=true", "webhook.enabled=false"],
    },
];

/// `cargo xtask helm-check`: `helm lint --strict` of the chart (defaults, and webhook off with
/// the ServiceMonitor on), then every [`COMPARISONS`] entry rendered both ways and compared.
pub fn check(workspace_root: &Path, progress: &Progress) -> Result<()> {
    let helm = ensure(workspace_root, progress)?;
    let kubectl = super::ensure_binaries(true)?.kubectl();
    let chart = workspace_root.join(CHART_DIR);
    let chart_arg = chart.to_string_lossy();
    for sets in [
        &[][..],
        &[
            "webhook.enabled=false",
            "metrics.serviceMonitor.enabled=true",
        ][..],
    ] {
        let mut args = vec!["lint", "--strict", chart_arg.as_ref()];
        for set in sets {
            args.push("--set");
            args.push(set);
        }
        helm.run(&args)?;
        progress.step(format!("helm lint --strict {}: ok", sets.join(",")));
    }
    let mut failures = Vec::new();
    for comparison in COMPARISONS {
        let dir = workspace_root
            .join("target/helm-check")
            .join(comparison.name);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join("kustomization.yaml"), comparison.kustomization)?;
        let want = kustomize(&kubectl, &dir)?;
        let have = helm.template(&chart, comparison.sets)?;
        let diffs = differences(&want, &have)?;
        if diffs.is_empty() {
            progress.step(format!(
                "{}: the chart (--set {}) renders the same {} objects as kubectl kustomize",
                comparison.name,
                comparison.sets.join(","),
                want.len()
            ));
        } else {
            failures.push(format!(
                "{} (chart --set {}):\n  {}",
                comparison.name,
                comparison.sets.join(","),
                diffs.join("\n  ")
            ));
        }
    }
    if !failures.is_empty() {
        bail!(
            "the Helm chart and deploy/ disagree; change both (or the values in xtask/src/cluster/helm.rs COMPARISONS):\n{}",
            failures.join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(labels: Value, replicas: u64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "op", "namespace": "ns", "labels": labels.clone()},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels}}}
        })
    }

    #[test]
    fn helm_bookkeeping_labels_do_not_count() {
        let plain = deployment(json!({"app.kubernetes.io/name": "op"}), 2);
        let helm = deployment(
            json!({"app.kubernetes.io/name": "op", "helm.sh/chart": "op-0.1.0",
                   "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "op",
                   "app.kubernetes.io/version": "0.1.0"}),
            2,
        );
        assert_eq!(
            differences(&[plain], &[helm]).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_changed_field_or_label_is_reported_with_its_path() {
        let plain = deployment(json!({"app.kubernetes.io/name": "op"}), 2);
        let helm = deployment(json!({"app.kubernetes.io/name": "other"}), 1);
        let diffs = differences(&[plain], &[helm]).unwrap();
        assert!(
            diffs.contains(&"apps/v1 Deployment ns/op: /spec/replicas: deploy/ 2, chart 1".into()),
            "{diffs:?}"
        );
        assert!(
            diffs
                .iter()
                .any(|d| d.contains("/spec/template/metadata/labels/app.kubernetes.io/name")),
            "{diffs:?}"
        );
    }

    #[test]
    fn objects_on_one_side_only_are_reported() {
        let plain = deployment(json!({}), 2);
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns"}});
        let diffs = differences(&[plain.clone(), service], std::slice::from_ref(&plain)).unwrap();
        assert_eq!(diffs, vec!["v1 Service ns/s: in deploy/ only".to_string()]);
        let cluster_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}});
        let diffs =
            differences(std::slice::from_ref(&plain), &[plain.clone(), cluster_role]).unwrap();
        assert_eq!(
            diffs,
            vec!["rbac.authorization.k8s.io/v1 ClusterRole r: in the chart only".to_string()]
        );
    }

    #[test]
    fn list_order_and_length_matter() {
        let a = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "l": [1, 2]});
        let b = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "l": [2, 1]});
        let c = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "l": [1]});
        assert_eq!(
            differences(std::slice::from_ref(&a), &[b]).unwrap().len(),
            2
        );
        assert_eq!(differences(&[a], &[c]).unwrap().len(), 1);
    }

    #[test]
    fn named_items_compare_by_name_and_numbers_by_value() {
        let a = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"},
                       "env": [{"name": "A", "value": "1"}, {"name": "B"}], "min": 1});
        let b = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"},
                       "env": [{"name": "B"}, {"name": "A", "value": "1"}], "min": 1.0});
        assert_eq!(
            differences(std::slice::from_ref(&a), &[b]).unwrap(),
            Vec::<String>::new()
        );
        let c = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"},
                       "env": [{"name": "B"}, {"name": "A", "value": "2"}], "min": 1.5});
        let diffs = differences(&[a], &[c]).unwrap();
        assert_eq!(diffs.len(), 2, "{diffs:?}");
        assert!(diffs[0].contains("/env/0/value"), "{diffs:?}");
    }

    #[test]
    fn the_cache_is_keyed_by_the_wrapper_module() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let helm = locate(root).unwrap();
        let name = helm.root.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with("helm-v3."), "{name}");
        assert!(helm.path().ends_with("bin/helm"));
    }
}
