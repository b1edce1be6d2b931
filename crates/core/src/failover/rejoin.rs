//! Steady-state rejoin: members follow the primary, or are quarantined when their history
//! does not allow it.

use super::*;

impl Pass<'_, '_> {
    /// Points every reachable member at `primary` when it does not follow it yet; fences a
    /// second writable primary. Whether every reachable member already follows.
    pub(super) fn rejoin_all(&mut self, primary: &str) -> bool {
        if !self.server_up(primary) {
            return true;
        }
        let others: Vec<String> = self
            .in_spec()
            .filter(|m| m.name != primary && !self.quarantined(m.name) && !self.reseeding(m.name))
            .filter(|m| self.server_up(m.name))
            .map(|m| m.name.to_owned())
            .collect();
        let mut all = true;
        for pod in others {
            if !self.rejoin(&pod, primary) {
                all = false;
            }
        }
        all
    }

    /// One member towards following `primary`; whether it follows already.
    pub(super) fn rejoin(&mut self, pod: &str, primary: &str) -> bool {
        if let Some(theirs) = self.foreign_identity(pod) {
            self.quarantine_foreign(pod, &theirs);
            return true;
        }
        let Some(facts) = self.facts(pod).cloned() else {
            return false;
        };
        if facts.role == Some(ServerRole::Replica) && facts.source.as_deref() == Some(primary) {
            if follows(self.input.engine, &facts, primary, self.position(primary)) {
                return true;
            }
            // Names the primary but can never follow it: restart it for a rewind.
            self.commands.push(DatabaseCommand::Follow {
                pod: pod.to_owned(),
                source: primary.to_owned(),
                rewind: true,
            });
            return false;
        }
        if self.writable_primary(pod) {
            self.commands.push(DatabaseCommand::Fence {
                pod: pod.to_owned(),
            });
        }
        let (Some(mine), Some(theirs)) = (facts.position.as_ref(), self.position(primary)) else {
            return false;
        };
        match mine.compare(theirs) {
            Relation::Equal | Relation::Behind => self.commands.push(DatabaseCommand::Follow {
                pod: pod.to_owned(),
                source: primary.to_owned(),
                rewind: false,
            }),
            Relation::Ahead | Relation::Diverged
                if database_operator_engine::of(self.input.engine).rewinds_diverged_members() =>
            {
                self.commands.push(DatabaseCommand::Follow {
                    pod: pod.to_owned(),
                    source: primary.to_owned(),
                    rewind: true,
                })
            }
            Relation::Ahead | Relation::Diverged => {
                let missing = theirs.shortfall(mine);
                self.commands.push(DatabaseCommand::Quarantine {
                    pod: pod.to_owned(),
                });
                self.status.quarantined.push(pod.to_owned());
                self.status.quarantined.sort();
                self.events.push(PlannedEvent::new(
                    EventType::Warning,
                    EventReason::MemberQuarantined,
                    format!(
                        "{pod} of {} holds transactions the primary {primary} lacks ({missing}): quarantined, out of the read Service, its volume kept; inspect it, then reseed it explicitly",
                        self.input.cluster
                    ),
                ));
            }
            Relation::Unknown => {}
        }
        false
    }
}

/// Whether a member with these (fresh) `facts` follows `primary`, whose position is
/// `primary_position`: a replica naming it as its source, replicating or (re)connecting. The
/// failover leaves such a member alone; any other reachable member it points at the primary
/// (which may restart it), so the upgrade roll waits for it ([`crate::upgrade`]).
///
/// A PostgreSQL standby that replayed past the fork of the primary's timeline (WAL the old
/// primary wrote after the new one was promoted) keeps reconnecting to the primary and is
/// refused every time: it names the primary as its source but can never follow it, so it does
/// not count (the failover restarts it for a rewind; init.sh rewinds a standby on an older
/// timeline). Seen on real servers after an upgrade's switchover.
pub fn follows(
    engine: Engine,
    facts: &MemberFacts,
    primary: &str,
    primary_position: Option<&Position>,
) -> bool {
    let names_primary =
        facts.role == Some(ServerRole::Replica) && facts.source.as_deref() == Some(primary);
    let diverged = database_operator_engine::of(engine).rewinds_diverged_members()
        && matches!(
            (facts.position.as_ref(), primary_position),
            (Some(mine), Some(theirs)) if mine.compare(theirs) == Relation::Diverged
        );
    names_primary && !diverged
}
