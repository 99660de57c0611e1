//! The command line, defined with clap and turned into the plain option
//! structs the rest of lockrun takes. Nothing past this module knows clap.

use crate::etcd::{self, EtcdUrl};
use crate::exit_codes::{self, Failure};
use crate::fd_mode::FdOptions;
use crate::lock::LockMode;
use crate::run::RunOptions;
use crate::wait::WaitPolicy;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

const USAGE: &str = "\
lockrun [OPTIONS] LOCKFILE [--] COMMAND [ARG]...
       lockrun [OPTIONS] LOCKFILE -c SHELL_COMMAND
       lockrun [OPTIONS] FD
       lockrun holder [--json] LOCKFILE...
       lockrun check [--json] [-q] [--probe] LOCKFILE";

const EXAMPLES: &str = "\
Examples:
  lockrun -w 10s /var/lock/backup.lock -- backup.sh --full
  */5 * * * * lockrun -n -q /var/lock/sync.lock sync.sh      (crontab)
  lockrun holder /var/lock/backup.lock

Lock URLs: etcd://HOST:PORT[,HOST:PORT...]/NAME takes the lock in etcd v3
(endpoints from LOCKRUN_ETCD_ENDPOINTS when the URL names none: etcd:///NAME).

Exit status: the command's; 75 lock busy or timed out (-E to change);
64 usage; 66 cannot open/create; 71 OS error; 77 unsafe lock file;
126/127 command not executable/not found; 128+N signal N while waiting;
69 etcd unreachable (command not run); 76 etcd lock lost (command stopped).";

#[derive(Debug, Parser)]
#[command(
    name = "lockrun",
    version,
    about = "Run a command while holding a kernel lock on a file, and tell who holds it",
    override_usage = USAGE,
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    // flock(1) (getopt_long) accepts unambiguous prefixes: --excl, --time.
    infer_long_args = true,
    disable_help_subcommand = true,
    max_term_width = 80
)]
pub struct Cli {
    #[command(subcommand)]
    pub inspect: Option<Inspect>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args, PartialEq)]
pub struct RunArgs {
    /// Exclusive lock (the default)
    #[arg(short = 'x', long, short_alias = 'e', help_heading = "Lock")]
    exclusive: bool,

    /// Shared lock: many holders at once, no exclusive holder
    #[arg(short, long, conflicts_with = "exclusive", help_heading = "Lock")]
    shared: bool,

    /// Fail at once if the lock is held
    #[arg(short = 'n', long = "nonblock", aliases = ["nb", "nonblocking"], help_heading = "Waiting")]
    nonblock: bool,

    /// Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5); 0 is -n [default: wait for ever]
    #[arg(short = 'w', long = "timeout", visible_alias = "wait", value_name = "DURATION", allow_negative_numbers = true,
          value_parser = parse_duration, help_heading = "Waiting")]
    timeout: Option<Duration>,

    /// Retry every INTERVAL instead of a blocking kernel wait
    #[arg(long, value_name = "INTERVAL", value_parser = parse_duration, allow_negative_numbers = true, help_heading = "Waiting")]
    poll: Option<Duration>,

    /// Exit status when the lock is not acquired
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "N", default_value_t = exit_codes::CONFLICT,
          help_heading = "Waiting")]
    conflict_exit_code: u8,

    /// Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SHELL_COMMAND",
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

    /// FD form only: release the lock on FD
    #[arg(short = 'u', long, help_heading = "Lock")]
    unlock: bool,

    /// Print nothing when the lock is busy or the wait times out
    #[arg(short, long, conflicts_with = "verbose", help_heading = "Output")]
    quiet: bool,

    /// Say who holds the lock while waiting, and how long acquiring took
    #[arg(short, long, help_heading = "Output")]
    verbose: bool,

    /// Stop the command, and every process holding the lock through it, after DURATION (SIGTERM,
    /// then SIGKILL after --kill-grace); exit 124
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Command")]
    max_time: Option<Duration>,

    /// etcd lock URL only: lease TTL; the lock is lost if etcd cannot be reached this long [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "etcd")]
    ttl: Option<Duration>,

    /// After --max-time (or a lost etcd lock), SIGKILL this long after SIGTERM [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Command")]
    kill_grace: Option<Duration>,

    /// Lock file (created if missing, never deleted), a directory, an open FD number, or etcd://HOST:PORT/NAME
    #[arg(value_name = "LOCKFILE", value_parser = clap::value_parser!(OsString))]
    target: Option<OsString>,

    /// The command and its arguments; everything from here on is the command's
    #[arg(value_name = "COMMAND", trailing_var_arg = true, allow_hyphen_values = true,
          value_parser = clap::value_parser!(OsString))]
    command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub enum Inspect {
    /// Who holds each lock now, or held it last (never takes the lock)
    #[command(
        override_usage = "lockrun holder [--json] LOCKFILE...",
        after_help = "Held or free comes from the kernel's lock table; the holder record adds who \
                      and since when.\n\nExit status: 0 reported every path; 66 a path exists but \
                      cannot be read; 69 etcd cannot be reached; 64 usage error.\n\nExample:\n  lockrun holder /var/lock/backup.lock"
    )]
    Holder {
        /// One JSON object per path, one per line
        #[arg(long)]
        json: bool,
        /// Lock files or etcd:// URLs to report on (a missing file is reported as free)
        #[arg(value_name = "LOCKFILE", required = true)]
        paths: Vec<PathBuf>,
    },
    /// Is the lock held right now? (never takes the lock unless --probe)
    #[command(
        override_usage = "lockrun check [--json] [-q] [--probe] LOCKFILE",
        after_help = "Exit status: 0 held; 1 not held (or no lock file); 69 cannot tell without \
                      taking the lock (network file system, holder in another PID namespace); 64 usage error.\n\n\
                      Example:\n  lockrun check -q /var/lock/backup.lock && echo \"backup running\""
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
        /// The lock file or etcd:// URL to look at
        #[arg(value_name = "LOCKFILE")]
        path: PathBuf,
    },
}

/// What the user asked for, without clap.
pub enum Invocation {
    Run(RunOptions),
    /// The run form on a lock URL.
    EtcdRun(etcd::RunOptions),
    PgRun(crate::postgres::RunOptions),
    Fd(FdOptions),
    Holder {
        json: bool,
        targets: Vec<LockTarget>,
    },
    Check {
        json: bool,
        quiet: bool,
        probe: bool,
        target: LockTarget,
    },
    /// --help or --version: already printed.
    Done,
}

/// What a LOCKFILE argument names: the one place that decides which
/// backend a lock goes to. Nothing but a leading `etcd://` makes a URL, so
/// every path a user could mean as a file stays a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockTarget {
    File(PathBuf),
    Etcd(EtcdUrl),
    Postgres(crate::postgres::PgUrl),
}

impl LockTarget {
    pub fn parse(arg: OsString) -> Result<LockTarget, Failure> {
        if crate::postgres::is_url(&arg) {
            return parse_postgres(&arg);
        }
        if !etcd::is_url(&arg) {
            return Ok(LockTarget::File(PathBuf::from(arg)));
        }
        if !etcd::ENABLED {
            return Err(etcd::not_built());
        }
        let text = arg.to_str().ok_or_else(|| {
            Failure::new(
                exit_codes::USAGE,
                format!("the lock URL {} is not valid UTF-8", arg.to_string_lossy()),
            )
        })?;
        let env = std::env::var(etcd::ENDPOINTS_ENV).ok();
        EtcdUrl::parse(text, env.as_deref())
            .map(LockTarget::Etcd)
            .map_err(|e| Failure::new(exit_codes::USAGE, e))
    }
}

/// `postgres://…#NAME` or `postgresql://…#NAME` (CONTRACT §12).
fn parse_postgres(arg: &std::ffi::OsStr) -> Result<LockTarget, Failure> {
    use crate::postgres::{self, PgUrl};
    if !postgres::ENABLED {
        return Err(postgres::not_built());
    }
    let text = arg.to_str().ok_or_else(|| {
        Failure::new(
            exit_codes::USAGE,
            "the postgres:// lock URL is not valid UTF-8",
        )
    })?;
    PgUrl::parse(text)
        .map(LockTarget::Postgres)
        .map_err(|e| Failure::new(exit_codes::USAGE, e))
}

pub fn command() -> clap::Command {
    Cli::command()
}

/// Durations as humantime writes them (`1m30s`, `250ms`), or bare seconds
/// with an optional fraction as flock(1) takes them (`10`, `0.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    // A plain number is seconds, as flock(1) reads it with strtod: `10`,
    // `0.5`, `.007`, `1e-3`.
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| {
            format!("'{text}' is not a number of seconds lockrun can wait (it must be finite and not negative)")
        });
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 10, 0.5, 250ms, 1m30s)"))
}

pub fn parse<I, T>(args: I) -> Result<Invocation, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(plain) = parse_plain_run(&args) {
        return run_invocation(plain);
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return Ok(Invocation::Done);
        }
        Err(e) => return Err(usage_failure(e)),
    };
    match cli.inspect {
        Some(Inspect::Holder { json, paths }) => Ok(Invocation::Holder {
            json,
            targets: paths
                .into_iter()
                .map(|p| LockTarget::parse(p.into_os_string()))
                .collect::<Result<_, _>>()?,
        }),
        Some(Inspect::Check {
            json,
            quiet,
            probe,
            path,
        }) => Ok(Invocation::Check {
            json,
            quiet,
            probe,
            target: LockTarget::parse(path.into_os_string())?,
        }),
        None => run_invocation(cli.run),
    }
}

/// The run form as cron entries and scripts write it, read without clap:
/// `lockrun [FLAGS] LOCKFILE [--] COMMAND...`, every option spelled out in
/// full and given once. Building clap's parser costs about 75 us of a
/// 1.1 ms `lockrun -F L true` (hyperfine, interleaved rounds), more than
/// anything else lockrun does of its own. Anything else (help, inspection,
/// `-c`, fd mode, clustered or abbreviated flags, `--opt=value`, an option
/// after LOCKFILE, a bad value, a conflict) returns `None` and goes to clap,
/// which also writes every error message. This never decides differently
/// from clap: the property test below checks that whenever it answers, clap
/// parses the same arguments to the same `RunArgs`.
fn parse_plain_run(args: &[OsString]) -> Option<RunArgs> {
    let mut run = RunArgs {
        exclusive: false,
        shared: false,
        nonblock: false,
        timeout: None,
        poll: None,
        conflict_exit_code: exit_codes::CONFLICT,
        shell_command: None,
        close: false,
        no_fork: false,
        no_record: false,
        unlock: false,
        quiet: false,
        verbose: false,
        max_time: None,
        ttl: None,
        kill_grace: None,
        target: None,
        command: Vec::new(),
    };
    let mut conflict_exit_code = None;
    let mut rest = args.get(1..)?.iter();
    let target = loop {
        let arg = rest.next()?;
        if !is_dashed(arg) {
            break arg;
        }
        let text = arg.to_str()?;
        let flag = match text {
            "-x" | "-e" | "--exclusive" => &mut run.exclusive,
            "-s" | "--shared" => &mut run.shared,
            "-n" | "--nb" | "--nonblock" | "--nonblocking" => &mut run.nonblock,
            "-o" | "--close" => &mut run.close,
            "-F" | "--no-fork" => &mut run.no_fork,
            "--no-record" => &mut run.no_record,
            "-q" | "--quiet" => &mut run.quiet,
            "-v" | "--verbose" => &mut run.verbose,
            "-w" | "--timeout" | "--wait" | "--poll" => {
                let value = plain_value(rest.next()?)?;
                let slot = if text == "--poll" {
                    &mut run.poll
                } else {
                    &mut run.timeout
                };
                if slot.replace(parse_duration(value).ok()?).is_some() {
                    return None;
                }
                continue;
            }
            "-E" | "--conflict-exit-code" => {
                let value = plain_value(rest.next()?)?;
                if !value.bytes().all(|b| b.is_ascii_digit())
                    || conflict_exit_code
                        .replace(value.parse::<u8>().ok()?)
                        .is_some()
                {
                    return None;
                }
                continue;
            }
            _ => return None,
        };
        if std::mem::replace(flag, true) {
            return None;
        }
    };
    if target == "holder" || target == "check" {
        return None;
    }
    let mut command = rest.as_slice();
    if command.first()? == "--" {
        command = &command[1..];
    } else if is_dashed(&command[0]) {
        return None;
    }
    if command.is_empty()
        || (run.exclusive && run.shared)
        || (run.quiet && run.verbose)
        || (run.close && run.no_fork)
    {
        return None;
    }
    run.conflict_exit_code = conflict_exit_code.unwrap_or(exit_codes::CONFLICT);
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
    use std::os::unix::ffi::OsStrExt;
    arg.as_bytes().starts_with(b"-")
}

fn run_invocation(mut args: RunArgs) -> Result<Invocation, Failure> {
    let usage = |message: &str| {
        usage_failure(Cli::command().error(ErrorKind::MissingRequiredArgument, message))
    };
    let Some(target) = args.target.take() else {
        return Err(usage(
            "a lock file is required: lockrun LOCKFILE COMMAND...",
        ));
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

    // A lone number is a descriptor, as in flock(1); a number followed by a
    // command is a file name.
    let fd = target.to_str().and_then(|t| t.parse::<i32>().ok());
    if let (Some(fd), true, None) = (fd, args.command.is_empty(), &args.shell_command) {
        if args.no_fork || args.close || args.no_record {
            return Err(usage(
                "-F, -o and --no-record need a LOCKFILE and a COMMAND",
            ));
        }
        return Ok(Invocation::Fd(FdOptions {
            fd,
            mode,
            wait,
            unlock: args.unlock,
            conflict_status: args.conflict_exit_code,
            quiet: args.quiet,
            verbose: args.verbose,
        }));
    }
    if args.unlock {
        return Err(usage(
            "-u/--unlock works only on a descriptor: lockrun -u FD",
        ));
    }
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
    let path = match LockTarget::parse(target)? {
        LockTarget::File(path) => path,
        LockTarget::Etcd(url) => return etcd_run(url, args, mode, wait, command),
        LockTarget::Postgres(url) => return postgres_run(url, args, mode, wait, command),
    };
    if args.ttl.is_some() {
        return Err(usage("--ttl applies only to etcd:// lock URLs"));
    }
    if args.kill_grace.is_some() && args.max_time.is_none() {
        return Err(usage(
            "--kill-grace applies to --max-time (and to etcd:// lock URLs); nothing is stopped without it",
        ));
    }
    if args.max_time.is_some() && args.no_fork {
        return Err(usage(
            "--max-time cannot be used with -F: nobody would be left to stop the command",
        ));
    }
    Ok(Invocation::Run(RunOptions {
        path,
        mode,
        wait,
        conflict_status: args.conflict_exit_code,
        close_before_exec: args.close,
        exec_in_place: args.no_fork,
        command,
        quiet: args.quiet,
        verbose: args.verbose,
        write_record: !args.no_record,
        max_time: args.max_time,
        kill_grace: args.kill_grace.unwrap_or(DEFAULT_KILL_GRACE),
    }))
}

/// SIGKILL this long after SIGTERM, after --max-time or a lost lock.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// The run form on a lock URL. What cannot work with a lease is refused
/// here rather than silently ignored.
fn etcd_run(
    url: EtcdUrl,
    args: RunArgs,
    mode: LockMode,
    wait: WaitPolicy,
    command: Vec<OsString>,
) -> Result<Invocation, Failure> {
    let usage =
        |message: &str| usage_failure(Cli::command().error(ErrorKind::ArgumentConflict, message));
    if mode == LockMode::Shared {
        return Err(usage("etcd:// locks are exclusive only; -s cannot be used"));
    }
    if args.no_fork {
        return Err(usage(
            "-F cannot be used with an etcd:// lock: lockrun must stay to keep the lease alive",
        ));
    }
    if wait.poll.is_some() {
        return Err(usage(
            "--poll does not apply to etcd:// locks: etcd itself wakes the waiter",
        ));
    }
    Ok(Invocation::EtcdRun(etcd::RunOptions {
        url,
        nonblocking: wait.nonblocking,
        timeout: wait.timeout,
        conflict_status: args.conflict_exit_code,
        command,
        quiet: args.quiet,
        verbose: args.verbose,
        write_record: !args.no_record,
        ttl: args.ttl.unwrap_or(etcd::DEFAULT_TTL),
        kill_grace: args.kill_grace.unwrap_or(etcd::DEFAULT_KILL_GRACE),
        max_time: args.max_time,
    }))
}

/// The run form on a postgres:// lock URL: refused like etcd's where a
/// connection-held lock cannot do what a file lock does.
fn postgres_run(
    url: crate::postgres::PgUrl,
    args: RunArgs,
    mode: LockMode,
    wait: WaitPolicy,
    command: Vec<OsString>,
) -> Result<Invocation, Failure> {
    use crate::postgres;
    let usage =
        |message: &str| usage_failure(Cli::command().error(ErrorKind::ArgumentConflict, message));
    if mode == LockMode::Shared {
        return Err(usage(
            "postgres:// locks are exclusive only; -s cannot be used",
        ));
    }
    if args.no_fork {
        return Err(usage(
            "-F cannot be used with a postgres:// lock: lockrun must stay to keep the connection",
        ));
    }
    if wait.poll.is_some() {
        return Err(usage(
            "--poll does not apply to postgres:// locks: the server itself wakes the waiter",
        ));
    }
    Ok(Invocation::PgRun(postgres::RunOptions {
        url,
        nonblocking: wait.nonblocking,
        timeout: wait.timeout,
        conflict_status: args.conflict_exit_code,
        command,
        quiet: args.quiet,
        verbose: args.verbose,
        write_record: !args.no_record,
        ttl: args.ttl.unwrap_or(postgres::DEFAULT_TTL),
        kill_grace: args.kill_grace.unwrap_or(postgres::DEFAULT_KILL_GRACE),
        max_time: args.max_time,
    }))
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
        ] {
            let plain = parse_plain_run(&argv(args));
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
            &["-s", "-x", "L", "cmd"],
            &["-n", "-n", "L", "cmd"],
            &["--help"],
        ] {
            assert_eq!(parse_plain_run(&argv(args)), None, "{args:?}");
        }
    }

    fn token() -> impl Strategy<Value = OsString> {
        let words = prop::sample::select(vec![
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
        ]);
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
            if let Some(plain) = parse_plain_run(&args) {
                let cli = Cli::try_parse_from(&args);
                prop_assert!(cli.is_ok(), "clap refused {:?}: {:?}", args, cli.err().map(|e| e.to_string()));
                let cli = cli.unwrap();
                prop_assert!(cli.inspect.is_none(), "clap saw a subcommand in {:?}", args);
                prop_assert_eq!(plain, cli.run, "for {:?}", args);
            }
        }
    }
}
