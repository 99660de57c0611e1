//! The command's life under the facade's names (`platform::process`,
//! `platform::spawn`, `platform::watchdog` on Unix), so that a lock URL's
//! run on Windows goes through the one run flow (`run::run_with`).
//!
//! Where Unix has a process tree to signal, Windows has the job object: the
//! command starts suspended inside a job that kills everything in it when
//! its last handle closes (so if lockrun is killed, the command and all it
//! started end too; a lock URL's lease then expires on its server), and
//! "stop the command and every process it started" is `TerminateJobObject`
//! on that job. There are no signals: [`STOP_SIGNAL`] and [`KILL_SIGNAL`]
//! are the numbers the run flow's records and messages compare, and
//! [`stop_all`] ends the job at once (no console to send Ctrl-Break to,
//! and no grace a job could honour; `--kill-grace` is accepted and moot).

use super::{Job, creation_time, resume_process};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::windows::io::{AsRawHandle, RawHandle};
use std::os::windows::process::CommandExt as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::Threading::{CREATE_SUSPENDED, INFINITE, WaitForSingleObject};

/// What the run flow's messages and records name the stop by. Windows has
/// no signals; a job is ended, which the facade reports as a kill.
pub const STOP_SIGNAL: i32 = 15;
pub const KILL_SIGNAL: i32 = 9;
/// A stop is the job ended at once, not signals.
pub const STOPS_BY_SIGNALS: bool = false;

/// The exit code `TerminateJobObject` gives every process of the job: 1,
/// what Task Manager's "End task" gives; lockrun's own status (76, 124)
/// says why.
const ENDED: u32 = 1;

/// The command lockrun started, and its job: one at a time (the run flow
/// starts one command per run).
struct Started {
    pid: i32,
    child: std::process::Child,
    job: Job,
}

static STARTED: Mutex<Option<Started>> = Mutex::new(None);

fn started() -> std::sync::MutexGuard<'static, Option<Started>> {
    // A panic on a watcher thread must not lose the command: read anyway.
    STARTED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A process the run flow may have to stop: on Windows, the command's job
/// stands for all of them.
pub struct Target {
    pub pid: i32,
}

impl Target {
    pub fn pin(pid: i32) -> Option<Target> {
        (pid > 0).then_some(Target { pid })
    }

    pub fn pin_all(pids: Vec<i32>) -> Vec<Target> {
        pids.into_iter().filter_map(Target::pin).collect()
    }
}

/// Ends the command and every process it started: `TerminateJobObject`
/// on the command's job, at once (see the module's documentation). Each
/// target is reported as killed.
pub fn stop_all(
    targets: Vec<Target>,
    _grace: Duration,
    _more: impl Fn() -> Vec<Target>,
) -> Vec<(i32, i32)> {
    let ended = match started().as_ref() {
        // The broken variant (tests/windows.rs must fail on it): the job
        // is said to be ended, and is not.
        Some(_) if super::broken("no-terminate-job") => true,
        Some(started) => started.job.terminate(ENDED),
        None => false,
    };
    if !ended {
        return Vec::new();
    }
    targets.into_iter().map(|t| (t.pid, KILL_SIGNAL)).collect()
}

/// How a stop is told in messages: what [`stop_all`] does here.
pub fn stop_described() -> &'static str {
    "was ended with every process it started (TerminateJobObject on its job)"
}

/// The processes the command started, besides itself: the job holds them
/// all, and [`stop_all`] ends them with it, so none need be listed.
pub fn descendants(_root: i32) -> Vec<i32> {
    Vec::new()
}

/// No subreaper on Windows: the job keeps the command's orphans.
pub fn adopt_orphans() -> bool {
    false
}

pub fn wait_reaping_orphans(_command: i32) -> bool {
    false
}

/// No process groups: nothing to keep or leave.
pub fn group_kept_with_command() -> i32 {
    0
}

pub fn leave_command_group() -> i32 {
    0
}

/// The job ends the command if lockrun dies (kill-on-close): nothing more.
pub fn die_with_parent(_parent: i32) {}

/// No clock reading to pass to the command's process: lockrun reads the
/// command's creation time itself.
#[derive(Debug, Clone, Copy)]
pub struct BeforeStart;

pub fn before_start() -> Option<BeforeStart> {
    None
}

pub fn own_start_time_since(_before: BeforeStart) -> Option<u64> {
    None
}

/// A process's creation time (the record's `pid_start`).
pub fn process_start_time(pid: i32) -> Option<u64> {
    match super::process_state(pid) {
        crate::platform::ProcessState::Running { start } => start,
        _ => None,
    }
}

/// lockrun's own creation time.
pub fn own_start_time_without_allocating() -> Option<u64> {
    use windows_sys::Win32::System::Threading::GetCurrentProcess;
    // SAFETY: the pseudo-handle of the current process needs no closing.
    creation_time(unsafe { GetCurrentProcess() } as RawHandle)
}

/// Blocks until the command has exited; it stays known (its handle open,
/// so its pid is not reused) until [`reap`].
pub fn wait_until_exited(pid: i32) -> io::Result<()> {
    let handle = match started().as_ref() {
        Some(s) if s.pid == pid => s.child.as_raw_handle() as usize,
        _ => {
            return Err(io::Error::other(format!(
                "pid {pid} is not lockrun's command"
            )));
        }
    };
    // SAFETY: the handle stays open while the command is in STARTED, which
    // only `reap`, on this same thread, takes it out of.
    let waited = unsafe { WaitForSingleObject(handle as HANDLE, INFINITE) };
    if waited != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The command's exit status, once it has exited. What it left running
/// in the background goes on, as on Linux: the job no longer ends it when
/// lockrun exits.
pub fn reap(pid: i32) -> io::Result<Option<std::process::ExitStatus>> {
    let mut guard = started();
    let Some(started) = guard.as_mut().filter(|s| s.pid == pid) else {
        return Ok(None);
    };
    let status = started.child.wait()?;
    started.job.keep_running_on_close();
    if let Some(code) = status.code() {
        LAST_EXIT_CODE.store(i64::from(code), Ordering::SeqCst);
    }
    Ok(Some(status))
}

/// The last command's exit code, whole: the run flow's status is a byte
/// (`run::Ending`), which keeps a Windows code beyond 255 (an NTSTATUS
/// such as 0xC0000005 for a crash) as 255; lockrun.exe exits with the
/// code itself, as its own file run always has. `i64::MIN` while none.
static LAST_EXIT_CODE: AtomicI64 = AtomicI64::new(i64::MIN);

/// The exit code of the command lockrun reaped last, if any.
pub fn last_exit_code() -> Option<i32> {
    i32::try_from(LAST_EXIT_CODE.load(Ordering::SeqCst)).ok()
}

/// The command being started, while it is still suspended (inside
/// [`start_command`]'s `before_exec`): its pid and creation time, for the
/// record lockrun writes before it runs (`record::ChildRecord`).
pub fn starting_command() -> Option<(i32, Option<u64>)> {
    started()
        .as_ref()
        .map(|s| (s.pid, creation_time(s.child.as_raw_handle())))
}

/// The command and the variables lockrun adds, prepared before the lock
/// is taken.
pub struct CommandLine {
    args: Vec<OsString>,
    env: Vec<(String, OsString)>,
}

impl CommandLine {
    pub fn new(args: &[OsString], env: &[(&str, &OsStr)]) -> io::Result<CommandLine> {
        if args.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
        }
        Ok(CommandLine {
            args: args.to_vec(),
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        })
    }

    pub fn program(&self) -> &OsStr {
        &self.args[0]
    }

    /// `-F`: Windows cannot replace a process's program (the command line
    /// refuses `-F` before a run starts).
    pub fn exec(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "-F is Unix-only: Windows cannot replace a process's program",
        )
    }
}

/// The process to start for `args` (a program and its arguments), quoted
/// for CreateProcessW by the MSVC rules that programs' C runtimes undo.
/// cmd.exe is the exception: it reads the line after `/c` itself and never
/// undoes `\"`, so `cmd /c STRING` (what `-c` runs, on a lock file or a
/// lock URL) passes STRING as it was given, unquoted.
pub fn command_for(args: &[OsString]) -> std::process::Command {
    let mut builder = std::process::Command::new(&args[0]);
    let is_cmd = std::path::Path::new(&args[0])
        .file_stem()
        .is_some_and(|stem| stem.eq_ignore_ascii_case("cmd"));
    match args {
        [_, c, string] if is_cmd && c.eq_ignore_ascii_case("/c") => {
            builder.arg(c).raw_arg(string);
        }
        _ => {
            builder.args(&args[1..]);
        }
    }
    builder
}

/// Starts the command: created suspended, put in a new job that ends it
/// and all it starts when lockrun's handle on the job closes, then
/// `before_exec` runs (in lockrun: what the Unix command's process does
/// before its exec, Windows does while the command is still suspended),
/// then the command runs. Its pid is returned.
///
/// # Safety
///
/// None beyond the Unix signature's: `before_exec` runs in lockrun's own
/// process here, where any call is allowed.
pub unsafe fn start_command(
    command: &CommandLine,
    _handled: u64,
    before_exec: impl Fn() + Send + Sync + 'static,
) -> io::Result<i32> {
    let mut builder = command_for(&command.args);
    for (name, value) in &command.env {
        builder.env(name, value);
    }
    builder.creation_flags(CREATE_SUSPENDED);
    let job = Job::new(!super::broken("no-kill-on-close"))?;
    let mut child = builder.spawn()?;
    if let Err(e) = job.assign(child.as_raw_handle()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot put the command in a job object: {e}"),
        ));
    }
    let pid = child.id() as i32;
    *started() = Some(Started { pid, child, job });
    // The broken variant (tests/windows.rs must fail on it): the record
    // is written only once the command runs.
    let late = super::broken("record-after-resume");
    if !late {
        before_exec();
    }
    if let Err(e) = resume_process(pid as u32) {
        if let Some(started) = started().take() {
            started.job.terminate(ENDED);
        }
        return Err(e);
    }
    if late {
        std::thread::sleep(Duration::from_millis(300));
        before_exec();
    }
    Ok(pid)
}

/// No watchdog process on Windows: the job's kill-on-close ends the
/// command if lockrun dies, and the lock's lease (or session) then ends on
/// its server. A value of this type cannot exist; [`Watchdog::start`] says
/// so, and the run flow goes on without one, as on Unix when a fork fails.
pub enum Watchdog {}

impl Watchdog {
    pub fn start(_label: &str, _grace: Duration, _grace_shown: &str) -> Option<Watchdog> {
        None
    }

    pub fn hold(&self, _fd: super::BorrowedFd<'_>) {
        match *self {}
    }

    pub fn command_started(&self, _pid: i32) {
        match *self {}
    }

    pub fn child_link(&self) -> ChildLink {
        match *self {}
    }

    pub fn command_exited(&self) {
        match *self {}
    }
}

/// What the command's process would tell a watchdog: never made here.
#[derive(Clone, Copy)]
pub enum ChildLink {}

impl ChildLink {
    pub fn announce(self) {
        match self {}
    }
}

pub fn watchdog_pid() -> i32 {
    0
}
