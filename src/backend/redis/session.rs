//! Keeping the held key's lease alive while the command runs, and acting
//! when the lock is lost.
//!
//! One thread renews the lease every TTL/4 with a script that first
//! compares the token in the key's value with ours (`client::renew`). The
//! lock counts as lost when the script finds the key gone (expired,
//! deleted) or holding another token, or when no renewal has been
//! confirmed for a whole TTL counted from when the last confirmed one was
//! *sent*: by then Redis may have expired the key and given the lock to
//! someone else. The command then gets SIGTERM, then SIGKILL after the
//! grace. Every call is bounded by that deadline (the socket's timeouts),
//! so a server that stops answering (`DEBUG SLEEP`, SIGSTOP, a partition)
//! cannot hold the thread past it; a connection whose call failed is
//! dropped (a late answer must never be read as the next one's) and made
//! again for the next try.
//!
//! A renewal needs no more than one round trip, and finds a key deleted
//! or overwritten from outside within TTL/4.

use super::RedisUrl;
use super::client::{self, Ours, Place, Scripts};
use crate::backend::lost;
use crate::sync::Shared as Guarded;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After a failed renewal, try again this soon (bounded by the deadline).
const RETRY: Duration = Duration::from_millis(200);
/// How long finishing waits for a renewal in flight to hand the
/// connection back before the release opens its own.
const HANDBACK: Duration = Duration::from_millis(500);

struct State {
    stop: bool,
    /// The connection, while no renewal is in flight (`None` after a
    /// failed call: the next one connects again).
    con: Option<redis::Connection>,
    in_flight: bool,
    /// A value to store with the next renewal (the record, once the
    /// command runs): renewed at once.
    store: Option<Vec<u8>>,
    command: lost::Command,
    lost: Option<String>,
    /// Until when the lease is confirmed, as far as lockrun knows.
    valid_until: Instant,
    /// Once the command has ended on its own: whether the lease was still
    /// confirmed then.
    ended_confirmed: Option<bool>,
    /// The loss was only lockrun's deadline passing (no word from Redis).
    lost_by_deadline: bool,
}

type Shared = Guarded<State>;

/// What became of the lock, at the end.
pub enum Ending {
    /// Held throughout, as far as lockrun could tell; the connection, to
    /// release with (if one is left).
    Held(Option<redis::Connection>),
    /// Lost while the command ran: the command was stopped (76).
    Lost(String),
    /// The command ended on its own while the lease was confirmed; only
    /// the deadline passed since (no word from Redis): the run's status
    /// is the command's, with a warning.
    Unconfirmed(String),
}

pub struct Session {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Session {
    /// Starts renewing `token`'s hold on the lock key, whose lease was
    /// set by a call sent at `sent` with `ttl`.
    pub fn start(
        (url, con): (RedisUrl, redis::Connection),
        (token, mark, place): (i64, String, Place),
        (sent, ttl): (Instant, Duration),
        grace: Duration,
    ) -> Session {
        let shared = Arc::new(Shared::new(State {
            stop: false,
            con: Some(con),
            in_flight: false,
            store: None,
            command: lost::Command::default(),
            lost: None,
            valid_until: sent + ttl,
            ended_confirmed: None,
            lost_by_deadline: false,
        }));
        let inner = Arc::clone(&shared);
        let thread = crate::platform::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("redis-lease".into())
                .spawn(move || keep_alive(&inner, (&url, place), (token, &mark), ttl, grace))
        })
        .ok();
        if thread.is_none() {
            shared.lock().lost = Some("cannot start the thread that renews the lease".into());
        }
        Session { shared, thread }
    }

    /// Stores `value` in the key with the next renewal, which is now.
    pub fn store(&self, value: Vec<u8>) {
        self.shared.lock().store = Some(value);
        self.shared.notify();
    }

    pub fn command_started(&self, pid: i32) {
        self.shared.lock().command.started(pid);
        self.shared.notify();
    }

    /// Call before reaping the command, so its pid is never signalled once
    /// it could belong to another process.
    pub fn command_exited(&self) {
        let mut state = self.shared.lock();
        state.command.exited();
        if state.lost.is_none() {
            state.ended_confirmed = Some(Instant::now() < state.valid_until);
        }
        drop(state);
        self.shared.notify();
    }

    /// Stops renewing and says what became of the lock, with the
    /// connection to release on when one is at hand.
    pub fn finish(mut self) -> Ending {
        let mut state = self.shared.lock();
        state.stop = true;
        self.shared.notify();
        let until = Instant::now() + HANDBACK;
        while state.in_flight && Instant::now() < until {
            state = self.shared.wait_until(state, until);
        }
        let ending = match (&state.lost, state.lost_by_deadline, state.ended_confirmed) {
            (None, _, _) => Ending::Held(state.con.take()),
            (Some(reason), true, Some(true)) => Ending::Unconfirmed(reason.clone()),
            (Some(reason), _, _) => Ending::Lost(reason.clone()),
        };
        let joinable = !state.in_flight;
        drop(state);
        // A renewal still in flight is left to end on its own deadline:
        // its answer no longer matters.
        if joinable && let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        ending
    }
}

fn keep_alive(
    shared: &Shared,
    (url, place): (&RedisUrl, Place),
    (token, mark): (i64, &str),
    ttl: Duration,
    grace: Duration,
) {
    let scripts = Scripts::new();
    let interval = (ttl / 4).max(Duration::from_millis(50));
    let mut next = Instant::now() + interval;
    loop {
        let (con, store, deadline) = {
            let mut state = shared.lock();
            loop {
                if state.stop {
                    return;
                }
                let now = Instant::now();
                if now >= state.valid_until {
                    let reason = format!(
                        "the lease could not be renewed for its whole TTL ({}), so Redis may have given the lock to another holder",
                        crate::display::span(ttl)
                    );
                    return enforce(shared, state, reason, grace, true);
                }
                if state.store.is_some() || now >= next {
                    break;
                }
                let until = next.min(state.valid_until);
                state = shared.wait_until(state, until);
            }
            state.in_flight = true;
            (state.con.take(), state.store.take(), state.valid_until)
        };
        let sent = Instant::now();
        let result = renew_once(
            con,
            (url, place),
            &scripts,
            mark,
            ttl,
            store.as_deref(),
            deadline,
        );
        let mut state = shared.lock();
        state.in_flight = false;
        shared.notify();
        if state.stop {
            if let Ok((con, Ours::Yes)) = result {
                state.con = Some(con);
            }
            return;
        }
        match result {
            Ok((con, Ours::Yes)) => {
                state.con = Some(con);
                state.valid_until = state.valid_until.max(sent + ttl);
                next = sent + interval;
            }
            Ok((_, Ours::Gone)) => {
                let reason = format!(
                    "the lock key {} is gone from Redis (it expired, or was deleted)",
                    crate::display::escape(&place.key(url))
                );
                return enforce(shared, state, reason, grace, false);
            }
            Ok((_, Ours::Other)) => {
                let reason = format!(
                    "the lock key {} no longer holds our fencing token {token} with our id (it was overwritten, or expired and taken by another holder, perhaps with the same token from a server that lost its counter)",
                    crate::display::escape(&place.key(url))
                );
                return enforce(shared, state, reason, grace, false);
            }
            Err(e) => {
                // The record to store goes with the next try.
                if state.store.is_none() {
                    state.store = store;
                }
                let now = Instant::now();
                if now >= state.valid_until {
                    let reason = format!(
                        "the lease could not be renewed for its whole TTL ({}), so Redis may have given the lock to another holder: {e}",
                        crate::display::span(ttl)
                    );
                    return enforce(shared, state, reason, grace, true);
                }
                next = (now + RETRY).min(state.valid_until);
            }
        }
    }
}

/// One renewal on `con` (or a new connection), answered by `deadline`.
fn renew_once(
    con: Option<redis::Connection>,
    (url, place): (&RedisUrl, Place),
    scripts: &Scripts,
    mark: &str,
    ttl: Duration,
    store: Option<&[u8]>,
    deadline: Instant,
) -> Result<(redis::Connection, Ours), String> {
    // Through Sentinel, each renewal asks it for the primary again: after
    // a failover the old primary may accept writes for a while (until
    // Sentinel demotes it), and a lease renewed there would expire on the
    // new one, where the next holder looks.
    let con = con.filter(|_| url.sentinel.is_none());
    let mut con = match con {
        Some(con) => con,
        None => client::connect(url, deadline.saturating_duration_since(Instant::now()))?,
    };
    client::set_deadline(&con, deadline);
    match client::renew(&mut con, scripts, (url, place), mark, ttl, store) {
        Ok(ours) => Ok((con, ours)),
        // Dropped: an answer arriving late must not be read as the next.
        Err(e) => Err(client::explain(url, &e)),
    }
}

/// The lock is lost: the command must not go on believing it holds it.
/// `by_deadline`: only lockrun's deadline passed, no word from Redis.
fn enforce(
    shared: &Shared,
    mut state: std::sync::MutexGuard<'_, State>,
    reason: String,
    grace: Duration,
    by_deadline: bool,
) {
    state.lost = Some(reason);
    state.lost_by_deadline = by_deadline && state.ended_confirmed.is_some();
    shared.notify();
    lost::stop_command(shared, state, |s| &s.command, |s| s.stop, grace);
}
