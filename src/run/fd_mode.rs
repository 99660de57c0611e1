//! flock(1)'s descriptor form: lock (or unlock) a descriptor the shell
//! opened, then exit, for the idiom
//! `( lockrun -n 9 || exit 1; ... ) 9>/var/lock/x`.
//!
//! The lock belongs to the open file description, which the shell's fd 9
//! shares with ours, so it outlives lockrun until the subshell closes fd 9.

use crate::backend::file::FileBackend;
use crate::backend::file::lock::{self, LockFile, LockKind};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::mode::LockMode;
use crate::persona;
use crate::run::wait::{self, NotAcquired, Silent, WaitPolicy};
use std::path::Path;

#[derive(Debug, Clone)]
pub struct FdOptions {
    pub fd: i32,
    pub mode: LockMode,
    /// flock(2), or an OFD lock (`--fcntl`, `--start`, `--length`).
    pub kind: LockKind,
    pub wait: WaitPolicy,
    pub unlock: bool,
    pub conflict_status: u8,
    pub quiet: bool,
    pub verbose: bool,
}

pub fn run(opts: &FdOptions) -> Result<u8, Failure> {
    let label = format!("descriptor {}", opts.fd);
    // The caller lent us the descriptor: lockrun works on a duplicate and
    // never closes (or changes) the caller's, be it 9 or stdout.
    let lock = LockFile::lend(opts.fd, Path::new(&label), opts.kind, true)
        .map_err(|e| lock::lend_failure(opts.fd, &e))?;
    if opts.unlock {
        lock.unlock().map_err(|e| {
            Failure::new(
                persona::lock_failed(exit_codes::OS_ERROR),
                format!("cannot unlock {label}: {e}"),
            )
        })?;
        return Ok(0);
    }
    let mut backend = FileBackend::lent(lock, opts.mode, label.clone(), opts.fd.to_string());
    match wait::acquire(&mut backend, opts.wait, &mut Silent) {
        Ok(waited) => {
            if opts.verbose {
                persona::say_acquired(opts.mode, &label, waited);
            }
            Ok(0)
        }
        Err(NotAcquired::Busy { waited }) => {
            persona::say_not_acquired(opts.verbose, waited);
            if !opts.quiet {
                // Named by the file behind the descriptor, so that the
                // `lockrun holder FILE` hint works.
                let file = lock::describe_fd(opts.fd);
                let file = display::escape(&file.to_string_lossy());
                let held =
                    crate::backend::file::holder::conflict_held(backend.lock(), opts.mode, &file);
                crate::say!("lockrun: {}", display::busy(&file, &held, waited));
            }
            Ok(opts.conflict_status)
        }
        Err(NotAcquired::Interrupted(sig)) => Ok(exit_codes::for_signal(sig)),
        Err(NotAcquired::Failed(failure)) => Err(failure),
    }
}
