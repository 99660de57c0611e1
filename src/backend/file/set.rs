//! `--also`: several lock files held together while the command runs, all
//! of them or none.
//!
//! # How the set is taken, and why it cannot deadlock
//!
//! The files are opened first, and one member is kept per inode (a file
//! named twice, or through a hard link, is one lock: a second open file
//! description of an inode this process has locked would wait for itself
//! for ever). The members are sorted by (device, inode), the one order
//! every lockrun computes for the same files whatever order they were
//! named in. They are then taken strictly in that order:
//!
//! 1. non-blocking attempts from the first member on, keeping each one
//!    got, up to the first busy one (the uncontended set costs one
//!    `flock` per file and nothing else);
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
use crate::backend::{Backend, Blocking, Capabilities, Contender, Held, Inheritors};
use crate::exit_codes::{self, Failure};
use crate::persona;
use crate::platform::{AsRawFd, BorrowedFd, RawFd};
use crate::record::{ChildRecord, Record};
use std::path::{Path, PathBuf};

/// One inode of the set, and which of the names given it stands for.
struct Member {
    backend: FileBackend,
    /// Indexes into [`LockSet::names`]: more than one for a file named
    /// twice or through a hard link.
    names: Vec<usize>,
}

impl Member {
    fn identity(&self) -> (u64, u64) {
        self.backend.lock().identity()
    }
}

pub struct LockSet {
    /// Sorted by (device, inode), one per inode.
    members: Vec<Member>,
    /// How many members, from the first, are held now.
    taken: usize,
    /// The member the last attempt found busy, for the messages.
    busy: usize,
    /// Every lock file as given, the run's LOCKFILE first: `absolute` is
    /// what records name, `label` what messages show.
    names: Vec<Name>,
}

struct Name {
    absolute: String,
    label: String,
}

impl LockSet {
    /// Opens LOCKFILE (`opening.path`) and every `--also` file, as a plain
    /// run opens its one (the same safety rules, the same `-o`).
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
            let backend = FileBackend::open(&Opening {
                path,
                spec: opening.spec,
                mode: opening.mode,
                inherit: opening.inherit,
                verbose: opening.verbose,
                command: opening.command,
                waits: opening.waits,
            })?;
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

    /// Sorts the members into the one global order and merges those that
    /// are one inode. Only while nothing is held: a merged member's
    /// descriptor is closed.
    fn arrange(&mut self) {
        self.members.sort_by_key(Member::identity);
        let mut merged: Vec<Member> = Vec::with_capacity(self.members.len());
        for member in self.members.drain(..) {
            match merged.last_mut() {
                Some(last) if last.identity() == member.identity() => {
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
    /// descriptor (a lock taken through it is the member's own). The
    /// interrupt signal ends whichever wait it is in (EINTR); what it had
    /// taken by then is let go of by the main thread (`undo`, or the
    /// descriptors' closing on `give_up`), which never learns how far it
    /// got and need not.
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

    fn undo(&mut self) {
        self.let_go();
    }

    /// Every member is held (by this thread or the helper). One that was
    /// replaced or deleted meanwhile has been opened again by its path, a
    /// new inode with its own place in the order: let go of all of them
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
        let busy = self.busy.min(self.members.len().saturating_sub(1));
        self.members[busy].backend.conflict_holder()
    }

    fn conflict_held(&mut self) -> String {
        let busy = self.busy.min(self.members.len().saturating_sub(1));
        self.members[busy].backend.conflict_held()
    }

    fn busy_label(&self) -> Option<String> {
        let busy = self.busy.min(self.members.len().saturating_sub(1));
        Some(self.label_of(busy).to_owned())
    }

    fn none_held_note(&self) -> Option<String> {
        let busy = self.busy.min(self.members.len().saturating_sub(1));
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

    fn failure_status(&self) -> u8 {
        self.members
            .iter()
            .find_map(|m| m.backend.refused)
            .unwrap_or_else(|| persona::lock_failed(exit_codes::OS_ERROR))
    }

    fn give_up(self) {}

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

impl SetHeld {
    fn record_for(record: &Record, also: &[String]) -> Record {
        Record {
            also: Some(also.to_vec()),
            ..record.clone()
        }
    }
}

impl Held for SetHeld {
    fn held_label(&self) -> Option<&str> {
        Some(self.label.as_str()).filter(|l| !l.is_empty())
    }

    /// LOCKFILE's record: the run's own, written by the command's process.
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.members.get(self.primary)?.0.child_record_fd()
    }

    /// Every other member's record, the run's with its own `also`, also
    /// written by the command's process before its exec: all of them name
    /// the command before it runs, as LOCKFILE's does.
    fn more_child_records(&self, record: &Record) -> Vec<(ChildRecord, RawFd)> {
        self.members
            .iter()
            .enumerate()
            .filter(|&(m, _)| m != self.primary)
            .filter_map(|(_, (held, also))| {
                let fd = held.child_record_fd()?.as_raw_fd();
                let child = ChildRecord::new(&SetHeld::record_for(record, also), &held.label);
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
            let outcome = held.store_record(&SetHeld::record_for(record, also), released);
            match outcome {
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

    /// Whatever holds any member through lockrun's descriptors: what
    /// `--max-time` stops holds the whole set.
    fn inheritors(&self) -> Option<Inheritors> {
        let finders: Vec<Inheritors> = self
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
