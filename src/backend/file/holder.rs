//! Who holds a lock file, as the run path may tell it: from the record in
//! the file, believed only where the kernel confirms it (fdinfo of the
//! recorded processes), and, only once a lock attempt has failed, from
//! the kernel's table entries for this one file. Never the inspection
//! code: naming every process that holds a lock is `holder`'s job.
//!
//! The uncontended path runs none of this: it costs nothing until a
//! conflict, and a conflict message is worth a read of /proc/locks.

use crate::backend::file::lock::{LockFile, LockKind};
use crate::display;
use crate::identity::Liveness;
use crate::mode::LockMode;
use crate::platform::{self, KernelLock};
use crate::record::{self, Record};

/// Who holds the lock according to its record, if the record names a live
/// holder that the kernel confirms holds a lock this contender's lock
/// conflicts with. Reads the record, /proc/PID/stat and the recorded
/// processes' descriptors, never the kernel's lock table or the inspection
/// code: this runs for the live status line, every few seconds.
pub fn held_by(lock: &LockFile) -> Option<String> {
    held_by_file(lock.file(), lock.identity(), lock.kind())
}

/// [`held_by`] for a lock file that this process has not opened to lock:
/// opened to read (never created, never a FIFO), as `holder` opens one;
/// a flock(2) lock on the whole file, as a slot's is.
pub fn held_by_path(path: &std::path::Path) -> Option<String> {
    let file = super::lock::open_to_read(path).ok()??;
    let meta = file.metadata().ok()?;
    held_by_file(&file, crate::platform::file_id(&meta), LockKind::Flock)
}

fn held_by_file(file: &std::fs::File, identity: (u64, u64), kind: LockKind) -> Option<String> {
    match confirmed(&current_record(file)?, identity, kind) {
        Confirmed::Holds(holder) => Some(holder),
        Confirmed::CannotTell(_) | Confirmed::Gone | Confirmed::NotHolding => None,
    }
}

/// What follows "held" in a conflict or waiting message: `by pid 4243
/// (backup.sh) since …`, `shared by 3 processes`, `by a POSIX lock of pid
/// 77 (…) on bytes 0-4`.
///
/// A record names its holder only when the kernel confirms that process
/// (or the lockrun that started it) holds a lock this one conflicts with:
/// anyone who can write the lock file can write a record blaming pid 1,
/// and a record outlives its run (a released one, or one a shared, lockf
/// or byte-range holder, which write none, left in place). Otherwise the
/// kernel's table says what holds the lock, and a process is named only
/// where the kernel names it.
pub fn conflict_held(lock: &LockFile, mode: LockMode, label: &str) -> String {
    let ask = holder_command(lock, label);
    let record = current_record(lock.file());
    let verdict = record
        .as_ref()
        .map(|r| confirmed(r, lock.identity(), lock.kind()));
    let unconfirmed = match verdict {
        Some(Confirmed::Holds(holder)) => return format!("by {holder}"),
        Some(Confirmed::CannotTell(holder)) => Some(format!(
            "by another process; the record names {holder}, which lockrun cannot confirm from here (`{ask}` can)"
        )),
        _ => None,
    };
    let Some(conflicting) = kernel_conflicts(lock, mode) else {
        // No kernel table to ask (not Linux): say what the record cannot.
        return unconfirmed.unwrap_or_else(|| match record {
            None => format!("by another process, which left no holder record (`{ask}` names it)"),
            Some(_) => format!("by another process (`{ask}` names it)"),
        });
    };
    if conflicting.is_empty() {
        // Released since the attempt, or hidden from this PID namespace.
        return unconfirmed.unwrap_or_else(|| match record {
            None => format!("by another process, which left no holder record (`{ask}` names it)"),
            Some(_) => format!("by another process (`{ask}` names it)"),
        });
    }
    if conflicting.iter().all(|l| l.mode == LockMode::Shared) {
        // Shared holders write no record: whatever record is there is
        // someone else's, past or forged. One table entry per lock taken.
        let n = conflicting.len();
        let whom = if n == 1 { "process" } else { "processes" };
        let them = if n == 1 { "it" } else { "them" };
        return format!("shared by {n} {whom} (`{ask}` names {them})");
    }
    // A lock of the kind that carries a record (exclusive flock(2), or an
    // OFD lock on the whole file) whose recorded holder cannot be checked
    // from here: the record may well be right, and is reported as such.
    let record_kind = |l: &KernelLock| {
        l.span.kind == platform::LockKind::Flock
            || (l.span.kind == platform::LockKind::Ofd && l.span.start == 0 && l.span.end.is_none())
    };
    if let Some(text) = unconfirmed
        && conflicting.iter().any(record_kind)
    {
        return text;
    }
    let (dev, ino) = lock.identity();
    let mut parts: Vec<String> = Vec::new();
    for theirs in conflicting.iter().take(MAX_NAMED) {
        let text = describe(theirs, lock.kind(), record.as_ref(), dev, ino);
        if !parts.contains(&text) {
            parts.push(text);
        }
    }
    let mut text = format!("by {}", parts.join(" and "));
    if conflicting.len() > MAX_NAMED {
        let more = conflicting.len() - MAX_NAMED;
        text.push_str(&format!(" and {more} more"));
    }
    // The table names one process per lock at most (none for an OFD
    // lock); `holder` names every process holding it.
    text.push_str(&format!(" (`{ask}` names every holder)"));
    text
}

/// How many of the kernel's entries a conflict message spells out.
const MAX_NAMED: usize = 3;

/// The kernel's entries for this file that hold (not wait for) a lock the
/// attempt in `mode` conflicts with: same family (flock(2), or fcntl's OFD
/// and POSIX locks, which exclude each other), overlapping bytes, not both
/// shared. `None` where there is no table to read.
fn kernel_conflicts(lock: &LockFile, mode: LockMode) -> Option<Vec<KernelLock>> {
    let (dev, ino) = lock.identity();
    // Matched as the kernel lists the file (btrfs, overlays): through our
    // own descriptor, so no path is looked up again.
    let id = platform::lock_id(lock.file()).unwrap_or_else(|| platform::stat_lock_id(dev, ino));
    let table = platform::kernel_locks(id).ok()?;
    let ours = lock.kind();
    Some(
        table
            .locks
            .into_iter()
            .filter(|l| !l.waiting && overlaps(ours, l))
            .filter(|l| mode == LockMode::Exclusive || l.mode == LockMode::Exclusive)
            .collect::<Vec<_>>(),
    )
    .map(|mut locks| {
        // In the order of the bytes they cover, as a person reads them.
        locks.sort_by_key(|l| (l.span.start, l.span.end.is_none(), l.span.end));
        locks
    })
}

/// Whether a lock the kernel lists is one a lock of kind `ours` would
/// contend with, whatever the modes.
fn overlaps(ours: LockKind, theirs: &KernelLock) -> bool {
    use platform::LockKind as Seen;
    match ours {
        LockKind::Nothing => false,
        LockKind::Flock => theirs.span.kind == Seen::Flock,
        LockKind::Ofd { start, len } => {
            // Length 0 runs to the end of the file; so does a range whose
            // last byte would not fit in a u64 (the parser keeps it in
            // off_t, so that is never reached).
            let end = match len {
                0 => None,
                len => start.checked_add(len - 1),
            };
            theirs.span.kind != Seen::Flock
                && theirs.span.end.is_none_or(|e| e >= start)
                && end.is_none_or(|e| theirs.span.start <= e)
        }
    }
}

/// One kernel entry in words.
fn describe(
    theirs: &KernelLock,
    ours: LockKind,
    record: Option<&Record>,
    dev: u64,
    ino: u64,
) -> String {
    let shared = match theirs.mode {
        LockMode::Shared => "shared ",
        LockMode::Exclusive => "",
    };
    let range = display::byte_range(theirs.span.start, theirs.span.end);
    match theirs.span.kind {
        // A POSIX lock belongs to the process the table names, which holds
        // it until it exits or closes the file: that pid is the holder.
        platform::LockKind::Posix if theirs.pid > 0 => format!(
            "a {shared}POSIX lock of pid {} ({}) on {range}",
            theirs.pid,
            command_of(theirs.pid)
        ),
        platform::LockKind::Posix => {
            format!("a {shared}POSIX lock of a process outside this PID namespace on {range}")
        }
        // The table names no process for an OFD lock (pid -1): it belongs
        // to an open file description, which any number may share.
        platform::LockKind::Ofd => format!("an {shared}OFD lock on {range}"),
        platform::LockKind::Flock => by_caller(theirs, ours, record, dev, ino),
    }
}

/// An exclusive flock(2) lock: the table names the process that *called*
/// flock, which may since have exited, leaving it to a child that
/// inherited the descriptor. Named only if its descriptors show it still
/// holds the lock.
fn by_caller(
    theirs: &KernelLock,
    ours: LockKind,
    record: Option<&Record>,
    dev: u64,
    ino: u64,
) -> String {
    let pid = theirs.pid;
    if pid <= 0 {
        return "a process outside this PID namespace".to_owned();
    }
    let no_record = if record.is_none() {
        ", which left no holder record"
    } else {
        ""
    };
    match platform::process_locks_on(pid, dev, ino) {
        Some(locks) if locks.iter().any(|l| overlaps(ours, l)) => {
            format!("pid {pid} ({}){no_record}", command_of(pid))
        }
        None => format!(
            "pid {pid} ({}){no_record}, as the kernel's lock table names who took it \
             (another user's process, whose descriptors lockrun cannot see: it may have \
             passed the lock on to a child)",
            command_of(pid)
        ),
        Some(_) => {
            // The caller let go or exited. If it is the run the record
            // names, the lock is that run's, kept by a process that
            // inherited its descriptor.
            let recorded = record.filter(|r| {
                [r.pid, r.lockrun_pid]
                    .into_iter()
                    .flatten()
                    .any(|p| p == i64::from(pid))
            });
            match recorded {
                Some(r) => format!(
                    "a process the record does not name (it names {} ({}), which is gone; \
                     a background child of it may hold the lock)",
                    r.pid
                        .map_or_else(|| "a process".to_owned(), |pid| format!("pid {pid}")),
                    display::record_command(r)
                ),
                None => format!(
                    "a process that inherited it from pid {pid}, which no longer holds it{no_record}"
                ),
            }
        }
    }
}

/// A process's command line for a message, escaped; `?` once it is gone.
fn command_of(pid: i32) -> String {
    platform::process_cmdline(pid)
        .map(|argv| display::command(&argv))
        .unwrap_or_else(|| "?".to_owned())
}

/// `lockrun holder PATH` for the file really locked: in fd mode the label is
/// "descriptor 9", and the file is the one behind it.
fn holder_command(lock: &LockFile, label: &str) -> String {
    use crate::platform::AsFd;
    let same_file = |path: &std::path::Path| {
        let (Ok(named), Ok(ours)) = (std::fs::metadata(path), lock.file().metadata()) else {
            return false;
        };
        crate::platform::same_file(&named, &ours)
    };
    if same_file(lock.path()) {
        return format!("lockrun holder {label}");
    }
    match crate::platform::descriptor_path(lock.file().as_fd()) {
        Some(real) => format!(
            "lockrun holder {}",
            display::command(&[real.to_string_lossy().into_owned()])
        ),
        None => format!("lockrun holder {label}"),
    }
}

fn current_record(file: &std::fs::File) -> Option<Record> {
    Record::parse(&record::read_content(file).ok()?)
}

enum Confirmed {
    /// The recorded process (or its lockrun) holds a lock on this file
    /// that this contender's lock conflicts with.
    Holds(String),
    /// It is alive, but its descriptors cannot be looked at (another
    /// user's) or its pid is not one of ours (another host or PID
    /// namespace).
    CannotTell(String),
    /// Released, or its process is gone.
    Gone,
    /// Alive, and holds no lock on this file that conflicts with ours (a
    /// stale record, a forged one, or another range's or kind's holder).
    NotHolding,
}

fn confirmed(record: &Record, (dev, ino): (u64, u64), ours: LockKind) -> Confirmed {
    if record.is_released() {
        return Confirmed::Gone;
    }
    let summary = || display::holder_summary(record);
    match record.holder_liveness() {
        Liveness::Dead => return Confirmed::Gone,
        Liveness::CannotTell => return Confirmed::CannotTell(summary()),
        Liveness::Alive => {}
    }
    let mut unknown = false;
    for pid in [record.pid, record.lockrun_pid].into_iter().flatten() {
        let Ok(pid) = i32::try_from(pid) else {
            continue;
        };
        match platform::process_locks_on(pid, dev, ino) {
            Some(locks) if locks.iter().any(|l| overlaps(ours, l)) => {
                return Confirmed::Holds(summary());
            }
            Some(_) => {}
            None => unknown = true,
        }
    }
    if unknown {
        Confirmed::CannotTell(summary())
    } else {
        Confirmed::NotHolding
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::LockSpan;

    fn seen(kind: platform::LockKind, start: u64, end: Option<u64>) -> KernelLock {
        KernelLock {
            pid: 7,
            mode: LockMode::Exclusive,
            waiting: false,
            span: LockSpan { kind, start, end },
        }
    }

    #[test]
    fn only_locks_of_the_same_family_on_shared_bytes_conflict() {
        use platform::LockKind::{Flock, Ofd, Posix};
        let range = LockKind::Ofd { start: 10, len: 5 };
        assert!(overlaps(LockKind::Flock, &seen(Flock, 0, None)));
        assert!(!overlaps(LockKind::Flock, &seen(Posix, 0, None)));
        assert!(!overlaps(range, &seen(Flock, 0, None)));
        assert!(overlaps(range, &seen(Posix, 0, None)));
        assert!(overlaps(range, &seen(Ofd, 14, Some(20))));
        assert!(overlaps(range, &seen(Ofd, 0, Some(10))));
        assert!(!overlaps(range, &seen(Ofd, 0, Some(9))));
        assert!(!overlaps(range, &seen(Posix, 15, None)));
        let to_the_end = LockKind::Ofd { start: 100, len: 0 };
        assert!(overlaps(to_the_end, &seen(Posix, 1 << 40, Some(1 << 41))));
        assert!(!overlaps(to_the_end, &seen(Posix, 0, Some(99))));
        assert!(!overlaps(LockKind::Nothing, &seen(Flock, 0, None)));
    }
}
