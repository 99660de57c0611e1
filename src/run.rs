//! Running the command under the lock: the heart of lockrun.
//!
//! Order matters and is the guarantee: open, lock, record, start the
//! command, wait for it, complete the record, release. The command inherits
//! the lock descriptor (unless `--close`), so if lockrun itself is killed,
//! even with SIGKILL, the lock lives on in the command until it exits: a
//! second instance of a job can never start beside a running one.

use crate::display;
use crate::exit_codes::{self, Failure};
use crate::identity::Me;
use crate::lock::{LockFile, LockMode};
use crate::platform::{self, CommandLine};
use crate::progress::{self, Progress};
use crate::record::{self, ChildRecord, Exit, Record};
use crate::signals;
use crate::wait::{self, NotAcquired, WaitPolicy};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub path: PathBuf,
    pub mode: LockMode,
    pub wait: WaitPolicy,
    pub conflict_status: u8,
    /// `-o`: the command does not inherit the lock.
    pub close_before_exec: bool,
    /// `-F`: become the command instead of waiting for it.
    pub exec_in_place: bool,
    pub command: Vec<OsString>,
    pub quiet: bool,
    pub verbose: bool,
    pub write_record: bool,
}

/// How lockrun should end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Status(u8),
    /// The command died by this signal: lockrun re-raises it, after the lock
    /// has been released.
    Signal(i32),
}

pub fn run(opts: &RunOptions) -> Result<Ending, Failure> {
    let lock = LockFile::open(&opts.path, !opts.close_before_exec)?;
    let label = display::escape(&opts.path.to_string_lossy());

    // Signals must be caught before the command exists, or a SIGTERM in
    // between would kill lockrun and never reach the command. With -F
    // there is nothing to forward to (the command will be us): handlers
    // are only needed if we have to wait, and `wait::acquire` installs
    // them then, so an uncontended -F run makes no sigaction call.
    if !opts.exec_in_place {
        signals::install_for_command()?;
    }

    // Everything that does not need the lock is prepared before taking it,
    // so that a waiter that gets the lock starts its command at once.
    let cwd = std::env::current_dir().ok();
    let wants_record = opts.write_record && opts.mode == LockMode::Exclusive;
    let mut prepared = wants_record
        .then(|| Record::starting(Me::gather(), &opts.command, cwd.as_deref(), opts.mode));
    // The record the command's process completes, serialised now with a
    // slot for the time the lock is taken.
    let child_record = match &mut prepared {
        Some(record) if !opts.exec_in_place => {
            record.acquired_at = Some(record::ACQUIRED_AT_SLOT.to_owned());
            Some(ChildRecord::new(record, &label))
        }
        _ => None,
    };
    let absolute = match &cwd {
        Some(cwd) if opts.path.is_relative() => cwd.join(&opts.path),
        _ => opts.path.clone(),
    };
    let env = [
        ("LOCKRUN_LOCKFILE", absolute.as_os_str()),
        ("LOCKRUN_MODE", OsStr::new(opts.mode.as_str())),
    ];
    let command = CommandLine::new(&opts.command, &env).map_err(|e| {
        Failure::new(
            exit_codes::USAGE,
            format!("cannot run {:?}: {e}", opts.command),
        )
    })?;

    let mut progress = Progress::new(
        &lock,
        label.clone(),
        opts.verbose,
        opts.quiet,
        opts.wait.timeout,
    );
    let waited = match wait::acquire(&lock, opts.mode, opts.wait, &mut progress) {
        Ok(acquired) => acquired,
        Err(not) => return not_acquired(not, &lock, &label, opts.quiet, opts.conflict_status),
    };
    if opts.verbose {
        eprintln!(
            "lockrun: took the {} lock on {label} after {}",
            opts.mode.as_str(),
            display::span(waited)
        );
    }

    let no_record = |reason: record::NoRecord| {
        if opts.verbose && opts.write_record {
            eprintln!(
                "lockrun: no holder record for {label}: {}",
                reason.explain()
            );
        }
    };
    let record = match prepared.take() {
        None => {
            no_record(record::NoRecord::Shared);
            None
        }
        Some(mut record) => match record::may_write(&lock) {
            Ok(file) => {
                record.acquired_at = Some(display::now_rfc3339());
                Some(Recording {
                    record,
                    file,
                    label: label.clone(),
                    failed: false,
                    verbose: opts.verbose,
                })
            }
            Err(reason) => {
                no_record(reason);
                None
            }
        },
    };

    if opts.exec_in_place {
        return Ok(exec_in_place(command, record));
    }

    let write_record = record
        .as_ref()
        .zip(child_record)
        .map(|(recording, mut child)| {
            let when = recording.record.acquired_at.as_deref().unwrap_or_default();
            if !child.stamp_acquired_at(when) {
                child = ChildRecord::new(&recording.record, &label);
            }
            (Arc::new(child), recording.file.as_raw_fd())
        });
    let told_by_child = write_record.as_ref().map(|(child, _)| Arc::clone(child));
    // SAFETY: the closure makes raw system calls on buffers prepared
    // above (ChildRecord::write_from_child). The descriptor stays open
    // until the command has exec'd (close-on-exec closes it only in the
    // command): `record` outlives the start.
    let started = unsafe {
        platform::start_command(&command, signals::handled(), move || {
            if let Some((child_record, fd)) = &write_record {
                child_record.write_from_child(BorrowedFd::borrow_raw(*fd));
            }
        })
    };
    let pid = match started {
        Ok(pid) => pid,
        Err(e) => {
            let status = report_spawn_failure(command.program(), &e);
            if let Some(recording) = record {
                recording.finish(None, Exit::code(status));
            }
            return Ok(Ending::Status(status));
        }
    };
    signals::command_started(pid);

    let (status, start) = wait_for_command(pid, |pid| {
        let told = told_by_child.as_ref()?;
        told.start_seen()
            .or_else(|| platform::process_start_time(pid))
    })?;
    if let Some(recording) = record {
        recording.finish(Some((pid, start)), Exit::of(status));
    }
    drop(lock);
    Ok(Ending::of(status))
}

fn not_acquired(
    not: NotAcquired,
    lock: &LockFile,
    label: &str,
    quiet: bool,
    conflict: u8,
) -> Result<Ending, Failure> {
    match not {
        NotAcquired::Busy { waited } => {
            if !quiet {
                let holder = progress::conflict_holder(lock, label);
                eprintln!("lockrun: {}", display::busy(label, &holder, waited));
            }
            Ok(Ending::Status(conflict))
        }
        NotAcquired::Interrupted(sig) => Ok(Ending::Status(exit_codes::for_signal(sig))),
        NotAcquired::Failed(e) => Err(Failure::io(
            exit_codes::OS_ERROR,
            "cannot lock",
            lock.path(),
            &e,
        )),
    }
}

/// `-F`: the record names our own pid, which the command keeps across exec;
/// there is nobody left to write a release, so the record has none.
fn exec_in_place(command: CommandLine, record: Option<Recording>) -> Ending {
    // A signal caught since the lock was taken has nobody to be forwarded
    // to once we exec (the handlers are reset): honour it now, before
    // anything is written or started.
    if let Some(sig) = signals::pending() {
        return Ending::Status(exit_codes::for_signal(sig));
    }
    let me = std::process::id() as i32;
    let record = record.map(|mut recording| {
        recording.record.pid = Some(i64::from(me));
        recording.record.pid_start = platform::own_start_time_without_allocating();
        if let Err(e) = record::write(&recording.file, &recording.record.to_line(), None) {
            warn_record_failed(&recording.label, &e);
            recording.failed = true;
        }
        recording
    });
    let error = command.exec();
    let status = report_spawn_failure(command.program(), &error);
    if let Some(recording) = record {
        recording.finish(None, Exit::code(status));
    }
    Ending::Status(status)
}

/// Waits for the command and reaps it. In between, while the command is a
/// zombie, its pid cannot be reused: signal forwarding is switched off
/// then, before the pid is freed, and `while_zombie` can still read
/// /proc/PID (its start time, say).
pub(crate) fn wait_for_command<T>(
    pid: i32,
    while_zombie: impl FnOnce(i32) -> T,
) -> Result<(ExitStatus, T), Failure> {
    use rustix::process::{Pid, WaitId, WaitIdOptions, WaitOptions, waitid, waitpid};
    let Some(raw) = Pid::from_raw(pid) else {
        return Err(Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot wait for the command: bad pid {pid}"),
        ));
    };
    let exited = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    while let Err(rustix::io::Errno::INTR) = waitid(WaitId::Pid(raw), exited) {}
    signals::command_exited();
    let seen = while_zombie(pid);
    let status = loop {
        match waitpid(Some(raw), WaitOptions::empty()) {
            Ok(Some((_, status))) => break status,
            Err(rustix::io::Errno::INTR) => continue,
            Ok(None) => {
                return Err(Failure::new(
                    exit_codes::OS_ERROR,
                    "cannot wait for the command: it is gone".to_owned(),
                ));
            }
            Err(e) => {
                return Err(Failure::new(
                    exit_codes::OS_ERROR,
                    format!("cannot wait for the command: {}", io::Error::from(e)),
                ));
            }
        }
    };
    Ok((ExitStatus::from_raw(status.as_raw()), seen))
}

impl Ending {
    /// Ends lockrun as the command ended.
    pub fn of(status: ExitStatus) -> Ending {
        match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Status(code as u8),
            (None, Some(sig)) => Ending::Signal(sig),
            (None, None) => Ending::Status(exit_codes::OS_ERROR),
        }
    }
}

/// A record being kept for this run, and the writable descriptor for it.
struct Recording {
    record: Record,
    file: File,
    label: String,
    /// A write failed and the user was told: do not write again.
    failed: bool,
    verbose: bool,
}

impl Recording {
    /// Adds the release to the record: who ran, when it ended, how.
    fn finish(mut self, child: Option<(i32, Option<u64>)>, exit: Exit) {
        // An empty file here means the child could not write the record and
        // has already said so: one warning is enough.
        let len_now = self.file.metadata().map(|m| m.len()).ok();
        let child_failed = child.is_some() && len_now == Some(0);
        if self.failed || child_failed {
            return;
        }
        if let Some((pid, start)) = child {
            self.record.pid = Some(i64::from(pid));
            self.record.pid_start = start;
        }
        self.record.released_at = Some(display::now_rfc3339());
        self.record.exit = Some(exit);
        match record::write_release(&self.file, &self.record) {
            Ok(record::Release::Written) => {}
            Ok(record::Release::LeftAlone(why)) if self.verbose => {
                eprintln!("lockrun: left {} as the command left it: {why}", self.label);
            }
            Ok(record::Release::LeftAlone(_)) => {}
            Err(e) => warn_record_failed(&self.label, &e),
        }
    }
}

fn warn_record_failed(label: &str, e: &io::Error) {
    eprintln!(
        "lockrun: could not write the holder record to {label}: {e} (the lock itself is unaffected)"
    );
}

/// Says why the command could not be started; returns the shell's status
/// for it: 127 not found, 126 anything else.
pub(crate) fn report_spawn_failure(program: &OsStr, e: &io::Error) -> u8 {
    let program = display::escape(&program.to_string_lossy());
    if e.kind() == io::ErrorKind::NotFound {
        eprintln!("lockrun: {program}: command not found");
        exit_codes::NOT_FOUND
    } else {
        eprintln!("lockrun: {program}: cannot execute: {e}");
        exit_codes::CANNOT_EXECUTE
    }
}
