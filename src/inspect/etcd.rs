//! `holder` and `check` on a etcd lock URL: read who holds it, never
//! touching it. Only this module reaches the etcd client for reading.

use crate::exit_codes::Failure;
use crate::inspect::Report;

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

    use crate::backend::etcd::EtcdUrl;
    use crate::backend::etcd::client::{CALL_TIMEOUT, Client};
    use crate::identity::Liveness;
    use crate::inspect::{EtcdLock, Holder, Report, State};
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
        match client.owner(&url.name) {
            Err(e) => {
                report.state = State::Unknown;
                report.reason = Some(format!("cannot reach etcd at {}: {e}", client.endpoints()));
            }
            Ok((Some(owner), count)) => {
                report.state = State::Held;
                report.waiting = count.saturating_sub(1);
                report.record = Record::parse(&owner.value);
                report.record_holder_alive = Some(true);
                if let Some(record) = &report.record {
                    report.record_holder_alive = Some(lease_keeper_alive(record));
                    // A key that got the lock while its lockrun was still queued
                    // (or gone) has no command yet: no pid to name, never 0.
                    if let Some(pid) = record
                        .pid
                        .and_then(|p| i32::try_from(p).ok())
                        .filter(|&p| p > 0)
                    {
                        report.holders = vec![Holder {
                            pid,
                            mode: "exclusive",
                            command: record.command.clone(),
                            locked_by: None,
                            span: None,
                        }];
                    }
                }
                report.etcd = Some(EtcdLock {
                    key: owner.key,
                    lease: format!("{:x}", owner.lease),
                    fencing_token: owner.create_revision,
                });
            }
            Ok((None, _)) => {
                let last = client
                    .get(&url.name, Instant::now() + CALL_TIMEOUT)
                    .ok()
                    .flatten();
                report.record = last.and_then(|kv| Record::parse(&kv.value));
                report.record_holder_alive = Some(false);
            }
        }
        report
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
