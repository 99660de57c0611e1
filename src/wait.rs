//! Acquiring: at once, or waiting (blocking in the kernel, or polling), with
//! a deadline, and interruptible by signals.
//!
//! The uncontended case costs one non-blocking flock and nothing else: no
//! thread, no signal handler. Only when the lock is busy does lockrun start
//! the machinery for waiting.

use crate::lock::{LockFile, LockMode};
use crate::signals::Relay;
use std::io;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What can end a wait.
pub enum Wake {
    Locked(io::Result<()>),
    Signal(i32),
}

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
}

pub struct Acquired {
    pub waited: Duration,
    /// Present when waiting installed signal handling; it keeps catching
    /// signals for the command.
    pub relay: Option<Relay>,
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

pub fn acquire(
    lock: &LockFile,
    mode: LockMode,
    policy: WaitPolicy,
    observer: &mut dyn WaitObserver,
) -> Result<Acquired, NotAcquired> {
    match lock.try_lock(mode) {
        Ok(true) => {
            return Ok(Acquired {
                waited: Duration::ZERO,
                relay: None,
            });
        }
        Ok(false) if !policy.waits() => {
            return Err(NotAcquired::Busy {
                waited: Duration::ZERO,
            });
        }
        Ok(false) => {}
        Err(e) => return Err(NotAcquired::Failed(e)),
    }

    let start = Instant::now();
    let deadline = policy.timeout.map(|t| start + t);
    let (wake, woken) = mpsc::channel();
    let relay = Relay::install_waiting(wake.clone()).map_err(NotAcquired::Failed)?;
    if policy.poll.is_none() {
        lock.lock_in_background(mode, wake, Wake::Locked)
            .map_err(NotAcquired::Failed)?;
    }
    let mut next_poll = policy.poll.map(|p| start + p);

    let result = loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break Err(NotAcquired::Busy {
                waited: now - start,
            });
        }
        let mut until = now + TICK;
        for limit in [deadline, next_poll].into_iter().flatten() {
            until = until.min(limit);
        }
        match woken.recv_timeout(until.saturating_duration_since(now)) {
            Ok(Wake::Locked(Ok(()))) => break Ok(()),
            Ok(Wake::Locked(Err(e))) => break Err(NotAcquired::Failed(e)),
            Ok(Wake::Signal(sig)) => break Err(NotAcquired::Interrupted(sig)),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
        if let (Some(interval), Some(due)) = (policy.poll, next_poll)
            && Instant::now() >= due
        {
            match lock.try_lock(mode) {
                Ok(true) => break Ok(()),
                Ok(false) => next_poll = Some(Instant::now() + interval),
                Err(e) => break Err(NotAcquired::Failed(e)),
            }
        }
        observer.waiting(start.elapsed());
    };
    observer.done();
    result?;

    relay.lock_taken();
    // A signal that raced with the acquisition was meant to end the wait.
    while let Ok(event) = woken.try_recv() {
        if let Wake::Signal(sig) = event {
            return Err(NotAcquired::Interrupted(sig));
        }
    }
    Ok(Acquired {
        waited: start.elapsed(),
        relay: Some(relay),
    })
}
