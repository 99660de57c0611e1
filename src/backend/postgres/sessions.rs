//! The sessions that hold or wait for an advisory lock, from pg_locks and
//! pg_stat_activity: what the run path says of a holder (status line,
//! conflict message), and what `holder` shows.

use super::sql::{key_parts, named, record_in};
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
    /// Its record, if its last statement carries one. A pid no process
    /// can have (a record written by hand: anyone who can run SQL can
    /// write one) is no pid, so that nothing names a holder "pid 0".
    pub fn record(&self) -> Option<Record> {
        let mut record = self.query.as_deref().and_then(record_in)?;
        record.pid = record.pid.filter(|&p| p > 0 && i32::try_from(p).is_ok());
        Some(record)
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

/// What every query below reads of a session, from `l` (pg_locks) and `a`
/// (pg_stat_activity), named as [`parse`] reads them.
const COLUMNS: &str = "l.pid AS pid, l.granted AS granted, a.application_name AS application_name, \
     a.usename AS usename, host(a.client_addr) AS client_addr, \
     to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS backend_start, \
     a.query AS query";

/// pg_locks rows in the current database.
const THIS_DATABASE: &str =
    "l.database = (SELECT oid FROM pg_database WHERE datname = current_database())";

fn sessions_sql(key: i64) -> String {
    let (classid, objid) = key_parts(key);
    format!(
        "SELECT {COLUMNS} \
         FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = {classid} AND l.objid = {objid} \
         AND {THIS_DATABASE} ORDER BY l.granted DESC, l.pid"
    )
}

/// A session from `row`, read by [`COLUMNS`]' names.
fn parse(row: &postgres::SimpleQueryRow) -> Option<PgSession> {
    let text = |name: &str| named(row, name).map(str::to_owned);
    Some(PgSession {
        pid: named(row, "pid")?.parse().ok()?,
        granted: named(row, "granted") == Some("t"),
        application_name: text("application_name"),
        user: text("usename"),
        client_addr: text("client_addr"),
        backend_start: text("backend_start"),
        query: text("query"),
    })
}

fn rows(answer: &[SimpleQueryMessage]) -> impl Iterator<Item = &postgres::SimpleQueryRow> {
    answer.iter().filter_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    })
}

/// The sessions holding or waiting for the lock on `key`, holders first.
pub fn sessions(client: &mut Client, key: i64) -> Result<Vec<PgSession>, postgres::Error> {
    let answer = client.simple_query(&sessions_sql(key))?;
    Ok(rows(&answer).filter_map(parse).collect())
}

/// Slot 1..=`n` of the lock named by the SQL literal `name` (`--slots`):
/// its key, and the sessions holding or waiting for it, holders first;
/// a slot nobody holds or waits for comes once, without a session.
pub struct SlotSessions {
    pub slot: u16,
    pub key: i64,
    pub session: Option<PgSession>,
}

pub fn slot_sessions(
    client: &mut Client,
    name: &str,
    n: u16,
) -> Result<Vec<SlotSessions>, postgres::Error> {
    let sql = format!(
        "SELECT s.k AS slot, s.key AS slot_key, {COLUMNS} \
         FROM (SELECT k, {key} AS key FROM generate_series(1, {n}) AS k) s \
         LEFT JOIN (pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid) \
         ON l.locktype = 'advisory' AND l.objsubid = 1 AND {THIS_DATABASE} \
         AND l.classid = ((s.key >> 32) & 4294967295)::oid AND l.objid = (s.key & 4294967295)::oid \
         ORDER BY s.k, l.granted DESC, l.pid",
        key = super::slots::slot_key_sql(name, "k"),
    );
    let answer = client.simple_query(&sql)?;
    Ok(rows(&answer)
        .filter_map(|row| {
            Some(SlotSessions {
                slot: named(row, "slot")?.parse().ok()?,
                key: named(row, "slot_key")?.parse().ok()?,
                session: parse(row),
            })
        })
        .collect())
}

/// The sessions announcing an N for the lock named by the SQL literal
/// `name` (`--slots`: see `super::slots`), with their N, the first to
/// connect first.
pub fn announcers(
    client: &mut Client,
    name: &str,
) -> Result<Vec<(u16, PgSession)>, postgres::Error> {
    let sql = format!(
        "SELECT l.objid::bigint AS announced, {COLUMNS} \
         FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.objid <> 0 \
         AND l.classid = (hashtext({name})::bigint & 4294967295)::oid \
         AND {THIS_DATABASE} ORDER BY a.backend_start NULLS LAST, l.pid"
    );
    let answer = client.simple_query(&sql)?;
    Ok(rows(&answer)
        .filter_map(|row| Some((named(row, "announced")?.parse().ok()?, parse(row)?)))
        .collect())
}
