//! What a run tells the monitoring (`--metrics-file`, `--log`; CONTRACT
//! §17): the one place the run flow reports an outcome to, whatever the
//! backend.
//!
//! The run flow (`run::run_with`) holds a [`Watch`] only when one of the
//! options was given; without them it holds `None` and nothing here runs:
//! no allocation, no clock reading, no system call. The work is done once
//! the outcome is known, after the lock was let go of, so that monitoring
//! never lengthens the time a lock is held nor delays a waiter.
//!
//! Nothing here can fail a run: a metrics file that cannot be written is a
//! warning on stderr, a log socket that is missing or full is skipped.

pub mod journal;
pub mod metrics;
pub mod syslog;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// What the command line asked to be told, for the run flow.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observers {
    pub metrics_file: Option<PathBuf>,
    pub log: Option<Log>,
}

/// `--log` and `--log-facility`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Log {
    pub sink: Sink,
    /// The syslog facility's number (RFC 5424 §6.2.1): 1 is `user`.
    pub facility: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Syslog,
    Journal,
}

/// The facilities `--log-facility` takes, by their syslog(3) names.
pub const FACILITIES: [(&str, u8); 20] = [
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("cron", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

/// `--log-facility`'s default.
pub const USER: u8 = 1;

/// What happened. Every run ends in exactly one of the outcomes (all but
/// `Acquired`, which is only logged, before the command starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The lock was taken and the command is about to start.
    Acquired,
    /// The lock was held and lockrun was not to wait (`-n`, `-w 0`).
    Busy,
    /// The wait ran out (`-w`).
    Timeout,
    /// `--skip-if-succeeded-within` found a recent success.
    Skipped,
    /// The command ran and ended by itself (or could not be started:
    /// status 126/127).
    Finished,
    /// `--max-time` stopped the command.
    MaxTime,
    /// The lock (a lock URL's) was lost while the command ran.
    Lost,
    /// Neither taken nor refused: a signal while waiting, a lock service
    /// that could not be reached, an error of the system.
    Error,
}

impl Event {
    /// `LOCKRUN_EVENT`, and the syslog line's MSGID.
    pub fn name(self) -> &'static str {
        match self {
            Event::Acquired => "acquired",
            Event::Busy => "busy",
            Event::Timeout => "timeout",
            Event::Skipped => "skipped",
            Event::Finished => "finished",
            Event::MaxTime => "max_time",
            Event::Lost => "lost",
            Event::Error => "error",
        }
    }

    /// The `outcome` label of `lockrun_runs_total`; none for `Acquired`,
    /// which is not an end.
    pub fn outcome(self) -> Option<metrics::Outcome> {
        use metrics::Outcome;
        Some(match self {
            Event::Acquired => return None,
            Event::Busy => Outcome::Busy,
            Event::Timeout => Outcome::Timeout,
            Event::Skipped => Outcome::SkippedRecent,
            Event::Finished => Outcome::Ran,
            Event::MaxTime => Outcome::MaxTime,
            Event::Lost => Outcome::Lost,
            Event::Error => Outcome::Error,
        })
    }

    /// Its syslog severity (RFC 5424 §6.2.1), which is also the journal's
    /// PRIORITY: a lost lock or a stopped command is an error, a failed
    /// command or a wait that ran out a warning, a busy lock a notice.
    fn severity(self, status: u8) -> u8 {
        match self {
            Event::Lost | Event::MaxTime | Event::Error => 3,
            Event::Timeout => 4,
            Event::Finished if status != 0 => 4,
            Event::Busy => 5,
            Event::Acquired | Event::Skipped | Event::Finished => 6,
        }
    }
}

/// One event as the sinks see it.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    pub event: Event,
    pub lock: &'a str,
    /// lockrun's exit status (128+N for a command killed by signal N);
    /// none for `Acquired`.
    pub status: Option<u8>,
    pub waited: Duration,
    /// How long the command ran (`Finished`, `MaxTime`, `Lost`).
    pub ran_for: Option<Duration>,
    pub started: SystemTime,
    pub ended: SystemTime,
}

impl Report<'_> {
    /// The event in words (syslog's MSG, the journal's MESSAGE).
    pub fn message(&self) -> String {
        let status = self.status.unwrap_or(0);
        let waited = crate::display::span(self.waited);
        let ran = crate::display::span(self.ran_for.unwrap_or_default());
        // Escaped as for the terminal: a newline in a lock's name must not
        // split a log line.
        let lock = crate::display::escape(self.lock);
        match self.event {
            Event::Acquired => format!("{lock}: acquired after {waited}"),
            Event::Busy => format!("{lock}: busy, not running the command (exit {status})"),
            Event::Timeout => {
                format!("{lock}: timed out after {waited}, not running the command (exit {status})")
            }
            Event::Skipped => {
                format!("{lock}: skipped: the last run succeeded within --skip-if-succeeded-within")
            }
            Event::Finished => format!("{lock}: finished with status {status} after {ran}"),
            Event::MaxTime => {
                format!("{lock}: stopped by --max-time after {ran} (exit {status})")
            }
            Event::Lost => format!("{lock}: lock lost while the command ran (exit {status})"),
            Event::Error => {
                format!("{lock}: neither acquired nor refused (exit {status})")
            }
        }
    }

    fn wait_ms(&self) -> u128 {
        self.waited.as_millis()
    }
}

/// A run being watched: made at its start, told each event.
#[derive(Debug)]
pub struct Watch<'a> {
    observers: &'a Observers,
    /// The lock's name in the metrics' `lock` label and the log: a lock
    /// file's absolute path, a lock URL without its passwords.
    lock: String,
    started: SystemTime,
    acquired: Option<Instant>,
}

impl<'a> Watch<'a> {
    pub fn begin(observers: &'a Observers, lock: String) -> Watch<'a> {
        Watch {
            observers,
            lock,
            started: SystemTime::now(),
            acquired: None,
        }
    }

    /// The lock was taken and the command is to start: logged, not
    /// counted (the run's end is).
    pub fn acquired(&mut self, waited: Duration) {
        self.acquired = Some(Instant::now());
        let report = Report {
            event: Event::Acquired,
            lock: &self.lock,
            status: None,
            waited,
            ran_for: None,
            started: self.started,
            ended: SystemTime::now(),
        };
        self.log(&report);
    }

    /// The run's outcome, with lockrun's exit status: logged and counted.
    pub fn ended(&self, event: Event, status: u8, waited: Duration) {
        let ran_for = match event {
            Event::Finished | Event::MaxTime | Event::Lost => self.acquired.map(|t| t.elapsed()),
            _ => None,
        };
        let report = Report {
            event,
            lock: &self.lock,
            status: Some(status),
            waited,
            ran_for,
            started: self.started,
            ended: SystemTime::now(),
        };
        self.log(&report);
        if let Some(path) = &self.observers.metrics_file
            && let Err(e) = metrics::update(path, &report)
        {
            crate::say!(
                "lockrun: warning: could not update the metrics file {}: {e} (the run itself is unaffected)",
                crate::display::escape(&path.to_string_lossy())
            );
        }
    }

    fn log(&self, report: &Report) {
        let Some(log) = self.observers.log else {
            return;
        };
        let priority = report.event.severity(report.status.unwrap_or(0));
        match log.sink {
            Sink::Syslog => syslog::send(log.facility, priority, report),
            Sink::Journal => journal::send(log.facility, priority, report),
        }
    }
}

/// Sends one datagram to the Unix socket at `path` without ever waiting:
/// a missing socket, a full queue or a refused send is the log's loss,
/// never the run's (CONTRACT §17).
fn send_datagram(path: &std::path::Path, datagram: &[u8]) {
    crate::platform::send_datagram(path, datagram);
}

/// The socket to log to: the environment's override (for tests, or a
/// chroot), else the system's.
fn socket_path(variable: &str, default: &str) -> PathBuf {
    std::env::var_os(variable)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(default), PathBuf::from)
}
