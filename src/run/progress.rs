//! What a person sees while lockrun waits: with `-v` a line saying who holds
//! the lock, and on a terminal a live status line (after a second, so quick
//! waits stay silent) that disappears once the lock is taken. Never a live
//! line when stderr is a file or a pipe: cron mail and logs get no `\r`.

use crate::backend::Contender;
use crate::display;
use crate::run::wait::WaitObserver;
use std::io::Write;
use std::time::Duration;

pub struct Progress {
    label: String,
    verbose: bool,
    quiet: bool,
    /// Whether stderr is a terminal, asked only once waiting begins.
    live: Option<bool>,
    timeout: Option<Duration>,
    announced: bool,
    line_shown: bool,
    /// The holder the line names, and when in the wait it was asked.
    holder: Option<(String, Duration)>,
}

/// How often the live line asks who holds the lock. The time on it moves
/// every tick; asking as often would cost a lock URL's server a request per
/// waiter per tick (200 waiters on one terminal kept an etcd member too
/// busy to grant new leases).
const HOLDER_REFRESH: Duration = Duration::from_secs(2);

impl Progress {
    pub fn new(label: String, verbose: bool, quiet: bool, timeout: Option<Duration>) -> Self {
        Progress {
            label,
            verbose,
            quiet,
            live: None,
            timeout,
            announced: false,
            line_shown: false,
            holder: None,
        }
    }
}

impl Progress {
    fn is_live(&mut self) -> bool {
        let quiet = self.quiet;
        *self.live.get_or_insert_with(|| {
            use std::io::IsTerminal;
            !quiet && std::io::stderr().is_terminal()
        })
    }
}

impl WaitObserver for Progress {
    fn waiting(&mut self, waited: Duration, lock: &mut dyn Contender) {
        if self.verbose && !self.announced {
            self.announced = true;
            // The same words as a conflict message: a record names the
            // holder only where the kernel confirms it.
            let held = lock.conflict_held();
            let label = lock.busy_label().unwrap_or_else(|| self.label.clone());
            crate::say!("lockrun: waiting for {label}, held {held}");
        }
        if self.is_live() && waited >= Duration::from_secs(1) {
            let stale = self
                .holder
                .as_ref()
                .is_none_or(|(_, asked)| waited.saturating_sub(*asked) >= HOLDER_REFRESH);
            if stale {
                let holder = lock
                    .holder()
                    .unwrap_or_else(|| "another process".to_owned());
                self.holder = Some((holder, waited));
            }
            // The holder's age moves with the wait: it was true when asked,
            // and the holder has held on since (a frozen "(1.3s ago)" for
            // two seconds read as a clock that stopped).
            let holder = self.holder.as_ref().map_or_else(String::new, |(h, asked)| {
                Holder::parse(h).text(waited.saturating_sub(*asked))
            });
            let limit = self
                .timeout
                .map(|t| format!(" / {}", display::span(t)))
                .unwrap_or_default();
            // One lock of an `--also` set: the one waited for.
            let label = lock.busy_label().unwrap_or_else(|| self.label.clone());
            let line = status_line(
                &label,
                &holder,
                &format!("{}{limit}", display::span(waited)),
                terminal_columns(),
            );
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K{line}");
            let _ = err.flush();
            self.line_shown = true;
        }
    }

    fn needs_ticks(&mut self) -> bool {
        self.is_live()
    }

    fn done(&mut self) {
        if self.line_shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

fn terminal_columns() -> usize {
    use crate::platform::AsFd;
    crate::platform::terminal_columns(std::io::stderr().as_fd()).unwrap_or(80)
}

/// A holder as a backend names it, `pid 4243 (backup.sh) since 02:00:03
/// (13m ago)`, in the parts the live line treats apart: the age, to move
/// it on between askings, and the time fields, which are shown whole or
/// not at all (cut at 80 columns, "since 02:0…" said nothing true).
struct Holder<'a> {
    /// `pid 4243 (backup.sh)`: may be cut, with an ellipsis.
    who: &'a str,
    /// `02:00:03`
    since: Option<&'a str>,
    /// How long it had held when asked.
    age: Option<Duration>,
}

impl<'a> Holder<'a> {
    fn parse(text: &'a str) -> Self {
        let plain = Holder {
            who: text,
            since: None,
            age: None,
        };
        // `… since HH:MM:SS (SPAN ago)`, as display::holder_summary ends;
        // anything else (a shared count, a lock URL's words) stays whole.
        let Some(rest) = text.strip_suffix(" ago)") else {
            return plain;
        };
        let Some((head, age)) = rest.rsplit_once(" (") else {
            return plain;
        };
        let Some((who, since)) = head.rsplit_once(" since ") else {
            return plain;
        };
        match crate::display::parse_span(age) {
            Some(age) if !since.contains(' ') => Holder {
                who,
                since: Some(since),
                age: Some(age),
            },
            _ => plain,
        }
    }

    /// The whole text, `later` after it was asked.
    fn text(&self, later: Duration) -> String {
        match (self.since, self.age) {
            (Some(since), Some(age)) => {
                let age = display::span(age.saturating_add(later));
                format!("{} since {since} ({age} ago)", self.who)
            }
            _ => self.who.to_owned(),
        }
    }
}

/// `lockrun: waiting for LABEL (held by HOLDER): 3.2s / 10s`, no wider than
/// the terminal less one column: a status line that wraps leaves a row of
/// junk behind at every refresh. The holder gives way first, then the
/// label, so that the time waited stays in view. Widths are terminal
/// columns (a CJK file name or an emoji takes two per character), counted
/// on text already escaped.
fn status_line(label: &str, holder: &str, time: &str, columns: usize) -> String {
    use crate::display::{char_columns, columns as width};
    let room = columns.saturating_sub(1).max(1);
    // The longest prefix of `text` that fits in `keep` columns.
    let fit = |text: &str, keep: usize| -> String {
        let mut used = 0;
        text.chars()
            .take_while(|&c| {
                used += char_columns(c);
                used <= keep
            })
            .collect()
    };
    let cut = |text: &str, keep: usize| -> String {
        if width(text) <= keep {
            text.to_owned()
        } else if keep == 0 {
            String::new()
        } else {
            fit(text, keep - 1) + "…"
        }
    };
    let fixed = width("lockrun: waiting for  (held by ): ") + width(time);
    let holder_room = room.saturating_sub(fixed + width(label)).max(8);
    // The holder's time fields go whole, never cut: the process's name is
    // cut first, then the time is left out.
    let holder = if width(holder) <= holder_room {
        holder.to_owned()
    } else {
        let parts = Holder::parse(holder);
        let tail = holder.get(parts.who.len()..).unwrap_or_default();
        if parts.since.is_some() && holder_room >= width(tail) + 12 {
            cut(parts.who, holder_room - width(tail)) + tail
        } else {
            cut(parts.who, holder_room)
        }
    };
    let label_room = room.saturating_sub(fixed + width(&holder));
    let label = cut(label, label_room);
    let line = format!("lockrun: waiting for {label} (held by {holder}): {time}");
    if width(&line) <= room {
        line
    } else {
        fit(&line, room)
    }
}

#[cfg(test)]
mod tests {
    use super::status_line;

    #[test]
    fn the_status_line_fits_and_keeps_the_time() {
        let holder = "pid 4243 (backup.sh --full --with-a-long-argument) since 02:00:03 (13m ago)";
        let label = "/var/lock/a-rather-long-directory-name/backup.lock";
        for columns in [20, 40, 60, 80, 120, 300] {
            let line = status_line(label, holder, "3.2s / 10s", columns);
            assert!(line.chars().count() < columns, "{columns}: {line}");
            if columns >= 60 {
                assert!(line.ends_with("): 3.2s / 10s"), "{columns}: {line}");
            }
        }
        let wide = status_line(label, holder, "3.2s", 300);
        assert!(wide.contains(holder) && wide.contains(label), "{wide}");
    }

    /// Issue 32 item 4: a holder's time is shown whole or not at all, and
    /// its age moves on between askings of who holds the lock.
    #[test]
    fn the_holders_time_is_whole_and_its_age_moves() {
        let holder = "pid 4243 (backup.sh --full --with-a-long-argument) since 02:00:03 (1.3s ago)";
        let label = "/var/lock/backup.lock";
        for columns in [40, 60, 70, 80, 90, 100, 120] {
            let line = status_line(label, holder, "3.2s / 10s", columns);
            assert!(line.chars().count() < columns, "{columns}: {line}");
            let kept = line.contains(" since 02:00:03 (1.3s ago)): 3.2s / 10s");
            let dropped = !line.contains("since") && !line.contains(" ago");
            assert!(kept || dropped, "{columns}: {line}");
            // Room for the whole holder, or for its time beside a cut name.
            if columns >= 110 {
                assert!(kept, "{columns}: {line}");
            }
        }
        let parsed = super::Holder::parse(holder);
        assert_eq!(
            parsed.text(std::time::Duration::from_millis(1500)),
            "pid 4243 (backup.sh --full --with-a-long-argument) since 02:00:03 (2.8s ago)"
        );
        let minutes = super::Holder::parse("pid 7 (x) since 02:00:03 (13m 20s ago)");
        assert_eq!(
            minutes.text(std::time::Duration::from_secs(10)),
            "pid 7 (x) since 02:00:03 (13m 30s ago)"
        );
        for plain in [
            "shared by 3 processes",
            "pid 7 (sleep 60 ago)",
            "a holder (x ago)",
        ] {
            let parsed = super::Holder::parse(plain);
            assert_eq!(parsed.text(std::time::Duration::from_secs(5)), plain);
        }
    }

    /// A file name in CJK or with emoji takes two columns a character: cut
    /// by characters, the line wrapped on 80 columns.
    #[test]
    fn wide_characters_count_as_two_columns() {
        let label =
            "/srv/ロック/バックアップ用のとても長いディレクトリ名/夜間のバックアップ🔒🔒🔒.lock";
        let holder = "pid 4243 (バックアップ.sh --全部) since 02:00:03 (13m ago)";
        for columns in [20, 40, 60, 80, 120] {
            let line = status_line(label, holder, "3.2s / 10s", columns);
            let used = crate::display::columns(&line);
            assert!(used < columns, "{columns} columns, {used} used: {line}");
            if columns >= 60 {
                assert!(line.ends_with("): 3.2s / 10s"), "{columns}: {line}");
            }
        }
    }
}
