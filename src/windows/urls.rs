//! `holder` and `check` on a lock URL, as lockrun answers them on Linux
//! (main.rs there): the registry asks the URL's backend, `report` words
//! the answer. A lock file goes to `inspect`, Windows' own look-up.

use super::inspect;
use crate::exit_codes::{self, Failure};
use crate::inspect::State;
use crate::registry::{self, LockTarget};

/// `holder`: each lock in turn; the status is the last one's that failed.
pub fn holder(json: bool, targets: &[LockTarget]) -> i32 {
    let mut status = 0;
    for target in targets {
        let answered = match target {
            LockTarget::File(path) => inspect::holder(json, std::slice::from_ref(path)),
            url => match registry::look_up(url, true, false) {
                Ok(found) => {
                    let mut s = 0;
                    if found.unreadable {
                        s = i32::from(exit_codes::NO_INPUT);
                    } else if found.state == State::Unknown {
                        s = i32::from(exit_codes::UNAVAILABLE);
                    }
                    match crate::report::print(&found, json) {
                        Ok(()) => s,
                        Err(failure) => said(&failure),
                    }
                }
                Err(failure) => said(&failure),
            },
        };
        if answered != 0 {
            status = answered;
        }
    }
    status
}

fn said(failure: &Failure) -> i32 {
    crate::say!("lockrun: {failure}");
    i32::from(failure.status)
}

/// `check`: 0 held, 1 free, 69 unknown (the service could not be asked);
/// with `--token T` (a lock URL: the parser refuses it for a file), 0
/// only if T is a current holder's token (`Report::check_status`, Linux's
/// rule).
pub fn check(
    json: bool,
    quiet: bool,
    probe: bool,
    token: Option<i64>,
    target: &LockTarget,
) -> Result<i32, Failure> {
    if let LockTarget::File(path) = target {
        return Ok(inspect::check(json, quiet, probe, path));
    }
    let found = registry::look_up(target, json || !quiet, probe)?;
    if !quiet {
        crate::report::print(&found, json)?;
    }
    Ok(i32::from(found.check_status(token)))
}
