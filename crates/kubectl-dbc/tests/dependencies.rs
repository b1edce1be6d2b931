//! The kubectl plugin is a client of the API server only: none of its normal (non-dev)
//! dependencies is a database driver, an S3 client or an HTTP server, and it does not link the
//! operator's runtime crate. Checked on the resolved dependency graph with `cargo tree`, so a
//! feature that drags one in transitively is caught too.

use std::process::Command;

const FORBIDDEN: &[&str] = &[
    // The operator's controller crate, which links all of the below.
    "database-operator-runtime",
    // Database drivers.
    "tokio-postgres",
    "postgres-protocol",
    "mysql_async",
    "mysql_common",
    // The S3 client and its HTTP client.
    "object_store",
    "reqwest",
    // HTTP servers (metrics, health, the webhook).
    "axum",
    "prometheus-client",
];

fn tree() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "kubectl-dbc",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn no_database_driver_s3_client_or_http_server() {
    let tree = tree();
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The check sees what it checks: the plugin's own libraries are in the tree.
    for wanted in [
        "database-operator-common",
        "database-operator-core",
        "kube-client",
    ] {
        assert!(
            crates.contains(&wanted),
            "{wanted} is not in the plugin's tree:\n{tree}"
        );
    }
    let found: Vec<&&str> = crates.iter().filter(|c| FORBIDDEN.contains(c)).collect();
    assert!(
        found.is_empty(),
        "kubectl-dbc must not depend on {found:?}:\n{tree}"
    );
}
