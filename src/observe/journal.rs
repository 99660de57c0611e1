//! `--log journal`: one entry per event in the systemd journal, sent in
//! its native protocol (one datagram of `FIELD=value` lines) to its socket
//! (`/run/systemd/journal/socket`, or `$LOCKRUN_JOURNAL_SOCKET`). Built by
//! hand: libsystemd would be a C library to link, and the protocol is a
//! dozen lines.

use super::Report;

const SOCKET: &str = "/run/systemd/journal/socket";
/// Overrides [`SOCKET`] (tests bind their own).
pub const SOCKET_VARIABLE: &str = "LOCKRUN_JOURNAL_SOCKET";

pub fn send(facility: u8, priority: u8, report: &Report) {
    let datagram = datagram(facility, priority, report);
    super::send_datagram(&super::socket_path(SOCKET_VARIABLE, SOCKET), &datagram);
}

/// The entry's fields, in the native protocol.
pub fn datagram(facility: u8, priority: u8, report: &Report) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    field(&mut out, "MESSAGE", report.message().as_bytes());
    field(&mut out, "PRIORITY", priority.to_string().as_bytes());
    field(&mut out, "SYSLOG_FACILITY", facility.to_string().as_bytes());
    field(&mut out, "SYSLOG_IDENTIFIER", b"lockrun");
    field(&mut out, "LOCKRUN_EVENT", report.event.name().as_bytes());
    field(&mut out, "LOCKRUN_LOCK", report.lock.as_bytes());
    if let Some(status) = report.status {
        field(&mut out, "LOCKRUN_STATUS", status.to_string().as_bytes());
    }
    field(
        &mut out,
        "LOCKRUN_WAIT_MS",
        report.wait_ms().to_string().as_bytes(),
    );
    if let Some(ran) = report.ran_for {
        field(
            &mut out,
            "LOCKRUN_DURATION_MS",
            ran.as_millis().to_string().as_bytes(),
        );
    }
    out
}

/// `NAME=value\n`; a value with a newline in it (a lock file's name may
/// have one) in the protocol's binary form: `NAME\n`, its length as a
/// little-endian 64-bit number, the value, `\n`.
fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    if value.contains(&b'\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Event;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_value_with_a_newline_is_sent_in_the_binary_form() {
        let report = Report {
            event: Event::Busy,
            lock: "/tmp/a\nb",
            status: Some(75),
            waited: Duration::ZERO,
            ran_for: None,
            started: UNIX_EPOCH,
            ended: UNIX_EPOCH,
        };
        let d = datagram(1, 5, &report);
        let mut lock = b"LOCKRUN_LOCK\n".to_vec();
        lock.extend_from_slice(&8u64.to_le_bytes());
        lock.extend_from_slice(b"/tmp/a\nb\n");
        assert!(d.windows(lock.len()).any(|w| w == lock.as_slice()));
        assert!(d.ends_with(b"LOCKRUN_STATUS=75\nLOCKRUN_WAIT_MS=0\n"));
        assert!(d.starts_with(b"MESSAGE=/tmp/a\\nb: busy"));
    }
}
