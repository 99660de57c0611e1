//! What a person sees while lockrun waits: with `-v` a line saying who holds
//! the lock, and on a terminal a live status line (after a second, so quick
//! waits stay silent) that disappears once the lock is taken. Never a live
//! line when stderr is a file or a pipe: cron mail and logs get no `\r`.

use crate::display;
use crate::identity::{self, Liveness};
use crate::lock::LockFile;
use crate::record::{self, Record};
use crate::wait::WaitObserver;
use std::io::Write;
use std::time::Duration;

pub struct Progress<'a> {
    lock: &'a LockFile,
    label: String,
    verbose: bool,
    quiet: bool,
    /// Whether stderr is a terminal, asked only once waiting begins.
    live: Option<bool>,
    timeout: Option<Duration>,
    announced: bool,
    line_shown: bool,
}

impl<'a> Progress<'a> {
    pub fn new(
        lock: &'a LockFile,
        label: String,
        verbose: bool,
        quiet: bool,
        timeout: Option<Duration>,
    ) -> Self {
        Progress {
            lock,
            label,
            verbose,
            quiet,
            live: None,
            timeout,
            announced: false,
            line_shown: false,
        }
    }
}

impl Progress<'_> {
    fn is_live(&mut self) -> bool {
        let quiet = self.quiet;
        *self.live.get_or_insert_with(|| {
            use std::io::IsTerminal;
            !quiet && std::io::stderr().is_terminal()
        })
    }
}

impl WaitObserver for Progress<'_> {
    fn waiting(&mut self, waited: Duration) {
        if self.verbose && !self.announced {
            self.announced = true;
            let held = conflict_holder(self.lock, &self.label);
            eprintln!("lockrun: waiting for {}, held by {held}", self.label);
        }
        if self.is_live() && waited >= Duration::from_secs(1) {
            let holder = held_by(self.lock).unwrap_or_else(|| "another process".to_owned());
            let limit = self
                .timeout
                .map(|t| format!(" / {}", display::span(t)))
                .unwrap_or_default();
            let line = status_line(
                &self.label,
                &holder,
                &format!("{}{limit}", display::span(waited)),
                terminal_columns(),
            );
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K{line}");
            let _ = err.flush();
            self.line_shown = true;
        }
    }

    fn needs_ticks(&mut self) -> bool {
        self.is_live()
    }

    fn done(&mut self) {
        if self.line_shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

fn terminal_columns() -> usize {
    use std::os::fd::AsFd;
    crate::platform::terminal_columns(std::io::stderr().as_fd()).unwrap_or(80)
}

/// `lockrun: waiting for LABEL (held by HOLDER): 3.2s / 10s`, no wider than
/// the terminal less one column: a status line that wraps leaves a row of
/// junk behind at every refresh. The holder gives way first, then the
/// label, so that the time waited stays in view. (Every character counts
/// as one column: label and holder are escaped.)
fn status_line(label: &str, holder: &str, time: &str, columns: usize) -> String {
    let room = columns.saturating_sub(1).max(1);
    let width = |parts: &[&str]| parts.iter().map(|p| p.chars().count()).sum::<usize>();
    let cut = |text: &str, keep: usize| -> String {
        if text.chars().count() <= keep {
            text.to_owned()
        } else if keep == 0 {
            String::new()
        } else {
            text.chars().take(keep - 1).collect::<String>() + "…"
        }
    };
    let frame = ["lockrun: waiting for ", " (held by ", "): "];
    let fixed = width(&frame) + width(&[time]);
    let label_width = label.chars().count();
    let holder_room = room.saturating_sub(fixed + label_width).max(8);
    let holder = cut(holder, holder_room);
    let label_room = room.saturating_sub(fixed + holder.chars().count());
    let label = cut(label, label_room);
    let line = format!("lockrun: waiting for {label} (held by {holder}): {time}");
    if line.chars().count() <= room {
        line
    } else {
        line.chars().take(room).collect()
    }
}

/// Who holds the lock according to its record, if the record names a live
/// holder that the kernel confirms. Reads the record, /proc/PID/stat and
/// the recorded processes' descriptors, never the kernel's lock table or
/// the inspection code: that is `holder`'s job, not the run path's.
pub fn held_by(lock: &LockFile) -> Option<String> {
    match confirmed(lock, &current_record(lock)?) {
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
    let Some(record) = current_record(lock) else {
        return format!("another process, which left no holder record (`{ask}` names it)");
    };
    match confirmed(lock, &record) {
        Confirmed::Holds(holder) => holder,
        Confirmed::CannotTell(holder) => format!(
            "another process; the record names {holder}, which lockrun cannot confirm from here (`{ask}` can)"
        ),
        // A released or dead record whose lock is still held: typically a
        // background child of that command inherited it.
        Confirmed::Gone => format!(
            "a process the record does not name (it names pid {} ({}), which is gone; \
             a background child of it may hold the lock): `{ask}` names it",
            record.pid.unwrap_or(0),
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

fn current_record(lock: &LockFile) -> Option<Record> {
    Record::parse(&record::read_content(lock.file()).ok()?)
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

fn confirmed(lock: &LockFile, record: &Record) -> Confirmed {
    use std::os::unix::fs::MetadataExt;
    if record.is_released() {
        return Confirmed::Gone;
    }
    let summary = || display::holder_summary(record);
    match identity::record_holder(record) {
        Liveness::Dead => return Confirmed::Gone,
        Liveness::CannotTell => return Confirmed::CannotTell(summary()),
        Liveness::Alive => {}
    }
    let Ok(ours) = lock.file().metadata() else {
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

#[cfg(test)]
mod tests {
    use super::status_line;

    #[test]
    fn the_status_line_fits_and_keeps_the_time() {
        let holder = "pid 4243 (backup.sh --full --with-a-long-argument) since 02:00:03 (13m ago)";
        let label = "/var/lock/a-rather-long-directory-name/backup.lock";
        for columns in [20, 40, 60, 80, 120, 300] {
            let line = status_line(label, holder, "3.2s / 10s", columns);
            assert!(line.chars().count() < columns, "{columns}: {line}");
            if columns >= 60 {
                assert!(line.ends_with("): 3.2s / 10s"), "{columns}: {line}");
            }
        }
        let wide = status_line(label, holder, "3.2s", 300);
        assert!(wide.contains(holder) && wide.contains(label), "{wide}");
    }
}
