//! `status.members`: what the members' servers report of themselves, for people and tools
//! (`kubectl dbc status`), from the prober's facts.
//!
//! The list changes only when a server says something new: a member starts or stops answering,
//! changes role, read-only state, version, source or whether it replicates, or its delay
//! reaches another coarse step ([`database_operator_api::members::lag_step`]). A member without
//! fresh facts (just after the operator started, before its first probe round) keeps its
//! entry, so a restart writes nothing; a member whose server has not answered for
//! [`MemberFacts::GONE_AFTER`] leaves the list (one missed probe on a busy machine is no news: the list
//! flapped out and back within two seconds). Pods that are no longer members leave it too.

use std::collections::BTreeMap;
use std::time::Duration;

use database_operator_api::members::lag_step;
use database_operator_api::{DatabaseClusterStatus, MemberStatus};
use k8s_openapi::jiff::Timestamp;

use crate::members::Member;
use crate::{MemberFacts, ServerRole};

fn fresh(facts: &MemberFacts, now: Timestamp) -> bool {
    now.duration_since(facts.probed_at)
        .try_into()
        .is_ok_and(|age: std::time::Duration| age <= MemberFacts::STALE_AFTER)
}

fn from_facts(pod: &str, facts: &MemberFacts) -> Option<MemberStatus> {
    let role = facts.role?;
    let replica = role == ServerRole::Replica;
    Some(MemberStatus {
        pod: pod.to_owned(),
        role: match role {
            ServerRole::Primary => "primary",
            ServerRole::Replica => "replica",
        }
        .to_owned(),
        read_only: facts.read_only,
        version: facts.version.clone(),
        lag_seconds: replica.then(|| lag_step(facts.lag_seconds.unwrap_or(0))),
        replicating: if replica { facts.replicating } else { None },
        source: if replica { facts.source.clone() } else { None },
    })
}

/// The new `status.members` from the members (by ordinal), their facts and the previous list.
pub fn members(
    members: &[Member<'_>],
    facts: &BTreeMap<String, MemberFacts>,
    previous: &[MemberStatus],
    now: Timestamp,
) -> Vec<MemberStatus> {
    members
        .iter()
        .filter(|m| !m.terminating)
        .filter_map(|m| match facts.get(m.name).filter(|f| fresh(f, now)) {
            Some(f) if f.reachable => from_facts(m.name, f),
            Some(f) if f.down_for(now).is_some_and(|d| d < MemberFacts::GONE_AFTER) => {
                previous.iter().find(|p| p.pod == m.name).cloned()
            }
            Some(_) => None,
            None => previous.iter().find(|p| p.pod == m.name).cloned(),
        })
        .collect()
}

/// Members (not terminating) whose server answered the operator's probes before and has not
/// for [`MemberFacts::GONE_AFTER`] or more (fresh facts only: a member not probed since the
/// operator started is not silent, nor one whose server never answered). Their pods may still be Ready: a kubelet cut off from its node's
/// pods, or a partition between the operator and the server, does not change that for tens of
/// seconds, so the status counts them as not ready and names them.
pub fn silent<'a>(
    members: &[Member<'a>],
    facts: &BTreeMap<String, MemberFacts>,
    now: Timestamp,
) -> Vec<&'a str> {
    members
        .iter()
        .filter(|m| !m.terminating)
        .filter(|m| {
            facts
                .get(m.name)
                .filter(|f| fresh(f, now) && f.answered_before)
                .and_then(|f| f.down_for(now))
                .is_some_and(|d| d >= MemberFacts::GONE_AFTER)
        })
        .map(|m| m.name)
        .collect()
}

/// When to look again so that a member whose server stopped answering leaves the list on time
/// ([`MemberFacts::GONE_AFTER`]): no probe that follows says anything new, so nothing else would ask.
pub fn recheck_after(
    members: &[Member<'_>],
    facts: &BTreeMap<String, MemberFacts>,
    now: Timestamp,
) -> Option<Duration> {
    members
        .iter()
        .filter_map(|m| facts.get(m.name).filter(|f| fresh(f, now)))
        .filter_map(|f| f.down_for(now))
        .filter(|d| *d < MemberFacts::GONE_AFTER)
        .map(|d| MemberFacts::GONE_AFTER - d)
        .min()
}

/// Sets `status.members` ([`members`]).
pub fn record(
    status: &mut DatabaseClusterStatus,
    members_now: &[Member<'_>],
    facts: &BTreeMap<String, MemberFacts>,
    now: Timestamp,
) {
    status.members = members(members_now, facts, &status.members, now);
}
