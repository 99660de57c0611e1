//! The run form on Windows: open, lock, start the command suspended in a
//! job, write the record, resume, wait, release.

use super::cli::{Command, RunOptions};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::mode::LockMode;
use crate::observe::{Event, Watch};
use crate::platform::windows::{Attempt, Job, LOCK_OFFSET, broken, lock_byte, unlock_byte};
use crate::record::{self, Exit, Record, SlotsHeader};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::os::windows::io::{AsRawHandle, RawHandle};
use std::os::windows::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT,
};
use windows_sys::Win32::System::Threading::CREATE_SUSPENDED;

/// An open lock file, checked as Linux checks it: not a reparse point
/// (as O_NOFOLLOW refuses a symbolic link), not a directory, one name.
pub struct LockFile {
    pub file: File,
    pub writable: bool,
    pub path: PathBuf,
}

pub fn open_lock_file(path: &Path, create: bool) -> Result<LockFile, Failure> {
    let shown = path.display().to_string();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(Failure::new(
                exit_codes::NO_PERMISSION,
                format!(
                    "{shown} is a reparse point (a symbolic link or junction): refused, as lockrun never follows one at the last component"
                ),
            ));
        }
        if meta.is_dir() {
            return Err(Failure::new(
                exit_codes::NO_PERMISSION,
                format!("{shown} is a directory: on Windows a lock file must be a regular file"),
            ));
        }
    }
    let open = |write: bool| {
        let mut o = OpenOptions::new();
        o.read(true)
            .write(write)
            .create(write && create)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT);
        o.open(path)
    };
    let (file, writable) = match open(true) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => match open(false) {
            Ok(f) => (f, false),
            Err(e) => return Err(Failure::io(exit_codes::NO_INPUT, "cannot open", path, &e)),
        },
        Err(e) => return Err(Failure::io(exit_codes::NO_INPUT, "cannot open", path, &e)),
    };
    let info = crate::platform::windows::file_information(&file)
        .map_err(|e| Failure::io(exit_codes::OS_ERROR, "cannot look at", path, &e))?;
    if info.dwFileAttributes & (FILE_ATTRIBUTE_REPARSE_POINT | FILE_ATTRIBUTE_DIRECTORY) != 0 {
        return Err(Failure::new(
            exit_codes::NO_PERMISSION,
            format!("{shown} is not a regular file: refused"),
        ));
    }
    if info.nNumberOfLinks > 1 {
        return Err(Failure::new(
            exit_codes::NO_PERMISSION,
            format!(
                "{shown} has {} names (hard links): refused, as another name could be a different lock's file",
                info.nNumberOfLinks
            ),
        ));
    }
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    Ok(LockFile {
        file,
        writable,
        path,
    })
}

/// How a wait for the lock ended.
enum Waited {
    Acquired,
    Busy,
}

/// Takes the byte: at once (`-n`), for ever (a blocking call here), or
/// until a deadline (the blocking call on a helper thread, the main thread
/// waiting on its answer: a kernel wait, not polling). A helper still
/// blocked at the deadline is left behind: lockrun exits, and its process
/// going away ends the wait.
fn take(
    handle: RawHandle,
    offset: u64,
    exclusive: bool,
    timeout: Option<Duration>,
) -> io::Result<Waited> {
    match lock_byte(handle, offset, exclusive, false) {
        Attempt::Acquired => return Ok(Waited::Acquired),
        Attempt::Failed(e) => return Err(e),
        Attempt::Busy => {}
    }
    match timeout {
        Some(t) if t.is_zero() => Ok(Waited::Busy),
        None => match lock_byte(handle, offset, exclusive, true) {
            Attempt::Acquired => Ok(Waited::Acquired),
            Attempt::Busy => Ok(Waited::Busy),
            Attempt::Failed(e) => Err(e),
        },
        Some(t) => {
            let (tx, rx) = mpsc::channel();
            let raw = handle as usize;
            std::thread::Builder::new()
                .name("lockrun-wait".into())
                .spawn(move || {
                    let got = lock_byte(raw as RawHandle, offset, exclusive, true);
                    let _ = tx.send(got);
                })?;
            match rx.recv_timeout(t) {
                Ok(Attempt::Acquired) => Ok(Waited::Acquired),
                Ok(Attempt::Busy) => Ok(Waited::Busy),
                Ok(Attempt::Failed(e)) => Err(e),
                Err(_) => Ok(Waited::Busy),
            }
        }
    }
}

/// Who holds it, for a conflict message: the record's holder when it is
/// alive and unreleased, else what can be said without a lock table.
fn held_by(file: &File) -> String {
    let found = record::read_content(file)
        .ok()
        .and_then(|c| Record::parse(&c));
    match found {
        Some(rec)
            if !rec.is_released() && rec.holder_liveness() == crate::identity::Liveness::Alive =>
        {
            format!("by {}", display::holder_summary(&rec))
        }
        _ => "by another process (shared, or one that wrote no record)".to_owned(),
    }
}

fn conflict(opts: &RunOptions, label: &str, file: &File, waited: Duration) -> Failure {
    let waited = if opts.timeout.is_some_and(|t| t.is_zero()) {
        Duration::ZERO
    } else {
        waited
    };
    let message = if opts.quiet {
        String::new()
    } else {
        display::busy(label, &held_by(file), waited)
    };
    Failure::new(opts.conflict_exit_code, message)
}

/// How a run ended, for `--metrics-file`: filled in as the run goes, so
/// that every way out (`?` included) ends in one outcome. An error until
/// the run says otherwise, as on Linux (`run::run_with`).
struct Outcome {
    event: Event,
    waited: Duration,
}

pub fn run(opts: &RunOptions) -> Result<i32, Failure> {
    // The metrics' `lock` label: the lock file's absolute path, as Linux
    // names it.
    let name = std::path::absolute(&opts.lockfile)
        .unwrap_or_else(|_| opts.lockfile.clone())
        .display()
        .to_string();
    // Only with --metrics-file: otherwise nothing here runs.
    let mut watch = opts.observe.as_ref().map(|o| Watch::begin(o, name));
    let mut outcome = Outcome {
        event: Event::Error,
        waited: Duration::ZERO,
    };
    let result = run_watched(opts, watch.as_mut(), &mut outcome);
    // Told once the lock is let go of (run_holding unlocks before it
    // returns): monitoring never lengthens the time a lock is held.
    if let Some(watch) = &watch {
        let status = match &result {
            Ok(code) => metrics_status(*code),
            Err(failure) => failure.status,
        };
        watch.ended(outcome.event, status, outcome.waited);
    }
    result
}

/// lockrun's exit status as the metrics file keeps it (0-255, as on
/// Unix). A Windows exit code is 32 bits: one beyond 255 (an NTSTATUS
/// such as 0xC0000005 for a crash) is kept as 255 rather than wrapped
/// into a status that could read as success or busy.
fn metrics_status(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(u8::MAX)
}

fn run_watched(
    opts: &RunOptions,
    watch: Option<&mut Watch>,
    outcome: &mut Outcome,
) -> Result<i32, Failure> {
    let started = Instant::now();
    let main = open_lock_file(&opts.lockfile, true)?;
    let label = opts.lockfile.display().to_string();
    let exclusive = opts.mode == LockMode::Exclusive;
    let (held, slot) = match opts.slots {
        None => {
            match take(
                main.file.as_raw_handle(),
                LOCK_OFFSET,
                exclusive,
                opts.timeout,
            )
            .map_err(|e| lock_error(&label, &e))?
            {
                Waited::Acquired => {}
                Waited::Busy => {
                    not_acquired(opts, outcome, started);
                    return Err(conflict(opts, &label, &main.file, started.elapsed()));
                }
            }
            (main, None)
        }
        Some(n) => {
            let (file, k) = take_slot(opts, &main, n, started, outcome)?;
            (file, Some(k))
        }
    };
    outcome.waited = started.elapsed();
    if let Some(watch) = watch {
        watch.acquired(outcome.waited);
    }
    if opts.verbose && !opts.quiet {
        crate::say!(
            "lockrun: {} {label} ({}) after {}",
            "acquired",
            opts.mode.as_str(),
            display::span(started.elapsed())
        );
    }
    run_holding(opts, &held, slot, outcome)
}

/// Busy (`-n`) or timed out (`-w`), as the metrics count it.
fn not_acquired(opts: &RunOptions, outcome: &mut Outcome, started: Instant) {
    let nonblocking = opts.timeout.is_some_and(|t| t.is_zero());
    outcome.event = if nonblocking {
        Event::Busy
    } else {
        Event::Timeout
    };
    outcome.waited = if nonblocking {
        Duration::ZERO
    } else {
        started.elapsed()
    };
}

fn lock_error(label: &str, e: &io::Error) -> Failure {
    Failure::new(exit_codes::OS_ERROR, format!("cannot lock {label}: {e}"))
}

/// `--slots N`: LOCKFILE's byte is the queue (one waiter at a time
/// contends for the slots, so a crowd does not stampede), slot k is the
/// byte in `LOCKFILE.slotK`. The queue's holder tries every slot at once;
/// if all are taken it waits on all of them, a helper thread per slot, and
/// takes the first granted (a helper granted one after that lets it go).
fn take_slot(
    opts: &RunOptions,
    main: &LockFile,
    n: u16,
    started: Instant,
    outcome: &mut Outcome,
) -> Result<(LockFile, u16), Failure> {
    let label = opts.lockfile.display().to_string();
    same_slot_count(main, n)?;
    let slots: Vec<LockFile> = (1..=n)
        .map(|k| open_lock_file(&record::slot_path(&opts.lockfile, k), true))
        .collect::<Result<_, _>>()?;
    let nonblocking = opts.timeout.is_some_and(|t| t.is_zero());
    let queue = main.file.as_raw_handle();
    if !nonblocking {
        match take(queue, LOCK_OFFSET, true, opts.timeout).map_err(|e| lock_error(&label, &e))? {
            Waited::Acquired => {}
            Waited::Busy => return Err(slots_busy(opts, &label, n, started, outcome)),
        }
    }
    let mut slots = slots;
    for k in 0..slots.len() {
        match lock_byte(slots[k].file.as_raw_handle(), LOCK_OFFSET, true, false) {
            Attempt::Acquired => {
                if !nonblocking {
                    unlock_byte(queue, LOCK_OFFSET);
                }
                return Ok((slots.swap_remove(k), k as u16 + 1));
            }
            Attempt::Busy => {}
            Attempt::Failed(e) => return Err(lock_error(&label, &e)),
        }
    }
    if nonblocking {
        return Err(slots_busy(opts, &label, n, started, outcome));
    }
    let winner: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel::<usize>();
    for (k, slot) in slots.iter().enumerate() {
        let raw = slot.file.as_raw_handle() as usize;
        let (winner, tx) = (Arc::clone(&winner), tx.clone());
        std::thread::Builder::new()
            .name("lockrun-slot".into())
            .spawn(move || {
                if let Attempt::Acquired = lock_byte(raw as RawHandle, LOCK_OFFSET, true, true) {
                    let mut w = winner.lock().unwrap_or_else(|p| p.into_inner());
                    if w.is_none() {
                        *w = Some(k);
                        let _ = tx.send(k);
                    } else {
                        unlock_byte(raw as RawHandle, LOCK_OFFSET);
                    }
                }
            })
            .map_err(|e| lock_error(&label, &e))?;
    }
    drop(tx);
    let got = match opts.timeout {
        None => rx.recv().ok(),
        Some(t) => rx.recv_timeout(t.saturating_sub(started.elapsed())).ok(),
    };
    match got {
        Some(k) => {
            unlock_byte(queue, LOCK_OFFSET);
            // The slot handles of the losers stay open (their helpers may
            // still wait on them) until lockrun exits.
            let file = slots.swap_remove(k);
            std::mem::forget(slots);
            Ok((file, k as u16 + 1))
        }
        None => {
            std::mem::forget(slots);
            Err(slots_busy(opts, &label, n, started, outcome))
        }
    }
}

fn slots_busy(
    opts: &RunOptions,
    label: &str,
    n: u16,
    started: Instant,
    outcome: &mut Outcome,
) -> Failure {
    not_acquired(opts, outcome, started);
    let waited = if opts.timeout.is_some_and(|t| t.is_zero()) {
        Duration::ZERO
    } else {
        started.elapsed()
    };
    let message = if opts.quiet {
        String::new()
    } else {
        display::busy(label, &format!("in all {n} slots"), waited)
    };
    Failure::new(opts.conflict_exit_code, message)
}

/// Every contender for one LOCKFILE gives the same N: LOCKFILE's header
/// says which, and a different N is a usage error naming both.
fn same_slot_count(main: &LockFile, n: u16) -> Result<(), Failure> {
    let content = record::read_content(&main.file).unwrap_or_default();
    if let Some(header) = SlotsHeader::parse(&content) {
        if header.slots != n {
            return Err(Failure::new(
                exit_codes::USAGE,
                format!(
                    "{} is used with --slots {}, not --slots {n}: every contender must give the same N",
                    main.path.display(),
                    header.slots
                ),
            ));
        }
        return Ok(());
    }
    if content.is_empty() && main.writable {
        let header = SlotsHeader {
            lockrun_slots: 1,
            slots: n,
            set_by: None,
        };
        let _ = record::write(&main.file, &header.to_line(), Some(0));
    }
    Ok(())
}

/// Whether the record may go into this file: one that is empty or already
/// holds a record of ours (the Linux rule: another program's data is never
/// touched).
fn may_write_record(lock: &LockFile, opts: &RunOptions) -> bool {
    if opts.no_record || opts.mode == LockMode::Shared || !lock.writable {
        return false;
    }
    match record::read_content(&lock.file) {
        Ok(c) => c.is_empty() || Record::parse(&c).is_some(),
        Err(_) => false,
    }
}

/// The command to start and its argv for the record; `-c STRING` is
/// `%COMSPEC% /c STRING`, which `command_for` passes to cmd.exe as given
/// (the lock URL run starts it the same way).
fn command_line(opts: &RunOptions) -> (std::process::Command, Vec<OsString>) {
    let argv = match &opts.command {
        Command::Argv(argv) => argv.clone(),
        Command::Shell(string) => {
            let comspec = std::env::var_os("COMSPEC").unwrap_or_else(|| "cmd.exe".into());
            vec![comspec, "/c".into(), string.clone()]
        }
    };
    (crate::platform::windows::command_for(&argv), argv)
}

fn run_holding(
    opts: &RunOptions,
    lock: &LockFile,
    slot: Option<u16>,
    outcome: &mut Outcome,
) -> Result<i32, Failure> {
    let (mut command, argv) = command_line(opts);
    command
        .env("LOCKRUN_LOCKFILE", &lock.path)
        .env("LOCKRUN_MODE", opts.mode.as_str())
        .creation_flags(CREATE_SUSPENDED);
    if let Some(k) = slot {
        command.env("LOCKRUN_SLOT", k.to_string());
    }
    let job = Job::new(!broken("no-kill-on-close")).map_err(|e| {
        Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot create a job object: {e}"),
        )
    })?;
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let status = match e.kind() {
                io::ErrorKind::NotFound => exit_codes::NOT_FOUND,
                _ => exit_codes::CANNOT_EXECUTE,
            };
            // A command that could not start ran as far as the metrics
            // go, with 126/127 (Linux's rule).
            outcome.event = Event::Finished;
            unlock_byte(lock.file.as_raw_handle(), LOCK_OFFSET);
            return Err(Failure::new(
                status,
                format!("cannot run {}: {e}", argv[0].to_string_lossy()),
            ));
        }
    };
    if let Err(e) = job.assign(child.as_raw_handle()) {
        let _ = child.kill();
        return Err(Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot put the command in a job object: {e}"),
        ));
    }
    let write_record = may_write_record(lock, opts);
    let mut rec = Record::starting(
        crate::identity::Me::gather(),
        &argv,
        std::env::current_dir().ok().as_deref(),
        opts.mode,
    );
    rec.pid = Some(i64::from(child.id()));
    rec.pid_start = crate::platform::windows::creation_time(child.as_raw_handle());
    rec.acquired_at = Some(display::now_rfc3339());
    rec.max_time = opts.max_time.as_ref().map(|(_, text)| text.clone());
    let mut wrote = false;
    let write_now = |wrote: &mut bool| {
        if write_record {
            match record::write(&lock.file, &rec.to_line(), None) {
                Ok(()) => *wrote = true,
                Err(e) => crate::say!(
                    "lockrun: cannot write the holder record into {} ({e}); the lock is held and the command runs without a record",
                    lock.path.display()
                ),
            }
        }
    };
    if !broken("record-after-resume") {
        write_now(&mut wrote);
    }
    crate::platform::windows::leave_console_events_to_command();
    if let Err(e) = crate::platform::windows::resume_process(child.id()) {
        job.terminate(1);
        return Err(Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot start the command: {e}"),
        ));
    }
    if broken("record-after-resume") {
        std::thread::sleep(Duration::from_millis(300));
        write_now(&mut wrote);
    }
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    if let Some((limit, _)) = opts.max_time {
        let raw = job.raw() as usize;
        let stopped = Arc::clone(&stopped);
        let _ = std::thread::Builder::new()
            .name("lockrun-max-time".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                    stopped.store(true, std::sync::atomic::Ordering::SeqCst);
                    crate::platform::windows::terminate_job_raw(
                        raw,
                        u32::from(exit_codes::MAX_TIME),
                    );
                }
            });
    }
    let status = child.wait();
    let _ = done_tx.send(());
    let max_timed_out = stopped.load(std::sync::atomic::Ordering::SeqCst);
    let code = match &status {
        Ok(s) => s.code().unwrap_or(1),
        Err(_) => 1,
    };
    if wrote {
        let mut released = rec.clone();
        released.released_at = Some(display::now_rfc3339());
        let mut exit = Exit {
            code: Some(code),
            signal: None,
            max_time: None,
        };
        if max_timed_out {
            exit.max_time = opts.max_time.as_ref().map(|(_, t)| t.clone());
        }
        released.exit = Some(exit);
        match record::write_release(&lock.file, &released) {
            Ok(_) => {}
            Err(e) => crate::say!(
                "lockrun: cannot complete the holder record in {}: {e}",
                lock.path.display()
            ),
        }
    }
    unlock_byte(lock.file.as_raw_handle(), LOCK_OFFSET);
    outcome.event = if max_timed_out {
        Event::MaxTime
    } else {
        Event::Finished
    };
    if max_timed_out {
        crate::say!(
            "lockrun: the command ran for --max-time {}: lockrun ended it and every process it started (its job)",
            opts.max_time.as_ref().map_or("", |(_, t)| t.as_str())
        );
        return Ok(i32::from(exit_codes::MAX_TIME));
    }
    if let Err(e) = status {
        outcome.event = Event::Error;
        return Err(Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot wait for the command: {e}"),
        ));
    }
    // What the command left running in the background outlives lockrun,
    // as on Linux (where it would also keep the lock; here the lock is
    // lockrun's handle alone, and goes now).
    job.keep_running_on_close();
    Ok(code)
}
