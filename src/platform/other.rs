//! Systems without Linux's /proc (macOS, FreeBSD and the other BSDs). The
//! kernel's lock table cannot be read here, so `holder` and `check` answer
//! "unknown", never a guess. Processes can be asked about: macOS and
//! FreeBSD give a process's parent, state and start time (proc_pidinfo,
//! the kern.proc sysctl), and everywhere kill(pid, 0) tells a live pid
//! from a gone one.

use super::{FdHolder, KernelLock, LockId, ProcessState};
use std::io;
use std::path::Path;

pub const INITIAL_PID_NAMESPACE: u64 = 0;

/// si_code of a signal sent with kill(2): SI_USER in <sys/signal.h>, which
/// the libc crate lacks for these systems. 0x10001 on macOS and FreeBSD,
/// 0 on NetBSD and OpenBSD.
#[cfg(any(target_os = "macos", target_os = "freebsd"))]
pub const SI_USER: i32 = 0x10001;
#[cfg(not(any(target_os = "macos", target_os = "freebsd")))]
pub const SI_USER: i32 = 0;
/// si_code of a signal the kernel generated itself: FreeBSD's terminal
/// sends its signals with SI_KERNEL (tty_signal_pgrp). Elsewhere lockrun
/// does not know the terminal's code, and forwards those too.
#[cfg(target_os = "freebsd")]
pub const SI_KERNEL: Option<i32> = Some(0x10006);
#[cfg(not(target_os = "freebsd"))]
pub const SI_KERNEL: Option<i32> = None;

pub fn boot_id() -> Option<String> {
    None
}
/// When `pid` started, in microseconds (macOS: since the epoch; FreeBSD:
/// since boot, which a clock step does not move). Only ever compared with
/// another reading on the same machine, like Linux's clock ticks.
pub fn process_start_time(pid: i32) -> Option<u64> {
    match look_up(pid) {
        LookUp::Found(found) => found.start,
        LookUp::Gone | LookUp::CannotTell => None,
    }
}

/// What this system says of `pid` now. A zombie holds no descriptors, so
/// no lock: it counts as gone for liveness.
pub fn process_state(pid: i32) -> ProcessState {
    if pid <= 0 {
        return ProcessState::Gone;
    }
    match look_up(pid) {
        LookUp::Found(Found { zombie: true, .. }) => ProcessState::Zombie,
        LookUp::Found(found) => ProcessState::Running { start: found.start },
        LookUp::Gone => ProcessState::Gone,
        // Where the process table cannot be read, kill(pid, 0) still tells
        // whether the pid is taken: EPERM is someone else's live process.
        // SAFETY: signal 0 sends nothing; it only checks the pid.
        LookUp::CannotTell => match unsafe { libc::kill(pid, 0) } {
            0 => ProcessState::Running { start: None },
            _ => match io::Error::last_os_error().raw_os_error() {
                Some(libc::ESRCH) => ProcessState::Gone,
                Some(libc::EPERM) => ProcessState::Running { start: None },
                _ => ProcessState::Unknown,
            },
        },
    }
}

/// The calling process's start time, between fork and exec: one system
/// call into a struct on the stack, no allocation.
pub fn own_start_time_without_allocating() -> Option<u64> {
    // SAFETY: getpid has no preconditions.
    process_start_time(unsafe { libc::getpid() })
}
#[derive(Debug, Clone, Copy)]
pub struct BeforeStart;
pub fn before_start() -> Option<BeforeStart> {
    None
}
pub fn own_start_time_since(_before: BeforeStart) -> Option<u64> {
    None
}
/// The parent of `pid`, for a signal handler: one system call into a
/// struct on the stack, no allocation.
pub fn parent_without_allocating(pid: i32) -> Option<i32> {
    match look_up(pid) {
        LookUp::Found(found) => Some(found.parent),
        LookUp::Gone | LookUp::CannotTell => None,
    }
}

/// What the process table says of one process.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(any(target_os = "macos", target_os = "freebsd")), allow(dead_code))]
struct Found {
    parent: i32,
    zombie: bool,
    start: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(any(target_os = "macos", target_os = "freebsd")), allow(dead_code))]
enum LookUp {
    Found(Found),
    /// No such process.
    Gone,
    /// The table could not be read (not allowed, or no way here).
    CannotTell,
}

/// proc_pidinfo(PROC_PIDTBSDINFO): async-signal-safe (a system call into
/// our buffer), and allowed on other users' processes.
#[cfg(target_os = "macos")]
fn look_up(pid: i32) -> LookUp {
    if pid <= 0 {
        return LookUp::Gone;
    }
    let size = std::mem::size_of::<libc::proc_bsdinfo>();
    let Ok(wanted) = libc::c_int::try_from(size) else {
        return LookUp::CannotTell;
    };
    // SAFETY: all-zero is a valid proc_bsdinfo (integers and arrays).
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer is ours and `wanted` bytes long.
    let got = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            (&raw mut info).cast(),
            wanted,
        )
    };
    if got != wanted {
        return match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => LookUp::Gone,
            _ => LookUp::CannotTell,
        };
    }
    let start = info
        .pbi_start_tvsec
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(info.pbi_start_tvusec));
    match i32::try_from(info.pbi_ppid) {
        Ok(parent) => LookUp::Found(Found {
            parent,
            zombie: info.pbi_status == libc::SZOMB,
            start,
        }),
        Err(_) => LookUp::CannotTell,
    }
}

/// The kern.proc.pid sysctl: async-signal-safe (one system call into our
/// buffer), and allowed on every process the caller may see.
#[cfg(target_os = "freebsd")]
fn look_up(pid: i32) -> LookUp {
    if pid <= 0 {
        return LookUp::Gone;
    }
    let mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_PID, pid];
    // SAFETY: all-zero is a valid kinfo_proc (integers, arrays and null
    // pointers, which the kernel fills in and we never follow).
    let mut info: libc::kinfo_proc = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::kinfo_proc>();
    // SAFETY: a valid name and our own buffer of `len` bytes.
    let done = unsafe {
        libc::sysctl(
            mib.as_ptr(),
            4,
            (&raw mut info).cast(),
            &mut len,
            std::ptr::null(),
            0,
        )
    };
    if done != 0 {
        // ENOMEM: this kernel's kinfo_proc is larger than libc's.
        return match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => LookUp::Gone,
            _ => LookUp::CannotTell,
        };
    }
    if len == 0 {
        return LookUp::Gone;
    }
    if len != std::mem::size_of::<libc::kinfo_proc>() {
        return LookUp::CannotTell;
    }
    LookUp::Found(Found {
        parent: info.ki_ppid,
        zombie: info.ki_stat == libc::SZOMB,
        start: since_boot(info.ki_start),
    })
}

/// ki_start is the start's uptime plus the boot time as the kernel knows it
/// now, which a clock step moves: without it, the uptime stays put.
#[cfg(target_os = "freebsd")]
fn since_boot(start: libc::timeval) -> Option<u64> {
    let mib = [libc::CTL_KERN, libc::KERN_BOOTTIME];
    // SAFETY: all-zero is a valid timeval.
    let mut boot: libc::timeval = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::timeval>();
    // SAFETY: a valid name and our own buffer of `len` bytes.
    let done = unsafe {
        libc::sysctl(
            mib.as_ptr(),
            2,
            (&raw mut boot).cast(),
            &mut len,
            std::ptr::null(),
            0,
        )
    };
    if done != 0 || len != std::mem::size_of::<libc::timeval>() {
        return None;
    }
    // time_t and suseconds_t are 64 bits on amd64, 32 on i386.
    #[allow(clippy::useless_conversion)]
    let micros = |t: libc::timeval| {
        i64::from(t.tv_sec)
            .checked_mul(1_000_000)?
            .checked_add(i64::from(t.tv_usec))
    };
    u64::try_from(micros(start)?.checked_sub(micros(boot)?)?).ok()
}

/// Elsewhere nothing reads the process table yet.
#[cfg(not(any(target_os = "macos", target_os = "freebsd")))]
fn look_up(_pid: i32) -> LookUp {
    LookUp::CannotTell
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
/// Always an error: `holder` and `check` then answer "unknown" (69) with
/// this as the reason, never "free" from an empty table they never read.
pub fn kernel_locks(_id: LockId) -> io::Result<LockTable> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system has no kernel lock table lockrun can read \
         (`lockrun check --probe` tries the lock instead)",
    ))
}
/// No table to read here: as [`kernel_locks`] says.
pub fn lock_snapshot() -> io::Result<super::LockSnapshot> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system has no kernel lock table lockrun can read \
         (`lockrun check --probe` tries the lock instead; list takes the lock files to show)",
    ))
}
/// As [`lock_snapshot`]: no table to read here.
pub fn lock_snapshot_first() -> io::Result<super::LockSnapshot> {
    lock_snapshot()
}
/// Never reached: [`lock_snapshot_first`] gives no reading to go on from.
pub fn lock_snapshot_rest(first: super::LockSnapshot) -> io::Result<super::LockSnapshot> {
    Ok(first)
}
/// No /proc to walk: an index that saw nothing, and says it is incomplete.
pub fn index_descriptors() -> super::FdIndex {
    super::FdIndex::default()
}
pub fn holders_in(_index: &super::FdIndex, _dev: u64, _ino: u64) -> Vec<FdHolder> {
    Vec::new()
}
pub fn paths_in(
    _index: &super::FdIndex,
    _ids: &[LockId],
) -> std::collections::HashMap<LockId, std::path::PathBuf> {
    std::collections::HashMap::new()
}
pub fn process_fd_holders(_pid: i32, _dev: u64, _ino: u64) -> Option<Vec<FdHolder>> {
    None
}
/// No kcmp(2): descriptors are never known to share a description.
pub fn same_description(_me: i32, _ours: i32, _pid: i32, _theirs: i32) -> Option<bool> {
    None
}
pub fn kernel_locks_of(ids: &[LockId]) -> io::Result<Vec<LockTable>> {
    ids.iter().map(|&id| kernel_locks(id)).collect()
}
pub fn fd_holders(_dev: u64, _ino: u64) -> (Vec<FdHolder>, bool) {
    (Vec::new(), false)
}
pub fn sharing_description(_ours: std::os::fd::BorrowedFd<'_>, _dev: u64, _ino: u64) -> Vec<i32> {
    Vec::new()
}
/// Elsewhere the connection's socket is not looked for (see linux.rs).
#[cfg(feature = "lock-urls")]
pub fn socket_fds() -> Vec<(i32, std::ffi::OsString)> {
    Vec::new()
}

pub fn descendants(_root: i32) -> Vec<i32> {
    Vec::new()
}
pub fn adopt_orphans() -> bool {
    false
}
pub fn wait_reaping_orphans(_command: i32) -> bool {
    // adopt_orphans never succeeds here: there are no orphans to reap.
    false
}
pub fn fd_holders_of(files: &[(u64, u64)]) -> (Vec<Vec<FdHolder>>, bool) {
    (files.iter().map(|_| Vec::new()).collect(), false)
}
pub fn process_holds(_pid: i32, _dev: u64, _ino: u64) -> Option<bool> {
    None
}
pub fn process_locks_on(_pid: i32, _dev: u64, _ino: u64) -> Option<Vec<KernelLock>> {
    None
}
pub fn descriptor_path(_fd: std::os::fd::BorrowedFd<'_>) -> Option<std::path::PathBuf> {
    None
}
pub fn file_system_magic(_path: &Path) -> Option<i64> {
    None
}

/// The type of the file `meta` describes, as rustix names it. mode_t is
/// 16 bits on macOS and the BSDs, and std widens st_mode to 32: narrowing
/// it back loses nothing, and a value that does not fit is no known type.
#[inline]
pub fn file_type(meta: &std::fs::Metadata) -> rustix::fs::FileType {
    use rustix::fs::{FileType, RawMode};
    use std::os::unix::fs::MetadataExt;
    RawMode::try_from(meta.mode()).map_or(FileType::Unknown, FileType::from_raw_mode)
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
/// The same shape as Linux's, whose drop ends the keeper: callers drop it
/// to say when the keeping stops.
impl Drop for Keeper {
    fn drop(&mut self) {}
}
