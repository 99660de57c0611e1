//! Locks on files: flock(2) on an open file, released by the kernel when
//! the last descriptor closes. The record lives in the lock file itself.

pub mod fd_mode;
pub mod lock;
pub mod slots;

use super::{Backend, Capabilities, Held};
use crate::exit_codes::{self, Failure};
use crate::progress;
use crate::record::{self, Record};
use crate::run::RunOptions;
use crate::run::wait::{Blocking, Contender};
use lock::{LockFile, LockMode};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};

pub struct FileBackend {
    lock: LockFile,
    mode: LockMode,
    label: String,
    /// `-o`: whether the command inherits the descriptor.
    inherit: bool,
}

impl FileBackend {
    pub fn open(opts: &RunOptions) -> Result<FileBackend, Failure> {
        Ok(FileBackend {
            lock: LockFile::open(&opts.path, !opts.close_before_exec)?,
            mode: opts.mode,
            label: crate::display::escape(&opts.path.to_string_lossy()),
            inherit: !opts.close_before_exec,
        })
    }

    /// A lock on a descriptor lockrun was lent (fd mode).
    pub fn lent(lock: LockFile, mode: LockMode, label: String) -> FileBackend {
        FileBackend {
            lock,
            mode,
            label,
            inherit: true,
        }
    }

    pub fn lock(&self) -> &LockFile {
        &self.lock
    }
}

fn os_error(lock: &LockFile, e: &std::io::Error) -> Failure {
    Failure::io(exit_codes::OS_ERROR, "cannot lock", lock.path(), e)
}

impl Contender for FileBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        self.lock
            .try_lock(self.mode)
            .map_err(|e| os_error(&self.lock, &e))
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        // The helper locks a duplicate descriptor: flock locks belong to
        // the open file description, which the duplicate shares.
        let dup = self
            .lock
            .duplicate()
            .map_err(|e| os_error(&self.lock, &e))?;
        let mode = self.mode;
        Ok(Box::new(move || {
            dup.lock(mode).map_err(|e| os_error(&dup, &e))
        }))
    }

    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        Some(
            self.lock
                .lock(self.mode)
                .map_err(|e| os_error(&self.lock, &e)),
        )
    }

    fn undo(&mut self) {
        let _ = self.lock.unlock();
    }

    fn holder(&mut self) -> Option<String> {
        progress::held_by(&self.lock)
    }
}

impl Backend for FileBackend {
    type Held = FileHeld;
    const CAPS: Capabilities = Capabilities {
        kind: "lock files",
        shared: true,
        exec_in_place: true,
        poll: true,
        lease: false,
    };

    fn conflict_holder(&mut self) -> String {
        progress::conflict_holder(&self.lock, &self.label)
    }

    fn failure_status(&self) -> u8 {
        exit_codes::OS_ERROR
    }

    fn give_up(self) {}

    fn acquired(self, record: Option<&Record>, verbose: bool) -> Result<FileHeld, Failure> {
        let record_file = match record {
            None => None,
            Some(_) => match record::may_write(&self.lock) {
                Ok(file) => Some(file),
                Err(reason) => {
                    if verbose {
                        eprintln!(
                            "lockrun: no holder record for {}: {}",
                            self.label,
                            reason.explain()
                        );
                    }
                    None
                }
            },
        };
        Ok(FileHeld {
            lock: self.lock,
            record_file,
            inherit: self.inherit,
        })
    }
}

pub struct FileHeld {
    lock: LockFile,
    /// The writable descriptor for the record, when one may be written.
    record_file: Option<File>,
    inherit: bool,
}

impl Held for FileHeld {
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.record_file.as_ref().map(|f| f.as_fd())
    }

    fn store_record(&mut self, record: &Record, _released: bool) -> Result<(), String> {
        let Some(file) = &self.record_file else {
            return Ok(());
        };
        // An empty file here means the command's process could not write
        // the record and has already said so: one warning is enough.
        let len_now = file.metadata().map(|m| m.len()).ok();
        if len_now == Some(0) && record.released_at.is_some() {
            return Err(String::new());
        }
        crate::run::signals::tolerating_file_size_limit(|| {
            record::write(file, &record.to_line(), len_now)
        })
        .map_err(|e| e.to_string())
    }

    fn inheritors(&self) -> Option<crate::run::supervise::Inheritors> {
        if !self.inherit {
            return None;
        }
        let (dev, ino) = self.lock.identity();
        let me = std::process::id() as i32;
        Some(Box::new(move || {
            crate::platform::fd_holders(dev, ino)
                .0
                .into_iter()
                .filter(|h| h.caller == me && h.pid != me)
                .map(|h| h.pid)
                .collect()
        }))
    }

    fn release(self) -> Result<(), String> {
        drop(self.lock);
        Ok(())
    }
}
