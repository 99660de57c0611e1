//! `holder` and `check`: who holds a lock, found without taking it.
//!
//! The kernel decides whether a lock is held; lockrun only reads its table.
//! The record then adds who and since when, and /proc tells whether the
//! process a record names is still that process. Where the kernel's table
//! cannot be complete (a network file system, a PID namespace that hides
//! holders outside it) the answer is "unknown", never a guess of "free".

use crate::exit_codes::{self, Failure};
use crate::identity::{self, Liveness};
use crate::lock::LockMode;
use crate::platform::{self, KernelLock};
use crate::record::{self, Record};
use rustix::fs::{Mode, OFlags};
use serde::Serialize;
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Held,
    Free,
    Unknown,
}

/// The JSON schema of `holder --json` and `check --json` (README: "JSON").
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub path: String,
    pub state: State,
    /// From the kernel: the processes holding the lock right now.
    pub holders: Vec<Holder>,
    pub record: Option<Record>,
    pub record_holder_alive: Option<bool>,
    pub reason: Option<String>,
    pub exists: bool,
    /// Processes blocked waiting for the lock.
    pub waiting: usize,
    /// The lock file exists but its content could not be read.
    #[serde(skip)]
    pub unreadable: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    pub pid: i32,
    pub mode: &'static str,
    pub command: Option<Vec<String>>,
    /// The pid the kernel names as having taken the lock, when that is not
    /// this process (it inherited the descriptor). The caller may be gone.
    pub locked_by: Option<i32>,
}

pub fn inspect(path: &Path, want_holders: bool) -> Result<Report, Failure> {
    let shown = path.to_string_lossy().into_owned();
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Report {
                path: shown,
                state: State::Free,
                holders: Vec::new(),
                record: None,
                record_holder_alive: None,
                reason: Some("no lock file".to_owned()),
                exists: false,
                waiting: 0,
                unreadable: false,
            });
        }
        Err(e) => {
            return Err(Failure::io(
                exit_codes::NO_INPUT,
                "cannot examine",
                path,
                &e,
            ));
        }
    };
    let (dev, ino) = (meta.dev(), meta.ino());

    let (record, unreadable) = if meta.is_file() {
        match read_record(path, dev, ino) {
            Ok(record) => (record, false),
            Err(_) => (None, true),
        }
    } else {
        (None, false)
    };
    let liveness = record.as_ref().map(identity::record_holder);
    let mut report = Report {
        path: shown,
        state: State::Free,
        holders: Vec::new(),
        record,
        record_holder_alive: liveness.and_then(Liveness::as_option),
        reason: None,
        exists: true,
        waiting: 0,
        unreadable,
    };

    let kernel = match platform::kernel_locks(dev, ino) {
        Ok(locks) => locks,
        Err(e) => {
            report.state = State::Unknown;
            report.reason = Some(format!("cannot read the kernel's lock table: {e}"));
            return Ok(report);
        }
    };
    report.waiting = kernel.iter().filter(|l| l.waiting).count();
    let held: Vec<&KernelLock> = kernel.iter().filter(|l| !l.waiting).collect();

    if !held.is_empty() {
        report.state = State::Held;
        if want_holders {
            report.holders = holders(dev, ino, &held);
        }
        return Ok(report);
    }

    let unreleased = report.record.as_ref().filter(|r| !r.is_released());
    let our_ns = platform::pid_namespace();
    let hidden_by_namespace = our_ns.is_some_and(|ns| ns != platform::INITIAL_PID_NAMESPACE);
    if let Some(rec) = unreleased
        && hidden_by_namespace
    {
        // In a child PID namespace /proc/locks hides locks whose taker it
        // cannot see. A live recorded holder may still hold it: ask the
        // descriptors themselves.
        if liveness == Some(Liveness::Alive) {
            let (fd_holders, _) = platform::fd_holders(dev, ino);
            if !fd_holders.is_empty() {
                report.state = State::Held;
                report.holders = fd_holders
                    .iter()
                    .map(|h| describe(h.pid, h.mode, None))
                    .collect();
                return Ok(report);
            }
        }
        if rec.pid_ns.is_some() && rec.pid_ns != our_ns {
            report.state = State::Unknown;
            report.reason = Some(format!(
                "the record names pid {} in another PID namespace, and this namespace's lock table cannot show its locks",
                rec.pid.unwrap_or(0)
            ));
            return Ok(report);
        }
    }
    if let Some(fs_name) = platform::file_system_magic(path).and_then(platform::network_fs_name) {
        report.state = State::Unknown;
        let host = report
            .record
            .as_ref()
            .and_then(|r| r.host.clone())
            .map(|h| format!("; the record names host {h}"))
            .unwrap_or_default();
        report.reason = Some(format!(
            "on {fs_name}: a holder on another machine does not appear in this kernel's lock table{host}"
        ));
        return Ok(report);
    }
    Ok(report)
}

/// Takes and at once releases a lock attempt: the only certain answer where
/// the kernel's table is incomplete, and the only code here that touches the
/// lock. Never creates the file.
pub fn probe(path: &Path) -> io::Result<State> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(State::Free),
        Err(e) => return Err(e.into()),
    };
    let file = File::from(fd);
    match file.try_lock() {
        Ok(()) => {
            file.unlock()?;
            Ok(State::Free)
        }
        Err(TryLockError::WouldBlock) => Ok(State::Held),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

fn read_record(path: &Path, dev: u64, ino: u64) -> io::Result<Option<Record>> {
    // Non-blocking, so that a FIFO swapped in after the stat cannot hang us;
    // checked through the descriptor that it is still the same file.
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() || meta.dev() != dev || meta.ino() != ino {
        return Ok(None);
    }
    Ok(Record::parse(&record::read_content(&file)?))
}

fn holders(dev: u64, ino: u64, held: &[&KernelLock]) -> Vec<Holder> {
    let (fd_holders, _complete) = platform::fd_holders(dev, ino);
    if fd_holders.is_empty() {
        // No access to other processes' descriptors (not root): the
        // kernel's pid is the best we have.
        return held.iter().map(|l| describe(l.pid, l.mode, None)).collect();
    }
    let callers: Vec<i32> = held.iter().map(|l| l.pid).collect();
    fd_holders
        .iter()
        .map(|h| {
            // When the process that called flock is gone, say so: the
            // holder inherited the lock from it.
            let caller = callers
                .iter()
                .copied()
                .find(|&c| c != h.pid && c > 0 && platform::process_exists(c) == Some(false));
            describe(h.pid, h.mode, caller)
        })
        .collect()
}

fn describe(pid: i32, mode: LockMode, locked_by: Option<i32>) -> Holder {
    Holder {
        pid,
        mode: mode.as_str(),
        command: platform::process_cmdline(pid),
        locked_by,
    }
}
