//! Linux: /proc tells who holds a lock and whether a process is still the
//! one a record names.

use super::{FdHolder, KernelLock, ProcessState};
use crate::lock::LockMode;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The inode of the initial PID namespace is fixed by the kernel
/// (PROC_PID_INIT_INO). Only there does /proc/locks list every lock: in a
/// child namespace it hides locks whose owner it cannot see.
pub const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// Reads a small /proc file with one read(2) into a stack buffer: /proc
/// files are generated whole on the first read, and these are short.
/// (`fs::read` would stat and read twice, and allocate.)
fn read_small(path: &str, buf: &mut [u8; 1024]) -> Option<usize> {
    use std::io::Read;
    fs::File::open(path).ok()?.read(buf).ok()
}

/// Runs a signal handler's work and puts errno back: it belongs to the
/// interrupted code. (rustix's raw system calls leave errno alone on most
/// architectures, but on some it goes through libc, which sets it.)
pub fn keeping_errno(work: impl FnOnce()) {
    // SAFETY: this thread's errno, always valid.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: see above.
    let saved = unsafe { *errno };
    work();
    // SAFETY: see above.
    unsafe { *errno = saved };
}

pub fn boot_id() -> Option<String> {
    let mut buf = [0u8; 1024];
    let n = read_small("/proc/sys/kernel/random/boot_id", &mut buf)?;
    let id = std::str::from_utf8(&buf[..n]).ok()?;
    Some(id.trim().to_owned())
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks
/// since boot. Together with the pid and the boot id it names one process
/// for ever, which a pid alone does not (pids are reused).
pub fn process_start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let mut buf = [0u8; 1024];
    let n = read_small(&format!("/proc/{pid}/stat"), &mut buf)?;
    parse_start_time(&buf[..n])
}

/// What /proc says of `pid` now. A zombie (exited, not yet reaped) holds
/// no descriptors, so no lock: it counts as gone for liveness.
pub fn process_state(pid: i32) -> ProcessState {
    use std::io::Read;
    if pid <= 0 {
        return ProcessState::Gone;
    }
    let mut buf = [0u8; 1024];
    let read = fs::File::open(format!("/proc/{pid}/stat")).and_then(|mut f| f.read(&mut buf));
    let n = match read {
        Ok(n) => n,
        // ESRCH: it went away between the open and the read.
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            return ProcessState::Gone;
        }
        Err(_) => return ProcessState::Unknown,
    };
    let stat = &buf[..n];
    match stat
        .iter()
        .rposition(|&b| b == b')')
        .and_then(|close| stat.get(close + 2))
    {
        Some(b'Z') => ProcessState::Zombie,
        Some(_) => ProcessState::Running {
            start: parse_start_time(stat),
        },
        None => ProcessState::Unknown,
    }
}

/// The same for the calling process, for use between fork and exec, where
/// only async-signal-safe calls are allowed: raw syscalls into a stack
/// buffer, no allocation.
pub fn own_start_time_without_allocating() -> Option<u64> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        c"/proc/self/stat",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    parse_start_time(&buf[..n])
}

fn parse_start_time(stat: &[u8]) -> Option<u64> {
    // The command name (field 2) is in parentheses and may itself contain
    // spaces and parentheses, so count fields from the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = stat.get(close + 2..)?;
    let field = rest.split(|&b| b == b' ').nth(22 - 3)?;
    let mut value: u64 = 0;
    if field.is_empty() {
        return None;
    }
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

pub fn process_cmdline(pid: i32) -> Option<Vec<String>> {
    if pid <= 0 {
        return None;
    }
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let raw = raw.strip_suffix(b"\0").unwrap_or(&raw);
    if raw.is_empty() {
        // Kernel threads and zombies have no command line; show the name.
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(vec![format!("[{}]", comm.trim_end())]);
    }
    Some(
        raw.split(|&b| b == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect(),
    )
}

/// Which PID namespace we are in, so a record can say which namespace its
/// pids are counted in.
pub fn pid_namespace() -> Option<u64> {
    // The link reads `pid:[INODE]`. Reading it is cheaper than a stat,
    // which follows it into the namespace file system (3 us against 8).
    let link = fs::read_link("/proc/self/ns/pid").ok()?;
    let inode = link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?;
    inode.parse().ok()
}

/// The flock(2) locks the kernel lists for one file, from /proc/locks.
///
/// The kernel writes the table a page per read(2), and resumes the next
/// read by position: when locks ahead of that position go away in between,
/// entries shift and one can be skipped. A held lock reported as free is
/// the one error `holder` must not make, so a table longer than a page that
/// shows no holder is read again (a lock that is really held shows up in
/// one of the readings unless every one of them skips it).
pub fn kernel_locks(dev: u64, ino: u64) -> io::Result<Vec<KernelLock>> {
    const ONE_PAGE: usize = 4096;
    let mut locks = Vec::new();
    for _ in 0..3 {
        let table = fs::read_to_string("/proc/locks")?;
        locks = table
            .lines()
            .filter_map(parse_lock_line)
            .filter(|l| l.dev_major == major(dev) && l.dev_minor == minor(dev) && l.ino == ino)
            .map(|l| KernelLock {
                pid: l.pid,
                mode: l.mode,
                waiting: l.waiting,
            })
            .collect();
        if table.len() < ONE_PAGE || locks.iter().any(|l: &KernelLock| !l.waiting) {
            break;
        }
    }
    Ok(locks)
}

/// The processes that really hold the lock: those with a descriptor on the
/// file whose fdinfo shows a lock line. The kernel's pid in /proc/locks is
/// only whoever called flock, which may be long gone while a child that
/// inherited the descriptor holds on. Returns whether every process could be
/// looked at (another user's fds need root).
pub fn fd_holders(dev: u64, ino: u64) -> (Vec<FdHolder>, bool) {
    let mut holders = Vec::new();
    let mut complete = true;
    let Ok(procs) = fs::read_dir("/proc") else {
        return (holders, false);
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let fd_dir = format!("/proc/{pid}/fd");
        let fds = match fs::read_dir(&fd_dir) {
            Ok(fds) => fds,
            Err(e) => {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    complete = false;
                }
                continue;
            }
        };
        for fd in fds.flatten() {
            // A stat through the fd link is one syscall; only files that
            // match are worth opening fdinfo for.
            let Ok(meta) = fs::metadata(fd.path()) else {
                continue;
            };
            if meta.dev() != dev || meta.ino() != ino {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            let Ok(info) = fs::read_to_string(info) else {
                continue;
            };
            let held = info
                .lines()
                .filter_map(|line| line.strip_prefix("lock:"))
                .filter_map(parse_lock_line)
                .find(|l| !l.waiting);
            if let Some(lock) = held
                && !holders.iter().any(|h: &FdHolder| h.pid == pid)
            {
                holders.push(FdHolder {
                    pid,
                    mode: lock.mode,
                    caller: lock.pid,
                });
            }
        }
    }
    holders.sort_by_key(|h| h.pid);
    (holders, complete)
}

pub fn file_system_magic(path: &Path) -> Option<i64> {
    rustix::fs::statfs(path).ok().map(|s| s.f_type)
}

fn major(dev: u64) -> u64 {
    u64::from(rustix::fs::major(dev))
}
fn minor(dev: u64) -> u64 {
    u64::from(rustix::fs::minor(dev))
}

#[derive(Debug, PartialEq, Eq)]
struct LockLine {
    pid: i32,
    mode: LockMode,
    waiting: bool,
    dev_major: u64,
    dev_minor: u64,
    ino: u64,
}

/// `1: FLOCK  ADVISORY  WRITE 1234 fe:00:10010737 0 EOF`, or with `->` after
/// the id for a process blocked on the lock. Only FLOCK lines count: POSIX
/// and OFD locks do not conflict with flock(2) on Linux.
fn parse_lock_line(line: &str) -> Option<LockLine> {
    let mut words = line.split_whitespace();
    words.next()?.strip_suffix(':')?;
    let mut kind = words.next()?;
    let waiting = kind == "->";
    if waiting {
        kind = words.next()?;
    }
    if kind != "FLOCK" {
        return None;
    }
    let _advisory = words.next()?;
    let mode = match words.next()? {
        "WRITE" => LockMode::Exclusive,
        "READ" => LockMode::Shared,
        _ => return None,
    };
    let pid = words.next()?.parse().ok()?;
    let mut id = words.next()?.split(':');
    let dev_major = u64::from_str_radix(id.next()?, 16).ok()?;
    let dev_minor = u64::from_str_radix(id.next()?, 16).ok()?;
    let ino = id.next()?.parse().ok()?;
    Some(LockLine {
        pid,
        mode,
        waiting,
        dev_major,
        dev_minor,
        ino,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_held_and_waiting_flock_lines() {
        let held = parse_lock_line("1: FLOCK  ADVISORY  WRITE 2462 fe:00:10010737 0 EOF").unwrap();
        assert_eq!(held.pid, 2462);
        assert_eq!(
            (held.dev_major, held.dev_minor, held.ino),
            (0xfe, 0, 10010737)
        );
        assert!(!held.waiting);
        let waiting = parse_lock_line("1: -> FLOCK  ADVISORY  READ  77 08:01:5 0 EOF").unwrap();
        assert!(waiting.waiting);
        assert_eq!(waiting.mode, LockMode::Shared);
        assert!(parse_lock_line("2: POSIX  ADVISORY  WRITE 9 08:01:5 0 EOF").is_none());
        assert!(parse_lock_line("\t1: FLOCK  ADVISORY  WRITE 1 08:01:5 0 EOF").is_some());
        assert!(parse_lock_line("garbage").is_none());
    }

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat = b"42 (a) b (c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time(b"42 (x"), None);
    }

    #[test]
    fn pid_namespace_is_the_namespace_files_inode() {
        let inode = fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).ok();
        assert!(inode.is_some());
        assert_eq!(pid_namespace(), inode);
    }

    #[test]
    fn own_start_time_matches_proc() {
        let me = std::process::id() as i32;
        assert_eq!(own_start_time_without_allocating(), process_start_time(me));
    }
}
