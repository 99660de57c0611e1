//! `holder` and `check` on a etcd lock URL: read who holds it, never
//! touching it. Only this module reaches the etcd client for reading.

use crate::display::escape;
use crate::exit_codes::Failure;
use crate::inspect::{Report, Service};
use serde::Serialize;

/// `holder`/`check` on a lock URL.
pub fn look_up(url: &crate::backend::etcd::EtcdUrl) -> Result<Report, Failure> {
    #[cfg(feature = "etcd")]
    return Ok(reading::inspect(url));
    #[cfg(not(feature = "etcd"))]
    {
        let _ = url;
        Err(crate::backend::etcd::not_built())
    }
}

/// The etcd key that holds a lock URL's lock.
#[derive(Debug, Clone, Serialize)]
pub struct EtcdLock {
    pub key: String,
    /// The holder's lease id, in hex as in the key.
    pub lease: String,
    /// The key's creation revision: what the holder's command got as
    /// LOCKRUN_FENCING_TOKEN.
    pub fencing_token: i64,
}

impl From<EtcdLock> for Service {
    fn from(lock: EtcdLock) -> Service {
        Service {
            name: "etcd",
            holder: "an etcd client",
            details: vec![format!(
                "etcd key {}, lease {}, fencing token {}",
                escape(&lock.key),
                escape(&lock.lease),
                lock.fencing_token
            )],
            no_past_holders: None,
            json: Service::json_of(&lock),
        }
    }
}

#[cfg(feature = "etcd")]
mod reading {
    //! `holder` and `check` on a lock URL: read who holds the lock from etcd,
    //! never touching it.
    //!
    //! The holder is the contender with the oldest key under `NAME/`; its value
    //! is its record. Its lease is alive (etcd deletes the key when the lease
    //! expires), which is what "the recorded holder is alive" means here: a
    //! pid on another machine cannot be checked from this one. A free lock
    //! shows the last holder's record, kept under `NAME` itself.
    //!
    //! Used with `--slots N` (its keys' values say N), the N oldest keys
    //! hold it, each in the slot its value names, and the report has a
    //! report per slot, as a lock file's slots have; a free slot shows its
    //! last holder, kept under `NAME.slotK`.

    use super::EtcdLock;
    use crate::backend::etcd::EtcdUrl;
    use crate::backend::etcd::client::{CALL_TIMEOUT, Client, EtcdError, Kv};
    use crate::backend::etcd::slots;
    use crate::identity::Liveness;
    use crate::inspect::{Holder, Report, State};
    use crate::record::Record;
    use std::time::Instant;

    pub fn inspect(url: &EtcdUrl) -> Report {
        let mut report = Report::free(url.text.clone());
        let client = match Client::new(url) {
            Ok(client) => client,
            Err(e) => {
                report.state = State::Unknown;
                report.reason = Some(e.message);
                return report;
            }
        };
        let unreachable = |mut report: Report, e: &dyn std::fmt::Display| {
            report.state = State::Unknown;
            report.reason = Some(format!("cannot reach etcd at {}: {e}", client.endpoints()));
            report
        };
        match client.owner(&url.name) {
            Err(e) => unreachable(report, &e),
            Ok((Some(owner), count)) => match slots_of(&owner) {
                Some(n) => {
                    slots_report(url, &client, n).unwrap_or_else(|e| unreachable(report, &e))
                }
                None => {
                    report.waiting = count.saturating_sub(1);
                    held(&mut report, owner);
                    report
                }
            },
            Ok((None, _)) => {
                let last = client
                    .get(&url.name, Instant::now() + CALL_TIMEOUT)
                    .ok()
                    .flatten();
                // Slots' last holders, if one of them released after the
                // plain lock's last holder: the lock was last used with
                // --slots, and its free slots are shown.
                let lasts = slot_lasts(url, &client);
                let newest = lasts.iter().max_by_key(|kv| kv.mod_revision);
                if let Some(n) = newest
                    .filter(|slot| {
                        last.as_ref()
                            .is_none_or(|l| slot.mod_revision > l.mod_revision)
                    })
                    .and_then(slots_of)
                {
                    return with_slots(url, n, &[], &lasts, 0);
                }
                report.record = last.and_then(|kv| Record::parse(&kv.value));
                report.record_holder_alive = Some(false);
                report
            }
        }
    }

    /// N, for a key written by a contender with `--slots N`.
    fn slots_of(kv: &Kv) -> Option<u16> {
        slots::has_slots(&kv.value)
            .then(|| slots::declared_n(&kv.value))
            .flatten()
    }

    /// The lock is held by `owner`'s key: its record, its lease's keeper,
    /// its key.
    fn held(report: &mut Report, owner: Kv) {
        report.state = State::Held;
        report.record = Record::parse(&owner.value);
        report.record_holder_alive = Some(true);
        if let Some(record) = &report.record {
            report.record_holder_alive = Some(lease_keeper_alive(record));
            // A key that got the lock while its lockrun was still queued
            // (or gone) has no command yet: no pid to name, never 0.
            report.holders = Holder::named_by(record).into_iter().collect();
        }
        report.service = Some(
            EtcdLock {
                key: owner.key,
                lease: format!("{:x}", owner.lease),
                fencing_token: owner.create_revision,
            }
            .into(),
        );
    }

    /// The last holders of slots, kept under `NAME.slotK`.
    fn slot_lasts(url: &EtcdUrl, client: &Client) -> Vec<Kv> {
        let limit = i64::from(crate::backend::MAX_SLOTS) + 1;
        client
            .keys_starting(&format!("{}.slot", url.name), limit)
            .unwrap_or_default()
            .into_iter()
            .filter(|kv| slots::last_key_slot(&url.name, &kv.key).is_some())
            .collect()
    }

    /// The lock used with `--slots N`: the N oldest keys hold it, each in
    /// the slot its value names.
    fn slots_report(url: &EtcdUrl, client: &Client, n: u16) -> Result<Report, EtcdError> {
        let (holders, count) = client.oldest_n(&url.name, n)?;
        let lasts = slot_lasts(url, client);
        Ok(with_slots(
            url,
            n,
            &holders,
            &lasts,
            count.saturating_sub(holders.len()),
        ))
    }

    /// A report per slot (as a lock file's slots are shown): held by the
    /// holder whose value names it, else free with its last holder. A
    /// holder that has not written its number yet (it is taking it now) is
    /// shown in the lowest slot no other holder names.
    fn with_slots(url: &EtcdUrl, n: u16, holders: &[Kv], lasts: &[Kv], waiting: usize) -> Report {
        let mut by_slot: Vec<Option<&Kv>> = vec![None; usize::from(n)];
        let mut unnumbered = Vec::new();
        for kv in holders {
            match slots::slot_of(&kv.value).filter(|&k| k <= n) {
                Some(k) if by_slot[usize::from(k - 1)].is_none() => {
                    by_slot[usize::from(k - 1)] = Some(kv);
                }
                _ => unnumbered.push(kv),
            }
        }
        for kv in unnumbered {
            if let Some(free) = by_slot.iter_mut().find(|s| s.is_none()) {
                *free = Some(kv);
            }
        }
        let slot_reports: Vec<Report> = (1..=n)
            .zip(by_slot)
            .map(|(k, holder)| {
                let mut slot = Report::free(format!("{}.slot{k}", url.text));
                match holder {
                    Some(kv) => held(&mut slot, kv.clone()),
                    None => {
                        slot.record = lasts
                            .iter()
                            .find(|kv| slots::last_key_slot(&url.name, &kv.key) == Some(k))
                            .and_then(|kv| Record::parse(&kv.value));
                        slot.record_holder_alive = Some(false);
                    }
                }
                slot
            })
            .collect();
        let any_held = slot_reports.iter().any(|s| s.state == State::Held);
        Report {
            state: if any_held { State::Held } else { State::Free },
            holders: slot_reports
                .iter()
                .flat_map(|s| s.holders.clone())
                .collect(),
            waiting,
            slots: Some(n),
            slot_reports: Some(slot_reports),
            ..Report::free(url.text.clone())
        }
    }

    /// Whether the lockrun that renews the holder's lease is alive. The key
    /// exists, so etcd counts the lease as alive; but a lockrun that died (or
    /// left while queued, during an outage) keeps the lock for up to a TTL
    /// with nobody running. On this host that can be seen: its pid is gone.
    /// Elsewhere, the lease is the only evidence, and it says alive.
    fn lease_keeper_alive(record: &Record) -> bool {
        let keeper = Record {
            pid: record.lockrun_pid,
            pid_start: None,
            ..record.clone()
        };
        keeper.holder_liveness() != Liveness::Dead
    }
}
