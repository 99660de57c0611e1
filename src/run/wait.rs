//! The one waiter: acquiring at once, or waiting (blocking in the kernel or
//! in the lock service, or polling), with a deadline, a live status line,
//! and an end at the first signal. Every backend waits through here; the
//! backend only says how to try, how to block and who holds the lock.
//!
//! The uncontended case costs one attempt and nothing else: no thread, no
//! pipe. Waiting for ever with nothing to show blocks on the main thread
//! itself where the backend can (a kernel lock), so the kernel wakes the
//! command's starter directly. Otherwise a helper thread makes the
//! blocking call and writes to a self-pipe, as the signal handlers do; the
//! main thread waits on the pipe, waking at least every 250 ms to check the
//! deadline, poll (with `--poll`) and refresh the status line.
//!
//! The helper is never left behind holding a lock the caller was told it
//! did not get: at the deadline or a signal the main thread interrupts it
//! and collects its answer. A lock it got in that instant counts as
//! acquired at the deadline, and is let go of when a signal ends the wait.

use crate::backend::Contender;
use crate::exit_codes::Failure;
use crate::platform::Helpers;
use crate::run::signals::{self, LOCKED, WakePipe};
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
    fn waiting(&mut self, waited: Duration, lock: &mut dyn Contender);
    fn done(&mut self);
    /// Whether `waiting` must be called as time passes (a live display),
    /// not just once when the wait begins.
    fn needs_ticks(&mut self) -> bool;
}

/// No progress to show (fd mode, flock(1)'s silence).
pub struct Silent;
impl WaitObserver for Silent {
    fn waiting(&mut self, _: Duration, _: &mut dyn Contender) {}
    fn done(&mut self) {}
    fn needs_ticks(&mut self) -> bool {
        false
    }
}

pub enum NotAcquired {
    /// Held by someone else and `-n`, or the timeout ran out.
    Busy {
        waited: Duration,
    },
    Interrupted(i32),
    Failed(Failure),
}

const TICK: Duration = Duration::from_millis(250);
/// How long an interrupted helper may take to answer before it is left
/// behind (a remote call that ignores the interrupt).
const HELPER_ANSWER: Duration = Duration::from_secs(2);

/// Takes the lock according to `policy`; returns how long that took. A
/// signal ends the wait: the handlers are installed before any wait.
pub fn acquire(
    contender: &mut dyn Contender,
    policy: WaitPolicy,
    observer: &mut dyn WaitObserver,
) -> Result<Duration, NotAcquired> {
    let start = Instant::now();
    let mut left = policy;
    loop {
        acquire_once(contender, left, observer)?;
        if contender.confirm().map_err(NotAcquired::Failed)? {
            return Ok(start.elapsed());
        }
        // Contend again for the lock that is the lock now, within what is
        // left of the same deadline.
        left.timeout = policy.timeout.map(|t| t.saturating_sub(start.elapsed()));
    }
}

fn acquire_once(
    contender: &mut dyn Contender,
    policy: WaitPolicy,
    observer: &mut dyn WaitObserver,
) -> Result<Duration, NotAcquired> {
    match contender.try_acquire() {
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
    signals::install().map_err(|e| NotAcquired::Failed(local(&e)))?;
    if policy.timeout.is_none() && policy.poll.is_none() && !observer.needs_ticks() {
        observer.waiting(Duration::ZERO, contender);
        // Waiting for ever with nobody to show progress to: block on this
        // very thread, so that the kernel wakes the command's starter
        // directly when the lock is released. A signal ends lockrun from
        // its handler (nothing has been written or started yet).
        signals::blocked_in_flock(true);
        // A signal that came before the flag was set was only noted.
        if let Some(sig) = signals::pending() {
            signals::blocked_in_flock(false);
            observer.done();
            return Err(NotAcquired::Interrupted(sig));
        }
        let here = contender.block_here();
        signals::blocked_in_flock(false);
        if let Some(result) = here {
            observer.done();
            result.map_err(NotAcquired::Failed)?;
            return Ok(start.elapsed());
        }
    }
    let result = wait(contender, policy, start, observer);
    observer.done();
    result?;
    // A signal that raced with the acquisition was meant to end the wait.
    if let Some(sig) = signals::pending() {
        contender.undo();
        return Err(NotAcquired::Interrupted(sig));
    }
    Ok(start.elapsed())
}

fn local(e: &std::io::Error) -> Failure {
    Failure::new(
        crate::exit_codes::OS_ERROR,
        format!("cannot wait for the lock: {e}"),
    )
}

/// The helper thread making the blocking call. An answer it gives after
/// [`HELPER_ANSWER`] has nobody to go to: the contender that could undo it
/// is the main thread's.
type Helper = Helpers<Result<(), Failure>, fn(usize, Result<(), Failure>)>;

fn wait(
    contender: &mut dyn Contender,
    policy: WaitPolicy,
    start: Instant,
    observer: &mut dyn WaitObserver,
) -> Result<(), NotAcquired> {
    let wake = WakePipe::new().map_err(|e| NotAcquired::Failed(local(&e)))?;
    if let Some(sig) = signals::pending() {
        return Err(NotAcquired::Interrupted(sig));
    }
    let helper = match policy.poll {
        Some(_) => None,
        None => Some(start_helper(contender, &wake)?),
    };
    let deadline = policy.timeout.map(|t| start + t);
    let mut next_poll = policy.poll.map(|p| start + p);
    observer.waiting(Duration::ZERO, contender);
    let outcome = loop {
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
        match wake.wait(until.saturating_duration_since(now)) {
            Ok(Some(LOCKED)) => break Ok(()),
            Ok(Some(sig)) => break Err(NotAcquired::Interrupted(i32::from(sig))),
            Ok(None) => {}
            Err(e) => break Err(NotAcquired::Failed(local(&e))),
        }
        if let (Some(interval), Some(due)) = (policy.poll, next_poll)
            && Instant::now() >= due
        {
            match contender.try_acquire() {
                Ok(true) => return Ok(()),
                Ok(false) => next_poll = Some(Instant::now() + interval),
                Err(e) => break Err(NotAcquired::Failed(e)),
            }
        }
        if let Err(e) = contender.still_valid() {
            break Err(NotAcquired::Failed(e));
        }
        observer.waiting(start.elapsed(), contender);
    };
    let Some(helper) = helper else {
        return outcome;
    };
    if outcome.is_err() {
        contender.interrupt();
    }
    // Ended, or answered: the helper's own answer, if it gives one in time
    // (at once, where no interrupt would make it answer).
    let bound = match outcome.is_err() && !contender.answers_interrupt() {
        true => Duration::ZERO,
        false => HELPER_ANSWER,
    };
    let answer = helper
        .finish(bound)
        .pop()
        .map(|(_, answer)| answer.map_err(NotAcquired::Failed));
    match (outcome, answer) {
        // The helper's own answer: acquired, or why not.
        (Ok(()), answer) => answer.unwrap_or_else(|| Err(vanished())),
        // Acquired in the instant the deadline passed: ours after all.
        (Err(NotAcquired::Busy { .. }), Some(Ok(()))) => Ok(()),
        (Err(not), Some(Ok(()))) => {
            contender.undo();
            Err(not)
        }
        (Err(not), _) => Err(not),
    }
}

fn vanished() -> NotAcquired {
    NotAcquired::Failed(local(&std::io::Error::other(
        "the lock-waiting thread vanished",
    )))
}

fn start_helper(contender: &mut dyn Contender, wake: &WakePipe) -> Result<Helper, NotAcquired> {
    let blocking = contender.blocking().map_err(NotAcquired::Failed)?;
    let mut helper: Helper = Helpers::new(wake.bell(), 1, |_, _| {});
    helper
        .start("lock-wait", blocking)
        .map_err(|e| NotAcquired::Failed(local(&e)))?;
    Ok(helper)
}
