//! A queued key whose lockrun is gone (issue 12 item 15).
//!
//! A waiter that gives up (its deadline, a signal) revokes its lease,
//! which deletes its key. During an etcd outage that revoke cannot get
//! through, and when etcd comes back it restores every lease with a fresh
//! TTL: the key is back in the queue, and once the keys ahead of it go it
//! holds the lock for a whole TTL with nobody running.
//!
//! So a waiting key's value also says when its lockrun started
//! (`"lockrun_start"`, in the same clock ticks since boot as a record's
//! `pid_start`), beside the record's boot id, PID namespace and lockrun
//! pid. Another lockrun on the same host that meets such a key in the
//! queue can then tell, with certainty, that its lockrun is gone: same
//! boot, same PID namespace, and that pid now names no process, a zombie,
//! or a process that started at another time. It then revokes that key's
//! lease, as the lockrun that left would have. Nothing else is ever
//! revoked: a key from another host, another boot or PID namespace, one
//! without a start time (`--no-record`, `etcdctl lock`, an older lockrun),
//! one whose lockrun may still run, and any key whose lockrun recorded a
//! command (a `pid` in its record, or a slot number, taken just before
//! the command starts): a command may outlive its lockrun for a moment,
//! so such a key keeps its lease until the TTL, as a holder's always has.

use crate::identity;
use crate::platform::{self, ProcessState};
use crate::record::Record;
use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Deserialize)]
struct Fields {
    lockrun_start: Option<u64>,
    slot: Option<u16>,
}

/// `line` (a waiting record) with `"lockrun_start":START` added as its
/// last field. Nothing is added to an empty line (`--no-record`: nothing
/// about this lockrun is stored) or without a start time.
pub fn with_start(line: &[u8], start: Option<u64>) -> Vec<u8> {
    let body = line.trim_ascii();
    let (Some(start), Some(open)) = (start, body.strip_suffix(b"}")) else {
        return line.to_vec();
    };
    if !body.starts_with(b"{") || open.trim_ascii() == b"{" {
        return line.to_vec();
    }
    let mut out = Vec::with_capacity(body.len() + 40);
    out.extend_from_slice(open);
    out.extend_from_slice(format!(",\"lockrun_start\":{start}}}\n").as_bytes());
    out
}

/// What `-v` says of a key revoked as abandoned: its name and lease, not
/// the client's key type, so that this module stays below the client
/// that calls it.
pub fn revoked(key: &str, lease: i64) -> String {
    format!(
        "revoked the lease of {} (lease {lease:x}): the lockrun that queued it on this host is gone",
        crate::display::escape(key),
    )
}

/// This lockrun's start time, for [`with_start`].
pub fn own_start() -> Option<u64> {
    platform::own_start_time_without_allocating()
}

fn boot_id() -> Option<&'static str> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(platform::boot_id).as_deref()
}

/// Whether `value` is a waiting key's whose lockrun ran on this host and
/// is certainly gone, without having started a command.
pub fn abandoned(value: &[u8]) -> bool {
    let Some(record) = Record::parse(value) else {
        return false;
    };
    let Ok(fields) = serde_json::from_slice::<Fields>(value.trim_ascii()) else {
        return false;
    };
    if record.pid.is_some() || record.is_released() || fields.slot.is_some() {
        return false;
    }
    let (Some(pid), Some(start)) = (record.lockrun_pid, fields.lockrun_start) else {
        return false;
    };
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    let here = (boot_id(), identity::pid_namespace(), identity::host_name());
    let theirs = (
        record.boot_id.as_deref(),
        record.pid_ns,
        record.host.as_deref(),
    );
    if here.0.is_none() || here.1.is_none() || here != theirs {
        return false;
    }
    match platform::process_state(pid) {
        ProcessState::Gone | ProcessState::Zombie => true,
        ProcessState::Running { start: Some(now) } => now != start,
        ProcessState::Running { start: None } | ProcessState::Unknown => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(pid: i64, start: Option<u64>) -> Vec<u8> {
        let me = identity::Me::gather();
        let record = Record {
            lockrun: 1,
            lockrun_pid: Some(pid),
            boot_id: me.boot_id,
            host: me.host,
            pid_ns: me.pid_ns,
            ..Record::default()
        };
        with_start(&record.to_line(), start)
    }

    #[test]
    fn only_a_gone_lockrun_of_this_host_that_ran_nothing_is_abandoned() {
        let me = i64::from(std::process::id());
        let start = own_start();
        assert!(start.is_some());
        // This very process: alive, same start time.
        assert!(!abandoned(&waiting(me, start)));
        // The same pid started at another time: the pid was reused.
        assert!(abandoned(&waiting(me, start.map(|s| s + 1))));
        // No start time: cannot be sure.
        assert!(!abandoned(&waiting(me, None)));
        // A pid that names nobody (above pid_max).
        assert!(abandoned(&waiting(i64::from(i32::MAX), Some(1))));
        // It started its command, or took a slot: left to the TTL.
        let mut ran: serde_json::Value =
            serde_json::from_slice(&waiting(i64::from(i32::MAX), Some(1))).unwrap();
        ran["pid"] = 42.into();
        assert!(!abandoned(ran.to_string().as_bytes()));
        let slot = crate::backend::etcd::slots::with_slot(
            &waiting(i64::from(i32::MAX), Some(1)),
            2,
            Some(1),
        );
        assert!(!abandoned(&slot));
        // Another boot, another host: not ours to judge.
        let mut other: serde_json::Value =
            serde_json::from_slice(&waiting(i64::from(i32::MAX), Some(1))).unwrap();
        other["boot_id"] = "another-boot".into();
        assert!(!abandoned(other.to_string().as_bytes()));
        other["boot_id"] = boot_id().unwrap().into();
        other["host"] = "elsewhere".into();
        assert!(!abandoned(other.to_string().as_bytes()));
        // Not a record, or no record at all.
        assert!(!abandoned(b""));
        assert!(!abandoned(b"{\"slots\":2}"));
        assert_eq!(with_start(b"", Some(5)), b"");
    }
}
