//! `holder` and `check` on a postgres lock URL: read who holds it, never
//! touching it. Only this module reaches the postgres client for reading.

use crate::display::escape;
use crate::exit_codes::Failure;
use crate::inspect::{Report, Service};
use serde::Serialize;

/// `holder`/`check` on a PostgreSQL lock URL.
pub fn look_up(url: &crate::backend::postgres::PgUrl) -> Result<Report, Failure> {
    #[cfg(feature = "postgres")]
    return reading::inspect(url);
    #[cfg(not(feature = "postgres"))]
    {
        let _ = url;
        Err(crate::backend::postgres::not_built())
    }
}

/// The PostgreSQL session holding a lock URL's advisory lock. Fields other
/// than the key and pid are null without the privilege to see them
/// (the same role, or pg_read_all_stats).
#[derive(Debug, Clone, Serialize)]
pub struct PgLock {
    /// `pg_advisory_lock(KEY)` takes the same lock: `hashtextextended(NAME, 0)`.
    pub key: i64,
    /// The holding session's server process (`pg_terminate_backend` it).
    pub backend_pid: Option<i32>,
    pub application_name: Option<String>,
    pub user: Option<String>,
    pub client_addr: Option<String>,
    /// When the holding session connected.
    pub backend_start: Option<String>,
}

impl From<PgLock> for Service {
    fn from(lock: PgLock) -> Service {
        let mut details = Vec::new();
        if let Some(pid) = lock.backend_pid {
            let mut line = format!("PostgreSQL session: server pid {pid}");
            if let Some(app) = &lock.application_name {
                line.push_str(&format!(", application '{}'", escape(app)));
            }
            if let Some(user) = &lock.user {
                line.push_str(&format!(", user {}", escape(user)));
            }
            if let Some(addr) = &lock.client_addr {
                line.push_str(&format!(" from {}", escape(addr)));
            }
            if let Some(since) = &lock.backend_start {
                line.push_str(&format!(", connected {}", escape(since)));
            }
            line.push_str(&format!("; advisory key {}", lock.key));
            details.push(line);
        }
        Service {
            name: "postgres",
            holder: "a PostgreSQL session",
            details,
            // The record lived in the holder's session, which has ended.
            no_past_holders: Some("PostgreSQL keeps no record of past holders"),
            json: Service::json_of(&lock),
        }
    }
}

#[cfg(feature = "postgres")]
mod reading {
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

    use super::PgLock;
    use crate::backend::postgres::PgUrl;
    use crate::backend::postgres::connect::{self, Target};
    use crate::backend::postgres::lock::record_lost;
    use crate::backend::postgres::sessions::{PgSession, SlotSessions, sessions, slot_sessions};
    use crate::backend::postgres::slots;
    use crate::backend::postgres::sql::{literal, named};
    use crate::display;
    use crate::exit_codes::Failure;
    use crate::inspect::{Holder, Report, State};
    use postgres::SimpleQueryMessage;

    /// `Err`: the URL or the environment cannot work (a usage error), before
    /// any server was asked.
    pub fn inspect(url: &PgUrl) -> Result<Report, Failure> {
        let target = Target::new(url, "lockrun holder", &connect::process_env).map_err(|e| {
            Failure::new(
                e.status,
                format!("{}: {}", display::escape(&url.text), e.message),
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
        let name = literal(&url.name);
        // The key, and the N that --slots contenders announce, if any.
        let sql = format!(
            "SELECT hashtextextended({name}, 0) AS lock_key, {} AS announced",
            slots::announced_sql(&name)
        );
        let (key, n) = match client.simple_query(&sql) {
            Ok(answer) => answer
                .iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some((
                        named(row, "lock_key").and_then(|v| v.parse::<i64>().ok()),
                        named(row, "announced").and_then(|v| v.parse::<u16>().ok()),
                    )),
                    _ => None,
                })
                .unwrap_or_default(),
            Err(e) => return unknown(report, connect::explain(&e)),
        };
        let Some(key) = key else {
            return unknown(report, "the server did not compute the lock's key".into());
        };
        let found = match sessions(&mut client, key) {
            Ok(found) => found,
            Err(e) => return unknown(report, connect::explain(&e)),
        };
        if let Some(n) = n {
            return match slot_sessions(&mut client, &name, n) {
                // The head and the queue behind it wait on the queue key.
                Ok(held) => with_slots(report, key, n, found.len(), &held),
                Err(e) => unknown(report, connect::explain(&e)),
            };
        }
        report.waiting = found.iter().filter(|s| !s.granted).count();
        describe_holder(&mut report, key, found.iter().find(|s| s.granted));
        report
    }

    /// The report's holder, record and session from the session holding
    /// `key` (none: free).
    fn describe_holder(report: &mut Report, key: i64, holder: Option<&PgSession>) {
        let mut pg = PgLock {
            key,
            backend_pid: None,
            application_name: None,
            user: None,
            client_addr: None,
            backend_start: None,
        };
        if let Some(holder) = holder {
            report.state = State::Held;
            report.record = holder.record();
            report.record_holder_alive = Some(true);
            if let Some(record) = &report.record {
                // Before the command starts the record names no pid yet:
                // no holder process to list, the record says the rest.
                report.holders = Holder::named_by(record).into_iter().collect();
            } else if holder.query.as_deref() == Some("<insufficient privilege>") {
                report.reason = Some(
                "the holding session's record is hidden: reading it needs the same role or pg_read_all_stats".into(),
            );
            } else if holder.query.as_deref().is_some_and(record_lost) {
                report.reason = Some(
                    "the holding session's record is cut short: it is longer than the server's track_activity_query_size".into(),
                );
            }
            pg.backend_pid = Some(holder.pid);
            pg.application_name = holder.application_name.clone();
            pg.user = holder.user.clone();
            pg.client_addr = holder.client_addr.clone();
            pg.backend_start = holder.backend_start.clone();
        }
        report.service = Some(pg.into());
    }

    /// `--slots N`: a report per slot (as for a lock file's slots), each
    /// with its own key and holding session; held when any slot is.
    fn with_slots(
        mut report: Report,
        queue: i64,
        n: u16,
        queued: usize,
        found: &[SlotSessions],
    ) -> Report {
        let mut slots = Vec::with_capacity(usize::from(n));
        for k in 1..=n {
            // Holders come first in each slot's rows.
            let Some(first) = found.iter().find(|s| s.slot == k) else {
                report.state = State::Unknown;
                report.reason = Some(format!("the server did not list slot {k}"));
                return report;
            };
            let mut slot = Report::free(format!("{} slot {k}", report.path));
            let holder = first.session.as_ref().filter(|p| p.granted);
            describe_holder(&mut slot, first.key, holder);
            slots.push(slot);
        }
        // The queue's key: the head of the queue holds it, the rest wait.
        report.service = Some(
            PgLock {
                key: queue,
                backend_pid: None,
                application_name: None,
                user: None,
                client_addr: None,
                backend_start: None,
            }
            .into(),
        );
        report.state = if slots.iter().any(|s| s.state == State::Held) {
            State::Held
        } else {
            State::Free
        };
        report.holders = slots.iter().flat_map(|s| s.holders.clone()).collect();
        report.waiting = queued;
        report.slots = Some(n);
        report.slot_reports = Some(slots);
        report
    }
}
