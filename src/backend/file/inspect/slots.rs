//! `holder`/`check` on a lock file used with `--slots N`: `LOCKFILE` keeps
//! N (see `backend::file::slots`), and each slot is a lock file of its own,
//! `LOCKFILE.slotK`, inspected as any lock file is. The lock is held when
//! any slot is; it is unknown when none is seen held and one cannot be
//! told.

use super::{Look, Report, State, holders, inspect_with};
use crate::exit_codes::Failure;
use crate::platform::{FdHolder, KernelLock};
use crate::record::{self, SlotsHeader};
use std::path::{Path, PathBuf};

/// The report on `path` with a report per slot, or `None` when `path`
/// is not used with `--slots`.
///
/// Every file is looked at from the caller's one reading of the kernel's
/// lock table and at most one scan of the processes' descriptors
/// ([`Look`]), whatever N is.
pub fn inspect_slots(
    path: &Path,
    dev: u64,
    ino: u64,
    want_holders: bool,
    look: &mut Look,
) -> Result<Option<Report>, Failure> {
    let Some(header) = read_header(path, dev, ino) else {
        return Ok(None);
    };
    let slot_paths: Vec<PathBuf> = (1..=header.slots)
        .map(|k| record::slot_path(path, k))
        .collect();
    let rereads = std::mem::replace(&mut look.no_rereads, true);
    let slots = slot_paths
        .iter()
        .map(|slot| inspect_with(slot, want_holders, look))
        .collect::<Result<Vec<_>, _>>();
    look.no_rereads = rereads;
    let slots = slots?;
    // LOCKFILE itself, as the kernel has it: the queue. Its head holds it
    // while it waits on the slots (it is then among each slot's waiters);
    // anyone else holding it (flock(1), a plain lockrun, fcntl or lockf)
    // is reported, and makes the lock held: waiters queue behind it.
    let id = look.lock_id_at(path, dev, ino);
    let table = look.kernel_locks(id, false).ok();
    let heads: Vec<i32> = slot_paths
        .iter()
        .filter_map(|slot| {
            let meta = std::fs::metadata(slot).ok()?;
            let (dev, ino) = crate::platform::file_id(&meta);
            let slot_id = look.lock_id_at(slot, dev, ino);
            look.kernel_locks(slot_id, false).ok()
        })
        .flat_map(|t| t.locks.into_iter().filter(|l| l.waiting).map(|l| l.pid))
        .collect();
    let queued = table
        .as_ref()
        .map_or(0, |t| t.locks.iter().filter(|l| l.waiting).count());
    let outside: Vec<KernelLock> = table
        .map(|t| t.locks)
        .unwrap_or_default()
        .into_iter()
        .filter(|l| !l.waiting && (l.pid <= 0 || !heads.contains(&l.pid)))
        .collect();
    let lockfile_holders = if outside.is_empty() {
        Vec::new()
    } else {
        let through: Vec<FdHolder> = look
            .fd_holders(dev, ino)
            .0
            .into_iter()
            .filter(|h| h.caller <= 0 || !heads.contains(&h.caller))
            .collect();
        holders(through, &outside.iter().collect::<Vec<_>>())
    };
    let any = |state| slots.iter().any(|s| s.state == state);
    let state = if any(State::Held) || !outside.is_empty() {
        State::Held
    } else if any(State::Unknown) {
        State::Unknown
    } else {
        State::Free
    };
    // Waiters queue on LOCKFILE itself; the head of the queue waits on
    // every slot at once, so it is counted once, from the queue.
    let head = usize::from(slots.iter().all(|s| s.waiting > 0));
    Ok(Some(Report {
        state,
        holders: slots.iter().flat_map(|s| s.holders.clone()).collect(),
        reason: slots
            .iter()
            .find(|s| s.state == State::Unknown)
            .and_then(|s| s.reason.clone())
            .filter(|_| state == State::Unknown),
        waiting: queued + head,
        slots: Some(header.slots),
        slot_reports: Some(slots),
        lockfile_holders: Some(lockfile_holders),
        ..Report::free(path.to_string_lossy().into_owned())
    }))
}

fn read_header(path: &Path, dev: u64, ino: u64) -> Option<SlotsHeader> {
    // As `read_record`: never blocks on a FIFO, and reads the very file
    // that was examined.
    let file = crate::platform::open_without_waiting(path, false).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || crate::platform::file_id(&meta) != (dev, ino) {
        return None;
    }
    SlotsHeader::parse(&record::read_content(&file).ok()?)
}
