//! The engine crate stays pure, like the core: none of its normal (non-dev) dependencies is an
//! async runtime, a Kubernetes client, an HTTP stack or a database driver. Checked on the
//! resolved dependency graph with `cargo tree`, so a feature that drags one in transitively is
//! caught too.

use std::process::Command;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "hyper",
    "hyper-util",
    "kube-client",
    "kube-runtime",
    "reqwest",
    "tower",
    "rustls",
    "openssl",
    "mio",
    "rand",
    "getrandom",
    "tokio-postgres",
    "mysql_async",
    "object_store",
];

#[test]
fn no_io_in_the_dependency_graph() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "database-operator-engine",
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
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        crates.contains(&"database-operator-api"),
        "unexpected cargo tree output:\n{tree}"
    );
    let found: Vec<&&str> = crates.iter().filter(|c| FORBIDDEN.contains(c)).collect();
    assert!(
        found.is_empty(),
        "the engine crate must not depend on {found:?}:\n{tree}"
    );
}
