//! `database-operator member-agent`: the sidecar of `spec.failover.nodeLoss: SelfFence`
//! members. It bounds how long a primary cut off from the control plane keeps taking writes,
//! so that the operator may fail over from a lost node without an administrator.
//!
//! Every quarter of the lease it reads the Lease `<cluster>-primary`. When its pod holds it,
//! it renews it (`spec.renewTime`, a JSON patch that first tests the holder, so it never
//! renews a Lease the operator has given to another pod). When it has not renewed for half of
//! the lease, and from then on every round, it makes its own server read-only (the same
//! [`DatabaseIo::fence`] the operator uses) if that server reports itself primary; when the
//! Lease names another pod after this one held it, it does so at once. It never gives writes
//! back: the operator does that, once the Lease is renewed again.
//!
//! The operator counts the old primary as fenced only after it has seen no renewal for the
//! whole lease plus [`database_operator_core::LeaseSighting::MARGIN`] on its own clock: by then
//! the agent has fenced for at least a quarter of the lease (see
//! `docs/decisions/2026-12-04-self-fencing-on-node-loss.md` for the argument and the residual
//! risks).
//!
//! [`Agent`] is the pure state machine (tested below); [`run`] does the IO.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use database_operator_api::Engine;
use database_operator_engine::Protocol;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use crate::database::mysql::MysqlConfig;
use crate::database::postgres::PostgresConfig;
use crate::database::{DatabaseIo, MysqlIo, PostgresIo, Secret, ServerRole, Timeouts};

/// How the agent reaches its server: a bounded connect and statement, so a hung server does
/// not stall the rounds.
const LOCAL_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    statement: Duration::from_secs(2),
    promote: Duration::from_secs(2),
};

/// The field manager of the agent's renewals.
pub const FIELD_MANAGER: &str = "database-operator-member-agent";

/// A bound on one Lease request.
const API_TIMEOUT: Duration = Duration::from_secs(2);

/// What the agent reads from its environment (set by the StatefulSet's pod template).
#[derive(Clone, Debug)]
pub struct AgentSettings {
    /// `POD_NAME`: the holder identity it renews as.
    pub pod: String,
    /// `POD_NAMESPACE`.
    pub namespace: String,
    /// `POD_IP`: where its server listens.
    pub pod_ip: String,
    /// `DBO_ENGINE`.
    pub engine: Engine,
    /// `DBO_PORT`.
    pub port: u16,
    /// `DBO_LEASE`: the Lease's name.
    pub lease: String,
    /// `DBO_LEASE_SECONDS`.
    pub lease_duration: Duration,
    /// `DBO_START_ROLE` is `primary`: the pod carried the primary label when the agent
    /// started, so it must renew before half the lease has passed.
    pub started_as_primary: bool,
    /// The operator's account, read from the files `admin-username` and `admin-password` in
    /// `DBO_CREDENTIALS_DIR` (a Secret volume; never the environment). The password is never
    /// logged.
    pub admin_user: String,
    /// See `admin_user`.
    pub admin_password: Secret,
    /// `DBO_TLS_CA` and `DBO_TLS_DOMAIN`: the authorities file and the headless domain
    /// (`<cluster>-headless.<namespace>.svc`) when the cluster has TLS: the agent connects to
    /// its server over TLS and checks its certificate for `<pod>.<domain>`.
    pub tls: Option<(std::path::PathBuf, String)>,
}

/// A setting missing or wrong in the agent's environment.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// A variable is not set.
    #[error(
        "environment variable {0} is not set (the StatefulSet's member-agent container sets it)"
    )]
    Missing(&'static str),
    /// A credentials file could not be read, or is empty.
    #[error(
        "{path}: {problem} (the member-agent container mounts the operator Secret's admin-username and admin-password there)"
    )]
    Credentials {
        /// The file.
        path: String,
        /// What went wrong.
        problem: String,
    },
    /// A variable has a value the agent cannot use.
    #[error("environment variable {name}={value:?}: {rule}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
}

impl AgentSettings {
    /// The settings from `var` (the process environment in [`main`]), the account from the
    /// files in `DBO_CREDENTIALS_DIR`.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &'static str| {
            var(name)
                .filter(|v| !v.is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        let engine_text = get("DBO_ENGINE")?;
        let Some(engine) = Engine::ALL.into_iter().find(|e| e.as_str() == engine_text) else {
            return Err(SettingsError::Invalid {
                name: "DBO_ENGINE",
                value: engine_text,
                rule: "one of postgresql, mysql, mariadb",
            });
        };
        let port_text = get("DBO_PORT")?;
        let port =
            port_text
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or(SettingsError::Invalid {
                    name: "DBO_PORT",
                    value: port_text,
                    rule: "a TCP port, 1 to 65535",
                })?;
        let credentials_dir = std::path::PathBuf::from(get("DBO_CREDENTIALS_DIR")?);
        let seconds_text = get("DBO_LEASE_SECONDS")?;
        let seconds = seconds_text
            .parse::<u64>()
            .ok()
            .filter(|s| (4..=120).contains(s))
            .ok_or(SettingsError::Invalid {
                name: "DBO_LEASE_SECONDS",
                value: seconds_text,
                rule: "whole seconds, 4 to 120 (spec.failover.leaseSeconds)",
            })?;
        Ok(AgentSettings {
            pod: get("POD_NAME")?,
            namespace: get("POD_NAMESPACE")?,
            pod_ip: get("POD_IP")?,
            engine,
            port,
            lease: get("DBO_LEASE")?,
            lease_duration: Duration::from_secs(seconds),
            started_as_primary: var("DBO_START_ROLE").as_deref() == Some("primary"),
            admin_user: read_credential(&credentials_dir, "admin-username")?,
            admin_password: Secret::new(read_credential(&credentials_dir, "admin-password")?),
            tls: match (var("DBO_TLS_CA"), var("DBO_TLS_DOMAIN")) {
                (Some(ca), Some(domain)) if !ca.is_empty() && !domain.is_empty() => {
                    Some((std::path::PathBuf::from(ca), domain))
                }
                _ => None,
            },
        })
    }
}

/// The file `key` in `dir`, without a trailing line break; an empty one is an error.
fn read_credential(dir: &std::path::Path, key: &str) -> Result<String, SettingsError> {
    let path = dir.join(key);
    let error = |problem: String| SettingsError::Credentials {
        path: path.display().to_string(),
        problem,
    };
    let bytes = std::fs::read(&path).map_err(|e| error(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| error("not UTF-8 text".to_owned()))?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    if value.is_empty() {
        return Err(error("empty".to_owned()));
    }
    Ok(value.to_owned())
}

/// What one read of the Lease showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseView {
    /// It names this pod.
    Mine,
    /// It names another pod (or nobody).
    Other(Option<String>),
    /// It does not exist (the operator creates it again).
    Missing,
    /// It could not be read (no API access: the case this agent exists for).
    Unreadable,
}

/// Why the agent fences its server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceReason {
    /// No renewal for this long, at least half the lease.
    NotRenewed(Duration),
    /// The Lease went to another pod after this one held it.
    RoleMoved(Option<String>),
}

/// What a round does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Renew the Lease.
    Renew,
    /// Make the server read-only (if it reports itself primary).
    Fence(FenceReason),
    /// Nothing.
    Wait,
}

/// The agent's state: when it last renewed (time since it started, monotonic), and whether a
/// fence for a moved role is still owed.
#[derive(Clone, Debug)]
pub struct Agent {
    duration: Duration,
    renewed_at: Option<Duration>,
    owes_fence: Option<Option<String>>,
}

impl Agent {
    /// An agent for a lease of `duration`; `started_as_primary`: it counts as having renewed
    /// at start, so that a primary that never reaches the API server fences after half the
    /// lease.
    pub fn new(duration: Duration, started_as_primary: bool) -> Agent {
        Agent {
            duration,
            renewed_at: started_as_primary.then_some(Duration::ZERO),
            owes_fence: None,
        }
    }

    /// Time between rounds: a quarter of the lease, at least a second.
    pub fn interval(&self) -> Duration {
        (self.duration / 4).max(Duration::from_secs(1))
    }

    /// How long without a renewal before the server is fenced: half the lease.
    pub fn fence_after(&self) -> Duration {
        self.duration / 2
    }

    /// What to do at `now` (since start) after reading `view`.
    pub fn decide(&mut self, now: Duration, view: &LeaseView) -> Decision {
        match view {
            LeaseView::Mine => {
                self.owes_fence = None;
                Decision::Renew
            }
            LeaseView::Other(holder) => {
                if self.renewed_at.take().is_some() {
                    self.owes_fence = Some(holder.clone());
                }
                match &self.owes_fence {
                    Some(h) => Decision::Fence(FenceReason::RoleMoved(h.clone())),
                    None => Decision::Wait,
                }
            }
            LeaseView::Missing | LeaseView::Unreadable => self.overdue(now),
        }
    }

    /// The renewal at `now` succeeded.
    pub fn renewed(&mut self, now: Duration) {
        self.renewed_at = Some(now);
    }

    /// A fence owed for a moved role was carried out (or found unneeded).
    pub fn fence_done(&mut self) {
        self.owes_fence = None;
    }

    /// Whether the last renewal is already half a lease old at `now` (or, before any renewal,
    /// nothing is owed): a fence for [`FenceReason::NotRenewed`] when it is. Asked before each
    /// round's read and after a renewal that failed (the API server refused or did not answer).
    pub fn overdue(&self, now: Duration) -> Decision {
        match self.renewed_at {
            Some(at) if now.saturating_sub(at) >= self.fence_after() => {
                Decision::Fence(FenceReason::NotRenewed(now.saturating_sub(at)))
            }
            _ => Decision::Wait,
        }
    }
}

/// The Lease as the agent reads and renews it.
#[allow(async_fn_in_trait)]
#[cfg_attr(test, mockall::automock)]
pub trait LeaseApi {
    /// Reads the Lease.
    async fn read(&self) -> LeaseView;
    /// Writes `renewTime = now`, only if the Lease still names this pod.
    async fn renew(&self, now: Timestamp) -> Result<(), String>;
}

/// [`LeaseApi`] over the API server, with the pod's ServiceAccount token.
pub struct KubeLease {
    api: kube::Api<Lease>,
    name: String,
    pod: String,
}

impl LeaseApi for KubeLease {
    async fn read(&self) -> LeaseView {
        match tokio::time::timeout(API_TIMEOUT, self.api.get_opt(&self.name)).await {
            Ok(Ok(Some(lease))) => {
                let holder = lease.spec.and_then(|s| s.holder_identity);
                if holder.as_deref() == Some(self.pod.as_str()) {
                    LeaseView::Mine
                } else {
                    LeaseView::Other(holder)
                }
            }
            Ok(Ok(None)) => LeaseView::Missing,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "lease not read");
                LeaseView::Unreadable
            }
            Err(_) => LeaseView::Unreadable,
        }
    }

    async fn renew(&self, now: Timestamp) -> Result<(), String> {
        let patch = renewal_patch(&self.pod, now);
        let patch: json_patch::Patch = serde_json::from_value(patch).map_err(|e| e.to_string())?;
        // A manager of its own: the operator's server-side apply of the Lease (holder,
        // duration) never touches the renewal.
        let params = kube::api::PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..kube::api::PatchParams::default()
        };
        match tokio::time::timeout(
            API_TIMEOUT,
            self.api
                .patch(&self.name, &params, &kube::api::Patch::<()>::Json(patch)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}s", API_TIMEOUT.as_secs())),
        }
    }
}

/// The JSON patch that renews the Lease for `pod` at `now`: it fails, and changes nothing,
/// when the Lease names another holder.
pub fn renewal_patch(pod: &str, now: Timestamp) -> serde_json::Value {
    serde_json::json!([
        {"op": "test", "path": "/spec/holderIdentity", "value": pod},
        {"op": "add", "path": "/spec/renewTime", "value": MicroTime(now)},
    ])
}

/// One round: fence first if the last renewal is already half a lease old (the agent may
/// have been paused, or its whole node frozen, for longer than that: the operator may have
/// counted this server as fenced meanwhile, and a renewal now would not undo a promotion);
/// then read, decide, renew or fence. Returns what was decided (for the log and tests): a
/// fence in this round is reported as the decision.
pub async fn round(
    agent: &mut Agent,
    lease: &impl LeaseApi,
    server: &impl DatabaseIo,
    now: Duration,
    wall: Timestamp,
) -> Decision {
    let overdue = agent.overdue(now);
    if let Decision::Fence(reason) = &overdue {
        fence(agent, server, reason).await;
    }
    let view = lease.read().await;
    let mut decision = agent.decide(now, &view);
    if decision == Decision::Renew {
        match lease.renew(wall).await {
            Ok(()) => {
                agent.renewed(now);
                return if overdue == Decision::Wait {
                    Decision::Renew
                } else {
                    overdue
                };
            }
            Err(error) => {
                tracing::warn!(%error, "lease not renewed");
                decision = agent.overdue(now);
            }
        }
    }
    match &decision {
        // Already fenced for that in this round.
        Decision::Fence(FenceReason::NotRenewed(_)) if overdue != Decision::Wait => {}
        Decision::Fence(reason) => fence(agent, server, reason).await,
        Decision::Renew | Decision::Wait => {}
    }
    if decision == Decision::Wait {
        overdue
    } else {
        decision
    }
}

/// Fences the server if it reports itself primary; a replica has nothing to refuse.
async fn fence(agent: &mut Agent, server: &impl DatabaseIo, reason: &FenceReason) {
    let why = match reason {
        FenceReason::NotRenewed(d) => format!("lease not renewed for {}s", d.as_secs()),
        FenceReason::RoleMoved(h) => {
            format!("the lease now names {}", h.as_deref().unwrap_or("nobody"))
        }
    };
    match server.probe().await {
        Ok(facts) if facts.reachable && facts.role == Some(ServerRole::Primary) => {
            match server.fence().await {
                Ok(()) => {
                    tracing::warn!(reason = %why, "server fenced: it refuses writes until the operator gives them back");
                    agent.fence_done();
                }
                Err(error) => {
                    tracing::error!(reason = %why, %error, "server not fenced; trying again next round")
                }
            }
        }
        Ok(facts) if facts.reachable => {
            tracing::debug!(reason = %why, "server is not a primary: nothing to fence");
            agent.fence_done();
        }
        Ok(_) => {
            tracing::warn!(reason = %why, "server does not answer; fencing it as soon as it does")
        }
        Err(error) => {
            tracing::error!(reason = %why, %error, "server not probed; trying again next round")
        }
    }
}

/// The authorities file's bytes (`None` without TLS); a file that cannot be read is an error,
/// never a reason to connect without checking.
fn authorities(settings: &AgentSettings) -> anyhow::Result<Option<Vec<u8>>> {
    let Some((ca, _)) = &settings.tls else {
        return Ok(None);
    };
    std::fs::read(ca)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))
}

/// The trust the agent dials its own server with, from the authorities `pem` (`None` without
/// TLS): its certificate checked for `<pod>.<headless domain>`. Authorities that do not parse
/// are an error.
fn trust_of(
    settings: &AgentSettings,
    pem: Option<&[u8]>,
) -> anyhow::Result<Option<crate::database::tls::ServerTrust>> {
    let (Some(pem), Some((ca, domain))) = (pem, &settings.tls) else {
        return Ok(None);
    };
    crate::database::tls::ServerTrust::from_pem(pem)
        .and_then(|t| t.for_name(&format!("{}.{domain}", settings.pod)))
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))
}

/// The driver of the local server, over TLS with `tls`.
fn local_server(
    settings: &AgentSettings,
    tls: Option<crate::database::tls::ServerTrust>,
) -> crate::members::AnyDatabaseIo {
    match database_operator_engine::of(settings.engine).protocol() {
        Protocol::Postgres => {
            crate::members::AnyDatabaseIo::Postgres(PostgresIo::new(PostgresConfig {
                engine: settings.engine,
                host: settings.pod_ip.clone(),
                port: settings.port,
                user: settings.admin_user.clone(),
                password: settings.admin_password.clone(),
                dbname: "postgres".to_owned(),
                timeouts: LOCAL_TIMEOUTS,
                replication_user: database_operator_core::credentials::REPLICATION_USER.to_owned(),
                replication_passfile: None,
                application_name: Some(format!("{}-agent", settings.pod)),
                tls: tls.clone(),
            }))
        }
        Protocol::Mysql => crate::members::AnyDatabaseIo::Mysql(MysqlIo::new(MysqlConfig {
            engine: settings.engine,
            host: settings.pod_ip.clone(),
            port: settings.port,
            user: settings.admin_user.clone(),
            password: settings.admin_password.clone(),
            timeouts: LOCAL_TIMEOUTS,
            replication_user: database_operator_core::credentials::REPLICATION_USER.to_owned(),
            replication_password: Secret::new(String::new()),
            tls,
        })),
    }
}

/// Runs the agent until the process is stopped.
pub async fn run(settings: AgentSettings) -> anyhow::Result<()> {
    let config = kube::Config::incluster().map_err(|e| {
        anyhow::anyhow!("no in-cluster API access (the pod's ServiceAccount token): {e}")
    })?;
    let client = kube::Client::try_from(config)?;
    let lease = KubeLease {
        api: kube::Api::namespaced(client, &settings.namespace),
        name: settings.lease.clone(),
        pod: settings.pod.clone(),
    };
    let mut pem = authorities(&settings)?;
    let mut server = local_server(&settings, trust_of(&settings, pem.as_deref())?);
    let mut agent = Agent::new(settings.lease_duration, settings.started_as_primary);
    tracing::info!(
        pod = %settings.pod,
        lease = %settings.lease,
        lease_seconds = settings.lease_duration.as_secs(),
        port = settings.port,
        engine = %settings.engine,
        default_port = database_operator_engine::of(settings.engine).port(),
        "member agent started"
    );
    let started = Instant::now();
    let mut ticker = tokio::time::interval(agent.interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Decision::Wait;
    loop {
        ticker.tick().await;
        // The authorities file again each round (parsed only when its bytes changed): after a
        // new authority the server reloads a certificate the agent's first copy would refuse,
        // and an agent that cannot reach its server cannot fence it. A file that cannot be read
        // or parsed keeps the last good copy.
        match authorities(&settings) {
            Ok(now) if now != pem => match trust_of(&settings, now.as_deref()) {
                Ok(trust) => {
                    tracing::info!(
                        "the cluster's authorities changed: the agent trusts the new ones"
                    );
                    pem = now;
                    server = local_server(&settings, trust);
                }
                Err(error) => {
                    tracing::warn!(%error, "the new authorities do not parse; keeping the last ones")
                }
            },
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "the authorities file could not be read; keeping the last one")
            }
        }
        let decision = round(
            &mut agent,
            &lease,
            &server,
            started.elapsed(),
            Timestamp::now(),
        )
        .await;
        if decision != last {
            tracing::info!(?decision, "member agent");
            last = decision;
        }
    }
}

/// The `member-agent` command.
pub fn main() -> ExitCode {
    crate::telemetry::init(crate::telemetry::LogFormat::Text, "info");
    let settings = match AgentSettings::from_env(|name| std::env::var(name).ok()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "member agent cannot start");
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    crate::async_runtime::run_command(false, "member agent stopped", run(settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::{MemberFacts, MockDatabaseIo};

    const LEASE: Duration = Duration::from_secs(8);

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn renews_while_it_holds_the_lease_and_fences_after_half_of_it_without() {
        let mut a = Agent::new(LEASE, false);
        assert_eq!(a.interval(), s(2));
        assert_eq!(a.decide(s(0), &LeaseView::Mine), Decision::Renew);
        a.renewed(s(0));
        // 3 s without API access: less than half of 8 s.
        assert_eq!(a.decide(s(3), &LeaseView::Unreadable), Decision::Wait);
        assert_eq!(
            a.decide(s(4), &LeaseView::Unreadable),
            Decision::Fence(FenceReason::NotRenewed(s(4)))
        );
        // Again every round while it cannot renew.
        assert_eq!(
            a.decide(s(6), &LeaseView::Missing),
            Decision::Fence(FenceReason::NotRenewed(s(6)))
        );
        // A failed renewal counts the same.
        assert_eq!(a.decide(s(7), &LeaseView::Mine), Decision::Renew);
        assert_eq!(
            a.overdue(s(7)),
            Decision::Fence(FenceReason::NotRenewed(s(7)))
        );
        a.renewed(s(8));
        assert_eq!(a.decide(s(9), &LeaseView::Unreadable), Decision::Wait);
    }

    #[test]
    fn a_replica_that_never_held_the_lease_never_fences() {
        let mut a = Agent::new(LEASE, false);
        for t in 0..100 {
            assert_eq!(a.decide(s(t), &LeaseView::Unreadable), Decision::Wait);
            assert_eq!(
                a.decide(s(t), &LeaseView::Other(Some("db-0".into()))),
                Decision::Wait
            );
        }
    }

    #[test]
    fn a_pod_that_starts_as_primary_must_renew_within_half_the_lease() {
        let mut a = Agent::new(LEASE, true);
        assert_eq!(a.decide(s(2), &LeaseView::Unreadable), Decision::Wait);
        assert_eq!(
            a.decide(s(4), &LeaseView::Unreadable),
            Decision::Fence(FenceReason::NotRenewed(s(4)))
        );
    }

    #[test]
    fn the_lease_moving_away_fences_once_it_is_done() {
        let mut a = Agent::new(LEASE, false);
        a.decide(s(0), &LeaseView::Mine);
        a.renewed(s(0));
        let other = LeaseView::Other(Some("db-1".into()));
        let fence = Decision::Fence(FenceReason::RoleMoved(Some("db-1".into())));
        assert_eq!(a.decide(s(1), &other), fence);
        // Not carried out (the server did not answer): owed next round too.
        assert_eq!(a.decide(s(2), &other), fence);
        a.fence_done();
        assert_eq!(a.decide(s(3), &other), Decision::Wait);
        assert_eq!(a.decide(s(30), &LeaseView::Unreadable), Decision::Wait);
    }

    #[test]
    fn the_renewal_patch_tests_the_holder_first() {
        let now: Timestamp = "2026-12-04T10:00:00.5Z".parse().unwrap();
        let patch = renewal_patch("db-0", now);
        assert_eq!(patch[0]["op"], "test");
        assert_eq!(patch[0]["path"], "/spec/holderIdentity");
        assert_eq!(patch[0]["value"], "db-0");
        assert_eq!(patch[1]["path"], "/spec/renewTime");
        assert_eq!(patch[1]["value"], "2026-12-04T10:00:00.500000Z");
        // It is a valid JSON patch.
        serde_json::from_value::<json_patch::Patch>(patch).unwrap();
    }

    fn primary(read_only: bool) -> MemberFacts {
        MemberFacts {
            reachable: true,
            role: Some(ServerRole::Primary),
            read_only: Some(read_only),
            ..MemberFacts::unreachable()
        }
    }

    fn now() -> Timestamp {
        "2026-12-04T10:00:00Z".parse().unwrap()
    }

    /// A Lease that always reads `view`; renewals answer `renew` (`None`: none expected).
    fn lease(view: LeaseView, renew: Option<(usize, Result<(), String>)>) -> MockLeaseApi {
        let mut lease = MockLeaseApi::new();
        lease.expect_read().returning(move || view.clone());
        match renew {
            Some((times, answer)) => {
                lease
                    .expect_renew()
                    .times(times)
                    .returning(move |_| answer.clone());
            }
            None => {
                lease.expect_renew().never();
            }
        }
        lease
    }

    /// A server answering `facts`, probed `probes` times and fenced `fences` times.
    fn server(facts: MemberFacts, probes: usize, fences: usize) -> MockDatabaseIo {
        let mut server = MockDatabaseIo::new();
        server
            .expect_probe()
            .times(probes)
            .returning(move || Ok(facts.clone()));
        server.expect_fence().times(fences).returning(|| Ok(()));
        server
    }

    #[tokio::test]
    async fn a_round_renews_and_touches_no_server() {
        let lease = lease(LeaseView::Mine, Some((1, Ok(()))));
        let server = server(primary(false), 0, 0);
        let mut a = Agent::new(LEASE, true);
        let decision = round(&mut a, &lease, &server, s(1), now()).await;
        assert_eq!(decision, Decision::Renew);
    }

    #[tokio::test]
    async fn a_cut_off_primary_is_fenced_every_round_a_replica_never() {
        let cut = lease(LeaseView::Unreadable, None);
        let primary_server = server(primary(false), 2, 2);
        let mut a = Agent::new(LEASE, true);
        let first = round(&mut a, &cut, &primary_server, s(2), now()).await;
        assert_eq!(first, Decision::Wait);
        for t in [4, 6] {
            let decision = round(&mut a, &cut, &primary_server, s(t), now()).await;
            assert!(matches!(
                decision,
                Decision::Fence(FenceReason::NotRenewed(_))
            ));
        }

        // The same rounds on a server that is a replica: probed, never fenced.
        let replica = MemberFacts {
            role: Some(ServerRole::Replica),
            ..primary(true)
        };
        let replica_server = server(replica, 2, 0);
        let mut a = Agent::new(LEASE, true);
        for t in [4, 6] {
            round(&mut a, &cut, &replica_server, s(t), now()).await;
        }
    }

    #[tokio::test]
    async fn a_round_after_a_pause_fences_before_it_renews() {
        // Renewed at 1, then nothing ran until 5 (a paused process or node): fence, then
        // renew; the next round only renews.
        let lease = lease(LeaseView::Mine, Some((3, Ok(()))));
        let server = server(primary(false), 1, 1);
        let mut a = Agent::new(LEASE, true);
        let decisions = [
            round(&mut a, &lease, &server, s(1), now()).await,
            round(&mut a, &lease, &server, s(5), now()).await,
            round(&mut a, &lease, &server, s(7), now()).await,
        ];
        assert_eq!(
            decisions,
            [
                Decision::Renew,
                Decision::Fence(FenceReason::NotRenewed(s(4))),
                Decision::Renew
            ]
        );
    }

    #[tokio::test]
    async fn a_renewal_the_api_refuses_counts_as_none() {
        let refused = Err("the test failed: holder changed".to_owned());
        let lease = lease(LeaseView::Mine, Some((2, refused)));
        let server = server(primary(false), 1, 1);
        let mut a = Agent::new(LEASE, true);
        let first = round(&mut a, &lease, &server, s(1), now()).await;
        assert_eq!(first, Decision::Wait);
        let later = round(&mut a, &lease, &server, s(5), now()).await;
        assert!(matches!(later, Decision::Fence(_)));
    }

    #[test]
    fn settings_name_the_variable_and_the_rule() {
        let credentials = tempfile::tempdir().unwrap();
        std::fs::write(
            credentials.path().join("admin-username"),
            "database_operator",
        )
        .unwrap();
        std::fs::write(
            credentials.path().join("admin-password"),
            "pw from a file\n",
        )
        .unwrap();
        let dir = credentials.path().display().to_string();
        let env = |overrides: &'static [(&'static str, &'static str)]| {
            let dir = dir.clone();
            move |name: &str| -> Option<String> {
                if let Some((_, v)) = overrides.iter().find(|(k, _)| *k == name) {
                    return Some((*v).to_owned());
                }
                if name == "DBO_CREDENTIALS_DIR" {
                    return Some(dir.clone());
                }
                Some(
                    match name {
                        "POD_NAME" => "db-0",
                        "POD_NAMESPACE" => "shop",
                        "POD_IP" => "127.0.0.9",
                        "DBO_ENGINE" => "postgresql",
                        "DBO_PORT" => "5432",
                        "DBO_LEASE" => "db-primary",
                        "DBO_LEASE_SECONDS" => "10",
                        "DBO_START_ROLE" => "primary",
                        // Never read from the environment.
                        "ADMIN_USERNAME" => "from-the-environment",
                        "ADMIN_PASSWORD" => "from-the-environment",
                        _ => return None,
                    }
                    .to_owned(),
                )
            }
        };
        let ok = AgentSettings::from_env(env(&[])).unwrap();
        assert_eq!(ok.admin_user, "database_operator");
        assert_eq!(ok.admin_password.expose(), "pw from a file");
        assert_eq!(ok.lease_duration, s(10));
        assert!(ok.started_as_primary);
        assert_eq!(ok.engine, Engine::Postgresql);
        let replica = AgentSettings::from_env(env(&[("DBO_START_ROLE", "replica")])).unwrap();
        assert!(!replica.started_as_primary);
        assert_eq!(ok.tls, None, "no TLS settings: no TLS");
        let tls = AgentSettings::from_env(env(&[
            ("DBO_TLS_CA", "/nonexistent/ca.crt"),
            ("DBO_TLS_DOMAIN", "orders-headless.shop.svc"),
        ]))
        .unwrap();
        assert_eq!(
            tls.tls,
            Some((
                std::path::PathBuf::from("/nonexistent/ca.crt"),
                "orders-headless.shop.svc".to_owned()
            ))
        );
        // An authorities file that cannot be read stops the agent: never a plain connection.
        let e = authorities(&tls).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.crt"), "{e}");
        // Authorities that do not parse are an error too; without TLS there is no trust.
        assert!(trust_of(&tls, Some(b"not a certificate".as_slice())).is_err());
        assert!(trust_of(&ok, None).unwrap().is_none());
        assert_eq!(
            AgentSettings::from_env(env(&[("POD_IP", "")])).unwrap_err(),
            SettingsError::Missing("POD_IP")
        );
        let err = AgentSettings::from_env(env(&[("DBO_LEASE_SECONDS", "2")])).unwrap_err();
        assert!(err.to_string().contains("DBO_LEASE_SECONDS=\"2\""), "{err}");
        assert!(err.to_string().contains("4 to 120"), "{err}");
        let err = AgentSettings::from_env(env(&[("DBO_ENGINE", "oracle")])).unwrap_err();
        assert!(
            err.to_string().contains("postgresql, mysql, mariadb"),
            "{err}"
        );
        // A missing or empty file is named.
        let err =
            AgentSettings::from_env(env(&[("DBO_CREDENTIALS_DIR", "/nonexistent")])).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/admin-username"),
            "{err}"
        );
        std::fs::write(credentials.path().join("admin-password"), "").unwrap();
        let err = AgentSettings::from_env(env(&[])).unwrap_err();
        assert!(err.to_string().contains("admin-password: empty"), "{err}");
    }
}
