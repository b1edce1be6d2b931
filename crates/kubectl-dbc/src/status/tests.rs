use super::*;

/// The objects of a fixture file: one cluster, its pods and events.
fn fixture(text: &str) -> Fetched {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).expect("fixture is YAML");
    let mut cluster = None;
    let mut pods = Vec::new();
    let mut events = Vec::new();
    for doc in docs {
        match doc["kind"].as_str() {
            Some("DatabaseCluster") => {
                cluster = Some(serde_json::from_value(doc).expect("cluster"))
            }
            Some("Pod") => pods.push(serde_json::from_value(doc).expect("pod")),
            Some("Event") => events.push(serde_json::from_value(doc).expect("event")),
            other => panic!("unexpected kind {other:?}"),
        }
    }
    Fetched {
        cluster: cluster.expect("a DatabaseCluster"),
        pods,
        events,
    }
}

fn now() -> Timestamp {
    "2026-12-01T05:00:00Z".parse().expect("timestamp")
}

const THREE: &str = include_str!("../../tests/fixtures/status-postgresql-3.yaml");
const NINE: &str = include_str!("../../tests/fixtures/status-postgresql-9.yaml");

#[test]
fn status_screen_of_a_running_three_member_cluster() {
    let text = render(&report(&fixture(THREE)), now(), Style::PLAIN);
    insta::assert_snapshot!(text);
}

#[test]
fn status_screen_of_a_degraded_nine_member_cluster() {
    let text = render(&report(&fixture(NINE)), now(), Style::PLAIN);
    insta::assert_snapshot!(text);
}

#[test]
fn a_rolling_upgrade_shows_its_step_and_what_it_waits_for() {
    let mut fetched = fixture(THREE);
    let status = fetched.cluster.status.get_or_insert_with(Default::default);
    let mut upgrade: database_operator_api::UpgradeStatus =
        serde_json::from_value(serde_json::json!({
            "from": "16.2", "to": "16.4", "started": "2026-12-01T04:58:00Z",
            "step": "Replicas", "member": "orders-db-0", "stepStarted": "2026-12-01T04:59:00Z",
            "membersDone": ["orders-db-2", "orders-db-1"],
            "waiting": "waiting for orders-db-0 to follow the primary orders-db-1",
        }))
        .expect("upgrade status");
    status.upgrade = Some(upgrade.clone());
    let text = render(&report(&fetched), now(), Style::PLAIN);
    assert!(
        text.contains(
            "  upgrade     16.2 -> 16.4: Replicas orders-db-0, done orders-db-2 orders-db-1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "\n              waiting for orders-db-0 to follow the primary orders-db-1\n"
        ),
        "{text}"
    );
    // Paused: the reason instead, cut to the screen's width.
    upgrade.step = database_operator_api::RollPhase::Paused;
    upgrade.waiting = None;
    upgrade.paused_reason = Some(format!(
        "orders-db-0 runs 16.4 but is not Ready {}",
        "x".repeat(200)
    ));
    fetched.cluster.status.as_mut().unwrap().upgrade = Some(upgrade);
    let text = render(&report(&fetched), now(), Style::PLAIN);
    let paused = text
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("paused: orders-db-0 runs 16.4 but is not Ready")
        })
        .unwrap_or_else(|| panic!("no paused line: {text}"));
    assert!(paused.chars().count() <= WIDTH, "{paused}");
    assert!(!text.contains("waiting for"), "{text}");
}

#[test]
fn every_line_of_a_nine_member_screen_fits_100_columns() {
    let report = report(&fixture(NINE));
    assert_eq!(report.members.len(), 9);
    for style in [Style::PLAIN, Style { colour: true }] {
        let text = render(&report, now(), style);
        // Colour codes take no columns.
        let plain = text
            .split('\u{1b}')
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    part
                } else {
                    part.split_once('m').map_or(part, |(_, rest)| rest)
                }
            })
            .collect::<String>();
        for line in plain.lines() {
            assert!(
                line.chars().count() <= WIDTH,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert_eq!(plain.lines().count(), text.lines().count());
    }
}

#[test]
fn lag_and_server_roles_come_from_status_members() {
    let report = report(&fixture(NINE));
    let m = &report.members;
    assert_eq!(m[0].server_role.as_deref(), Some("primary"));
    assert_eq!((m[2].lag_seconds, m[3].lag_seconds), (Some(5), Some(60)));
    assert_eq!(m[4].replicating, Some(false));
    // Member 7's server did not answer: nothing about it is invented.
    assert_eq!(
        (m[7].server_role.as_deref(), m[7].lag_seconds),
        (None, None)
    );
    let text = render(&report, now(), Style::PLAIN);
    let line = |pod: &str| {
        text.lines()
            .find(|l| l.contains(&format!("{pod} ")))
            .unwrap_or_else(|| panic!("no line for {pod}:\n{text}"))
            .to_owned()
    };
    assert!(line("analytics-2").contains(">=5s"), "{text}");
    assert!(line("analytics-4").contains("stopped"), "{text}");
    assert!(line("analytics-7").contains("unknown"), "{text}");
}

#[test]
fn members_are_in_ordinal_order_with_what_their_pods_say() {
    let report = report(&fixture(NINE));
    let names: Vec<&str> = report.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names.last(), Some(&"inventory-reporting-analytics-8"));
    let down = &report.members[7];
    assert!(!down.ready);
    assert_eq!(down.restarts, 12345);
    assert_eq!(down.role.as_deref(), Some("replica"));
    assert_eq!(report.members[0].role.as_deref(), Some("primary"));
}

#[test]
fn only_the_newest_events_are_shown_oldest_first() {
    let report = report(&fixture(THREE));
    assert_eq!(report.events.len(), EVENTS_SHOWN);
    let reasons: Vec<&str> = report.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons.first(), Some(&"BackupScheduled"));
    assert_eq!(reasons.last(), Some(&"ClusterReady"));
}

#[test]
fn facts_the_operator_does_not_report_are_never_invented() {
    let fetched = fixture(THREE);
    let report = report(&fetched);
    // No status.members in this fixture: no role or lag as a server would report them.
    assert!(
        report
            .members
            .iter()
            .all(|m| m.lag_seconds.is_none() && m.server_role.is_none())
    );
    assert!(report.backup.last.is_none() && report.backup.last_verified_restore.is_none());
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["members"][0]["lagSeconds"], serde_json::Value::Null);
    assert_eq!(json["backup"]["next"], "2026-12-02T02:00:00Z");
    let text = render(&report, now(), Style::PLAIN);
    assert!(
        text.contains("last verified restore  not reported"),
        "{text}"
    );
}

#[test]
fn colour_only_when_asked() {
    let report = report(&fixture(THREE));
    assert!(!render(&report, now(), Style::PLAIN).contains('\u{1b}'));
    assert!(render(&report, now(), Style { colour: true }).contains("\u{1b}[32mRunning"));
}

#[test]
fn a_new_cluster_without_status_or_pods_renders() {
    let mut fetched = fixture(THREE);
    fetched.cluster.status = None;
    fetched.cluster.spec.backup = None;
    fetched.pods.clear();
    fetched.events.clear();
    let text = render(&report(&fetched), now(), Style::PLAIN);
    insta::assert_snapshot!(text);
}

#[test]
fn last_backup_and_last_verified_restore_come_from_the_status() {
    let mut fetched = fixture(THREE);
    let status = fetched.cluster.status.get_or_insert_with(Default::default);
    let at = |t: &str| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.parse().expect("timestamp"))
    };
    status.last_backup = Some(database_operator_api::LastBackup {
        job: "orders-backup-29000000".into(),
        started: Some(at("2026-12-01T02:00:01Z")),
        completed: at("2026-12-01T02:00:41Z"),
        key: Some("shop/orders/20261201T020001Z.dump.sql.gz".into()),
        size_bytes: Some(3_565_158),
        retention_error: None,
    });
    status.backup_count = Some(7);
    status.last_verified_backup = Some(database_operator_api::LastVerifiedBackup {
        job: "orders-verify-29000100".into(),
        finished: at("2026-12-01T04:30:00Z"),
        succeeded: true,
        last_success: Some(at("2026-12-01T04:30:00Z")),
    });
    let r = report(&fetched);
    assert_eq!(r.backup.last, Some("2026-12-01T02:00:41Z".parse().unwrap()));
    assert_eq!(
        r.backup.last_verified_restore,
        Some("2026-12-01T04:30:00Z".parse().unwrap())
    );
    let text = render(&r, now(), Style::PLAIN);
    assert!(
        text.contains("last verified restore  2026-12-01 04:30:00Z (30m ago)"),
        "{text}"
    );
    assert!(text.contains(", 3.4 MiB, 7 stored"), "{text}");
    assert!(!text.contains("failed"), "{text}");

    // A failed drill after it: the last success stays, the failure is named.
    let status = fetched.cluster.status.as_mut().unwrap();
    status.last_verified_backup = Some(database_operator_api::LastVerifiedBackup {
        job: "orders-drill-2".into(),
        finished: at("2026-12-01T04:50:00Z"),
        succeeded: false,
        last_success: Some(at("2026-12-01T04:30:00Z")),
    });
    let r = report(&fetched);
    assert_eq!(r.backup.failed_drill.as_deref(), Some("orders-drill-2"));
    let text = render(&r, now(), Style::PLAIN);
    assert!(
        text.contains(
            "last verified restore  2026-12-01 04:30:00Z (30m ago) (newest drill orders-drill-2 failed)"
        ),
        "{text}"
    );
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(json["backup"]["failedDrill"], "orders-drill-2");
}
