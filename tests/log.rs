//! `--log syslog|journal` (issue 31 item 3, CONTRACT §17): one event per
//! outcome on sockets the tests bind themselves (LOCKRUN_SYSLOG_SOCKET,
//! LOCKRUN_JOURNAL_SOCKET), with the fields the contract names; `-q`
//! silences stderr, never the log; a missing socket changes nothing.
// Unix: these spawn sh and bind Unix sockets; tests/windows.rs is the
// Windows suite.
#![cfg(unix)]

mod common;
#[path = "support/observe.rs"]
mod observe;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A socket bound where lockrun is told to log; what it received.
struct Sink {
    socket: UnixDatagram,
    path: PathBuf,
    variable: &'static str,
    journal: bool,
}

impl Sink {
    fn bind(dir: &Path, journal: bool) -> Sink {
        let path = dir.join(if journal { "journal.sock" } else { "log.sock" });
        let socket = UnixDatagram::bind(&path).expect("bind a datagram socket");
        socket.set_nonblocking(true).expect("non-blocking");
        Sink {
            socket,
            path,
            variable: if journal {
                "LOCKRUN_JOURNAL_SOCKET"
            } else {
                "LOCKRUN_SYSLOG_SOCKET"
            },
            journal,
        }
    }

    fn flag(&self) -> &'static str {
        if self.journal { "journal" } else { "syslog" }
    }

    /// Runs lockrun logging here: its pid and its output.
    fn run(&self, args: &[&std::ffi::OsStr]) -> (u32, Output) {
        let child = std_lockrun()
            .args(["--log", self.flag()])
            .args(args)
            .env(self.variable, &self.path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start lockrun");
        let pid = child.id();
        let mut child = child;
        let status = wait_child(&mut child, BOUND);
        let mut out = Output {
            status,
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        use std::io::Read;
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut out.stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_end(&mut out.stderr)
            .unwrap();
        (pid, out)
    }

    /// Every datagram queued so far: lockrun has exited, so all it sent is
    /// here, and nothing more will come.
    fn events(&self) -> Vec<Event> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(n) => out.push(if self.journal {
                    journal_fields(&buf[..n])
                } else {
                    syslog_fields(&buf[..n])
                }),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return out,
                Err(e) => panic!("recv: {e}"),
            }
        }
    }
}

/// An event's fields by the journal's names (a syslog line's mapped onto
/// them).
type Event = BTreeMap<String, Vec<u8>>;

fn text(event: &Event, field: &str) -> String {
    String::from_utf8_lossy(
        event
            .get(field)
            .unwrap_or_else(|| panic!("no {field} in {event:?}")),
    )
    .into_owned()
}

/// The journal's native protocol, strictly: `NAME=value\n`, or `NAME\n`,
/// a 64-bit little-endian length, the value, `\n`; names of capitals,
/// digits and `_`, not starting with `_`; each name once.
fn journal_fields(mut datagram: &[u8]) -> Event {
    let mut out = Event::new();
    while !datagram.is_empty() {
        let end = datagram
            .iter()
            .position(|&b| b == b'=' || b == b'\n')
            .expect("a field without = or newline");
        let name = std::str::from_utf8(&datagram[..end]).expect("a UTF-8 name");
        assert!(
            !name.is_empty()
                && !name.starts_with('_')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "bad field name {name:?}"
        );
        let value;
        if datagram[end] == b'=' {
            let rest = &datagram[end + 1..];
            let nl = rest
                .iter()
                .position(|&b| b == b'\n')
                .expect("unterminated value");
            value = rest[..nl].to_vec();
            datagram = &rest[nl + 1..];
        } else {
            let rest = &datagram[end + 1..];
            let len = u64::from_le_bytes(rest[..8].try_into().expect("a length")) as usize;
            value = rest[8..8 + len].to_vec();
            assert_eq!(
                rest[8 + len],
                b'\n',
                "binary value not followed by a newline"
            );
            datagram = &rest[8 + len + 1..];
        }
        assert!(out.insert(name.to_owned(), value).is_none(), "{name} twice");
    }
    out
}

/// An RFC 5424 line: `<PRI>1 TIMESTAMP HOST APP PROCID MSGID [SD] MSG`,
/// mapped onto the journal's names (PRIORITY and SYSLOG_FACILITY from PRI,
/// SYSLOG_IDENTIFIER, SYSLOG_PID, MESSAGE, the SD's params as LOCKRUN_*).
fn syslog_fields(datagram: &[u8]) -> Event {
    let line = std::str::from_utf8(datagram).expect("a UTF-8 line");
    assert!(!line.contains('\n'), "{line:?}");
    let rest = line.strip_prefix('<').expect("<PRI>");
    let (pri, rest) = rest.split_once('>').expect("<PRI>");
    let pri: u32 = pri.parse().expect("a number");
    let mut parts = rest.splitn(7, ' ');
    let mut next = || parts.next().expect("a header field");
    assert_eq!(next(), "1", "VERSION");
    let time = next();
    assert!(
        time.len() > 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "TIMESTAMP {time}"
    );
    let _host = next();
    let app = next().to_owned();
    let procid = next().to_owned();
    let msgid = next().to_owned();
    let rest = parts.next().expect("SD and MSG");
    let rest = rest.strip_prefix("[lockrun@32473").expect("our SD-ELEMENT");
    let mut out = Event::new();
    out.insert("PRIORITY".into(), (pri % 8).to_string().into_bytes());
    out.insert("SYSLOG_FACILITY".into(), (pri / 8).to_string().into_bytes());
    out.insert("SYSLOG_IDENTIFIER".into(), app.into_bytes());
    out.insert("SYSLOG_PID".into(), procid.into_bytes());
    out.insert("MSGID".into(), msgid.into_bytes());
    let mut chars = rest.chars();
    loop {
        match chars.next().expect("an unterminated SD-ELEMENT") {
            ']' => break,
            ' ' => {
                let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
                assert_eq!(chars.next(), Some('"'), "PARAM-VALUE quoted");
                let mut value = String::new();
                loop {
                    match chars.next().expect("an unterminated PARAM-VALUE") {
                        '"' => break,
                        '\\' => value.push(chars.next().expect("escaped char")),
                        c => {
                            assert!(c != ']', "unescaped ] in a PARAM-VALUE");
                            value.push(c)
                        }
                    }
                }
                out.insert(
                    format!("LOCKRUN_{}", name.to_uppercase()),
                    value.into_bytes(),
                );
            }
            c => panic!("unexpected {c:?} in the SD"),
        }
    }
    let msg = chars
        .as_str()
        .strip_prefix(' ')
        .expect("a space before MSG");
    out.insert("MESSAGE".into(), msg.as_bytes().to_vec());
    out
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// The check, for each sink: every outcome is one event, with its
/// name, the lock, lockrun's status, the wait and a message; `-q` still
/// logs; the facility is `--log-facility`'s.
#[test]
fn every_outcome_is_one_event_with_its_fields_in_syslog_and_the_journal() {
    for journal in [false, true] {
        let dir = temp_dir();
        let sink = Sink::bind(dir.path(), journal);
        let lock = dir.path().join("job.lock");
        let l = lock.as_os_str();
        let name = lock.to_str().unwrap();
        let check = |event: &Event, kind: &str, status: Option<&str>, priority: &str| {
            let what = format!("{} {kind}: {event:?}", sink.flag());
            assert_eq!(text(event, "LOCKRUN_EVENT"), kind, "{what}");
            assert_eq!(text(event, "LOCKRUN_LOCK"), name, "{what}");
            assert_eq!(text(event, "SYSLOG_IDENTIFIER"), "lockrun", "{what}");
            assert_eq!(text(event, "PRIORITY"), priority, "{what}");
            assert_eq!(
                event
                    .get("LOCKRUN_STATUS")
                    .map(|_| text(event, "LOCKRUN_STATUS"))
                    .as_deref(),
                status,
                "{what}"
            );
            text(event, "LOCKRUN_WAIT_MS")
                .parse::<u64>()
                .expect("a number of ms");
            assert!(
                text(event, "MESSAGE").starts_with(&format!("{name}: ")),
                "{what}"
            );
        };

        // A run: acquired, then finished with the command's status.
        let (pid, out) = sink.run(&[
            os("--log-facility"),
            os("local3"),
            l,
            os("sh"),
            os("-c"),
            os("exit 3"),
        ]);
        assert_eq!(out.status.code(), Some(3));
        let events = sink.events();
        assert_eq!(events.len(), 2, "{events:?}");
        check(&events[0], "acquired", None, "6");
        check(&events[1], "finished", Some("3"), "4");
        for event in &events {
            assert_eq!(text(event, "SYSLOG_FACILITY"), "19");
        }
        if !journal {
            assert_eq!(text(&events[0], "SYSLOG_PID"), pid.to_string());
            assert_eq!(text(&events[1], "MSGID"), "finished");
        }
        text(&events[1], "LOCKRUN_DURATION_MS")
            .parse::<u64>()
            .expect("ms");
        assert!(text(&events[1], "MESSAGE").contains("finished with status 3"));

        // Busy (-q: nothing on stderr, the event all the same) and timed out.
        let (mut holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");
        let (_, out) = sink.run(&[os("-n"), os("-q"), l, os("true")]);
        assert_eq!(out.status.code(), Some(75));
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        check(&events[0], "busy", Some("75"), "5");
        assert_eq!(
            text(&events[0], "SYSLOG_FACILITY"),
            "1",
            "the default is user"
        );
        let (_, out) = sink.run(&[os("-w"), os("0.2"), l, os("true")]);
        assert_eq!(out.status.code(), Some(75));
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        check(&events[0], "timeout", Some("75"), "4");
        assert!(text(&events[0], "LOCKRUN_WAIT_MS").parse::<u64>().unwrap() >= 200);
        holder.release();
        assert!(holder.wait_exit(BOUND).success());

        // A success, then skipped by --skip-if-succeeded-within.
        let (_, out) = sink.run(&[l, os("true")]);
        assert!(out.status.success());
        assert_eq!(sink.events().len(), 2);
        let (_, out) = sink.run(&[
            os("--skip-if-succeeded-within"),
            os("1h"),
            os("-q"),
            l,
            os("true"),
        ]);
        assert!(out.status.success());
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        check(&events[0], "skipped", Some("0"), "6");

        // Stopped by --max-time.
        let (_, out) = sink.run(&[os("--max-time"), os("100ms"), l, os("sleep"), os("30")]);
        assert_eq!(out.status.code(), Some(124));
        let events = sink.events();
        assert_eq!(events.len(), 2, "{events:?}");
        check(&events[0], "acquired", None, "6");
        check(&events[1], "max_time", Some("124"), "3");
    }
}

/// A lock file's name with a newline: the journal gets it whole, in the
/// protocol's binary form (the parser above reads it); syslog's line gets
/// it escaped, on one line.
#[test]
fn a_lock_name_with_a_newline_reaches_the_journal_whole_and_syslog_on_one_line() {
    let dir = temp_dir();
    let lock = dir.path().join("two\nlines.lock");
    for journal in [true, false] {
        let sink = Sink::bind(dir.path(), journal);
        let (_, out) = sink.run(&[lock.as_os_str(), os("true")]);
        assert!(out.status.success());
        let events = sink.events();
        assert_eq!(events.len(), 2, "{events:?}");
        let expected = if journal {
            lock.to_str().unwrap().to_owned()
        } else {
            lock.to_str().unwrap().replace('\n', "\\n")
        };
        assert_eq!(text(&events[1], "LOCKRUN_LOCK"), expected);
        assert!(!text(&events[1], "MESSAGE").contains('\n'));
        drop(sink);
        let _ = std::fs::remove_file(dir.path().join(if journal {
            "journal.sock"
        } else {
            "log.sock"
        }));
    }
}

/// No socket at the path (no syslog daemon, no journal): the run is the
/// run without --log, to the byte and the status.
#[test]
fn a_missing_socket_changes_nothing() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");
    for (variable, to) in [
        ("LOCKRUN_SYSLOG_SOCKET", "syslog"),
        ("LOCKRUN_JOURNAL_SOCKET", "journal"),
    ] {
        for args in [vec!["-n"], vec!["-w", "0.1"]] {
            let run = |log: bool| {
                let mut cmd = Command::new(bin());
                if log {
                    cmd.args(["--log", to]);
                }
                cmd.args(&args)
                    .arg(&lock)
                    .args(["echo", "ran"])
                    .env(variable, dir.path().join("no-such.sock"))
                    .output()
                    .expect("run lockrun")
            };
            let (with, without) = (run(true), run(false));
            assert_eq!(with.status.code(), Some(75));
            assert_eq!(with.status.code(), without.status.code());
            assert_eq!(with.stdout, without.stdout);
            // The wait's length is in the message: compare with every
            // number, its decimals and the unit after it, as N ("980ms
            // ago", "1s ago" and "1.2s ago" are one message: the two runs
            // straddled a second under load, twice).
            let words = |o: &Output| {
                let mut out = String::new();
                let mut in_number = false;
                for c in String::from_utf8_lossy(&o.stderr).chars() {
                    if c.is_ascii_digit() {
                        if !in_number {
                            out.push('N');
                        }
                        in_number = true;
                    } else if in_number && (c.is_ascii_lowercase() || c == '.') {
                        // a unit (ms, s, 1m30s's m) or a decimal point
                        // ("1.2s ago" beside "980ms ago"): part of the number
                    } else {
                        in_number = false;
                        out.push(c);
                    }
                }
                out
            };
            assert_eq!(words(&with), words(&without));
        }
    }
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    let out = lockrun()
        .args(["--log", "journal"])
        .env("LOCKRUN_JOURNAL_SOCKET", dir.path().join("no-such.sock"))
        .arg(&lock)
        .args(["sh", "-c", "echo ran; exit 4"])
        .assert()
        .code(4);
    assert_eq!(out.get_output().stdout, b"ran\n");
    assert!(out.get_output().stderr.is_empty());
}

/// A lock URL reports through the same seam: a Redis lock whose key is
/// deleted while the command runs is a `lost` event (76) in the journal.
#[cfg(feature = "redis")]
#[test]
fn a_lost_redis_lock_is_a_lost_event() {
    let Some(redis) = observe::Redis::start() else {
        return;
    };
    let dir = temp_dir();
    let sink = Sink::bind(dir.path(), true);
    let url = redis.url("nightly");
    let mut cmd = std_lockrun();
    cmd.args([
        "--log",
        "journal",
        "--ttl",
        "2s",
        "--kill-grace",
        "1s",
        &url,
    ])
    .args(["sh", "-c", "echo ready; exec sleep 60"])
    .env(sink.variable, &sink.path);
    let mut bg = Background::spawn_quiet(cmd);
    bg.expect_ready();
    assert_eq!(redis.cli(&["DEL", "nightly"]).as_deref(), Some("1"));
    assert_eq!(bg.wait_exit(BOUND).code(), Some(76));
    let events = sink.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(text(&events[0], "LOCKRUN_EVENT"), "acquired");
    assert_eq!(text(&events[1], "LOCKRUN_EVENT"), "lost");
    assert_eq!(text(&events[1], "LOCKRUN_STATUS"), "76");
    assert_eq!(text(&events[1], "PRIORITY"), "3");
    assert_eq!(text(&events[1], "LOCKRUN_LOCK"), url);
}
