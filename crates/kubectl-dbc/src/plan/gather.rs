//! Gathering: what the operator's reconcile reads, read the same way (IO, reads only).

use super::*;

/// What to plan.
#[derive(Debug)]
pub enum Desired {
    /// The live cluster of this name, as it is.
    Live(String),
    /// The clusters of a manifest, against the live objects.
    File {
        /// The manifest.
        text: String,
        /// Its name, for messages.
        source: String,
    },
}

/// What was read for one cluster, ready to plan.
#[derive(Clone, Debug)]
pub struct Gathered {
    /// What the core gets, as the operator would gather it.
    pub observed: Observed,
    /// Where the desired spec comes from (`live` or the file name).
    pub source: String,
    /// Things the reader should know about how this plan was made.
    pub notes: Vec<String>,
}

/// Reads and plans every cluster `desired` names; `exact` refines each plan with server-side
/// dry-run applies ([`super::dry_run`]).
pub async fn fetch_and_plan(
    client: &Client,
    namespace: &str,
    desired: Desired,
    config: &OperatorConfig,
    exact: bool,
) -> anyhow::Result<Vec<PlanReport>> {
    let (clusters, source) = match desired {
        Desired::Live(name) => {
            let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), namespace);
            let cluster = crate::cli::get_cluster(
                &api,
                namespace,
                &name,
                "; use -n for another namespace, or `plan -f <file>` for a cluster not created yet",
            )
            .await?;
            (vec![cluster], "live".to_owned())
        }
        Desired::File { text, source } => (read_clusters(&text, &source)?, source),
    };
    let mut reports = Vec::new();
    for cluster in clusters {
        let gathered = gather(client, namespace, cluster, &source, config).await?;
        let mut planned = report(&gathered);
        if exact {
            super::dry_run::refine(client, &gathered, &mut planned).await;
        }
        reports.push(planned);
    }
    Ok(reports)
}

async fn gather(
    client: &Client,
    default_namespace: &str,
    mut wanted: DatabaseCluster,
    source: &str,
    config: &OperatorConfig,
) -> anyhow::Result<Gathered> {
    let namespace = wanted
        .namespace()
        .unwrap_or_else(|| default_namespace.to_owned());
    let name = wanted.name_any();
    wanted.metadata.namespace = Some(namespace.clone());
    let api: Api<DatabaseCluster> = Api::namespaced(client.clone(), &namespace);
    let live = api
        .get_opt(&name)
        .await
        .with_context(|| format!("reading DatabaseCluster {namespace}/{name}"))?;
    let mut notes = Vec::new();
    let exists = live.is_some();
    let cluster = match live {
        Some(mut live) => {
            if source != "live" && spec_differs(&live, &wanted) {
                // The API server bumps the generation with a new spec; the operator validates a
                // spec whose generation it has not observed.
                live.metadata.generation = Some(live.metadata.generation.unwrap_or(0) + 1);
                live.spec = wanted.spec;
            }
            live
        }
        None => {
            notes.push(format!(
                "{namespace}/{name} does not exist yet: every object would be created"
            ));
            wanted.metadata.generation = Some(1);
            wanted.status = None;
            wanted
        }
    };
    let uid = cluster.uid().unwrap_or_default();
    let owned = if uid.is_empty() {
        OwnedObjects::default()
    } else {
        owned_objects(client, &namespace, &name, &uid).await?
    };
    let pods: Vec<MemberPod> = if exists {
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let mut pods: Vec<MemberPod> = api
            .list(&ListParams::default().labels(&format!("{}={name}", labels::CLUSTER)))
            .await
            .with_context(|| format!("listing the pods of {namespace}/{name}"))?
            .items
            .iter()
            .map(MemberPod::from_pod)
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        pods
    } else {
        Vec::new()
    };
    let volumes = if exists {
        member_volumes(client, &namespace, &cluster, &mut notes).await
    } else {
        Vec::new()
    };
    let (secret, secret_unkeyed_fingerprint) =
        secret_state(client, &namespace, &cluster, &owned, &mut notes).await?;
    let operator_secret = operator_secret_state(client, &namespace, &name, &mut notes).await?;
    let tls = tls_state(client, &namespace, &cluster, &mut notes).await?;
    Ok(Gathered {
        observed: Observed {
            cluster,
            owned,
            pods,
            secret,
            secret_unkeyed_fingerprint,
            now: Timestamp::now(),
            config: config.clone(),
            known_matches: BTreeMap::new(),
            cleanup_job: None,
            backup_jobs: Vec::new(),
            // The plugin talks to no database: the plan is the operator's without member facts
            // (no failover step is planned from it).
            member_facts: BTreeMap::new(),
            operator_secret,
            password_outcome: None,
            primary_lease: None,
            volumes,
            tls,
        },
        source: source.to_owned(),
        notes,
    })
}

/// The members' data volume claims and whether their classes allow expansion, as the operator
/// reads them; a claim or class this user may not read is left out, and a note says so (no
/// volume growth is then planned for it).
async fn member_volumes(
    client: &Client,
    namespace: &str,
    cluster: &DatabaseCluster,
    notes: &mut Vec<String>,
) -> Vec<MemberVolume> {
    let name = cluster.name_any();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let classes: Api<StorageClass> = Api::all(client.clone());
    let mut volumes = Vec::new();
    for ordinal in 0..cluster.spec.replicas {
        let claim_name = database_operator_core::storage::claim_name(&name, ordinal);
        let claim = match claims.get_opt(&claim_name).await {
            Ok(Some(claim)) => claim,
            Ok(None) => continue,
            Err(e) => {
                notes.push(format!(
                    "could not read PersistentVolumeClaim {namespace}/{claim_name} ({e}): its growth is not planned here"
                ));
                continue;
            }
        };
        let class = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone());
        let expansion = match class {
            None => ClassExpansion::Unknown,
            Some(class) => match classes.get_opt(&class).await {
                Ok(found) => ClassExpansion::of(found.as_ref()),
                Err(e) => {
                    notes.push(format!("could not read StorageClass {class} ({e})"));
                    ClassExpansion::Unknown
                }
            },
        };
        volumes.push(MemberVolume::from_claim(&claim, expansion));
    }
    volumes
}

pub(super) fn spec_differs(live: &DatabaseCluster, wanted: &DatabaseCluster) -> bool {
    serde_json::to_value(&live.spec).ok() != serde_json::to_value(&wanted.spec).ok()
}

/// The cluster's password fingerprint key, from the operator Secret's `backup-signing-key`:
/// `Ok(Ok(None))` when a new cluster has no such Secret or key yet (the operator fingerprints
/// unkeyed then); `Ok(Err(why))` when the key cannot be known here: this user may not read the
/// Secret, or it is gone from a cluster that already records a password (the operator keeps
/// keying with the key it remembers).
async fn fingerprint_key(
    client: &Client,
    namespace: &str,
    cluster: &DatabaseCluster,
) -> anyhow::Result<Result<Option<SigningKey>, &'static str>> {
    let secret_name = credentials::operator_secret_name(&cluster.name_any());
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let recorded = cluster
        .status
        .as_ref()
        .and_then(|s| s.password.as_ref())
        .is_some_and(|p| p.fingerprint.is_some());
    match api.get_opt(&secret_name).await {
        Ok(None) if recorded => Ok(Err(
            "is missing (the operator keys the password's fingerprint with the key it remembers)",
        )),
        Ok(secret) => Ok(Ok(secret.and_then(|s| {
            let value = s.data?.remove(credentials::SIGNING_KEY_KEY)?;
            SigningKey::new(&value.0).ok()
        }))),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Ok(Err("is not readable with these credentials"))
        }
        Err(e) => Err(e).with_context(|| format!("reading Secret {namespace}/{secret_name}")),
    }
}

/// The password Secret as the operator sees it: its fingerprint computed by the operator's own
/// function, keyed with the cluster's key (and the unkeyed one beside it). A Secret this user
/// may not read, or a key it may not read, falls back to the fingerprint the status records
/// (a changed password is then not seen), and says so.
async fn secret_state(
    client: &Client,
    namespace: &str,
    cluster: &DatabaseCluster,
    owned: &OwnedObjects,
    notes: &mut Vec<String>,
) -> anyhow::Result<(SecretState, Option<String>)> {
    let reference = &cluster.spec.password_secret_ref;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    // `None`: not readable with these credentials.
    let secret = match api.get_opt(&reference.name).await {
        Ok(secret) => Some(secret),
        Err(kube::Error::Api(status)) if status.code == 403 => None,
        Err(e) => {
            return Err(e)
                .with_context(|| format!("reading Secret {namespace}/{}", reference.name));
        }
    };
    let key = match &secret {
        Some(Some(_)) => fingerprint_key(client, namespace, cluster).await?,
        _ => Ok(None),
    };
    match (secret, key) {
        (Some(Some(secret)), Ok(key)) => Ok(state_of_keyed(&secret, &reference.key, key.as_ref())),
        (Some(None), _) => Ok((SecretState::Missing, None)),
        (unreadable, why) => {
            let (which, why) = match why {
                Err(why) => (credentials::operator_secret_name(&cluster.name_any()), why),
                Ok(_) if unreadable.is_none() => (
                    reference.name.clone(),
                    "is not readable with these credentials",
                ),
                Ok(_) => (reference.name.clone(), "could not be read"),
            };
            // The password the database runs with, as the status records it (else the
            // annotation a StatefulSet of an earlier release carries).
            let live = cluster
                .status
                .as_ref()
                .and_then(|s| s.password.as_ref())
                .and_then(|p| p.fingerprint.clone())
                .or_else(|| {
                    owned
                        .stateful_set(&cluster.name_any())
                        .and_then(|s| s.spec.template.metadata.as_ref())
                        .and_then(|m| m.annotations.as_ref())
                        .and_then(|a| a.get(labels::PASSWORD_FINGERPRINT))
                        .cloned()
                });
            notes.push(format!(
                "Secret {namespace}/{which} {why}: the password is assumed unchanged (a new \
                 password would be applied inside the database, without restarting the pods)"
            ));
            Ok((
                SecretState::Present {
                    fingerprint: live.unwrap_or_else(|| {
                        database_operator_common::offline::PLACEHOLDER_FINGERPRINT.to_owned()
                    }),
                },
                None,
            ))
        }
    }
}

/// Whether the operator Secret `<name>-operator` exists and whom it names as owners (its
/// metadata only: the values are never read).
async fn operator_secret_state(
    client: &Client,
    namespace: &str,
    name: &str,
    notes: &mut Vec<String>,
) -> anyhow::Result<OperatorSecretState> {
    let secret_name = credentials::operator_secret_name(name);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_metadata_opt(&secret_name).await {
        Ok(Some(meta)) => Ok(OperatorSecretState::present(&meta.metadata)),
        Ok(None) => Ok(OperatorSecretState::Missing),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            notes.push(format!(
                "Secret {namespace}/{secret_name} is not readable with these credentials: it is \
                 assumed to exist"
            ));
            Ok(OperatorSecretState::Present {
                owner_uids: Vec::new(),
            })
        }
        Err(e) => Err(e).with_context(|| format!("reading Secret {namespace}/{secret_name}")),
    }
}

/// The cluster's TLS Secrets as the operator sees them (their annotations and owners). One that
/// cannot be read counts as missing (the notes say so).
async fn tls_state(
    client: &Client,
    namespace: &str,
    cluster: &DatabaseCluster,
    notes: &mut Vec<String>,
) -> anyhow::Result<database_operator_core::tls::TlsObserved> {
    use database_operator_core::tls;
    let name = cluster.name_any();
    let uid = cluster.uid().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut seen = Vec::new();
    for secret in [
        tls::ca_key_secret_name(&name),
        tls::server_secret_name(&name),
        tls::ca_secret_name(&name),
    ] {
        seen.push(match api.get_metadata_opt(&secret).await {
            Ok(meta) => meta.and_then(|m| tls::CertSighting::from_metadata(&m.metadata, &uid)),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                notes.push(format!(
                    "Secret {namespace}/{secret} is not readable with these credentials: the preview \
                     may show certificates being made that exist"
                ));
                None
            }
            Err(e) => return Err(e).with_context(|| format!("reading Secret {namespace}/{secret}")),
        });
    }
    let mut seen = seen.into_iter();
    let mut observed = tls::TlsObserved {
        ca: seen.next().flatten(),
        server: seen.next().flatten(),
        published: seen.next().flatten(),
        provided: None,
    };
    if let Some(secret) = database_operator_api::TlsSpec::provided_secret(cluster.spec.tls.as_ref())
    {
        let copied = observed
            .server
            .as_ref()
            .and_then(|s| s.source_version.clone());
        observed.provided = Some(match api.get_opt(secret).await {
            Ok(None) => tls::ProvidedCert::Missing,
            Ok(Some(found)) => {
                let version = found.metadata.resource_version.clone().unwrap_or_default();
                if copied.as_deref() == Some(version.as_str()) {
                    tls::ProvidedCert::Copied
                } else {
                    tls::ProvidedCert::New {
                        checked: database_operator_common::provided_cert::check(
                            &found,
                            std::time::SystemTime::now(),
                        ),
                        resource_version: version,
                    }
                }
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                notes.push(format!(
                    "Secret {namespace}/{secret} (spec.tls.certificateSecret) is not readable with these credentials: the preview assumes the copy the members use, if any, is current"
                ));
                match copied {
                    Some(_) => tls::ProvidedCert::Copied,
                    None => tls::ProvidedCert::New {
                        resource_version: String::new(),
                        checked: Err(
                            "it could not be read with the preview's credentials".to_owned()
                        ),
                    },
                }
            }
            Err(e) => {
                return Err(e).with_context(|| format!("reading Secret {namespace}/{secret}"));
            }
        });
    }
    Ok(observed)
}

type Insert = Box<dyn FnOnce(&mut OwnedObjects) + Send>;

/// Reads the objects of one kind by the names the core gives them.
pub(super) struct Fetch<'a> {
    client: &'a Client,
    namespace: &'a str,
    cluster: &'a str,
    uid: &'a str,
}

impl<'a> KindVisitor for Fetch<'a> {
    type Output = Pin<Box<dyn Future<Output = anyhow::Result<Insert>> + Send + 'a>>;

    fn visit<K: OwnedResource>(self) -> Self::Output {
        Box::pin(async move {
            let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
            let mut found = Vec::new();
            for name in K::names(self.cluster) {
                let object = api
                    .get_opt(&name)
                    .await
                    .with_context(|| format!("reading {} {}/{name}", K::KIND, self.namespace))?;
                if let Some(object) = object.filter(|o| {
                    o.owner_references()
                        .iter()
                        .any(|r| r.uid == self.uid && r.controller == Some(true))
                }) {
                    found.push(object);
                }
            }
            Ok(Box::new(move |owned: &mut OwnedObjects| *K::items_mut(owned) = found) as Insert)
        })
    }
}

async fn owned_objects(
    client: &Client,
    namespace: &str,
    cluster: &str,
    uid: &str,
) -> anyhow::Result<OwnedObjects> {
    let mut owned = OwnedObjects::default();
    for kind in OwnedKind::all() {
        let insert = kind
            .visit(Fetch {
                client,
                namespace,
                cluster,
                uid,
            })
            .await?;
        insert(&mut owned);
    }
    Ok(owned)
}
