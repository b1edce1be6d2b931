//! How the operator talks to one database server (a member): probe it, fence it, promote it,
//! point it at a new source, change a password.
//!
//! | file | does | talks to a server |
//! | --- | --- | --- |
//! | `mod.rs` | [`DatabaseIo`], [`MemberFacts`], [`DbError`], the address resolver | no |
//! | [`statements`] | the SQL per engine, as pure builders (snapshot-tested; the engine crate's) | no |
//! | [`postgres`] | [`PostgresIo`] over tokio-postgres | yes |
//! | [`mysql`] | [`MysqlIo`] over mysql_async, for the MySQL and MariaDB dialects | yes |
//! | [`tls`] | [`tls::ServerTrust`]: the CA trust and TLS glue of both drivers | no |
//!
//! core decides, runtime talks: nothing here decides whom to promote. The facts a probe returns
//! go to core (see [`MemberFacts::position`] for the typed position), and core's plan says which
//! step to take.
//!
//! Connections are plain TCP unless the driver's configuration carries a [`tls::ServerTrust`]
//! (the CA the member's server certificate must chain to): then TLS on rustls (ring) is
//! required, and the certificate is checked verify-ca by default (chain to the CA and validity
//! dates, no host name: members are dialled by pod IP, which no certificate names; verify-full
//! is an option). mysql_async 0.37.1 still checks the name (see [`tls::mysql_ssl_opts`]). A
//! refused certificate is [`DbErrorKind::Other`], never `Unreachable`. Every call has a connect
//! timeout and a statement timeout, and every error is classified ([`DbErrorKind`]).
//!
//! ## Decisions and why
//! - **Passwords are values, never text, but not always bind parameters.** MySQL and MariaDB
//!   take no placeholder in `ALTER USER ... IDENTIFIED BY` or `CHANGE REPLICATION SOURCE TO
//!   ... PASSWORD`: those statements are [`statements::Binding::Inline`], quoted in only when
//!   sent, never logged, and an error from one reports only the server's code (a syntax error
//!   can quote the statement). The servers rewrite these passwords out of their own logs.
//!   PostgreSQL gets a SCRAM-SHA-256 verifier computed here, bound as a parameter into a session
//!   setting and applied by a `DO` block, so no statement text (client debug log, server
//!   `log_statement`) holds even the verifier.
//! - **Fencing PostgreSQL is best effort.** It has no read-only switch for a primary:
//!   `default_transaction_read_only` plus ending every client session stops ordinary writers,
//!   but a client may still open a read-write transaction on purpose. Failover must stop the
//!   old primary's pod (or take it out of the read-write Service) before it promotes.
//! - **A PostgreSQL primary cannot follow at run time.** `follow` on a primary fails with
//!   [`DbErrorKind::NotSupported`]: it has to restart as a standby (`standby.signal`), after
//!   `pg_rewind` when it wrote past the fork point (core's position comparison says which).
//!   A cleanly stopped old primary follows the new timeline without a rewind (tested).
//! - **MySQL/MariaDB promotion applies what was received first** (`STOP REPLICA IO_THREAD`,
//!   wait for the received GTIDs, then `RESET REPLICA ALL`), so nothing the replica already
//!   holds is lost.
//! - **One connection per call**, no pool: calls are rare (a probe per member per period, a
//!   step now and then), and a pool would hide a member that stopped answering.
//! - The role a server reports is its own view: PostgreSQL's `pg_is_in_recovery()`, and for
//!   MySQL/MariaDB whether a source is configured. A fenced primary still reports `primary`
//!   with `read_only: true`.

pub mod mysql;
pub mod postgres;
pub mod tls;
pub use database_operator_engine::statements;

use std::time::Duration;

use database_operator_api::Engine;
use database_operator_core::position::{ParseError, Position};

pub use mysql::MysqlIo;
pub use postgres::PostgresIo;
pub use statements::{Account, ReplicationSource, Secret, SourceTls};

/// The role a server reports for itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerRole {
    /// PostgreSQL: not in recovery. MySQL/MariaDB: no replication source configured.
    Primary,
    /// PostgreSQL: in recovery (a standby). MySQL/MariaDB: a replication source is configured.
    Replica,
}

/// What one probe of a member found. Plain data (no serde), so it can move to core as it is.
///
/// Positions are kept as the server printed them; [`MemberFacts::position`] parses them into
/// core's types.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberFacts {
    /// Whether the server answered.
    pub reachable: bool,
    /// The role the server reports (`None` when unreachable).
    pub role: Option<ServerRole>,
    /// Whether the server refuses writes from ordinary clients (`super_read_only` on MySQL,
    /// `read_only` on MariaDB, `default_transaction_read_only` on PostgreSQL; a PostgreSQL
    /// standby is always read-only).
    pub read_only: Option<bool>,
    /// What the server has applied: PostgreSQL current LSN (primary) or replayed LSN
    /// (standby); MySQL `gtid_executed`; MariaDB `gtid_current_pos`.
    pub position: Option<String>,
    /// What a replica has received, applied or not: PostgreSQL received LSN; MySQL
    /// `Retrieved_Gtid_Set` united with `gtid_executed`; MariaDB `Gtid_IO_Pos`. On a primary,
    /// the same as `position`. This is what failover compares: received data is applied after
    /// promotion.
    pub received_position: Option<String>,
    /// PostgreSQL: the timeline the server is on (a standby: the one it receives).
    pub timeline: Option<u32>,
    /// PostgreSQL: the history file of `timeline`, when it is above 1 and could be read.
    pub timeline_history: Option<String>,
    /// Replication delay in seconds as the engine reports it: MySQL `Seconds_Behind_Source`,
    /// MariaDB `Seconds_Behind_Master`, PostgreSQL the age of the last replayed transaction
    /// while WAL received is not replayed yet, else 0 (an idle primary does not make a
    /// caught-up standby look behind).
    pub lag_seconds: Option<u64>,
    /// PostgreSQL: bytes received but not yet replayed.
    pub lag_bytes: Option<u64>,
    /// The host a replica follows, as configured on the server.
    pub source_host: Option<String>,
    /// The port a replica follows.
    pub source_port: Option<u16>,
    /// Whether replication is running: MySQL/MariaDB both threads, PostgreSQL the WAL receiver
    /// is streaming. `None` on a primary.
    pub replicating: Option<bool>,
    /// The last replication error the server reports (MySQL/MariaDB), if any.
    pub replication_error: Option<String>,
    /// The server's version string (`15.10 (Debian 15.10-0+deb12u1)`, `11.8.3-MariaDB-...`).
    pub version: Option<String>,
    /// The server's identity: PostgreSQL `system_identifier` (shared by a primary and its
    /// standbys), MySQL `server_uuid`, MariaDB `server_id`.
    pub server_id: Option<String>,
    /// MySQL/MariaDB: whether the semi-synchronous source side is on
    /// (`rpl_semi_sync_source_enabled`, MariaDB `rpl_semi_sync_master_enabled`); `None` on
    /// PostgreSQL and on a MySQL server without the plugin.
    pub semi_sync_source: Option<bool>,
    /// PostgreSQL primary: its member replication slots that can still serve their standby
    /// (`member_<ordinal>`; a lost one is left out). `None` on a standby and on MySQL/MariaDB.
    pub member_slots: Option<Vec<String>>,
    /// PostgreSQL primary: the LSN its oldest WAL segment starts at: a standby that needs WAL
    /// from before it can no longer stream.
    pub retained_from: Option<String>,
    /// MySQL/MariaDB replica: its source refused it because it no longer has the binary logs
    /// it needs (error 1236: purged; divergence reads the same, the core tells them apart by
    /// positions).
    pub source_lacks_history: bool,
    /// PostgreSQL primary with continuous archiving: what its archiver reports.
    pub archiver: Option<Box<database_operator_core::ArchiverFacts>>,
    /// A replica: whether its replication connection checks the source's certificate against
    /// the cluster's authority (PostgreSQL: `sslmode=verify-full` or `verify-ca` in the WAL
    /// receiver's connection string; MySQL/MariaDB: the channel's CA file and
    /// `SSL_Verify_Server_Cert`). `None` on a primary or when the server did not say.
    pub source_tls_checked: Option<bool>,
    /// When the certificate the server serves expires (Unix seconds): PostgreSQL, the one the
    /// probe's TLS handshake saw; MySQL/MariaDB, `Ssl_server_not_after`. `None` without TLS.
    pub tls_not_after: Option<i64>,
}

impl MemberFacts {
    /// The facts of a server that did not answer.
    pub fn unreachable() -> MemberFacts {
        MemberFacts::default()
    }

    /// The received position as a core [`Position`] (what failover compares), when known.
    pub fn position(&self, engine: Engine) -> Result<Option<Position>, ParseError> {
        let Some(text) = self.received_position.as_deref() else {
            return Ok(None);
        };
        Position::parse(
            engine,
            text,
            self.timeline,
            self.timeline_history.as_deref(),
        )
        .map(Some)
    }
}

/// What kind of failure a database call met; decides retry and reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DbErrorKind {
    /// No connection: refused, timed out, reset, name not resolved. Retry later; counts as the
    /// server signal of "down".
    Unreachable,
    /// The server refused the credentials. Retrying will not help until they change.
    AuthFailed,
    /// The server cannot do what was asked (wrong role, missing feature, unsupported version).
    NotSupported,
    /// Anything else (a failed statement, a timeout inside a statement, an unexpected answer).
    Other,
}

impl DbErrorKind {
    /// A short label for metrics and event reasons.
    pub const fn as_str(self) -> &'static str {
        match self {
            DbErrorKind::Unreachable => "unreachable",
            DbErrorKind::AuthFailed => "auth_failed",
            DbErrorKind::NotSupported => "not_supported",
            DbErrorKind::Other => "other",
        }
    }
}

/// A failed call to a member. The message never holds a password.
#[derive(Debug, thiserror::Error)]
#[error("{engine} {host}:{port}: {action}: {message}", engine = .engine.as_str())]
pub struct DbError {
    /// The kind of failure.
    pub kind: DbErrorKind,
    /// The member's engine.
    pub engine: Engine,
    /// The host dialled.
    pub host: String,
    /// The port dialled.
    pub port: u16,
    /// What was being done (`connect`, `probe`, `fence`, ...).
    pub action: &'static str,
    /// What went wrong, from the driver or the server.
    pub message: String,
}

/// A driver as its errors name it: the member it dials.
pub(crate) trait Dialled {
    /// The member's engine, host and port.
    fn dialled(&self) -> (Engine, &str, u16);

    /// A failure of `action` on the member.
    fn error(
        &self,
        action: &'static str,
        kind: DbErrorKind,
        message: impl Into<String>,
    ) -> DbError {
        let (engine, host, port) = self.dialled();
        DbError {
            kind,
            engine,
            host: host.to_owned(),
            port,
            action,
            message: message.into(),
        }
    }
}

/// One member's database, as the operator drives it. Every method is idempotent: fencing a
/// fenced member, promoting a primary or following the source already followed succeeds.
///
/// Used through generics (never `dyn`), so the futures keep their auto traits.
#[allow(async_fn_in_trait)]
#[cfg_attr(test, mockall::automock)]
pub trait DatabaseIo: Send + Sync {
    /// Reads the member's facts. An unreachable server is `Ok` with `reachable: false`; other
    /// failures (bad credentials, a failing query) are errors.
    async fn probe(&self) -> Result<MemberFacts, DbError>;
    /// Makes the member refuse writes (see [`statements::fence`] for what that means per
    /// engine; on PostgreSQL the real guarantee is stopping the pod).
    async fn fence(&self) -> Result<(), DbError>;
    /// Fences a diverged member and stops its replication ([`statements::quarantine`]).
    async fn quarantine(&self) -> Result<(), DbError>;
    /// Makes a replica the primary: applies what it received, stops replicating, accepts
    /// writes.
    async fn promote(&self) -> Result<(), DbError>;
    /// Makes the member replicate from `source_host:port` (read-only first), using TLS as `tls`
    /// says: [`SourceTls::Checked`] checks the source's certificate for the name `source_host`,
    /// [`SourceTls::Encrypted`] encrypts without a check (the source serves TLS, the replica has
    /// no authority: a pod of an earlier template while the cluster switches TLS on).
    async fn follow(&self, source_host: &str, port: u16, tls: &SourceTls) -> Result<(), DbError>;
    /// Sets `account`'s password. MySQL with `retain_old` keeps the old one working until
    /// [`DatabaseIo::discard_old_password`]; see [`statements::set_password`].
    async fn set_password(
        &self,
        account: &Account,
        password: &Secret,
        retain_old: bool,
    ) -> Result<(), DbError>;
    /// MySQL: the old password of `account` stops working. A no-op for the others.
    async fn discard_old_password(&self, account: &Account) -> Result<(), DbError>;
    /// MySQL/MariaDB: switches the semi-synchronous source side on or off (see
    /// [`statements::set_semi_sync`]). PostgreSQL: `NotSupported` (its configuration does it).
    async fn set_semi_sync(&self, enabled: bool) -> Result<(), DbError>;
    /// PostgreSQL primary: makes its member replication slots exactly `slots`
    /// ([`statements::keep_member_slots`]). MySQL/MariaDB: `NotSupported`.
    async fn keep_member_slots(&self, slots: &[String]) -> Result<(), DbError>;
    /// Has the server read its certificate files again, without a restart
    /// ([`statements::reload_tls`]).
    async fn reload_tls(&self) -> Result<(), DbError>;
}

/// Timeouts of the drivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting, including authentication.
    pub connect: Duration,
    /// One statement (server-side where the engine has it, and a client-side bound).
    pub statement: Duration,
    /// Waiting for a promotion or for a replica to apply what it received.
    pub promote: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            statement: Duration::from_secs(10),
            promote: Duration::from_secs(60),
        }
    }
}

/// How members are dialled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemberAddress {
    /// `<pod>.<cluster>-headless.<namespace>.svc`: the headless Service's per-pod name (the
    /// default; stable across pod restarts).
    #[default]
    Dns,
    /// The pod IP (the local control plane, where pod IPs are loopback addresses and no
    /// cluster DNS exists).
    PodIp,
}

/// Why a member has no address yet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod} has no IP yet")]
pub struct NoAddress {
    /// The pod.
    pub pod: String,
}

/// The host to dial for a member. Never a Service IP: a member is one pod.
///
/// ```
/// use database_operator_runtime::database::{member_host, MemberAddress};
/// assert_eq!(
///     member_host(MemberAddress::Dns, "orders-0", "orders", "shop", None).unwrap(),
///     "orders-0.orders-headless.shop.svc"
/// );
/// assert_eq!(
///     member_host(MemberAddress::PodIp, "orders-0", "orders", "shop", Some("127.0.3.7")).unwrap(),
///     "127.0.3.7"
/// );
/// ```
pub fn member_host(
    mode: MemberAddress,
    pod: &str,
    cluster: &str,
    namespace: &str,
    pod_ip: Option<&str>,
) -> Result<String, NoAddress> {
    match mode {
        MemberAddress::Dns => Ok(format!("{pod}.{cluster}-headless.{namespace}.svc")),
        MemberAddress::PodIp => pod_ip
            .filter(|ip| !ip.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| NoAddress {
                pod: format!("{namespace}/{pod}"),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_mode_names_the_pod_through_the_headless_service() {
        assert_eq!(
            member_host(MemberAddress::Dns, "db-2", "db", "prod", Some("10.0.0.9")).unwrap(),
            "db-2.db-headless.prod.svc"
        );
    }

    #[test]
    fn pod_ip_mode_needs_an_ip() {
        assert_eq!(
            member_host(MemberAddress::PodIp, "db-2", "db", "prod", None),
            Err(NoAddress {
                pod: "prod/db-2".into()
            })
        );
        assert!(member_host(MemberAddress::PodIp, "db-2", "db", "prod", Some("")).is_err());
        assert_eq!(MemberAddress::default(), MemberAddress::Dns);
    }

    #[test]
    fn facts_give_core_positions() {
        let pg = MemberFacts {
            reachable: true,
            received_position: Some("0/3000148".into()),
            timeline: Some(2),
            timeline_history: Some("1\t0/3000060\tno recovery target specified\n".into()),
            ..MemberFacts::default()
        };
        let Some(Position::Postgresql(p)) = pg.position(Engine::Postgresql).unwrap() else {
            panic!("a PostgreSQL position")
        };
        assert_eq!(p.timeline.0, 2);
        assert_eq!(p.lsn.to_string(), "0/3000148");
        assert_eq!(p.history.unwrap().switches.len(), 1);

        let my = MemberFacts {
            received_position: Some(
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\n4f8a3c1e-0000-11e1-9e33-c80aa9429562:1"
                    .into(),
            ),
            ..MemberFacts::default()
        };
        assert!(matches!(
            my.position(Engine::Mysql).unwrap(),
            Some(Position::Mysql(_))
        ));
        let bad = MemberFacts {
            received_position: Some("nonsense".into()),
            ..MemberFacts::default()
        };
        assert!(bad.position(Engine::Mariadb).is_err());
        assert_eq!(MemberFacts::unreachable().position(Engine::Mysql), Ok(None));
    }

    /// The mock is what the reconciler's tests will use: it must be usable through generics.
    #[tokio::test]
    async fn the_trait_can_be_mocked() {
        async fn fence_then_probe(io: &impl DatabaseIo) -> Result<MemberFacts, DbError> {
            io.fence().await?;
            io.probe().await
        }
        let mut io = MockDatabaseIo::new();
        let mut seq = mockall::Sequence::new();
        io.expect_fence()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|| Ok(()));
        io.expect_probe()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|| {
                Ok(MemberFacts {
                    reachable: true,
                    read_only: Some(true),
                    ..MemberFacts::default()
                })
            });
        assert_eq!(fence_then_probe(&io).await.unwrap().read_only, Some(true));
    }
}
