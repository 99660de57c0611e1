//! `lockrun list` (CONTRACT §16, issue 31 item 1): every lock on the host,
//! or the lock files given, one line (or JSON object) each; never takes a
//! lock.
#![cfg(unix)]

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const LOCKF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/lockf.py");

fn list(args: &[&str]) -> (Vec<String>, Vec<serde_json::Value>) {
    let run = |json: bool| {
        let mut cmd = lockrun();
        cmd.arg("list");
        if json {
            cmd.arg("--json");
        }
        let out = cmd.args(args).output().expect("run list");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run(false).lines().map(str::to_owned).collect();
    let json = run(true)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (text, json)
}

fn row_of<'a>(rows: &'a [String], path: &Path) -> &'a str {
    let prefix = format!("{}: ", path.display());
    rows.iter()
        .find(|r| r.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no row for {}: {rows:#?}", path.display()))
}

fn object_of<'a>(objects: &'a [serde_json::Value], path: &Path) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["path"] == path.display().to_string())
        .unwrap_or_else(|| panic!("no object for {}", path.display()))
}

/// Without arguments: a lockrun holder with a waiter, a flock(1) holder,
/// a POSIX (lockf) holder and an OFD (`--fcntl`) holder are all listed by
/// path, each with its kind, and the waiter is counted.
#[test]
fn every_kind_of_lock_on_the_host_is_listed_by_path() {
    if !needs("python3", "a POSIX lock holder (tests/support/lockf.py)")
        || !needs("flock", "util-linux flock(1)")
    {
        return;
    }
    let dir = temp_dir();
    let ours = dir.path().join("ours.lock");
    let theirs = dir.path().join("flock.lock");
    let posix = dir.path().join("posix.lock");
    let ofd = dir.path().join("ofd.lock");
    let (mut holder, _) = Background::lockrun_holding(&[], &ours, "echo ready; read x");
    let mut waiter = Background::spawn({
        let mut cmd = std_lockrun();
        cmd.args(["-w", "60"]).arg(&ours).arg("true");
        cmd
    });
    wait_for("the waiter in the kernel's queue", || {
        kernel_waiters(&ours) == 1
    });
    let (_flock, _) = flock_holding(&[], &theirs);
    std::fs::write(&posix, b"").expect("create the POSIX lock file");
    let mut lockf = Background::spawn({
        let mut cmd = Command::new("python3");
        cmd.args([LOCKF, &posix.display().to_string(), "hold", "0", "0"]);
        cmd
    });
    lockf.expect_ready();
    let (mut fcntl, _) = Background::lockrun_holding(&["--fcntl"], &ofd, "echo ready; read x");

    let (rows, objects) = list(&[]);
    let row = row_of(&rows, &ours);
    assert!(
        row.contains("held (exclusive)") && row.contains("[1 waiting]"),
        "{row}"
    );
    assert!(row_of(&rows, &theirs).contains("held (exclusive)"));
    assert!(row_of(&rows, &posix).contains("POSIX lock"), "{rows:#?}");
    assert!(row_of(&rows, &ofd).contains("OFD lock"), "{rows:#?}");
    // The JSON is holder --json's, one object per line, with the waiters.
    let ours_json = object_of(&objects, &ours);
    assert_eq!(ours_json["state"], "held");
    assert_eq!(ours_json["waiting"], 1);
    assert_eq!(
        ours_json["record"]["pid"],
        holder_json(&ours)["record"]["pid"]
    );
    // Sorted by path.
    let paths: Vec<String> = objects.iter().map(|o| o["path"].to_string()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    // list took nothing: the waiter still waits, and gets the lock next.
    assert_eq!(kernel_waiters(&ours), 1);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    assert!(waiter.wait_exit(BOUND).success());
    lockf.release();
    fcntl.release();
    let _ = fcntl.wait_exit(BOUND);
}

/// With a directory: its regular files (not those of its subdirectories),
/// free ones with their last holder, held ones with their holder.
#[test]
fn a_directory_lists_its_lock_files_free_and_held() {
    let dir = temp_dir();
    let done = dir.path().join("done.lock");
    let busy = dir.path().join("busy.lock");
    lockrun()
        .arg(&done)
        .args(["sh", "-c", "exit 3"])
        .assert()
        .code(3);
    let (mut holder, _) = Background::lockrun_holding(&[], &busy, "echo ready; read x");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("a subdirectory");
    std::fs::write(sub.join("deep.lock"), b"").expect("a file below");

    let (rows, objects) = list(&[&dir.path().display().to_string()]);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let free = row_of(&rows, &done);
    assert!(
        free.contains("free; last held by") && free.contains("exit 3"),
        "{free}"
    );
    assert!(row_of(&rows, &busy).contains("held (exclusive)"));
    assert_eq!(object_of(&objects, &done)["record"]["exit"]["code"], 3);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

/// A directory the caller cannot read is a row that says `unknown` and
/// why, not an error that hides the other rows.
#[test]
fn an_unreadable_directory_is_an_unknown_row_with_the_reason() {
    if !can_drop_privileges() {
        return;
    }
    let dir = temp_dir();
    let open = dir.path().join("open");
    let closed = dir.path().join("closed");
    for d in [&open, &closed] {
        std::fs::create_dir(d).expect("a directory");
    }
    std::fs::write(open.join("a.lock"), b"").expect("a lock file");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let out = lockrun_as_nobody()
        .arg("list")
        .arg(&open)
        .arg(&closed)
        .output()
        .expect("run list as nobody");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{}: free", open.join("a.lock").display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}: unknown", closed.display()))
            && text.contains("cannot read the directory"),
        "{text}"
    );
}

/// A row says since when, and when `--max-time` stops the command (§16).
#[test]
fn a_row_says_since_when_and_the_max_time_deadline() {
    let dir = temp_dir();
    let lock = dir.path().join("timed.lock");
    let (mut holder, _) =
        Background::lockrun_holding(&["--max-time", "1h"], &lock, "echo ready; read x");
    let (rows, _) = list(&[&lock.display().to_string()]);
    let row = row_of(&rows, &lock);
    assert!(
        row.contains(", since ") && row.contains("(--max-time 1h)"),
        "{row}"
    );
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

/// A holder in a mount namespace of its own: its descriptor's path names
/// no file here (or another one), so the row is `(unknown path)` and held,
/// never the file of that name here reported free (found by review: the
/// row said "free").
#[test]
fn a_holder_in_another_mount_namespace_is_held_by_device_and_inode() {
    if !rustix::process::geteuid().is_root() || !needs("unshare", "util-linux unshare(1)") {
        return;
    }
    let dir = temp_dir();
    let shadow = dir.path().join("shadow");
    std::fs::create_dir(&shadow).expect("a mount point");
    let lock = shadow.join("job.lock");
    // The same name here, free: what a wrong row would report on.
    std::fs::write(&lock, b"").expect("the host's file of that name");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c"]).arg(format!(
        "mount -t tmpfs none '{d}' && exec '{bin}' '{l}' -- sh -c 'echo ready; read x'",
        d = shadow.display(),
        bin = bin(),
        l = lock.display()
    ));
    let mut holder = Background::spawn(cmd);
    holder.expect_ready();
    let (rows, objects) = list(&[]);
    assert!(
        !rows
            .iter()
            .any(|r| r.starts_with(&format!("{}: ", lock.display()))),
        "{rows:#?}"
    );
    let nameless: Vec<&serde_json::Value> = objects
        .iter()
        .filter(|o| {
            o["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("(unknown path)"))
                && o["holders"].as_array().is_some_and(|h| {
                    h.iter()
                        .any(|h| h["command"].to_string().contains("job.lock"))
                })
        })
        .collect();
    assert_eq!(nameless.len(), 1, "{rows:#?}");
    assert_eq!(nameless[0]["state"], "held");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}
