//! `kubectl dbc plan`: what the operator would do with a cluster, without doing it.
//!
//! [`fetch_and_plan`] reads what the operator's reconcile reads (IO, reads only): the cluster,
//! the objects it owns looked up by the names the core gives them and kept when the cluster is
//! their controller (as the operator's caches do), the pods labelled with the cluster, and the
//! password Secret's fingerprint computed by the operator's own function. [`report`] then runs
//! the same [`database_operator_core::plan()`] the operator runs and compares each desired
//! object with the live one (pure, snapshot-tested); [`dry_run`] makes the comparison exact with
//! server-side dry-run applies (what the API server would store); [`render_all`] prints it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use anyhow::Context as _;
use database_operator_api::DatabaseCluster;
use database_operator_common::fingerprint::state_of_keyed;
use database_operator_common::offline::read_clusters;
use database_operator_core::backup::signature::SigningKey;
use database_operator_core::credentials::{self, OperatorSecretState, SecretChange};
use database_operator_core::diff::is_subset;
use database_operator_core::render::labels;
use database_operator_core::{
    Change, ClassExpansion, EventType, KindVisitor, MemberPod, MemberVolume, Observed,
    OperatorConfig, OwnedKind, OwnedObjects, OwnedResource, PodAction, SecretState,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use crate::term::{Colour, Style, WIDTH, truncate};

mod diff;
mod dry_run;
mod gather;
mod planning;
mod render;

pub use diff::{FieldDiff, ObjectPlan, PlanReport, differences};
pub use gather::{Desired, Gathered, fetch_and_plan};
pub use planning::report;
pub use render::render_all;

use diff::{ordinal, restart_reasons};
#[cfg(test)]
use gather::spec_differs;

#[cfg(test)]
mod tests;
