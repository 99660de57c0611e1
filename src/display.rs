//! Turning records and processes into text for people.
//!
//! Everything shown here may come from a lock file anyone can write, so
//! every string passes through [`escape`]: a hostile record must not be able
//! to move the cursor, change colours, retitle the terminal or reorder the
//! text of the admin reading `lockrun holder` at 3 a.m.

use crate::record::{Exit, Record};
use std::fmt::Write;
use std::time::{Duration, SystemTime};

/// Replaces control characters (C0, DEL, C1) and the characters that
/// reorder or hide text with visible escapes: see [`crate::sanitize`].
pub fn escape(text: &str) -> String {
    crate::sanitize::for_terminal(text)
}

/// How many terminal columns a character takes, as wcwidth(3) counts them
/// for text that [`escape`] has passed: combining marks take none (they sit
/// on the character before), East Asian wide and fullwidth characters and
/// emoji take two, everything else one. Approximate at the edges of
/// Unicode, where terminals disagree among themselves; exact for the
/// scripts people name files and hosts in.
pub fn char_columns(c: char) -> usize {
    let c = c as u32;
    let zero = matches!(c,
        0x0300..=0x036F | 0x0483..=0x0489 | 0x0591..=0x05BD | 0x0610..=0x061A
        | 0x064B..=0x065F | 0x0E31 | 0x0E34..=0x0E3A | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0x302A..=0x302D | 0x3099..=0x309A
        | 0xFE00..=0xFE0F | 0xFE20..=0xFE2F | 0xE0100..=0xE01EF);
    if zero {
        return 0;
    }
    let wide = matches!(c,
        0x1100..=0x115F | 0x231A..=0x231B | 0x2329..=0x232A | 0x23E9..=0x23EC
        | 0x23F0 | 0x23F3 | 0x25FD..=0x25FE | 0x2614..=0x2615 | 0x2648..=0x2653
        | 0x267F | 0x2693 | 0x26A1 | 0x26AA..=0x26AB | 0x26BD..=0x26BE
        | 0x26C4..=0x26C5 | 0x26CE | 0x26D4 | 0x26EA | 0x26F2..=0x26F3 | 0x26F5
        | 0x26FA | 0x26FD | 0x2705 | 0x270A..=0x270B | 0x2728 | 0x274C | 0x274E
        | 0x2753..=0x2755 | 0x2757 | 0x2795..=0x2797 | 0x27B0 | 0x27BF
        | 0x2B1B..=0x2B1C | 0x2B50 | 0x2B55 | 0x2E80..=0x303E | 0x3041..=0x33FF
        | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xA000..=0xA4CF | 0xA960..=0xA97F
        | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF | 0xFE10..=0xFE19 | 0xFE30..=0xFE6F
        | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6 | 0x16FE0..=0x16FE4 | 0x17000..=0x18CFF
        | 0x1AFF0..=0x1B2FF | 0x1F004 | 0x1F0CF | 0x1F18E | 0x1F191..=0x1F19A
        | 0x1F200..=0x1F251 | 0x1F300..=0x1F64F | 0x1F680..=0x1F6FF
        | 0x1F7E0..=0x1F7EB | 0x1F90C..=0x1F9FF | 0x1FA70..=0x1FAFF
        | 0x20000..=0x2FFFD | 0x30000..=0x3FFFD);
    if wide { 2 } else { 1 }
}

/// The columns a string takes on a terminal (see [`char_columns`]).
pub fn columns(text: &str) -> usize {
    text.chars().map(char_columns).sum()
}

/// A command line as a person would type it: arguments with spaces or
/// quotes are single-quoted, control characters escaped.
pub fn command(argv: &[String]) -> String {
    let mut out = String::new();
    for (i, arg) in argv.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let plain = !arg.is_empty()
            && arg
                .chars()
                .all(|c| c.is_alphanumeric() || "-_./=:,+@%^".contains(c));
        if plain {
            out.push_str(&escape(arg));
        } else {
            out.push('\'');
            out.push_str(&escape(&arg.replace('\'', "'\\''")));
            out.push('\'');
        }
    }
    out
}

pub fn parse_time(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// `2026-11-29 02:00:03 UTC`
pub fn date_time(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.replacen('T', " ", 1).replace('Z', " UTC")
}

/// `02:00:03`
pub fn clock(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.get(11..19).unwrap_or(&s).to_owned()
}

/// `250ms`, `1.8s`, `13m 20s`: tenths of a second under a minute (a
/// `-w 1.8` timeout must not read as "1s"), whole seconds above.
pub fn span(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    if secs < 60 {
        let tenths = d.subsec_millis() / 100;
        return if tenths == 0 {
            format!("{secs}s")
        } else {
            format!("{secs}.{tenths}s")
        };
    }
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

pub fn ago(t: SystemTime) -> String {
    match SystemTime::now().duration_since(t) {
        Ok(d) => format!("{} ago", span(d)),
        Err(_) => "in the future: check the clocks".to_owned(),
    }
}

/// Reads back what [`span`] wrote (`1.8s`, `13m 20s`), as a record's
/// `max_time` keeps it.
pub fn parse_span(text: &str) -> Option<Duration> {
    if let Ok(d) = humantime::parse_duration(text) {
        return Some(d);
    }
    let secs: f64 = text.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

pub fn exit(exit: &Exit) -> String {
    let how = exit_status(exit);
    match &exit.max_time {
        Some(limit) => format!("{how}, stopped by lockrun at --max-time {}", escape(limit)),
        None => how,
    }
}

fn exit_status(exit: &Exit) -> String {
    match (exit.code, exit.signal) {
        (_, Some(sig)) => match signal_name(sig) {
            Some(name) => format!("killed by signal {sig} ({name})"),
            None => format!("killed by signal {sig}"),
        },
        (Some(code), None) => format!("exit {code}"),
        (None, None) => "exit unknown".to_owned(),
    }
}

pub fn signal_name(sig: i32) -> Option<&'static str> {
    signal_hook::low_level::signal_name(sig)
}

/// The command a record names, escaped and shortened for one line.
pub fn record_command(record: &Record) -> String {
    let text = command(record.command.as_deref().unwrap_or_default());
    if text.chars().count() > 120 {
        text.chars().take(117).collect::<String>() + "..."
    } else {
        text
    }
}

/// `pid 4243 (backup.sh --full) since 02:00:03 (13m ago)`, for conflict and
/// waiting messages, from an unreleased record.
pub fn holder_summary(record: &Record) -> String {
    let mut out = match record.pid {
        Some(pid) => format!("pid {pid}"),
        None => "an unknown process".to_owned(),
    };
    if record.command.is_some() {
        let _ = write!(out, " ({})", record_command(record));
    }
    if let Some(host) = &record.host
        && Some(host.as_str()) != crate::identity::host_name()
    {
        let _ = write!(out, " on {}", escape(host));
    }
    if let Some(t) = record.acquired_at.as_deref().and_then(parse_time) {
        let _ = write!(out, " since {} ({})", clock(t), ago(t));
    }
    out
}

/// The message for a lock not acquired: busy at once, or a wait that
/// timed out. Every backend and form says it the same way. `held` is what
/// follows "held": `by pid 4243 (…)`, `shared by 3 processes`.
pub fn busy(label: &str, held: &str, waited: Duration) -> String {
    if waited.is_zero() {
        format!("{label} is held {held}")
    } else {
        format!(
            "timed out after {} waiting for {label}, held {held}",
            span(waited)
        )
    }
}

/// The bytes a byte-range lock covers, `end` inclusive (`None`: to the end
/// of the file): `bytes 0-4`, `bytes 10 to the end of the file`, `the
/// whole file`.
pub fn byte_range(start: u64, end: Option<u64>) -> String {
    match (start, end) {
        (0, None) => "the whole file".to_owned(),
        (start, None) => format!("bytes {start} to the end of the file"),
        (start, Some(end)) => format!("bytes {start}-{end}"),
    }
}

/// An error with its causes, each said once: a TLS failure is three or four
/// layers down in a client library's errors, and the top layer alone
/// ("transport error") tells a person nothing.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_control_characters_survive() {
        let hostile = "a\u{1b}[2J\u{7}b\u{9b}c\u{0}";
        let shown = escape(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert!(shown.contains("\\u{1b}"));
    }

    #[test]
    fn quotes_what_needs_quoting() {
        let argv = vec![
            "backup.sh".to_owned(),
            "--full".to_owned(),
            "a b".to_owned(),
            String::new(),
        ];
        assert_eq!(command(&argv), "backup.sh --full 'a b' ''");
    }
}
