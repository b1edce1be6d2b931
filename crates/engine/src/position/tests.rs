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

// ---------------------------------------------------------------------------- LSN

#[test]
fn lsn_reads_and_prints_as_postgresql_does() {
    let lsn: Lsn = "16/B374D848".parse().unwrap();
    assert_eq!(lsn, Lsn(0x16_B374_D848));
    assert_eq!(lsn.to_string(), "16/B374D848");
    assert_eq!("0/3000148".parse::<Lsn>().unwrap().to_string(), "0/3000148");
    assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn(0));
    assert_eq!("16/b374d848".parse::<Lsn>().unwrap(), lsn);
    assert_eq!(
        " FFFFFFFF/FFFFFFFF\n".parse::<Lsn>().unwrap(),
        Lsn(u64::MAX)
    );
}

#[test]
fn malformed_lsns_are_refused() {
    for bad in [
        "",
        "16",
        "16/",
        "/1",
        "1/2/3",
        "G/0",
        "123456789/0",
        "-1/0",
        "+1/0",
    ] {
        let e = bad.parse::<Lsn>().unwrap_err();
        assert_eq!(e.what, "LSN", "{bad:?}");
    }
}

#[test]
fn lsn_distance_is_in_bytes() {
    let a: Lsn = "0/3000000".parse().unwrap();
    let b: Lsn = "1/0".parse().unwrap();
    assert_eq!(a.bytes_until(b), 0x1_0000_0000 - 0x300_0000);
    assert_eq!(b.bytes_until(a), 0);
}

// ---------------------------------------------------------------------------- timelines

#[test]
fn history_files_parse_as_postgresql_writes_them() {
    let text = "1\t0/3000060\tno recovery target specified\n\n\
                2\t0/5000000\tbefore 2026-12-01 04:00:00+00\n";
    let h = TimelineHistory::parse(text).unwrap();
    assert_eq!(
        h.switches,
        [
            TimelineSwitch {
                parent: TimelineId(1),
                switch_lsn: "0/3000060".parse().unwrap()
            },
            TimelineSwitch {
                parent: TimelineId(2),
                switch_lsn: "0/5000000".parse().unwrap()
            },
        ]
    );
    assert!(TimelineHistory::parse("2\t0/1\tx\n1\t0/2\ty").is_err());
    assert!(TimelineHistory::parse("1\t0/5\tx\n2\t0/4\ty").is_err());
    assert!(TimelineHistory::parse("one\t0/5").is_err());
    assert!(TimelineHistory::parse("1").is_err());
}

#[test]
fn same_timeline_compares_by_lsn() {
    let a = pg(1, "0/3000148", None);
    let b = pg(1, "0/3000060", None);
    assert_eq!(a.compare(&b), Relation::Ahead);
    assert_eq!(b.compare(&a), Relation::Behind);
    assert_eq!(a.compare(&a), Relation::Equal);
    // Same timeline > 1 without history: one line of history, comparable.
    assert_eq!(
        pg(3, "0/9", None).compare(&pg(3, "0/8", None)),
        Relation::Ahead
    );
}

#[test]
fn an_old_primary_that_stopped_at_the_switch_point_is_behind_the_promoted_standby() {
    let new_primary = pg(
        2,
        "0/3000200",
        Some("1\t0/3000060\tno recovery target specified"),
    );
    let old_primary = pg(1, "0/3000060", None);
    assert_eq!(old_primary.compare(&new_primary), Relation::Behind);
    assert_eq!(new_primary.compare(&old_primary), Relation::Ahead);
    assert_eq!(
        old_primary.fork_point(&new_primary),
        Fork::At("0/3000060".parse().unwrap())
    );
}

#[test]
fn an_old_primary_that_wrote_past_the_switch_point_has_diverged() {
    let new_primary = pg(
        2,
        "0/3000200",
        Some("1\t0/3000060\tno recovery target specified"),
    );
    let old_primary = pg(1, "0/3000100", None);
    assert_eq!(old_primary.compare(&new_primary), Relation::Diverged);
    assert_eq!(new_primary.compare(&old_primary), Relation::Diverged);
    // Even when the old primary's LSN is smaller than the new primary's.
    let old_but_short = pg(1, "0/3000061", None);
    assert_eq!(old_but_short.compare(&new_primary), Relation::Diverged);
}

#[test]
fn sibling_timelines_diverge_after_their_common_ancestor() {
    // Timelines 2 and 3 both forked from 1: at 0/3000060 and at 0/3000080.
    let two = pg(2, "0/4000000", Some("1\t0/3000060\tx"));
    let three = pg(3, "0/4000000", Some("1\t0/3000080\tx"));
    assert_eq!(
        two.fork_point(&three),
        Fork::At("0/3000060".parse().unwrap())
    );
    assert_eq!(two.compare(&three), Relation::Diverged);
    // A standby of timeline 1 that stopped before both forks is behind either.
    let standby = pg(1, "0/3000000", None);
    assert_eq!(standby.compare(&two), Relation::Behind);
    assert_eq!(standby.compare(&three), Relation::Behind);
}

#[test]
fn timelines_without_history_cannot_be_compared() {
    let a = pg(2, "0/5000000", None);
    let b = pg(1, "0/3000000", None);
    assert_eq!(a.compare(&b), Relation::Unknown);
    assert_eq!(b.compare(&a), Relation::Unknown);
    assert_eq!(a.fork_point(&b), Fork::UnknownHistory);
}

// ---------------------------------------------------------------------------- GTID sets

#[test]
fn gtid_sets_read_as_mysql_prints_them() {
    // SELECT @@GLOBAL.gtid_executed, as the mysql client prints it (a newline after each comma).
    let printed =
        "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7-9,\n4F8A3C1E-0000-11E1-9E33-C80AA9429562:1-3";
    let set = gtids(printed);
    assert_eq!(set.to_string(), format!("{U1}:1-5:7-9,{U2}:1-3"));
    assert_eq!(set.count(), 11);
    assert_eq!(gtids("").count(), 0);
    assert!(gtids(" \n").is_empty());
    // Unsorted, overlapping and adjacent intervals are normalised.
    assert_eq!(
        gtids(&format!("{U2}:3,{U1}:7-9:1-5:6:2-3,{U2}:1-2")).to_string(),
        format!("{U1}:1-9,{U2}:1-3")
    );
}

#[test]
fn tagged_gtids_of_mysql_8_4_are_kept_apart_from_untagged_ones() {
    let set = gtids(&format!("{U1}:1-5:Domain_1:1-3:4,{U1}:alpha:7"));
    assert_eq!(set.to_string(), format!("{U1}:1-5:alpha:7:domain_1:1-4"));
    assert_eq!(set.count(), 10);
    let untagged = gtids(&format!("{U1}:1-5"));
    assert!(untagged.is_subset(&set));
    assert!(!set.is_subset(&untagged));
    assert_eq!(
        set.subtract(&untagged).to_string(),
        format!("{U1}:alpha:7:domain_1:1-4")
    );
    // Only tagged transactions of a server.
    assert_eq!(gtids(&format!("{U1}:t:1")).to_string(), format!("{U1}:t:1"));
}

#[test]
fn malformed_gtid_sets_are_refused() {
    for bad in [
        "3e11fa47",
        U1,
        &format!("{U1}:"),
        &format!("{U1}:0"),
        &format!("{U1}:5-3"),
        &format!("{U1}:1-"),
        &format!("{U1}:9223372036854775808"),
        &format!("{U1}:1,"),
        &format!("{U1}:1-5:tag"),
        &format!("{U1}:a:b:1"),
        &format!("{U1}:1:-x:2"),
        &format!("{U1}:1:{}:2", "t".repeat(33)),
        "3e11fa47-71ca-11e1-9e33-c80aa942956:1",
        "3e11fa4771ca11e19e33c80aa9429562:1",
    ] {
        let e = bad.parse::<GtidSet>().unwrap_err();
        assert_eq!(e.what, "GTID set", "{bad:?} -> {e}");
    }
}

#[test]
fn errant_transactions_are_what_a_replica_has_beyond_the_primary() {
    let primary = gtids(&format!("{U1}:1-100"));
    let replica = gtids(&format!("{U1}:1-90,{U2}:1-2"));
    assert_eq!(replica.subtract(&primary).to_string(), format!("{U2}:1-2"));
    assert_eq!(replica.compare(&primary), Relation::Diverged);
    assert_eq!(primary.compare(&replica), Relation::Diverged);
    let clean = gtids(&format!("{U1}:1-90"));
    assert_eq!(clean.compare(&primary), Relation::Behind);
    assert_eq!(primary.subtract(&clean).to_string(), format!("{U1}:91-100"));
}

#[test]
fn subtract_splits_intervals() {
    let a = gtids(&format!("{U1}:1-20"));
    let b = gtids(&format!("{U1}:3-4:8:15-30"));
    assert_eq!(a.subtract(&b).to_string(), format!("{U1}:1-2:5-7:9-14"));
    assert_eq!(a.intersection(&b).to_string(), format!("{U1}:3-4:8:15-20"));
    assert_eq!(b.subtract(&a).to_string(), format!("{U1}:21-30"));
}

// ---------------------------------------------------------------------------- MariaDB

#[test]
fn mariadb_positions_read_as_mariadb_prints_them() {
    let pos: MariadbGtidPos = "1-2-7,0-1-42".parse().unwrap();
    assert_eq!(pos.to_string(), "0-1-42,1-2-7");
    assert_eq!(
        pos.get(0),
        Some(&MariadbGtid {
            domain: 0,
            server: 1,
            seq: 42
        })
    );
    assert_eq!("".parse::<MariadbGtidPos>().unwrap().to_string(), "");
    for bad in ["0-1", "0-1-2-3", "a-1-2", "0-1-2,0-1-3", "0-1-2,", "-1-1-1"] {
        assert!(bad.parse::<MariadbGtidPos>().is_err(), "{bad:?}");
    }
}

#[test]
fn mariadb_positions_compare_per_domain() {
    let p = |s: &str| s.parse::<MariadbGtidPos>().unwrap();
    assert_eq!(p("0-1-42").compare(&p("0-1-40")), Relation::Ahead);
    assert_eq!(p("0-1-42,1-2-7").compare(&p("0-1-42")), Relation::Ahead);
    assert_eq!(p("0-1-42").compare(&p("0-1-42,1-2-7")), Relation::Behind);
    assert_eq!(
        p("0-1-42,1-2-7").compare(&p("0-1-42,1-2-7")),
        Relation::Equal
    );
    // Ahead in one domain, behind in another.
    assert_eq!(
        p("0-1-42,1-2-5").compare(&p("0-1-40,1-2-7")),
        Relation::Diverged
    );
    // The same sequence number written by two servers: two different transactions.
    assert_eq!(p("0-1-42").compare(&p("0-2-42")), Relation::Diverged);
    // A higher sequence number from another server (after a failover) is simply ahead.
    assert_eq!(p("0-2-43").compare(&p("0-1-42")), Relation::Ahead);
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

proptest! {
    #[test]
    fn lsn_text_round_trips(n in any::<u64>()) {
        let lsn = Lsn(n);
        prop_assert_eq!(lsn.to_string().parse::<Lsn>().unwrap(), lsn);
    }

    #[test]
    fn gtid_set_text_round_trips(set in gtid_set_strategy()) {
        let text = set.to_string();
        prop_assert_eq!(&text.parse::<GtidSet>().unwrap(), &set);
        // As MySQL prints it: upper case, a newline after each comma.
        let mysqlish = text.to_uppercase().replace(',', ",\n");
        // Tags are lower-cased on parse; upper-casing the whole text must not change the set.
        prop_assert_eq!(&mysqlish.parse::<GtidSet>().unwrap(), &set);
    }

    #[test]
    fn mariadb_text_round_trips(pos in mariadb_strategy()) {
        prop_assert_eq!(pos.to_string().parse::<MariadbGtidPos>().unwrap(), pos);
    }

    #[test]
    fn union_is_commutative_associative_and_idempotent(
        a in gtid_set_strategy(), b in gtid_set_strategy(), c in gtid_set_strategy()
    ) {
        prop_assert_eq!(a.union(&b), b.union(&a));
        prop_assert_eq!(a.union(&b).union(&c), a.union(&b.union(&c)));
        prop_assert_eq!(a.union(&a), a.clone());
        prop_assert!(a.is_subset(&a.union(&b)));
        prop_assert_eq!(a.union(&b).count() + a.intersection(&b).count(), a.count() + b.count());
    }

    #[test]
    fn subtract_laws(a in gtid_set_strategy(), b in gtid_set_strategy()) {
        let d = a.subtract(&b);
        prop_assert!(d.is_subset(&a));
        prop_assert!(d.intersection(&b).is_empty());
        prop_assert_eq!(d.union(&a.intersection(&b)), a.clone());
        prop_assert_eq!(a.subtract(&b).union(&b), a.union(&b));
        prop_assert!(a.subtract(&a).is_empty());
        prop_assert_eq!(a.subtract(&GtidSet::new()), a.clone());
    }

    #[test]
    fn subset_iff_subtract_is_empty(a in gtid_set_strategy(), b in gtid_set_strategy()) {
        prop_assert_eq!(a.is_subset(&b), a.subtract(&b).is_empty());
        prop_assert!(a.intersection(&b).is_subset(&a));
    }

    #[test]
    fn comparison_is_antisymmetric_and_diverged_is_symmetric(
        a in position_strategy(), b in position_strategy()
    ) {
        let ab = a.compare(&b);
        let ba = b.compare(&a);
        prop_assert_eq!(ab, ba.reverse());
        prop_assert_eq!(ab == Relation::Diverged, ba == Relation::Diverged);
        prop_assert_eq!(a.compare(&a), Relation::Equal);
    }

    #[test]
    fn pg_comparison_agrees_with_the_wal_each_server_holds(a in pg_strategy(), b in pg_strategy()) {
        // Model: a server holds the WAL bytes [0, lsn), each byte tagged with its timeline.
        let holds = |p: &PgPosition| -> Option<Vec<u32>> {
            let h = p.known_history()?;
            Some((0..p.lsn.0).map(|x| PgPosition::timeline_at(h, p.timeline, Lsn(x)).0).collect())
        };
        let expected = match (holds(&a), holds(&b)) {
            (Some(wa), Some(wb)) => {
                let n = wa.len().min(wb.len());
                if wa[..n] != wb[..n] {
                    Relation::Diverged
                } else {
                    Relation::from_extras(wa.len() > n, wb.len() > n)
                }
            }
            _ if a.timeline == b.timeline => Relation::from_extras(a.lsn > b.lsn, b.lsn > a.lsn),
            _ => Relation::Unknown,
        };
        prop_assert_eq!(a.compare(&b), expected);
    }
}

#[test]
fn positions_parse_per_engine_as_probes_read_them() {
    assert_eq!(
        Position::parse(
            Engine::Postgresql,
            "0/3000148",
            Some(2),
            Some("1\t0/3000060\tx")
        ),
        Ok(Position::Postgresql(pg(
            2,
            "0/3000148",
            Some("1\t0/3000060\tx")
        )))
    );
    assert_eq!(
        Position::parse(Engine::Postgresql, "0/10", None, None),
        Ok(Position::Postgresql(pg(1, "0/10", None)))
    );
    assert_eq!(
        Position::parse(Engine::Mysql, &format!("{U1}:1-5"), None, None),
        Ok(Position::Mysql(gtids(&format!("{U1}:1-5"))))
    );
    assert_eq!(
        Position::parse(Engine::Mariadb, "0-1-42", None, None),
        Ok(Position::Mariadb("0-1-42".parse().unwrap()))
    );
    // A MySQL GTID set is not a MariaDB position, and a bad history is an error too.
    assert!(Position::parse(Engine::Mariadb, &format!("{U1}:1-5"), None, None).is_err());
    assert!(Position::parse(Engine::Postgresql, "0/10", Some(2), Some("x")).is_err());
}
