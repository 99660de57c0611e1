//! lockrun.exe on Windows, run under Wine in CI (.ci/windows.sh): no sh,
//! no /proc, no signals. The commands lockrun runs are this test binary
//! itself, started as a helper (`helper` below, chosen by
//! `LOCKRUN_TEST_HELPER`), so that the suite needs nothing but the two
//! executables cargo builds.
#![cfg(windows)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HELPER: &str = "LOCKRUN_TEST_HELPER";

fn lockrun() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockrun"));
    c.stdin(Stdio::null());
    c
}

/// The arguments that make this test binary run `helper` with `what`.
fn helper_args(what: &str) -> (Vec<String>, String) {
    let me = std::env::current_exe().expect("the test binary's path");
    (
        vec![
            me.display().to_string(),
            "helper".into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
            "-q".into(),
        ],
        what.to_owned(),
    )
}

/// `lockrun ARGS... LOCKFILE <this binary as helper WHAT>`.
fn run_with(args: &[&str], lock: &Path, what: &str) -> Command {
    let mut c = lockrun();
    let (argv, what) = helper_args(what);
    c.args(args)
        .arg(lock)
        .arg("--")
        .args(argv)
        .env(HELPER, what);
    c
}

fn output(mut c: Command) -> Output {
    c.output().expect("lockrun.exe runs")
}

fn status(c: Command) -> i32 {
    let out = output(c);
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// Waits until `check` says the lock is held (the record names a live
/// holder), so a test starts its contender only once the holder runs.
fn wait_held(lock: &Path) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let mut c = lockrun();
        c.args(["check", "-q"]).arg(lock);
        if status(c) == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never became held", lock.display());
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockrun.exe starts")
}

// ---------------------------------------------------------------------
// The helper: what the commands under test do.

/// Not a test of its own: without `LOCKRUN_TEST_HELPER` it does nothing.
#[test]
fn helper() {
    let Ok(what) = std::env::var(HELPER) else {
        return;
    };
    let mut words = what.split('|');
    let verb = words.next().unwrap_or_default();
    let arg = |i: usize| what.split('|').nth(i).unwrap_or_default().to_owned();
    match verb {
        // Read a counter, hold on, write it plus one: a lost update or an
        // overlap (seen through a marker file) shows two at once.
        "increment" => {
            let counter = PathBuf::from(arg(1));
            let marker = counter.with_extension("inside");
            if fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&marker)
                .is_err()
            {
                let overlaps = counter.with_extension("overlaps");
                let mut seen = fs::read_to_string(&overlaps).unwrap_or_default();
                seen.push('x');
                let _ = fs::write(&overlaps, seen);
            }
            let n: u64 = fs::read_to_string(&counter)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            std::thread::sleep(Duration::from_millis(30));
            fs::write(&counter, format!("{}", n + 1)).expect("write the counter");
            let _ = fs::remove_file(&marker);
        }
        // Its own arguments, after the six that make it the helper, as
        // JSON into a file: what lockrun.exe's command line delivered.
        "args" => {
            let mine: Vec<String> = std::env::args().skip(6).collect();
            let json = serde_json::to_string(&mine).expect("JSON of strings");
            fs::write(arg(1), json).expect("write the arguments");
        }
        "sleep" => std::thread::sleep(Duration::from_millis(arg(1).parse().unwrap_or(1000))),
        // Holds until the test writes FILE (at most MS): a holder whose
        // checks take longer on a loaded machine must not end midway.
        "until" => {
            let (file, bound) = (arg(1), arg(2).parse().unwrap_or(60_000));
            let start = Instant::now();
            while !Path::new(&file).exists() && start.elapsed() < Duration::from_millis(bound) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        "exit" => std::process::exit(arg(1).parse().unwrap_or(0)),
        "touch" => fs::write(arg(1), b"ran").expect("write the marker"),
        // The record must name this process before it runs.
        "own-record" => {
            let lock = std::env::var("LOCKRUN_LOCKFILE").expect("LOCKRUN_LOCKFILE");
            let text = fs::read_to_string(&lock).unwrap_or_default();
            let mine = format!("\"pid\":{},", std::process::id());
            std::process::exit(if text.contains(&mine) { 0 } else { 3 });
        }
        // Start a grandchild that writes a file after a while, then wait.
        "grandchild" => {
            // Says it runs (beside the witness), for a test that must not
            // act before the command exists.
            let _ = fs::write(format!("{}.started", arg(1)), b"");
            let (argv, _) = helper_args("");
            let mut child = Command::new(&argv[0])
                .args(&argv[1..])
                .env(HELPER, format!("late-write|{}|{}", arg(1), arg(2)))
                .stdout(Stdio::null())
                .spawn()
                .expect("grandchild starts");
            std::thread::sleep(Duration::from_secs(60));
            let _ = child.wait();
        }
        "late-write" => {
            std::thread::sleep(Duration::from_millis(arg(2).parse().unwrap_or(2000)));
            fs::write(arg(1), "survived").expect("write");
        }
        // --slots and -s: a marker per holder in a directory; the most
        // markers ever seen at once go into this holder's result file.
        // Each holds on for `crowd|DIR|MS` (300 ms unless given).
        "crowd" => {
            let dir = PathBuf::from(arg(1));
            let hold = Duration::from_millis(arg(2).parse().unwrap_or(300));
            let slot = std::env::var("LOCKRUN_SLOT").unwrap_or_else(|_| "none".into());
            let me = std::process::id();
            let marker = dir.join(format!("in-{me}"));
            fs::write(&marker, &slot).expect("marker");
            if slot != "none" {
                let taken = dir.join(format!("slot-{slot}"));
                if fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&taken)
                    .is_err()
                {
                    fs::write(dir.join(format!("dup-{me}")), &slot).expect("dup");
                }
                std::thread::sleep(hold);
                let count = count_in(&dir);
                let _ = fs::remove_file(&taken);
                fs::write(dir.join(format!("seen-{me}")), count.to_string()).expect("seen");
            } else {
                std::thread::sleep(hold);
                let count = count_in(&dir);
                fs::write(dir.join(format!("seen-{me}")), count.to_string()).expect("seen");
            }
            let _ = fs::remove_file(&marker);
        }
        other => panic!("unknown helper {other}"),
    }
}

fn count_in(dir: &Path) -> usize {
    fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("in-"))
                .count()
        })
        .unwrap_or(0)
}

fn max_seen(dir: &Path) -> usize {
    fs::read_dir(dir)
        .expect("results")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("seen-"))
        .filter_map(|e| fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

// ---------------------------------------------------------------------
// The tests.

const CROWD: usize = 20;

fn crowd_counter(with_lock: bool) -> (u64, usize) {
    let dir = tmp();
    let lock = dir.path().join("count.lock");
    let counter = dir.path().join("counter");
    let what = format!("increment|{}", counter.display());
    let children: Vec<Child> = (0..CROWD)
        .map(|_| {
            if with_lock {
                spawn(run_with(&[], &lock, &what))
            } else {
                let (argv, what) = helper_args(&what);
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]).env(HELPER, what);
                spawn(c)
            }
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "a run failed: {:?}: {}",
            out.status,
            stderr(&out)
        );
    }
    let n = fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let overlaps = fs::read_to_string(counter.with_extension("overlaps"))
        .unwrap_or_default()
        .len();
    (n, overlaps)
}

#[test]
fn twenty_concurrent_runs_exclude_each_other() {
    let (n, overlaps) = crowd_counter(true);
    assert_eq!((n, overlaps), (CROWD as u64, 0), "counter and overlaps");
}

/// The control: the same crowd without lockrun loses updates, so the
/// test above can fail.
#[test]
fn without_the_lock_the_crowd_loses_updates() {
    let (n, overlaps) = crowd_counter(false);
    assert!(
        n < CROWD as u64 || overlaps > 0,
        "no lost update and no overlap without a lock: the exclusion test proves nothing ({n}, {overlaps})"
    );
}

#[test]
fn nonblocking_conflict_is_75_and_names_the_holder() {
    let dir = tmp();
    let lock = dir.path().join("busy.lock");
    let mut holder = spawn(run_with(&[], &lock, "sleep|4000"));
    wait_held(&lock);
    let out = output(run_with(&["-n"], &lock, "exit|0"));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let pid = fs::read_to_string(&lock).expect("record");
    let rec: serde_json::Value = serde_json::from_str(pid.trim()).expect("json");
    let pid = rec["pid"].as_i64().expect("pid");
    assert!(
        stderr(&out).contains(&format!("is held by pid {pid} ")),
        "{}",
        stderr(&out)
    );
    let out = output(run_with(&["-n", "-E", "9", "-q"], &lock, "exit|0"));
    assert_eq!(out.status.code(), Some(9));
    assert_eq!(stderr(&out), "");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A held lock file cannot be deleted or replaced by a rename: otherwise
/// the next lockrun would create a new file of that name and lock it
/// while the first still holds the old one (two holders at once). Once
/// every lockrun is gone, it can.
#[test]
fn a_held_lock_file_cannot_be_deleted_or_renamed_over() {
    let dir = tmp();
    let lock = dir.path().join("kept.lock");
    let mut holder = spawn(run_with(&[], &lock, "sleep|6000"));
    wait_held(&lock);
    let removed = fs::remove_file(&lock);
    let other = dir.path().join("other.lock");
    fs::write(&other, b"").expect("another file");
    let replaced = fs::rename(&other, &lock);
    let moved = fs::rename(&lock, dir.path().join("moved.lock"));
    // Whatever happened above, a second run must find the lock busy.
    let out = output(run_with(&["-n"], &lock, "exit|0"));
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(
        out.status.code(),
        Some(75),
        "a second run while held (deleted: {}, renamed over: {}, renamed away: {}): {}",
        removed.is_ok(),
        replaced.is_ok(),
        moved.is_ok(),
        stderr(&out)
    );
    assert!(removed.is_err(), "the held lock file was deleted");
    assert!(
        replaced.is_err(),
        "another file was renamed over the held lock file"
    );
    assert!(moved.is_err(), "the held lock file was renamed away");
    // lockrun keeps no handle past its life: a free lock file can go.
    fs::remove_file(&lock).expect("a free lock file can be deleted");
}

#[test]
fn a_timeout_gives_up_after_its_time() {
    let dir = tmp();
    let lock = dir.path().join("slow.lock");
    let mut holder = spawn(run_with(&[], &lock, "sleep|6000"));
    wait_held(&lock);
    let start = Instant::now();
    let out = output(run_with(&["-w", "1"], &lock, "exit|0"));
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("timed out after"), "{}", stderr(&out));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // And a wait that outlasts the holder gets the lock.
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(status(run_with(&["-w", "10"], &lock, "exit|0")), 0);
}

#[test]
fn the_exit_code_passes_through() {
    let dir = tmp();
    let lock = dir.path().join("code.lock");
    for code in [0, 3, 42, 255] {
        assert_eq!(status(run_with(&[], &lock, &format!("exit|{code}"))), code);
    }
    let mut c = lockrun();
    c.arg(&lock).args(["-c", "exit 7"]);
    assert_eq!(status(c), 7, "-c through %COMSPEC% /c");
    let rec: serde_json::Value =
        serde_json::from_str(fs::read_to_string(&lock).expect("record").trim()).expect("json");
    assert_eq!(rec["exit"]["code"], 7);
    let mut c = lockrun();
    c.arg(&lock).arg("no-such-program-here.exe");
    assert_eq!(status(c), 127);
}

/// A Windows exit code is 32 bits: one beyond a byte (an NTSTATUS for a
/// crash, 0xC0000005) is lockrun.exe's whole, never wrapped into one that
/// could read as success or busy (300 would be 44, 0xC0000005 5).
#[test]
fn an_exit_code_beyond_a_byte_passes_through_whole() {
    let dir = tmp();
    let lock = dir.path().join("wide.lock");
    for code in [300, 0xC000_0005_u32 as i32] {
        assert_eq!(status(run_with(&[], &lock, &format!("exit|{code}"))), code);
    }
}

#[test]
fn the_record_is_complete_before_the_command_runs() {
    let dir = tmp();
    let lock = dir.path().join("rec.lock");
    for _ in 0..3 {
        let out = output(run_with(&[], &lock, "own-record"));
        assert_eq!(
            out.status.code(),
            Some(0),
            "the command did not find its own pid in the record"
        );
    }
}

#[test]
fn holder_reads_the_record_while_held_and_after() {
    let dir = tmp();
    let lock = dir.path().join("who.lock");
    // Held until the test has looked (a file), not for a fixed time that
    // a loaded machine can outlast before `holder` runs.
    let release = dir.path().join("release");
    let mut holder = spawn(run_with(
        &[],
        &lock,
        &format!("until|{}|60000", release.display()),
    ));
    wait_held(&lock);
    let mut c = lockrun();
    c.args(["holder", "--json"]).arg(&lock);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0));
    let held: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(held["state"], "held");
    assert_eq!(held["record_holder_alive"], true);
    let pid = held["record"]["pid"].as_i64().expect("pid");
    assert_eq!(held["holders"][0]["pid"].as_i64(), Some(pid));
    assert!(held["record"]["pid_start"].as_u64().is_some());
    assert!(held["record"].get("uid").is_none(), "no uid on Windows");
    assert!(held["record"].get("released_at").is_none());
    fs::write(&release, b"").expect("the release file");
    let st = holder.wait().expect("wait");
    assert!(st.success());
    let mut c = lockrun();
    c.args(["holder", "--json"]).arg(&lock);
    let after: serde_json::Value = serde_json::from_slice(&output(c).stdout).expect("json");
    assert_eq!(after["state"], "free");
    assert_eq!(after["record"]["pid"].as_i64(), Some(pid));
    assert_eq!(after["record"]["exit"]["code"], 0);
    assert!(after["record"]["released_at"].is_string());
    let mut c = lockrun();
    c.args(["check", "-q"]).arg(&lock);
    assert_eq!(status(c), 1);
    let mut c = lockrun();
    c.args(["check", "-q"]).arg(dir.path().join("never.lock"));
    assert_eq!(status(c), 1, "no lock file: not held");
}

#[test]
fn a_killed_holder_frees_the_lock_and_its_command_ends() {
    let dir = tmp();
    let lock = dir.path().join("killed.lock");
    let mut holder = spawn(run_with(&[], &lock, "sleep|60000"));
    wait_held(&lock);
    holder.kill().expect("kill lockrun");
    let _ = holder.wait();
    // The command went with lockrun's job: check finds its record dead.
    let start = Instant::now();
    loop {
        let mut c = lockrun();
        c.args(["check", "-q"]).arg(&lock);
        if status(c) == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the command outlived the killed lockrun"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let start = Instant::now();
    assert_eq!(status(run_with(&["-w", "10"], &lock, "exit|0")), 0);
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn max_time_ends_the_command_and_its_grandchild() {
    let dir = tmp();
    let lock = dir.path().join("max.lock");
    let witness = dir.path().join("survived");
    let start = Instant::now();
    let out = output(run_with(
        &["--max-time", "1s"],
        &lock,
        &format!("grandchild|{}|2500", witness.display()),
    ));
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(10));
    let rec: serde_json::Value =
        serde_json::from_str(fs::read_to_string(&lock).expect("record").trim()).expect("json");
    assert_eq!(rec["exit"]["max_time"], "1s");
    std::thread::sleep(Duration::from_millis(3000));
    assert!(!witness.exists(), "the grandchild outlived --max-time");
}

#[test]
fn slots_let_at_most_three_run() {
    let dir = tmp();
    let lock = dir.path().join("pool.lock");
    let crowd = dir.path().join("crowd");
    fs::create_dir(&crowd).expect("dir");
    let what = format!("crowd|{}", crowd.display());
    let children: Vec<Child> = (0..8)
        .map(|_| spawn(run_with(&["--slots", "3"], &lock, &what)))
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success());
    }
    let most = max_seen(&crowd);
    assert!(
        (2..=3).contains(&most),
        "at most 3 at once, and more than one: {most}"
    );
    let dups: Vec<_> = fs::read_dir(&crowd)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("dup-"))
        .collect();
    assert!(dups.is_empty(), "two holders had one LOCKRUN_SLOT");
    let out = output(run_with(&["--slots", "4"], &lock, "exit|0"));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("--slots 3"), "{}", stderr(&out));
}

#[test]
fn shared_locks_share_and_exclude_exclusive() {
    let dir = tmp();
    let lock = dir.path().join("shared.lock");
    let crowd = dir.path().join("crowd");
    fs::create_dir(&crowd).expect("dir");
    let what = format!("crowd|{}", crowd.display());
    let children: Vec<Child> = (0..3)
        .map(|_| spawn(run_with(&["-s"], &lock, &what)))
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success());
    }
    assert!(max_seen(&crowd) >= 2, "shared holders ran one at a time");
    let mut holder = spawn(run_with(&["-s"], &lock, "sleep|3000"));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        status(run_with(&["-n"], &lock, "exit|0")),
        75,
        "exclusive beside shared"
    );
    assert_eq!(
        status(run_with(&["-n", "-s"], &lock, "exit|0")),
        0,
        "shared beside shared"
    );
    let _ = holder.wait();
}

/// `list` names the lock files given, a directory's files one line each,
/// sorted: the held one with its holder, the free one with its last holder;
/// without a path it is a usage error (Windows has no lock table).
#[test]
fn list_shows_a_directorys_lock_files_held_and_free() {
    let dir = tmp();
    let held = dir.path().join("a-held.lock");
    let free = dir.path().join("b-free.lock");
    assert_eq!(status(run_with(&[], &free, "exit|0")), 0);
    let mut holder = spawn(run_with(&[], &held, "sleep|3000"));
    wait_held(&held);
    let mut c = lockrun();
    c.arg("list").arg(dir.path());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "one line per lock file: {text}");
    assert!(lines[0].contains("a-held.lock: held"), "{text}");
    assert!(lines[0].contains("since "), "one line, since when: {text}");
    assert!(
        lines[1].contains("b-free.lock: free; last held by"),
        "{text}"
    );
    let mut c = lockrun();
    c.args(["list", "--json"]).arg(&held).arg(&free);
    let out = output(c);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["state"], "held");
    assert_eq!(rows[1]["state"], "free");
    assert_eq!(rows[1]["record"]["exit"]["code"], 0);
    assert!(holder.wait().expect("wait").success());
    let mut c = lockrun();
    c.arg("list");
    let out = output(c);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("no lock table"), "{}", stderr(&out));
}

#[test]
fn unix_only_forms_are_usage_errors() {
    let dir = tmp();
    let lock = dir.path().join("u.lock");
    for args in [
        vec!["3"],
        vec!["-F", "x", "y"],
        vec!["--fcntl", "x", "y"],
        vec!["--fd", "3", "x"],
        vec!["--start", "0", "x", "y"],
        vec!["-u", "3"],
        vec!["--log", "syslog", "x", "y"],
        vec!["--log-facility", "daemon", "x", "y"],
    ] {
        let mut c = lockrun();
        c.args(&args);
        let out = output(c);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(
            stderr(&out).contains("Unix-only"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let _ = lock;
}

/// Issue 27 item 2: the lock file is refused, as on Linux, when it is a
/// directory, has a second name (a hard link), or is a reparse point (a
/// symbolic link: refused as O_NOFOLLOW refuses one), and nothing runs.
#[test]
fn a_directory_a_hard_link_and_a_symbolic_link_are_refused() {
    let dir = tmp();
    let ran = dir.path().join("ran");
    let refused = |lock: &Path, why: &str| {
        let mut c = run_with(&[], lock, &format!("touch|{}", ran.display()));
        c.current_dir(dir.path());
        let out = output(c);
        assert_eq!(out.status.code(), Some(77), "{why}: {}", stderr(&out));
        assert!(!ran.exists(), "{why}: the command ran");
        stderr(&out)
    };
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("a directory");
    assert!(refused(&sub, "a directory").contains("directory"));
    let first = dir.path().join("a.lock");
    std::fs::write(&first, b"").expect("a lock file");
    let second = dir.path().join("b.lock");
    std::fs::hard_link(&first, &second).expect("a hard link");
    assert!(refused(&second, "a hard link").contains("hard links"));
    let link = dir.path().join("l.lock");
    match std::os::windows::fs::symlink_file(&first, &link) {
        // Wine makes a Unix symbolic link, which its Windows calls do not
        // show as a reparse point (nor resolve in GetFinalPathNameByHandle):
        // there the case cannot be seen, and is said to be skipped.
        Ok(())
            if std::fs::symlink_metadata(&link).map_or(true, |m| {
                std::os::windows::fs::MetadataExt::file_attributes(&m) & 0x400 == 0
            }) =>
        {
            eprintln!(
                "SKIPPED: the symbolic-link case (this system's symbolic link is not a reparse point: Wine)"
            );
        }
        Ok(()) => {
            assert!(refused(&link, "a symbolic link").contains("reparse point"));
        }
        // Creating one needs a privilege (or developer mode) on Windows;
        // the refusal is still checked wherever one can be made.
        Err(e) => eprintln!("SKIPPED: the symbolic-link case (cannot make one here: {e})"),
    }
}

// ---------------------------------------------------------------------
// Lock URLs (a build with --features etcd,postgres,redis): the servers are
// Linux processes .ci/windows.sh starts on loopback ports (Wine's
// processes use the host's sockets), their URLs passed by environment. A
// test without its URL says SKIPPED loudly, and fails under
// LOCKRUN_TEST_REQUIRE_ALL (CI sets it).

/// One lock URL service under test.
struct Service {
    name: &'static str,
    /// `redis://127.0.0.1:PORT`, `etcd://127.0.0.1:PORT`,
    /// `postgres://USER@127.0.0.1:PORT/DB`.
    base: String,
}

impl Service {
    fn from_env(name: &'static str, var: &str) -> Option<Service> {
        match std::env::var(var) {
            Ok(base) if !base.is_empty() => Some(Service { name, base }),
            _ => {
                let line = format!(
                    "*** SKIPPED: {name} lock URL tests: {var} is not set (.ci/windows.sh starts the server and sets it) ***"
                );
                eprintln!("{line}");
                if std::env::var_os("LOCKRUN_TEST_REQUIRE_ALL").is_some() {
                    panic!("LOCKRUN_TEST_REQUIRE_ALL is set: {line}");
                }
                None
            }
        }
    }

    /// The lock URL of lock `name`, unique to this test process.
    fn url(&self, name: &str) -> String {
        let name = format!("win-{}-{name}", std::process::id());
        // etcd names the lock by path; Redis and PostgreSQL by fragment.
        match self.base.starts_with("etcd") {
            true => format!("{}/{name}", self.base),
            false => format!("{}#{name}", self.base),
        }
    }

    /// The lock's name inside the URL.
    fn lock_name(url: &str) -> &str {
        url.rsplit(['#', '/']).next().unwrap_or_default()
    }
}

fn redis() -> Option<Service> {
    Service::from_env("Redis", "LOCKRUN_WIN_REDIS_URL")
}

fn etcd() -> Option<Service> {
    Service::from_env("etcd", "LOCKRUN_WIN_ETCD_URL")
}

fn postgres() -> Option<Service> {
    Service::from_env("PostgreSQL", "LOCKRUN_WIN_POSTGRES_URL")
}

/// `lockrun ARGS... URL <this binary as helper WHAT>`.
fn url_run(args: &[&str], url: &str, what: &str) -> Command {
    let mut c = lockrun();
    let (argv, what) = helper_args(what);
    c.args(args).arg(url).arg("--").args(argv).env(HELPER, what);
    c
}

fn check_url(url: &str) -> i32 {
    let mut c = lockrun();
    c.args(["check", "-q", url]);
    status(c)
}

/// Waits until `check` on the URL says held.
fn wait_url_held(url: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if check_url(url) == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{url} never became held");
}

/// The same crowd as `crowd_counter`, on a lock URL.
fn url_crowd(service: &Service) {
    let dir = tmp();
    let url = service.url("crowd");
    let counter = dir.path().join("counter");
    let what = format!("increment|{}", counter.display());
    let children: Vec<Child> = (0..CROWD)
        .map(|_| spawn(url_run(&[], &url, &what)))
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "a run failed: {}", stderr(&out));
    }
    let n: u64 = fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let overlaps = fs::read_to_string(counter.with_extension("overlaps"))
        .unwrap_or_default()
        .len();
    assert_eq!(
        (n, overlaps),
        (CROWD as u64, 0),
        "{}: counter and overlaps",
        service.name
    );
}

/// `-n` on a held URL: 75, naming the holder (its command's pid, as the
/// record in the service has it); `holder` and `check` while held and after.
fn url_conflict_holder_check(service: &Service) {
    let url = service.url("busy");
    let dir = tmp();
    let release = dir.path().join("release");
    let holder = spawn(url_run(
        &[],
        &url,
        &format!("until|{}|60000", release.display()),
    ));
    wait_url_held(&url);
    let mut c = lockrun();
    c.args(["-n", &url, "--", "cmd", "/c", "exit 0"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("held by") && said.contains("pid "), "{said}");
    let mut c = lockrun();
    c.args(["holder", &url]);
    let shown = output(c);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(text.contains("pid "), "holder said: {text}");
    let mut c = lockrun();
    c.args(["check", "--json", &url]);
    let checked = output(c);
    assert_eq!(checked.status.code(), Some(0), "{}", stderr(&checked));
    let report: serde_json::Value =
        serde_json::from_slice(&checked.stdout).expect("check --json is JSON");
    assert_eq!(report["state"], "held", "{report}");
    fs::write(&release, b"").expect("release the holder");
    let out = holder.wait_with_output().expect("the holder ends");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(check_url(&url), 1, "free once the holder has released");
}

fn url_exit_code(service: &Service) {
    let url = service.url("exit");
    let out = output(url_run(&[], &url, "exit|7"));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let out = output(url_run(&[], &url, "exit|0"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn url_max_time(service: &Service) {
    let dir = tmp();
    let url = service.url("max");
    let witness = dir.path().join("survived");
    let start = Instant::now();
    let out = output(url_run(
        &["--max-time", "1s"],
        &url,
        &format!("grandchild|{}|2500", witness.display()),
    ));
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(3000));
    assert!(!witness.exists(), "the grandchild outlived --max-time");
    assert_eq!(check_url(&url), 1, "released after --max-time");
}

/// The lock is taken away on the server while the command and a
/// grandchild run: lockrun ends the whole job and exits 76 (Linux's
/// status for a lost lock), the grandchild never writes its witness, and
/// the next holder, who got the lock meanwhile, keeps it: the loser's
/// release does not take it.
fn url_kill_on_loss(url: &str, take_away: impl Fn(&str)) {
    let url = url.to_owned();
    let dir = tmp();
    let witness = dir.path().join("survived");
    let first = spawn(url_run(
        &["--ttl", "2s"],
        &url,
        &format!("grandchild|{}|4000", witness.display()),
    ));
    wait_url_held(&url);
    let started = Instant::now();
    take_away(&url);
    let second = spawn(url_run(&["-w", "20"], &url, "sleep|6000"));
    let out = first.wait_with_output().expect("the first lockrun ends");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the loss took {:?} to end the command",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(4500));
    assert!(!witness.exists(), "the grandchild outlived the lost lock");
    assert_eq!(check_url(&url), 0, "the second holder keeps the lock");
    let out = second.wait_with_output().expect("the second lockrun ends");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// lockrun.exe killed while it holds a lock URL: the job's kill-on-close
/// ends the command and its grandchild (no witness written), and the lock
/// ends on the server (a lease at its TTL, a session with its
/// connection), so the next run gets it.
fn url_killed_holder(service: &Service) {
    let dir = tmp();
    let url = service.url("killed");
    let witness = dir.path().join("survived");
    let mut holder = spawn(url_run(
        &["--ttl", "2s"],
        &url,
        &format!("grandchild|{}|3000", witness.display()),
    ));
    wait_url_held(&url);
    // The lock can show held before the command exists (a waiting
    // record): kill lockrun only once the command and its grandchild run.
    let started = dir.path().join("survived.started");
    let waiting = Instant::now();
    while !started.exists() {
        assert!(
            waiting.elapsed() < Duration::from_secs(20),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    holder.kill().expect("kill lockrun");
    let _ = holder.wait();
    let start = Instant::now();
    let out = output(url_run(&["-w", "15"], &url, "exit|0"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the lock of a killed lockrun took {:?} to end",
        start.elapsed()
    );
    // Long past the grandchild's 3 s, even when a loaded Wine starts it
    // late: a survivor writes its witness meanwhile.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(8) {
        assert!(
            !witness.exists(),
            "the grandchild outlived the killed lockrun"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One Redis command over RESP, for taking a lock away server side.
fn redis_command(base: &str, args: &[&str]) -> String {
    use std::io::{Read, Write};
    let addr = base
        .trim_start_matches("redis://")
        .split(['/', '#'])
        .next()
        .unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to Redis");
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request += &format!("${}\r\n{arg}\r\n", arg.len());
    }
    stream.write_all(request.as_bytes()).expect("send to Redis");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut reply = [0u8; 512];
    let n = stream.read(&mut reply).expect("Redis answers");
    String::from_utf8_lossy(&reply[..n]).into_owned()
}

#[test]
fn redis_url_twenty_concurrent_runs_exclude_each_other() {
    if let Some(s) = redis() {
        url_crowd(&s);
    }
}

#[test]
fn redis_url_conflict_is_75_naming_the_holder_and_holder_check_answer() {
    if let Some(s) = redis() {
        url_conflict_holder_check(&s);
    }
}

#[test]
fn redis_url_exit_code_passes_through() {
    if let Some(s) = redis() {
        url_exit_code(&s);
    }
}

#[test]
fn redis_url_max_time_ends_the_command_and_its_grandchild() {
    if let Some(s) = redis() {
        url_max_time(&s);
    }
}

#[test]
fn redis_url_lost_lock_ends_the_whole_job() {
    if let Some(s) = redis() {
        let base = s.base.clone();
        url_kill_on_loss(&s.url("loss"), |url| {
            let reply = redis_command(&base, &["DEL", Service::lock_name(url)]);
            assert_eq!(reply, ":1\r\n", "DEL of the lock key");
        });
    }
}

/// One request to etcd's JSON gateway (`/v3/...`), over plain HTTP.
fn etcd_request(base: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let addr = base
        .trim_start_matches("etcd://")
        .split('/')
        .next()
        .unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to etcd");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send to etcd");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One simple query to PostgreSQL over its wire protocol (trust
/// authentication, as .ci/windows.sh sets up the server); the reply's raw
/// bytes.
fn postgres_query(base: &str, sql: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let rest = base.trim_start_matches("postgres://");
    let (user, rest) = rest.split_once('@').expect("postgres://USER@HOST:PORT/DB");
    let (addr, db) = rest.split_once('/').expect("postgres://USER@HOST:PORT/DB");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to PostgreSQL");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut params = Vec::new();
    for (k, v) in [("user", user), ("database", db)] {
        params.extend_from_slice(k.as_bytes());
        params.push(0);
        params.extend_from_slice(v.as_bytes());
        params.push(0);
    }
    params.push(0);
    let mut startup = ((params.len() + 8) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    startup.extend_from_slice(&params);
    stream.write_all(&startup).expect("startup");
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // Until ReadyForQuery ('Z', length 5).
    while !reply.windows(2).any(|w| w == [b'Z', 0]) {
        let n = stream.read(&mut buf).expect("PostgreSQL answers");
        assert!(n > 0, "PostgreSQL closed the connection: {reply:?}");
        reply.extend_from_slice(&buf[..n]);
    }
    let mut query = vec![b'Q'];
    query.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
    query.extend_from_slice(sql.as_bytes());
    query.push(0);
    stream.write_all(&query).expect("query");
    let mut answer = Vec::new();
    loop {
        let n = stream.read(&mut buf).expect("PostgreSQL answers the query");
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(6).any(|w| w == [b'Z', 0, 0, 0, 5, b'I']) {
            break;
        }
    }
    answer
}

#[test]
fn etcd_url_twenty_concurrent_runs_exclude_each_other() {
    if let Some(s) = etcd() {
        url_crowd(&s);
    }
}

#[test]
fn etcd_url_conflict_is_75_naming_the_holder_and_holder_check_answer() {
    if let Some(s) = etcd() {
        url_conflict_holder_check(&s);
    }
}

#[test]
fn etcd_url_exit_code_passes_through() {
    if let Some(s) = etcd() {
        url_exit_code(&s);
    }
}

#[test]
fn etcd_url_max_time_ends_the_command_and_its_grandchild() {
    if let Some(s) = etcd() {
        url_max_time(&s);
    }
}

#[test]
fn etcd_url_lost_lock_ends_the_whole_job() {
    if let Some(s) = etcd() {
        let base = s.base.clone();
        url_kill_on_loss(&s.url("loss"), |url| {
            // The lock's keys are NAME/LEASE: every key under NAME/.
            let name = Service::lock_name(url);
            let body = format!(
                "{{\"key\":\"{}\",\"range_end\":\"{}\"}}",
                base64(format!("{name}/").as_bytes()),
                base64(format!("{name}0").as_bytes())
            );
            let reply = etcd_request(&base, "/v3/kv/deleterange", &body);
            assert!(reply.contains("\"deleted\":\"1\""), "deleterange: {reply}");
        });
    }
}

#[test]
fn postgres_url_twenty_concurrent_runs_exclude_each_other() {
    if let Some(s) = postgres() {
        url_crowd(&s);
    }
}

#[test]
fn postgres_url_conflict_is_75_naming_the_holder_and_holder_check_answer() {
    if let Some(s) = postgres() {
        url_conflict_holder_check(&s);
    }
}

#[test]
fn postgres_url_exit_code_passes_through() {
    if let Some(s) = postgres() {
        url_exit_code(&s);
    }
}

#[test]
fn postgres_url_max_time_ends_the_command_and_its_grandchild() {
    if let Some(s) = postgres() {
        url_max_time(&s);
    }
}

#[test]
fn postgres_url_lost_lock_ends_the_whole_job() {
    if let Some(s) = postgres() {
        let base = s.base.clone();
        // Its own application_name, so that only this test's holder is
        // ended (the other tests' sessions run beside it).
        let app = format!("win-loss-{}", std::process::id());
        let url = format!(
            "{base}?application_name={app}#win-{}-loss",
            std::process::id()
        );
        url_kill_on_loss(&url, |_url| {
            // The holder's session, ended by the server, as a failover or
            // an administrator would.
            let answer = postgres_query(
                &base,
                &format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks JOIN pg_stat_activity USING (pid) WHERE locktype = 'advisory' AND granted AND application_name = '{app}'"
                ),
            );
            assert!(
                answer.windows(2).any(|w| w == [1, b't']),
                "pg_terminate_backend: {}",
                String::from_utf8_lossy(&answer)
            );
        });
    }
}

#[test]
fn redis_url_killed_lockrun_ends_its_command_and_frees_the_lock() {
    if let Some(s) = redis() {
        url_killed_holder(&s);
    }
}

#[test]
fn etcd_url_killed_lockrun_ends_its_command_and_frees_the_lock() {
    if let Some(s) = etcd() {
        url_killed_holder(&s);
    }
}

#[test]
fn postgres_url_killed_lockrun_ends_its_command_and_frees_the_lock() {
    if let Some(s) = postgres() {
        url_killed_holder(&s);
    }
}

// ---------------------------------------------------------------------
// TLS and authentication, `holder`/`check` with a URL's options, and
// `--metrics-file`, from Windows (issue 27's rest). .ci/windows.sh starts
// a Redis that speaks only TLS and wants a password, an etcd that speaks
// only https with authentication on, and a PostgreSQL role with a
// password; the CA comes as a Windows path.

/// An environment variable the tests need beside a service's URL, with
/// the same SKIPPED rule as `Service::from_env`.
fn needed(var: &str) -> Option<String> {
    Service::from_env("TLS and authentication", var).map(|s| s.base)
}

/// `lockrun ARGS...` with `env`, its status and stdout.
fn lockrun_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = lockrun();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = output(c);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    )
}

/// What a refused look-up lacks, and the options and environment it has.
type Without<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);

/// A lock URL that needs `opts` (TLS files, a user) and `env` (a
/// password): a run with them holds it; `holder` and `check` with the same
/// options see it held while it runs (with its fencing token: `check
/// --token`) and free after. Each of `without` (what it lacks, its
/// options, its environment) is refused: the options and the password
/// are what made the answers possible.
fn url_with_access(
    url: &str,
    has_token: bool,
    opts: &[&str],
    env: &[(&str, &str)],
    without: &[Without],
) {
    let dir = tmp();
    let release = dir.path().join("release");
    let mut run = url_run(opts, url, &format!("until|{}|60000", release.display()));
    for (k, v) in env {
        run.env(k, v);
    }
    let holder = spawn(run);
    let with = |sub: &[&str]| {
        let mut args: Vec<&str> = sub.to_vec();
        args.extend_from_slice(opts);
        args.push(url);
        lockrun_env(&args, env)
    };
    let start = Instant::now();
    while with(&["check", "-q"]).0 != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{url} never became held: check said {:?}",
            with(&["check"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, shown, said) = with(&["holder"]);
    assert_eq!(code, 0, "holder: {said}");
    assert!(shown.contains("pid "), "holder said: {shown}");
    let (code, json, said) = with(&["check", "--json"]);
    assert_eq!(code, 0, "check --json: {said}");
    let report: serde_json::Value = serde_json::from_str(&json).expect("check --json is JSON");
    assert_eq!(report["state"], "held", "{report}");
    if has_token {
        let token = report["record"]["fencing_token"]
            .as_i64()
            .unwrap_or_else(|| panic!("no fencing token in {report}"));
        let (ours, other) = (token.to_string(), (token + 1).to_string());
        assert_eq!(
            with(&["check", "-q", "--token", &ours]).0,
            0,
            "its own token"
        );
        assert_eq!(
            with(&["check", "-q", "--token", &other]).0,
            1,
            "another token"
        );
    }
    for (lacking, their_opts, their_env) in without {
        let mut args = vec!["check", "-q"];
        args.extend_from_slice(their_opts);
        args.push(url);
        let (code, _, said) = lockrun_env(&args, their_env);
        assert_ne!(code, 0, "check without {lacking} saw the lock: {said}");
        assert_ne!(code, 1, "check without {lacking} said free: {said}");
    }
    fs::write(&release, b"").expect("release the holder");
    let out = holder.wait_with_output().expect("the holder ends");
    assert!(out.status.success(), "the run: {}", stderr(&out));
    assert_eq!(with(&["check", "-q"]).0, 1, "free after the run");
    let (code, shown, said) = with(&["holder"]);
    assert_eq!(code, 0, "holder after: {said}");
    assert!(shown.contains("free"), "holder after said: {shown}");
}

#[test]
fn rediss_url_with_cacert_and_password_holder_and_check() {
    let (Some(s), Some(ca), Some(pw)) = (
        Service::from_env("Redis over TLS", "LOCKRUN_WIN_REDISS_URL"),
        needed("LOCKRUN_WIN_CACERT"),
        needed("LOCKRUN_WIN_REDIS_PASSWORD"),
    ) else {
        return;
    };
    let env = [("REDISCLI_AUTH", pw.as_str())];
    url_with_access(
        &s.url("tls"),
        true,
        &["--cacert", &ca],
        &env,
        &[
            ("--cacert", vec![], env.to_vec()),
            ("the password", vec!["--cacert", &ca], vec![]),
        ],
    );
}

#[test]
fn etcd_https_url_with_cacert_user_and_password_file_holder_and_check() {
    let (Some(s), Some(ca), Some(user), Some(pw)) = (
        Service::from_env("etcd over https", "LOCKRUN_WIN_ETCDS_URL"),
        needed("LOCKRUN_WIN_CACERT"),
        needed("LOCKRUN_WIN_ETCD_USER"),
        needed("LOCKRUN_WIN_ETCD_PASSWORD"),
    ) else {
        return;
    };
    let dir = tmp();
    let pw_file = dir.path().join("etcd-password");
    fs::write(&pw_file, format!("{pw}\n")).expect("password file");
    let pw_file = pw_file.display().to_string();
    url_with_access(
        &s.url("auth"),
        true,
        &[
            "--cacert",
            &ca,
            "--user",
            &user,
            "--password-file",
            &pw_file,
        ],
        &[],
        &[
            (
                "--cacert",
                vec!["--user", &user, "--password-file", &pw_file],
                vec![],
            ),
            ("--user", vec!["--cacert", &ca], vec![]),
        ],
    );
}

#[test]
fn postgres_url_with_a_password_holder_and_check() {
    let (Some(s), Some(pw)) = (
        Service::from_env("PostgreSQL with a password", "LOCKRUN_WIN_POSTGRES_PW_URL"),
        needed("LOCKRUN_WIN_POSTGRES_PASSWORD"),
    ) else {
        return;
    };
    let env = [("PGPASSWORD", pw.as_str())];
    url_with_access(
        &s.url("pw"),
        false,
        &[],
        &env,
        &[("the password", vec![], vec![("PGPASSWORD", "wrong")])],
    );
}

/// `holder`/`check` options no lock given can take are a usage error, as
/// on Linux; `--token` on a lock file too.
#[test]
fn url_options_of_holder_and_check_need_their_url() {
    let dir = tmp();
    let lock = dir.path().join("plain.lock");
    let lock = lock.display().to_string();
    let (code, _, said) = lockrun_env(&["holder", "--cacert", "ca.pem", &lock], &[]);
    assert_eq!(code, 64, "{said}");
    let (code, _, said) = lockrun_env(&["check", "--token", "3", &lock], &[]);
    assert_eq!(code, 64, "{said}");
    assert!(said.contains("--token"), "{said}");
}

/// The metrics file's value of `name{...lock...,outcome}` (or a gauge's,
/// with `outcome` empty) for the lock labelled `lock`.
fn metric(file: &Path, name: &str, outcome: &str) -> Option<f64> {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| outcome.is_empty() || l.contains(&format!("outcome=\"{outcome}\"")))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn metrics_file_counts_the_file_runs_outcomes() {
    let dir = tmp();
    let lock = dir.path().join("m.lock");
    let prom = dir.path().join("lockrun.prom");
    let prom_arg = prom.display().to_string();
    let m = ["--metrics-file", prom_arg.as_str()];
    assert_eq!(status(run_with(&m, &lock, "exit|0")), 0);
    assert_eq!(status(run_with(&m, &lock, "exit|3")), 3);
    assert_eq!(metric(&prom, "lockrun_runs_total", "ran"), Some(2.0));
    assert_eq!(metric(&prom, "lockrun_last_exit_status", ""), Some(3.0));
    let holder = spawn(run_with(&m, &lock, "sleep|3000"));
    wait_held(&lock);
    let mut busy = m.to_vec();
    busy.push("-n");
    assert_eq!(status(run_with(&busy, &lock, "exit|0")), 75);
    let mut timed = m.to_vec();
    timed.extend(["-w", "0.3"]);
    assert_eq!(status(run_with(&timed, &lock, "exit|0")), 75);
    assert_eq!(metric(&prom, "lockrun_runs_total", "busy"), Some(1.0));
    assert_eq!(metric(&prom, "lockrun_runs_total", "timeout"), Some(1.0));
    assert_eq!(metric(&prom, "lockrun_last_exit_status", ""), Some(75.0));
    assert_eq!(
        metric(&prom, "lockrun_not_acquired_in_a_row", ""),
        Some(2.0)
    );
    let out = holder.wait_with_output().expect("the holder ends");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(metric(&prom, "lockrun_runs_total", "ran"), Some(3.0));
    let mut limited = m.to_vec();
    limited.extend(["--max-time", "0.5s"]);
    assert_eq!(status(run_with(&limited, &lock, "sleep|5000")), 124);
    assert_eq!(metric(&prom, "lockrun_runs_total", "max_time"), Some(1.0));
    assert_eq!(metric(&prom, "lockrun_last_exit_status", ""), Some(124.0));
    assert!(
        metric(&prom, "lockrun_last_duration_seconds", "").is_some_and(|d| d > 0.3),
        "{}",
        fs::read_to_string(&prom).unwrap_or_default()
    );
    // The lock label is the lock file's absolute path.
    let text = fs::read_to_string(&prom).unwrap_or_default();
    assert!(text.contains("lock=\""), "{text}");
    // --log stays refused: there is no syslog or journal socket here.
    let out = output(run_with(&["--log", "syslog"], &lock, "exit|0"));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}

#[test]
fn metrics_file_counts_a_lock_urls_outcomes() {
    let Some(s) = redis() else {
        return;
    };
    let dir = tmp();
    let prom = dir.path().join("url.prom");
    let prom_arg = prom.display().to_string();
    let url = s.url("metrics");
    let m = ["--metrics-file", prom_arg.as_str()];
    assert_eq!(status(url_run(&m, &url, "exit|0")), 0);
    assert_eq!(metric(&prom, "lockrun_runs_total", "ran"), Some(1.0));
    let mut limited = m.to_vec();
    limited.extend(["--max-time", "1s"]);
    assert_eq!(status(url_run(&limited, &url, "sleep|5000")), 124);
    assert_eq!(metric(&prom, "lockrun_runs_total", "max_time"), Some(1.0));
    assert_eq!(metric(&prom, "lockrun_last_exit_status", ""), Some(124.0));
    // Held by one run, -n by another: busy; then the lock taken away on
    // the server: lost, 76.
    let mut leased = m.to_vec();
    leased.extend(["--ttl", "2s"]);
    let first = spawn(url_run(&leased, &url, "sleep|15000"));
    wait_url_held(&url);
    let mut busy = m.to_vec();
    busy.push("-n");
    assert_eq!(status(url_run(&busy, &url, "exit|0")), 75);
    assert_eq!(metric(&prom, "lockrun_runs_total", "busy"), Some(1.0));
    let reply = redis_command(&s.base, &["DEL", Service::lock_name(&url)]);
    assert_eq!(reply, ":1\r\n", "DEL of the lock key");
    let out = first.wait_with_output().expect("the first run ends");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert_eq!(metric(&prom, "lockrun_runs_total", "lost"), Some(1.0));
    assert_eq!(metric(&prom, "lockrun_last_exit_status", ""), Some(76.0));
    let text = fs::read_to_string(&prom).unwrap_or_default();
    assert!(text.contains(&format!("lock=\"{url}\"")), "{text}");
}

/// `--slots 2` on a lock URL: never more than 2 at once, each with its own
/// LOCKRUN_SLOT.
#[test]
fn redis_url_slots_let_at_most_two_run() {
    let Some(s) = redis() else {
        return;
    };
    let dir = tmp();
    let url = s.url("pool");
    let crowd = dir.path().join("crowd");
    fs::create_dir(&crowd).expect("dir");
    // Long enough that Wine's slow process starts still fill every slot
    // there is: with a third slot, three would be seen.
    let what = format!("crowd|{}|1500", crowd.display());
    let children: Vec<Child> = (0..6)
        .map(|_| spawn(url_run(&["--slots", "2"], &url, &what)))
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "a run failed: {}", stderr(&out));
    }
    let most = max_seen(&crowd);
    // Two at once, never three: six runs of 1.5 s in two slots overlap.
    assert_eq!(most, 2, "at most 2 at once, and 2 seen");
    let slots_seen = fs::read_dir(&crowd)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("seen-"))
        .count();
    assert_eq!(slots_seen, 6, "every run ran, in a slot");
    let dups: Vec<_> = fs::read_dir(&crowd)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("dup-"))
        .collect();
    assert!(dups.is_empty(), "two holders had one LOCKRUN_SLOT");
}

/// `-c` on a lock URL: the string runs through cmd.exe, its exit code is
/// lockrun's.
#[test]
fn redis_url_dash_c_runs_through_cmd() {
    let Some(s) = redis() else {
        return;
    };
    let dir = tmp();
    let url = s.url("shell");
    let marker = dir.path().join("ran.txt");
    let script = format!("echo ran> \"{}\" && exit 7", marker.display());
    let mut c = lockrun();
    c.args([url.as_str(), "-c", script.as_str()]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let text = fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(text.trim(), "ran", "the string ran through cmd.exe");
}

/// `--log` (syslog's /dev/log, the journal) is refused by name (64), as
/// Unix-only, not taken for a path or an unknown option.
#[test]
fn log_is_refused_by_name_as_unix_only() {
    let dir = tmp();
    let lock = dir.path().join("n.lock");
    let out = output(run_with(&["--log", "journal"], &lock, "exit|0"));
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{said}");
    assert!(said.contains("--log"), "{said}");
    assert!(!said.contains("unknown option"), "{said}");
    assert!(said.contains("Unix-only"), "{said}");
}

/// `--skip-if-succeeded-within` on a lock URL: after a success, the next
/// run within the period does not run its command, exits 0, says so and
/// is counted as skipped_recent; after a failure the command runs. With
/// `-s` it is a usage error, as on Linux.
#[test]
fn redis_url_skip_if_succeeded_within() {
    let Some(s) = redis() else {
        return;
    };
    let dir = tmp();
    let url = s.url("skip");
    let marker = dir.path().join("ran");
    let prom = dir.path().join("skip.prom");
    let prom_arg = prom.display().to_string();
    let what = format!("touch|{}", marker.display());
    let skip = [
        "--skip-if-succeeded-within",
        "1h",
        "--metrics-file",
        prom_arg.as_str(),
    ];
    let out = output(url_run(&skip, &url, &what));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "the first run ran");
    fs::remove_file(&marker).expect("remove the marker");
    let out = output(url_run(&skip, &url, &what));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !marker.exists(),
        "the run within the period ran its command"
    );
    assert!(
        stderr(&out).contains("not running the command"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        metric(&prom, "lockrun_runs_total", "skipped_recent"),
        Some(1.0)
    );
    assert_eq!(status(url_run(&[], &url, "exit|3")), 3);
    let out = output(url_run(&skip, &url, &what));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "after a failure the command runs");
    let mut shared = skip.to_vec();
    shared.push("-s");
    assert_eq!(status(url_run(&shared, &url, "exit|0")), 64);
}

/// `--skip-if-succeeded-within` on a lock file (the one run flow decides it
/// from the lock file's last record, as on Linux): the skip options with a
/// metrics file, and the command that shows whether it ran.
fn skip_run(lock: &Path, within: &str, prom: &Path, marker: &Path) -> Output {
    let prom = prom.display().to_string();
    output(run_with(
        &[
            "--skip-if-succeeded-within",
            within,
            "--metrics-file",
            prom.as_str(),
        ],
        lock,
        &format!("touch|{}", marker.display()),
    ))
}

/// After a success, a run within the period does not run its command:
/// status 0, a message saying why, counted as skipped_recent, and the
/// record left as the last run left it, byte for byte.
#[test]
fn skip_if_succeeded_within_skips_after_a_success() {
    let dir = tmp();
    let lock = dir.path().join("skip.lock");
    let (prom, marker) = (dir.path().join("skip.prom"), dir.path().join("ran"));
    let out = skip_run(&lock, "1h", &prom, &marker);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "the first run ran: there was no last run");
    fs::remove_file(&marker).expect("remove the marker");
    let before = fs::read(&lock).expect("the record");
    let out = skip_run(&lock, "1h", &prom, &marker);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !marker.exists(),
        "the run within the period ran its command"
    );
    let said = stderr(&out);
    assert!(said.contains("not running the command"), "{said}");
    assert!(said.contains("--skip-if-succeeded-within 1h"), "{said}");
    assert_eq!(fs::read(&lock).expect("the record"), before, "a skip wrote");
    assert_eq!(
        metric(&prom, "lockrun_runs_total", "skipped_recent"),
        Some(1.0)
    );
}

/// After a failure the command runs: only a success counts.
#[test]
fn skip_if_succeeded_within_runs_after_a_failure() {
    let dir = tmp();
    let lock = dir.path().join("failed.lock");
    let (prom, marker) = (dir.path().join("skip.prom"), dir.path().join("ran"));
    assert_eq!(status(run_with(&[], &lock, "exit|3")), 3);
    let out = skip_run(&lock, "1h", &prom, &marker);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "after a failure the command runs");
    assert_eq!(
        metric(&prom, "lockrun_runs_total", "skipped_recent"),
        Some(0.0)
    );
}

/// A success longer ago than the period does not skip: the same last
/// record skips a run with a period of an hour and not one of 1 ms (a
/// process start alone takes longer), so no sleep decides the outcome.
#[test]
fn skip_if_succeeded_within_runs_once_the_period_has_passed() {
    let dir = tmp();
    let lock = dir.path().join("passed.lock");
    let (prom, marker) = (dir.path().join("skip.prom"), dir.path().join("ran"));
    assert_eq!(status(run_with(&[], &lock, "exit|0")), 0);
    let out = skip_run(&lock, "1h", &prom, &marker);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!marker.exists(), "within the hour: skipped");
    let out = skip_run(&lock, "1ms", &prom, &marker);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "the period had passed: the command runs");
}

/// What cannot decide from one last run is a usage error, as on Linux:
/// `-s`, `--no-record`, `--slots`, a period of 0.
#[test]
fn skip_if_succeeded_within_refusals_on_a_lock_file() {
    let dir = tmp();
    let lock = dir.path().join("refused.lock");
    for extra in [&["-s"][..], &["--no-record"], &["--slots", "2"]] {
        let mut args = vec!["--skip-if-succeeded-within", "1h"];
        args.extend_from_slice(extra);
        let out = output(run_with(&args, &lock, "exit|0"));
        assert_eq!(out.status.code(), Some(64), "{extra:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--skip-if-succeeded-within cannot be used with"),
            "{extra:?}: {}",
            stderr(&out)
        );
    }
    let out = output(run_with(
        &["--skip-if-succeeded-within", "0"],
        &lock,
        "exit|0",
    ));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(!lock.exists(), "a refused run touched the lock file");
}

/// `--also`: the set is held all or none. A run whose other file is busy
/// gives 75 naming it and holds none of the set (its LOCKFILE is free at
/// once); a run that gets the set holds every file while its command
/// runs, and each file's record names the rest (`also`) and is completed
/// at the release.
#[test]
fn also_holds_the_set_all_or_none() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.lock"), dir.path().join("b.lock"));
    let b_arg = b.display().to_string();
    let mut holder = spawn(run_with(&[], &b, "sleep|3000"));
    wait_held(&b);
    let out = output(run_with(&["-n", "--also", &b_arg], &a, "exit|0"));
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(75), "{said}");
    assert!(said.contains("b.lock"), "the busy file is named: {said}");
    assert!(said.contains("holds none of them"), "{said}");
    assert_eq!(
        status(run_with(&["-n"], &a, "exit|0")),
        0,
        "a set that was not taken left its LOCKFILE held"
    );
    let _ = holder.kill();
    let _ = holder.wait();

    let mut set = spawn(run_with(&["--also", &b_arg], &a, "sleep|3000"));
    wait_held(&a);
    wait_held(&b);
    assert_eq!(
        status(run_with(&["-n"], &b, "exit|0")),
        75,
        "b is the set's"
    );
    assert_eq!(
        status(run_with(&["-n"], &a, "exit|0")),
        75,
        "a is the set's"
    );
    assert!(set.wait().expect("wait").success());
    for (file, other) in [(&a, &b), (&b, &a)] {
        let rec: serde_json::Value =
            serde_json::from_str(fs::read_to_string(file).expect("record").trim()).expect("json");
        let also = rec["also"].as_array().expect("also in the record");
        assert_eq!(also.len(), 1, "{rec}");
        let named = also[0].as_str().unwrap_or_default().to_lowercase();
        let other_name = other
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_lowercase();
        assert!(named.ends_with(&other_name), "{rec}");
        assert_eq!(rec["exit"]["code"], 0, "{rec}");
        assert!(rec["released_at"].is_string(), "{rec}");
    }
    let out = output(run_with(&["--also", &b_arg, "--slots", "2"], &a, "exit|0"));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}

/// Issue 27 item 1: a command line is quoted by the MSVC rules for
/// CreateProcessW, so every argument reaches the command as it was given:
/// spaces, quotes, backslashes before a quote and at the end, a tab, and
/// letters beyond ASCII (UTF-16 on Windows). None starts with `-` or is
/// empty: the helper is a test binary, whose harness reads its arguments
/// as test names (`--exact` keeps them from matching any).
#[test]
fn arguments_reach_the_command_intact() {
    let dir = tmp();
    let lock = dir.path().join("args.lock");
    let seen = dir.path().join("seen.json");
    let given = [
        "two words",
        "a\"quote",
        "back\\slash",
        "ends with a backslash\\",
        "\\\\\"",
        "tab\there",
        "ünïcödé ✓",
        "%PATH%",
        "a&b|c<d>e^f",
    ];
    let mut c = run_with(&[], &lock, &format!("args|{}", seen.display()));
    c.args(given);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got: Vec<String> =
        serde_json::from_str(&fs::read_to_string(&seen).expect("the helper wrote its arguments"))
            .expect("JSON");
    assert_eq!(got, given, "the arguments the command received");
    // The record keeps them too, as given.
    let rec: serde_json::Value =
        serde_json::from_str(fs::read_to_string(&lock).expect("record").trim()).expect("json");
    let command: Vec<String> = rec["command"]
        .as_array()
        .expect("the record's command")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert!(command.ends_with(&given.map(str::to_owned)), "{rec}");
}

/// Issue 27 item 1: `.cmd` and `.bat` commands run (through cmd.exe, as
/// std starts them), with their arguments, and their exit code is
/// lockrun's.
#[test]
fn cmd_and_bat_scripts_run_and_their_exit_code_passes_through() {
    let dir = tmp();
    let lock = dir.path().join("script.lock");
    for ext in ["cmd", "bat"] {
        let script = dir.path().join(format!("job.{ext}"));
        let marker = dir.path().join(format!("ran-{ext}.txt"));
        fs::write(
            &script,
            format!(
                "@echo off\r\necho %~1> \"{}\"\r\nexit /b 7\r\n",
                marker.display()
            ),
        )
        .expect("write the script");
        let mut c = lockrun();
        c.arg(&lock).arg("--").arg(&script).arg("first argument");
        let out = output(c);
        assert_eq!(out.status.code(), Some(7), "{ext}: {}", stderr(&out));
        let wrote = fs::read_to_string(&marker).unwrap_or_default();
        assert_eq!(wrote.trim(), "first argument", "{ext}: what the script saw");
        let rec: serde_json::Value =
            serde_json::from_str(fs::read_to_string(&lock).expect("record").trim()).expect("json");
        assert_eq!(rec["exit"]["code"], 7, "{ext}: {rec}");
    }
}

// ---------------------------------------------------------------------
// PostgreSQL over TLS, client certificates, Redis Sentinel and an etcd
// cluster of three members, from Windows (issue 27: what the README said
// was not tested here). .ci/windows.sh starts a PostgreSQL that takes
// only TLS, a Redis and an etcd that want a client certificate, a
// Sentinel watching a primary of its own, and a 3-member etcd cluster;
// the CA, a second CA that signed nothing here, and the client
// certificate and key come as Windows paths.

/// `lockrun -n ARGS... URL -- cmd /c exit 0` with `env` is refused: it
/// exits `code` and says `why`; a lock it could not take (69) says too
/// that the command was not run (a usage error, 64, is refused before
/// any lock is tried).
fn refused_run(args: &[&str], url: &str, env: &[(&str, &str)], code: i32, why: &str) {
    let mut all = vec!["-n"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[url, "--", "cmd", "/c", "exit 0"]);
    let (got, _, said) = lockrun_env(&all, env);
    assert_eq!(got, code, "{args:?} {url}: {said}");
    assert!(said.contains(why), "{args:?} {url}: no '{why}' in: {said}");
    if code == 69 {
        assert!(
            said.contains("the command was not run"),
            "{args:?} {url}: {said}"
        );
    }
    eprintln!("refused as expected ({code}): {}", said.trim_end());
}

#[test]
fn postgres_tls_url_verify_full_with_its_root_certificate_holder_and_check() {
    let (Some(s), Some(ca), Some(other)) = (
        Service::from_env("PostgreSQL over TLS", "LOCKRUN_WIN_POSTGRES_TLS_URL"),
        needed("LOCKRUN_WIN_CACERT"),
        needed("LOCKRUN_WIN_OTHER_CACERT"),
    ) else {
        return;
    };
    let name = format!("win-{}-pgtls", std::process::id());
    let url = |host: &str, query: &str| {
        format!("{}?{query}#{name}", s.base.replacen("127.0.0.1", host, 1))
    };
    // The server takes only TLS (hostnossl rejects), so a lock held
    // through it was taken over TLS, the server's certificate checked
    // against the CA and its name (127.0.0.1).
    let verified = url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    url_with_access(&verified, false, &[], &[], &[]);
    // The root certificate from PGSSLROOTCERT, as libpq takes it.
    let from_env = url("127.0.0.1", "sslmode=verify-full");
    let (code, _, said) = lockrun_env(
        &[&from_env, "--", "cmd", "/c", "exit 0"],
        &[("PGSSLROOTCERT", ca.as_str())],
    );
    assert_eq!(code, 0, "PGSSLROOTCERT: {said}");
    // Refused, 69 unless said otherwise, each saying why: no root
    // certificate at all (no default one either: HOME is empty), a CA
    // that did not sign the server's certificate, a name the certificate
    // does not carry, and no TLS at all.
    let home = tmp();
    let home = home.path().display().to_string();
    refused_run(
        &[],
        &from_env,
        &[("HOME", home.as_str())],
        64,
        "needs a root certificate",
    );
    refused_run(
        &[],
        &url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={other}"),
        ),
        &[],
        69,
        "UnknownIssuer",
    );
    refused_run(
        &[],
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        &[],
        69,
        "not valid for name",
    );
    refused_run(
        &[],
        &url("127.0.0.1", "sslmode=disable"),
        &[],
        69,
        "no encryption",
    );
}

/// The CA, the client certificate and its key, as options.
fn client_certificate() -> Option<(String, String, String)> {
    Some((
        needed("LOCKRUN_WIN_CACERT")?,
        needed("LOCKRUN_WIN_CLIENT_CERT")?,
        needed("LOCKRUN_WIN_CLIENT_KEY")?,
    ))
}

/// A server that wants a client certificate: the run, `holder` and
/// `check` with `--cacert --cert --key`; each refused without the
/// certificate, and the run refused with `refusal` in its message.
fn client_certificate_case(what: &'static str, var: &str, refusal: &str) {
    let (Some(s), Some((ca, cert, key))) = (Service::from_env(what, var), client_certificate())
    else {
        return;
    };
    let url = s.url("mtls");
    url_with_access(
        &url,
        true,
        &["--cacert", &ca, "--cert", &cert, "--key", &key],
        &[],
        &[("--cert/--key", vec!["--cacert", &ca], vec![])],
    );
    refused_run(&["--cacert", &ca], &url, &[], 69, refusal);
}

#[test]
fn rediss_url_with_a_client_certificate_holder_and_check() {
    // Redis's TLS alert, as rustls names it.
    client_certificate_case(
        "Redis wanting a client certificate",
        "LOCKRUN_WIN_REDIS_MTLS_URL",
        "CertificateRequired",
    );
}

#[test]
fn etcd_https_url_with_a_client_certificate_holder_and_check() {
    client_certificate_case(
        "etcd wanting a client certificate",
        "LOCKRUN_WIN_ETCD_MTLS_URL",
        "none was given (--cert/--key)",
    );
}

#[test]
fn redis_sentinel_url_excludes_and_holder_check_answer() {
    let Some(s) = Service::from_env("Redis through Sentinel", "LOCKRUN_WIN_SENTINEL_URL") else {
        return;
    };
    url_conflict_holder_check(&s);
    // The lock is on the primary the Sentinel names.
    let (sentinel, master) = s
        .base
        .trim_start_matches("redis+sentinel://")
        .split_once('/')
        .expect("redis+sentinel://HOST:PORT/MASTER");
    let sentinel = format!("redis://{sentinel}");
    let named = redis_command(&sentinel, &["SENTINEL", "get-master-addr-by-name", master]);
    let lines: Vec<&str> = named.split("\r\n").collect();
    assert!(lines.len() >= 5, "the Sentinel said {named:?}");
    let primary = format!("redis://{}:{}", lines[2], lines[4]);
    let url = s.url("primary");
    let holder = spawn(url_run(&[], &url, "sleep|3000"));
    wait_url_held(&url);
    let on_primary = redis_command(&primary, &["EXISTS", Service::lock_name(&url)]);
    assert_eq!(on_primary, ":1\r\n", "the lock key on {primary}");
    let out = holder.wait_with_output().expect("the holder ends");
    assert!(out.status.success(), "{}", stderr(&out));
    // A primary the Sentinel does not know: 69, saying so.
    refused_run(
        &[],
        &format!(
            "redis+sentinel://{}/nosuch#x",
            &sentinel["redis://".len()..]
        ),
        &[],
        69,
        "does not know a primary named nosuch",
    );
}

/// One JSON request to etcd's gateway at `addr` (HTTP/1.0: the answer
/// comes whole, not chunked, and the connection closes after it).
fn etcd_json(addr: &str, path: &str, body: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to etcd");
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send to etcd");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    let json = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{path}: {e}: {reply}"))
}

#[test]
fn etcd_cluster_url_excludes_and_survives_the_loss_of_its_member() {
    let Some(s) = Service::from_env("etcd cluster", "LOCKRUN_WIN_ETCD_CLUSTER_URL") else {
        return;
    };
    let members: Vec<String> = s
        .base
        .trim_start_matches("etcd://")
        .split(',')
        .map(str::to_owned)
        .collect();
    assert_eq!(members.len(), 3, "{}", s.base);
    url_conflict_holder_check(&s);
    // lockrun talks to the first member named; that member leaves the
    // cluster (member remove: it shuts itself down) while the command
    // runs. The holder renews through the other two for more than two
    // TTLs: the command is not stopped, and the lock stays held.
    let url = s.url("failover");
    let holder = spawn(url_run(&["--ttl", "3s"], &url, "sleep|9000"));
    wait_url_held(&url);
    let listed = etcd_json(&members[1], "/v3/cluster/member/list", "{}");
    let gone = listed["members"]
        .as_array()
        .and_then(|all| {
            all.iter().find(|m| {
                m["clientURLs"]
                    .as_array()
                    .is_some_and(|u| u.iter().any(|u| u == &format!("http://{}", members[0])))
            })
        })
        .unwrap_or_else(|| panic!("no member serves {}: {listed}", members[0]));
    let id = gone["ID"].as_str().expect("a member ID").to_owned();
    let removed = etcd_json(
        &members[1],
        "/v3/cluster/member/remove",
        &format!("{{\"ID\":\"{id}\"}}"),
    );
    assert!(removed.get("members").is_some(), "member remove: {removed}");
    // The removed member no longer answers: a URL naming only it cannot
    // be taken.
    let alone = format!("etcd://{}/{}", members[0], Service::lock_name(&url));
    let start = Instant::now();
    loop {
        let code = check_url(&alone);
        if code != 0 && code != 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} still answers after its removal",
            members[0]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut c = lockrun();
    c.args(["-n", &url, "--", "cmd", "/c", "exit 0"]);
    let out = output(c);
    assert_eq!(
        out.status.code(),
        Some(75),
        "held through the others: {}",
        stderr(&out)
    );
    let out = holder.wait_with_output().expect("the holder ends");
    assert!(
        out.status.success(),
        "the holder lost its member: {}",
        stderr(&out)
    );
    // A run with the dead member named first still takes the lock.
    assert_eq!(check_url(&url), 1, "free after the run");
    let out = output(url_run(&[], &url, "exit|0"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
