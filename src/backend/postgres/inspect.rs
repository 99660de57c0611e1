//! `holder` and `check` on a PostgreSQL lock URL: who holds the advisory
//! lock, from `pg_locks` joined with `pg_stat_activity`, never taking it.
//!
//! Anyone who can connect sees that the lock is held and by which server
//! pid (`pg_locks` is public), and the holder's `application_name`
//! (`lockrun PID@HOST` unless set). The holder's lockrun record rides in
//! the comment of its session's last statement, `pg_stat_activity.query`,
//! which PostgreSQL shows only to the same role and to members of
//! `pg_read_all_stats`; so do its client address and start time. The
//! session ends with the lock, and its record with it: a free lock shows
//! no last holder (keeping one would need a table).

use super::PgUrl;
use super::connect::{self, Target};
use super::lock::{key_parts, literal, record_in};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::inspect::{Holder, PgLock, Report, State};
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

/// `Err`: the URL or the environment cannot work (a usage error), before
/// any server was asked.
pub fn inspect(url: &PgUrl) -> Result<Report, Failure> {
    let target = Target::new(url, "lockrun holder", &connect::process_env).map_err(|e| {
        Failure::new(
            exit_codes::USAGE,
            format!("{}: {e}", display::escape(&url.text)),
        )
    })?;
    Ok(look(url, &target))
}

fn look(url: &PgUrl, target: &Target) -> Report {
    let mut report = Report::free(url.text.clone());
    let unknown = |mut report: Report, why: String| {
        report.state = State::Unknown;
        report.reason = Some(why);
        report
    };
    let mut client = match target.connect() {
        Ok(client) => client,
        Err(e) => {
            return unknown(
                report,
                format!(
                    "cannot connect to PostgreSQL as {}: {}",
                    target.describe,
                    connect::explain(&e)
                ),
            );
        }
    };
    let sql = format!("SELECT hashtextextended({}, 0)", literal(&url.name));
    let key = match client.simple_query(&sql) {
        Ok(answer) => answer.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<i64>().ok()),
            _ => None,
        }),
        Err(e) => return unknown(report, connect::explain(&e)),
    };
    let Some(key) = key else {
        return unknown(report, "the server did not compute the lock's key".into());
    };
    let found = match sessions(&mut client, key) {
        Ok(found) => found,
        Err(e) => return unknown(report, connect::explain(&e)),
    };
    let mut pg = PgLock {
        key,
        backend_pid: None,
        application_name: None,
        user: None,
        client_addr: None,
        backend_start: None,
    };
    report.waiting = found.iter().filter(|s| !s.granted).count();
    if let Some(holder) = found.iter().find(|s| s.granted) {
        report.state = State::Held;
        report.record = holder.record();
        report.record_holder_alive = Some(true);
        if let Some(record) = &report.record {
            report.holders = vec![Holder {
                pid: record.pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0),
                mode: "exclusive",
                command: record.command.clone(),
                locked_by: None,
                span: None,
            }];
        } else if holder.query.as_deref() == Some("<insufficient privilege>") {
            report.reason = Some(
                "the holding session's record is hidden: reading it needs the same role or pg_read_all_stats".into(),
            );
        }
        pg.backend_pid = Some(holder.pid);
        pg.application_name = holder.application_name.clone();
        pg.user = holder.user.clone();
        pg.client_addr = holder.client_addr.clone();
        pg.backend_start = holder.backend_start.clone();
    }
    report.postgres = Some(pg);
    report
}
