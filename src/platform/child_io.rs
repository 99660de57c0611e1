//! The system calls the command's own process makes between fork and exec
//! to write its record (`record::ChildRecord::write_from_child`): raw
//! calls only, no allocation and no locks, since the parent may have held
//! one when the child was created.

use super::fds::BorrowedFd;
use std::io::IoSlice;

/// A failed call's error, with a text that needs no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(rustix::io::Errno);

impl Errno {
    /// A write that wrote less than asked: the disk is full.
    pub const NO_SPACE: Errno = Errno(rustix::io::Errno::NOSPC);

    pub fn raw(self) -> i32 {
        self.0.raw_os_error()
    }

    /// Texts for the errors a record write can meet, as static strings:
    /// the child may not allocate to format an `io::Error`.
    pub fn text(self) -> &'static str {
        use rustix::io::Errno as E;
        match self.0 {
            E::NOSPC => "No space left on device",
            E::DQUOT => "Disk quota exceeded",
            E::IO => "Input/output error",
            E::FBIG => "File too large",
            E::ROFS => "Read-only file system",
            E::BADF => "Bad file descriptor",
            _ => "write failed",
        }
    }
}

/// Our own pid, without std (which caches nothing across a fork anyway).
pub fn own_pid() -> u64 {
    rustix::process::getpid().as_raw_nonzero().get() as u64
}

/// The file's length, `None` when fstat fails.
pub fn file_len(fd: BorrowedFd<'_>) -> Option<usize> {
    rustix::fs::fstat(fd)
        .ok()
        .and_then(|st| usize::try_from(st.st_size).ok())
}

/// Writes `parts` at the start of the file in one call; returns how many
/// bytes were written.
pub fn write_at_start(fd: BorrowedFd<'_>, parts: &[IoSlice<'_>]) -> Result<usize, Errno> {
    rustix::io::pwritev(fd, parts, 0).map_err(Errno)
}

pub fn truncate(fd: BorrowedFd<'_>, len: u64) -> Result<(), Errno> {
    rustix::fs::ftruncate(fd, len).map_err(Errno)
}

/// One write to stderr; a failure is dropped (there is nowhere to say it).
pub fn write_stderr(bytes: &[u8]) {
    let _ = rustix::io::write(rustix::stdio::stderr(), bytes);
}
