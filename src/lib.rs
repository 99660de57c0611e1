//! lockrun: run a command while holding a kernel file lock, and tell who
//! holds it.
//!
//! Dependencies flow one way. `cli` parses. `run` is the one run flow:
//! waiting (`run::wait`), signals, starting and reaping the command,
//! `--max-time` (`run::supervise`); it takes any backend through the seam
//! in `backend` (`backend::file`, `backend::etcd`), which says what each
//! can do and how its lock is taken, held and released. `inspect` and
//! `report` answer `holder`/`check` and are never reached from the run
//! path. All of them build on `record`, `identity` and `display`, and those
//! on `platform`, the one place for operating-system specifics.

pub mod backend;
pub mod cli;
pub mod display;
pub mod exit_codes;
pub mod generate;
pub mod identity;
pub mod inspect;
pub mod mode;
pub mod persona;
pub mod platform;
pub mod record;
pub mod report;
pub mod run;
pub mod sanitize;

// The backends' modules under their short names.
pub use backend::etcd;
pub use backend::file::{fd_mode, lock};
pub use backend::postgres;
pub use run::wait;
