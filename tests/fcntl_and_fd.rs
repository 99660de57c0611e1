//! flock(1) 2.41/2.42 and master options (issue 19 item 3): `--fcntl` (open
//! file description locks), `--start`/`--length` (byte ranges) and
//! `--fd N COMMAND`. flock 2.38 has none of them, so the locks are checked
//! against what a Python fcntl/lockf user sees: an OFD lock excludes
//! lockf(), flock(2) locks do not, and a range lock leaves the other bytes
//! free.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const LOCKF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/lockf.py");

fn python() -> bool {
    needs("python3", "the fcntl/lockf side of --fcntl tests")
}

/// `lockf.py L try START LEN` run by the command lockrun starts, so while
/// lockrun holds its lock.
fn lockf_under(args: &[&str], lock: &Path, tries: &[(u64, u64)]) -> String {
    let script: String = tries
        .iter()
        .map(|(start, len)| format!("python3 {LOCKF} \"$L\" try {start} {len}; "))
        .collect();
    let out = lockrun()
        .args(args)
        .arg(lock)
        .args(["sh", "-c", &script])
        .env("L", lock)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn an_fcntl_lock_excludes_lockf_and_a_flock_lock_does_not() {
    if !python() {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    assert_eq!(lockf_under(&["--fcntl"], &lock, &[(0, 0)]), "busy");
    assert_eq!(lockf_under(&["--fcntl", "-s"], &lock, &[(0, 0)]), "busy");
    assert_eq!(lockf_under(&[], &lock, &[(0, 0)]), "free");
    // The record is still written with an exclusive --fcntl lock.
    assert_eq!(record_json(&lock)["exit"], serde_json::json!({"code": 0}));
}

#[test]
fn a_range_lock_leaves_the_other_bytes_free() {
    if !python() {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let tries = [(10, 5), (0, 10), (15, 0), (14, 1), (9, 2)];
    assert_eq!(
        lockf_under(&["--start", "10", "--length", "5"], &lock, &tries),
        "busy free free busy busy"
    );
    // Length 0: from START to the end of the file, however long it grows.
    let tries = [(0, 100), (100, 1), (1 << 40, 1)];
    assert_eq!(
        lockf_under(&["--start", "100", "--length", "0"], &lock, &tries),
        "free busy busy"
    );
    // --length alone starts at 0; sizes take suffixes.
    let tries = [(1023, 1), (1024, 1)];
    assert_eq!(lockf_under(&["--length", "1K"], &lock, &tries), "busy free");
}

#[test]
fn an_fcntl_lock_waits_for_a_lockf_holder_in_the_kernel() {
    if !python() {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let mut cmd = Command::new("python3");
    cmd.args([LOCKF, lock.to_str().unwrap(), "hold", "0", "0"]);
    let mut holder = Background::spawn(cmd);
    holder.expect_ready();

    lockrun()
        .args(["--fcntl", "-n"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
    lockrun()
        .args(["--fcntl", "-w", "0.05"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
    lockrun()
        .args(["--fcntl", "-n", "--start", "1"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
    // A flock(2) lock is another kind: not excluded.
    lockrun()
        .arg("-n")
        .arg(&lock)
        .arg("true")
        .assert()
        .success();

    for args in [
        &["--fcntl", "-w", "20"][..],
        &["--fcntl"],
        &["--fcntl", "--poll", "5ms"],
    ] {
        let mut cmd = std_lockrun();
        cmd.args(args).arg(&lock).args(["echo", "got it"]);
        let mut waiter = Background::spawn(cmd);
        if args.contains(&"--poll") {
            wait_asleep("the poller", waiter.pid());
        } else {
            wait_for("lockrun to block in F_OFD_SETLKW", || {
                kernel_waiters(&lock) == 1
            });
        }
        assert!(!waiter.has_exited(), "{args:?}: did not wait");
        holder.release();
        assert_eq!(waiter.line(BOUND).as_deref(), Some("got it"), "{args:?}");
        assert!(waiter.wait_exit(BOUND).success(), "{args:?}");
        let mut cmd = Command::new("python3");
        cmd.args([LOCKF, lock.to_str().unwrap(), "hold", "0", "0"]);
        holder = Background::spawn(cmd);
        holder.expect_ready();
    }
}

/// The kernel grants an exclusive fcntl lock only on a descriptor open for
/// writing: lockrun opens the file read-write for it, and says so when it
/// cannot (a read-only descriptor, a directory).
#[test]
fn an_exclusive_fcntl_lock_needs_write_access_and_says_so() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap();
    let sh = |script: &str| {
        Command::new("sh")
            .args(["-c", script])
            .env("T", bin())
            .env("L", &lock)
            .env("D", dir.path())
            .output()
            .unwrap()
    };
    let out = sh(r#"exec 3<"$L"; "$T" --fcntl 3"#);
    assert_eq!(out.status.code(), Some(71), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("open for writing") && err.contains("-s"),
        "{err}"
    );
    assert!(sh(r#"exec 3<"$L"; "$T" -s --fcntl 3"#).status.success());
    assert!(sh(r#"exec 3<>"$L"; "$T" --fcntl 3"#).status.success());

    let out = sh(r#""$T" --fcntl "$D" true"#);
    assert_eq!(out.status.code(), Some(66), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("directory"));
    assert!(sh(r#""$T" -s --fcntl "$D" true"#).status.success());
}

#[test]
fn fd_then_command_locks_the_lent_descriptor_and_runs_the_command() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = Command::new("sh")
        .args([
            "-c",
            r#"
            exec 9>>"$L"
            "$T" --fd 9 sh -c '"$T" -n "$L" true; echo "inner=$?"; echo "file=$LOCKRUN_LOCKFILE"; [ -e /proc/self/fd/9 ] && echo "has 9"'
            echo "status=$?"
            # The lock lives on with the shell's descriptor, as flock(1)'s.
            "$T" --no-record -n "$L" true; echo "after=$?"
            "$T" -u 9; "$T" --no-record -n "$L" true; echo "unlocked=$?"
            "$T" --fd 9 -c 'echo "shell $0"'
            "$T" -o --fd 9 sh -c '"$T" -n "$L" true; echo "o inner=$?"; [ -e /proc/self/fd/9 ] || echo "no 9"'
            exec 9>&-
            "$T" --fd 9 true; echo "closed=$?"
            "#,
        ])
        .env("T", bin())
        .env("L", &lock)
        .env("SHELL", "/bin/sh")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let canonical = lock.canonicalize().unwrap();
    assert_eq!(
        stdout,
        format!(
            "inner=75\nfile={}\nhas 9\nstatus=0\nafter=75\nunlocked=0\nshell /bin/sh\no inner=75\nno 9\nclosed=66\n",
            canonical.display()
        ),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("descriptor 9 is not open"));
    // No record in a lent descriptor's file.
    assert_eq!(std::fs::read(&lock).unwrap(), b"");
}

/// fd mode's conflict message names the file behind the descriptor, so its
/// `lockrun holder FILE` hint can be followed (issue 19 item 6).
#[test]
fn fd_mode_names_the_file_behind_the_descriptor_on_conflict() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = Command::new(bin())
        .args(["--no-record"])
        .arg(&lock)
        .args(["sh", "-c", r#""$T" -n 9 9>>"$L""#])
        .env("T", bin())
        .env("L", &lock)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let file = lock.canonicalize().unwrap();
    assert!(
        err.contains(&format!("`lockrun holder {}`", file.display())),
        "{err}"
    );
}

/// Issue 26 item 5: in fd mode there is no command status to tell a
/// conflict from, and scripts written for flock(1) test for 1 before they
/// enter their critical section. A real script's pattern, run with lockrun
/// under its own name while another copy holds the lock, must not enter.
#[test]
fn fd_mode_conflict_status_is_1_so_flock_scripts_stay_out() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_holder, _) = Background::lockrun_holding(&["--no-record"], &lock, "echo ready; sleep 60");
    let out = Command::new("timeout")
        .args(["20", "sh", "-c"])
        .arg(
            r#"
            ( "$T" -n 3; [ $? -eq 1 ] && { echo "stayed out"; exit 0; }; echo "entered" ) 3<>"$L"
            ( "$T" -n 9 || exit 1; echo "entered" ) 9>>"$L"; echo "subshell=$?"
            ( "$T" -n -E 75 9; echo "E=$?" ) 9>>"$L"
            ( "$T" -w 0.05 9; echo "w=$?" ) 9>>"$L"
            "#,
        )
        .env("T", bin())
        .env("L", &lock)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "stayed out\nsubshell=1\nE=75\nw=1\n",
        "{out:?}"
    );
    // With a command, a conflict is still 75: the command's 1 is its own.
    lockrun().arg("-n").arg(&lock).arg("true").assert().code(75);
}

/// Issue 26 item 12: after `--fd N`, options that take a value keep their
/// value (they were read as `--max-time -- 5 cmd`, 64 "a value is
/// required"); which options take one comes from clap's definition.
#[test]
fn fd_options_that_take_a_value_are_read_as_such() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let run = |args: &str| {
        Command::new("timeout")
            .args(["20", "sh", "-c"])
            .arg(format!(
                r#"exec 9>>"$L"; "$T" --fd 9 {args} 2>&1; echo "status=$?""#
            ))
            .env("T", bin())
            .env("L", &lock)
            .output()
            .unwrap()
    };
    for (args, expected) in [
        ("--max-time 5 echo ran", "ran\nstatus=0\n"),
        ("--forward never echo ran", "ran\nstatus=0\n"),
        ("--kill-grace 1s --max-time 5 echo ran", "ran\nstatus=0\n"),
        ("--time 1 echo ran", "ran\nstatus=0\n"),
        ("--conflict 3 echo ran", "ran\nstatus=0\n"),
        ("-w 1 echo ran", "ran\nstatus=0\n"),
        ("-nw 1 echo ran", "ran\nstatus=0\n"),
        ("--max-time=5 echo ran", "ran\nstatus=0\n"),
    ] {
        let out = run(args);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            expected,
            "--fd 9 {args}"
        );
    }
    // --slots with a lent descriptor is refused for what it is, not for a
    // missing value.
    let out = run("--slots 2 echo ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--slots cannot be used with --fd"), "{text}");
    assert!(text.ends_with("status=64\n"), "{text}");
    assert!(!text.contains("ran\n"), "{text}");
}

/// Issue 26 item 12: fd mode runs no command, so --max-time there would be
/// silently ignored: it is refused.
#[test]
fn fd_mode_refuses_max_time() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = Command::new("timeout")
        .args(["20", "sh", "-c", r#"exec 9>>"$L"; "$T" --max-time 1 9"#])
        .env("T", bin())
        .env("L", &lock)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("fd mode runs no command to stop"),
        "{out:?}"
    );
}

/// `holder`'s human output cut into blocks: the first line, then one block
/// per line indented by two spaces, with the lines indented deeper under it.
fn blocks(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let deeper = line.starts_with("   ");
        match out.last_mut() {
            Some(block) if deeper => {
                block.push('\n');
                block.push_str(line);
            }
            _ => out.push(line.to_owned()),
        }
    }
    out
}

/// Issue 26 item 9: holders of different byte ranges of one file never
/// overwrite each other's record (CONTRACT §13). A range lock writes no
/// record; a whole-file holder beside them (flock(2), another kind) keeps
/// its own; `holder` shows each range's holders as a lock of their own,
/// with kind and range, never as "also held through" another range, and
/// says the kind of a lone `--fcntl` holder too.
#[test]
fn item_9_byte_range_holders_never_share_a_record() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let script = "echo ready $$; read x";
    let (_a, first) =
        Background::lockrun_holding(&["--start", "0", "--length", "5"], &lock, script);
    let (_b, second) =
        Background::lockrun_holding(&["--start", "10", "--length", "5"], &lock, script);
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "",
        "a range holder wrote a record, which names one holder of the file among several"
    );
    let (_c, whole) = Background::lockrun_holding(&[], &lock, script);
    assert_eq!(record_json(&lock)["pid"].to_string(), whole[0]);

    let text = holder_text(&lock);
    let blocks = blocks(&text);
    assert!(blocks[0].ends_with(": held by 3 separate locks"), "{text}");
    let block = |heading: &str| {
        blocks
            .iter()
            .find(|b| b.starts_with(heading))
            .unwrap_or_else(|| panic!("no block {heading:?} in:\n{text}"))
            .clone()
    };
    let pid = |p: &str| format!("pid {p} `");
    let low = block("  OFD lock on bytes 0-4 (exclusive): ");
    let high = block("  OFD lock on bytes 10-14 (exclusive): ");
    let flock = block(&format!(
        "  flock(2) lock on the whole file (exclusive): pid {} `sh -c",
        whole[0]
    ));
    assert!(low.contains(&pid(&first[0])), "{text}");
    assert!(high.contains(&pid(&second[0])), "{text}");
    for (range, other) in [(&low, &second[0]), (&low, &whole[0]), (&high, &first[0])] {
        assert!(!range.contains(&pid(other)), "{text}");
    }
    for range in [&low, &high] {
        assert!(
            !range.contains("since") && !range.contains("user "),
            "{text}"
        );
    }
    assert!(
        flock.contains(", user ") && flock.contains("via lockrun pid"),
        "{text}"
    );

    // A lone OFD holder on the whole file keeps its record, and says its kind.
    let other = dir.path().join("fcntl.lock");
    let (_d, words) = Background::lockrun_holding(&["--fcntl"], &other, script);
    let text = holder_text(&other);
    assert!(
        text.contains(&format!(
            "held (exclusive) by pid {} `sh -c 'echo ready $$; read x'`, OFD lock on the whole file, user ",
            words[0]
        )),
        "{text}"
    );
}

/// Issue 26 item 10: a conflict or waiting message names only a holder the
/// kernel confirms (CONTRACT §13). An old released record is not blamed
/// for shared holders, a lockf(3) holder or a range holder, and a live
/// whole-file holder's record is not blamed for another range's conflict.
#[test]
fn item_10_conflict_messages_name_only_what_the_kernel_confirms() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let script = "echo ready $$; read x";
    // An old run's released record, naming a process that is gone.
    lockrun().arg(&lock).arg("true").assert().success();
    let old = format!("pid {}", record_json(&lock)["pid"]);
    let blames_nobody_gone = |stderr: &str| {
        assert!(
            !stderr.contains("gone") && !stderr.contains(&old),
            "{stderr}"
        );
    };

    let shared: Vec<_> = (0..3)
        .map(|_| Background::lockrun_holding(&["-s"], &lock, script))
        .collect();
    let out = lockrun().arg("-n").arg(&lock).arg("true").output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(" is held shared by 3 processes"),
        "{stderr}"
    );
    blames_nobody_gone(&stderr);
    let out = lockrun()
        .args(["-v", "-w", "0.05"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(", held shared by 3 processes"), "{stderr}");
    blames_nobody_gone(&stderr);
    drop(shared);
    wait_for("the shared holders to let go", || {
        kernel_holders(&lock) == 0
    });

    if python() {
        let mut cmd = Command::new("python3");
        cmd.args([LOCKF, lock.to_str().unwrap(), "hold", "0", "0"]);
        let mut posix = Background::spawn(cmd);
        posix.expect_ready();
        let out = lockrun()
            .args(["-n", "--fcntl"])
            .arg(&lock)
            .arg("true")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(75));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                " is held by a POSIX lock of pid {} (",
                posix.pid()
            )),
            "{stderr}"
        );
        blames_nobody_gone(&stderr);
        posix.release();
        assert!(posix.wait_exit(BOUND).success());
    }

    let (_range, _) =
        Background::lockrun_holding(&["--start", "0", "--length", "5"], &lock, script);
    let out = lockrun()
        .args(["-n", "--start", "2", "--length", "1"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(" is held by an OFD lock on bytes 0-4"),
        "{stderr}"
    );
    blames_nobody_gone(&stderr);
    // A live flock(2) holder's record, confirmed by the kernel for a flock
    // contender, says nothing about a byte range.
    let (_whole, whole) = Background::lockrun_holding(&[], &lock, script);
    let out = lockrun()
        .args(["-n", "--start", "2", "--length", "1"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(" is held by an OFD lock on bytes 0-4")
            && !stderr.contains(&format!("pid {}", whole[0])),
        "{stderr}"
    );
    let out = lockrun().arg("-n").arg(&lock).arg("true").output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(" is held by pid {} (sh -c", whole[0])),
        "{stderr}"
    );
}
