//! lockrun: run a command while holding a lock (a kernel lock on a file,
//! or a lock URL on etcd or PostgreSQL), and tell who holds it.
//!
//! Dependencies flow one way (tests/layering.rs checks it):
//!
//! - `main` dispatches; `cli` parses (and `generate` prints its man page
//!   and completions).
//! - `registry` is the one list of lock URL backends: `LockTarget` (which
//!   backend a lock goes to), each backend's options, run form,
//!   `holder`/`check` and words for `--help` and the man pages. Nothing
//!   else outside a backend's folder names one.
//! - `run` is the one run flow every backend plugs into: `run::wait` (the
//!   one waiter: deadline, signals; `run::progress`, the status line),
//!   `run::command` (start and reap), `run::supervise` (`--max-time`),
//!   `run::signals` (the platform's, named there),
//!   `run::fd_mode` (flock(1)'s descriptor form), `run::urls` (lock URLs,
//!   generic over the backend).
//! - `backend` is the seam: `Capabilities`, `Contender`, `Backend`, `Held`;
//!   each backend in its own folder with all that is its own (`file`, with
//!   `slots`, `holder`, who holds it for the run path's messages, and
//!   `inspect`; `etcd`; `postgres`: each with `entry`, what the registry
//!   asks of it, and `inspect`), and `backend::lost`, what every lock URL
//!   does when its lock is lost. A backend knows nothing of the run flow.
//! - `observe` is what a run tells the monitoring (`--metrics-file`,
//!   `--log`): the run flow reports each outcome to it, whatever the
//!   backend; it names nothing of the run flow nor of any backend.
//! - `report` prints `holder`/`check`'s answer, `inspect::Report`, which
//!   every backend's inspection fills; the run path never reaches a
//!   backend's inspection, the registry or `report`.
//! - `windows` (Windows only): lockrun.exe's command line and dispatch, in
//!   place of `cli` and `main`'s; its own run form, `holder` and `check` on
//!   a lock file (the Unix file backend, `backend::file`, is not built
//!   there); and lock URLs through `registry` and the one run flow, as on
//!   Linux (`platform::windows` gives the facade's names there).
//! - Below them all: `record`, `identity`, `display`, `sanitize`, `mode`,
//!   `persona`, `exit_codes`, `sync` (state shared with watcher threads),
//!   and `platform`, the one place for operating-system specifics (with
//!   `platform::Helpers`, the blocking calls on helper threads that the
//!   waiter and `--slots` both wait on and get back).

/// One line on stderr, as `eprintln!` writes it, but a failed write (a full
/// disk behind `2>/dev/full`, a closed pipe where SIGPIPE is ignored) is
/// dropped instead of panicking: a message must never kill lockrun, least
/// of all while it holds a lock and still owes the record its end.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod backend;
#[cfg(unix)]
pub mod cli;
pub mod display;
pub mod exit_codes;
#[cfg(unix)]
pub mod generate;
pub mod identity;
pub mod inspect;
pub mod mode;
pub mod observe;
pub mod persona;
pub mod platform;
pub mod record;
pub mod registry;
pub mod report;
pub mod run;
pub mod sanitize;
pub mod sync;
#[cfg(windows)]
pub mod windows;
