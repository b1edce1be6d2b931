//! The election: whom to promote among the reachable candidates, and why every other one lost.

use super::*;

/// A member that could be promoted, with its position (`None` when it could not be probed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The member's name (the pod name).
    pub name: String,
    /// Its replication position, when known.
    pub position: Option<Position>,
}

/// Why a candidate was not chosen, or that it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// This candidate is the one to promote.
    Chosen,
    /// Its position could not be read.
    PositionUnknown,
    /// It has transactions the old primary never had (errant transactions / a forked
    /// timeline): promoting it would publish them, so it is left out (quarantine).
    DivergedFromOldPrimary,
    /// Another candidate has transactions it lacks.
    Behind {
        /// The candidate that is ahead of it.
        of: String,
        /// What it lacks, in words.
        missing: String,
    },
    /// Exactly as far as the chosen one, which came first in preference order.
    EqualButLaterInOrder {
        /// The chosen candidate.
        chosen: String,
    },
    /// Candidates that cannot be ordered: each has something another lacks, or their positions
    /// cannot be compared. No one is promoted while this holds.
    Conflict {
        /// The candidate it conflicts with.
        with: String,
        /// How they relate ([`Relation::Diverged`] or [`Relation::Unknown`]).
        relation: Relation,
    },
}

impl Verdict {
    /// A short sentence for status and events.
    pub fn reason(&self) -> String {
        match self {
            Verdict::Chosen => "most advanced position".to_owned(),
            Verdict::PositionUnknown => "replication position unknown (not reachable?)".to_owned(),
            Verdict::DivergedFromOldPrimary => {
                "diverged from the old primary (errant transactions); quarantined".to_owned()
            }
            Verdict::Behind { of, missing } if missing.is_empty() => format!("behind {of}"),
            Verdict::Behind { of, missing } => format!("behind {of}: lacks {missing}"),
            Verdict::EqualButLaterInOrder { chosen } => {
                format!("as far as {chosen}, which comes first")
            }
            Verdict::Conflict { with, relation } => {
                format!("{relation} from {with}: cannot tell which is more advanced")
            }
        }
    }
}

/// The result of [`elect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The candidate to promote, when one is safe.
    pub chosen: Option<String>,
    /// Every candidate with its verdict, in the order given.
    pub verdicts: Vec<(String, Verdict)>,
}

/// Chooses whom to promote: the candidate that no other candidate is ahead of.
///
/// - A candidate without a position is out ([`Verdict::PositionUnknown`]).
/// - With `old_primary` (its last known position), a candidate diverged from it is out
///   ([`Verdict::DivergedFromOldPrimary`]). A candidate behind that position stays in: the old
///   position may be newer than any survivor has. Whether losing that much is acceptable is the
///   caller's decision (compare with [`Position::shortfall`]). A candidate *ahead* of that
///   position also stays in: the old primary may have written more after it was last seen, and
///   a MySQL GTID set alone cannot tell those transactions from errant ones of another server
///   (the caller can, by checking the extra transactions' server UUIDs with
///   [`GtidSet::subtract`]).
/// - Of the rest, the chosen one is [`Relation::Equal`] or [`Relation::Ahead`] of every other;
///   ties go to the earliest in `candidates` (put them in preference order). When the most
///   advanced candidates diverge from each other or cannot be compared, no one is chosen
///   ([`Verdict::Conflict`]).
///
/// The chosen candidate is never behind another candidate that is still in (property-tested).
pub fn elect(old_primary: Option<&Position>, candidates: &[Candidate]) -> Election {
    let mut verdicts: Vec<Option<Verdict>> = candidates
        .iter()
        .map(|c| match (&c.position, old_primary) {
            (None, _) => Some(Verdict::PositionUnknown),
            (Some(p), Some(old)) if p.compare(old) == Relation::Diverged => {
                Some(Verdict::DivergedFromOldPrimary)
            }
            _ => None,
        })
        .collect();
    let eligible: Vec<usize> = (0..candidates.len())
        .filter(|&i| verdicts[i].is_none())
        .collect();
    let pos = |i: usize| {
        candidates[i]
            .position
            .as_ref()
            .expect("eligible has a position")
    };
    let name = |i: usize| candidates[i].name.clone();

    // A candidate is maximal when it is equal to or ahead of every other eligible candidate.
    let maximal = |i: usize| {
        eligible
            .iter()
            .all(|&j| i == j || matches!(pos(i).compare(pos(j)), Relation::Equal | Relation::Ahead))
    };
    let chosen = eligible.iter().copied().find(|&i| maximal(i));

    for &i in &eligible {
        verdicts[i] = Some(match chosen {
            Some(c) if c == i => Verdict::Chosen,
            Some(c) => match pos(i).compare(pos(c)) {
                Relation::Equal => Verdict::EqualButLaterInOrder { chosen: name(c) },
                _ => Verdict::Behind {
                    of: name(c),
                    missing: pos(i).shortfall(pos(c)),
                },
            },
            None => {
                // Explain with the first candidate that is ahead of it, else the first it
                // conflicts with.
                let ahead = eligible
                    .iter()
                    .copied()
                    .find(|&j| pos(i).compare(pos(j)) == Relation::Behind);
                match ahead {
                    Some(j) => Verdict::Behind {
                        of: name(j),
                        missing: pos(i).shortfall(pos(j)),
                    },
                    None => {
                        let (j, relation) = eligible
                            .iter()
                            .copied()
                            .filter(|&j| j != i)
                            .map(|j| (j, pos(i).compare(pos(j))))
                            .find(|(_, r)| matches!(r, Relation::Diverged | Relation::Unknown))
                            .expect("a non-maximal candidate is behind or in conflict");
                        Verdict::Conflict {
                            with: name(j),
                            relation,
                        }
                    }
                }
            }
        });
    }
    Election {
        chosen: chosen.map(name),
        verdicts: candidates
            .iter()
            .zip(verdicts)
            .map(|(c, v)| (c.name.clone(), v.expect("every candidate has a verdict")))
            .collect(),
    }
}
