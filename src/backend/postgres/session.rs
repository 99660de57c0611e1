//! Watching the held lock's connection while the command runs, and acting
//! when the lock is lost.
//!
//! The server keeps a session's advisory lock until the session ends, so
//! nothing needs renewing; but a connection can die silently (a network
//! partition, a server restart, `pg_terminate_backend`). Two threads:
//! the pinger owns the connection and every TTL/3 asks the server whether
//! our session still holds the lock (the same statement carries the
//! holder's record in a comment, so `pg_stat_activity.query` shows it);
//! the watcher stops the command (SIGTERM, SIGKILL after the grace) when
//! the pinger reports the lock gone or the connection broken, or when no
//! answer confirmed the lock for a whole TTL (a call can hang on a dead
//! network for longer than that). Judged from our side, conservatively:
//! the TTL counts from when the last confirmed check was *sent*.
//!
//! Two refinements of that rule:
//! - A connection the server closes (`pg_terminate_backend`, a restart,
//!   a crash: the session is over and the lock with it) is known at once:
//!   a third thread waits on the socket for the hang-up (POLLRDHUP), so
//!   the command is stopped then, not at the next check up to TTL/3 later.
//! - "Did not confirm for a whole TTL" blames the server or the network
//!   only when a check was given its chance: sent, and unanswered for
//!   TTL/3. When lockrun itself did not run (SIGSTOP, a suspended VM or
//!   container, a starved host) no check went out while the clock ran; on
//!   waking the watcher sees the TTL long past. It then asks the server
//!   (one check, on the same connection) before declaring the lock lost:
//!   the server kept the session (its kernel answered the keepalives), and
//!   if our session still holds the lock nobody else can have had it.

use crate::backend::lost;
use crate::platform::OwnedFd;
use crate::sync::Shared as Guarded;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, SimpleQueryMessage};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long finishing may wait for a check in flight to hand the
/// connection back.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

struct State {
    stop: bool,
    /// The statement comment carrying the record; replaced when it changes.
    comment: String,
    ping_now: bool,
    /// Until when the lock counts as confirmed.
    valid_until: Instant,
    command: lost::Command,
    lost: Option<String>,
    /// The connection, while no check is in flight.
    client: Option<Client>,
    /// When the check in flight was sent.
    in_flight: Option<Instant>,
    /// Asked of the pinger by the watcher: a check (of the lock, not just
    /// the record's update) now.
    confirm_now: bool,
    /// The TTL has run out, but not yet the chance given to a check sent
    /// since (see the module's comment): the lock counts as lost only
    /// once this passes too.
    chance_until: Option<Instant>,
}

type Shared = Guarded<State>;

pub struct Session {
    shared: &'static Shared,
    watcher: Option<JoinHandle<()>>,
    /// The statement that lets go of the lock.
    release: String,
    /// What the threads need, until they are started.
    threads: Option<Threads>,
}

struct Threads {
    key: i64,
    first: &'static str,
    ttl: Duration,
    grace: Duration,
    socket: Option<OwnedFd>,
}

/// What the pinger asks: does our session still hold the lock?
pub fn holds_sql(key: i64) -> String {
    let (classid, objid) = super::sql::key_parts(key);
    format!(
        "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' \
         AND objsubid = 1 AND classid = {classid} AND objid = {objid} AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
}

impl Session {
    /// Starts watching `client` (and `socket`, a duplicate of its socket,
    /// when known), whose session holds the lock on `key`;
    /// `release` is the statement that lets go of it, `first` a statement
    /// to run with the first check.
    pub fn start(
        (client, socket): (Client, Option<OwnedFd>),
        key: i64,
        comment: String,
        release: String,
        first: &'static str,
        ttl: Duration,
        grace: Duration,
    ) -> Session {
        // Leaked on purpose: a pinger stuck on a dead network is left
        // behind when lockrun finishes, and must still find its state.
        let shared: &'static Shared = Box::leak(Box::new(Shared::new(State {
            stop: false,
            comment,
            ping_now: false,
            valid_until: Instant::now() + ttl,
            command: lost::Command::default(),
            lost: None,
            client: Some(client),
            in_flight: None,
            confirm_now: false,
            chance_until: None,
        })));
        Session {
            shared,
            watcher: None,
            release,
            threads: Some(Threads {
                key,
                first,
                ttl,
                grace,
                socket,
            }),
        }
    }

    /// The connection's socket (a duplicate), until the threads start.
    pub fn socket(&self) -> Option<crate::platform::BorrowedFd<'_>> {
        use crate::platform::AsFd;
        self.threads.as_ref()?.socket.as_ref().map(|s| s.as_fd())
    }

    /// Starts the threads, once the command runs: not before, where they
    /// would stand between the lock and the command's start.
    fn launch(&mut self) {
        let Some(Threads {
            key,
            first,
            ttl,
            grace,
            socket,
        }) = self.threads.take()
        else {
            return;
        };
        let shared = self.shared;
        // Signals stay on the main thread, where the handlers' wake pipe
        // is known to be open.
        let (pinger, watcher) = crate::platform::with_signals_blocked(|| {
            let pinger = std::thread::Builder::new()
                .name("pg-ping".into())
                .spawn(move || ping(shared, key, first, ttl));
            let watcher = std::thread::Builder::new()
                .name("pg-watch".into())
                .spawn(move || watch(shared, grace, ttl))
                .ok();
            // Without it the hang-up is found by the next check, as before.
            if let Some(socket) = socket {
                let _ = std::thread::Builder::new()
                    .name("pg-hangup".into())
                    .spawn(move || hang_up(shared, socket));
            }
            (pinger, watcher)
        });
        if pinger.is_err() || watcher.is_none() {
            shared.lock().lost = Some("cannot start the threads that watch the connection".into());
        }
        self.watcher = watcher;
    }

    /// The record changed: carry it in the next check, which is now.
    pub fn update(&self, comment: String) {
        let mut state = self.shared.lock();
        state.comment = comment;
        state.ping_now = true;
        self.shared.notify();
    }

    pub fn lost(&self) -> Option<String> {
        self.shared.lock().lost.clone()
    }

    pub fn command_started(&mut self, pid: i32) {
        self.shared.lock().command.started(pid);
        self.shared.notify();
        self.launch();
    }

    pub fn command_exited(&self) {
        self.shared.lock().command.exited();
        self.shared.notify();
    }

    /// Stops watching, lets go of the lock and closes the connection;
    /// returns why the lock was lost, if it was.
    pub fn finish(mut self) -> Option<String> {
        let mut state = self.shared.lock();
        state.stop = true;
        self.shared.notify();
        let until = Instant::now() + CLOSE_TIMEOUT;
        let client = loop {
            if state.lost.is_some() {
                break None;
            }
            if let Some(client) = state.client.take() {
                break Some(client);
            }
            // A check in flight has it; a connection that hangs is left
            // to the pinger (it ends with lockrun).
            if Instant::now() >= until {
                break None;
            }
            state = self.shared.wait_until(state, until);
        };
        let lost = state.lost.clone();
        drop(state);
        // Ending the session releases the lock, but the server handles a
        // closed connection after we are gone: a script's next `lockrun
        // -n` could still find the lock held. Unlocking first makes the
        // release happen before lockrun exits; on this thread, which is
        // running anyway, rather than waking the pinger to do it (the
        // waiter's command starts that much sooner). A network that died
        // since the last check makes it fail after the TCP user timeout
        // (the TTL) at most.
        if let Some(mut client) = client {
            let _ = client.simple_query(&self.release);
        }
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
        lost
    }
}

/// The connection is taken from the state for each check and given back;
/// `first` goes before the first check that succeeds.
fn ping(shared: &'static Shared, key: i64, mut first: &'static str, ttl: Duration) {
    let interval = (ttl / 3).max(Duration::from_millis(100));
    let holds = holds_sql(key);
    let mut next = Instant::now() + interval;
    loop {
        let (comment, mut client, check, sent) = {
            let mut state = shared.lock();
            while !state.stop && !state.ping_now && !state.confirm_now && Instant::now() < next {
                state = shared.wait_until(state, next);
            }
            if state.stop {
                return;
            }
            let Some(client) = state.client.take() else {
                return;
            };
            // Early for a new record (the command started): carried in a
            // statement that only shows it, so that a short command's
            // release does not wait behind a read of pg_locks, which a new
            // session pays dearly for the first time. The lock was
            // confirmed by the statement that took it; the next check
            // comes on time.
            let check = Instant::now() >= next || state.confirm_now;
            state.ping_now = false;
            state.confirm_now = false;
            let sent = Instant::now();
            state.in_flight = Some(sent);
            (state.comment.clone(), client, check, sent)
        };
        let sql = if check {
            format!("{comment}{first}{holds}")
        } else {
            format!("{comment}{first}SELECT 1")
        };
        let verdict = match client.simple_query(&sql) {
            Ok(answer) => match count(&answer) {
                Some(1) => {
                    first = "";
                    Ok(())
                }
                _ => Err("the server says our session no longer holds the lock".to_owned()),
            },
            // A late cancel request meant for the wait: the session is fine.
            Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
                let mut state = shared.lock();
                state.client = Some(client);
                state.in_flight = None;
                drop(state);
                shared.notify();
                next = Instant::now() + Duration::from_millis(50);
                continue;
            }
            Err(e) => Err(format!(
                "the connection to PostgreSQL broke, so the server has released the lock or will: {}",
                super::connect::explain(&e)
            )),
        };
        let mut state = shared.lock();
        state.in_flight = None;
        match verdict {
            Ok(()) if !check => {
                state.client = Some(client);
                shared.notify();
                continue;
            }
            Ok(()) => {
                state.valid_until = state.valid_until.max(sent + ttl);
                state.client = Some(client);
                shared.notify();
            }
            Err(reason) => {
                state.lost.get_or_insert(reason);
                shared.notify();
                drop(state);
                drop(client);
                return;
            }
        }
        next = sent + interval;
    }
}

fn count(answer: &[SimpleQueryMessage]) -> Option<i64> {
    answer.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse().ok()),
        _ => None,
    })
}

/// How much later than asked the watcher may wake before it counts as
/// not having run meanwhile (paused, starved): well above a busy host's
/// scheduling delay.
const OVERSLEPT: Duration = Duration::from_millis(250);

fn watch(shared: &'static Shared, grace: Duration, ttl: Duration) {
    // A check's chance to be answered: the check period.
    let chance = (ttl / 3).max(Duration::from_millis(100));
    let mut state = shared.lock();
    let mut until = state.valid_until;
    loop {
        if state.stop {
            return;
        }
        if state.lost.is_some() {
            break;
        }
        let now = Instant::now();
        if now > until + OVERSLEPT {
            // lockrun did not run for a while: whatever was (or was not)
            // sent before cannot be judged. Ask now, and give the answer
            // its chance.
            state.confirm_now = true;
            state.chance_until = Some(now + chance);
            shared.notify();
        }
        if now >= state.valid_until {
            let mut last = state.chance_until.unwrap_or(now).max(state.valid_until);
            match state.in_flight {
                // A check sent and not yet answered has its chance.
                Some(sent) => last = last.max(sent + chance),
                // None in flight: ask for one (once), and wait for it.
                None if state.chance_until.is_none() => {
                    state.confirm_now = true;
                    last = now + chance;
                    shared.notify();
                }
                None => {}
            }
            state.chance_until = Some(last);
            if now >= last {
                state.lost = Some(
                    "PostgreSQL did not confirm the lock for a whole TTL (the server or the network stopped answering)"
                        .to_owned(),
                );
                break;
            }
            until = last;
        } else {
            // Confirmed again: any chance given is spent.
            state.chance_until = None;
            until = state.valid_until;
        }
        state = shared.wait_until(state, until);
    }
    lost::stop_command(shared, state, |s| &s.command, |s| s.stop, grace);
}

/// Waits for the server to close the connection; the session, and the lock
/// with it, is then gone. The socket is a duplicate of the client's, only
/// polled: its data is the client's to read. Left blocked when lockrun
/// finishes (the process ends).
fn hang_up(shared: &'static Shared, socket: OwnedFd) {
    use crate::platform::AsFd;
    if !crate::platform::wait_for_hang_up(socket.as_fd()) {
        // Cannot watch: the checks still will.
        return;
    }
    let mut state = shared.lock();
    if state.stop || state.lost.is_some() {
        return;
    }
    // The server's own words (FATAL: terminating connection due to
    // administrator command) are in the socket already, when the client
    // is idle here to read them: a read of what has come, bounded (the
    // state's lock is held), never a round trip. Bounded rather than a
    // single poll: the client's runtime learns that the socket is
    // readable only by waiting on it.
    let why = state
        .client
        .as_mut()
        .and_then(|client| {
            client
                .notifications()
                .timeout_iter(Duration::from_millis(100))
                .next()
                .err()
        })
        .map(|e| format!(": {}", super::connect::explain(&e)))
        .unwrap_or_default();
    state.lost = Some(format!(
        "the server closed the connection, so it has released the lock{why}"
    ));
    shared.notify();
}
