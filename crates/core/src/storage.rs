//! Growing the members' volumes when `spec.storage.size` grows.
//!
//! The StatefulSet's volume claim template cannot change, so the operator grows each member's
//! claim `data-<cluster>-<ordinal>` itself: a larger `spec.resources.requests.storage`, after
//! which the storage provider grows the volume and the kubelet its file system, with the server
//! running (no restart, no switchover). Only a claim whose StorageClass allows expansion is
//! asked; a claim is never asked for less than it has (volumes never shrink: admission refuses a
//! smaller `spec.storage.size`, and a claim already larger than the spec is left as it is).
//! Members added later are created from the template at the size the StatefulSet was created
//! with, and grown here right after.
//!
//! The condition `StorageResized` tells where that stands, once the spec asked for more than a
//! volume had: `Resizing`, `FileSystemResizePending`, `ExpansionNotSupported` (naming the
//! class), `ResizeFailed` (quoting the claim), and True `Resized`. Events: `StorageExpanding`
//! when requests are raised, Warning `StorageResizeNotApplied` when the volumes cannot follow,
//! `StorageResized` when they all did.

use database_operator_api::conditions::{self, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::render::{RenderContext, quantity, statefulset};
use crate::{ClassExpansion, EventReason, EventType, MemberVolume, PlannedEvent, PodAction};

/// The data volume claim of member `ordinal` of `cluster`: `data-<cluster>-<ordinal>`, as the
/// StatefulSet names it.
pub fn claim_name(cluster: &str, ordinal: i32) -> String {
    format!("{}-{cluster}-{ordinal}", statefulset::DATA_VOLUME)
}

/// What one pass decided about the volumes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Claims whose request grows now ([`PodAction::ExpandVolume`]).
    pub actions: Vec<PodAction>,
    /// The `StorageResized` condition as (status, reason, message); `None`: nothing to say
    /// (no volume ever lagged the spec), the condition stays as it was.
    pub condition: Option<(bool, &'static str, String)>,
    /// Events of this pass.
    pub events: Vec<PlannedEvent>,
}

/// Where one claim stands against the size the spec asks for.
enum Standing<'a> {
    /// Its volume has at least the size.
    Done,
    /// It asks for less and its class allows growing it: ask.
    Expand,
    /// It asks for less and cannot grow: why.
    Blocked(String),
    /// It asks for enough, its volume is still smaller.
    Growing { file_system: bool },
    /// Growing it failed: the claim's words.
    Failed(&'a str),
    /// It asks for less and is not bound yet (a member just added): grown once it is.
    Unbound,
}

fn standing(volume: &MemberVolume, want: i128) -> Standing<'_> {
    let bytes = |q: Option<&String>| q.and_then(|q| quantity::value(q));
    let requested = bytes(volume.requested.as_ref()).unwrap_or(0);
    let Some(capacity) = bytes(volume.capacity.as_ref()) else {
        // Not bound yet: its request cannot change before it is (the API refuses it).
        return if requested >= want {
            Standing::Done
        } else {
            Standing::Unbound
        };
    };
    if capacity >= want {
        return Standing::Done;
    }
    if let Some(error) = &volume.resize_error {
        return Standing::Failed(error);
    }
    if requested >= want {
        return Standing::Growing {
            file_system: volume.file_system_pending,
        };
    }
    match (volume.expansion, volume.storage_class.as_deref()) {
        (ClassExpansion::Allowed, _) => Standing::Expand,
        (ClassExpansion::NotAllowed, Some(class)) => Standing::Blocked(format!(
            "its StorageClass {class} does not set allowVolumeExpansion: true"
        )),
        (_, None) => Standing::Blocked("it names no StorageClass".to_owned()),
        (_, Some(class)) => Standing::Blocked(format!("its StorageClass {class} was not found")),
    }
}

/// One pass over the member volumes of `cluster` (those of ordinals below `spec.replicas`;
/// others are left as they are). `previous`: the conditions as stored.
pub fn pass(
    cluster: &RenderContext<'_>,
    volumes: &[MemberVolume],
    previous: &[Condition],
) -> Outcome {
    let size = &cluster.spec.storage.size.0;
    let Some(want) = quantity::value(size) else {
        return Outcome::default();
    };
    let in_spec = |v: &&MemberVolume| {
        v.claim
            .strip_prefix(statefulset::DATA_VOLUME)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|pod| crate::members::parse_ordinal(cluster.name, pod))
            .is_some_and(|o| o < cluster.spec.replicas)
    };
    let mut out = Outcome::default();
    let (mut blocked, mut failed, mut growing, mut file_system) = (vec![], vec![], vec![], vec![]);
    let now_has = |v: &MemberVolume| {
        v.capacity
            .clone()
            .or_else(|| v.requested.clone())
            .unwrap_or_else(|| "an unknown size".to_owned())
    };
    for volume in volumes.iter().filter(in_spec) {
        match standing(volume, want) {
            Standing::Done => {}
            Standing::Expand => {
                out.actions.push(PodAction::ExpandVolume {
                    claim: volume.claim.clone(),
                    size: size.clone(),
                });
                growing.push(format!("{} ({})", volume.claim, now_has(volume)));
            }
            Standing::Blocked(why) => {
                blocked.push(format!("{} ({}): {why}", volume.claim, now_has(volume)))
            }
            Standing::Growing { file_system: true } => {
                file_system.push(format!("{} ({})", volume.claim, now_has(volume)))
            }
            Standing::Growing { file_system: false } => {
                growing.push(format!("{} ({})", volume.claim, now_has(volume)))
            }
            Standing::Failed(why) => failed.push(format!("{}: {why}", volume.claim)),
            Standing::Unbound => growing.push(format!("{} (not bound yet)", volume.claim)),
        }
    }
    let had = previous
        .iter()
        .find(|c| c.type_ == conditions::STORAGE_RESIZED);
    let (namespace, name) = (cluster.namespace, cluster.name);
    out.condition = if !blocked.is_empty() {
        Some((
            false,
            reasons::EXPANSION_NOT_SUPPORTED,
            format!(
                "spec.storage.size is {size} but {}; nothing is asked of those claims until their class allows expansion (set allowVolumeExpansion: true on it); volumes never shrink",
                blocked.join("; ")
            ),
        ))
    } else if !failed.is_empty() {
        Some((
            false,
            reasons::RESIZE_FAILED,
            format!(
                "growing to spec.storage.size {size} failed: {}",
                failed.join("; ")
            ),
        ))
    } else if !growing.is_empty() {
        Some((
            false,
            reasons::RESIZING,
            format!(
                "{size} asked for {}; the storage provider grows the volumes with the servers running",
                growing.join(", ")
            ),
        ))
    } else if !file_system.is_empty() {
        Some((
            false,
            reasons::FILE_SYSTEM_RESIZE_PENDING,
            format!(
                "the volumes of {} grew to {size}; their file systems grow when the kubelet next handles the mounted volume",
                file_system.join(", ")
            ),
        ))
    } else if had.is_some() {
        Some((
            true,
            reasons::RESIZED,
            format!("every member volume of {namespace}/{name} has {size}"),
        ))
    } else {
        None
    };
    out.events = events(&out, had, namespace, name);
    out
}

/// The events of a pass: `StorageExpanding` when requests grow, Warning
/// `StorageResizeNotApplied` when the condition newly says the volumes cannot follow (or says
/// it anew), `StorageResized` when it turns True.
fn events(
    out: &Outcome,
    had: Option<&Condition>,
    namespace: &str,
    name: &str,
) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    let claims: Vec<&str> = out
        .actions
        .iter()
        .filter_map(|a| match a {
            PodAction::ExpandVolume { claim, .. } => Some(claim.as_str()),
            _ => None,
        })
        .collect();
    if let Some(PodAction::ExpandVolume { size, .. }) = out.actions.first() {
        events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::StorageExpanding,
            format!(
                "asking for {size} on {} of {namespace}/{name}: the volumes grow with the servers running",
                claims.join(", ")
            ),
        ));
    }
    let Some((status, reason, message)) = &out.condition else {
        return events;
    };
    let same = had.is_some_and(|c| c.reason == *reason && c.message == *message);
    let not_applied = [reasons::EXPANSION_NOT_SUPPORTED, reasons::RESIZE_FAILED];
    if not_applied.contains(reason) && !same {
        events.push(PlannedEvent::new(
            EventType::Warning,
            EventReason::StorageResizeNotApplied,
            message.clone(),
        ));
    }
    if *status && had.is_some_and(|c| c.status == "False") {
        events.push(PlannedEvent::new(
            EventType::Normal,
            EventReason::StorageResized,
            message.clone(),
        ));
    }
    events
}

#[cfg(test)]
mod tests {
    use database_operator_api::DatabaseClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::OperatorConfig;

    fn spec(size: &str, replicas: i32) -> DatabaseClusterSpec {
        serde_json::from_value(json!({
            "engine": "postgresql",
            "version": "15.18",
            "replicas": replicas,
            "storage": {"size": size},
            "passwordSecretRef": {"name": "orders-password", "key": "password"},
        }))
        .expect("a valid spec")
    }

    fn run(size: &str, replicas: i32, volumes: &[MemberVolume], previous: &[Condition]) -> Outcome {
        let spec = spec(size, replicas);
        let config = OperatorConfig::default();
        let ctx = RenderContext {
            tls_blocked: false,
            name: "orders",
            namespace: "shop",
            uid: "uid-1",
            engine: spec.engine,
            version: &spec.version,
            spec: &spec,
            config: &config,
        };
        pass(&ctx, volumes, previous)
    }

    fn volume(ordinal: i32, requested: &str, capacity: Option<&str>) -> MemberVolume {
        MemberVolume {
            claim: claim_name("orders", ordinal),
            requested: Some(requested.to_owned()),
            capacity: capacity.map(str::to_owned),
            storage_class: Some("standard".to_owned()),
            expansion: ClassExpansion::Allowed,
            ..MemberVolume::default()
        }
    }

    fn stored(outcome: &Outcome) -> Vec<Condition> {
        outcome
            .condition
            .iter()
            .map(|(ok, reason, message)| Condition {
                type_: conditions::STORAGE_RESIZED.to_owned(),
                status: if *ok { "True" } else { "False" }.to_owned(),
                reason: (*reason).to_owned(),
                message: message.clone(),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
                observed_generation: None,
            })
            .collect()
    }

    fn reasons_of(outcome: &Outcome) -> Vec<&'static str> {
        outcome.events.iter().map(|e| e.reason.as_str()).collect()
    }

    #[test]
    fn volumes_of_the_spec_size_need_nothing_and_add_no_condition() {
        let volumes = [volume(0, "1Gi", Some("1Gi")), volume(1, "1Gi", Some("1Gi"))];
        assert_eq!(run("1Gi", 2, &volumes, &[]), Outcome::default());
        // A volume the provider made larger than asked is as good.
        let larger = [volume(0, "1Gi", Some("2Gi"))];
        assert_eq!(run("2Gi", 1, &larger, &[]), Outcome::default());
    }

    #[test]
    fn a_larger_size_grows_every_member_claim_in_spec_and_says_so() {
        let volumes = [
            volume(0, "1Gi", Some("1Gi")),
            volume(1, "1Gi", Some("1Gi")),
            // Scaled away: its data is kept as it is.
            volume(2, "1Gi", Some("1Gi")),
        ];
        let out = run("2Gi", 2, &volumes, &[]);
        assert_eq!(
            out.actions,
            vec![
                PodAction::ExpandVolume {
                    claim: "data-orders-0".into(),
                    size: "2Gi".into()
                },
                PodAction::ExpandVolume {
                    claim: "data-orders-1".into(),
                    size: "2Gi".into()
                },
            ]
        );
        let (ok, reason, message) = out.condition.clone().expect("a condition");
        assert_eq!((ok, reason), (false, reasons::RESIZING));
        assert!(message.contains("data-orders-0 (1Gi)"), "{message}");
        assert!(!message.contains("data-orders-2"), "{message}");
        assert_eq!(reasons_of(&out), vec!["StorageExpanding"]);

        // Requested, not grown yet: nothing asked again, still Resizing, no new event.
        let asked = [volume(0, "2Gi", Some("1Gi")), volume(1, "2Gi", Some("1Gi"))];
        let next = run("2Gi", 2, &asked, &stored(&out));
        assert!(next.actions.is_empty());
        assert_eq!(
            next.condition.as_ref().map(|c| c.1),
            Some(reasons::RESIZING)
        );
        assert!(next.events.is_empty());

        // One file system pending, one grown.
        let mut pending = volume(0, "2Gi", Some("1Gi"));
        pending.file_system_pending = true;
        let fs = run(
            "2Gi",
            2,
            &[pending, volume(1, "2Gi", Some("2Gi"))],
            &stored(&next),
        );
        assert_eq!(
            fs.condition.as_ref().map(|c| c.1),
            Some(reasons::FILE_SYSTEM_RESIZE_PENDING)
        );

        // Both grown: True, and one StorageResized event.
        let grown = [volume(0, "2Gi", Some("2Gi")), volume(1, "2Gi", Some("2Gi"))];
        let done = run("2Gi", 2, &grown, &stored(&fs));
        assert_eq!(
            done.condition.as_ref().map(|c| (c.0, c.1)),
            Some((true, reasons::RESIZED))
        );
        assert_eq!(reasons_of(&done), vec!["StorageResized"]);
        // And it stays True without another event.
        let again = run("2Gi", 2, &grown, &stored(&done));
        assert_eq!(again.condition, done.condition);
        assert!(again.events.is_empty());
    }

    #[test]
    fn a_class_without_expansion_is_named_and_nothing_is_asked() {
        let mut fixed = volume(0, "1Gi", Some("1Gi"));
        fixed.expansion = ClassExpansion::NotAllowed;
        fixed.storage_class = Some("fixed".into());
        let mut lost = volume(1, "1Gi", Some("1Gi"));
        lost.expansion = ClassExpansion::Unknown;
        lost.storage_class = Some("gone".into());
        let mut none = volume(2, "1Gi", Some("1Gi"));
        none.expansion = ClassExpansion::Unknown;
        none.storage_class = None;
        let out = run("2Gi", 3, &[fixed.clone(), lost, none], &[]);
        assert!(out.actions.is_empty(), "{:?}", out.actions);
        let (ok, reason, message) = out.condition.clone().expect("a condition");
        assert_eq!((ok, reason), (false, reasons::EXPANSION_NOT_SUPPORTED));
        for part in [
            "StorageClass fixed does not set allowVolumeExpansion: true",
            "StorageClass gone was not found",
            "data-orders-2 (1Gi): it names no StorageClass",
        ] {
            assert!(message.contains(part), "{part} in {message}");
        }
        assert_eq!(reasons_of(&out), vec!["StorageResizeNotApplied"]);
        // Said once: the same again is no new event; a new size is.
        let same = run(
            "2Gi",
            3,
            &[fixed.clone()],
            &stored(&run("2Gi", 3, &[fixed.clone()], &[])),
        );
        assert!(same.events.is_empty());
        let bigger = run("3Gi", 3, &[fixed], &stored(&same));
        assert_eq!(reasons_of(&bigger), vec!["StorageResizeNotApplied"]);
    }

    #[test]
    fn a_failed_resize_quotes_the_claim_and_is_not_asked_again() {
        let mut failed = volume(0, "2Gi", Some("1Gi"));
        failed.resize_error = Some("ControllerResizeError: quota exceeded".into());
        let out = run("2Gi", 1, &[failed], &[]);
        assert!(out.actions.is_empty());
        let (ok, reason, message) = out.condition.clone().expect("a condition");
        assert_eq!((ok, reason), (false, reasons::RESIZE_FAILED));
        assert!(message.contains("data-orders-0: ControllerResizeError: quota exceeded"));
        assert_eq!(reasons_of(&out), vec!["StorageResizeNotApplied"]);
    }

    #[test]
    fn volumes_never_shrink_and_unbound_claims_wait() {
        // Larger than the spec: left alone.
        let big = [volume(0, "4Gi", Some("4Gi"))];
        assert_eq!(run("2Gi", 1, &big, &[]), Outcome::default());
        // A new member's claim, not bound yet, at the template's size: not patched (the API
        // refuses a new request before binding), reported as growing.
        let mut unbound = volume(1, "1Gi", None);
        unbound.expansion = ClassExpansion::Allowed;
        let out = run("2Gi", 2, &[volume(0, "2Gi", Some("2Gi")), unbound], &[]);
        assert!(out.actions.is_empty());
        let (_, reason, message) = out.condition.expect("a condition");
        assert_eq!(reason, reasons::RESIZING);
        assert!(
            message.contains("data-orders-1 (not bound yet)"),
            "{message}"
        );
    }
}
