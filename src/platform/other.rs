//! Fallbacks for systems without Linux's /proc: nothing can be inspected, so
//! every answer is "unknown", never a guess.

use super::{FdHolder, KernelLock, LockId, ProcessState};
use std::io;
use std::path::Path;

pub const INITIAL_PID_NAMESPACE: u64 = 0;

pub fn boot_id() -> Option<String> {
    None
}
pub fn process_start_time(_pid: i32) -> Option<u64> {
    None
}
pub fn process_state(_pid: i32) -> ProcessState {
    ProcessState::Unknown
}
pub fn own_start_time_without_allocating() -> Option<u64> {
    None
}
#[derive(Debug, Clone, Copy)]
pub struct BeforeStart;
pub fn before_start() -> Option<BeforeStart> {
    None
}
pub fn own_start_time_since(_before: BeforeStart) -> Option<u64> {
    None
}
pub fn parent_without_allocating(_pid: i32) -> Option<i32> {
    None
}

pub fn process_cmdline(_pid: i32) -> Option<Vec<String>> {
    None
}
pub fn pid_namespace() -> Option<u64> {
    None
}
pub fn lock_id(_file: &std::fs::File) -> Option<LockId> {
    None
}
pub fn lock_id_at(_path: &Path, dev: u64, ino: u64) -> LockId {
    stat_lock_id(dev, ino)
}
pub fn lock_id_at_in(_path: &Path, dev: u64, ino: u64, _mounts: &mut Option<String>) -> LockId {
    stat_lock_id(dev, ino)
}
pub fn stat_lock_id(dev: u64, ino: u64) -> LockId {
    LockId {
        major: dev,
        minor: 0,
        ino,
    }
}
#[derive(Debug, Default, Clone)]
pub struct LockTable {
    pub locks: Vec<KernelLock>,
    pub torn: bool,
}
pub fn kernel_locks(_id: LockId) -> io::Result<LockTable> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system has no kernel lock table lockrun can read",
    ))
}
pub fn kernel_locks_of(ids: &[LockId]) -> io::Result<Vec<LockTable>> {
    ids.iter().map(|&id| kernel_locks(id)).collect()
}
pub fn fd_holders(_dev: u64, _ino: u64) -> (Vec<FdHolder>, bool) {
    (Vec::new(), false)
}
pub fn fd_holders_of(files: &[(u64, u64)]) -> (Vec<Vec<FdHolder>>, bool) {
    (files.iter().map(|_| Vec::new()).collect(), false)
}
pub fn process_holds(_pid: i32, _dev: u64, _ino: u64) -> Option<bool> {
    None
}
pub fn descriptor_path(_fd: std::os::fd::BorrowedFd<'_>) -> Option<std::path::PathBuf> {
    None
}
pub fn file_system_magic(_path: &Path) -> Option<i64> {
    None
}

/// Runs a signal handler's work and puts errno back: it belongs to the
/// interrupted code, and rustix's libc backend sets it when a call fails.
pub fn keeping_errno(work: impl FnOnce()) {
    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "dragonfly"
    ))]
    // SAFETY: this thread's errno, always valid.
    let location = Some(unsafe { libc::__error() });
    #[cfg(any(target_os = "openbsd", target_os = "netbsd"))]
    // SAFETY: this thread's errno, always valid.
    let location = Some(unsafe { libc::__errno() });
    #[cfg(not(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "dragonfly",
        target_os = "openbsd",
        target_os = "netbsd"
    )))]
    let location: Option<*mut libc::c_int> = None;
    // SAFETY: see above.
    let saved = location.map(|errno| unsafe { *errno });
    work();
    if let (Some(errno), Some(saved)) = (location, saved) {
        // SAFETY: see above.
        unsafe { *errno = saved };
    }
}

/// No keeper elsewhere: a stopped head of a --slots queue keeps it.
pub struct Keeper;
impl Keeper {
    pub fn start(_queue: std::os::fd::BorrowedFd<'_>) -> io::Result<Keeper> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}
