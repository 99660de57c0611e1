//! The etcd backend behind the seam: grant a lease, put our key in the
//! queue, wait for the keys ahead of it to go, hand the command its fencing
//! token, keep the lease alive until the command exits, release.
//!
//! Differences from a file lock, each forced by the medium: the lock lives
//! only as long as lockrun renews the lease (so `-F` is refused, and the
//! command gets SIGTERM if lockrun itself dies); the record is the key's
//! value, stored once the command runs; and losing the lock while the
//! command runs stops the command and ends lockrun with 76.

use super::RunOptions;
use super::client::{Attempt, Client, EtcdError, Kv, key_for};
use super::session::Session;
use crate::backend::{Backend, Capabilities, Held};
use crate::backend::{Blocking, Contender};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::record::Record;
use std::ffi::OsString;
use std::time::{Duration, Instant};

/// How long a release or clean-up call may take: lockrun is finishing and
/// must not hang on an etcd that stopped answering.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

pub struct EtcdBackend {
    client: Client,
    session: Session,
    lease: i64,
    ttl: Duration,
    name: String,
    /// Our key's value while it waits: the record without a pid.
    value: Vec<u8>,
    /// Our key's creation revision once it exists (the fencing token).
    revision: Option<i64>,
    /// The holder as the last attempt saw it.
    owner: Option<Kv>,
    verbose: bool,
    /// The lock URL, escaped, for messages.
    label: String,
}

fn unavailable(label: &str, e: &EtcdError) -> Failure {
    Failure::new(
        exit_codes::UNAVAILABLE,
        format!("cannot take {label}: {e} (the command was not run)"),
    )
}

impl EtcdBackend {
    pub fn start(opts: &RunOptions, label: &str) -> Result<EtcdBackend, Failure> {
        let client = Client::new(&opts.url).map_err(|e| unavailable(label, &e))?;
        let (lease, ttl) = client.grant(opts.ttl).map_err(|e| unavailable(label, &e))?;
        let session = Session::start(client.clone(), lease, ttl, opts.kill_grace);
        // The waiting key carries who waits, so `holder` can name a
        // contender even before it runs its command.
        let value = opts.waiting_record();
        Ok(EtcdBackend {
            client,
            session,
            lease,
            ttl,
            name: opts.url.name.clone(),
            value,
            revision: None,
            owner: None,
            verbose: opts.verbose,
            label: label.to_owned(),
        })
    }

    fn failure(&self, e: &EtcdError) -> Failure {
        Failure::new(
            exit_codes::UNAVAILABLE,
            format!("cannot take {}: {e} (the command was not run)", self.label),
        )
    }
}

impl Contender for EtcdBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        match self.client.attempt(&self.name, self.lease, &self.value) {
            Err(e) => Err(self.failure(&e)),
            Ok(Attempt::Acquired { revision }) => {
                self.revision = Some(revision);
                Ok(true)
            }
            Ok(Attempt::Queued { revision, owner }) => {
                self.revision = Some(revision);
                self.owner = owner;
                Ok(false)
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
        Ok(Box::new(move || {
            let unavailable = |message: String| {
                Failure::new(
                    exit_codes::UNAVAILABLE,
                    format!("cannot take the lock {name}: {message} (the command was not run)"),
                )
            };
            match client.wait_lock(&name, lease) {
                Ok(key) if key == ours => Ok(()),
                Ok(key) => Err(unavailable(format!(
                    "etcd granted the lock to key {key}, not ours ({ours})"
                ))),
                Err(e) => Err(unavailable(e.message)),
            }
        }))
    }

    fn still_valid(&mut self) -> Result<(), Failure> {
        match self.session.lost() {
            Some(reason) => Err(Failure::new(
                exit_codes::UNAVAILABLE,
                format!("lost the lease while waiting: {reason}"),
            )),
            None => Ok(()),
        }
    }

    fn holder(&mut self) -> Option<String> {
        if let Ok((owner, _)) = self.client.owner(&self.name) {
            self.owner = owner;
        }
        Some(holder_text(self.owner.as_ref()))
    }

    fn conflict_holder(&mut self) -> String {
        self.holder().unwrap_or_default()
    }
}

impl Backend for EtcdBackend {
    type Held = EtcdHeld;
    const CAPS: Capabilities = super::CAPS;

    fn failure_status(&self) -> u8 {
        exit_codes::UNAVAILABLE
    }

    fn give_up(self) {
        self.session.finish();
        let _ = self
            .client
            .revoke(self.lease, Instant::now() + CLEANUP_TIMEOUT);
    }

    fn acquired(self, _record: Option<&Record>, verbose: bool) -> Result<EtcdHeld, Failure> {
        let Some(revision) = self.revision else {
            let e = EtcdError {
                message: "our key's revision is unknown".into(),
            };
            let failure = self.failure(&e);
            self.give_up();
            return Err(failure);
        };
        let key = key_for(&self.name, self.lease);
        self.session.held(key.clone(), revision);
        if verbose || self.verbose {
            eprintln!(
                "lockrun: took the lock {} (fencing token {revision}, lease {:x}, TTL {}s)",
                self.name,
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
            last: None,
        })
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
    /// The record to leave under NAME at the release.
    last: Option<Vec<u8>>,
}

impl Held for EtcdHeld {
    fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![(
            "LOCKRUN_FENCING_TOKEN",
            OsString::from(self.revision.to_string()),
        )]
    }

    fn dies_with_lockrun(&self) -> bool {
        true
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        if released {
            // The last holder's record outlives the lease under NAME itself,
            // so a free lock still tells who ran last and how it ended; it
            // goes with the release, in one call.
            self.last = Some(record.to_line());
        } else {
            // A failure here means the key is gone: the session notices and
            // stops the command.
            let _ =
                self.client
                    .update_if_ours(&self.key, self.revision, &record.to_line(), self.lease);
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
        let lost = self.session.finish();
        let last = match (&lost, &self.last) {
            (None, Some(line)) => Some((self.name.as_str(), line.as_slice())),
            _ => None,
        };
        let revoked = self
            .client
            .release(self.lease, last, Instant::now() + CLEANUP_TIMEOUT);
        if let Some(reason) = lost {
            return Err(reason);
        }
        if let Err(e) = revoked {
            eprintln!(
                "lockrun: could not release {} ({e}); etcd releases it when the lease expires within {}s",
                self.name,
                self.ttl.as_secs()
            );
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
