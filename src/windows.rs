//! lockrun.exe: the run form, `holder` and `check` on Windows (CONTRACT
//! §20), on the operating-system calls in `platform::windows` and the
//! portable bottom layer (the record, identity, display, sanitize). The
//! Unix command line, run flow and backends (`cli`, `run`, `backend`,
//! `inspect`) are not built for Windows; this is what replaces them there.

mod cli;
mod inspect;
mod run;

pub use cli::main;
