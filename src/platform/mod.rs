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

#[cfg(not(target_os = "linux"))]
mod other;
#[cfg(not(target_os = "linux"))]
pub use other::*;

mod process;
mod spawn;
pub use process::{Target, wait_exited};
pub use spawn::{CommandLine, die_with_parent, start_command};

use crate::lock::LockMode;

/// One flock(2) lock as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLock {
    /// The process that *called* flock. It may have exited since: the lock
    /// belongs to the open file description, which children inherit.
    /// 0 when the kernel hides it (a holder outside our PID namespace).
    pub pid: i32,
    pub mode: LockMode,
    /// A process blocked waiting for the lock, not holding it.
    pub waiting: bool,
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
    /// namespace). A holder whose caller is someone else inherited it.
    pub caller: i32,
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
