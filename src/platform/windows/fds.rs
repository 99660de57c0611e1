//! Descriptors under the facade's names (`platform::fds` on Unix). Windows
//! has handles and sockets instead, and nothing lockrun runs there lends a
//! descriptor to anyone: there is no watchdog to hold a connection
//! (`Held::connection_fd`; the job object's kill-on-close does that job).
//! So these are the names with the Unix signatures, for the shared run
//! flow and backends to compile unchanged, and every call that would need
//! a real descriptor answers "cannot" (`None`, `false`), which the callers
//! already handle: a platform without /proc gives the same.
//!
//! One exception: a lock file's record handle ([`file_fd`]), which the
//! run flow hands to the record writer that runs while the command is
//! still suspended (`Held::child_record_fd`, `record::ChildRecord`), as
//! the Unix command's process gets its record descriptor before its exec.

use std::marker::PhantomData;

/// A descriptor's number (the C runtime's, on Windows: 0, 1, 2 for the
/// standard streams).
pub type RawFd = i32;

/// A descriptor borrowed for `'a`.
#[derive(Debug, Clone, Copy)]
pub struct BorrowedFd<'a> {
    fd: RawFd,
    _life: PhantomData<&'a ()>,
}

impl BorrowedFd<'_> {
    /// # Safety
    ///
    /// As std's: `fd` stays open for the borrow's life. Nothing on Windows
    /// uses the number to reach the OS.
    pub unsafe fn borrow_raw(fd: RawFd) -> Self {
        BorrowedFd {
            fd,
            _life: PhantomData,
        }
    }
}

/// An owned descriptor. Windows' lockrun never makes one
/// ([`duplicate_above_stdio`] is `None`), so none is ever closed.
#[derive(Debug)]
pub struct OwnedFd {
    fd: RawFd,
}

pub trait AsFd {
    fn as_fd(&self) -> BorrowedFd<'_>;
}

pub trait AsRawFd {
    fn as_raw_fd(&self) -> RawFd;
}

impl AsFd for OwnedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: borrowed from `self`, which outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl AsRawFd for BorrowedFd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for std::io::Stdout {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the standard output is open for the process's life.
        unsafe { BorrowedFd::borrow_raw(1) }
    }
}

impl AsFd for std::io::Stderr {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: as for stdout.
        unsafe { BorrowedFd::borrow_raw(2) }
    }
}

/// A file's handle as a descriptor number, for the run flow to hand to the
/// record writer ([`with_file_of`] turns it back). A kernel handle fits in
/// 32 bits: Windows documents that only the lower 32 bits of a handle are
/// significant, so that 32- and 64-bit processes can share them, and
/// sign-extending the number gives the handle back.
pub fn file_fd(file: &std::fs::File) -> BorrowedFd<'_> {
    use std::os::windows::io::AsRawHandle as _;
    // SAFETY: borrowed from `file`, which outlives the borrow.
    unsafe { BorrowedFd::borrow_raw(file.as_raw_handle() as isize as i32) }
}

/// Runs `with` on the file whose handle [`file_fd`] made `fd` of. The
/// file is borrowed: never closed here.
pub fn with_file_of<T>(fd: BorrowedFd<'_>, with: impl FnOnce(&std::fs::File) -> T) -> T {
    use std::os::windows::io::{FromRawHandle as _, RawHandle};
    // SAFETY: `fd` borrows an open file's handle (`file_fd`) for its
    // life; ManuallyDrop never closes it.
    let file = std::mem::ManuallyDrop::new(unsafe {
        std::fs::File::from_raw_handle(fd.fd as isize as RawHandle)
    });
    with(&file)
}

/// No duplicate: see the module's documentation.
pub fn duplicate_above_stdio(_fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    None
}

/// A connection's hang-up cannot be waited for here: `false` at once, as
/// the Unix facade answers for a socket it cannot watch (a PostgreSQL
/// session then notices a broken connection at its next check).
pub fn wait_for_hang_up(_fd: BorrowedFd<'_>) -> bool {
    false
}

/// The sockets among our descriptors (Linux reads /proc/self/fd): none
/// that can be told apart here, as on the other Unix systems.
pub fn socket_fds() -> Vec<(i32, std::ffi::OsString)> {
    Vec::new()
}

/// The console's width is not asked: status lines and tables take their
/// default width, as on a Unix terminal that does not say.
pub fn terminal_columns(_fd: BorrowedFd<'_>) -> Option<usize> {
    None
}
