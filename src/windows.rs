//! lockrun.exe: the run form, `holder` and `check` on Windows (CONTRACT
//! §20). Its runs, on a lock file or a lock URL, are the one run flow
//! (`crate::run`) on a backend (`backend::file_windows`, the lock URLs);
//! this is the Windows command line and inspection around them. The Unix
//! command line and inspection (`cli`, `inspect`) are not built for
//! Windows.

mod cli;
mod inspect;
mod run;
mod urls;

// The dispatch lives here, above the three: `cli` only parses, so that
// cli -> run -> cli is no cycle (tests/layering.rs).
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let result = cli::parse(args).and_then(|invocation| match invocation {
        cli::Invocation::Run(opts) => run::run(&opts),
        // The one run flow, as on Linux (src/run/, through the registry).
        cli::Invocation::UrlRun(opts) => crate::registry::run(&opts).map(run::exit_code),
        cli::Invocation::Holder { json, targets } => Ok(urls::holder(json, &targets)),
        cli::Invocation::Check {
            json,
            quiet,
            probe,
            token,
            target,
        } => urls::check(json, quiet, probe, token, &target),
        cli::Invocation::List { json, paths } => Ok(inspect::list(json, &paths)),
        cli::Invocation::Done => Ok(0),
    });
    match result {
        Ok(status) => status,
        Err(failure) => {
            // -q: an empty message, nothing printed.
            if !failure.message.is_empty() {
                crate::say!("lockrun: {failure}");
            }
            i32::from(failure.status)
        }
    }
}
