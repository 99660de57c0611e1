//! `--slots N` on a Windows lock file: LOCKFILE's byte is the queue (one
//! waiter at a time contends for the slots, so a crowd does not
//! stampede), slot k is the byte in `LOCKFILE.slotK`. The queue's holder
//! tries every slot at once; if all are taken it waits on all of them, a
//! helper thread per slot, and takes the first granted (a helper granted
//! one after that lets it go). `-n` tries the slots without the queue.

use super::{FileHeld, LockFile, attempt, for_helper, keep_open, lock_error, open_lock_file};
use crate::backend::{Backend, Blocking, Capabilities, Contender};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::platform::windows::{Attempt, LOCK_OFFSET, lock_byte, unlock_byte};
use crate::record::{self, Record, SlotsHeader};
use std::fs::File;
use std::os::windows::io::AsRawHandle as _;
use std::sync::{Arc, Mutex, mpsc};

pub struct SlotsBackend {
    /// LOCKFILE: the queue's byte, and the header with N.
    queue: LockFile,
    slots: Vec<LockFile>,
    nonblocking: bool,
    label: String,
    /// The slot taken (its index), by an attempt or the helpers.
    won: Arc<Mutex<Option<usize>>>,
}

impl SlotsBackend {
    pub fn open(opening: &super::Opening, n: u16) -> Result<SlotsBackend, Failure> {
        let queue = open_lock_file(opening.path, true)?;
        same_slot_count(&queue, n)?;
        let slots = (1..=n)
            .map(|k| open_lock_file(&record::slot_path(opening.path, k), true))
            .collect::<Result<_, _>>()?;
        Ok(SlotsBackend {
            queue,
            slots,
            nonblocking: opening.nonblocking,
            label: display::escape(&opening.path.to_string_lossy()),
            won: Arc::new(Mutex::new(None)),
        })
    }

    fn won(&self) -> std::sync::MutexGuard<'_, Option<usize>> {
        // A panic on a helper must not lose the slot: read anyway.
        self.won.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Tries every slot without waiting; the index of the one taken.
fn any_free<'a>(
    slots: impl IntoIterator<Item = &'a File>,
    label: &str,
) -> Result<Option<usize>, Failure> {
    for (k, slot) in slots.into_iter().enumerate() {
        if attempt(slot, true, false, label)? {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// Every contender for one LOCKFILE gives the same N: LOCKFILE's header
/// says which, and a different N is a usage error naming both.
fn same_slot_count(main: &LockFile, n: u16) -> Result<(), Failure> {
    let content = record::read_content(&main.file).unwrap_or_default();
    if let Some(header) = SlotsHeader::parse(&content) {
        if header.slots != n {
            return Err(Failure::new(
                exit_codes::USAGE,
                format!(
                    "{} is used with --slots {}, not --slots {n}: every contender must give the same N",
                    main.path.display(),
                    header.slots
                ),
            ));
        }
        return Ok(());
    }
    if content.is_empty() && main.writable {
        let header = SlotsHeader {
            lockrun_slots: 1,
            slots: n,
            set_by: None,
        };
        // Without the header each contender still takes a slot; only a
        // different N would go unnoticed.
        let _ = record::write(&main.file, &header.to_line(), Some(0));
    }
    Ok(())
}

impl Contender for SlotsBackend {
    /// `-n`: any free slot, no queue. Otherwise the queue first, without
    /// waiting, then any free slot; the queue is let go of unless a wait
    /// on the slots follows (`blocking` takes it again, waiting).
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        let files = self.slots.iter().map(|s| &s.file);
        if self.nonblocking {
            let got = any_free(files, &self.label)?;
            *self.won() = got;
            return Ok(got.is_some());
        }
        if !attempt(&self.queue.file, true, false, &self.label)? {
            return Ok(false);
        }
        let got = any_free(files, &self.label);
        unlock_byte(self.queue.file.as_raw_handle(), LOCK_OFFSET);
        let got = got?;
        *self.won() = got;
        Ok(got.is_some())
    }

    /// Waits for the queue, then for the first slot granted.
    fn blocking(&mut self) -> Result<Blocking, Failure> {
        let queue = for_helper(&self.queue.file, &self.label)?;
        let slots = self
            .slots
            .iter()
            .map(|s| for_helper(&s.file, &self.label))
            .collect::<Result<Vec<File>, _>>()?;
        let won = Arc::clone(&self.won);
        let label = self.label.clone();
        Ok(Box::new(move || {
            attempt(&queue, true, true, &label)?;
            let got = wait_for_slot(slots, &won, &label);
            unlock_byte(queue.as_raw_handle(), LOCK_OFFSET);
            got
        }))
    }

    fn answers_interrupt(&self) -> bool {
        false
    }

    fn undo(&mut self) {
        if let Some(k) = self.won().take()
            && let Some(slot) = self.slots.get(k)
        {
            unlock_byte(slot.file.as_raw_handle(), LOCK_OFFSET);
        }
    }

    fn holder(&mut self) -> Option<String> {
        None
    }

    fn conflict_holder(&mut self) -> String {
        format!("{} holders", self.slots.len())
    }

    fn conflict_held(&mut self) -> String {
        format!("in all {} slots", self.slots.len())
    }

    fn last_record(&mut self) -> Option<Record> {
        None
    }
}

/// With the queue held: a free slot now, or the first one granted to a
/// helper thread per slot. A helper granted a slot after another won lets
/// it go; the helpers own their handles, so the losers may go on waiting
/// after this returns.
fn wait_for_slot(
    slots: Vec<File>,
    won: &Arc<Mutex<Option<usize>>>,
    label: &str,
) -> Result<(), Failure> {
    if let Some(k) = any_free(&slots, label)? {
        *won.lock().unwrap_or_else(|p| p.into_inner()) = Some(k);
        if let Some(slot) = slots.into_iter().nth(k) {
            keep_open(slot);
        }
        return Ok(());
    }
    let (tx, rx) = mpsc::channel::<usize>();
    for (k, slot) in slots.into_iter().enumerate() {
        let (won, tx) = (Arc::clone(won), tx.clone());
        std::thread::Builder::new()
            .name("lockrun-slot".into())
            .spawn(move || {
                if let Attempt::Acquired = lock_byte(slot.as_raw_handle(), LOCK_OFFSET, true, true)
                {
                    let mut w = won.lock().unwrap_or_else(|p| p.into_inner());
                    if w.is_none() {
                        *w = Some(k);
                        let _ = tx.send(k);
                        keep_open(slot);
                    } else {
                        unlock_byte(slot.as_raw_handle(), LOCK_OFFSET);
                    }
                }
            })
            .map_err(|e| lock_error(label, &e))?;
    }
    drop(tx);
    match rx.recv() {
        Ok(_) => Ok(()),
        Err(_) => Err(lock_error(
            label,
            &std::io::Error::other("every slot's waiting lock call failed"),
        )),
    }
}

impl Backend for SlotsBackend {
    type Held = FileHeld;
    const CAPS: Capabilities = super::FileBackend::CAPS;

    fn failure_status(&self) -> u8 {
        exit_codes::OS_ERROR
    }

    fn give_up(self) {}

    fn acquired(mut self, record: Option<&Record>, _verbose: bool) -> Result<FileHeld, Failure> {
        let Some(k) = *self.won() else {
            return Err(lock_error(
                &self.label,
                &std::io::Error::other("no slot was taken"),
            ));
        };
        let slot = self.slots.swap_remove(k);
        let number = k as u16 + 1;
        let label = display::escape(&slot.path.to_string_lossy());
        Ok(FileHeld::new(
            slot,
            record.is_some(),
            Some((number, label.clone())),
            label,
        ))
    }
}
