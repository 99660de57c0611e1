//! Helper threads (`platform::threads` on Unix) and the [`Bell`] they ring
//! (a self-pipe on Unix, where signal handlers ring it too). No signal
//! masks on Windows: a thread is started as it is. No thread can be
//! interrupted in a blocking call either; what a helper blocks on here is a
//! lock server's wait, which the backend's `Contender::interrupt` cancels,
//! or is harmless to leave behind (it ends with lockrun).

use std::collections::VecDeque;
use std::io;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub fn spawn_helper<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(work)
}

pub fn with_signals_blocked<T>(start: impl FnOnce() -> T) -> T {
    start()
}

pub fn block_signals_on_this_thread() {}

/// See the module's documentation: nothing to send.
pub fn interrupt_helper<T>(_helper: &std::thread::JoinHandle<T>) {}

/// No `ulimit -f` signal on Windows: a write past a quota just fails.
pub fn tolerating_file_size_limit<T>(write: impl FnOnce() -> T) -> T {
    write()
}

/// A write to a closed pipe is an error on Windows, never a signal.
pub fn ignore_broken_pipes() {}

/// Bytes rung by helper threads, waited for by the main thread.
pub struct Bell {
    rung: Mutex<VecDeque<u8>>,
    ringing: Condvar,
}

impl Bell {
    pub fn new() -> io::Result<Bell> {
        Ok(Bell {
            rung: Mutex::new(VecDeque::new()),
            ringing: Condvar::new(),
        })
    }

    fn rung(&self) -> MutexGuard<'_, VecDeque<u8>> {
        self.rung.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn ring(&self, byte: u8) {
        self.rung().push_back(byte);
        self.ringing.notify_all();
    }

    /// Waits up to `timeout` (`None`: for as long as it takes) for a byte.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<u8>> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut rung = self.rung();
        loop {
            if let Some(byte) = rung.pop_front() {
                return Ok(Some(byte));
            }
            match deadline {
                // No timeout, or one past what the clock can count.
                None => rung = self.ringing.wait(rung).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(None);
                    }
                    rung = self
                        .ringing
                        .wait_timeout(rung, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    /// Waits up to `timeout` for bytes, then takes every byte there is.
    pub fn settle(&self, timeout: Duration) {
        if let Ok(Some(_)) = self.wait(Some(timeout)) {
            self.rung().clear();
        }
    }
}
