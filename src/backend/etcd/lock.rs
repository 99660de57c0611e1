//! The etcd backend behind the seam: grant a lease, put our key in the
//! queue, wait for the keys ahead of it to go, hand the command its fencing
//! token, keep the lease alive until the command exits, release.
//!
//! Differences from a file lock, each forced by the medium: the lock lives
//! only as long as lockrun renews the lease (so `-F` is refused, and the
//! command gets SIGTERM if lockrun itself dies); the record is the key's
//! value, stored once the command runs; and losing the lock while the
//! command runs stops the command and ends lockrun with 76.
//!
//! With `--slots N` the same queue serves N holders at once: the N oldest
//! keys hold the lock (see [`super::slots`] for what their values carry,
//! and `client::Inner::wait_slot_round` for how a waiter waits).

use super::RunOptions;
use super::client::{Attempt, Client, EtcdError, Kv, key_for};
use super::session::{Ending, Session};
use super::{keeper, slots};
use crate::backend::{Backend, Capabilities, Held};
use crate::backend::{Blocking, Contender};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::record::Record;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a release or clean-up call may take: lockrun is finishing and
/// must not hang on an etcd that stopped answering.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);
/// How many abandoned keys (see [`keeper`]) one attempt clears before it
/// settles for waiting behind the rest: a bound, not an expectation.
const REAP_ROUNDS: usize = 8;

pub struct EtcdBackend {
    client: Client,
    session: Session,
    lease: i64,
    ttl: Duration,
    name: String,
    /// Our key's value while it waits: the record without a pid (with
    /// `slots`, and N: see [`super::slots`]).
    value: Vec<u8>,
    /// The record part of it, without N.
    waiting_record: Vec<u8>,
    /// `--slots N`.
    slots: Option<u16>,
    /// The other holders as the last look saw them (with `--slots`).
    holders: Vec<Kv>,
    /// The exit status of the last failure: 64 for a disagreeing N.
    status: u8,
    /// Our key's creation revision once it exists (the fencing token).
    revision: Option<i64>,
    /// The holder as the last attempt saw it.
    owner: Option<Kv>,
    verbose: bool,
    /// The lock URL, escaped, for messages.
    label: String,
    /// Ends the helper thread's wait in etcd at once (see `interrupt`).
    cancel: Arc<tokio::sync::Notify>,
}

fn unavailable(label: &str, e: &EtcdError) -> Failure {
    Failure::new(
        e.exit.unwrap_or(exit_codes::UNAVAILABLE),
        format!("cannot take {label}: {e} (the command was not run)"),
    )
}

impl EtcdBackend {
    pub fn start(opts: &RunOptions, label: &str) -> Result<EtcdBackend, Failure> {
        let client = Client::new(&opts.url).map_err(|e| unavailable(label, &e))?;
        client.set_verbose(opts.settings.verbose);
        client.fit_to_ttl(opts.ttl);
        let (lease, ttl) = client.grant(opts.ttl).map_err(|e| unavailable(label, &e))?;
        let session = Session::start(
            client.clone(),
            (lease, key_for(&opts.url.name, lease)),
            ttl,
            opts.settings.kill_grace,
        );
        // The waiting key carries who waits, so `holder` can name a
        // contender even before it runs its command.
        let waiting_record = opts.waiting_record();
        // While it waits, the key also says when this lockrun started, so
        // that a lockrun on this host can tell it was left behind (see
        // `keeper`); the record stored once the command runs does not.
        let waiting = keeper::with_start(&waiting_record, keeper::own_start());
        let value = match opts.slots {
            Some(n) => slots::with_slot(&waiting, n, None),
            None => waiting,
        };
        Ok(EtcdBackend {
            client,
            session,
            lease,
            ttl,
            name: opts.url.name.clone(),
            value,
            waiting_record,
            slots: opts.slots,
            holders: Vec::new(),
            status: exit_codes::UNAVAILABLE,
            revision: None,
            owner: None,
            verbose: opts.settings.verbose,
            label: label.to_owned(),
            cancel: Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// Revokes the leases of the keys in `keys` (other than ours) that
    /// their lockrun left behind on this host; whether there were any.
    fn reap(&self, keys: &[Kv]) -> Result<bool, Failure> {
        let ours = key_for(&self.name, self.lease);
        let mut any = false;
        for kv in keys
            .iter()
            .filter(|kv| kv.key != ours && keeper::abandoned(&kv.value))
        {
            self.client
                .revoke_abandoned(kv)
                .map_err(|e| self.failure(&e))?;
            if self.verbose {
                crate::say!("lockrun: {}", keeper::revoked(&kv.key, kv.lease));
            }
            any = true;
        }
        Ok(any)
    }

    fn failure(&self, e: &EtcdError) -> Failure {
        Failure::new(
            exit_codes::UNAVAILABLE,
            format!("cannot take {}: {e} (the command was not run)", self.label),
        )
    }

    /// Every contender must give the same N (no `--slots` is one slot): a
    /// key that says otherwise refuses us with a usage error naming both
    /// numbers and whose key set the other one.
    fn agree(&mut self, keys: &[Kv]) -> Result<(), Failure> {
        let ours = key_for(&self.name, self.lease);
        let n = self.slots.unwrap_or(1);
        let Some((kv, theirs)) = keys
            .iter()
            .filter(|kv| kv.key != ours)
            .find_map(|kv| Some((kv, slots::declared_n(&kv.value)?)))
            .filter(|(_, theirs)| *theirs != n)
        else {
            return Ok(());
        };
        let who = match Record::parse(&kv.value) {
            Some(record) => {
                let mut who = format!(
                    "lockrun pid {} `{}`",
                    record.lockrun_pid.unwrap_or(0),
                    display::record_command(&record)
                );
                if let Some(host) = &record.host {
                    who.push_str(&format!(" on {}", display::escape(host)));
                }
                if let Some(at) = record.acquired_at.as_deref().and_then(display::parse_time) {
                    who.push_str(&format!(" at {}", display::date_time(at)));
                }
                format!("{who}, key {}", display::escape(&kv.key))
            }
            None => format!("key {}", display::escape(&kv.key)),
        };
        let theirs = if slots::has_slots(&kv.value) {
            format!("with --slots {theirs}")
        } else {
            "without --slots".to_owned()
        };
        let ours = match self.slots {
            Some(n) => format!("not --slots {n}"),
            None => "but this lockrun has no --slots".to_owned(),
        };
        self.status = exit_codes::USAGE;
        Err(Failure::new(
            exit_codes::USAGE,
            format!(
                "{} is used {theirs} (set by {who}), {ours}: every contender must give the same number",
                self.label
            ),
        ))
    }

    fn slot_holders_text(&self) -> String {
        let ours = key_for(&self.name, self.lease);
        let each: Vec<String> = self
            .holders
            .iter()
            .filter(|kv| kv.key != ours)
            .map(|kv| match slots::slot_of(&kv.value) {
                Some(k) => format!("slot {k}: {}", holder_text(Some(kv))),
                None => holder_text(Some(kv)),
            })
            .collect();
        let n = self.slots.unwrap_or(1);
        if each.is_empty() {
            format!(
                "{n} commands, one per slot (`lockrun holder {}` names them)",
                self.label
            )
        } else {
            format!("{n} commands, one per slot ({})", each.join("; "))
        }
    }
}

impl Contender for EtcdBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        // A key ahead that its lockrun left behind on this host is cleared
        // and the attempt made again (it is repeatable: our key is created
        // once).
        let mut round = 0;
        loop {
            round += 1;
            let reap = round <= REAP_ROUNDS;
            if let Some(n) = self.slots {
                let (revision, oldest) = self
                    .client
                    .attempt_n(&self.name, self.lease, &self.value, n)
                    .map_err(|e| self.failure(&e))?;
                self.revision = Some(revision);
                self.agree(&oldest)?;
                let ours = key_for(&self.name, self.lease);
                let admitted = oldest.iter().any(|kv| kv.key == ours);
                if !admitted && reap && self.reap(&oldest)? {
                    continue;
                }
                self.holders = oldest;
                return Ok(admitted);
            }
            match self.client.attempt(&self.name, self.lease, &self.value) {
                Err(e) => return Err(self.failure(&e)),
                Ok(Attempt::Acquired { revision }) => {
                    self.revision = Some(revision);
                    return Ok(true);
                }
                Ok(Attempt::Queued { revision, owner }) => {
                    self.revision = Some(revision);
                    if let Some(owner) = &owner {
                        self.agree(std::slice::from_ref(owner))?;
                        if reap && self.reap(std::slice::from_ref(owner))? {
                            continue;
                        }
                    }
                    self.owner = owner;
                    return Ok(false);
                }
            }
        }
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        // The wait happens in etcd (the lock service watches the key ahead
        // of ours). An interrupted wait is abandoned, never undone: giving
        // up revokes the lease, which deletes our key in the queue.
        let client = self.client.clone();
        let name = self.name.clone();
        let lease = self.lease;
        let ours = key_for(&name, lease);
        let slots = self.slots;
        let cancel = Arc::clone(&self.cancel);
        Ok(Box::new(move || {
            let unavailable = |message: String| {
                Failure::new(
                    exit_codes::UNAVAILABLE,
                    format!("cannot take the lock {name}: {message} (the command was not run)"),
                )
            };
            match client.wait_lock(&name, lease, slots, &cancel) {
                Ok(key) if key == ours => Ok(()),
                Ok(key) => Err(unavailable(format!(
                    "etcd granted the lock to key {key}, not ours ({ours})"
                ))),
                Err(e) => Err(unavailable(e.message)),
            }
        }))
    }

    fn interrupt(&mut self) {
        // A permit if the helper is not waiting on it yet: it ends the wait
        // as soon as it starts.
        self.cancel.notify_one();
    }

    fn still_valid(&mut self) -> Result<(), Failure> {
        match self.session.lost() {
            Some(reason) => Err(Failure::new(
                exit_codes::UNAVAILABLE,
                format!(
                    "cannot take {} while waiting: {reason} (the command was not run)",
                    self.label
                ),
            )),
            None => Ok(()),
        }
    }

    fn holder(&mut self) -> Option<String> {
        if let Some(n) = self.slots {
            if let Ok((holders, _)) = self.client.oldest_n(&self.name, n) {
                self.holders = holders;
            }
            return Some(self.slot_holders_text());
        }
        if let Ok((owner, _)) = self.client.owner(&self.name) {
            self.owner = owner;
        }
        Some(holder_text(self.owner.as_ref()))
    }

    fn conflict_holder(&mut self) -> String {
        self.holder().unwrap_or_default()
    }

    /// The last holder's record, which every release stores under NAME
    /// itself (no lease: it outlives its holder), read with our key first
    /// in line: no other lockrun can release, and so replace it, until we
    /// do. What cannot be read (etcd not answering) is no record: the
    /// command then runs, the safe side of a doubt.
    fn last_record(&mut self) -> Option<Record> {
        if self.slots.is_some() {
            return None;
        }
        let deadline = Instant::now() + self.client.call_timeout();
        match self.client.get(&self.name, deadline) {
            Ok(kv) => Record::parse(&kv?.value),
            Err(e) => {
                if self.verbose {
                    crate::say!(
                        "lockrun: could not read the last holder's record of {} ({e}): running the command",
                        self.label
                    );
                }
                None
            }
        }
    }
}

impl Backend for EtcdBackend {
    type Held = EtcdHeld;
    const CAPS: Capabilities = super::CAPS;

    fn failure_status(&self) -> u8 {
        self.status
    }

    fn give_up(self) {
        // Not joined: a renewal in flight to an etcd that does not answer
        // must not hold up the exit; the revoke below ends the lease.
        self.session.stop();
        let _ = self
            .client
            .revoke(self.lease, Instant::now() + CLEANUP_TIMEOUT);
    }

    fn acquired(self, _record: Option<&Record>, verbose: bool) -> Result<EtcdHeld, Failure> {
        let Some(revision) = self.revision else {
            let e = EtcdError {
                message: "our key's revision is unknown".into(),
                permanent: false,
                exit: None,
            };
            let failure = self.failure(&e);
            self.give_up();
            return Err(failure);
        };
        let key = key_for(&self.name, self.lease);
        let slot = match self.slots {
            Some(n) => match self.claim(&key, revision, n) {
                Ok(slot) => Some((n, slot)),
                Err(failure) => {
                    self.give_up();
                    return Err(failure);
                }
            },
            None => None,
        };
        self.session.held(key.clone(), revision);
        if verbose || self.verbose {
            let what = match slot {
                Some((n, k)) => format!("slot {k} of {n} on {}", self.name),
                None => format!("the lock {}", self.name),
            };
            crate::say!(
                "lockrun: took {what} (fencing token {revision}, lease {:x}, TTL {}s)",
                self.lease,
                self.ttl.as_secs()
            );
        }
        Ok(EtcdHeld {
            client: self.client,
            session: self.session,
            lease: self.lease,
            ttl: self.ttl,
            name: self.name,
            key,
            revision,
            slot,
            last: None,
        })
    }
}

impl EtcdBackend {
    /// Our slot number, written into our key before the command starts
    /// (its `LOCKRUN_SLOT`); that write is also what wakes the waiter
    /// behind us, which then becomes first in line.
    fn claim(&self, key: &str, revision: i64, n: u16) -> Result<u16, Failure> {
        let value_for = |k| slots::with_slot(&self.waiting_record, n, Some(k));
        match self.client.claim_slot(
            &self.name,
            (key, revision, self.lease),
            n,
            &slots::slot_of,
            &value_for,
            // The session renews the lease meanwhile, and every round lost
            // is another holder's claim made (N rounds at most when N claim
            // at once): a claim still not made after three TTLs of rounds
            // is given up.
            Instant::now() + (self.ttl * 3).max(self.client.call_timeout()),
        ) {
            Ok(Some(k)) => Ok(k),
            Ok(None) => Err(self.failure(&EtcdError {
                message: format!(
                    "our key {key} left the {n} oldest (deleted, or its lease expired) before it took a slot"
                ),
                permanent: false,
                exit: None,
            })),
            Err(e) => Err(self.failure(&e)),
        }
    }
}

pub struct EtcdHeld {
    client: Client,
    session: Session,
    lease: i64,
    ttl: Duration,
    name: String,
    key: String,
    revision: i64,
    /// `--slots`: N and our slot.
    slot: Option<(u16, u16)>,
    /// The record to leave under NAME (`NAME.slotK`) at the release.
    last: Option<Vec<u8>>,
}

impl EtcdHeld {
    fn value(&self, record: &Record) -> Vec<u8> {
        match self.slot {
            Some((n, k)) => slots::with_slot(&record.to_line(), n, Some(k)),
            None => record.to_line(),
        }
    }
}

impl Held for EtcdHeld {
    fn env(&self) -> Vec<(&'static str, OsString)> {
        crate::backend::url_env(self.revision, self.slot.map(|(_, k)| k))
    }

    fn dies_with_lockrun(&self) -> bool {
        true
    }

    fn fencing_token(&self) -> Option<i64> {
        Some(self.revision)
    }

    /// A lock URL has no descriptor whose holders could be traced: what
    /// `--max-time` stops with the command is everything it started.
    fn inheritors(&self) -> Option<crate::backend::Inheritors> {
        Some(crate::backend::command_tree())
    }

    fn searches_descendants(&self) -> bool {
        true
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        if released {
            // The last holder's record outlives the lease under NAME itself,
            // so a free lock still tells who ran last and how it ended; it
            // goes with the release, in one call.
            self.last = Some(self.value(record));
        } else {
            // A failure here means the key is gone: the session notices and
            // stops the command.
            self.client.update_if_ours_unawaited(
                &self.key,
                self.revision,
                &self.value(record),
                self.lease,
            );
        }
        Ok(())
    }

    fn command_started(&mut self, pid: i32) {
        self.session.command_started(pid);
    }

    fn command_exited(&mut self) {
        self.session.command_exited();
    }

    fn release(self) -> Result<(), String> {
        let ending = self.session.finish();
        let last_key = match self.slot {
            Some((_, k)) => slots::last_key(&self.name, k),
            None => self.name.clone(),
        };
        // Without a record (--no-record) the release still leaves a line of
        // its own under NAME: the transaction is known by what it wrote if
        // a member applied it but answered too late and it went again to
        // the next one (issue 29: else exit 76 for a run that held the lock
        // to its end). Not a record: `holder` shows no last holder, and
        // --skip-if-succeeded-within finds no success in it.
        let marker;
        let line = match &self.last {
            Some(line) => line.as_slice(),
            None => {
                marker = format!(
                    "lockrun released without a record: lease {:x}, revision {}\n",
                    self.lease, self.revision
                );
                marker.as_bytes()
            }
        };
        // The transaction stores it only while our key is still ours.
        let last = match &ending {
            Ending::Lost(_) => None,
            _ => Some((last_key.as_str(), line)),
        };
        // Two round trips (the handoff, then the revoke): on a slow link
        // (issue 29 item 6) more than the fixed 2 s, so up to TTL/4.
        let released = self.client.release(
            self.lease,
            (&self.key, self.revision),
            last,
            Instant::now() + CLEANUP_TIMEOUT.max(self.ttl / 4),
        );
        // Once the command has ended on its own while the lock was
        // confirmed, the run's status is the command's: what became of the
        // lock afterwards is said, never made its exit status (issue 29
        // item 5: 76 for a command that had finished with 0).
        let warn = |reason: &str| {
            crate::say!(
                "lockrun: warning: the lock {} could not be confirmed after the command ended on its own (its status is kept): {reason}",
                self.name
            );
        };
        match ending {
            Ending::Lost(reason) => return Err(reason),
            Ending::Unconfirmed(reason) => {
                warn(&reason);
                return Ok(());
            }
            Ending::Held => {}
        }
        match released {
            Ok(super::client::Released::Ours) => {}
            // Gone at the release, at a moment nobody can tell: perhaps
            // while the command ran.
            Ok(super::client::Released::AlreadyGone) => {
                return Err(format!(
                    "the lock key {} was gone from etcd when the command ended (its lease expired or was revoked, or the key was deleted), so another holder may have had the lock meanwhile",
                    self.key
                ));
            }
            Err(e) => crate::say!(
                "lockrun: could not release {} ({e}); etcd releases it when the lease expires within {}s",
                self.name,
                self.ttl.as_secs()
            ),
        }
        Ok(())
    }
}

fn holder_text(owner: Option<&Kv>) -> String {
    let Some(owner) = owner else {
        return "another client (it released the lock a moment ago)".to_owned();
    };
    match Record::parse(&owner.value).filter(|r| !r.is_released()) {
        Some(record) => display::holder_summary(&record),
        None => format!(
            "another etcd client that left no lockrun record (key {}, lease {:x})",
            display::escape(&owner.key),
            owner.lease
        ),
    }
}
