//! The core guarantee across real processes: the command runs only while
//! the lock is held, and lockrun exits as the command did (issue: core).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use predicates::prelude::*;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// P workers x M iterations each increment a shared counter through
/// `lockrun ARGS LOCK -- sh -c 'read; sleep; write'`. Returns (final
/// counter, successful runs).
fn counter_race(lock_args: &[&str], procs: usize, iters: usize) -> (usize, usize) {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    // The sleep widens the window between read and write, so that a lock
    // that does not exclude is caught on every run, not once in a while.
    let script = format!(
        "n=$(cat '{c}'); sleep 0.005; echo $((n+1)) > '{c}'",
        c = counter.display()
    );
    let workers: Vec<_> = (0..procs)
        .map(|_| {
            let lock = lock.clone();
            let script = script.clone();
            let args: Vec<String> = lock_args.iter().map(|s| s.to_string()).collect();
            std::thread::spawn(move || {
                let mut ok = 0;
                for _ in 0..iters {
                    let status = std_lockrun()
                        .args(&args)
                        .arg(&lock)
                        .args(["--", "sh", "-c", &script])
                        .status()
                        .expect("run lockrun");
                    if status.success() {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let ok = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let value = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (value, ok)
}

#[test]
fn the_counter_harness_catches_a_lock_that_does_not_exclude() {
    // Shared locks do not exclude each other: the harness must see lost
    // updates, or it could not see them from a broken exclusive lock either.
    let (value, ok) = counter_race(&["--shared"], 4, 15);
    assert_eq!(ok, 60);
    assert!(
        value < 60,
        "shared locks lost no update ({value}); the harness cannot catch a broken lock"
    );
}

#[test]
fn exclusive_locks_lose_no_update() {
    let (value, ok) = counter_race(&[], 4, 25);
    assert_eq!(ok, 100, "every run succeeds");
    assert_eq!(value, 100, "lost updates: mutual exclusion is broken");
}

#[test]
fn nonblocking_fails_at_once_against_a_held_lock_and_names_the_holder() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_holder, words) = Background::lockrun_holding(&[], &lock, "echo ready $$; exec sleep 60");
    let marker = dir.path().join("ran");
    lockrun()
        .arg("-n")
        .arg(&lock)
        .args(["touch"])
        .arg(&marker)
        .assert()
        .code(75)
        .stderr(predicate::str::starts_with("lockrun: "))
        .stderr(predicate::str::contains(format!(
            "is held by pid {} (sh -c 'echo ready $$; exec sleep 60') since",
            words[0]
        )));
    assert!(!marker.exists(), "the command ran without the lock");
}

#[test]
fn conflict_exit_code_is_configurable_and_quiet_is_quiet() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
    lockrun()
        .args(["-n", "-E", "9"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(9);
    lockrun()
        .args(["-n", "-q"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75)
        .stderr("");
    lockrun()
        .args(["--nb", "--conflict-exit-code", "0"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(0);
}

#[test]
fn timeout_gives_up_after_roughly_the_duration() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
    for spelling in [["-w", "0.5"], ["--timeout", "500ms"], ["--wait", "0.5s"]] {
        let start = Instant::now();
        lockrun()
            .args(spelling)
            .arg(&lock)
            .arg("true")
            .assert()
            .code(75)
            .stderr(predicate::str::contains("timed out after"));
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(450),
            "{spelling:?} gave up early: {took:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "{spelling:?} gave up late: {took:?}"
        );
    }
    // 0 means "do not wait".
    lockrun()
        .args(["-w", "0"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
}

#[test]
fn a_blocked_waiter_runs_as_soon_as_the_holder_exits() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read line");
    let mut cmd = std_lockrun();
    cmd.arg(&lock).args(["--", "echo", "waiter ran"]);
    let mut waiter = Background::spawn(cmd);
    wait_for("the waiter to block in the kernel", || {
        kernel_waiters(&lock) == 1
    });
    assert!(
        !waiter.has_exited(),
        "the waiter ran while the lock was held"
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    assert_eq!(waiter.line(BOUND).as_deref(), Some("waiter ran"));
    assert!(waiter.wait_exit(BOUND).success());
}

#[test]
fn poll_mode_takes_the_lock_after_release() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // The holder marks its release; a poller that ran early finds no mark.
    let released = dir.path().join("released");
    let (mut holder, _) = Background::lockrun_holding(
        &[],
        &lock,
        &format!("echo ready; read line; touch '{}'", released.display()),
    );
    let mut cmd = std_lockrun();
    cmd.args(["--poll", "20ms", "-w", "30s"])
        .arg(&lock)
        .args([
            "--",
            "sh",
            "-c",
            "test -e \"$0\" && echo poller ran || echo EARLY",
        ])
        .arg(&released);
    let mut poller = Background::spawn(cmd);
    // Polling: asleep between attempts, and never in the kernel's queue.
    wait_asleep("the poller to sleep between attempts", poller.pid());
    assert_eq!(
        kernel_waiters(&lock),
        0,
        "--poll must not block in the kernel"
    );
    holder.release();
    assert_eq!(poller.line(BOUND).as_deref(), Some("poller ran"));
    assert!(poller.wait_exit(BOUND).success());
}

#[test]
fn lockrun_and_flock_exclude_each_other() {
    if !needs("flock", "util-linux flock(1), to test interop") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    {
        let (_flock, sleeper) = flock_holding(&[], &lock);
        try_lock_now(&lock)
            .code(75)
            .stderr(predicate::str::contains("left no holder record"));
        // flock(1) forked the command, which holds the lock too.
        kill(sleeper, "KILL");
    }
    wait_for("flock's command to release", || kernel_holders(&lock) == 0);
    let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
    let status = Command::new("flock")
        .arg("-n")
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "flock -n got a lock lockrun holds");
}

#[test]
fn killing_lockrun_with_sigkill_leaves_the_lock_with_the_command() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut holder, words) =
        Background::lockrun_holding(&[], &lock, "echo ready $$; exec sleep 60");
    let command_pid: i32 = words[0].parse().unwrap();
    kill(holder.pid(), "KILL");
    holder.wait_exit(BOUND);
    try_lock_now(&lock).code(75);
    kill(command_pid, "KILL");
    wait_for("the command to die", || process_gone(command_pid));
    wait_for("the kernel to drop the lock", || kernel_holders(&lock) == 0);
    try_lock_now(&lock).success();
}

#[test]
fn arguments_reach_the_command_exactly() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let odd = std::ffi::OsStr::from_bytes(b"caf\xff\xfe");
    let output = std_lockrun()
        .arg(&lock)
        .args(["printf", "%s|", "a b", "", "-n", "--", "*"])
        .arg(odd)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"a b||-n|--|*|caf\xff\xfe|".to_vec());
    // Options after the command are the command's, with or without `--`.
    lockrun()
        .arg(&lock)
        .args(["echo", "-n", "-w", "5"])
        .assert()
        .success()
        .stdout("-w 5");
    // -c runs a shell command.
    lockrun()
        .arg(&lock)
        .args(["-c", "echo \"$0\" x"])
        .assert()
        .success()
        .stdout(predicate::str::ends_with(" x\n"));
    lockrun().args(["-c", "exit 4"]).arg(&lock).assert().code(4);
}

#[test]
fn a_long_command_line_and_a_script_without_shebang_start() {
    // The command is started from a small stack of its own (a vfork-style
    // clone), on which execvp builds a copy of argv for a script that has
    // no `#!` line: that stack must grow with the command line.
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let script = dir.path().join("no-shebang");
    std::fs::write(&script, "echo \"$# ${20000}\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args: Vec<String> = (1..=20_000).map(|n| n.to_string()).collect();
    for mode in [&[][..], &["-F"][..]] {
        lockrun()
            .args(mode)
            .arg(&lock)
            .arg(&script)
            .args(&args)
            .assert()
            .success()
            .stdout("20000 20000\n");
    }
    // The record keeps a bounded part of such a command line, and says so.
    let record = record_json(&lock);
    let recorded = record["command"].as_array().unwrap();
    assert!(recorded.len() < 20_001);
    assert!(
        recorded
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("more arguments")
    );
}

#[test]
fn exit_status_is_the_commands() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for code in [0, 1, 3, 42, 255] {
        lockrun()
            .arg(&lock)
            .args(["sh", "-c", &format!("exit {code}")])
            .assert()
            .code(code);
    }
}

#[test]
fn usage_errors_exit_64_with_a_lockrun_prefix() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let lock = lock.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&[], "lock file is required"),
        (&[lock], "command to run is required"),
        (&["--no-such-flag", lock, "true"], "--no-such-flag"),
        (
            &["-w", "10x", lock, "true"],
            "'10x' for '--timeout <DURATION>'",
        ),
        (
            &["--poll", "soon", lock, "true"],
            "'soon' for '--poll <INTERVAL>'",
        ),
        (&["-E", "300", lock, "true"], "300"),
        (&["-F", "-o", lock, "true"], "cannot be used with"),
        (&["--poll", "0", lock, "true"], "at least 1ms"),
        (&["--length", "1Q", lock, "true"], "is not a size"),
        (&["--start", "-5", lock, "true"], "--start"),
        (&["--fd", "3"], "command to run is required"),
        (&["--fd", "-3", "true"], "--fd"),
        (
            &[lock, "-c", "echo", "extra"],
            "-c takes exactly one argument",
        ),
    ];
    for (args, needle) in cases {
        lockrun()
            .args(*args)
            .assert()
            .code(64)
            .stderr(predicate::str::starts_with("lockrun: "))
            .stderr(predicate::str::contains(*needle));
    }
    assert!(
        !std::path::Path::new(lock).exists(),
        "a usage error created the lock file"
    );
}

#[test]
fn help_and_version_exit_0() {
    lockrun()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit status"));
    lockrun()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::contains(env!("CARGO_PKG_VERSION")));
    lockrun().args(["holder", "--help"]).assert().success();
    lockrun()
        .args(["check", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--probe"));
}

#[test]
fn missing_directory_exits_66_and_names_the_path() {
    let dir = temp_dir();
    let lock = dir.path().join("no/such/dir/x.lock");
    lockrun()
        .arg(&lock)
        .arg("true")
        .assert()
        .code(66)
        .stderr(predicate::str::contains(lock.to_str().unwrap()))
        .stderr(predicate::str::contains("No such file or directory"));
}

#[test]
fn permission_denied_exits_66() {
    // As root every file is writable; drop to nobody where we can.
    if !has("setpriv") || !rustix::process::geteuid().is_root() {
        let dir = temp_dir();
        let locked_dir = dir.path().join("ro");
        std::fs::create_dir(&locked_dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&locked_dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        lockrun()
            .arg(locked_dir.join("x.lock"))
            .arg("true")
            .assert()
            .code(66)
            .stderr(predicate::str::contains("ermission denied"));
        return;
    }
    let dir = temp_dir(); // mode 0700, owned by root: nobody cannot enter it
    let lock = lock_in(&dir);
    lockrun_as_nobody()
        .arg(&lock)
        .arg("true")
        .stderr(Stdio::piped())
        .output()
        .map(|out| {
            assert_eq!(
                out.status.code(),
                Some(66),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("Permission denied") && err.contains(lock.to_str().unwrap()),
                "{err}"
            );
        })
        .unwrap();
}

#[test]
fn command_not_found_is_127_and_not_executable_is_126() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .arg(&lock)
        .arg("no-such-command-lockrun-test")
        .assert()
        .code(127)
        .stderr(predicate::str::contains("command not found"));
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    lockrun()
        .arg(&lock)
        .arg(&script)
        .assert()
        .code(126)
        .stderr(predicate::str::contains("cannot execute"));
    // The same with -F (exec in place).
    lockrun()
        .arg("-F")
        .arg(&lock)
        .arg("no-such-command-lockrun-test")
        .assert()
        .code(127);
    // The record tells how it ended.
    let record = record_json(&lock);
    assert_eq!(record["exit"]["code"], 127);
}

#[test]
fn the_command_sees_where_and_how_it_is_locked() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .arg(&lock)
        .args(["sh", "-c", "echo $LOCKRUN_LOCKFILE $LOCKRUN_MODE"])
        .assert()
        .success()
        .stdout(format!("{} exclusive\n", lock.display()));
    lockrun()
        .current_dir(dir.path())
        .args([
            "-s",
            "test.lock",
            "sh",
            "-c",
            "echo $LOCKRUN_LOCKFILE $LOCKRUN_MODE",
        ])
        .assert()
        .success()
        .stdout(format!(
            "{} shared\n",
            dir.path().join("test.lock").display()
        ));
    // Inherited values are replaced, not doubled; the rest passes through,
    // with and without -F.
    for mode in [&[][..], &["-F"][..]] {
        lockrun()
            .env("LOCKRUN_MODE", "stale")
            .env("LOCKRUN_TEST_KEPT", "kept")
            .args(mode)
            .arg(&lock)
            .args([
                "sh",
                "-c",
                "env | grep -E '^LOCKRUN_(MODE|TEST_KEPT)=' | sort",
            ])
            .assert()
            .success()
            .stdout("LOCKRUN_MODE=exclusive\nLOCKRUN_TEST_KEPT=kept\n");
    }
}

#[test]
fn the_command_gets_default_sigpipe_and_its_status_even_if_sigchld_was_ignored() {
    // Started with SIGPIPE ignored (as systemd starts services), the
    // command still dies quietly on a closed pipe instead of reporting
    // write errors.
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for mode in ["", "-F"] {
        let output = Command::new("sh")
            .args([
                "-c",
                r#"trap '' PIPE; exec "$0" $2 "$1" sh -c 'seq 1 1000000 | head -n 1'"#,
                common::bin(),
            ])
            .arg(&lock)
            .arg(mode)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), "1\n", "{mode}");
        assert_eq!(String::from_utf8_lossy(&output.stderr), "", "{mode}");
    }
    // With SIGCHLD ignored the kernel would reap the command before
    // lockrun could learn its status; lockrun resets it, as flock(1) does.
    // (bash: dash's `trap '' CHLD` does not ignore the signal.)
    let output = Command::new("bash")
        .args([
            "-c",
            r#"trap '' CHLD; exec "$0" "$1" sh -c 'exit 3'"#,
            common::bin(),
        ])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(record_json(&lock)["exit"]["code"], 3);
}

#[test]
fn the_lock_file_is_created_0644_minus_umask_and_never_deleted() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let output = Command::new("sh")
        .args(["-c", "umask 022; exec \"$0\" \"$1\" true", common::bin()])
        .arg(&lock)
        .output()
        .unwrap();
    assert!(output.status.success());
    let mode = std::fs::metadata(&lock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let other = dir.path().join("other.lock");
    Command::new("sh")
        .args(["-c", "umask 077; exec \"$0\" \"$1\" true", common::bin()])
        .arg(&other)
        .status()
        .unwrap();
    assert_eq!(
        std::fs::metadata(&other).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(lock.exists() && other.exists(), "a lock file was deleted");
}

#[test]
fn shared_locks_coexist_and_exclude_exclusive_ones() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_a, _) = Background::lockrun_holding(&["-s"], &lock, "echo ready; exec sleep 60");
    let (_b, _) = Background::lockrun_holding(&["--shared"], &lock, "echo ready; exec sleep 60");
    lockrun()
        .args(["-s", "-n"])
        .arg(&lock)
        .arg("true")
        .assert()
        .success();
    lockrun()
        .args(["-n"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
    lockrun()
        .args(["-x", "-n"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
    lockrun()
        .args(["-e", "-n"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
}

#[test]
fn a_directory_can_be_the_lock() {
    let dir = temp_dir();
    let locked_dir = dir.path().join("d");
    std::fs::create_dir(&locked_dir).unwrap();
    let (_holder, _) = Background::lockrun_holding(&[], &locked_dir, "echo ready; exec sleep 60");
    try_lock_now(&locked_dir).code(75);
    assert_eq!(
        std::fs::read_dir(&locked_dir).unwrap().count(),
        0,
        "nothing is written into a directory lock"
    );
}

#[test]
fn lone_number_is_a_descriptor_but_number_then_command_is_a_file() {
    let dir = temp_dir();
    lockrun()
        .current_dir(dir.path())
        .args(["9", "true"])
        .assert()
        .success();
    assert!(dir.path().join("9").is_file());
    lockrun()
        .args(["9"])
        .assert()
        .code(66)
        .stderr(predicate::str::contains("descriptor 9 is not open"));
}

#[test]
fn verbose_says_how_long_acquiring_took() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .arg("-v")
        .arg(&lock)
        .arg("true")
        .assert()
        .success()
        .stderr(predicate::str::contains("took the exclusive lock on"));
}

// O_PATH is Linux's.
#[cfg(target_os = "linux")]
#[test]
fn a_failing_lock_call_exits_71_with_the_os_error() {
    // flock(2) on an O_PATH descriptor fails with EBADF: the lock call
    // itself fails, which is neither a conflict nor an open failure.
    use std::os::fd::AsRawFd;
    let dir = temp_dir();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap();
    let flags = rustix::fs::OFlags::PATH; // no CLOEXEC: lockrun inherits it
    let fd = rustix::fs::open(&lock, flags, rustix::fs::Mode::empty()).unwrap();
    lockrun()
        .arg(fd.as_raw_fd().to_string())
        .assert()
        .code(71)
        .stderr(predicate::str::starts_with(
            "lockrun: cannot lock descriptor",
        ))
        .stderr(predicate::str::contains("os error 9"));
}

#[cfg(not(feature = "etcd"))]
#[test]
fn lock_urls_say_how_to_get_them_when_built_without_etcd() {
    for args in [
        &["etcd://127.0.0.1:2379/job", "true"][..],
        &["holder", "etcd://127.0.0.1:2379/job"][..],
        &["check", "etcd://127.0.0.1:2379/job"][..],
    ] {
        lockrun()
            .args(args)
            .assert()
            .code(64)
            .stderr(predicate::str::contains("--features etcd"));
    }
}
