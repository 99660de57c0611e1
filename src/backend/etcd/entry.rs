//! What the registry (src/registry.rs) asks of the etcd backend: its
//! command-line options and their help, its words for `--help` and the
//! man pages, reading a LOCKFILE argument that is an etcd lock URL, and
//! starting its lock for the run form. Everything here is compiled in
//! every build; what needs the etcd client is behind [`ENABLED`].

use super::{AccessFlags, ENABLED, EtcdUrl, RunOptions, not_built};
use crate::backend::{UrlBase, Words};
use crate::exit_codes::{self, Failure};
use std::ffi::OsStr;
use std::path::PathBuf;

/// The lock a LOCKFILE argument names, parsed.
pub type Url = EtcdUrl;

// How to reach an etcd lock URL: for the run form, `holder` and `check`
// (a doc comment here would become help text).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// etcd lock URL only: verify the server's certificate with this CA (TLS; default: the system's roots)
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, help_heading = "etcd")]
    cacert: Option<PathBuf>,

    /// etcd lock URL only: client certificate (TLS), with --key
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, help_heading = "etcd")]
    cert: Option<PathBuf>,

    /// etcd lock URL only: the client certificate's private key
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, help_heading = "etcd")]
    key: Option<PathBuf>,

    /// etcd lock URL only: authenticate as NAME (password from LOCKRUN_ETCD_PASSWORD or --password-file)
    #[arg(long, value_name = "NAME", value_hint = clap::ValueHint::Other, help_heading = "etcd")]
    user: Option<String>,

    /// etcd lock URL only: read the --user password from FILE (first line)
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath, help_heading = "etcd")]
    password_file: Option<PathBuf>,
}

/// `holder` and `check` take the same options.
pub type InspectArgs = Args;

/// What a lock of another kind says to these options.
pub const ARGS_ONLY_HERE: &str =
    "--cacert, --cert, --key, --user and --password-file apply only to etcd:// lock URLs";

impl Args {
    fn flags(&self) -> AccessFlags {
        AccessFlags {
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            user: self.user.clone(),
            password_file: self.password_file.clone(),
        }
    }
}

/// `--cacert`, `--cert` and `--key` are also other backends' (Redis's):
/// one set of options, declared here when etcd is built.
pub const TLS_FILES: bool = true;

/// `args` without the options other backends share.
pub fn without_tls_files(args: &Args) -> Args {
    Args {
        cacert: None,
        cert: None,
        key: None,
        ..args.clone()
    }
}

/// An etcd URL carries no password (`--password-file`, the environment).
pub const HAS_PASSWORDS: bool = false;

pub fn password_spans(_arg: &[u8]) -> Vec<std::ops::Range<usize>> {
    Vec::new()
}

/// Whether a LOCKFILE argument is an etcd lock URL.
pub fn is_url(arg: &OsStr) -> bool {
    super::is_url(arg)
}

/// An etcd lock URL as LOCKFILE names it (with the environment's TLS and
/// credentials); a usage error in a build without etcd.
pub fn parse_target(arg: &OsStr) -> Result<Url, Failure> {
    if !ENABLED {
        return Err(not_built());
    }
    let text = arg.to_str().ok_or_else(|| {
        Failure::new(
            exit_codes::USAGE,
            format!("the lock URL {} is not valid UTF-8", arg.to_string_lossy()),
        )
    })?;
    EtcdUrl::from_arg(text).map_err(|e| Failure::new(exit_codes::USAGE, e))
}

/// `url` with the options `holder`/`check` were given.
pub fn with_inspect_args(url: Url, args: &InspectArgs) -> Result<Url, Failure> {
    url.with_flags(&args.flags())
        .map_err(|e| Failure::new(exit_codes::USAGE, e))
}

/// The run form's options on an etcd lock URL.
pub fn run_options(url: Url, args: &Args, base: UrlBase) -> Result<RunOptions, Failure> {
    let url = with_inspect_args(url, args)?;
    Ok(base.with(url))
}

/// The run form's backend: grants the lease and enters the queue.
#[cfg(feature = "etcd")]
pub fn start(opts: &RunOptions, label: &str) -> Result<super::lock::EtcdBackend, Failure> {
    super::lock::EtcdBackend::start(opts, label)
}

#[cfg(not(feature = "etcd"))]
pub fn start(_opts: &RunOptions, _label: &str) -> Result<crate::backend::Unbuilt, Failure> {
    Err(not_built())
}

/// `holder`/`check` on an etcd lock URL.
pub fn look_up(url: &Url) -> Result<crate::inspect::Report, Failure> {
    super::inspect::look_up(url)
}

/// etcd's words for `--help` and the man pages.
pub const WORDS: Words = Words {
    url: "etcd://HOST:PORT/NAME",
    help: "\
etcd://HOST:PORT[,HOST:PORT...]/NAME takes the lock in etcd v3
(endpoints from LOCKRUN_ETCD_ENDPOINTS when the URL names none: etcd:///NAME).",
    help_exit: "69 etcd unreachable (command not run); 76 etcd lock lost (command stopped)",
    ttl: "etcd: the lease's TTL, 1s to 9000000000s; the lock is lost if etcd cannot be reached this long",
    man_description: "\
.SS etcd lock URLs
\\fBetcd://\\fR\\fIHOST\\fR\\fB:\\fR\\fIPORT\\fR[\\fB,\\fR\\fIHOST\\fR\\fB:\\fR\\fIPORT\\fR...]\\fB/\\fR\\fINAME\\fR
in place of \\fILOCKFILE\\fR takes the lock in etcd v3 instead of the file
system, so that it excludes holders on other machines (\\fBetcd:///\\fR\\fINAME\\fR
takes the endpoints from \\fBLOCKRUN_ETCD_ENDPOINTS\\fR). The lock is held by a
lease that lockrun renews; if it is lost while the command runs, the command and
every process it started are sent SIGTERM, then SIGKILL after
\\fB\\-\\-kill\\-grace\\fR, and lockrun exits 76.
",
    man_environment: "",
    man_reads: "\
.TP
.B LOCKRUN_ETCD_ENDPOINTS
Comma\\-separated \\fIHOST\\fR\\fB:\\fR\\fIPORT\\fR list for an etcd lock URL that names no endpoint (\\fBetcd:///\\fR\\fINAME\\fR).
",
    man_exit: "\
.TP
.B 69
With an etcd lock URL: etcd cannot be reached to acquire the lock; the command did not run.
.TP
.B 76
With an etcd lock URL: the lock was lost while the command ran; the command was stopped.
",
    holder_description: ".PP\nAn etcd:// lock URL in place of a file reports the key that holds the lock, with the record stored in it.\n",
    inspect_exit: ".TP\n.B 69\netcd cannot be reached.\n",
    help_inspect_exit: "69 etcd cannot be reached",
};
