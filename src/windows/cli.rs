//! lockrun.exe's command line: the run form with the options Windows
//! keeps (CONTRACT §20), `holder` and `check`. The Unix-only forms are a
//! usage error (64) that says they are Unix-only.

use crate::exit_codes::{self, Failure};
use crate::mode::LockMode;
use crate::registry::LockTarget;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// What the run form was asked for.
#[derive(Debug)]
pub struct RunOptions {
    pub lockfile: PathBuf,
    pub mode: LockMode,
    /// `None`: wait for ever; `Some(ZERO)`: `-n`.
    pub timeout: Option<Duration>,
    pub conflict_exit_code: u8,
    pub quiet: bool,
    pub verbose: bool,
    pub no_record: bool,
    pub slots: Option<u16>,
    pub max_time: Option<(Duration, String)>,
    /// `--metrics-file PATH` (CONTRACT §17): the outcome counted there.
    pub observe: Option<crate::observe::Observers>,
    /// `--skip-if-succeeded-within`: decided by the one run flow from the
    /// lock file's last record, as on Linux.
    pub skip_if_succeeded_within: Option<Duration>,
    /// `--also LOCKFILE`: more lock files held with `lockfile`, all or
    /// none.
    pub also: Vec<PathBuf>,
    /// The command: a program and its arguments, or `-c STRING`.
    pub command: Command,
}

#[derive(Debug)]
pub enum Command {
    Argv(Vec<OsString>),
    Shell(OsString),
}

pub enum Invocation {
    Run(RunOptions),
    /// The run form on a lock URL: the one run flow's (`registry::run`).
    UrlRun(Box<crate::registry::UrlRun>),
    Holder {
        json: bool,
        targets: Vec<LockTarget>,
    },
    Check {
        json: bool,
        quiet: bool,
        probe: bool,
        /// `--token T` (lock URLs only): is T a current holder's token?
        token: Option<i64>,
        target: LockTarget,
    },
    List {
        json: bool,
        paths: Vec<PathBuf>,
    },
    Done,
}

const USAGE: &str = "\
Usage: lockrun [OPTIONS] LOCKFILE [--] COMMAND [ARG]...
       lockrun [OPTIONS] LOCKFILE -c COMMAND_STRING
       lockrun holder [--json] [URL OPTIONS] LOCKFILE...
       lockrun check [--json] [-q] [--probe] [--token T] [URL OPTIONS] LOCKFILE
       lockrun list [--json] DIR|LOCKFILE...

Runs COMMAND while holding a lock on LOCKFILE (LockFileEx on one byte past
the holder record), and tells who holds it. LOCKFILE may be a lock URL in a
build with them: etcd://HOST:PORT/NAME, postgres://...#NAME,
redis://HOST:PORT#NAME (exclusive; --ttl, --kill-grace and each backend's
options, such as --cacert, --cert, --key and --user, as on Linux).

Options:
  -x, -e, --exclusive        exclusive lock (default)
  -s, --shared               shared lock
  -n, --nb, --nonblock       fail at once if the lock is held
  -w, --wait, --timeout DUR  wait at most DUR (10s, 1m30s, 250ms, 0.5)
  -E, --conflict-exit-code N exit status when the lock was not acquired (75)
  -c, --command STRING       run STRING with %COMSPEC% /c
  -q, --quiet                print nothing on conflict or timeout
  -v, --verbose              say how long acquiring took
      --no-record            do not write the holder record
      --slots N              run when fewer than N commands hold the lock
      --max-time DUR         end the command and all it started after DUR (exit 124)
      --ttl DUR              a lock URL's lease (default 10s)
      --also LOCKFILE        hold this lock file too, all or none (repeatable)
      --metrics-file PATH    count each run's outcome in PATH (Prometheus textfile format)
      --skip-if-succeeded-within DUR
                             do not run if the last run exited 0 less than DUR ago
  -h, --help                 print this help
  -V, --version              print the version

check --probe takes the lock for an instant to be sure; nothing else in
holder, check or list ever touches the lock. On a lock URL, holder and
check take its backend's options (--cacert, --cert, --key, --user, ...)
as the run form does, and check --token T answers 0 only if T is the
fencing token of a current holder. list names the lock files
(a directory: its files): Windows has no lock table to list them from.
Unix only (a usage error here): fd mode, -F/--no-fork, -u, --fd, --fcntl,
--start/--length, --poll, --log/--log-facility, the flock persona.
";

/// Help and version on stdout; a failed write is dropped, never a panic.
fn say_out(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::new(
        exit_codes::USAGE,
        format!("{}\nTry 'lockrun --help'.", message.into()),
    )
}

/// clap's refusal of a URL option, as a usage error in lockrun's words
/// (its message without clap's "error: " and trailing newline).
fn clap_usage(e: clap::Error) -> Failure {
    usage(
        e.render()
            .to_string()
            .trim_end()
            .trim_start_matches("error: "),
    )
}

fn unix_only(what: &str) -> Failure {
    usage(format!(
        "{what} is Unix-only: lockrun on Windows has the run form, holder, check and list"
    ))
}

/// `10s`, `1m30s`, `250ms`, or a bare number of seconds (`10`, `0.5`).
pub fn duration(option: &str, text: &str) -> Result<Duration, Failure> {
    let bad = || usage(format!("invalid duration for {option}: '{text}'"));
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| bad());
    }
    humantime::parse_duration(text).map_err(|_| bad())
}

pub fn parse(args: Vec<OsString>) -> Result<Invocation, Failure> {
    let argv0 = args.first().cloned().unwrap_or_default();
    if crate::persona::is_flock_name(Some(&argv0)) {
        return Err(unix_only("the flock persona (lockrun run as 'flock')"));
    }
    let mut rest: Vec<OsString> = args.into_iter().skip(1).collect();
    match rest.first().and_then(|a| a.to_str()) {
        Some("holder") => return parse_holder(rest.split_off(1)),
        Some("check") => return parse_check(rest.split_off(1)),
        Some("list") => return parse_list(rest.split_off(1)),
        _ => {}
    }
    parse_run(rest)
}

fn text(arg: &OsString) -> Result<&str, Failure> {
    arg.to_str().ok_or_else(|| {
        usage(format!(
            "option {} is not valid Unicode",
            arg.to_string_lossy()
        ))
    })
}

/// What a subcommand was given: which of its flags, its `--token`, its
/// paths, and the lock URL backends' options with their values (for clap,
/// which defines them: `registry::augment_inspect`).
struct SubcommandArgs<const N: usize> {
    flags: [bool; N],
    token: Option<i64>,
    paths: Vec<PathBuf>,
    url_options: Vec<OsString>,
}

/// Whether `long` (`--cacert`) is one of `url_command`'s options, and if
/// so whether it takes a value: the lock URL backends' options are defined
/// once, in clap, for Linux and Windows alike.
fn url_option(url_command: &clap::Command, long: &str) -> Option<bool> {
    let name = long.strip_prefix("--")?;
    url_command
        .get_arguments()
        .find(|a| a.get_long() == Some(name))
        .map(|a| a.get_action().takes_values())
}

/// A subcommand's flags and paths: each of `flags` (long, and short where
/// it has one) sets its place in the returned array; `--token T` when
/// `token` is allowed (check); a lock URL backend's option goes to
/// `url_options`; `--` ends the options.
/// `None`: `--help` was asked and answered with `usage`.
fn subcommand_args<const N: usize>(
    name: &str,
    usage_line: &str,
    flags: [(&str, Option<&str>); N],
    token: bool,
    args: Vec<OsString>,
) -> Result<Option<SubcommandArgs<N>>, Failure> {
    let url_command = crate::registry::augment_inspect(clap::Command::new("lockrun"));
    let mut out = SubcommandArgs {
        flags: [false; N],
        token: None,
        paths: Vec::new(),
        url_options: Vec::new(),
    };
    let mut options_done = false;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let flag = arg.to_str().filter(|_| !options_done);
        match flag {
            Some("--") => options_done = true,
            Some("-h" | "--help") => {
                say_out(usage_line);
                return Ok(None);
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                // --name=value, or --name value.
                let (long, inline) = match s.split_once('=') {
                    Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
                    _ => (s, None),
                };
                let mut value = || -> Result<String, Failure> {
                    match inline.clone() {
                        Some(v) => Ok(v),
                        None => {
                            let v = it
                                .next()
                                .ok_or_else(|| usage(format!("{name}: {long} needs a value")))?;
                            Ok(text(&v)?.to_owned())
                        }
                    }
                };
                if token && long == "--token" {
                    let v = value()?;
                    out.token = Some(v.parse().map_err(|_| {
                        usage(format!(
                            "{name}: --token takes a fencing token (an integer), not '{v}'"
                        ))
                    })?);
                } else if let Some(takes_value) = url_option(&url_command, long) {
                    out.url_options.push(OsString::from(long));
                    if takes_value {
                        out.url_options.push(OsString::from(value()?));
                    }
                } else if let Some(k) = flags
                    .iter()
                    .position(|(l, short)| s == *l || Some(s) == *short)
                {
                    out.flags[k] = true;
                } else {
                    return Err(usage(format!("{name}: unknown option '{s}'")));
                }
            }
            _ => out.paths.push(PathBuf::from(arg)),
        }
    }
    Ok(Some(out))
}

/// The LOCKFILE arguments as lock targets, each lock URL with its
/// backend's options (the registry's rule, as on Linux: an option no
/// target can take is a usage error).
fn targets(paths: Vec<PathBuf>, url_options: Vec<OsString>) -> Result<Vec<LockTarget>, Failure> {
    let targets: Vec<LockTarget> = paths
        .into_iter()
        .map(|p| LockTarget::parse(p.into_os_string()))
        .collect::<Result<_, _>>()?;
    let matches = crate::registry::augment_inspect(clap::Command::new("lockrun"))
        .no_binary_name(true)
        .try_get_matches_from(url_options)
        .map_err(clap_usage)?;
    let args = crate::registry::inspect_args(&matches).map_err(clap_usage)?;
    crate::registry::with_inspect_args(targets, &args).map_err(usage)
}

fn parse_holder(args: Vec<OsString>) -> Result<Invocation, Failure> {
    let usage_line = "Usage: lockrun holder [--json] [URL OPTIONS] LOCKFILE...\n";
    let Some(given) = subcommand_args("holder", usage_line, [("--json", None)], false, args)?
    else {
        return Ok(Invocation::Done);
    };
    if given.paths.is_empty() {
        return Err(usage("holder: which LOCKFILE?"));
    }
    let [json] = given.flags;
    Ok(Invocation::Holder {
        json,
        targets: targets(given.paths, given.url_options)?,
    })
}

fn parse_check(args: Vec<OsString>) -> Result<Invocation, Failure> {
    let usage_line =
        "Usage: lockrun check [--json] [-q] [--probe] [--token T] [URL OPTIONS] LOCKFILE\n";
    let flags = [("--json", None), ("--quiet", Some("-q")), ("--probe", None)];
    let Some(given) = subcommand_args("check", usage_line, flags, true, args)? else {
        return Ok(Invocation::Done);
    };
    let [json, quiet, probe] = given.flags;
    if given.paths.len() != 1 {
        return Err(usage("check takes one LOCKFILE"));
    }
    let target = targets(given.paths, given.url_options)?
        .pop()
        .ok_or_else(|| usage("check takes one LOCKFILE"))?;
    if given.token.is_some() && !target.is_url() {
        return Err(usage(crate::inspect::TOKEN_FOR_FILES));
    }
    Ok(Invocation::Check {
        json,
        quiet,
        probe,
        token: given.token,
        target,
    })
}

fn parse_list(args: Vec<OsString>) -> Result<Invocation, Failure> {
    let usage_line = "Usage: lockrun list [--json] DIR|LOCKFILE...\n";
    let Some(given) = subcommand_args("list", usage_line, [("--json", None)], false, args)? else {
        return Ok(Invocation::Done);
    };
    if let Some(option) = given.url_options.first() {
        return Err(usage(format!(
            "list: unknown option '{}' (list looks at lock files only)",
            option.to_string_lossy()
        )));
    }
    let ([json], paths) = (given.flags, given.paths);
    if paths.is_empty() {
        // On Linux, list without arguments reads the kernel's lock table;
        // Windows keeps none that a program may read.
        return Err(usage(
            "list: which lock files or directories? Windows has no lock table to list every lock from",
        ));
    }
    Ok(Invocation::List { json, paths })
}

fn parse_run(args: Vec<OsString>) -> Result<Invocation, Failure> {
    let mut mode = LockMode::Exclusive;
    let mut shared_given = false;
    let mut timeout = None;
    let mut conflict_exit_code = exit_codes::CONFLICT;
    let (mut quiet, mut verbose, mut no_record) = (false, false, false);
    let mut slots = None;
    let mut max_time = None;
    let mut shell: Option<OsString> = None;
    let mut ttl: Option<Duration> = None;
    let mut kill_grace: Option<Duration> = None;
    let mut metrics_file: Option<PathBuf> = None;
    let mut skip_within: Option<Duration> = None;
    // The lock URL backends' own options (`--cacert`, `--user`, ...), with
    // their values, for the registry's parser once LOCKFILE is known.
    let mut url_options: Vec<OsString> = Vec::new();
    let url_command = crate::registry::augment_run(clap::Command::new("lockrun"));
    let mut lockfile: Option<PathBuf> = None;
    let mut also: Vec<PathBuf> = Vec::new();
    let mut command: Vec<OsString> = Vec::new();
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.next() {
        let Some(s) = arg.to_str().map(str::to_owned) else {
            // Not Unicode: a path or the command.
            if lockfile.is_none() {
                lockfile = Some(PathBuf::from(arg));
                continue;
            }
            command.push(arg);
            command.extend(it);
            break;
        };
        if s == "--" {
            if lockfile.is_none() {
                match it.next() {
                    Some(path) => lockfile = Some(PathBuf::from(path)),
                    None => return Err(usage("which LOCKFILE?")),
                }
            }
            command.extend(it);
            break;
        }
        if !s.starts_with('-') || s == "-" {
            if lockfile.is_none() {
                if s.bytes().all(|b| b.is_ascii_digit()) && it.peek().is_none() {
                    return Err(unix_only(
                        "fd mode (lockrun FD: locking an inherited descriptor)",
                    ));
                }
                lockfile = Some(PathBuf::from(arg));
                continue;
            }
            command.push(arg);
            command.extend(it);
            break;
        }
        // --name=value
        let (name, inline) = match s.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (s.clone(), None),
        };
        let value = |it: &mut std::iter::Peekable<std::vec::IntoIter<OsString>>,
                     name: &str|
         -> Result<String, Failure> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = it
                .next()
                .ok_or_else(|| usage(format!("{name} needs a value")))?;
            Ok(text(&v)?.to_owned())
        };
        if !name.starts_with("--") && name.len() > 2 {
            // A cluster of short flags (-nq), or a short option with its
            // value attached (-w10, -E1).
            let mut chars = name[1..].chars();
            while let Some(c) = chars.next() {
                let tail: String = chars.clone().collect();
                match c {
                    'w' | 'E' | 'c' => {
                        let v = if tail.is_empty() {
                            value(&mut it, &format!("-{c}"))?
                        } else {
                            tail
                        };
                        short_with_value(c, &v, &mut timeout, &mut conflict_exit_code, &mut shell)?;
                        break;
                    }
                    _ => short_flag(
                        c,
                        &mut mode,
                        &mut shared_given,
                        &mut timeout,
                        &mut quiet,
                        &mut verbose,
                    )?,
                }
            }
            continue;
        }
        match name.as_str() {
            "-h" | "--help" => {
                say_out(USAGE);
                return Ok(Invocation::Done);
            }
            "-V" | "--version" => {
                say_out(&format!("lockrun {}\n", env!("CARGO_PKG_VERSION")));
                return Ok(Invocation::Done);
            }
            "--exclusive" => mode = LockMode::Exclusive,
            "--shared" => {
                mode = LockMode::Shared;
                shared_given = true;
            }
            "--nb" | "--nonblock" | "--nonblocking" => timeout = Some(Duration::ZERO),
            "--wait" | "--timeout" => {
                let v = value(&mut it, &name)?;
                timeout = Some(duration(&name, &v)?);
            }
            "--conflict-exit-code" => {
                let v = value(&mut it, &name)?;
                conflict_exit_code = exit_code(&v)?;
            }
            "--command" => shell = Some(OsString::from(value(&mut it, &name)?)),
            "--quiet" => quiet = true,
            "--verbose" => verbose = true,
            "--no-record" => no_record = true,
            "--close" => {} // the command never inherits the lock handle here
            "--slots" => {
                let v = value(&mut it, &name)?;
                let n: u16 = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| usage(format!("--slots takes 1 to 1024, not '{v}'")))?;
                slots = Some(n);
            }
            "--max-time" => {
                let v = value(&mut it, &name)?;
                max_time = Some((duration(&name, &v)?, v));
            }
            "--kill-grace" => {
                // Accepted for scripts shared with Unix: a job is ended at
                // once (TerminateJobObject), there is no SIGTERM to wait on.
                let v = value(&mut it, &name)?;
                kill_grace = Some(duration(&name, &v)?);
            }
            "--ttl" => {
                let v = value(&mut it, &name)?;
                let t = duration(&name, &v)?;
                if t < Duration::from_secs(1) {
                    return Err(usage(format!(
                        "--ttl must be at least 1s (a lease is granted in whole seconds), not '{v}'"
                    )));
                }
                ttl = Some(t);
            }
            long if url_option(&url_command, long).is_some() => {
                let takes_value = url_option(&url_command, long).unwrap_or(false);
                url_options.push(OsString::from(long));
                if takes_value {
                    url_options.push(OsString::from(value(&mut it, long)?));
                }
            }
            "--no-fork" => return Err(unix_only("-F/--no-fork")),
            "--unlock" => return Err(unix_only("-u/--unlock (fd mode)")),
            "--fd" => return Err(unix_only("--fd")),
            "--fcntl" => return Err(unix_only("--fcntl")),
            "--start" | "--length" => return Err(unix_only("--start/--length")),
            "--poll" => return Err(unix_only("--poll")),
            "--also" => also.push(PathBuf::from(value_os(&mut it, inline.as_deref(), &name)?)),
            "--skip-if-succeeded-within" => {
                let v = value(&mut it, &name)?;
                skip_within = Some(duration(&name, &v)?);
            }
            "--metrics-file" => metrics_file = Some(PathBuf::from(value(&mut it, &name)?)),
            // syslog's /dev/log and the journal's socket are Unix sockets
            // of a Unix host: refused rather than silently not logging.
            "--log" | "--log-facility" => {
                return Err(unix_only(
                    "--log and --log-facility (syslog's /dev/log, the systemd journal)",
                ));
            }
            n if n.len() == 2 => {
                let c = n.chars().nth(1).unwrap_or('?');
                match c {
                    'w' | 'E' | 'c' => {
                        let v = value(&mut it, n)?;
                        short_with_value(c, &v, &mut timeout, &mut conflict_exit_code, &mut shell)?;
                    }
                    _ => short_flag(
                        c,
                        &mut mode,
                        &mut shared_given,
                        &mut timeout,
                        &mut quiet,
                        &mut verbose,
                    )?,
                }
            }
            other => return Err(usage(format!("unknown option '{other}'"))),
        }
    }
    let Some(lockfile) = lockfile else {
        return Err(usage("which LOCKFILE, and which COMMAND?"));
    };
    let command = match shell {
        Some(_) if !command.is_empty() => {
            return Err(usage(
                "-c takes one COMMAND_STRING, and no COMMAND after it",
            ));
        }
        Some(string) => Command::Shell(string),
        None if command.is_empty() => {
            return Err(usage(format!(
                "no COMMAND to run while holding {}",
                lockfile.display()
            )));
        }
        None => Command::Argv(command),
    };
    if slots.is_some() && shared_given {
        return Err(usage("-s/--shared and --slots cannot be used together"));
    }
    if let Some(message) = crate::backend::skip_recent_refusal(skip_within, shared_given, no_record)
    {
        return Err(usage(message));
    }
    // Only with --metrics-file: otherwise `None`, and the run flow does
    // nothing for monitoring (as on Linux).
    let observe = metrics_file.map(|path| crate::observe::Observers {
        metrics_file: Some(path),
        log: None,
    });
    let target = LockTarget::parse(lockfile.clone().into_os_string())?;
    if let Some(message) = also_refusal(&also, target.is_url(), slots.is_some())? {
        return Err(usage(message));
    }
    if target.is_url() {
        let command = match command {
            Command::Argv(argv) => argv,
            // cmd.exe parses the string itself: the platform's
            // `command_for` passes it unquoted, as the file run does.
            Command::Shell(string) => {
                let comspec = std::env::var_os("COMSPEC").unwrap_or_else(|| "cmd.exe".into());
                vec![comspec, "/c".into(), string]
            }
        };
        let settings = crate::backend::RunSettings {
            command,
            conflict_status: conflict_exit_code,
            quiet,
            verbose,
            write_record: !no_record,
            forward_signals: false,
            max_time: max_time.map(|(limit, _)| limit),
            kill_grace: kill_grace.unwrap_or(DEFAULT_KILL_GRACE),
            // Decided in the one run flow (`run::run_with`), from the
            // record the service keeps; the backend's capabilities
            // (`asked.skip_recent`) refuse it where there is none.
            skip_if_succeeded_within: skip_within,
            observe,
        };
        let asked = crate::backend::Asked {
            shared: shared_given,
            exec_in_place: false,
            poll: false,
            byte_ranges: false,
            slots: slots.is_some(),
            skip_recent: skip_within.is_some(),
        };
        let base = crate::backend::UrlBase {
            nonblocking: timeout == Some(Duration::ZERO),
            timeout,
            ttl,
            slots,
            settings,
        };
        let matches = url_command
            .no_binary_name(true)
            .try_get_matches_from(url_options)
            .map_err(clap_usage)?;
        let url_args = crate::registry::url_args(&matches).map_err(clap_usage)?;
        return match crate::registry::url_run(target, &asked, url_args, base) {
            Ok(run) => Ok(Invocation::UrlRun(Box::new(run))),
            Err(crate::registry::Refusal::Usage(message)) => Err(usage(message)),
            Err(crate::registry::Refusal::Failure(failure)) => Err(failure),
        };
    }
    if ttl.is_some() {
        return Err(usage(
            "--ttl applies only to lock URLs: a lock file's lock lasts as long as its holder, with no lease to renew",
        ));
    }
    if let Some(option) = url_options.first() {
        return Err(usage(format!(
            "{} applies only to lock URLs, not to a lock file",
            option.to_string_lossy()
        )));
    }
    // Each slot's file keeps its own record (as on Linux, where the
    // command line refuses the pair for lock files too).
    if skip_within.is_some() && slots.is_some_and(|n| n > 1) {
        return Err(usage(format!(
            "--skip-if-succeeded-within cannot be used with --slots: {}",
            crate::backend::NO_ONE_LAST_RUN
        )));
    }
    Ok(Invocation::Run(RunOptions {
        lockfile,
        mode,
        timeout,
        conflict_exit_code,
        quiet,
        verbose,
        no_record,
        slots: slots.filter(|&n| n > 1),
        max_time,
        observe,
        skip_if_succeeded_within: skip_within,
        also,
        command,
    }))
}

/// `--also`'s refusals, in Linux's words: the set is of lock files, taken
/// in one order, which a lock URL or a slot's queue cannot join.
fn also_refusal(also: &[PathBuf], url: bool, slots: bool) -> Result<Option<&'static str>, Failure> {
    if also.is_empty() {
        return Ok(None);
    }
    if url {
        return Ok(Some(
            "--also cannot be used with a lock URL: a lock service's lock and the kernel's cannot be taken in one order, so all-or-nothing without deadlock cannot be promised; use lock files",
        ));
    }
    if slots {
        return Ok(Some(
            "--also cannot be used with --slots: a slot is taken from a queue of its own, which cannot be ordered with other locks; hold the set with plain locks",
        ));
    }
    for other in also {
        if LockTarget::parse(other.clone().into_os_string())?.is_url() {
            return Ok(Some(
                "--also takes lock files, not lock URLs: a lock service's lock and the kernel's cannot be taken in one order, so all-or-nothing without deadlock cannot be promised",
            ));
        }
    }
    Ok(None)
}

/// An option's value as given, not necessarily Unicode (a path).
fn value_os(
    it: &mut std::iter::Peekable<std::vec::IntoIter<OsString>>,
    inline: Option<&str>,
    name: &str,
) -> Result<OsString, Failure> {
    if let Some(v) = inline {
        return Ok(OsString::from(v));
    }
    it.next()
        .ok_or_else(|| usage(format!("{name} needs a value")))
}

/// After `--max-time` or a lost lock: Linux's grace before SIGKILL. A job
/// is ended at once on Windows; the value is kept for the record's words.
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

fn exit_code(v: &str) -> Result<u8, Failure> {
    v.parse::<u8>()
        .map_err(|_| usage(format!("-E/--conflict-exit-code takes 0 to 255, not '{v}'")))
}

fn short_with_value(
    c: char,
    v: &str,
    timeout: &mut Option<Duration>,
    conflict_exit_code: &mut u8,
    shell: &mut Option<OsString>,
) -> Result<(), Failure> {
    match c {
        'w' => *timeout = Some(duration("-w", v)?),
        'E' => *conflict_exit_code = exit_code(v)?,
        _ => *shell = Some(OsString::from(v)),
    }
    Ok(())
}

fn short_flag(
    c: char,
    mode: &mut LockMode,
    shared_given: &mut bool,
    timeout: &mut Option<Duration>,
    quiet: &mut bool,
    verbose: &mut bool,
) -> Result<(), Failure> {
    match c {
        'x' | 'e' => *mode = LockMode::Exclusive,
        's' => {
            *mode = LockMode::Shared;
            *shared_given = true;
        }
        'n' => *timeout = Some(Duration::ZERO),
        'q' => *quiet = true,
        'v' => *verbose = true,
        'o' => {}
        'F' => return Err(unix_only("-F/--no-fork")),
        'u' => return Err(unix_only("-u/--unlock (fd mode)")),
        other => return Err(usage(format!("unknown option '-{other}'"))),
    }
    Ok(())
}
