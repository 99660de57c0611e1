//! `holder` and `check` on a lock file: the kernel's lock table and every
//! process's fdinfo, then the record (moved from src/inspect.rs: a
//! backend's inspection lives in its folder).

/// `lockrun list`.
pub mod list;
mod slots;

use crate::exit_codes::{self, Failure};
use crate::identity::Liveness;
use crate::inspect::{Holder, Report, State};
use crate::mode::LockMode;
use crate::platform::{self, FdHolder, KernelLock, LockSpan};
use crate::record::{self, Record};
use std::fs::{self, TryLockError};
use std::io;
use std::path::Path;

/// `holder` and `check` on a lock file; `probe` (`check --probe`) tries
/// the lock where the kernel's table leaves its state unknown.
pub fn look_up(path: &Path, want_holders: bool, probe: bool) -> Result<Report, Failure> {
    look_up_in(path, want_holders, probe, &mut Look::default())
}

/// [`look_up`] from the readings `look` has made or will make: `holder`
/// on several lock files reads the host's table once for all of them.
pub(crate) fn look_up_in(
    path: &Path,
    want_holders: bool,
    probe: bool,
    look: &mut Look,
) -> Result<Report, Failure> {
    let mut found = inspect_in(path, want_holders, look)?;
    if probe {
        probe_unknown(path, &mut found)
            .map_err(|e| Failure::io(exit_codes::OS_ERROR, "cannot probe", path, &e))?;
    }
    Ok(found)
}

pub fn inspect(path: &Path, want_holders: bool) -> Result<Report, Failure> {
    inspect_in(path, want_holders, &mut Look::default())
}

/// [`inspect`] from the readings `look` has made or will make: `list`
/// answers every row from one.
pub(crate) fn inspect_in(
    path: &Path,
    want_holders: bool,
    look: &mut Look,
) -> Result<Report, Failure> {
    let mut report = inspect_with(path, want_holders, look)?;
    if report.state == State::Held
        && report.slot_reports.is_none()
        && report.record_holder_alive == Some(true)
        && let Some(record) = report.record.as_ref().filter(|r| !r.is_released())
        && !report
            .holders
            .iter()
            .any(|h| Some(i64::from(h.pid)) == record.pid)
        && let Ok(meta) = fs::metadata(path)
    {
        // The holders came from descriptors we could read, or from the
        // kernel's table when we could read none: a recorded process we
        // may not look at is missing from them either way.
        let looked = [record.pid, record.lockrun_pid]
            .into_iter()
            .flatten()
            .filter_map(|pid| i32::try_from(pid).ok())
            .map(|pid| {
                let (dev, ino) = platform::file_id(&meta);
                platform::process_holds(pid, dev, ino)
            });
        let (mut holds, mut hidden) = (false, false);
        for answer in looked {
            match answer {
                Some(true) => holds = true,
                Some(false) => {}
                None => hidden = true,
            }
        }
        // A recorded process that does hold it, though the holders missed
        // it (it took the lock just now), cannot be said not to.
        report.record_unconfirmed = hidden || holds;
    }
    Ok(report)
}

/// How many more readings of the table a torn one earns, per call (see
/// the end of [`inspect_with`]).
const REREADS: usize = 3;

/// Where [`inspect_with`] gets the kernel's view: one reading of
/// /proc/locks (a bounded few when it is torn) and at most one walk of
/// every process's descriptors, made the first time a file needs them and
/// then answering every file of the call: every slot of a `--slots` lock,
/// every row of `list`. One reading and one walk per file took minutes
/// with 1024 slots (issue 26 item 14) or 10,000 locks (issue 34 item 4).
#[derive(Default)]
pub(crate) struct Look {
    /// The table as first read, or why it could not be.
    table: Option<Result<platform::LockSnapshot, String>>,
    /// Whether `table` holds every reading a torn table needs, or only the
    /// first (see [`Look::kernel_locks`]).
    merged: bool,
    /// Readings made again because the first was torn (at most
    /// [`REREADS`], made together the first time a file needs them).
    rereads: Option<Vec<platform::LockSnapshot>>,
    /// The one walk of the descriptors.
    fds: Option<platform::FdIndex>,
    /// /proc/self/mountinfo, read once, to place files as the table does.
    mounts: Option<String>,
    /// Set while a `--slots` lock's slots are looked at: no readings
    /// again, as before this Look answered every call (a `--slots` lock
    /// reads the table at most three times, which
    /// tests/slots.rs counts; each slot is answered from those readings and
    /// the walk of the descriptors).
    pub(crate) no_rereads: bool,
}

impl Look {
    fn lock_id_at(&mut self, path: &Path, dev: u64, ino: u64) -> platform::LockId {
        platform::lock_id_at_in(path, dev, ino, &mut self.mounts)
    }

    /// The table as this call read it, with every reading a torn table
    /// needs.
    fn snapshot(&mut self) -> Result<&platform::LockSnapshot, String> {
        self.first_reading();
        if !self.merged {
            self.merged = true;
            if let Some(Ok(first)) = self.table.take() {
                self.table = Some(platform::lock_snapshot_rest(first).map_err(|e| e.to_string()));
            }
        }
        self.read()
    }

    fn first_reading(&mut self) {
        if self.table.is_none() {
            self.table = Some(platform::lock_snapshot_first().map_err(|e| e.to_string()));
        }
    }

    fn read(&self) -> Result<&platform::LockSnapshot, String> {
        match &self.table {
            Some(Ok(table)) => Ok(table),
            Some(Err(e)) => Err(e.clone()),
            None => Err("the kernel's lock table was not read".to_owned()),
        }
    }

    /// One file's entries in the table as this call read it. With
    /// `exclusive_is_enough`, a first reading that shows the file held
    /// exclusively is the answer even when it was torn: the lock was held
    /// then, by that holder alone, and the readings a torn table gets
    /// again (about 30 ms each beside 10,000 other locks) are there to
    /// find entries a reading skipped, which an exclusive holder has none
    /// of. Only the count of waiters is then one reading's, which a lock
    /// taken or let go elsewhere during the read can have shifted by one.
    fn kernel_locks(
        &mut self,
        id: platform::LockId,
        exclusive_is_enough: bool,
    ) -> io::Result<platform::LockTable> {
        if exclusive_is_enough && !self.merged {
            self.first_reading();
            if let Ok(first) = self.read() {
                let table = first.table(id);
                let mut held = table.locks.iter().filter(|l| !l.waiting).peekable();
                if held.peek().is_some() && held.all(|l| l.mode == LockMode::Exclusive) {
                    return Ok(table);
                }
            }
        }
        self.snapshot()
            .map(|table| table.table(id))
            .map_err(io::Error::other)
    }

    /// The table read again, for a file a torn reading may have skipped.
    fn reread(&mut self) -> &[platform::LockSnapshot] {
        if self.no_rereads {
            return &[];
        }
        self.rereads.get_or_insert_with(|| {
            (0..REREADS)
                .filter_map(|_| platform::lock_snapshot().ok())
                .collect()
        })
    }

    /// Every table entry the snapshot has, by id: `list`'s rows.
    fn ids(&mut self) -> Result<Vec<platform::LockId>, String> {
        self.snapshot().map(|table| table.order.clone())
    }

    fn index(&mut self) -> &platform::FdIndex {
        self.fds.get_or_insert_with(platform::index_descriptors)
    }

    fn fd_holders(&mut self, dev: u64, ino: u64) -> (Vec<FdHolder>, bool) {
        let index = self.index();
        (platform::holders_in(index, dev, ino), index.complete)
    }

    /// The holders of a file the table shows held: those the record
    /// names, when their own descriptors account for every lock the table
    /// lists (lockrun took it, and lockrun and its command hold it), else
    /// what the walk of every process finds. Reading two processes'
    /// fdinfo instead of every process's descriptors is what keeps
    /// `holder` near `check` on a busy host. What it leaves out: a process
    /// the command started that inherited the descriptor, which holds
    /// the same lock and adds no other.
    fn held_by(
        &mut self,
        dev: u64,
        ino: u64,
        held: &[&KernelLock],
        record: Option<&Record>,
        alive: bool,
    ) -> Vec<FdHolder> {
        if self.fds.is_none()
            && let Some(found) = confirmed_by_record(dev, ino, held, record, alive)
        {
            return found;
        }
        self.fd_holders(dev, ino).0
    }
}

/// The holders the record names, when the table's every held entry was
/// taken by one of them and their fdinfo shows each: `None` when any of
/// that is not so (another taker, an OFD lock, which the table gives no
/// pid, a process we may not look at), and the walk must say.
fn confirmed_by_record(
    dev: u64,
    ino: u64,
    held: &[&KernelLock],
    record: Option<&Record>,
    alive: bool,
) -> Option<Vec<FdHolder>> {
    let record = record.filter(|r| alive && !r.is_released())?;
    let named: Vec<i32> = [record.lockrun_pid, record.pid]
        .into_iter()
        .flatten()
        .filter_map(|pid| i32::try_from(pid).ok())
        .filter(|&pid| pid > 0)
        .collect();
    if held.is_empty() || !held.iter().all(|l| named.contains(&l.pid)) {
        return None;
    }
    let mut found: Vec<FdHolder> = Vec::new();
    for &pid in &named {
        for holder in platform::process_fd_holders(pid, dev, ino)? {
            if !found.iter().any(|h| h.same_lock(&holder)) {
                found.push(holder);
            }
        }
    }
    let accounted = held.iter().all(|l| {
        found
            .iter()
            .any(|h| h.caller == l.pid && h.mode == l.mode && h.span == l.span)
    });
    found.sort_by_key(|h| h.pid);
    accounted.then_some(found)
}

pub(crate) fn inspect_with(
    path: &Path,
    want_holders: bool,
    look: &mut Look,
) -> Result<Report, Failure> {
    let shown = path.to_string_lossy().into_owned();
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Report {
                reason: Some("no lock file".to_owned()),
                exists: false,
                ..Report::free(shown)
            });
        }
        Err(e) => {
            return Err(Failure::io(
                exit_codes::NO_INPUT,
                "cannot examine",
                path,
                &e,
            ));
        }
    };
    let (dev, ino) = platform::file_id(&meta);
    if meta.is_file()
        && let Some(report) = slots::inspect_slots(path, dev, ino, want_holders, look)?
    {
        return Ok(report);
    }

    let (record, unreadable) = if meta.is_file() {
        match read_record(path, dev, ino) {
            Ok(record) => (record, false),
            Err(_) => (None, true),
        }
    } else {
        (None, false)
    };
    let liveness = record.as_ref().map(Record::holder_liveness);
    let mut report = Report {
        record,
        record_holder_alive: liveness.and_then(Liveness::as_option),
        unreadable,
        ..Report::free(shown)
    };

    // Matched as the kernel lists the file, which is not always what stat
    // says (btrfs subvolumes, overlays).
    let id = look.lock_id_at(path, dev, ino);
    // The table names a file by super block and inode number, and btrfs
    // numbers inodes per subvolume: `00:28:257` can be a file in another
    // subvolume. Where stat's id differs, a table entry is no proof: the
    // descriptors say whether this very file is locked, and only a
    // complete look at every process (root) can say it is not.
    let ambiguous = id != platform::stat_lock_id(dev, ino);
    let table = match look.kernel_locks(id, !ambiguous) {
        Ok(table) => table,
        Err(e) => {
            report.state = State::Unknown;
            report.reason = Some(format!("cannot read the kernel's lock table: {e}"));
            return Ok(report);
        }
    };
    report.waiting = table.locks.iter().filter(|l| l.waiting).count();
    let held: Vec<&KernelLock> = table.locks.iter().filter(|l| !l.waiting).collect();

    // Set once the descriptors were looked at and showed no lock on this
    // file, to whether that look saw every process: a second look moments
    // later would tell no more.
    let mut scanned = None;
    if !held.is_empty() {
        if !ambiguous {
            report.state = State::Held;
            if want_holders {
                let alive = liveness == Some(Liveness::Alive);
                let found = look.held_by(dev, ino, &held, report.record.as_ref(), alive);
                report.holders = holders(found, &held);
            }
            return Ok(report);
        }
        let (found, complete) = look.fd_holders(dev, ino);
        if !found.is_empty() || !complete {
            report.state = State::Held;
            report.holders = holders(found, &held);
            return Ok(report);
        }
        scanned = Some(complete);
    }

    // The table shows no holder. Where it may have missed one, the
    // descriptors themselves say: first those of a live holder the record
    // names (cheap), then, when the table came in several reads that
    // entries can shift between, every process's.
    let unreleased = report.record.as_ref().filter(|r| !r.is_released());
    // A live holder the record names whose descriptors we may not look at
    // (another user's, without root).
    let mut unconfirmed = false;
    if let Some(record) = unreleased
        && liveness == Some(Liveness::Alive)
    {
        let recorded = [record.pid, record.lockrun_pid]
            .into_iter()
            .flatten()
            .filter_map(|pid| i32::try_from(pid).ok());
        for pid in recorded {
            match platform::process_holds(pid, dev, ino) {
                Some(true) => return Ok(held_via(report, look.fd_holders(dev, ino).0)),
                Some(false) => {}
                None => unconfirmed = true,
            }
        }
    }
    if table.torn {
        let (found, complete) = match scanned {
            Some(complete) => (Vec::new(), complete),
            None => look.fd_holders(dev, ino),
        };
        if !found.is_empty() {
            return Ok(held_via(report, found));
        }
        // Neither saw it. Under heavy load (thousands of processes coming
        // and going beside the lock churn) a POSIX lock was once reported
        // free this way, unreproduced since; the table is asked again, and
        // a holder it shows is believed where its id names this file alone.
        // On a btrfs subvolume it may be another file's: there the
        // descriptors, just looked at, have the last word.
        // The readings again are made once per call and answer every
        // file of it: a list of 10,000 free files in a torn table reads it
        // a bounded number of times, not 30,000.
        let again = if ambiguous { &[][..] } else { look.reread() };
        for again in again {
            let again = again.table(id);
            if again.locks.iter().any(|l| !l.waiting) {
                report.state = State::Held;
                let seen: Vec<&KernelLock> = again.locks.iter().filter(|l| !l.waiting).collect();
                report.holders = holders(Vec::new(), &seen);
                return Ok(report);
            }
        }
        // The table may have skipped the lock, the record says a live
        // holder has it, and its descriptors are hidden from us: "free"
        // would be a guess, and the one guess this tool must not make.
        if unconfirmed && !complete {
            report.state = State::Unknown;
            report.reason = Some(
                "the kernel's lock table changed while it was read, and the live holder the \
                 record names is another user's, whose descriptors only root can see \
                 (`lockrun check --probe` can tell)"
                    .into(),
            );
            return Ok(report);
        }
    }

    let surroundings = Surroundings {
        our_pid_ns: platform::pid_namespace(),
        network_fs: platform::file_system_magic(path).and_then(platform::network_fs_name),
    };
    let descriptors = || look.fd_holders(dev, ino).0;
    match conclude_unseen(report.record.as_ref(), &surroundings, descriptors) {
        Unseen::Free => {}
        Unseen::HeldVia(found) => return Ok(held_via(report, found)),
        Unseen::Unknown(reason) => {
            report.state = State::Unknown;
            report.reason = Some(reason);
        }
    }
    Ok(report)
}

/// Held, as the holders' descriptors show though the table did not.
fn held_via(mut report: Report, found: Vec<FdHolder>) -> Report {
    report.state = State::Held;
    report.holders = found
        .iter()
        .map(|h| {
            describe(
                h.pid,
                h.mode,
                None,
                h.span,
                (h.caller > 0).then_some(h.caller),
            )
        })
        .collect();
    report
}

/// Where the lock file lives and where we look from.
struct Surroundings {
    our_pid_ns: Option<u64>,
    network_fs: Option<&'static str>,
}

#[derive(Debug, PartialEq)]
enum Unseen {
    Free,
    HeldVia(Vec<FdHolder>),
    Unknown(String),
}

/// The kernel's table shows no holder: is the lock free, or could the table
/// be hiding one? Kept apart from /proc so every case can be tested,
/// including network file systems this machine cannot mount.
fn conclude_unseen(
    record: Option<&Record>,
    surroundings: &Surroundings,
    descriptors: impl FnOnce() -> Vec<FdHolder>,
) -> Unseen {
    let unreleased = record.filter(|r| !r.is_released());
    let in_child_namespace = surroundings
        .our_pid_ns
        .is_some_and(|ns| ns != platform::INITIAL_PID_NAMESPACE);
    if in_child_namespace {
        // In a child PID namespace /proc/locks hides every lock whose taker
        // it cannot see (a process outside, or one that has exited): an
        // empty table proves nothing. A holder inside shows through its
        // descriptors; one outside cannot be seen at all.
        let found = descriptors();
        if !found.is_empty() {
            return Unseen::HeldVia(found);
        }
        if let Some(rec) = unreleased
            && rec.pid_ns.is_some()
            && rec.pid_ns != surroundings.our_pid_ns
        {
            let whom = rec
                .pid
                .map_or_else(|| "a process".to_owned(), |pid| format!("pid {pid}"));
            return Unseen::Unknown(format!(
                "the record names {whom} in another PID namespace, and this namespace's lock table cannot show its locks"
            ));
        }
        return Unseen::Unknown(
            "this is a child PID namespace, whose lock table hides locks taken by processes outside it (`lockrun check --probe` can tell)"
                .to_owned(),
        );
    }
    if let Some(fs_name) = surroundings.network_fs {
        let host = record
            .and_then(|r| r.host.as_deref())
            .map(|h| format!("; the record names host {h}"))
            .unwrap_or_default();
        return Unseen::Unknown(format!(
            "on {fs_name}: a holder on another machine does not appear in this kernel's lock table{host}"
        ));
    }
    Unseen::Free
}

/// `check --probe`: where the report cannot tell, try the lock without
/// waiting and let go at once. With `--slots`, each slot that cannot be
/// told is its own lock file, and LOCKFILE (the queue) says nothing about
/// them: probing it would answer "free" while a slot is held.
pub fn probe_unknown(path: &Path, report: &mut Report) -> io::Result<()> {
    if report.state != State::Unknown {
        return Ok(());
    }
    let Some(slots) = report.slot_reports.as_mut() else {
        return probe_one(path, report);
    };
    for (k, slot) in (1u16..).zip(slots.iter_mut()) {
        probe_one(&record::slot_path(path, k), slot)?;
    }
    let any = |state| slots.iter().any(|s| s.state == state);
    report.state = if any(State::Held) {
        State::Held
    } else if any(State::Unknown) {
        State::Unknown
    } else {
        State::Free
    };
    report.reason = Some("probed each slot that could not be told otherwise".into());
    Ok(())
}

fn probe_one(path: &Path, report: &mut Report) -> io::Result<()> {
    if report.state != State::Unknown {
        return Ok(());
    }
    report.reason = Some(match probe(path)? {
        Some(state) => {
            report.state = state;
            "probed: tried the lock without waiting and released it at once".into()
        }
        None => "not probed: --probe opens only a regular file or a directory".into(),
    });
    Ok(())
}

/// Takes and at once releases a lock attempt: the only certain answer where
/// the kernel's table is incomplete, and the only code here that touches the
/// lock. Never creates the file, and opens only a regular file (or a
/// directory): `None` for anything else, whose state stays unknown.
fn probe(path: &Path) -> io::Result<Option<State>> {
    let Some(file) = crate::backend::file::lock::open_to_read(path)? else {
        return Ok(path.symlink_metadata().is_err().then_some(State::Free));
    };
    match file.try_lock() {
        Ok(()) => {
            file.unlock()?;
            Ok(Some(State::Free))
        }
        Err(TryLockError::WouldBlock) => Ok(Some(State::Held)),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

fn read_record(path: &Path, dev: u64, ino: u64) -> io::Result<Option<Record>> {
    // Checked through the descriptor that it is still the file stat saw.
    let Some(file) = crate::backend::file::lock::open_to_read(path)? else {
        return Ok(None);
    };
    let meta = file.metadata()?;
    if !meta.is_file() || platform::file_id(&meta) != (dev, ino) {
        return Ok(None);
    }
    Ok(Record::parse(&record::read_content(&file)?))
}

fn holders(fd_holders: Vec<FdHolder>, held: &[&KernelLock]) -> Vec<Holder> {
    if fd_holders.is_empty() {
        // No access to other processes' descriptors (not root): the
        // kernel's pid is the best we have; an OFD lock has none.
        return held
            .iter()
            .filter(|l| l.pid > 0)
            .map(|l| describe(l.pid, l.mode, None, l.span, None))
            .collect();
    }
    // A holder whose lock was taken by a process that no longer holds it
    // inherited it: say so. Decided from the descriptors, not from whether
    // that pid exists: once it has exited, its pid may be someone else's.
    let shared = sharing_descriptions(&fd_holders);
    fd_holders
        .iter()
        .zip(shared)
        .map(|(h, shared)| {
            let caller_gone = h.caller > 0
                && h.caller != h.pid
                && !fd_holders.iter().any(|other| other.pid == h.caller);
            // The caller is 0 or -1 where the kernel does not name one
            // (another PID namespace, an OFD lock): the open file
            // description, compared with kcmp, says who shares one lock.
            let owner = (h.caller > 0).then_some(h.caller).or(shared);
            describe(
                h.pid,
                h.mode,
                caller_gone.then_some(h.caller),
                h.span,
                owner,
            )
        })
        .collect()
}

/// For each holder the kernel names no caller for (an OFD lock, which
/// belongs to an open file description, or a caller in another PID
/// namespace): the first holder, by pid, holding the same lock through the
/// same open file description, as kcmp(2) KCMP_FILE compares them. A
/// `lockrun --fcntl -s` and the command that inherited its descriptor are
/// then one holder, as a flock(2) lock's are by its caller (issue 32).
/// Where kcmp is refused (EPERM: another user's process, without root;
/// ENOSYS: a kernel built without it) each stays its own holder, as
/// before: more holders listed than there are locks, never fewer.
fn sharing_descriptions(fd_holders: &[FdHolder]) -> Vec<Option<i32>> {
    let mut owners: Vec<Option<i32>> = vec![None; fd_holders.len()];
    for (i, h) in fd_holders.iter().enumerate() {
        if h.caller > 0 {
            continue;
        }
        let first = fd_holders[..i].iter().enumerate().find(|(j, other)| {
            other.caller <= 0
                && other.pid != h.pid
                && other.mode == h.mode
                && other.span == h.span
                && owners[*j].is_none_or(|owner| owner == other.pid)
                && platform::same_description(other.pid, other.fd, h.pid, h.fd) == Some(true)
        });
        if let Some((j, other)) = first {
            owners[j] = Some(other.pid);
            owners[i] = Some(other.pid);
        }
    }
    owners
}

fn describe(
    pid: i32,
    mode: LockMode,
    locked_by: Option<i32>,
    span: LockSpan,
    lock_owner: Option<i32>,
) -> Holder {
    Holder {
        pid,
        mode: mode.as_str(),
        command: platform::process_cmdline(pid),
        locked_by,
        span: Some(span.into()),
        lock_owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_NS: u64 = platform::INITIAL_PID_NAMESPACE;
    const CHILD_NS: u64 = 4_026_532_178;

    fn unreleased(host: &str, pid_ns: u64) -> Record {
        Record {
            lockrun: 1,
            pid: Some(4243),
            host: Some(host.into()),
            pid_ns: Some(pid_ns),
            ..Record::default()
        }
    }

    fn local(ns: u64) -> Surroundings {
        Surroundings {
            our_pid_ns: Some(ns),
            network_fs: None,
        }
    }

    fn no_descriptors() -> Vec<FdHolder> {
        Vec::new()
    }

    #[test]
    fn a_network_file_system_is_unknown_and_names_the_recorded_host() {
        let nfs = Surroundings {
            our_pid_ns: Some(HOST_NS),
            network_fs: platform::network_fs_name(0x6969),
        };
        let record = unreleased("db2", HOST_NS);
        let Unseen::Unknown(reason) = conclude_unseen(Some(&record), &nfs, no_descriptors) else {
            panic!("NFS must be unknown");
        };
        assert!(
            reason.starts_with("on NFS:") && reason.contains("host db2"),
            "{reason}"
        );
        let cifs = Surroundings {
            our_pid_ns: Some(HOST_NS),
            network_fs: platform::network_fs_name(0xFF53_4D42),
        };
        assert!(matches!(
            conclude_unseen(None, &cifs, no_descriptors),
            Unseen::Unknown(_)
        ));
    }

    #[test]
    fn a_local_file_system_seen_from_the_initial_namespace_is_free() {
        let record = unreleased("h", HOST_NS);
        assert_eq!(
            conclude_unseen(Some(&record), &local(HOST_NS), no_descriptors),
            Unseen::Free
        );
        assert_eq!(
            conclude_unseen(None, &local(HOST_NS), no_descriptors),
            Unseen::Free
        );
    }

    #[test]
    fn a_holder_outside_our_child_namespace_is_unknown() {
        let record = unreleased("h", HOST_NS);
        let verdict = conclude_unseen(Some(&record), &local(CHILD_NS), no_descriptors);
        assert!(matches!(verdict, Unseen::Unknown(r) if r.contains("another PID namespace")));
    }

    #[test]
    fn without_a_record_a_child_namespace_cannot_say_free() {
        // flock(1) or --no-record outside: nothing to go on, and the table
        // hides it.
        let verdict = conclude_unseen(None, &local(CHILD_NS), no_descriptors);
        assert!(matches!(verdict, Unseen::Unknown(r) if r.contains("child PID namespace")));
        let mut released = unreleased("h", CHILD_NS);
        released.released_at = Some("2026-11-29T02:00:03.120Z".into());
        let verdict = conclude_unseen(Some(&released), &local(CHILD_NS), no_descriptors);
        assert!(matches!(verdict, Unseen::Unknown(_)));
    }

    #[test]
    fn a_holder_in_our_child_namespace_is_found_through_its_descriptors() {
        let record = unreleased("h", CHILD_NS);
        let holder = FdHolder {
            pid: 7,
            mode: LockMode::Exclusive,
            caller: 7,
            span: LockSpan::WHOLE_FLOCK,
            fd: 3,
        };
        let verdict = conclude_unseen(Some(&record), &local(CHILD_NS), || vec![holder.clone()]);
        assert_eq!(verdict, Unseen::HeldVia(vec![holder]));
    }
}
