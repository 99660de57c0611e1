//! `--metrics-file PATH`: the Prometheus textfile collector's format
//! (node_exporter `--collector.textfile.directory`), one set of series per
//! lock, rewritten after each run.
//!
//! Counters must survive across runs and be exact when several lockruns
//! (of one lock or of several sharing PATH) end at once, so each update is
//! read, change, write under a lock, and each write is a whole new file
//! renamed over PATH, so that a reader (node_exporter, at any moment) sees
//! the old file or the new one, never a part of one.
//!
//! The lock is taken on PATH itself (CONTRACT §17), and the rename is
//! what makes that subtle: a rename puts a new inode at PATH, so a lock on
//! the file a writer opened is a lock on an inode that may no longer be
//! PATH by the time it is granted. A second writer that waited on the old
//! inode while the first renamed would otherwise go ahead beside a third
//! that opened the new one, and one of their updates would be lost. So a
//! writer, once granted the lock, checks that the inode it locked is still
//! the one at PATH, and starts again on the new one if not: whoever holds
//! the lock on the inode currently at PATH is the only writer, and it stays
//! so until its own rename, after which nobody can be granted the old
//! inode's lock in a way that counts. (A sibling `PATH.lock` would need no
//! check, but would leave a second file in the collector's directory for
//! every metrics file.)

use super::{Event, Report};
use crate::platform;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// The `outcome` label of `lockrun_runs_total`: every run ends in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ran,
    Busy,
    Timeout,
    SkippedRecent,
    Lost,
    MaxTime,
    Error,
}

const OUTCOMES: [(Outcome, &str); 7] = [
    (Outcome::Ran, "ran"),
    (Outcome::Busy, "busy"),
    (Outcome::Timeout, "timeout"),
    (Outcome::SkippedRecent, "skipped_recent"),
    (Outcome::Lost, "lost"),
    (Outcome::MaxTime, "max_time"),
    (Outcome::Error, "error"),
];

const RUNS: &str = "lockrun_runs_total";
const RUNS_HELP: &str = "Runs of lockrun on this lock by outcome: ran (the command ran and ended by itself, whatever its status), busy, timeout, skipped_recent (--skip-if-succeeded-within), lost (a lock URL's lock lost), max_time (stopped by --max-time), error (a signal or an error while waiting).";

/// The gauges, in the order they are written: name, help, where kept.
const GAUGES: [(&str, &str); 7] = [
    (
        "lockrun_last_start_timestamp_seconds",
        "When the last run of lockrun on this lock started (before its wait), in Unix seconds.",
    ),
    (
        "lockrun_last_end_timestamp_seconds",
        "When the last run of lockrun on this lock ended, in Unix seconds.",
    ),
    (
        "lockrun_last_exit_status",
        "The exit status of the last run of lockrun on this lock (the command's; 75 busy or timed out; 124 --max-time; 76 lock lost; 128+N signal N).",
    ),
    (
        "lockrun_last_wait_seconds",
        "How long the last run waited for the lock.",
    ),
    (
        "lockrun_last_duration_seconds",
        "How long the last run's command ran (0 when it did not run).",
    ),
    (
        "lockrun_last_success_timestamp_seconds",
        "When a command last ran under this lock and exited 0, in Unix seconds (0: never).",
    ),
    (
        "lockrun_not_acquired_in_a_row",
        "Runs in a row that did not get the lock (busy or timeout) since the last that did.",
    ),
];

/// One lock's series.
#[derive(Debug, Clone, Default, PartialEq)]
struct Series {
    runs: [u64; OUTCOMES.len()],
    /// In [`GAUGES`]' order.
    gauges: [f64; GAUGES.len()],
}

const START: usize = 0;
const END: usize = 1;
const STATUS: usize = 2;
const WAIT: usize = 3;
const DURATION: usize = 4;
const SUCCESS: usize = 5;
const IN_A_ROW: usize = 6;

/// How long a writer waits for another's update of the same file before
/// giving up with a warning. An update takes a read, a write and a rename
/// (well under a millisecond); only a process that keeps PATH locked for
/// its own reasons could make this run out, and a run must not hang on it.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// A file of metrics larger than this is not ours: read no more of it.
const LARGEST: u64 = 16 << 20;

/// Adds `report`, an outcome, to the file at `path`.
pub fn update(path: &Path, report: &Report) -> Result<(), String> {
    let Some(outcome) = report.event.outcome() else {
        return Ok(());
    };
    if let Some(beside) = platform::metrics_lock_beside(path) {
        return update_locked_beside(path, &beside, outcome, report);
    }
    let mut locked = lock(path)?;
    let bytes = read_most(&mut locked)?;
    let mode = locked
        .metadata()
        .map(|m| platform::permission_bits(&m))
        .ok();
    replace(path, &updated(&bytes, outcome, report), mode)
    // `locked` is closed here, after the rename: the next writer, granted
    // the old inode's lock, sees that PATH is a new one and takes its lock.
}

/// The file's text with `report` added to its lock's series.
fn updated(bytes: &[u8], outcome: Outcome, report: &Report) -> String {
    // A part that is not UTF-8 is not ours to keep.
    let mut all = parse(&String::from_utf8_lossy(bytes));
    let series = all.entry(report.lock.to_owned()).or_default();
    apply(series, outcome, report);
    render(&all)
}

/// At most [`LARGEST`] bytes of an open metrics file.
fn read_most(file: &mut File) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    file.take(LARGEST)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    Ok(bytes)
}

/// The update where the OS cannot rename over a file it has open
/// (Windows: `platform::metrics_lock_beside`): under the lock of a file
/// beside PATH that is never renamed, so no check of what was locked is
/// needed; PATH is read through a handle closed before the rename.
fn update_locked_beside(
    path: &Path,
    beside: &Path,
    outcome: Outcome,
    report: &Report,
) -> Result<(), String> {
    let deadline = Instant::now() + LOCK_WAIT;
    let guard = create_empty(beside)
        .map_err(|e| format!("cannot open its lock file {}: {e}", beside.display()))?;
    lock_until(&guard, deadline)?;
    let bytes = match platform::open_without_waiting(path, false) {
        Ok(mut file) => read_most(&mut file)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    replace(path, &updated(&bytes, outcome, report), None)
    // `guard` is closed here, after the rename: its lock goes with it.
}

/// Takes `file`'s lock, retrying until `deadline` (a short, doubling
/// pause: another writer's update takes milliseconds).
fn lock_until(file: &File, deadline: Instant) -> Result<(), String> {
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Interrupted => {
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(format!("cannot lock it: {e}")),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "another process kept it locked for {} (another lockrun's update takes milliseconds)",
                crate::display::span(LOCK_WAIT)
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(16));
    }
}

fn apply(series: &mut Series, outcome: Outcome, report: &Report) {
    if let Some(i) = OUTCOMES.iter().position(|(o, _)| *o == outcome) {
        series.runs[i] = series.runs[i].saturating_add(1);
    }
    let g = &mut series.gauges;
    g[START] = unix_seconds(report.started);
    g[END] = unix_seconds(report.ended);
    g[STATUS] = f64::from(report.status.unwrap_or(0));
    g[WAIT] = report.waited.as_secs_f64();
    g[DURATION] = report.ran_for.unwrap_or_default().as_secs_f64();
    if report.event == Event::Finished && report.status == Some(0) {
        g[SUCCESS] = g[END];
    }
    match outcome {
        Outcome::Busy | Outcome::Timeout => g[IN_A_ROW] += 1.0,
        // Neither a run nor a refusal: the streak goes on as it was.
        Outcome::Error => {}
        _ => g[IN_A_ROW] = 0.0,
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Opens and locks PATH (creating it empty if missing: an empty file is
/// a valid one for the collector), until the inode locked is the one at
/// PATH (the module's comment says why).
fn lock(path: &Path) -> Result<File, String> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // Without waiting: a FIFO at PATH must not hang the open.
        let file = platform::open_without_waiting(path, false)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => create_empty(path),
                _ => Err(e),
            })
            .map_err(|e| format!("cannot open it: {e}"))?;
        let opened = file
            .metadata()
            .map_err(|e| format!("cannot stat it: {e}"))?;
        if !opened.is_file() {
            return Err("it is not a regular file".to_owned());
        }
        lock_until(&file, deadline)?;
        match std::fs::metadata(path) {
            Ok(now) if platform::same_file(&now, &opened) => return Ok(file),
            // Replaced (or removed) while we waited: lock what is there now.
            Ok(_) | Err(_) if Instant::now() < deadline => continue,
            Ok(_) | Err(_) => {
                return Err("it kept being replaced while lockrun waited to lock it".to_owned());
            }
        }
    }
}

fn create_empty(path: &Path) -> std::io::Result<File> {
    platform::open_without_waiting(path, true)
}

/// Writes `text` to a temporary file beside PATH and renames it over PATH,
/// with PATH's permissions.
fn replace(path: &Path, text: &str, mode: Option<u32>) -> Result<(), String> {
    let temp = temporary(path)?;
    let written = (|| {
        let mut file =
            create_new(&temp).map_err(|e| format!("cannot create {}: {e}", temp.display()))?;
        if let Some(mode) = mode {
            let _ = platform::set_permission_bits(&file, mode);
        }
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
        std::fs::rename(&temp, path)
            .map_err(|e| format!("cannot rename {} over it: {e}", temp.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A new file at `temp`, never one that was there: in a directory others
/// may write to (/tmp), a file or hard link planted at that name would
/// otherwise be truncated and written through. One left by a killed lockrun
/// of the same pid is removed (the name only) first.
fn create_new(temp: &Path) -> std::io::Result<File> {
    let open = || platform::create_new(temp);
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(temp)?;
            open()
        }
        other => other,
    }
}

/// `DIR/.NAME.PID.tmp`: in PATH's directory (a rename cannot cross file
/// systems), hidden and not ending in `.prom`, so the collector never reads
/// it; the pid keeps two writers' apart even if one was killed mid-write.
fn temporary(path: &Path) -> Result<PathBuf, String> {
    let name = path
        .file_name()
        .ok_or_else(|| "it names no file".to_owned())?;
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(".{}.tmp", std::process::id()));
    Ok(path.with_file_name(temp))
}

/// The series of every lock in a file this module wrote; anything else
/// (another program's lines, a damaged line) is dropped.
fn parse(text: &str) -> BTreeMap<String, Series> {
    let mut all: BTreeMap<String, Series> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let Some(lock) = labels.iter().find(|(k, _)| k == "lock").map(|(_, v)| v) else {
            continue;
        };
        if name == RUNS {
            let Some(outcome) = labels.iter().find(|(k, _)| k == "outcome") else {
                continue;
            };
            let Some(i) = OUTCOMES.iter().position(|(_, o)| *o == outcome.1) else {
                continue;
            };
            let Ok(count) = value.parse::<u64>() else {
                continue;
            };
            all.entry(lock.clone()).or_default().runs[i] = count;
        } else if let Some(i) = GAUGES.iter().position(|(n, _)| *n == name) {
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if value.is_finite() {
                all.entry(lock.clone()).or_default().gauges[i] = value;
            }
        }
    }
    all
}

/// A sample's labels, unescaped, in the file's order.
type Labels = Vec<(String, String)>;

/// `name{k="v",...} value`, the labels unescaped.
fn sample(line: &str) -> Option<(&str, Labels, &str)> {
    let (name, rest) = line.split_once('{')?;
    let mut labels = Vec::new();
    let mut chars = rest.char_indices();
    loop {
        let start = chars.clone().next()?.0;
        let (eq, _) = chars.by_ref().find(|(_, c)| *c == '=')?;
        let key = rest.get(start..eq)?.trim_start_matches(',').to_owned();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()?.1 {
                '"' => break,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        labels.push((key, value));
        let (at, c) = chars.next()?;
        match c {
            ',' => continue,
            '}' => {
                let value = rest.get(at + 1..)?.strip_prefix(' ')?;
                return Some((name, labels, value.trim_end()));
            }
            _ => return None,
        }
    }
}

/// A label value in the text format: backslash, double quote and newline
/// escaped.
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The whole file: each family's HELP and TYPE, then its samples, every
/// lock in order.
fn render(all: &BTreeMap<String, Series>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP {RUNS} {RUNS_HELP}\n# TYPE {RUNS} counter");
    for (lock, series) in all {
        let lock = label(lock);
        for (i, (_, outcome)) in OUTCOMES.iter().enumerate() {
            let _ = writeln!(
                out,
                "{RUNS}{{lock=\"{lock}\",outcome=\"{outcome}\"}} {}",
                series.runs[i]
            );
        }
    }
    for (i, (name, help)) in GAUGES.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (lock, series) in all {
            let _ = writeln!(
                out,
                "{name}{{lock=\"{}\"}} {}",
                label(lock),
                number(series.gauges[i])
            );
        }
    }
    out
}

/// Whole numbers as such, fractions to the millisecond.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_the_same_whatever_the_lock_is_called() {
        let mut all = BTreeMap::new();
        for (n, lock) in ["/var/lock/a", "a\"b\\c\nd}e,f=g", "postgres://u@db/ops#job"]
            .iter()
            .enumerate()
        {
            let mut s = Series::default();
            s.runs[n] = 7 + n as u64;
            s.gauges[START] = 1_764_758_400.125;
            s.gauges[STATUS] = 124.0;
            all.insert((*lock).to_owned(), s);
        }
        let text = render(&all);
        assert_eq!(parse(&text), all, "{text}");
        assert!(text.contains(r#"lock="a\"b\\c\nd}e,f=g""#), "{text}");
    }
}
