//! The Redis backend behind the seam: connect, set the lock key if absent
//! (with a new fencing token, in one script), or sleep until the holder's
//! release message or its key's expiry and try again; hand the command its
//! token, renew the lease until the command exits ([`super::session`]),
//! release.
//!
//! Differences from a file lock, each forced by the medium: the lock lives
//! only as long as lockrun renews the lease (so `-F` is refused, and the
//! command gets SIGTERM if lockrun itself dies: its watchdog); the record
//! is the key's value; and losing the lock while the command runs stops
//! the command and ends lockrun with 76.
//!
//! Waiting is not polling: a waiter subscribes to `NAME:released` before
//! it tries, so a release between its attempt and its sleep still wakes
//! it, and otherwise sleeps until the holder's key would expire (its
//! PTTL). A second, private channel lets lockrun end that sleep at once
//! (a deadline, a signal). Waiters are served in the order they came:
//! one that does not get the lock takes a place in the queue
//! (`client::attempt`), which its attempts keep alive for a TTL.

use super::client::{self, Attempt, CONNECT_TIMEOUT, Ours, Place, Scripts, Waiter};
use super::session::{Ending, Session};
use super::{RedisUrl, RunOptions};
use crate::backend::{Backend, Blocking, Capabilities, Contender, Held};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::record::Record;
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A holder's key that has no expiry (set by something other than
/// lockrun) gives no time to sleep until: look again this often.
const NO_EXPIRY_LOOK: Duration = Duration::from_secs(5);

/// The token got, the slot with `--slots`, and when the call that got it
/// was sent (the lease counts from then).
type Got = Arc<Mutex<Option<(i64, Option<u16>, Instant)>>>;

pub struct RedisBackend {
    url: RedisUrl,
    /// The main thread's connection: attempts, the holder's name, undo;
    /// and the address it reached (through Sentinel: the primary named).
    con: Option<redis::Connection>,
    con_at: Option<(String, u16)>,
    scripts: Scripts,
    /// The record our key carries once it is ours.
    record: Vec<u8>,
    ttl: Duration,
    kill_grace: Duration,
    verbose: bool,
    label: String,
    got: Got,
    /// The holder's value, as the last attempt saw it.
    owner: Option<Vec<u8>>,
    /// `--slots N`.
    slots: Option<u16>,
    /// The exit status of the last failure: 64 for a disagreeing N, set
    /// by the waiting thread too.
    status: Arc<AtomicU8>,
    /// Where `interrupt` wakes our own waiting thread.
    wake_channel: String,
    /// This contender's id in the waiters' queue.
    id: String,
    /// The last attempt found the lock free but this many waiters queued
    /// first.
    ahead: Option<i64>,
    stop: Arc<AtomicBool>,
}

fn unavailable(label: &str, why: &str) -> Failure {
    Failure::new(
        exit_codes::UNAVAILABLE,
        format!("cannot take {label}: {why} (the command was not run)"),
    )
}

impl RedisBackend {
    pub fn start(opts: &RunOptions, label: &str) -> Result<RedisBackend, Failure> {
        let (con, con_at) =
            client::connect_at(&opts.url, CONNECT_TIMEOUT).map_err(|e| unavailable(label, &e))?;
        let me = crate::identity::Me::gather();
        // The waiters' queue knows us by it, and the key's value carries
        // it beside the token: what the renewal and release compare.
        let id = super::owner_id(
            me.host.as_deref().unwrap_or("?"),
            std::process::id(),
            crate::platform::own_start_time_without_allocating().unwrap_or(0),
        );
        let wake_channel = format!("{}:wake:{id}", opts.url.name);
        Ok(RedisBackend {
            url: opts.url.clone(),
            con: Some(con),
            con_at: Some(con_at),
            scripts: Scripts::new(),
            record: opts.waiting_record(),
            ttl: opts.ttl,
            kill_grace: opts.settings.kill_grace,
            verbose: opts.settings.verbose,
            label: label.to_owned(),
            got: Arc::new(Mutex::new(None)),
            owner: None,
            slots: opts.slots,
            status: Arc::new(AtomicU8::new(exit_codes::UNAVAILABLE)),
            wake_channel,
            id,
            ahead: None,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    fn failure(&self, why: &str) -> Failure {
        unavailable(&self.label, why)
    }

    fn got(&self) -> Option<(i64, Option<u16>, Instant)> {
        *self.got.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn connection(&mut self) -> Result<&mut redis::Connection, Failure> {
        if self.con.is_none() {
            let (con, at) =
                client::connect_at(&self.url, CONNECT_TIMEOUT).map_err(|e| self.failure(&e))?;
            self.con = Some(con);
            self.con_at = Some(at);
        }
        self.con
            .as_mut()
            .ok_or_else(|| unavailable(&self.label, "no connection to Redis"))
    }
}

impl Contender for RedisBackend {
    /// `--skip-if-succeeded-within`: the last holder's record, kept under
    /// `NAME:last` by its release, read with the lock ours (no other
    /// lockrun can release, and so replace it, until we do). What cannot
    /// be read is no record: the command then runs, the safe side.
    fn last_record(&mut self) -> Option<Record> {
        if self.slots.is_some() {
            return None;
        }
        let key = self.url.last_key();
        let verbose = self.verbose;
        let label = self.label.clone();
        let con = self.connection().ok()?;
        client::set_deadline(con, Instant::now() + client::CALL_TIMEOUT);
        match client::get(con, &key) {
            Ok(value) => value.as_deref().and_then(Record::parse),
            Err(e) => {
                if verbose {
                    crate::say!(
                        "lockrun: could not read the last holder's record of {label} ({e}): running the command"
                    );
                }
                None
            }
        }
    }

    fn try_acquire(&mut self) -> Result<bool, Failure> {
        self.connection()?;
        let Some(mut con) = self.con.take() else {
            return Err(self.failure("no connection to Redis"));
        };
        client::set_deadline(&con, Instant::now() + client::CALL_TIMEOUT);
        let sent = Instant::now();
        let waiter = Waiter {
            id: &self.id,
            queue: false,
        };
        let answer = client::attempt(
            (&mut con, self.con_at.as_ref()),
            &self.scripts,
            (&self.url, waiter),
            (&self.record, self.slots),
            self.ttl,
        );
        let answer = match answer {
            Ok(answer) => answer,
            // A connection whose call failed is not used again.
            Err(e) => return Err(self.failure(&client::explain(&self.url, &e))),
        };
        self.con = Some(con);
        match answer {
            Attempt::Acquired(token, slot, replicated) => {
                warn_unreplicated(&self.label, token, replicated);
                *self.got.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((token, slot, sent));
                Ok(true)
            }
            Attempt::Held { value, .. } => {
                self.owner = (!value.is_empty()).then_some(value);
                self.ahead = None;
                Ok(false)
            }
            Attempt::Queued(ahead) => {
                self.owner = None;
                self.ahead = Some(ahead);
                Ok(false)
            }
            // Not ours after all (a failover meanwhile): the waiter, or
            // the conflict's holder, asks the primary named now.
            Attempt::Stale => {
                self.con = None;
                self.owner = None;
                self.ahead = None;
                Ok(false)
            }
            Attempt::OtherSlots(theirs) => {
                let who = self.slot_holders().unwrap_or_default();
                Err(self.disagree(disagreement(&self.label, self.slots, Some(theirs), &who)))
            }
            Attempt::Plain(value) => {
                let who = holder_text(Some(&value), &self.url.name);
                Err(self.disagree(disagreement(&self.label, self.slots, None, &who)))
            }
        }
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        let url = self.url.clone();
        let record = self.record.clone();
        let ttl = self.ttl;
        let got = Arc::clone(&self.got);
        let stop = Arc::clone(&self.stop);
        let wake = self.wake_channel.clone();
        let label = self.label.clone();
        let slots = self.slots;
        let status = Arc::clone(&self.status);
        let id = self.id.clone();
        Ok(Box::new(move || {
            let waiter = Waiter {
                id: &id,
                queue: true,
            };
            wait_and_take(
                (&url, waiter),
                (&record, slots),
                ttl,
                (&got, &stop, &wake),
                &label,
            )
            .inspect_err(|failure| status.store(failure.status, SeqCst))
        }))
    }

    fn interrupt(&mut self) {
        self.stop.store(true, SeqCst);
        let wake = self.wake_channel.clone();
        if let Ok(con) = self.connection() {
            client::set_deadline(con, Instant::now() + Duration::from_secs(1));
            let published: redis::RedisResult<i64> =
                redis::cmd("PUBLISH").arg(&wake).arg("stop").query(con);
            if published.is_err() {
                self.con = None;
            }
        }
    }

    fn undo(&mut self) {
        // Got just as a signal ended the wait: let go at once rather than
        // leave the key for a TTL.
        if let Some((token, slot, _)) = self.got()
            && self.connection().is_ok()
            && let Some(con) = self.con.as_mut()
        {
            client::set_deadline(con, Instant::now() + Duration::from_secs(2));
            let place = place_of(self.slots, slot);
            let mark = super::mark(token, &self.id);
            let _ = client::release(con, &self.scripts, (&self.url, place), &mark, None);
        }
    }

    fn holder(&mut self) -> Option<String> {
        if self.slots.is_some() {
            return self.slot_holders();
        }
        let key = self.url.name.clone();
        let con = self.connection().ok()?;
        client::set_deadline(con, Instant::now() + Duration::from_secs(2));
        match client::get(con, &key) {
            Ok(value) => self.owner = value,
            Err(_) => self.con = None,
        }
        Some(holder_text(self.owner.as_deref(), &self.url.name))
    }

    fn conflict_held(&mut self) -> String {
        match (self.ahead, &self.owner) {
            (Some(ahead), None) => format!(
                "for {ahead} lockrun{} queued before this one (it is their turn)",
                if ahead == 1 { "" } else { "s" }
            ),
            _ => format!("by {}", self.conflict_holder()),
        }
    }

    fn conflict_holder(&mut self) -> String {
        if self.slots.is_some() {
            return self.slot_holders().unwrap_or_default();
        }
        match self.owner.as_deref() {
            Some(value) => holder_text(Some(value), &self.url.name),
            None => self.holder().unwrap_or_default(),
        }
    }
}

/// How long a waiter rides out a server it cannot reach (a restart, a
/// Sentinel failover, whose `down-after-milliseconds` is 30 s by default)
/// before it gives up with 69: it was asked to wait, and the lock is
/// still to be had once the primary is back.
const OUTAGE_PATIENCE: Duration = Duration::from_secs(60);
/// How often it tries again meanwhile.
const OUTAGE_RETRY: Duration = Duration::from_millis(250);

/// Why a waiting session ended without the lock.
enum Waited {
    /// For good (a usage error, the wait ended).
    Final(Failure),
    /// The server could not be reached or the connection broke: worth
    /// trying again for a while.
    Unreachable(String),
}

/// The waiting thread: its own two connections (one subscribed), attempts
/// after each wake-up, until the lock is ours or the wait is ended; when
/// the server goes away meanwhile, it connects again (through Sentinel:
/// to the primary named then) for up to `OUTAGE_PATIENCE`.
fn wait_and_take(
    (url, waiter): (&RedisUrl, Waiter<'_>),
    (record, slots): (&[u8], Option<u16>),
    ttl: Duration,
    (got, stop, wake): (&Got, &AtomicBool, &str),
    label: &str,
) -> Result<(), Failure> {
    let scripts = Scripts::new();
    let mut outage: Option<Instant> = None;
    loop {
        let why = match wait_connected(
            (url, waiter),
            (record, slots),
            ttl,
            (got, stop, wake),
            (label, &scripts, &mut outage),
        ) {
            Ok(()) => return Ok(()),
            Err(Waited::Final(failure)) => return Err(failure),
            Err(Waited::Unreachable(why)) => why,
        };
        let since = *outage.get_or_insert_with(Instant::now);
        let until = Instant::now() + OUTAGE_RETRY;
        while !stop.load(SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(25));
        }
        if stop.load(SeqCst) || since.elapsed() >= OUTAGE_PATIENCE {
            let why = if stop.load(SeqCst) {
                why
            } else {
                format!(
                    "{why} (still, after {} of trying again while waiting)",
                    display::span(OUTAGE_PATIENCE)
                )
            };
            return Err(unavailable(label, &why));
        }
    }
}

/// One waiting session on fresh connections; `outage` is cleared once an
/// attempt has been answered.
fn wait_connected(
    (url, waiter): (&RedisUrl, Waiter<'_>),
    (record, slots): (&[u8], Option<u16>),
    ttl: Duration,
    (got, stop, wake): (&Got, &AtomicBool, &str),
    (label, scripts, outage): (&str, &Scripts, &mut Option<Instant>),
) -> Result<(), Waited> {
    let lost = |e: &redis::RedisError| Waited::Unreachable(client::explain(url, e));
    let mut sub = client::connect(url, CONNECT_TIMEOUT).map_err(Waited::Unreachable)?;
    let (mut con, mut at) =
        client::connect_at(url, CONNECT_TIMEOUT).map_err(Waited::Unreachable)?;
    let mut pubsub = sub.as_pubsub();
    pubsub
        .subscribe(&[url.channel().as_str(), wake])
        .map_err(|e| lost(&e))?;
    loop {
        if stop.load(SeqCst) {
            // Out of the queue at once, not when our place's key expires.
            client::set_deadline(&con, Instant::now() + Duration::from_secs(1));
            let _ = client::leave_queue(&mut con, url, waiter.id);
            return Err(Waited::Final(unavailable(label, "the wait was ended")));
        }
        if url.sentinel.is_some() {
            // The primary as Sentinel names it now, as for a renewal.
            (con, at) = client::connect_at(url, CONNECT_TIMEOUT).map_err(Waited::Unreachable)?;
        }
        client::set_deadline(&con, Instant::now() + client::CALL_TIMEOUT);
        let sent = Instant::now();
        let answer = client::attempt(
            (&mut con, Some(&at)),
            scripts,
            (url, waiter),
            (record, slots),
            ttl,
        );
        let pttl = match answer {
            Ok(Attempt::Acquired(token, slot, replicated)) => {
                warn_unreplicated(label, token, replicated);
                *got.lock().unwrap_or_else(PoisonError::into_inner) = Some((token, slot, sent));
                return Ok(());
            }
            Ok(Attempt::Held { pttl, .. }) => pttl,
            // Free, but those queued first take it: until their release.
            Ok(Attempt::Queued(_)) => -1,
            // Taken on a demoted primary and let go: at once again, on
            // the primary Sentinel names now.
            Ok(Attempt::Stale) => continue,
            Ok(Attempt::OtherSlots(theirs)) => {
                return Err(Waited::Final(disagreement(
                    label,
                    slots,
                    Some(theirs),
                    "another contender",
                )));
            }
            Ok(Attempt::Plain(value)) => {
                let who = holder_text(Some(&value), &url.name);
                return Err(Waited::Final(disagreement(label, slots, None, &who)));
            }
            Err(e) => return Err(lost(&e)),
        };
        *outage = None;
        // Until a release message (or our own wake-up), or until the
        // holder's key expires on its own; at least every TTL/3, to keep
        // our place in the queue alive (it lives for a TTL).
        let sleep = match u64::try_from(pttl) {
            Ok(ms) => Duration::from_millis(ms.saturating_add(1)),
            Err(_) => NO_EXPIRY_LOOK,
        }
        .min(ttl / 3);
        pubsub
            .set_read_timeout(Some(sleep.max(Duration::from_millis(1))))
            .map_err(|e| lost(&e))?;
        match pubsub.get_message() {
            Ok(_) => {}
            Err(e) if e.is_timeout() => {}
            Err(e) => return Err(lost(&e)),
        }
    }
}

/// A primary whose replicas did not acknowledge the acquire: the run goes
/// on (the lock is ours on the primary), but a person is told that a
/// failover now could repeat the token.
fn warn_unreplicated(label: &str, token: i64, replicated: client::Replicated) {
    match replicated {
        client::Replicated::NotAcked { connected, waited } => crate::say!(
            "lockrun: warning: none of the {connected} replica(s) of {label} acknowledged fencing token {token} within {} (WAIT 1): a failover before they catch up could give the same token to another holder; check the replicas' link (INFO replication)",
            display::span(waited)
        ),
        client::Replicated::Unknown(why) => crate::say!(
            "lockrun: warning: could not learn whether a replica of {label} has fencing token {token} ({why}): a failover now could give it to another holder"
        ),
        client::Replicated::NoReplica | client::Replicated::Acked(_) => {}
    }
}

/// The usage error for contenders that disagree on N: `ours` is what this
/// one gave, `theirs` what the lock is used with (`None`: held without
/// --slots, by `who`).
fn disagreement(label: &str, ours: Option<u16>, theirs: Option<u16>, who: &str) -> Failure {
    let ours = match ours {
        Some(n) => format!("not --slots {n}"),
        None => "but this lockrun has no --slots".to_owned(),
    };
    let message = match theirs {
        Some(n) => format!(
            "{label} is used with --slots {n} (held by {who}), {ours}: every contender must give the same number"
        ),
        None => format!(
            "{label} is held without --slots (by {who}), {ours}: every contender must give the same number"
        ),
    };
    Failure::new(exit_codes::USAGE, message)
}

fn place_of(slots: Option<u16>, slot: Option<u16>) -> Place {
    match (slots, slot) {
        (Some(n), Some(k)) => Place::Slot { n, k },
        _ => Place::Plain,
    }
}

impl RedisBackend {
    fn disagree(&self, failure: Failure) -> Failure {
        self.status.store(exit_codes::USAGE, SeqCst);
        failure
    }

    /// `--slots N`: who holds each slot, for the status line and the
    /// conflict message (the N slot keys' values, in one call).
    fn slot_holders(&mut self) -> Option<String> {
        let n = self.slots.unwrap_or(1);
        let keys: Vec<String> = (1..=n).map(|k| self.url.slot_key(k)).collect();
        let con = self.connection().ok()?;
        client::set_deadline(con, Instant::now() + Duration::from_secs(2));
        let values: Vec<Option<Vec<u8>>> = match redis::cmd("MGET").arg(&keys).query(con) {
            Ok(values) => values,
            Err(_) => {
                self.con = None;
                return None;
            }
        };
        let each: Vec<String> = (1..=n)
            .zip(values)
            .filter_map(|(k, value)| {
                let value = value?;
                Some(format!(
                    "slot {k}: {}",
                    holder_text(Some(&value), &keys[usize::from(k - 1)])
                ))
            })
            .collect();
        Some(if each.is_empty() {
            format!("{n} commands, one per slot (they released a moment ago)")
        } else {
            format!("{n} commands, one per slot ({})", each.join("; "))
        })
    }
}

impl Backend for RedisBackend {
    type Held = RedisHeld;
    const CAPS: Capabilities = super::CAPS;

    fn failure_status(&self) -> u8 {
        self.status.load(SeqCst)
    }

    fn give_up(mut self) {
        // Given up with the key ours (`--skip-if-succeeded-within` skips
        // after taking the lock): let go of it now, keeping `NAME:last` as
        // it was, rather than leave the lock held for a TTL.
        self.undo();
        // The waiting thread leaves the queue when told to stop; if it
        // could not (it was left behind), the main connection does.
        if self.connection().is_ok()
            && let Some(con) = self.con.as_mut()
        {
            client::set_deadline(con, Instant::now() + Duration::from_secs(1));
            let _ = client::leave_queue(con, &self.url, &self.id);
        }
    }

    fn acquired(mut self, _record: Option<&Record>, verbose: bool) -> Result<RedisHeld, Failure> {
        let Some((token, slot, sent)) = self.got() else {
            return Err(self.failure("lost track of the fencing token"));
        };
        let con = match self.con.take() {
            Some(con) => con,
            None => client::connect(&self.url, CONNECT_TIMEOUT).map_err(|e| self.failure(&e))?,
        };
        let place = place_of(self.slots, slot);
        if verbose || self.verbose {
            let what = match place {
                Place::Slot { n, k } => format!("slot {k} of {n} of the lock"),
                Place::Plain => "the lock".to_owned(),
            };
            crate::say!(
                "lockrun: took {what} {} on {} (fencing token {token}, TTL {})",
                display::escape(&self.url.name),
                display::escape(&self.url.address()),
                display::span(self.ttl)
            );
        }
        let mark = super::mark(token, &self.id);
        let session = Session::start(
            (self.url.clone(), con),
            (token, mark.clone(), place),
            (sent, self.ttl),
            self.kill_grace,
        );
        Ok(RedisHeld {
            url: self.url,
            session,
            place,
            token,
            owner: self.id,
            ttl: self.ttl,
            last: None,
        })
    }
}

pub struct RedisHeld {
    url: RedisUrl,
    session: Session,
    place: Place,
    token: i64,
    /// Our id, beside the token in the key's value.
    owner: String,
    ttl: Duration,
    /// The record to keep under `NAME:last` at the release.
    last: Option<Vec<u8>>,
}

impl Held for RedisHeld {
    fn env(&self) -> Vec<(&'static str, OsString)> {
        let slot = match self.place {
            Place::Slot { k, .. } => Some(k),
            Place::Plain => None,
        };
        crate::backend::url_env(self.token, slot)
    }

    fn dies_with_lockrun(&self) -> bool {
        true
    }

    fn fencing_token(&self) -> Option<i64> {
        Some(self.token)
    }

    /// A lock URL has no descriptor whose holders could be traced: what
    /// `--max-time` stops with the command is everything it started.
    fn inheritors(&self) -> Option<crate::backend::Inheritors> {
        Some(crate::backend::command_tree())
    }

    fn searches_descendants(&self) -> bool {
        true
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        // The token leads the value (what the scripts compare); the
        // record's own copy of it would be a second field of that name.
        let record = Record {
            fencing_token: None,
            ..record.clone()
        };
        let value = super::value_with_token(self.token, &self.owner, &record.to_line());
        if released {
            self.last = Some(value);
        } else {
            // A failure here shows in the renewal that carries it.
            self.session.store(value);
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
        let con = match self.session.finish() {
            Ending::Lost(reason) => return Err(reason),
            Ending::Unconfirmed(reason) => {
                crate::say!(
                    "lockrun: warning: the lock {} could not be confirmed after the command ended on its own (its status is kept): {reason}",
                    self.url.name
                );
                return Ok(());
            }
            Ending::Held(con) => con,
        };
        let deadline = Instant::now() + client::CALL_TIMEOUT.min(self.ttl);
        // Through Sentinel, the primary as it names it now: the renewal's
        // connection may be to a primary demoted since.
        let con = con.filter(|_| self.url.sentinel.is_none());
        let con = match con {
            Some(con) => Ok(con),
            None => client::connect(
                &self.url,
                deadline.saturating_duration_since(Instant::now()),
            ),
        };
        let released = con.and_then(|mut con| {
            client::set_deadline(&con, deadline);
            client::release(
                &mut con,
                &Scripts::new(),
                (&self.url, self.place),
                &super::mark(self.token, &self.owner),
                self.last.as_deref(),
            )
            .map_err(|e| client::explain(&self.url, &e))
        });
        match released {
            Ok(Ours::Yes) => Ok(()),
            // Gone at the release, at a moment nobody can tell: perhaps
            // while the command ran.
            Ok(Ours::Gone) => Err(format!(
                "the lock key {} was gone from Redis when the command ended (its lease expired or it was deleted), so another holder may have had the lock meanwhile",
                display::escape(&self.place.key(&self.url))
            )),
            Ok(Ours::Other) => Err(format!(
                "the lock key {} held another fencing token than ours ({}) when the command ended, so another holder had the lock meanwhile",
                display::escape(&self.place.key(&self.url)),
                self.token
            )),
            Err(e) => {
                crate::say!(
                    "lockrun: could not release {} ({e}); Redis releases it when its lease expires within {}",
                    self.url.name,
                    display::span(self.ttl)
                );
                Ok(())
            }
        }
    }
}

fn holder_text(value: Option<&[u8]>, key: &str) -> String {
    let Some(value) = value else {
        return "another client (it released the lock a moment ago)".to_owned();
    };
    match Record::parse(value).filter(|r| !r.is_released()) {
        Some(record) if record.pid.is_some() || record.lockrun_pid.is_some() => {
            display::holder_summary(&record)
        }
        _ => format!(
            "another Redis client that left no lockrun record (key {})",
            display::escape(key)
        ),
    }
}
