//! `lockrun list`: every lock on the host, or the lock files given, one
//! report each (the same [`Report`] `holder` makes, so `--json` has
//! `holder --json`'s schema, plus `waiters`).
//!
//! Without arguments the kernel's lock table says which files are locked
//! (flock, POSIX and OFD alike) and one walk of the processes' descriptors
//! says where they are; each is then looked at as `holder` looks at it,
//! from that same reading of the table and that same walk ([`Look`]): one
//! of each per row took 2 min 14 s for 10,000 locks (issue 34 item 4). A
//! locked file no readable descriptor names (another user's, without
//! root; a deleted file; a holder in another mount namespace) is still
//! listed, by device and inode, with the kernel's holders and the reason
//! its path is unknown. Like `holder`, it never takes a lock.

use super::{Look, inspect_in};
use crate::exit_codes::{self, Failure};
use crate::inspect::{Holder, Report, Span, State};
use crate::platform::{self, LockId};
use std::path::{Path, PathBuf};

/// The reports, sorted by path. `all`: a directory's every regular file,
/// also those that are free and hold no record (which are, as far as
/// lockrun can tell, not lock files at all, or lock files never used by
/// lockrun and free now: hidden by default, so that `list /var/lock`
/// shows the locks there and not every file).
pub fn list(paths: &[PathBuf], all: bool) -> Result<Vec<Report>, Failure> {
    let mut look = Look::default();
    // Walked up front, though a row whose record confirms its holders
    // needs no walk: every row then lists every holding process, the
    // command's children too, whichever row comes first.
    look.index();
    let mut reports = if paths.is_empty() {
        every_lock(&mut look)?
    } else {
        given(paths, all, &mut look)
    };
    reports.sort_by(|a, b| a.path.cmp(&b.path));
    reports.dedup_by(|a, b| a.path == b.path);
    Ok(reports)
}

fn every_lock(look: &mut Look) -> Result<Vec<Report>, Failure> {
    let ids = look.ids().map_err(|e| {
        Failure::new(
            exit_codes::UNAVAILABLE,
            format!("cannot list the locks on this host: {e}"),
        )
    })?;
    let paths = platform::paths_in(look.index(), &ids);
    Ok(ids
        .into_iter()
        .map(|id| match paths.get(&id) {
            Some(path) => report_on(path, look),
            None => nameless(id, look),
        })
        .collect())
}

/// The lock files named: a directory stands for its regular files (not
/// those of its subdirectories).
fn given(paths: &[PathBuf], all: bool, look: &mut Look) -> Vec<Report> {
    let mut reports = Vec::new();
    for path in paths {
        if !path.is_dir() {
            reports.push(report_on(path, look));
            continue;
        }
        match std::fs::read_dir(path) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_file()) {
                        let report = report_on(&entry.path(), look);
                        if all || worth_a_row(&report) {
                            reports.push(report);
                        }
                    }
                }
            }
            Err(e) => reports.push(unknown(
                path.display().to_string(),
                format!("cannot read the directory: {e}"),
            )),
        }
    }
    reports
}

/// Whether a file of a directory is shown without `--all`: anything but
/// a free file with nothing to say of it (no record, no waiter, readable).
fn worth_a_row(report: &Report) -> bool {
    report.state != State::Free
        || report.record.is_some()
        || report.slots.is_some()
        || report.waiting > 0
        || report.unreadable
}

/// `holder`'s report on one file; one it cannot make is `unknown` with
/// the reason, never left out.
fn report_on(path: &Path, look: &mut Look) -> Report {
    inspect_in(path, true, look)
        .unwrap_or_else(|failure| unknown(path.display().to_string(), failure.to_string()))
}

fn unknown(path: String, reason: String) -> Report {
    let mut report = Report::free(path);
    report.state = State::Unknown;
    report.reason = Some(reason);
    report
}

/// A locked file whose path no descriptor we may read gives: its id, and
/// what the kernel's table says of it.
fn nameless(id: LockId, look: &mut Look) -> Report {
    let mut report = Report::free(format!(
        "(unknown path) {:x}:{:x}:{}",
        id.major, id.minor, id.ino
    ));
    report.state = State::Held;
    report.reason = Some(
        "no descriptor lockrun may look at names this file (another user's process, without root; a deleted file; another mount namespace)"
            .to_owned(),
    );
    if let Ok(table) = look.kernel_locks(id, false) {
        report.waiting = table.locks.iter().filter(|l| l.waiting).count();
        report.holders = table
            .locks
            .iter()
            .filter(|l| !l.waiting)
            .map(|l| Holder {
                pid: l.pid,
                mode: l.mode.as_str(),
                command: (l.pid > 0)
                    .then(|| platform::process_cmdline(l.pid))
                    .flatten(),
                locked_by: None,
                lock_owner: None,
                span: Some(Span::from(l.span)),
            })
            .collect();
    }
    report
}
