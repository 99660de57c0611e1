//! lockrun invoked as `flock` (a link or copy of the binary named
//! `flock`) behaves as util-linux flock(1) wherever the two differ: exit
//! statuses, what is printed and where. The locking, the safety rules and
//! the holder record stay lockrun's.
//!
//! The name is process-wide, as glibc's `program_invocation_short_name`
//! that flock(1) itself prints: set once by `main` from argv[0], read by
//! whatever prints a line or picks a status. The parser decides from
//! argv[0] on its own (`is_flock_name`), so it stays a pure function.

use crate::display;
use crate::mode::LockMode;
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static AS_FLOCK: AtomicBool = AtomicBool::new(false);

/// flock(1)'s "lock not acquired" status (its `-E` default).
pub const FLOCK_CONFLICT: u8 = 1;
/// flock(1) when the lock call itself fails (EX_DATAERR).
pub const FLOCK_LOCK_FAILED: u8 = 65;
/// flock(1) when its standard output cannot be written at exit.
pub const FLOCK_WRITE_ERROR: u8 = 1;
/// flock(1) when the command cannot be executed (EX_UNAVAILABLE).
pub const FLOCK_EXEC_FAILED: u8 = 69;

/// Whether argv[0] names flock: its last component is `flock`.
pub fn is_flock_name(argv0: Option<&OsStr>) -> bool {
    argv0
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|name| name == "flock")
}

/// Called once by `main`, before anything is printed.
pub fn set_from_argv0(argv0: Option<&OsStr>) {
    AS_FLOCK.store(is_flock_name(argv0), Ordering::Relaxed);
}

pub fn is_flock() -> bool {
    AS_FLOCK.load(Ordering::Relaxed)
}

/// The name every message starts with.
pub fn name() -> &'static str {
    if is_flock() { "flock" } else { "lockrun" }
}

/// flock(1)'s stdout lines not yet written. flock(1) prints them with
/// stdio: line by line on a terminal, otherwise buffered until it exits,
/// so after the command's own output (and never, with `-F`, whose exec
/// drops the buffer). Held here the same way, for `flush_stdout` at exit.
static PENDING: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn print_flock_line(line: std::fmt::Arguments<'_>) {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_fmt(line);
        let _ = out.flush();
    } else if let Ok(mut pending) = PENDING.lock() {
        let _ = pending.write_fmt(line);
    }
}

/// Writes what `print_flock_line` held back; called as lockrun exits.
/// An error is flock(1)'s "write error" at exit (its `close_stdout`),
/// which makes it exit 1 whatever the command's status was.
pub fn flush_stdout() -> std::io::Result<()> {
    let Ok(mut pending) = PENDING.lock() else {
        return Ok(());
    };
    if pending.is_empty() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_all(&pending).and_then(|()| out.flush());
    pending.clear();
    written
}

/// `-v` once the lock is held. flock(1) prints its line on stdout.
pub fn say_acquired(mode: LockMode, label: &str, waited: Duration) {
    if is_flock() {
        print_flock_line(format_args!(
            "flock: getting lock took {}.{:06} seconds\n",
            waited.as_secs(),
            waited.subsec_micros()
        ));
    } else {
        crate::say!(
            "lockrun: took the {} lock on {label} after {}",
            mode.as_str(),
            display::span(waited)
        );
    }
}

/// `-v` just before the command starts: flock(1) names it on stdout;
/// lockrun has said enough.
pub fn say_executing(program: &OsStr) {
    if is_flock() {
        print_flock_line(format_args!(
            "flock: executing {}\n",
            program.to_string_lossy()
        ));
    }
}

/// flock(1) is silent when the lock is not acquired, except under
/// `--verbose`. Whether a wait timed out is told by its having waited at
/// all: `-n` (and `-w 0`) never waits.
pub fn say_not_acquired(verbose: bool, waited: Duration) {
    if is_flock() && verbose {
        if waited.is_zero() {
            crate::say!("flock: failed to get lock");
        } else {
            crate::say!("flock: timeout while waiting to get lock");
        }
    }
}

/// An OS error as C's strerror(3) words it, which is how flock(1) ends its
/// messages: Rust's `Display` adds " (os error N)".
pub fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(n) => text
            .strip_suffix(&format!(" (os error {n})"))
            .map_or(text.clone(), str::to_owned),
        None => text,
    }
}

/// The status for a command that could not be started: the shell's 126 or
/// 127 for lockrun, EX_UNAVAILABLE for flock(1).
pub fn exec_failed(status: u8) -> u8 {
    if is_flock() {
        FLOCK_EXEC_FAILED
    } else {
        status
    }
}

/// The status when the lock call itself failed (not a conflict).
pub fn lock_failed(status: u8) -> u8 {
    if is_flock() {
        FLOCK_LOCK_FAILED
    } else {
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_last_component_named_flock_is_flock() {
        for name in ["flock", "/usr/bin/flock", "./flock", "bin/flock"] {
            assert!(is_flock_name(Some(OsStr::new(name))), "{name}");
        }
        for name in ["lockrun", "/usr/bin/lockrun", "flock2", "flock/lockrun", ""] {
            assert!(!is_flock_name(Some(OsStr::new(name))), "{name}");
        }
        assert!(!is_flock_name(None));
    }
}
