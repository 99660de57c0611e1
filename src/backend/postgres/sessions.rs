//! The sessions that hold or wait for an advisory lock, from pg_locks and
//! pg_stat_activity: what the run path says of a holder (status line,
//! conflict message), and what `holder` shows.

use super::lock::{key_parts, record_in};
use crate::display;
use crate::record::Record;
use postgres::{Client, SimpleQueryMessage};

/// A session holding or waiting for the lock.
pub struct PgSession {
    pub pid: i32,
    pub granted: bool,
    pub application_name: Option<String>,
    pub user: Option<String>,
    pub client_addr: Option<String>,
    pub backend_start: Option<String>,
    /// Its last statement, when we may see it.
    pub query: Option<String>,
}

impl PgSession {
    pub fn record(&self) -> Option<Record> {
        self.query.as_deref().and_then(record_in)
    }

    /// For the status line and the conflict message.
    pub fn describe(&self) -> String {
        if let Some(record) = self.record().filter(|r| !r.is_released()) {
            return format!(
                "{} (PostgreSQL server pid {})",
                display::holder_summary(&record),
                self.pid
            );
        }
        let mut text = format!("PostgreSQL session {}", self.pid);
        if let Some(app) = self.application_name.as_deref().filter(|a| !a.is_empty()) {
            text.push_str(&format!(" '{}'", display::escape(app)));
        }
        if let Some(user) = &self.user {
            text.push_str(&format!(" of {}", display::escape(user)));
        }
        if let Some(addr) = &self.client_addr {
            text.push_str(&format!(" from {}", display::escape(addr)));
        }
        text
    }
}

fn sessions_sql(key: i64) -> String {
    let (classid, objid) = key_parts(key);
    format!(
        "SELECT l.pid, l.granted, a.application_name, a.usename, host(a.client_addr), \
         to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), a.query \
         FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = {classid} AND l.objid = {objid} \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         ORDER BY l.granted DESC, l.pid"
    )
}

/// The sessions holding or waiting for the lock on `key`, holders first.
pub fn sessions(client: &mut Client, key: i64) -> Result<Vec<PgSession>, postgres::Error> {
    let answer = client.simple_query(&sessions_sql(key))?;
    Ok(answer
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => {
                let text = |i: usize| row.get(i).map(str::to_owned);
                Some(PgSession {
                    pid: row.get(0)?.parse().ok()?,
                    granted: row.get(1) == Some("t"),
                    application_name: text(2),
                    user: text(3),
                    client_addr: text(4),
                    backend_start: text(5),
                    query: text(6),
                })
            }
            _ => None,
        })
        .collect())
}
