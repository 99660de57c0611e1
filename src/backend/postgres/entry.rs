//! What the registry (src/registry.rs) asks of the PostgreSQL backend: its
//! command-line options (none of its own: libpq's settings go in the URL)
//! and its words for `--help` and the man pages, reading a LOCKFILE
//! argument that is a postgres:// URL, and starting its lock for the run
//! form. Compiled in every build; what needs the client is behind
//! [`ENABLED`].

use super::{ENABLED, PgUrl, RunOptions, check_ttl, not_built};
use crate::backend::{NoArgs, UrlBase, Words};
use crate::exit_codes::{self, Failure};
use std::ffi::OsStr;

/// The lock a LOCKFILE argument names, parsed.
pub type Url = PgUrl;

/// No options of its own, for the run form nor for `holder`/`check`.
pub type Args = NoArgs;
pub type InspectArgs = NoArgs;

/// Never said: there are no such options.
pub const ARGS_ONLY_HERE: &str = "";

/// libpq's TLS settings go in the URL: no `--cacert`.
pub const TLS_FILES: bool = false;

pub fn without_tls_files(args: &Args) -> Args {
    args.clone()
}

/// A postgres:// URL may carry a password: main.rs hides it from `ps`.
pub const HAS_PASSWORDS: bool = true;

/// Where the passwords of a postgres:// URL in `arg` are.
pub fn password_spans(arg: &[u8]) -> Vec<std::ops::Range<usize>> {
    super::password_spans(arg)
}

/// Whether a LOCKFILE argument is a PostgreSQL lock URL.
pub fn is_url(arg: &OsStr) -> bool {
    super::is_url(arg)
}

/// `postgres://…#NAME` or `postgresql://…#NAME` (CONTRACT §12); a usage
/// error in a build without PostgreSQL.
pub fn parse_target(arg: &OsStr) -> Result<Url, Failure> {
    if !ENABLED {
        return Err(not_built());
    }
    let text = arg.to_str().ok_or_else(|| {
        Failure::new(
            exit_codes::USAGE,
            "the postgres:// lock URL is not valid UTF-8",
        )
    })?;
    PgUrl::parse(text).map_err(|e| Failure::new(exit_codes::USAGE, e))
}

pub fn with_inspect_args(url: Url, _args: &InspectArgs) -> Result<Url, Failure> {
    Ok(url)
}

/// The run form's options on a postgres:// URL: `--ttl` within what the
/// server's system takes.
pub fn run_options(url: Url, _args: &Args, base: UrlBase) -> Result<RunOptions, Failure> {
    if let Some(ttl) = base.ttl {
        check_ttl(ttl).map_err(|e| Failure::new(exit_codes::USAGE, e))?;
    }
    Ok(base.with(url))
}

/// The run form's backend: connects and makes the first attempt.
#[cfg(feature = "postgres")]
pub fn start(opts: &RunOptions, label: &str) -> Result<super::lock::PgBackend, Failure> {
    super::lock::PgBackend::start(opts, label)
}

#[cfg(not(feature = "postgres"))]
pub fn start(_opts: &RunOptions, _label: &str) -> Result<crate::backend::Unbuilt, Failure> {
    Err(not_built())
}

/// `holder`/`check` on a postgres:// URL.
pub fn look_up(url: &Url) -> Result<crate::inspect::Report, Failure> {
    super::inspect::look_up(url)
}

/// PostgreSQL's words for `--help` and the man pages.
pub const WORDS: Words = Words {
    url: "postgres://[USER@]HOST[:PORT]/DB#NAME",
    help: "\
postgres://[USER@]HOST[:PORT]/DB#NAME (or postgresql://) takes a session
advisory lock in PostgreSQL; libpq's settings go in the URL (sslmode=,
sslrootcert=), the password in PGPASSWORD or ~/.pgpass.",
    help_exit: "69 PostgreSQL unreachable (command not run); 76 PostgreSQL connection lost (command stopped)",
    ttl: "postgres: 1s to 32767s; the server ends the session, releasing the lock, about 2 x TTL after losing lockrun's host",
    man_description: "\
.SS PostgreSQL lock URLs
\\fBpostgres://\\fR[\\fIUSER\\fR\\fB@\\fR]\\fIHOST\\fR[\\fB:\\fR\\fIPORT\\fR]\\fB/\\fR\\fIDB\\fR\\fB#\\fR\\fINAME\\fR
(or \\fBpostgresql://\\fR) in place of \\fILOCKFILE\\fR takes a session advisory lock
in PostgreSQL, so that it excludes holders on other machines. The connection
URI takes libpq's settings (\\fBsslmode=\\fR, \\fBsslrootcert=\\fR); a password in
it is hidden from \\fBps\\fR and from every message. The record is carried in the
session's statements, readable in \\fBpg_stat_activity\\fR. If the connection is
lost while the command runs, the command and every process it started are sent
SIGTERM, then SIGKILL after \\fB\\-\\-kill\\-grace\\fR, and lockrun exits 76.
",
    man_environment: "",
    man_reads: "\
.TP
.B PGPASSWORD, PGPASSFILE
The password for a postgres:// URL that carries none (else \\fI~/.pgpass\\fR), as libpq reads them.
",
    man_exit: "\
.TP
.B 69
With a postgres:// URL: the server cannot be reached to acquire the lock; the command did not run.
.TP
.B 76
With a postgres:// URL: the connection was lost while the command ran; the command was stopped.
",
    holder_description: ".PP\nA postgres:// lock URL in place of a file reports the server session that holds the advisory lock, with the record its statements carry.\n",
    inspect_exit: ".TP\n.B 69\nThe PostgreSQL server cannot be reached.\n",
    help_inspect_exit: "69 PostgreSQL cannot be reached",
};
