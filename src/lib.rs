//! lockrun: run a command while holding a kernel file lock, and tell who
//! holds it.
//!
//! Dependencies flow one way: `cli` parses; `run` and `fd_mode` take locks
//! and start commands, `inspect` and `report` answer `holder`/`check`; all
//! of them build on `lock`, `record` and `identity`, and those on
//! `platform`, the one place for operating-system specifics. The run path
//! never touches the inspection code. `etcd` is the other backend (lock
//! URLs), reached only through `cli::LockTarget`.

pub mod cli;
pub mod display;
pub mod etcd;
pub mod exit_codes;
pub mod fd_mode;
pub mod identity;
pub mod inspect;
pub mod lock;
pub mod platform;
pub mod progress;
pub mod record;
pub mod report;
pub mod run;
pub mod sanitize;
pub mod signals;
pub mod wait;
