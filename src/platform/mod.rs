//! Everything that depends on the operating system, in one place.
//!
//! lockrun's locking itself is portable (std's `File::lock` family is
//! flock(2) on Linux and the BSDs). What is not portable is *looking* at
//! locks and processes: the kernel's lock table, a process's start time, the
//! boot id. Linux exposes them in /proc; elsewhere these functions answer
//! "don't know", and `holder`/`check` then say "unknown" rather than guess.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;

#[cfg(all(unix, not(target_os = "linux")))]
mod other;
#[cfg(all(unix, not(target_os = "linux")))]
pub use other::*;

// Windows: its own lock (LockFileEx), process start (suspended, in a job
// object) and liveness (OpenProcess, GetProcessTimes), and the run form,
// holder and check built on them. Everything below it here is Unix-only.
#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
pub use windows::{
    FileExt, boot_id, exit_signal, host_name, link_count, pid_namespace, process_state, user_id,
};
// The rest of the facade on Windows: the same names and signatures as on
// Unix (descriptors, credential and metrics files, helper threads, the
// command's start, wait and stop through its job object, no signals), so
// that the one run flow and the lock URL backends build there unchanged.
#[cfg(windows)]
pub use windows::{
    AsFd, AsRawFd, BeforeStart, BorrowedFd, ChildLink, CommandLine, KILL_SIGNAL, NotRead, OwnedFd,
    RawFd, STOP_SIGNAL, STOPS_BY_SIGNALS, Target, Watchdog, adopt_orphans, before_start,
    block_signals_on_this_thread, create_new, descendants, die_with_parent, duplicate_above_stdio,
    file_id, group_kept_with_command, ignore_broken_pipes, interrupt_helper, leave_command_group,
    metrics_lock_beside, open_regular, open_without_waiting, others_may_access,
    own_start_time_since, own_start_time_without_allocating, permission_bits, process_start_time,
    reap, same_file, send_datagram, set_permission_bits, signals, socket_fds, spawn_helper,
    start_command, stop_all, stop_described, terminal_columns, tolerating_file_size_limit,
    wait_for_hang_up, wait_reaping_orphans, wait_until_exited, watchdog_pid, with_signals_blocked,
};
#[cfg(windows)]
mod helpers;
#[cfg(windows)]
pub use helpers::{ANSWERED, Helpers};

// Descriptors and the small facts of the process and the system: the same
// names on every OS (Windows' are in `windows`).
#[cfg(unix)]
pub mod child_io;
#[cfg(unix)]
mod fds;
#[cfg(unix)]
mod host;
#[cfg(unix)]
mod small_files;
#[cfg(unix)]
pub use fds::{
    AsFd, AsRawFd, BorrowedFd, DescriptorLimit, OwnedFd, RawFd, duplicate_above_stdio,
    make_room_for_descriptors, set_inheritable, wait_for_hang_up,
};
#[cfg(unix)]
pub use host::{
    FileExt, args_from_c, exit_signal, host_name, ignore_broken_pipes, link_count,
    open_standard_streams, others_may_access, user_id,
};
#[cfg(unix)]
pub use small_files::{
    create_new, file_id, metrics_lock_beside, open_without_waiting, permission_bits, same_file,
    send_datagram, set_permission_bits,
};

#[cfg(unix)]
mod files;
// Why a credential file was not read, the same on every OS.
#[cfg(unix)]
mod helpers;
#[cfg(target_os = "linux")]
mod keeper;
mod not_read;
pub use not_read::read_regular;
#[cfg(unix)]
mod process;
// The forwarded signals' handlers: all their work is done inside the
// handler, with async-signal-safe calls (`run::signals` names it).
#[cfg(unix)]
pub mod signals;
#[cfg(unix)]
mod spawn;
#[cfg(unix)]
mod threads;
// Only lock URLs start a watchdog; its pid is asked for on every build.
#[cfg(unix)]
#[cfg_attr(not(feature = "lock-urls"), allow(dead_code))]
mod watchdog;
#[cfg(unix)]
pub use files::{NotRead, file_kind, open_regular};
#[cfg(unix)]
pub use helpers::{ANSWERED, Bell, Helpers};
#[cfg(target_os = "linux")]
pub use keeper::Keeper;
#[cfg(unix)]
pub use process::{
    KILL_SIGNAL, STOP_SIGNAL, STOPS_BY_SIGNALS, Target, group_kept_with_command,
    leave_command_group, reap, stop_all, stop_described, wait_exited, wait_until_exited,
};
#[cfg(unix)]
pub use spawn::{CommandLine, die_with_parent, start_command};
#[cfg(unix)]
pub use threads::{
    block_signals_on_this_thread, interrupt_helper, interrupt_signal_in_use, spawn_helper,
    tolerating_file_size_limit, with_signals_blocked,
};
/// Named on every build (the run flow's one signature); only a watchdog
/// makes one.
#[cfg(unix)]
pub use watchdog::ChildLink;
#[cfg(all(unix, feature = "lock-urls"))]
pub use watchdog::Watchdog;
#[cfg(unix)]
pub use watchdog::watchdog_pid;

use crate::mode::LockMode;

/// One lock as the kernel lists it: flock(2), or a byte range (POSIX or
/// open-file-description).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLock {
    /// The process that *called* flock. It may have exited since: the lock
    /// belongs to the open file description, which children inherit.
    /// 0 when the kernel hides it (a holder outside our PID namespace), -1
    /// for an OFD lock, which belongs to no process.
    pub pid: i32,
    pub mode: LockMode,
    /// A process blocked waiting for the lock, not holding it.
    pub waiting: bool,
    pub span: LockSpan,
}

/// What kind of lock, and on which bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockSpan {
    pub kind: LockKind,
    pub start: u64,
    /// The last byte locked; `None`: to the end of the file, however long
    /// it grows.
    pub end: Option<u64>,
}

impl LockSpan {
    pub const WHOLE_FLOCK: LockSpan = LockSpan {
        kind: LockKind::Flock,
        start: 0,
        end: None,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// flock(2), what lockrun and flock(1) take: always the whole file.
    Flock,
    /// fcntl(2) F_OFD_SETLK: belongs to the open file description.
    Ofd,
    /// fcntl(2) F_SETLK and lockf(3): belongs to the process.
    Posix,
}

impl LockKind {
    /// For --json.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Flock => "flock",
            LockKind::Ofd => "ofd",
            LockKind::Posix => "posix",
        }
    }

    /// For people.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Flock => "flock",
            LockKind::Ofd => "OFD",
            LockKind::Posix => "POSIX",
        }
    }
}

/// Where /proc/locks and fdinfo place a file: the device of its super
/// block and the inode number the kernel keeps. stat() can say otherwise:
/// a btrfs subvolume reports an anonymous device of its own, an overlay
/// can report a layer's device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockId {
    pub major: u64,
    pub minor: u64,
    pub ino: u64,
}

/// Whether a pid names a process, as far as this system can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// Alive, with its start time when it could be read.
    Running {
        start: Option<u64>,
    },
    /// Exited, not yet reaped.
    Zombie,
    Gone,
    /// /proc could not say (no /proc, no permission).
    Unknown,
}

/// A process that holds the lock through one of its descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdHolder {
    pub pid: i32,
    pub mode: LockMode,
    /// The process that called flock on this descriptor's open file, as
    /// the kernel lists it in fdinfo; 0 when it hides it (another PID
    /// namespace), -1 for an OFD lock. A holder whose caller is someone
    /// else inherited it.
    pub caller: i32,
    pub span: LockSpan,
    /// The descriptor it holds the lock through (its first, if several):
    /// kcmp(2) compares open file descriptions by pid and descriptor.
    pub fd: i32,
}

impl FdHolder {
    /// The same process holding the same lock, through whichever
    /// descriptor: listed once.
    pub fn same_lock(&self, other: &FdHolder) -> bool {
        self.pid == other.pid
            && self.mode == other.mode
            && self.caller == other.caller
            && self.span == other.span
    }
}

/// One reading of the kernel's whole lock table (see `lock_snapshot`):
/// every file's entries by lock id.
#[derive(Debug, Default, Clone)]
pub struct LockSnapshot {
    pub by_id: std::collections::HashMap<LockId, Vec<KernelLock>>,
    /// Every id, in the order the table first lists it.
    pub order: Vec<LockId>,
    /// Read in several read(2) calls: see `LockTable::torn`.
    pub torn: bool,
}

// LockTable is the Unix facades' (linux.rs, other.rs).
#[cfg(unix)]
impl LockSnapshot {
    /// One file's entries, as `kernel_locks` gives them.
    pub fn table(&self, id: LockId) -> LockTable {
        LockTable {
            locks: self.by_id.get(&id).cloned().unwrap_or_default(),
            torn: self.torn,
        }
    }
}

/// One walk of every process's descriptors (see `index_descriptors`):
/// stat's (device, inode) of each open file, with the (pid, descriptor)
/// pairs that have it open.
#[derive(Debug, Default)]
pub struct FdIndex {
    pub open: std::collections::HashMap<(u64, u64), Vec<(i32, i32)>>,
    /// Every process's descriptors could be listed (another user's need
    /// root): only then does "no descriptor holds it" prove anything.
    pub complete: bool,
}

/// How many columns the terminal on `fd` has, if it is one.
#[cfg(unix)]
pub fn terminal_columns(fd: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we pass.
    let done = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    (done == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// File systems whose locks are arbitrated by a server: a holder on another
/// machine never appears in this kernel's table.
pub fn network_fs_name(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "NFS",
        0x517B => "SMB",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x00C3_6400 => "Ceph",
        0x5346_414F => "AFS",
        0x0BD0_0BD0 => "Lustre",
        0x0116_1970 => "GFS2",
        0x7461_636F => "OCFS2",
        _ => return None,
    })
}
