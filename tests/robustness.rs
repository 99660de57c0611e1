//! Environments users bring: a lock file replaced while waiting, closed
//! standard streams, a file-size limit, a timeout racing a release.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A waiter whose lock file is replaced while it waits must not run beside
/// the new file's holder: it lets go of the old inode and waits for the new.
#[test]
fn a_lock_file_replaced_while_waiting_is_locked_again() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut old_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.arg("-v")
        .arg(&lock)
        .args(["sh", "-c", "echo got; read x"])
        .stderr(Stdio::piped());
    let mut waiter = Background::spawn(cmd);
    wait_for("the waiter to queue", || kernel_waiters(&lock) == 1);

    let replacement = dir.path().join("new");
    std::fs::write(&replacement, "").unwrap();
    std::fs::rename(&replacement, &lock).unwrap();
    let (mut new_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");

    old_holder.release();
    old_holder.wait_exit(BOUND);
    // The waiter now waits on the new file, behind its holder.
    wait_for("the waiter to queue on the new file", || {
        kernel_waiters(&lock) == 1
    });
    assert_eq!(
        waiter.line(Duration::ZERO),
        None,
        "ran beside the new holder"
    );
    new_holder.release();
    assert_eq!(waiter.line(BOUND).as_deref(), Some("got"));
    waiter.release();
    assert!(waiter.wait_exit(BOUND).success());
}

/// Started with fds 0-2 closed, lockrun's own descriptors must not become
/// stderr: the waiting line would land in its wake pipe (exit 236).
#[test]
fn closed_standard_streams_while_waiting() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let marker = dir.path().join("ran");
    let (mut holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");
    let mut waiter = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec {} -v -w 30 {} sh -c 'echo ran > {}' <&- >&- 2>&-",
            bin(),
            lock.display(),
            marker.display()
        ))
        .spawn()
        .unwrap();
    wait_for("the waiter to queue", || kernel_waiters(&lock) == 1);
    holder.release();
    let status = wait_child(&mut waiter, BOUND);
    assert_eq!(status.code(), Some(0));
    assert!(marker.exists(), "the command did not run");
}

/// `ulimit -f 0` (systemd's LimitFSIZE=0): the record cannot be written,
/// the command still runs, and the user is told once.
#[test]
fn a_file_size_limit_skips_the_record_not_the_command() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -f 0; exec {} {} sh -c 'echo ran'",
            bin(),
            lock.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert_eq!(
        stderr.matches("could not write the holder record").count(),
        1,
        "{stderr}"
    );
}

/// A timeout racing a release: every run ends 0 (it got the lock and ran)
/// or 75 (it did not), never by SIGPIPE or with the lock kept.
#[test]
fn a_timeout_racing_a_release_ends_cleanly() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut ran, mut timed_out) = (0, 0);
    for round in 0..40u64 {
        let (mut holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");
        let mut waiter = std_lockrun()
            .args(["-q", "-w", "0.05"])
            .arg(&lock)
            .arg("true")
            .spawn()
            .unwrap();
        // Under load the waiter may time out before it is seen queued.
        let mut ended = None;
        wait_for("the waiter to queue or end", || {
            ended = ended.or_else(|| waiter.try_wait().ok().flatten());
            ended.is_some() || kernel_waiters(&lock) == 1
        });
        // Released around the waiter's deadline: the race is the point, so
        // this sleep makes it, it does not synchronise anything.
        std::thread::sleep(Duration::from_millis(30 + round % 30));
        holder.release();
        let status = ended.unwrap_or_else(|| wait_child(&mut waiter, BOUND));
        match status.code() {
            Some(0) => ran += 1,
            Some(75) => timed_out += 1,
            other => panic!("round {round}: the waiter ended with {other:?}"),
        }
        holder.wait_exit(BOUND);
        // Whatever it said, it holds nothing now.
        try_lock_now(&lock).success();
    }
    assert_eq!(ran + timed_out, 40);
}

/// The race of a `-w` deadline with a release, made certain: strace holds
/// every `flock(2)` a second on its way back, so the helper thread's
/// blocking lock is granted (the holder lets go while it is queued) before
/// the 0.5 s deadline but reported after it. Exit 75 must then mean that
/// nothing is held: in fd mode the caller's descriptor used to keep the
/// lock that lockrun had just said it did not get (d5f577a: 75, and
/// `flock -n` on the file failed afterwards). A late success may be kept
/// (0, the command ran) or undone (75, lock free); nothing else.
#[test]
fn a_lock_granted_at_the_deadline_is_kept_or_undone_never_held_after_75() {
    if !needs("strace", "to hold lock calls past the deadline")
        || !needs("flock", "to try the lock from outside")
    {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap();
    let marker = dir.path().join("ran");
    let delayed = |script: &str| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .env("B", bin())
            .env("L", &lock)
            .env("M", &marker)
            .stderr(Stdio::null());
        cmd
    };
    // The run form, then fd mode: the shell reports what the caller's
    // descriptor holds once lockrun is done with it.
    let forms = [
        r#"exec strace -f -qq -o /dev/null -e trace=flock -e inject=flock:delay_exit=1000000 \
             "$B" -q -w 0.5 "$L" sh -c ': > "$M"'"#,
        r#"( strace -f -qq -o /dev/null -e trace=flock -e inject=flock:delay_exit=1000000 \
             "$B" -q -w 0.5 9; rc=$?
           if flock -n "$L" true; then echo "rc=$rc free"; else echo "rc=$rc held"; fi ) 9>>"$L""#,
    ];
    for (form, script) in forms.iter().enumerate() {
        let _ = std::fs::remove_file(&marker);
        let (mut holder, _) =
            Background::lockrun_holding(&["--no-record"], &lock, "echo ready; read x");
        let mut waiter = Background::spawn(delayed(script));
        wait_for("the delayed waiter to queue", || kernel_waiters(&lock) == 1);
        holder.release();
        holder.wait_exit(BOUND);
        let status = waiter.wait_exit(BOUND);
        if form == 0 {
            match status.code() {
                Some(0) => assert!(marker.exists(), "0 but the command did not run"),
                Some(75) => assert!(!marker.exists(), "75 but the command ran"),
                other => panic!("run form ended with {other:?}"),
            }
        } else {
            let said = waiter.line(BOUND).unwrap_or_default();
            assert!(
                said == "rc=0 held" || said == "rc=75 free",
                "fd mode: {said} (75 must mean the descriptor holds nothing)"
            );
        }
        try_lock_now(&lock).success();
    }
}

/// A machine with more locks than fit in one page of /proc/locks, some of
/// them coming and going: the kernel's table then takes several read(2)
/// calls and entries shift between them, showing one lock twice or not at
/// all. Three shared holders are three, every time (CI saw "shared by 4
/// processes" at 47b42a5; a churn like this one gave 73 wrong of 300).
#[test]
fn a_busy_lock_table_counts_each_holder_once() {
    if !needs("python3", "a process churning locks beside the test") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let crowd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/churn.py"
    ))
    .arg(crowd.path())
    .args(["150", "20"]);
    // The holders first: new locks go in at the head of the kernel's list,
    // so the churn's then come before them, and theirs are past the first
    // page, where the shifting shows.
    let _shared: Vec<_> = (0..3)
        .map(|_| Background::lockrun_holding(&["-s"], &lock, "echo ready; read x"))
        .collect();
    let mut churn = Background::spawn(cmd);
    churn.expect_ready();
    assert!(
        std::fs::read("/proc/locks").unwrap().len() > 4096,
        "the table fits in a page: nothing here is torn"
    );
    let mut wrong = Vec::new();
    for _ in 0..200 {
        let out = lockrun().arg("-n").arg(&lock).arg("true").output().unwrap();
        assert_eq!(out.status.code(), Some(75));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !stderr.contains(" is held shared by 3 processes ") {
            wrong.push(stderr);
        }
    }
    churn.release();
    assert!(
        wrong.is_empty(),
        "{} of 200 wrong, e.g. {}",
        wrong.len(),
        wrong[0]
    );
}
