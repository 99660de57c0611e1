//! Descriptors, as the rest of lockrun names them: std's Unix types under
//! platform names (on Windows the same names are handles, in
//! `platform::windows`), and the few calls on them that are not std's.

use std::io;
pub use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// A duplicate of `fd` numbered 3 or above, closed on exec: a descriptor
/// kept beside one a library owns (and closes on its own).
pub fn duplicate_above_stdio(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(fd, 3).ok()
}

/// Lets the command inherit `fd`: clears its close-on-exec flag.
pub fn set_inheritable(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(io::Error::from)
}

/// Blocks until the peer of socket `fd` hangs up (`true`), or returns
/// `false` at once if the socket cannot be watched. Its data is left for
/// its owner to read: only the hang-up is waited for.
pub fn wait_for_hang_up(fd: BorrowedFd<'_>) -> bool {
    #[cfg(target_os = "linux")]
    let events = libc::POLLRDHUP;
    #[cfg(not(target_os = "linux"))]
    let events = libc::POLLHUP;
    let mut fds = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }];
    loop {
        // SAFETY: poll(2) on one pollfd whose descriptor `fd` keeps open.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, -1) };
        if n > 0 {
            return true;
        }
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// The soft limit on open descriptors as it was before
/// [`make_room_for_descriptors`] raised it.
#[derive(Clone, Copy)]
pub struct DescriptorLimit(rustix::process::Rlimit);

impl DescriptorLimit {
    /// Puts the limit back (before the command starts: it gets the limit
    /// its caller gave lockrun).
    pub fn restore(self) {
        let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, self.0);
    }
}

/// Raises the soft descriptor limit when `count` more descriptors (and a
/// margin) would not fit under it; returns the limit to restore.
pub fn make_room_for_descriptors(count: u64) -> Option<DescriptorLimit> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let old = getrlimit(Resource::Nofile);
    let need = count + 64;
    let current = old.current?;
    if current >= need {
        return None;
    }
    let mut raised = old;
    raised.current = Some(old.maximum.map_or(need, |max| need.min(max)));
    setrlimit(Resource::Nofile, raised).ok()?;
    Some(DescriptorLimit(old))
}
