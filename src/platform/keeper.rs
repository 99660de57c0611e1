//! A waiter that is not running must not keep a queue (issue 26 item 6).
//!
//! The head of a `--slots` queue holds LOCKFILE's lock while it waits on
//! the slots, and every other waiter sleeps on that lock in the kernel. A
//! stopped head (SIGSTOP, Ctrl-Z) holds it for as long as it is stopped,
//! and nothing it runs can let go: a stop stops every thread. So the head
//! leaves a small child process beside it for the wait, the keeper, which
//! shares the queue lock's open file description (a flock lock belongs to
//! it, and any descriptor on it may unlock it) and looks 4 times a second
//! at whether the head is stopped. If it is, the keeper lets go of the
//! queue and exits: the next waiter becomes the head. The stopped head
//! keeps waiting on the slots, and when it runs again it takes one in its
//! turn like any contender. Waiters behind the head cost nothing: only the
//! head has a keeper, one per lock.
//!
//! The keeper is forked from a process that has other threads, so it makes
//! only raw system calls on what was prepared before the fork; it has
//! every signal blocked, no descriptor but the queue's, a session of its
//! own (a Ctrl-Z to the terminal's group does not stop it) and dies with
//! the thread that started it (`PR_SET_PDEATHSIG`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// How often the keeper looks at the head: how long a stopped head keeps
/// the queue at most.
const EVERY: Duration = Duration::from_millis(250);

/// The keeper of one queue lock; killed when dropped, and reaped then if
/// it is already gone.
///
/// Not waited for: the drop comes in a handoff, between the slot taken
/// and the command's start, and waiting for a killed process to be torn
/// down and reaped is one more wake-up on that path. A keeper still dying
/// is reaped by the wait for the command (which reaps every other child
/// that exits, [`super::wait_reaping_orphans`]) or, at the latest, by init
/// when lockrun exits. Killed, it can no longer let go of anything: it
/// only had the queue's lock, and only while the head waited.
pub struct Keeper {
    pid: libc::pid_t,
    /// Pinned by a pidfd: with SIGCHLD ignored the kernel reaps a keeper
    /// that exits by itself, and its pid may be another process's by the
    /// time the keeper is dropped.
    pinned: Option<super::Target>,
}

impl Keeper {
    /// Starts a keeper for the lock held through `queue`.
    pub fn start(queue: BorrowedFd<'_>) -> io::Result<Keeper> {
        // SAFETY: getpid has no preconditions.
        let head = unsafe { libc::getpid() };
        let stat = CString::new(format!("/proc/{head}/stat")).map_err(io::Error::other)?;
        let fd = queue.as_raw_fd();
        // SAFETY: the child makes only async-signal-safe system calls
        // (keep_watch) on data prepared above, and never returns.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => keep_watch(head, fd, &stat),
            pid => Ok(Keeper {
                pid,
                pinned: super::Target::pin(pid),
            }),
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        match &self.pinned {
            Some(keeper) => {
                let _ = keeper.signal(libc::SIGKILL);
            }
            // SAFETY: kill(2) on our child's pid, not reaped by us yet.
            None => unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            },
        }
        // SAFETY: waitpid on our own child's pid, without waiting: it
        // reaps that child if it is already gone, or does nothing (it is
        // still dying, or the kernel reaped it: ECHILD).
        unsafe {
            libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG);
        }
    }
}

/// The keeper itself, in the forked child.
fn keep_watch(head: libc::pid_t, fd: libc::c_int, stat: &CString) -> ! {
    // SAFETY: raw system calls on a stack buffer and on what the parent
    // prepared before the fork; nothing allocates or takes a lock.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != head {
            libc::_exit(0);
        }
        libc::setsid();
        // Only the queue's descriptor: the slots' and the terminal's are
        // not the keeper's to hold open.
        if fd > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
        let every = libc::timespec {
            // `as _`: the field's own type (libc::time_t is deprecated on musl).
            tv_sec: EVERY.as_secs() as _,
            tv_nsec: EVERY.subsec_nanos() as libc::c_long,
        };
        let mut buf = [0u8; 512];
        loop {
            libc::nanosleep(&every, std::ptr::null_mut());
            let file = libc::open(stat.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if file < 0 {
                libc::_exit(0);
            }
            let n = libc::read(file, buf.as_mut_ptr().cast(), buf.len());
            libc::close(file);
            if n <= 0 {
                libc::_exit(0);
            }
            // `PID (comm) S ...`: the state follows the last `)`. `T` is
            // stopped by a signal; `t`, stopped by a tracer, is also what a
            // process under strace shows at every system call, and is left
            // alone.
            let stat = &buf[..n as usize];
            let state = stat
                .iter()
                .rposition(|&b| b == b')')
                .and_then(|close| stat.get(close + 2));
            if state == Some(&b'T') {
                libc::flock(fd, libc::LOCK_UN);
                libc::_exit(0);
            }
        }
    }
}
