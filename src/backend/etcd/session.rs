//! Keeping the lease alive while lockrun waits and while the command runs,
//! and acting when the lock is lost.
//!
//! A lease is etcd's promise that our key lives while we renew it. A thread
//! renews it every TTL/3 and, once a key is held, checks that the key is
//! still ours. The lock counts as lost when etcd says the lease is gone,
//! when the key was deleted, or when no renewal has succeeded for a whole
//! TTL: by then etcd may have expired the lease and given the lock to
//! someone else, so the command must stop. It gets SIGTERM, then SIGKILL
//! after the grace period. Judged from our side, conservatively: the TTL is
//! counted from when the last successful renewal was *sent*.

use super::client::Client;
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
}

type Shared = Guarded<State>;

pub struct Session {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
            ..State::default()
        }));
        let inner = Arc::clone(&shared);
        let thread = crate::platform::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("lease".into())
                .spawn(move || keep_alive(&inner, &client, lease, ttl, kill_grace))
        })
        .ok();
        if thread.is_none() {
            shared.lock().lost = Some("cannot start the thread that renews the lease".into());
        }
        Session { shared, thread }
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
        self.shared.lock().command.exited();
        self.shared.notify();
    }

    /// Stops renewing without waiting for the thread: a waiter giving up,
    /// whose exit must not wait for a renewal in flight.
    pub fn stop(self) {
        self.shared.lock().stop = true;
        self.shared.notify();
    }

    /// Stops renewing; returns why the lock was lost, if it was.
    pub fn finish(mut self) -> Option<String> {
        self.shared.lock().stop = true;
        self.shared.notify();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.lost()
    }
}

fn keep_alive(shared: &Shared, client: &Client, lease: i64, ttl: Duration, grace: Duration) {
    let interval = (ttl / 3).max(Duration::from_millis(100));
    let mut valid_until = Instant::now() + ttl;
    let mut next = Instant::now() + interval;
    loop {
        {
            let mut state = shared.lock();
            while !state.stop && Instant::now() < next {
                state = shared.wait_until(state, next);
            }
            if state.stop {
                return;
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
        let verdict = match client.keepalive(lease, deadline) {
            Ok(Some(granted)) => {
                valid_until = sent + granted;
                check_key(shared, client, valid_until)
            }
            Ok(None) => Err("etcd says the lease has expired".to_owned()),
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
            Err(e) if Instant::now() >= valid_until => Err(format!(
                "the lease could not be renewed for its whole TTL ({}s), so etcd may have given the lock to another holder: {e}",
                ttl.as_secs()
            )),
            Err(_) => Ok(false),
        };
        match verdict {
            Ok(true) => next = sent + interval,
            Ok(false) => next = (Instant::now() + RETRY).min(valid_until.max(Instant::now())),
            Err(reason) => return enforce(shared, reason, grace),
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
fn enforce(shared: &Shared, reason: String, grace: Duration) {
    let mut state = shared.lock();
    state.lost = Some(reason);
    lost::stop_command(shared, state, |s| &s.command, |s| s.stop, grace);
}
