//! `holder` and `check` on Windows. There is no lock table to read: the
//! answer is the record plus Windows' word on the process it names (pid
//! and creation time). Only lockrun locks that byte, so a live, unreleased
//! record means held; where the record cannot tell (no record, a holder
//! that writes none: `-s`, `--no-record`, a record another program's data
//! kept out), the answer is `unknown` (69) unless `check --probe`.

use crate::backend::file_windows::open_lock_file;
use crate::display;
use crate::exit_codes;
use crate::identity::Liveness;
use crate::platform::windows::{Attempt, LOCK_OFFSET, lock_byte, unlock_byte};
use crate::record::{self, Record, SlotsHeader};
use serde::Serialize;
use std::io::Write as _;
use std::os::windows::io::AsRawHandle;
use std::path::Path;
use std::time::SystemTime;

#[derive(Serialize)]
struct Holder {
    pid: i64,
    mode: String,
    command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slot: Option<u16>,
}

#[derive(Serialize)]
struct Report {
    path: String,
    state: &'static str,
    holders: Vec<Holder>,
    record: Option<Record>,
    record_holder_alive: Option<bool>,
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slots: Option<u16>,
    #[serde(skip)]
    unreadable: bool,
}

fn report(path: &Path, probe: bool) -> Report {
    let mut out = Report {
        path: path.display().to_string(),
        state: "unknown",
        holders: Vec::new(),
        record: None,
        record_holder_alive: None,
        reason: None,
        slots: None,
        unreadable: false,
    };
    if !path.exists() && std::fs::symlink_metadata(path).is_err() {
        out.state = "free";
        out.reason = Some("no lock file".to_owned());
        return out;
    }
    let lock = match open_lock_file(path, false) {
        Ok(l) => l,
        Err(f) => {
            out.reason = Some(f.message);
            out.unreadable = true;
            return out;
        }
    };
    let content = record::read_content(&lock.file).unwrap_or_default();
    if let Some(header) = SlotsHeader::parse(&content) {
        return slots_report(out, path, header.slots);
    }
    let rec = Record::parse(&content);
    match &rec {
        None => {
            out.reason = Some(if content.is_empty() {
                "no holder record: a holder that writes none (-s, --no-record) cannot be seen on Windows without taking the lock (check --probe)".to_owned()
            } else {
                "the file holds no lockrun record: Windows cannot say who holds it without taking the lock (check --probe)".to_owned()
            });
        }
        Some(r) if r.is_released() => {
            out.state = "free";
            out.record_holder_alive = Some(false);
        }
        Some(r) => match r.holder_liveness() {
            Liveness::Alive => {
                out.state = "held";
                out.record_holder_alive = Some(true);
                out.holders.push(Holder {
                    pid: r.pid.unwrap_or(0),
                    mode: r.mode.clone().unwrap_or_else(|| "exclusive".into()),
                    command: r.command.clone().unwrap_or_default(),
                    slot: None,
                });
            }
            Liveness::Dead => {
                out.state = "free";
                out.record_holder_alive = Some(false);
                out.reason = Some("the recorded holder is gone: its lock went with it".into());
            }
            Liveness::CannotTell => {
                out.reason = Some("the record names a process on another host".into());
            }
        },
    }
    out.record = rec;
    if probe && out.state != "held" {
        let handle = lock.file.as_raw_handle();
        match lock_byte(handle, LOCK_OFFSET, true, false) {
            Attempt::Acquired => {
                unlock_byte(handle, LOCK_OFFSET);
                out.state = "free";
                out.reason = Some("probed: the lock was free (taken and let go at once)".into());
            }
            Attempt::Busy => {
                out.state = "held";
                out.reason =
                    Some("probed: the lock is held by a holder that wrote no record".into());
            }
            Attempt::Failed(e) => out.reason = Some(format!("probe failed: {e}")),
        }
    }
    out
}

fn slots_report(mut out: Report, path: &Path, n: u16) -> Report {
    out.slots = Some(n);
    let mut unknown = 0;
    for k in 1..=n {
        let slot = record::slot_path(path, k);
        let Ok(lock) = open_lock_file(&slot, false) else {
            continue;
        };
        let content = record::read_content(&lock.file).unwrap_or_default();
        match Record::parse(&content) {
            Some(r) if !r.is_released() => match r.holder_liveness() {
                Liveness::Alive => out.holders.push(Holder {
                    pid: r.pid.unwrap_or(0),
                    mode: "exclusive".into(),
                    command: r.command.clone().unwrap_or_default(),
                    slot: Some(k),
                }),
                Liveness::Dead => {}
                Liveness::CannotTell => unknown += 1,
            },
            Some(_) => {}
            None if content.is_empty() && lock.file.metadata().is_ok_and(|m| m.len() == 0) => {}
            None => unknown += 1,
        }
    }
    out.state = if !out.holders.is_empty() {
        "held"
    } else if unknown > 0 {
        "unknown"
    } else {
        "free"
    };
    out.reason = Some(format!(
        "{} of {n} slots held by a recorded holder",
        out.holders.len()
    ));
    out
}

fn human(r: &Report) -> String {
    let path = display::escape(&r.path);
    let since = |rec: &Record| {
        rec.acquired_at
            .as_deref()
            .and_then(display::parse_time)
            .map(|t| format!("since {} ({})", display::date_time(t), display::ago(t)))
            .unwrap_or_default()
    };
    match (r.state, &r.record) {
        ("held", Some(rec)) if r.slots.is_none() => {
            let mut line = format!(
                "{path}: held ({}) by pid {} `{}`",
                rec.mode.as_deref().unwrap_or("exclusive"),
                rec.pid.unwrap_or(0),
                display::record_command(rec)
            );
            if let Some(user) = &rec.user {
                line += &format!(", user {}", display::escape(user));
            }
            if let Some(host) = &rec.host {
                line += &format!(", host {}", display::escape(host));
            }
            line += &format!("\n  {}", since(rec));
            if let Some(p) = rec.lockrun_pid {
                line += &format!(", via lockrun pid {p}");
            }
            line
        }
        ("free", Some(rec)) if r.slots.is_none() => {
            let mut line = format!(
                "{path}: free; last held by pid {} `{}`",
                rec.pid.unwrap_or(0),
                display::record_command(rec)
            );
            let from = rec.acquired_at.as_deref().and_then(display::parse_time);
            let to = rec.released_at.as_deref().and_then(display::parse_time);
            if let (Some(a), Some(b)) = (from, to) {
                let took = b.duration_since(a).unwrap_or_default();
                line += &format!(
                    " {}\u{2013}{} ({})",
                    display::date_time(a),
                    display::clock(b),
                    display::span(took)
                );
            } else if let Some(a) = from {
                line += &format!(" {}", display::date_time(a));
            }
            if let Some(exit) = &rec.exit {
                line += &format!(", {}", display::exit(exit));
            }
            if let Some(reason) = &r.reason {
                line += &format!(" ({})", display::escape(reason));
            }
            line
        }
        _ => {
            let mut line = format!("{path}: {}", r.state);
            for h in &r.holders {
                line += &format!(
                    "\n  slot {}: pid {} `{}`",
                    h.slot.unwrap_or(0),
                    h.pid,
                    display::escape(&display::command(&h.command))
                );
            }
            if let Some(reason) = &r.reason {
                line += &format!(" ({})", display::escape(reason));
            }
            line
        }
    }
}

fn print(r: &Report, json: bool) -> bool {
    let text = if json {
        crate::sanitize::json(r).unwrap_or_default()
    } else {
        human(r)
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}

pub fn holder(json: bool, paths: &[std::path::PathBuf]) -> i32 {
    let _ = SystemTime::now();
    let mut status = 0;
    for path in paths {
        let r = report(path, false);
        if r.unreadable {
            status = i32::from(exit_codes::NO_INPUT);
        }
        if !print(&r, json) {
            return i32::from(exit_codes::OS_ERROR);
        }
    }
    status
}

/// `list`: the lock files given, a directory standing for its regular
/// files (not those of its subdirectories), one line each (one JSON object
/// each with `--json`, `holder --json`'s), sorted by path. The waiter count
/// of Linux's list is absent: Windows does not say who waits.
pub fn list(json: bool, paths: &[std::path::PathBuf]) -> i32 {
    let mut reports = Vec::new();
    for path in paths {
        if !path.is_dir() {
            reports.push(report(path, false));
            continue;
        }
        match std::fs::read_dir(path) {
            Ok(entries) => reports.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| report(&e.path(), false)),
            ),
            Err(e) => reports.push(Report {
                path: path.display().to_string(),
                state: "unknown",
                holders: Vec::new(),
                record: None,
                record_holder_alive: None,
                reason: Some(format!("cannot read the directory: {e}")),
                slots: None,
                unreadable: true,
            }),
        }
    }
    reports.sort_by(|a, b| a.path.cmp(&b.path));
    reports.dedup_by(|a, b| a.path == b.path);
    let mut out = std::io::stdout().lock();
    for r in &reports {
        let text = if json {
            crate::sanitize::json(r).unwrap_or_default()
        } else {
            // holder's answer on one line: its lines below the first
            // (since when, the slots) joined to it.
            human(r).replace("\n  ", ", ")
        };
        if writeln!(out, "{text}").is_err() {
            return i32::from(exit_codes::OS_ERROR);
        }
    }
    if out.flush().is_err() {
        return i32::from(exit_codes::OS_ERROR);
    }
    0
}

pub fn check(json: bool, quiet: bool, probe: bool, path: &Path) -> i32 {
    let r = report(path, probe);
    if (!quiet || json) && !print(&r, json) {
        return i32::from(exit_codes::OS_ERROR);
    }
    if r.unreadable {
        return i32::from(exit_codes::NO_INPUT);
    }
    i32::from(match r.state {
        "held" => 0,
        "free" => exit_codes::NOT_HELD,
        _ => exit_codes::UNAVAILABLE,
    })
}
