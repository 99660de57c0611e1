//! Starting the command and reaping it: the same for every backend.

use crate::display;
use crate::exit_codes::{self, Failure};
use crate::persona;
use crate::run::signals;
use std::ffi::OsStr;
use std::io;
use std::process::ExitStatus;

/// How lockrun should end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Status(u8),
    /// The command died by this signal: lockrun re-raises it, after the lock
    /// has been released.
    Signal(i32),
}

impl Ending {
    /// Ends lockrun as the command ended. A code beyond a byte (only
    /// Windows has them: 32 bits, an NTSTATUS for a crash) is 255, never
    /// wrapped into one that could read as success or busy; lockrun.exe
    /// exits with the whole code (`platform::windows::last_exit_code`).
    pub fn of(status: ExitStatus) -> Ending {
        match (status.code(), crate::platform::exit_signal(status)) {
            (Some(code), _) => Ending::Status(u8::try_from(code).unwrap_or(u8::MAX)),
            (None, Some(sig)) => Ending::Signal(sig),
            (None, None) => Ending::Status(exit_codes::OS_ERROR),
        }
    }
    /// The exit status a shell sees: 128+N for the signal N lockrun dies by.
    pub fn status(self) -> u8 {
        match self {
            Ending::Status(status) => status,
            Ending::Signal(sig) => exit_codes::for_signal(sig),
        }
    }
}

/// Waits for the command and reaps it. In between, while the command is a
/// zombie, its pid cannot be reused: signal forwarding is switched off
/// then, before the pid is freed, and `while_zombie` can still read
/// /proc/PID (its start time, say) or stop watching it.
/// `reap_orphans`: lockrun adopted the command's orphans
/// (`platform::adopt_orphans`), which it reaps as they exit meanwhile.
pub fn wait_for_command<T>(
    pid: i32,
    reap_orphans: bool,
    while_zombie: impl FnOnce(i32) -> T,
) -> Result<(ExitStatus, T), Failure> {
    let cannot = |e: io::Error| {
        Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot wait for the command: {e}"),
        )
    };
    if !(reap_orphans && crate::platform::wait_reaping_orphans(pid)) {
        crate::platform::wait_until_exited(pid).map_err(cannot)?;
    }
    signals::command_exited();
    let seen = while_zombie(pid);
    match crate::platform::reap(pid).map_err(cannot)? {
        Some(status) => Ok((status, seen)),
        None => Err(Failure::new(
            exit_codes::OS_ERROR,
            "cannot wait for the command: it is gone".to_owned(),
        )),
    }
}

/// Says why the command could not be started; returns the shell's status
/// for it: 127 not found, 126 anything else.
pub fn report_spawn_failure(program: &OsStr, e: &io::Error) -> u8 {
    let program = display::escape(&program.to_string_lossy());
    if e.kind() == io::ErrorKind::NotFound {
        crate::say!("{}: {program}: command not found", persona::name());
        persona::exec_failed(exit_codes::NOT_FOUND)
    } else {
        crate::say!("{}: {program}: cannot execute: {e}", persona::name());
        persona::exec_failed(exit_codes::CANNOT_EXECUTE)
    }
}
