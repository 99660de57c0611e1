//! The lock itself: a kernel lock on an open file, flock(2) by default.
//!
//! Why flock and not classic fcntl (POSIX) locks: a POSIX lock belongs to a
//! *process* and is dropped when that process closes *any* descriptor on the
//! file, and it is not inherited across fork. A flock lock belongs to the
//! open file description, so the command we start inherits it, and the
//! kernel releases it when the last descriptor closes, which is when the
//! last holder dies, for whatever reason. That is the whole point of lockrun:
//! no stale lock after a crash, no "is that pid still alive?" race.
//! `--fcntl` takes the fcntl lock that behaves the same way, an *open file
//! description* (OFD) lock, for files that fcntl/lockf users share.
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
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use crate::mode::LockMode;

/// Which kernel lock to take: the one place that knows the lock calls.
/// Everything else passes a `LockKind` through and calls `try_lock`,
/// `lock` (on a helper thread, through `duplicate`), whichever it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockKind {
    /// flock(2) on the whole file (the default, and flock(1)'s).
    #[default]
    Flock,
    /// An open-file-description lock (`fcntl(F_OFD_SETLK)`, flock(1)'s
    /// `--fcntl`) on bytes `start..start+len`; `len` 0 runs to the end of
    /// the file, however long it grows. Like a flock lock it belongs to the
    /// open file description, so the command inherits it and a crash
    /// releases it; unlike flock it excludes (and is excluded by) fcntl and
    /// lockf(3) users of the same bytes, and an exclusive one needs a
    /// descriptor open for writing.
    Ofd { start: u64, len: u64 },
    /// `-u FILE COMMAND`, as flock(1) takes it: open (create) the file and
    /// run the command holding nothing. flock(1) "unlocks" a descriptor it
    /// has just opened, which never holds a lock.
    Nothing,
}

impl LockKind {
    /// Whether a lock of this kind in `mode` needs a writable descriptor.
    fn needs_write(self, mode: LockMode) -> bool {
        matches!(self, LockKind::Ofd { .. }) && mode == LockMode::Exclusive
    }
}

/// What to lock: a path lockrun opens, or a descriptor the caller lent
/// (`--fd N`), and with which kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockSpec {
    pub kind: LockKind,
    /// `--fd N COMMAND`: lock the inherited descriptor N instead of opening
    /// the path (which then only names the file in messages).
    pub fd: Option<i32>,
}

/// An open lock file (or directory), not yet locked.
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
    pub is_dir: bool,
    pub hard_links: u64,
    /// This open created the file (it did not exist before): as `flock`,
    /// the only empty file lockrun may write a record into.
    pub created: bool,
    dev: u64,
    ino: u64,
    kind: LockKind,
}

impl LockFile {
    /// Opens or creates the lock file for a flock(2) lock; see `open_for`.
    pub fn open(path: &Path, inherit: bool) -> Result<LockFile, Failure> {
        LockFile::open_for(path, LockSpec::default(), LockMode::Shared, inherit)
    }

    /// Opens (or creates) what `spec` names, ready for a `mode` lock of its
    /// kind.
    ///
    /// A path is opened without ever following a symbolic link in the final
    /// component and without ever opening anything but a regular file or a
    /// directory: a link in /tmp pointing at /etc/passwd must not get root's
    /// cron job to create, truncate or write the target, and a FIFO or a
    /// device must not even be opened (opening a FIFO wakes its writer,
    /// which then dies by SIGPIPE; opening a watchdog arms it). So the type
    /// is decided first, on an `O_PATH` descriptor that opens nothing, and
    /// only a regular file or directory is then opened for real, through
    /// that very descriptor (/proc/self/fd), so the path cannot be swapped
    /// in between.
    ///
    /// The lock descriptor is read-only, as flock(1)'s: flock works on any
    /// descriptor, a read-only file or file system still locks, and the
    /// command that inherits it cannot write through it. Above all, a
    /// script that locks itself can still be executed: the kernel refuses
    /// to exec a file that is open for writing (ETXTBSY). The exception is
    /// an exclusive `--fcntl` lock, which the kernel grants only on a
    /// descriptor open for writing.
    ///
    /// `inherit` leaves the descriptor open across exec, so that the command
    /// holds the lock too (and keeps it if lockrun is killed).
    pub fn open_for(
        path: &Path,
        spec: LockSpec,
        mode: LockMode,
        inherit: bool,
    ) -> Result<LockFile, Failure> {
        if let Some(fd) = spec.fd {
            return LockFile::lend(fd, path, spec.kind, inherit).map_err(|e| lend_failure(fd, &e));
        }
        let write = spec.kind.needs_write(mode);
        let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
        let cloexec = if inherit {
            OFlags::empty()
        } else {
            OFlags::CLOEXEC
        };
        let flock_exclusive = spec.kind == LockKind::Flock && mode == LockMode::Exclusive;
        let (fd, created) = open_safely(path, access, cloexec, write, flock_exclusive)?;
        let file = File::from(fd);
        // Check what we opened through the descriptor, never through the
        // path: the path can be swapped between a stat and an open.
        let meta = file
            .metadata()
            .map_err(|e| Failure::io(exit_codes::OS_ERROR, "cannot examine lock file", path, &e))?;
        let is_dir = match crate::platform::file_type(&meta) {
            FileType::RegularFile => false,
            FileType::Directory => true,
            other => return Err(refuse_special(path, other)),
        };
        Ok(LockFile {
            file,
            path: path.to_owned(),
            is_dir,
            hard_links: meta.nlink(),
            created,
            dev: meta.dev(),
            ino: meta.ino(),
            kind: spec.kind,
        })
    }

    /// A descriptor lent by the caller (`--fd N`, or fd mode's lone N).
    /// lockrun works on its own duplicate and never closes or changes the
    /// caller's N: a lock belongs to the open file description, which the
    /// duplicate shares, so locking it locks N. `inherit` false (`-o`)
    /// keeps N itself from the command.
    pub fn lend(fd: i32, label: &Path, kind: LockKind, inherit: bool) -> io::Result<LockFile> {
        if fd < 0 {
            return Err(io::Error::from(Errno::BADF));
        }
        // SAFETY: only borrowed, to duplicate it; EBADF if it is not open.
        let lent = unsafe { BorrowedFd::borrow_raw(fd) };
        let own = rustix::io::fcntl_dupfd_cloexec(lent, 3)?;
        if !inherit {
            // Only this process's table entry: the caller's N stays as it was.
            rustix::io::fcntl_setfd(lent, rustix::io::FdFlags::CLOEXEC)?;
        }
        let file = File::from(own);
        let meta = file.metadata()?;
        Ok(LockFile {
            file,
            path: label.to_owned(),
            is_dir: meta.is_dir(),
            hard_links: meta.nlink(),
            created: false,
            dev: meta.dev(),
            ino: meta.ino(),
            kind,
        })
    }

    /// A second, writable descriptor on the same file, for the record only.
    /// It is close-on-exec, so the command never inherits it. Opened by path
    /// again, so it is checked to be the very inode we locked.
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

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// One non-blocking attempt. `Ok(false)`: someone else holds it.
    pub fn try_lock(&self, mode: LockMode) -> io::Result<bool> {
        take(&self.file, self.kind, mode, false)
    }

    /// Waits in the kernel until the lock is ours.
    pub fn lock(&self, mode: LockMode) -> io::Result<()> {
        take(&self.file, self.kind, mode, true).map(drop)
    }

    /// A second descriptor on the same open file description, for a helper
    /// thread's blocking wait: the lock it takes is this one's.
    pub fn duplicate(&self) -> io::Result<LockFile> {
        Ok(LockFile {
            file: self.file.try_clone()?,
            path: self.path.clone(),
            is_dir: self.is_dir,
            hard_links: self.hard_links,
            created: self.created,
            dev: self.dev,
            ino: self.ino,
            kind: self.kind,
        })
    }

    /// Whether `path` still names the inode we hold open, with a link left.
    /// One stat of the path: the inode's identity is the one taken when
    /// it was opened, and an inode the path names has a link (that one).
    pub fn is_at(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path)
            .is_ok_and(|there| there.dev() == self.dev && there.ino() == self.ino)
    }

    /// The locked inode, as stat(2) of the descriptor names it.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Whether `e`, from an exclusive flock(2) attempt, is a file system's
    /// refusal of a read-only descriptor: NFSv4 (and others) emulate
    /// flock(2) with byte-range locks, and an exclusive one needs write
    /// access (EBADF since Linux 3.4, EIO on some). flock(1) then reopens
    /// read-write and tries again; so does lockrun (`reopen_read_write`).
    pub fn refused_read_only(&self, e: &io::Error, mode: LockMode) -> bool {
        self.kind == LockKind::Flock
            && mode == LockMode::Exclusive
            && !self.is_dir
            && matches!(e.raw_os_error(), Some(libc::EBADF | libc::EIO))
            && rustix::fs::fcntl_getfl(&self.file)
                .is_ok_and(|flags| flags & OFlags::ACCMODE == OFlags::RDONLY)
    }

    /// The same inode, opened again read-write in place of the read-only
    /// descriptor (see `refused_read_only`); checked to be the inode
    /// locked so far, never following a link nor blocking on a FIFO.
    pub fn reopen_read_write(&mut self, inherit: bool) -> io::Result<()> {
        let cloexec = if inherit {
            OFlags::empty()
        } else {
            OFlags::CLOEXEC
        };
        let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | cloexec;
        let file = File::from(rustix::fs::open(&self.path, flags, Mode::empty())?);
        let meta = file.metadata()?;
        if meta.dev() != self.dev || meta.ino() != self.ino || !meta.is_file() {
            return Err(io::Error::other("the lock file was replaced"));
        }
        self.file = file;
        Ok(())
    }

    /// Lets go of the lock now rather than at exit (fd mode's `-u`).
    pub fn unlock(&self) -> io::Result<()> {
        match self.kind {
            LockKind::Flock | LockKind::Nothing => self.file.unlock(),
            LockKind::Ofd { start, len } => ofd_lock(&self.file, libc::F_UNLCK, start, len, false),
        }
    }
}

/// The lock call, for every kind. `Ok(false)`: busy (non-blocking only).
fn take(file: &File, kind: LockKind, mode: LockMode, block: bool) -> io::Result<bool> {
    match kind {
        LockKind::Nothing => Ok(true),
        LockKind::Flock => {
            if block {
                match mode {
                    LockMode::Exclusive => file.lock(),
                    LockMode::Shared => file.lock_shared(),
                }
                .map(|()| true)
            } else {
                let attempt = match mode {
                    LockMode::Exclusive => file.try_lock(),
                    LockMode::Shared => file.try_lock_shared(),
                };
                match attempt {
                    Ok(()) => Ok(true),
                    Err(TryLockError::WouldBlock) => Ok(false),
                    Err(TryLockError::Error(e)) => Err(e),
                }
            }
        }
        LockKind::Ofd { start, len } => {
            let kind = match mode {
                LockMode::Exclusive => libc::F_WRLCK,
                LockMode::Shared => libc::F_RDLCK,
            };
            match ofd_lock(file, kind, start, len, block) {
                Ok(()) => Ok(true),
                // fcntl(2): a conflicting lock is EACCES or EAGAIN.
                Err(e)
                    if !block && matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) =>
                {
                    Ok(false)
                }
                // fcntl(2): a write lock needs a descriptor open for
                // writing, a read lock one open for reading.
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                    let need = if kind == libc::F_WRLCK {
                        "an exclusive --fcntl lock needs a descriptor open for writing; \
                         open it with <> or >>, or take a shared lock with -s"
                    } else {
                        "a shared --fcntl lock needs a descriptor open for reading; \
                         open it with < or <>"
                    };
                    Err(io::Error::new(e.kind(), format!("{e} ({need})")))
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// The type of fcntl(2)'s F_RDLCK, F_WRLCK and F_UNLCK in the libc crate:
/// int on Linux, short (flock's l_type) on macOS and the BSDs.
#[cfg(target_os = "linux")]
type LockType = libc::c_int;
#[cfg(not(target_os = "linux"))]
type LockType = libc::c_short;

#[cfg(target_os = "linux")]
fn ofd_lock(file: &File, kind: LockType, start: u64, len: u64, block: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain C struct; all-zero is a valid value (l_pid must be 0
    // for OFD locks).
    let mut arg: libc::flock = unsafe { std::mem::zeroed() };
    arg.l_type = kind as libc::c_short;
    arg.l_whence = libc::SEEK_SET as libc::c_short;
    // The parser keeps start and start + len within off_t.
    arg.l_start = i64::try_from(start).map_err(|_| io::Error::from(Errno::OVERFLOW))?;
    arg.l_len = i64::try_from(len).map_err(|_| io::Error::from(Errno::OVERFLOW))?;
    let cmd = if block {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    // SAFETY: fcntl with a valid descriptor and a pointer to a live struct.
    if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &arg) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn ofd_lock(_: &File, _: LockType, _: u64, _: u64, _: bool) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "--fcntl (open file description locks) needs Linux",
    ))
}

/// The mode a new lock file gets before the umask: 0666, as flock(1) and
/// touch(1) create files, so that a group-shared lock directory (umask
/// 002) gives the group a lock file it can open for writing too.
const CREATE_MODE: rustix::fs::RawMode = 0o666;

/// Opens PATH as described at `LockFile::open_for`: type first, then the
/// real open through the `O_PATH` descriptor; creation with `O_EXCL` so
/// that only a new regular file is ever created. Also says whether this
/// call created it.
#[cfg(target_os = "linux")]
fn open_safely(
    path: &Path,
    access: OFlags,
    cloexec: OFlags,
    write: bool,
    flock_exclusive: bool,
) -> Result<(OwnedFd, bool), Failure> {
    let flags = access | OFlags::NOCTTY | cloexec;
    // Another process may create or remove the file between our attempts;
    // each round makes progress unless it keeps racing, so a few suffice.
    for _ in 0..8 {
        let probe = match rustix::fs::open(
            path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(probe) => probe,
            Err(Errno::NOENT) => {
                match rustix::fs::open(
                    path,
                    flags | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
                    Mode::from_raw_mode(CREATE_MODE),
                ) {
                    Ok(fd) => return Ok((fd, true)),
                    Err(Errno::EXIST) => continue,
                    Err(e) => return Err(open_failure(path, e, write)),
                }
            }
            Err(e) => return Err(open_failure(path, e, write)),
        };
        let stat = rustix::fs::fstat(&probe).map_err(|e| open_failure(path, e, write))?;
        let file_type = FileType::from_raw_mode(stat.st_mode);
        let flags = match file_type {
            FileType::RegularFile => flags,
            FileType::Directory if write => {
                return Err(Failure::new(
                    exit_codes::NO_INPUT,
                    format!(
                        "cannot take an exclusive --fcntl lock on the directory {}: it needs a \
                         descriptor open for writing, which a directory cannot have \
                         (take a shared lock with -s, or drop --fcntl)",
                        path.display()
                    ),
                ));
            }
            FileType::Directory => OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOCTTY | cloexec,
            FileType::Symlink => return Err(open_failure(path, Errno::LOOP, write)),
            other => return Err(refuse_special(path, other)),
        };
        // NFS emulates flock(2) with byte-range locks, and an exclusive
        // one needs a descriptor open for writing (EBADF otherwise, since
        // Linux 3.4). flock(1) reopens read-write after the EBADF; lockrun
        // asks the file system first. Read-only where writing is refused.
        if flock_exclusive
            && file_type == FileType::RegularFile
            && rustix::fs::fstatfs(&probe).is_ok_and(|fs| fs.f_type == NFS_SUPER_MAGIC)
        {
            let rw = (flags - OFlags::RDONLY) | OFlags::RDWR;
            if let Ok(fd) = reopen(&probe, path, rw, &stat) {
                return Ok((fd, false));
            }
        }
        return reopen(&probe, path, flags, &stat)
            .map(|fd| (fd, false))
            .map_err(|e| open_failure(path, e, write));
    }
    Err(Failure::new(
        exit_codes::OS_ERROR,
        format!(
            "cannot open lock file {}: it keeps being created and removed by someone else",
            path.display()
        ),
    ))
}

#[cfg(target_os = "linux")]
const NFS_SUPER_MAGIC: i64 = 0x6969;

/// Opens an existing lock file for reading, for `holder` and `check`, with
/// the run path's care: the type is decided on an `O_PATH` descriptor and
/// only a regular file (or a directory) is then opened, through that very
/// descriptor, so a FIFO's blocked writer is never woken nor a device
/// opened, even one swapped in after an earlier stat. `Ok(None)`: no such
/// file, or not one lockrun would lock. A symbolic link is followed, as
/// the look-up in the kernel's table follows it: `holder` reports on the
/// lock a flock(1) user takes through the link.
#[cfg(target_os = "linux")]
pub fn open_to_read(path: &Path) -> io::Result<Option<File>> {
    let probe = match rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        Ok(probe) => probe,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&probe)?;
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::CLOEXEC;
    let flags = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => flags,
        FileType::Directory => flags | OFlags::DIRECTORY,
        _ => return Ok(None),
    };
    Ok(Some(File::from(reopen(&probe, path, flags, &stat)?)))
}

/// Elsewhere: a non-blocking open, and the type checked on what was opened.
#[cfg(not(target_os = "linux"))]
pub fn open_to_read(path: &Path) -> io::Result<Option<File>> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let kind = file.metadata()?.file_type();
    Ok((kind.is_file() || kind.is_dir()).then_some(file))
}

/// Opens the file an `O_PATH` descriptor stands for. Through /proc it is
/// that very inode; without /proc (a bare chroot), by path again, checked
/// to be the same inode, and non-blocking in case it was swapped for a FIFO.
#[cfg(target_os = "linux")]
fn reopen(
    probe: &OwnedFd,
    path: &Path,
    flags: OFlags,
    seen: &rustix::fs::Stat,
) -> Result<OwnedFd, Errno> {
    use std::os::fd::{AsFd, AsRawFd};
    let via_proc = format!("/proc/self/fd/{}", probe.as_fd().as_raw_fd());
    match rustix::fs::open(via_proc.as_str(), flags, Mode::empty()) {
        Err(Errno::NOENT) if !Path::new("/proc/self/fd").exists() => {}
        other => return other,
    }
    let fd = rustix::fs::open(
        path,
        flags | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
    )?;
    let now = rustix::fs::fstat(&fd)?;
    if now.st_dev != seen.st_dev || now.st_ino != seen.st_ino {
        return Err(Errno::AGAIN);
    }
    Ok(fd)
}

/// Elsewhere: no `O_PATH`, so a non-blocking open, and the type checked on
/// what was opened.
#[cfg(not(target_os = "linux"))]
fn open_safely(
    path: &Path,
    access: OFlags,
    cloexec: OFlags,
    write: bool,
    _flock_exclusive: bool,
) -> Result<(OwnedFd, bool), Failure> {
    let safe = access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | cloexec;
    let mode = Mode::from_raw_mode(CREATE_MODE);
    if let Ok(fd) = rustix::fs::open(path, safe | OFlags::CREATE | OFlags::EXCL, mode) {
        return Ok((fd, true));
    }
    match rustix::fs::open(path, safe, mode) {
        Ok(fd) => Ok((fd, false)),
        Err(Errno::ISDIR) if !write => rustix::fs::open(path, safe | OFlags::DIRECTORY, mode)
            .map(|fd| (fd, false))
            .map_err(|e| open_failure(path, e, write)),
        Err(e) => Err(open_failure(path, e, write)),
    }
}

/// Why `--fd N` cannot be used: N is not open, most likely.
pub fn lend_failure(fd: i32, e: &io::Error) -> Failure {
    if crate::persona::is_flock() {
        // flock(1) finds out only at the lock call, and says so its way.
        return Failure::new(
            crate::persona::FLOCK_LOCK_FAILED,
            format!("{fd}: {}", crate::persona::strerror(e)),
        );
    }
    if e.raw_os_error() == Some(libc::EBADF) {
        return Failure::new(
            exit_codes::NO_INPUT,
            format!(
                "descriptor {fd} is not open (open it in the shell first, e.g. `{fd}>/var/lock/x`)"
            ),
        );
    }
    Failure::new(
        exit_codes::OS_ERROR,
        format!("cannot use descriptor {fd}: {e}"),
    )
}

/// The file a descriptor is open on, as /proc names it, for messages and
/// `LOCKRUN_LOCKFILE`; `descriptor N` where that cannot be told.
pub fn describe_fd(fd: i32) -> PathBuf {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(format!("descriptor {fd}")))
}

fn open_failure(path: &Path, errno: Errno, write: bool) -> Failure {
    let err = io::Error::from(errno);
    match errno {
        Errno::ACCESS | Errno::ROFS | Errno::TXTBSY | Errno::PERM if write => Failure::new(
            exit_codes::NO_INPUT,
            format!(
                "cannot open {} for writing: {err} (an exclusive --fcntl lock needs write \
                 access to the file; take a shared lock with -s, or drop --fcntl to use a \
                 flock(2) lock, which read access is enough for)",
                path.display()
            ),
        ),
        Errno::ACCESS | Errno::PERM => permission_failure(path, &err),
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
                Ok(meta) => refuse_special(path, crate::platform::file_type(&meta)),
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

/// An existing lock file this user may not open: say whose it is and what
/// would let this user lock it. In a sticky, world-writable directory
/// (`/tmp`, `/var/tmp`, often `/run/lock`), `fs.protected_regular` (the
/// default on current Debian and Ubuntu) also refuses every open with
/// O_CREAT of another user's file there, even by root: that is why
/// flock(1) fails on such a file when it could read it. lockrun opens an
/// existing file without O_CREAT, so only the file's own permissions are
/// left to refuse it, and the message says so.
fn permission_failure(path: &Path, err: &io::Error) -> Failure {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Failure::io(
            exit_codes::NO_INPUT,
            "cannot open or create lock file",
            path,
            err,
        );
    };
    let owner = match crate::identity::passwd_name(meta.uid()) {
        Some(name) => format!("{name} (uid {})", meta.uid()),
        None => format!("uid {}", meta.uid()),
    };
    let sticky = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .and_then(|dir| std::fs::metadata(dir).ok())
        .is_some_and(|dir| dir.mode() & 0o1002 == 0o1002);
    let protected = if sticky {
        " In this sticky directory, fs.protected_regular also keeps other users from opening \
         it with O_CREAT (flock(1) then fails even where it could read it); lockrun opens it \
         without, so read permission is all it needs."
    } else {
        ""
    };
    Failure::new(
        exit_codes::NO_INPUT,
        format!(
            "cannot open lock file {}: {err}: it belongs to {owner} with mode {:04o}, which this \
             user may not read.{protected} Ask its owner to let you read it (chmod a+r), or use \
             a lock file of your own.",
            path.display(),
            meta.mode() & 0o7777,
        ),
    )
}

fn refuse_special(path: &Path, file_type: FileType) -> Failure {
    let what = crate::platform::file_kind(file_type);
    Failure::new(
        exit_codes::NO_PERMISSION,
        format!(
            "refusing to use {} as lock file: it is {what}; lockrun locks only regular files and directories",
            path.display()
        ),
    )
}
