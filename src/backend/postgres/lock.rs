//! The PostgreSQL backend behind the seam: connect, take the session's
//! advisory lock (at once, or waiting in the server), hand the command a
//! fencing token, watch the connection until the command exits, close it.
//!
//! Differences from a file lock, each forced by the medium: the lock lives
//! as long as lockrun's connection (so `-F` is refused, and the command
//! gets SIGTERM if lockrun itself dies); the record is carried in the
//! session's last statement, readable in `pg_stat_activity`; and losing the
//! connection while the command runs stops the command, exit 76.

use super::RunOptions;
use super::connect::{self, Target};
use super::session::{self, Session};
use crate::backend::{Backend, Capabilities, Held};
use crate::backend::{Blocking, Contender};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::record::Record;
use postgres::error::SqlState;
use postgres::{CancelToken, Client, SimpleQueryMessage};
use std::ffi::OsString;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// pg_locks shows a bigint advisory key as two oids: the high and the low
/// 32 bits.
pub fn key_parts(key: i64) -> (u32, u32) {
    let bits = key as u64;
    ((bits >> 32) as u32, bits as u32)
}

/// A statement comment carrying `record`: every statement of ours starts
/// with it, so the session's `pg_stat_activity.query` shows the holder.
/// Every `/` is written `\/` and every `*` `\u002a` (the same JSON), so
/// the text can neither end the comment nor open a nested one.
pub fn comment(record: &[u8]) -> String {
    let line = String::from_utf8_lossy(record);
    let line = line.trim_end().replace('/', "\\/").replace('*', "\\u002a");
    if line.is_empty() {
        "/*lockrun*/ ".to_owned()
    } else {
        format!("/*lockrun {line}*/ ")
    }
}

/// `text` as an SQL string literal whatever `standard_conforming_strings`
/// says: an escape string, its backslashes and quotes escaped.
pub fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The record back from a statement's text, if it carries one.
pub fn record_in(query: &str) -> Option<Record> {
    let rest = query.strip_prefix("/*lockrun ")?;
    let end = rest.find("*/")?;
    Record::parse(&rest.as_bytes()[..end])
}

/// The server-side keepalive settings of our session: if lockrun's host
/// dies, the server notices after about 2 x TTL and ends the session,
/// releasing the lock. Later than lockrun gives up on its side (one TTL),
/// so that a command cut off from the server is stopped first.
pub fn server_keepalive(ttl: Duration) -> Vec<(&'static str, String)> {
    let secs = ttl.as_secs().max(1);
    vec![
        ("tcp_keepalives_idle", secs.to_string()),
        ("tcp_keepalives_interval", (secs / 3).max(1).to_string()),
        ("tcp_keepalives_count", "3".to_owned()),
        (
            "tcp_user_timeout",
            (2 * ttl.as_millis().max(1000)).to_string(),
        ),
    ]
}

pub struct PgBackend {
    target: Target,
    /// Ours while not lent to the waiting thread.
    client: Option<Client>,
    /// Where the waiting thread hands the connection back.
    returned: Arc<Mutex<Option<Client>>>,
    cancel: CancelToken,
    /// A second connection for naming the holder while ours waits.
    side: Option<Client>,
    name: String,
    label: String,
    key: i64,
    backend_pid: i32,
    /// The answer of the attempt made while connecting, not yet asked for.
    first_try: Option<bool>,
    comment: String,
    ttl: Duration,
    kill_grace: Duration,
    verbose: bool,
}

fn unavailable(label: &str, why: &str) -> Failure {
    Failure::new(
        exit_codes::UNAVAILABLE,
        format!("cannot take {label}: {why} (the command was not run)"),
    )
}

/// The application_name others see in pg_stat_activity (63 bytes at most).
fn application_name() -> String {
    let me = crate::identity::Me::gather();
    let mut name = format!(
        "lockrun {}@{}",
        std::process::id(),
        me.host.as_deref().unwrap_or("?")
    );
    while name.len() > 63 {
        name.pop();
    }
    name
}

impl PgBackend {
    pub fn start(opts: &RunOptions, label: &str) -> Result<PgBackend, Failure> {
        // Below a second the checks would be a busy loop and keepalives
        // (whole seconds) could not follow.
        let ttl = opts.ttl.max(Duration::from_secs(1));
        // What the URL and the environment say cannot work: a usage error.
        let mut target = Target::new(&opts.url, &application_name(), &connect::process_env)
            .map_err(|e| Failure::new(exit_codes::USAGE, format!("{label}: {e}")))?;
        target.keepalive(ttl);
        if target.password_in_url && opts.verbose {
            eprintln!(
                "lockrun: warning: the lock URL carries a password, which other users can see in `ps` until lockrun hides it; prefer PGPASSWORD or ~/.pgpass"
            );
        }
        let mut client = target.connect().map_err(|e| {
            unavailable(
                label,
                &format!(
                    "cannot connect to PostgreSQL as {}: {}",
                    target.describe,
                    connect::explain(&e)
                ),
            )
        })?;
        let record = opts.waiting_record();
        let comment = comment(&record);
        // One round trip: the key, our server pid, the server-side
        // keepalives (set_config rather than startup options, which
        // PgBouncer refuses) and the first attempt. A simple query (the
        // name as a literal) rather than a prepared one, which costs three.
        let mut sql = format!("{comment}SELECT k, pg_backend_pid(), pg_try_advisory_lock(k)");
        for (name, value) in server_keepalive(ttl) {
            sql.push_str(&format!(", set_config('{name}', '{value}', false)"));
        }
        sql.push_str(&format!(
            " FROM (SELECT hashtextextended({}, 0) AS k) AS key",
            literal(&opts.url.name)
        ));
        let answer = client
            .simple_query(&sql)
            .map_err(|e| unavailable(label, &connect::explain(&e)))?;
        let row = first_value(&answer).unwrap_or_default();
        let value = |i: usize| row.get(i).cloned().flatten();
        let (Some(key), Some(backend_pid), Some(got)) = (
            value(0).and_then(|v| v.parse::<i64>().ok()),
            value(1).and_then(|v| v.parse::<i32>().ok()),
            value(2),
        ) else {
            return Err(unavailable(
                label,
                "the server's answer to the first attempt is malformed",
            ));
        };
        let cancel = client.cancel_token();
        Ok(PgBackend {
            target,
            client: Some(client),
            returned: Arc::new(Mutex::new(None)),
            cancel,
            side: None,
            name: opts.url.name.clone(),
            label: label.to_owned(),
            key,
            backend_pid,
            first_try: Some(got == "t"),
            comment,
            ttl,
            kill_grace: opts.kill_grace,
            verbose: opts.verbose,
        })
    }

    fn failure(&self, why: &str) -> Failure {
        unavailable(&self.label, why)
    }

    fn take_returned(&mut self) -> Option<Client> {
        self.returned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

fn first_value(answer: &[SimpleQueryMessage]) -> Option<Vec<Option<String>>> {
    answer.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(
            (0..row.len())
                .map(|i| row.get(i).map(str::to_owned))
                .collect(),
        ),
        _ => None,
    })
}

impl Contender for PgBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        if let Some(got) = self.first_try.take() {
            return Ok(got);
        }
        let sql = format!("{}SELECT pg_try_advisory_lock({})", self.comment, self.key);
        let Some(client) = self.client.as_mut() else {
            return Err(self.failure("the connection is busy"));
        };
        match client.simple_query(&sql) {
            Ok(answer) => Ok(first_value(&answer)
                .and_then(|row| row.into_iter().next().flatten())
                .is_some_and(|v| v == "t")),
            Err(e) => Err(self.failure(&connect::explain(&e))),
        }
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        // The wait happens in the server. At the deadline or on a signal the
        // waiter cancels it (`interrupt`); a thread that does not answer is
        // left behind, and the connection it holds ends with lockrun.
        let Some(mut client) = self.client.take() else {
            return Err(self.failure("the connection is busy"));
        };
        let sql = format!("{}SELECT pg_advisory_lock({})", self.comment, self.key);
        let returned = Arc::clone(&self.returned);
        let label = self.label.clone();
        Ok(Box::new(move || match client.simple_query(&sql) {
            Ok(_) => {
                *returned.lock().unwrap_or_else(PoisonError::into_inner) = Some(client);
                Ok(())
            }
            Err(e) => {
                let why = if e.code() == Some(&SqlState::QUERY_CANCELED) {
                    "the wait was cancelled".to_owned()
                } else {
                    connect::explain(&e)
                };
                Err(unavailable(&label, &why))
            }
        }))
    }

    fn interrupt(&mut self) {
        // A cancel request opens a connection of its own, which may take
        // as long as connecting does: sent from a thread of its own.
        let target = self.target.clone();
        let token = self.cancel.clone();
        let _ = std::thread::Builder::new()
            .name("pg-cancel".into())
            .spawn(move || target.cancel(&token));
    }

    fn undo(&mut self) {
        // Released before lockrun exits (closing alone would release it
        // only once the server notices).
        let unlock = format!("SELECT pg_advisory_unlock({})", self.key);
        if let Some(mut client) = self.take_returned().or_else(|| self.client.take()) {
            let _ = client.simple_query(&unlock);
        }
    }

    fn holder(&mut self) -> Option<String> {
        let client = match self.client.as_mut() {
            Some(client) => client,
            None => {
                if self.side.is_none() {
                    self.side = self.target.connect().ok();
                }
                self.side.as_mut()?
            }
        };
        let sessions = super::sessions::sessions(client, self.key).ok()?;
        let holding = sessions.into_iter().find(|s| s.granted);
        Some(match holding {
            Some(session) => session.describe(),
            None => "another session (it released the lock a moment ago)".to_owned(),
        })
    }

    fn conflict_holder(&mut self) -> String {
        self.holder().unwrap_or_default()
    }
}

impl Backend for PgBackend {
    type Held = PgHeld;
    const CAPS: Capabilities = super::CAPS;

    fn failure_status(&self) -> u8 {
        exit_codes::UNAVAILABLE
    }

    fn give_up(self) {}

    fn acquired(mut self, _record: Option<&Record>, verbose: bool) -> Result<PgHeld, Failure> {
        let Some(mut client) = self.client.take().or_else(|| self.take_returned()) else {
            return Err(self.failure("the connection that took the lock is gone"));
        };
        // The fencing token, and proof that the lock stayed with our
        // session: behind a pooler in transaction mode the next statement
        // may run in another server session, which holds nothing.
        let sql = format!(
            "{}SELECT txid_current(), pg_backend_pid(), ({})",
            self.comment,
            session::holds_sql(self.key)
        );
        // A cancel request sent as the wait ended may land on this
        // statement instead of the wait it was meant for: try again.
        let mut attempts = 0;
        let row = loop {
            attempts += 1;
            match client.simple_query(&sql) {
                Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) && attempts < 3 => {}
                other => break other.map_err(|e| self.failure(&connect::explain(&e)))?,
            }
        };
        let row = first_value(&row).unwrap_or_default();
        let value = |i: usize| {
            row.get(i)
                .cloned()
                .flatten()
                .and_then(|v| v.parse::<i64>().ok())
        };
        let (Some(token), Some(pid), Some(holds)) = (value(0), value(1), value(2)) else {
            return Err(self.failure("the server's answer to the fencing-token query is malformed"));
        };
        if holds != 1 {
            return Err(self.failure(
                "the lock did not stay with our session: is lockrun connected through a pooler in transaction or statement mode (PgBouncer)? Session advisory locks need a direct connection or a session-mode pool",
            ));
        }
        if pid != i64::from(self.backend_pid) {
            eprintln!(
                "lockrun: warning: our statements ran in two server sessions (pids {} and {pid}): a connection pooler in transaction mode cannot keep a session lock",
                self.backend_pid
            );
        }
        if verbose || self.verbose {
            eprintln!(
                "lockrun: took the lock {} (key {}, fencing token {token}, server pid {pid} on {}, TTL {}s)",
                display::escape(&self.name),
                self.key,
                display::escape(&self.target.describe),
                self.ttl.as_secs()
            );
        }
        let session = Session::start(
            client,
            self.key,
            self.comment.clone(),
            self.ttl,
            self.kill_grace,
        );
        Ok(PgHeld { session, token })
    }
}

pub struct PgHeld {
    session: Session,
    token: i64,
}

impl Held for PgHeld {
    fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![(
            "LOCKRUN_FENCING_TOKEN",
            OsString::from(self.token.to_string()),
        )]
    }

    fn dies_with_lockrun(&self) -> bool {
        true
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        // Once released the session ends and its statement text with it:
        // keeping the last holder's record would need a table (DDL).
        if !released {
            self.session.update(comment(&record.to_line()));
        }
        Ok(())
    }

    fn command_started(&mut self, pid: i32) {
        self.session.command_started(pid);
    }

    fn command_exited(&mut self) {
        self.session.command_exited();
    }

    fn release(self) -> Result<(), String> {
        match self.session.finish() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal(r"a'b\c"), r"E'a\'b\\c'");
    }

    #[test]
    fn keys_split_as_pg_locks_shows_them() {
        assert_eq!(key_parts(-1), (u32::MAX, u32::MAX));
        assert_eq!(key_parts(0x1_0000_0002), (1, 2));
    }

    #[test]
    fn record_survives_the_comment() {
        let record = Record {
            command: Some(vec!["sh".into(), "-c".into(), "echo */ /* x".into()]),
            pid: Some(7),
            lockrun: crate::record::FORMAT,
            ..Record::default()
        };
        let text = comment(&record.to_line());
        assert_eq!(text.matches("*/").count(), 1, "{text}");
        assert!(!text[2..].contains("/*"), "{text}");
        let back = record_in(&format!("{text}SELECT 1")).unwrap();
        assert_eq!(back.command, record.command);
        assert_eq!(back.pid, Some(7));
    }
}
