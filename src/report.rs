//! `holder`'s human output: one block per lock file, times in UTC with
//! "ago" durations, every string from a lock file or /proc escaped.

use crate::display::{self, escape};
use crate::inspect::{Holder, Report, Span, State};
use crate::record::Record;
use std::fmt::Write;

pub fn human(report: &Report) -> String {
    let path = escape(&report.path);
    if let Some(slots) = &report.slot_reports {
        return with_slots(report, &path, slots);
    }
    let mut out = match report.state {
        State::Held => held(report, &path),
        State::Free => free(report, &path),
        State::Unknown => {
            let mut text = format!(
                "{path}: unknown: {}",
                escape(report.reason.as_deref().unwrap_or(""))
            );
            if let Some(record) = report.record.as_ref().filter(|r| !r.is_released()) {
                let _ = write!(text, "\n  the record names {}", who(record));
            }
            text
        }
    };
    if report.waiting > 0 {
        let _ = write!(
            out,
            "\n  {} waiting",
            plural(report.waiting, "process", "processes")
        );
    }
    if report.unreadable && !(report.state == State::Free && report.record.is_none()) {
        out.push_str("\n  (the lock file's content could not be read, so its record is unknown)");
    }
    out
}

/// When `--max-time` runs out for a held lock: `stops at 03:00:03 UTC (in
/// 13m) (--max-time 1h)`.
fn stops_at(record: &crate::record::Record, limit: &str) -> String {
    let shown = escape(limit);
    let end = record
        .acquired_at
        .as_deref()
        .and_then(display::parse_time)
        .zip(display::parse_span(limit))
        .and_then(|(from, limit)| from.checked_add(limit));
    let Some(end) = end else {
        return format!("stops at --max-time {shown}");
    };
    match end.duration_since(std::time::SystemTime::now()) {
        Ok(left) => format!(
            "stops at {} UTC (in {}) (--max-time {shown})",
            display::clock(end),
            display::span(left)
        ),
        Err(_) => format!(
            "--max-time {shown} ran out at {} UTC: being stopped",
            display::clock(end)
        ),
    }
}

fn held(report: &Report, path: &str) -> String {
    let mode = report
        .holders
        .first()
        .map(|h| h.mode)
        .unwrap_or("exclusive");
    let record = report
        .record
        .as_ref()
        .filter(|r| !r.is_released() && report.record_holder_alive == Some(true))
        .filter(|r| {
            report.holders.is_empty()
                || report
                    .holders
                    .iter()
                    .any(|h| Some(i64::from(h.pid)) == r.pid)
        });
    if let Some(record) = record {
        let mut text = format!("{path}: held ({mode}) by {}", who(record));
        if let Some(user) = &record.user {
            let _ = write!(text, ", user {}", escape(user));
        }
        if let Some(host) = &record.host {
            let _ = write!(text, ", host {}", escape(host));
        }
        text.push_str("\n ");
        if let Some(t) = record.acquired_at.as_deref().and_then(display::parse_time) {
            let _ = write!(
                text,
                " since {} ({}),",
                display::date_time(t),
                display::ago(t)
            );
        }
        match record.lockrun_pid {
            Some(via) if !record.ran_in_place() => {
                let _ = write!(text, " via lockrun pid {via}");
            }
            _ => text.push_str(" lockrun exec'd the command in place"),
        }
        if let Some(limit) = &record.max_time {
            let _ = write!(text, "\n  {}", stops_at(record, limit));
        }
        for other in report.holders.iter().filter(|h| {
            Some(i64::from(h.pid)) != record.pid && Some(i64::from(h.pid)) != record.lockrun_pid
        }) {
            let _ = write!(text, "\n  also held through {}", process(other));
        }
        service_details(report, &mut text);
        return text;
    }

    let mut text = match report.holders.as_slice() {
        [] if report.service.is_some() => {
            let by = report.service.as_ref().map_or("", |s| s.holder);
            format!("{path}: held ({mode}) by {by}")
        }
        [] => format!(
            "{path}: held ({mode}) by a process lockrun cannot see from here \
             (outside this PID namespace, or another user's without root)"
        ),
        [only] => format!("{path}: held ({mode}) by {}", process(only)),
        // One exclusive lock, its descriptor inherited by several processes.
        [first, rest @ ..] if mode == "exclusive" => {
            let mut text = format!("{path}: held ({mode}) by {}", process(first));
            for other in rest {
                let _ = write!(text, "\n  also held through {}", process(other));
            }
            text
        }
        many => {
            let mut text = format!(
                "{path}: held ({mode}) by {}:",
                plural(many.len(), "process", "processes")
            );
            for holder in many {
                let _ = write!(text, "\n  {}", process(holder));
            }
            text
        }
    };
    match &report.record {
        None => text.push_str("\n  (no lockrun record)"),
        Some(record) if !record.is_released() => match report.record_holder_alive {
            None => {
                let _ = write!(
                    text,
                    "\n  (the record names {}, which cannot be checked from here{})",
                    who(record),
                    why_unchecked(record)
                );
            }
            Some(_) => {
                let _ = write!(
                    text,
                    "\n  (the record names {}, which does not hold it now)",
                    who(record)
                );
            }
        },
        Some(_) => {}
    }
    service_details(report, &mut text);
    text
}

/// For a lock URL: what its service says of the lock (an etcd key and its
/// fencing token, a PostgreSQL session), and why no record came with it.
fn service_details(report: &Report, text: &mut String) {
    let Some(service) = &report.service else {
        return;
    };
    for line in &service.details {
        let _ = write!(text, "\n  {line}");
    }
    if !service.details.is_empty()
        && report.record.is_none()
        && let Some(reason) = &report.reason
    {
        let _ = write!(text, "\n  ({})", escape(reason));
    }
}

fn free(report: &Report, path: &str) -> String {
    if !report.exists {
        return format!("{path}: free, no lock file");
    }
    let Some(record) = &report.record else {
        if report.unreadable {
            return format!(
                "{path}: free; its content could not be read, so who held it last is unknown"
            );
        }
        if let Some(why) = report.service.as_ref().and_then(|s| s.no_past_holders) {
            return format!("{path}: free ({why})");
        }
        return format!("{path}: free (no holder record)");
    };
    let acquired = record.acquired_at.as_deref().and_then(display::parse_time);
    let released = record.released_at.as_deref().and_then(display::parse_time);
    let mut text = format!("{path}: free; last held by {}", who(record));
    match (acquired, released) {
        (Some(from), Some(to)) => {
            let held_for = to.duration_since(from).unwrap_or_default();
            let _ = write!(
                text,
                " {}–{} UTC (held {}, released {} ago)",
                display::date_time(from).trim_end_matches(" UTC"),
                display::clock(to),
                display::span(held_for),
                display::span(
                    std::time::SystemTime::now()
                        .duration_since(to)
                        .unwrap_or_default()
                )
            );
        }
        (Some(from), None) => {
            let _ = write!(
                text,
                " since {} ({})",
                display::date_time(from),
                display::ago(from)
            );
        }
        _ => {}
    }
    if let Some(exit) = &record.exit {
        let _ = write!(text, ", {}", display::exit(exit));
    } else if !record.is_released() && record.ran_in_place() {
        // Normal for -F, not a crash.
        text.push_str(" (run with -F: how it ended is not recorded)");
    } else if !record.is_released() {
        match report.record_holder_alive {
            Some(false) => text.push_str(", which crashed or was killed without releasing it"),
            Some(true) => text.push_str(", which is still running but no longer holds the lock"),
            None => {
                let _ = write!(
                    text,
                    ", which lockrun cannot check from here{}",
                    why_unchecked(record)
                );
            }
        }
    }
    text
}

/// `pid 4243 \`backup.sh --full\``
fn who(record: &Record) -> String {
    let pid = record
        .pid
        .map(|p| p.to_string())
        .unwrap_or_else(|| "?".into());
    let mut text = format!("pid {pid} `{}`", display::record_command(record));
    if let Some(host) = &record.host
        && Some(host.as_str()) != crate::identity::host_name()
    {
        let _ = write!(text, " on {}", escape(host));
    }
    text
}

/// Why a recorded pid cannot be looked up here, when the record says.
fn why_unchecked(record: &Record) -> &'static str {
    if record
        .host
        .as_deref()
        .is_some_and(|h| Some(h) != crate::identity::host_name())
    {
        ": it ran on another host"
    } else if record.pid_ns.is_some() && record.pid_ns != crate::identity::pid_namespace() {
        ": its pid is counted in another PID namespace"
    } else {
        ""
    }
}

/// `, POSIX lock on bytes 0-4` for a byte-range lock; nothing for flock(2),
/// which is always the whole file and what lockrun takes.
fn span(span: Option<&Span>) -> String {
    let Some(span) = span.filter(|s| s.kind != "flock") else {
        return String::new();
    };
    let kind = match span.kind {
        "ofd" => "OFD",
        "posix" => "POSIX",
        other => other,
    };
    match (span.start, span.end) {
        (0, None) => format!(", {kind} lock on the whole file"),
        (start, None) => format!(", {kind} lock on bytes {start} to the end of the file"),
        (start, Some(end)) => format!(", {kind} lock on bytes {start}-{end}"),
    }
}

fn process(holder: &Holder) -> String {
    let command = holder
        .command
        .as_deref()
        .map(display::command)
        .unwrap_or_else(|| "?".to_owned());
    let mut text = format!(
        "pid {} `{command}`{}",
        holder.pid,
        span(holder.span.as_ref())
    );
    if let Some(caller) = holder.locked_by {
        let _ = write!(
            text,
            ", which inherited it from pid {caller} (no longer a holder)"
        );
    }
    text
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `--slots N`: how many slots are held, then each slot's own report.
fn with_slots(report: &Report, path: &str, slots: &[Report]) -> String {
    let held = slots.iter().filter(|s| s.state == State::Held).count();
    let mut out = format!("{path}: {held} of {} slots held", slots.len());
    if report.state == State::Unknown {
        let _ = write!(
            out,
            " (unknown: {})",
            escape(report.reason.as_deref().unwrap_or(""))
        );
    }
    // LOCKFILE held other than by the queue's head: it takes no slot, so
    // it excludes no slot holder, but every waiter queues behind it.
    for other in report.lockfile_holders.iter().flatten() {
        let _ = write!(
            out,
            "\n  {path} itself: held ({}) by {}, outside the slots (waiters queue behind it)",
            other.mode,
            process(other)
        );
    }
    for (k, slot) in slots.iter().enumerate() {
        let mut plain = slot.clone();
        plain.waiting = 0;
        let text = human(&plain);
        let own = escape(&slot.path);
        let text = text.strip_prefix(own.as_str()).unwrap_or(&text);
        let _ = write!(out, "\n  slot {}{}", k + 1, text.replace('\n', "\n  "));
    }
    if report.waiting > 0 {
        let _ = write!(
            out,
            "\n  {} waiting",
            plural(report.waiting, "process", "processes")
        );
    }
    out
}
