//! The run form on a Windows lock file: the one run flow (`run::run_with`)
//! on the Windows file backend (`backend::file_windows`), as a lock URL's
//! run is the same flow on its backend. What is Windows' own here is only
//! the command line's shape: `-c` through `%COMSPEC% /c`, and the exit
//! code, which a Windows command gives in 32 bits.

use super::cli::{Command, RunOptions};
use crate::backend::RunSettings;
use crate::backend::file_windows::{FileBackend, Opening, set::LockSet, slots::SlotsBackend};
use crate::display;
use crate::exit_codes::Failure;
use crate::observe::{Event, Watch};
use crate::run::{Ending, Flow, wait::WaitPolicy};
use std::time::Duration;

/// After `--max-time`: Linux's grace before SIGKILL. A job is ended at
/// once on Windows (`platform::windows::stop_all`); the value is moot.
const KILL_GRACE: Duration = Duration::from_secs(5);

pub fn run(opts: &RunOptions) -> Result<i32, Failure> {
    let settings = RunSettings {
        command: command_line(&opts.command),
        conflict_status: opts.conflict_exit_code,
        quiet: opts.quiet,
        verbose: opts.verbose,
        write_record: !opts.no_record,
        forward_signals: false,
        max_time: opts.max_time.as_ref().map(|(limit, _)| *limit),
        kill_grace: KILL_GRACE,
        skip_if_succeeded_within: opts.skip_if_succeeded_within,
        observe: opts.observe.clone(),
    };
    let nonblocking = opts.timeout.is_some_and(|t| t.is_zero());
    let mut flow = Flow {
        label: display::escape(&opts.lockfile.to_string_lossy()),
        lockfile: std::path::absolute(&opts.lockfile)
            .unwrap_or_else(|_| opts.lockfile.clone())
            .into_os_string(),
        lock_url: None,
        mode: opts.mode,
        wait: WaitPolicy {
            nonblocking,
            timeout: opts.timeout,
            poll: None,
        },
        exec_in_place: false,
        settings: &settings,
        also: Vec::new(),
        #[cfg(feature = "lock-urls")]
        watchdog: None,
    };
    let opening = Opening {
        path: &opts.lockfile,
        mode: opts.mode,
        nonblocking,
    };
    if !opts.also.is_empty() {
        let set = unopened(LockSet::open(&opening, &opts.also, absolute), &flow)?;
        flow.also = set.also_of_primary();
        return Ok(exit_code(crate::run::run_with(set, &flow)?));
    }
    let ending = match opts.slots {
        Some(n) => crate::run::run_with(unopened(SlotsBackend::open(&opening, n), &flow)?, &flow),
        None => crate::run::run_with(unopened(FileBackend::open(&opening), &flow)?, &flow),
    }?;
    Ok(exit_code(ending))
}

/// A lock file's name in the records of an `--also` set.
fn absolute(path: &std::path::Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// The command to start; `-c STRING` is `%COMSPEC% /c STRING`, which the
/// platform's `command_for` passes to cmd.exe as given.
pub fn command_line(command: &Command) -> Vec<std::ffi::OsString> {
    match command {
        Command::Argv(argv) => argv.clone(),
        Command::Shell(string) => {
            let comspec = std::env::var_os("COMSPEC").unwrap_or_else(|| "cmd.exe".into());
            vec![comspec, "/c".into(), string.clone()]
        }
    }
}

/// lockrun.exe's exit code: the run's status, or the command's own code
/// where that is beyond a byte (the run flow keeps it as 255).
pub fn exit_code(ending: Ending) -> i32 {
    let status = ending.status();
    match crate::platform::windows::last_exit_code() {
        Some(code) if status == u8::MAX && u8::try_from(code).is_err() => code,
        _ => i32::from(status),
    }
}

/// A lock file that could not even be opened (a reparse point, a
/// directory, a hard link): the monitoring still hears of the run, as an
/// `error`, as on Linux.
fn unopened<B>(opened: Result<B, Failure>, flow: &Flow) -> Result<B, Failure> {
    if let (Err(failure), Some(observers)) = (&opened, &flow.settings.observe) {
        let name = flow.lockfile.to_string_lossy().into_owned();
        Watch::begin(observers, name).ended(Event::Error, failure.status, Duration::ZERO);
    }
    opened
}
