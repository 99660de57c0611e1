//! `holder` and `check` on a lock URL, as lockrun answers them on Linux
//! (main.rs there): the registry asks the URL's backend, `report` words
//! the answer. A lock file goes to `inspect`, Windows' own look-up.

use super::inspect;
use crate::exit_codes::{self, Failure};
use crate::inspect::State;
use crate::registry::{self, LockTarget};
use std::path::{Path, PathBuf};

/// A LOCKFILE argument's lock URL, if it is one; a URL that does not parse
/// (a bad port) is its usage error.
fn url(path: &Path) -> Result<Option<LockTarget>, Failure> {
    let target = LockTarget::parse(path.as_os_str().to_owned())?;
    Ok(target.is_url().then_some(target))
}

/// `holder`: each lock in turn; the status is the last one's that failed.
pub fn holder(json: bool, paths: &[PathBuf]) -> i32 {
    let mut status = 0;
    for path in paths {
        let answered = match url(path) {
            Ok(None) => inspect::holder(json, std::slice::from_ref(path)),
            Ok(Some(target)) => match registry::look_up(&target, true, false) {
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
            Err(failure) => said(&failure),
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

/// `check`: 0 held, 1 free, 69 unknown (the service could not be asked).
pub fn check(json: bool, quiet: bool, probe: bool, path: &Path) -> Result<i32, Failure> {
    let Some(target) = url(path)? else {
        return Ok(inspect::check(json, quiet, probe, path));
    };
    let found = registry::look_up(&target, json || !quiet, probe)?;
    if !quiet {
        crate::report::print(&found, json)?;
    }
    Ok(i32::from(match found.state {
        State::Unknown => exit_codes::UNAVAILABLE,
        State::Held => 0,
        State::Free => exit_codes::NOT_HELD,
    }))
}
