//! The kinds of objects a cluster owns, in one place.
//!
//! Every owned kind is one line of `owned_kinds!` (in `owned.rs`) (which gives it a variant of [`OwnedKind`]
//! and of [`DesiredObject`] and a list in [`OwnedObjects`]) and one `impl` of
//! [`OwnedResource`] (the names its objects take, where it comes in the apply order). Code that
//! handles objects of every kind (the comparison, the runtime's watches, caches, applies and
//! deletes) is generic over [`OwnedResource`] and reaches the concrete type through
//! [`DesiredObject::visit`] or [`OwnedKind::visit`], so a new kind touches no `match`.

use std::fmt::Debug;

use database_operator_api::rules;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A kind of object a cluster owns: its names and its place in the apply order. The rest
/// ([`OwnedItems`]) is written by the kind's line in `owned_kinds!` (in `owned.rs`).
pub trait OwnedResource:
    OwnedItems
    + k8s_openapi::Resource<Scope = k8s_openapi::NamespaceResourceScope>
    + k8s_openapi::ListableResource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + PartialEq
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Position in the apply order: configuration before the pods that mount it, the governing
    /// Service before the StatefulSet that names it. Objects are written in this order within
    /// their [`ApplyWave`].
    const APPLY_ORDER: u8;

    /// When, in a pass, objects of this kind are written relative to the members' StatefulSet.
    const WAVE: ApplyWave;

    /// Names the objects of this kind take for the cluster called `cluster`, in apply order.
    fn names(cluster: &str) -> Vec<String>;

    /// Data of the object that is the same for many clusters (the files of a ConfigMap), for
    /// callers that keep one copy of it; `None` for kinds without such data.
    fn shared_data_mut(
        &mut self,
    ) -> Option<&mut Option<std::collections::BTreeMap<String, String>>> {
        None
    }

    /// Whether another writer changes fields of these objects on its own schedule that the
    /// operator never sets (a Lease's renewals): such changes are no reason for a pass.
    const VOLATILE: bool = false;

    /// Clears those fields ([`OwnedResource::VOLATILE`]), so that caches neither hold them
    /// nor see a change when only they moved.
    fn clear_volatile(&mut self) {}
}

/// When objects of a kind are written in a pass, relative to the StatefulSet, which gates the
/// members' (ordered) start: what the members read first, then the StatefulSet, then the rest.
/// Objects of one wave do not depend on each other and may be written concurrently; a wave
/// starts when the one before it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApplyWave {
    /// What the members' pods read when they start (their configuration).
    BeforeMembers,
    /// The StatefulSet.
    Members,
    /// Everything that does not gate a member's start (Services, the disruption budget, the
    /// backup CronJob).
    AfterMembers,
}

impl ApplyWave {
    /// Every wave, in the order they are written.
    pub const ALL: [ApplyWave; 3] = [
        ApplyWave::BeforeMembers,
        ApplyWave::Members,
        ApplyWave::AfterMembers,
    ];
}

/// Where an owned kind's objects are: written for each kind by `owned_kinds!` (in `owned.rs`).
pub trait OwnedItems: Sized {
    /// The kind.
    const OWNED_KIND: OwnedKind;
    /// The observed objects of this kind.
    fn items(owned: &OwnedObjects) -> &[Self];
    /// The observed objects of this kind, to change.
    fn items_mut(owned: &mut OwnedObjects) -> &mut Vec<Self>;
    /// `self` as a desired object.
    fn into_desired(self) -> DesiredObject;
}

/// Something done with an object of any owned kind ([`DesiredObject::visit`]).
pub trait ObjectVisitor<'o> {
    /// The result.
    type Output;
    /// Does it with `object`.
    fn visit<K: OwnedResource>(self, object: &'o K) -> Self::Output;
}

/// Something done for an owned kind ([`OwnedKind::visit`]).
pub trait KindVisitor {
    /// The result.
    type Output;
    /// Does it for `K`.
    fn visit<K: OwnedResource>(self) -> Self::Output;
}

/// Declares the owned kinds: `Variant(Type) in field, "doc";` each.
macro_rules! owned_kinds {
    ($($kind:ident($ty:ty) in $field:ident, $doc:literal;)+) => {
        /// Kinds of objects a cluster owns.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OwnedKind {
            $(#[doc = $doc] $kind,)+
        }

        impl OwnedKind {
            const DECLARED: &[OwnedKind] = &[$(OwnedKind::$kind,)+];

            /// The Kubernetes kind name.
            pub const fn as_str(&self) -> &'static str {
                match self {
                    $(OwnedKind::$kind => <$ty as k8s_openapi::Resource>::KIND,)+
                }
            }

            /// Calls `visitor` with the type of this kind.
            pub fn visit<V: KindVisitor>(self, visitor: V) -> V::Output {
                match self {
                    $(OwnedKind::$kind => visitor.visit::<$ty>(),)+
                }
            }
        }

        /// The objects a cluster owns, as last observed (absent ones are simply not there).
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct OwnedObjects {
            $(#[doc = $doc] pub $field: Vec<$ty>,)+
        }

        /// One object the cluster should have, complete, with owner reference and labels. It
        /// serializes as the object itself.
        #[derive(Clone, Debug, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum DesiredObject {
            $(#[doc = $doc] $kind(Box<$ty>),)+
        }

        impl DesiredObject {
            /// Calls `visitor` with the typed object.
            pub fn visit<'o, V: ObjectVisitor<'o>>(&'o self, visitor: V) -> V::Output {
                match self {
                    $(DesiredObject::$kind(o) => visitor.visit(o.as_ref()),)+
                }
            }
        }

        $(
            impl OwnedItems for $ty {
                const OWNED_KIND: OwnedKind = OwnedKind::$kind;
                fn items(owned: &OwnedObjects) -> &[Self] {
                    &owned.$field
                }
                fn items_mut(owned: &mut OwnedObjects) -> &mut Vec<Self> {
                    &mut owned.$field
                }
                fn into_desired(self) -> DesiredObject {
                    DesiredObject::$kind(Box::new(self))
                }
            }
        )+
    };
}

owned_kinds! {
    StatefulSet(StatefulSet) in stateful_sets, "`apps/v1` StatefulSet: the members.";
    Service(Service) in services, "`v1` Service: read-write, read-only and headless.";
    ConfigMap(ConfigMap) in config_maps, "`v1` ConfigMap: engine configuration and scripts.";
    CronJob(CronJob) in cron_jobs, "`batch/v1` CronJob: scheduled backups and restore drills.";
    PodDisruptionBudget(PodDisruptionBudget) in pod_disruption_budgets, "`policy/v1` PodDisruptionBudget.";
    ServiceAccount(ServiceAccount) in service_accounts, "`v1` ServiceAccount of the member agents (`spec.failover.nodeLoss: SelfFence`).";
    Role(Role) in roles, "`rbac.authorization.k8s.io/v1` Role: the member agents may read and renew the primary Lease.";
    RoleBinding(RoleBinding) in role_bindings, "`rbac.authorization.k8s.io/v1` RoleBinding of that Role to the agents' ServiceAccount.";
    Lease(Lease) in leases, "`coordination.k8s.io/v1` Lease `<cluster>-primary`, renewed by the primary's member agent.";
    NetworkPolicy(NetworkPolicy) in network_policies, "`networking.k8s.io/v1` NetworkPolicy: who may reach the database port.";
}

impl OwnedResource for ConfigMap {
    const APPLY_ORDER: u8 = 0;
    const WAVE: ApplyWave = ApplyWave::BeforeMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![[cluster, "-config"].concat()]
    }
    fn shared_data_mut(
        &mut self,
    ) -> Option<&mut Option<std::collections::BTreeMap<String, String>>> {
        Some(&mut self.data)
    }
}

impl OwnedResource for Service {
    const APPLY_ORDER: u8 = 1;
    const WAVE: ApplyWave = ApplyWave::AfterMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![
            [cluster, rules::HEADLESS_SERVICE_SUFFIX].concat(),
            cluster.to_owned(),
            [cluster, rules::REPLICAS_SERVICE_SUFFIX].concat(),
        ]
    }
}

impl OwnedResource for StatefulSet {
    const APPLY_ORDER: u8 = 2;
    const WAVE: ApplyWave = ApplyWave::Members;
    fn names(cluster: &str) -> Vec<String> {
        vec![cluster.to_owned()]
    }
}

impl OwnedResource for PodDisruptionBudget {
    const APPLY_ORDER: u8 = 3;
    const WAVE: ApplyWave = ApplyWave::AfterMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![cluster.to_owned()]
    }
}

/// Suffix of the restore drill CronJob's name: `<cluster>-verify` (the backup CronJob is
/// `<cluster>-backup`).
pub const VERIFY_CRON_JOB_SUFFIX: &str = "-verify";

impl OwnedResource for CronJob {
    const APPLY_ORDER: u8 = 4;
    const WAVE: ApplyWave = ApplyWave::AfterMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![
            [cluster, "-backup"].concat(),
            [cluster, VERIFY_CRON_JOB_SUFFIX].concat(),
        ]
    }
}

/// Name of the member agents' ServiceAccount, Role and RoleBinding: `<cluster>-member`.
pub const MEMBER_ACCESS_SUFFIX: &str = "-member";

/// Name of the primary Lease: `<cluster>-primary`.
pub const PRIMARY_LEASE_SUFFIX: &str = "-primary";

impl OwnedResource for ServiceAccount {
    const APPLY_ORDER: u8 = 5;
    const WAVE: ApplyWave = ApplyWave::BeforeMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![[cluster, MEMBER_ACCESS_SUFFIX].concat()]
    }
}

impl OwnedResource for Role {
    const APPLY_ORDER: u8 = 6;
    const WAVE: ApplyWave = ApplyWave::BeforeMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![[cluster, MEMBER_ACCESS_SUFFIX].concat()]
    }
}

impl OwnedResource for RoleBinding {
    const APPLY_ORDER: u8 = 7;
    const WAVE: ApplyWave = ApplyWave::BeforeMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![[cluster, MEMBER_ACCESS_SUFFIX].concat()]
    }
}

impl OwnedResource for Lease {
    const APPLY_ORDER: u8 = 8;
    const WAVE: ApplyWave = ApplyWave::BeforeMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![[cluster, PRIMARY_LEASE_SUFFIX].concat()]
    }
    const VOLATILE: bool = true;
    fn clear_volatile(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.renew_time = None;
            spec.acquire_time = None;
            spec.lease_transitions = None;
        }
    }
}

/// Suffix of the NetworkPolicy's name, `<cluster>-access`: namespaces often hold NetworkPolicies
/// of their own named after an application, and the operator never takes over another's object.
pub const NETWORK_POLICY_SUFFIX: &str = "-access";

impl OwnedResource for NetworkPolicy {
    // Before the members: a new cluster's pods never start without it.
    const APPLY_ORDER: u8 = 9;
    const WAVE: ApplyWave = ApplyWave::BeforeMembers;
    fn names(cluster: &str) -> Vec<String> {
        vec![[cluster, NETWORK_POLICY_SUFFIX].concat()]
    }
}

impl OwnedKind {
    /// Every kind, in the order objects are applied.
    pub fn all() -> Vec<OwnedKind> {
        struct Order;
        impl KindVisitor for Order {
            type Output = u8;
            fn visit<K: OwnedResource>(self) -> u8 {
                K::APPLY_ORDER
            }
        }
        let mut kinds = Self::DECLARED.to_vec();
        kinds.sort_by_key(|k| k.visit(Order));
        kinds
    }

    /// Names the objects of this kind take for the cluster called `cluster`.
    pub fn names(self, cluster: &str) -> Vec<String> {
        struct Names<'a>(&'a str);
        impl KindVisitor for Names<'_> {
            type Output = Vec<String>;
            fn visit<K: OwnedResource>(self) -> Vec<String> {
                K::names(self.0)
            }
        }
        self.visit(Names(cluster))
    }

    /// When objects of this kind are written in a pass ([`OwnedResource::WAVE`]).
    pub fn wave(self) -> ApplyWave {
        struct Wave;
        impl KindVisitor for Wave {
            type Output = ApplyWave;
            fn visit<K: OwnedResource>(self) -> ApplyWave {
                K::WAVE
            }
        }
        self.visit(Wave)
    }

    /// The resource's plural, as in its URL path (`statefulsets`, ...).
    pub fn plural(self) -> &'static str {
        struct Plural;
        impl KindVisitor for Plural {
            type Output = &'static str;
            fn visit<K: OwnedResource>(self) -> &'static str {
                K::URL_PATH_SEGMENT
            }
        }
        self.visit(Plural)
    }
}

/// Kind and name of every object the cluster called `name` can own, in apply order: what the
/// renderers produce, and so everything a plan may create, update or delete. The runtime looks
/// owned objects up by these names rather than scanning its caches.
pub fn owned_object_keys(name: &str) -> Vec<ObjectKey> {
    OwnedKind::all()
        .into_iter()
        .flat_map(|kind| {
            kind.names(name)
                .into_iter()
                .map(move |name| ObjectKey { kind, name })
        })
        .collect()
}

impl OwnedObjects {
    /// `metadata.resourceVersion` of the observed object with `key`, when there is one.
    pub fn resource_version(&self, key: &ObjectKey) -> Option<&str> {
        self.find(key).and_then(|m| m.resource_version.as_deref())
    }

    /// Metadata of the observed object with `key`, when there is one.
    pub fn find(&self, key: &ObjectKey) -> Option<&ObjectMeta> {
        struct Find<'a, 'k>(&'a OwnedObjects, &'k str);
        impl<'a> KindVisitor for Find<'a, '_> {
            type Output = Option<&'a ObjectMeta>;
            fn visit<K: OwnedResource>(self) -> Self::Output {
                K::items(self.0)
                    .iter()
                    .map(k8s_openapi::Metadata::metadata)
                    .find(|m| m.name.as_deref() == Some(self.1))
            }
        }
        key.kind.visit(Find(self, &key.name))
    }

    /// The observed object of type `K` called `name`.
    pub fn get<K: OwnedResource>(&self, name: &str) -> Option<&K> {
        K::items(self)
            .iter()
            .find(|o| o.metadata().name.as_deref() == Some(name))
    }

    /// The StatefulSet called `name`, when observed.
    pub fn stateful_set(&self, name: &str) -> Option<&StatefulSet> {
        self.get(name)
    }

    /// Key and metadata of every observed object, in kind then name order.
    pub fn keys(&self) -> Vec<(ObjectKey, &ObjectMeta)> {
        struct Keys<'a>(&'a OwnedObjects, Vec<(ObjectKey, &'a ObjectMeta)>);
        impl<'a> KindVisitor for &mut Keys<'a> {
            type Output = ();
            fn visit<K: OwnedResource>(self) {
                for item in K::items(self.0) {
                    let meta = item.metadata();
                    let name = meta.name.clone().unwrap_or_default();
                    self.1.push((
                        ObjectKey {
                            kind: K::OWNED_KIND,
                            name,
                        },
                        meta,
                    ));
                }
            }
        }
        let mut keys = Keys(self, Vec::new());
        for kind in OwnedKind::DECLARED {
            kind.visit(&mut keys);
        }
        let mut out = keys.1;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

impl DesiredObject {
    /// Kind and name of the object.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind(),
            name: self.metadata().name.clone().unwrap_or_default(),
        }
    }

    /// Kind of the object.
    pub fn kind(&self) -> OwnedKind {
        struct Kind;
        impl ObjectVisitor<'_> for Kind {
            type Output = OwnedKind;
            fn visit<K: OwnedResource>(self, _: &K) -> OwnedKind {
                K::OWNED_KIND
            }
        }
        self.visit(Kind)
    }

    /// Metadata of the object.
    pub fn metadata(&self) -> &ObjectMeta {
        struct Meta;
        impl<'o> ObjectVisitor<'o> for Meta {
            type Output = &'o ObjectMeta;
            fn visit<K: OwnedResource>(self, object: &'o K) -> &'o ObjectMeta {
                object.metadata()
            }
        }
        self.visit(Meta)
    }

    /// The object as JSON, as it is sent to the API server (with `apiVersion` and `kind`).
    pub fn to_value(&self) -> serde_json::Value {
        // Serializing these generated types cannot fail: every map has string keys.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// A namespaced object of a known kind, by name (in the cluster's namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Kind of the object.
    pub kind: OwnedKind,
    /// Name of the object.
    pub name: String,
}
