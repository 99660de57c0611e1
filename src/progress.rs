//! What a person sees while lockrun waits: with `-v` a line saying who holds
//! the lock, and on a terminal a live status line (after a second, so quick
//! waits stay silent) that disappears once the lock is taken. Never a live
//! line when stderr is a file or a pipe: cron mail and logs get no `\r`.

use crate::display;
use crate::identity::{self, Liveness};
use crate::lock::LockFile;
use crate::record::{self, Record};
use crate::run::wait::WaitObserver;
use std::io::Write;
use std::time::Duration;

pub struct Progress {
    label: String,
    verbose: bool,
    quiet: bool,
    /// Whether stderr is a terminal, asked only once waiting begins.
    live: Option<bool>,
    timeout: Option<Duration>,
    announced: bool,
    line_shown: bool,
}

impl Progress {
    pub fn new(label: String, verbose: bool, quiet: bool, timeout: Option<Duration>) -> Self {
        Progress {
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

impl Progress {
    fn is_live(&mut self) -> bool {
        let quiet = self.quiet;
        *self.live.get_or_insert_with(|| {
            use std::io::IsTerminal;
            !quiet && std::io::stderr().is_terminal()
        })
    }
}

impl WaitObserver for Progress {
    fn waiting(&mut self, waited: Duration, holder: &mut dyn FnMut() -> Option<String>) {
        if self.verbose && !self.announced {
            self.announced = true;
            let held = holder()
                .map(|h| format!("held by {h}"))
                .unwrap_or_else(|| "held by a process that left no holder record".to_owned());
            eprintln!("lockrun: waiting for {}, {held}", self.label);
        }
        if self.is_live() && waited >= Duration::from_secs(1) {
            let holder = holder().unwrap_or_else(|| "another process".to_owned());
            let limit = self
                .timeout
                .map(|t| format!(" / {}", display::span(t)))
                .unwrap_or_default();
            let mut line = format!(
                "lockrun: waiting for {} (held by {holder}): {}{limit}",
                self.label,
                display::span(waited)
            );
            if line.chars().count() > 200 {
                line = line.chars().take(200).collect();
            }
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

/// Who holds the lock according to its record, if the record names a live
/// holder. Reads only the record and /proc/PID/stat, never the kernel's lock
/// table: that is `holder`'s job, not the run path's.
pub fn held_by(lock: &LockFile) -> Option<String> {
    live_holder(&current_record(lock)?)
}

/// Names the holder for a conflict message, from one read of the record.
/// Without a live record the holder is named as well as the run path can:
/// `holder` can name it from the kernel.
pub fn conflict_holder(lock: &LockFile, label: &str) -> String {
    let record = current_record(lock);
    if let Some(holder) = record.as_ref().and_then(live_holder) {
        return holder;
    }
    match record {
        // A released or dead record whose lock is still held: typically a
        // background child of that command inherited it.
        Some(last) => format!(
            "a process the record does not name (it names pid {} ({}), which is gone; \
             a background child of it may hold the lock): `lockrun holder {label}` names it",
            last.pid.unwrap_or(0),
            display::record_command(&last)
        ),
        None => format!(
            "another process, which left no holder record (`lockrun holder {label}` names it)"
        ),
    }
}

fn current_record(lock: &LockFile) -> Option<Record> {
    Record::parse(&record::read_content(lock.file()).ok()?)
}

fn live_holder(record: &Record) -> Option<String> {
    if record.is_released() || identity::record_holder(record) == Liveness::Dead {
        return None;
    }
    Some(display::holder_summary(record))
}
