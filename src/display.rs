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

pub fn exit(exit: &Exit) -> String {
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
/// timed out. Every backend and form says it the same way.
pub fn busy(label: &str, holder: &str, waited: Duration) -> String {
    if waited.is_zero() {
        format!("{label} is held by {holder}")
    } else {
        format!(
            "timed out after {} waiting for {label}, held by {holder}",
            span(waited)
        )
    }
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
