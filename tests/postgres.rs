//! PostgreSQL lock URLs (issue 15, contract §12): lockrun against a real
//! PostgreSQL that the test run starts for itself (Debian's postgresql
//! package: initdb into a temporary directory as user nobody, a free
//! loopback port, a private socket directory). Without it the tests say
//! SKIPPED loudly, and fail under CI (LOCKRUN_TEST_REQUIRE_ALL).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]
#![cfg(feature = "postgres")]

mod common;
mod servers;

use common::meter::{meter_run, read_meter};
use common::*;
use servers::free_port;
use servers::postgres::*;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

fn stderr_of(bg: &mut Background) -> String {
    let mut text = String::new();
    if let Some(mut err) = bg.child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

/// lockrun holding `url` while `sh -c SCRIPT` runs, stderr captured.
fn holding(args: &[&str], url: &str, script: &str) -> (Background, Vec<String>) {
    let mut cmd = std_lockrun();
    cmd.args(args)
        .arg(url)
        .args(["--", "sh", "-c", script])
        .stderr(Stdio::piped());
    let bg = Background::spawn(cmd);
    let words = bg.expect_ready();
    (bg, words)
}

/// The harness itself: a port lost between choosing it and postgres
/// binding it (another test run took it) is retried on another port, with
/// the data directory kept.
#[test]
fn a_server_that_loses_its_port_starts_on_another() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port to occupy");
    let port = taken.local_addr().expect("its address").port();
    let mut first = true;
    let Some(pg) = Server::start_on(None, || {
        if std::mem::take(&mut first) {
            port
        } else {
            free_port()
        }
    }) else {
        return;
    };
    assert_ne!(pg.port, port);
    let log = std::fs::read_to_string(pg.dir.join("log")).expect("server log");
    assert!(log.contains("could not bind"), "{log}");
    lockrun()
        .args(["-n", &pg.url("retried"), "true"])
        .assert()
        .success();
    drop(taken);
}

/// `sh` that skips lockrun's arguments up to `--` and runs the command
/// without any lock: the meter's control.
fn no_lock() -> Command {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"",
        "no-lock",
    ]);
    cmd
}

#[test]
fn seven_jobs_through_one_lock_run_one_at_a_time() {
    let Some(pg) = shared() else { return };
    meter_run(std_lockrun, &[], pg.url("meter-one"), 7, 1).unwrap();
}

/// The control, without a timing race: the meter waits until all seven
/// jobs run at once (as if the lock admitted seven), which only a run
/// without the lock can do, and reports the overlap.
#[test]
fn the_meter_catches_jobs_run_without_the_lock() {
    let Some(pg) = shared() else { return };
    let overlap = meter_run(no_lock, &["--slots", "7"], pg.url("meter-none"), 7, 1).unwrap_err();
    assert!(overlap.contains("more than 1"), "{overlap}");
}

#[test]
fn the_deadline_cancels_the_wait_in_the_server() {
    let Some(pg) = shared() else { return };
    let url = pg.url("cancelled");
    let (mut holder, _) = holding(&[], &url, "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.args(["-w", "3", &url, "true"]).stderr(Stdio::piped());
    let mut waiter = Background::spawn(cmd);
    wait_for("the waiter to queue in the server", || {
        pg.waiters("cancelled") == 1
    });
    let backend = pg.psql(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
         AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('cancelled', 0)",
    );
    assert_eq!(waiter.wait_exit(BOUND).code(), Some(75));
    // A cancel request ended the server-side wait (rather than lockrun
    // leaving its waiting thread behind and the session ending with it).
    let log = std::fs::read_to_string(pg.dir.join("log")).expect("server log");
    assert!(
        log.lines().any(|l| l.contains(&format!(
            "[{backend}] ERROR:  canceling statement due to user request"
        ))),
        "no cancel for backend {backend} in the server log"
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn sigkill_of_lockrun_frees_the_lock_and_stops_the_command() {
    let Some(pg) = shared() else { return };
    let url = pg.url("crash");
    let (mut holder, words) = holding(&[], &url, "echo ready $$; exec sleep 60");
    let command: i32 = words[0].parse().expect("pid");
    kill(holder.pid(), "KILL");
    let _ = holder.wait_exit(BOUND);
    wait_for("the command to die with lockrun", || process_gone(command));
    lockrun()
        .args(["-w", "10", &url, "true"])
        .assert()
        .success();
}

/// Sends SIGCONT to a stopped process when dropped, so that a failed
/// assertion leaves no server backend stopped.
struct Stopped(i64);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0) {
            kill(pid, "CONT");
        }
    }
}

/// A connection that hangs rather than breaks (the server's backend for
/// the session stops answering; TCP still acknowledges): no error ever
/// comes, so only the missing confirmation can tell. The command is
/// stopped and lockrun exits 76 within a few TTLs.
#[test]
fn a_hung_session_stops_the_command_with_76_within_a_few_ttls() {
    let Some(pg) = shared() else { return };
    let url = pg.url("hung");
    let (mut holder, words) = holding(
        &["--ttl", "1s", "--kill-grace", "1s"],
        &url,
        "trap 'echo got TERM; exit 0' TERM; echo ready $$; while :; do sleep 0.05; done",
    );
    let command: i32 = words[0].parse().expect("pid");
    let backend = holder_json(&url)["postgres"]["backend_pid"]
        .as_i64()
        .expect("backend pid");
    // The server's process for this session, and no other: one of ours.
    let owner = std::fs::read_to_string(format!("/proc/{backend}/status")).unwrap_or_default();
    assert!(
        owner
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534")),
        "pid {backend} is not the server's: {owner}"
    );
    kill(i32::try_from(backend).expect("a pid"), "STOP");
    let stopped = Stopped(backend);
    // One TTL without a confirmed check, then SIGTERM. Bounded, not timed:
    // a session nobody watched would hang for ever (TCP keeps a stopped
    // peer's connection open), so any end within BOUND is the watcher's.
    let line = holder.line(BOUND);
    assert_eq!(
        line.as_deref(),
        Some("got TERM"),
        "the command was not stopped"
    );
    let status = holder.wait_exit(BOUND);
    assert_eq!(status.code(), Some(76), "{status:?}");
    let stderr = stderr_of(&mut holder);
    assert!(
        stderr.contains("did not confirm the lock for a whole TTL"),
        "{stderr}"
    );
    assert!(process_gone(command));
    drop(stopped);
    // Resumed, the backend finds its client gone and the lock is free.
    lockrun()
        .args(["-w", "10", &url, "true"])
        .assert()
        .success();
}

#[test]
fn a_wrong_password_is_69_with_a_clear_message_and_no_password() {
    let Some(pg) = shared() else { return };
    let url = pg.app_url("wrongpw", "auth");
    let out = lockrun().args([&url, "true"]).assert().code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    assert!(stderr.contains("the command was not run"), "{stderr}");
    assert!(!stderr.contains("wrongpw"), "{stderr}");
    // The right one, from the environment rather than the URL.
    let url = format!(
        "postgres://app@127.0.0.1:{}/postgres?sslmode=disable#auth",
        pg.port
    );
    lockrun()
        .env("PGPASSWORD", "secret")
        .args([&url, "true"])
        .assert()
        .success();
    lockrun()
        .env("PGPASSWORD", "nope")
        .args([&url, "true"])
        .assert()
        .code(69);
}

#[test]
fn the_password_is_in_no_title_record_or_holder_output() {
    let Some(pg) = shared() else { return };
    let url = pg.app_url("secret", "hidden");
    let (mut holder, _) = holding(&[], &url, "echo ready; echo \"$LOCKRUN_LOCKFILE\"; read x");
    let lockfile = holder.line(BOUND).expect("LOCKRUN_LOCKFILE");
    assert!(!lockfile.contains("secret"), "{lockfile}");
    assert!(lockfile.ends_with("#hidden"), "{lockfile}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", holder.pid())).expect("cmdline");
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(!cmdline.contains("secret"), "{cmdline}");
    for text in [holder_text(&url), holder_json(&url).to_string()] {
        assert!(!text.contains("secret"), "{text}");
    }
    let activity =
        pg.psql("SELECT string_agg(query || application_name, ' ') FROM pg_stat_activity");
    assert!(!activity.contains("secret"), "{activity}");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

/// The session's ping and watch threads run beside the command: signals
/// sent to lockrun must never run its handlers there (issue 18 item 5).
/// Before a1f52e9 they started with the main thread's open mask.
#[test]
fn the_sessions_threads_never_take_a_signal() {
    let Some(pg) = shared() else { return };
    // By name: the client library resolves it on a thread of its own.
    let url = pg.url("threads").replace("@127.0.0.1:", "@localhost:");
    assert!(url.contains("@localhost:"), "{url}");
    let (mut holder, _) = holding(&[], &url, "echo ready $$; read x");
    // They start just after the command does: wait for both.
    let pid = holder.pid() as u32;
    wait_for("the session's ping and watch threads", || {
        threads_taking_signals(pid).1 >= 2
    });
    let (open, seen) = threads_taking_signals(pid);
    assert!(seen >= 2, "only {seen} threads besides the main one");
    assert!(open.is_empty(), "threads that take signals: {open:?}");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

/// A psql session that has run `statement` (which takes a lock and
/// yields a row ending in `ready`) and stays connected until its stdin
/// is dropped: the statement stays its `pg_stat_activity.query`.
fn psql_holding(pg: &Server, statement: &str) -> (Child, ChildStdin) {
    let mut psql = Command::new(bin_dir().expect("bin").join("psql"))
        .args(PSQL_AS_SUPERUSER)
        .args(["-p", &pg.port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("psql");
    let mut input = psql.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut input, format!("{statement}\n").as_bytes())
        .expect("write to psql");
    let lines = BufReader::new(psql.stdout.take().expect("stdout")).lines();
    let ready = lines
        .map_while(Result::ok)
        .any(|line| line.ends_with("ready"));
    assert!(ready, "psql never said ready");
    (psql, input)
}

#[test]
fn a_command_line_longer_than_track_activity_query_size_keeps_its_record() {
    let Some(pg) = shared() else { return };
    assert_eq!(pg.psql("SHOW track_activity_query_size"), "1kB");
    let url = pg.url("long-record");
    // Over 2 KB of command line, run from a directory of 800 bytes.
    let dir = temp_dir();
    let mut cwd = dir.path().to_path_buf();
    for c in ["a", "b", "c", "d"] {
        cwd.push(c.repeat(200));
    }
    std::fs::create_dir_all(&cwd).expect("deep directory");
    let words: Vec<String> = (0..20)
        .map(|i| format!("{i}:{}", "x".repeat(100)))
        .collect();
    let mut cmd = std_lockrun();
    cmd.current_dir(&cwd)
        .arg(&url)
        .args(["--", "sh", "-c", "echo ready $$; read x", "sh"])
        .args(&words)
        .stderr(Stdio::piped());
    let mut holder = Background::spawn(cmd);
    let pid: i64 = holder.expect_ready()[0].parse().expect("pid");
    wait_for("the record to name the command", || {
        holder_json(&url)["record"]["pid"] == pid
    });
    let json = holder_json(&url);
    let command: Vec<&str> = json["record"]["command"]
        .as_array()
        .expect("the record's command")
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert_eq!(
        command[..3],
        ["sh", "-c", "echo ready $$; read x"],
        "{json}"
    );
    assert!(command.iter().any(|w| w.ends_with('…')), "{json}");
    assert!(
        json["record"]["cwd"]
            .as_str()
            .is_some_and(|c| c.ends_with('…')),
        "{json}"
    );
    let text = holder_text(&url);
    assert!(
        text.starts_with(&format!("{url}: held (exclusive) by pid {pid} `sh -c")),
        "{text}"
    );
    let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.starts_with(&format!("lockrun: {url} is held by pid {pid} (sh -c")),
        "{stderr}"
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());

    // A record the server cut (another client's, written without care):
    // holder says why there is none.
    let record = format!(
        r#"{{"lockrun":1,"pid":1,"command":["{}"]}}"#,
        "y".repeat(2000)
    );
    let (mut psql, input) = psql_holding(
        pg,
        &format!(
            "/*lockrun {record}*/ SELECT pg_advisory_lock(hashtextextended('long-record', 0)), 'ready';"
        ),
    );
    let json = holder_json(&url);
    assert!(json["record"].is_null(), "{json}");
    assert!(
        json["reason"]
            .as_str()
            .is_some_and(|r| r.contains("track_activity_query_size")),
        "{json}"
    );
    let text = holder_text(&url);
    assert!(
        text.contains("longer than the server's track_activity_query_size"),
        "{text}"
    );
    drop(input);
    let _ = wait_child(&mut psql, BOUND);
}

/// A session holding the lock whose record names no pid (written by
/// hand, or lockrun's own before the command starts) or one no process
/// can have: neither holder nor a conflict message says "pid 0".
/// `track_activity_query_size` reads "100B" below a whole kB, which
/// `pg_size_bytes` refuses: every lock failed (69) on such a server (found
/// by review). The lock is taken, and `holder` says why no record fits.
#[test]
fn a_query_size_below_a_kilobyte_still_takes_the_lock_and_keeps_a_record() {
    let Some(pg) = Server::start(None) else {
        return;
    };
    // The server's least: no record fits, however short its pids and
    // paths. (At 300 a record of three-digit pids fitted once pids had
    // wrapped round pid_max, and the test failed.)
    pg.psql("ALTER SYSTEM SET track_activity_query_size = 100");
    pg.restart();
    assert!(pg.wait_ready());
    assert_eq!(pg.psql("SHOW track_activity_query_size"), "100B");
    let url = pg.url("small");
    let (mut holder, _) = holding(&[], &url, "echo ready $$; read x");
    // 100 bytes hold no whole record: the lock works, and holder says why
    // it has no record rather than naming nobody without a word.
    let json = holder_json(&url);
    assert_eq!(json["state"], "held", "{json}");
    assert!(
        json["reason"]
            .as_str()
            .is_some_and(|r| r.contains("track_activity_query_size")),
        "{json}"
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn holder_never_names_pid_0() {
    let Some(pg) = shared() else { return };
    let url = pg.url("no-pid");
    for record in [
        r#"{"lockrun":1,"command":["by-hand"]}"#,
        r#"{"lockrun":1,"pid":0,"command":["by-hand"]}"#,
        r#"{"lockrun":1,"pid":-1,"command":["by-hand"]}"#,
        r#"{"lockrun":1,"pid":99999999999,"command":["by-hand"]}"#,
    ] {
        let (mut psql, input) = psql_holding(
            pg,
            &format!(
                "/*lockrun {record}*/ SELECT pg_advisory_lock(hashtextextended('no-pid', 0)), 'ready';"
            ),
        );
        let text = holder_text(&url);
        assert!(text.contains("by-hand"), "{record}: {text}");
        let json = holder_json(&url);
        assert_eq!(json["state"], "held", "{record}: {json}");
        for holder in json["holders"].as_array().expect("holders") {
            assert!(
                holder["pid"].as_i64().is_some_and(|p| p > 0),
                "{record}: {json}"
            );
        }
        let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        for shown in [&text, &stderr] {
            assert!(
                !shown.contains("pid 0")
                    && !shown.contains("pid -1")
                    && !shown.contains("pid 99999999999"),
                "{record}: {shown}"
            );
        }
        drop(input);
        let _ = wait_child(&mut psql, BOUND);
    }
}

/// `--ttl` sets the server's tcp_keepalives_idle (seconds, which Linux
/// takes only up to 32767) and tcp_user_timeout (2 x TTL in milliseconds,
/// an int): a TTL beyond is a usage error before any connection, not a
/// server failure, nor a keepalive silently left at two hours.
#[test]
fn a_ttl_too_long_for_the_server_is_a_usage_error() {
    let Some(pg) = shared() else { return };
    let url = pg.url("long-ttl");
    for ttl in ["1e10", "30d", "10h", "32768s"] {
        let out = lockrun()
            .args(["--ttl", ttl, &url, "sh", "-c", "echo ran"])
            .output()
            .expect("run lockrun");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "--ttl {ttl}: {stderr}");
        assert!(out.stdout.is_empty(), "--ttl {ttl}: the command ran");
        assert!(stderr.starts_with("lockrun: "), "--ttl {ttl}: {stderr}");
        let named = if ttl == "1e10" { "1e10" } else { "32767s" };
        assert!(stderr.contains(named), "--ttl {ttl}: {stderr}");
    }
    // The longest there is works, and the server took its keepalive.
    let log = pg.dir.join("log");
    let before = std::fs::metadata(&log).map_or(0, |m| m.len());
    lockrun()
        .args(["--ttl", "32767s", &url, "true"])
        .assert()
        .success();
    let text = std::fs::read(&log).unwrap_or_default();
    let from = usize::try_from(before).unwrap_or(0);
    let text = String::from_utf8_lossy(text.get(from..).unwrap_or_default());
    assert!(!text.contains("setsockopt"), "{text}");
}

#[test]
fn holder_of_an_unreachable_server_is_69() {
    let (_refusing, port) = refusing_port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable#x");
    lockrun().args(["check", "-q", &url]).assert().code(69);
    let out = lockrun().args([&url, "true"]).assert().code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.starts_with("lockrun: cannot take"), "{stderr}");
}

#[test]
fn a_lock_taken_from_psql_with_the_documented_key_excludes_lockrun() {
    let Some(pg) = shared() else { return };
    let url = pg.url("from-sql");
    let (mut psql, input) = psql_holding(
        pg,
        "SELECT pg_advisory_lock(hashtextextended('from-sql', 0)); SELECT 'ready';",
    );
    let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("PostgreSQL session"), "{stderr}");
    let text = holder_text(&url);
    assert!(
        text.contains("held (exclusive) by a PostgreSQL session"),
        "{text}"
    );
    drop(input);
    let _ = wait_child(&mut psql, BOUND);
    lockrun()
        .args(["-w", "10", &url, "true"])
        .assert()
        .success();
    assert_eq!(pg.holders("from-sql"), 0);
}

#[test]
fn verbose_waiting_names_the_holder() {
    let Some(pg) = shared() else { return };
    let url = pg.url("verbose");
    let (mut holder, words) = holding(&[], &url, "echo ready $$; read x");
    let out = lockrun()
        .args(["-v", "-w", "0.3", &url, "true"])
        .assert()
        .code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains(&format!("pid {}", words[0])), "{stderr}");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    let out = lockrun().args(["-v", &url, "true"]).assert().success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("took the lock verbose (key "), "{stderr}");
}

/// On a terminal a waiter shows a live status line naming the remote
/// holder: its command's pid and its PostgreSQL session.
#[test]
fn a_waiter_on_a_terminal_shows_a_live_line_naming_the_holder() {
    let Some(pg) = shared() else { return };
    if !needs("script", "a pseudo-terminal to test with") {
        return;
    }
    let url = pg.url("live");
    let (mut holder, words) = holding(&[], &url, "echo ready $$; read x");
    let pid = &words[0];
    let number: i64 = pid.parse().expect("pid");
    wait_for("the holder's record to name the command", || {
        holder_json(&url)["record"]["pid"] == number
    });
    let backend = holder_json(&url)["postgres"]["backend_pid"].to_string();
    // A short label (the rest from libpq's variables) and a wide terminal,
    // so that the holder is not cut to fit.
    let inner = format!(
        "stty cols 200; exec {} -w 1.6 postgres:///#live true",
        bin()
    );
    let out = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", pg.port.to_string())
        .env("PGUSER", "postgres")
        .env("PGDATABASE", "postgres")
        .env("PGSSLMODE", "disable")
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!(
            "\r\x1b[Klockrun: waiting for postgres:///#live (held by pid {pid} (sh -c"
        )),
        "no live line naming the holder: {shown:?}"
    );
    assert!(
        shown.contains(&format!("(PostgreSQL server pid {backend})")),
        "{shown:?}"
    );
    assert!(shown.contains(" / 1.6s"), "{shown:?}");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn a_server_restart_stops_the_command_with_76_and_the_lock_is_free_after() {
    let Some(pg) = Server::start(None) else {
        return;
    };
    let url = pg.url("restarted");
    let (mut holder, words) = holding(
        &["--ttl", "1s", "--kill-grace", "1s"],
        &url,
        "trap 'echo got TERM; exit 0' TERM; echo ready $$; while :; do sleep 0.05; done",
    );
    let command: i32 = words[0].parse().expect("pid");
    pg.restart();
    assert_eq!(holder.line(BOUND).as_deref(), Some("got TERM"));
    let status = holder.wait_exit(BOUND);
    assert_eq!(status.code(), Some(76), "{status:?}");
    assert!(process_gone(command));
    assert!(pg.wait_ready());
    lockrun().args(["-n", &url, "true"]).assert().success();
}

/// A test CA and a server certificate for `localhost`, made with openssl.
fn certificates(dir: &Path) -> bool {
    if !needs("openssl", "to make a test CA") {
        return false;
    }
    let run = |args: &str| {
        let status = Command::new("sh")
            .current_dir(dir)
            .args(["-c", &format!("openssl {args} 2>/dev/null")])
            .status()
            .expect("run openssl");
        assert!(status.success(), "openssl {args}");
    };
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    for ca in ["ca", "other-ca"] {
        run(&format!(
            "req -x509 {ec} -keyout {ca}.key -out {ca}.crt -days 2 -subj /CN=lockrun-test-{ca}"
        ));
    }
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost\n").expect("ext file");
    run(&format!(
        "req {ec} -keyout server.key -out server.csr -subj /CN=localhost"
    ));
    run(
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext",
    );
    true
}

#[test]
fn tls_from_require_to_verify_full() {
    let certs = temp_dir();
    if !certificates(certs.path()) {
        return;
    }
    let Some(pg) = Server::start(Some(certs.path())) else {
        return;
    };
    let home = temp_dir();
    let ca = certs.path().join("ca.crt");
    let url = |host: &str, mode: &str, root: &Path| {
        format!(
            "postgres://app@{host}:{}/postgres?sslmode={mode}&sslrootcert={}#tls",
            pg.port,
            root.display()
        )
    };
    let lockrun_tls = |url: &str| {
        let mut cmd = lockrun();
        cmd.env("PGPASSWORD", "secret").env("HOME", home.path());
        cmd.args([url, "sh", "-c", "echo \"$LOCKRUN_FENCING_TOKEN\""]);
        cmd.assert()
    };
    // The right CA and name: the session is encrypted.
    let (mut holder, _) = {
        let mut cmd = std_lockrun();
        cmd.env("PGPASSWORD", "secret")
            .env("HOME", home.path())
            .arg(url("localhost", "verify-full", &ca))
            .args(["sh", "-c", "echo ready; read x"])
            .stderr(Stdio::piped());
        let bg = Background::spawn(cmd);
        let words = bg.expect_ready();
        (bg, words)
    };
    let backend = pg.psql("SELECT l.pid FROM pg_locks l WHERE locktype = 'advisory' AND granted");
    assert_eq!(
        pg.psql(&format!(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = {backend}"
        )),
        "t"
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    // verify-ca checks the chain, not the name; verify-full both.
    lockrun_tls(&url("127.0.0.1", "verify-ca", &ca)).success();
    let out = lockrun_tls(&url("127.0.0.1", "verify-full", &ca)).code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("certificate"), "{stderr}");
    let other = certs.path().join("other-ca.crt");
    let out = lockrun_tls(&url("localhost", "verify-full", &other)).code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("certificate"), "{stderr}");
    // sslrootcert=system: the system's CAs (here SSL_CERT_FILE, as
    // OpenSSL reads it), and verify-full unless said otherwise.
    let system = format!(
        "postgres://app@localhost:{}/postgres?sslrootcert=system#tls",
        pg.port
    );
    lockrun()
        .env("PGPASSWORD", "secret")
        .env("HOME", home.path())
        .env("SSL_CERT_FILE", &ca)
        .args([&system, "true"])
        .assert()
        .success();
    lockrun()
        .env("PGPASSWORD", "secret")
        .env("HOME", home.path())
        .env("SSL_CERT_FILE", &other)
        .args([&system, "true"])
        .assert()
        .code(69);
    // require encrypts without verifying (no root certificate anywhere).
    let plain = format!(
        "postgres://app@127.0.0.1:{}/postgres?sslmode=require#tls",
        pg.port
    );
    lockrun_tls(&plain).success();
    // And require against a server without TLS is refused.
    if let Some(shared) = shared() {
        let url = format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=require#tls",
            shared.port
        );
        lockrun().args([&url, "true"]).assert().code(69);
    }
}

/// lockrun holding `url` with `env` set, until released.
fn holding_with(env: &[(&str, &Path)], url: &str) -> Background {
    let mut cmd = std_lockrun();
    cmd.env("PGPASSWORD", "secret")
        .env_remove("PGSSLMODE")
        .env_remove("PGAPPNAME");
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.args([url, "sh", "-c", "echo ready; read x"])
        .stderr(Stdio::piped());
    let bg = Background::spawn(cmd);
    bg.expect_ready();
    bg
}

impl Server {
    /// Whether the session holding the lock on NAME is encrypted, and its
    /// application_name.
    fn holders_session(&self, name: &str) -> (String, String) {
        let found = self.psql(&format!(
            "SELECT s.ssl, a.application_name FROM pg_locks l JOIN pg_stat_ssl s ON s.pid = l.pid \
             JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted \
             AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('{name}', 0)"
        ));
        let (ssl, app) = found.split_once('|').unwrap_or((&found, ""));
        (ssl.to_owned(), app.to_owned())
    }
}

/// sslmode's defaults and order as libpq has them: `prefer` (the default)
/// encrypts where the server can and goes plain where it cannot; `allow`
/// goes plain first, and encrypts only when the server refuses plain.
/// PGSSLROOTCERT names the CA as sslrootcert= does; PGAPPNAME names the
/// session in pg_stat_activity in place of lockrun's own name (an
/// application_name in the URL wins over both), and holder still finds
/// the record.
#[test]
fn sslmode_prefer_and_allow_pgsslrootcert_and_pgappname() {
    let certs = temp_dir();
    if !certificates(certs.path()) {
        return;
    }
    let Some(plain) = shared() else { return };
    let Some(tls) = Server::start(Some(certs.path())) else {
        return;
    };
    tls.psql("CREATE ROLE tlsonly LOGIN PASSWORD 'secret'");
    let url = |pg: &Server, user: &str, query: &str| {
        format!(
            "postgres://{user}@127.0.0.1:{}/postgres{query}#ssl",
            pg.port
        )
    };
    for (pg, user, query, encrypted) in [
        // prefer, by default: plain where the server has no TLS...
        (plain, "postgres", "", "f"),
        // ...and TLS where it has.
        (&tls, "app", "", "t"),
        (&tls, "app", "?sslmode=prefer", "t"),
        // allow: plain where the server takes it...
        (&tls, "app", "?sslmode=allow", "f"),
        // ...TLS once it refuses plain (pg_hba.conf: hostnossl reject).
        (&tls, "tlsonly", "?sslmode=allow", "t"),
    ] {
        let url = url(pg, user, query);
        let mut holder = holding_with(&[], &url);
        let (ssl, app) = pg.holders_session("ssl");
        assert_eq!(ssl, encrypted, "{url}");
        assert!(app.starts_with("lockrun "), "{url}: {app}");
        holder.release();
        assert!(holder.wait_exit(BOUND).success(), "{url}");
    }
    // prefer and disable refused where only TLS is let in.
    let out = lockrun()
        .env("PGPASSWORD", "secret")
        .args([&url(&tls, "tlsonly", "?sslmode=disable"), "true"])
        .assert()
        .code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("pg_hba.conf"), "{stderr}");

    // PGSSLROOTCERT: the right CA verifies, another is refused.
    let full = format!(
        "postgres://app@localhost:{}/postgres?sslmode=verify-full#ssl",
        tls.port
    );
    let ca = certs.path().join("ca.crt");
    let mut holder = holding_with(&[("PGSSLROOTCERT", &ca)], &full);
    assert_eq!(tls.holders_session("ssl").0, "t");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    let out = lockrun()
        .env("PGPASSWORD", "secret")
        .env("PGSSLROOTCERT", certs.path().join("other-ca.crt"))
        .args([&full, "true"])
        .assert()
        .code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("certificate"), "{stderr}");

    // PGAPPNAME, and the URL's application_name over it.
    let name = Path::new("nightly-backup");
    let plain_url = plain.url("appname");
    let mut holder = holding_with(&[("PGAPPNAME", name)], &plain_url);
    assert_eq!(plain.holders_session("appname").1, "nightly-backup");
    let json = holder_json(&plain_url);
    assert!(json["record"]["pid"].is_i64(), "{json}");
    assert_eq!(json["postgres"]["application_name"], "nightly-backup");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    let in_url = plain_url.replace(
        "?sslmode=disable",
        "?sslmode=disable&application_name=from-url",
    );
    let mut holder = holding_with(&[("PGAPPNAME", name)], &in_url);
    assert_eq!(plain.holders_session("appname").1, "from-url");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn the_record_needs_the_same_role_or_pg_read_all_stats() {
    let Some(pg) = shared() else { return };
    pg.psql("DO $$ BEGIN CREATE ROLE viewer LOGIN PASSWORD 'secret'; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
    let url = pg.url("privileged");
    let (mut holder, words) = holding(&[], &url, "echo ready $$; read x");
    let as_viewer = format!(
        "postgres://viewer@127.0.0.1:{}/postgres?sslmode=disable#privileged",
        pg.port
    );
    let look = || {
        let out = lockrun()
            .env("PGPASSWORD", "secret")
            .args(["holder", "--json", &as_viewer])
            .output()
            .expect("run holder");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("holder JSON")
    };
    // Anyone who can connect sees that it is held, and by which session.
    let json = look();
    assert_eq!(json["state"], "held", "{json}");
    assert!(json["record"].is_null(), "{json}");
    assert!(json["postgres"]["backend_pid"].is_i64(), "{json}");
    assert!(
        json["reason"]
            .as_str()
            .unwrap_or("")
            .contains("pg_read_all_stats"),
        "{json}"
    );
    let out = lockrun()
        .env("PGPASSWORD", "secret")
        .args(["holder", &as_viewer])
        .output()
        .expect("run holder");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("held (exclusive) by a PostgreSQL session"),
        "{text}"
    );
    assert!(
        text.contains("needs the same role or pg_read_all_stats"),
        "{text}"
    );
    pg.psql("GRANT pg_read_all_stats TO viewer");
    let json = look();
    pg.psql("REVOKE pg_read_all_stats FROM viewer");
    assert_eq!(json["record"]["pid"].to_string(), words[0], "{json}");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn the_connection_comes_from_pg_variables_and_the_password_file() {
    let Some(pg) = shared() else { return };
    let dir = temp_dir();
    let passfile = dir.path().join("pgpass");
    std::fs::write(
        &passfile,
        format!(
            "# comment\nother:1:*:*:nope\n127.0.0.1:{}:*:app:secret\n",
            pg.port
        ),
    )
    .expect("write pgpass");
    let chmod = |mode| {
        std::fs::set_permissions(
            &passfile,
            std::os::unix::fs::PermissionsExt::from_mode(mode),
        )
        .expect("chmod pgpass")
    };
    chmod(0o600);
    let from_env = || {
        let mut cmd = lockrun();
        cmd.env("PGHOST", "127.0.0.1")
            .env("PGPORT", pg.port.to_string())
            .env("PGUSER", "app")
            .env("PGDATABASE", "postgres")
            .env("PGSSLMODE", "disable")
            .env("PGPASSFILE", &passfile)
            .env_remove("PGPASSWORD")
            .args([
                "postgres:///#from-env",
                "sh",
                "-c",
                "echo $LOCKRUN_LOCKFILE",
            ]);
        cmd.assert()
    };
    from_env().success().stdout("postgres:///#from-env\n");
    // Like libpq, a password file others can read is ignored, loudly.
    chmod(0o644);
    let out = from_env().code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("has group or world access; ignored"),
        "{stderr}"
    );
    // Without PGPASSFILE, libpq's default: ~/.pgpass; and the other
    // scheme, postgresql://, names the same lock.
    chmod(0o600);
    std::fs::rename(&passfile, dir.path().join(".pgpass")).expect("move pgpass");
    lockrun()
        .env("HOME", dir.path())
        .env_remove("PGPASSFILE")
        .env_remove("PGPASSWORD")
        .arg(format!(
            "postgresql://app@127.0.0.1:{}/postgres?sslmode=disable#from-home",
            pg.port
        ))
        .args(["sh", "-c", "echo $LOCKRUN_LOCKFILE"])
        .assert()
        .success()
        .stdout(predicates::str::contains("postgresql://app@127.0.0.1"));
    lockrun()
        .env("HOME", dir.path().join("elsewhere"))
        .env_remove("PGPASSFILE")
        .env_remove("PGPASSWORD")
        .arg(format!(
            "postgresql://app@127.0.0.1:{}/postgres?sslmode=disable#from-home",
            pg.port
        ))
        .arg("true")
        .assert()
        .code(69);
}

#[test]
fn the_lock_is_free_once_lockrun_has_exited() {
    let Some(pg) = shared() else { return };
    let url = pg.url("sequence");
    // Each run must have let go before it exits, not when the server gets
    // round to the closed connection: the next -n finds it free.
    let script = "i=0; while [ $i -lt 40 ]; do \"$0\" \"$1\" true || exit 1; \"$0\" -n \"$1\" true || exit 2; i=$((i+1)); done";
    let status = Command::new("sh")
        .args(["-c", script, bin(), &url])
        .status()
        .expect("run the sequence");
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_server_probes_the_holders_connection_within_the_ttl() {
    let Some(pg) = shared() else { return };
    if !needs(
        "ss",
        "to see the server's keepalive timer (Debian: iproute2)",
    ) {
        return;
    }
    let url = pg.url("keepalive");
    let (mut holder, _) = holding(&["--ttl", "6s"], &url, "echo ready; read x");
    let json = holder_json(&url);
    let backend = json["postgres"]["backend_pid"]
        .as_i64()
        .expect("backend pid");
    let client_port = pg.psql(&format!(
        "SELECT client_port FROM pg_stat_activity WHERE pid = {backend}"
    ));
    // The server's end of the holder's connection: its keepalive timer is
    // the TTL (6s), not the system's default of two hours.
    assert_keepalive("the server's", pg.port, client_port.parse().expect("port"));
    // And lockrun's own end of it: keepalives on, on the TTL's scale too,
    // so a server that vanishes is noticed from this side as well.
    assert_keepalive("lockrun's", client_port.parse().expect("port"), pg.port);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

/// The TCP connection from local port `from` to `to` has its keepalive
/// timer running, in seconds or milliseconds (not the two hours of the
/// system's default). While a check is in flight ss shows the
/// retransmission timer instead: look again.
fn assert_keepalive(whose: &str, from: u16, to: u16) {
    let mut text = String::new();
    wait_for(&format!("ss to show {whose} keepalive timer"), || {
        let out = Command::new("ss")
            .args(["-tnoH", "state", "established"])
            .arg(format!("( sport = :{from} and dport = :{to} )"))
            .output()
            .expect("run ss");
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("timer:(keepalive,")
    });
    let timer = text
        .split("timer:(keepalive,")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .unwrap_or("");
    assert!(
        timer.ends_with("sec") || timer.ends_with("ms"),
        "{whose} keepalive timer {timer}: {text}"
    );
}

#[test]
fn names_with_quotes_and_backslashes_get_the_documented_key() {
    let Some(pg) = shared() else { return };
    // The fragment is percent-decoded: the lock's name is o'k\x.
    let url = pg.url("o'k%5Cx");
    let (mut holder, _) = holding(&[], &url, "echo ready; read x");
    let json = holder_json(&url);
    let key = pg.psql(r"SELECT hashtextextended('o''k\x', 0)");
    assert_eq!(json["postgres"]["key"].to_string(), key, "{json}");
    assert_eq!(pg.holders(r"o''k\x"), 1);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn a_url_that_cannot_work_is_a_usage_error() {
    let url = "postgres://u@127.0.0.1:1/db?sslmode=sometimes#x";
    for args in [vec![url, "true"], vec!["check", url], vec!["holder", url]] {
        let out = lockrun().args(&args).assert().code(64);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(stderr.contains("sslmode 'sometimes'"), "{args:?}: {stderr}");
    }
    lockrun()
        .args(["postgres://u@h/db", "true"])
        .assert()
        .code(64);
}

// ------------------------------------------------------------- --slots N

#[test]
fn a_crowd_through_4_slots_never_exceeds_4() {
    let Some(pg) = shared() else { return };
    let dir = temp_dir();
    let meter = dir.path().join("meter");
    // Each job stays a moment, so that the slots are full and the crowd
    // queues; 40 lockruns, each a server session (max_connections 100).
    let script =
        r#"echo "start $$ $LOCKRUN_SLOT" >> "$1"; sleep 0.05; echo "end $$ $LOCKRUN_SLOT" >> "$1""#;
    let url = pg.url("crowd");
    let mut crowd: Vec<Child> = (0..40)
        .map(|_| {
            std_lockrun()
                .args(["--slots", "4", &url, "--", "sh", "-c", script, "job"])
                .arg(&meter)
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in &mut crowd {
        let status = wait_child(child, Duration::from_secs(60));
        assert!(status.success(), "{status:?}");
    }
    let seen = read_meter(dir.path(), 4);
    assert_eq!(seen.ended, 40);
    assert!(seen.peak <= 4, "{} at once", seen.peak);
    assert_eq!(seen.bad_slot, None);
    assert!(seen.running.is_empty());
    assert_eq!(pg.holders("crowd"), 0, "the queue key is left held");
}

/// Holds `held` of the `n` slots of `url`: (lockrun, its slot, the
/// command's pid), in slot order.
fn fill_slots(url: &str, n: usize, held: usize) -> Vec<(Background, String, i32)> {
    (0..held)
        .map(|_| {
            let (bg, words) = holding(
                &["--slots", &n.to_string()],
                url,
                "echo ready $LOCKRUN_SLOT $$; read x",
            );
            let command: i32 = words[1].parse().expect("pid");
            // The record naming the command goes to the server just after
            // the command starts (a statement of the session's): wait for it.
            let slot: usize = words[0].parse().expect("a slot number");
            wait_for("the slot's record to name the command", || {
                holder_json(url)["slot_reports"][slot - 1]["record"]["pid"] == command
            });
            (bg, words[0].clone(), command)
        })
        .collect()
}

fn release_all(holders: Vec<(Background, String, i32)>) {
    for (mut bg, _, _) in holders {
        bg.release();
        assert!(bg.wait_exit(BOUND).success());
    }
}

#[test]
fn a_different_number_of_slots_is_64_naming_both_and_the_holder() {
    let Some(pg) = shared() else { return };
    let url = pg.url("disagree");
    let holders = fill_slots(&url, 2, 2);
    let first_command = holders[0].2;
    for (args, ours) in [
        (vec!["--slots", "3"], "not --slots 3"),
        (vec!["-n", "--slots", "1"], "not --slots 1"),
        (vec![], "not without --slots"),
    ] {
        let out = lockrun()
            .args(&args)
            .args([&url, "sh", "-c", "echo ran"])
            .output()
            .expect("run lockrun");
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("lockrun: ")
                && err.contains("used with --slots 2")
                && err.contains(ours)
                && err.contains(&format!("pid {first_command} ")),
            "{args:?}: {err}"
        );
    }
    release_all(holders);
    // Once nobody uses it, any number may start afresh.
    lockrun()
        .args(["--slots", "3", &url, "true"])
        .assert()
        .success();
}

/// The other way round: the lock is held without --slots (by lockrun, or
/// from SQL with the documented key), and a contender with --slots is a
/// usage error naming that holder, whether it would wait or not; it
/// neither runs beside the holder nor queues behind it.
#[test]
fn slots_against_a_lock_held_without_slots_is_64_naming_the_holder() {
    let Some(pg) = shared() else { return };
    let url = pg.url("plain-first");
    let (mut plain, words) = holding(&[], &url, "echo ready $$; read x");
    let command: i64 = words[0].parse().expect("pid");
    wait_for("the holder's record to name the command", || {
        holder_json(&url)["record"]["pid"] == command
    });
    for args in [
        vec!["-n", "--slots", "2"],
        vec!["-w", "5", "--slots", "2"],
        vec!["--slots", "2"],
    ] {
        let out = lockrun()
            .args(&args)
            .args([&url, "sh", "-c", "echo ran"])
            .output()
            .expect("run lockrun");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            err.contains("held without --slots")
                && err.contains("not with --slots 2")
                && err.contains(&format!("pid {command} ")),
            "{args:?}: {err}"
        );
    }
    plain.release();
    assert!(plain.wait_exit(BOUND).success());

    // Held from SQL: the session is named as such.
    let mut psql = Command::new(bin_dir().expect("bin").join("psql"))
        .args(PSQL_AS_SUPERUSER)
        .args(["-p", &pg.port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("psql");
    let mut input = psql.stdin.take().expect("stdin");
    std::io::Write::write_all(
        &mut input,
        b"SELECT pg_advisory_lock(hashtextextended('plain-first', 0)); SELECT 'ready';\n",
    )
    .expect("write to psql");
    let mut lines = BufReader::new(psql.stdout.take().expect("stdout")).lines();
    while lines.next().and_then(Result::ok).as_deref() != Some("ready") {}
    let out = lockrun()
        .args(["-n", "--slots", "2", &url, "sh", "-c", "echo ran"])
        .output()
        .expect("run lockrun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("held without --slots (by PostgreSQL session"),
        "{err}"
    );
    drop(input);
    let _ = wait_child(&mut psql, BOUND);
    // psql has exited, but its server process lets go of the lock when it
    // notices the disconnect, a moment later: wait for that (under load the
    // next run came first and was refused, 64).
    wait_for("psql's session to let go of the lock", || {
        pg.holders("plain-first") == 0
    });
    // Free again: --slots works.
    lockrun()
        .args(["--slots", "2", &url, "true"])
        .assert()
        .success();
    assert_eq!(pg.holders("plain-first"), 0);
}

#[test]
fn nonblocking_with_every_slot_full_is_75_and_runs_nothing() {
    let Some(pg) = shared() else { return };
    let url = pg.url("full");
    let holders = fill_slots(&url, 2, 2);
    let slots: Vec<&str> = holders.iter().map(|h| h.1.as_str()).collect();
    assert_eq!(slots, ["1", "2"]);
    let out = lockrun()
        .args(["-n", "--slots", "2", &url, "sh", "-c", "echo ran"])
        .assert()
        .code(75)
        .stdout("");
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("2 commands, one per slot"), "{err}");
    assert!(
        err.contains(&format!("slot 1: pid {}", holders[0].2)),
        "{err}"
    );
    lockrun()
        .args(["-w", "0.3", "--slots", "2", &url, "true"])
        .assert()
        .code(75);
    release_all(holders);
}

#[test]
fn sigkill_of_a_slot_holder_frees_its_slot() {
    let Some(pg) = shared() else { return };
    let url = pg.url("killed-slot");
    let mut holders = fill_slots(&url, 2, 2);
    let mut cmd = std_lockrun();
    cmd.args(["--slots", "2", &url, "sh", "-c", "echo ready $LOCKRUN_SLOT"]);
    let waiter = Background::spawn(cmd);
    // The head of the queue holds the queue key (the plain lock's) while
    // it sleeps until a slot frees.
    wait_for("the waiter to head the queue", || {
        pg.holders("killed-slot") == 1
    });
    let (victim, slot, command) = holders.remove(1);
    kill(victim.pid(), "KILL");
    // Nobody announces this release: the head's bounded recheck finds it.
    let words = waiter.expect_ready();
    assert_eq!(words, [slot]);
    wait_for("the victim's command to die with it", || {
        process_gone(command)
    });
    drop(victim);
    release_all(holders);
}

/// Issue 26 item 6 on PostgreSQL: a waiter stopped (SIGSTOP, Ctrl-Z) at
/// the head of a --slots queue must not keep the waiters behind it from a
/// free slot. The head's session is ended by the server once it has been
/// idle far longer than a running head ever is; continued, the stopped
/// head says why it gave up and runs nothing.
#[test]
fn a_stopped_head_of_the_slots_queue_does_not_keep_the_queue() {
    let Some(pg) = shared() else { return };
    let url = pg.url("stopped-head");
    let mut holders = fill_slots(&url, 2, 2);
    let mut cmd = std_lockrun();
    cmd.args(["--slots", "2", &url, "sh", "-c", "echo ready head"])
        .stderr(Stdio::piped());
    let mut head = Background::spawn(cmd);
    wait_for("the waiter to head the queue", || {
        pg.holders("stopped-head") == 1
    });
    let mut cmd = std_lockrun();
    cmd.args([
        "--slots",
        "2",
        &url,
        "sh",
        "-c",
        "echo ready behind $LOCKRUN_SLOT",
    ]);
    let behind = Background::spawn(cmd);
    kill(head.pid(), "STOP");
    wait_for("the head to be stopped", || {
        process_state(head.pid()) == Some('T')
    });
    let (freed, slot, _) = holders.remove(0);
    let mut freed = freed;
    freed.release();
    assert!(freed.wait_exit(BOUND).success());
    // The server ends the stopped head's session after 10 s idle.
    assert_eq!(behind.expect_ready(), ["behind".to_owned(), slot]);
    kill(head.pid(), "CONT");
    let status = head.wait_exit(BOUND);
    let mut err = String::new();
    if let Some(mut e) = head.child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(status.code(), Some(69), "{err}");
    assert!(
        err.contains("was stopped (SIGSTOP, Ctrl-Z) while first in the queue"),
        "{err}"
    );
    assert_eq!(
        head.line(Duration::from_millis(1)),
        None,
        "the stopped head ran"
    );
    drop(behind);
    release_all(holders);
}

#[test]
fn a_release_wakes_the_head_at_once_and_the_queue_moves_up() {
    let Some(pg) = shared() else { return };
    let url = pg.url("handoff-slots");
    let mut holders = fill_slots(&url, 2, 2);
    let waiters: Vec<Background> = (0..2)
        .map(|i| {
            let mut cmd = std_lockrun();
            cmd.args([
                "--slots",
                "2",
                &url,
                "sh",
                "-c",
                "echo ready $LOCKRUN_SLOT; read x",
            ]);
            let bg = Background::spawn(cmd);
            // One at the head (holding the queue key), one queued on it.
            wait_for("the waiter to queue", || {
                pg.holders("handoff-slots") + pg.waiters("handoff-slots") == i + 1
            });
            bg
        })
        .collect();
    assert_eq!(pg.waiters("handoff-slots"), 1, "only the head contends");
    let (mut first, slot, _) = holders.remove(0);
    first.release();
    assert!(first.wait_exit(BOUND).success());
    let mut waiters = waiters.into_iter();
    let mut head = waiters.next().expect("head");
    assert_eq!(head.expect_ready(), [slot]);
    // The second becomes the head and takes the next slot freed.
    wait_for("the second waiter to head the queue", || {
        pg.holders("handoff-slots") == 1 && pg.waiters("handoff-slots") == 0
    });
    let (mut second, slot2, _) = holders.remove(0);
    second.release();
    assert!(second.wait_exit(BOUND).success());
    let mut next = waiters.next().expect("second");
    assert_eq!(next.expect_ready(), [slot2]);
    for bg in [&mut head, &mut next] {
        bg.release();
        assert!(bg.wait_exit(BOUND).success());
    }
}

#[test]
fn a_deadline_or_a_signal_ends_the_heads_wait() {
    let Some(pg) = shared() else { return };
    let url = pg.url("head-ends");
    let holders = fill_slots(&url, 1, 1);
    lockrun()
        .args(["-w", "0.5", "--slots", "1", &url, "true"])
        .assert()
        .code(75);
    wait_for("the timed-out head to leave", || {
        pg.holders("head-ends") == 0
    });
    let mut cmd = std_lockrun();
    cmd.args(["--slots", "1", &url, "true"])
        .stderr(Stdio::piped());
    let mut head = Background::spawn(cmd);
    wait_for("the waiter to head the queue", || {
        pg.holders("head-ends") == 1
    });
    kill(head.pid(), "TERM");
    assert_eq!(head.wait_exit(BOUND).code(), Some(143));
    wait_for("the head to leave", || pg.holders("head-ends") == 0);
    release_all(holders);
}

#[test]
fn holder_and_check_show_every_slot() {
    let Some(pg) = shared() else { return };
    let url = pg.url("slots-inspected");
    let holders = fill_slots(&url, 3, 2);
    lockrun().args(["check", "-q", &url]).assert().code(0);
    let json = holder_json(&url);
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["slots"], 3, "{json}");
    let slots = json["slot_reports"].as_array().expect("slot_reports");
    assert_eq!(slots.len(), 3, "{json}");
    for (i, (_, slot, command)) in holders.iter().enumerate() {
        assert_eq!(slot, &(i + 1).to_string());
        assert_eq!(slots[i]["state"], "held", "{json}");
        assert_eq!(slots[i]["record"]["pid"], *command, "{json}");
        assert_eq!(slots[i]["holders"][0]["pid"], *command, "{json}");
        let key = pg.psql(&format!(
            "SELECT hashtextextended('slots-inspected', {})",
            i + 1
        ));
        assert_eq!(slots[i]["postgres"]["key"].to_string(), key, "{json}");
        assert!(slots[i]["postgres"]["backend_pid"].is_i64(), "{json}");
    }
    assert_eq!(slots[2]["state"], "free", "{json}");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(2), "{json}");
    let text = holder_text(&url);
    assert!(
        text.starts_with(&format!(
            "{url}: 2 of 3 slots held\n  slot 1: held (exclusive) by pid {} `sh -c",
            holders[0].2
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "\n  slot 2: held (exclusive) by pid {} `sh -c",
            holders[1].2
        )),
        "{text}"
    );
    assert!(text.contains("\n  slot 3: free"), "{text}");
    release_all(holders);
    lockrun().args(["check", "-q", &url]).assert().code(1);
    assert_eq!(holder_json(&url)["state"], "free");
}

// ------------------------------------------------------------- PgBouncer

/// A PgBouncer in front of `pg` on a free loopback port, run as nobody
/// (it refuses root): database `postgres` in session pooling, `txpool` the
/// same database in transaction pooling with one server connection (so
/// that its clients share it, as a busy pool's do). Stopped when dropped.
struct Bouncer {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    fn start(pg: &Server) -> Option<Bouncer> {
        if !needs(
            "pgbouncer",
            "to test PostgreSQL lock URLs through a pooler (Debian: apt-get install pgbouncer)",
        ) {
            return None;
        }
        let dir = temp_dir();
        chown_nobody(dir.path());
        for _attempt in 0..5 {
            let port = free_port();
            let ini = dir.path().join("pgbouncer.ini");
            std::fs::write(
                &ini,
                format!(
                    "[databases]\n\
                     postgres = host=127.0.0.1 port={pg} dbname=postgres user=postgres pool_mode=session\n\
                     txpool = host=127.0.0.1 port={pg} dbname=postgres user=postgres pool_mode=transaction pool_size=1\n\
                     [pgbouncer]\n\
                     listen_addr = 127.0.0.1\n\
                     listen_port = {port}\n\
                     unix_socket_dir =\n\
                     auth_type = any\n\
                     max_client_conn = 50\n\
                     default_pool_size = 10\n\
                     logfile = {log}\n",
                    pg = pg.port,
                    log = dir.path().join("log").display()
                ),
            )
            .expect("write pgbouncer.ini");
            let mut child = Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "pgbouncer",
                ])
                .arg(&ini)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start pgbouncer");
            let deadline = std::time::Instant::now() + BOUND;
            loop {
                let ready = Command::new(bin_dir().expect("bin").join("pg_isready"))
                    .args([
                        "-q",
                        "-h",
                        "127.0.0.1",
                        "-p",
                        &port.to_string(),
                        "-d",
                        "postgres",
                    ])
                    .status()
                    .is_ok_and(|s| s.success());
                if ready {
                    return Some(Bouncer {
                        port,
                        child,
                        _dir: dir,
                    });
                }
                if child.try_wait().ok().flatten().is_some() {
                    break; // lost the port: try another
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "pgbouncer never became ready"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("pgbouncer did not start");
    }

    fn url(&self, db: &str, name: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable#{name}",
            self.port
        )
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn through_pgbouncer_in_session_pooling_the_lock_works_end_to_end() {
    let Some(pg) = shared() else { return };
    let Some(bouncer) = Bouncer::start(pg) else {
        return;
    };
    let url = bouncer.url("postgres", "pooled");
    let (mut holder, words) = holding(&[], &url, "echo ready $$; exec sleep 60");
    let command: i32 = words[0].parse().expect("pid");
    assert_eq!(pg.holders("pooled"), 1);
    // Excluded, through the pooler and directly.
    let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains(&format!("pid {command}")), "{stderr}");
    lockrun()
        .args(["-n", &pg.url("pooled"), "true"])
        .assert()
        .code(75);
    assert_eq!(holder_json(&url)["record"]["pid"], command);
    // kill -9 of lockrun: the pooler resets the server connection it gave
    // back (DISCARD ALL), which frees the lock; the command dies too.
    kill(holder.pid(), "KILL");
    let _ = holder.wait_exit(BOUND);
    wait_for("the command to die with lockrun", || process_gone(command));
    lockrun()
        .args(["-w", "10", &url, "true"])
        .assert()
        .success();
    assert_eq!(pg.holders("pooled"), 0);
}

#[test]
fn through_pgbouncer_in_transaction_pooling_the_lock_is_refused() {
    let Some(pg) = shared() else { return };
    let Some(bouncer) = Bouncer::start(pg) else {
        return;
    };
    let url = bouncer.url("txpool", "tx-pooled");
    for args in [vec![], vec!["-n"], vec!["--slots", "2"]] {
        let out = lockrun()
            .args(&args)
            .args([&url, "sh", "-c", "echo ran"])
            .output()
            .expect("run lockrun");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: the command ran");
        assert!(
            stderr.contains("connection pooler in transaction or statement mode"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            pg.holders("tx-pooled"),
            0,
            "{args:?}: the lock is left held"
        );
    }
}

#[test]
fn a_slot_holder_losing_its_session_gets_76_and_max_time_frees_its_slot() {
    let Some(pg) = shared() else { return };
    let url = pg.url("slot-lost");
    let (mut holder, words) = holding(
        &["--slots", "2", "--ttl", "1s", "--kill-grace", "1s"],
        &url,
        "trap 'echo got TERM; exit 0' TERM; echo ready $LOCKRUN_SLOT $$; while :; do sleep 0.05; done",
    );
    assert_eq!(words[0], "1");
    let command: i32 = words[1].parse().expect("pid");
    let json = holder_json(&url);
    let backend = json["slot_reports"][0]["postgres"]["backend_pid"]
        .as_i64()
        .expect("the slot holder's backend pid");
    assert_eq!(
        pg.psql(&format!("SELECT pg_terminate_backend({backend})")),
        "t"
    );
    assert_eq!(holder.line(BOUND).as_deref(), Some("got TERM"));
    let status = holder.wait_exit(BOUND);
    assert_eq!(status.code(), Some(76), "{status:?}");
    assert!(process_gone(command));
    // --max-time: 124, and both slots are free at once after.
    lockrun()
        .args([
            "--slots",
            "2",
            "--max-time",
            "0.3",
            "--kill-grace",
            "1s",
            &url,
            "sleep",
            "30",
        ])
        .assert()
        .code(124);
    let holders = fill_slots(&url, 2, 2);
    let slots: Vec<&str> = holders.iter().map(|h| h.1.as_str()).collect();
    assert_eq!(slots, ["1", "2"]);
    release_all(holders);
}

/// `sslmode=allow` tries TLS only after the server refused the plain
/// connection; when TLS then fails without the server's word (a server
/// without TLS), the plain refusal is the reason given, not "server does
/// not support TLS" (found by review).
#[test]
fn sslmode_allow_reports_the_servers_own_refusal() {
    let Some(pg) = shared() else { return };
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/nosuchdb?sslmode=allow#x",
        pg.port
    );
    let out = lockrun().args([&url, "true"]).assert().code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("does not exist"), "{stderr}");
}

/// A FIFO at `path`, which nothing will ever open for writing.
fn fifo_at(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        path.display()
    );
}

/// Issue 26 item 7: a root certificate that is a FIFO with no writer
/// (`PGSSLROOTCERT`, `sslrootcert=`, `~/.postgresql/root.crt`) used to
/// hang lockrun in open(2) for ever, deaf to SIGTERM and Ctrl-C. It is
/// refused at once (77, naming the file and "a FIFO"). A password file
/// that is a FIFO is ignored with a warning, as libpq ignores one that is
/// not a plain file. Symbolic links to the real files still work.
#[test]
fn item_7_a_fifo_as_root_certificate_or_password_file_never_hangs() {
    let certs = temp_dir();
    if !certificates(certs.path()) {
        return;
    }
    let Some(pg) = Server::start(Some(certs.path())) else {
        return;
    };
    let home = temp_dir();
    let dir = temp_dir();
    let fifo = dir.path().join("fifo");
    fifo_at(&fifo);
    let marker = dir.path().join("ran");
    let verify = format!(
        "postgres://app@localhost:{}/postgres?sslmode=verify-full#fifo",
        pg.port
    );
    let run = |url: &str, env: &[(&str, &Path)]| {
        let mut cmd = lockrun();
        // The bound kills a lockrun that hangs: the test then fails on its
        // status, not by hanging itself.
        cmd.timeout(BOUND)
            .env("HOME", home.path())
            .env_remove("PGSSLROOTCERT")
            .env_remove("PGPASSFILE")
            .env_remove("PGPASSWORD");
        for (var, value) in env {
            cmd.env(var, value);
        }
        cmd.args([url, "touch"]).arg(&marker);
        cmd.output().expect("run lockrun")
    };
    let in_url = format!(
        "postgres://app@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}#fifo",
        pg.port,
        fifo.display()
    );
    std::fs::create_dir(home.path().join(".postgresql")).expect("mkdir ~/.postgresql");
    let default_root = home.path().join(".postgresql/root.crt");
    fifo_at(&default_root);
    for (what, out, path) in [
        (
            "PGSSLROOTCERT",
            run(&verify, &[("PGSSLROOTCERT", &fifo)]),
            &fifo,
        ),
        ("sslrootcert=", run(&in_url, &[]), &fifo),
        ("~/.postgresql/root.crt", run(&verify, &[]), &default_root),
    ] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(77),
            "{what}: {:?} {err}",
            out.status
        );
        assert!(
            err.contains(&format!("{}: it is a FIFO", path.display())),
            "{what}: {err}"
        );
        assert!(!marker.exists(), "{what}: the command ran");
    }
    std::fs::remove_file(&default_root).expect("rm root.crt");
    // A password file that is a FIFO: ignored, loudly, so the server's
    // refusal follows (69), at once.
    let plain = format!(
        "postgres://app@127.0.0.1:{}/postgres?sslmode=require#fifo",
        pg.port
    );
    let out = run(&plain, &[("PGPASSFILE", &fifo)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{:?} {err}", out.status);
    assert!(
        err.contains(&format!("{}: it is a FIFO", fifo.display())),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
    // Symbolic links to the real root certificate and password file.
    let ca_link = dir.path().join("ca-link.crt");
    std::os::unix::fs::symlink(certs.path().join("ca.crt"), &ca_link).expect("symlink");
    let passfile = dir.path().join("pgpass");
    std::fs::write(&passfile, format!("localhost:{}:*:app:secret\n", pg.port)).expect("pgpass");
    std::fs::set_permissions(
        &passfile,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod pgpass");
    let pass_link = dir.path().join("pgpass-link");
    std::os::unix::fs::symlink(&passfile, &pass_link).expect("symlink");
    let out = run(
        &verify,
        &[("PGSSLROOTCERT", &ca_link), ("PGPASSFILE", &pass_link)],
    );
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists());
}

/// `ps -o args=` of a process.
fn ps_args(pid: i32) -> String {
    let out = Command::new("ps")
        .args(["-o", "args=", "-p", &pid.to_string()])
        .output()
        .expect("run ps");
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

/// Issue 26 item 17: a password with an unencoded `@`
/// (`postgres://u:p@ss@host/db#name`) was split by the client library at
/// its first `@`, and "cannot connect as u@ss@host" printed its tail; `ps`
/// showed one `*` per byte of the password. Now such a password is the
/// password (it connects), a URL where its end cannot be told is a usage
/// error that prints none of it, and `ps` shows `***` whatever the
/// length, with the next argument right after it.
#[test]
fn item_17_a_password_with_an_at_is_never_printed_and_ps_masks_it_with_a_fixed_width() {
    let Some(pg) = shared() else { return };
    if !needs("ps", "Debian: apt-get install procps") {
        return;
    }
    pg.psql("DROP ROLE IF EXISTS atuser");
    pg.psql("CREATE ROLE atuser LOGIN PASSWORD 'p@ss@wd'");
    let url = |password: &str| {
        format!(
            "postgres://atuser:{password}@127.0.0.1:{}/postgres?sslmode=disable#at",
            pg.port
        )
    };
    // The right password, `@`s and all, takes the lock.
    lockrun()
        .timeout(BOUND)
        .env_remove("PGPASSWORD")
        .args([&url("p@ss@wd"), "true"])
        .assert()
        .success();
    // A wrong one: refused by the server, no part of it printed.
    let out = lockrun()
        .timeout(BOUND)
        .env_remove("PGPASSWORD")
        .args([&url("qx@zv"), "true"])
        .assert()
        .code(69);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(!err.contains("qx") && !err.contains("zv"), "{err}");
    // An `@` with a `/` between: where the password ends cannot be told.
    let out = lockrun()
        .timeout(BOUND)
        .args([&url("qz/xk@jv"), "true"])
        .assert()
        .code(64);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("%40"), "{err}");
    assert!(
        !err.contains("qz") && !err.contains("xk") && !err.contains("jv"),
        "{err}"
    );
    // `ps`: three `*` for a 7-byte and for a 6-byte password alike, and
    // the command right after the URL, one space between.
    for (password, url) in [
        ("p@ss@wd", url("p@ss@wd")),
        ("secret", pg.app_url("secret", "at")),
    ] {
        let (mut holder, _) = holding(&[], &url, "echo ready; read x");
        let shown = ps_args(holder.pid());
        let masked = url.replace(&format!(":{password}@"), ":***@");
        assert!(
            shown.ends_with(&format!("{masked} -- sh -c echo ready; read x")),
            "{shown}"
        );
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", holder.pid())).expect("cmdline");
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(!cmdline.contains(password), "{cmdline:?}");
        holder.release();
        assert!(holder.wait_exit(BOUND).success());
    }
}

/// The server pid of the session holding `url`'s lock, as `holder` names it.
fn backend_of(url: &str) -> i64 {
    holder_json(url)["postgres"]["backend_pid"]
        .as_i64()
        .expect("backend pid")
}

/// Issue 29 item 11: SIGKILL of the lockrun holding a lock URL. The
/// session ended with lockrun's connection and the next holder started at
/// once, while the command's children (and a command ignoring SIGTERM)
/// ran on. Now the watchdog stops the whole tree, and holds the
/// connection until it has: the next holder's command cannot run beside a
/// process of the old one. Counted through a shared file, not timed.
#[test]
fn item_11_sigkill_of_lockrun_stops_the_whole_command_tree_before_the_next_holder() {
    let Some(pg) = shared() else { return };
    let url = pg.url("item11");
    let dir = temp_dir();
    let log = dir.path().join("log");
    let log = log.display();
    // Every process of the tree ignores SIGTERM (inherited): only the
    // SIGKILL after the grace ends them.
    let (mut holder, words) = holding(
        &["--kill-grace", "1s"],
        &url,
        &format!(
            "trap '' TERM; (while :; do echo A >> {log}; sleep 0.02; done) & echo ready $$ $!; wait"
        ),
    );
    let tree: Vec<i32> = words.iter().map(|w| w.parse().expect("pid")).collect();
    // The writer has written: the old holder's tree is at work.
    wait_for("the writer's first line", || {
        std::fs::read_to_string(dir.path().join("log")).is_ok_and(|t| t.contains('A'))
    });
    let killed = std::time::Instant::now();
    kill(holder.pid(), "KILL");
    let _ = holder.wait_exit(BOUND);
    let next = lockrun()
        .args(["-w", "30", &url, "--", "sh", "-c"])
        // Its own work takes a while (not a synchronisation): what the
        // old tree writes meanwhile is an overlap.
        .arg(format!("echo B >> {log}; sleep 0.5; echo E >> {log}"))
        .output()
        .expect("run the next holder");
    // Right after the next holder's command ran: what of the old tree lives?
    let alive: Vec<i32> = tree.iter().copied().filter(|&p| !process_gone(p)).collect();
    for &pid in &alive {
        kill(pid, "KILL");
    }
    // Once the tree is gone: its processes hold the dead lockrun's stderr.
    let stderr = stderr_of(&mut holder);
    let text = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    let after_b = text
        .lines()
        .skip_while(|l| *l != "B")
        .take_while(|l| *l != "E")
        .filter(|l| *l == "A")
        .count();
    eprintln!(
        "item 11: old tree alive after the next holder: {alive:?}; old writes after the next holder's: {after_b}; SIGKILL to the next holder's end (its 0.5 s of work included): {:?}",
        killed.elapsed()
    );
    assert!(next.status.success(), "{next:?}");
    assert!(text.lines().any(|l| l == "B"), "{text}");
    assert!(
        alive.is_empty() && after_b == 0,
        "the old command's tree ran beside the next holder: alive {alive:?}, {after_b} writes after its start; the dead lockrun's stderr: {stderr}"
    );
    assert!(stderr.contains("died while its command"), "{stderr}");
}

/// CI failure at 79d2dbe (etcd's SIGKILL test, no watchdog message): the
/// command had a parent-death SIGTERM beside the watchdog, and when the
/// kernel's signal won the race (a loaded machine, a watchdog not yet
/// scheduled), `sh` died alone, its child was reparented out of the
/// watchdog's reach, and the watchdog, finding the command gone, stopped
/// nothing: the child ran on past the lock. Here the watchdog is held
/// back (SIGSTOP) across lockrun's death, so the signal would always win:
/// now nothing but the watchdog stops the tree, and it stops all of it.
#[test]
fn a_killed_lockruns_tree_is_stopped_whole_even_by_a_slow_watchdog() {
    let Some(pg) = shared() else { return };
    let url = pg.url("slowdog");
    let (mut holder, words) = Background::lockrun_holding(
        &["--kill-grace", "1s"],
        Path::new(&url),
        "sleep 1000 & echo ready $$ $!; wait",
    );
    let tree: Vec<i32> = words.iter().map(|w| w.parse().expect("pid")).collect();
    let dead = holder.pid();
    let children = std::fs::read_to_string(format!("/proc/{dead}/task/{dead}/children"))
        .expect("lockrun's children");
    let watchdog: i32 = children
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .find(|&p| p != tree[0])
        .expect("lockrun's watchdog among its children");
    kill(watchdog, "STOP");
    kill(dead, "KILL");
    let _ = holder.wait_exit(BOUND);
    kill(watchdog, "CONT");
    wait_for("the whole tree to be stopped by the watchdog", || {
        tree.iter().all(|&p| process_gone(p))
    });
    let said = holder.stderr_text();
    assert!(said.contains("died while its command"), "{said}");
    // And the lock passed on once the watchdog let go of the session.
    lockrun()
        .args(["-w", "30", &url, "true"])
        .assert()
        .success();
}

/// Issue 29, found by the fault harness (bench/faults/repro-pg-token-reuse.sh):
/// after a server crash the next holder got the same fencing token as the
/// holder before it. The token was `txid_current()` in a transaction that
/// wrote nothing else, whose commit PostgreSQL makes asynchronously: lost
/// in the crash, the id was handed out again. A WAL writer that waits 10 s
/// makes the window certain here (200 ms by default).
#[test]
fn a_fencing_token_is_never_handed_out_again_after_a_server_crash() {
    let Some(pg) = Server::start_tuned(&["wal_writer_delay=10s"]) else {
        return;
    };
    let url = pg.url("crash");
    let token = || {
        let out = lockrun()
            .args(["-w", "60", &url, "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"])
            .output()
            .expect("run lockrun");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .expect("a token")
    };
    let mut last = token();
    for round in 0..3 {
        pg.crash_and_restart();
        let next = token();
        assert!(
            next > last,
            "round {round}: token {next} after the crash, {last} before it"
        );
        last = next;
    }
}

/// CONTRACT §18 on PostgreSQL: `check --token T` is 0 for the current
/// holder's token only, and the command's LOCKRUN_LOCK_URL is the URL
/// without its password (the command asks with PGPASSWORD).
#[test]
fn check_token_and_the_commands_lock_url_without_its_password() {
    let Some(pg) = shared() else { return };
    let url = pg.app_url("secret", "fence");
    let bare = url.replace("app:secret@", "app@");
    let check = |token: &str| {
        lockrun()
            .env("PGPASSWORD", "secret")
            .args(["check", "-q", "--token", token, &bare])
            .output()
            .expect("run check")
            .status
            .code()
    };
    let (mut holder, words) = Background::lockrun_holding(
        &[],
        Path::new(&url),
        r#"echo ready $LOCKRUN_FENCING_TOKEN "$LOCKRUN_LOCK_URL"; read x"#,
    );
    let token = words[0].clone();
    assert_eq!(words.get(1), Some(&bare), "LOCKRUN_LOCK_URL");
    wait_for("the record to carry the token", || check(&token) == Some(0));
    let older = (token.parse::<i64>().expect("a token") - 1).to_string();
    assert_eq!(check(&older), Some(1), "an older token");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    assert_eq!(check(&token), Some(1), "a released lock's token");
}

/// Issue 29 item 8: `pg_terminate_backend` of the holder's session. The
/// server says so at once (a FATAL message, then it closes the
/// connection), but lockrun noticed only at its next check, TTL/3 later:
/// two holders meanwhile. With a TTL of an hour that check is 20 minutes
/// away, so an exit within the bound is the hang-up's doing.
#[test]
fn item_8_a_terminated_session_is_noticed_at_once_not_at_the_next_check() {
    let Some(pg) = shared() else { return };
    let url = pg.url("item8");
    let (mut holder, words) = holding(
        &["--ttl", "1h", "--kill-grace", "1s"],
        &url,
        "trap 'echo got TERM; exit 0' TERM; sleep 1000 & echo ready $$ $!; wait",
    );
    let tree: Vec<i32> = words.iter().map(|w| w.parse().expect("pid")).collect();
    let backend = backend_of(&url);
    // psql's own start and login, part of the figure below.
    let baseline = std::time::Instant::now();
    pg.psql("SELECT 1");
    let psql_alone = baseline.elapsed();
    let terminated = std::time::Instant::now();
    assert_eq!(
        pg.psql(&format!("SELECT pg_terminate_backend({backend})")),
        "t"
    );
    let line = holder.line(BOUND);
    let took = terminated.elapsed();
    assert_eq!(
        line.as_deref(),
        Some("got TERM"),
        "the command was not stopped"
    );
    eprintln!(
        "item 8: pg_terminate_backend to the command's SIGTERM: {took:?} (a psql SELECT 1 alone: {psql_alone:?})"
    );
    let status = holder.wait_exit(BOUND);
    assert_eq!(status.code(), Some(76), "{status:?}");
    let stderr = stderr_of(&mut holder);
    eprintln!("item 8: {stderr}");
    assert!(
        stderr.contains("the server closed the connection") && stderr.contains("57P01"),
        "{stderr}"
    );
    for pid in tree {
        assert!(
            process_gone(pid),
            "pid {pid} of the command's tree lives on"
        );
    }
}

/// Issue 29 item 9: lockrun itself paused (SIGSTOP) past the TTL while
/// its command runs. The server kept the session (its kernel answered the
/// keepalives), but on waking lockrun found no confirmation for a whole
/// TTL and killed the command, blaming the server or the network. Now it
/// asks the server first: the command is left alone and the run's status
/// is the command's.
#[test]
fn item_9_a_lockrun_paused_past_the_ttl_asks_the_server_before_calling_the_lock_lost() {
    let Some(pg) = shared() else { return };
    let url = pg.url("item9");
    let dir = temp_dir();
    let go = dir.path().join("go");
    let (mut holder, _) = holding(
        &["--ttl", "1s", "--kill-grace", "1s"],
        &url,
        &format!(
            "trap 'echo got TERM; exit 0' TERM; echo ready; while [ ! -e {} ]; do sleep 0.02; done; exit 7",
            go.display()
        ),
    );
    let backend = backend_of(&url);
    let lockrun_pid = holder.pid();
    kill(lockrun_pid, "STOP");
    let paused = Stopped(i64::from(lockrun_pid));
    // While lockrun cannot send anything: the server's clock, so that a
    // check it answers later is known to come after the pause.
    let before = pg.psql("SELECT now()");
    // The fault itself: 2.5 TTLs without lockrun running.
    std::thread::sleep(Duration::from_millis(2500));
    drop(paused);
    // Resumed: a check after the pause, answered (the session idle again).
    wait_for("a check answered after the pause", || {
        holder.has_exited()
            || pg.psql(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = {backend} \
             AND state = 'idle' AND query_start > '{before}'::timestamptz"
            )) == "1"
    });
    std::fs::write(&go, "").expect("touch go");
    let status = holder.wait_exit(BOUND);
    let stderr = stderr_of(&mut holder);
    let line = holder.line(Duration::from_millis(0));
    assert_eq!(status.code(), Some(7), "{status:?} {line:?} {stderr}");
    assert_eq!(line, None, "the command was signalled: {stderr}");
    assert!(!stderr.contains("lost the lock"), "{stderr}");
}
