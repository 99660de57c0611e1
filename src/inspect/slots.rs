//! `holder`/`check` on a lock file used with `--slots N`: `LOCKFILE` keeps
//! N (see `backend::file::slots`), and each slot is a lock file of its own,
//! `LOCKFILE.slotK`, inspected as any lock file is. The lock is held when
//! any slot is; it is unknown when none is seen held and one cannot be
//! told.

use super::{Report, State, inspect};
use crate::exit_codes::Failure;
use crate::platform;
use crate::record::{self, SlotsHeader};
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The report on `path` with a report per slot, or `None` when `path`
/// is not used with `--slots`.
pub fn inspect_slots(
    path: &Path,
    dev: u64,
    ino: u64,
    want_holders: bool,
) -> Result<Option<Report>, Failure> {
    let Some(header) = read_header(path, dev, ino) else {
        return Ok(None);
    };
    let slots = (1..=header.slots)
        .map(|k| inspect(&record::slot_path(path, k), want_holders))
        .collect::<Result<Vec<_>, _>>()?;
    let any = |state| slots.iter().any(|s| s.state == state);
    let state = if any(State::Held) {
        State::Held
    } else if any(State::Unknown) {
        State::Unknown
    } else {
        State::Free
    };
    // Waiters queue on LOCKFILE itself; the head of the queue waits on
    // every slot at once, so it is counted once, from the queue.
    let queued = platform::kernel_locks(platform::lock_id_at(path, dev, ino))
        .map(|table| table.locks.iter().filter(|l| l.waiting).count())
        .unwrap_or(0);
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
        ..Report::free(path.to_string_lossy().into_owned())
    }))
}

fn read_header(path: &Path, dev: u64, ino: u64) -> Option<SlotsHeader> {
    // As `read_record`: never blocks on a FIFO, and reads the very file
    // that was examined.
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.dev() != dev || meta.ino() != ino {
        return None;
    }
    SlotsHeader::parse(&record::read_content(&file).ok()?)
}
