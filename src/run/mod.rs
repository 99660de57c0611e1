//! Running the command under the lock: the one run flow every backend
//! plugs into (`crate::backend`).
//!
//! Order matters and is the guarantee: prepare, take the lock, record,
//! start the command, supervise it, complete the record, release. For a
//! file the command inherits the lock descriptor (unless `--close`), so if
//! lockrun itself is killed, even with SIGKILL, the lock lives on in the
//! command until it exits: a second instance of a job can never start
//! beside a running one.

pub mod command;
#[cfg(unix)]
pub mod fd_mode;
pub mod progress;
// Signals are the platform's (forwarding happens inside the handler);
// the run flow names them where it always has.
pub use crate::platform::signals;
pub mod supervise;
pub mod urls;
pub mod wait;

pub use command::{Ending, report_spawn_failure, wait_for_command};

#[cfg(unix)]
use crate::backend::file::lock::LockSpec;
use crate::backend::{Backend, Held, RunSettings};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::identity::Me;
use crate::mode::LockMode;
use crate::observe::{Event, Watch};
use crate::persona;
use crate::platform::{self, CommandLine};
use crate::record::{self, ChildRecord, Exit, Record};
use platform::AsRawFd;
use progress::Progress;
use std::ffi::{OsStr, OsString};
#[cfg(unix)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use supervise::{Stopped, Supervisor};
use wait::{NotAcquired, WaitPolicy};

/// The run form on a lock file, as the command line gives it. Unix-only,
/// with [`run`]: lockrun.exe's (src/windows/run.rs) calls [`run_with`]
/// on the Windows file backend.
#[cfg(unix)]
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub path: PathBuf,
    pub mode: LockMode,
    /// Which lock (flock or OFD, byte range) and on what (path or `--fd`).
    pub lock: LockSpec,
    pub wait: WaitPolicy,
    /// `-o`: the command does not inherit the lock.
    pub close_before_exec: bool,
    /// `-F`: become the command instead of waiting for it.
    pub exec_in_place: bool,
    /// `--slots N`: at most N holders at once, each in its own slot.
    pub slots: Option<u16>,
    /// `--also`: more lock files held with `path`, all or none.
    pub also: Vec<PathBuf>,
    pub settings: RunSettings,
}

/// What the run flow needs of any run form, whatever the backend.
pub struct Flow<'a> {
    /// The lock's name in messages, escaped for the terminal.
    pub label: String,
    /// `LOCKRUN_LOCKFILE` for the command: an absolute path, or the URL.
    pub lockfile: OsString,
    /// `LOCKRUN_LOCK_URL` for the command: a lock URL without its
    /// passwords, for `lockrun check --token` from inside the command.
    pub lock_url: Option<OsString>,
    pub mode: LockMode,
    pub wait: WaitPolicy,
    pub exec_in_place: bool,
    pub settings: &'a RunSettings,
    /// The other lock files of an `--also` set, for the record.
    pub also: Vec<String>,
    /// A lock URL's watchdog (`platform::watchdog`): told the command's
    /// pid, its end, and the lock's connection. Never on a lock file.
    #[cfg(feature = "lock-urls")]
    pub watchdog: Option<&'a platform::Watchdog>,
}

impl Flow<'_> {
    /// The lock's name for the monitoring: a lock file's absolute path, a
    /// lock URL without its passwords.
    fn lock_name(&self) -> String {
        self.lock_url
            .as_deref()
            .unwrap_or(&self.lockfile)
            .to_string_lossy()
            .into_owned()
    }
}

/// The run form on a lock file.
#[cfg(unix)]
pub fn run(opts: &RunOptions) -> Result<Ending, Failure> {
    let mut flow = Flow {
        label: display::escape(&opts.path.to_string_lossy()),
        lockfile: absolute(&opts.path).into_os_string(),
        lock_url: None,
        mode: opts.mode,
        wait: opts.wait,
        exec_in_place: opts.exec_in_place,
        settings: &opts.settings,
        also: Vec::new(),
        #[cfg(feature = "lock-urls")]
        watchdog: None,
    };
    let opening = crate::backend::file::Opening {
        path: &opts.path,
        spec: opts.lock,
        mode: opts.mode,
        inherit: !opts.close_before_exec,
        verbose: opts.settings.verbose,
        command: &opts.settings.command,
        waits: !opts.wait.nonblocking && opts.wait.timeout != Some(Duration::ZERO),
    };
    if !opts.also.is_empty() {
        let set = unopened(
            crate::backend::file::set::LockSet::open(&opening, &opts.also, absolute),
            &flow,
        )?;
        flow.also = set.also_of_primary();
        return run_with(set, &flow);
    }
    match opts.slots {
        Some(n) => run_with(
            unopened(
                crate::backend::file::slots::SlotsBackend::open(&opening, n),
                &flow,
            )?,
            &flow,
        ),
        None => run_with(
            unopened(crate::backend::file::FileBackend::open(&opening), &flow)?,
            &flow,
        ),
    }
}

/// A lock that could not even be opened (an unsafe lock file, a directory
/// lockrun may not create it in): the monitoring still hears of the run,
/// as an `error`, rather than seeing nothing at all.
#[cfg(unix)]
fn unopened<B>(opened: Result<B, Failure>, flow: &Flow) -> Result<B, Failure> {
    if let (Err(failure), Some(observers)) = (&opened, &flow.settings.observe) {
        Watch::begin(observers, flow.lock_name()).ended(
            Event::Error,
            failure.status,
            Duration::ZERO,
        );
    }
    opened
}

/// `path` as the command's environment and the records name it: only a
/// relative path needs the working directory (the record asks for it on
/// its own), so /var/lock/x costs no getcwd.
#[cfg(unix)]
fn absolute(path: &std::path::Path) -> PathBuf {
    match path.is_relative() {
        true => match std::env::current_dir() {
            Ok(cwd) => cwd.join(path),
            Err(_) => path.to_owned(),
        },
        false => path.to_owned(),
    }
}

/// The run flow, for any backend.
pub fn run_with<B: Backend>(mut backend: B, flow: &Flow) -> Result<Ending, Failure> {
    // Signals must be caught before the command exists, or a SIGTERM in
    // between would kill lockrun and never reach the command. With -F
    // there is nothing to forward to (the command will be us): handlers
    // are only needed if we have to wait, and `wait::acquire` installs
    // them then, so an uncontended -F run makes no sigaction call.
    if !flow.exec_in_place {
        signals::install_for_command()?;
    }
    signals::forward(flow.settings.forward_signals);

    // Everything that does not need the lock is prepared before taking it,
    // so that a waiter that gets the lock starts its command at once.
    let mut recording = Recording::prepare(flow);
    // A fixed array, no allocation on the file path: LOCKRUN_LOCK_URL is
    // the third entry, and only a lock URL's run passes it on.
    let every = [
        ("LOCKRUN_LOCKFILE", flow.lockfile.as_os_str()),
        ("LOCKRUN_MODE", OsStr::new(flow.mode.as_str())),
        (
            "LOCKRUN_LOCK_URL",
            flow.lock_url.as_deref().unwrap_or_default(),
        ),
    ];
    let env = &every[..if flow.lock_url.is_some() { 3 } else { 2 }];
    let mut command = command_line(&flow.settings.command, env, &[])?;
    // Whether lockrun will stay in the command's process group (a terminal,
    // a session leader) does not change while it waits.
    let kept_group = if flow.exec_in_place {
        0
    } else {
        platform::group_kept_with_command()
    };

    // Only with --metrics-file or --log: otherwise `None`, and not even
    // the clock is read for it.
    let mut watch = flow
        .settings
        .observe
        .as_ref()
        .map(|observers| Watch::begin(observers, flow.lock_name()));
    let mut progress = Progress::new(
        flow.label.clone(),
        flow.settings.verbose && !persona::is_flock(),
        flow.settings.quiet,
        flow.wait.timeout,
    );
    let waited = match wait::acquire(&mut backend, flow.wait, &mut progress) {
        Ok(waited) => waited,
        Err(not) => return not_acquired(backend, not, flow, watch.as_ref()),
    };
    // Decided here, with the lock held and before anything is written:
    // no other holder can run or record meanwhile, so of any number of
    // contenders started together exactly one runs, and a skip leaves
    // the record as the last run left it, byte for byte.
    if let Some(within) = flow.settings.skip_if_succeeded_within
        && let Some(last) = backend.last_record()
        && let Some(ago) = record::succeeded_within(&last, within, std::time::SystemTime::now())
    {
        say_skipped(flow, &last, ago, within, waited);
        backend.give_up();
        observed(watch.as_ref(), Event::Skipped, exit_codes::SKIPPED, waited);
        return Ok(Ending::Status(exit_codes::SKIPPED));
    }
    let mut held =
        match backend.acquired(recording.as_ref().map(|r| &r.record), flow.settings.verbose) {
            Ok(held) => held,
            Err(failure) => {
                observed(watch.as_ref(), Event::Error, failure.status, waited);
                return Err(failure);
            }
        };
    if let Some(watch) = &mut watch {
        watch.acquired(waited);
    }
    if flow.settings.verbose {
        // With --slots the lock held is a slot's file, not LOCKFILE.
        let label = held.held_label().unwrap_or(&flow.label);
        persona::say_acquired(flow.mode, label, waited);
        persona::say_executing(command.program());
    }
    let extra = held.env();
    if !extra.is_empty() {
        command = command_line(&flow.settings.command, env, &extra)?;
    }
    if let Some(recording) = &mut recording {
        recording.acquired(&held);
    }

    if flow.exec_in_place {
        return Ok(exec_in_place(command, recording, held));
    }

    let told_by_child = recording.as_ref().and_then(Recording::for_child);
    // Only with the run's own record written by the command's process:
    // otherwise lockrun stores them all (`Recording::started`).
    let more_records = match (&recording, &told_by_child) {
        (Some(recording), Some(_)) => held.more_child_records(&recording.record),
        _ => Vec::new(),
    };
    // Only when a stop may have to find them: one prctl, before the
    // command can fork anything.
    let reap_orphans = held.searches_descendants()
        && (flow.settings.max_time.is_some() || held.dies_with_lockrun())
        && platform::adopt_orphans();
    // The connection goes to the watchdog before the command exists: from
    // its start on, lockrun's death leaves the lock held until the
    // watchdog has stopped it.
    #[cfg(feature = "lock-urls")]
    if let (Some(watchdog), Some(fd)) = (flow.watchdog, held.connection_fd()) {
        watchdog.hold(fd);
    }
    signals::command_starting(kept_group);
    #[cfg(feature = "lock-urls")]
    let link = flow.watchdog.map(platform::Watchdog::child_link);
    #[cfg(not(feature = "lock-urls"))]
    let link = None;
    let started = start(&command, told_by_child.clone(), more_records, &held, link);
    let pid = match started {
        Ok(pid) => pid,
        Err(e) => {
            let status = report_spawn_failure(command.program(), &e);
            if let Some(recording) = recording {
                recording.finish(&mut held, None, Exit::code(status));
            }
            let _ = held.release();
            observed(watch.as_ref(), Event::Finished, status, waited);
            return Ok(Ending::Status(status));
        }
    };
    // Before anything else: the sooner lockrun is out of the command's
    // process group, the shorter the moment in which a signal to that group
    // reaches the command twice.
    let shared_group = match kept_group {
        0 => platform::leave_command_group(),
        kept => kept,
    };
    signals::command_started(pid, shared_group);
    #[cfg(feature = "lock-urls")]
    if let Some(watchdog) = flow.watchdog {
        watchdog.command_started(pid);
    }
    held.command_started(pid);
    if let Some(recording) = &mut recording {
        recording.started(&mut held, pid);
    }
    let supervisor = flow
        .settings
        .max_time
        .map(|limit| Supervisor::start(pid, limit, flow.settings.kill_grace, &held));

    let waited_for_command = wait_for_command(pid, reap_orphans, |pid| {
        held.command_exited();
        // While the command is a zombie, before its pid can be reused.
        #[cfg(feature = "lock-urls")]
        if let Some(watchdog) = flow.watchdog {
            watchdog.command_exited();
        }
        let told = told_by_child.as_ref()?;
        told.start_seen()
            .or_else(|| platform::process_start_time(pid))
    });
    let (status, start) = match waited_for_command {
        Ok(ended) => ended,
        Err(failure) => {
            observed(watch.as_ref(), Event::Error, failure.status, waited);
            return Err(failure);
        }
    };
    // After a stop, whatever still holds the lock through us is stopped
    // too before the lock is let go of.
    let stopped = supervisor.and_then(Supervisor::finish);
    let exit = stopped
        .as_ref()
        .map_or_else(|| Exit::of(status), |s| s.exit());
    if let Some(recording) = recording {
        recording.finish(&mut held, Some((pid, start)), exit);
    }
    let (ending, event) =
        release(held, flow, pid, stopped).unwrap_or_else(|| (Ending::of(status), Event::Finished));
    if let Some(watch) = &watch {
        watch.ended(event, ending.status(), waited);
    }
    Ok(ending)
}

/// Tells the watch, if there is one, how the run ended.
fn observed(watch: Option<&Watch>, event: Event, status: u8, waited: Duration) {
    if let Some(watch) = watch {
        watch.ended(event, status, waited);
    }
}

/// `--skip-if-succeeded-within`'s one line (unless `-q`); with `-v`, which
/// run it was and when it ended.
fn say_skipped(flow: &Flow, last: &Record, ago: Duration, within: Duration, waited: Duration) {
    if flow.settings.quiet {
        return;
    }
    let window = display::span(within);
    if !flow.settings.verbose {
        crate::say!(
            "lockrun: {}: not running the command: the last run succeeded {} ago (--skip-if-succeeded-within {window})",
            flow.label,
            display::span(ago)
        );
        return;
    }
    let run = match last.pid {
        Some(pid) => format!("pid {pid} ({})", display::record_command(last)),
        None => format!("`{}`", display::record_command(last)),
    };
    let host = last
        .host
        .as_deref()
        .map(|h| format!(" on {}", display::escape(h)))
        .unwrap_or_default();
    let ended = last
        .released_at
        .as_deref()
        .and_then(display::parse_time)
        .map(display::date_time)
        .unwrap_or_default();
    crate::say!(
        "lockrun: {}: not running the command: the last run, {run}{host}, exited 0 at {ended} ({} ago), within --skip-if-succeeded-within {window}; the lock was taken after {} and let go of, its record left as it was",
        flow.label,
        display::span(ago),
        display::span(waited)
    );
}

/// Starts the command, whose own process writes its part of the record
/// (`child_record`, through the lock file's descriptor) before its exec.
///
/// A command that must not outlive lockrun is stopped by lockrun's
/// watchdog, told the command's pid by the command itself before its exec
/// (`link`); only without a watchdog (it could not be forked) does the
/// command get the parent-death signal, which reaches it alone and would
/// race the watchdog for it (platform::watchdog's `ChildLink` says how).
fn start<H: Held>(
    command: &CommandLine,
    child_record: Option<Arc<ChildRecord>>,
    more_records: Vec<(ChildRecord, platform::RawFd)>,
    held: &H,
    link: Option<platform::ChildLink>,
) -> std::io::Result<i32> {
    let record_fd = held.child_record_fd().map(|fd| fd.as_raw_fd());
    let dies_with_us =
        (held.dies_with_lockrun() && link.is_none()).then(|| std::process::id() as i32);
    // Last, so that the clock reading is as close to the child's start as
    // it can be: the child finds its start time from it.
    let before = child_record.as_ref().and_then(|_| platform::before_start());
    // SAFETY: the closure makes raw system calls on buffers prepared
    // above (ChildRecord::write_from_child). The descriptor stays open
    // until the command has exec'd (close-on-exec closes it only in the
    // command): `held` outlives the start.
    unsafe {
        platform::start_command(command, signals::handled(), move || {
            signals::command_exists();
            if let (Some(child), Some(fd)) = (&child_record, record_fd) {
                crate::platform::tolerating_file_size_limit(|| {
                    child.write_from_child(platform::BorrowedFd::borrow_raw(fd), before);
                    for (more, fd) in &more_records {
                        more.write_from_child(platform::BorrowedFd::borrow_raw(*fd), before);
                    }
                });
            }
            if let Some(link) = link {
                link.announce();
            }
            if let Some(lockrun) = dies_with_us {
                platform::die_with_parent(lockrun);
            }
        })
    }
}

/// Lets go of the lock once the command has ended; the status, unless the
/// command's own: 76 when the lock turns out to have been lost meanwhile,
/// 124 when `--max-time` stopped it; and which outcome that was.
fn release<H: Held>(
    held: H,
    flow: &Flow,
    pid: i32,
    stopped: Option<Stopped>,
) -> Option<(Ending, Event)> {
    if let Err(reason) = held.release() {
        if platform::STOPS_BY_SIGNALS {
            crate::say!(
                "{}: lost the lock {} while the command ran: {reason}; the command (pid {pid}), if it still ran then, was sent SIGTERM with every process it started (and SIGKILL if it still ran {} later)",
                persona::name(),
                flow.label,
                display::span(flow.settings.kill_grace)
            );
        } else {
            // Windows: the job was ended (platform::windows::stop_all).
            crate::say!(
                "{}: lost the lock {} while the command ran: {reason}; the command (pid {pid}), if it still ran then, {}",
                persona::name(),
                flow.label,
                platform::stop_described()
            );
        }
        return Some((Ending::Status(exit_codes::LOCK_LOST), Event::Lost));
    }
    let stopped = stopped?;
    crate::say!(
        "{}: {}: {}",
        persona::name(),
        flow.label,
        stopped.describe()
    );
    Some((Ending::Status(exit_codes::MAX_TIME), Event::MaxTime))
}

fn command_line(
    args: &[OsString],
    env: &[(&str, &OsStr)],
    extra: &[(&'static str, OsString)],
) -> Result<CommandLine, Failure> {
    let mut all = env.to_vec();
    all.extend(extra.iter().map(|(k, v)| (*k, v.as_os_str())));
    CommandLine::new(args, &all)
        .map_err(|e| Failure::new(exit_codes::USAGE, format!("cannot run {:?}: {e}", args)))
}

fn not_acquired<B: Backend>(
    mut backend: B,
    not: NotAcquired,
    flow: &Flow,
    watch: Option<&Watch>,
) -> Result<Ending, Failure> {
    // What the monitoring is told, once the lock is given up: -n and
    // `-w 0` find the lock busy, any other wait runs out.
    let outcome;
    let ending = match not {
        NotAcquired::Busy { waited } => {
            let waits = !flow.wait.nonblocking && flow.wait.timeout != Some(Duration::ZERO);
            let event = if waits { Event::Timeout } else { Event::Busy };
            outcome = Some((event, flow.settings.conflict_status, waited));
            persona::say_not_acquired(flow.settings.verbose, waited);
            if !flow.settings.quiet {
                let held = backend.conflict_held();
                let label = backend.busy_label().unwrap_or_else(|| flow.label.clone());
                let busy = display::busy(&label, &held, waited);
                match backend.none_held_note() {
                    Some(note) => crate::say!("lockrun: {busy}; {note}"),
                    None => crate::say!("lockrun: {busy}"),
                }
            }
            Ok(Ending::Status(flow.settings.conflict_status))
        }
        NotAcquired::Interrupted(sig) => {
            let status = exit_codes::for_signal(sig);
            outcome = Some((Event::Error, status, Duration::ZERO));
            Ok(Ending::Status(status))
        }
        NotAcquired::Failed(mut failure) => {
            failure.status = backend.failure_status();
            outcome = Some((Event::Error, failure.status, Duration::ZERO));
            Err(failure)
        }
    };
    backend.give_up();
    if let (Some(watch), Some((event, status, waited))) = (watch, outcome) {
        watch.ended(event, status, waited);
    }
    ending
}

/// `-F`: the record names our own pid, which the command keeps across exec;
/// there is nobody left to write a release, so the record has none.
fn exec_in_place<H: Held>(
    command: CommandLine,
    recording: Option<Recording>,
    mut held: H,
) -> Ending {
    // A signal caught since the lock was taken has nobody to be forwarded
    // to once we exec (the handlers are reset): honour it now, before
    // anything is written or started.
    if let Some(sig) = signals::pending() {
        return Ending::Status(exit_codes::for_signal(sig));
    }
    let recording = recording.map(|mut recording| {
        recording.record.pid = Some(i64::from(std::process::id()));
        recording.record.pid_start = platform::own_start_time_without_allocating();
        recording.store(&mut held, false);
        recording
    });
    let error = command.exec();
    let status = report_spawn_failure(command.program(), &error);
    if let Some(recording) = recording {
        recording.finish(&mut held, None, Exit::code(status));
    }
    Ending::Status(status)
}

/// The holder record through a run's life: prepared before the wait,
/// stamped when the lock is taken, completed by the command's process (or
/// stored once it runs), and closed with how the command ended.
struct Recording {
    record: Record,
    /// Serialised before the wait, with slots for what only the command's
    /// process knows; shared with that process's pre-exec hook.
    child: Option<Arc<ChildRecord>>,
    label: String,
    /// A write failed and the user was told: do not write again.
    failed: bool,
}

impl Recording {
    fn prepare(flow: &Flow) -> Option<Recording> {
        if !flow.settings.write_record || flow.mode != LockMode::Exclusive {
            if flow.settings.verbose && flow.settings.write_record {
                crate::say!(
                    "lockrun: no holder record for {}: {}",
                    flow.label,
                    record::NoRecord::Shared.explain()
                );
            }
            return None;
        }
        let cwd = std::env::current_dir().ok();
        let mut record = Record::starting(
            Me::gather(),
            &flow.settings.command,
            cwd.as_deref(),
            flow.mode,
        );
        if let Some(limit) = flow.settings.max_time {
            record.max_time = Some(display::span(limit));
        }
        if !flow.also.is_empty() {
            record.also = Some(flow.also.clone());
        }
        let child = (!flow.exec_in_place).then(|| {
            record.acquired_at = Some(record::ACQUIRED_AT_SLOT.to_owned());
            Arc::new(ChildRecord::new(&record, &flow.label))
        });
        Some(Recording {
            record,
            child,
            label: flow.label.clone(),
            failed: false,
        })
    }

    fn acquired(&mut self, held: &impl Held) {
        let now = display::now_rfc3339();
        self.record.fencing_token = held.fencing_token();
        if held.child_record_fd().is_none() {
            // The record is stored by lockrun, not by the command's process.
            self.child = None;
        }
        if let Some(child) = &mut self.child {
            let stamped = Arc::get_mut(child).is_some_and(|c| c.stamp_acquired_at(&now));
            self.record.acquired_at = Some(now);
            if !stamped {
                *child = Arc::new(ChildRecord::new(&self.record, &self.label));
            }
        } else {
            self.record.acquired_at = Some(now);
        }
    }

    fn for_child(&self) -> Option<Arc<ChildRecord>> {
        self.child.clone()
    }

    /// The command runs as `pid`: a record kept by lockrun gets it now.
    fn started(&mut self, held: &mut impl Held, pid: i32) {
        if self.child.is_some() {
            return;
        }
        self.record.pid = Some(i64::from(pid));
        self.record.pid_start = platform::process_start_time(pid);
        self.store(held, false);
    }

    fn store(&mut self, held: &mut impl Held, released: bool) {
        if self.failed {
            return;
        }
        if let Err(e) = held.store_record(&self.record, released) {
            self.failed = true;
            if !e.is_empty() {
                crate::say!(
                    "lockrun: could not write the holder record to {}: {e} (the lock itself is unaffected)",
                    self.label
                );
            }
        }
    }

    /// Adds the release to the record: who ran, when it ended, how.
    fn finish(mut self, held: &mut impl Held, child: Option<(i32, Option<u64>)>, exit: Exit) {
        if let Some((pid, start)) = child {
            self.record.pid = Some(i64::from(pid));
            self.record.pid_start = start;
        }
        self.record.released_at = Some(display::now_rfc3339());
        self.record.exit = Some(exit);
        self.store(held, true);
    }
}

impl Stopped {
    fn exit(&self) -> Exit {
        Exit {
            code: None,
            // A job ended on Windows has no signal to record.
            signal: platform::STOPS_BY_SIGNALS.then_some(self.last_signal),
            max_time: Some(display::span(self.limit)),
        }
    }
}
