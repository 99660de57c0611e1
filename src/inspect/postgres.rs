//! `holder` and `check` on a postgres lock URL: read who holds it, never
//! touching it. Only this module reaches the postgres client for reading.

use crate::exit_codes::Failure;
use crate::inspect::Report;

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

    use crate::backend::postgres::PgUrl;
    use crate::backend::postgres::connect::{self, Target};
    use crate::backend::postgres::lock::literal;
    use crate::backend::postgres::sessions::sessions;
    use crate::display;
    use crate::exit_codes::{self, Failure};
    use crate::inspect::{Holder, PgLock, Report, State};
    use postgres::SimpleQueryMessage;

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
}
