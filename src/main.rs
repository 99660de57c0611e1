//! lockrun's entry point: parse, dispatch, exit.
//!
//! `no_main`: std's own start-up (reading /proc/self/maps to find the main
//! thread's stack guard, ignoring SIGPIPE, polling fds 0-2) costs more than
//! a third of flock(1)'s whole run time, and lockrun needs none of it. The
//! arguments come straight from the C `main`.
#![cfg_attr(unix, no_main)]
// Windows: the arguments are UTF-16 and its run form, holder and check are
// in lockrun::windows; everything else in this file is Unix.
#![cfg_attr(windows, allow(unused_imports))]

#[cfg(windows)]
fn main() {
    std::process::exit(lockrun::windows::main());
}

#[cfg(unix)]
use lockrun::cli::{self, Invocation, LockTarget};
#[cfg(unix)]
use lockrun::exit_codes::{self, Failure};
#[cfg(unix)]
use lockrun::inspect::{self, State};
#[cfg(unix)]
use lockrun::platform;
#[cfg(unix)]
use lockrun::registry;
#[cfg(unix)]
use lockrun::run::fd_mode;
#[cfg(unix)]
use lockrun::run::signals;
#[cfg(unix)]
use lockrun::run::{self, Ending};
#[cfg(unix)]
use lockrun::{persona, report};
use std::ffi::{CStr, OsString, c_char, c_int};
use std::io::Write;

#[cfg(unix)]
#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    platform::open_standard_streams();
    // SAFETY: the C runtime passes argc valid, NUL-terminated strings.
    let args: Vec<OsString> = unsafe { platform::args_from_c(argc, argv) };
    if registry::HIDES_PASSWORDS {
        hide_passwords(argc, argv);
    }
    persona::set_from_argv0(args.first().map(OsString::as_os_str));
    let status = match cli::parse(args).and_then(dispatch) {
        Ok(Ending::Status(status)) => status,
        // flock(1) reports a command's death by signal N as status 128+N.
        Ok(Ending::Signal(sig)) if persona::is_flock() => exit_codes::for_signal(sig),
        Ok(Ending::Signal(sig)) => signals::die_by(sig),
        Err(failure) => {
            lockrun::say!("{}: {failure}", persona::name());
            failure.status
        }
    };
    let status = match persona::flush_stdout() {
        Ok(()) => status,
        Err(e) => {
            lockrun::say!("{}: write error: {e}", persona::name());
            persona::FLOCK_WRITE_ERROR
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(i32::from(status));
}

/// What `ps` shows for a password: always three `*`, as messages do
/// (`postgres://u:***@db/ops#job`), so that its length is not shown either.
#[cfg(unix)]
const PASSWORD_MASK: &[u8] = b"***";

/// Overwrites the passwords of lock URLs (postgres://) in our own argv, which is
/// what `ps` shows (/proc/PID/cmdline), with [`PASSWORD_MASK`]. The
/// password is still in our copy (`args`, taken before).
///
/// The kernel fixed the argument area's size at exec, and growing or
/// shrinking it needs CAP_SYS_RESOURCE (prctl PR_SET_MM_ARG_END), so a
/// string can only be rewritten within its bytes. One `*` per byte showed
/// the password's length. Three `*` and NUL padding right after them would
/// show it too: `ps` prints each NUL between arguments as a space, so the
/// gap before the next argument would count the missing bytes. Instead the
/// rest of the area (the rest of this argument and every argument after
/// it) moves left over the password's remaining bytes, the argv pointers
/// after it move with it, and the bytes freed at the very end of the area
/// become NULs, which `ps` drops. What is left is the area's total size,
/// which /proc/PID/cmdline still has (as trailing NULs) and which only
/// tells the sum of all the arguments' lengths. A password shorter than
/// the mask is masked with as many `*` as it has bytes: the string
/// cannot grow.
#[cfg(unix)]
fn hide_passwords(argc: c_int, argv: *const *const c_char) {
    let argc = usize::try_from(argc).unwrap_or(0);
    // SAFETY: the argv array is the writable array the kernel put on our
    // stack (C11 5.1.2.2.1: argv and its strings are modifiable); its argc
    // entries point at valid NUL-terminated strings.
    let argv = argv.cast_mut().cast::<*mut u8>();
    for i in 1..argc {
        // SAFETY: as above; the string is copied before it is changed.
        let arg = unsafe { *argv.add(i) };
        let bytes = unsafe { CStr::from_ptr(arg.cast::<c_char>()) }
            .to_bytes()
            .to_vec();
        // The last span first: moving bytes left leaves earlier offsets as
        // they were.
        for span in registry::password_spans(&bytes).into_iter().rev() {
            let width = PASSWORD_MASK.len().min(span.len());
            let removed = span.len() - width;
            // SAFETY: every write and move stays inside the strings from
            // argv[i] to the end of the last argument laid out right after
            // it (`area_end`, checked pointer by pointer), which the kernel
            // gave us as one writable block.
            unsafe {
                std::ptr::copy_nonoverlapping(PASSWORD_MASK.as_ptr(), arg.add(span.start), width);
                if removed == 0 {
                    continue;
                }
                // The arguments stored contiguously after this one (they
                // always are, as execve lays them out; checked anyway, so
                // that a string elsewhere is never moved into).
                let mut last = i;
                let mut area_end = arg.add(CStr::from_ptr(arg.cast()).to_bytes().len() + 1);
                while last + 1 < argc && *argv.add(last + 1) == area_end {
                    last += 1;
                    let next = *argv.add(last);
                    area_end = next.add(CStr::from_ptr(next.cast()).to_bytes().len() + 1);
                }
                let from = arg.add(span.end);
                let count = usize::try_from(area_end.offset_from(from)).unwrap_or(0);
                std::ptr::copy(from, from.sub(removed), count);
                std::ptr::write_bytes(area_end.sub(removed), 0, removed);
                for j in i + 1..=last {
                    *argv.add(j) = (*argv.add(j)).sub(removed);
                }
            }
        }
    }
}

#[cfg(unix)]
fn dispatch(invocation: Invocation) -> Result<Ending, Failure> {
    match invocation {
        Invocation::Run(opts) => run::run(&opts),
        Invocation::UrlRun(opts) => registry::run(&opts),
        Invocation::Fd(opts) => fd_mode::run(&opts).map(Ending::Status),
        Invocation::Holder { json, targets } => holder(json, &targets).map(Ending::Status),
        Invocation::List {
            json,
            all,
            color,
            paths,
        } => list(json, all, color, &paths).map(Ending::Status),
        Invocation::Check {
            json,
            quiet,
            probe,
            token,
            target,
        } => check(json, quiet, probe, token, &target).map(Ending::Status),
        Invocation::Generate(kind) => {
            let text = lockrun::generate::render(kind);
            let mut out = std::io::stdout().lock();
            out.write_all(&text)
                .and_then(|()| out.flush())
                .map_err(|e| Failure::new(exit_codes::OS_ERROR, format!("cannot write: {e}")))?;
            Ok(Ending::Status(0))
        }
        Invocation::Done => Ok(Ending::Status(0)),
    }
}

/// `lockrun list`: one line per lock (`--json`: one object per line).
#[cfg(unix)]
fn list(
    json: bool,
    all: bool,
    color: cli::ColorWhen,
    paths: &[std::path::PathBuf],
) -> Result<u8, Failure> {
    let reports = lockrun::backend::file::inspect::list::list(paths, all)?;
    let lines = if json {
        reports
            .iter()
            .map(|found| lockrun::sanitize::json(&inspect::Listed::from(found)).unwrap_or_default())
            .collect()
    } else {
        let color = match color {
            cli::ColorWhen::Always => Some(true),
            cli::ColorWhen::Never => Some(false),
            cli::ColorWhen::Auto => None,
        };
        report::table(&reports, report::Layout::for_stdout(color))
    };
    let mut out = std::io::stdout().lock();
    for line in &lines {
        writeln!(out, "{line}").map_err(|e| {
            Failure::new(
                exit_codes::OS_ERROR,
                format!("cannot write to standard output: {e}"),
            )
        })?;
    }
    out.flush().map_err(|e| {
        Failure::new(
            exit_codes::OS_ERROR,
            format!("cannot write to standard output: {e}"),
        )
    })?;
    Ok(0)
}

#[cfg(unix)]
fn holder(json: bool, targets: &[LockTarget]) -> Result<u8, Failure> {
    let mut status = 0;
    // One reading of the host's lock table for every file asked about.
    let mut looks = registry::Looks::default();
    for target in targets {
        match registry::look_up_with(target, true, false, &mut looks) {
            Ok(found) => {
                if found.unreadable {
                    status = exit_codes::NO_INPUT;
                } else if found.state == State::Unknown && target.is_url() {
                    status = exit_codes::UNAVAILABLE;
                }
                report::print(&found, json)?;
            }
            Err(failure) => {
                lockrun::say!("lockrun: {failure}");
                status = failure.status;
            }
        }
    }
    Ok(status)
}

#[cfg(unix)]
fn check(
    json: bool,
    quiet: bool,
    probe: bool,
    token: Option<i64>,
    target: &LockTarget,
) -> Result<u8, Failure> {
    if token.is_some() && !target.is_url() {
        return Err(Failure::new(exit_codes::USAGE, inspect::TOKEN_FOR_FILES));
    }
    let found = registry::look_up(target, json || !quiet, probe)?;
    if !quiet {
        report::print(&found, json)?;
    }
    Ok(found.check_status(token))
}
