//! The holder record: one line of JSON in the lock file saying who holds
//! (or last held) the lock.
//!
//! The record is diagnostic only. The kernel, not the record, decides who
//! holds the lock: a record can be stale (its writer was killed), and a lock
//! can be held by a program that writes no record (flock(1)). Readers
//! therefore treat anything they cannot parse as "no record", never as an
//! error that hides the lock state, and writers never touch a file that
//! holds anything but a record of ours.

use crate::platform::FileExt;
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

pub const FORMAT: u32 = 1;

/// More than this is not a record of ours, and a reader never trusts more:
/// a hostile lock file must not make `holder` read gigabytes.
pub const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Caps on what a record keeps, in bytes as written in JSON (a control
/// character takes six there: `\u0001`), so that any argv or working
/// directory leaves the record far below what readers accept.
const MAX_ARG_JSON: usize = 1024;
const MAX_COMMAND_JSON: usize = 16 * 1024;
const MAX_CWD_JSON: usize = 4 * 1024;
const MAX_NAME_JSON: usize = 256;

/// Marks a cut.
const CUT: &str = "…";

/// Field order matters: `lockrun`, `pid` and `pid_start` come first so the
/// forked child can splice its own pid and start time into a record the
/// parent prepared (see [`ChildRecord`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub lockrun: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockrun_pid: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The PID namespace `pid` is counted in: a pid from another namespace
    /// cannot be checked against our /proc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<u64>,
    /// `--max-time`, as given: when the command will be stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_time: Option<String>,
    /// On a lock URL: the holder's `LOCKRUN_FENCING_TOKEN`, which
    /// `check --token` compares (a file lock has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<i64>,
    /// `--also`: the other lock files this run holds with this one (all
    /// or none), as absolute paths, so that `holder` on any of them names
    /// the whole set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
}

/// How the command ended: `{"code":0}` or `{"signal":9}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Set when lockrun stopped the command at `--max-time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_time: Option<String>,
}

impl Exit {
    /// How a command that ran ended.
    pub fn of(status: std::process::ExitStatus) -> Exit {
        Exit {
            code: status.code(),
            signal: crate::platform::exit_signal(status),
            max_time: None,
        }
    }

    /// A command that never ran (126/127).
    pub fn code(code: u8) -> Exit {
        Exit {
            code: Some(i32::from(code)),
            signal: None,
            max_time: None,
        }
    }
}

impl Record {
    /// The record of a run about to start: who runs what, where, and how
    /// the lock is held. The pid, start time and times come later.
    pub fn starting(
        me: crate::identity::Me,
        command: &[std::ffi::OsString],
        cwd: Option<&std::path::Path>,
        mode: crate::mode::LockMode,
    ) -> Record {
        Record {
            lockrun: FORMAT,
            boot_id: me.boot_id,
            lockrun_pid: Some(i64::from(std::process::id())),
            host: me.host.map(|h| cut_json(&h, MAX_NAME_JSON)),
            user: me.user.map(|u| cut_json(&u, MAX_NAME_JSON)),
            // Windows has no uid: the field is absent there, not faked.
            uid: cfg!(unix).then_some(me.uid),
            command: Some(recordable_command(command)),
            cwd: cwd.map(|d| cut_json(&d.to_string_lossy(), MAX_CWD_JSON)),
            mode: Some(mode.as_str().to_owned()),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            pid_ns: me.pid_ns,
            ..Record::default()
        }
    }

    /// Whether the process this record names is still alive, and the same
    /// one (pid, start time, boot, host, PID namespace).
    pub fn holder_liveness(&self) -> crate::identity::Liveness {
        crate::identity::liveness(&crate::identity::Claim {
            pid: self.pid,
            pid_start: self.pid_start,
            host: self.host.as_deref(),
            boot_id: self.boot_id.as_deref(),
            pid_ns: self.pid_ns,
        })
    }

    /// Parses lock file content. `None` for anything that is not a record of
    /// ours: a script that locks itself, another tool's pid file, garbage.
    pub fn parse(bytes: &[u8]) -> Option<Record> {
        if bytes.len() as u64 > MAX_RECORD_BYTES {
            return None;
        }
        let record: Record = serde_json::from_slice(bytes.trim_ascii()).ok()?;
        (record.lockrun >= 1).then_some(record)
    }

    pub fn is_released(&self) -> bool {
        self.released_at.is_some()
    }

    /// Written by `lockrun -F`: lockrun became the command, so the command's
    /// pid is lockrun's, and nobody was left to record how it ended.
    pub fn ran_in_place(&self) -> bool {
        self.pid.is_some() && self.pid == self.lockrun_pid
    }

    pub fn to_line(&self) -> Vec<u8> {
        // Serializing plain data with string keys cannot fail.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// `--skip-if-succeeded-within WITHIN`: how long ago the run `last`
/// records ended, if it is a success that ended less than `within` before
/// `now`. Only a run that lockrun saw end, with status 0 and not stopped at
/// `--max-time`, counts: a failed or killed run, one still unreleased (its
/// lockrun died, or `-F` left nobody to record the end), and a record
/// whose times make no sense here (an end in the future, a clock that went
/// backwards since, perhaps on another boot) never cause a skip, so that
/// the worst a doubtful record can do is let the command run once more.
pub fn succeeded_within(
    last: &Record,
    within: std::time::Duration,
    now: std::time::SystemTime,
) -> Option<std::time::Duration> {
    let exit = last.exit.as_ref()?;
    if exit.code != Some(0) || exit.signal.is_some() || exit.max_time.is_some() {
        return None;
    }
    let time = |text: &Option<String>| humantime::parse_rfc3339_weak(text.as_deref()?).ok();
    let ended = time(&last.released_at)?;
    if let Some(began) = time(&last.acquired_at)
        && began > ended
    {
        return None;
    }
    let ago = now.duration_since(ended).ok()?;
    (ago < within).then_some(ago)
}

/// What `LOCKFILE` holds when it is used with `--slots N`: the N every
/// contender must agree on, and who set it (a record without pid: the
/// lockrun that wrote it, its command, host, and when). It has no
/// `lockrun` key, so [`Record::parse`] never takes it for a holder record
/// and a plain `lockrun LOCKFILE` never overwrites it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotsHeader {
    /// The format of this line, as `lockrun` is a record's.
    pub lockrun_slots: u32,
    pub slots: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<Record>,
}

/// How every header [`SlotsHeader::to_line`] writes begins (its first
/// field): a cheap test that content is not one.
pub const SLOTS_HEADER_START: &[u8] = b"{\"lockrun_slots\":";

impl SlotsHeader {
    pub fn parse(bytes: &[u8]) -> Option<SlotsHeader> {
        if bytes.len() as u64 > MAX_RECORD_BYTES {
            return None;
        }
        let header: SlotsHeader = serde_json::from_slice(bytes.trim_ascii()).ok()?;
        (header.lockrun_slots >= 1 && header.slots >= 1).then_some(header)
    }

    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// Slot `k`'s lock file: `LOCKFILE.slotK`, beside `LOCKFILE`.
pub fn slot_path(lockfile: &std::path::Path, k: u16) -> std::path::PathBuf {
    let mut name = lockfile.as_os_str().to_owned();
    name.push(format!(".slot{k}"));
    std::path::PathBuf::from(name)
}

/// Keeps the record small whatever the argv: each argument and the whole
/// command are cut, with a marker, past fixed sizes as written in JSON.
pub fn recordable_command(argv: &[std::ffi::OsString]) -> Vec<String> {
    let mut total = 0;
    let mut out = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        let arg = cut_json(&arg.to_string_lossy(), MAX_ARG_JSON);
        total += json_len(&arg) + 3;
        if total > MAX_COMMAND_JSON {
            out.push(format!("{CUT} ({} more arguments)", argv.len() - i));
            break;
        }
        out.push(arg);
    }
    out
}

/// How many bytes serde_json writes for `text` inside a JSON string.
fn json_len(text: &str) -> usize {
    text.chars().map(char_json_len).sum()
}

fn char_json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `text` cut, with [`CUT`] at the end, so that it takes at most `max`
/// bytes in JSON.
fn cut_json(text: &str, max: usize) -> String {
    if json_len(text) <= max {
        return text.to_owned();
    }
    let room = max.saturating_sub(CUT.len());
    let mut used = 0;
    let mut out = String::new();
    for c in text.chars() {
        used += char_json_len(c);
        if used > room {
            break;
        }
        out.push(c);
    }
    out + CUT
}

/// Reads what the lock file holds, at most [`MAX_RECORD_BYTES`] (and one
/// byte more, so that an oversized file is recognised as such). A record is
/// a few hundred bytes: one small read is the common case.
pub fn read_content(file: &std::fs::File) -> io::Result<Vec<u8>> {
    // Small, as it is on the stack below the whole run: a bigger buffer
    // pushes everything called after it onto one more page of stack, a
    // page fault on every run.
    let mut first = [0u8; 1024];
    // A lock file is a regular file (or a directory, which fails here): a
    // read shorter than asked for ends at its end, so one read, not a
    // second one to meet the end.
    let n = loop {
        match file.read_at(&mut first, 0) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other?,
        }
    };
    if n < first.len() {
        return Ok(first[..n].to_vec());
    }
    let mut buf = vec![0u8; MAX_RECORD_BYTES as usize + 1];
    buf[..n].copy_from_slice(&first);
    let rest = read_at_most(file, &mut buf[n..], n as u64)?;
    buf.truncate(n + rest);
    Ok(buf)
}

fn read_at_most(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Why no record is written, for `-v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRecord {
    Disabled,
    Shared,
    Directory,
    ReadOnly,
    HardLinks,
    ForeignContent,
    NotCreatedAsFlock,
    Unreadable,
    ByteRange,
}

impl NoRecord {
    pub fn explain(self) -> &'static str {
        match self {
            NoRecord::Disabled => "--no-record was given",
            NoRecord::Shared => "shared locks have many holders and get no record",
            NoRecord::Directory => "the lock is a directory",
            NoRecord::ReadOnly => {
                "the lock file cannot be opened for writing (permissions or a read-only file system)"
            }
            NoRecord::HardLinks => {
                "the lock file has more than one hard link, so writing it would change another name's content"
            }
            NoRecord::ForeignContent => {
                "the lock file holds content that is not a lockrun record, which lockrun never overwrites"
            }
            NoRecord::NotCreatedAsFlock => {
                "as flock, lockrun writes a record only into a lock file it created or one that holds a lockrun record, and another program made this one"
            }
            NoRecord::Unreadable => "the lock file's content could not be read",
            NoRecord::ByteRange => {
                "a byte-range lock (--start/--length) gets no record: holders of other ranges of the file hold it at the same time, and one record would name only one of them"
            }
        }
    }
}

/// Replaces the record: one write of the whole line, then one truncate to
/// its length, no fsync: the record is diagnostic, and after a power cut
/// the kernel lock is gone anyway.
///
/// A line shorter than the file is padded with blanks to the file's length,
/// so that the file parses as the new record at every
/// moment: a lockrun killed between the write and the truncate leaves a
/// record with trailing blanks, never "new record + old tail" (which would
/// read as foreign content, and no record would ever be written there
/// again). The truncate is skipped when the file is known to be no longer
/// than the line (`len_now`, else fstat): on ext4 it is a journalled
/// change, and a release record, always longer than the start record it
/// replaces, is written on the way to letting the lock go. On a failed or
/// short write the file is emptied, so that a half-written record never
/// claims the lock for someone else.
pub fn write(file: &std::fs::File, line: &[u8], len_now: Option<u64>) -> io::Result<()> {
    let len_now = match len_now {
        Some(len) => len,
        None => file.metadata()?.len(),
    };
    let padded = padded(line, len_now);
    let result = match file.write_at(&padded, 0) {
        Ok(n) if n == padded.len() && n == line.len() => Ok(()),
        Ok(n) if n == padded.len() => file.set_len(line.len() as u64),
        Ok(_) => Err(io::Error::new(io::ErrorKind::WriteZero, "short write")),
        Err(e) => Err(e),
    };
    if result.is_err() {
        let _ = file.set_len(0);
    }
    result
}

/// `line`, then blanks up to `len` bytes (spaces, and a newline at the
/// end), so that cutting it at the line's length leaves the line.
fn padded(line: &[u8], len: u64) -> std::borrow::Cow<'_, [u8]> {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len <= line.len() || len > MAX_RECORD_BYTES as usize + 1 {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(line);
    out.resize(len - 1, b' ');
    out.push(b'\n');
    std::borrow::Cow::Owned(out)
}

/// What became of the release record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Written,
    /// The file is empty: the start record was never written (whoever
    /// failed to write it said so), so there is nothing to complete.
    Empty,
    /// The file no longer holds exactly the record this run wrote (the
    /// command wrote into it, or gave it a second name): left as it is.
    LeftAlone(&'static str),
}

/// Writes the release record, `released`, over the record this run wrote,
/// but only if the file still holds exactly that record and has one name:
/// a command may write its own lock file (the pid-file idiom, `echo $$ >
/// pid.lock`, or a log appended to it), and that data is the user's.
pub fn write_release(file: &std::fs::File, released: &Record) -> io::Result<Release> {
    let meta = file.metadata()?;
    if meta.len() == 0 {
        return Ok(Release::Empty);
    }
    let nlink = crate::platform::link_count(file, &meta)?;
    if nlink != 1 {
        return Ok(Release::LeftAlone(if nlink == 0 {
            "it was deleted"
        } else {
            "it got another name (a hard link)"
        }));
    }
    let content = read_content(file)?;
    if !holds_our_record(&content, released) {
        return Ok(Release::LeftAlone(
            "it no longer holds the record lockrun wrote (the command wrote into it)",
        ));
    }
    write(file, &released.to_line(), Some(meta.len()))?;
    Ok(Release::Written)
}

/// Whether `content` is, byte for byte, a start record this run wrote: a
/// record as lockrun serialises it (padded with spaces at most), not yet
/// released, with this run's lockrun pid, boot and time of taking the lock,
/// and, when `ours` knows it, the command's pid.
fn holds_our_record(content: &[u8], ours: &Record) -> bool {
    let Some(found) = Record::parse(content) else {
        return false;
    };
    let Some(body) = content.strip_suffix(b"\n") else {
        return false;
    };
    let canonical = found.to_line();
    let exact = canonical.strip_suffix(b"\n") == Some(body.trim_ascii_end());
    exact
        && !found.is_released()
        && found.lockrun_pid == ours.lockrun_pid
        && found.boot_id == ours.boot_id
        && found.acquired_at == ours.acquired_at
        && (ours.pid.is_none() || found.pid == ours.pid)
}

/// A record prepared by the parent and completed by the forked child before
/// it execs the command, so the record names the command's pid and start
/// time *before* the command runs. Between fork and exec only
/// async-signal-safe calls are allowed, hence pre-built byte slices and raw
/// syscalls in [`ChildRecord::write_from_child`]. Unix only: on Windows the
/// command starts suspended and lockrun writes the whole record itself.
#[cfg(unix)]
pub struct ChildRecord {
    /// `{"lockrun":1,"pid":`
    head: Vec<u8>,
    /// `,"boot_id":…}\n`, everything after `pid_start`.
    tail: Vec<u8>,
    /// Where in `tail` the value of `acquired_at` is, when it was built
    /// with [`ACQUIRED_AT_SLOT`] for a time to be stamped in later.
    acquired_at: Option<std::ops::Range<usize>>,
    /// Written to stderr if the record cannot be written.
    warning: Vec<u8>,
    /// The start time the child read, for the parent's release record:
    /// started vfork-style, the child writes this in the parent's memory,
    /// and the parent need not read /proc again on its way to releasing.
    /// `u64::MAX` while unknown.
    start_seen: AtomicU64,
}

/// The record completed while the command is still suspended, on
/// Windows: there is no fork, so lockrun itself writes it, from the run
/// flow's pre-exec hook, which `platform::start_command` runs after the
/// command was created suspended in its job and before it resumes. The
/// command's pid and creation time are the platform's
/// (`starting_command`); the file is the lock file's handle, which the
/// file backend hands over as the record descriptor (`platform::file_fd`).
#[cfg(windows)]
pub struct ChildRecord {
    record: Record,
    label: String,
    /// The creation time written, for the release record: once the
    /// command has exited its pid can no longer be asked. `u64::MAX`
    /// while unknown.
    start_seen: AtomicU64,
}

#[cfg(windows)]
impl ChildRecord {
    pub fn new(without_pid: &Record, path_for_messages: &str) -> ChildRecord {
        ChildRecord {
            record: without_pid.clone(),
            label: path_for_messages.to_owned(),
            start_seen: AtomicU64::new(u64::MAX),
        }
    }

    /// No slot to stamp: the run flow builds the record anew with the time.
    pub fn stamp_acquired_at(&mut self, _when: &str) -> bool {
        false
    }

    pub fn start_seen(&self) -> Option<u64> {
        Some(self.start_seen.load(SeqCst)).filter(|&start| start != u64::MAX)
    }

    /// Runs in lockrun while the command is suspended: the whole record,
    /// with the command's pid and creation time, through the lock file's
    /// handle, before the command can run.
    pub fn write_from_child(
        &self,
        fd: crate::platform::BorrowedFd<'_>,
        _before: Option<crate::platform::BeforeStart>,
    ) {
        let Some((pid, start)) = crate::platform::windows::starting_command() else {
            return;
        };
        self.start_seen.store(start.unwrap_or(u64::MAX), SeqCst);
        let mut record = self.record.clone();
        record.pid = Some(i64::from(pid));
        record.pid_start = start;
        let written =
            crate::platform::windows::with_file_of(fd, |file| write(file, &record.to_line(), None));
        if let Err(e) = written {
            crate::say!(
                "lockrun: could not write the holder record to {}: {e}{}",
                self.label,
                RECORD_FAILED_SUFFIX.trim_end().trim_start_matches(')')
            );
        }
    }
}

/// Stands for `acquired_at` in a record built before the lock is taken:
/// the width of every time [`crate::display::now_rfc3339`] writes.
pub const ACQUIRED_AT_SLOT: &str = "0000-00-00T00:00:00.000Z";

#[cfg(unix)]
impl ChildRecord {
    /// Serialises the record now, before the lock is taken, so that a
    /// waiter that gets the lock only has to stamp the time
    /// ([`ChildRecord::stamp_acquired_at`]) when `without_pid` has
    /// [`ACQUIRED_AT_SLOT`] as its `acquired_at`.
    pub fn new(without_pid: &Record, path_for_messages: &str) -> ChildRecord {
        let line = without_pid.to_line();
        let prefix = format!("{{\"lockrun\":{}", without_pid.lockrun);
        let tail = line.get(prefix.len()..).unwrap_or_default().to_vec();
        // Quotes inside string values are escaped, so this key with its
        // quotes cannot occur anywhere but as the key itself.
        let key = format!(",\"acquired_at\":\"{ACQUIRED_AT_SLOT}\"");
        let acquired_at = tail
            .windows(key.len())
            .position(|w| w == key.as_bytes())
            .map(|at| {
                let start = at + key.len() - 1 - ACQUIRED_AT_SLOT.len();
                start..start + ACQUIRED_AT_SLOT.len()
            });
        ChildRecord {
            head: format!("{prefix},\"pid\":").into_bytes(),
            tail,
            acquired_at,
            warning: format!("lockrun: could not write the holder record to {path_for_messages}: ")
                .into_bytes(),
            start_seen: AtomicU64::new(u64::MAX),
        }
    }

    /// Puts the time the lock was taken into the slot; false when there is
    /// no slot or the time does not fit it (then build the record anew).
    pub fn stamp_acquired_at(&mut self, when: &str) -> bool {
        match &self.acquired_at {
            Some(slot) if slot.len() == when.len() => {
                self.tail[slot.clone()].copy_from_slice(when.as_bytes());
                self.acquired_at = None;
                true
            }
            _ => false,
        }
    }

    /// The start time the child wrote into the record, if it shared our
    /// memory to tell.
    pub fn start_seen(&self) -> Option<u64> {
        Some(self.start_seen.load(SeqCst)).filter(|&start| start != u64::MAX)
    }

    /// Runs in the child between fork and exec. No allocation, no locks.
    /// `before`: the clock as the parent read it just before creating the
    /// child, which usually tells the child's start time without a /proc
    /// read (`platform::own_start_time_since`).
    pub fn write_from_child(
        &self,
        fd: crate::platform::BorrowedFd<'_>,
        before: Option<crate::platform::BeforeStart>,
    ) {
        use crate::platform::child_io::{self, Errno};
        let pid = child_io::own_pid();
        let start = before
            .and_then(crate::platform::own_start_time_since)
            .or_else(crate::platform::own_start_time_without_allocating);
        self.start_seen.store(start.unwrap_or(u64::MAX), SeqCst);
        let mut pid_buf = [0u8; 20];
        let mut start_buf = [0u8; 20];
        let pid_text = format_u64(pid, &mut pid_buf);
        let start_text: &[u8] = match start {
            Some(start) => format_u64(start, &mut start_buf),
            None => b"null",
        };
        // Unknown: as if longer than anything, so that it is truncated.
        let old_len = child_io::file_len(fd).unwrap_or(usize::MAX);
        let pid_start: [&[u8]; 2] = match start {
            Some(_) => [b",\"pid_start\":", start_text],
            // Left out, as serde leaves out a None.
            None => [b"", b""],
        };
        let mut parts = [io::IoSlice::new(&[]); 6 + PAD_SLICES];
        parts[0] = io::IoSlice::new(&self.head);
        parts[1] = io::IoSlice::new(pid_text);
        parts[2] = io::IoSlice::new(pid_start[0]);
        parts[3] = io::IoSlice::new(pid_start[1]);
        parts[4] = io::IoSlice::new(&self.tail);
        let line_len: usize = parts[..5].iter().map(|p| p.len()).sum();
        // A line shorter than what the file holds is padded to its length
        // with blanks (see `write`), so that the file parses as the new
        // record at every moment. Usually the old content is the previous
        // run's release record, a few dozen bytes longer: the blanks then
        // go before the newline and stay (one line, the record as it
        // stands; readers trim them and the release writes over them), which
        // saves a truncate, a journalled change on ext4 made while the
        // parent waits for this exec. A longer tail (more than a page) is
        // cut off as `write` does, as far as the slices of spaces reach: a
        // file that long is not a record anyway.
        let mut pad = if old_len <= MAX_RECORD_BYTES as usize + 1 {
            old_len.saturating_sub(line_len)
        } else {
            0
        };
        let mut used = 4;
        let mut cut = old_len > line_len;
        if let (1..=SPACES_LEN, Some((b'\n', body))) = (pad, self.tail.split_last()) {
            parts[4] = io::IoSlice::new(body);
            parts[5] = io::IoSlice::new(&SPACES[..pad]);
            parts[6] = io::IoSlice::new(b"\n");
            used = 6;
            cut = false;
        } else if pad > 0 {
            pad -= 1;
            while pad > 0 && used < 4 + PAD_SLICES {
                let take = pad.min(SPACES.len());
                used += 1;
                parts[used] = io::IoSlice::new(&SPACES[..take]);
                pad -= take;
            }
            used += 1;
            parts[used] = io::IoSlice::new(b"\n");
        }
        let parts = &parts[..=used];
        let expected: usize = parts.iter().map(|p| p.len()).sum();
        let result = child_io::write_at_start(fd, parts).and_then(|n| {
            if n != expected {
                Err(Errno::NO_SPACE)
            } else if cut {
                child_io::truncate(fd, line_len as u64)
            } else {
                // Nothing after what was written: the file was no longer.
                Ok(())
            }
        });
        if let Err(errno) = result {
            let _ = child_io::truncate(fd, 0);
            let mut code_buf = [0u8; 20];
            let code = format_u64(errno.raw() as u64, &mut code_buf);
            child_io::write_stderr(&self.warning);
            child_io::write_stderr(errno.text().as_bytes());
            child_io::write_stderr(b" (os error ");
            child_io::write_stderr(code);
            child_io::write_stderr(RECORD_FAILED_SUFFIX.as_bytes());
        }
    }
}

/// Spaces to pad a record with, from the child, which may not allocate.
#[cfg(unix)]
static SPACES: [u8; SPACES_LEN] = [b' '; SPACES_LEN];
#[cfg(unix)]
const SPACES_LEN: usize = 4096;
/// Enough for any record a reader accepts (64 KiB).
#[cfg(unix)]
const PAD_SLICES: usize = 17;

/// Said after a failed record write, by parent and child alike.
pub const RECORD_FAILED_SUFFIX: &str =
    "); the lock is held and the command runs without a record\n";

#[cfg(unix)]
fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

// The record tests write through the Unix child-side writer.
#[cfg_attr(not(unix), cfg(any()))]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_no_record() {
        assert_eq!(Record::parse(b""), None);
        assert_eq!(Record::parse(b"#!/bin/sh\necho hi\n"), None);
        assert_eq!(Record::parse(b"12345\n"), None);
        assert_eq!(Record::parse(b"{\"pid\":1}"), None);
        assert_eq!(Record::parse(b"{\"lockrun\":1,\"pid\":\"x\"}"), None);
        assert!(Record::parse(b"{\"lockrun\":1,\"pid\":5}\n").is_some());
        assert!(Record::parse(b"{\"lockrun\":1,\"future_field\":[1,2]}").is_some());
    }

    #[test]
    fn child_record_splices_pid_and_start() {
        let record = Record {
            lockrun: FORMAT,
            host: Some("h".into()),
            ..Record::default()
        };
        let child = ChildRecord::new(&record, "/x");
        let mut line = child.head.clone();
        line.extend_from_slice(b"42,\"pid_start\":7");
        line.extend_from_slice(&child.tail);
        let parsed = Record::parse(&line).unwrap();
        assert_eq!(parsed.pid, Some(42));
        assert_eq!(parsed.pid_start, Some(7));
        assert_eq!(parsed.host.as_deref(), Some("h"));
    }

    #[test]
    fn child_record_built_before_the_lock_gets_the_time_stamped_in() {
        let when = crate::display::now_rfc3339();
        // A command that spells out the slot must not be taken for it.
        let trap = format!(",\"acquired_at\":\"{ACQUIRED_AT_SLOT}\"");
        let record = Record {
            lockrun: FORMAT,
            command: Some(vec![trap.clone()]),
            acquired_at: Some(ACQUIRED_AT_SLOT.into()),
            version: Some("1".into()),
            ..Record::default()
        };
        let mut child = ChildRecord::new(&record, "/x");
        assert!(child.stamp_acquired_at(&when));
        assert!(!child.stamp_acquired_at(&when), "stamped twice");
        let mut line = child.head.clone();
        line.extend_from_slice(b"1,\"pid_start\":2");
        line.extend_from_slice(&child.tail);
        let parsed = Record::parse(&line).unwrap();
        assert_eq!(parsed.acquired_at.as_deref(), Some(when.as_str()));
        assert_eq!(parsed.command, Some(vec![trap]));
        assert_eq!(parsed.version.as_deref(), Some("1"));
        // Without a slot, or with a time of another width, nothing changes.
        let mut plain = ChildRecord::new(&Record::default(), "/x");
        assert!(!plain.stamp_acquired_at(&when));
        let mut slotted = ChildRecord::new(&record, "/x");
        assert!(!slotted.stamp_acquired_at("2026-11-29T02:00:03Z"));
    }

    #[test]
    fn a_write_leaves_exactly_the_line_whether_or_not_it_truncates() {
        let file = tempfile::tempfile().unwrap();
        let content = |file: &std::fs::File| {
            let mut buf = vec![0; 1000];
            let n = file.read_at(&mut buf, 0).unwrap();
            buf.truncate(n);
            buf
        };
        write(&file, b"a long first line\n", None).unwrap();
        // Shorter than what is there: truncated, whatever the caller knew.
        write(&file, b"short\n", Some(18)).unwrap();
        assert_eq!(content(&file), b"short\n");
        // Longer than what is there: no truncate needed.
        write(&file, b"longer again\n", Some(6)).unwrap();
        assert_eq!(content(&file), b"longer again\n");
        // The caller must know the length: an understated one leaves the
        // old tail behind (Recording::finish takes it from fstat).
        write(&file, b"tiny\n", Some(2)).unwrap();
        assert_eq!(content(&file), b"tiny\nr again\n");
    }

    #[test]
    fn a_slots_header_is_never_a_record() {
        let header = SlotsHeader {
            lockrun_slots: 1,
            slots: 4,
            set_by: Some(Record {
                lockrun: FORMAT,
                lockrun_pid: Some(7),
                ..Record::default()
            }),
        };
        let line = header.to_line();
        assert!(line.starts_with(SLOTS_HEADER_START));
        assert_eq!(SlotsHeader::parse(&line), Some(header));
        assert_eq!(Record::parse(&line), None);
        assert_eq!(SlotsHeader::parse(b"{\"lockrun\":1,\"pid\":5}"), None);
        assert_eq!(
            SlotsHeader::parse(b"{\"lockrun_slots\":1,\"slots\":0}"),
            None
        );
        assert_eq!(
            slot_path(std::path::Path::new("/a/b.lock"), 3),
            std::path::Path::new("/a/b.lock.slot3")
        );
    }

    #[test]
    fn formats_numbers() {
        let mut buf = [0u8; 20];
        assert_eq!(format_u64(0, &mut buf), b"0");
        assert_eq!(format_u64(u64::MAX, &mut buf), b"18446744073709551615");
    }

    #[test]
    fn huge_commands_are_capped() {
        let argv: Vec<std::ffi::OsString> = (0..100).map(|_| "x".repeat(5000).into()).collect();
        let kept = recordable_command(&argv);
        assert!(kept.iter().map(String::len).sum::<usize>() < 20 * 1024);
        assert!(kept.last().unwrap().contains("more arguments"));
    }

    #[test]
    fn the_caps_count_bytes_as_written_in_json() {
        // Control characters take six bytes each in JSON.
        let argv: Vec<std::ffi::OsString> = (0..20).map(|_| "\u{1}".repeat(1024).into()).collect();
        let record = Record {
            lockrun: FORMAT,
            command: Some(recordable_command(&argv)),
            cwd: Some(cut_json(&"\u{1}".repeat(4000), MAX_CWD_JSON)),
            ..Record::default()
        };
        let line = record.to_line();
        assert!(line.len() < 24 * 1024, "{} bytes", line.len());
        assert_eq!(Record::parse(&line), Some(record.clone()));
        let cwd = record.cwd.unwrap();
        assert!(json_len(&cwd) <= MAX_CWD_JSON && cwd.ends_with(CUT));
        assert_eq!(cut_json("short", 10), "short");
        assert_eq!(cut_json("abcdefghij", 6), "abc…");
    }

    fn content(file: &std::fs::File) -> Vec<u8> {
        let mut buf = vec![0; 100_000];
        let n = file.read_at(&mut buf, 0).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_shorter_record_is_padded_so_that_every_state_parses() {
        let long = Record {
            lockrun: FORMAT,
            command: Some(vec!["x".repeat(500)]),
            ..Record::default()
        };
        let short = Record {
            lockrun: FORMAT,
            pid: Some(7),
            ..Record::default()
        };
        // What a kill between the write and the truncate leaves.
        let line = short.to_line();
        let halfway = padded(&line, long.to_line().len() as u64);
        assert_eq!(halfway.len(), long.to_line().len());
        assert!(halfway.ends_with(b" \n"));
        assert_eq!(Record::parse(&halfway), Some(short.clone()));
        // And the whole write ends with the line alone.
        let file = tempfile::tempfile().unwrap();
        write(&file, &long.to_line(), None).unwrap();
        write(&file, &line, None).unwrap();
        assert_eq!(content(&file), line);
    }

    #[test]
    fn the_child_pads_too() {
        let record = Record {
            lockrun: FORMAT,
            host: Some("h".into()),
            ..Record::default()
        };
        let child = ChildRecord::new(&record, "/x");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let old = format!("{{\"lockrun\":1,\"cwd\":\"{}\"}}\n", "y".repeat(9000));
        std::fs::write(&path, &old).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use crate::platform::AsFd;
        child.write_from_child(file.as_fd(), None);
        let written = Record::parse(&content(&file)).unwrap();
        assert_eq!(written.host.as_deref(), Some("h"));
        assert!(written.pid.is_some());
        assert!(content(&file).len() < 1000, "not truncated");
    }

    #[test]
    fn the_child_keeps_a_short_padding_on_its_one_line() {
        // The usual case: the previous run's release record, a little
        // longer than the new start record, is covered by blanks before
        // the newline, with no truncate; the release then writes over it.
        let ours = Record {
            lockrun: FORMAT,
            lockrun_pid: Some(9),
            acquired_at: Some("2026-11-29T02:00:03.120Z".into()),
            ..Record::default()
        };
        let child = ChildRecord::new(&ours, "/x");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let old = Record {
            released_at: Some("2026-11-29T02:00:02.120Z".into()),
            exit: Some(Exit::code(0)),
            ..ours.clone()
        };
        std::fs::write(&path, old.to_line()).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use crate::platform::AsFd;
        // No clock reading: this process was not created after one.
        child.write_from_child(file.as_fd(), None);
        let now = content(&file);
        assert_eq!(now.len(), old.to_line().len(), "padded to the old length");
        assert_eq!(now.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
        assert!(now.ends_with(b" \n"));
        let started = Record::parse(&now).unwrap();
        assert_eq!(started.pid, Some(i64::from(std::process::id())));
        assert_eq!(
            started.pid_start,
            crate::platform::process_start_time(std::process::id() as i32),
            "the start time, from /proc"
        );
        let released = Record {
            exit: Some(Exit::code(0)),
            released_at: Some("2026-11-29T02:00:04.120Z".into()),
            ..started.clone()
        };
        assert_eq!(write_release(&file, &released).unwrap(), Release::Written);
        assert_eq!(content(&file), released.to_line());
    }

    #[test]
    fn the_release_is_written_only_over_our_own_record() {
        let ours = Record {
            lockrun: FORMAT,
            pid: Some(10),
            lockrun_pid: Some(9),
            acquired_at: Some("2026-11-29T02:00:03.120Z".into()),
            ..Record::default()
        };
        let line = ours.to_line();
        assert!(holds_our_record(&line, &ours));
        assert!(holds_our_record(&padded(&line, 900), &ours));
        let mut appended = line.clone();
        appended.extend_from_slice(b"line 1\n");
        assert!(!holds_our_record(&appended, &ours));
        assert!(!holds_our_record(b"4242\n", &ours));
        assert!(!holds_our_record(b"", &ours));
        // The same record with other spacing was not written by us.
        let respaced = String::from_utf8(line.clone()).unwrap().replace(':', ": ");
        assert!(!holds_our_record(respaced.as_bytes(), &ours));
        let someone_elses = Record {
            lockrun_pid: Some(8),
            ..ours.clone()
        };
        assert!(!holds_our_record(&someone_elses.to_line(), &ours));

        let file = tempfile::NamedTempFile::new().unwrap();
        let released = Record {
            released_at: Some("2026-11-29T02:00:04.120Z".into()),
            ..ours.clone()
        };
        std::fs::write(file.path(), b"4242\n").unwrap();
        let handle = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(file.path())
            .unwrap();
        assert!(matches!(
            write_release(&handle, &released).unwrap(),
            Release::LeftAlone(_)
        ));
        assert_eq!(content(&handle), b"4242\n");
        std::fs::write(file.path(), &line).unwrap();
        assert_eq!(write_release(&handle, &released).unwrap(), Release::Written);
        assert_eq!(content(&handle), released.to_line());
    }
}
