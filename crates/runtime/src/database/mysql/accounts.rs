//! The application accounts a backup appends to its dump, read through the driver
//! ([`database_operator_engine::statements::accounts`]).

use mysql_async::Row;

use super::{DbError, MysqlIo, value_text};

impl MysqlIo {
    /// The accounts section a backup appends to its dump
    /// ([`database_operator_engine::statements::accounts`]): every account but the server's own
    /// and `managed`, as the server prints it; with the accounts left out because a statement
    /// spans lines.
    pub async fn application_accounts(
        &self,
        managed: &[String],
    ) -> Result<(String, Vec<String>), DbError> {
        use database_operator_engine::statements::accounts;
        const ACTION: &str = "accounts";
        let engine = self.engine();
        let Some(list) = accounts::list(engine) else {
            return Ok((String::new(), Vec::new()));
        };
        let mut conn = self.connect(ACTION).await?;
        let limit = self.config.timeouts.statement;
        self.run(&mut conn, ACTION, &accounts::session_setup(engine), limit)
            .await?;
        let rows = self.run(&mut conn, ACTION, &[list], limit).await?;
        let mut read = Vec::new();
        for row in rows {
            let column = |i: usize| row.as_ref(i).and_then(value_text).unwrap_or_default();
            let (user, host, role) = (column(0), column(1), column(2) == "Y");
            if !accounts::copied(&user, managed) {
                continue;
            }
            let first = |rows: Vec<Row>| -> Vec<String> {
                rows.iter()
                    .filter_map(|r| r.as_ref(0).and_then(value_text))
                    .collect()
            };
            let mut shown = Vec::new();
            if !role {
                shown.push(accounts::show_create(engine, &user, &host));
            }
            shown.push(accounts::show_grants(engine, &user, &host, role));
            let mut answers = Vec::new();
            for statement in shown {
                match self.run(&mut conn, ACTION, &[statement], limit).await {
                    Ok(rows) => answers.push(first(rows)),
                    Err(error) => {
                        let check = accounts::exists(engine, &user, &host);
                        let left = self.run(&mut conn, ACTION, &[check], limit).await?;
                        let gone = left
                            .first()
                            .and_then(|r| r.as_ref(0).and_then(value_text))
                            .is_some_and(|n| n == "0");
                        if !gone {
                            return Err(error);
                        }
                        tracing::info!(user = %user.escape_debug(), host = %host.escape_debug(), "an account dropped while the backup read it is left out");
                        answers.clear();
                        break;
                    }
                }
            }
            if answers.is_empty() {
                continue;
            }
            let grants = answers.pop().unwrap_or_default();
            let create = answers
                .pop()
                .and_then(|c| c.into_iter().next())
                .unwrap_or_default();
            read.push(accounts::ReadAccount {
                user,
                host,
                role,
                create,
                grants,
            });
        }
        let _ = conn.disconnect().await;
        Ok(accounts::section(&read))
    }
}
