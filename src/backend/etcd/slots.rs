//! `--slots N` on an etcd lock URL: how N and a holder's slot number live
//! in etcd.
//!
//! Contenders queue as for one lock (`NAME/<lease>`, the key's value its
//! record); the `N` oldest keys hold the lock, as `consul lock -n` has it.
//! Each key's value is the record with two more fields, `"slots":N` (what
//! every contender must agree on: the next one reads it from the keys
//! already there) and, once it holds, `"slot":K` (its `LOCKRUN_SLOT`).
//! Record readers ignore both. A free slot's last holder is kept under
//! `NAME.slotK`, as a lock file's slot is `LOCKFILE.slotK`.

use crate::record::Record;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fields {
    slots: Option<u16>,
    slot: Option<u16>,
}

fn fields(value: &[u8]) -> Option<Fields> {
    if value.len() as u64 > crate::record::MAX_RECORD_BYTES {
        return None;
    }
    serde_json::from_slice(value.trim_ascii()).ok()
}

/// The slot number a holder's value names.
pub fn slot_of(value: &[u8]) -> Option<u16> {
    fields(value)?.slot.filter(|&k| k >= 1)
}

/// The N a contender's value says it was started with: its `slots`, 1
/// for a lockrun record without (a plain lock is one slot), `None` for a
/// key lockrun did not write (`etcdctl lock`), which says nothing.
pub fn declared_n(value: &[u8]) -> Option<u16> {
    match fields(value).and_then(|f| f.slots).filter(|&n| n >= 1) {
        Some(n) => Some(n),
        None => Record::parse(value).map(|_| 1),
    }
}

/// Whether a value was written by a contender with `--slots` (any N).
pub fn has_slots(value: &[u8]) -> bool {
    fields(value).is_some_and(|f| f.slots.is_some())
}

/// `line` (a record, or nothing with `--no-record`) with `slots` and
/// `slot` added as the object's last fields, field order kept.
pub fn with_slot(line: &[u8], n: u16, slot: Option<u16>) -> Vec<u8> {
    let mut extra = format!("\"slots\":{n}");
    if let Some(k) = slot {
        extra.push_str(&format!(",\"slot\":{k}"));
    }
    let body = line.trim_ascii();
    let mut out = Vec::with_capacity(body.len() + extra.len() + 3);
    match body.strip_suffix(b"}") {
        Some(open) if body.starts_with(b"{") => {
            out.extend_from_slice(open);
            if open.trim_ascii() != b"{" {
                out.push(b',');
            }
        }
        _ => out.push(b'{'),
    }
    out.extend_from_slice(extra.as_bytes());
    out.extend_from_slice(b"}\n");
    out
}

/// Where slot `k`'s last holder's record is kept once it is free.
pub fn last_key(name: &str, k: u16) -> String {
    format!("{name}.slot{k}")
}

/// The slot number of a key written by [`last_key`] for `name`.
pub fn last_key_slot(name: &str, key: &str) -> Option<u16> {
    let digits = key.strip_prefix(name)?.strip_prefix(".slot")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&k| k >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_fields_ride_along_a_record_and_readers_still_parse_it() {
        let record = Record {
            lockrun: 1,
            pid: Some(42),
            ..Record::default()
        };
        let value = with_slot(&record.to_line(), 3, Some(2));
        assert!(value.starts_with(b"{\"lockrun\":1,\"pid\":42,"));
        assert!(value.ends_with(b",\"slots\":3,\"slot\":2}\n"));
        assert_eq!(Record::parse(&value).and_then(|r| r.pid), Some(42));
        assert_eq!(slot_of(&value), Some(2));
        assert_eq!(declared_n(&value), Some(3));
        let bare = with_slot(b"", 4, None);
        assert_eq!(bare, b"{\"slots\":4}\n");
        assert_eq!((declared_n(&bare), slot_of(&bare)), (Some(4), None));
        assert!(Record::parse(&bare).is_none());
        assert_eq!(declared_n(&record.to_line()), Some(1));
        assert_eq!(declared_n(b""), None);
        assert_eq!(declared_n(b"garbage"), None);
    }

    #[test]
    fn last_keys_name_their_slot() {
        assert_eq!(last_key("jobs/gpu", 2), "jobs/gpu.slot2");
        assert_eq!(last_key_slot("jobs/gpu", "jobs/gpu.slot12"), Some(12));
        assert_eq!(last_key_slot("jobs/gpu", "jobs/gpu.slot"), None);
        assert_eq!(last_key_slot("jobs/gpu", "jobs/gpu.slot2/x"), None);
        assert_eq!(last_key_slot("jobs/gpu", "jobs/gpu"), None);
    }
}
