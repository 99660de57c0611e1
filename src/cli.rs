//! The command line, defined with clap and turned into the plain option
//! structs the rest of lockrun takes. Nothing past this module knows clap.

use crate::backend::RunSettings;
use crate::backend::file::lock::{self, LockKind, LockSpec};
use crate::exit_codes::{self, Failure};
use crate::mode::LockMode;
use crate::persona;
pub use crate::registry::LockTarget;
use crate::registry::{self, UrlArgs, UrlRun};
use crate::run::RunOptions;
use crate::run::fd_mode::FdOptions;
use crate::run::wait::WaitPolicy;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueHint};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// `check`'s exit statuses and example, for every build.
const CHECK_AFTER: &str = "Exit status: 0 held; 1 not held (or no lock file); 69 cannot tell without \
                           taking the lock (network file system, holder in another PID namespace); 64 usage error.\n\n\
                           Example:\n  lockrun check -q /var/lock/backup.lock && echo \"backup running\"";

const USAGE: &str = "\
lockrun [OPTIONS] LOCKFILE [--] COMMAND [ARG]...
       lockrun [OPTIONS] LOCKFILE -c SHELL_COMMAND
       lockrun [OPTIONS] FD
       lockrun [OPTIONS] --fd FD [--] COMMAND [ARG]...
       lockrun holder [--json] LOCKFILE...
       lockrun check [--json] [-q] [--probe] LOCKFILE
       lockrun list [--json] [--all] [--color WHEN] [DIR|LOCKFILE]...";

/// Under the name `flock` there are no subcommands: `flock holder x` locks
/// a file named holder, as flock(1) would.
const FLOCK_USAGE: &str = "\
flock [OPTIONS] LOCKFILE [--] COMMAND [ARG]...
       flock [OPTIONS] LOCKFILE -c SHELL_COMMAND
       flock [OPTIONS] FD
       flock [OPTIONS] --fd FD [--] COMMAND [ARG]...";

const EXAMPLES: &str = "\
Examples:
  lockrun -w 10s /var/lock/backup.lock -- backup.sh --full
  crontab (full paths: cron's PATH is /usr/bin:/bin):
  */5 * * * * /usr/bin/lockrun -n -q /var/lock/sync.lock /usr/local/bin/sync.sh
  ( lockrun -n 9 || exit 1; critical-section ) 9>/var/lock/x.lock
  lockrun holder /var/lock/backup.lock";

const EXIT_STATUS: &str = "\
Exit status: the command's; 75 lock busy or timed out (-E to change);
64 usage; 66 cannot open/create; 71 OS error; 77 unsafe lock file;
126/127 command not executable/not found; 128+N signal N while waiting;
124 stopped at --max-time";

/// Durations longer than this (about 100 years) count as this: no wait,
/// poll or grace period of lockrun's can end later, and none can overflow
/// the clock it is measured on.
pub const LONGEST_WAIT: Duration = Duration::from_secs(3_155_760_000);

/// The longest lease any lock URL backend grants (etcd's MaxLeaseTTL);
/// each backend refuses what it cannot take itself (`run_options`).
const LONGEST_TTL: Duration = Duration::from_secs(9_000_000_000);

#[derive(Debug, Parser)]
#[command(
    name = "lockrun",
    version,
    about = "Run a command while holding a kernel lock on a file, and tell who holds it",
    override_usage = USAGE,
    args_conflicts_with_subcommands = true,
    // getopt's rules, as flock(1): an option given again overrides the
    // earlier one (an alias or wrapper may prepend options).
    args_override_self = true,
    // flock(1) (getopt_long) accepts unambiguous prefixes: --excl, --time.
    infer_long_args = true,
    disable_help_subcommand = true,
    max_term_width = 80
)]
pub struct Cli {
    #[command(subcommand)]
    pub inspect: Option<Inspect>,
    /// Print the man page or a shell completion script of this build, then exit
    #[arg(long, value_name = "KIND", value_enum)]
    pub generate: Option<GenerateKind>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// lockrun invoked as `flock`: the run form only.
#[derive(Debug, Parser)]
#[command(
    name = "flock",
    // `flock --version` says what it is, as util-linux's says
    // "flock from util-linux 2.38.1".
    version = concat!("(lockrun ", env!("CARGO_PKG_VERSION"), ")"),
    about = "Manage file locks from shell scripts (lockrun, invoked as flock)",
    override_usage = FLOCK_USAGE,
    args_override_self = true,
    infer_long_args = true,
    max_term_width = 80
)]
pub struct FlockCli {
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args, PartialEq)]
pub struct RunArgs {
    /// Exclusive lock (the default)
    #[arg(short = 'x', long, visible_short_alias = 'e', overrides_with_all = ["shared", "unlock"],
          help_heading = "Lock")]
    exclusive: bool,

    /// Shared lock: many holders at once, no exclusive holder
    #[arg(short, long, overrides_with_all = ["exclusive", "unlock"], help_heading = "Lock")]
    shared: bool,

    /// Release the lock on FD (with a LOCKFILE and COMMAND, as flock(1): run it holding nothing)
    #[arg(short = 'u', long, overrides_with_all = ["exclusive", "shared"], help_heading = "Lock")]
    unlock: bool,

    /// Take an open-file-description lock (fcntl F_OFD_SETLK) instead of flock(2)
    #[arg(long, help_heading = "Lock")]
    fcntl: bool,

    /// Lock bytes from OFFSET on (implies --fcntl) [default: 0]
    #[arg(long, value_name = "OFFSET", value_parser = parse_size, value_hint = ValueHint::Other, allow_negative_numbers = true, help_heading = "Lock")]
    start: Option<u64>,

    /// Lock N bytes (implies --fcntl); 0 is to the end of the file [default: 0]
    #[arg(long, value_name = "N", value_parser = parse_size, value_hint = ValueHint::Other, allow_negative_numbers = true, help_heading = "Lock")]
    length: Option<u64>,

    /// Lock the inherited descriptor FD, then run COMMAND
    #[arg(long, value_name = "FD", value_parser = clap::value_parser!(i32).range(0..), allow_negative_numbers = true,
          value_hint = ValueHint::Other,
          help_heading = "Lock")]
    fd: Option<i32>,

    /// Fail at once if the lock is held
    #[arg(short = 'n', long = "nonblock", visible_aliases = ["nb", "nonblocking"], help_heading = "Waiting")]
    nonblock: bool,

    /// Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]
    #[arg(short = 'w', long = "timeout", visible_alias = "wait", value_name = "DURATION", allow_negative_numbers = true,
          value_parser = parse_duration, value_hint = ValueHint::Other, help_heading = "Waiting")]
    timeout: Option<Duration>,

    /// Retry every INTERVAL (at least 1ms) instead of a blocking kernel wait
    #[arg(long, value_name = "INTERVAL", value_parser = parse_poll, value_hint = ValueHint::Other, allow_negative_numbers = true, help_heading = "Waiting")]
    poll: Option<Duration>,

    /// Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]
    #[arg(
        short = 'E',
        long = "conflict-exit-code",
        value_name = "N",
        value_hint = ValueHint::Other,
        help_heading = "Waiting"
    )]
    conflict_exit_code: Option<u8>,

    /// Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SHELL_COMMAND",
        value_hint = ValueHint::CommandString,
        help_heading = "Command"
    )]
    shell_command: Option<OsString>,

    /// Do not let the command inherit the lock (it lives only as long as lockrun)
    #[arg(
        short = 'o',
        long = "close",
        conflicts_with = "no_fork",
        help_heading = "Command"
    )]
    close: bool,

    /// Exec the command in place of lockrun; it keeps the lock descriptor
    #[arg(short = 'F', long = "no-fork", help_heading = "Command")]
    no_fork: bool,

    /// Do not write the holder record into the lock file
    #[arg(long, help_heading = "Command")]
    no_record: bool,

    /// Pass signals sent to lockrun on to the command (auto), or not (never: for a supervisor that
    /// signals every process itself, as systemd's KillMode=control-group) [default: auto]
    #[arg(long, value_name = "WHEN", value_enum, help_heading = "Command")]
    forward: Option<Forward>,

    /// Print nothing when the lock is busy or the wait times out
    #[arg(short, long, overrides_with = "verbose", help_heading = "Output")]
    quiet: bool,

    /// Say who holds the lock while waiting, and how long acquiring took
    #[arg(short, long, overrides_with = "quiet", help_heading = "Output")]
    verbose: bool,

    /// Stop the command, and every process holding the lock through it, after DURATION (SIGTERM,
    /// then SIGKILL after --kill-grace); exit 124
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other, help_heading = "Command")]
    max_time: Option<Duration>,

    /// After --max-time (or a lost lock URL), SIGKILL this long after SIGTERM [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other, help_heading = "Command")]
    kill_grace: Option<Duration>,

    /// Let up to N commands hold the lock at once (1..1024), each in its own slot (LOCKRUN_SLOT)
    #[arg(long, value_name = "N", value_hint = ValueHint::Other, value_parser = clap::value_parser!(u16).range(1..=i64::from(crate::backend::MAX_SLOTS)), help_heading = "Lock")]
    slots: Option<u16>,

    /// Also hold LOCKFILE while the command runs (repeatable): all the locks or none, taken in one
    /// order (device, then inode) so that lockruns naming them in any order never deadlock
    #[arg(long, value_name = "LOCKFILE", action = clap::ArgAction::Append,
          value_parser = clap::value_parser!(OsString), value_hint = ValueHint::FilePath,
          help_heading = "Lock")]
    also: Vec<OsString>,

    /// Do not run the command if the last run under this lock exited 0 less than DURATION ago
    /// (decided under the lock, from its record; exit 0)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other,
          help_heading = "Command")]
    skip_if_succeeded_within: Option<Duration>,

    /// After each run, rewrite PATH (Prometheus textfile collector format) with this lock's outcome
    /// counters and last run; several locks may share one PATH
    #[arg(long, value_name = "PATH", value_parser = clap::value_parser!(OsString), value_hint = ValueHint::FilePath,
          help_heading = "Monitoring")]
    metrics_file: Option<OsString>,

    /// Log every outcome (acquired, busy, timed out, skipped, finished, stopped, lost) to syslog
    /// (/dev/log) or the systemd journal; a missing socket is skipped
    #[arg(long, value_name = "WHERE", value_enum, help_heading = "Monitoring")]
    log: Option<LogTo>,

    /// The syslog facility of --log's events [default: user]
    #[arg(long, value_name = "FACILITY", value_parser = facility_parser(), help_heading = "Monitoring")]
    log_facility: Option<u8>,

    /// Lock file (created if missing, never deleted), a directory, or an open FD number
    #[arg(value_name = "LOCKFILE", index = 1, value_hint = ValueHint::FilePath, value_parser = clap::value_parser!(OsString))]
    target: Option<OsString>,

    /// The command and its arguments; everything from here on is the command's
    #[arg(value_name = "COMMAND", index = 2, trailing_var_arg = true, allow_hyphen_values = true,
          value_hint = ValueHint::CommandWithArguments,
          value_parser = clap::value_parser!(OsString))]
    command: Vec<OsString>,
}

// `--ttl`: every lock URL backend with a lease takes it, each with its
// own meaning (its help is theirs: `command_for`), so it is defined once
// here rather than in each backend's options (a doc comment here would
// become help text).
#[derive(Debug, Args, PartialEq, Default)]
pub struct LeaseArgs {
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl, value_hint = ValueHint::Other, help_heading = "Lock URLs")]
    ttl: Option<Duration>,
}

#[derive(Debug, Subcommand)]
pub enum Inspect {
    /// Who holds each lock now, or held it last (never takes the lock)
    #[command(
        override_usage = "lockrun holder [--json] LOCKFILE...",
        after_help = "Held or free comes from the kernel's lock table; the holder record adds who \
                      and since when.\n\nExit status: 0 reported every path; 66 a path exists but \
                      cannot be read; 64 usage error.\n\nExample:\n  lockrun holder /var/lock/backup.lock"
    )]
    Holder {
        /// One JSON object per path, one per line
        #[arg(long)]
        json: bool,
        /// Lock files to report on (a missing file is reported as free)
        #[arg(value_name = "LOCKFILE", required = true, value_hint = ValueHint::FilePath)]
        paths: Vec<PathBuf>,
    },
    /// Every lock on this host, or the lock files given, one per line (never takes a lock)
    #[command(
        override_usage = "lockrun list [--json] [--all] [--color WHEN] [DIR|LOCKFILE]...",
        after_help = "Without arguments: every lock in the kernel's table (flock, POSIX, OFD), its \
                      path from the holders' descriptors ('(unknown path) MAJ:MIN:INODE' when none can \
                      be read). With arguments: those lock files, and a directory's regular files (not \
                      recursive); free ones with their last holder, a free file with no record only \
                      with --all.\n\nOn a terminal, rows are cut to its width (COLUMNS, or the \
                      terminal's); never when piped or with --json.\n\nExit status: 0 listed; 69 this \
                      system has no lock table to list; 64 usage error.\n\nExamples:\n  lockrun list\n  \
                      lockrun list --json /var/lock"
    )]
    List {
        /// One JSON object per lock, one per line (holder --json's schema, plus `waiters`)
        #[arg(long)]
        json: bool,
        /// In a directory, also the files that are free and hold no record
        #[arg(long)]
        all: bool,
        /// Colour the state: always, auto (on a terminal, unless NO_COLOR is set) or never
        #[arg(long, value_name = "WHEN", value_enum, default_value_t = ColorWhen::Never,
              num_args = 0..=1, default_missing_value = "always")]
        color: ColorWhen,
        /// Lock files, or directories whose regular files are lock files
        #[arg(value_name = "DIR|LOCKFILE")]
        paths: Vec<PathBuf>,
    },
    /// Is the lock held right now? (never takes the lock unless --probe)
    #[command(
        override_usage = "lockrun check [--json] [-q] [--probe] LOCKFILE",
        after_help = CHECK_AFTER
    )]
    Check {
        /// Print the same JSON object as `holder --json`
        #[arg(long)]
        json: bool,
        /// Print nothing; answer with the exit status only
        #[arg(short, long)]
        quiet: bool,
        /// Where the kernel cannot tell, try the lock without waiting and release it at once (this
        /// touches the lock: a concurrent `lockrun -n` may fail while it is held)
        #[arg(long)]
        probe: bool,
        // Hidden in builds without lock URLs; `command_for` shows it, with
        // its own help, in those that have them.
        /// Lock URLs only: is T the fencing token of a current holder?
        #[arg(long, value_name = "T", allow_negative_numbers = true, hide = true, value_hint = ValueHint::Other)]
        token: Option<i64>,
        /// The lock file to look at
        #[arg(value_name = "LOCKFILE", value_hint = ValueHint::FilePath)]
        path: PathBuf,
    },
}

/// `list --color`: when to colour the state column. Never by default:
/// no colour unless asked (CONTRACT §16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// Always, NO_COLOR or not: asked for by name
    Always,
    /// On a terminal, unless NO_COLOR is set
    Auto,
    /// Never
    Never,
}

/// `--forward`: which signals sent to lockrun go on to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Forward {
    /// Those the command cannot have received itself (docs/GUIDE.md, "Signals")
    Auto,
    /// None: the supervisor signals every process itself
    Never,
}

/// `--log`: where the events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogTo {
    /// RFC 5424 lines on /dev/log (tag lockrun)
    Syslog,
    /// The systemd journal's native protocol (fields LOCKRUN_EVENT, LOCKRUN_LOCK, ...)
    Journal,
}

/// `--log-facility`: syslog(3)'s names, offered by the completions.
fn facility_parser() -> impl clap::builder::TypedValueParser<Value = u8> {
    use clap::builder::TypedValueParser as _;
    let names = crate::observe::FACILITIES.map(|(name, _)| name);
    clap::builder::PossibleValuesParser::new(names).map(|name| {
        crate::observe::FACILITIES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(crate::observe::USER, |(_, number)| *number)
    })
}

/// What `--generate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GenerateKind {
    // lockrun(1), in roff.
    Man,
    // lockrun-holder(1) and lockrun-check(1): install.sh installs the
    // pages of the binary it built.
    ManHolder,
    ManCheck,
    CompleteBash,
    CompleteZsh,
    CompleteFish,
    CompleteElvish,
    CompletePowershell,
}

/// What the user asked for, without clap.
pub enum Invocation {
    Run(RunOptions),
    /// The run form on a lock URL.
    UrlRun(UrlRun),
    Fd(FdOptions),
    Holder {
        json: bool,
        targets: Vec<LockTarget>,
    },
    /// `list`: lock files only.
    List {
        json: bool,
        all: bool,
        color: ColorWhen,
        paths: Vec<PathBuf>,
    },
    Check {
        json: bool,
        quiet: bool,
        probe: bool,
        /// `--token T`: is T a current holder's fencing token?
        token: Option<i64>,
        target: LockTarget,
    },
    /// `--generate KIND`: print a man page or completion script.
    Generate(GenerateKind),
    /// --help or --version: already printed.
    Done,
}

/// The command line of this build, for help, man pages and completions.
pub fn command() -> clap::Command {
    command_for(true)
}

/// The command line with the lock URL backends this build has
/// (`with_urls`), or with none: the repository's man/ and completions/
/// describe the default build, `command_for(false)`. A backend the build
/// does not have is not advertised, and each one it has names its URL and
/// options in its own words (src/registry.rs).
pub fn command_for(with_urls: bool) -> clap::Command {
    let built: Vec<&crate::backend::Words> = if with_urls {
        registry::built().collect()
    } else {
        Vec::new()
    };
    let mut after = format!("{EXAMPLES}\n\n");
    if !built.is_empty() {
        after.push_str("Lock URLs:\n");
        for words in &built {
            after.push_str(words.help);
            after.push('\n');
        }
        after.push('\n');
    }
    after.push_str(EXIT_STATUS);
    for words in &built {
        after.push_str(";\n");
        after.push_str(words.help_exit);
    }
    after.push('.');
    let cmd = Cli::command().after_help(after);
    if built.is_empty() {
        return cmd;
    }
    let urls: Vec<&str> = built.iter().map(|w| w.url).collect();
    let mut cmd = registry::augment_run(cmd);
    if registry::has_lease() {
        let ttl: Vec<&str> = built.iter().map(|w| w.ttl).collect();
        cmd = LeaseArgs::augment_args(cmd).mut_arg("ttl", |a| {
            a.help(format!(
                "Lock URL only: the lease's TTL [default: 10s]; {}",
                ttl.join("; ")
            ))
        });
    }
    let holder_exit: Vec<&str> = built.iter().map(|w| w.help_inspect_exit).collect();
    cmd.mut_arg("target", |a| {
        a.help(format!(
            "Lock file (created if missing, never deleted), a directory, an open FD number, or {}",
            urls.join(" or ")
        ))
    })
    .mut_subcommand("holder", |c| {
        registry::augment_inspect(c)
            .after_help(format!(
                "Held or free comes from the kernel's lock table; the holder record adds who \
                 and since when.\n\nExit status: 0 reported every path; 66 a path exists but \
                 cannot be read; {}; 64 usage error.\n\nExample:\n  \
                 lockrun holder /var/lock/backup.lock",
                holder_exit.join("; ")
            ))
            .mut_arg("paths", |a| {
                a.help(format!(
                    "Lock files or lock URLs ({}) to report on (a missing file is reported as free)",
                    urls.join(", ")
                ))
            })
    })
    .mut_subcommand("check", |c| {
        registry::augment_inspect(c)
            .override_usage("lockrun check [--json] [-q] [--probe] [--token T] LOCKFILE")
            .after_help(format!(
                "{CHECK_AFTER}\n\nWith --token T on a lock URL: 0 only if T is the fencing token of \
                 a current holder; 1 if the lock is free, lost, or held with another token; 69 if \
                 the service cannot be reached. A command asks it right before an irreversible \
                 step:\n  lockrun check -q --token \"$LOCKRUN_FENCING_TOKEN\" \"$LOCKRUN_LOCK_URL\" || exit 76"
            ))
            .mut_arg("token", |a| {
                a.hide(false).help(
                    "Lock URL only: is T (the LOCKRUN_FENCING_TOKEN a command got) the token of a \
                     current holder? 1 means the lock has passed on",
                )
            })
            .mut_arg("path", |a| {
                a.help(format!("The lock file or lock URL ({}) to look at", urls.join(", ")))
            })
    })
}

/// The command line under the name `flock`: `-w` read as flock(1) reads it.
fn flock_command() -> clap::Command {
    FlockCli::command().mut_arg("timeout", |a| a.value_parser(parse_flock_timeout))
}

/// A `-w` value flock(1) parses but cannot arm its timer with (negative,
/// infinite, NaN): flock(1) then fails with EX_OSERR, "cannot set up
/// timer: Invalid argument", and so does lockrun under that name.
#[derive(Debug)]
pub struct TimerRefused;

impl std::fmt::Display for TimerRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cannot set up timer: Invalid argument")
    }
}

impl std::error::Error for TimerRefused {}

/// `-w` as util-linux flock(1) reads it: strtold (decimal or hex, `inf`,
/// `nan`, leading blanks), then whole seconds and microseconds for an
/// interval timer; a value that truncates to zero is `-n`, as there.
fn parse_flock_timeout(text: &str) -> Result<Duration, Box<dyn std::error::Error + Send + Sync>> {
    let secs = c_strtod(text).ok_or_else(|| format!("invalid timeout: '{text}'"))?;
    if !secs.is_finite() || secs.abs() >= 9.2e18 {
        return Err(Box::new(TimerRefused));
    }
    let whole = secs.trunc();
    let micros = ((secs - whole) * 1e6).trunc();
    if whole < 0.0 || micros < 0.0 {
        return Err(Box::new(TimerRefused));
    }
    // Both are whole and in range: the casts are exact.
    let wait = Duration::from_secs(whole as u64) + Duration::from_micros(micros as u64);
    Ok(wait.min(LONGEST_WAIT))
}

/// The whole of `text` as C's strtod reads a number, or None where it
/// would stop early (trailing text) or read nothing.
fn c_strtod(text: &str) -> Option<f64> {
    let text = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = match body.get(..2) {
        Some("0x" | "0X") => hex_float(&body[2..])?,
        // Rust's own grammar is C's decimal one, with inf/infinity/nan.
        _ if !body.starts_with(['+', '-']) => body.parse::<f64>().ok()?,
        _ => return None,
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// A C99 hexadecimal float's digits after `0x`: `10`, `1.8`, `.8p1`, `1p-2`.
fn hex_float(text: &str) -> Option<f64> {
    let (mantissa, exponent) = match text.find(['p', 'P']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for digit in whole.chars().chain(fraction.chars()) {
        value = value * 16.0 + f64::from(digit.to_digit(16)?);
    }
    let fraction_bits = i32::try_from(fraction.len()).ok()?.checked_mul(4)?;
    Some(value * 2f64.powi(exponent.saturating_sub(fraction_bits)))
}

/// Durations as humantime writes them (`1m30s`, `250ms`), or bare seconds
/// with an optional fraction as flock(1) takes them (`10`, `0.5`). Longer
/// than `LONGEST_WAIT` counts as `LONGEST_WAIT`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_exact_duration(text).map(|d| d.min(LONGEST_WAIT))
}

fn parse_exact_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    // A plain number is seconds, as flock(1) reads it with strtod: `10`,
    // `0.5`, `.007`, `1e-3`.
    if let Ok(secs) = text.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX));
        }
        return Err(format!(
            "'{text}' is not a number of seconds lockrun can wait (it must be finite and not negative)"
        ));
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 10, 0.5, 250ms, 1m30s)"))
}

/// `--poll`: a zero interval would retry without pause, burning a CPU.
fn parse_poll(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if interval < Duration::from_millis(1) {
        return Err(format!(
            "'{text}' would retry without pause; give an interval of at least 1ms (e.g. 100ms)"
        ));
    }
    Ok(interval)
}

/// `--ttl`: what etcd grants, or a usage error now rather than an
/// "unreachable" later.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_exact_duration(text)?;
    if ttl < Duration::from_secs(1) || ttl > LONGEST_TTL {
        return Err(format!(
            "'{text}' is not a lease TTL lockrun can ask for: give 1s to {}s",
            LONGEST_TTL.as_secs()
        ));
    }
    Ok(ttl)
}

/// Byte offsets and lengths as flock(1) reads them: a number, optionally
/// with a binary suffix (K, M, G, T, P, E, or KiB, MiB...) or a decimal
/// one (KB, MB...). Kept within off_t.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = text.split_at(digits);
    let bad = || format!("'{text}' is not a size (write e.g. 0, 4096, 4K, 1MiB)");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let suffix = suffix.to_ascii_uppercase();
    // Split after the first character, not the first byte: a suffix that
    // starts with a multi-byte character (`4é`) is an error, not a panic.
    let first = suffix.chars().next().map_or(0, char::len_utf8);
    let (letter, rest) = suffix.split_at(first);
    let power = match letter {
        "" => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        "E" => 6,
        _ => return Err(bad()),
    };
    let base: u64 = match rest {
        "" | "IB" => 1024,
        "B" => 1000,
        _ => return Err(bad()),
    };
    base.checked_pow(power)
        .and_then(|unit| number.checked_mul(unit))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| format!("'{text}' is too large for a file offset"))
}

pub fn parse<I, T>(args: I) -> Result<Invocation, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let as_flock = persona::is_flock_name(args.first().map(OsString::as_os_str));
    if let Some(plain) = parse_plain_run(&args, !as_flock) {
        return run_invocation(plain, LeaseArgs::default(), UrlArgs::default(), as_flock);
    }
    parse_with_clap(args, as_flock)
}

/// Everything but the plain run form. Never inlined into `parse`: clap's
/// matches take about 4 KiB of stack, which would otherwise be reserved
/// (and touched, a page fault) on the plain run's path too, below which the
/// whole run then happens.
#[inline(never)]
#[cold]
fn parse_with_clap(mut args: Vec<OsString>, as_flock: bool) -> Result<Invocation, Failure> {
    if as_flock {
        let cmd = flock_command();
        end_options_at_the_command(&cmd, &mut args, true);
        let matches = cmd.try_get_matches_from(args);
        return match matches.and_then(|m| FlockCli::from_arg_matches(&m)) {
            Ok(cli) => run_invocation(cli.run, LeaseArgs::default(), UrlArgs::default(), true),
            Err(e) => clap_failure(e, true),
        };
    }
    let cmd = command();
    end_options_at_the_command(&cmd, &mut args, false);
    let parsed = cmd.try_get_matches_from(args).and_then(|m| {
        let lease = if registry::has_lease() {
            LeaseArgs::from_arg_matches(&m)?
        } else {
            LeaseArgs::default()
        };
        let urls = registry::url_args(&m)?;
        // `holder` and `check` take each backend's inspection options.
        let inspect = match m.subcommand() {
            Some(("holder" | "check", sub)) => registry::inspect_args(sub)?,
            _ => registry::InspectArgs::default(),
        };
        Ok((Cli::from_arg_matches(&m)?, lease, urls, inspect))
    });
    let (cli, lease_args, url_args, inspect_args) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return clap_failure(e, false),
    };
    if let Some(kind) = cli.generate {
        return Ok(Invocation::Generate(kind));
    }
    match cli.inspect {
        Some(Inspect::List {
            json,
            all,
            color,
            paths,
        }) => Ok(Invocation::List {
            json,
            all,
            color,
            paths,
        }),
        Some(Inspect::Holder { json, paths }) => Ok(Invocation::Holder {
            json,
            targets: with_access(
                paths
                    .into_iter()
                    .map(|p| LockTarget::parse(p.into_os_string()))
                    .collect::<Result<_, _>>()?,
                &inspect_args,
            )?,
        }),
        Some(Inspect::Check {
            json,
            quiet,
            probe,
            token,
            path,
        }) => Ok(Invocation::Check {
            json,
            quiet,
            probe,
            token,
            target: with_access(
                vec![LockTarget::parse(path.into_os_string())?],
                &inspect_args,
            )?
            .pop()
            .ok_or_else(|| Failure::new(exit_codes::USAGE, "check needs a lock"))?,
        }),
        None => run_invocation(cli.run, lease_args, url_args, false),
    }
}

/// `holder`/`check` with a lock URL backend's options: they apply to
/// that backend's URLs among `targets`, and are a usage error without one.
fn with_access(
    targets: Vec<LockTarget>,
    args: &registry::InspectArgs,
) -> Result<Vec<LockTarget>, Failure> {
    registry::with_inspect_args(targets, args).map_err(|message| url_usage(&message))
}

/// Where the options end: the index of the first argument that is not an
/// option nor an option's value (or of a `--`), read as clap reads `cmd`.
/// Which options take a value comes from `cmd` itself, so this cannot drift
/// from the definition; abbreviated long options (`--time 1`) are resolved
/// as clap's `infer_long_args` resolves them. Also says whether `--fd` was
/// among the options.
fn options_end(cmd: &clap::Command, args: &[OsString]) -> (usize, bool) {
    let options: Vec<&clap::Arg> = cmd.get_arguments().filter(|a| !a.is_positional()).collect();
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    fn long_names(a: &clap::Arg) -> Vec<&str> {
        let mut names: Vec<&str> = a.get_long().into_iter().collect();
        names.extend(a.get_all_aliases().unwrap_or_default());
        names
    }
    // The option a `--name` means: an exact name, or the one option every
    // name starting with it belongs to.
    let long = |name: &str| -> Option<&clap::Arg> {
        if let Some(exact) = options.iter().find(|a| long_names(a).contains(&name)) {
            return Some(exact);
        }
        let mut matching = options
            .iter()
            .filter(|a| long_names(a).iter().any(|n| n.starts_with(name)));
        let first = matching.next()?;
        matching
            .all(|a| a.get_id() == first.get_id())
            .then_some(*first)
    };
    let short = |letter: char| {
        options.iter().find(|a| {
            a.get_short() == Some(letter)
                || a.get_all_short_aliases()
                    .unwrap_or_default()
                    .contains(&letter)
        })
    };
    let mut has_fd = false;
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let Some(text) = arg.to_str() else { break };
        if text == "--" || !text.starts_with('-') || text == "-" {
            break;
        }
        if let Some(body) = text.strip_prefix("--") {
            let (name, inline_value) = match body.split_once('=') {
                Some((name, _)) => (name, true),
                None => (body, false),
            };
            let option = long(name);
            has_fd |= option.is_some_and(|a| a.get_id() == "fd");
            if !inline_value && option.is_some_and(takes_value) {
                i += 1;
            }
        } else {
            // A cluster: a value-taking letter takes the rest, or the next
            // argument when it is last.
            let letters: Vec<char> = text[1..].chars().collect();
            if let Some(at) = letters
                .iter()
                .position(|&l| short(l).is_some_and(|a| takes_value(a)))
                && at + 1 == letters.len()
            {
                i += 1;
            }
        }
        i += 1;
    }
    (i, has_fd)
}

/// Puts a `--` where the command starts, so that clap, which would read
/// options up to the second positional, leaves the command's own arguments
/// alone:
/// - with `--fd N`, the first non-option is the command, and everything
///   from it on is the command's (`--fd 9 grep -n x`), as flock(1) reads it;
/// - as `flock`, whose getopt stops at the lock file, everything after the
///   lock file is the command's, a `-n` or a `--` included (`flock L -- cmd`
///   tries to run `--`, as util-linux's does), unless it is `-c` and its
///   shell command.
fn end_options_at_the_command(cmd: &clap::Command, args: &mut Vec<OsString>, as_flock: bool) {
    let (end, has_fd) = options_end(cmd, args);
    let Some(first) = args.get(end) else { return };
    let escaped = first == "--";
    if has_fd {
        if !escaped {
            args.insert(end, OsString::from("--"));
        }
        return;
    }
    if !as_flock {
        return;
    }
    let lock_file = if escaped { end + 1 } else { end };
    let after = lock_file + 1;
    let shell_form = args
        .get(after)
        .and_then(|a| a.to_str())
        .is_some_and(|a| a == "-c" || a == "--command" || a.starts_with("--command="));
    match (args.get(after), shell_form, escaped) {
        (None, ..) => {}
        // `flock -- L -c 'cmd'`: getopt has taken the `--`; clap would
        // take -c as the command.
        (Some(_), true, true) => {
            args.remove(end);
        }
        (Some(_), true, false) => {}
        (Some(_), false, true) => {}
        (Some(_), false, false) => args.insert(after, OsString::from("--")),
    }
}

fn clap_failure(e: clap::Error, as_flock: bool) -> Result<Invocation, Failure> {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Help nobody got is a failure: flock(1) exits 1 ("write error"),
        // lockrun 71 as for any answer it cannot write.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        return match write!(out, "{}", e.render()).and_then(|()| out.flush()) {
            Ok(()) => Ok(Invocation::Done),
            Err(error) if as_flock => Err(Failure::new(
                persona::FLOCK_WRITE_ERROR,
                format!("write error: {error}"),
            )),
            Err(error) => Err(Failure::new(
                exit_codes::OS_ERROR,
                format!("cannot write to standard output: {error}"),
            )),
        };
    }
    if e.kind() == ErrorKind::ValueValidation
        && std::error::Error::source(&e).is_some_and(|s| s.is::<TimerRefused>())
    {
        return Err(Failure::new(exit_codes::OS_ERROR, TimerRefused.to_string()));
    }
    Err(usage_failure(e))
}

/// The run form as cron entries and scripts write it, read without clap:
/// `lockrun [FLAGS] LOCKFILE [--] COMMAND...`, every option spelled out in
/// full. Building clap's parser costs about 75 us of a 1.1 ms
/// `lockrun -F L true` (hyperfine, interleaved rounds), more than anything
/// else lockrun does of its own. Anything else (help, inspection, `-c`, fd
/// mode, `-u`, `--fcntl` and its range, `--fd`, clustered or abbreviated
/// flags, `--opt=value`, an option after LOCKFILE, a bad value, a conflict)
/// returns `None` and goes to clap, which also writes every error message.
/// Repeated options follow getopt, as clap is told to: the last one wins.
/// This never decides differently from clap: the property test below
/// checks that whenever it answers, clap parses the same arguments to the
/// same `RunArgs` (`subcommands` false: as `flock`, which has none).
fn parse_plain_run(args: &[OsString], subcommands: bool) -> Option<RunArgs> {
    let mut run = RunArgs {
        exclusive: false,
        shared: false,
        unlock: false,
        fcntl: false,
        start: None,
        length: None,
        fd: None,
        nonblock: false,
        timeout: None,
        poll: None,
        conflict_exit_code: None,
        shell_command: None,
        close: false,
        no_fork: false,
        no_record: false,
        forward: None,
        quiet: false,
        verbose: false,
        max_time: None,
        kill_grace: None,
        slots: None,
        also: Vec::new(),
        skip_if_succeeded_within: None,
        metrics_file: None,
        log: None,
        log_facility: None,
        target: None,
        command: Vec::new(),
    };
    let mut rest = args.get(1..)?.iter();
    let target = loop {
        let arg = rest.next()?;
        if !is_dashed(arg) {
            break arg;
        }
        let text = arg.to_str()?;
        match text {
            "-x" | "-e" | "--exclusive" => (run.exclusive, run.shared) = (true, false),
            "-s" | "--shared" => (run.shared, run.exclusive) = (true, false),
            "-n" | "--nb" | "--nonblock" | "--nonblocking" => run.nonblock = true,
            "-o" | "--close" => run.close = true,
            "-F" | "--no-fork" => run.no_fork = true,
            "--no-record" => run.no_record = true,
            "--forward" => {
                run.forward = Some(match plain_value(rest.next()?)? {
                    "auto" => Forward::Auto,
                    "never" => Forward::Never,
                    _ => return None,
                });
            }
            "-q" | "--quiet" => (run.quiet, run.verbose) = (true, false),
            "-v" | "--verbose" => (run.verbose, run.quiet) = (true, false),
            "-w" | "--timeout" | "--wait" => {
                let value = plain_value(rest.next()?)?;
                run.timeout = Some(if subcommands {
                    parse_duration(value).ok()?
                } else {
                    parse_flock_timeout(value).ok()?
                });
            }
            "--poll" => run.poll = Some(parse_poll(plain_value(rest.next()?)?).ok()?),
            "-E" | "--conflict-exit-code" => {
                let value = plain_value(rest.next()?)?;
                if !value.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                run.conflict_exit_code = Some(value.parse::<u8>().ok()?);
            }
            _ => return None,
        }
    };
    if subcommands && (target == "holder" || target == "check" || target == "list") {
        return None;
    }
    let mut command = rest.as_slice();
    // As flock, a `--` after the lock file is the command's (clap's path
    // says so); as lockrun it ends lockrun's options.
    if command.first()? == "--" && subcommands {
        command = &command[1..];
    } else if is_dashed(&command[0]) {
        return None;
    }
    if command.is_empty() || (run.close && run.no_fork) {
        return None;
    }
    run.target = Some(target.clone());
    run.command = command.to_vec();
    Some(run)
}

/// An option's value, if clap would surely take it as one.
fn plain_value(arg: &OsString) -> Option<&str> {
    arg.to_str()
        .filter(|v| !v.is_empty() && !v.starts_with('-'))
}

fn is_dashed(arg: &OsString) -> bool {
    arg.as_encoded_bytes().starts_with(b"-")
}

fn run_invocation(
    mut args: RunArgs,
    lease_args: LeaseArgs,
    url_args: UrlArgs,
    as_flock: bool,
) -> Result<Invocation, Failure> {
    // As flock, flock's usage (no holder, no check) and flock's name.
    let usage = |message: &str| {
        let (mut cmd, name) = if as_flock {
            (flock_command(), "flock")
        } else {
            (Cli::command(), "lockrun")
        };
        let message = message.replace("lockrun LOCKFILE", &format!("{name} LOCKFILE"));
        usage_failure(cmd.error(ErrorKind::MissingRequiredArgument, message))
    };
    let mode = if args.shared {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    };
    let wait = WaitPolicy {
        nonblocking: args.nonblock,
        timeout: args.timeout,
        poll: args.poll,
    };
    let kind = match (args.fcntl, args.start, args.length) {
        (false, None, None) => LockKind::Flock,
        (_, start, len) => {
            let (start, len) = (start.unwrap_or(0), len.unwrap_or(0));
            // Both are within off_t; so must the last byte be.
            if start + len > i64::MAX as u64 {
                return Err(usage(&format!(
                    "--start {start} --length {len} ends beyond the largest file offset"
                )));
            }
            LockKind::Ofd { start, len }
        }
    };
    // flock(1)'s status for a lock not acquired, and its silence then.
    let conflict_status = args.conflict_exit_code.unwrap_or(if as_flock {
        persona::FLOCK_CONFLICT
    } else {
        exit_codes::CONFLICT
    });
    let quiet = args.quiet || as_flock;

    // A lone number is a descriptor, as in flock(1); a number followed by a
    // command is a file name.
    let lone_fd = args
        .target
        .as_ref()
        .and_then(|t| t.to_str())
        .and_then(|t| t.parse::<i32>().ok());
    if let (Some(fd), true, None, None) = (
        lone_fd,
        args.command.is_empty(),
        &args.shell_command,
        args.fd,
    ) {
        // Neither has anything to go on in fd mode, under either name.
        if !args.also.is_empty() {
            return Err(usage(
                "--also cannot be used in fd mode: lockrun takes a set of locks only from lock files it opens itself, and runs a command while it holds them; give a LOCKFILE and a COMMAND",
            ));
        }
        if args.metrics_file.is_some() || args.log.is_some() || args.log_facility.is_some() {
            return Err(usage(
                "--metrics-file, --log and --log-facility cannot be used in fd mode: lockrun takes the lock and exits, and the shell's command under it has no outcome lockrun sees; give a LOCKFILE and a COMMAND",
            ));
        }
        if args.skip_if_succeeded_within.is_some() {
            return Err(usage(
                "--skip-if-succeeded-within cannot be used in fd mode: fd mode runs no command and writes no record, so there is no last run to go by; give a LOCKFILE and a COMMAND",
            ));
        }
        // flock(1) ignores them there; lockrun says they do nothing.
        if (args.no_fork
            || args.close
            || args.no_record
            || args.slots.is_some()
            || args.forward.is_some())
            && !as_flock
        {
            return Err(usage(
                "-F, -o, --no-record, --forward and --slots need a LOCKFILE and a COMMAND",
            ));
        }
        // flock(1) has no such options; fd mode runs nothing to stop.
        if args.max_time.is_some()
            || args.kill_grace.is_some()
            || lease_args != LeaseArgs::default()
            || url_args != UrlArgs::default()
        {
            return Err(usage(
                "--max-time, --kill-grace and the lock-URL options need a LOCKFILE and a COMMAND: fd mode runs no command to stop",
            ));
        }
        // No command status to tell a conflict from: flock(1)'s 1, which
        // scripts test (`flock -n 9 || exit 1`, `[ $? -eq 1 ]`), under
        // either name (CONTRACT §4).
        let conflict_status = args.conflict_exit_code.unwrap_or(persona::FLOCK_CONFLICT);
        return Ok(Invocation::Fd(FdOptions {
            fd,
            mode,
            kind,
            wait,
            unlock: args.unlock,
            conflict_status,
            quiet,
            verbose: args.verbose,
        }));
    }
    // `--fd N COMMAND...`: every argument is the command's.
    if args.fd.is_some()
        && let Some(first) = args.target.take()
    {
        args.command.insert(0, first);
    }
    let target = match (args.fd, args.target.take()) {
        (Some(fd), _) => lock::describe_fd(fd).into_os_string(),
        (None, Some(target)) => target,
        (None, None) => {
            return Err(usage(
                "a lock file is required: lockrun LOCKFILE COMMAND...",
            ));
        }
    };
    let command = match (args.shell_command.take(), args.command.is_empty()) {
        (Some(script), true) => {
            let shell = std::env::var_os("SHELL")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| OsString::from("/bin/sh"));
            vec![shell, OsString::from("-c"), script]
        }
        (Some(_), false) => {
            return Err(usage(
                "-c takes exactly one argument, the shell command; quote it as one",
            ));
        }
        (None, false) => std::mem::take(&mut args.command),
        (None, true) => {
            return Err(usage(
                "a command to run is required: lockrun LOCKFILE COMMAND... (or -c SHELL_COMMAND)",
            ));
        }
    };
    if args.max_time == Some(Duration::ZERO) {
        return Err(usage(
            "--max-time must be more than 0: the command would be stopped before it ran",
        ));
    }
    if args.log_facility.is_some() && args.log.is_none() {
        return Err(usage(
            "--log-facility applies to --log: give --log syslog (or journal)",
        ));
    }
    if args.metrics_file.is_some() && args.no_fork {
        return Err(usage(
            "--metrics-file cannot be used with -F: nobody would be left to write how the run ended",
        ));
    }
    if args.metrics_file.as_ref().is_some_and(|p| p.is_empty()) {
        return Err(usage("--metrics-file needs a file name"));
    }
    // `-u FILE COMMAND`: flock(1) opens the file, "unlocks" its new
    // descriptor, which holds nothing, and runs the command. So does lockrun;
    // with `--fd N` that would leave N's lock alone, which is not what -u
    // asks for.
    let kind = match (args.unlock, args.fd) {
        (false, _) => kind,
        (true, None) => LockKind::Nothing,
        (true, Some(_)) => {
            return Err(usage(
                "-u with --fd and a command: unlock the descriptor first (lockrun -u FD)",
            ));
        }
    };
    if args.fd.is_some() && !args.also.is_empty() {
        return Err(usage(
            "--also cannot be used with --fd: lockrun takes the set in one order from lock files it opens itself; give the LOCKFILE instead of a descriptor",
        ));
    }
    if args.fd.is_some() && args.skip_if_succeeded_within.is_some() {
        return Err(usage(
            "--skip-if-succeeded-within cannot be used with --fd: a lent descriptor's file gets no record, so no run would ever count; give the LOCKFILE instead of a descriptor",
        ));
    }
    let path = match args.fd {
        Some(_) => PathBuf::from(target),
        None => match LockTarget::parse(target)? {
            LockTarget::File(path) => path,
            _ if !args.also.is_empty() => {
                return Err(usage(
                    "--also cannot be used with a lock URL: a lock service's lock and the kernel's cannot be taken in one order, so all-or-nothing without deadlock cannot be promised; use lock files",
                ));
            }
            url => {
                return url_run(
                    url,
                    &args,
                    lease_args,
                    url_args,
                    wait,
                    command,
                    (mode, quiet, conflict_status),
                );
            }
        },
    };
    if args.slots.is_some() && (mode == LockMode::Shared || args.no_fork) {
        return Err(usage(
            "--slots cannot be used with -s or -F: each slot is an exclusive lock that lockrun passes to the command",
        ));
    }
    if args.slots.is_some() && !args.also.is_empty() {
        return Err(usage(
            "--also cannot be used with --slots: a slot is taken from a queue of its own, which cannot be ordered with other locks; hold the set with plain locks",
        ));
    }
    if args.slots.is_some() && args.skip_if_succeeded_within.is_some() {
        return Err(usage(&format!(
            "--skip-if-succeeded-within cannot be used with --slots: {}",
            crate::backend::NO_ONE_LAST_RUN
        )));
    }
    if let Some(message) = crate::backend::skip_recent_refusal(
        args.skip_if_succeeded_within,
        mode == LockMode::Shared,
        args.no_record,
    ) {
        return Err(usage(message));
    }
    if args.no_fork && !args.also.is_empty() {
        return Err(usage(
            "--also cannot be used with -F: lockrun must stay to complete the record of every lock file in the set when the command ends",
        ));
    }
    let mut also = Vec::with_capacity(args.also.len());
    for other in std::mem::take(&mut args.also) {
        match LockTarget::parse(other)? {
            LockTarget::File(path) => also.push(path),
            _ => {
                return Err(usage(
                    "--also takes lock files, not lock URLs: a lock service's lock and the kernel's cannot be taken in one order, so all-or-nothing without deadlock cannot be promised",
                ));
            }
        }
    }
    if args.slots.is_some() && args.fd.is_some() {
        return Err(usage(
            "--slots cannot be used with --fd: each slot is a lock file lockrun opens itself; give the LOCKFILE instead of a descriptor",
        ));
    }
    // A lock file asks its backend, as a lock URL does: no lease to keep.
    use crate::backend::Backend as _;
    if lease_args.ttl.is_some() && !crate::backend::file::FileBackend::CAPS.lease {
        return Err(usage(
            "--ttl applies only to lock URLs: a lock file's lock lasts as long as its holder, with no lease to renew",
        ));
    }
    if let Some(message) = url_args.refused_for_files() {
        return Err(usage(message));
    }
    if args.kill_grace.is_some() && args.max_time.is_none() {
        return Err(usage(
            "--kill-grace applies to --max-time (and to lock URLs); nothing is stopped without it",
        ));
    }
    if args.max_time.is_some() && args.no_fork {
        return Err(usage(
            "--max-time cannot be used with -F: nobody would be left to stop the command",
        ));
    }
    // No record where there is no lock, nor in a lent descriptor's file
    // (fd mode's rule).
    let write_record = !args.no_record && kind != LockKind::Nothing && args.fd.is_none();
    Ok(Invocation::Run(RunOptions {
        path,
        mode,
        lock: LockSpec { kind, fd: args.fd },
        wait,
        close_before_exec: args.close,
        exec_in_place: args.no_fork,
        slots: args.slots,
        also,
        settings: run_settings(&args, command, (quiet, conflict_status), write_record),
    }))
}

/// What the run flow takes from the command line, for every run form.
fn run_settings(
    args: &RunArgs,
    command: Vec<OsString>,
    (quiet, conflict_status): (bool, u8),
    write_record: bool,
) -> RunSettings {
    RunSettings {
        command,
        conflict_status,
        quiet,
        verbose: args.verbose,
        write_record,
        forward_signals: args.forward != Some(Forward::Never),
        max_time: args.max_time,
        kill_grace: args.kill_grace.unwrap_or(DEFAULT_KILL_GRACE),
        skip_if_succeeded_within: args.skip_if_succeeded_within,
        observe: observers(args),
    }
}

/// `--metrics-file`, `--log`: none (and nothing to pay) without them.
fn observers(args: &RunArgs) -> Option<crate::observe::Observers> {
    use crate::observe::{Log, Observers, Sink, USER};
    if args.metrics_file.is_none() && args.log.is_none() {
        return None;
    }
    Some(Observers {
        metrics_file: args.metrics_file.as_ref().map(PathBuf::from),
        log: args.log.map(|to| Log {
            sink: match to {
                LogTo::Syslog => Sink::Syslog,
                LogTo::Journal => Sink::Journal,
            },
            facility: args.log_facility.unwrap_or(USER),
        }),
    })
}

/// SIGKILL this long after SIGTERM, after --max-time or a lost lock.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// The run form on a lock URL: what every backend takes from the command
/// line, then the registry's check against the backend's capabilities and
/// its own options.
fn url_run(
    url: LockTarget,
    args: &RunArgs,
    lease_args: LeaseArgs,
    url_args: UrlArgs,
    wait: WaitPolicy,
    command: Vec<OsString>,
    (mode, quiet, conflict_status): (LockMode, bool, u8),
) -> Result<Invocation, Failure> {
    let asked = crate::backend::Asked {
        shared: mode == LockMode::Shared,
        exec_in_place: args.no_fork,
        poll: wait.poll.is_some(),
        byte_ranges: args.unlock || args.fcntl || args.start.is_some() || args.length.is_some(),
        slots: args.slots.is_some(),
        skip_recent: args.skip_if_succeeded_within.is_some(),
    };
    let base = crate::backend::UrlBase {
        nonblocking: wait.nonblocking,
        timeout: wait.timeout,
        ttl: lease_args.ttl,
        slots: args.slots,
        settings: run_settings(args, command, (quiet, conflict_status), !args.no_record),
    };
    registry::url_run(url, &asked, url_args, base)
        .map(Invocation::UrlRun)
        .map_err(|refusal| match refusal {
            registry::Refusal::Usage(message) => url_usage(&message),
            registry::Refusal::Failure(failure) => failure,
        })
}

fn url_usage(message: &str) -> Failure {
    usage_failure(Cli::command().error(ErrorKind::ArgumentConflict, message))
}

/// clap's message with our prefix: every line lockrun prints to stderr
/// starts with `lockrun: `, so logs can be grepped for it.
fn usage_failure(error: clap::Error) -> Failure {
    let text = error.render().to_string();
    let text = text.trim_end();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    Failure::new(exit_codes::USAGE, text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::ffi::OsStringExt;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("lockrun")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn the_usual_run_forms_skip_clap() {
        for args in [
            &["L", "true"][..],
            &["/var/lock/backup.lock", "--", "backup.sh", "--full"],
            &["-F", "L", "true"],
            &["-n", "-q", "L", "sync.sh"],
            &["--timeout", "10m", "L", "--", "backup.sh", "-w", "--", "x"],
            &["-w", "0.5", "-E", "0", "--no-record", "-s", "L", "cmd"],
            &["3", "cmd"],
            &["-s", "-x", "L", "cmd"],
            &["-n", "-n", "-E", "1", "-E", "123", "L", "cmd"],
        ] {
            let plain = parse_plain_run(&argv(args), true);
            assert!(plain.is_some(), "{args:?} went to clap");
        }
        for args in [
            &["holder", "L"][..],
            &["L"],
            &["3"],
            &["-nq", "L", "cmd"],
            &["--time", "5", "L", "cmd"],
            &["-w5", "L", "cmd"],
            &["L", "-c", "echo hi"],
            &["L", "-n", "cmd"],
            &["-w", "-1", "L", "cmd"],
            &["--fcntl", "L", "cmd"],
            &["--fd", "3", "cmd"],
            &["-u", "L", "cmd"],
            &["--help"],
        ] {
            assert_eq!(parse_plain_run(&argv(args), true), None, "{args:?}");
        }
        assert!(parse_plain_run(&argv(&["holder", "L"]), false).is_some());
    }

    /// getopt: the last of repeated or opposite options wins.
    #[test]
    fn the_last_of_repeated_options_wins() {
        let run = |args: &[&str]| match parse(argv(args)) {
            Ok(Invocation::Run(opts)) => opts,
            Ok(_) => panic!("{args:?}: not the run form"),
            Err(e) => panic!("{args:?}: {e}"),
        };
        let opts = run(&["-E", "1", "--conflict-exit-code", "123", "-c", "true", "L"]);
        assert_eq!(opts.settings.conflict_status, 123);
        assert_eq!(run(&["-s", "-x", "L", "true"]).mode, LockMode::Exclusive);
        assert_eq!(run(&["-x", "-s", "L", "true"]).mode, LockMode::Shared);
        assert_eq!(run(&["-x", "--sh", "L", "true"]).mode, LockMode::Shared);
        let opts = run(&[
            "-w", "1", "-w", "2", "--poll", "1", "--poll", "3", "L", "true",
        ]);
        assert_eq!(opts.wait.timeout, Some(Duration::from_secs(2)));
        assert_eq!(opts.wait.poll, Some(Duration::from_secs(3)));
        let opts = run(&["-q", "-v", "-n", "-n", "-o", "-o", "L", "true"]);
        assert!(
            opts.settings.verbose
                && !opts.settings.quiet
                && opts.wait.nonblocking
                && opts.close_before_exec
        );
        assert!(run(&["-v", "-q", "L", "true"]).settings.quiet);
        // -u then -x: the lock is taken after all.
        assert_eq!(run(&["-u", "-x", "L", "true"]).lock.kind, LockKind::Flock);
        let opts = run(&["-x", "-u", "L", "true"]);
        assert_eq!(opts.lock.kind, LockKind::Nothing);
        assert!(!opts.settings.write_record);
    }

    #[test]
    fn fcntl_ranges_and_fd() {
        let run = |args: &[&str]| match parse(argv(args)) {
            Ok(Invocation::Run(opts)) => opts,
            Ok(_) => panic!("{args:?}: not the run form"),
            Err(e) => panic!("{args:?}: {e}"),
        };
        assert_eq!(
            run(&["--fcntl", "L", "true"]).lock.kind,
            LockKind::Ofd { start: 0, len: 0 }
        );
        assert_eq!(
            run(&["--start", "1", "--length", "4K", "L", "true"])
                .lock
                .kind,
            LockKind::Ofd {
                start: 1,
                len: 4096
            }
        );
        let opts = run(&["--fd", "0", "true", "x"]);
        assert_eq!(opts.lock.fd, Some(0));
        assert_eq!(opts.settings.command, ["true", "x"]);
        assert!(!opts.settings.write_record);
        let opts = run(&["--fd", "0", "grep", "-n", "-c", "x", "--", "y"]);
        assert_eq!(opts.settings.command, ["grep", "-n", "-c", "x", "--", "y"]);
        assert!(!opts.wait.nonblocking);
        let opts = run(&["-w1", "--fd=0", "-nE", "3", "sh", "-c", "x"]);
        assert_eq!(opts.settings.command, ["sh", "-c", "x"]);
        assert_eq!(opts.settings.conflict_status, 3);
        let opts = run(&["--fd", "0", "-c", "echo hi"]);
        assert_eq!(
            opts.settings.command.last().map(|c| c.as_os_str()),
            Some("echo hi".as_ref())
        );
        for bad in [
            &["--start", "-1", "L", "true"][..],
            &[
                "--start",
                "9223372036854775807",
                "--length",
                "2",
                "L",
                "true",
            ],
            &["--length", "1Q", "L", "true"],
            &["--length", "16E", "L", "true"],
            &["--fd", "-1", "true"],
            &["--fd", "3"],
            &["--poll", "0", "L", "true"],
        ] {
            match parse(argv(bad)) {
                Err(e) => assert_eq!(e.status, exit_codes::USAGE, "{bad:?}: {e}"),
                Ok(_) => panic!("{bad:?} was accepted"),
            }
        }
    }

    #[test]
    fn huge_durations_are_clamped_and_never_overflow() {
        for text in ["1e19", "1e300", "18446744073709551615", "1000000000y"] {
            match parse_duration(text) {
                Ok(d) => assert!(d <= LONGEST_WAIT, "{text}"),
                Err(e) => assert!(!e.is_empty(), "{text}"),
            }
        }
        assert_eq!(parse_duration("1e19"), Ok(LONGEST_WAIT));
        assert!(
            std::time::Instant::now()
                .checked_add(LONGEST_WAIT)
                .is_some()
        );
        assert!(parse_ttl("1e10").is_err());
        assert!(parse_ttl("0").is_err());
        assert_eq!(parse_ttl("10"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn under_the_name_flock_there_are_no_subcommands() {
        let args: Vec<OsString> = ["/usr/bin/flock", "holder", "true"]
            .iter()
            .map(OsString::from)
            .collect();
        match parse(args) {
            Ok(Invocation::Run(opts)) => {
                assert_eq!(opts.path, std::path::Path::new("holder"));
                assert_eq!(opts.settings.conflict_status, persona::FLOCK_CONFLICT);
                assert!(opts.settings.quiet);
            }
            _ => panic!("`flock holder true` is not the run form"),
        }
        let args: Vec<OsString> = ["flock", "-c", "true", "check"]
            .iter()
            .map(OsString::from)
            .collect();
        assert!(matches!(parse(args), Ok(Invocation::Run(_))));
    }

    /// Every spelling of every option clap's definition has (longs,
    /// aliases, shorts), so that an option added there is in the property
    /// tests' alphabet without anyone adding it here.
    fn clap_spellings() -> Vec<String> {
        let mut words = Vec::new();
        for cmd in [command_for(true), flock_command()] {
            for arg in cmd.get_arguments().filter(|a| !a.is_positional()) {
                words.extend(arg.get_long().map(|l| format!("--{l}")));
                for alias in arg.get_all_aliases().unwrap_or_default() {
                    words.push(format!("--{alias}"));
                }
                words.extend(arg.get_short().map(|c| format!("-{c}")));
                for short in arg.get_all_short_aliases().unwrap_or_default() {
                    words.push(format!("-{short}"));
                }
            }
        }
        words
    }

    #[test]
    fn the_property_alphabet_has_every_option_clap_defines() {
        let spellings = clap_spellings();
        for needed in [
            "--max-time",
            "--slots",
            "--forward",
            "--kill-grace",
            "--fd",
            "-w",
            "--nb",
        ] {
            assert!(spellings.iter().any(|s| s == needed), "{needed} missing");
        }
    }

    fn token() -> impl Strategy<Value = OsString> {
        let mut words: Vec<String> = vec![
            "-x",
            "-e",
            "--exclusive",
            "-s",
            "--shared",
            "-n",
            "--nb",
            "--nonblock",
            "--nonblocking",
            "-o",
            "--close",
            "-F",
            "--no-fork",
            "--no-record",
            "--forward",
            "auto",
            "never",
            "--forward=never",
            "--fo",
            "-q",
            "--quiet",
            "-v",
            "--verbose",
            "-w",
            "--timeout",
            "--wait",
            "--poll",
            "-E",
            "--conflict-exit-code",
            "-c",
            "-u",
            "--fcntl",
            "--start",
            "--length",
            "--fd",
            "0",
            "1e19",
            "--ttl",
            "-nq",
            "-w5",
            "--time",
            "--timeout=5",
            "--no-rec",
            "--",
            "-",
            "",
            "holder",
            "check",
            "list",
            "help",
            "5",
            "0.5",
            "-1",
            "1e-3",
            "10s",
            "1m30s",
            "bad",
            "256",
            "75",
            "007",
            "+3",
            "3",
            "L",
            "cmd",
            "echo",
            "-h",
            "--help",
            "-V",
            "etcd://h:1/x",
            "0x10",
            "inf",
            "1s",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        words.extend(clap_spellings());
        words.sort();
        words.dedup();
        let words = prop::sample::select(words);
        prop_oneof![
            8 => words.prop_map(OsString::from),
            1 => prop::sample::select(vec![&b"-\xff"[..], b"\xff", b"L\xfe"])
                .prop_map(|b| OsString::from_vec(b.to_vec())),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Whenever the plain parser answers, clap gives the same answer.
        #[test]
        fn the_plain_parser_agrees_with_clap(tokens in prop::collection::vec(token(), 0..9)) {
            let args: Vec<OsString> = std::iter::once(OsString::from("lockrun")).chain(tokens).collect();
            if let Some(plain) = parse_plain_run(&args, true) {
                let cmd = Cli::command();
                let mut marked = args.clone();
                end_options_at_the_command(&cmd, &mut marked, false);
                let cli = cmd.try_get_matches_from(&marked).and_then(|m| Cli::from_arg_matches(&m));
                prop_assert!(cli.is_ok(), "clap refused {:?}: {:?}", args, cli.err().map(|e| e.to_string()));
                let cli = cli.unwrap();
                prop_assert!(cli.inspect.is_none(), "clap saw a subcommand in {:?}", args);
                prop_assert_eq!(plain, cli.run, "for {:?}", args);
            }
        }

        /// The same under the name flock, which has no subcommands.
        #[test]
        fn the_plain_parser_agrees_with_clap_as_flock(tokens in prop::collection::vec(token(), 0..9)) {
            let args: Vec<OsString> = std::iter::once(OsString::from("flock")).chain(tokens).collect();
            if let Some(plain) = parse_plain_run(&args, false) {
                // As parse_with_clap reads it: flock's -w, the command
                // after the lock file.
                let cmd = flock_command();
                let mut marked = args.clone();
                end_options_at_the_command(&cmd, &mut marked, true);
                let cli = cmd
                    .try_get_matches_from(&marked)
                    .and_then(|m| FlockCli::from_arg_matches(&m));
                prop_assert!(cli.is_ok(), "clap refused {:?}: {:?}", args, cli.err().map(|e| e.to_string()));
                prop_assert_eq!(plain, cli.unwrap().run, "for {:?}", args);
            }
        }
    }
}
