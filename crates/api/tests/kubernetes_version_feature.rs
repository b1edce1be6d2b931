//! The library crates choose no Kubernetes version feature of k8s-openapi: an operator that
//! imports them chooses its own (k8s-openapi refuses a build with two). Checked on the
//! resolved feature graph of the libraries' normal dependencies with `cargo tree`.

use std::process::Command;

#[test]
fn library_crates_enable_no_kubernetes_version_feature() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "database-operator-api",
            "-p",
            "database-operator-core",
            "-e",
            "normal,features",
            "-i",
            "k8s-openapi",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.contains("database-operator-api"),
        "unexpected cargo tree output:\n{tree}"
    );
    let versions: Vec<&str> = tree
        .lines()
        .filter(|l| l.contains("k8s-openapi feature \"v1_") || l.contains("feature \"latest\""))
        .collect();
    assert!(
        versions.is_empty(),
        "a library crate enables a Kubernetes version feature: {versions:?}\n{tree}"
    );
}
