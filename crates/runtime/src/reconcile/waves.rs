//! The object writes of one stage of a plan's flow ([`Writes`]; the core's [`Plan::flow`] puts
//! them in three waves: what the members read when they start, with the finalizer and the
//! operator Secret, then the StatefulSet, then everything else). The writes of one stage do not
//! depend on each other and go out together, at most [`WRITES_IN_FLIGHT`] at a time; a stage
//! starts when the one before it is written.
//!
//! [`Plan::flow`]: database_operator_core::Plan::flow
//!
//! Why: the StatefulSet gates the members' start, and written fifth of eight one after another
//! it came about 0.3 s (and under a burst of new clusters, seconds of queueing) later than
//! needed. Now a new cluster's StatefulSet goes out after one round trip.

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::SecretChange;
use database_operator_core::{DesiredObject, ObjectKey, Writes};
use k8s_openapi::api::batch::v1::Job;

use crate::echo::Target;
use crate::error::Error;
use crate::io::{ClusterIo, Version};
use crate::members::Remembered;

/// Writes of one wave in flight at once, per reconcile (a new cluster's largest wave, the
/// Services, the disruption budget and the CronJob, is five): times `--concurrency` reconciles,
/// the most the operator asks of the API server at once during a burst of new clusters.
pub const WRITES_IN_FLIGHT: usize = 5;

/// A write made, and the version it left (for [`crate::echo`]).
pub type Written = (Target, Version);

/// Runs `writes` at most [`WRITES_IN_FLIGHT`] at a time; every write of a chunk finishes
/// before the first error is returned.
async fn bounded<F>(writes: Vec<F>) -> Result<Vec<Written>, Error>
where
    F: std::future::Future<Output = Result<Written, Error>>,
{
    let mut done = Vec::with_capacity(writes.len());
    let mut writes = writes.into_iter().peekable();
    while writes.peek().is_some() {
        let chunk: Vec<F> = writes.by_ref().take(WRITES_IN_FLIGHT).collect();
        for result in futures::future::join_all(chunk).await {
            done.push(result?);
        }
    }
    Ok(done)
}

/// How an object is written: [`ClusterIo::create`] for one the watches do not show (never over
/// another owner's object), [`ClusterIo::apply`] for one they show as the cluster's.
#[derive(Clone, Copy)]
enum Write {
    Create,
    Apply,
}

async fn write_one<I: ClusterIo>(
    io: &I,
    namespace: &str,
    object: &DesiredObject,
    how: Write,
) -> Result<Written, Error> {
    let version = match how {
        Write::Create => io.create(namespace, object).await?,
        Write::Apply => io.apply(namespace, object).await?,
    };
    Ok((Target::Owned(object.key()), version))
}

async fn write_all<I: ClusterIo>(
    io: &I,
    namespace: &str,
    objects: &[&DesiredObject],
    how: Write,
) -> Result<Vec<Written>, Error> {
    bounded(
        objects
            .iter()
            .map(|o| write_one(io, namespace, o, how))
            .collect(),
    )
    .await
}

async fn delete_one<I: ClusterIo>(
    io: &I,
    namespace: &str,
    key: &ObjectKey,
) -> Result<Written, Error> {
    io.delete(namespace, key).await?;
    Ok((Target::Owned(key.clone()), None))
}

async fn delete_all<I: ClusterIo>(
    io: &I,
    namespace: &str,
    keys: &[ObjectKey],
) -> Result<Vec<Written>, Error> {
    bounded(keys.iter().map(|k| delete_one(io, namespace, k)).collect()).await
}

async fn create_job<I: ClusterIo>(io: &I, namespace: &str, job: &Job) -> Result<Written, Error> {
    let version = io.create_job(namespace, job).await?;
    let name = job.metadata.name.clone().unwrap_or_default();
    Ok((Target::Job(name), version))
}

async fn create_jobs<I: ClusterIo>(
    io: &I,
    namespace: &str,
    jobs: &[Job],
) -> Result<Vec<Written>, Error> {
    bounded(jobs.iter().map(|j| create_job(io, namespace, j)).collect()).await
}

async fn secret_changes<I: ClusterIo>(
    io: &I,
    namespace: &str,
    changes: &[SecretChange],
    remembered: Option<&Remembered>,
) -> Result<Vec<Written>, Error> {
    let mut written = Vec::new();
    for change in changes {
        match change {
            SecretChange::Create(metadata) => {
                let secret = crate::credentials::with_generated_values(metadata)?;
                let version = io.create_secret(namespace, &secret).await?;
                let name = secret.metadata.name.clone().unwrap_or_default();
                written.push((Target::Secret(name), version));
            }
            SecretChange::Restore(metadata) => {
                let name = metadata.metadata.name.clone().unwrap_or_default();
                // Never generated values: the servers know these and no others.
                let remembered = remembered.ok_or_else(|| Error::NothingToRestore {
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                })?;
                let secret = crate::credentials::with_values(metadata, remembered.data.clone());
                let version = io.create_secret(namespace, &secret).await?;
                tracing::warn!(
                    secret = %name,
                    "the operator Secret was deleted: created again with the values last read"
                );
                written.push((Target::Secret(name), version));
            }
            SecretChange::Release { name, owner_uid } => {
                let version = io.release_secret(namespace, name, owner_uid).await?;
                written.push((Target::Secret(name.clone()), version));
            }
        }
    }
    Ok(written)
}

async fn tls_change<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    namespace: &str,
    change: Option<&database_operator_core::tls::TlsChange>,
) -> Result<Vec<Written>, Error> {
    let Some(change) = change else {
        return Ok(Vec::new());
    };
    use kube::ResourceExt as _;
    crate::tls_issuer::carry_out(
        io,
        namespace,
        &cluster.name_any(),
        change,
        std::time::SystemTime::now(),
    )
    .await
}

async fn add_finalizer<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    add: bool,
) -> Result<Vec<Written>, Error> {
    if !add {
        return Ok(Vec::new());
    }
    Ok(vec![(Target::Cluster, io.add_finalizer(cluster).await?)])
}

/// Makes the writes of one stage of the plan's flow ([`Writes`]) together: the finalizer it
/// adds, its operator Secret changes, its applies, its deletions and its on-demand backup Jobs.
/// Returns every write made, in that order; the first error (after the rest of the stage
/// finished). `remembered`: the operator Secret as last read, for a
/// [`SecretChange::Restore`].
pub async fn write<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    namespace: &str,
    writes: &Writes<'_>,
    remembered: Option<&Remembered>,
) -> Result<Vec<Written>, Error> {
    let (finalizer, secrets, tls, created, applied, deleted, jobs) = futures::join!(
        add_finalizer(io, cluster, writes.add_finalizer),
        secret_changes(io, namespace, writes.secret_changes, remembered),
        tls_change(io, cluster, namespace, writes.tls_change),
        write_all(io, namespace, &writes.create, Write::Create),
        write_all(io, namespace, &writes.apply, Write::Apply),
        delete_all(io, namespace, writes.delete),
        create_jobs(io, namespace, writes.backup_jobs),
    );
    let mut written = finalizer?;
    written.extend(secrets?);
    written.extend(tls?);
    written.extend(created?);
    written.extend(applied?);
    written.extend(deleted?);
    written.extend(jobs?);
    Ok(written)
}
