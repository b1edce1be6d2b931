//! Database steps: carried out after the status is written, each mapped to the right call on
//! the right member, a failure reported once and retried soon.

use std::collections::HashMap;
use std::sync::Arc;

use database_operator_api::Engine;
use database_operator_api::failover::FailoverPhase;
use database_operator_core::position::{GtidSet, Position};
use database_operator_core::{DatabaseCommand, MemberFacts as CoreFacts, MemberPod, ServerRole};
use k8s_openapi::jiff::SignedDuration;

use super::*;
use crate::database::{
    Account, DatabaseIo, DbError, DbErrorKind, MemberFacts, MockDatabaseIo, Secret, SourceTls,
};
use crate::members::{MemberError, Members, Purpose};

const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

/// A shared mock, so a member can be dialled more than once.
#[derive(Clone)]
pub(crate) struct Shared(Arc<MockDatabaseIo>);

impl DatabaseIo for Shared {
    async fn probe(&self) -> Result<MemberFacts, DbError> {
        self.0.probe().await
    }
    async fn fence(&self) -> Result<(), DbError> {
        self.0.fence().await
    }
    async fn quarantine(&self) -> Result<(), DbError> {
        self.0.quarantine().await
    }
    async fn promote(&self) -> Result<(), DbError> {
        self.0.promote().await
    }
    async fn follow(&self, source_host: &str, port: u16, tls: &SourceTls) -> Result<(), DbError> {
        self.0.follow(source_host, port, tls).await
    }
    async fn set_password(
        &self,
        account: &Account,
        password: &Secret,
        retain_old: bool,
    ) -> Result<(), DbError> {
        self.0.set_password(account, password, retain_old).await
    }
    async fn discard_old_password(&self, account: &Account) -> Result<(), DbError> {
        self.0.discard_old_password(account).await
    }
    async fn set_semi_sync(&self, enabled: bool) -> Result<(), DbError> {
        self.0.set_semi_sync(enabled).await
    }
    async fn keep_member_slots(&self, slots: &[String]) -> Result<(), DbError> {
        self.0.keep_member_slots(slots).await
    }
    async fn reload_tls(&self) -> Result<(), DbError> {
        self.0.reload_tls().await
    }
}

/// Members backed by one mock each; a member without a mock cannot be dialled.
#[derive(Default)]
pub(crate) struct Fake {
    ios: HashMap<String, Arc<MockDatabaseIo>>,
    /// What the password Secret holds now: (fingerprint, value).
    password: Option<(String, String)>,
    /// The leadership term ([`Members::leadership_term`]): `None` is `Ok(None)`.
    term: Option<Result<std::time::Instant, String>>,
    /// The pods that mount the cluster's server certificate ([`Members::serves_tls`]).
    tls: Vec<String>,
}

impl Fake {
    fn with(mut self, pod: &str, io: MockDatabaseIo) -> Self {
        self.ios.insert(pod.to_owned(), Arc::new(io));
        self
    }

    fn serving_tls(mut self, pods: &[&str]) -> Self {
        self.tls = pods.iter().map(|p| (*p).to_owned()).collect();
        self
    }
}

impl Members for Fake {
    type Io = Shared;
    async fn dial(
        &self,
        cluster: &DatabaseCluster,
        pod: &str,
        purpose: Purpose,
    ) -> Result<Shared, MemberError> {
        assert_eq!(purpose, Purpose::Command);
        self.ios
            .get(pod)
            .cloned()
            .map(Shared)
            .ok_or_else(|| MemberError::NoPod {
                namespace: cluster.namespace().unwrap_or_default(),
                pod: pod.to_owned(),
            })
    }
    fn host(&self, _: &DatabaseCluster, pod: &str) -> Result<String, MemberError> {
        Ok(format!("{pod}.orders-headless.shop.svc"))
    }
    fn serves_tls(&self, _: &DatabaseCluster, pod: &str) -> bool {
        self.tls.iter().any(|p| p == pod)
    }
    async fn leadership_term(&self) -> Result<Option<std::time::Instant>, String> {
        self.term.clone().transpose()
    }
    async fn superuser_password(
        &self,
        _: &DatabaseCluster,
    ) -> Result<Option<(String, Secret)>, MemberError> {
        Ok(self
            .password
            .clone()
            .map(|(fingerprint, value)| (fingerprint, Secret::new(value))))
    }
}

/// Members nobody may dial (plans without database steps).
pub(crate) struct NoMembers;

impl Members for NoMembers {
    type Io = Shared;
    async fn dial(
        &self,
        _: &DatabaseCluster,
        pod: &str,
        _: Purpose,
    ) -> Result<Shared, MemberError> {
        panic!("{pod} dialled by a plan without database steps")
    }
    fn host(&self, _: &DatabaseCluster, pod: &str) -> Result<String, MemberError> {
        panic!("{pod} looked up by a plan without database steps")
    }
    async fn superuser_password(
        &self,
        _: &DatabaseCluster,
    ) -> Result<Option<(String, Secret)>, MemberError> {
        panic!("the password read by a plan without database steps")
    }
}

fn db_error(kind: DbErrorKind, message: &str) -> DbError {
    DbError {
        kind,
        engine: Engine::Mysql,
        host: "orders-1.orders-headless.shop.svc".into(),
        port: 3306,
        action: "promote",
        message: message.into(),
    }
}

fn postgres(mut c: DatabaseCluster) -> DatabaseCluster {
    c.spec.engine = database_operator_api::Engine::Postgresql;
    c
}

/// A running three-member MySQL cluster: every pod ready and labelled, orders-0 the primary.
fn running() -> Observed {
    let mut o = observed(cluster(true));
    o.pods = (0..3)
        .map(|i| MemberPod {
            name: format!("orders-{i}"),
            labels: BTreeMap::from([
                (labels::VERSION.to_owned(), "8.4.0".to_owned()),
                (labels::CLUSTER.to_owned(), "orders".to_owned()),
                (
                    labels::COMPONENT.to_owned(),
                    labels::COMPONENT_DATABASE.to_owned(),
                ),
            ]),
            ready: true,
            ..MemberPod::default()
        })
        .collect();
    // The pods run the template the plan renders (no roll is in progress).
    let template = rendered_template(&o);
    for pod in &mut o.pods {
        pod.labels
            .insert(labels::TEMPLATE.to_owned(), template.clone());
    }
    let o = converged(o);
    assert_eq!(
        o.cluster.status.as_ref().unwrap().primary_pod.as_deref(),
        Some("orders-0")
    );
    o
}

/// The hash of the pod template the plan renders for `o`'s cluster.
fn rendered_template(o: &Observed) -> String {
    database_operator_core::plan(o)
        .objects
        .iter()
        .find_map(|p| match &p.object {
            database_operator_core::DesiredObject::StatefulSet(sts) => sts
                .spec
                .template
                .metadata
                .as_ref()?
                .labels
                .as_ref()?
                .get(labels::TEMPLATE)
                .cloned(),
            _ => None,
        })
        .expect("the plan renders the StatefulSet with its template label")
}

fn replica(now: Timestamp, last: u64) -> CoreFacts {
    CoreFacts {
        reachable: true,
        role: Some(ServerRole::Replica),
        read_only: Some(true),
        position: Some(Position::Mysql(
            format!("{UUID}:1-{last}").parse::<GtidSet>().unwrap(),
        )),
        source: Some("orders-0".into()),
        replicating: Some(false),
        ..CoreFacts::unreachable(now)
    }
}

/// The primary orders-0 lost (pod not Ready, probe failing); orders-1 ahead of orders-2.
fn primary_lost() -> Observed {
    let mut o = running();
    o.pods[0].ready = false;
    o.member_facts = BTreeMap::from([
        ("orders-0".to_owned(), CoreFacts::unreachable(o.now)),
        ("orders-1".to_owned(), replica(o.now, 10)),
        ("orders-2".to_owned(), replica(o.now, 9)),
    ]);
    o
}

/// Plans after `seconds` with every fact probed then, and records the status as written.
fn pass(o: &mut Observed, seconds: i64) -> database_operator_core::Plan {
    o.now = o
        .now
        .checked_add(SignedDuration::from_secs(seconds))
        .unwrap();
    for f in o.member_facts.values_mut() {
        f.probed_at = o.now;
    }
    let p = database_operator_core::plan(o);
    o.cluster.status = Some(p.status.clone());
    p
}

#[tokio::test]
async fn the_status_is_written_before_the_lost_primary_is_stopped() {
    let mut o = primary_lost();
    let detecting = pass(&mut o, 0);
    assert!(detecting.database_commands.is_empty());
    // The delay (10 s by default) is over: the plan fences the old primary by deleting its pod.
    o.now = o.now.checked_add(SignedDuration::from_secs(10)).unwrap();
    for f in o.member_facts.values_mut() {
        f.probed_at = o.now;
    }
    let plan = database_operator_core::plan(&o);
    assert_eq!(
        plan.database_commands,
        [DatabaseCommand::StopPod {
            pod: "orders-0".into()
        }]
    );
    assert!(plan.status_changed);

    let mut io = MockClusterIo::new();
    let mut seq = Sequence::new();
    io.expect_patch_status()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, s| {
            s.failover
                .as_ref()
                .and_then(|f| f.operation.as_ref())
                .is_some_and(|op| op.phase == FailoverPhase::Fencing)
        })
        .returning(|_, _| Ok(None));
    io.expect_delete_pod()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|ns, pod, grace| {
            ns == "shop" && pod == "orders-0" && *grace == Some(FENCE_GRACE_SECONDS)
        })
        .returning(|_, _, _| Ok(None));
    // The primary label goes after the step.
    io.expect_label_pod()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, pod, role| {
            pod == "orders-0" && *role == database_operator_core::MemberRole::Replica
        })
        .returning(|_, _, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &Fake::default(), &o).await.unwrap();
    assert_eq!(done.database_failure, None);
    assert_eq!(done.writes, 3);
}

#[tokio::test]
async fn a_failed_status_write_carries_out_no_database_step() {
    let mut o = primary_lost();
    pass(&mut o, 0);
    o.now = o.now.checked_add(SignedDuration::from_secs(10)).unwrap();
    for f in o.member_facts.values_mut() {
        f.probed_at = o.now;
    }
    let mut io = MockClusterIo::new();
    io.expect_patch_status().times(1).returning(|_, _| {
        Err(Error::api(
            "patch",
            "DatabaseCluster",
            "shop",
            "orders",
            api_error(500, "etcd down"),
        ))
    });
    // No delete_pod expectation: deleting the pod now would fail the test.
    assert!(reconcile(&io, &Fake::default(), &o).await.is_err());
}

#[tokio::test]
async fn the_most_advanced_replica_is_promoted_through_its_own_driver() {
    let mut o = primary_lost();
    pass(&mut o, 0);
    pass(&mut o, 10);
    // The pod of the old primary is gone (its containers stopped): fenced.
    o.pods.retain(|p| p.name != "orders-0");
    o.member_facts.remove("orders-0");
    let mut promote = None;
    let mut before_status = None;
    for _ in 0..5 {
        let status = o.cluster.status.clone();
        let p = pass(&mut o, 1);
        if !p.database_commands.is_empty() {
            promote = Some(p);
            before_status = status;
            break;
        }
    }
    let plan = promote.expect("a promotion within five passes");
    assert_eq!(
        plan.database_commands,
        [DatabaseCommand::Promote {
            pod: "orders-1".into()
        }]
    );
    let mut chosen = MockDatabaseIo::new();
    chosen.expect_promote().times(1).returning(|| Ok(()));
    // orders-2 has a mock with no expectation: any call on it fails the test.
    let members = Fake::default()
        .with("orders-1", chosen)
        .with("orders-2", MockDatabaseIo::new());
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_label_pod().returning(|_, _, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    // The plan of the last pass, carried out from the status before it.
    let mut before = o.clone();
    before.cluster.status = before_status;
    assert_eq!(
        database_operator_core::plan(&before).database_commands,
        plan.database_commands
    );
    let done = reconcile(&io, &members, &before).await.unwrap();
    assert_eq!(done.database_failure, None);
}

fn cluster_of(engine_postgres: bool) -> DatabaseCluster {
    let c = cluster(true);
    if engine_postgres { postgres(c) } else { c }
}

#[tokio::test]
async fn each_step_is_the_right_call_on_the_right_member() {
    let mut m0 = MockDatabaseIo::new();
    let mut m1 = MockDatabaseIo::new();
    let mut m2 = MockDatabaseIo::new();
    let mut seq = Sequence::new();
    m0.expect_fence()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(()));
    m1.expect_promote()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(()));
    m0.expect_follow()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|host, port, tls| {
            host == "orders-1.orders-headless.shop.svc" && *port == 3306 && *tls == SourceTls::Plain
        })
        .returning(|_, _, _| Ok(()));
    // Unfence lifts a fence: the promote call on a primary.
    m1.expect_promote()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(()));
    // Quarantine keeps the member read-only and stops its replication (not only a fence).
    m2.expect_fence().never();
    m2.expect_quarantine()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(()));
    let members = Fake::default()
        .with("orders-0", m0)
        .with("orders-1", m1)
        .with("orders-2", m2);
    let mut io = MockClusterIo::new();
    io.expect_delete_pod()
        .times(1)
        .withf(|ns, pod, grace| ns == "shop" && pod == "orders-2" && grace.is_some())
        .returning(|_, _, _| Ok(None));
    let steps = [
        DatabaseCommand::Fence {
            pod: "orders-0".into(),
        },
        DatabaseCommand::Promote {
            pod: "orders-1".into(),
        },
        DatabaseCommand::Follow {
            pod: "orders-0".into(),
            source: "orders-1".into(),
            rewind: false,
        },
        DatabaseCommand::Unfence {
            pod: "orders-1".into(),
        },
        DatabaseCommand::Quarantine {
            pod: "orders-2".into(),
        },
        DatabaseCommand::StopPod {
            pod: "orders-2".into(),
        },
    ];
    let CommandsDone {
        writes, failure, ..
    } = database_commands(&io, &members, &cluster_of(false), &steps, None)
        .await
        .unwrap();
    assert_eq!((writes, failure), (1, None));
}

/// A Follow is checked when both pods mount the cluster's certificate, encrypted (unchecked)
/// when only the source does (it may refuse plain connections: a pod of an earlier template
/// following a member that has TLS), plain when the source has no TLS.
#[tokio::test]
async fn a_follow_uses_tls_as_far_as_the_two_pods_have_it() {
    let follow = |source: &str| DatabaseCommand::Follow {
        pod: "orders-0".into(),
        source: source.into(),
        rewind: false,
    };
    for (tls, want) in [
        (&["orders-0", "orders-1"][..], "checked"),
        (&["orders-1"][..], "encrypted"),
        (&["orders-0"][..], "plain"),
        (&[][..], "plain"),
    ] {
        let mut m0 = MockDatabaseIo::new();
        let wanted = match want {
            "checked" => SourceTls::Checked {
                ca_file: database_operator_core::tls::replica_ca_file(),
            },
            "encrypted" => SourceTls::Encrypted,
            _ => SourceTls::Plain,
        };
        // Checked: by the source's DNS name; otherwise as the address resolver says (here the
        // same name).
        m0.expect_follow()
            .times(1)
            .withf(move |host, port, tls| {
                host == "orders-1.orders-headless.shop.svc" && *port == 3306 && *tls == wanted
            })
            .returning(|_, _, _| Ok(()));
        let members = Fake::default().with("orders-0", m0).serving_tls(tls);
        let io = MockClusterIo::new();
        let done = database_commands(
            &io,
            &members,
            &cluster_of(false),
            &[follow("orders-1")],
            None,
        )
        .await
        .unwrap();
        assert_eq!(done.failure, None, "{tls:?}");
    }
}

#[tokio::test]
async fn a_postgresql_member_that_cannot_follow_restarts_as_a_standby() {
    let mut m0 = MockDatabaseIo::new();
    m0.expect_follow().times(1).returning(|_, _, _| {
        Err(DbError {
            engine: Engine::Postgresql,
            ..db_error(DbErrorKind::NotSupported, "a running primary cannot follow")
        })
    });
    // A rewind is never tried at run time: the pod restarts and init.sh rewinds.
    let members = Fake::default()
        .with("orders-0", m0)
        .with("orders-2", MockDatabaseIo::new());
    let mut io = MockClusterIo::new();
    io.expect_delete_pod()
        .times(2)
        // A healthy server restarting: the pod's own grace period, for a clean shutdown.
        .withf(|_, pod, grace| (pod == "orders-0" || pod == "orders-2") && grace.is_none())
        .returning(|_, _, _| Ok(None));
    let steps = [
        DatabaseCommand::Follow {
            pod: "orders-0".into(),
            source: "orders-1".into(),
            rewind: false,
        },
        DatabaseCommand::Follow {
            pod: "orders-2".into(),
            source: "orders-1".into(),
            rewind: true,
        },
    ];
    let CommandsDone {
        writes, failure, ..
    } = database_commands(&io, &members, &cluster_of(true), &steps, None)
        .await
        .unwrap();
    assert_eq!((writes, failure), (2, None));

    // The same refusal from MySQL is a failure, not a restart.
    let mut m0 = MockDatabaseIo::new();
    m0.expect_follow()
        .times(1)
        .returning(|_, _, _| Err(db_error(DbErrorKind::NotSupported, "no")));
    let members = Fake::default().with("orders-0", m0);
    let io = MockClusterIo::new();
    let CommandsDone {
        writes, failure, ..
    } = database_commands(&io, &members, &cluster_of(false), &steps[..1], None)
        .await
        .unwrap();
    assert_eq!(writes, 0);
    assert_eq!(failure.unwrap().kind, "not_supported");
}

#[tokio::test]
async fn a_failed_step_stops_the_later_steps_and_is_reported_once() {
    let mut m1 = MockDatabaseIo::new();
    m1.expect_promote()
        .times(1)
        .returning(|| Err(db_error(DbErrorKind::Unreachable, "connection refused")));
    // orders-0 must not be touched after the failure.
    let members = Fake::default()
        .with("orders-1", m1)
        .with("orders-0", MockDatabaseIo::new());
    let io = MockClusterIo::new();
    let steps = [
        DatabaseCommand::Promote {
            pod: "orders-1".into(),
        },
        DatabaseCommand::Fence {
            pod: "orders-0".into(),
        },
    ];
    let failure = database_commands(&io, &members, &cluster_of(false), &steps, None)
        .await
        .unwrap()
        .failure;
    let failure = failure.unwrap();
    assert_eq!(
        (failure.pod.as_str(), failure.command, failure.kind),
        ("orders-1", "promote", "unreachable")
    );
    assert!(
        failure.to_string().contains("connection refused"),
        "{failure}"
    );

    // A member that cannot be dialled fails the same way.
    let failure = database_commands(&io, &Fake::default(), &cluster_of(false), &steps, None)
        .await
        .unwrap()
        .failure;
    assert_eq!(failure.unwrap().kind, "no_address");

    // One event per distinct failure.
    let mut io = MockClusterIo::new();
    io.expect_publish()
        .times(2)
        .withf(|_, e| {
            e.type_ == EventType::Warning
                && e.reason == "DatabaseStepFailed"
                && e.message.contains("orders-1")
        })
        .returning(|_, _| Ok(()));
    let seen = Failures::default();
    let c = cluster(true);
    let first = DatabaseFailure {
        pod: "orders-1".into(),
        command: "promote",
        kind: "unreachable",
        message: "connection refused".into(),
    };
    report_database_failure(&io, &c, &first, &seen).await;
    report_database_failure(&io, &c, &first, &seen).await;
    let other = DatabaseFailure {
        kind: "other",
        message: "timeout".into(),
        ..first
    };
    report_database_failure(&io, &c, &other, &seen).await;
}

#[tokio::test]
async fn a_failed_step_still_moves_labels_and_asks_to_look_again_soon() {
    let mut o = running();
    // The primary answers read-only (it restarted before its label was set): the plan gives it
    // its writes back.
    o.member_facts = BTreeMap::from([
        (
            "orders-0".to_owned(),
            CoreFacts {
                role: Some(ServerRole::Primary),
                source: None,
                ..replica(o.now, 10)
            },
        ),
        ("orders-1".to_owned(), replica(o.now, 10)),
        ("orders-2".to_owned(), replica(o.now, 10)),
    ]);
    let plan = database_operator_core::plan(&o);
    assert_eq!(
        plan.database_commands,
        [DatabaseCommand::Unfence {
            pod: "orders-0".into()
        }]
    );
    let mut m0 = MockDatabaseIo::new();
    m0.expect_promote()
        .times(1)
        .returning(|| Err(db_error(DbErrorKind::Other, "lock wait timeout")));
    let members = Fake::default().with("orders-0", m0);
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_label_pod().returning(|_, _, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &members, &o).await.unwrap();
    assert_eq!(done.database_failure.as_ref().unwrap().command, "unfence");
    assert!(done.requeue_after.unwrap() <= DATABASE_RETRY);
}

fn root_accounts() -> Vec<database_operator_core::PasswordAccount> {
    ["localhost", "%"]
        .into_iter()
        .map(|host| database_operator_core::PasswordAccount {
            user: "root".into(),
            host: Some(host.into()),
            keep_unix_socket: host == "localhost",
        })
        .collect()
}

#[tokio::test]
async fn a_password_step_sets_every_account_with_the_secret_it_was_planned_for() {
    let mut m0 = MockDatabaseIo::new();
    let mut seq = mockall::Sequence::new();
    for host in ["localhost", "%"] {
        m0.expect_set_password()
            .times(1)
            .in_sequence(&mut seq)
            .withf(move |account, password, retain| {
                account.user == "root"
                    && account.host == host
                    && account.unix_socket == (host == "localhost")
                    && password.expose() == "n3w"
                    && *retain
            })
            .returning(|_, _, _| Ok(()));
    }
    let members = Fake {
        password: Some(("fp-2".into(), "n3w".into())),
        ..Fake::default()
    }
    .with("orders-0", m0);
    let step = DatabaseCommand::SetPassword {
        pod: "orders-0".into(),
        accounts: root_accounts(),
        fingerprint: "fp-2".into(),
        retain_old: true,
    };
    let done = database_commands(
        &MockClusterIo::new(),
        &members,
        &cluster_of(false),
        &[step],
        None,
    )
    .await
    .unwrap();
    let outcome = done.password.expect("an outcome");
    assert_eq!(outcome.action, database_operator_core::PasswordAction::Set);
    assert_eq!(outcome.fingerprint, "fp-2");
    assert_eq!(outcome.error, None);
    assert!(done.failure.is_none());
}

#[tokio::test]
async fn a_password_step_is_skipped_when_the_secret_moved_on() {
    // No mock for orders-0: dialling it would fail the test's expectations.
    let members = Fake {
        password: Some(("fp-3".into(), "newer".into())),
        ..Fake::default()
    };
    let step = DatabaseCommand::SetPassword {
        pod: "orders-0".into(),
        accounts: root_accounts(),
        fingerprint: "fp-2".into(),
        retain_old: false,
    };
    let done = database_commands(
        &MockClusterIo::new(),
        &members,
        &cluster_of(false),
        &[step],
        None,
    )
    .await
    .unwrap();
    assert_eq!(done.password, None);
    assert!(done.failure.is_none());
}

#[tokio::test]
async fn a_failed_password_step_is_an_outcome_with_the_error_and_discarding_reads_no_secret() {
    let mut m0 = MockDatabaseIo::new();
    m0.expect_set_password().times(1).returning(|_, _, _| {
        Err(db_error(
            DbErrorKind::AuthFailed,
            "access denied for database_operator",
        ))
    });
    m0.expect_discard_old_password()
        .times(2)
        .returning(|_| Ok(()));
    // `password: None` would skip a SetPassword: the discard below must not need it.
    let members = Fake {
        password: Some(("fp-2".into(), "n3w".into())),
        ..Fake::default()
    }
    .with("orders-0", m0);
    let set = DatabaseCommand::SetPassword {
        pod: "orders-0".into(),
        accounts: root_accounts(),
        fingerprint: "fp-2".into(),
        retain_old: true,
    };
    let done = database_commands(
        &MockClusterIo::new(),
        &members,
        &cluster_of(false),
        &[set],
        None,
    )
    .await
    .unwrap();
    let outcome = done.password.expect("an outcome");
    assert!(
        outcome
            .error
            .as_deref()
            .is_some_and(|e| e.contains("access denied")),
        "{outcome:?}"
    );
    assert!(done.failure.is_none(), "a password failure is an outcome");

    let discard = DatabaseCommand::DiscardOldPassword {
        pod: "orders-0".into(),
        accounts: root_accounts(),
        fingerprint: "fp-2".into(),
    };
    let members = Fake {
        password: None,
        ios: members.ios,
        ..Fake::default()
    };
    let done = database_commands(
        &MockClusterIo::new(),
        &members,
        &cluster_of(false),
        &[discard],
        None,
    )
    .await
    .unwrap();
    let outcome = done.password.expect("an outcome");
    assert_eq!(
        outcome.action,
        database_operator_core::PasswordAction::DiscardOld
    );
    assert_eq!(outcome.error, None);
}

#[tokio::test]
async fn sync_mode_switches_semi_sync_on_on_the_primary_once_a_replica_replicates() {
    let mut o = running();
    o.cluster.spec.replication = Some(database_operator_api::failover::ReplicationSpec {
        mode: database_operator_api::failover::ReplicationMode::Sync,
    });
    // The objects rendered for sync mode, as stored.
    let mut o = super::converged(o);
    let primary = CoreFacts {
        reachable: true,
        role: Some(ServerRole::Primary),
        read_only: Some(false),
        semi_sync_source: Some(false),
        ..CoreFacts::unreachable(o.now)
    };
    let following = CoreFacts {
        replicating: Some(true),
        semi_sync_source: Some(false),
        ..replica(o.now, 10)
    };
    o.member_facts = BTreeMap::from([
        ("orders-0".to_owned(), primary),
        ("orders-1".to_owned(), following.clone()),
        ("orders-2".to_owned(), following),
    ]);
    let plan = pass(&mut o, 1);
    // (The password step of a primary seen writable for the first time comes after it.)
    let semi_sync: Vec<&DatabaseCommand> = plan
        .database_commands
        .iter()
        .filter(|s| matches!(s, DatabaseCommand::SetSemiSync { .. }))
        .collect();
    assert_eq!(
        semi_sync,
        [&DatabaseCommand::SetSemiSync {
            pod: "orders-0".into(),
            enabled: true
        }]
    );
    let mut m0 = MockDatabaseIo::new();
    m0.expect_set_password().returning(|_, _, _| Ok(()));
    m0.expect_set_semi_sync()
        .withf(|enabled| *enabled)
        .times(1)
        .returning(|_| Ok(()));
    // The replicas have mocks with no expectation: any call on them fails the test.
    let members = Fake::default()
        .with("orders-0", m0)
        .with("orders-1", MockDatabaseIo::new())
        .with("orders-2", MockDatabaseIo::new());
    let mut io = MockClusterIo::new();
    io.expect_patch_status().returning(|_, _| Ok(None));
    io.expect_label_pod().returning(|_, _, _| Ok(None));
    io.expect_publish().returning(|_, _| Ok(()));
    let done = reconcile(&io, &members, &o).await.unwrap();
    assert_eq!(done.database_failure, None);
}

#[tokio::test]
async fn a_switchover_stop_ends_the_sessions_then_deletes_the_pod_within_a_short_grace() {
    let mut m0 = MockDatabaseIo::new();
    let mut seq = Sequence::new();
    m0.expect_fence()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(()));
    let members = Fake::default().with("orders-0", m0);
    let mut io = MockClusterIo::new();
    io.expect_delete_pod()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|ns, pod, grace| {
            ns == "shop" && pod == "orders-0" && *grace == Some(STOP_SERVER_GRACE_SECONDS)
        })
        .returning(|_, _, _| Ok(None));
    let steps = [DatabaseCommand::StopServer {
        pod: "orders-0".into(),
    }];
    let CommandsDone {
        writes, failure, ..
    } = database_commands(&io, &members, &cluster_of(true), &steps, None)
        .await
        .unwrap();
    assert_eq!((writes, failure), (1, None));

    // A server that does not answer is stopped all the same.
    let mut m0 = MockDatabaseIo::new();
    m0.expect_fence()
        .times(1)
        .returning(|| Err(db_error(DbErrorKind::Unreachable, "connection refused")));
    let members = Fake::default().with("orders-0", m0);
    let mut io = MockClusterIo::new();
    io.expect_delete_pod()
        .times(1)
        .withf(|_, pod, grace| pod == "orders-0" && *grace == Some(STOP_SERVER_GRACE_SECONDS))
        .returning(|_, _, _| Ok(None));
    let CommandsDone {
        writes, failure, ..
    } = database_commands(&io, &members, &cluster_of(true), &steps, None)
        .await
        .unwrap();
    assert_eq!((writes, failure), (1, None));
}

#[tokio::test]
async fn a_replica_that_cannot_confirm_its_leadership_writes_the_status_but_takes_no_step() {
    let mut o = primary_lost();
    pass(&mut o, 0);
    o.now = o.now.checked_add(SignedDuration::from_secs(10)).unwrap();
    for f in o.member_facts.values_mut() {
        f.probed_at = o.now;
    }
    let mut io = MockClusterIo::new();
    // The status write carries a precondition of its own; the step needs the Lease.
    io.expect_patch_status().times(1).returning(|_, _| Ok(None));
    io.expect_delete_pod().never();
    io.expect_label_pod().never();
    io.expect_publish().returning(|_, _| Ok(()));
    let members = Fake {
        term: Some(Err("the leader Lease is held by operator-b".into())),
        ..Fake::default()
    };
    let error = reconcile(&io, &members, &o).await.unwrap_err();
    assert!(
        matches!(&error, Error::Leadership { why } if why.contains("operator-b")),
        "{error}"
    );
    assert_eq!(error.category(), crate::error::ErrorCategory::Leadership);
}

#[tokio::test]
async fn no_database_step_runs_after_the_confirmed_term_ended() {
    let mut m0 = MockDatabaseIo::new();
    m0.expect_fence().never();
    m0.expect_promote().never();
    let members = Fake::default().with("orders-0", m0);
    let mut io = MockClusterIo::new();
    io.expect_delete_pod().never();
    let ended = std::time::Instant::now()
        .checked_sub(Duration::from_millis(1))
        .unwrap();
    for step in [
        DatabaseCommand::Fence {
            pod: "orders-0".into(),
        },
        DatabaseCommand::StopPod {
            pod: "orders-0".into(),
        },
        DatabaseCommand::Promote {
            pod: "orders-0".into(),
        },
    ] {
        let result = database_commands(
            &io,
            &members,
            &cluster_of(true),
            std::slice::from_ref(&step),
            Some(ended),
        )
        .await;
        assert!(
            matches!(result, Err(Error::Leadership { ref why }) if why.contains(step.name())),
            "{step:?}: {:?}",
            result.err()
        );
    }
    // Within the term: carried out.
    let mut m0 = MockDatabaseIo::new();
    m0.expect_fence().times(1).returning(|| Ok(()));
    let members = Fake::default().with("orders-0", m0);
    let later = std::time::Instant::now() + Duration::from_secs(30);
    let steps = [DatabaseCommand::Fence {
        pod: "orders-0".into(),
    }];
    let done = database_commands(&io, &members, &cluster_of(true), &steps, Some(later))
        .await
        .unwrap();
    assert_eq!(done.failure, None);
}
