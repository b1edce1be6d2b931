//! The object writes of a pass, in waves: what the members read when they start (with the
//! finalizer and the operator Secret), then the StatefulSet, then everything else. The writes of
//! one wave do not depend on each other and go out together, at most
//! [`WRITES_IN_FLIGHT`] at a time; a wave starts when the one before it is written.
//!
//! Why: the StatefulSet gates the members' start, and written fifth of eight one after another
//! it came about 0.3 s (and under a burst of new clusters, seconds of queueing) later than
//! needed. Now a new cluster's StatefulSet goes out after one round trip.

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::SecretChange;
use database_operator_core::{ApplyWave, DesiredObject, FinalizerChange, ObjectKey, Plan};
use k8s_openapi::api::batch::v1::Job;

use crate::echo::Target;
use crate::error::Error;
use crate::io::{ClusterIo, Version};

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

async fn apply_one<I: ClusterIo>(
    io: &I,
    namespace: &str,
    object: &DesiredObject,
) -> Result<Written, Error> {
    let version = io.apply(namespace, object).await?;
    Ok((Target::Owned(object.key()), version))
}

async fn apply_all<I: ClusterIo>(
    io: &I,
    namespace: &str,
    objects: Vec<&DesiredObject>,
) -> Result<Vec<Written>, Error> {
    bounded(
        objects
            .into_iter()
            .map(|o| apply_one(io, namespace, o))
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

async fn secret_steps<I: ClusterIo>(
    io: &I,
    namespace: &str,
    steps: &[SecretChange],
) -> Result<Vec<Written>, Error> {
    let mut written = Vec::new();
    for step in steps {
        match step {
            SecretChange::Create(metadata) => {
                let secret = crate::credentials::with_generated_values(metadata)?;
                let version = io.create_secret(namespace, &secret).await?;
                let name = secret.metadata.name.clone().unwrap_or_default();
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

async fn add_finalizer<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    step: FinalizerChange,
) -> Result<Vec<Written>, Error> {
    if step != FinalizerChange::Add {
        return Ok(Vec::new());
    }
    Ok(vec![(Target::Cluster, io.add_finalizer(cluster).await?)])
}

/// Writes the plan's objects, the finalizer it adds, its operator Secret steps, its deletions
/// and its on-demand backup Jobs, in three waves (see the module). Returns every write made,
/// in the order the waves made them; the first error (after the rest of its wave finished).
pub async fn write_objects<I: ClusterIo>(
    io: &I,
    cluster: &DatabaseCluster,
    namespace: &str,
    plan: &Plan,
) -> Result<Vec<Written>, Error> {
    let mut written = Vec::new();
    // Wave 1: the finalizer (before a deletion could need it), the operator Secret and the
    // configuration the members read when they start.
    let (finalizer, secrets, before) = futures::join!(
        add_finalizer(io, cluster, plan.finalizer),
        secret_steps(io, namespace, &plan.secret_steps),
        apply_all(
            io,
            namespace,
            plan.changed_objects_in(ApplyWave::BeforeMembers)
        ),
    );
    written.extend(finalizer?);
    written.extend(secrets?);
    written.extend(before?);
    // Wave 2: the members.
    written.extend(apply_all(io, namespace, plan.changed_objects_in(ApplyWave::Members)).await?);
    // Wave 3: the rest, the deletions, and on-demand backups (before the status that records
    // their request: a pass repeated after a failed status write creates the same Job again,
    // which is harmless).
    let (after, deleted, jobs) = futures::join!(
        apply_all(
            io,
            namespace,
            plan.changed_objects_in(ApplyWave::AfterMembers)
        ),
        delete_all(io, namespace, &plan.delete),
        create_jobs(io, namespace, &plan.backup_jobs),
    );
    written.extend(after?);
    written.extend(deleted?);
    written.extend(jobs?);
    Ok(written)
}
