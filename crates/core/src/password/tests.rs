use proptest::prelude::*;

use super::*;

const T0: i64 = 1_800_000_000;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(T0 + s).unwrap()
}

fn secret_ref() -> SecretKeySelector {
    SecretKeySelector {
        name: "orders-pw".into(),
        key: "password".into(),
    }
}

fn present(fp: &str) -> SecretState {
    SecretState::Present {
        fingerprint: fp.into(),
    }
}

fn primary_up(probed: i64) -> MemberFacts {
    MemberFacts {
        role: Some(ServerRole::Primary),
        read_only: Some(false),
        reachable: true,
        ..MemberFacts::unreachable(at(probed))
    }
}

/// A steady cluster of `engine` with password `fp` applied at 0, observed at `now`.
struct Case {
    engine: Engine,
    secret: SecretState,
    previous: Option<PasswordStatus>,
    condition: Option<Condition>,
    outcome: Option<PasswordOutcome>,
    facts: Option<MemberFacts>,
    /// The unkeyed fingerprint beside a keyed `secret`.
    unkeyed: Option<String>,
    failover: bool,
    initializing: bool,
    grace: u64,
    now: i64,
}

impl Case {
    fn new(engine: Engine) -> Self {
        Self {
            engine,
            secret: present("fp-a"),
            previous: Some(applied("fp-a", 0)),
            condition: None,
            outcome: None,
            facts: None,
            unkeyed: None,
            failover: false,
            initializing: false,
            grace: 3600,
            now: 100,
        }
    }

    fn run(&self) -> Outcome {
        let r = secret_ref();
        let facts = self.facts.clone();
        rotate(&Inputs {
            cluster: "shop/orders",
            namespace: "shop",
            engine: self.engine,
            secret_ref: &r,
            secret: &self.secret,
            unkeyed: self.unkeyed.as_deref(),
            grace: Duration::from_secs(self.grace),
            previous: self.previous.as_ref(),
            previous_condition: self.condition.as_ref(),
            outcome: self.outcome.as_ref(),
            primary: "orders-0",
            primary_facts: facts.as_ref(),
            failover_in_flight: self.failover,
            initializing: self.initializing,
            now: at(self.now),
        })
    }
}

fn applied(fp: &str, t: i64) -> PasswordStatus {
    PasswordStatus {
        fingerprint: Some(fp.into()),
        applied_at: Some(Time(at(t))),
        ..PasswordStatus::default()
    }
}

fn set_ok(fp: &str, t: i64) -> PasswordOutcome {
    PasswordOutcome {
        action: PasswordAction::Set,
        fingerprint: fp.into(),
        at: at(t),
        error: None,
    }
}

fn reasons_of(o: &Outcome) -> Vec<&'static str> {
    o.events.iter().map(|e| e.reason.as_str()).collect()
}

#[test]
fn superuser_accounts_are_those_the_init_scripts_create() {
    let names = |e| {
        superuser_accounts(e)
            .into_iter()
            .map(|a| format!("{}@{}", a.user, a.host.unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(Engine::Postgresql), ["postgres@"]);
    assert_eq!(names(Engine::Mysql), ["root@localhost", "root@%"]);
    assert_eq!(names(Engine::Mariadb), ["root@localhost", "root@%"]);
    assert!(superuser_accounts(Engine::Mariadb)[0].keep_unix_socket);
    assert!(
        !superuser_accounts(Engine::Mysql)
            .iter()
            .any(|a| a.keep_unix_socket)
    );
    // The init scripts really create them with the password (a test that fails when a script
    // adds or drops an account without this list following).
    let mysql = crate::render::scripts::MYSQL_INIT;
    assert!(mysql.contains("ALTER USER root@localhost IDENTIFIED BY $password;"));
    assert!(mysql.contains("CREATE USER root@'%' IDENTIFIED BY $password;"));
    let mariadb = crate::render::scripts::MARIADB_INIT;
    assert!(mariadb.contains("ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD($password) OR unix_socket;"));
    assert!(mariadb.contains("CREATE USER root@'%' IDENTIFIED BY $password;"));
    let postgres = crate::render::scripts::POSTGRESQL_INIT;
    assert!(postgres.contains("--username=postgres --pwfile="));
}

#[test]
fn a_new_cluster_records_the_password_it_is_initialized_with() {
    let mut case = Case::new(Engine::Postgresql);
    case.previous = None;
    case.initializing = true;
    let o = case.run();
    assert_eq!(o.status, Some(applied("fp-a", 100)));
    assert!(o.verdict.applied);
    assert_eq!(o.verdict.reason, reasons::APPLIED);
    assert!(o.commands.is_empty());
    assert!(o.events.is_empty());
}

#[test]
fn an_existing_cluster_without_a_record_gets_the_secret_applied_once() {
    let mut case = Case::new(Engine::Mariadb);
    case.previous = None;
    case.facts = Some(primary_up(95));
    let o = case.run();
    assert_eq!(
        o.commands,
        [DatabaseCommand::SetPassword {
            pod: "orders-0".into(),
            accounts: superuser_accounts(Engine::Mariadb),
            fingerprint: "fp-a".into(),
            retain_old: false,
        }]
    );
    assert_eq!(o.verdict.reason, reasons::APPLYING);
    assert!(
        o.verdict.message.contains("no record"),
        "{}",
        o.verdict.message
    );
    assert!(o.events.is_empty(), "{:?}", o.events);
}

/// A status of a release before keyed fingerprints records the unkeyed fingerprint of the
/// Secret's value: it is moved to the keyed one with no command and no event, on every engine.
/// A status that records another value (the password changed meanwhile) is still applied.
#[test]
fn an_unkeyed_record_of_the_same_value_is_rekeyed_without_a_password_change() {
    for engine in Engine::ALL {
        let mut case = Case::new(engine);
        case.facts = Some(primary_up(95));
        case.secret = present("keyed-a");
        case.unkeyed = Some("fp-a".into());
        let o = case.run();
        assert!(o.commands.is_empty(), "{engine:?}: {:?}", o.commands);
        assert!(o.events.is_empty(), "{engine:?}: {:?}", o.events);
        assert!(o.verdict.applied, "{engine:?}: {:?}", o.verdict);
        let status = o.status.unwrap();
        assert_eq!(status.fingerprint.as_deref(), Some("keyed-a"));
        assert_eq!(
            status.applied_at,
            applied("fp-a", 0).applied_at,
            "not a new application"
        );

        // The Secret changed since the record: its unkeyed fingerprint is another one.
        case.unkeyed = Some("fp-b".into());
        case.secret = present("keyed-b");
        let o = case.run();
        assert!(
            matches!(&o.commands[..], [DatabaseCommand::SetPassword { fingerprint, .. }] if fingerprint == "keyed-b"),
            "{engine:?}: {:?}",
            o.commands
        );
        assert_eq!(o.status.unwrap().fingerprint.as_deref(), Some("fp-a"));
    }
}

#[test]
fn a_steady_cluster_does_nothing() {
    let mut case = Case::new(Engine::Mysql);
    case.facts = Some(primary_up(95));
    let o = case.run();
    assert!(o.commands.is_empty());
    assert!(o.events.is_empty());
    assert_eq!(o.status, Some(applied("fp-a", 0)));
    assert!(o.verdict.applied);
    assert!(o.verdict.message.contains("shop/orders-pw key password"));
}

#[test]
fn a_changed_secret_is_applied_on_the_reachable_primary_and_recorded_only_once_it_succeeded() {
    for engine in Engine::ALL {
        let mut case = Case::new(engine);
        case.secret = present("fp-b");
        case.facts = Some(primary_up(95));
        let o = case.run();
        assert_eq!(
            o.commands,
            [DatabaseCommand::SetPassword {
                pod: "orders-0".into(),
                accounts: superuser_accounts(engine),
                fingerprint: "fp-b".into(),
                retain_old: engine == Engine::Mysql,
            }],
            "{engine}"
        );
        let status = o.status.clone().unwrap();
        assert_eq!(status.fingerprint.as_deref(), Some("fp-a"), "not assumed");
        assert_eq!(status.pending.as_deref(), Some("fp-b"));
        assert_eq!(o.verdict.reason, reasons::APPLYING);
        assert_eq!(reasons_of(&o), ["PasswordChanged"]);
        assert_eq!(o.requeue_after, Some(STEP_REQUEUE));

        // The next pass without an outcome (the result was lost): the same step, no new event.
        case.previous = Some(status.clone());
        case.now = 102;
        let again = case.run();
        assert_eq!(again.commands, o.commands);
        assert!(again.events.is_empty());
        assert_eq!(again.status, Some(status.clone()));

        // The runtime reports success: recorded, no step.
        case.outcome = Some(set_ok("fp-b", 101));
        let done = case.run();
        assert!(done.commands.is_empty(), "{engine}: {:?}", done.commands);
        let recorded = done.status.clone().unwrap();
        assert_eq!(recorded.fingerprint.as_deref(), Some("fp-b"));
        assert_eq!(recorded.applied_at, Some(Time(at(101))));
        assert_eq!(recorded.pending, None);
        assert_eq!(
            recorded.old_password_expires,
            (engine == Engine::Mysql).then(|| Time(at(101 + 3600)))
        );
        assert!(done.verdict.applied);
        assert_eq!(reasons_of(&done), ["PasswordApplied"]);

        // The outcome stays in the runtime's cache: the pass after is steady.
        case.previous = Some(recorded.clone());
        case.now = 103;
        let steady = case.run();
        assert_eq!(steady.status, Some(recorded));
        assert!(steady.events.is_empty());
        assert!(steady.commands.is_empty());
    }
}

#[test]
fn nothing_is_applied_without_a_fresh_writable_primary_or_during_a_failover() {
    let waits = |case: &Case, why: &str| {
        let o = case.run();
        assert!(o.commands.is_empty(), "{why}");
        assert_eq!(o.verdict.reason, reasons::APPLYING);
        assert!(
            o.verdict.message.contains("waiting"),
            "{why}: {}",
            o.verdict.message
        );
        assert_eq!(o.status.unwrap().pending.as_deref(), Some("fp-b"));
    };
    let mut case = Case::new(Engine::Mysql);
    case.secret = present("fp-b");
    waits(&case, "no facts");
    case.facts = Some(primary_up(50));
    waits(&case, "stale facts");
    case.facts = Some(MemberFacts::unreachable(at(99)));
    waits(&case, "unreachable");
    case.facts = Some(MemberFacts {
        read_only: Some(true),
        ..primary_up(99)
    });
    waits(&case, "fenced");
    case.facts = Some(MemberFacts {
        role: Some(ServerRole::Replica),
        ..primary_up(99)
    });
    waits(&case, "a replica");
    case.facts = Some(primary_up(99));
    case.failover = true;
    waits(&case, "failover in flight");
}

#[test]
fn a_missing_secret_or_key_leaves_the_database_untouched_and_names_them() {
    for (secret, reason, text) in [
        (
            SecretState::Missing,
            reasons::SECRET_NOT_FOUND,
            "Secret shop/orders-pw not found",
        ),
        (
            SecretState::KeyMissing,
            reasons::SECRET_KEY_MISSING,
            "Secret shop/orders-pw has no key password",
        ),
        (
            SecretState::Unusable {
                problem: crate::PasswordProblem::LineBreak,
            },
            reasons::PASSWORD_UNUSABLE,
            "Secret shop/orders-pw key password: the value holds a line break (CR or LF)",
        ),
    ] {
        let mut case = Case::new(Engine::Mysql);
        case.secret = secret;
        case.facts = Some(primary_up(99));
        // Even with a due discard of the old password: nothing at all.
        case.previous = Some(PasswordStatus {
            old_password_expires: Some(Time(at(10))),
            pending: Some("fp-b".into()),
            pending_since: Some(Time(at(5))),
            ..applied("fp-a", 0)
        });
        let o = case.run();
        assert!(o.commands.is_empty());
        assert!(!o.verdict.applied);
        assert_eq!(o.verdict.reason, reason);
        assert!(o.verdict.message.contains(text), "{}", o.verdict.message);
        let status = o.status.unwrap();
        assert_eq!(status.fingerprint.as_deref(), Some("fp-a"));
        assert_eq!(status.pending, None);
    }
}

#[test]
fn a_failure_is_reported_once_and_retried_after_the_delay() {
    let mut case = Case::new(Engine::Postgresql);
    case.secret = present("fp-b");
    case.facts = Some(primary_up(99));
    case.previous = Some(PasswordStatus {
        pending: Some("fp-b".into()),
        pending_since: Some(Time(at(90))),
        ..applied("fp-a", 0)
    });
    case.outcome = Some(PasswordOutcome {
        error: Some("permission denied to alter role".into()),
        ..set_ok("fp-b", 95)
    });
    let o = case.run();
    assert!(o.commands.is_empty(), "retried only after {RETRY_AFTER:?}");
    assert_eq!(o.verdict.reason, reasons::APPLY_FAILED);
    assert!(
        o.verdict
            .message
            .contains("permission denied to alter role")
    );
    assert_eq!(reasons_of(&o), ["PasswordApplyFailed"]);
    assert_eq!(o.requeue_after, Some(Duration::from_secs(25)));
    assert_eq!(
        o.status.as_ref().unwrap().fingerprint.as_deref(),
        Some("fp-a")
    );

    // The condition already says it: no second event; the retry comes when due.
    case.condition = Some(crate::status::transition(
        &[],
        conditions::PASSWORD_APPLIED,
        false,
        o.verdict.reason,
        o.verdict.message.clone(),
        None,
        at(100),
    ));
    case.now = 125;
    let retry = case.run();
    assert!(retry.events.is_empty());
    assert_eq!(retry.commands.len(), 1);
    assert!(
        matches!(&retry.commands[0], DatabaseCommand::SetPassword { fingerprint, .. } if fingerprint == "fp-b")
    );
}

#[test]
fn a_success_for_an_older_value_is_recorded_and_the_newer_one_still_applied() {
    let mut case = Case::new(Engine::Mariadb);
    case.secret = present("fp-c");
    case.facts = Some(primary_up(99));
    case.previous = Some(PasswordStatus {
        pending: Some("fp-b".into()),
        pending_since: Some(Time(at(90))),
        ..applied("fp-a", 0)
    });
    case.outcome = Some(set_ok("fp-b", 95));
    let o = case.run();
    let status = o.status.clone().unwrap();
    assert_eq!(status.fingerprint.as_deref(), Some("fp-b"));
    assert_eq!(status.pending.as_deref(), Some("fp-c"));
    assert!(
        matches!(&o.commands[..], [DatabaseCommand::SetPassword { fingerprint, .. }] if fingerprint == "fp-c")
    );
    assert_eq!(reasons_of(&o), ["PasswordApplied", "PasswordChanged"]);
}

/// Status keeps whole seconds (the API server drops the fraction): the old password's deadline is
/// rounded up, so reading it back never ends the grace period before `applied + grace`.
#[test]
fn mysql_grace_deadline_survives_whole_second_status() {
    let mut case = Case::new(Engine::Mysql);
    case.grace = 10;
    case.facts = Some(primary_up(99));
    let applied_at = at(100)
        .checked_add(SignedDuration::from_millis(300))
        .unwrap();
    case.outcome = Some(PasswordOutcome {
        at: applied_at,
        ..set_ok("fp-b", 100)
    });
    case.secret = present("fp-b");
    case.previous = Some(PasswordStatus {
        pending: Some("fp-b".into()),
        ..applied("fp-a", 50)
    });
    let o = case.run();
    let expires = o.status.unwrap().old_password_expires.unwrap().0;
    assert_eq!(expires, at(111), "110.3 s rounded up to the second");
    let truncated = Timestamp::from_second(expires.as_second()).unwrap();
    assert!(
        truncated
            >= applied_at
                .checked_add(SignedDuration::from_secs(10))
                .unwrap()
    );
}

#[test]
fn mysql_discards_the_old_password_after_the_grace_period() {
    let mut case = Case::new(Engine::Mysql);
    case.facts = Some(primary_up(99));
    case.previous = Some(PasswordStatus {
        old_password_expires: Some(Time(at(160))),
        ..applied("fp-a", 100 - 3600 + 60)
    });
    let o = case.run();
    assert!(o.commands.is_empty(), "not before the grace period ends");
    assert_eq!(o.requeue_after, Some(Duration::from_secs(60)));
    assert!(o.verdict.message.contains("keeps working until"));

    case.now = 160;
    case.facts = Some(primary_up(159));
    let o = case.run();
    assert_eq!(
        o.commands,
        [DatabaseCommand::DiscardOldPassword {
            pod: "orders-0".into(),
            accounts: superuser_accounts(Engine::Mysql),
            fingerprint: "fp-a".into(),
        }]
    );
    assert!(o.verdict.applied, "the new password is applied meanwhile");

    case.outcome = Some(PasswordOutcome {
        action: PasswordAction::DiscardOld,
        ..set_ok("fp-a", 161)
    });
    case.now = 162;
    let done = case.run();
    assert!(done.commands.is_empty());
    let status = done.status.clone().unwrap();
    assert_eq!(status.old_password_expires, None);
    assert_eq!(status.old_password_discarded_at, Some(Time(at(161))));
    assert_eq!(reasons_of(&done), ["OldPasswordDiscarded"]);
}

#[test]
fn mariadb_and_postgresql_never_discard() {
    for engine in [Engine::Mariadb, Engine::Postgresql] {
        let mut case = Case::new(engine);
        case.facts = Some(primary_up(99));
        case.previous = Some(PasswordStatus {
            // Not written for these engines; even if it were, nothing is planned.
            old_password_expires: Some(Time(at(0))),
            ..applied("fp-a", 0)
        });
        assert!(case.run().commands.is_empty(), "{engine}");
        case.previous = None;
        case.secret = present("fp-b");
        case.outcome = Some(set_ok("fp-b", 50));
        let o = case.run();
        assert_eq!(o.status.unwrap().old_password_expires, None, "{engine}");
    }
}

fn engine() -> impl Strategy<Value = Engine> {
    prop::sample::select(Engine::ALL.to_vec())
}

fn secret() -> impl Strategy<Value = SecretState> {
    prop_oneof![
        Just(SecretState::Missing),
        Just(SecretState::KeyMissing),
        Just(SecretState::Unusable {
            problem: crate::PasswordProblem::Nul
        }),
        prop::sample::select(vec!["fp-a", "fp-b", "fp-c"]).prop_map(present),
    ]
}

fn outcome() -> impl Strategy<Value = Option<PasswordOutcome>> {
    prop::option::of(
        (
            prop::bool::ANY,
            prop::sample::select(vec!["fp-a", "fp-b", "fp-c"]),
            0..200i64,
            prop::bool::ANY,
        )
            .prop_map(|(set, fp, t, failed)| PasswordOutcome {
                action: if set {
                    PasswordAction::Set
                } else {
                    PasswordAction::DiscardOld
                },
                fingerprint: fp.into(),
                at: at(t),
                error: failed.then(|| "boom".to_owned()),
            }),
    )
}

fn facts() -> impl Strategy<Value = Option<MemberFacts>> {
    prop::option::of((0..200i64, prop::bool::ANY, prop::bool::ANY).prop_map(
        |(t, reachable, read_only)| MemberFacts {
            reachable,
            read_only: Some(read_only),
            ..primary_up(t)
        },
    ))
}

fn previous() -> impl Strategy<Value = Option<PasswordStatus>> {
    prop::option::of(
        (
            prop::option::of(prop::sample::select(vec!["fp-a", "fp-b"])),
            0..100i64,
            prop::option::of(0..300i64),
        )
            .prop_map(|(fp, t, expires)| PasswordStatus {
                fingerprint: fp.map(Into::into),
                applied_at: fp.map(|_| Time(at(t))),
                old_password_expires: expires.map(|e| Time(at(e))),
                ..PasswordStatus::default()
            }),
    )
}

proptest! {
    /// The rules of the module, over arbitrary inputs: a step only with a present Secret, a
    /// fresh writable primary and no failover; `SetPassword` carries exactly the Secret's
    /// fingerprint; the recorded fingerprint moves only to a value a successful outcome
    /// reported (or the initial value); a discard only on MySQL after the grace period; the
    /// condition is True exactly when the record equals the Secret.
    #[test]
    fn password_rules_hold(
        engine in engine(),
        secret in secret(),
        previous in previous(),
        outcome in outcome(),
        facts in facts(),
        failover in prop::bool::ANY,
        initializing in prop::bool::ANY,
        now in 100..400i64,
        // The unkeyed fingerprint beside the Secret's (the same value's, as statuses of
        // earlier releases record it), or none.
        unkeyed in prop::option::of(prop::sample::select(vec!["fp-a", "fp-b", "fp-old"])),
    ) {
        let case = Case {
            engine, secret: secret.clone(), previous: previous.clone(), condition: None,
            outcome: outcome.clone(), facts: facts.clone(),
            unkeyed: unkeyed.map(Into::into), failover, initializing, grace: 60, now,
        };
        let o = case.run();
        prop_assert!(o.commands.len() <= 1);
        let fresh_primary = facts.as_ref().is_some_and(|f| {
            f.reachable && f.read_only == Some(false) && now - (f.probed_at.as_second() - T0) <= 30
        });
        if !o.commands.is_empty() {
            prop_assert!(matches!(secret, SecretState::Present { .. }), "a step without the Secret");
            prop_assert!(fresh_primary && !failover, "a step without a fresh writable primary");
        }
        let recorded = o.status.as_ref().and_then(|s| s.fingerprint.clone());
        let before = previous.as_ref().and_then(|s| s.fingerprint.clone());
        if recorded != before {
            let from_outcome = outcome.as_ref().is_some_and(|x| {
                x.action == PasswordAction::Set && x.error.is_none()
                    && Some(&x.fingerprint) == recorded.as_ref()
            });
            let initial = previous.is_none() && initializing
                && matches!(&secret, SecretState::Present { fingerprint } if Some(fingerprint) == recorded.as_ref());
            // Re-keyed: the record was (or an outcome of this pass reported) the unkeyed
            // fingerprint of the Secret's value, and now is the keyed one of the same value.
            let reported_unkeyed = outcome.as_ref().is_some_and(|x| {
                x.action == PasswordAction::Set && x.error.is_none()
                    && Some(x.fingerprint.as_str()) == unkeyed
            });
            let rekeyed = unkeyed.is_some()
                && (before.as_deref() == unkeyed || reported_unkeyed)
                && matches!(&secret, SecretState::Present { fingerprint } if Some(fingerprint) == recorded.as_ref());
            prop_assert!(from_outcome || initial || rekeyed, "recorded {recorded:?} from nowhere");
        }
        for step in &o.commands {
            match step {
                DatabaseCommand::SetPassword { fingerprint, retain_old, .. } => {
                    prop_assert_eq!(&secret, &present(fingerprint));
                    prop_assert_ne!(Some(fingerprint), recorded.as_ref());
                    prop_assert_eq!(*retain_old, engine == Engine::Mysql);
                }
                DatabaseCommand::DiscardOldPassword { fingerprint, .. } => {
                    prop_assert_eq!(engine, Engine::Mysql);
                    prop_assert_eq!(Some(fingerprint), recorded.as_ref());
                    let expires = o.status.as_ref().and_then(|s| s.old_password_expires.as_ref()).map(|t| t.0);
                    prop_assert!(expires.is_some_and(|e| e <= at(now)), "discard before the grace period ended");
                }
                other => prop_assert!(false, "unexpected step {other:?}"),
            }
        }
        let matches = matches!(&secret, SecretState::Present { fingerprint } if Some(fingerprint) == recorded.as_ref());
        prop_assert_eq!(o.verdict.applied, matches);
        for e in &o.events {
            prop_assert!(!e.message.contains("boom") || e.reason == EventReason::PasswordApplyFailed);
        }
    }
}
