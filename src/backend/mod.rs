//! The seam between the one run flow (`crate::run`) and where a lock lives.
//!
//! A backend says what it can do ([`Capabilities`]), how to contend for its
//! lock ([`Contender`]), and what holding it means for the
//! command ([`Held`]): the variables it gets, where its record is kept, and
//! how the lock is let go. Everything else (preparing the record, waiting,
//! the status line, signals, starting and reaping the command, max-time)
//! is the run flow's, written once. Dispatch is static: the run flow is
//! generic over the backend, so the file path compiles to what it was.

pub mod etcd;
// The Unix file lock (flock(2), OFD locks, /proc).
#[cfg(unix)]
pub mod file;
// The Windows file lock (LockFileEx on one byte past the record), in the
// same folder: its own module, as the Unix one's files are Unix-only.
#[cfg(windows)]
#[path = "file/windows.rs"]
pub mod file_windows;
#[cfg(feature = "lock-urls")]
pub mod lost;
pub mod postgres;
pub mod redis;

use crate::exit_codes::Failure;
use crate::platform::BorrowedFd;
use crate::record::Record;
use std::ffi::OsString;

/// A blocking wait for the lock, run on a helper thread.
pub type Blocking = Box<dyn FnOnce() -> Result<(), Failure> + Send>;

/// A backend's part in waiting: how to try, how to block, who holds it.
pub trait Contender {
    /// One attempt without waiting. `Ok(false)`: someone else holds it.
    fn try_acquire(&mut self) -> Result<bool, Failure>;
    /// A blocking wait for a helper thread. It must return soon when the
    /// thread gets the interrupt signal (a kernel lock call returns EINTR),
    /// or be harmless to abandon.
    fn blocking(&mut self) -> Result<Blocking, Failure>;
    /// Blocks on this very thread, where the backend can (a kernel lock a
    /// signal handler may end lockrun in); `None` where it cannot.
    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        None
    }
    /// The wait ended (deadline, signal) while the helper blocks: make its
    /// call return soon where the backend can (a lock server's cancel
    /// request). A kernel lock needs nothing: the interrupt signal does it.
    fn interrupt(&mut self) {}
    /// Whether the blocking call returns soon once interrupted, so that
    /// the wait collects its answer. `false` for a kernel lock call no
    /// interrupt ends (LockFileEx on Windows): a wait that ends without
    /// the lock leaves it behind at once, and it ends with lockrun.
    fn answers_interrupt(&self) -> bool {
        true
    }
    /// Lets go of a lock obtained just as a signal ended the wait.
    fn undo(&mut self) {}
    /// Called once the lock is taken: `Ok(false)` when it was taken on
    /// something that is no longer the lock (a lock file replaced or
    /// deleted while we waited); the contender has let go of it and is
    /// ready to contend again.
    fn confirm(&mut self) -> Result<bool, Failure> {
        Ok(true)
    }
    /// Whether waiting may go on (a lease still alive).
    fn still_valid(&mut self) -> Result<(), Failure> {
        Ok(())
    }
    /// Who holds the lock, in words, when that can be said with confidence
    /// (the live status line).
    fn holder(&mut self) -> Option<String>;
    /// The conflict message's (and `-v`'s) words for whoever holds the
    /// lock, whatever can be said of it.
    fn conflict_holder(&mut self) -> String;
    /// The same, as it follows "held" in those messages: `by …` for one
    /// holder, or another preposition where a lock file's kernel table
    /// says better (`shared by 3 processes`).
    fn conflict_held(&mut self) -> String {
        format!("by {}", self.conflict_holder())
    }
    /// The name, in conflict messages, of the lock that was busy, where
    /// it is not the run's own label (one lock of an `--also` set).
    fn busy_label(&self) -> Option<String> {
        None
    }
    /// What a conflict message adds for a lock taken with others (an
    /// `--also` set): that none of them is held.
    fn none_held_note(&self) -> Option<String> {
        None
    }
    /// With the lock held: the record the lock's last holder left, for
    /// `--skip-if-succeeded-within` (only where `Capabilities::last_record`
    /// says the backend keeps one; `None` when there is none).
    fn last_record(&mut self) -> Option<Record> {
        None
    }
}

/// Finds the processes, besides the command (its pid is given, to leave
/// out), holding the lock through lockrun's descriptor: what `--max-time`
/// stops with it.
pub type Inheritors = Box<dyn Fn(i32) -> Vec<i32> + Send>;

/// Every lock URL's check of the lock name it carries (`shown` is the URL
/// as messages show it; `how` says where the name goes): a name is needed,
/// and one with control characters would reach terminals and logs through
/// every message and `holder` line.
pub fn check_lock_name(name: &str, shown: &str, how: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("'{shown}' names no lock: {how}"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!(
            "the lock name in '{}' contains control characters",
            shown.escape_debug()
        ));
    }
    Ok(())
}

/// The most slots one lock can have, on any backend (a lock file's waiting
/// head holds a descriptor and a thread per slot).
pub const MAX_SLOTS: u16 = 1024;

/// Why `--skip-if-succeeded-within` cannot go with `--slots`, on any lock
/// (here, not in the file backend's `slots`, so that every backend and the
/// command line on every OS name it from the seam).
pub const NO_ONE_LAST_RUN: &str =
    "each slot keeps its own record, so there is no one last run of the lock to go by";

/// Why `--skip-if-succeeded-within` (`within`) cannot go with `-s`
/// (`shared`) or `--no-record`, or is 0: the command line's refusal on
/// every OS. The rule is "exactly one of the contenders runs, decided from
/// the record under the lock": shared holders run side by side, and a run
/// without a record would leave the next one nothing to go by.
pub fn skip_recent_refusal(
    within: Option<std::time::Duration>,
    shared: bool,
    no_record: bool,
) -> Option<&'static str> {
    let within = within?;
    if shared {
        return Some(
            "--skip-if-succeeded-within cannot be used with -s: shared holders run at the same time, so the last run cannot decide for them; take the lock exclusively",
        );
    }
    if within.is_zero() {
        return Some(
            "--skip-if-succeeded-within 0 would never skip: give the period a success counts for (30m, 1h, 1d)",
        );
    }
    if no_record {
        return Some(
            "--skip-if-succeeded-within cannot be used with --no-record: it goes by the record the last run left",
        );
    }
    None
}

/// A lock URL's lease or session check period, when `--ttl` is not given.
pub const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// What every run form takes from the command line for the run flow,
/// whatever the lock: the command, what a run that does not get the lock
/// says and exits with, the record, and the time limit. Each form's
/// options carry one, so the run flow is given it whole, not copied field
/// by field.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub command: Vec<OsString>,
    pub conflict_status: u8,
    pub quiet: bool,
    pub verbose: bool,
    pub write_record: bool,
    /// Signals sent to lockrun go on to the command (`--forward auto`).
    pub forward_signals: bool,
    /// `--max-time`: stop everything holding the lock after this long.
    pub max_time: Option<std::time::Duration>,
    /// After `--max-time` (or a lost lock), SIGKILL this long after SIGTERM.
    pub kill_grace: std::time::Duration,
    /// `--skip-if-succeeded-within`: once the lock is held, do not run the
    /// command if the lock's last record is a success that ended less than
    /// this long ago.
    pub skip_if_succeeded_within: Option<std::time::Duration>,
    /// `--metrics-file`, `--log`: told each outcome (`crate::observe`);
    /// `None` costs the run nothing.
    pub observe: Option<crate::observe::Observers>,
}

/// The run form on a lock URL, as the command line gives it; `U` is the
/// backend's parsed URL.
#[derive(Debug, Clone)]
pub struct UrlRunOptions<U> {
    pub url: U,
    pub nonblocking: bool,
    pub timeout: Option<std::time::Duration>,
    pub ttl: std::time::Duration,
    /// `--slots N`: at most N holders at once (only where `CAPS.slots`).
    pub slots: Option<u16>,
    pub settings: RunSettings,
}

impl<U> UrlRunOptions<U> {
    /// The record a contender's key or session carries while it waits, so
    /// that `holder` can name a contender before its command runs; empty
    /// with `--no-record`.
    pub fn waiting_record(&self) -> Vec<u8> {
        if !self.settings.write_record {
            return Vec::new();
        }
        let cwd = std::env::current_dir().ok();
        Record {
            acquired_at: Some(crate::display::now_rfc3339()),
            ..Record::starting(
                crate::identity::Me::gather(),
                &self.settings.command,
                cwd.as_deref(),
                crate::mode::LockMode::Exclusive,
            )
        }
        .to_line()
    }
}

/// What a backend supports; the run flow refuses the rest with a usage
/// error naming the option, rather than silently ignoring it.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// What the lock is called in messages: "etcd:// locks".
    pub kind: &'static str,
    pub shared: bool,
    /// `-F`: the lock survives lockrun becoming the command.
    pub exec_in_place: bool,
    pub poll: bool,
    /// `--ttl`, `--kill-grace` without `--max-time`: a lease to keep alive.
    pub lease: bool,
    /// `--fcntl`, `--start`, `--length`, `-u`: kernel byte-range locks.
    pub byte_ranges: bool,
    /// `--slots N`: up to N holders at once.
    pub slots: bool,
    /// Why lockrun must stay while the command runs (for `-F`'s refusal).
    pub stays_to: &'static str,
    /// Who wakes a waiter (for `--poll`'s refusal).
    pub woken_by: &'static str,
    /// `--skip-if-succeeded-within`: the last holder's record outlives the
    /// release, for the next holder to read ([`Contender::last_record`]).
    /// Where it does not, why (for the option's refusal).
    pub last_record: Result<(), &'static str>,
}

/// What a run form asks of a backend, to be checked against what it can do.
pub struct Asked {
    pub shared: bool,
    pub exec_in_place: bool,
    pub poll: bool,
    pub byte_ranges: bool,
    pub slots: bool,
    /// `--skip-if-succeeded-within`.
    pub skip_recent: bool,
}

impl Capabilities {
    /// The usage error for the first thing asked that this backend cannot
    /// do: the CLI asks the backend rather than knowing each one.
    pub fn refuse(&self, asked: &Asked) -> Result<(), String> {
        let kind = self.kind;
        if asked.shared && !self.shared {
            return Err(format!("{kind} are exclusive only; -s cannot be used"));
        }
        if asked.byte_ranges && !self.byte_ranges {
            return Err(format!(
                "-u, --fcntl, --start and --length apply to lock files, not {kind}"
            ));
        }
        if asked.exec_in_place && !self.exec_in_place {
            return Err(format!(
                "-F cannot be used with {kind}: lockrun must stay to {}",
                self.stays_to
            ));
        }
        if asked.slots && !self.slots {
            return Err(format!("--slots does not apply to {kind} yet"));
        }
        // The command line refuses the pair for lock files; a lock URL's
        // options come here.
        if asked.skip_recent && asked.slots {
            return Err(format!(
                "--skip-if-succeeded-within cannot be used with --slots: {}",
                NO_ONE_LAST_RUN
            ));
        }
        if let (true, Err(why)) = (asked.skip_recent, self.last_record) {
            return Err(format!(
                "--skip-if-succeeded-within cannot be used with {kind}: {why}"
            ));
        }
        if asked.poll && !self.poll {
            return Err(format!(
                "--poll does not apply to {kind}: {} wakes the waiter",
                self.woken_by
            ));
        }
        Ok(())
    }
}

/// A backend, before the lock is taken: contends through the one waiter,
/// then either gives up or becomes [`Held`].
pub trait Backend: Contender {
    type Held: Held;
    const CAPS: Capabilities;

    /// Exit status when taking the lock failed for a reason other than a
    /// holder (71 a file's OS error, 69 an unreachable service).
    fn failure_status(&self) -> u8;
    /// Not acquired: let go of whatever contending took (a lease).
    fn give_up(self);
    /// The lock is ours. `record` is the run's record, if one is kept.
    fn acquired(self, record: Option<&Record>, verbose: bool) -> Result<Self::Held, Failure>;
}

/// A lock held for the command.
pub trait Held {
    /// What the command's environment gains beyond `LOCKRUN_LOCKFILE` and
    /// `LOCKRUN_MODE` (a fencing token).
    fn env(&self) -> Vec<(&'static str, OsString)> {
        Vec::new()
    }
    /// Whether the command must die with lockrun: a lease nobody renews
    /// passes the lock to someone else, so the command may not go on.
    fn dies_with_lockrun(&self) -> bool {
        false
    }
    /// The fencing token the command gets, kept in the record so that
    /// `check --token` can tell a current holder's from a stale one.
    fn fencing_token(&self) -> Option<i64> {
        None
    }
    /// The lock actually held, where it is not the one the user named:
    /// with `--slots`, a slot's file. `-v` names it.
    fn held_label(&self) -> Option<&str> {
        None
    }
    /// Where the command's own process writes the record before it execs,
    /// when the record lives in the lock file.
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Stores the record: once the command runs (`released` false), and at
    /// the end. Backends whose record is written by the command's process
    /// ignore the first.
    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String>;
    /// More records for the command's process to write before its exec,
    /// besides the one at [`Held::child_record_fd`], each with its
    /// descriptor: the other lock files of an `--also` set. `record` is
    /// the run's, complete but for the command's pid and start time.
    fn more_child_records(
        &self,
        _record: &Record,
    ) -> Vec<(crate::record::ChildRecord, crate::platform::RawFd)> {
        Vec::new()
    }
    /// The command runs as `pid`: watch the lock on its behalf (a lease),
    /// stopping it through `stop` if the lock is lost.
    fn command_started(&mut self, _pid: i32) {}
    /// The command is a zombie: its pid must not be signalled any more.
    fn command_exited(&mut self) {}
    /// Finds the processes, besides the command, that hold the lock through
    /// the descriptor lockrun handed down (children that inherited it), for
    /// `--max-time` to stop them too.
    fn inheritors(&self) -> Option<Inheritors> {
        None
    }
    /// Whether what [`Held::inheritors`] finds is limited to lockrun's
    /// descendants (a lent descriptor, which the caller's own processes
    /// share): lockrun must then adopt the orphans its command leaves
    /// behind, or a double fork or a setsid would hide them under init.
    fn searches_descendants(&self) -> bool {
        false
    }
    /// The lock's own connection, for lockrun's watchdog to keep open if
    /// lockrun dies (`platform::Watchdog::hold`): the lock then outlives
    /// lockrun until the command's tree is stopped.
    fn connection_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Lets go of the lock. `Err`: it was lost while the command ran (the
    /// command was stopped), with the reason.
    fn release(self) -> Result<(), String>;
}

/// Everything the command started (its children, whatever process group or
/// session they moved to, and the orphans lockrun adopts as their
/// subreaper), for `--max-time` and a lost lock to stop with it. The
/// file backend's finder for a lent descriptor and a lock URL's, which has
/// no descriptor to trace; both need [`Held::searches_descendants`].
pub fn command_tree() -> Inheritors {
    let me = std::process::id() as i32;
    Box::new(move |command| {
        // A lock URL's watchdog is lockrun's child, not the command's.
        let watchdog = crate::platform::watchdog_pid();
        crate::platform::descendants(me)
            .into_iter()
            .filter(|&pid| pid != command && pid != watchdog)
            .collect()
    })
}

/// What a lock URL's held lock adds to the command's environment: the
/// fencing token that names this holder, and with `--slots` its slot.
pub fn url_env(token: i64, slot: Option<u16>) -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env = vec![("LOCKRUN_FENCING_TOKEN", token.to_string().into())];
    if let Some(slot) = slot {
        env.push(("LOCKRUN_SLOT", slot.to_string().into()));
    }
    env
}

/// A backend's own words for `--help` and the man pages: what the registry
/// (src/registry.rs) puts together for the backends a build has, so that a
/// build advertises exactly those, each in its own words.
pub struct Words {
    /// The URL form, for LOCKFILE's help (`etcd://HOST:PORT/NAME`).
    pub url: &'static str,
    /// Its paragraph in `--help` (after the examples).
    pub help: &'static str,
    /// Its exit statuses in `--help`'s summary (`69 etcd unreachable`).
    pub help_exit: &'static str,
    /// What `--ttl` means for it.
    pub ttl: &'static str,
    /// lockrun(1): its DESCRIPTION subsection, ENVIRONMENT entries (the
    /// command's, then what lockrun reads) and EXIT STATUS entries.
    pub man_description: &'static str,
    pub man_environment: &'static str,
    pub man_reads: &'static str,
    pub man_exit: &'static str,
    /// lockrun-holder(1) and lockrun-check(1): a paragraph and exit
    /// statuses.
    pub holder_description: &'static str,
    pub inspect_exit: &'static str,
    /// `holder`'s summary line for its unreachable status (`69 etcd cannot
    /// be reached`).
    pub help_inspect_exit: &'static str,
}

/// A backend's clap options where it has none of its own (PostgreSQL
/// takes libpq's settings in the URL).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct NoArgs {}

/// What every lock URL's run form takes from the command line, once the
/// registry has checked it against the backend's [`Capabilities`].
pub struct UrlBase {
    pub nonblocking: bool,
    pub timeout: Option<std::time::Duration>,
    pub ttl: Option<std::time::Duration>,
    pub slots: Option<u16>,
    pub settings: RunSettings,
}

impl UrlBase {
    /// The run options for `url`, `--ttl`'s default filled in.
    pub fn with<U>(self, url: U) -> UrlRunOptions<U> {
        UrlRunOptions {
            url,
            nonblocking: self.nonblocking,
            timeout: self.timeout,
            ttl: self.ttl.unwrap_or(DEFAULT_TTL),
            slots: self.slots,
            settings: self.settings,
        }
    }
}

/// The backend of a lock URL scheme this build does not have: it cannot
/// be made (there is no value of it), so the registry's one code path
/// compiles for every build and the compiler drops it where the feature
/// is off.
pub enum Unbuilt {}

impl Contender for Unbuilt {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        match *self {}
    }
    fn blocking(&mut self) -> Result<Blocking, Failure> {
        match *self {}
    }
    fn holder(&mut self) -> Option<String> {
        match *self {}
    }
    fn conflict_holder(&mut self) -> String {
        match *self {}
    }
}

impl Backend for Unbuilt {
    type Held = Unbuilt;
    const CAPS: Capabilities = Capabilities {
        kind: "lock URLs",
        shared: false,
        exec_in_place: false,
        poll: false,
        lease: false,
        byte_ranges: false,
        slots: false,
        stays_to: "",
        woken_by: "",
        last_record: Ok(()),
    };
    fn failure_status(&self) -> u8 {
        match *self {}
    }
    fn give_up(self) {
        match self {}
    }
    fn acquired(self, _record: Option<&Record>, _verbose: bool) -> Result<Unbuilt, Failure> {
        match self {}
    }
}

impl Held for Unbuilt {
    fn store_record(&mut self, _record: &Record, _released: bool) -> Result<(), String> {
        match *self {}
    }
    fn release(self) -> Result<(), String> {
        match self {}
    }
}
