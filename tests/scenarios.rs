//! The scenarios every backend must pass, written once (issue 33 item 6):
//! a lock (a file, or a lock URL on a server this test binary started
//! once), holders in other processes, a run, and what it must print and
//! exit with. Each scenario runs against every backend the build has:
//! `exclusion_counter::file`, `exclusion_counter::etcd`, … A backend whose
//! server is not installed says SKIPPED once (a failure under
//! LOCKRUN_TEST_REQUIRE_ALL). A test that only one backend can make (a
//! server stopped, a session killed from psql, TLS) stays in that
//! backend's file.
//!
//! After every scenario [`Scenario::finish`] checks by itself that the
//! lock is free, that every record reads as JSON, that no process the
//! scenario started is left (every child reaped, and no process in /proc
//! carrying the scenario's marker variable, which everything it starts
//! inherits), and that data the scenario put in a lock file is intact.
//! `control_a_leaked_holder_fails_the_post_conditions` shows that check
//! failing.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;
#[path = "support/observe.rs"]
mod observe;
mod servers;

use common::meter::{meter_run, read_meter};
use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Set, with a value unique to the scenario, in the environment of every
/// process a scenario starts; inherited by lockrun, its command and
/// whatever that starts, so a process left behind can be found in /proc.
const MARKER: &str = "LOCKRUN_TEST_SCENARIO";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Backend {
    File,
    #[cfg(feature = "etcd")]
    Etcd,
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "redis")]
    Redis,
}

/// Says SKIPPED once per backend and binary, not once per scenario.
#[cfg_attr(
    not(any(feature = "etcd", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
fn skipped_once(flag: &'static OnceLock<()>, why: &str) {
    if flag.set(()).is_ok() || std::env::var_os("LOCKRUN_TEST_REQUIRE_ALL").is_some() {
        skip(why);
    }
}

impl Backend {
    fn is_url(self) -> bool {
        self != Backend::File
    }

    /// Whether its server runs (started on first use, once per binary).
    fn available(self) -> bool {
        match self {
            Backend::File => true,
            #[cfg(feature = "etcd")]
            Backend::Etcd => {
                static SAID: OnceLock<()> = OnceLock::new();
                if !has("etcd") || !has("etcdctl") {
                    skipped_once(
                        &SAID,
                        "etcd or etcdctl is not installed (Debian: etcd-server etcd-client): the etcd scenarios did not run",
                    );
                    return false;
                }
                servers::etcd::shared().is_some()
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                static SAID: OnceLock<()> = OnceLock::new();
                if servers::postgres::bin_dir().is_none() {
                    skipped_once(
                        &SAID,
                        "PostgreSQL is not installed (Debian: postgresql): the PostgreSQL scenarios did not run",
                    );
                    return false;
                }
                servers::postgres::shared().is_some()
            }
            #[cfg(feature = "redis")]
            Backend::Redis => {
                static SAID: OnceLock<()> = OnceLock::new();
                if servers::redis::server_binary().is_none() || !has("redis-cli") {
                    skipped_once(
                        &SAID,
                        "redis-server or redis-cli is not installed (Debian: redis-server redis-tools): the Redis scenarios did not run",
                    );
                    return false;
                }
                servers::redis::shared().is_some()
            }
        }
    }

    /// The lock for NAME: a file in DIR, or a URL on the shared server.
    fn target(self, dir: &Path, name: &str) -> String {
        match self {
            Backend::File => dir.join(format!("{name}.lock")).display().to_string(),
            #[cfg(feature = "etcd")]
            Backend::Etcd => etcd_server().url(name),
            #[cfg(feature = "postgres")]
            Backend::Postgres => pg_server().url(name),
            #[cfg(feature = "redis")]
            Backend::Redis => redis_server().url(name),
        }
    }

    /// Whether a waiter that exits has left the queue by then.
    fn withdraws_at_exit(self) -> bool {
        #[cfg(feature = "etcd")]
        if self == Backend::Etcd {
            return true;
        }
        self == Backend::File
    }

    /// Whether a released lock still tells who held it last.
    fn keeps_past_records(self) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            Backend::Postgres => false,
            _ => true,
        }
    }
}

#[cfg(feature = "etcd")]
fn etcd_server() -> &'static servers::etcd::Etcd {
    servers::etcd::shared().expect("etcd, checked by available()")
}

#[cfg(feature = "postgres")]
fn pg_server() -> &'static servers::postgres::Server {
    servers::postgres::shared().expect("PostgreSQL, checked by available()")
}

#[cfg(feature = "redis")]
fn redis_server() -> &'static servers::redis::Redis {
    servers::redis::shared().expect("redis-server, checked by available()")
}

/// A process the scenario started: its pid and start time (field 22 of
/// its stat), so that a pid reused since is not taken for it.
struct Spawned {
    pid: i32,
    start: Option<u64>,
}

fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// One scenario on one backend; see the module's comment.
struct Scenario {
    backend: Backend,
    /// The lock's name (a file's stem, a URL's lock name).
    name: String,
    /// The path or URL.
    target: String,
    /// Where a file lock lives; removed with the scenario.
    _dir: tempfile::TempDir,
    marker: String,
    spawned: Vec<Spawned>,
    /// What the scenario put in the lock file (file backend).
    data: Option<Vec<u8>>,
    finished: bool,
}

impl Scenario {
    /// `None` when the backend cannot run here (said SKIPPED).
    fn new(backend: Backend, name: &str) -> Option<Scenario> {
        if !backend.available() {
            return None;
        }
        let dir = temp_dir();
        // Lock names are unique to the scenario and backend; the shared
        // server is this binary's own, so no other run uses them.
        let name = format!("{name}-{backend:?}").to_lowercase();
        let target = backend.target(dir.path(), &name);
        let marker = format!("{}-{}-{name}", std::process::id(), dir.path().display());
        Some(Scenario {
            backend,
            name,
            target,
            _dir: dir,
            marker,
            spawned: Vec::new(),
            data: None,
            finished: false,
        })
    }

    /// The lock file starts with DATA (not a record): lockrun must lock it
    /// and leave it as it was (CONTRACT §5). File backend only.
    fn with_data(mut self, data: &[u8]) -> Scenario {
        if self.backend == Backend::File {
            std::fs::write(&self.target, data).expect("write the lock file's data");
            self.data = Some(data.to_vec());
        }
        self
    }

    fn target(&self) -> &str {
        &self.target
    }

    /// Marks CMD as the scenario's: the marker variable, and none of the
    /// caller's etcd settings.
    fn mark(&self, cmd: &mut Command) {
        for (var, _) in std::env::vars() {
            if var.starts_with("ETCDCTL_") || var.starts_with("LOCKRUN_ETCD_") {
                cmd.env_remove(var);
            }
        }
        cmd.env(MARKER, &self.marker);
    }

    /// lockrun, marked, to run to its end (bounded).
    fn lockrun(&self) -> assert_cmd::Command {
        let mut cmd = self.std_lockrun();
        cmd.stdin(Stdio::null());
        let mut cmd = assert_cmd::Command::from_std(cmd);
        cmd.timeout(BOUND);
        cmd
    }

    fn std_lockrun(&self) -> Command {
        let mut cmd = std_lockrun();
        self.mark(&mut cmd);
        cmd
    }

    /// Any command, marked, to spawn with [`Scenario::spawn`].
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        self.mark(&mut cmd);
        cmd
    }

    fn note(&mut self, pid: u32) {
        let pid = pid as i32;
        self.spawned.push(Spawned {
            pid,
            start: start_time(pid),
        });
    }

    /// Starts CMD in the background, stderr kept aside (a passing run
    /// prints nothing), its pid noted for the reaping check.
    fn spawn(&mut self, cmd: Command) -> Background {
        let bg = Background::spawn_quiet(cmd);
        self.note(bg.child.id());
        bg
    }

    /// A plain child (a worker shell), noted likewise.
    fn spawn_child(&mut self, mut cmd: Command) -> Child {
        let child = cmd.spawn().expect("spawn a scenario's process");
        self.note(child.id());
        child
    }

    /// lockrun ARGS holding the lock while `sh -c SCRIPT` runs; waits for
    /// the script's `ready` line and returns the words after it.
    fn holder(&mut self, args: &[&str], script: &str) -> (Background, Vec<String>) {
        let mut cmd = self.std_lockrun();
        cmd.args(args)
            .arg(&self.target)
            .args(["--", "sh", "-c", script]);
        let bg = self.spawn(cmd);
        let words = bg.expect_ready();
        // On a lock URL the record naming the command's pid is stored just
        // after the command starts (one round trip; a lock file's is
        // written before): until then a conflict says "an unknown
        // process". Ready means named, for the tests that read the name.
        if !args.contains(&"--no-record") && !args.contains(&"-s") {
            wait_for("the holder's record to name its command", || {
                self.json()["record"]["pid"].is_i64()
            });
        }
        (bg, words)
    }

    /// Where `--metrics-file` writes, in the scenario's own directory.
    fn metrics_file(&self) -> String {
        self._dir.path().join("metrics.prom").display().to_string()
    }

    /// The metric NAME (with OUTCOME, for the run counters) of the
    /// metrics file, read as Prometheus would (strictly), its one lock
    /// labelled as the target (a lock URL without a password is its own
    /// label).
    fn metric(&self, name: &str, outcome: Option<&str>) -> Option<f64> {
        let path = self.metrics_file();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let all = observe::parse_strict(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        observe::value(&all, name, &self.target, outcome)
    }

    /// The runs the metrics file counts with OUTCOME.
    fn runs_counted(&self, outcome: &str) -> Option<f64> {
        self.metric("lockrun_runs_total", Some(outcome))
    }

    /// `lockrun holder --json` of the lock (which must succeed), parsed.
    fn json(&self) -> serde_json::Value {
        holder_json(&self.target)
    }

    /// How many wait for the lock, as `holder --json` counts them.
    fn waiting(&self) -> Option<u64> {
        let out = self
            .std_lockrun()
            .args(["holder", "--json", &self.target])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        json["waiting"].as_u64()
    }

    /// The post-conditions; every scenario ends with this call. Panics,
    /// saying all that is wrong, if any fails.
    fn finish(mut self) {
        self.finished = true;
        let mut wrong = Vec::new();
        // Every process the scenario started directly has been reaped.
        let me = std::process::id() as i32;
        for s in &self.spawned {
            if parent_of(s.pid) == Some(me) && start_time(s.pid) == s.start {
                wrong.push(format!(
                    "pid {} (state {:?}) was never reaped",
                    s.pid,
                    process_state(s.pid)
                ));
            }
        }
        // Nothing it started, however deep, is still running (looked at
        // before the lock: a leaked holder still holds it).
        let left = marked_processes(&self.marker);
        for (pid, cmdline) in &left {
            wrong.push(format!("pid {pid} `{cmdline}` was left running"));
        }
        // The lock is free, and what holder reads parses.
        let check = self
            .std_lockrun()
            .args(["check", "-q", &self.target])
            .stdin(Stdio::null())
            .output()
            .expect("run lockrun check");
        if check.status.code() != Some(1) {
            wrong.push(format!(
                "the lock is not free after the scenario: check said {:?} {}",
                check.status.code(),
                String::from_utf8_lossy(&check.stderr)
            ));
        }
        let holder = self
            .std_lockrun()
            .args(["holder", "--json", &self.target])
            .stdin(Stdio::null())
            .output()
            .expect("run lockrun holder");
        match serde_json::from_slice::<serde_json::Value>(&holder.stdout) {
            Ok(json) if holder.status.success() => {
                if json["state"] != "free" {
                    wrong.push(format!("holder does not say free: {json}"));
                }
                let record = &json["record"];
                if !(record.is_null() || record["pid"].is_number()) {
                    wrong.push(format!("holder's record is not a record: {json}"));
                }
            }
            _ => wrong.push(format!(
                "holder --json failed or did not print JSON: {:?} {} {}",
                holder.status.code(),
                String::from_utf8_lossy(&holder.stdout),
                String::from_utf8_lossy(&holder.stderr)
            )),
        }
        if self.backend == Backend::File {
            let text = std::fs::read(&self.target).unwrap_or_default();
            match &self.data {
                Some(data) if text != *data => wrong.push(format!(
                    "the lock file's data changed: {:?} is now {:?}",
                    String::from_utf8_lossy(data),
                    String::from_utf8_lossy(&text)
                )),
                Some(_) => {}
                None if text.is_empty() => {}
                None => {
                    let record: Result<serde_json::Value, _> =
                        serde_json::from_slice(text.trim_ascii());
                    // A holder's record, or the count a `--slots` lock
                    // file keeps.
                    if !record.is_ok_and(|r| r["lockrun"] == 1 || r["lockrun_slots"] == 1) {
                        wrong.push(format!(
                            "the lock file's record does not parse: {:?}",
                            String::from_utf8_lossy(&text)
                        ));
                    }
                }
            }
        }
        // Killed now, so that they hold no lock past this test.
        for (pid, _) in &left {
            if marked_processes(&self.marker).iter().any(|(p, _)| p == pid) {
                // SAFETY: kill(2) on a process just seen to carry this
                // scenario's marker: one the scenario started.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
        }
        assert!(
            wrong.is_empty(),
            "post-conditions of {} on {:?} failed:\n  {}",
            self.name,
            self.backend,
            wrong.join("\n  ")
        );
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if !self.finished && !std::thread::panicking() {
            panic!(
                "scenario {} ended without its post-conditions (finish)",
                self.name
            );
        }
        // A failed scenario leaves nothing running either.
        if !self.finished {
            for (pid, _) in marked_processes(&self.marker) {
                // SAFETY: as in finish: a process carrying our marker.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Live processes (zombies aside) whose environment carries MARKER=marker,
/// with their command lines.
fn marked_processes(marker: &str) -> Vec<(i32, String)> {
    let needle = format!("{MARKER}={marker}\0");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
            || process_gone(pid)
        {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, cmdline.trim().to_owned()));
    }
    found
}

/// One `#[test]` per backend the build has, each running BODY on a fresh
/// [`Scenario`]; `urls` limits it to the lock-URL backends.
macro_rules! scenario {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn file() {
                run(Backend::File, stringify!($name), $body);
            }
            scenario!(@urls $name, $body);
        }
    };
    (urls $name:ident, $body:expr) => {
        mod $name {
            // Unused in a build without lock URLs.
            #[allow(unused_imports)]
            use super::*;
            scenario!(@urls $name, $body);
        }
    };
    (@urls $name:ident, $body:expr) => {
        #[cfg(feature = "etcd")]
        #[test]
        fn etcd() {
            run(Backend::Etcd, stringify!($name), $body);
        }
        #[cfg(feature = "postgres")]
        #[test]
        fn postgres() {
            run(Backend::Postgres, stringify!($name), $body);
        }
        #[cfg(feature = "redis")]
        #[test]
        fn redis() {
            run(Backend::Redis, stringify!($name), $body);
        }
    };
}

fn run(backend: Backend, name: &str, body: fn(Scenario)) {
    if let Some(sc) = Scenario::new(backend, name) {
        body(sc);
    }
}

fn stderr_of(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stderr).into_owned()
}

// ------------------------------------------------------------ exclusion

/// What a run of the counter saw.
struct Counted {
    total: usize,
    /// Bodies that found another inside (a directory only one can make).
    overlaps: usize,
    /// `LOCKRUN_FENCING_TOKEN` of each body, in the order they ran.
    tokens: Vec<String>,
    /// Where the meter lines went (`read_meter`).
    meter: std::path::PathBuf,
}

/// `workers` shells, each running `PREFIX sh -c BODY` `rounds` times one
/// after the other, where BODY reads the counter, widens the race window
/// and writes it back plus one; it notes when it finds another body
/// inside, and appends meter lines around itself (one O_APPEND write
/// each) that count how many ran at once. PREFIX is lockrun on the lock,
/// or nothing for the control.
fn count(
    sc: &mut Option<&mut Scenario>,
    prefix: &[&str],
    workers: usize,
    rounds: usize,
) -> Counted {
    let dir = temp_dir();
    let d = dir.keep();
    let counter = d.join("counter");
    let tokens = d.join("tokens");
    let inside = d.join("inside");
    let overlaps = d.join("overlaps");
    let meter = d.join("meter");
    std::fs::write(&counter, "0\n").expect("write counter");
    let body = format!(
        "echo \"start $$ none\" >> {m}; mkdir {i} 2>/dev/null || echo overlap >> {o}; n=$(cat {c}); \
         echo \"${{LOCKRUN_FENCING_TOKEN:-none}}\" >> {t}; sleep 0.01; echo $((n+1)) > {c}; \
         rmdir {i} 2>/dev/null; echo \"end $$ none\" >> {m}",
        i = inside.display(),
        o = overlaps.display(),
        c = counter.display(),
        t = tokens.display(),
        m = meter.display()
    );
    let script = format!(
        "b=$1; shift; i=0; while [ $i -lt {rounds} ]; do \"$@\" sh -c \"$b\" || exit 9; i=$((i+1)); done"
    );
    let mut running: Vec<Child> = (0..workers)
        .map(|_| {
            let mut cmd = match sc {
                Some(sc) => sc.command("sh"),
                None => Command::new("sh"),
            };
            cmd.args(["-c", &script, "worker", &body]).args(prefix);
            match sc {
                Some(sc) => sc.spawn_child(cmd),
                None => cmd.spawn().expect("spawn worker"),
            }
        })
        .collect();
    for worker in &mut running {
        let status = wait_child(worker, BOUND * 3);
        assert!(status.success(), "a worker failed: {status:?}");
    }
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    Counted {
        total: read(&counter).trim().parse().expect("counter is a number"),
        overlaps: read(&overlaps).lines().count(),
        tokens: read(&tokens).lines().map(str::to_owned).collect(),
        meter: d,
    }
}

// Several processes exclude each other (no lost update, never two inside,
// the meter's peak 1), and on a lock URL get strictly increasing fencing
// tokens. On a file, the lock file holds the user's data throughout.
scenario!(exclusion_counter, |mut sc| {
    let (workers, rounds) = (4, 15);
    sc = sc.with_data(b"the user's own data\n");
    let target = sc.target().to_owned();
    let seen = count(
        &mut Some(&mut sc),
        &[bin(), "-w", "60", &target],
        workers,
        rounds,
    );
    assert_eq!(seen.overlaps, 0, "two commands ran at once");
    assert_eq!(
        seen.total,
        workers * rounds,
        "lost updates: the lock did not exclude"
    );
    let meter = read_meter(&seen.meter, 1);
    let _ = std::fs::remove_dir_all(&seen.meter);
    assert_eq!(meter.ended, workers * rounds);
    assert_eq!(meter.peak, 1, "commands overlapped: {meter:?}");
    assert_eq!(seen.tokens.len(), workers * rounds);
    if sc.backend.is_url() {
        let tokens: Vec<i64> = seen
            .tokens
            .iter()
            .map(|l| l.parse().expect("a fencing token is a number"))
            .collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "fencing tokens must strictly increase in lock order: {tokens:?}"
        );
        // Redis: the counter key holds the last token handed out.
        #[cfg(feature = "redis")]
        if sc.backend == Backend::Redis {
            assert_eq!(
                redis_server().cli(&["GET", &format!("{}:fencing", sc.name)]),
                tokens[tokens.len() - 1].to_string()
            );
        }
    } else {
        assert!(
            seen.tokens.iter().all(|t| t == "none"),
            "a file lock has no token"
        );
    }
    sc.finish();
});

/// The control: the same counter run without the lock overlaps and loses
/// updates, so the scenario above can fail.
#[test]
fn control_the_counter_catches_commands_run_without_the_lock() {
    let (workers, rounds) = (4, 6);
    let seen = count(&mut None, &[], workers, rounds);
    let meter = read_meter(&seen.meter, 1);
    let _ = std::fs::remove_dir_all(&seen.meter);
    assert!(
        seen.overlaps > 0 || seen.total < workers * rounds,
        "without the lock the counter saw no overlap and reached {}",
        seen.total
    );
    assert!(meter.peak > 1, "without the lock the meter saw no overlap");
}

// ------------------------------------------------------------ -n

// `-n` on a held lock: 75, naming the holder's command; `-E` changes the
// status, `-q` silences it; once released `-n` takes it.
scenario!(nonblocking_conflict_names_the_holder, |mut sc| {
    let (mut holder, words) = sc.holder(&[], "echo ready $$; read x");
    let pid = words[0].clone();
    let number: i64 = pid.parse().expect("pid");
    // On a URL the record naming the command reaches the server just after
    // the command starts (seen in CI: "held by an unknown process").
    // Ready means the record names a pid (Scenario::holder): this one's.
    assert_eq!(
        sc.json()["record"]["pid"],
        number,
        "the record names another pid"
    );
    let target = sc.target().to_owned();
    let out = sc.lockrun().args(["-n", &target, "true"]).assert().code(75);
    let stderr = stderr_of(&out);
    assert!(
        stderr.starts_with(&format!("lockrun: {target} is held by pid {pid} (sh -c")),
        "{stderr}"
    );
    sc.lockrun()
        .args(["-n", "-E", "3", &target, "true"])
        .assert()
        .code(3);
    sc.lockrun()
        .args(["-n", "-q", &target, "true"])
        .assert()
        .code(75)
        .stderr("");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    sc.lockrun()
        .args(["-n", &target, "true"])
        .assert()
        .success();
    sc.finish();
});

// ------------------------------------------------------------ -w

// A waiter gives up on time (not before, not seconds late), saying whom it
// waited for, and leaves no waiter behind; one that waits is woken by the
// release, not by a lease running out.
scenario!(
    a_waiter_times_out_on_time_and_one_that_waits_is_woken,
    |mut sc| {
        let (mut holder, _) = sc.holder(&[], "echo ready; read x");
        let target = sc.target().to_owned();
        let started = Instant::now();
        let out = sc
            .lockrun()
            .args(["-w", "0.5", &target, "true"])
            .assert()
            .code(75);
        // On time: a bound well above a loaded machine's start-up and well
        // below the lateness of an uninterruptible wait in a server.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took < Duration::from_millis(1500), "gave up late: {took:?}");
        let stderr = stderr_of(&out);
        assert!(stderr.contains("timed out after"), "{stderr}");
        assert!(stderr.contains("held by pid"), "{stderr}");
        assert_eq!(sc.json()["state"], "held");
        // Nobody is left queued: at once (an etcd waiter's key goes with its
        // lease, a Redis one's entry with it), or, on PostgreSQL, once the
        // server has ended the session lockrun closed.
        #[cfg(feature = "postgres")]
        if sc.backend == Backend::Postgres {
            wait_for("the waiter's session to go", || sc.waiting() == Some(0));
        }
        assert_eq!(sc.waiting(), Some(0), "{}", sc.json());
        let mut cmd = sc.std_lockrun();
        cmd.args(["-w", "30", &target, "--", "echo", "ran"]);
        let mut waiter = sc.spawn(cmd);
        wait_for("the waiter to queue", || sc.waiting() == Some(1));
        let released = Instant::now();
        holder.release();
        assert!(holder.wait_exit(BOUND).success());
        assert_eq!(waiter.line(BOUND).as_deref(), Some("ran"));
        assert!(waiter.wait_exit(BOUND).success());
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "the waiter was not woken by the release: {:?}",
            released.elapsed()
        );
        sc.finish();
    }
);

// ------------------------------------------------------------ signals

// A signal while waiting (with -w, with the -v status line, and for ever)
// ends the wait at once with 128+N, runs nothing, and withdraws from the
// queue; the next waiter is woken by the release.
scenario!(a_signal_while_waiting_ends_the_wait_at_once, |mut sc| {
    // A lease far longer than the test on a URL (a file lock has none).
    let ttl: &[&str] = if sc.backend.is_url() {
        &["--ttl", "30s"]
    } else {
        &[]
    };
    let (mut holder, _) = sc.holder(ttl, "echo ready; read x");
    let target = sc.target().to_owned();
    for args in [vec!["-w", "60"], vec!["-v"], vec![]] {
        let mut cmd = sc.std_lockrun();
        cmd.args(&args).args([&target, "--", "echo", "ran"]);
        let mut waiter = sc.spawn(cmd);
        wait_for("the waiter to queue", || sc.waiting() == Some(1));
        let signalled = Instant::now();
        kill(waiter.pid(), "TERM");
        let status = waiter.wait_exit(BOUND);
        assert_eq!(status.code(), Some(128 + 15), "{args:?}: {status:?}");
        assert!(
            signalled.elapsed() < Duration::from_secs(1),
            "{args:?}: the signal ended the wait {:?} later",
            signalled.elapsed()
        );
        // The waiter is gone, so its output has ended: no line means none
        // came.
        assert_eq!(waiter.line(BOUND), None, "{args:?}: the command ran");
        // Withdrawn on the way out: a file waiter's blocked flock(2) with
        // its process, an etcd waiter's key with the lease it revoked; a
        // Redis or PostgreSQL server notices the closed connection soon.
        if sc.backend.withdraws_at_exit() {
            assert_eq!(sc.waiting(), Some(0), "{args:?}: still queued");
        }
        wait_for("the waiter to leave the queue", || sc.waiting() == Some(0));
    }
    let mut cmd = sc.std_lockrun();
    cmd.args([&target, "sh", "-c", "echo got it"]);
    let mut waiter = sc.spawn(cmd);
    wait_for("the waiter to queue", || sc.waiting() == Some(1));
    holder.release();
    assert_eq!(waiter.line(BOUND).as_deref(), Some("got it"));
    assert!(waiter.wait_exit(BOUND).success());
    assert!(holder.wait_exit(BOUND).success());
    sc.finish();
});

// ------------------------------------------------------------ loss

/// Takes the lock away from its holder from outside: the key deleted
/// (etcd, Redis), the holder's session terminated (PostgreSQL). Returns
/// what lockrun's message must then say.
#[cfg_attr(
    not(any(feature = "etcd", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
fn lose(sc: &Scenario) -> &'static str {
    match sc.backend {
        Backend::File => unreachable!("a file lock cannot be lost"),
        #[cfg(feature = "etcd")]
        Backend::Etcd => {
            etcd_server().etcdctl(&["del", "--prefix", &format!("{}/", sc.name)]);
            "was deleted in etcd"
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let backend = sc.json()["postgres"]["backend_pid"]
                .as_i64()
                .expect("backend pid");
            assert_eq!(
                pg_server().psql(&format!("SELECT pg_terminate_backend({backend})")),
                "t"
            );
            "lockrun: "
        }
        #[cfg(feature = "redis")]
        Backend::Redis => {
            assert_eq!(redis_server().cli(&["DEL", &sc.name]), "1");
            "is gone from Redis"
        }
    }
}

// A lost lock stops the command with SIGTERM, then every process it
// started (a background child in its group, one in a session of its own),
// and lockrun exits 76 saying so; found by the next renewal, well within
// the TTL.
scenario!(urls kill_on_loss, |mut sc| {
    let metrics = sc.metrics_file();
    let (mut holder, words) = sc.holder(
        &["--ttl", "2s", "--kill-grace", "1s", "--metrics-file", &metrics],
        "trap 'echo got TERM; exit 0' TERM; \
         setsid sleep 1017 </dev/null >/dev/null 2>&1 & a=$!; \
         sleep 1018 </dev/null >/dev/null 2>&1 & echo ready $$ $a $!; \
         while :; do sleep 0.05; done",
    );
    let command: i32 = words[0].parse().expect("pid");
    let (setsid_child, child): (i32, i32) = (
        words[1].parse().expect("pid"),
        words[2].parse().expect("pid"),
    );
    let number = i64::from(command);
    // Ready means the record names a pid (Scenario::holder): this one's.
    assert_eq!(sc.json()["record"]["pid"], number, "the record names another pid");
    let says = lose(&sc);
    let lost = Instant::now();
    assert_eq!(holder.line(BOUND).as_deref(), Some("got TERM"));
    let status = holder.wait_exit(BOUND);
    assert_eq!(status.code(), Some(76), "{status:?}");
    assert!(
        lost.elapsed() < Duration::from_secs(2),
        "noticed {:?} after the loss, past the TTL",
        lost.elapsed()
    );
    assert!(process_gone(command), "the command {command} outlived exit 76");
    assert!(process_gone(child), "the child {child} outlived exit 76");
    assert!(
        process_gone(setsid_child),
        "the setsid'd child {setsid_child} outlived exit 76"
    );
    let stderr = holder.stderr_text();
    assert!(
        stderr.contains(&format!(
            "lockrun: lost the lock {} while the command ran",
            sc.target()
        )),
        "{stderr}"
    );
    assert!(stderr.contains(says), "{stderr}");
    // The monitoring hears of it as `lost`, whichever backend lost it
    // (the run flow's one seam, src/observe/).
    assert_eq!(sc.runs_counted("lost"), Some(1.0));
    assert_eq!(sc.runs_counted("ran"), Some(0.0));
    assert_eq!(sc.metric("lockrun_last_exit_status", None), Some(76.0));
    sc.finish();
});

// ------------------------------------------------------------ --max-time

// `--max-time` stops the command (SIGTERM, SIGKILL after the grace when
// it ignores that) and everything it started, exits 124 and releases the
// lock, the record saying why.
scenario!(max_time_stops_the_command_and_releases, |mut sc| {
    let target = sc.target().to_owned();
    let mut cmd = sc.std_lockrun();
    let metrics = sc.metrics_file();
    cmd.args([
        "--max-time",
        "1s",
        "--kill-grace",
        "1s",
        "--metrics-file",
        &metrics,
    ])
    .args([&target, "--"])
    .args([
        "sh",
        "-c",
        "(trap - TERM; setsid sleep 1009 </dev/null >/dev/null 2>&1 & echo ready $!); \
             trap '' TERM; exec sleep 1010",
    ]);
    let mut lockrun = sc.spawn(cmd);
    let orphan: i32 = lockrun.expect_ready()[0].parse().expect("pid");
    assert_eq!(lockrun.wait_exit(BOUND).code(), Some(124));
    assert!(
        process_gone(orphan),
        "the command's orphan {orphan} outlived exit 124"
    );
    let stderr = lockrun.stderr_text();
    assert!(stderr.contains("--max-time"), "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    let json = sc.json();
    assert_eq!(json["state"], "free", "{json}");
    if sc.backend.keeps_past_records() {
        assert_eq!(json["record"]["exit"]["max_time"], "1s", "{json}");
    }
    assert_eq!(sc.runs_counted("max_time"), Some(1.0));
    #[cfg(feature = "redis")]
    if sc.backend == Backend::Redis {
        assert_eq!(redis_server().cli(&["EXISTS", &sc.name]), "0");
    }
    sc.lockrun()
        .args(["-n", &target, "true"])
        .assert()
        .success();
    sc.finish();
});

// ------------------------------------------------------------ --slots

// Seven gated jobs through `--slots 3`: never more than 3 at once, slot
// numbers unique among running jobs and in 1..=3, every job ends; then
// the lock is a plain lock again.
scenario!(
    slots_run_seven_jobs_three_at_a_time_with_unique_slots,
    |sc| {
        let marked = || sc.std_lockrun();
        meter_run(marked, &["--slots", "3"], sc.target(), 7, 3).unwrap();
        // The last slot holder took N's key with it: on a URL a plain lock
        // may follow (a lock file keeps its N, CONTRACT §10).
        #[cfg(feature = "redis")]
        if sc.backend == Backend::Redis {
            assert_eq!(
                redis_server().cli(&["EXISTS", &format!("{}:slots", sc.name)]),
                "0"
            );
        }
        if sc.backend.is_url() {
            sc.lockrun()
                .args(["-n", sc.target(), "true"])
                .assert()
                .success();
        }
        sc.finish();
    }
);

// The control: the same meter fails when the limit is broken.
scenario!(control_the_slots_meter_catches_a_broken_limit, |sc| {
    let marked = || sc.std_lockrun();
    // The meter SIGKILLs the jobs once it has seen too many: on a URL
    // their leases then last a TTL, short here so the lock is soon free.
    let ttl: &[&str] = if sc.backend.is_url() {
        &["--ttl", "2s"]
    } else {
        &[]
    };
    let args = [&["--slots", "7"][..], ttl].concat();
    let too_many = meter_run(marked, &args, sc.target(), 7, 3).unwrap_err();
    // On etcd and PostgreSQL seen either way: a fourth job running, or
    // its slot number above 3; elsewhere as a fourth job running.
    #[allow(unused_mut)]
    let mut either = false;
    #[cfg(feature = "etcd")]
    {
        either |= sc.backend == Backend::Etcd;
    }
    #[cfg(feature = "postgres")]
    {
        either |= sc.backend == Backend::Postgres;
    }
    assert!(
        too_many.contains("more than 3") || (either && too_many.contains("out of 1..=3")),
        "{too_many}"
    );
    wait_for("the killed jobs' leases to run out", || {
        sc.std_lockrun()
            .args(["check", "-q", sc.target()])
            .status()
            .is_ok_and(|s| s.code() == Some(1))
    });
    sc.finish();
});

// ------------------------------------------------------------ holder/check

// `check` and `holder` (text and JSON) see the holder, its command's pid
// and, on a URL, its fencing token; after the release the lock reads free
// (with the last holder where the backend keeps it), and the next holder's
// token is larger.
scenario!(holder_and_check_read_the_lock, |mut sc| {
    let target = sc.target().to_owned();
    sc.lockrun().args(["check", &target]).assert().code(1);
    let (mut holder, words) = sc.holder(
        &[],
        "echo ready $$ ${LOCKRUN_FENCING_TOKEN:-none} $LOCKRUN_LOCKFILE; read x",
    );
    let (pid, token) = (words[0].clone(), words[1].clone());
    let number: i64 = pid.parse().expect("pid");
    assert_eq!(words[2], target, "LOCKRUN_LOCKFILE");
    // Ready means the record names a pid (Scenario::holder): this one's.
    assert_eq!(
        sc.json()["record"]["pid"],
        number,
        "the record names another pid"
    );
    sc.lockrun().args(["check", "-q", &target]).assert().code(0);
    let json = sc.json();
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["record"]["pid"], number, "{json}");
    assert!(json["record"]["host"].is_string(), "{json}");
    assert_eq!(json["record_holder_alive"], true, "{json}");
    let text = holder_text(&target);
    assert!(
        text.starts_with(&format!("{target}: held (exclusive) by pid {pid} `sh -c")),
        "{text}"
    );
    match sc.backend {
        Backend::File => assert_eq!(token, "none", "a file lock has no fencing token"),
        #[cfg(feature = "etcd")]
        Backend::Etcd => {
            assert_eq!(json["etcd"]["fencing_token"].to_string(), token, "{json}");
            assert!(text.contains(&format!("fencing token {token}")), "{text}");
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let backend = json["postgres"]["backend_pid"]
                .as_i64()
                .expect("backend pid");
            let key = pg_server().psql(&format!("SELECT hashtextextended('{}', 0)", sc.name));
            assert_eq!(json["postgres"]["key"].to_string(), key, "{json}");
            let app = json["postgres"]["application_name"]
                .as_str()
                .expect("app name");
            assert!(
                app.starts_with(&format!("lockrun {}@", holder.pid())),
                "{app}"
            );
            assert!(
                text.contains(&format!("PostgreSQL session: server pid {backend}")),
                "{text}"
            );
        }
        #[cfg(feature = "redis")]
        Backend::Redis => {
            assert_eq!(json["redis"]["key"], sc.name.as_str(), "{json}");
            assert_eq!(json["redis"]["fencing_token"].to_string(), token, "{json}");
            let ttl = json["redis"]["ttl_ms"].as_i64().expect("ttl_ms");
            assert!((1..=10_000).contains(&ttl), "{json}");
            // What the token's promise rests on.
            assert_eq!(json["redis"]["appendonly"], "no", "{json}");
            assert_eq!(json["redis"]["role"], "master", "{json}");
            assert_eq!(json["redis"]["connected_replicas"], 0, "{json}");
            let out = sc
                .lockrun()
                .args(["check", "--json", &target])
                .assert()
                .code(0);
            let check: serde_json::Value =
                serde_json::from_slice(&out.get_output().stdout).expect("check --json");
            assert_eq!(check["redis"]["fencing_token"].to_string(), token);
            assert!(
                text.contains(&format!("Redis key {}, fencing token {token}", sc.name)),
                "{text}"
            );
        }
    }
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    sc.lockrun().args(["check", "-q", &target]).assert().code(1);
    let json = sc.json();
    assert_eq!(json["state"], "free", "{json}");
    let text = holder_text(&target);
    if sc.backend.keeps_past_records() {
        assert!(
            text.starts_with(&format!("{target}: free; last held by pid {pid}")),
            "{text}"
        );
        assert!(text.contains("exit 0"), "{text}");
    } else {
        assert_eq!(
            text,
            format!("{target}: free (PostgreSQL keeps no record of past holders)\n")
        );
    }
    if sc.backend.is_url() {
        let out = sc
            .lockrun()
            .args([&target, "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"])
            .assert()
            .success();
        let next: i64 = String::from_utf8_lossy(&out.get_output().stdout)
            .trim()
            .parse()
            .expect("token");
        assert!(
            next > token.parse::<i64>().expect("token"),
            "{next} after {token}"
        );
    }
    sc.finish();
});

// ------------------------------------------------------------ the control

// The post-conditions can fail: a scenario that leaves its holder running
// (the Background forgotten, so nothing kills it) must fail them, saying
// the holder was left running and the lock is not free. Run on every
// backend; each failure is caught and its message checked.
scenario!(
    control_a_leaked_holder_fails_the_post_conditions,
    |mut sc| {
        let (holder, words) = sc.holder(&[], "echo ready $$; exec sleep 1031");
        let command: i32 = words[0].parse().expect("pid");
        let number = i64::from(command);
        // Ready means the record names a pid (Scenario::holder): this one's.
        assert_eq!(
            sc.json()["record"]["pid"],
            number,
            "the record names another pid"
        );
        let lockrun_pid = holder.pid();
        // Leaked: never released, never waited for, never killed.
        std::mem::forget(holder);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sc.finish()))
            .expect_err("the post-conditions passed with a holder left running");
        let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains(&format!("pid {lockrun_pid} (state")),
            "not reported unreaped: {message}"
        );
        assert!(
            message.contains(&format!("pid {command} `sleep 1031` was left running")),
            "{message}"
        );
        assert!(message.contains("the lock is not free"), "{message}");
        // The check killed what it found; reap the forgotten lockrun.
        let mut status = 0;
        // SAFETY: waitpid on our own child, forgotten above, not yet reaped.
        unsafe { libc::waitpid(lockrun_pid, &mut status, 0) };
    }
);
