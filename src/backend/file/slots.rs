//! `--slots N`: at most N commands hold a lock file at once.
//!
//! The kernel has no "wait for any one of N locks", so the wait is built
//! from plain flock(2) locks, all of them kernel waits:
//!
//! - `LOCKFILE.slot1` .. `LOCKFILE.slotN` are the slots: an exclusive flock
//!   on one is a place among the N. Each is an ordinary lock file (opened
//!   as [`LockFile::open`] opens any lock file, never deleted) and holds
//!   its holder's record with the usual rules. The command inherits only
//!   its own slot's descriptor, so killing lockrun leaves the slot held by
//!   the command, and killing the command (even with SIGKILL) frees it.
//! - `LOCKFILE` itself is the queue: a waiter first takes an exclusive
//!   flock on it, a kernel wait, so waiters sleep there and are served in
//!   about the order they came, and only the head of the queue contends
//!   for the slots: a crowd of 200 does not stampede on every release.
//!   The head tries each slot without waiting; when all are full it waits
//!   in the kernel on all of them at once, one helper thread blocked in
//!   flock(2) per slot, and sleeps in poll(2) (on the main thread when it
//!   waits for ever with nothing to show, else on the waiter's helper
//!   thread) until the first of them has its slot. The others are interrupted (the waiter's own interrupt
//!   signal: flock returns EINTR), not waited for, and any slot they get
//!   from then on goes back at once, on their threads. With its slot, the
//!   head lets go of the queue.
//! - `LOCKFILE`'s content is the N every contender must agree on, and who
//!   set it ([`SlotsHeader`]), written under the queue lock by the first
//!   contender that finds the file empty (or holding a plain record of
//!   ours; never over anything else). A contender giving another N is
//!   refused with a usage error naming both.
//!
//! Waiters and the head use no CPU while they wait: every thread sleeps in
//! the kernel until a lock is released (the waiter's main thread looks at
//! the clock 4 times a second when it has a deadline or a status line).
//! Slot files opened for an N that turns out to disagree are left behind
//! empty, as every lock file is.
//!
//! A head that is stopped (SIGSTOP, Ctrl-Z) keeps the queue lock, and
//! nothing it runs can let go while it is stopped: it leaves a keeper
//! process beside it for the wait (`platform::Keeper`), which lets go of
//! the queue for it when it sees it stopped.
//!
//! A lockrun without `--slots` on LOCKFILE would hold only the queue, and
//! run beside the slots' holders: it sees the header and is refused
//! ([`plain_refused`], called from the plain file backend).
//!
//! A contender that will not wait (`-n`, `-w 0`) and finds the queue taken
//! tries the slots directly: a waiter at the head of the queue holds it
//! for as long as all slots are full, and `-n` must answer from the slots,
//! not from the queue.

use super::Opening;
use super::lock::{LockFile, LockMode};
use super::{FileBackend, FileHeld};
use crate::backend::{Backend, Capabilities, Held};
use crate::backend::{Blocking, Contender};
pub use crate::backend::{MAX_SLOTS, NO_ONE_LAST_RUN};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::identity::Me;
use crate::platform::BorrowedFd;
use crate::record::{self, Record, SlotsHeader};
use std::ffi::OsString;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct SlotsBackend {
    inner: Arc<Inner>,
    /// LOCKFILE, and the command (for the record of whoever sets N): to
    /// open every file again when one is replaced while we wait.
    path: std::path::PathBuf,
    command: Vec<OsString>,
    verbose: bool,
    /// `-o`: whether the command inherits its slot's descriptor.
    inherit: bool,
    /// A contender that will not wait answers from the slots themselves.
    jump_queue: bool,
    /// The descriptor limit before it was raised to open every slot.
    saved_nofile: Option<crate::platform::DescriptorLimit>,
}

/// What the waiting helper threads share with the contender.
struct Inner {
    queue: LockFile,
    slots: Vec<LockFile>,
    n: u16,
    label: String,
    /// The header this contender writes when `LOCKFILE` has none.
    header: Vec<u8>,
    /// The slot taken (0-based), once one is.
    chosen: Mutex<Option<usize>>,
    /// The exit status of the last failure: 64 for a disagreeing N.
    status: AtomicU8,
    /// The other slots' helper threads, left to end while the command
    /// starts (see `wait_any`).
    leftover: Mutex<Option<Leftover>>,
}

/// What is left to do of the other slots' helper threads once a slot is
/// taken: done when the command has started, or when dropped.
struct Leftover(Option<Box<dyn FnOnce() + Send>>);

impl Leftover {
    fn finish(&mut self) {
        if let Some(finish) = self.0.take() {
            finish();
        }
    }
}

impl Drop for Leftover {
    fn drop(&mut self) {
        self.finish();
    }
}

impl SlotsBackend {
    pub fn open(opts: &Opening, n: u16) -> Result<SlotsBackend, Failure> {
        let saved_nofile = room_for(n);
        Ok(SlotsBackend {
            inner: Arc::new(Inner::open(opts.path, n, opts.command)?),
            path: opts.path.to_owned(),
            command: opts.command.to_vec(),
            verbose: opts.verbose,
            inherit: opts.inherit,
            jump_queue: !opts.waits,
            saved_nofile,
        })
    }
}

impl Inner {
    /// Opens LOCKFILE (the queue) and every slot file, refusing a
    /// disagreeing N before any wait.
    fn open(path: &std::path::Path, n: u16, command: &[OsString]) -> Result<Inner, Failure> {
        let label = display::escape(&path.to_string_lossy());
        let queue = LockFile::open(path, false)?;
        if queue.is_dir {
            return Err(Failure::new(
                exit_codes::USAGE,
                format!("--slots needs a lock file, and {label} is a directory"),
            ));
        }
        // A disagreeing N is refused before any wait; checked again under
        // the queue lock, where the first contender writes it.
        if let Ok(content) = record::read_content(queue.file())
            && let Some(header) = SlotsHeader::parse(&content)
        {
            same_n(&header, n, &label)?;
        }
        let slots = (1..=n)
            .map(|k| LockFile::open(&record::slot_path(path, k), false))
            .collect::<Result<Vec<_>, _>>()?;
        let cwd = std::env::current_dir().ok();
        let mut set_by =
            Record::starting(Me::gather(), command, cwd.as_deref(), LockMode::Exclusive);
        set_by.acquired_at = Some(display::now_rfc3339());
        let header = SlotsHeader {
            lockrun_slots: 1,
            slots: n,
            set_by: Some(set_by),
        }
        .to_line();
        Ok(Inner {
            queue,
            slots,
            n,
            label,
            header,
            chosen: Mutex::new(None),
            status: AtomicU8::new(exit_codes::OS_ERROR),
            leftover: Mutex::new(None),
        })
    }
}

/// Raises the soft descriptor limit when N slots would not fit under it;
/// returns the limit to restore before the command starts.
fn room_for(n: u16) -> Option<crate::platform::DescriptorLimit> {
    crate::platform::make_room_for_descriptors(u64::from(n))
}

fn same_n(header: &SlotsHeader, n: u16, label: &str) -> Result<(), Failure> {
    if header.slots == n {
        return Ok(());
    }
    Err(Failure::new(
        exit_codes::USAGE,
        format!(
            "{label} is used with --slots {} (set by {}), not --slots {n}: \
             every contender must give the same number",
            header.slots,
            set_by(header)
        ),
    ))
}

/// Who wrote N into LOCKFILE, as its header says.
fn set_by(header: &SlotsHeader) -> String {
    let Some(set_by) = &header.set_by else {
        return "an unknown process".to_owned();
    };
    let mut who = format!(
        "lockrun pid {} `{}`",
        set_by.lockrun_pid.unwrap_or(0),
        display::record_command(set_by)
    );
    if let Some(host) = &set_by.host {
        who.push_str(&format!(" on {}", display::escape(host)));
    }
    if let Some(at) = set_by.acquired_at.as_deref().and_then(display::parse_time) {
        who.push_str(&format!(" at {}", display::date_time(at)));
    }
    who
}

/// A lockrun without `--slots` on a LOCKFILE used with `--slots N`: its
/// lock on LOCKFILE excludes none of the slot holders, who hold the slot
/// files, so it would run beside them. Refused as a usage error (64), as
/// on lock URLs, naming N and the slots' holders (read from the slot files
/// without creating any: a refusal must leave nothing behind).
pub fn plain_refused(path: &std::path::Path, label: &str, header: &SlotsHeader) -> Failure {
    let held: Vec<String> = (1..=header.slots)
        .filter_map(|k| {
            let holder = super::holder::held_by_path(&record::slot_path(path, k))?;
            Some(format!("slot {k}: {holder}"))
        })
        .collect();
    let now = if held.is_empty() {
        "no slot is held now".to_owned()
    } else {
        format!(
            "held now by {} (one per slot: {})",
            match held.len() {
                1 => "1 command".to_owned(),
                n => format!("{n} commands"),
            },
            held.join("; ")
        )
    };
    Failure::new(
        exit_codes::USAGE,
        format!(
            "{label} is used with --slots {} (set by {}; {now}): a lock without --slots \
             would run beside the slots' holders. Give --slots {} as they do, or use another lock file",
            header.slots,
            set_by(header),
            header.slots
        ),
    )
}

impl Inner {
    fn os_error(&self, lock: &LockFile, what: &str, e: &io::Error) -> Failure {
        self.status.store(exit_codes::OS_ERROR, SeqCst);
        Failure::io(exit_codes::OS_ERROR, what, lock.path(), e)
    }

    fn refused(&self, failure: Failure) -> Failure {
        self.status.store(failure.status, SeqCst);
        failure
    }

    /// With the queue lock held: N is agreed, and written if `LOCKFILE`
    /// has none yet.
    fn agree(&self) -> Result<(), Failure> {
        let content = record::read_content(self.queue.file())
            .map_err(|e| self.os_error(&self.queue, "cannot read", &e))?;
        if let Some(header) = SlotsHeader::parse(&content) {
            return same_n(&header, self.n, &self.label).map_err(|f| self.refused(f));
        }
        // LOCKFILE replaced (or deleted) since we opened it, before anyone
        // wrote N into it: ours is no longer the queue, and writing to the
        // path would write into someone else's file. Not a refusal: take a
        // slot through the old files as they are, and `confirm` then finds
        // the queue moved, lets go and contends again through the file now
        // at that path, which checks or writes N (issue 26 item 15).
        if !self.queue.is_at(self.queue.path()) {
            return Ok(());
        }
        let file = super::may_write(&self.queue).map_err(|reason| {
            self.refused(Failure::new(
                exit_codes::NO_PERMISSION,
                format!(
                    "cannot use {} with --slots, which keeps the number of slots in it: {}",
                    self.label,
                    reason.explain()
                ),
            ))
        })?;
        crate::platform::tolerating_file_size_limit(|| record::write(&file, &self.header, None))
            .map_err(|e| self.os_error(&self.queue, "cannot write the number of slots to", &e))
    }

    /// One attempt on each slot, lowest first, without waiting.
    fn try_slots(&self) -> Result<bool, Failure> {
        for (i, slot) in self.slots.iter().enumerate() {
            let got = slot
                .try_lock(LockMode::Exclusive)
                .map_err(|e| self.os_error(slot, "cannot lock", &e))?;
            if got {
                self.choose(i);
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn choose(&self, slot: usize) {
        if let Ok(mut chosen) = self.chosen.lock() {
            *chosen = Some(slot);
        }
    }

    fn chosen(&self) -> Option<usize> {
        self.chosen.lock().ok().and_then(|mut c| c.take())
    }

    /// At the head of the queue: agree on N, then take a slot.
    fn at_head(&self) -> Result<bool, Failure> {
        self.agree()?;
        self.try_slots()
    }

    /// The blocking wait: queue, then slot. `interruptible` on the
    /// waiter's helper thread; on the main thread a signal ends lockrun.
    fn wait_turn(self: &Arc<Inner>, interruptible: bool) -> Result<(), Failure> {
        self.queue
            .lock(LockMode::Exclusive)
            .map_err(|e| self.os_error(&self.queue, "cannot lock", &e))?;
        let result = match self.at_head() {
            Ok(true) => Ok(()),
            Ok(false) => {
                // Lets go of the queue for us if we are stopped while we
                // wait (issue 26 item 6). Without one (fork failed), a
                // stopped head keeps the queue, as it did before.
                let keeper =
                    crate::platform::Keeper::start(crate::platform::AsFd::as_fd(self.queue.file()))
                        .ok();
                let got = self.wait_any(interruptible).map(|slot| self.choose(slot));
                drop(keeper);
                got
            }
            Err(failure) => Err(failure),
        };
        // Next in the queue: the slots are its to contend for now.
        let _ = self.queue.unlock();
        result
    }

    /// Waits in the kernel on every slot at once and takes the first that
    /// frees; returns it. With `interruptible` (on the waiter's helper
    /// thread), ends early when this thread is interrupted (EINTR),
    /// letting go of any slot got in that instant.
    fn wait_any(self: &Arc<Inner>, interruptible: bool) -> Result<usize, Failure> {
        use crate::platform::{Bell, Helpers};
        let local = |e: io::Error| {
            self.status.store(exit_codes::OS_ERROR, SeqCst);
            Failure::new(
                exit_codes::OS_ERROR,
                format!("cannot wait for a slot of {}: {e}", self.label),
            )
        };
        // Each slot's thread rings it when its flock returns.
        let bell = Arc::new(Bell::new().map_err(&local)?);
        let inner = Arc::clone(self);
        let mut waiters = Helpers::new(Arc::clone(&bell), self.slots.len(), move |slot, got| {
            // Answered too late (the wait ended): not ours to keep.
            if let Ok(()) = got {
                let _ = inner.slots[slot].unlock();
            }
        });
        let mut failed = None;
        for slot in 0..self.slots.len() {
            let inner = Arc::clone(self);
            if let Err(e) = waiters.start("slot-wait", move || {
                inner.slots[slot].lock(LockMode::Exclusive)
            }) {
                failed = Some(local(e));
                break;
            }
        }
        let mut interrupted = false;
        if failed.is_none() {
            loop {
                match bell.wait(None) {
                    Ok(Some(_)) => break,
                    // EINTR: on the waiter's helper thread, the waiter's
                    // interrupt. (On the main thread a signal ends lockrun
                    // in its handler.)
                    Ok(None) if interruptible => {
                        interrupted = true;
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        failed = Some(local(e));
                        break;
                    }
                }
            }
        }
        // The others stop waiting; a slot they got meanwhile goes back.
        // With a slot answered, they are interrupted and not waited for:
        // the command starts while they wake and exit (their waking,
        // answering and being joined was a second round of wake-ups
        // between the release and the command), and a slot one of them
        // gets from now on is let go of at once on its thread (the `late`
        // above). A wait that ended without a slot waits for them, as it
        // must not return while a helper may still take one.
        let answers = if interrupted || failed.is_some() {
            waiters.finish(Duration::from_secs(1))
        } else {
            let (came, rest) = waiters.abandon();
            // Once the command runs (or the slot is let go of): any helper
            // the interrupt missed is interrupted again until it returns.
            if let Ok(mut leftover) = self.leftover.lock() {
                *leftover = Some(Leftover(Some(Box::new(move || {
                    rest.finish(Duration::from_secs(1))
                }))));
            }
            came
        };
        let mut got = Vec::new();
        let mut error = None;
        for (slot, answer) in answers {
            match answer {
                Ok(()) => got.push(slot),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    error.get_or_insert((slot, e));
                }
            }
        }
        let won = got
            .first()
            .copied()
            .filter(|_| !interrupted && failed.is_none());
        for &slot in got.iter().filter(|&&slot| Some(slot) != won) {
            let _ = self.slots[slot].unlock();
        }
        if let Some(failure) = failed {
            return Err(failure);
        }
        won.ok_or_else(|| match error {
            Some((slot, e)) => self.os_error(&self.slots[slot], "cannot lock", &e),
            None => local(io::Error::from(io::ErrorKind::Interrupted)),
        })
    }

    /// Ends the other slots' helper threads now, on this thread (the
    /// slot taken is let go of, or the command will not start): not left
    /// to whichever thread drops the last reference to `self`, which may
    /// be one of those helpers.
    fn finish_leftover(&self) {
        let leftover = self.leftover.lock().ok().and_then(|mut l| l.take());
        if let Some(mut leftover) = leftover {
            leftover.finish();
        }
    }

    /// The slots' holders, as their records name them.
    fn holders(&self) -> Vec<String> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                Some(format!("slot {}: {}", i + 1, super::holder::held_by(slot)?))
            })
            .collect()
    }
}

impl Contender for SlotsBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        let inner = &self.inner;
        let queue_free = inner
            .queue
            .try_lock(LockMode::Exclusive)
            .map_err(|e| inner.os_error(&inner.queue, "cannot lock", &e))?;
        if queue_free {
            let got = inner.at_head();
            let _ = inner.queue.unlock();
            return got;
        }
        if !self.jump_queue {
            return Ok(false);
        }
        let content = record::read_content(inner.queue.file())
            .map_err(|e| inner.os_error(&inner.queue, "cannot read", &e))?;
        match SlotsHeader::parse(&content) {
            Some(header) => {
                same_n(&header, inner.n, &inner.label).map_err(|f| inner.refused(f))?;
                inner.try_slots()
            }
            // The first contender is writing it: it takes a slot first.
            None => Ok(false),
        }
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        let inner = Arc::clone(&self.inner);
        Ok(Box::new(move || inner.wait_turn(true)))
    }

    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        // The main thread waits itself: one thread fewer between a slot's
        // release and the command's start.
        Some(self.inner.wait_turn(false))
    }

    fn undo(&mut self) {
        if let Some(slot) = self.inner.chosen() {
            let _ = self.inner.slots[slot].unlock();
        }
        self.inner.finish_leftover();
    }

    /// The classic lock-file loop, for the slot taken and the queue it was
    /// taken through: a slot file replaced or deleted while we waited
    /// leaves us holding an inode that excludes nobody who opens the path
    /// now (two commands in one slot), and a replaced LOCKFILE is a queue,
    /// and a number of slots, that newcomers no longer see. Either way, let
    /// go and contend again through the files now at those paths.
    fn confirm(&mut self) -> Result<bool, Failure> {
        let inner = &self.inner;
        let Some(index) = inner.chosen() else {
            return Ok(true);
        };
        let slot = &inner.slots[index];
        let moved = [slot, &inner.queue]
            .into_iter()
            .find(|lock| !lock.is_at(lock.path()));
        let Some(moved) = moved else {
            inner.choose(index);
            return Ok(true);
        };
        if self.verbose {
            crate::say!(
                "lockrun: {} was replaced or deleted while lockrun waited; opening {} and its slot files again",
                display::escape(&moved.path().to_string_lossy()),
                inner.label
            );
        }
        let _ = slot.unlock();
        inner.finish_leftover();
        // The descriptor limit raised for N slots stays raised, and is
        // restored from what was saved at the first open.
        // A failure's status is what the run exits with (64 for a LOCKFILE
        // that now keeps another N), read back through `failure_status`.
        let reopened =
            Inner::open(&self.path, inner.n, &self.command).map_err(|f| inner.refused(f))?;
        self.inner = Arc::new(reopened);
        Ok(false)
    }

    fn holder(&mut self) -> Option<String> {
        let holders = self.inner.holders();
        (!holders.is_empty()).then(|| {
            format!(
                "{} commands, one per slot ({})",
                self.inner.n,
                holders.join("; ")
            )
        })
    }

    fn conflict_holder(&mut self) -> String {
        if let Some(holders) = self.holder() {
            return holders;
        }
        // No slot's record names a holder. The slots may still be full
        // (flock(1) on the slot files, another user's holders), or they
        // are free and LOCKFILE itself is held outside them (flock(1), a
        // stopped or plain contender): look without waiting, letting go at
        // once of anything got, rather than claim N holders that are not
        // there.
        let inner = &self.inner;
        let ask = format!("`lockrun holder {}` names", inner.label);
        let queue_held = match inner.queue.try_lock(LockMode::Exclusive) {
            Ok(true) => {
                let _ = inner.queue.unlock();
                false
            }
            Ok(false) => true,
            Err(_) => false,
        };
        let free_slot = queue_held
            && inner
                .slots
                .iter()
                .any(|slot| match slot.try_lock(LockMode::Exclusive) {
                    Ok(true) => {
                        let _ = slot.unlock();
                        true
                    }
                    _ => false,
                });
        if free_slot {
            return format!(
                "a process holding {} itself, outside the slots, while a slot is free \
                 (waiters queue behind it; {ask} it)",
                inner.label
            );
        }
        format!("{} commands, one per slot ({ask} them)", inner.n)
    }
}

impl Backend for SlotsBackend {
    type Held = SlotHeld;
    const CAPS: Capabilities = Capabilities {
        kind: "lock files with --slots",
        shared: false,
        exec_in_place: false,
        poll: true,
        lease: false,
        byte_ranges: true,
        slots: true,
        stays_to: "",
        woken_by: "",
        last_record: Err(NO_ONE_LAST_RUN),
    };

    fn failure_status(&self) -> u8 {
        self.inner.status.load(SeqCst)
    }

    fn give_up(self) {}

    fn acquired(self, record: Option<&Record>, verbose: bool) -> Result<SlotHeld, Failure> {
        let inner = &self.inner;
        let Some(index) = inner.chosen() else {
            return Err(Failure::new(
                exit_codes::OS_ERROR,
                format!("lost track of the slot taken on {}", inner.label),
            ));
        };
        let original = &inner.slots[index];
        // The duplicate shares the open file description, hence the lock;
        // every other slot's descriptor closes when `inner` goes.
        let lock = original
            .duplicate()
            .map_err(|e| inner.os_error(original, "cannot lock", &e))?;
        if self.inherit {
            crate::platform::set_inheritable(crate::platform::AsFd::as_fd(lock.file()))
                .map_err(|e| inner.os_error(original, "cannot pass on", &e))?;
        }
        if let Some(old) = self.saved_nofile {
            old.restore();
        }
        let slot = index as u16 + 1;
        let label = display::escape(&lock.path().to_string_lossy());
        if verbose {
            crate::say!(
                "lockrun: took slot {slot} of {} on {} ({label})",
                inner.n,
                inner.label
            );
        }
        let file = FileBackend::slot(lock, label, self.inherit, verbose);
        let leftover = inner.leftover.lock().ok().and_then(|mut l| l.take());
        Ok(SlotHeld {
            held: file.acquired(record, verbose)?,
            slot,
            leftover,
        })
    }
}

/// A slot held for the command: a slot file held as any lock file is, and
/// the slot's number for the command.
pub struct SlotHeld {
    held: FileHeld,
    slot: u16,
    /// The other slots' helper threads, finished once the command runs.
    leftover: Option<Leftover>,
}

impl Held for SlotHeld {
    fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![("LOCKRUN_SLOT", OsString::from(self.slot.to_string()))]
    }

    fn held_label(&self) -> Option<&str> {
        Some(&self.held.label)
    }

    fn child_record_fd(&self) -> Option<BorrowedFd<'_>> {
        self.held.child_record_fd()
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        self.held.store_record(record, released)
    }

    fn inheritors(&self) -> Option<crate::backend::Inheritors> {
        self.held.inheritors()
    }

    fn searches_descendants(&self) -> bool {
        self.held.searches_descendants()
    }

    fn command_started(&mut self, _pid: i32) {
        if let Some(mut leftover) = self.leftover.take() {
            leftover.finish();
        }
    }

    fn release(self) -> Result<(), String> {
        self.held.release()
    }
}
