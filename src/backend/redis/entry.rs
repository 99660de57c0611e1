//! What the registry (src/registry.rs) asks of the Redis backend: its
//! command-line options (`--cacert`, `--cert`, `--key` for rediss://,
//! shared with etcd's), its words for `--help` and the man pages, reading a
//! LOCKFILE argument that is a redis:// URL, and starting its lock for
//! the run form. Compiled in every build; what needs the client is behind
//! [`ENABLED`].

use super::{ENABLED, RedisUrl, RunOptions, TlsFiles, not_built};
use crate::backend::{UrlBase, Words};
use crate::exit_codes::{self, Failure};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

/// The lock a LOCKFILE argument names, parsed.
pub type Url = RedisUrl;

/// `--cacert`, `--cert` and `--key`: the same options as etcd's (one set
/// on the command line, CONTRACT §19), declared here only when etcd's
/// are not (a build without etcd), and read by their names either way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisArgs {
    pub files: TlsFiles,
}

/// What each option is: its name, value name, and help for a build
/// without etcd; with etcd, its help is widened to say it is Redis's too.
const TLS_OPTIONS: [(&str, &str, &str); 3] = [
    (
        "cacert",
        "FILE",
        "rediss:// lock URL only: verify the server's certificate with this CA (default: the system's roots)",
    ),
    (
        "cert",
        "FILE",
        "rediss:// lock URL only: client certificate (TLS), with --key",
    ),
    (
        "key",
        "FILE",
        "rediss:// lock URL only: the client certificate's private key",
    ),
];

impl clap::FromArgMatches for RedisArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let get = |id: &str| matches.try_get_one::<PathBuf>(id).ok().flatten().cloned();
        Ok(RedisArgs {
            files: TlsFiles {
                cacert: get("cacert"),
                cert: get("cert"),
                key: get("key"),
            },
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for RedisArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for (id, value_name, help) in TLS_OPTIONS {
            if cmd.get_arguments().any(|a| a.get_id() == id) {
                // etcd's: the same option, for both.
                cmd = cmd.mut_arg(id, |arg| {
                    let theirs = arg.get_help().map(ToString::to_string).unwrap_or_default();
                    let shared =
                        theirs.replacen("etcd lock URL only", "etcd and rediss:// lock URLs", 1);
                    arg.help(shared).help_heading("etcd and Redis TLS")
                });
                continue;
            }
            cmd = cmd.arg(
                clap::Arg::new(id)
                    .long(id)
                    .value_name(value_name)
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(help)
                    .help_heading("Redis"),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

pub type Args = RedisArgs;
pub type InspectArgs = RedisArgs;

/// What a lock of another kind says to these options.
pub const ARGS_ONLY_HERE: &str =
    "--cacert, --cert and --key apply only to lock URLs over TLS (rediss://)";

/// `--cacert`, `--cert` and `--key` are etcd's too.
pub const TLS_FILES: bool = true;

pub fn without_tls_files(_args: &Args) -> Args {
    RedisArgs::default()
}

/// A redis:// URL may carry a password (refused, but hidden from `ps`
/// first by main.rs).
pub const HAS_PASSWORDS: bool = true;

pub fn password_spans(arg: &[u8]) -> Vec<std::ops::Range<usize>> {
    super::password_spans(arg)
}

/// Whether a LOCKFILE argument is a Redis lock URL.
pub fn is_url(arg: &OsStr) -> bool {
    super::is_url(arg)
}

/// `redis://...#NAME` (CONTRACT §19); a usage error in a build without
/// Redis.
pub fn parse_target(arg: &OsStr) -> Result<Url, Failure> {
    if !ENABLED {
        return Err(not_built());
    }
    let text = arg.to_str().ok_or_else(|| {
        Failure::new(
            exit_codes::USAGE,
            "the redis:// lock URL is not valid UTF-8",
        )
    })?;
    RedisUrl::from_arg(text).map_err(|e| Failure::new(exit_codes::USAGE, e))
}

pub fn with_inspect_args(url: Url, args: &InspectArgs) -> Result<Url, Failure> {
    url.with_files(&args.files)
        .map_err(|e| Failure::new(exit_codes::USAGE, e))
}

/// The shortest lease: renewals every TTL/4 must stay well above a round
/// trip, and Redis counts PX in milliseconds.
pub const SHORTEST_TTL: Duration = Duration::from_millis(500);

/// The run form's options on a redis:// URL.
pub fn run_options(url: Url, args: &Args, base: UrlBase) -> Result<RunOptions, Failure> {
    let url = with_inspect_args(url, args)?;
    if let Some(ttl) = base.ttl
        && ttl < SHORTEST_TTL
    {
        return Err(Failure::new(
            exit_codes::USAGE,
            format!(
                "--ttl {} is too short for a redis:// lock: give at least 500ms (the lease is renewed every TTL/4)",
                humantime::format_duration(ttl)
            ),
        ));
    }
    Ok(base.with(url))
}

/// The run form's backend: connects and makes the first attempt.
#[cfg(feature = "redis")]
pub fn start(opts: &RunOptions, label: &str) -> Result<super::lock::RedisBackend, Failure> {
    super::lock::RedisBackend::start(opts, label)
}

#[cfg(not(feature = "redis"))]
pub fn start(_opts: &RunOptions, _label: &str) -> Result<crate::backend::Unbuilt, Failure> {
    Err(not_built())
}

/// `holder`/`check` on a redis:// URL.
pub fn look_up(url: &Url) -> Result<crate::inspect::Report, Failure> {
    super::inspect::look_up(url)
}

/// Redis's words for `--help` and the man pages.
pub const WORDS: Words = Words {
    url: "redis://[USER@]HOST:PORT[/DB]#NAME",
    help: "\
redis://[USER@]HOST:PORT[/DB]#NAME (or rediss:// for TLS; redis+sentinel://
and rediss+sentinel://HOST:PORT[,...]/MASTER#NAME through Sentinel) takes the
lock as a Redis key with a renewed lease; the password in REDISCLI_AUTH or
LOCKRUN_REDIS_PASSWORD (the Sentinels': LOCKRUN_REDIS_SENTINEL_PASSWORD),
never in the URL.",
    help_exit: "69 Redis unreachable (command not run); 76 Redis lock lost (command stopped)",
    ttl: "redis: the key's lease (PX), at least 500ms; the lock is lost if Redis cannot renew it this long",
    man_description: "\
.SS Redis lock URLs
\\fBredis://\\fR[\\fIUSER\\fR\\fB@\\fR]\\fIHOST\\fR\\fB:\\fR\\fIPORT\\fR[\\fB/\\fR\\fIDB\\fR]\\fB#\\fR\\fINAME\\fR
(or \\fBrediss://\\fR over TLS) in place of \\fILOCKFILE\\fR takes the lock as the
Redis key \\fINAME\\fR, set only if absent with a lease of \\fB\\-\\-ttl\\fR; the
fencing token is an increment of \\fINAME\\fR\\fB:fencing\\fR made in the same Lua
script. lockrun renews the lease every TTL/4 after checking the token; if the
key is gone, holds another token, or cannot be renewed for a whole TTL, the
command and every process it started are sent SIGTERM, then SIGKILL after
\\fB\\-\\-kill\\-grace\\fR, and lockrun exits 76. The password comes from
\\fBREDISCLI_AUTH\\fR or \\fBLOCKRUN_REDIS_PASSWORD\\fR; one in the URL is refused.
\\fBredis+sentinel://\\fR\\fIHOST\\fR\\fB:\\fR\\fIPORT\\fR[\\fB,\\fR...]\\fB/\\fR\\fIMASTER\\fR\\fB#\\fR\\fINAME\\fR
asks the Sentinels for the primary (\\fBrediss+sentinel://\\fR: over TLS, to the
Sentinels too). When the primary has replicas, the acquire waits (WAIT 1, at
most TTL/4 or 1s) for one to have the token before the command starts.
",
    man_environment: "",
    man_reads: "\
.TP
.B LOCKRUN_REDIS_PASSWORD, REDISCLI_AUTH
The password for a redis:// URL (the first one set; with \\fIUSER\\fR\\fB@\\fR, that ACL user's).
.TP
.B LOCKRUN_REDIS_SENTINEL_PASSWORD
The Sentinels' own password (their requirepass), for redis+sentinel:// URLs.
.TP
.B LOCKRUN_REDIS_WAIT
\\fB0\\fR: no WAIT for a replica after the acquire.
",
    man_exit: "\
.TP
.B 69
With a redis:// URL: the server cannot be reached (or refuses the password) to acquire the lock; the command did not run.
.TP
.B 76
With a redis:// URL: the lock was lost while the command ran; the command was stopped.
",
    holder_description: ".PP\nA redis:// lock URL in place of a file reports the key that holds the lock, with the record stored in it and its lease's remaining time.\n",
    inspect_exit: ".TP\n.B 69\nThe Redis server cannot be reached.\n",
    help_inspect_exit: "69 Redis cannot be reached",
};
