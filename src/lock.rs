//! The lock itself: a flock(2) lock on an open file.
//!
//! Why flock and not fcntl (POSIX) locks: a POSIX lock belongs to a
//! *process* and is dropped when that process closes *any* descriptor on the
//! file, and it is not inherited across fork. A flock lock belongs to the
//! open file description, so the command we start inherits it, and the
//! kernel releases it when the last descriptor closes, which is when the
//! last holder dies, for whatever reason. That is the whole point of lockrun:
//! no stale lock after a crash, no "is that pid still alive?" race.
//!
//! Why the file is never deleted: the lock lives on the inode. If a releasing
//! process unlinked the file, a waiter still blocked on the old inode would
//! get the lock while a newcomer creates and locks a new file at the same
//! path: two holders at once. An empty file left in /var/lock costs nothing.

use crate::exit_codes::{self, Failure};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Exclusive,
    Shared,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }
}

/// An open lock file (or directory), not yet locked.
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
    pub is_dir: bool,
    pub hard_links: u64,
    dev: u64,
    ino: u64,
}

impl LockFile {
    /// Opens or creates the lock file without ever following a symbolic
    /// link in the final component, blocking on a FIFO, or becoming a
    /// device's user. A link in /tmp pointing at /etc/passwd must not get
    /// root's cron job to create, truncate or write the target.
    ///
    /// The lock descriptor is read-only, as flock(1)'s: flock works on any
    /// descriptor, a read-only file or file system still locks, and the
    /// command that inherits it cannot write through it. Above all, a
    /// script that locks itself can still be executed: the kernel refuses
    /// to exec a file that is open for writing (ETXTBSY).
    ///
    /// `inherit` leaves the descriptor open across exec, so that the command
    /// holds the lock too (and keeps it if lockrun is killed).
    pub fn open(path: &Path, inherit: bool) -> Result<LockFile, Failure> {
        let cloexec = if inherit {
            OFlags::empty()
        } else {
            OFlags::CLOEXEC
        };
        // NONBLOCK: opening a FIFO or a device must not hang; NOCTTY: a tty
        // named as lock file must not become our controlling terminal.
        let safe = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | cloexec;
        let mode = Mode::from_raw_mode(0o644);
        let fd = match rustix::fs::open(path, safe | OFlags::CREATE, mode) {
            Ok(fd) => fd,
            // O_CREAT on an existing directory is EISDIR on Linux.
            Err(Errno::ISDIR) => rustix::fs::open(path, safe | OFlags::DIRECTORY, mode)
                .map_err(|e| open_failure(path, e))?,
            Err(e) => return Err(open_failure(path, e)),
        };
        let file = File::from(fd);
        // Check what we opened through the descriptor, never through the
        // path: the path can be swapped between a stat and an open.
        let meta = file
            .metadata()
            .map_err(|e| Failure::io(exit_codes::OS_ERROR, "cannot examine lock file", path, &e))?;
        let is_dir = match FileType::from_raw_mode(meta.mode()) {
            FileType::RegularFile => false,
            FileType::Directory => true,
            other => return Err(refuse_special(path, other)),
        };
        Ok(LockFile {
            file,
            path: path.to_owned(),
            is_dir,
            hard_links: meta.nlink(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// A second, writable descriptor on the same file, for the record only.
    /// It is close-on-exec, so the command never inherits it. Opened by path
    /// again, so it is checked to be the very inode we locked. Readable too:
    /// the release checks the record is still there before replacing it.
    pub fn open_for_writing(&self) -> io::Result<File> {
        let flags =
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = File::from(rustix::fs::open(&self.path, flags, Mode::empty())?);
        let meta = file.metadata()?;
        if meta.dev() != self.dev || meta.ino() != self.ino || !meta.is_file() {
            return Err(io::Error::other("the lock file was replaced"));
        }
        Ok(file)
    }

    /// Wraps a descriptor inherited from the caller (flock(1)'s fd form).
    pub fn from_inherited(file: File, label: PathBuf) -> LockFile {
        LockFile {
            file,
            path: label,
            is_dir: false,
            hard_links: 1,
            dev: 0,
            ino: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// One non-blocking attempt. `Ok(false)`: someone else holds it.
    pub fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
        let attempt = match mode {
            LockMode::Exclusive => self.file.try_lock(),
            LockMode::Shared => self.file.try_lock_shared(),
        };
        match attempt {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    /// Waits in the kernel until the lock is ours.
    pub fn lock(&self, mode: LockMode) -> io::Result<()> {
        lock_blocking(&self.file, mode)
    }

    /// Starts a blocking kernel wait on a helper thread, which calls `done`
    /// with the result. The kernel hands the lock over the moment it is
    /// released, so a waiter never sleeps past a release as a polling loop
    /// would; the caller keeps its own thread free to enforce a deadline and
    /// react to signals. The helper locks a duplicate descriptor: flock
    /// locks belong to the open file description, which the duplicate shares.
    pub fn lock_in_background(
        &self,
        mode: LockMode,
        done: impl FnOnce(io::Result<()>) + Send + 'static,
    ) -> io::Result<()> {
        let dup = self.file.try_clone()?;
        std::thread::Builder::new()
            .name("lock-wait".into())
            .stack_size(64 * 1024)
            .spawn(move || done(lock_blocking(&dup, mode)))?;
        Ok(())
    }

    /// Lets go of the lock now rather than at exit (fd mode's `-u`).
    pub fn unlock(&self) -> io::Result<()> {
        self.file.unlock()
    }
}

fn lock_blocking(file: &File, mode: LockMode) -> io::Result<()> {
    match mode {
        LockMode::Exclusive => file.lock(),
        LockMode::Shared => file.lock_shared(),
    }
}

fn open_failure(path: &Path, errno: Errno) -> Failure {
    let err = io::Error::from(errno);
    match errno {
        Errno::LOOP => {
            // O_NOFOLLOW reports a link in the final component as ELOOP.
            if let Ok(target) = std::fs::read_link(path) {
                return Failure::new(
                    exit_codes::NO_PERMISSION,
                    format!(
                        "refusing to use {} as lock file: it is a symbolic link to {} \
                         (lockrun never follows a link in the last component; name the target itself)",
                        path.display(),
                        target.display()
                    ),
                );
            }
            Failure::io(exit_codes::NO_INPUT, "cannot open lock file", path, &err)
        }
        Errno::NXIO => {
            // A socket (or a FIFO/device nobody serves) cannot be opened.
            match std::fs::symlink_metadata(path) {
                Ok(meta) => refuse_special(path, FileType::from_raw_mode(meta.mode())),
                Err(_) => Failure::io(exit_codes::NO_INPUT, "cannot open lock file", path, &err),
            }
        }
        Errno::NOENT => {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            Failure::new(
                exit_codes::NO_INPUT,
                format!(
                    "cannot create lock file {}: {err} (the directory {} must exist)",
                    path.display(),
                    parent.display()
                ),
            )
        }
        _ => Failure::io(
            exit_codes::NO_INPUT,
            "cannot open or create lock file",
            path,
            &err,
        ),
    }
}

fn refuse_special(path: &Path, file_type: FileType) -> Failure {
    let what = match file_type {
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    };
    Failure::new(
        exit_codes::NO_PERMISSION,
        format!(
            "refusing to use {} as lock file: it is {what}; lockrun locks only regular files and directories",
            path.display()
        ),
    )
}
