//! Blocking calls on helper threads, and getting those threads back: the
//! one mechanism behind the waiter's lock-waiting thread and the threads
//! `--slots` blocks on every slot with.
//!
//! Each call runs on a helper thread that only the interrupt signal
//! reaches, and rings a [`Bell`] when it returns. The caller waits for
//! the answer it wants however it likes, then [`Helpers::finish`]es:
//! every call still blocked is interrupted until it answers or a bound
//! passes, and the answers come back. A thread left behind is never
//! waited for; whatever it gets once the answers are in goes to the
//! caller's `late`, on that thread, so a lock got too late is let go of
//! rather than kept by nobody.

#[cfg(unix)]
use super::threads::{interrupt_helper, spawn_helper};
// Windows' bell is a condition variable (no signal handler rings it), and
// its helpers cannot be interrupted: see platform::windows::threads.
#[cfg(windows)]
use super::windows::{Bell, interrupt_helper, spawn_helper};
use std::io;
#[cfg(unix)]
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The byte a helper writes to its [`Bell`] when its call returns. No
/// signal is numbered 0, so a signal handler writing to the same bell
/// cannot be mistaken for it.
pub const ANSWERED: u8 = 0;

/// How long a finishing round waits for answers before it sends the
/// interrupt again.
const ROUND: Duration = Duration::from_millis(10);

/// A self-pipe, non-blocking at both ends, so that neither a helper nor a
/// signal handler ever blocks writing to it. Helpers hold it through an
/// `Arc`: one left behind keeps it open, so it never writes to a closed
/// (or reused) descriptor.
#[cfg(unix)]
pub struct Bell {
    read: OwnedFd,
    write: OwnedFd,
}

#[cfg(unix)]
impl Bell {
    #[cfg(not(target_vendor = "apple"))]
    pub fn new() -> io::Result<Bell> {
        use rustix::pipe::{PipeFlags, pipe_with};
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Bell { read, write })
    }

    /// macOS has no pipe2: the flags are set after the pipe is made. A
    /// process started by another thread in between would inherit the
    /// ends; lockrun makes bells only while it waits for a lock, and
    /// starts its command after that.
    #[cfg(target_vendor = "apple")]
    pub fn new() -> io::Result<Bell> {
        use rustix::io::{FdFlags, fcntl_getfd, fcntl_setfd};
        let (read, write) = rustix::pipe::pipe()?;
        for end in [&read, &write] {
            fcntl_setfd(end, fcntl_getfd(end)? | FdFlags::CLOEXEC)?;
            let status = rustix::fs::fcntl_getfl(end)?;
            rustix::fs::fcntl_setfl(end, status | rustix::fs::OFlags::NONBLOCK)?;
        }
        Ok(Bell { read, write })
    }

    /// The write end, for a signal handler (which cannot hold an `Arc`).
    pub fn write_end(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.write.as_fd()
    }

    pub fn ring(&self, byte: u8) {
        let _ = rustix::io::write(&self.write, &[byte]);
    }

    /// Waits up to `timeout` (`None`: for as long as it takes) for a byte;
    /// `None` when none came, which includes a wait that a signal ended.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<u8>> {
        self.poll(timeout)?;
        let mut byte = [0u8; 1];
        match rustix::io::read(&self.read, &mut byte) {
            Ok(1) => Ok(Some(byte[0])),
            Ok(_) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits up to `timeout` for bytes, then takes every byte there is: a
    /// finishing round counts answers, not bytes.
    fn settle(&self, timeout: Duration) {
        if self.poll(Some(timeout)).is_err() {
            return;
        }
        let mut bytes = [0u8; 256];
        while let Ok(n) = rustix::io::read(&self.read, &mut bytes) {
            if n < bytes.len() {
                break;
            }
        }
    }

    fn poll(&self, timeout: Option<Duration>) -> io::Result<()> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut fds = [PollFd::new(&self.read, PollFlags::IN)];
        let timeout = timeout.map(|t| {
            Timespec::try_from(t).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Blocking calls on helper threads, each answering a `T`.
pub struct Helpers<T, L> {
    shared: Arc<Shared<T, L>>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared<T, L> {
    bell: Arc<Bell>,
    answers: Mutex<Answers<T>>,
    /// What becomes of an answer that comes once the answers are in.
    late: L,
    /// How many calls have returned and had their answer taken or given
    /// to `late`: counted before the bell rings, so that a finishing
    /// round woken by that ring sees it.
    returned: Arc<AtomicUsize>,
}

struct Answers<T> {
    /// [`Helpers::finish`] has taken the answers: a later one is `late`'s.
    closed: bool,
    /// Each with the number of its call, in the order they came.
    came: Vec<(usize, T)>,
}

impl<T, L> Shared<T, L> {
    /// A panic on one thread must not lose the others' answers: a
    /// poisoned lock is read anyway.
    fn answers(&self) -> MutexGuard<'_, Answers<T>> {
        self.answers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T, L> Helpers<T, L>
where
    T: Send + 'static,
    L: Fn(usize, T) + Send + Sync + 'static,
{
    /// Calls that ring `bell` as they answer; `late` gets, on its thread,
    /// the number and answer of a call that answers too late.
    pub fn new(bell: Arc<Bell>, calls: usize, late: L) -> Helpers<T, L> {
        Helpers {
            shared: Arc::new(Shared {
                bell,
                answers: Mutex::new(Answers {
                    closed: false,
                    came: Vec::with_capacity(calls),
                }),
                late,
                returned: Arc::new(AtomicUsize::new(0)),
            }),
            threads: Vec::with_capacity(calls),
        }
    }

    /// Starts `call` on a helper thread named `name` (calls are numbered
    /// from 0 as they are started). It must return soon when the thread
    /// gets the interrupt signal (a kernel lock call returns EINTR), or be
    /// harmless to leave behind.
    pub fn start(
        &mut self,
        name: &str,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<()> {
        let shared = Arc::clone(&self.shared);
        let number = self.threads.len();
        let thread = spawn_helper(name, move || {
            let answer = call();
            let mut answers = shared.answers();
            if answers.closed {
                drop(answers);
                (shared.late)(number, answer);
            } else {
                answers.came.push((number, answer));
                drop(answers);
            }
            shared.returned.fetch_add(1, Ordering::SeqCst);
            shared.bell.ring(ANSWERED);
        })?;
        self.threads.push(thread);
        Ok(())
    }

    /// Hands back the answers that came so far, each with the number of
    /// its call, in the order they came, and interrupts every call still
    /// blocked, without waiting for it: the caller, which has the answer it
    /// wanted, goes on at once (a `--slots` head starts its command rather
    /// than wait for every other slot's thread to wake, answer and exit).
    /// Whatever those calls get from now on is `late`'s, on their own
    /// threads. An interrupt that lands just before a thread enters its
    /// blocking call is lost on it: [`Abandoned::finish`], called once the
    /// caller has done what could not wait, sends it again until every
    /// call has returned.
    pub fn abandon(self) -> (Vec<(usize, T)>, Abandoned) {
        let came = {
            let mut answers = self.shared.answers();
            answers.closed = true;
            std::mem::take(&mut answers.came)
        };
        for thread in &self.threads {
            interrupt_helper(thread);
        }
        let bell = Arc::clone(&self.shared.bell);
        let returned = Arc::clone(&self.shared.returned);
        (
            came,
            Abandoned {
                bell,
                returned,
                threads: self.threads,
            },
        )
    }

    /// Ends every call still blocked and hands back the answers, each with
    /// the number of its call, in the order they came. The interrupt is
    /// sent again whenever a round brings no answer (a signal that lands
    /// just before a thread enters its blocking call is lost on it; sent
    /// after every answer instead, N threads would cost N² signals), until
    /// every call has answered or `bound` has passed. A thread that has
    /// not answered by then is left behind, its answer `late`'s.
    pub fn finish(self, bound: Duration) -> Vec<(usize, T)> {
        let give_up = Instant::now() + bound;
        let mut heard = None;
        loop {
            let answered = self.shared.answers().came.len();
            if answered == self.threads.len() || Instant::now() >= give_up {
                break;
            }
            if heard.is_none_or(|before| before == answered) {
                for thread in &self.threads {
                    interrupt_helper(thread);
                }
            }
            heard = Some(answered);
            self.shared.bell.settle(ROUND);
        }
        let came = {
            let mut answers = self.shared.answers();
            answers.closed = true;
            std::mem::take(&mut answers.came)
        };
        // A thread that answered has only its bell left to ring: joined, it
        // is gone before the caller goes on (to start the command).
        let mut threads: Vec<Option<JoinHandle<()>>> = self.threads.into_iter().map(Some).collect();
        for (number, _) in &came {
            if let Some(thread) = threads.get_mut(*number).and_then(Option::take) {
                let _ = thread.join();
            }
        }
        came
    }
}

/// The threads of calls [`Helpers::abandon`] left blocked.
pub struct Abandoned {
    bell: Arc<Bell>,
    returned: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Abandoned {
    /// Sends the interrupt again, every round, to each call that has not
    /// returned, until all have or `bound` has passed; a thread still
    /// blocked then is left behind (what it gets is `late`'s). Every
    /// returned thread has only its exit left: not joined.
    pub fn finish(self, bound: Duration) {
        let give_up = Instant::now() + bound;
        let mut heard = None;
        loop {
            let returned = self.returned.load(Ordering::SeqCst);
            if returned >= self.threads.len() || Instant::now() >= give_up {
                return;
            }
            // Again only when a round brought nothing (as `finish` does):
            // most have their interrupt already and are on their way out.
            if heard == Some(returned) {
                for thread in &self.threads {
                    interrupt_helper(thread);
                }
            }
            heard = Some(returned);
            self.bell.settle(ROUND);
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A call the interrupt ends, as flock(2) is: sleeps in poll(2) on a
    /// pipe nobody writes to, until EINTR.
    fn interruptible() -> Result<(), ()> {
        let quiet = Bell::new().map_err(|_| ())?;
        match quiet.wait(None) {
            Ok(None) => Err(()),
            _ => Ok(()),
        }
    }

    #[test]
    fn blocked_calls_are_interrupted_and_every_answer_comes_back() {
        let bell = Arc::new(Bell::new().unwrap());
        let mut helpers = Helpers::new(Arc::clone(&bell), 3, |_, _: Result<(), ()>| {});
        helpers.start("test", || Ok(())).unwrap();
        helpers.start("test", interruptible).unwrap();
        helpers.start("test", interruptible).unwrap();
        assert_eq!(bell.wait(None).unwrap(), Some(ANSWERED));
        let mut answers = helpers.finish(Duration::from_secs(5));
        answers.sort_by_key(|(n, _)| *n);
        assert_eq!(answers, [(0, Ok(())), (1, Err(())), (2, Err(()))]);
    }

    /// The first interrupt lands while the thread is not yet blocked (a
    /// sleep retries through it): only one sent again ends its call.
    #[test]
    fn the_interrupt_is_sent_again_to_a_call_that_missed_it() {
        let bell = Arc::new(Bell::new().unwrap());
        let mut helpers = Helpers::new(Arc::clone(&bell), 1, |_, _: Result<(), ()>| {});
        helpers
            .start("test", || {
                std::thread::sleep(Duration::from_millis(100));
                interruptible()
            })
            .unwrap();
        let started = Instant::now();
        let answers = helpers.finish(Duration::from_secs(5));
        assert_eq!(answers, [(0, Err(()))]);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn abandoned_calls_are_interrupted_and_their_answers_go_to_late() {
        static LATE: AtomicUsize = AtomicUsize::new(0);
        let bell = Arc::new(Bell::new().unwrap());
        let mut helpers = Helpers::new(Arc::clone(&bell), 3, |n, answer: Result<(), ()>| {
            if answer.is_err() {
                LATE.fetch_add(1 << n, SeqCst);
            }
        });
        helpers.start("test", || Ok(())).unwrap();
        assert_eq!(bell.wait(None).unwrap(), Some(ANSWERED));
        helpers.start("test", interruptible).unwrap();
        // This one misses the first interrupt: only `finish` ends it.
        helpers
            .start("test", || {
                std::thread::sleep(Duration::from_millis(100));
                interruptible()
            })
            .unwrap();
        let (came, rest) = helpers.abandon();
        assert_eq!(came, [(0, Ok(()))]);
        let started = Instant::now();
        rest.finish(Duration::from_secs(5));
        assert!(started.elapsed() < Duration::from_secs(2));
        let until = Instant::now() + Duration::from_secs(5);
        while LATE.load(SeqCst) != 0b110 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(LATE.load(SeqCst), 0b110);
    }

    #[test]
    fn an_answer_after_the_bound_goes_to_late() {
        static LATE: AtomicUsize = AtomicUsize::new(0);
        let bell = Arc::new(Bell::new().unwrap());
        let mut helpers = Helpers::new(Arc::clone(&bell), 1, |n, answer: usize| {
            LATE.store(n * 100 + answer, SeqCst);
        });
        let (go, wait) = std::sync::mpsc::channel::<()>();
        // Deaf to the interrupt: a channel receive retries on EINTR.
        helpers
            .start("test", move || {
                let _ = wait.recv();
                7
            })
            .unwrap();
        assert!(helpers.finish(Duration::from_millis(50)).is_empty());
        go.send(()).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while LATE.load(SeqCst) == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(LATE.load(SeqCst), 7);
    }
}
