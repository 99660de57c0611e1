//! `--also`: several lock files held together while the command runs, all
//! of them or none. One algorithm for every platform: this file is the
//! Unix file backend's `set` module and, by `#[path]`, the Windows one's
//! (`backend::file_windows::set`); `super` is that platform's file
//! backend, whose `FileBackend` gives each file's identity (device and
//! inode on Unix, volume serial number and file index on Windows).
//!
//! # How the set is taken, and why it cannot deadlock
//!
//! The files are opened first, and one member is kept per file (a file
//! named twice, or through a hard link, is one lock: a second open of a
//! file this process has locked would wait for itself for ever). The
//! members are sorted by the file's identity, the one order every lockrun
//! computes for the same files whatever order they were named in (a file
//! whose identity the system will not say sorts after every one that has
//! one, by its absolute name, so that two lockruns still agree). They are
//! then taken strictly in that order:
//!
//! 1. non-blocking attempts from the first member on, keeping each one
//!    got, up to the first busy one (the uncontended set costs one lock
//!    call per file and nothing else);
//! 2. a kernel (blocking) wait on that busy member alone, still holding
//!    the ones before it; then the same for every member after it.
//!
//! A lockrun therefore only ever waits for a lock that comes after every
//! lock it holds, in an order shared by all lockruns. A cycle of waiters
//! would need someone in it to wait for a lock ordered before one it
//! holds, so there is none: no deadlock among lockruns (and none with a
//! nest of flock(1) calls made in this order; a nest in another order is
//! the caller's own). Nothing is polled: each wait is the kernel's, which
//! hands over the lock the moment its holder lets go, and no lock is
//! tried again and again while another is waited for. Nor can two
//! lockruns livelock, as a "take all or back off and retry" scheme can:
//! nobody lets go of a lock to make room, so every wait ends in progress.
//!
//! The members held while waiting for a later one stay held (releasing
//! them would not make the set deadlock-free, only reopen the back-off
//! race), but only while lockrun waits: when the wait ends without the
//! whole set (`-n`, the `-w` deadline, which is one for the whole set, a
//! signal) every member is let go of before lockrun says so, so none is
//! held and the status is the conflict status.

use super::{FileBackend, FileHeld, Opening};
use crate::backend::{Backend, Blocking, Capabilities, Contender, Held};
use crate::exit_codes::{self, Failure};
use crate::platform::{AsRawFd as _, BorrowedFd, RawFd};
use crate::record::{ChildRecord, Record};
use std::path::{Path, PathBuf};

/// One file of the set, and which of the names given it stands for.
struct Member {
    backend: FileBackend,
    /// Indexes into [`LockSet::names`]: more than one for a file named
    /// twice or through a hard link.
    names: Vec<usize>,
}

pub struct LockSet {
    /// In the one order, one per file.
    members: Vec<Member>,
    /// How many members, from the first, are held now.
    taken: usize,
    /// The member the last attempt found busy, for the messages.
    busy: usize,
    /// Every lock file as given, the run's LOCKFILE first: `absolute` is
    /// what records name (and where no identity is known, what sorts),
    /// `label` what messages show.
    names: Vec<Name>,
}

struct Name {
    absolute: String,
    label: String,
}

impl LockSet {
    /// Opens LOCKFILE (`opening.path`) and every `--also` file, as a plain
    /// run opens its one (the same refusals, the same options).
    pub fn open(
        opening: &Opening,
        also: &[PathBuf],
        absolute: fn(&Path) -> PathBuf,
    ) -> Result<LockSet, Failure> {
        let mut members = Vec::with_capacity(also.len() + 1);
        let mut names = Vec::with_capacity(also.len() + 1);
        for (i, path) in std::iter::once(opening.path)
            .chain(also.iter().map(PathBuf::as_path))
            .enumerate()
        {
            let backend = FileBackend::open(&Opening { path, ..*opening })?;
            names.push(Name {
                absolute: absolute(path).to_string_lossy().into_owned(),
                label: crate::display::escape(&path.to_string_lossy()),
            });
            members.push(Member {
                backend,
                names: vec![i],
            });
        }
        let mut set = LockSet {
            members,
            taken: 0,
            busy: 0,
            names,
        };
        set.arrange();
        Ok(set)
    }

    /// Sorts the members into the one order and merges those that are one
    /// file. Only while nothing is held: a merged member's handle is
    /// closed.
    fn arrange(&mut self) {
        let names = &self.names;
        let key = |m: &Member| {
            let id = m.backend.identity();
            let name = m.names.first().map(|&i| names[i].absolute.clone());
            (id.is_none(), id, name)
        };
        self.members.sort_by_cached_key(key);
        let mut merged: Vec<Member> = Vec::with_capacity(self.members.len());
        for member in self.members.drain(..) {
            match merged.last_mut() {
                Some(last)
                    if last.backend.identity().is_some()
                        && last.backend.identity() == member.backend.identity() =>
                {
                    last.names.extend(member.names);
                }
                _ => merged.push(member),
            }
        }
        self.members = merged;
        self.taken = 0;
        self.busy = 0;
    }

    /// The member that stands for LOCKFILE, whose record is the run's.
    fn primary(&self) -> usize {
        self.members
            .iter()
            .position(|m| m.names.contains(&0))
            .unwrap_or(0)
    }

    /// What the record of `member` names as the rest of the set: every
    /// other file as given (absolute), each once, in the order given.
    fn others_of(&self, member: usize) -> Vec<String> {
        let own = &self.members[member].names;
        let mut others: Vec<String> = Vec::new();
        for (i, name) in self.names.iter().enumerate() {
            if !own.contains(&i) && !others.contains(&name.absolute) {
                others.push(name.absolute.clone());
            }
        }
        others
    }

    /// LOCKFILE's record's `also`.
    pub fn also_of_primary(&self) -> Vec<String> {
        self.others_of(self.primary())
    }

    fn label_of(&self, member: usize) -> &str {
        let first = self.members[member].names.first().copied().unwrap_or(0);
        &self.names[first].label
    }

    fn busy_member(&self) -> usize {
        self.busy.min(self.members.len().saturating_sub(1))
    }

    /// Lets go of every member: the wait ended without the whole set, or
    /// a member was replaced and the order must be worked out again.
    fn let_go(&mut self) {
        for member in &mut self.members {
            member.backend.undo();
        }
        self.taken = 0;
    }
}

impl Contender for LockSet {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        while self.taken < self.members.len() {
            if !self.members[self.taken].backend.try_acquire()? {
                self.busy = self.taken;
                return Ok(false);
            }
            self.taken += 1;
        }
        Ok(true)
    }

    /// The helper thread waits for the busy member and then for each one
    /// after it, in order, each a kernel wait on its own duplicate
    /// handle (a lock taken through it is the member's own). On Unix the
    /// interrupt signal ends whichever wait it is in (EINTR); on Windows
    /// nothing ends one, and a wait that ends without the set leaves the
    /// helper behind (`answers_interrupt`). What it had taken by then is
    /// let go of by the main thread (`undo`, `give_up`), which never
    /// learns how far it got and need not.
    fn blocking(&mut self) -> Result<Blocking, Failure> {
        let mut waits = Vec::with_capacity(self.members.len() - self.taken);
        for member in &mut self.members[self.taken..] {
            waits.push(member.backend.blocking()?);
        }
        Ok(Box::new(move || {
            for wait in waits {
                wait()?;
            }
            Ok(())
        }))
    }

    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        while self.taken < self.members.len() {
            self.busy = self.taken;
            match self.members[self.taken].backend.block_here()? {
                Ok(()) => self.taken += 1,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(()))
    }

    /// As the members' lock call does (they are all one backend's).
    fn answers_interrupt(&self) -> bool {
        self.members
            .first()
            .is_none_or(|m| m.backend.answers_interrupt())
    }

    fn undo(&mut self) {
        self.let_go();
    }

    /// Every member is held (by this thread or the helper). One that was
    /// replaced or deleted meanwhile (Unix: Windows refuses both while
    /// lockrun has the file open) has been opened again by its path, a
    /// new file with its own place in the order: let go of all of them
    /// and contend again from the start, in the new order.
    fn confirm(&mut self) -> Result<bool, Failure> {
        self.taken = self.members.len();
        let mut replaced = false;
        for member in &mut self.members {
            replaced |= !member.backend.confirm()?;
        }
        if replaced {
            self.let_go();
            self.arrange();
        }
        Ok(!replaced)
    }

    fn holder(&mut self) -> Option<String> {
        self.members.get_mut(self.busy)?.backend.holder()
    }

    fn conflict_holder(&mut self) -> String {
        let busy = self.busy_member();
        self.members[busy].backend.conflict_holder()
    }

    fn conflict_held(&mut self) -> String {
        let busy = self.busy_member();
        self.members[busy].backend.conflict_held()
    }

    fn busy_label(&self) -> Option<String> {
        Some(self.label_of(self.busy_member()).to_owned())
    }

    fn none_held_note(&self) -> Option<String> {
        let busy = self.busy_member();
        let others: Vec<&str> = (0..self.members.len())
            .filter(|&m| m != busy)
            .map(|m| self.label_of(m))
            .collect();
        Some(format!(
            "it is taken together with {} (--also), and lockrun holds none of them",
            others.join(", ")
        ))
    }

    fn last_record(&mut self) -> Option<Record> {
        let primary = self.primary();
        self.members[primary].backend.last_record()
    }
}

impl Backend for LockSet {
    type Held = SetHeld;
    const CAPS: Capabilities = FileBackend::CAPS;

    /// The member whose lock call was refused says why (a file system's
    /// refusal has its own status); else the set fails as its backend does.
    fn failure_status(&self) -> u8 {
        self.members
            .iter()
            .find_map(|m| m.backend.refused_status())
            .or_else(|| self.members.first().map(|m| m.backend.failure_status()))
            .unwrap_or(exit_codes::OS_ERROR)
    }

    /// A wait that ended without the whole set lets go of what it had
    /// before lockrun says so. Closing the handles is not enough: a
    /// helper left behind holds duplicates of them (on Windows, kept open
    /// until lockrun exits).
    fn give_up(mut self) {
        self.let_go();
    }

    fn acquired(self, record: Option<&Record>, verbose: bool) -> Result<SetHeld, Failure> {
        let primary = self.primary();
        // -v's line names the whole set, LOCKFILE first.
        let label = match self.names.split_first() {
            Some((first, rest)) if !rest.is_empty() => {
                let rest: Vec<&str> = rest.iter().map(|n| n.label.as_str()).collect();
                format!("{} (with {})", first.label, rest.join(", "))
            }
            _ => String::new(),
        };
        let also: Vec<Vec<String>> = (0..self.members.len()).map(|m| self.others_of(m)).collect();
        let mut members = Vec::with_capacity(self.members.len());
        for (member, also) in self.members.into_iter().zip(also) {
            members.push((member.backend.acquired(record, verbose)?, also));
        }
        Ok(SetHeld {
            members,
            primary,
            label,
        })
    }
}

/// The whole set, held: each member with what its record names as the
/// others.
pub struct SetHeld {
    members: Vec<(FileHeld, Vec<String>)>,
    primary: usize,
    /// What -v's "took the lock" line names: every file of the set.
    label: String,
}

fn record_for(record: &Record, also: &[String]) -> Record {
    Record {
        also: Some(also.to_vec()),
        ..record.clone()
    }
}

impl Held for SetHeld {
    fn held_label(&self) -> Option<&str> {
        Some(self.label.as_str()).filter(|l| !l.is_empty())
    }

    /// LOCKFILE's record: the run's own, written before the command runs
    /// (by its process before its exec on Unix, while it is suspended on
    /// Windows).
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.members.get(self.primary)?.0.child_record_fd()
    }

    /// Every other member's record, the run's with its own `also`, written
    /// at the same moment: all of them name the command before it runs,
    /// as LOCKFILE's does.
    fn more_child_records(&self, record: &Record) -> Vec<(ChildRecord, RawFd)> {
        self.members
            .iter()
            .enumerate()
            .filter(|&(m, _)| m != self.primary)
            .filter_map(|(_, (held, also))| {
                let fd = held.child_record_fd()?.as_raw_fd();
                let child = ChildRecord::new(&record_for(record, also), &held.label);
                Some((child, fd))
            })
            .collect()
    }

    /// Each member's record is the run's with its own `also`. A member
    /// other than LOCKFILE that cannot be written is said here, with its
    /// name; LOCKFILE's failure goes back to the run flow, which says it.
    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        let mut result = Ok(());
        for (m, (held, also)) in self.members.iter_mut().enumerate() {
            match held.store_record(&record_for(record, also), released) {
                Err(e) if m == self.primary => result = Err(e),
                Err(e) if !e.is_empty() => crate::say!(
                    "lockrun: could not write the holder record to {}: {e} (the lock itself is unaffected)",
                    held.label
                ),
                _ => {}
            }
        }
        result
    }

    /// Whatever holds any member through lockrun's handles: what
    /// `--max-time` stops holds the whole set (Unix; on Windows the
    /// command inherits no handle and the job is what is stopped).
    fn inheritors(&self) -> Option<crate::backend::Inheritors> {
        let finders: Vec<crate::backend::Inheritors> = self
            .members
            .iter()
            .filter_map(|(held, _)| held.inheritors())
            .collect();
        if finders.is_empty() {
            return None;
        }
        Some(Box::new(move |command| {
            let mut found: Vec<i32> = finders.iter().flat_map(|find| find(command)).collect();
            found.sort_unstable();
            found.dedup();
            found
        }))
    }

    fn release(self) -> Result<(), String> {
        for (held, _) in self.members {
            held.release()?;
        }
        Ok(())
    }
}
