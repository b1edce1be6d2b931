//! [`DatabaseIo`] for PostgreSQL, over tokio-postgres.
//!
//! One short connection per call (probes are periodic and few; no pool to keep healthy).
//!
//! TLS: with [`PostgresConfig::tls`] set, every connection is TLS on rustls (ring) with
//! `sslmode=require` (a server that does not offer TLS is an error, never a plain fallback) and
//! the server certificate checked as the trust says: by default verify-ca (the chain leads to
//! the trusted CA and is valid now; the host name is not compared, because members are dialled
//! by pod IP, which no certificate names; see [`super::tls`]). SCRAM runs without channel
//! binding. A refused certificate is a [`DbErrorKind::Other`] error ("TLS verification
//! failure"), not an unreachable member. Without a trust: plain TCP (`NoTls`).
//!
//! Every session runs with `statement_timeout` set from [`Timeouts::statement`], and every call
//! is also bounded on the client side.

use std::error::Error as _;
use std::fmt;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Connection, NoTls, Row};

use database_operator_api::Engine;

use super::statements::{
    self, Account, Binding, ReplicationSource, Secret, SourceTls, Statement, Value,
};
use super::tls::{self, ServerTrust};
use super::{DatabaseIo, DbError, DbErrorKind, Dialled, MemberFacts, ServerRole, Timeouts};

/// How to reach and drive one PostgreSQL member.
#[derive(Clone, Debug)]
pub struct PostgresConfig {
    /// The engine behind the PostgreSQL protocol, for the statement builders and errors
    /// (PostgreSQL).
    pub engine: Engine,
    /// Host to dial (from [`super::member_host`]).
    pub host: String,
    /// Port.
    pub port: u16,
    /// The operator's superuser.
    pub user: String,
    /// Its password (redacted in `Debug`).
    pub password: Secret,
    /// Database to connect to (`postgres`).
    pub dbname: String,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// The replication role standbys connect as.
    pub replication_user: String,
    /// The libpq password file on the member that holds the replication password.
    pub replication_passfile: Option<String>,
    /// The name this member reports to its source (`application_name`), normally the pod name.
    pub application_name: Option<String>,
    /// The CA the member's server certificate must chain to; `None`: plain TCP.
    pub tls: Option<ServerTrust>,
}

/// [`DatabaseIo`] for one PostgreSQL member.
#[derive(Clone, Debug)]
pub struct PostgresIo {
    config: PostgresConfig,
    /// The certificate the server presented in this driver's last TLS handshake.
    peer: super::tls::PeerCertificate,
}

/// A text parameter that prints as `<redacted>` in tokio-postgres' debug log of parameters.
struct Redacted<'a>(&'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl ToSql for Redacted<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

impl PostgresIo {
    /// A driver for the member `config` describes. Connects on each call.
    pub fn new(config: PostgresConfig) -> PostgresIo {
        PostgresIo {
            config,
            peer: super::tls::PeerCertificate::default(),
        }
    }

    fn engine(&self) -> Engine {
        self.config.engine
    }

    fn classify(&self, action: &'static str, e: &tokio_postgres::Error) -> DbError {
        // Before the io check below: a refused certificate arrives inside an io::Error and
        // must not look like a member that is down.
        if let Some(message) = tls::tls_failure(e) {
            return self.error(action, DbErrorKind::Other, message);
        }
        let kind = match e.code() {
            Some(c)
                if *c == SqlState::INVALID_PASSWORD
                    || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
            {
                DbErrorKind::AuthFailed
            }
            Some(c)
                if *c == SqlState::FEATURE_NOT_SUPPORTED
                    || *c == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
                    || *c == SqlState::UNDEFINED_FUNCTION =>
            {
                DbErrorKind::NotSupported
            }
            Some(c) if *c == SqlState::CANNOT_CONNECT_NOW || *c == SqlState::ADMIN_SHUTDOWN => {
                DbErrorKind::Unreachable
            }
            Some(_) => DbErrorKind::Other,
            None if e.source().is_some_and(|s| s.is::<std::io::Error>()) || e.is_closed() => {
                DbErrorKind::Unreachable
            }
            None if e.to_string().contains("timed out") || e.to_string().contains("timeout") => {
                DbErrorKind::Unreachable
            }
            None => DbErrorKind::Other,
        };
        let message = match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        };
        self.error(action, kind, message)
    }

    async fn connect(&self, action: &'static str) -> Result<Client, DbError> {
        let c = &self.config;
        let mut pg = tokio_postgres::Config::new();
        pg.host(&c.host)
            .port(c.port)
            .user(&c.user)
            .password(c.password.expose())
            .dbname(&c.dbname)
            .application_name("database-operator")
            .connect_timeout(c.timeouts.connect)
            .options(format!(
                "-c statement_timeout={}",
                c.timeouts.statement.as_millis()
            ));
        match &c.tls {
            None => self.finish_connect(action, pg.connect(NoTls)).await,
            Some(trust) => {
                pg.ssl_mode(SslMode::Require);
                let trust = trust.recording(self.peer.clone());
                self.finish_connect(action, pg.connect(trust)).await
            }
        }
    }

    /// Awaits a connection (bounded by the connect timeout) and drives it in the background.
    async fn finish_connect<S, T>(
        &self,
        action: &'static str,
        connect: impl Future<Output = Result<(Client, Connection<S, T>), tokio_postgres::Error>>,
    ) -> Result<Client, DbError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let c = &self.config;
        let (client, connection) = match tokio::time::timeout(c.timeouts.connect, connect).await {
            Err(_) => {
                return Err(self.error(action, DbErrorKind::Unreachable, "connect timed out"));
            }
            Ok(Err(e)) => return Err(self.classify(action, &e)),
            Ok(Ok(pair)) => pair,
        };
        let (host, port) = (c.host.clone(), c.port);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%host, port, error = %e, "postgresql connection ended");
            }
        });
        Ok(client)
    }

    /// Runs statements in order; returns the rows of the last one.
    async fn run(
        &self,
        client: &Client,
        action: &'static str,
        statements: &[Statement],
    ) -> Result<Vec<Row>, DbError> {
        let mut rows = Vec::new();
        for s in statements {
            tracing::debug!(host = %self.config.host, statement = %s, "postgresql");
            let fut = async {
                match s.binding {
                    Binding::Inline => client
                        .batch_execute(&s.inline_sql())
                        .await
                        .map(|()| Vec::new()),
                    Binding::Parameters if s.params.is_empty() => {
                        client.query(s.sql.as_str(), &[]).await
                    }
                    Binding::Parameters => {
                        let ints: Vec<i32> = s
                            .params
                            .iter()
                            .map(|v| match v {
                                Value::Int(i) => i32::try_from(*i).unwrap_or(i32::MAX),
                                _ => 0,
                            })
                            .collect();
                        let redacted: Vec<Redacted<'_>> = s
                            .params
                            .iter()
                            .map(|v| match v {
                                Value::Secret(x) => Redacted(x.expose()),
                                _ => Redacted(""),
                            })
                            .collect();
                        let params: Vec<&(dyn ToSql + Sync)> = s
                            .params
                            .iter()
                            .enumerate()
                            .map(|(i, v)| -> &(dyn ToSql + Sync) {
                                match v {
                                    Value::Text(t) => t,
                                    Value::Int(_) => &ints[i],
                                    Value::Secret(_) => &redacted[i],
                                }
                            })
                            .collect();
                        client.query(s.sql.as_str(), &params).await
                    }
                }
            };
            let limit = self.config.timeouts.statement + self.config.timeouts.promote;
            rows = match tokio::time::timeout(limit, fut).await {
                Err(_) => {
                    return Err(self.error(action, DbErrorKind::Other, "statement timed out"));
                }
                Ok(r) => r.map_err(|e| self.classify(action, &e))?,
            };
        }
        Ok(rows)
    }

    async fn in_recovery(&self, client: &Client, action: &'static str) -> Result<bool, DbError> {
        let rows = client
            .query("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(|e| self.classify(action, &e))?;
        rows.first()
            .map(|r| r.get::<_, bool>(0))
            .ok_or_else(|| self.error(action, DbErrorKind::Other, "no row"))
    }

    fn facts(&self, row: &Row) -> Result<MemberFacts, DbError> {
        let bad = |e: tokio_postgres::Error| {
            self.error(
                "probe",
                DbErrorKind::Other,
                format!("unexpected probe answer: {e}"),
            )
        };
        let in_recovery: bool = row.try_get("in_recovery").map_err(bad)?;
        let current: Option<String> = row.try_get("current_lsn").map_err(bad)?;
        let receive: Option<String> = row.try_get("receive_lsn").map_err(bad)?;
        let replay: Option<String> = row.try_get("replay_lsn").map_err(bad)?;
        let timeline: Option<i64> = row.try_get("timeline").map_err(bad)?;
        let delay: Option<i64> = row.try_get("replay_delay_seconds").map_err(bad)?;
        let lag_bytes: Option<i64> = row.try_get("replay_lag_bytes").map_err(bad)?;
        let source_port: Option<i32> = row.try_get("source_port").map_err(bad)?;
        let receiver_status: Option<String> = row.try_get("receiver_status").map_err(bad)?;
        let receiver_checks_tls: Option<bool> = row.try_get("receiver_checks_tls").map_err(bad)?;
        let member_slots: Option<String> = row.try_get("member_slots").map_err(bad)?;
        let oldest_segment: Option<String> = row.try_get("oldest_wal_segment").map_err(bad)?;
        let segment_bytes: Option<i64> = row.try_get("wal_segment_bytes").map_err(bad)?;
        let archiver = archiver_facts(row).map_err(bad)?;
        let (position, received) = if in_recovery {
            // A standby that has not streamed yet (restored from an archive) has no received
            // LSN: what it replayed is what it has.
            let received = match (&receive, &replay) {
                (Some(r), Some(p)) => Some(later_lsn(r, p)),
                (r, p) => r.clone().or_else(|| p.clone()),
            };
            (replay, received)
        } else {
            (current.clone(), current)
        };
        Ok(MemberFacts {
            tls_not_after: None,
            reachable: true,
            role: Some(if in_recovery {
                ServerRole::Replica
            } else {
                ServerRole::Primary
            }),
            read_only: Some(in_recovery || row.try_get::<_, bool>("read_only").map_err(bad)?),
            position,
            received_position: received,
            timeline: timeline.and_then(|t| u32::try_from(t).ok()),
            timeline_history: None,
            lag_seconds: if in_recovery {
                delay.and_then(|d| u64::try_from(d).ok())
            } else {
                None
            },
            lag_bytes: lag_bytes.and_then(|b| u64::try_from(b).ok()),
            source_host: row.try_get("source_host").map_err(bad)?,
            source_port: source_port.and_then(|p| u16::try_from(p).ok()),
            replicating: in_recovery.then(|| receiver_status.as_deref() == Some("streaming")),
            source_tls_checked: receiver_checks_tls.filter(|_| in_recovery),
            replication_error: None,
            version: row.try_get("version").map_err(bad)?,
            server_id: row.try_get("system_identifier").map_err(bad)?,
            semi_sync_source: None,
            member_slots: member_slots.map(|s| {
                s.split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            }),
            retained_from: oldest_segment
                .zip(segment_bytes)
                .and_then(|(name, bytes)| segment_start(&name, bytes)),
            source_lacks_history: false,
            archiver,
        })
    }
}

/// The archiver columns of a probe row: `None` unless the server is a primary that archives
/// (`archived_count` is then set).
fn archiver_facts(
    row: &Row,
) -> Result<Option<Box<database_operator_core::ArchiverFacts>>, tokio_postgres::Error> {
    let Some(archived_count) = row.try_get::<_, Option<i64>>("archived_count")? else {
        return Ok(None);
    };
    let count = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
    Ok(Some(Box::new(database_operator_core::ArchiverFacts {
        waiting: count(row.try_get("archive_waiting")?).unwrap_or(0),
        archived_count: count(Some(archived_count)).unwrap_or(0),
        last_archived: row.try_get("last_archived_wal")?,
        last_archived_age_seconds: count(row.try_get("last_archived_age")?),
        failed_count: count(row.try_get("failed_count")?).unwrap_or(0),
        last_failed: row.try_get("last_failed_wal")?,
        last_failed_age_seconds: count(row.try_get("last_failed_age")?),
        last_attempt_failed: row
            .try_get::<_, Option<bool>>("archive_failing")?
            .unwrap_or(false),
    })))
}

/// The LSN (`X/Y`) a WAL segment starts at, from its name without the timeline (16 hex
/// digits: log and segment number) and the segment size in bytes; `None` when it does not read.
fn segment_start(name: &str, segment_bytes: i64) -> Option<String> {
    if name.len() != 16 || !name.is_ascii() {
        return None;
    }
    let log = u64::from_str_radix(&name[..8], 16).ok()?;
    let segment = u64::from_str_radix(&name[8..], 16).ok()?;
    let offset = segment.checked_mul(u64::try_from(segment_bytes).ok()?)?;
    (offset <= u64::from(u32::MAX)).then(|| format!("{log:X}/{offset:X}"))
}

/// The later of two LSNs in text form (the first when either does not parse).
fn later_lsn(a: &str, b: &str) -> String {
    use database_operator_core::position::Lsn;
    match (a.parse::<Lsn>(), b.parse::<Lsn>()) {
        (Ok(x), Ok(y)) if y > x => b.to_owned(),
        _ => a.to_owned(),
    }
}

impl PostgresIo {
    /// [`DatabaseIo::follow`].
    async fn follow_source(
        &self,
        source_host: &str,
        port: u16,
        tls: &SourceTls,
    ) -> Result<(), DbError> {
        let client = self.connect("follow").await?;
        if !self.in_recovery(&client, "follow").await? {
            return Err(self.error(
                "follow",
                DbErrorKind::NotSupported,
                "a running primary cannot follow another server: restart it as a standby \
                 (standby.signal), after pg_rewind when it has diverged",
            ));
        }
        let source = ReplicationSource {
            host: source_host.to_owned(),
            port,
            user: self.config.replication_user.clone(),
            password: None,
            passfile: self.config.replication_passfile.clone(),
            application_name: self.config.application_name.clone(),
            tls: tls.clone(),
        };
        let steps = statements::follow(self.engine(), &source)
            .map_err(|e| self.error("follow", DbErrorKind::NotSupported, e.to_string()))?;
        self.run(&client, "follow", &steps).await?;
        Ok(())
    }
}

impl Dialled for PostgresIo {
    fn dialled(&self) -> (Engine, &str, u16) {
        (self.config.engine, &self.config.host, self.config.port)
    }
}

impl DatabaseIo for PostgresIo {
    async fn probe(&self) -> Result<MemberFacts, DbError> {
        let client = match self.connect("probe").await {
            Err(e) if e.kind == DbErrorKind::Unreachable => {
                tracing::debug!(error = %e, "member unreachable");
                return Ok(MemberFacts::unreachable());
            }
            other => other?,
        };
        let rows = self
            .run(&client, "probe", &statements::probe(self.engine()))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| self.error("probe", DbErrorKind::Other, "probe returned no row"))?;
        let mut facts = self.facts(row)?;
        facts.tls_not_after = self
            .peer
            .get()
            .and_then(|der| crate::certs::not_after_of_der(&der).ok());
        if let Some(tl) = facts.timeline.filter(|&t| t > 1) {
            // The history lets core tell a standby that can follow from one that diverged.
            // Reading it needs superuser or pg_read_server_files; without it the facts say
            // nothing about history.
            match self
                .run(&client, "probe", &[statements::timeline_history(tl)])
                .await
            {
                Ok(rows) => facts.timeline_history = rows.first().and_then(|r| r.get(0)),
                Err(e) => {
                    tracing::debug!(error = %e, timeline = tl, "timeline history not readable")
                }
            }
        }
        Ok(facts)
    }

    async fn fence(&self) -> Result<(), DbError> {
        let client = self.connect("fence").await?;
        self.run(&client, "fence", &statements::fence(self.engine()))
            .await?;
        Ok(())
    }

    async fn quarantine(&self) -> Result<(), DbError> {
        let client = self.connect("quarantine").await?;
        self.run(
            &client,
            "quarantine",
            &statements::quarantine(self.engine()),
        )
        .await?;
        Ok(())
    }

    async fn promote(&self) -> Result<(), DbError> {
        let client = self.connect("promote").await?;
        let mut steps = statements::promote(
            self.engine(),
            self.config
                .timeouts
                .promote
                .as_secs()
                .try_into()
                .unwrap_or(u32::MAX),
        );
        if !self.in_recovery(&client, "promote").await? {
            // Already a primary: only lift a fence left from before.
            steps.remove(0);
            self.run(&client, "promote", &steps).await?;
            return Ok(());
        }
        let wait = format!(
            "SET statement_timeout = {}",
            (self.config.timeouts.promote + self.config.timeouts.statement).as_millis()
        );
        client
            .batch_execute(&wait)
            .await
            .map_err(|e| self.classify("promote", &e))?;
        let rows = self.run(&client, "promote", &steps[..1]).await?;
        if !rows.first().is_some_and(|r| r.get::<_, bool>(0)) {
            return Err(self.error(
                "promote",
                DbErrorKind::Other,
                format!(
                    "promotion did not finish within {} s",
                    self.config.timeouts.promote.as_secs()
                ),
            ));
        }
        self.run(&client, "promote", &steps[1..]).await?;
        Ok(())
    }

    async fn follow(&self, source_host: &str, port: u16, tls: &SourceTls) -> Result<(), DbError> {
        self.follow_source(source_host, port, tls).await
    }

    async fn set_password(
        &self,
        account: &Account,
        password: &Secret,
        _retain_old: bool,
    ) -> Result<(), DbError> {
        let verifier = Secret::new(postgres_protocol::password::scram_sha_256(
            password.expose().as_bytes(),
        ));
        let steps = statements::set_password(self.engine(), account, &verifier, false)
            .map_err(|e| self.error("set_password", DbErrorKind::NotSupported, e.to_string()))?;
        let client = self.connect("set_password").await?;
        self.run(&client, "set_password", &steps).await?;
        Ok(())
    }

    async fn discard_old_password(&self, _account: &Account) -> Result<(), DbError> {
        // PostgreSQL keeps one password per role: nothing to discard.
        Ok(())
    }

    async fn set_semi_sync(&self, _enabled: bool) -> Result<(), DbError> {
        // synchronous_standby_names comes with the rendered configuration.
        Err(self.error(
            "set_semi_sync",
            DbErrorKind::NotSupported,
            "PostgreSQL has no semi-synchronous switch",
        ))
    }

    async fn reload_tls(&self) -> Result<(), DbError> {
        let client = self.connect("reload_tls").await?;
        self.run(
            &client,
            "reload_tls",
            &statements::reload_tls(self.engine()),
        )
        .await
        .map(drop)
    }

    async fn keep_member_slots(&self, slots: &[String]) -> Result<(), DbError> {
        let client = self.connect("keep_member_slots").await?;
        if self.in_recovery(&client, "keep_member_slots").await? {
            return Err(self.error(
                "keep_member_slots",
                DbErrorKind::NotSupported,
                "a standby keeps no slots for the members",
            ));
        }
        let steps = statements::keep_member_slots(self.engine(), slots);
        self.run(&client, "keep_member_slots", &steps).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wal_segment_name_gives_the_lsn_it_starts_at() {
        assert_eq!(
            segment_start("0000000000000003", 16 << 20).as_deref(),
            Some("0/3000000")
        );
        assert_eq!(
            segment_start("00000002000000FF", 16 << 20).as_deref(),
            Some("2/FF000000")
        );
        assert_eq!(
            segment_start("0000000100000001", 1 << 30).as_deref(),
            Some("1/40000000")
        );
        // More segments than fit in a log: not a name a server writes.
        assert_eq!(segment_start("0000000000000100", 16 << 20), None);
        assert_eq!(segment_start("garbage", 16 << 20), None);
        assert_eq!(segment_start("00000000000000ZZ", 16 << 20), None);
    }
}
