//! Acquiring: at once, or waiting (blocking in the kernel, or polling), with
//! a deadline, and interruptible by signals.
//!
//! The uncontended case costs one non-blocking flock and nothing else: no
//! thread, no pipe. Only when the lock is busy does lockrun start the
//! machinery for waiting. Waiting for ever with nothing to show blocks in
//! flock on the main thread itself. Otherwise a helper thread blocks in
//! flock and writes to a self-pipe, as the signal handlers do; the main
//! thread waits on the pipe, waking at least every 250 ms to check the
//! deadline, poll (with `--poll`) and refresh the status line.

use crate::lock::{LockFile, LockMode};
use crate::signals::{self, LOCKED, WakePipe};
use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, Default)]
pub struct WaitPolicy {
    pub nonblocking: bool,
    pub timeout: Option<Duration>,
    /// Retry a non-blocking attempt at this interval instead of a blocking
    /// wait, for file systems whose blocking locks are unreliable.
    pub poll: Option<Duration>,
}

impl WaitPolicy {
    fn waits(&self) -> bool {
        !self.nonblocking && self.timeout != Some(Duration::ZERO)
    }
}

/// Told about a wait as it goes, to show progress. Knows nothing of
/// terminals here; the caller decides what to show.
pub trait WaitObserver {
    fn waiting(&mut self, waited: Duration);
    fn done(&mut self);
    /// Whether `waiting` must be called as time passes (a live display),
    /// not just once when the wait begins.
    fn needs_ticks(&mut self) -> bool;
}

pub enum NotAcquired {
    /// Held by someone else and `-n`, or the timeout ran out.
    Busy {
        waited: Duration,
    },
    Interrupted(i32),
    Failed(io::Error),
}

const TICK: Duration = Duration::from_millis(250);

/// Takes the lock according to `policy`; returns how long that took. A
/// signal ends the wait: the handlers are installed before any wait.
pub fn acquire(
    lock: &LockFile,
    mode: LockMode,
    policy: WaitPolicy,
    observer: &mut dyn WaitObserver,
) -> Result<Duration, NotAcquired> {
    match lock.try_lock(mode) {
        Ok(true) => return Ok(Duration::ZERO),
        Ok(false) if !policy.waits() => {
            return Err(NotAcquired::Busy {
                waited: Duration::ZERO,
            });
        }
        Ok(false) => {}
        Err(e) => return Err(NotAcquired::Failed(e)),
    }
    let start = Instant::now();
    signals::install().map_err(NotAcquired::Failed)?;
    if policy.timeout.is_none() && policy.poll.is_none() && !observer.needs_ticks() {
        // Waiting for ever with nobody to show progress to: block in flock
        // on this very thread, so that the kernel wakes the command's
        // starter directly when the lock is released, with no helper
        // thread in between. A signal ends lockrun from its handler.
        observer.waiting(Duration::ZERO);
        signals::blocked_in_flock(true);
        // A signal that came before the flag was set was only noted.
        if let Some(sig) = signals::pending() {
            signals::blocked_in_flock(false);
            observer.done();
            return Err(NotAcquired::Interrupted(sig));
        }
        let result = lock.lock(mode);
        signals::blocked_in_flock(false);
        observer.done();
        result.map_err(NotAcquired::Failed)?;
        return Ok(start.elapsed());
    }
    let result = wait(lock, mode, policy, start, observer);
    observer.done();
    result?;
    // A signal that raced with the acquisition was meant to end the wait.
    if let Some(sig) = signals::pending() {
        return Err(NotAcquired::Interrupted(sig));
    }
    Ok(start.elapsed())
}

fn wait(
    lock: &LockFile,
    mode: LockMode,
    policy: WaitPolicy,
    start: Instant,
    observer: &mut dyn WaitObserver,
) -> Result<(), NotAcquired> {
    let wake = WakePipe::new().map_err(NotAcquired::Failed)?;
    if let Some(sig) = signals::pending() {
        return Err(NotAcquired::Interrupted(sig));
    }
    let deadline = policy.timeout.map(|t| start + t);
    let (report, outcome) = mpsc::channel();
    if policy.poll.is_none() {
        let writer = wake.writer().map_err(NotAcquired::Failed)?;
        lock.lock_in_background(mode, move |result| {
            let _ = report.send(result);
            let _ = rustix::io::write(&writer, &[LOCKED]);
        })
        .map_err(NotAcquired::Failed)?;
    }
    let mut next_poll = policy.poll.map(|p| start + p);
    observer.waiting(Duration::ZERO);
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(NotAcquired::Busy {
                waited: now - start,
            });
        }
        let mut until = now + TICK;
        for limit in [deadline, next_poll].into_iter().flatten() {
            until = until.min(limit);
        }
        match wake.wait(until.saturating_duration_since(now)) {
            Ok(Some(LOCKED)) => {
                return match outcome.try_recv() {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(NotAcquired::Failed(e)),
                    Err(_) => Err(NotAcquired::Failed(io::Error::other(
                        "the lock-waiting thread vanished",
                    ))),
                };
            }
            Ok(Some(sig)) => return Err(NotAcquired::Interrupted(i32::from(sig))),
            Ok(None) => {}
            Err(e) => return Err(NotAcquired::Failed(e)),
        }
        if let (Some(interval), Some(due)) = (policy.poll, next_poll)
            && Instant::now() >= due
        {
            match lock.try_lock(mode) {
                Ok(true) => return Ok(()),
                Ok(false) => next_poll = Some(Instant::now() + interval),
                Err(e) => return Err(NotAcquired::Failed(e)),
            }
        }
        observer.waiting(start.elapsed());
    }
}
