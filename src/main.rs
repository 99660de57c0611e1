use lockrun::cli::{self, Invocation};
use lockrun::exit_codes::{self, Failure};
use lockrun::inspect::{self, State};
use lockrun::run::{self, Ending};
use lockrun::{fd_mode, report, signals};
use std::io::Write;

fn main() {
    let status = match cli::parse(std::env::args_os()).and_then(dispatch) {
        Ok(Ending::Status(status)) => status,
        Ok(Ending::Signal(sig)) => signals::die_by(sig),
        Err(failure) => {
            eprintln!("lockrun: {failure}");
            failure.status
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(i32::from(status));
}

fn dispatch(invocation: Invocation) -> Result<Ending, Failure> {
    match invocation {
        Invocation::Run(opts) => run::run(&opts),
        Invocation::Fd(opts) => fd_mode::run(&opts).map(Ending::Status),
        Invocation::Holder { json, paths } => holder(json, &paths).map(Ending::Status),
        Invocation::Check {
            json,
            quiet,
            probe,
            path,
        } => check(json, quiet, probe, &path).map(Ending::Status),
        Invocation::Done => Ok(Ending::Status(0)),
    }
}

fn holder(json: bool, paths: &[std::path::PathBuf]) -> Result<u8, Failure> {
    let mut status = 0;
    for path in paths {
        match inspect::inspect(path, true) {
            Ok(found) => {
                if found.unreadable {
                    status = exit_codes::NO_INPUT;
                }
                print_report(&found, json);
            }
            Err(failure) => {
                eprintln!("lockrun: {failure}");
                status = failure.status;
            }
        }
    }
    Ok(status)
}

fn check(json: bool, quiet: bool, probe: bool, path: &std::path::Path) -> Result<u8, Failure> {
    let mut found = inspect::inspect(path, json || !quiet)?;
    if probe && found.state == State::Unknown {
        found.state = inspect::probe(path)
            .map_err(|e| Failure::io(exit_codes::OS_ERROR, "cannot probe", path, &e))?;
        found.reason =
            Some("probed: tried the lock without waiting and released it at once".into());
    }
    if !quiet {
        print_report(&found, json);
    }
    Ok(match found.state {
        State::Held => 0,
        State::Free => exit_codes::NOT_HELD,
        State::Unknown => exit_codes::UNAVAILABLE,
    })
}

fn print_report(found: &inspect::Report, json: bool) {
    let text = if json {
        serde_json::to_string(found).unwrap_or_default()
    } else {
        report::human(found)
    };
    println!("{text}");
}
