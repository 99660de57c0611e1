//! Linux: /proc tells who holds a lock and whether a process is still the
//! one a record names.

use super::{
    FdHolder, FdIndex, KernelLock, LockId, LockKind, LockSnapshot, LockSpan, ProcessState,
};
use crate::mode::LockMode;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The inode of the initial PID namespace is fixed by the kernel
/// (PROC_PID_INIT_INO). Only there does /proc/locks list every lock: in a
/// child namespace it hides locks whose owner it cannot see.
pub const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// si_code of a signal sent with kill(2).
pub const SI_USER: i32 = libc::SI_USER;
/// si_code of a signal the kernel generated itself (the terminal's).
pub const SI_KERNEL: Option<i32> = Some(libc::SI_KERNEL);

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

/// A reading of the clock the kernel stamps new processes with, taken by
/// a parent just before it creates a child: see
/// [`own_start_time_since`].
#[derive(Debug, Clone, Copy)]
pub struct BeforeStart {
    boot_ns: u64,
    tick_ns: u64,
}

/// Reads CLOCK_BOOTTIME (through the vDSO: no system call) and the length
/// of the clock tick /proc counts start times in. `None` where either is
/// unknown, or the tick does not divide a second (the kernel rounds those
/// differently).
pub fn before_start() -> Option<BeforeStart> {
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    if per_second == 0 || 1_000_000_000 % per_second != 0 {
        return None;
    }
    Some(BeforeStart {
        boot_ns: boot_clock_ns()?,
        tick_ns: 1_000_000_000 / per_second,
    })
}

fn boot_clock_ns() -> Option<u64> {
    // SAFETY: all-zero is a valid timespec; clock_gettime fills it in and
    // is async-signal-safe.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
        return None;
    }
    let secs = u64::try_from(now.tv_sec).ok()?;
    let nanos = u64::try_from(now.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The calling process's start time as /proc/self/stat gives it, without
/// reading /proc, when its parent took `before` just before creating it.
/// The kernel stamps a process with CLOCK_BOOTTIME while creating it
/// (`start_boottime`, fork.c), so that stamp lies between `before` and
/// now; /proc shows it cut to whole ticks (`nsec_to_clock_t`). When both
/// readings fall in the same tick, the stamp does too, and that tick is
/// the answer. `None` when they straddle a tick boundary (the clone took
/// that long, or the clock moved): ask /proc then. Both readings and the
/// stamp are in the same time namespace, as /proc/self/stat's would be.
/// Async-signal-safe: it runs in the child between clone and exec.
pub fn own_start_time_since(before: BeforeStart) -> Option<u64> {
    let now = boot_clock_ns()?;
    let tick = before.boot_ns / before.tick_ns;
    (now >= before.boot_ns && now / before.tick_ns == tick).then_some(tick)
}

/// The parent of `pid`, for a signal handler: raw system calls into a
/// stack buffer, no allocation.
pub fn parent_without_allocating(pid: i32) -> Option<i32> {
    use rustix::fs::{Mode, OFlags};
    let mut path = [0u8; 32];
    let mut len = 0;
    let digits = decimal(pid.try_into().ok()?);
    for part in [&b"/proc/"[..], &digits[..], b"/stat\0"] {
        for &b in part.iter().filter(|&&b| b != b' ') {
            *path.get_mut(len)? = b;
            len += 1;
        }
    }
    let path = std::ffi::CStr::from_bytes_with_nul(path.get(..len)?).ok()?;
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    stat_field(buf.get(..n)?, 4).and_then(|ppid| i32::try_from(ppid).ok())
}

/// `n` in decimal, right-aligned in spaces.
fn decimal(mut n: u32) -> [u8; 10] {
    let mut digits = [b' '; 10];
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits
}

fn parse_start_time(stat: &[u8]) -> Option<u64> {
    stat_field(stat, 22)
}

/// Field `number` (from 1, past the command name) of /proc/PID/stat.
fn stat_field(stat: &[u8], number: usize) -> Option<u64> {
    // The command name (field 2) is in parentheses and may itself contain
    // spaces and parentheses, so count fields from the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = stat.get(close + 2..)?;
    let field = rest.split(|&b| b == b' ').nth(number.checked_sub(3)?)?;
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

/// Where the kernel's lock lists place the file open as `file`: the
/// device of the mount's super block (from /proc/self/mountinfo, found by
/// the descriptor's mount id) and the inode number fdinfo gives. These are
/// what /proc/locks prints, where stat() can differ: on btrfs every
/// subvolume stats with an anonymous device of its own, and an overlay can
/// report a layer's. Bind mounts share the super block, so they agree.
pub fn lock_id(file: &fs::File) -> Option<LockId> {
    lock_id_in(file, &mut None)
}

/// [`lock_id`], reading /proc/self/mountinfo into `mounts` only if it is
/// not there yet: a `--slots` lock's files are placed with one reading.
fn lock_id_in(file: &fs::File, mounts: &mut Option<String>) -> Option<LockId> {
    use std::os::fd::AsRawFd;
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).ok()?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse::<u64>().ok())
    };
    let mount = field("mnt_id:")?;
    // `ino:` is in fdinfo since Linux 5.14; before, stat's is the kernel's.
    let ino = match field("ino:") {
        Some(ino) => ino,
        None => file.metadata().ok()?.ino(),
    };
    if mounts.is_none() {
        *mounts = Some(fs::read_to_string("/proc/self/mountinfo").ok()?);
    }
    let (major, minor) = mounts.as_deref()?.lines().find_map(|line| {
        // `36 35 98:0 /mnt1 /mnt2 rw …`: mount id, parent id, MAJ:MIN.
        let mut words = line.split(' ');
        if words.next()?.parse::<u64>().ok()? != mount {
            return None;
        }
        let _parent = words.next()?;
        let (major, minor) = words.next()?.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })?;
    Some(LockId { major, minor, ino })
}

/// [`lock_id`] for a path: opened O_PATH (no read permission needed, no
/// FIFO or device opened for real) and checked to be the file `dev` and
/// `ino` name; stat()'s id when /proc cannot say better.
pub fn lock_id_at(path: &Path, dev: u64, ino: u64) -> LockId {
    lock_id_at_in(path, dev, ino, &mut None)
}

/// [`lock_id_at`] with the mount table kept in `mounts` between calls.
pub fn lock_id_at_in(path: &Path, dev: u64, ino: u64, mounts: &mut Option<String>) -> LockId {
    use rustix::fs::{Mode, OFlags};
    let opened = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map(fs::File::from)
        .ok()
        .filter(|file| {
            file.metadata()
                .is_ok_and(|meta| meta.dev() == dev && meta.ino() == ino)
        });
    opened
        .and_then(|file| lock_id_in(&file, mounts))
        .unwrap_or_else(|| stat_lock_id(dev, ino))
}

/// The lock id stat() gives: right on most file systems, and the fallback
/// when /proc cannot say better.
pub fn stat_lock_id(dev: u64, ino: u64) -> LockId {
    LockId {
        major: major(dev),
        minor: minor(dev),
        ino,
    }
}

/// The kernel's locks on one file, and how the table was read.
#[derive(Debug, Default, Clone)]
pub struct LockTable {
    pub locks: Vec<KernelLock>,
    /// Every reading of the table took more than one read(2): entries can
    /// have shifted between them, so a lock missing from it may still be
    /// held.
    pub torn: bool,
}

/// The locks the kernel lists for one file, from /proc/locks.
///
/// One read(2) of /proc/locks is consistent: the kernel holds its lock
/// lists still while it fills it. But it never returns more than a page
/// (4 KiB), whatever the buffer, and the next read resumes by position.
/// New locks go in at the head of the kernel's lists, so a lock taken
/// anywhere on the machine between two reads shifts every entry after it
/// one place on, and the next read shows one entry again; one released
/// shifts them back, and an entry is skipped. A table longer than a page
/// is therefore read three times and the readings merged (see
/// [`merge_readings`]), and the caller is told (`torn`) so that it can ask
/// the descriptors themselves before it answers "free". Seen at 47b42a5:
/// 73 of 300 conflict messages said "shared by 4 processes" (or 5) for 3
/// shared holders, beside 170 locks and a process taking and releasing 20.
pub fn kernel_locks(id: LockId) -> io::Result<LockTable> {
    let mut tables = kernel_locks_of(&[id])?;
    Ok(tables.pop().unwrap_or_default())
}

/// How many times a torn table is read.
const TORN_READINGS: usize = 3;

/// [`kernel_locks`] for several files from the same readings of the table:
/// one table per id, in the order given. `holder` on a `--slots` lock
/// asks for every slot file at once, so that 1024 slots cost one reading
/// of /proc/locks, not 1024 (issue 26 item 14).
///
/// Kept apart from [`lock_snapshot`]: the run path's conflict message asks
/// for one file, and keeps only that file's lines rather than a map of
/// every file's.
pub fn kernel_locks_of(ids: &[LockId]) -> io::Result<Vec<LockTable>> {
    let mut readings: Vec<Vec<Vec<KernelLock>>> = Vec::new();
    let mut buf = Vec::new();
    let mut torn = false;
    for _ in 0..TORN_READINGS {
        let reads = read_whole("/proc/locks", &mut buf)?;
        torn |= reads > 1;
        let text = String::from_utf8_lossy(&buf);
        readings.push(locks_of_ids(&text, ids));
        if !torn {
            break;
        }
    }
    let mut tables: Vec<LockTable> = ids.iter().map(|_| LockTable::default()).collect();
    for (i, table) in tables.iter_mut().enumerate() {
        table.torn = torn;
        table.locks = merge_readings(readings.iter().map(|reading| &reading[i]));
    }
    Ok(tables)
}

/// The whole of /proc/locks, every file's entries by id: one reading, or,
/// when a reading takes more than one read(2), [`TORN_READINGS`] of them
/// merged file by file (see [`merge_readings`]). `holder`, `check` and
/// `list` answer every file they look at from one of these (issue 34
/// item 4): one reading per row made `list` of 10,000 locks take minutes.
pub fn lock_snapshot() -> io::Result<LockSnapshot> {
    lock_snapshot_rest(lock_snapshot_first()?)
}

/// The first reading of [`lock_snapshot`] alone (`torn` when it took more
/// than one read(2)): what a caller can answer from when one reading is
/// proof enough, before [`lock_snapshot_rest`] reads the table again.
pub fn lock_snapshot_first() -> io::Result<LockSnapshot> {
    let mut buf = Vec::new();
    let reads = read_whole("/proc/locks", &mut buf)?;
    let mut order: Vec<LockId> = Vec::new();
    let by_id = one_reading(&buf, &mut order);
    Ok(LockSnapshot {
        by_id,
        order,
        torn: reads > 1,
    })
}

/// [`lock_snapshot`] from its first reading: that reading when it was
/// whole, else it merged with the readings still to make.
pub fn lock_snapshot_rest(first: LockSnapshot) -> io::Result<LockSnapshot> {
    if !first.torn {
        return Ok(first);
    }
    let LockSnapshot {
        by_id, mut order, ..
    } = first;
    let mut readings = vec![by_id];
    let mut buf = Vec::new();
    for _ in 1..TORN_READINGS {
        read_whole("/proc/locks", &mut buf)?;
        readings.push(one_reading(&buf, &mut order));
    }
    // A file first seen in a later reading was pushed once per reading
    // that had it first: keep its first place only.
    let mut seen = std::collections::HashSet::new();
    order.retain(|id| seen.insert(*id));
    let none = Vec::new();
    let by_id = order
        .iter()
        .map(|id| {
            let locks = merge_readings(readings.iter().map(|r| r.get(id).unwrap_or(&none)));
            (*id, locks)
        })
        .collect();
    Ok(LockSnapshot {
        by_id,
        order,
        torn: true,
    })
}

/// One reading's entries by id; each id not yet in `order` is added to it.
fn one_reading(
    buf: &[u8],
    order: &mut Vec<LockId>,
) -> std::collections::HashMap<LockId, Vec<KernelLock>> {
    let mut reading: std::collections::HashMap<LockId, Vec<KernelLock>> =
        std::collections::HashMap::new();
    for line in String::from_utf8_lossy(buf)
        .lines()
        .filter_map(parse_lock_line)
    {
        let entries = reading.entry(line.id).or_insert_with(|| {
            order.push(line.id);
            Vec::new()
        });
        entries.push(line.lock);
    }
    reading
}

/// Each id's entries in one reading of /proc/locks, in the table's order.
fn locks_of_ids(text: &str, ids: &[LockId]) -> Vec<Vec<KernelLock>> {
    let mut found: Vec<Vec<KernelLock>> = ids.iter().map(|_| Vec::new()).collect();
    for line in text.lines().filter_map(parse_lock_line) {
        for (locks, _) in found.iter_mut().zip(ids).filter(|(_, id)| **id == line.id) {
            locks.push(line.lock.clone());
        }
    }
    found
}

/// The path of each of `ids` that some descriptor of `index` names: a
/// descriptor's `stat` is matched against the table's device and inode,
/// so a file system whose `stat` device differs from the super block's (a
/// btrfs subvolume) shows no path.
pub fn paths_in(
    index: &FdIndex,
    ids: &[LockId],
) -> std::collections::HashMap<LockId, std::path::PathBuf> {
    let wanted: std::collections::HashSet<LockId> = ids.iter().copied().collect();
    let mut found = std::collections::HashMap::new();
    for (&(dev, ino), fds) in &index.open {
        let id = stat_lock_id(dev, ino);
        if !wanted.contains(&id) || found.contains_key(&id) {
            continue;
        }
        // The link names the file in the holder's mount namespace: only a
        // path that leads to the same file here is its path (a holder in a
        // namespace of its own would otherwise lend its lock's name to
        // whatever file has that name here, or none, and the row would say
        // "free").
        let path = fds.iter().find_map(|&(pid, fd)| {
            let target = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
            fs::metadata(&target)
                .is_ok_and(|here| here.dev() == dev && here.ino() == ino)
                .then_some(target)
        });
        if let Some(path) = path {
            found.insert(id, path);
        }
    }
    found
}

/// One file's entries from several readings of the table, as one list.
///
/// An entry with a real pid names one lock: a process holds one POSIX
/// lock per byte, and a second flock(2) lock of one process on one file
/// is still one process holding it. So such an entry counts once however
/// often a torn reading shows it, and once if any reading shows it (a
/// skipped entry is missing from one reading only). Entries with no pid
/// to tell them apart (-1 for OFD locks, 0 for a holder in another PID
/// namespace) count as often as the reading that shows most of them.
/// Merging can only add holders, never drop one: a lock released during
/// the readings may be listed, which is the safe way to be wrong.
fn merge_readings<'a>(readings: impl Iterator<Item = &'a Vec<KernelLock>>) -> Vec<KernelLock> {
    let mut merged: Vec<KernelLock> = Vec::new();
    for reading in readings {
        let mut seen: Vec<(&KernelLock, usize)> = Vec::new();
        for lock in reading {
            if lock.pid > 0 {
                if !merged.contains(lock) {
                    merged.push(lock.clone());
                }
                continue;
            }
            let count = match seen.iter_mut().find(|(l, _)| *l == lock) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    seen.push((lock, 1));
                    1
                }
            };
            if merged.iter().filter(|l| *l == lock).count() < count {
                merged.push(lock.clone());
            }
        }
    }
    merged
}

/// Reads a /proc file whole into `buf` with as few read(2) calls as it
/// allows (a buffer that grows, never a short one); returns how many reads
/// brought data.
fn read_whole(path: &str, buf: &mut Vec<u8>) -> io::Result<usize> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    buf.clear();
    if buf.capacity() < 64 * 1024 {
        buf.reserve(64 * 1024);
    }
    let mut reads = 0;
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.capacity());
        }
        let filled = buf.len();
        buf.resize(buf.capacity(), 0);
        let result = file.read(&mut buf[filled..]);
        match result {
            Ok(0) => {
                buf.truncate(filled);
                return Ok(reads);
            }
            Ok(n) => {
                buf.truncate(filled + n);
                reads += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(filled),
            Err(e) => {
                buf.truncate(filled);
                return Err(e);
            }
        }
    }
}

/// The processes that really hold a lock on the file: those with a
/// descriptor on it whose fdinfo shows a lock line. The kernel's pid in
/// /proc/locks is only whoever called flock, which may be long gone while
/// a child that inherited the descriptor holds on, and an OFD lock has no
/// pid there at all. Returns whether every process could be looked at
/// (another user's fds need root).
pub fn fd_holders(dev: u64, ino: u64) -> (Vec<FdHolder>, bool) {
    let (mut found, complete) = fd_holders_of(&[(dev, ino)]);
    (found.pop().unwrap_or_default(), complete)
}

/// Every process's pid as /proc lists them now; `None` without /proc.
fn process_ids() -> Option<impl Iterator<Item = i32>> {
    let procs = fs::read_dir("/proc").ok()?;
    Some(procs.flatten().filter_map(|entry| {
        entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
    }))
}

/// [`fd_holders`] for several files (stat's `dev`, `ino`) in one scan of
/// every process: one list per file, in the order given. A `--slots`
/// lock's files are looked at together, so that `holder` scans the
/// processes once whatever the number of slots (issue 26 item 14).
pub fn fd_holders_of(files: &[(u64, u64)]) -> (Vec<Vec<FdHolder>>, bool) {
    let wanted: std::collections::HashSet<(u64, u64)> = files.iter().copied().collect();
    let index = walk_descriptors(Some(&wanted));
    let found = files
        .iter()
        .map(|&(dev, ino)| holders_in(&index, dev, ino))
        .collect();
    (found, index.complete)
}

/// One walk of every process's descriptors: which process has which file
/// open, by stat's device and inode, without reading a single fdinfo.
/// `holder`, `check` and `list` make at most one per call and answer every
/// file from it ([`holders_in`], [`paths_in`]): the walk, one stat per
/// descriptor on the host, is what a row cost when each row made its own.
pub fn index_descriptors() -> FdIndex {
    walk_descriptors(None)
}

/// [`index_descriptors`], keeping only the files of `wanted` when given.
fn walk_descriptors(wanted: Option<&std::collections::HashSet<(u64, u64)>>) -> FdIndex {
    let mut index = FdIndex {
        open: std::collections::HashMap::new(),
        complete: true,
    };
    let Some(procs) = process_ids() else {
        index.complete = false;
        return index;
    };
    for pid in procs {
        let fds = match fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(fds) => fds,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                index.complete = false;
                continue;
            }
            // Gone since /proc was listed: it holds nothing.
            Err(_) => continue,
        };
        for fd in fds.flatten() {
            let Some(number) = fd.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            // A stat through the fd link is one syscall; fdinfo is read
            // later, only for the descriptors of a file asked about. Both
            // sides are stat()'s view, so they agree on btrfs and overlays.
            let Ok(meta) = fs::metadata(fd.path()) else {
                continue;
            };
            let file = (meta.dev(), meta.ino());
            if wanted.is_some_and(|wanted| !wanted.contains(&file)) {
                continue;
            }
            index.open.entry(file).or_default().push((pid, number));
        }
    }
    index
}

/// The processes holding a lock on the file (stat's `dev`, `ino`) among
/// the descriptors of `index`: those whose fdinfo shows a lock line, by
/// pid, each lock once per process.
pub fn holders_in(index: &FdIndex, dev: u64, ino: u64) -> Vec<FdHolder> {
    let mut holders: Vec<FdHolder> = Vec::new();
    for &(pid, fd) in index.open.get(&(dev, ino)).into_iter().flatten() {
        add_holders(&mut holders, pid, fd);
    }
    holders.sort_by_key(|h| h.pid);
    holders
}

/// The locks descriptor `fd` of `pid` holds, as its fdinfo shows them,
/// added to `holders` unless that process is listed with that lock.
fn add_holders(holders: &mut Vec<FdHolder>, pid: i32, fd: i32) {
    let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
        // Closed since the walk, or the process is gone.
        return;
    };
    for line in info
        .lines()
        .filter_map(|line| line.strip_prefix("lock:"))
        .filter_map(parse_lock_line)
        .filter(|l| !l.lock.waiting)
    {
        let holder = FdHolder {
            pid,
            mode: line.lock.mode,
            caller: line.lock.pid,
            span: line.lock.span,
            fd,
        };
        if !holders.iter().any(|h| h.same_lock(&holder)) {
            holders.push(holder);
        }
    }
}

/// The locks process `pid` holds on the file (stat's `dev`, `ino`), as
/// [`holders_in`] gives them, from its own descriptors only: how a holder
/// the record names is confirmed without walking every process. Empty
/// when it holds none or is gone; `None` when its descriptors cannot be
/// looked at (another user's, without root).
pub fn process_fd_holders(pid: i32, dev: u64, ino: u64) -> Option<Vec<FdHolder>> {
    if pid <= 0 {
        return Some(Vec::new());
    }
    let fds = match fs::read_dir(format!("/proc/{pid}/fd")) {
        Ok(fds) => fds,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(Vec::new()),
        Err(_) => return None,
    };
    let mut holders = Vec::new();
    for fd in fds.flatten() {
        let Some(number) = fd.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if fs::metadata(fd.path()).is_ok_and(|meta| meta.dev() == dev && meta.ino() == ino) {
            add_holders(&mut holders, pid, number);
        }
    }
    Some(holders)
}

/// Whether process `pid` holds a lock on the file (stat's `dev`, `ino`)
/// through one of its descriptors, as its fdinfo shows; `None` when its
/// descriptors cannot be looked at (another user's, without root).
pub fn process_holds(pid: i32, dev: u64, ino: u64) -> Option<bool> {
    process_locks_on(pid, dev, ino).map(|locks| !locks.is_empty())
}

/// The locks process `pid` holds on the file (stat's `dev`, `ino`)
/// through its descriptors, with their kind and range: empty when it holds
/// none or is gone, `None` when its descriptors cannot be looked at
/// (another user's, without root).
pub fn process_locks_on(pid: i32, dev: u64, ino: u64) -> Option<Vec<KernelLock>> {
    if pid <= 0 {
        return Some(Vec::new());
    }
    match process_locks(pid, dev, ino) {
        Ok(locks) => Some(locks),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(Vec::new()),
        Err(_) => None,
    }
}

/// The locks one process holds on the file through its descriptors.
fn process_locks(pid: i32, dev: u64, ino: u64) -> io::Result<Vec<KernelLock>> {
    let index = std::collections::HashMap::from([((dev, ino), 0)]);
    Ok(process_locks_of(pid, &index)?
        .into_iter()
        .map(|(_, lock)| lock)
        .collect())
}

/// The locks one process holds through its descriptors on any of the
/// files `index` maps (stat's `dev`, `ino`) to a position; each with the
/// position of its file.
fn process_locks_of(
    pid: i32,
    index: &std::collections::HashMap<(u64, u64), usize>,
) -> io::Result<Vec<(usize, KernelLock)>> {
    let mut found = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        // A stat through the fd link is one syscall; only files that match
        // are worth opening fdinfo for. Both sides are stat()'s view, so
        // they agree on btrfs and overlays too.
        let Ok(meta) = fs::metadata(fd.path()) else {
            continue;
        };
        let Some(&i) = index.get(&(meta.dev(), meta.ino())) else {
            continue;
        };
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        let Ok(info) = fs::read_to_string(info) else {
            continue;
        };
        found.extend(
            info.lines()
                .filter_map(|line| line.strip_prefix("lock:"))
                .filter_map(parse_lock_line)
                .filter(|l| !l.lock.waiting)
                .map(|l| (i, l.lock)),
        );
    }
    Ok(found)
}

/// The processes, lockrun excluded, with a descriptor on the open file
/// description `ours` (an inherited or passed copy of it, whatever its
/// number): each holds lockrun's lock, flock(2) and OFD alike, since both
/// belong to the open file description. The kernel's lock lines cannot
/// tell them apart from other openers of the file: an OFD lock shows pid
/// -1 wherever it is held, so kcmp(2) compares the descriptions
/// themselves. Where kcmp cannot answer (a kernel built without it) only
/// a flock(2) lock can be traced, by the pid that took it (ours).
/// Called only when `--max-time` fires: it reads every process's fds.
pub fn sharing_description(ours: std::os::fd::BorrowedFd<'_>, dev: u64, ino: u64) -> Vec<i32> {
    use std::os::fd::AsRawFd;
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let Some(procs) = process_ids() else {
        return found;
    };
    for pid in procs {
        if pid == me {
            continue;
        }
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Some(theirs) = fd.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            // One stat through the link first: only descriptors on the
            // lock file are worth comparing.
            let Ok(meta) = fs::metadata(fd.path()) else {
                continue;
            };
            if meta.dev() != dev || meta.ino() != ino {
                continue;
            }
            let shares = match same_description(me, ours.as_raw_fd(), pid, theirs) {
                Some(same) => same,
                None => locked_by(pid, theirs, me),
            };
            if shares {
                found.push(pid);
                break;
            }
        }
    }
    found
}

/// kcmp(2) KCMP_FILE: whether our `ours` and `pid`'s `theirs` are one open
/// file description; `None` when the kernel cannot say (no kcmp, or not
/// allowed to look at that process).
pub fn same_description(me: i32, ours: i32, pid: i32, theirs: i32) -> Option<bool> {
    const KCMP_FILE: libc::c_int = 0;
    // SAFETY: kcmp only compares kernel objects named by pids and
    // descriptor numbers; no memory is passed.
    let answer = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            me as libc::pid_t,
            pid as libc::pid_t,
            KCMP_FILE,
            ours as libc::c_ulong,
            theirs as libc::c_ulong,
        )
    };
    if answer >= 0 {
        return Some(answer == 0);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS | libc::EPERM | libc::EACCES) => None,
        // EBADF, ESRCH: the descriptor or the process is gone since.
        _ => Some(false),
    }
}

/// Whether `pid`'s descriptor `fd` holds a lock that `caller` took, as its
/// fdinfo shows (a flock(2) lock names the process that called flock).
fn locked_by(pid: i32, fd: i32, caller: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).is_ok_and(|info| {
        info.lines()
            .filter_map(|line| line.strip_prefix("lock:"))
            .filter_map(parse_lock_line)
            .any(|l| !l.lock.waiting && l.lock.pid == caller)
    })
}

/// Every live process descended from `root` (not `root` itself), by the
/// parent links in /proc/*/stat; zombies left out (they hold nothing).
/// A process whose parent exits is adopted by the nearest subreaper, so
/// with [`adopt_orphans`] what a command started stays below lockrun even
/// after a double fork or a setsid. Called only to stop processes.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut links: Vec<(i32, i32)> = Vec::new();
    let Some(procs) = process_ids() else {
        return Vec::new();
    };
    let mut buf = [0u8; 1024];
    for pid in procs {
        let Some(n) = read_small(&format!("/proc/{pid}/stat"), &mut buf) else {
            continue;
        };
        let stat = &buf[..n];
        // After the command name, which may hold anything: ") S PPID ...".
        let Some(close) = stat.iter().rposition(|&b| b == b')') else {
            continue;
        };
        let mut fields = std::str::from_utf8(&stat[close + 1..])
            .unwrap_or("")
            .split_whitespace();
        let (Some(state), Some(parent)) = (fields.next(), fields.next()) else {
            continue;
        };
        if state == "Z" || state == "X" {
            continue;
        }
        if let Ok(parent) = parent.parse::<i32>() {
            links.push((pid, parent));
        }
    }
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        next += 1;
        for &(pid, ppid) in &links {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
            }
        }
    }
    found.remove(0);
    found
}

/// Our descriptors that are sockets, each with what /proc/self/fd says of
/// it (`socket:[INODE]`): compared before and after a connection is made,
/// to find the connection's socket, which the client library keeps to
/// itself. Only lock URLs ask (PostgreSQL, today), hence the neutral
/// feature: platform code names no backend.
#[cfg(feature = "lock-urls")]
pub fn socket_fds() -> Vec<(i32, std::ffi::OsString)> {
    let Ok(entries) = fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let fd = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let target = fs::read_link(entry.path()).ok()?;
            use std::os::unix::ffi::OsStrExt;
            target
                .as_os_str()
                .as_bytes()
                .starts_with(b"socket:")
                .then(|| (fd, target.into_os_string()))
        })
        .collect()
}

/// Makes lockrun the subreaper of what its command starts
/// (PR_SET_CHILD_SUBREAPER), so that [`descendants`] finds an orphan
/// (a daemon, a setsid'd child whose parent exited) under lockrun rather
/// than under init. Such orphans become lockrun's children: lockrun must
/// reap them when they exit (`run::command`), and when lockrun exits they
/// pass on to the next subreaper, as they would have.
pub fn adopt_orphans() -> bool {
    // SAFETY: prctl on our own process, no pointers passed.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) == 0 }
}

/// Waits until the child `command` has exited, leaving it unreaped (its
/// pid stays its own), and reaps every other child that exits meanwhile:
/// with [`adopt_orphans`] those are the command's orphans, each a zombie
/// holding a process-table slot until its parent reaps it. Returns false
/// if waiting failed (no such child), as `waitid` on the command would.
pub fn wait_reaping_orphans(command: i32) -> bool {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) fills `info`, a valid siginfo_t we own.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        // SAFETY: waitid with WEXITED filled in a child's siginfo.
        let child = unsafe { info.si_pid() };
        if child == command || child <= 0 {
            return true;
        }
        // An adopted orphan, never the command (whose pid lockrun still
        // needs): reap it so that its pid goes back to the kernel.
        // SAFETY: waitpid on our own child, which has exited.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), libc::WNOHANG) };
    }
}

/// The file behind one of our descriptors, as /proc/self/fd names it;
/// `None` for what has no name to show (a pipe, a deleted file).
pub fn descriptor_path(fd: std::os::fd::BorrowedFd<'_>) -> Option<std::path::PathBuf> {
    use std::os::fd::AsRawFd;
    let target = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let shown = target.to_str()?;
    (shown.starts_with('/') && !shown.ends_with(" (deleted)")).then_some(target)
}

/// The type of the file `meta` describes, as rustix names it. Inline: the
/// lock file's open path compiles as it did before this function.
#[inline]
pub fn file_type(meta: &fs::Metadata) -> rustix::fs::FileType {
    rustix::fs::FileType::from_raw_mode(meta.mode())
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
    lock: KernelLock,
    id: LockId,
}

/// `1: FLOCK  ADVISORY  WRITE 1234 fe:00:10010737 0 EOF`, with `->` after
/// the id for a process blocked on the lock; `POSIX` and `OFDLCK` lines
/// give a byte range (`0 4`, `10 EOF`). Leases and delegations are not
/// locks anyone takes with lockrun or flock(1), and are left out.
fn parse_lock_line(line: &str) -> Option<LockLine> {
    let mut words = line.split_whitespace();
    words.next()?.strip_suffix(':')?;
    let mut kind = words.next()?;
    let waiting = kind == "->";
    if waiting {
        kind = words.next()?;
    }
    let kind = match kind {
        "FLOCK" => LockKind::Flock,
        "OFDLCK" => LockKind::Ofd,
        "POSIX" => LockKind::Posix,
        _ => return None,
    };
    let _advisory = words.next()?;
    let mode = match words.next()? {
        "WRITE" => LockMode::Exclusive,
        "READ" => LockMode::Shared,
        _ => return None,
    };
    let pid = words.next()?.parse().ok()?;
    let mut id = words.next()?.split(':');
    let major = u64::from_str_radix(id.next()?, 16).ok()?;
    let minor = u64::from_str_radix(id.next()?, 16).ok()?;
    let ino = id.next()?.parse().ok()?;
    let start = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    let end = words.next().and_then(|w| w.parse().ok());
    Some(LockLine {
        lock: KernelLock {
            pid,
            mode,
            waiting,
            span: LockSpan { kind, start, end },
        },
        id: LockId { major, minor, ino },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_parent_without_allocating() {
        let me = std::process::id() as i32;
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        assert_eq!(parent_without_allocating(me), Some(parent));
        assert_eq!(parent_without_allocating(0), None);
        assert_eq!(parent_without_allocating(-5), None);
        // Above any pid_max (2^22): no such process.
        assert_eq!(parent_without_allocating(i32::MAX), None);
        assert_eq!(stat_field(b"7 (a) b) S 1 7 7", 4), Some(1));
        assert_eq!(stat_field(b"7 (a) S", 4), None);
        assert_eq!(stat_field(b"no parenthesis", 4), None);
    }

    /// A torn reading of /proc/locks shows an entry twice when a lock was
    /// taken elsewhere between two reads, or skips one when a lock was
    /// released: the merge counts each holder once, and keeps the skipped.
    #[test]
    fn torn_readings_count_each_holder_once_and_lose_none() {
        let id = LockId {
            major: 8,
            minor: 1,
            ino: 5,
        };
        let reading = |lines: &[&str]| locks_of_ids(&lines.join("\n"), &[id]).remove(0);
        let a = "1: FLOCK  ADVISORY  READ  100 08:01:5 0 EOF";
        let b = "2: FLOCK  ADVISORY  READ  101 08:01:5 0 EOF";
        let c = "3: FLOCK  ADVISORY  READ  102 08:01:5 0 EOF";
        let other = "4: FLOCK  ADVISORY  READ  103 08:01:6 0 EOF";
        // Shown twice in one reading (b), skipped in another (c).
        let first = reading(&[a, b, b, c, other]);
        let second = reading(&[a, b]);
        assert_eq!(first.len(), 4);
        let merged = merge_readings([&first, &second].into_iter());
        let pids: Vec<i32> = merged.iter().map(|l| l.pid).collect();
        assert_eq!(pids, [100, 101, 102]);
        // OFD locks have no pid: as many as the fullest reading shows.
        let ofd = "5: OFDLCK ADVISORY  READ  -1 08:01:5 0 EOF";
        let two = reading(&[ofd, a, ofd]);
        let one = reading(&[ofd]);
        let merged = merge_readings([&one, &two, &one].into_iter());
        assert_eq!(merged.iter().filter(|l| l.pid == -1).count(), 2);
        assert_eq!(merged.len(), 3);
    }

    #[test]
    fn parses_held_and_waiting_lock_lines() {
        let held = parse_lock_line("1: FLOCK  ADVISORY  WRITE 2462 fe:00:10010737 0 EOF").unwrap();
        assert_eq!(held.lock.pid, 2462);
        assert_eq!(
            held.id,
            LockId {
                major: 0xfe,
                minor: 0,
                ino: 10010737
            }
        );
        assert!(!held.lock.waiting);
        assert_eq!(held.lock.span, LockSpan::WHOLE_FLOCK);
        let waiting = parse_lock_line("1: -> FLOCK  ADVISORY  READ  77 08:01:5 0 EOF").unwrap();
        assert!(waiting.lock.waiting);
        assert_eq!(waiting.lock.mode, LockMode::Shared);
        let posix = parse_lock_line("2: POSIX  ADVISORY  WRITE 9 08:01:5 0 4").unwrap();
        assert_eq!(
            posix.lock.span,
            LockSpan {
                kind: LockKind::Posix,
                start: 0,
                end: Some(4)
            }
        );
        let ofd = parse_lock_line("2: OFDLCK ADVISORY  WRITE -1 08:01:5 10 EOF").unwrap();
        assert_eq!(ofd.lock.pid, -1);
        assert_eq!(
            ofd.lock.span,
            LockSpan {
                kind: LockKind::Ofd,
                start: 10,
                end: None
            }
        );
        assert!(parse_lock_line("3: LEASE  ACTIVE    READ 9 08:01:5 0 EOF").is_none());
        assert!(parse_lock_line("\t1: FLOCK  ADVISORY  WRITE 1 08:01:5 0 EOF").is_some());
        assert!(parse_lock_line("garbage").is_none());
    }

    #[test]
    fn the_lock_id_is_the_one_proc_locks_prints() {
        // Our own lock, seen in our own fdinfo: the same id both ways.
        let file = tempfile::tempfile().unwrap();
        file.lock().unwrap();
        use std::os::fd::AsRawFd;
        let info = fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).unwrap();
        let line = info.lines().find_map(|l| l.strip_prefix("lock:")).unwrap();
        assert_eq!(lock_id(&file), Some(parse_lock_line(line).unwrap().id));
    }

    #[test]
    fn a_table_is_read_whole() {
        let mut buf = Vec::new();
        let reads = read_whole("/proc/self/status", &mut buf).unwrap();
        assert!(reads >= 1);
        assert!(String::from_utf8_lossy(&buf).contains("\nPid:"));
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
    fn a_start_time_from_the_clock_is_the_one_proc_gives() {
        // A child stamped between the two readings: when the clock says
        // anything, it says what /proc says, on every one of many tries.
        let mut told = 0;
        for _ in 0..50 {
            let before = before_start().expect("CLOCK_BOOTTIME and the tick");
            let mut child = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .expect("sleep");
            let seen = process_start_time(child.id() as i32);
            let _ = child.kill();
            let _ = child.wait();
            let from_clock = own_start_time_since(before);
            // Only a reading taken before the child exists can bound its
            // stamp from below: `before` is, `from_clock`'s second is
            // later, so the child's stamp is inside the window.
            if let Some(start) = from_clock {
                assert_eq!(Some(start), seen, "the clock's tick and /proc's");
                told += 1;
            }
        }
        assert!(told > 0, "the clock never answered in 50 tries");
    }

    #[test]
    fn own_start_time_matches_proc() {
        let me = std::process::id() as i32;
        assert_eq!(own_start_time_without_allocating(), process_start_time(me));
    }
}
