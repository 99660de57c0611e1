//! `--also` on Windows: several lock files held together while the
//! command runs, all of them or none, taken as the Unix set is
//! (src/backend/file/set.rs says why this cannot deadlock): one member per
//! file (a file named twice, or through a hard link, is one lock: its
//! second handle would wait for its first for ever), sorted by the file's
//! identity (volume serial and file index, the same order for every
//! lockrun whatever order the files were named in), then taken strictly
//! in that order: non-blocking attempts up to the first busy one, then a
//! kernel wait on it and on each one after it, holding those before. When
//! the wait ends without the whole set (`-n`, the `-w` deadline) every
//! member is let go of before lockrun says so.

use super::{FileBackend, FileHeld, Opening};
use crate::backend::{Backend, Blocking, Capabilities, Contender, Held};
use crate::exit_codes::{self, Failure};
use crate::platform::{AsRawFd as _, BorrowedFd, RawFd};
use crate::record::{ChildRecord, Record};
use std::path::{Path, PathBuf};

/// One file of the set, and which of the names given it stands for.
struct Member {
    backend: FileBackend,
    /// Where it sorts: its identity, or (where Windows does not say) its
    /// absolute name after every file that has one.
    key: (Option<(u32, u64)>, String),
    /// Indexes into [`LockSet::names`].
    names: Vec<usize>,
}

pub struct LockSet {
    /// In the one order, one per file.
    members: Vec<Member>,
    /// How many members, from the first, are held now.
    taken: usize,
    /// The member the last attempt found busy, for the messages.
    busy: usize,
    /// Every lock file as given, LOCKFILE first.
    names: Vec<Name>,
}

struct Name {
    absolute: String,
    label: String,
}

impl LockSet {
    /// Opens LOCKFILE (`opening.path`) and every `--also` file, with the
    /// same refusals as one lock file.
    pub fn open(opening: &Opening, also: &[PathBuf]) -> Result<LockSet, Failure> {
        let mut members: Vec<Member> = Vec::with_capacity(also.len() + 1);
        let mut names = Vec::with_capacity(also.len() + 1);
        for (i, path) in std::iter::once(opening.path)
            .chain(also.iter().map(PathBuf::as_path))
            .enumerate()
        {
            let backend = FileBackend::open(&Opening { path, ..*opening })?;
            let absolute = absolute(path);
            let key = (backend.lock.identity(), absolute.clone());
            names.push(Name {
                absolute,
                label: crate::display::escape(&path.to_string_lossy()),
            });
            members.push(Member {
                backend,
                key,
                names: vec![i],
            });
        }
        // `None` sorts first: put the files Windows names no identity for
        // last, by name, so that two lockruns still agree.
        members.sort_by(|a, b| {
            (a.key.0.is_none(), a.key.0, &a.key.1).cmp(&(b.key.0.is_none(), b.key.0, &b.key.1))
        });
        let mut merged: Vec<Member> = Vec::with_capacity(members.len());
        for member in members {
            match merged.last_mut() {
                Some(last) if last.key.0.is_some() && last.key.0 == member.key.0 => {
                    last.names.extend(member.names);
                }
                _ => merged.push(member),
            }
        }
        Ok(LockSet {
            members: merged,
            taken: 0,
            busy: 0,
            names,
        })
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
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_owned())
        .to_string_lossy()
        .into_owned()
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

    /// The helper waits for the busy member and then for each one after
    /// it, in order, each a kernel wait on its own duplicate handle. What
    /// it took is let go of by the main thread (`undo`, or lockrun's exit
    /// when a deadline leaves the helper behind).
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

    fn answers_interrupt(&self) -> bool {
        false
    }

    /// Lets go of every member: the wait ended without the whole set.
    fn undo(&mut self) {
        for member in &mut self.members {
            member.backend.undo();
        }
        self.taken = 0;
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

    fn failure_status(&self) -> u8 {
        exit_codes::OS_ERROR
    }

    /// A wait that ended without the whole set lets go of what it had.
    fn give_up(mut self) {
        self.undo();
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

    /// LOCKFILE's record: the run's own, written while the command is
    /// suspended.
    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.members.get(self.primary)?.0.child_record_fd()
    }

    /// Every other member's record, the run's with its own `also`, written
    /// at the same moment: all of them name the command before it runs.
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

    fn release(self) -> Result<(), String> {
        for (held, _) in self.members {
            held.release()?;
        }
        Ok(())
    }
}
