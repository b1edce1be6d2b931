//! [`DatabaseIo`] for MySQL 8.4/9.x and MariaDB, over mysql_async.
//!
//! One client for both; [`MysqlConfig::engine`] chooses the statements
//! (MySQL: `REPLICA`/`SOURCE`, GTID auto-positioning, `super_read_only`, dual
//! passwords; MariaDB: `SLAVE`/`MASTER`, `MASTER_USE_GTID = slave_pos`,
//! `read_only`).
//!
//! mysql_async is built with its rustls TLS on ring (no default features, no native TLS) and
//! logs nothing (its `tracing` feature is off), so no statement text leaves through it.
//!
//! TLS: with [`MysqlConfig::tls`] set, every connection requires TLS (a server without it is an
//! error) and trusts only that CA ([`super::tls::mysql_ssl_opts`]). The trust asks for
//! verify-ca (no host name check: members are dialled by pod IP, which no certificate names),
//! but mysql_async 0.37.1 does not honour its own `skip_domain_validation` with this rustls, so
//! the server certificate must also name the host dialled (see `mysql_ssl_opts`). A refused
//! certificate is a [`DbErrorKind::Other`] error ("TLS verification failure"), not an
//! unreachable member. Without a trust: plain TCP; with MySQL's default
//! `caching_sha2_password` the client then fetches the server's RSA key to send the password
//! (the driver supports it); the replication channel asks for it with
//! `GET_SOURCE_PUBLIC_KEY = 1`.
//!
//! Each session: `sql_mode` cleared (so `\` escapes in quoted literals mean what
//! [`statements::quote_literal`] expects) and a server-side statement limit
//! (`max_statement_time` on MariaDB, `max_execution_time` for `SELECT`s on MySQL); every call
//! is also bounded on the client side. Both dialects run against real servers in
//! `tests/database_io.rs` (MariaDB 10.11 from Debian's package, MySQL 9.7 from the process
//! nodes' image root); the statements are also pinned by snapshots.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Params, Row};

use database_operator_api::Engine;

use super::statements::{
    self, Account, Binding, ReplicationSource, Secret, SourceTls, Statement, Value,
};
use super::tls::{self, ServerTrust};
use super::{DatabaseIo, DbError, DbErrorKind, Dialled, MemberFacts, ServerRole, Timeouts};

mod accounts;

/// How to reach and drive one MySQL or MariaDB member.
#[derive(Clone, Debug)]
pub struct MysqlConfig {
    /// MySQL or MariaDB.
    pub engine: Engine,
    /// Host to dial (from [`super::member_host`]).
    pub host: String,
    /// Port.
    pub port: u16,
    /// The operator's administrative account.
    pub user: String,
    /// Its password (redacted in `Debug`).
    pub password: Secret,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// The account replicas connect to their source as.
    pub replication_user: String,
    /// Its password.
    pub replication_password: Secret,
    /// The CA the member's server certificate must chain to; `None`: plain TCP.
    pub tls: Option<ServerTrust>,
}

/// [`DatabaseIo`] for one MySQL or MariaDB member.
#[derive(Clone, Debug)]
pub struct MysqlIo {
    config: MysqlConfig,
}

/// MySQL/MariaDB server error codes the driver classifies.
mod code {
    pub const ACCESS_DENIED: u16 = 1045;
    pub const DB_ACCESS_DENIED: u16 = 1044;
    pub const ACCESS_DENIED_NO_PASSWORD: u16 = 1698;
    pub const PARSE_ERROR: u16 = 1064;
    pub const UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;
    pub const NOT_SUPPORTED_YET: u16 = 1235;
    pub const UNSUPPORTED_PS: u16 = 1295;
    pub const SERVER_SHUTDOWN: u16 = 1053;
    pub const CON_COUNT: u16 = 1040;
}

/// The value of column `name` as text (`None` for NULL or a missing column).
fn text(row: &Row, name: &str) -> Option<String> {
    let i = row
        .columns_ref()
        .iter()
        .position(|c| c.name_str() == name)?;
    value_text(row.as_ref(i)?)
}

fn value_text(v: &mysql_async::Value) -> Option<String> {
    match v {
        mysql_async::Value::NULL => None,
        mysql_async::Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        mysql_async::Value::Int(i) => Some(i.to_string()),
        mysql_async::Value::UInt(u) => Some(u.to_string()),
        other => Some(other.as_sql(true)),
    }
}

fn at(row: &Row, i: usize) -> Option<String> {
    row.as_ref(i).and_then(value_text)
}

fn truthy(v: Option<String>) -> Option<bool> {
    v.map(|s| matches!(s.as_str(), "1" | "ON" | "on" | "Yes" | "YES"))
}

impl MysqlIo {
    /// A driver for the member `config` describes. Connects on each call.
    pub fn new(config: MysqlConfig) -> MysqlIo {
        MysqlIo { config }
    }

    fn engine(&self) -> Engine {
        self.config.engine
    }

    fn classify(&self, action: &'static str, e: &mysql_async::Error) -> DbError {
        // Before the io check below: a refused certificate arrives inside an io::Error and
        // must not look like a member that is down.
        if let Some(message) = tls::tls_failure(e) {
            return self.error(action, DbErrorKind::Other, message);
        }
        let kind = match e {
            mysql_async::Error::Server(s) => match s.code {
                code::ACCESS_DENIED | code::DB_ACCESS_DENIED | code::ACCESS_DENIED_NO_PASSWORD => {
                    DbErrorKind::AuthFailed
                }
                code::PARSE_ERROR
                | code::UNKNOWN_SYSTEM_VARIABLE
                | code::NOT_SUPPORTED_YET
                | code::UNSUPPORTED_PS => DbErrorKind::NotSupported,
                code::SERVER_SHUTDOWN | code::CON_COUNT => DbErrorKind::Unreachable,
                _ => DbErrorKind::Other,
            },
            // The driver's own TLS set-up (its trust store, the server name).
            mysql_async::Error::Io(mysql_async::IoError::Tls(_)) => DbErrorKind::Other,
            mysql_async::Error::Io(_) => DbErrorKind::Unreachable,
            mysql_async::Error::Driver(
                mysql_async::DriverError::ConnectionClosed
                | mysql_async::DriverError::PoolDisconnected,
            ) => DbErrorKind::Unreachable,
            _ => DbErrorKind::Other,
        };
        self.error(action, kind, e.to_string())
    }

    fn opts(&self) -> Opts {
        let c = &self.config;
        let limit = c.timeouts.statement;
        let session_limit = statements::session_time_limit(c.engine, limit);
        OptsBuilder::default()
            .ip_or_hostname(c.host.clone())
            .tcp_port(c.port)
            .user(Some(c.user.clone()))
            .pass(Some(c.password.expose().to_owned()))
            // Stay on TCP to the address given (the driver would otherwise switch to the
            // server's Unix socket when it thinks it is local).
            .prefer_socket(false)
            .init(vec!["SET SESSION sql_mode = ''".to_owned(), session_limit])
            // TLS required when a trust is given (None: plain TCP).
            .ssl_opts(c.tls.as_ref().map(tls::mysql_ssl_opts))
            .into()
    }

    async fn connect(&self, action: &'static str) -> Result<Conn, DbError> {
        match tokio::time::timeout(self.config.timeouts.connect, Conn::new(self.opts())).await {
            Err(_) => Err(self.error(action, DbErrorKind::Unreachable, "connect timed out")),
            Ok(Err(e)) => Err(self.classify(action, &e)),
            Ok(Ok(conn)) => Ok(conn),
        }
    }

    /// Runs statements in order; returns the rows of the last one.
    async fn run(
        &self,
        conn: &mut Conn,
        action: &'static str,
        statements: &[Statement],
        limit: std::time::Duration,
    ) -> Result<Vec<Row>, DbError> {
        let mut rows = Vec::new();
        for s in statements {
            tracing::debug!(host = %self.config.host, statement = %s, "{}", self.engine().as_str());
            let fut = async {
                match s.binding {
                    Binding::Inline => conn.query::<Row, _>(s.inline_sql()).await,
                    Binding::Parameters if s.params.is_empty() => {
                        conn.query::<Row, _>(s.sql.as_str()).await
                    }
                    Binding::Parameters => {
                        let params: Vec<mysql_async::Value> = s
                            .params
                            .iter()
                            .map(|v| match v {
                                Value::Text(t) => mysql_async::Value::from(t.as_str()),
                                Value::Int(i) => mysql_async::Value::from(*i),
                                Value::Secret(x) => mysql_async::Value::from(x.expose()),
                            })
                            .collect();
                        conn.exec::<Row, _, _>(s.sql.as_str(), Params::Positional(params))
                            .await
                    }
                }
            };
            rows = match tokio::time::timeout(limit, fut).await {
                Err(_) => {
                    return Err(self.error(action, DbErrorKind::Other, "statement timed out"));
                }
                Ok(r) => r.map_err(|e| {
                    let mut err = self.classify(action, &e);
                    if s.binding == Binding::Inline && s.params.iter().any(|v| matches!(v, Value::Secret(_))) {
                        // A server error can quote the statement ("... near '<text>'"), and
                        // this text holds a password: keep only the code.
                        err.message = match &e {
                            mysql_async::Error::Server(se) => format!(
                                "server error {} ({}); message withheld: the statement carries a secret",
                                se.code, se.state
                            ),
                            _ => "failed; message withheld: the statement carries a secret".to_owned(),
                        };
                    }
                    err
                })?,
            };
        }
        Ok(rows)
    }

    async fn run_and_close(
        &self,
        action: &'static str,
        statements: &[Statement],
    ) -> Result<(), DbError> {
        let mut conn = self.connect(action).await?;
        let limit = self.config.timeouts.statement;
        self.run(&mut conn, action, statements, limit).await?;
        let _ = conn.disconnect().await;
        Ok(())
    }

    async fn read_facts(&self, conn: &mut Conn) -> Result<MemberFacts, DbError> {
        let [vars, replica, semi_sync, ssl] =
            <[Statement; 4]>::try_from(statements::probe(self.engine()))
                .map_err(|_| self.error("probe", DbErrorKind::Other, "probe statements"))?;
        let limit = self.config.timeouts.statement;
        let vars = self.run(conn, "probe", &[vars], limit).await?;
        let vars = vars
            .first()
            .ok_or_else(|| self.error("probe", DbErrorKind::Other, "no row of server variables"))?;
        let status = self.run(conn, "probe", &[replica], limit).await?;
        let status = status.first();
        let switches = self.run(conn, "probe", &[semi_sync], limit).await?;
        let ssl = self.run(conn, "probe", &[ssl], limit).await?;
        let mut facts = MemberFacts {
            reachable: true,
            semi_sync_source: semi_sync_source(&switches),
            // Only for a member dialled with the cluster's authority: MySQL serves a
            // certificate it made itself when it was given none.
            tls_not_after: ssl
                .first()
                .and_then(|r| at(r, 1))
                .and_then(|t| ssl_not_after(&t))
                .filter(|_| self.config.tls.is_some()),
            ..MemberFacts::default()
        };
        let reading = database_operator_engine::of(self.engine()).probe_reading();
        let words = statements::replica_status_words(self.engine());
        let (Some(reading), Some((prefix, source))) = (reading, words) else {
            return Err(self.error(
                "probe",
                DbErrorKind::NotSupported,
                "no replica status in this engine",
            ));
        };
        facts.server_id = at(vars, reading.server_id);
        facts.read_only = truthy(at(vars, reading.read_only));
        facts.position = at(vars, reading.position).map(|p| reading.position(p));
        facts.version = at(vars, reading.version);
        facts.received_position = facts.position.clone();
        let source_host = status
            .and_then(|r| text(r, &format!("{source}_Host")))
            .filter(|h| !h.is_empty());
        facts.role = Some(if source_host.is_some() {
            ServerRole::Replica
        } else {
            ServerRole::Primary
        });
        if let Some(row) = status.filter(|_| source_host.is_some()) {
            facts.source_port = text(row, &format!("{source}_Port")).and_then(|p| p.parse().ok());
            facts.lag_seconds =
                text(row, &format!("Seconds_Behind_{source}")).and_then(|s| s.parse().ok());
            let io = text(row, &format!("{prefix}_IO_Running"));
            let sql = text(row, &format!("{prefix}_SQL_Running"));
            facts.replicating = Some(io.as_deref() == Some("Yes") && sql.as_deref() == Some("Yes"));
            facts.source_lacks_history = lacks_history(
                text(row, "Last_IO_Errno").as_deref(),
                text(row, "Last_IO_Error").as_deref(),
            );
            facts.replication_error = ["Last_IO_Error", "Last_SQL_Error"]
                .iter()
                .filter_map(|c| text(row, c))
                .find(|e| !e.is_empty());
            facts.source_tls_checked = Some(
                text(row, &format!("{source}_SSL_Allowed")).as_deref() == Some("Yes")
                    && text(row, &format!("{source}_SSL_CA_File")).is_some_and(|f| !f.is_empty())
                    && text(row, &format!("{source}_SSL_Verify_Server_Cert")).as_deref()
                        == Some("Yes"),
            );
            let received = text(row, reading.received_column).unwrap_or_default();
            facts.received_position = reading
                .received_position(facts.position.as_deref().unwrap_or_default(), &received)
                .or(facts.position.clone());
        }
        facts.source_host = source_host;
        Ok(facts)
    }
}

/// The source side's switch among the rows of `SHOW GLOBAL VARIABLES LIKE
/// 'rpl_semi_sync_%enabled'` (`rpl_semi_sync_source_enabled`, MariaDB
/// `rpl_semi_sync_master_enabled`); `None` when neither is there (no plugin).
/// `Ssl_server_not_after` as MySQL and MariaDB print it (OpenSSL's `Mar  5 12:00:00 2031 GMT`),
/// in seconds since the Unix epoch; `None` when empty (no TLS) or not understood.
fn ssl_not_after(text: &str) -> Option<i64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let normalised = words.join(" ");
    let parsed =
        k8s_openapi::jiff::fmt::strtime::parse("%b %d %H:%M:%S %Y GMT", &normalised).ok()?;
    let at = parsed.to_datetime().ok()?;
    let zoned = at.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).ok()?;
    Some(zoned.timestamp().as_second())
}

fn semi_sync_source(rows: &[Row]) -> Option<bool> {
    rows.iter()
        .find(|r| {
            at(r, 0).is_some_and(|n| {
                n.eq_ignore_ascii_case("rpl_semi_sync_source_enabled")
                    || n.eq_ignore_ascii_case("rpl_semi_sync_master_enabled")
            })
        })
        .and_then(|r| truthy(at(r, 1)))
}

impl MysqlIo {
    /// [`DatabaseIo::follow`].
    async fn follow_source(
        &self,
        source_host: &str,
        port: u16,
        tls: &SourceTls,
    ) -> Result<(), DbError> {
        let source = ReplicationSource {
            host: source_host.to_owned(),
            port,
            user: self.config.replication_user.clone(),
            password: Some(self.config.replication_password.clone()),
            passfile: None,
            application_name: None,
            tls: tls.clone(),
        };
        let steps = statements::follow(self.engine(), &source)
            .map_err(|e| self.error("follow", DbErrorKind::NotSupported, e.to_string()))?;
        if let SourceTls::Checked { ca_file } = tls
            && self.already_checked(source_host, port, ca_file).await?
        {
            // Asked again before the next probe saw the change: restarting the channel would
            // only interrupt it.
            return Ok(());
        }
        self.run_and_close("follow", &steps).await
    }

    /// Whether the replica already replicates from `host:port` over TLS that checks the source
    /// against `ca`, both threads running.
    async fn already_checked(&self, host: &str, port: u16, ca: &str) -> Result<bool, DbError> {
        let Some((prefix, source)) = statements::replica_status_words(self.engine()) else {
            return Ok(false);
        };
        let Some(status) = statements::probe(self.engine()).into_iter().nth(1) else {
            return Ok(false);
        };
        let mut conn = self.connect("follow").await?;
        let limit = self.config.timeouts.statement;
        let rows = self.run(&mut conn, "follow", &[status], limit).await?;
        let _ = conn.disconnect().await;
        let Some(row) = rows.first() else {
            return Ok(false);
        };
        let is = |column: String, want: &str| text(row, &column).as_deref() == Some(want);
        Ok(is(format!("{source}_Host"), host)
            && is(format!("{source}_Port"), &port.to_string())
            && is(format!("{source}_SSL_Allowed"), "Yes")
            && is(format!("{source}_SSL_CA_File"), ca)
            && is(format!("{source}_SSL_Verify_Server_Cert"), "Yes")
            && is(format!("{prefix}_IO_Running"), "Yes")
            && is(format!("{prefix}_SQL_Running"), "Yes"))
    }
}

impl Dialled for MysqlIo {
    fn dialled(&self) -> (Engine, &str, u16) {
        (self.config.engine, &self.config.host, self.config.port)
    }
}

impl DatabaseIo for MysqlIo {
    async fn probe(&self) -> Result<MemberFacts, DbError> {
        let mut conn = match self.connect("probe").await {
            Err(e) if e.kind == DbErrorKind::Unreachable => {
                tracing::debug!(error = %e, "member unreachable");
                return Ok(MemberFacts::unreachable());
            }
            other => other?,
        };
        let facts = self.read_facts(&mut conn).await?;
        let _ = conn.disconnect().await;
        Ok(facts)
    }

    async fn fence(&self) -> Result<(), DbError> {
        self.run_and_close("fence", &statements::fence(self.engine()))
            .await
    }

    async fn quarantine(&self) -> Result<(), DbError> {
        self.run_and_close("quarantine", &statements::quarantine(self.engine()))
            .await
    }

    async fn promote(&self) -> Result<(), DbError> {
        let mut conn = self.connect("promote").await?;
        let d = self.engine();
        let limit = self.config.timeouts.statement;
        let facts = self.read_facts(&mut conn).await?;
        if facts.role == Some(ServerRole::Replica) {
            // Apply everything received before the replica forgets its source.
            self.run(&mut conn, "promote", &statements::stop_receiving(d), limit)
                .await?;
            let facts = self.read_facts(&mut conn).await?;
            let received = facts.received_position.unwrap_or_default();
            if !received.is_empty() {
                let secs =
                    u32::try_from(self.config.timeouts.promote.as_secs()).unwrap_or(u32::MAX);
                let no_limit = statements::session_time_limit(d, std::time::Duration::ZERO);
                conn.query_drop(no_limit)
                    .await
                    .map_err(|e| self.classify("promote", &e))?;
                let rows = self
                    .run(
                        &mut conn,
                        "promote",
                        &statements::wait_applied(d, &received, secs),
                        self.config.timeouts.promote + limit,
                    )
                    .await?;
                let answer = rows.first().and_then(|r| at(r, 0));
                if answer.as_deref() != Some("0") {
                    return Err(self.error(
                        "promote",
                        DbErrorKind::Other,
                        format!("received transactions not applied within {secs} s ({received})"),
                    ));
                }
            }
        }
        self.run(&mut conn, "promote", &statements::promote(d, 0), limit)
            .await?;
        let _ = conn.disconnect().await;
        Ok(())
    }

    async fn follow(&self, source_host: &str, port: u16, tls: &SourceTls) -> Result<(), DbError> {
        self.follow_source(source_host, port, tls).await
    }

    async fn set_password(
        &self,
        account: &Account,
        password: &Secret,
        retain_old: bool,
    ) -> Result<(), DbError> {
        let steps = statements::set_password(self.engine(), account, password, retain_old)
            .map_err(|e| self.error("set_password", DbErrorKind::NotSupported, e.to_string()))?;
        self.run_and_close("set_password", &steps).await
    }

    async fn discard_old_password(&self, account: &Account) -> Result<(), DbError> {
        let steps = statements::discard_old_password(self.engine(), account).map_err(|e| {
            self.error(
                "discard_old_password",
                DbErrorKind::NotSupported,
                e.to_string(),
            )
        })?;
        if steps.is_empty() {
            return Ok(());
        }
        self.run_and_close("discard_old_password", &steps).await
    }

    async fn set_semi_sync(&self, enabled: bool) -> Result<(), DbError> {
        let steps = statements::set_semi_sync(self.engine(), enabled);
        self.run_and_close("set_semi_sync", &steps).await
    }

    async fn reload_tls(&self) -> Result<(), DbError> {
        let steps = statements::reload_tls(self.engine());
        self.run_and_close("reload_tls", &steps).await
    }

    async fn keep_member_slots(&self, _slots: &[String]) -> Result<(), DbError> {
        // Binary logs are kept by time (binlog_expire_logs_seconds), not by slots.
        Err(self.error(
            "keep_member_slots",
            DbErrorKind::NotSupported,
            "MySQL and MariaDB have no replication slots",
        ))
    }
}

/// Whether a replica's IO error says its source no longer has the binary logs it asks for:
/// error 1236 (`ER_MASTER_FATAL_ERROR_READING_BINLOG`; MySQL reports it wrapped in 13114 with
/// the text "Got fatal error 1236 from source ..."). A replica with errant transactions gets
/// the same error; the core tells the two apart by positions.
fn lacks_history(io_errno: Option<&str>, io_error: Option<&str>) -> bool {
    io_errno == Some("1236") || io_error.is_some_and(|e| e.contains("fatal error 1236"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purged_binary_log_is_told_from_other_io_errors() {
        assert!(lacks_history(
            Some("1236"),
            Some(
                "Got fatal error 1236 from master when reading data from binary log: 'Could not find GTID state requested by slave in any binlog files'"
            )
        ));
        assert!(lacks_history(
            Some("13114"),
            Some(
                "Got fatal error 1236 from source when reading data from binary log: 'Cannot replicate because the source purged required binary logs.'"
            )
        ));
        assert!(!lacks_history(
            Some("2003"),
            Some("error connecting to master")
        ));
        assert!(!lacks_history(None, None));
    }

    #[test]
    fn the_config_debug_output_has_no_password() {
        let c = MysqlConfig {
            engine: Engine::Mariadb,
            host: "127.0.0.1".into(),
            port: 3306,
            user: "operator".into(),
            password: Secret::new("very-secret-1"),
            timeouts: Timeouts::default(),
            replication_user: "replication".into(),
            replication_password: Secret::new("very-secret-2"),
            tls: None,
        };
        let shown = format!("{:?}", MysqlIo::new(c));
        assert!(!shown.contains("very-secret"), "{shown}");
    }

    #[test]
    fn the_servers_certificate_expiry_is_read_as_openssl_prints_it() {
        // 2031-03-05T12:00:00Z and 2031-11-25T08:09:10Z.
        assert_eq!(
            super::ssl_not_after("Mar  5 12:00:00 2031 GMT"),
            Some(1_930_478_400)
        );
        assert_eq!(
            super::ssl_not_after("Nov 25 08:09:10 2031 GMT"),
            Some(1_953_360_550)
        );
        assert_eq!(super::ssl_not_after(""), None);
        assert_eq!(super::ssl_not_after("soon"), None);
    }
}
