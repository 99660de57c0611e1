//! Locks on files: flock(2) on an open file, released by the kernel when
//! the last descriptor closes. The record lives in the lock file itself.

pub mod holder;
/// `holder`/`check` on a lock file; never reached from the run path.
pub mod inspect;
pub mod lock;
pub mod set;
pub mod slots;

use super::{Backend, Capabilities, Held};
use crate::backend::{Blocking, Contender};
use crate::exit_codes::{self, Failure};
use crate::persona;
use crate::platform::{AsFd, BorrowedFd};
use crate::record::{self, NoRecord, Record};
use lock::{LockFile, LockMode, LockSpec};
use std::fs::File;

/// What to open for a run on a lock file, as the run form asks for it.
pub struct Opening<'a> {
    pub path: &'a std::path::Path,
    /// Which lock (flock or OFD, byte range) and on what (path or `--fd`).
    pub spec: LockSpec,
    pub mode: LockMode,
    /// The command inherits the lock descriptor (not `-o`).
    pub inherit: bool,
    pub verbose: bool,
    /// For the record of whoever sets a `--slots` number.
    pub command: &'a [std::ffi::OsString],
    /// Whether the run may wait at all (not `-n`, not `-w 0`).
    pub waits: bool,
}

/// A lock file's content, parsed once: whether it is empty, and the
/// record it holds, if it holds one.
struct Known {
    empty: bool,
    record: Option<Record>,
}

impl Known {
    fn parse(content: &[u8]) -> Known {
        Known {
            empty: content.is_empty(),
            record: Record::parse(content),
        }
    }

    /// The --slots header `content` holds. Parsed in full only when it
    /// can be one: a header has no `lockrun` key, so content that parsed
    /// as a record is a header only if it also has `lockrun_slots`, which
    /// --slots writes as its first key. This saves a second JSON parse of
    /// every record on the uncontended path (about 10,000 instructions).
    fn header(&self, content: &[u8]) -> Option<record::SlotsHeader> {
        let maybe = self.record.is_none()
            || content
                .trim_ascii_start()
                .starts_with(record::SLOTS_HEADER_START);
        if maybe {
            record::SlotsHeader::parse(content)
        } else {
            None
        }
    }
}

pub struct FileBackend {
    lock: LockFile,
    mode: LockMode,
    label: String,
    /// `-o`: whether the command inherits the descriptor.
    inherit: bool,
    /// The path the lock was opened by, to open it again if the file is
    /// replaced while we wait; `None` for a lent descriptor.
    path: Option<std::path::PathBuf>,
    spec: LockSpec,
    verbose: bool,
    /// A lent descriptor's number, which flock(1) names in its messages.
    lent_fd: Option<String>,
    /// The lock file's content as read and parsed once the lock was taken
    /// (to see whether it is used with --slots): the record's rules and
    /// `--skip-if-succeeded-within` need it too, and parse it no more.
    known: Option<Known>,
    /// The status of a refusal (64: LOCKFILE is used with --slots).
    refused: Option<u8>,
}

impl FileBackend {
    pub fn open(opts: &Opening) -> Result<FileBackend, Failure> {
        Ok(FileBackend {
            lock: LockFile::open_for(opts.path, opts.spec, opts.mode, opts.inherit)?,
            mode: opts.mode,
            label: crate::display::escape(&opts.path.to_string_lossy()),
            inherit: opts.inherit,
            // A lent descriptor (`--fd`) is never opened again by path.
            path: opts.spec.fd.is_none().then(|| opts.path.to_owned()),
            spec: opts.spec,
            verbose: opts.verbose,
            lent_fd: None,
            known: None,
            refused: None,
        })
    }

    /// A lock on a descriptor lockrun was lent (fd mode).
    pub fn lent(lock: LockFile, mode: LockMode, label: String, fd: String) -> FileBackend {
        FileBackend {
            lock,
            mode,
            label,
            inherit: true,
            path: None,
            spec: LockSpec::default(),
            verbose: false,
            lent_fd: Some(fd),
            known: None,
            refused: None,
        }
    }

    /// A slot file of a `--slots` lock, already locked.
    pub fn slot(lock: LockFile, label: String, inherit: bool, verbose: bool) -> FileBackend {
        FileBackend {
            lock,
            mode: LockMode::Exclusive,
            label,
            inherit,
            path: None,
            spec: LockSpec::default(),
            verbose,
            lent_fd: None,
            known: None,
            refused: None,
        }
    }

    pub fn lock(&self) -> &LockFile {
        &self.lock
    }

    /// What `--also` sorts and merges its files by (set.rs): the inode.
    fn identity(&self) -> Option<(u64, u64)> {
        Some(self.lock.identity())
    }

    /// Why the lock call was refused, where that has a status of its own
    /// (a file system that will not lock a read-only descriptor).
    fn refused_status(&self) -> Option<u8> {
        self.refused
    }

    /// CONTRACT §13: a lockrun without --slots on a LOCKFILE used with
    /// --slots N never runs beside the slots' holders, who hold the slot
    /// files and not LOCKFILE. Told by the number of slots that --slots
    /// keeps in LOCKFILE: read only where it costs nothing measurable,
    /// once the lock is taken (the record's rules read the content then
    /// anyway, and reuse this reading) or when the lock is busy. A lent
    /// descriptor (`--fd`, fd mode) and `-u` are flock(1)'s forms and are
    /// not looked at.
    fn refuse_if_slots(&mut self, holding: bool) -> Result<(), Failure> {
        if self.path.is_none() || self.lock.is_dir || self.lock.kind() == lock::LockKind::Nothing {
            return Ok(());
        }
        // Unreadable content is the record's business (no record), never
        // a reason to refuse the lock.
        let Ok(content) = record::read_content(self.lock.file()) else {
            return Ok(());
        };
        let header = if holding {
            let known = Known::parse(&content);
            let header = known.header(&content);
            self.known = Some(known);
            header
        } else {
            record::SlotsHeader::parse(&content)
        };
        let Some(header) = header else {
            return Ok(());
        };
        if holding {
            let _ = self.lock.unlock();
        }
        let failure = slots::plain_refused(self.lock.path(), &self.label, &header);
        self.refused = Some(failure.status);
        Err(failure)
    }
}

fn os_error(lock: &LockFile, lent_fd: Option<&str>, e: &std::io::Error) -> Failure {
    if let (Some(fd), true) = (lent_fd, persona::is_flock()) {
        return Failure::new(
            persona::lock_failed(exit_codes::OS_ERROR),
            format!("{fd}: {}", persona::strerror(e)),
        );
    }
    Failure::io(
        persona::lock_failed(exit_codes::OS_ERROR),
        "cannot lock",
        lock.path(),
        e,
    )
}

impl FileBackend {
    /// A lock call refused because the descriptor is read-only (NFSv4):
    /// open the file again read-write and make the call once more, as
    /// flock(1) does. Only for a file lockrun opened itself by path.
    fn read_write_retry<T>(
        &mut self,
        first: std::io::Result<T>,
        again: impl FnOnce(&LockFile, LockMode) -> std::io::Result<T>,
    ) -> Result<T, Failure> {
        let e = match first {
            Err(e) if self.path.is_some() && self.lock.refused_read_only(&e, self.mode) => e,
            other => return other.map_err(|e| os_error(&self.lock, self.lent_fd.as_deref(), &e)),
        };
        if self.lock.reopen_read_write(self.inherit).is_err() {
            return Err(os_error(&self.lock, self.lent_fd.as_deref(), &e));
        }
        again(&self.lock, self.mode).map_err(|e| os_error(&self.lock, self.lent_fd.as_deref(), &e))
    }
}

impl Contender for FileBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        let first = self.lock.try_lock(self.mode);
        let got = self.read_write_retry(first, LockFile::try_lock)?;
        if !got {
            // Busy: perhaps the head of a --slots queue. Refused at once
            // rather than after a wait (and checked again, once taken, in
            // `confirm`).
            self.refuse_if_slots(false)?;
        }
        Ok(got)
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        // The helper locks a duplicate descriptor: flock locks belong to
        // the open file description, which the duplicate shares.
        let dup = self
            .lock
            .duplicate()
            .map_err(|e| os_error(&self.lock, self.lent_fd.as_deref(), &e))?;
        let mode = self.mode;
        let lent_fd = self.lent_fd.clone();
        Ok(Box::new(move || {
            dup.lock(mode)
                .map_err(|e| os_error(&dup, lent_fd.as_deref(), &e))
        }))
    }

    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        let first = self.lock.lock(self.mode);
        Some(self.read_write_retry(first, LockFile::lock))
    }

    fn undo(&mut self) {
        let _ = self.lock.unlock();
    }

    /// The classic lock-file loop: a lock taken on an inode that is no
    /// longer at the path (replaced or deleted while we waited) excludes
    /// nobody who opens the path now, so let it go and open the path again.
    fn confirm(&mut self) -> Result<bool, Failure> {
        let Some(path) = &self.path else {
            return Ok(true);
        };
        if self.lock.is_at(path) {
            self.refuse_if_slots(true)?;
            return Ok(true);
        }
        if self.verbose {
            crate::say!(
                "lockrun: {} was replaced or deleted while lockrun waited; locking the file now at that path",
                self.label
            );
        }
        self.lock = LockFile::open_for(path, self.spec, self.mode, self.inherit)?;
        Ok(false)
    }

    fn holder(&mut self) -> Option<String> {
        holder::held_by(&self.lock)
    }

    fn conflict_holder(&mut self) -> String {
        let held = self.conflict_held();
        held.strip_prefix("by ").map(str::to_owned).unwrap_or(held)
    }

    fn conflict_held(&mut self) -> String {
        holder::conflict_held(&self.lock, self.mode, &self.label)
    }

    /// The record as the lock file holds it now that the lock is ours:
    /// the content `confirm` read (the record's rules read it then anyway),
    /// or read now. What cannot be read or parsed is no record.
    fn last_record(&mut self) -> Option<Record> {
        match &self.known {
            Some(known) => known.record.clone(),
            None => Record::parse(&record::read_content(self.lock.file()).ok()?),
        }
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
        byte_ranges: true,
        slots: false,
        stays_to: "",
        woken_by: "",
        last_record: Ok(()),
    };

    fn failure_status(&self) -> u8 {
        self.refused
            .unwrap_or_else(|| persona::lock_failed(exit_codes::OS_ERROR))
    }

    fn give_up(self) {}

    fn acquired(self, record: Option<&Record>, verbose: bool) -> Result<FileHeld, Failure> {
        let record_file = match record {
            None => None,
            Some(_) => match may_write_known(&self.lock, self.known) {
                Ok(file) => Some(file),
                Err(reason) => {
                    if verbose {
                        crate::say!(
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
            lent: self.spec.fd.is_some() || self.lent_fd.is_some(),
            label: self.label,
            verbose,
        })
    }
}

/// The data-protection rule: a record goes only into an empty file or one
/// that already holds a record of ours, and only into a regular file with
/// one name that we can open for writing. Checked with the lock held, so no
/// lockrun can change the content under us. Returns the descriptor to write
/// the record through.
pub(crate) fn may_write(lock: &LockFile) -> Result<std::fs::File, NoRecord> {
    may_write_known(lock, None)
}

/// [`may_write`], with the content when it was read since the lock was
/// taken.
fn may_write_known(lock: &LockFile, known: Option<Known>) -> Result<std::fs::File, NoRecord> {
    if lock.is_dir {
        return Err(NoRecord::Directory);
    }
    // One record per file, and a byte-range lock is not the only holder
    // of the file: another range's holder would overwrite its record, or
    // it another's (CONTRACT §13). An OFD lock on the whole file excludes
    // every other range, so it keeps its record, as flock(2)'s does.
    if matches!(lock.kind(), lock::LockKind::Ofd { start, len } if start != 0 || len != 0) {
        return Err(NoRecord::ByteRange);
    }
    if lock.hard_links > 1 {
        return Err(NoRecord::HardLinks);
    }
    let known = match known {
        Some(known) => known,
        None => Known::parse(&record::read_content(lock.file()).map_err(|_| NoRecord::Unreadable)?),
    };
    if !known.empty && known.record.is_none() {
        return Err(NoRecord::ForeignContent);
    }
    // As `flock`, an empty file another program made (apt's
    // /var/lib/apt/lists/lock) is that program's: scripts written for
    // flock(1) lock such files, and flock(1) never writes them.
    if known.empty && !lock.created && persona::is_flock() {
        return Err(NoRecord::NotCreatedAsFlock);
    }
    // Only now, with the content known to be ours: a writable descriptor on
    // a script, even for a moment, makes every exec of it fail (ETXTBSY).
    lock.open_for_writing().map_err(|_| NoRecord::ReadOnly)
}

pub struct FileHeld {
    lock: LockFile,
    /// The writable descriptor for the record, when one may be written.
    record_file: Option<File>,
    inherit: bool,
    /// The descriptor was lent by the caller (`--fd N`): the caller and its
    /// other children hold the lock through it too.
    lent: bool,
    label: String,
    verbose: bool,
}

impl Held for FileHeld {
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.record_file.as_ref().map(|f| f.as_fd())
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        let Some(file) = &self.record_file else {
            return Ok(());
        };
        if !released {
            // -F: our own record, written before the exec.
            let len_now = file.metadata().map(|m| m.len()).ok();
            return crate::platform::tolerating_file_size_limit(|| {
                record::write(file, &record.to_line(), len_now)
            })
            .map_err(|e| e.to_string());
        }
        match crate::platform::tolerating_file_size_limit(|| record::write_release(file, record)) {
            Ok(record::Release::Written) => Ok(()),
            // The command's process could not write the record and has
            // already said so: one warning is enough.
            Ok(record::Release::Empty) => Err(String::new()),
            Ok(record::Release::LeftAlone(why)) => {
                if self.verbose {
                    crate::say!("lockrun: left {} as the command left it: {why}", self.label);
                }
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Every process that shares lockrun's open file description holds
    /// its lock, whatever lock it is: compared by description, not by the
    /// pid in the kernel's lock line, which an OFD lock (`--fcntl`, a byte
    /// range) shows as -1. With a lent descriptor the caller's processes
    /// share it too; they are not lockrun's to stop: only what the command
    /// started is.
    fn inheritors(&self) -> Option<crate::backend::Inheritors> {
        if !self.inherit {
            return None;
        }
        let (dev, ino) = self.lock.identity();
        let me = std::process::id() as i32;
        // The watcher thread's own copy of the descriptor, the same open
        // file description: kcmp names it by number. If none can be made
        // (no descriptor left), a flock(2) lock can still be traced by the
        // pid that took it.
        let ours = self.lock.file().try_clone().ok();
        // With a lent descriptor, the same finder as a lock URL's.
        let tree = self.lent.then(crate::backend::command_tree);
        Some(Box::new(move |command| {
            let mut found: Vec<i32> = match &ours {
                Some(file) => crate::platform::sharing_description(file.as_fd(), dev, ino),
                None => crate::platform::fd_holders(dev, ino)
                    .0
                    .into_iter()
                    .filter(|h| h.caller == me && h.pid != me)
                    .map(|h| h.pid)
                    .collect(),
            };
            found.retain(|&pid| pid != command);
            if let Some(tree) = tree.as_ref().filter(|_| !found.is_empty()) {
                let mine = tree(command);
                found.retain(|pid| mine.contains(pid));
            }
            found.dedup();
            found
        }))
    }

    fn searches_descendants(&self) -> bool {
        self.lent && self.inherit
    }

    fn release(self) -> Result<(), String> {
        drop(self.lock);
        Ok(())
    }
}
