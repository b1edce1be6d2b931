//! What the core reads of the members' data volumes (their PersistentVolumeClaims).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

/// Whether the StorageClass of a claim lets it grow, as the runtime found the class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClassExpansion {
    /// The class sets `allowVolumeExpansion: true`.
    Allowed,
    /// The class does not (the field is absent or false).
    NotAllowed,
    /// The claim names no class, or the class is not there (deleted, or not seen yet).
    #[default]
    Unknown,
}

impl ClassExpansion {
    /// What `class` allows (`None`: the class is not there).
    pub fn of(class: Option<&StorageClass>) -> Self {
        match class {
            None => ClassExpansion::Unknown,
            Some(c) if c.allow_volume_expansion == Some(true) => ClassExpansion::Allowed,
            Some(_) => ClassExpansion::NotAllowed,
        }
    }
}

/// A member's data volume claim `data-<cluster>-<ordinal>`, as far as the core reads it: the
/// contract between the runtime's claim cache and the core, built with
/// [`MemberVolume::from_claim`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberVolume {
    /// `metadata.name`.
    pub claim: String,
    /// `spec.resources.requests.storage`: what the claim asks for.
    pub requested: Option<String>,
    /// `status.capacity.storage`: what the bound volume has (the storage provider and the
    /// kubelet grow it after the request grows).
    pub capacity: Option<String>,
    /// `spec.storageClassName`.
    pub storage_class: Option<String>,
    /// Whether that class allows expansion.
    pub expansion: ClassExpansion,
    /// The claim's condition `FileSystemResizePending` is True: the volume grew, its file system
    /// grows when the kubelet next handles the mounted volume.
    pub file_system_pending: bool,
    /// Why growing the volume failed, when the claim says so: the message of a condition
    /// `ControllerResizeError` or `NodeResizeError` that is True, or an infeasible
    /// `status.allocatedResourceStatuses.storage` (`ControllerResizeInfeasible`,
    /// `NodeResizeInfeasible`).
    pub resize_error: Option<String>,
}

impl MemberVolume {
    /// What the core reads of `claim`, with its class's `expansion`.
    pub fn from_claim(claim: &PersistentVolumeClaim, expansion: ClassExpansion) -> Self {
        let spec = claim.spec.as_ref();
        let status = claim.status.as_ref();
        let conditions = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let is_true = |type_: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "True")
        };
        let infeasible = status
            .and_then(|s| s.allocated_resource_statuses.as_ref())
            .and_then(|s| s.get("storage"))
            .filter(|s| s.ends_with("Infeasible"))
            .map(|s| format!("the claim reports {s}"));
        let resize_error = ["ControllerResizeError", "NodeResizeError"]
            .into_iter()
            .find_map(is_true)
            .map(|c| {
                let message = c.message.as_deref().unwrap_or_default();
                format!("{}: {message}", c.type_)
            })
            .or(infeasible);
        Self {
            claim: claim.metadata.name.clone().unwrap_or_default(),
            requested: spec
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.clone()),
            capacity: status
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage"))
                .map(|q| q.0.clone()),
            storage_class: spec.and_then(|s| s.storage_class_name.clone()),
            expansion,
            file_system_pending: is_true("FileSystemResizePending").is_some(),
            resize_error,
        }
    }
}
