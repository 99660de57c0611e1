//! The one way lockrun's watcher threads (`--max-time`, a lease, a
//! connection check) share state with the main thread: a mutex and a
//! condition variable. A panic in one thread must not take the others'
//! view of the state with it, so a poisoned lock is read anyway.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

pub struct Shared<T> {
    state: Mutex<T>,
    wake: Condvar,
}

impl<T> Shared<T> {
    pub const fn new(state: T) -> Shared<T> {
        Shared {
            state: Mutex::new(state),
            wake: Condvar::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes every thread waiting in [`wait`](Self::wait) or
    /// [`wait_until`](Self::wait_until): call after changing the state.
    pub fn notify(&self) {
        self.wake.notify_all();
    }

    pub fn wait<'a>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wake.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a [`notify`](Self::notify) or until `until`, whichever
    /// comes first (or spuriously: callers re-check their condition).
    pub fn wait_until<'a>(&self, guard: MutexGuard<'a, T>, until: Instant) -> MutexGuard<'a, T> {
        let left = until.saturating_duration_since(Instant::now());
        match self.wake.wait_timeout(guard, left) {
            Ok((guard, _)) => guard,
            Err(p) => p.into_inner().0,
        }
    }
}
