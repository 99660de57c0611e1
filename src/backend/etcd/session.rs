//! Keeping the lease alive while lockrun waits and while the command runs,
//! and acting when the lock is lost.
//!
//! A lease is etcd's promise that our key lives while we renew it. A thread
//! renews it every TTL/6 and, once a key is held, checks that the key is
//! still ours. The lock counts as lost when etcd says the lease is gone,
//! when the key was deleted, or when no renewal has succeeded for a whole
//! TTL: by then etcd may have expired the lease and given the lock to
//! someone else, so the command must stop. It gets SIGTERM, then SIGKILL
//! after the grace period. Judged from our side, conservatively: the TTL is
//! counted from when the last successful renewal was *sent*.
//!
//! Between renewals the thread watches the held key: a revoked lease (or a
//! key deleted by hand) shows as its deletion the moment etcd applies it,
//! so the command stops within a watch event's delay rather than at the
//! next renewal, up to TTL/6 later. A keep-alive that etcd answers with TTL
//! 0 (the lease is gone) is a loss at once too, never a failure to retry.

use super::client::{Client, HeldWatch, Renewal, Watched};
use crate::backend::lost;
use crate::sync::Shared as Guarded;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After a failed renewal, try again this soon (bounded by the TTL).
const RETRY: Duration = Duration::from_millis(250);

#[derive(Default)]
struct State {
    stop: bool,
    /// Our key and its creation revision, once the lock is held.
    held: Option<(String, i64)>,
    /// Our key while it waits in the queue.
    queued: Option<String>,
    command: lost::Command,
    /// Why the lock was lost, once it was.
    lost: Option<String>,
    /// Until when etcd has promised the lease, as far as lockrun knows.
    valid_until: Option<Instant>,
    /// Once the command has ended on its own: whether the lock was still
    /// confirmed then (no loss known, the lease within its promise).
    ended_confirmed: Option<bool>,
    /// The loss was only lockrun's deadline passing (no word from etcd),
    /// after the command had ended on its own.
    lost_after_end: bool,
}

/// What became of the lock, at the end.
pub enum Ending {
    /// Held throughout, as far as lockrun could tell.
    Held,
    /// Lost while the command ran: the command was stopped (76).
    Lost(String),
    /// The command ended on its own while the lock was confirmed; it could
    /// not be confirmed afterwards (a renewal failing, the lease gone): the
    /// run's status is the command's, with a warning.
    Unconfirmed(String),
}

type Shared = Guarded<State>;

pub struct Session {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Ends the lease thread's call in flight (a renewal, the watch) at
    /// once when lockrun finishes.
    cancel: Arc<tokio::sync::Notify>,
}

impl Session {
    /// Starts renewing `lease` (granted with `ttl`) at once; `key` is the
    /// key it waits with.
    pub fn start(
        client: Client,
        (lease, key): (i64, String),
        ttl: Duration,
        kill_grace: Duration,
    ) -> Session {
        let shared = Arc::new(Shared::new(State {
            queued: Some(key),
            valid_until: Some(Instant::now() + ttl),
            ..State::default()
        }));
        let cancel = Arc::new(tokio::sync::Notify::new());
        let inner = Arc::clone(&shared);
        let stop = Arc::clone(&cancel);
        let thread = crate::platform::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("lease".into())
                .spawn(move || keep_alive(&inner, &client, (lease, ttl), kill_grace, &stop))
        })
        .ok();
        if thread.is_none() {
            shared.lock().lost = Some("cannot start the thread that renews the lease".into());
        }
        Session {
            shared,
            thread,
            cancel,
        }
    }

    /// The lock is ours as `key`, created at `revision`: watch it.
    pub fn held(&self, key: String, revision: i64) {
        self.shared.lock().held = Some((key, revision));
    }

    pub fn lost(&self) -> Option<String> {
        self.shared.lock().lost.clone()
    }

    /// The command runs as `pid`: if the lock is lost it gets SIGTERM, then
    /// SIGKILL after the grace.
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
            let confirmed = state.valid_until.is_some_and(|v| Instant::now() < v);
            state.ended_confirmed = Some(confirmed);
        }
        drop(state);
        self.shared.notify();
    }

    /// Stops renewing without waiting for the thread: a waiter giving up,
    /// whose exit must not wait for a renewal in flight.
    pub fn stop(self) {
        self.shared.lock().stop = true;
        self.shared.notify();
        self.cancel.notify_one();
    }

    /// Stops renewing, without waiting for a renewal in flight (its answer
    /// no longer matters: the command has ended), and says what became of
    /// the lock. Before, the join waited for that renewal until the lease's
    /// deadline, which then counted as a loss: 76 for a command that had
    /// finished with 0 (issue 29 item 5).
    pub fn finish(mut self) -> Ending {
        self.shared.lock().stop = true;
        self.shared.notify();
        self.cancel.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let state = self.shared.lock();
        match (&state.lost, state.lost_after_end, state.ended_confirmed) {
            (None, _, _) => Ending::Held,
            (Some(reason), true, Some(true)) => Ending::Unconfirmed(reason.clone()),
            (Some(reason), _, _) => Ending::Lost(reason.clone()),
        }
    }
}

fn keep_alive(
    shared: &Shared,
    client: &Client,
    (lease, ttl): (i64, Duration),
    grace: Duration,
    cancel: &tokio::sync::Notify,
) {
    // Every TTL/6, not etcd's own TTL/3: lockrun's deadline is the last
    // renewal that got through plus the TTL, so when etcd stops answering
    // (a leader election, a member stopped) the lease has 5/6 of its TTL
    // left rather than 2/3, and a spell without a leader that short never
    // stops the command (issue 29 item 4). A renewal is one message.
    let interval = (ttl / 6).max(Duration::from_millis(100));
    let mut valid_until = Instant::now() + ttl;
    let mut next = Instant::now() + interval;
    let mut watch: Option<HeldWatch> = None;
    // The last renewal failed: ask every member at once.
    let mut failing = false;
    loop {
        // Until the next renewal: holding, watch our key, so that its
        // deletion (a revoked lease, a key deleted by hand) stops the
        // command at once, not at the next renewal.
        loop {
            {
                let mut state = shared.lock();
                if state.stop {
                    return;
                }
                if Instant::now() >= next {
                    break;
                }
                match (&state.held, &watch) {
                    (Some((key, revision)), None) => {
                        watch = Some(HeldWatch::new(key.clone(), *revision));
                    }
                    (Some(_), Some(_)) => {}
                    (None, _) => {
                        state = shared.wait_until(state, next);
                        drop(state);
                        continue;
                    }
                }
            }
            let Some(w) = watch.as_mut() else {
                continue;
            };
            match client.watch_held(w, next, cancel) {
                Watched::Quiet => {}
                Watched::Stopped => return,
                Watched::Gone(reason) => return enforce(shared, reason, grace, true),
                // The member failed: the renewals judge the lease; the
                // watch is tried again a little later.
                Watched::Failed => {
                    let state = shared.lock();
                    let again = (Instant::now() + RETRY).min(next);
                    if !state.stop {
                        drop(shared.wait_until(state, again));
                    }
                }
            }
        }
        let sent = Instant::now();
        // Holding, never wait for an answer past the moment the lease may
        // expire; waiting, give each round time to reach some member.
        let floor = if holding(shared) {
            Duration::from_millis(50)
        } else {
            Duration::from_secs(2)
        };
        let deadline = valid_until.max(sent + floor);
        // Holding, the other members are asked too once the preferred one
        // is slow (at once after a failed renewal): see `keepalive`.
        let hedge = holding(shared).then(|| {
            if failing {
                Duration::ZERO
            } else {
                interval.min(Duration::from_secs(1))
            }
        });
        let renewed = client.keepalive(lease, deadline, hedge, cancel);
        failing = renewed.is_err();
        if shared.lock().stop || matches!(renewed, Ok(Renewal::Stopped)) {
            // lockrun is finishing: whatever this renewal would have said
            // comes after the command's end.
            return;
        }
        let mut certain = true;
        let verdict = match renewed {
            Ok(Renewal::Renewed) => {
                valid_until = sent + ttl;
                shared.lock().valid_until = Some(valid_until);
                check_key(shared, client, valid_until)
            }
            Ok(Renewal::Stopped) => return,
            Ok(Renewal::Expired) => Err(
                "etcd says the lease has expired or was revoked (a keep-alive answered with TTL 0: lease not found)"
                    .to_owned(),
            ),
            // While waiting, a refusal that every member would give (the
            // password changed or the user deleted once the token expired,
            // access revoked) will not pass: say so now, rather than wait on
            // until the deadline with a lease that cannot be renewed. A
            // holder's lease still lives until its TTL, so a holder goes
            // on until then, as for any failed renewal.
            Err(e) if e.permanent && !holding(shared) => Err(refused(&e)),
            // Before the lock is held, silence proves nothing: etcd may be
            // down as a whole, and then restores every lease with a fresh
            // TTL when it comes back. A waiter that left now would leave its
            // key queued, holding the lock for a TTL with nobody running; it
            // stays in the queue until etcd says the lease is gone (or its
            // own deadline or a signal ends the wait).
            Err(_) if !holding(shared) => Ok(false),
            Err(e) if Instant::now() >= valid_until => {
                certain = false;
                Err(format!(
                    "the lease could not be renewed for its whole TTL ({}s), so etcd may have given the lock to another holder: {e}",
                    ttl.as_secs()
                ))
            }
            Err(_) => Ok(false),
        };
        match verdict {
            Ok(true) => next = sent + interval,
            Ok(false) => next = (Instant::now() + RETRY).min(valid_until.max(Instant::now())),
            Err(reason) => return enforce(shared, reason, grace, certain),
        }
    }
}

fn holding(shared: &Shared) -> bool {
    shared.lock().held.is_some()
}

/// While waiting, a refusal that every member would give will not pass:
/// the password was changed or the user deleted once its token expired,
/// or its access was revoked. Said now, rather than at the deadline (or
/// when the lock comes free) after a wait that could not have ended well.
fn refused(e: &super::client::EtcdError) -> String {
    format!(
        "etcd no longer accepts this lockrun's credentials (its authentication token expired and could not be renewed, or its access was revoked): {e}"
    )
}

/// Ok(true): fine; Ok(false): could not tell (retry soon); Err: lost.
///
/// While waiting, a read of our own key: a lease renewal needs no
/// authentication in etcd, so only an authenticated call shows that the
/// token can no longer be renewed. A key gone is left to the wait, which
/// says so when it next looks.
fn check_key(shared: &Shared, client: &Client, deadline: Instant) -> Result<bool, String> {
    let (held, queued) = {
        let state = shared.lock();
        (state.held.clone(), state.queued.clone())
    };
    let Some((key, revision)) = held else {
        return match queued.map(|key| client.get(&key, deadline)) {
            Some(Err(e)) if e.permanent => Err(refused(&e)),
            Some(Err(_)) => Ok(false),
            _ => Ok(true),
        };
    };
    match client.get(&key, deadline) {
        Ok(Some(kv)) if kv.create_revision == revision => Ok(true),
        Ok(_) => Err(format!("the lock key {key} was deleted in etcd")),
        Err(_) => Ok(false),
    }
}

/// The lock is lost: the command must not go on believing it holds it.
/// `certain`: etcd said so (the lease or the key is gone), rather than
/// lockrun's own deadline passing without an answer.
fn enforce(shared: &Shared, reason: String, grace: Duration, certain: bool) {
    let mut state = shared.lock();
    state.lost = Some(reason);
    // Only the deadline, passed after the command had ended on its own
    // within the lease's promise: the command ran under the lock, and the
    // run's status stays the command's. etcd's word that the key is gone
    // cannot say when it went, so that stays a loss.
    state.lost_after_end = !certain && state.ended_confirmed.is_some();
    lost::stop_command(shared, state, |s| &s.command, |s| s.stop, grace);
}
