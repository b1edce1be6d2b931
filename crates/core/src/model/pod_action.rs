//! Actions on a member's pod and its volume claim besides applying objects.

use super::*;

/// An action on a pod besides applying objects, in order: its labels, and the size of its data
/// volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodAction {
    /// Set the `database.example.com/role` label of a pod (the read-write Service follows it).
    LabelPod {
        /// Pod name.
        pod: String,
        /// Its role from now on.
        role: MemberRole,
    },
    /// Set (`Some(token)`) or remove the [`crate::render::labels::RESEED`] label of a pod: its
    /// init container discards the data directory and copies the primary again, once per
    /// token ([`database_operator_api::Reseed::token`]). Comes before the pod's role label, so
    /// that a new pod's init container, which waits for its role, sees both.
    SetReseed {
        /// Pod name.
        pod: String,
        /// The request's token, or `None` to take the label off.
        token: Option<String>,
    },
    /// Set (`allowed`) or remove the [`crate::render::labels::INITIALIZE`] label of a pod: whether
    /// its init container may create a new database on an empty volume
    /// ([`crate::members::initialize_labels`]).
    SetInitialize {
        /// Pod name.
        pod: String,
        /// Set it (`allowed`) or take it off.
        allowed: bool,
    },
    /// Raise the storage request of a member's data volume claim to `size`
    /// ([`crate::storage`]): the storage provider grows the volume and the kubelet its file
    /// system, with the server running. Only ever planned to grow a claim whose StorageClass
    /// allows it.
    ExpandVolume {
        /// The claim (`data-<cluster>-<ordinal>`).
        claim: String,
        /// The new request, `spec.storage.size` as written.
        size: String,
    },
}
