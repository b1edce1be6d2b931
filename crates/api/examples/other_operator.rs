//! Another operator's view of the API crate: build a `DatabaseCluster` in code, check it with
//! the same rules the admission webhook applies, and print either the object (ready to apply)
//! or every broken rule.
//!
//! ```text
//! cargo run -p database-operator-api --example other_operator            # a valid cluster
//! cargo run -p database-operator-api --example other_operator -- broken  # refused: why
//! cargo run -p database-operator-api --example other_operator -- crd     # the CRD it needs
//! ```
//!
//! An operator that depends on `database-operator-api` chooses the Kubernetes API version in
//! its own `Cargo.toml` (`k8s-openapi = { version = "0.29", features = ["v1_37"] }`); the API
//! crate chooses none. Here the crate's dev-dependency chooses it.

use std::process::ExitCode;

use database_operator_api::crd::crd_yaml;
use database_operator_api::{
    BackupDeletionPolicy, BackupSpec, DatabaseCluster, DatabaseClusterSpec, Engine,
    SecretKeySelector, StorageSpec, validate_create,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The database a tenant operator would create for one of its tenants.
fn tenant_database(tenant: &str, broken: bool) -> DatabaseCluster {
    let mut cluster = DatabaseCluster::new(
        &format!("{tenant}-db"),
        DatabaseClusterSpec {
            engine: Engine::Postgresql,
            version: if broken { "9.6" } else { "16.4" }.to_owned(),
            replicas: if broken { 12 } else { 3 },
            storage: StorageSpec {
                size: Quantity("20Gi".to_owned()),
                storage_class_name: None,
            },
            resources: None,
            scheduling: None,
            failover: None,
            replication: None,
            password_rotation: None,
            upgrade: None,
            bootstrap: None,
            network_policy: None,
            tls: None,
            backup: Some(BackupSpec {
                schedule: if broken { "every night" } else { "0 2 * * *" }.to_owned(),
                retention: 7,
                s3_bucket: format!("{tenant}-backups"),
                endpoint: None,
                region: None,
                credentials_secret_ref: None,
                deletion_policy: BackupDeletionPolicy::Retain,
                verify: None,
                archive: None,
                method: None,
            }),
            password_secret_ref: SecretKeySelector {
                name: format!("{tenant}-db-password"),
                key: "password".to_owned(),
            },
        },
    );
    cluster.metadata.namespace = Some(tenant.to_owned());
    cluster
}

fn main() -> ExitCode {
    let arg = std::env::args().nth(1).unwrap_or_default();
    if arg == "crd" {
        print!("{}", crd_yaml());
        return ExitCode::SUCCESS;
    }
    let cluster = tenant_database("acme", arg == "broken");
    match validate_create(&cluster) {
        Ok(warnings) => {
            for warning in warnings {
                eprintln!("warning: {warning}");
            }
            match serde_json::to_string_pretty(&cluster) {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: serializing the cluster: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(errors) => {
            eprintln!("acme/acme-db is refused:");
            for error in errors.errors() {
                eprintln!("  {error}");
            }
            ExitCode::FAILURE
        }
    }
}
