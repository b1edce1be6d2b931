//! The trust the operator dials a member with: the cluster's published authorities
//! (`<name>-ca`), checked for the member's own DNS name, when the member's pod mounts the
//! cluster's server certificate.

use std::sync::Arc;

use database_operator_api::DatabaseCluster;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::{KubeMembers, MemberError};
use crate::database::tls::{ServerTrust, Verify};
use crate::secrets::SecretSource;

/// The cluster authorities' trust, by Secret, kept while the Secret's resourceVersion stays.
#[derive(Clone, Default)]
pub struct TrustCache {
    by_secret: Arc<std::sync::Mutex<TrustsBySecret>>,
}

/// (namespace, Secret) → (resourceVersion, trust).
type TrustsBySecret = std::collections::HashMap<(String, String), (String, ServerTrust)>;

impl<S: SecretSource> KubeMembers<S> {
    /// The trust to dial `pod` of `cluster` with: `None` when its pod was started without TLS
    /// (no volume of the cluster's server certificate: its server offers no TLS, or not the
    /// cluster's certificate); otherwise the authorities published in `<name>-ca`, required
    /// (a member that serves TLS is never dialled without checking its certificate).
    pub(super) async fn trust_for(
        &self,
        cluster: &DatabaseCluster,
        pod: &str,
    ) -> Result<Option<ServerTrust>, MemberError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let name = cluster.name_any();
        let mounts_tls = self
            .stores
            .pods
            .get(&ObjectRef::new(pod).within(&namespace))
            .is_some_and(|p| {
                p.tls_secret()
                    == Some(database_operator_core::tls::server_secret_name(&name).as_str())
            });
        if !mounts_tls {
            return Ok(None);
        }
        let secret_name = database_operator_core::tls::ca_secret_name(&name);
        let no_trust = |problem: String| MemberError::NoTrust {
            namespace: namespace.clone(),
            name: secret_name.clone(),
            problem,
        };
        let watched = self
            .stores
            .secrets
            .get(&ObjectRef::new(&secret_name).within(&namespace))
            .and_then(|m| m.metadata.resource_version.clone());
        // Checked for the member's own DNS name (the cluster's certificate covers every member
        // through `*.<name>-headless.<namespace>.svc`), whatever address is dialled.
        let member = database_operator_core::tls::member_dns_name(&name, &namespace, pod);
        let key = (namespace.clone(), secret_name.clone());
        let cached = watched.as_ref().and_then(|version| {
            let cached = self.trust.by_secret.lock().ok()?;
            let (v, trust) = cached.get(&key)?;
            (v == version).then(|| trust.clone())
        });
        let trust = match cached {
            Some(trust) => trust,
            None => {
                let secret = self
                    .secrets
                    .get(&namespace, &secret_name)
                    .await
                    .map_err(|e| MemberError::Secret(Box::new(e)))?
                    .ok_or_else(|| no_trust("does not exist".to_owned()))?;
                let pem = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(database_operator_core::tls::CA_CERT_KEY))
                    .ok_or_else(|| {
                        no_trust(format!(
                            "has no key {}",
                            database_operator_core::tls::CA_CERT_KEY
                        ))
                    })?;
                let trust = ServerTrust::from_pem_verifying(&pem.0, Verify::Full)
                    .map_err(|e| no_trust(e.to_string()))?;
                if let Some(version) = secret.metadata.resource_version.clone()
                    && let Ok(mut cached) = self.trust.by_secret.lock()
                {
                    cached.insert(key, (version, trust.clone()));
                }
                trust
            }
        };
        Ok(Some(
            trust
                .for_name(&member)
                .map_err(|e| no_trust(e.to_string()))?,
        ))
    }
}
