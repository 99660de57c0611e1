//! `holder` and `check`: what every backend's inspection reports (a
//! [`Report`]), which `report.rs` and the JSON print without asking which
//! backend it was. Each backend finds its own answer in its folder
//! (`backend/file/inspect.rs`: the kernel's table; `backend/etcd/inspect.rs`,
//! `backend/postgres/inspect.rs`); `registry::look_up` picks the one a lock
//! goes to. This module is below the backends: it names none of them.
//!
//!
//! The kernel decides whether a lock is held; lockrun only reads its table.
//! The record then adds who and since when, and /proc tells whether the
//! process a record names is still that process. Where the kernel's table
//! cannot be complete (a network file system, a PID namespace that hides
//! holders outside it) the answer is "unknown", never a guess of "free".

use crate::exit_codes;
use crate::platform::LockSpan;
use crate::record::Record;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Held,
    Free,
    Unknown,
}

/// The JSON schema of `holder --json` and `check --json` (docs/GUIDE.md: "JSON").
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
    /// Held, and the live holder the unreleased record names is not among
    /// the holders found, but its descriptors (fdinfo) could not be looked
    /// at (another user's, without root): whether it holds the lock cannot
    /// be told, which is not the same as "it does not".
    #[serde(skip)]
    pub record_unconfirmed: bool,
    /// `--slots N`: N, and the report on each slot's lock file (slot 1
    /// first). Absent for a plain lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_reports: Option<Vec<Report>>,
    /// `--slots N`: who holds `LOCKFILE` itself other than the head of
    /// its queue (flock(1), a plain lockrun, an fcntl or lockf user): the
    /// kernel's word on the file, which the slots alone do not show.
    /// Empty when only the queue's head (or nobody) holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lockfile_holders: Option<Vec<Holder>>,
    /// For a lock URL: what its service says of the lock, under the
    /// backend's own name in JSON (`etcd`, `postgres`). Absent for files,
    /// whose JSON schema is unchanged.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub service: Option<Service>,
}

impl Holder {
    /// The holder a lock URL's record names: its command's pid, when the
    /// record has one yet (a key or session that got the lock before its
    /// command started names none, and never pid 0).
    pub fn named_by(record: &Record) -> Option<Holder> {
        let pid = record
            .pid
            .and_then(|p| i32::try_from(p).ok())
            .filter(|&p| p > 0)?;
        Some(Holder {
            pid,
            mode: "exclusive",
            command: record.command.clone(),
            locked_by: None,
            span: None,
            lock_owner: None,
        })
    }
}

/// What a lock URL's backend adds to a report, in terms every backend
/// fills the same way: so `holder`'s output, its JSON and its exit status
/// never ask which backend it was (each builds its own, in its folder's
/// `inspect.rs`).
#[derive(Debug, Clone)]
pub struct Service {
    /// The JSON key of `json`: the backend's name.
    pub name: &'static str,
    /// Who holds a lock when no process can be named: "an etcd client".
    pub holder: &'static str,
    /// Lines under the holder, already escaped for the terminal.
    pub details: Vec<String>,
    /// What a free lock says when the service keeps no past holder.
    pub no_past_holders: Option<&'static str>,
    /// The backend's object as its own type wrote it: fields in the order
    /// it declares them, as before the generic report.
    pub json: Box<serde_json::value::RawValue>,
}

impl Service {
    /// A backend's object for `json`, escaped as every report is
    /// (`sanitize::json`: no raw DEL or C1 from a remote service either).
    pub fn json_of<T: Serialize>(value: &T) -> Box<serde_json::value::RawValue> {
        crate::sanitize::json(value)
            .ok()
            .and_then(|text| serde_json::value::RawValue::from_string(text).ok())
            .unwrap_or_else(|| serde_json::value::RawValue::NULL.to_owned())
    }
}

/// `{"NAME": {...}}`, flattened into the report.
impl Serialize for Service {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.name, &self.json)?;
        map.end()
    }
}

/// `check --token` on a lock file, on every OS: a usage error.
pub const TOKEN_FOR_FILES: &str = "--token is for lock URLs: a file lock has no fencing token (the kernel alone says who holds it; `lockrun check LOCKFILE` asks)";

impl Report {
    /// Whether `token` is the fencing token of a current holder (of the
    /// lock, or of one of its slots): what the holder's record says, read
    /// from the service that holds the lock. A record that is not written
    /// yet (the moment between the lock and the command's start) or not at
    /// all (`--no-record`) confirms nothing: "no" is the safe answer for a
    /// script about to act.
    pub fn holds_token(&self, token: i64) -> bool {
        let own = self.state == State::Held
            && self
                .record
                .as_ref()
                .is_some_and(|r| r.fencing_token == Some(token) && !r.is_released());
        own || self
            .slot_reports
            .iter()
            .flatten()
            .any(|slot| slot.holds_token(token))
    }

    /// `check`'s exit status for this answer, with `--token T` or
    /// without: one rule for lockrun on every OS. 69 when the lock's state
    /// is unknown; without a token 0 held, 1 free; with one, 0 only if T
    /// is a current holder's token.
    pub fn check_status(&self, token: Option<i64>) -> u8 {
        match (self.state, token) {
            (State::Unknown, _) => exit_codes::UNAVAILABLE,
            (State::Held, None) => 0,
            (State::Free, None) => exit_codes::NOT_HELD,
            (_, Some(token)) if self.holds_token(token) => 0,
            (_, Some(_)) => exit_codes::NOT_HELD,
        }
    }

    /// An existing lock nobody holds, with nothing known yet about it:
    /// what each kind of inspection starts from.
    pub fn free(path: String) -> Report {
        Report {
            path,
            state: State::Free,
            holders: Vec::new(),
            record: None,
            record_holder_alive: None,
            reason: None,
            exists: true,
            waiting: 0,
            unreadable: false,
            record_unconfirmed: false,
            slots: None,
            slot_reports: None,
            lockfile_holders: None,
            service: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    pub pid: i32,
    pub mode: &'static str,
    pub command: Option<Vec<String>>,
    /// The pid the kernel names as having taken the lock, when that process
    /// no longer holds it: this one inherited the descriptor.
    pub locked_by: Option<i32>,
    /// For a file lock: which kind, on which bytes (`kind`, `start`, `end`
    /// in JSON). Absent for a lock URL.
    #[serde(flatten)]
    pub span: Option<Span>,
    /// The pid the kernel names as having taken this holder's lock (its
    /// descriptor's fdinfo), where it says: processes with the same one
    /// hold one lock through one open file description (`lockrun -s` and
    /// its command), so the human output lists them as one holder. Not in
    /// the JSON, which lists every process as before.
    #[serde(skip)]
    pub lock_owner: Option<i32>,
}

/// One object of `list --json`: `holder --json`'s, plus `waiters`, the
/// contract's name for the waiters' count (§16). `waiting`, the same
/// count, stays: `holder --json` documents it.
#[derive(Debug, Serialize)]
pub struct Listed<'a> {
    #[serde(flatten)]
    pub report: &'a Report,
    pub waiters: usize,
}

impl<'a> From<&'a Report> for Listed<'a> {
    fn from(report: &'a Report) -> Listed<'a> {
        Listed {
            report,
            waiters: report.waiting,
        }
    }
}

/// A file lock's kind and byte range, as --json shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// `flock`, `ofd` or `posix`.
    pub kind: &'static str,
    pub start: u64,
    /// The last byte locked, inclusive; null: to the end of the file.
    pub end: Option<u64>,
}

impl From<LockSpan> for Span {
    fn from(span: LockSpan) -> Span {
        Span {
            kind: span.kind.as_str(),
            start: span.start,
            end: span.end,
        }
    }
}
