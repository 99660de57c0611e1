//! Windows: the operating-system calls lockrun needs there, with the same
//! names the Unix modules give the facade where the portable code calls
//! them (`process_state`, `boot_id`, `pid_namespace`, `FileExt`). The
//! Windows front end built on them (the run form, `holder`, `check`) is
//! `crate::windows`, above the bottom layer.
//!
//! The lock is `LockFileEx` on one byte far past the record
//! ([`LOCK_OFFSET`], 2^32), never on the record's bytes: Windows enforces
//! byte-range locks on `ReadFile`, so a lock over the record would hide it
//! from `holder` (std's `File::lock` locks the whole file, and would). The
//! command starts suspended inside a job object that kills it when the
//! job's last handle closes, the record is written through the lock handle,
//! then the command's thread resumes: the record is complete before the
//! command runs, as the child-side writer makes it on Linux.

mod fds;
mod files;
mod process;
// The run flow's signal handling, under its name (`platform::signals`).
pub mod signals;
mod threads;

pub use fds::{
    AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd, duplicate_above_stdio, file_fd, socket_fds,
    terminal_columns, wait_for_hang_up, with_file_of,
};
pub use files::{
    NotRead, create_new, file_id, metrics_lock_beside, open_regular, open_without_waiting,
    others_may_access, permission_bits, same_file, send_datagram, set_permission_bits,
};
pub use process::{
    BeforeStart, ChildLink, CommandLine, KILL_SIGNAL, STOP_SIGNAL, STOPS_BY_SIGNALS, Target,
    Watchdog, adopt_orphans, before_start, command_for, descendants, die_with_parent,
    group_kept_with_command, last_exit_code, leave_command_group, own_start_time_since,
    own_start_time_without_allocating, process_start_time, reap, start_command, starting_command,
    stop_all, stop_described, wait_reaping_orphans, wait_until_exited, watchdog_pid,
};
pub use threads::{
    Bell, block_signals_on_this_thread, ignore_broken_pipes, interrupt_helper, spawn_helper,
    tolerating_file_size_limit, with_signals_blocked,
};

use crate::platform::ProcessState;
use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_LOCK_VIOLATION, FILETIME, HANDLE, INVALID_HANDLE_VALUE, STILL_ACTIVE,
    WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Storage::FileSystem::{
    BY_HANDLE_FILE_INFORMATION, GetFileInformationByHandle, LOCKFILE_EXCLUSIVE_LOCK,
    LOCKFILE_FAIL_IMMEDIATELY, LockFileEx, UnlockFileEx,
};
use windows_sys::Win32::System::IO::OVERLAPPED;
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    PROCESS_SYNCHRONIZE, WaitForSingleObject,
};

/// The byte lockrun locks: far past any record (at most 64 KiB), so that
/// the record stays readable by anyone while the lock is held.
pub const LOCK_OFFSET: u64 = 1 << 32;

/// `read_at` and `write_at` as the Unix `FileExt` names them, so that the
/// record code reads and writes the same way everywhere. Windows'
/// positioned I/O moves the file pointer too; lockrun never relies on it.
pub trait FileExt {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
}

impl FileExt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::windows::fs::FileExt::seek_read(self, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        std::os::windows::fs::FileExt::seek_write(self, buf, offset)
    }
}

/// Windows has no boot id a record could carry: the field is absent.
pub fn boot_id() -> Option<String> {
    None
}

/// Nor PID namespaces.
pub fn pid_namespace() -> Option<u64> {
    None
}

/// The computer's name, for the record's `host`.
pub fn computer_name() -> Option<String> {
    std::env::var("COMPUTERNAME").ok().filter(|n| !n.is_empty())
}

/// How many names the open file has (`nlink` on Unix).
pub fn link_count(file: &File, _meta: &std::fs::Metadata) -> io::Result<u64> {
    Ok(u64::from(file_information(file)?.nNumberOfLinks))
}

/// Windows has no uid: `Record::starting` writes none there.
pub fn user_id() -> u32 {
    0
}

/// The computer's name, for the record's `host`.
pub fn host_name() -> Option<String> {
    computer_name()
}

/// A Windows process ends with an exit code, never a signal.
pub fn exit_signal(_status: std::process::ExitStatus) -> Option<i32> {
    None
}

pub fn file_information(file: &File) -> io::Result<BY_HANDLE_FILE_INFORMATION> {
    // SAFETY: an all-zero BY_HANDLE_FILE_INFORMATION is valid; the call
    // fills it in for an open handle.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is open for the life of `file`.
    if unsafe { GetFileInformationByHandle(file.as_raw_handle(), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

fn filetime_u64(t: FILETIME) -> u64 {
    (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)
}

/// A process's creation time (100 ns units since 1601, as `GetProcessTimes`
/// gives it): the record's `pid_start`, which tells a reused pid apart.
pub fn creation_time(process: RawHandle) -> Option<u64> {
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: four FILETIMEs to fill in, for a handle the caller holds.
    let done = unsafe {
        GetProcessTimes(
            process as HANDLE,
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    };
    (done != 0).then(|| filetime_u64(created))
}

/// Whether `pid` names a running process, with its creation time.
pub fn process_state(pid: i32) -> ProcessState {
    let Ok(pid) = u32::try_from(pid) else {
        return ProcessState::Gone;
    };
    // SAFETY: OpenProcess returns a new handle or null.
    let handle = unsafe {
        OpenProcess(
            PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_SYNCHRONIZE,
            0,
            pid,
        )
    };
    if handle.is_null() {
        return match io::Error::last_os_error().raw_os_error() {
            // ERROR_INVALID_PARAMETER: no such process.
            Some(87) => ProcessState::Gone,
            // ERROR_ACCESS_DENIED: it exists, but is not ours to ask.
            Some(5) => ProcessState::Running { start: None },
            _ => ProcessState::Unknown,
        };
    }
    // SAFETY: the handle was just opened and is ours to close.
    let handle = unsafe { OwnedHandle::from_raw_handle(handle as RawHandle) };
    // SAFETY: a zero timeout only asks whether the process has ended.
    let waited = unsafe { WaitForSingleObject(handle.as_raw_handle() as HANDLE, 0) };
    match waited {
        WAIT_OBJECT_0 => ProcessState::Gone,
        WAIT_TIMEOUT => ProcessState::Running {
            start: creation_time(handle.as_raw_handle()),
        },
        _ => {
            // Without SYNCHRONIZE: the exit code says STILL_ACTIVE while it runs.
            let mut code = 0u32;
            // SAFETY: one u32 to fill in, for the handle above.
            let done = unsafe { GetExitCodeProcess(handle.as_raw_handle() as HANDLE, &mut code) };
            if done != 0 && code == STILL_ACTIVE as u32 {
                ProcessState::Running {
                    start: creation_time(handle.as_raw_handle()),
                }
            } else if done != 0 {
                ProcessState::Gone
            } else {
                ProcessState::Unknown
            }
        }
    }
}

/// A deliberately broken build, for showing that tests/windows.rs can fail
/// (`LOCKRUN_BROKEN=no-lock|record-after-resume|no-kill-on-close|no-terminate-job|share-delete` at build
/// time; .ci/windows.sh --broken does it). Empty in every real build.
const BROKEN: &str = match option_env!("LOCKRUN_BROKEN") {
    Some(s) => s,
    None => "",
};

pub(crate) fn broken(what: &str) -> bool {
    BROKEN == what
}

/// The outcome of one lock attempt.
#[derive(Debug)]
pub enum Attempt {
    Acquired,
    /// Held by someone else (`-n`).
    Busy,
    Failed(io::Error),
}

fn overlapped_at(offset: u64) -> OVERLAPPED {
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = offset as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    ov
}

/// `LockFileEx` on the one byte at `offset`: exclusive or shared, at once
/// or waiting. The handle is synchronous, so a waiting call blocks this
/// thread until the lock is granted (overlapped waits never complete under
/// Wine; a deadline is a helper thread, see `run`).
pub fn lock_byte(handle: RawHandle, offset: u64, exclusive: bool, wait: bool) -> Attempt {
    if broken("no-lock") {
        return Attempt::Acquired;
    }
    let mut flags = 0;
    if exclusive {
        flags |= LOCKFILE_EXCLUSIVE_LOCK;
    }
    if !wait {
        flags |= LOCKFILE_FAIL_IMMEDIATELY;
    }
    let mut ov = overlapped_at(offset);
    // SAFETY: a synchronous handle: the call completes before it returns,
    // and `ov` outlives it.
    let done = unsafe { LockFileEx(handle as HANDLE, flags, 0, 1, 0, &mut ov) };
    if done != 0 {
        return Attempt::Acquired;
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        Attempt::Busy
    } else {
        Attempt::Failed(e)
    }
}

/// Lets go of the byte at `offset`.
pub fn unlock_byte(handle: RawHandle, offset: u64) {
    let mut ov = overlapped_at(offset);
    // SAFETY: as in lock_byte.
    unsafe { UnlockFileEx(handle as HANDLE, 0, 1, 0, &mut ov) };
}

/// A job object: every process the command starts is in it, and closing
/// its last handle (lockrun exiting, however) ends them all.
pub struct Job {
    handle: OwnedHandle,
}

impl Job {
    pub fn new(kill_on_close: bool) -> io::Result<Job> {
        use windows_sys::Win32::System::JobObjects::{
            CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
            JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
            SetInformationJobObject,
        };
        // SAFETY: no attributes, no name: a new anonymous job, or null.
        let raw = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new handle, ours to close.
        let handle = unsafe { OwnedHandle::from_raw_handle(raw as RawHandle) };
        if kill_on_close {
            // SAFETY: all-zero limits are valid; one flag is set below.
            let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
            limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
            // SAFETY: the struct and its size, for the class that reads it.
            let done = unsafe {
                SetInformationJobObject(
                    raw,
                    JobObjectExtendedLimitInformation,
                    (&raw const limits).cast::<c_void>(),
                    std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
                )
            };
            if done == 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Job { handle })
    }

    pub fn assign(&self, process: RawHandle) -> io::Result<()> {
        use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
        // SAFETY: both handles are open.
        if unsafe { AssignProcessToJobObject(self.raw(), process as HANDLE) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Lifts kill-on-close: the command has exited, and what it left
    /// running in the background is not lockrun's to end.
    pub fn keep_running_on_close(&self) {
        use windows_sys::Win32::System::JobObjects::{
            JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
            SetInformationJobObject,
        };
        // SAFETY: all-zero limits: none.
        let limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: the struct and its size, for the class that reads it.
        unsafe {
            SetInformationJobObject(
                self.raw(),
                JobObjectExtendedLimitInformation,
                (&raw const limits).cast::<c_void>(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
    }

    /// Ends every process in the job.
    pub fn terminate(&self, code: u32) -> bool {
        use windows_sys::Win32::System::JobObjects::TerminateJobObject;
        // SAFETY: the job handle is open.
        unsafe { TerminateJobObject(self.raw(), code) != 0 }
    }

    /// A raw copy of the handle for a watcher thread; the `Job` must outlive it.
    pub fn raw(&self) -> HANDLE {
        self.handle.as_raw_handle() as HANDLE
    }
}

/// Ends every process in the job whose handle `raw` is (a watcher thread's copy).
pub fn terminate_job_raw(raw: usize, code: u32) -> bool {
    use windows_sys::Win32::System::JobObjects::TerminateJobObject;
    // SAFETY: the caller keeps the job open while its watcher runs.
    unsafe { TerminateJobObject(raw as HANDLE, code) != 0 }
}

/// Resumes every thread of a process started with `CREATE_SUSPENDED` (it
/// has one: its main thread). std does not hand out the thread handle it
/// got from CreateProcessW, so the thread is found by the process's id.
pub fn resume_process(pid: u32) -> io::Result<()> {
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, TH32CS_SNAPTHREAD, THREADENTRY32, Thread32First, Thread32Next,
    };
    use windows_sys::Win32::System::Threading::{OpenThread, ResumeThread, THREAD_SUSPEND_RESUME};
    // SAFETY: a snapshot of every thread, or INVALID_HANDLE_VALUE.
    let snap = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if snap == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new handle, ours to close.
    let snap = unsafe { OwnedHandle::from_raw_handle(snap as RawHandle) };
    let mut entry = THREADENTRY32 {
        dwSize: std::mem::size_of::<THREADENTRY32>() as u32,
        cntUsage: 0,
        th32ThreadID: 0,
        th32OwnerProcessID: 0,
        tpBasePri: 0,
        tpDeltaPri: 0,
        dwFlags: 0,
    };
    let mut resumed = 0;
    // SAFETY: the snapshot is open; `entry` has its size set.
    let mut more = unsafe { Thread32First(snap.as_raw_handle() as HANDLE, &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: a new handle or null.
            let thread = unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) };
            if !thread.is_null() {
                // SAFETY: the thread handle is open; closed right after.
                unsafe {
                    if ResumeThread(thread) != u32::MAX {
                        resumed += 1;
                    }
                    CloseHandle(thread);
                }
            }
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snap.as_raw_handle() as HANDLE, &mut entry) } != 0;
    }
    if resumed == 0 {
        return Err(io::Error::other("found no thread of the command to resume"));
    }
    Ok(())
}

/// While the command runs, Ctrl-C and Ctrl-Break are the command's: the
/// console delivers them to every process attached to it, lockrun
/// included, so lockrun handles them by doing nothing and waits for the
/// command, which gets them once. A handler routine is not inherited (the
/// ignore flag `SetConsoleCtrlHandler(NULL, TRUE)` would be).
pub fn leave_console_events_to_command() {
    use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
    unsafe extern "system" fn ignore(_event: u32) -> windows_sys::core::BOOL {
        1
    }
    // SAFETY: a handler that touches nothing.
    unsafe { SetConsoleCtrlHandler(Some(ignore), 1) };
}
