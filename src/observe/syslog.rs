//! `--log syslog`: one RFC 5424 line per event on the local syslog socket
//! (`/dev/log`, or `$LOCKRUN_SYSLOG_SOCKET`), built by hand: it is one
//! `format!`, and a syslog crate would bring more than it.

use super::Report;

/// The socket syslog(3) writes to.
const SOCKET: &str = "/dev/log";
/// Overrides [`SOCKET`] (tests bind their own; a chroot may need another).
pub const SOCKET_VARIABLE: &str = "LOCKRUN_SYSLOG_SOCKET";

/// The SD-ID of lockrun's structured data. An SD-ID of our own must carry
/// an IANA enterprise number after `@`; 32473 is the one RFC 5612 reserves
/// for documentation and examples, which is what a project without its own
/// number may use without claiming someone else's.
const SD_ID: &str = "lockrun@32473";

pub fn send(facility: u8, severity: u8, report: &Report) {
    let line = line(facility, severity, report, host());
    super::send_datagram(
        &super::socket_path(SOCKET_VARIABLE, SOCKET),
        line.as_bytes(),
    );
}

/// The host name as RFC 5424 allows it (printable US-ASCII, no space, at
/// most 255 characters), or its NILVALUE.
fn host() -> String {
    match crate::identity::host_name() {
        Some(name)
            if !name.is_empty()
                && name.len() <= 255
                && name.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            name.to_owned()
        }
        _ => "-".to_owned(),
    }
}

/// `<PRI>1 TIMESTAMP HOST lockrun PID MSGID [SD] MSG`. The MSG is written
/// without the UTF-8 byte order mark RFC 5424 asks of a UTF-8 MSG: it is
/// ASCII but for a lock's name, and rsyslog and journald show a BOM as
/// garbage at the start of the message.
pub fn line(facility: u8, severity: u8, report: &Report, host: String) -> String {
    let pri = u32::from(facility) * 8 + u32::from(severity);
    let time = humantime::format_rfc3339_micros(report.ended);
    let mut sd = format!(
        "[{SD_ID} event=\"{}\" lock=\"{}\"",
        report.event.name(),
        param(&crate::display::escape(report.lock))
    );
    if let Some(status) = report.status {
        sd.push_str(&format!(" status=\"{status}\""));
    }
    sd.push_str(&format!(" wait_ms=\"{}\"", report.wait_ms()));
    if let Some(ran) = report.ran_for {
        sd.push_str(&format!(" duration_ms=\"{}\"", ran.as_millis()));
    }
    sd.push(']');
    format!(
        "<{pri}>1 {time} {host} lockrun {} {} {sd} {}",
        std::process::id(),
        report.event.name(),
        report.message()
    )
}

/// A PARAM-VALUE: `"`, `\` and `]` escaped with a backslash (RFC 5424
/// §6.3.3).
fn param(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Event;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_line_is_rfc5424_with_the_events_structured_data() {
        let report = Report {
            event: Event::Finished,
            lock: "/var/lock/a\"b].lock",
            status: Some(3),
            waited: Duration::from_millis(12),
            ran_for: Some(Duration::from_millis(1500)),
            started: UNIX_EPOCH,
            ended: UNIX_EPOCH + Duration::from_secs(1_764_758_400),
        };
        let line = line(9, 4, &report, "box".to_owned());
        let pid = std::process::id();
        assert_eq!(
            line,
            format!(
                "<76>1 2025-12-03T10:40:00.000000Z box lockrun {pid} finished [lockrun@32473 event=\"finished\" lock=\"/var/lock/a\\\"b\\].lock\" status=\"3\" wait_ms=\"12\" duration_ms=\"1500\"] /var/lock/a\"b].lock: finished with status 3 after 1.5s"
            )
        );
    }
}
