//! Which namespaces one controller watches. No IO.

use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::{Client, Resource};

/// Which namespaces one controller watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace (one cluster-wide watch per kind).
    All,
    /// One namespace.
    Namespace(String),
}

impl Scope {
    /// The scopes for the `--namespace` flags given (none: all namespaces).
    pub fn from_namespaces(namespaces: &[String]) -> Vec<Scope> {
        if namespaces.is_empty() {
            return vec![Scope::All];
        }
        let mut unique: Vec<String> = namespaces.to_vec();
        unique.sort();
        unique.dedup();
        unique.into_iter().map(Scope::Namespace).collect()
    }

    pub(super) fn api<K>(&self, client: Client) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self {
            Scope::All => Api::all(client),
            Scope::Namespace(ns) => Api::namespaced(client, ns),
        }
    }

    /// A label for logs and metrics: `*` or the namespace.
    pub fn label(&self) -> &str {
        match self {
            Scope::All => "*",
            Scope::Namespace(ns) => ns,
        }
    }
}
