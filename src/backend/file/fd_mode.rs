//! flock(1)'s descriptor form: lock (or unlock) a descriptor the shell
//! opened, then exit, for the idiom
//! `( lockrun -n 9 || exit 1; ... ) 9>/var/lock/x`.
//!
//! The lock belongs to the open file description, which the shell's fd 9
//! shares with ours, so it outlives lockrun until the subshell closes fd 9.

use super::FileBackend;
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::lock::{LockFile, LockMode};
use crate::run::wait::{self, NotAcquired, Silent, WaitPolicy};
use std::fs::File;
use std::os::fd::{BorrowedFd, FromRawFd};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct FdOptions {
    pub fd: i32,
    pub mode: LockMode,
    pub wait: WaitPolicy,
    pub unlock: bool,
    pub conflict_status: u8,
    pub quiet: bool,
    pub verbose: bool,
}

pub fn run(opts: &FdOptions) -> Result<u8, Failure> {
    let label = format!("descriptor {}", opts.fd);
    // SAFETY: only borrowed to check that it is open.
    let open =
        opts.fd >= 0 && rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(opts.fd) }).is_ok();
    if !open {
        return Err(Failure::new(
            exit_codes::NO_INPUT,
            format!("{label} is not open (open it in the shell first, e.g. `9>/var/lock/x`)"),
        ));
    }
    // SAFETY: the descriptor is open and we are its only user in this
    // process; closing our copy at exit leaves the caller's copy (and the
    // lock on the shared open file description) alone.
    let file = unsafe { File::from_raw_fd(opts.fd) };
    let lock = LockFile::from_inherited(file, PathBuf::from(&label));
    if opts.unlock {
        lock.unlock().map_err(|e| {
            Failure::new(exit_codes::OS_ERROR, format!("cannot unlock {label}: {e}"))
        })?;
        return Ok(0);
    }
    let mut backend = FileBackend::lent(lock, opts.mode, label.clone());
    match wait::acquire(&mut backend, opts.wait, &mut Silent) {
        Ok(waited) => {
            if opts.verbose {
                eprintln!(
                    "lockrun: took the {} lock on {label} after {}",
                    opts.mode.as_str(),
                    display::span(waited)
                );
            }
            Ok(0)
        }
        Err(NotAcquired::Busy { waited }) => {
            if !opts.quiet {
                let holder = crate::progress::conflict_holder(backend.lock(), &label);
                eprintln!("lockrun: {}", display::busy(&label, &holder, waited));
            }
            Ok(opts.conflict_status)
        }
        Err(NotAcquired::Interrupted(sig)) => Ok(exit_codes::for_signal(sig)),
        Err(NotAcquired::Failed(failure)) => Err(failure),
    }
}
