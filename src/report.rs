//! `holder`'s human output: one block per lock file, times in UTC with
//! "ago" durations, every string from a lock file or /proc escaped.

use crate::display::{self, escape};
use crate::inspect::{Holder, Report, Span, State};
use crate::record::Record;
use std::fmt::Write;

/// One line for `lockrun list`: the first line `holder` prints (the
/// holders themselves when it lists them below), with the waiters' count.
pub fn row(report: &Report) -> String {
    let text = human(report);
    let mut lines = text.lines();
    let mut line = lines.next().unwrap_or_default().to_owned();
    // "held (shared) by 2 processes:" lists them on the lines below.
    if let Some(head) = line.strip_suffix(':') {
        let each: Vec<&str> = lines
            .take_while(|l| l.starts_with("  "))
            .map(str::trim)
            .collect();
        line = format!("{head}: {}", each.join("; "));
    } else {
        // Since when, and when --max-time stops it: on the lines below.
        for more in lines.filter(|l| {
            let l = l.trim_start();
            l.starts_with("since ") || l.starts_with("stops at ") || l.contains("(--max-time ")
        }) {
            line.push_str(", ");
            line.push_str(more.trim().trim_end_matches(','));
        }
    }
    if report.waiting > 0 {
        line.push_str(&format!(" [{} waiting]", report.waiting));
    }
    if (report.state == State::Unknown || report.path.starts_with("(unknown path)"))
        && let Some(reason) = &report.reason
        && !line.contains(reason.as_str())
    {
        line.push_str(&format!(" ({})", escape(reason)));
    }
    line
}

/// Writes REPORT to stdout, as JSON or in words: `holder`'s and `check`'s
/// one way out on every OS. A report that cannot be written
/// (`>/dev/full`, a closed pipe) is an answer nobody got: 71 with the OS
/// error rather than a panic or a status that claims the report was made.
pub fn print(report: &Report, json: bool) -> Result<(), crate::exit_codes::Failure> {
    use std::io::Write as _;
    let text = if json {
        crate::sanitize::json(report).unwrap_or_default()
    } else {
        human(report)
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| {
            crate::exit_codes::Failure::new(
                crate::exit_codes::OS_ERROR,
                format!("cannot write to standard output: {e}"),
            )
        })
}

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
    // A held lock says it where it would say "(no lockrun record)", a
    // free one in its first line: only an unknown one needs it here.
    if report.unreadable && report.state == State::Unknown {
        out.push_str(UNREADABLE);
    }
    out
}

const UNREADABLE: &str =
    "\n  (the lock file's content could not be read, so its record is unknown)";

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
    let locks = separate_locks(&report.holders);
    if locks.len() > 1 {
        return held_by_several(report, path, &locks);
    }
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
        let kind = report
            .holders
            .iter()
            .find(|h| Some(i64::from(h.pid)) == record.pid)
            .or(report.holders.first())
            .and_then(|h| h.span.as_ref());
        let mut text = format!("{path}: held ({mode}) by {}{}", who(record), span(kind));
        recorded_holder(&mut text, record, "\n ");
        if let Some(limit) = &record.max_time {
            let _ = write!(text, "\n  {}", stops_at(record, limit));
        }
        also(&mut text, record, "held together with");
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
            let many: Vec<&Holder> = many.iter().collect();
            let locks = by_descriptor(&many);
            if let [one] = locks.as_slice()
                && let Some((first, rest)) = one.split_first()
            {
                // One shared lock, its descriptor inherited: one holder.
                let mut text = format!("{path}: held ({mode}) by {}", process(first));
                for other in rest {
                    let _ = write!(text, "\n  also held through {}", process(other));
                }
                text
            } else {
                let mut text = format!(
                    "{path}: held ({mode}) by {}:",
                    plural(locks.len(), "process", "processes")
                );
                list_by_descriptor(&mut text, &locks, "\n  ", process);
                text
            }
        }
    };
    record_note(report, &mut text);
    service_details(report, &mut text);
    text
}

/// Under a held lock whose record names none of its holders: what the
/// record says, and why it is not believed.
fn record_note(report: &Report, text: &mut String) {
    match &report.record {
        None if report.unreadable => text.push_str(UNREADABLE),
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
            // Alive, missing from the holders found, and its descriptors
            // hidden from us: "does not hold it" would be a guess.
            Some(true) if report.record_unconfirmed => {
                let pid = record
                    .pid
                    .map_or_else(|| "PID".to_owned(), |p| p.to_string());
                let _ = write!(
                    text,
                    "\n  (the record names {}; whether it holds the lock cannot be told from \
                     here: its descriptors (/proc/{pid}/fdinfo) are another user's, which only \
                     root may read)",
                    who(record)
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
}

/// The holders grouped by the lock they hold: its kind, bytes and mode.
/// Processes holding one lock through an inherited descriptor fall in one
/// group; the holders of two byte ranges, or of a flock(2) lock and a
/// fcntl one, are separate locks and never one "also held through" the
/// other.
fn separate_locks(holders: &[Holder]) -> Vec<Vec<&Holder>> {
    let mut locks: Vec<Vec<&Holder>> = Vec::new();
    for holder in holders {
        let same = |other: &&Holder| other.span == holder.span && other.mode == holder.mode;
        match locks.iter_mut().find(|lock| lock.first().is_some_and(same)) {
            Some(lock) => lock.push(holder),
            None => locks.push(vec![holder]),
        }
    }
    locks
}

/// The holders of one shared lock, one group per lock taken: the kernel
/// keeps one lock per open file description, and every process holding
/// that description (`lockrun -s` and the command it started, which
/// inherits the descriptor) holds that one lock, not one more. Counted
/// and listed by process, two `lockrun -s` showed as four holders. A group
/// starts with the process that took the lock, when it still holds it.
/// Holders the kernel names no taker for are each their own group.
fn by_descriptor<'a>(holders: &[&'a Holder]) -> Vec<Vec<&'a Holder>> {
    let mut groups: Vec<Vec<&Holder>> = Vec::new();
    for &holder in holders {
        let same = |group: &&mut Vec<&Holder>| {
            holder.lock_owner.is_some()
                && group
                    .first()
                    .is_some_and(|g| g.lock_owner == holder.lock_owner)
        };
        match groups.iter_mut().find(same) {
            Some(group) => group.push(holder),
            None => groups.push(vec![holder]),
        }
    }
    for group in &mut groups {
        if let Some(at) = group.iter().position(|h| h.lock_owner == Some(h.pid)) {
            group[..=at].rotate_right(1);
        }
    }
    groups
}

/// Each lock of [`by_descriptor`] on a line, the processes that hold it
/// through an inherited descriptor under it.
fn list_by_descriptor(
    text: &mut String,
    locks: &[Vec<&Holder>],
    indent: &str,
    describe: fn(&Holder) -> String,
) {
    for lock in locks {
        let Some((first, rest)) = lock.split_first() else {
            continue;
        };
        let _ = write!(text, "{indent}{}", describe(first));
        for other in rest {
            let _ = write!(text, "{indent}  also held through {}", describe(other));
        }
    }
}

/// Several locks on one file (byte ranges, or locks of different kinds):
/// one block per lock, each with its kind, range and mode, and the record
/// only under the lock its holder holds.
fn held_by_several(report: &Report, path: &str, locks: &[Vec<&Holder>]) -> String {
    let mut text = format!("{path}: held by {} separate locks", locks.len());
    let record = report
        .record
        .as_ref()
        .filter(|r| !r.is_released() && report.record_holder_alive == Some(true));
    let mut record_shown = false;
    for lock in locks {
        let Some(first) = lock.first() else {
            continue;
        };
        let what = lock_name(first.span.as_ref());
        let mode = first.mode;
        let recorded = record.filter(|r| lock.iter().any(|h| Some(i64::from(h.pid)) == r.pid));
        if let Some(record) = recorded {
            record_shown = true;
            let _ = write!(text, "\n  {what} ({mode}): {}", who(record));
            recorded_holder(&mut text, record, "\n   ");
            for other in lock.iter().filter(|h| {
                Some(i64::from(h.pid)) != record.pid && Some(i64::from(h.pid)) != record.lockrun_pid
            }) {
                let _ = write!(text, "\n    also held through {}", process_only(other));
            }
            continue;
        }
        match (mode, lock.as_slice()) {
            ("shared", many @ [_, _, ..]) if by_descriptor(many).len() > 1 => {
                let locks = by_descriptor(many);
                let _ = write!(
                    text,
                    "\n  {what} ({mode}) by {}:",
                    plural(locks.len(), "process", "processes")
                );
                list_by_descriptor(&mut text, &locks, "\n    ", process_only);
            }
            ("shared", many @ [_, _, ..]) => {
                // One shared lock, its descriptor inherited: one holder.
                let locks = by_descriptor(many);
                for (first, rest) in locks.iter().filter_map(|lock| lock.split_first()) {
                    let _ = write!(text, "\n  {what} ({mode}): {}", process_only(first));
                    for other in rest {
                        let _ = write!(text, "\n    also held through {}", process_only(other));
                    }
                }
            }
            (_, [first, rest @ ..]) => {
                let _ = write!(text, "\n  {what} ({mode}): {}", process_only(first));
                for other in rest {
                    let _ = write!(text, "\n    also held through {}", process_only(other));
                }
            }
            (_, []) => {}
        }
    }
    if !record_shown {
        record_note(report, &mut text);
    }
    service_details(report, &mut text);
    text
}

/// `OFD lock on bytes 0-4`, `flock(2) lock on the whole file`.
fn lock_name(span: Option<&Span>) -> String {
    let Some(span) = span else {
        return "lock".to_owned();
    };
    let kind = match span.kind {
        "flock" => "flock(2)",
        "ofd" => "OFD",
        "posix" => "POSIX",
        other => other,
    };
    format!(
        "{kind} lock on {}",
        display::byte_range(span.start, span.end)
    )
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
    let mut set = String::new();
    also(&mut set, record, "held together with");
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
    text + &set
}

/// The rest of an `--also` set the record's run holds (or held) with this
/// lock, on a line of its own: `holder` on any lock of a set names the
/// whole set.
fn also(text: &mut String, record: &Record, words: &str) {
    let Some(others) = record.also.as_ref().filter(|o| !o.is_empty()) else {
        return;
    };
    let others: Vec<String> = others.iter().map(|o| escape(o)).collect();
    let _ = write!(text, "\n  {words} {} (--also)", others.join(", "));
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
    format!(
        ", {kind} lock on {}",
        display::byte_range(span.start, span.end)
    )
}

fn process(holder: &Holder) -> String {
    described(holder, true)
}

/// A holder under a heading that already names its lock's kind and range.
fn process_only(holder: &Holder) -> String {
    described(holder, false)
}

fn described(holder: &Holder, with_span: bool) -> String {
    let command = holder
        .command
        .as_deref()
        .map(display::command)
        .unwrap_or_else(|| "?".to_owned());
    let kind = if with_span {
        span(holder.span.as_ref())
    } else {
        String::new()
    };
    let mut text = format!("pid {} `{command}`{kind}", holder.pid);
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

/// What a record adds about its holder, for one lock or one of several:
/// `, user U, host H`, then on the next line (`indent`) since when and
/// through which lockrun.
fn recorded_holder(text: &mut String, record: &Record, indent: &str) {
    if let Some(user) = &record.user {
        let _ = write!(text, ", user {}", escape(user));
    }
    if let Some(host) = &record.host {
        let _ = write!(text, ", host {}", escape(host));
    }
    text.push_str(indent);
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
}

/// How `lockrun list` lays its table out: the terminal's width to cut
/// rows to (`None`: not a terminal, never cut), and whether to colour
/// the state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Layout {
    pub width: Option<usize>,
    pub color: bool,
}

impl Layout {
    /// For standard output: cut to `COLUMNS`, or the terminal's width,
    /// only when it is a terminal (a pipe or a file gets whole rows).
    /// `color`: `Some` as asked (`--color always`, `never`); `None` for
    /// `auto`: on a terminal, unless NO_COLOR is set to anything but "".
    pub fn for_stdout(color: Option<bool>) -> Layout {
        use std::io::IsTerminal;
        let stdout = std::io::stdout();
        let terminal = stdout.is_terminal();
        let width = terminal
            .then(|| {
                std::env::var("COLUMNS")
                    .ok()
                    .and_then(|c| c.trim().parse::<usize>().ok())
                    .filter(|&c| c > 0)
                    .or_else(|| {
                        use crate::platform::AsFd;
                        crate::platform::terminal_columns(stdout.as_fd())
                    })
            })
            .flatten();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Layout {
            width,
            color: color.unwrap_or(terminal && !no_color),
        }
    }
}

/// `lockrun list`'s human output: a header and one row per report, in
/// aligned columns (path, state, kind and mode, waiters, slots when any
/// lock has them, then what `holder`'s first line says of it), each row cut
/// to the terminal's width when there is one.
pub fn table(reports: &[Report], layout: Layout) -> Vec<String> {
    let with_slots = reports.iter().any(|r| r.slots.is_some());
    let mut rows: Vec<Vec<String>> = vec![
        ["PATH", "STATE", "KIND", "WAITERS"]
            .into_iter()
            .chain(with_slots.then_some("SLOTS"))
            .chain(["HOLDER"])
            .map(str::to_owned)
            .collect(),
    ];
    for report in reports {
        let mut cells = vec![
            escape(&report.path),
            state_word(report.state).to_owned(),
            kind(report),
            report.waiting.to_string(),
        ];
        if with_slots {
            cells.push(slots_held(report));
        }
        cells.push(detail(report));
        rows.push(cells);
    }
    let columns = rows.first().map_or(0, Vec::len);
    // The last column is free text, never padded.
    let widths: Vec<usize> = (0..columns.saturating_sub(1))
        .map(|c| {
            rows.iter()
                .map(|row| display::columns(&row[c]))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .enumerate()
        .map(|(n, cells)| {
            let mut line = String::new();
            // Where the state cell is in the line, to colour it.
            let mut state_at = (0, 0);
            for (c, cell) in cells.iter().enumerate() {
                if c == 1 {
                    state_at = (line.len(), line.len() + cell.len());
                }
                line.push_str(cell);
                if let Some(&width) = widths.get(c) {
                    let pad = width.saturating_sub(display::columns(cell)) + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            let line = line.trim_end().to_owned();
            let line = match layout.width {
                Some(width) => cut(&line, width),
                None => line,
            };
            let state = n
                .checked_sub(1)
                .and_then(|i| reports.get(i))
                .map(|r| r.state);
            match state.filter(|_| layout.color) {
                // Coloured only where the cut left the whole cell.
                Some(state) if line.get(state_at.0..state_at.1) == Some(state_word(state)) => {
                    format!(
                        "{}\x1b[{}m{}\x1b[0m{}",
                        &line[..state_at.0],
                        color_of(state),
                        &line[state_at.0..state_at.1],
                        &line[state_at.1..]
                    )
                }
                _ => line,
            }
        })
        .collect()
}

fn state_word(state: State) -> &'static str {
    match state {
        State::Held => "held",
        State::Free => "free",
        State::Unknown => "unknown",
    }
}

/// SGR colours: held yellow (busy), free green, unknown red (look).
fn color_of(state: State) -> &'static str {
    match state {
        State::Held => "33",
        State::Free => "32",
        State::Unknown => "31",
    }
}

/// `flock exclusive`, `POSIX shared`, `OFD exclusive`; several kinds or
/// modes joined with `+`; `slots` for a `--slots` lock; `-` when nobody
/// holds it.
fn kind(report: &Report) -> String {
    if report.slots.is_some() {
        return "slots".to_owned();
    }
    let mut kinds: Vec<String> = Vec::new();
    for holder in &report.holders {
        let name = match holder.span.as_ref().map(|s| s.kind) {
            Some("flock") => "flock",
            Some("ofd") => "OFD",
            Some("posix") => "POSIX",
            Some(other) => other,
            None => "lock",
        };
        let both = format!("{name} {}", holder.mode);
        if !kinds.contains(&both) {
            kinds.push(both);
        }
    }
    if kinds.is_empty() {
        "-".to_owned()
    } else {
        kinds.join("+")
    }
}

/// `2 of 4 held`; `-` for a plain lock.
fn slots_held(report: &Report) -> String {
    match (report.slots, &report.slot_reports) {
        (Some(n), Some(slots)) => format!(
            "{} of {n} held",
            slots.iter().filter(|s| s.state == State::Held).count()
        ),
        _ => "-".to_owned(),
    }
}

/// What [`row`] says after the path, the state and the mode, which have
/// columns of their own: the holder, since when, the deadline; the last
/// holder of a free lock; why it is unknown.
fn detail(report: &Report) -> String {
    let line = row(report);
    let path = escape(&report.path);
    let mut rest = line
        .strip_prefix(path.as_str())
        .and_then(|r| r.strip_prefix(": "))
        .unwrap_or(&line);
    if report.waiting > 0 {
        let counted = format!(" [{} waiting]", report.waiting);
        if let Some(at) = rest.find(counted.as_str()) {
            let (before, after) = rest.split_at(at);
            if after.len() == counted.len() {
                rest = before;
            }
        }
    }
    let word = state_word(report.state);
    if let Some(after) = rest.strip_prefix(word) {
        let mut after = after;
        for mode in [" (exclusive)", " (shared)"] {
            after = after.strip_prefix(mode).unwrap_or(after);
        }
        for joint in ["; ", ", ", ": ", " by ", " "] {
            if let Some(more) = after.strip_prefix(joint) {
                after = more;
                break;
            }
        }
        rest = after;
    }
    let rest = rest.trim();
    if rest.is_empty() {
        "-".to_owned()
    } else {
        rest.to_owned()
    }
}

/// `line` cut to `width` terminal columns, its last one `…` when cut.
fn cut(line: &str, width: usize) -> String {
    if display::columns(line) <= width {
        return line.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in line.chars() {
        let w = display::char_columns(c);
        if used + w + 1 > width {
            break;
        }
        used += w;
        out.push(c);
    }
    if width > 0 {
        out.push('…');
    }
    out
}
