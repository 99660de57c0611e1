//! Lock files on Windows: `LockFileEx` on one byte far past the record
//! (`platform::windows::LOCK_OFFSET`), never on the record's bytes, which
//! Windows would then hide from every reader (it enforces byte-range locks
//! on `ReadFile`). The record lives at offset 0 of the lock file, written
//! through the lock handle while the command is still suspended
//! (`record::ChildRecord` on Windows), so it is complete before the
//! command runs; the release adds `released_at` and `exit` by the Linux
//! rules. The run itself is the one run flow's (`run::run_with`), as for
//! every backend; `--slots N` is [`slots`].

// `--also`: the one set algorithm, the Unix backend's file (its
// `super` is this module here).
#[path = "set.rs"]
pub mod set;
#[path = "windows_slots.rs"]
pub mod slots;

use super::{Backend, Blocking, Capabilities, Contender, Held};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::mode::LockMode;
use crate::platform::BorrowedFd;
use crate::platform::windows::{Attempt, LOCK_OFFSET, lock_byte, unlock_byte};
use crate::record::{self, Record};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::os::windows::io::AsRawHandle as _;
use std::path::{Path, PathBuf};
use windows_sys::Win32::Foundation::ERROR_SHARING_VIOLATION;
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
};

/// An open lock file, checked as Linux checks it: not a reparse point
/// (as O_NOFOLLOW refuses a symbolic link), not a directory, one name.
pub struct LockFile {
    pub file: File,
    pub writable: bool,
    /// Absolute, as the command's `LOCKRUN_LOCKFILE` and messages name it.
    pub path: PathBuf,
}

impl LockFile {
    /// The file itself, whatever name it was opened by: its volume and its
    /// index there (what an inode is on Unix). `None` if Windows will not
    /// say.
    pub fn identity(&self) -> Option<(u32, u64)> {
        let info = crate::platform::windows::file_information(&self.file).ok()?;
        let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
        Some((info.dwVolumeSerialNumber, index))
    }
}

pub fn open_lock_file(path: &Path, create: bool) -> Result<LockFile, Failure> {
    let shown = path.display().to_string();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(Failure::new(
                exit_codes::NO_PERMISSION,
                format!(
                    "{shown} is a reparse point (a symbolic link or junction): refused, as lockrun never follows one at the last component"
                ),
            ));
        }
        if meta.is_dir() {
            return Err(Failure::new(
                exit_codes::NO_PERMISSION,
                format!("{shown} is a directory: on Windows a lock file must be a regular file"),
            ));
        }
    }
    // Shared for reading and writing, never for deleting (std's default
    // shares all three): while any lockrun has the file open, holding or
    // waiting, nobody can delete it or rename anything over it (Windows
    // refuses with a sharing violation). Otherwise the next lockrun would
    // create a new file under the same name and lock that, while this one
    // still holds the old one: two holders at once. Linux answers the
    // same race after the fact (`confirm`: the path still names the file
    // we locked); here it cannot happen at all.
    let share = if crate::platform::windows::broken("share-delete") {
        FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE
    } else {
        FILE_SHARE_READ | FILE_SHARE_WRITE
    };
    let open = |write: bool| {
        let mut o = OpenOptions::new();
        o.read(true)
            .write(write)
            .create(write && create)
            .share_mode(share)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT);
        o.open(path)
    };
    let cannot_open = |e: &io::Error| {
        let mut failure = Failure::io(exit_codes::NO_INPUT, "cannot open", path, e);
        if e.raw_os_error() == Some(ERROR_SHARING_VIOLATION as i32) {
            failure.message.push_str(
                " (another program has it open to delete or rename it: let it finish, then run again)",
            );
        }
        failure
    };
    let (file, writable) = match open(true) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => match open(false) {
            Ok(f) => (f, false),
            Err(e) => return Err(cannot_open(&e)),
        },
        Err(e) => return Err(cannot_open(&e)),
    };
    let info = crate::platform::windows::file_information(&file)
        .map_err(|e| Failure::io(exit_codes::OS_ERROR, "cannot look at", path, &e))?;
    if info.dwFileAttributes & (FILE_ATTRIBUTE_REPARSE_POINT | FILE_ATTRIBUTE_DIRECTORY) != 0 {
        return Err(Failure::new(
            exit_codes::NO_PERMISSION,
            format!("{shown} is not a regular file: refused"),
        ));
    }
    if info.nNumberOfLinks > 1 {
        return Err(Failure::new(
            exit_codes::NO_PERMISSION,
            format!(
                "{shown} has {} names (hard links): refused, as another name could be a different lock's file",
                info.nNumberOfLinks
            ),
        ));
    }
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    Ok(LockFile {
        file,
        writable,
        path,
    })
}

fn lock_error(label: &str, e: &io::Error) -> Failure {
    Failure::new(exit_codes::OS_ERROR, format!("cannot lock {label}: {e}"))
}

/// One attempt at the byte: `Ok(false)` when someone else holds it.
fn attempt(file: &File, exclusive: bool, wait: bool, label: &str) -> Result<bool, Failure> {
    match lock_byte(file.as_raw_handle(), LOCK_OFFSET, exclusive, wait) {
        Attempt::Acquired => Ok(true),
        Attempt::Busy if !wait => Ok(false),
        Attempt::Busy => Err(lock_error(
            label,
            &io::Error::other("the waiting lock call returned without the lock"),
        )),
        Attempt::Failed(e) => Err(lock_error(label, &e)),
    }
}

/// A handle of the same open file for a helper thread's blocking call: a
/// lock taken through it is the lock file's (LockFileEx locks belong to
/// the file object, which a duplicate shares), and the helper owns it, so
/// a helper the wait leaves behind never blocks on a closed handle.
fn for_helper(file: &File, label: &str) -> Result<File, Failure> {
    file.try_clone().map_err(|e| lock_error(label, &e))
}

/// A duplicate handle that took the lock stays open until lockrun exits:
/// Windows keeps a file object's locks until its last handle closes, but
/// the lock must not depend on every implementation (Wine's) doing so.
/// One handle per run; the run's own handle lets the lock go.
fn keep_open(file: File) {
    std::mem::forget(file);
}

/// Who holds the lock, in the words after "held": the record's holder when
/// it is alive and unreleased, else what can be said without a lock table.
pub(crate) fn held_by(file: &File) -> String {
    match live_holder(file) {
        Some(holder) => format!("by {holder}"),
        None => "by another process (shared, or one that wrote no record)".to_owned(),
    }
}

/// The live, unreleased holder the record names, if it names one.
fn live_holder(file: &File) -> Option<String> {
    let rec = Record::parse(&record::read_content(file).ok()?)?;
    (!rec.is_released() && rec.holder_liveness() == crate::identity::Liveness::Alive)
        .then(|| display::holder_summary(&rec))
}

/// The record rule: it goes only into a file that is empty or already
/// holds a record of ours (another program's data is never touched), and
/// one lockrun could open for writing.
fn may_write_record(lock: &LockFile) -> bool {
    if !lock.writable {
        return false;
    }
    match record::read_content(&lock.file) {
        Ok(c) => c.is_empty() || Record::parse(&c).is_some(),
        Err(_) => false,
    }
}

/// What to open for a run on a lock file.
pub struct Opening<'a> {
    pub path: &'a Path,
    pub mode: LockMode,
    /// `-n` or `-w 0`: no wait at all.
    pub nonblocking: bool,
}

/// A lock file, before its byte is taken.
pub struct FileBackend {
    lock: LockFile,
    exclusive: bool,
    label: String,
}

impl FileBackend {
    /// What `--also` sorts and merges its files by (set.rs).
    fn identity(&self) -> Option<(u32, u64)> {
        self.lock.identity()
    }

    /// A refusal of the lock call with a status of its own: none here.
    fn refused_status(&self) -> Option<u8> {
        None
    }

    pub fn open(opening: &Opening) -> Result<FileBackend, Failure> {
        Ok(FileBackend {
            lock: open_lock_file(opening.path, true)?,
            exclusive: opening.mode == LockMode::Exclusive,
            label: display::escape(&opening.path.to_string_lossy()),
        })
    }
}

impl Contender for FileBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        attempt(&self.lock.file, self.exclusive, false, &self.label)
    }

    /// The blocking `LockFileEx` on a helper thread: a kernel wait, not
    /// polling (overlapped waits never complete under Wine).
    fn blocking(&mut self) -> Result<Blocking, Failure> {
        let file = for_helper(&self.lock.file, &self.label)?;
        let (exclusive, label) = (self.exclusive, self.label.clone());
        Ok(Box::new(move || {
            let got = attempt(&file, exclusive, true, &label);
            if got.is_ok() {
                keep_open(file);
            }
            got.map(drop)
        }))
    }

    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        Some(attempt(&self.lock.file, self.exclusive, true, &self.label).map(drop))
    }

    fn answers_interrupt(&self) -> bool {
        false
    }

    fn undo(&mut self) {
        unlock_byte(self.lock.file.as_raw_handle(), LOCK_OFFSET);
    }

    fn holder(&mut self) -> Option<String> {
        live_holder(&self.lock.file)
    }

    fn conflict_holder(&mut self) -> String {
        let held = self.conflict_held();
        held.strip_prefix("by ").map(str::to_owned).unwrap_or(held)
    }

    fn conflict_held(&mut self) -> String {
        held_by(&self.lock.file)
    }

    fn last_record(&mut self) -> Option<Record> {
        Record::parse(&record::read_content(&self.lock.file).ok()?)
    }
}

impl Backend for FileBackend {
    type Held = FileHeld;
    const CAPS: Capabilities = Capabilities {
        kind: "lock files",
        shared: true,
        exec_in_place: false,
        poll: false,
        lease: false,
        byte_ranges: false,
        slots: true,
        stays_to: "end the command's job when it ends or runs out of time",
        woken_by: "the kernel",
        last_record: Ok(()),
    };

    fn failure_status(&self) -> u8 {
        exit_codes::OS_ERROR
    }

    fn give_up(self) {}

    fn acquired(self, record: Option<&Record>, _verbose: bool) -> Result<FileHeld, Failure> {
        Ok(FileHeld::new(self.lock, record.is_some(), None, self.label))
    }
}

/// A lock file's byte, held for the command.
pub struct FileHeld {
    lock: LockFile,
    /// Whether the record goes into this file (the record rule allowed it).
    record: bool,
    /// With `--slots`: the slot's number and its file's name.
    slot: Option<(u16, String)>,
    /// The lock file's name in messages.
    label: String,
}

impl FileHeld {
    fn new(
        lock: LockFile,
        wants_record: bool,
        slot: Option<(u16, String)>,
        label: String,
    ) -> FileHeld {
        let record = wants_record && may_write_record(&lock);
        FileHeld {
            lock,
            record,
            slot,
            label,
        }
    }
}

impl Held for FileHeld {
    /// With `--slots`, the slot (`LOCKRUN_SLOT`), and `LOCKRUN_LOCKFILE`
    /// names the slot's file, where the record is.
    fn env(&self) -> Vec<(&'static str, OsString)> {
        match &self.slot {
            Some((k, _)) => vec![
                ("LOCKRUN_LOCKFILE", self.lock.path.clone().into_os_string()),
                ("LOCKRUN_SLOT", k.to_string().into()),
            ],
            None => Vec::new(),
        }
    }

    fn held_label(&self) -> Option<&str> {
        self.slot.as_ref().map(|(_, label)| label.as_str())
    }

    /// The lock handle, for the record written while the command is
    /// suspended (`record::ChildRecord`).
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.record
            .then(|| crate::platform::windows::file_fd(&self.lock.file))
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        if !self.record {
            return Ok(());
        }
        let file = &self.lock.file;
        if !released {
            return record::write(file, &record.to_line(), None).map_err(|e| e.to_string());
        }
        match record::write_release(file, record) {
            Ok(record::Release::Written | record::Release::LeftAlone(_)) => Ok(()),
            // The record could not be written when the command started,
            // and that was said: one warning is enough.
            Ok(record::Release::Empty) => Err(String::new()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn release(self) -> Result<(), String> {
        unlock_byte(self.lock.file.as_raw_handle(), LOCK_OFFSET);
        Ok(())
    }
}
