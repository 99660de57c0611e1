//! Inputs that used to crash lockrun or harm what it was given (issue 12
//! items 10, 13, 16): durations too long for the clock, a zero poll
//! interval, descriptors lent to fd mode, FIFOs named as lock files.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::process::Command;

/// `-w 1e19` is a wait of about 317 billion years: it used to overflow the
/// deadline (a panic, exit 134) as soon as the lock was busy. Now any
/// duration beyond 100 years counts as 100 years.
#[test]
fn a_huge_timeout_waits_and_takes_the_lock_when_released() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut holder, _) =
        Background::lockrun_holding(&["--no-record"], &lock, "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.args(["-w", "1e19"]).arg(&lock).args(["echo", "got it"]);
    let mut waiter = Background::spawn(cmd);
    wait_for("the waiter to block", || {
        kernel_waiters(&lock) == 1 || waiter.has_exited()
    });
    assert!(!waiter.has_exited(), "lockrun -w 1e19 ended while waiting");
    holder.release();
    assert_eq!(waiter.line(BOUND).as_deref(), Some("got it"));
    assert!(waiter.wait_exit(BOUND).success());
}

#[test]
fn a_huge_poll_interval_times_out_normally() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_holder, _) = Background::lockrun_holding(&["--no-record"], &lock, "echo ready; read x");
    for args in [
        &["--poll", "1e19", "-w", "0.05"][..],
        &["--poll", "18446744073709551615", "-w", "0.05"],
        &["-w", "0.05", "--poll", "1000000000y"],
    ] {
        let out = lockrun()
            .args(args)
            .arg(&lock)
            .arg("true")
            .output()
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(75 | 64)),
            "{args:?}: {out:?} (a panic is 134)"
        );
    }
}

/// `--poll 0` used to retry without pause at 97% CPU.
#[test]
fn a_zero_poll_interval_is_a_usage_error() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for interval in ["0", "0s", "0.0001", "10us"] {
        lockrun()
            .args(["--poll", interval])
            .arg(&lock)
            .arg("true")
            .assert()
            .code(64)
            .stderr(predicates::str::contains("at least 1ms"));
    }
}

#[cfg(feature = "etcd")]
#[test]
fn an_etcd_lease_beyond_what_etcd_grants_is_a_usage_error() {
    for ttl in ["1e10", "0", "0.5"] {
        lockrun()
            .args(["--ttl", ttl, "etcd://127.0.0.1:1/x", "true"])
            .assert()
            .code(64)
            .stderr(predicates::str::contains("--ttl"));
    }
    lockrun()
        .args([
            "--kill-grace",
            "1e19",
            "--ttl",
            "1e9",
            "-n",
            "etcd://127.0.0.1:1/x",
            "true",
        ])
        .assert()
        .code(69);
}

/// fd mode on a descriptor the caller lent (stdin, stdout, stderr or any
/// other) must leave it open: lockrun works on a duplicate.
#[test]
fn fd_mode_never_closes_a_lent_descriptor() {
    if !needs("strace", "to see which descriptors lockrun closes") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap();
    let trace = dir.path().join("trace");
    for (fd, redirect) in [(0, "0<"), (1, "1<>"), (2, "2<>"), (9, "9<>")] {
        for extra in [&[][..], &["-u"], &["-s", "--fcntl"]] {
            let out = Command::new("sh")
                .args([
                    "-c",
                    &format!(
                        r#"strace -f -qq -e trace=close,close_range -o "$TRACE" "$T" {} {fd} {redirect}"$L""#,
                        extra.join(" ")
                    ),
                ])
                .env("T", bin())
                .env("L", &lock)
                .env("TRACE", &trace)
                .output()
                .unwrap();
            assert!(out.status.success(), "lockrun {extra:?} {fd}: {out:?}");
            let calls = std::fs::read_to_string(&trace).unwrap();
            assert!(
                !calls.lines().any(|l| l.contains(&format!("close({fd})"))),
                "lockrun {extra:?} {fd} closed the descriptor it was lent:\n{calls}"
            );
        }
    }
}

/// A FIFO named as the lock file is refused without being opened: opening
/// it would wake a writer blocked on it, which then dies by SIGPIPE when
/// lockrun closes it again.
#[test]
fn a_fifo_is_refused_without_waking_its_writer() {
    let dir = temp_dir();
    let fifo = dir.path().join("fifo");
    let mut writer = fifo_with_blocked_writer(&fifo);
    for args in [&[][..], &["-n"], &["--fcntl"], &["-s"]] {
        lockrun()
            .args(args)
            .arg(&fifo)
            .arg("true")
            .assert()
            .code(77)
            .stderr(predicates::str::contains("FIFO"));
        // Woken, the writer would write into the closed FIFO and die by
        // SIGPIPE; blocked, it is still there.
        assert!(
            writer.try_wait().unwrap().is_none(),
            "lockrun {args:?}: the writer was woken (and killed by SIGPIPE)"
        );
    }
    fifo_writer_still_blocked(&fifo, writer);
}

/// Character devices are refused before being opened (opening
/// /dev/watchdog arms it): seen in the system calls, no open of the device
/// but the type probe (O_PATH).
#[test]
fn a_device_is_refused_without_being_opened() {
    if !needs("strace", "to see what lockrun opens") {
        return;
    }
    let dir = temp_dir();
    let trace = dir.path().join("trace");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=open,openat", "-o"])
        .arg(&trace)
        .args([bin(), "/dev/null", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let calls = std::fs::read_to_string(&trace).unwrap();
    let opens: Vec<&str> = calls
        .lines()
        .filter(|l| l.contains("\"/dev/null\""))
        .collect();
    assert!(
        opens.iter().all(|l| l.contains("O_PATH")),
        "lockrun opened the device:\n{}",
        opens.join("\n")
    );
}

/// `check --probe` runs where the kernel's table cannot tell (here a child
/// PID namespace); it used to open whatever the path named, so a FIFO's
/// blocked writer was woken (and killed by SIGPIPE at the close) and the
/// FIFO reported free. It now opens only a regular file or a directory.
#[test]
fn check_probe_never_opens_a_fifo() {
    if !pid_namespaces_work() {
        return;
    }
    let dir = temp_dir();
    let fifo = dir.path().join("fifo.lock");
    let writer = fifo_with_blocked_writer(&fifo);
    let out = in_child_pid_namespace(&["check", "--probe", fifo.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(69), "{text}{out:?}");
    assert!(text.contains("not probed"), "{text}");
    fifo_writer_still_blocked(&fifo, writer);
}

/// A size whose suffix starts with a multi-byte character used to split a
/// UTF-8 character in two: a panic (exit 134) instead of a usage error.
#[test]
fn a_size_with_a_non_ascii_suffix_is_a_usage_error() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for args in [
        &["--start", "4é"][..],
        &["--length", "1µ"],
        &["--start", "1KЖ"],
        &["--length", "€"],
    ] {
        lockrun()
            .args(args)
            .arg(&lock)
            .arg("true")
            .assert()
            .code(64)
            .stderr(predicates::str::contains("is not a size"));
    }
}

/// A report written to a full disk used to panic in println! (exit 134).
/// It is an error with the OS's reason, and a status that says the report
/// was not made; a run's own messages to a full stderr are dropped, and the
/// run goes on as if they were written.
#[test]
fn output_to_a_full_device_is_an_error_not_a_panic() {
    if !std::path::Path::new("/dev/full").exists() {
        skip("no /dev/full here");
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    for sub in ["holder", "check"] {
        let out = std_lockrun()
            .arg(sub)
            .arg(&lock)
            .stdout(full())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(71), "{sub}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("No space left on device"),
            "{sub}: {out:?}"
        );
    }
    // A conflict message to a full stderr: still 75, and nothing else.
    let (_holder, _) = Background::lockrun_holding(&["--no-record"], &lock, "echo ready; read x");
    let out = std_lockrun()
        .args(["-n"])
        .arg(&lock)
        .arg("true")
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    // A command that is not found, told to a full stderr: 127, no panic.
    let out = std_lockrun()
        .arg(dir.path().join("other.lock"))
        .arg("/nonexistent/command")
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    // -v's lines, --slots's among them, to a full stderr: the run goes on.
    let out = std_lockrun()
        .args(["-v", "--slots", "2"])
        .arg(dir.path().join("slots.lock"))
        .arg("true")
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
