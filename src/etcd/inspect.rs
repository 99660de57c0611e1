//! `holder` and `check` on a lock URL: read who holds the lock from etcd,
//! never touching it.
//!
//! The holder is the contender with the oldest key under `NAME/`; its value
//! is its record. Its lease is alive (etcd deletes the key when the lease
//! expires), which is what "the recorded holder is alive" means here: a
//! pid on another machine cannot be checked from this one. A free lock
//! shows the last holder's record, kept under `NAME` itself.

use super::EtcdUrl;
use super::client::{CALL_TIMEOUT, Client};
use crate::inspect::{EtcdLock, Holder, Report, State};
use crate::record::Record;
use std::time::Instant;

pub fn inspect(url: &EtcdUrl) -> Report {
    let client = Client::new(url.endpoints.clone());
    let mut report = Report::free(url.text.clone());
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
                report.holders = vec![Holder {
                    pid: record.pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0),
                    mode: "exclusive",
                    command: record.command.clone(),
                    locked_by: None,
                    span: None,
                }];
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
