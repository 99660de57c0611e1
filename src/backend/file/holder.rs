//! Who holds a lock file, as the run path may tell it: from the record in
//! the file, believed only where the kernel confirms it (fdinfo of the
//! recorded processes), never from the kernel's whole lock table, which is
//! `holder`'s job.

use crate::backend::file::lock::LockFile;
use crate::display;
use crate::identity::Liveness;
use crate::record::{self, Record};

/// Who holds the lock according to its record, if the record names a live
/// holder that the kernel confirms. Reads the record, /proc/PID/stat and
/// the recorded processes' descriptors, never the kernel's lock table or
/// the inspection code: that is `holder`'s job, not the run path's.
pub fn held_by(lock: &LockFile) -> Option<String> {
    held_by_file(lock.file())
}

/// [`held_by`] for a lock file that this process has not opened to lock:
/// opened to read (never created, never a FIFO), as `holder` opens one.
pub fn held_by_path(path: &std::path::Path) -> Option<String> {
    held_by_file(&super::lock::open_to_read(path).ok()??)
}

fn held_by_file(file: &std::fs::File) -> Option<String> {
    match confirmed(file, &current_record(file)?) {
        Confirmed::Holds(holder) => Some(holder),
        Confirmed::CannotTell(_) | Confirmed::Gone | Confirmed::NotHolding => None,
    }
}

/// Names the holder for a conflict message, from one read of the record.
/// A record names its holder only when the kernel confirms that process
/// (or the lockrun that started it) holds this file: anyone who can write
/// the lock file can write a record blaming pid 1. Without that, the
/// holder is named as well as the run path can: `holder` can name it from
/// the kernel.
pub fn conflict_holder(lock: &LockFile, label: &str) -> String {
    let ask = holder_command(lock, label);
    let Some(record) = current_record(lock.file()) else {
        return format!("another process, which left no holder record (`{ask}` names it)");
    };
    match confirmed(lock.file(), &record) {
        Confirmed::Holds(holder) => holder,
        Confirmed::CannotTell(holder) => format!(
            "another process; the record names {holder}, which lockrun cannot confirm from here (`{ask}` can)"
        ),
        // A released or dead record whose lock is still held: typically a
        // background child of that command inherited it.
        Confirmed::Gone => format!(
            "a process the record does not name (it names {} ({}), which is gone; \
             a background child of it may hold the lock): `{ask}` names it",
            record
                .pid
                .map_or_else(|| "a process".to_owned(), |pid| format!("pid {pid}")),
            display::record_command(&record)
        ),
        // Alive but not holding: a stale record, or a forged one. Its pid
        // is not repeated, not even to deny it.
        Confirmed::NotHolding => format!(
            "a process the record does not name (the process it names does not hold the lock): \
             `{ask}` names it"
        ),
    }
}

/// `lockrun holder PATH` for the file really locked: in fd mode the label is
/// "descriptor 9", and the file is the one behind it.
fn holder_command(lock: &LockFile, label: &str) -> String {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let same_file = |path: &std::path::Path| {
        let (Ok(named), Ok(ours)) = (std::fs::metadata(path), lock.file().metadata()) else {
            return false;
        };
        named.dev() == ours.dev() && named.ino() == ours.ino()
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
    /// The recorded process (or its lockrun) holds a lock on this file.
    Holds(String),
    /// It is alive, but its descriptors cannot be looked at (another
    /// user's) or its pid is not one of ours (another host or PID
    /// namespace).
    CannotTell(String),
    /// Released, or its process is gone.
    Gone,
    /// Alive, and holds no lock on this file.
    NotHolding,
}

fn confirmed(file: &std::fs::File, record: &Record) -> Confirmed {
    use std::os::unix::fs::MetadataExt;
    if record.is_released() {
        return Confirmed::Gone;
    }
    let summary = || display::holder_summary(record);
    match record.holder_liveness() {
        Liveness::Dead => return Confirmed::Gone,
        Liveness::CannotTell => return Confirmed::CannotTell(summary()),
        Liveness::Alive => {}
    }
    let Ok(ours) = file.metadata() else {
        return Confirmed::CannotTell(summary());
    };
    let mut unknown = false;
    for pid in [record.pid, record.lockrun_pid].into_iter().flatten() {
        let Ok(pid) = i32::try_from(pid) else {
            continue;
        };
        match crate::platform::process_holds(pid, ours.dev(), ours.ino()) {
            Some(true) => return Confirmed::Holds(summary()),
            Some(false) => {}
            None => unknown = true,
        }
    }
    if unknown {
        Confirmed::CannotTell(summary())
    } else {
        Confirmed::NotHolding
    }
}
