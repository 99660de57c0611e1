//! `holder` and `check` on a redis:// lock URL: read who holds it, never
//! touching it. Only this module reaches the Redis client for reading.

use crate::display::escape;
use crate::exit_codes::Failure;
use crate::inspect::{Report, Service};
use serde::Serialize;

/// `holder`/`check` on a Redis lock URL.
pub fn look_up(url: &crate::backend::redis::RedisUrl) -> Result<Report, Failure> {
    #[cfg(feature = "redis")]
    return Ok(reading::inspect(url));
    #[cfg(not(feature = "redis"))]
    {
        let _ = url;
        Err(crate::backend::redis::not_built())
    }
}

/// The key that holds a Redis lock, and what its fencing token's promise
/// rests on.
#[derive(Debug, Clone, Serialize)]
pub struct RedisLock {
    pub key: String,
    /// What the holder's command got as LOCKRUN_FENCING_TOKEN (null when
    /// the lock is free).
    pub fencing_token: Option<i64>,
    /// The lease's remaining time in ms (null when free).
    pub ttl_ms: Option<i64>,
    /// The counter's current value: the last token handed out.
    pub last_token: Option<i64>,
    /// The server's `role` (`master`, `slave`) and connected replicas.
    pub role: Option<String>,
    pub connected_replicas: Option<u64>,
    /// `appendonly` and `appendfsync` (null where CONFIG is not allowed):
    /// without an AOF fsynced on every write, a restart can lose the last
    /// increment, and a token can repeat.
    pub appendonly: Option<String>,
    pub appendfsync: Option<String>,
}

impl From<RedisLock> for Service {
    fn from(lock: RedisLock) -> Service {
        let mut line = format!("Redis key {}", escape(&lock.key));
        if let Some(token) = lock.fencing_token {
            line.push_str(&format!(", fencing token {token}"));
        }
        if let Some(ms) = lock.ttl_ms.filter(|ms| *ms >= 0) {
            line.push_str(&format!(", lease {ms} ms left"));
        }
        let mut details = vec![line];
        let persistence = match (&lock.appendonly, &lock.appendfsync) {
            (Some(aof), Some(fsync)) => Some(format!(
                "persistence: appendonly {}, appendfsync {}",
                escape(aof),
                escape(fsync)
            )),
            _ => None,
        };
        if let Some(p) = persistence {
            details.push(p);
        }
        Service {
            name: "redis",
            holder: "a Redis client",
            details,
            no_past_holders: None,
            json: Service::json_of(&lock),
        }
    }
}

#[cfg(feature = "redis")]
mod reading {
    //! The lock key's value is the holder's record (with its token), its
    //! PTTL the lease left; a free lock shows the last holder's record,
    //! kept under `NAME:last`. All read in one round trip, then what the
    //! server says of its persistence and replicas.

    use super::RedisLock;
    use crate::backend::redis::client::{self, CONNECT_TIMEOUT};
    use crate::backend::redis::{RedisUrl, token_of};
    use crate::identity::Liveness;
    use crate::inspect::{Holder, Report, State};
    use crate::record::Record;

    type Read = (
        Option<Vec<u8>>,
        i64,
        Option<Vec<u8>>,
        Option<i64>,
        Option<u16>,
    );

    pub fn inspect(url: &RedisUrl) -> Report {
        let mut report = Report::free(url.text.clone());
        let unknown = |mut report: Report, why: String| {
            report.state = State::Unknown;
            report.reason = Some(why);
            report
        };
        let mut con = match client::connect(url, CONNECT_TIMEOUT) {
            Ok(con) => con,
            Err(e) => return unknown(report, e),
        };
        let read: redis::RedisResult<Read> = redis::pipe()
            .cmd("GET")
            .arg(&url.name)
            .cmd("PTTL")
            .arg(&url.name)
            .cmd("GET")
            .arg(url.last_key())
            .cmd("GET")
            .arg(url.fencing_key())
            .cmd("GET")
            .arg(url.slots_key())
            .query(&mut con);
        let (value, pttl, last, counter, slots) = match read {
            Ok(read) => read,
            Err(e) => return unknown(report, client::explain(url, &e)),
        };
        let mut lock = RedisLock {
            key: url.name.clone(),
            fencing_token: None,
            ttl_ms: None,
            last_token: counter,
            role: None,
            connected_replicas: None,
            appendonly: None,
            appendfsync: None,
        };
        persistence(&mut con, &mut lock);
        // Every waiter is subscribed to the release channel.
        let waiting: Option<(String, usize)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(url.channel())
            .query(&mut con)
            .ok();
        report.waiting = waiting.map_or(0, |(_, n)| n);
        if let Some(n) = slots.filter(|n| *n >= 1) {
            return match slots_report(url, &mut con, (n, report.waiting), lock) {
                Ok(report) => report,
                Err(e) => unknown(report, client::explain(url, &e)),
            };
        }
        match value {
            Some(value) => {
                lock.fencing_token = token_of(&value);
                lock.ttl_ms = Some(pttl);
                held(&mut report, &value);
            }
            None => {
                report.record = last.as_deref().and_then(Record::parse);
                report.record_holder_alive = Some(false);
            }
        }
        report.service = Some(lock.into());
        report
    }

    /// The lock used with `--slots N` (its `NAME:slots` says N while any
    /// slot is held): a report per slot, held by its key's value or free
    /// with its last holder.
    fn slots_report(
        url: &RedisUrl,
        con: &mut redis::Connection,
        (n, report_waiting): (u16, usize),
        lock: RedisLock,
    ) -> redis::RedisResult<Report> {
        let keys: Vec<String> = (1..=n).map(|k| url.slot_key(k)).collect();
        let lasts: Vec<String> = (1..=n).map(|k| url.slot_last_key(k)).collect();
        let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(&keys).query(con)?;
        let last_values: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(&lasts).query(con)?;
        let slot_reports: Vec<Report> = (1..=n)
            .zip(values.into_iter().zip(last_values))
            .map(|(k, (value, last))| {
                let mut slot = Report::free(format!("{}.slot{k}", url.text));
                match value {
                    Some(value) => held(&mut slot, &value),
                    None => {
                        slot.record = last.as_deref().and_then(Record::parse);
                        slot.record_holder_alive = Some(false);
                    }
                }
                slot
            })
            .collect();
        let any_held = slot_reports.iter().any(|s| s.state == State::Held);
        Ok(Report {
            state: if any_held { State::Held } else { State::Free },
            holders: slot_reports
                .iter()
                .flat_map(|s| s.holders.clone())
                .collect(),
            waiting: report_waiting,
            slots: Some(n),
            slot_reports: Some(slot_reports),
            service: Some(lock.into()),
            ..Report::free(url.text.clone())
        })
    }

    /// A report held by a key whose value is `value`.
    fn held(report: &mut Report, value: &[u8]) {
        report.state = State::Held;
        report.record = Record::parse(value);
        report.record_holder_alive = Some(true);
        if let Some(record) = &report.record {
            report.record_holder_alive = Some(lease_keeper_alive(record));
            report.holders = Holder::named_by(record).into_iter().collect();
        }
    }

    /// `INFO replication` and `CONFIG GET appendonly appendfsync`, each
    /// left null where the server does not say (ACL, renamed commands).
    fn persistence(con: &mut redis::Connection, lock: &mut RedisLock) {
        let info: Option<String> = redis::cmd("INFO").arg("replication").query(con).ok();
        for line in info.as_deref().unwrap_or("").lines() {
            if let Some(role) = line.strip_prefix("role:") {
                lock.role = Some(role.trim().to_owned());
            }
            if let Some(n) = line.strip_prefix("connected_slaves:") {
                lock.connected_replicas = n.trim().parse().ok();
            }
        }
        let config: Option<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("append*")
            .query(con)
            .ok();
        for pair in config.unwrap_or_default().chunks(2) {
            match pair {
                [name, value] if name == "appendonly" => lock.appendonly = Some(value.clone()),
                [name, value] if name == "appendfsync" => lock.appendfsync = Some(value.clone()),
                _ => {}
            }
        }
    }

    /// Whether the lockrun that renews the holder's lease is alive: on
    /// this host its pid says so; elsewhere the lease is the only evidence.
    fn lease_keeper_alive(record: &Record) -> bool {
        let keeper = Record {
            pid: record.lockrun_pid,
            pid_start: None,
            ..record.clone()
        };
        keeper.holder_liveness() != Liveness::Dead
    }
}
