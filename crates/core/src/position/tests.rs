//! The election, on positions of every engine (the positions themselves are tested in the
//! engine crate, `database_operator_engine::position`).

use super::*;
use proptest::prelude::*;

const U1: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
const U2: &str = "4f8a3c1e-0000-11e1-9e33-c80aa9429562";

fn gtids(s: &str) -> GtidSet {
    s.parse().unwrap()
}

fn pg(timeline: u32, lsn: &str, history: Option<&str>) -> PgPosition {
    PgPosition {
        timeline: TimelineId(timeline),
        lsn: lsn.parse().unwrap(),
        history: history.map(|h| TimelineHistory::parse(h).unwrap()),
    }
}

fn cand(name: &str, position: Option<Position>) -> Candidate {
    Candidate {
        name: name.to_owned(),
        position,
    }
}

// ---------------------------------------------------------------------------- election

#[test]
fn the_most_advanced_replica_is_chosen_and_the_others_are_told_why() {
    let old = Position::Mysql(gtids(&format!("{U1}:1-100")));
    let e = elect(
        Some(&old),
        &[
            cand("db-1", Some(Position::Mysql(gtids(&format!("{U1}:1-97"))))),
            cand("db-2", Some(Position::Mysql(gtids(&format!("{U1}:1-99"))))),
            cand("db-3", Some(Position::Mysql(gtids(&format!("{U1}:1-99"))))),
            cand("db-4", None),
            cand(
                "db-5",
                // Has a transaction the old primary never had, and lacks two it had.
                Some(Position::Mysql(gtids(&format!("{U1}:1-98,{U2}:1")))),
            ),
        ],
    );
    assert_eq!(e.chosen.as_deref(), Some("db-2"));
    let reasons: Vec<(String, String)> = e
        .verdicts
        .iter()
        .map(|(n, v)| (n.clone(), v.reason()))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "db-1".to_owned(),
                format!("behind db-2: lacks 2 transactions ({U1}:98-99)")
            ),
            ("db-2".to_owned(), "most advanced position".to_owned()),
            (
                "db-3".to_owned(),
                "as far as db-2, which comes first".to_owned()
            ),
            (
                "db-4".to_owned(),
                "replication position unknown (not reachable?)".to_owned()
            ),
            (
                "db-5".to_owned(),
                "diverged from the old primary (errant transactions); quarantined".to_owned()
            ),
        ]
    );
}

#[test]
fn replicas_with_errant_transactions_of_their_own_block_the_election() {
    let e = elect(
        None,
        &[
            cand(
                "db-1",
                Some(Position::Mysql(gtids(&format!("{U1}:1-10,{U2}:1")))),
            ),
            cand("db-2", Some(Position::Mysql(gtids(&format!("{U1}:1-11"))))),
        ],
    );
    assert_eq!(e.chosen, None);
    assert_eq!(
        e.verdicts[0].1.reason(),
        "diverged from db-2: cannot tell which is more advanced"
    );
    assert_eq!(
        e.verdicts[1].1,
        Verdict::Conflict {
            with: "db-1".into(),
            relation: Relation::Diverged
        }
    );
}

#[test]
fn postgresql_election_prefers_the_longest_received_wal() {
    let e = elect(
        Some(&Position::Postgresql(pg(1, "0/3000200", None))),
        &[
            cand("pg-1", Some(Position::Postgresql(pg(1, "0/3000100", None)))),
            cand("pg-2", Some(Position::Postgresql(pg(1, "0/3000200", None)))),
        ],
    );
    assert_eq!(e.chosen.as_deref(), Some("pg-2"));
    assert_eq!(
        e.verdicts[0].1.reason(),
        "behind pg-2: lacks 256 bytes of WAL"
    );
}

#[test]
fn mariadb_election_names_the_domain_a_loser_lags_in() {
    let m = |s: &str| Some(Position::Mariadb(s.parse().unwrap()));
    let e = elect(
        None,
        &[
            cand("m-1", m("0-1-40,1-2-7")),
            cand("m-2", m("0-1-42,1-2-7")),
        ],
    );
    assert_eq!(e.chosen.as_deref(), Some("m-2"));
    assert_eq!(
        e.verdicts[0].1.reason(),
        "behind m-2: lacks domain 0 at 0-1-40 < 0-1-42"
    );
}

#[test]
fn no_candidates_no_choice() {
    let e = elect(None, &[]);
    assert_eq!(e.chosen, None);
    assert!(e.verdicts.is_empty());
}

// ---------------------------------------------------------------------------- properties

fn uuid_strategy() -> impl Strategy<Value = ServerUuid> {
    prop::sample::select(vec![
        ServerUuid(0x3e11fa47_71ca_11e1_9e33_c80aa9429562),
        ServerUuid(0x4f8a3c1e_0000_11e1_9e33_c80aa9429562),
        ServerUuid(0xffffffff_ffff_ffff_ffff_ffffffffffff),
    ])
}

fn source_strategy() -> impl Strategy<Value = GtidSource> {
    (
        uuid_strategy(),
        prop::option::of(prop::sample::select(vec!["alpha", "b_2"])),
    )
        .prop_map(|(uuid, tag)| GtidSource {
            uuid,
            tag: tag.map(|t| t.parse().unwrap()),
        })
}

fn gtid_set_strategy() -> impl Strategy<Value = GtidSet> {
    prop::collection::vec((source_strategy(), 1u64..40, 0u64..6), 0..8).prop_map(|runs| {
        let mut set = GtidSet::new();
        for (src, first, len) in runs {
            set.insert(src, first, first + len);
        }
        set
    })
}

fn mariadb_strategy() -> impl Strategy<Value = MariadbGtidPos> {
    prop::collection::btree_map(0u32..3, (1u32..3, 0u64..6), 0..3).prop_map(|m| {
        let mut pos = MariadbGtidPos::default();
        for (domain, (server, seq)) in m {
            pos.set(MariadbGtid {
                domain,
                server,
                seq,
            });
        }
        pos
    })
}

/// Positions on timelines 1..=3 of one cluster whose timeline 2 forked from 1 at 0/100 and
/// timeline 3 from 2 at 0/200 (or, in a second history, 3 forked from 1 at 0/150).
fn pg_strategy() -> impl Strategy<Value = PgPosition> {
    (1u32..=3, 0u64..0x300, any::<bool>(), any::<bool>()).prop_map(
        |(timeline, lsn, sibling, known)| {
            let history = match (timeline, sibling) {
                (1, _) => "",
                (2, _) => "1\t0/100\tx",
                (3, false) => "1\t0/100\tx\n2\t0/200\tx",
                (3, true) => "1\t0/150\tx",
                _ => unreachable!(),
            };
            PgPosition {
                timeline: TimelineId(if timeline == 3 && sibling {
                    4
                } else {
                    timeline
                }),
                lsn: Lsn(lsn),
                history: (known || timeline == 1).then(|| TimelineHistory::parse(history).unwrap()),
            }
        },
    )
}

fn position_strategy() -> impl Strategy<Value = Position> {
    prop_oneof![
        gtid_set_strategy().prop_map(Position::Mysql),
        mariadb_strategy().prop_map(Position::Mariadb),
        pg_strategy().prop_map(Position::Postgresql),
    ]
}

/// Candidates of one engine (elections never mix engines).
fn candidates_strategy() -> impl Strategy<Value = Vec<Candidate>> {
    let named = |v: Vec<Option<Position>>| {
        v.into_iter()
            .enumerate()
            .map(|(i, position)| Candidate {
                name: format!("m-{i}"),
                position,
            })
            .collect::<Vec<_>>()
    };
    prop_oneof![
        prop::collection::vec(
            prop::option::weighted(0.9, gtid_set_strategy().prop_map(Position::Mysql)),
            0..5
        ),
        prop::collection::vec(
            prop::option::weighted(0.9, mariadb_strategy().prop_map(Position::Mariadb)),
            0..5
        ),
        prop::collection::vec(
            prop::option::weighted(0.9, pg_strategy().prop_map(Position::Postgresql)),
            0..5
        ),
    ]
    .prop_map(named)
}

proptest! {
    #[test]
    fn the_chosen_candidate_is_never_behind_another(
        old in prop::option::of(position_strategy()),
        candidates in candidates_strategy()
    ) {
        let e = elect(old.as_ref(), &candidates);
        prop_assert_eq!(e.verdicts.len(), candidates.len());
        if let Some(chosen) = &e.chosen {
            let winner = candidates.iter().find(|c| &c.name == chosen).unwrap();
            let wp = winner.position.as_ref().unwrap();
            if let Some(old) = &old {
                prop_assert_ne!(wp.compare(old), Relation::Diverged);
            }
            for (c, (_, verdict)) in candidates.iter().zip(&e.verdicts) {
                let Some(p) = &c.position else {
                    prop_assert_eq!(verdict, &Verdict::PositionUnknown);
                    continue;
                };
                if matches!(verdict, Verdict::DivergedFromOldPrimary) {
                    continue;
                }
                let r = wp.compare(p);
                prop_assert!(matches!(r, Relation::Equal | Relation::Ahead), "{} is {} {}", chosen, r, c.name);
            }
        } else {
            prop_assert!(e.verdicts.iter().all(|(_, v)| *v != Verdict::Chosen));
        }
        prop_assert_eq!(
            e.verdicts.iter().filter(|(_, v)| *v == Verdict::Chosen).count(),
            usize::from(e.chosen.is_some())
        );
    }
}
