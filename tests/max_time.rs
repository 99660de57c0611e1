//! `--max-time`: nothing that holds the lock outlives the limit, and
//! nothing else is touched.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;

fn alive(pid: i32) -> bool {
    !process_gone(pid) && process_state(pid) != Some('Z')
}

/// A background child that inherited the lock is stopped with the
/// command, so the lock is free when lockrun exits 124: the case
/// `timeout 1h flock L job` gets wrong.
#[test]
fn inheritors_are_stopped_and_the_lock_is_free() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut run, words) = Background::lockrun_holding(
        &["--max-time", "300ms", "--kill-grace", "10s"],
        &lock,
        "sleep 60 & echo ready $!; wait",
    );
    let grandchild: i32 = words[0].parse().unwrap();
    let status = run.wait_exit(BOUND);
    assert_eq!(status.code(), Some(124));
    wait_for("the grandchild to be gone", || !alive(grandchild));
    let record = record_json(&lock);
    assert_eq!(record["max_time"], "300ms", "{record}");
    assert_eq!(record["exit"]["max_time"], "300ms");
    assert_eq!(record["exit"]["signal"], 15);
    try_lock_now(&lock).success();
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = lockrun()
        .args(["--max-time", "200ms", "--kill-grace", "200ms"])
        .arg(&lock)
        .args(["sh", "-c", "trap '' TERM; exec sleep 60"])
        .assert()
        .code(124);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("--max-time 200ms"), "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    let record = record_json(&lock);
    assert_eq!(record["exit"]["signal"], 9);
    try_lock_now(&lock).success();
}

#[test]
fn an_unreached_limit_changes_nothing() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .args(["--max-time", "1h"])
        .arg(&lock)
        .args(["sh", "-c", "exit 3"])
        .assert()
        .code(3)
        .stderr("");
    let record = record_json(&lock);
    assert_eq!(record["max_time"], "1h");
    assert_eq!(record["exit"], serde_json::json!({"code": 3}));
}

/// A daemon started with `-o` does not hold the lock: it is left alone,
/// while the command itself is stopped.
#[test]
fn a_process_without_the_descriptor_is_left_alone() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut run, words) = Background::lockrun_holding(
        &["-o", "--max-time", "300ms"],
        &lock,
        "sleep 60 & echo ready $!; wait",
    );
    let daemon: i32 = words[0].parse().unwrap();
    assert_eq!(run.wait_exit(BOUND).code(), Some(124));
    assert!(alive(daemon), "the daemon without the lock was stopped");
    try_lock_now(&lock).success();
    kill(daemon, "KILL");
}

/// Works through `-c` too, and a command that finishes first keeps its
/// own status.
#[test]
fn shell_command_form_is_stopped() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .args(["--max-time", "200ms"])
        .arg(&lock)
        .args(["-c", "sleep 60"])
        .assert()
        .code(124);
    try_lock_now(&lock).success();
}

#[test]
fn usage_errors() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for args in [
        vec!["-F", "--max-time", "1s"],
        vec!["--max-time", "soon"],
        vec!["--kill-grace", "1s"],
        vec!["--max-time", "0"],
    ] {
        lockrun()
            .args(&args)
            .arg(&lock)
            .arg("true")
            .assert()
            .code(64);
    }
}

/// `holder` says when a held lock's limit runs out, and a free lock's last
/// holder says it was stopped.
#[test]
fn holder_shows_the_limit() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut run, _) =
        Background::lockrun_holding(&["--max-time", "1h"], &lock, "echo ready; read x");
    let text = holder_text(&lock);
    assert!(text.contains("stops at "), "{text}");
    assert!(text.contains("(--max-time 1h)"), "{text}");
    run.release();
    assert!(run.wait_exit(BOUND).success());

    lockrun()
        .args(["--max-time", "100ms"])
        .arg(&lock)
        .args(["sleep", "60"])
        .assert()
        .code(124);
    let text = holder_text(&lock);
    assert!(
        text.contains("stopped by lockrun at --max-time 100ms"),
        "{text}"
    );
}

/// With `--slots`, the limit stops what holds that slot and frees only it.
#[test]
fn with_slots_only_that_slot_is_freed() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut other, _) =
        Background::lockrun_holding(&["--slots", "2"], &lock, "echo ready; read x");
    let (mut limited, words) = Background::lockrun_holding(
        &["--slots", "2", "--max-time", "300ms"],
        &lock,
        "sleep 60 & echo ready $!; wait",
    );
    let grandchild: i32 = words[0].parse().unwrap();
    assert_eq!(limited.wait_exit(BOUND).code(), Some(124));
    wait_for("the grandchild to be gone", || !alive(grandchild));
    // One slot free again, the other still held.
    lockrun()
        .args(["--slots", "2", "-n"])
        .arg(&lock)
        .arg("true")
        .assert()
        .success();
    assert!(!other.has_exited());
    other.release();
    assert!(other.wait_exit(BOUND).success());
}

/// Every process with a descriptor open on `lock` (its own or a shared
/// one), as /proc shows them: what still holds, or could hold, the lock.
fn openers(lock: &std::path::Path) -> Vec<i32> {
    let Ok(wanted) = lock.canonicalize() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
        if fds
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == wanted))
        {
            found.push(pid);
        }
    }
    found
}

/// Kills whatever a broken build left holding `lock` (processes that
/// ignore SIGTERM, some of them stopped), so a failing test does not leave
/// them behind for the rest of the run. Bounded.
fn kill_openers(lock: &std::path::Path) {
    for _ in 0..500 {
        let left = openers(lock);
        if left.is_empty() {
            return;
        }
        for pid in left {
            // SAFETY: kill(2); these pids were read just now from /proc as
            // holders of this test's own lock file in its own temp dir.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

struct Cleanup<'a>(&'a std::path::Path);
impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        kill_openers(self.0);
    }
}

/// An OFD lock (`--fcntl`, or a byte range) shows in the kernel's table
/// with pid -1, not lockrun's: a child that moved to a session of its own
/// still holds the lock through lockrun's descriptor and must be stopped
/// as a flock(2) lock's would be.
#[test]
fn max_time_with_fcntl_stops_setsid_children() {
    for kind in [&["--fcntl"][..], &["--start", "0", "--length", "10"][..]] {
        let dir = temp_dir();
        let lock = lock_in(&dir);
        let _cleanup = Cleanup(&lock);
        let mut args = kind.to_vec();
        args.extend(["--max-time", "1s", "--kill-grace", "5s"]);
        let (mut run, words) = Background::lockrun_holding(
            &args,
            &lock,
            "setsid sleep 1001 & echo ready $!; exec sleep 1002",
        );
        let setsid_child: i32 = words[0].parse().unwrap();
        assert_eq!(run.wait_exit(BOUND).code(), Some(124), "{kind:?}");
        assert!(
            !alive(setsid_child),
            "{kind:?}: the setsid'd child {setsid_child} outlived exit 124"
        );
        let mut check = lockrun();
        check
            .args(["-n", "--no-record"])
            .args(kind)
            .arg(&lock)
            .arg("true");
        check.assert().success();
    }
}

/// `exec 9>L; lockrun --fd 9 --max-time …`: the calling script and its
/// other children share the descriptor, but only what the command started
/// is stopped (here an orphan that left for its own session too).
/// (`--max-time` comes before `--fd N`: after it, an option that takes a
/// value is refused with 64 at 9b26dce, issue 26 item 12.)
#[test]
fn max_time_with_fd_stops_only_the_command() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let _cleanup = Cleanup(&lock);
    let mut script = std::process::Command::new("sh");
    script
        .args([
            "-c",
            r#"
            exec 9>>"$L"
            sleep 1003 & other=$!
            "$T" --max-time 1s --fd 9 -- sh -c '(setsid sleep 1004 & echo "child $!"); exec sleep 1005'
            echo "status $? other $other"
            read x
            "#,
        ])
        .env("T", bin())
        .env("L", &lock);
    let caller = Background::spawn_quiet(script);
    let child_line = caller
        .line(BOUND)
        .expect("the command never started its child");
    let child: i32 = child_line
        .strip_prefix("child ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected line {child_line:?}"));
    let end = caller
        .line(BOUND)
        .expect("the calling script was stopped with the command");
    let words: Vec<&str> = end.split_whitespace().collect();
    assert_eq!(words[..2], ["status", "124"], "{end:?}");
    let other: i32 = words[3].parse().unwrap();
    assert!(alive(other), "the caller's other child was stopped");
    assert!(
        !alive(child),
        "the command's orphan {child} outlived exit 124"
    );
    // The lock is the caller's again: its descriptor still holds it.
    assert!(kernel_holders(&lock) >= 1);
    kill(other, "KILL");
}

/// A command that ignores SIGTERM and forks all the time: every pass that
/// kills what a scan found misses what was forked since; after 124
/// nothing may hold the lock.
#[test]
fn max_time_stops_a_command_that_ignores_sigterm_and_keeps_forking() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let _cleanup = Cleanup(&lock);
    let (mut run, _) = Background::lockrun_holding(
        &["--max-time", "500ms", "--kill-grace", "200ms"],
        &lock,
        "trap '' TERM; echo ready; while :; do sleep 1006 & done",
    );
    assert_eq!(run.wait_exit(BOUND).code(), Some(124));
    let left = openers(&lock);
    assert!(
        left.is_empty(),
        "still open on the lock after 124: {left:?}"
    );
    try_lock_now(&lock).success();
}

/// Stopping the command must not signal its caller: in an orphaned process
/// group (a script started by setsid, many cron jobs), the kernel answers
/// an exit from a group with a stopped member with SIGHUP to the whole
/// group, the caller included. A freeze with SIGSTOP before the SIGKILL
/// (the first fix of the forking command) killed the calling script so.
#[test]
fn max_time_in_an_orphaned_process_group_leaves_the_caller_alone() {
    if !needs("setsid", "a session of its own, as cron gives a job") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = std::process::Command::new("timeout")
        .args(["20", "setsid", "-w", "sh", "-c"])
        .arg(
            // The session leader's group is orphaned; the script that runs
            // lockrun is a member of it, as is the command.
            r#"sh -c '"$T" --max-time 300ms --kill-grace 100ms "$L" -- sh -c "trap \"\" TERM; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sleep 100 & done; wait"; echo "caller alive: $?"'; echo "session alive""#,
        )
        .env("T", bin())
        .env("L", &lock)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "caller alive: 124\nsession alive\n",
        "{out:?}"
    );
}
