//! `lockrun list` (CONTRACT §16, issue 31 item 1): every lock on the host,
//! or the lock files given, one line (or JSON object) each; never takes a
//! lock.
#![cfg(unix)]

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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

/// A row's cells: the columns are two or more spaces apart (a path with
/// two spaces in it would confuse this; the tests' paths have none).
fn cells(row: &str) -> Vec<&str> {
    row.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

fn row_of<'a>(rows: &'a [String], path: &Path) -> &'a str {
    let path = path.display().to_string();
    rows.iter()
        .find(|r| cells(r).first() == Some(&path.as_str()))
        .unwrap_or_else(|| panic!("no row for {path}: {rows:#?}"))
}

/// STATE, KIND, WAITERS of a row (the columns after PATH).
fn columns_of<'a>(rows: &'a [String], path: &Path) -> (&'a str, &'a str, &'a str) {
    let cells = cells(row_of(rows, path));
    assert!(cells.len() >= 5, "{cells:?}");
    (cells[1], cells[2], cells[3])
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
    assert_eq!(
        columns_of(&rows, &ours),
        ("held", "flock exclusive", "1"),
        "{rows:#?}"
    );
    assert_eq!(columns_of(&rows, &theirs), ("held", "flock exclusive", "0"));
    assert_eq!(columns_of(&rows, &posix), ("held", "POSIX exclusive", "0"));
    assert_eq!(columns_of(&rows, &ofd), ("held", "OFD exclusive", "0"));
    // The JSON is holder --json's, one object per line, with the waiters.
    let ours_json = object_of(&objects, &ours);
    assert_eq!(ours_json["state"], "held");
    assert_eq!(ours_json["waiters"], 1);
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
    assert_eq!(kernel_waiters_settled(&ours), 1);
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
    // A header and the two files.
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert_eq!(cells(&rows[0])[..4], ["PATH", "STATE", "KIND", "WAITERS"]);
    let free = row_of(&rows, &done);
    assert!(
        free.contains("last held by") && free.contains("exit 3"),
        "{free}"
    );
    assert_eq!(columns_of(&rows, &done).0, "free");
    assert_eq!(columns_of(&rows, &busy).0, "held");
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
    let listed = |all: bool| {
        let mut cmd = lockrun_as_nobody();
        cmd.arg("list");
        if all {
            cmd.arg("--all");
        }
        let out = cmd
            .arg(&open)
            .arg(&closed)
            .output()
            .expect("run list as nobody");
        assert!(out.status.success(), "{out:?}");
        let rows: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        rows
    };
    let rows = listed(true);
    assert_eq!(columns_of(&rows, &open.join("a.lock")).0, "free");
    let (state, ..) = columns_of(&rows, &closed);
    assert_eq!(state, "unknown");
    assert!(
        row_of(&rows, &closed).contains("cannot read the directory: Permission denied"),
        "{rows:#?}"
    );
    // Without --all a free file with no record is no lock to show; the
    // directory that cannot be read still is.
    let rows = listed(false);
    assert!(!rows.iter().any(|r| r.contains("a.lock")), "{rows:#?}");
    assert_eq!(columns_of(&rows, &closed).0, "unknown");
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
    let here = lock.display().to_string();
    assert!(
        !rows
            .iter()
            .any(|r| cells(r).first() == Some(&here.as_str())),
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
                        // This test's own lock: another run of it (another
                        // checkout's tests) may hold one of the same name.
                        .any(|h| h["command"].to_string().contains(&here))
                })
        })
        .collect();
    assert_eq!(nameless.len(), 1, "{rows:#?}");
    assert_eq!(nameless[0]["state"], "held");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

/// One process holding `n` flock(2) locks on files of its own (one
/// descriptor each), until it is released: the crowd beside our rows.
fn crowd(dir: &Path, n: usize) -> Option<Background> {
    const HOLD: &str = r#"
import fcntl, os, resource, sys
n, d = int(sys.argv[1]), sys.argv[2]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < n + 64:
    print("too few descriptors: %d" % hard, flush=True)
    sys.exit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds = []
for i in range(n):
    fd = os.open(os.path.join(d, "f%05d" % i), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("ready", flush=True)
sys.stdin.readline()
"#;
    std::fs::create_dir_all(dir).expect("the crowd's directory");
    let mut cmd = Command::new("python3");
    cmd.args(["-c", HOLD, &n.to_string(), &dir.display().to_string()]);
    let crowd = Background::spawn(cmd);
    match crowd.line(Duration::from_secs(120)).as_deref() {
        Some("ready") => Some(crowd),
        other => {
            skip(&format!(
                "a process cannot hold {n} locks here ({other:?}; ulimit -n)"
            ));
            None
        }
    }
}

/// Every field of `list --json`'s schema (docs/GUIDE.md, "JSON"), with its
/// type: `holder --json`'s, plus `waiters`.
fn check_schema(object: &serde_json::Value) {
    let line = object.to_string();
    assert!(object["path"].is_string(), "{line}");
    assert!(
        ["held", "free", "unknown"].contains(&object["state"].as_str().unwrap_or("")),
        "{line}"
    );
    for holder in object["holders"].as_array().expect("holders: an array") {
        assert!(holder["pid"].is_i64(), "{line}");
        assert!(
            ["exclusive", "shared"].contains(&holder["mode"].as_str().unwrap_or("")),
            "{line}"
        );
        assert!(
            holder["command"].is_array() || holder["command"].is_null(),
            "{line}"
        );
        assert!(
            holder["locked_by"].is_i64() || holder["locked_by"].is_null(),
            "{line}"
        );
        assert!(
            ["flock", "ofd", "posix"].contains(&holder["kind"].as_str().unwrap_or("")),
            "{line}"
        );
        assert!(holder["start"].is_u64(), "{line}");
        assert!(holder["end"].is_u64() || holder["end"].is_null(), "{line}");
    }
    assert!(
        object["record"].is_object() || object["record"].is_null(),
        "{line}"
    );
    assert!(
        object["record_holder_alive"].is_boolean() || object["record_holder_alive"].is_null(),
        "{line}"
    );
    assert!(
        object["reason"].is_string() || object["reason"].is_null(),
        "{line}"
    );
    assert!(object["exists"].is_boolean(), "{line}");
    assert!(object["waiters"].is_u64(), "{line}");
    assert_eq!(object["waiters"], object["waiting"], "{line}");
}

/// With 0, 1 and 10,000 other locks on the host (one process holding
/// them all), every one of our rows is there and right: a lockrun holder
/// with two waiters, flock(1), a POSIX and an OFD holder, a process that
/// inherited a lock from a flock(1) that is gone, and a 4-slot lock with
/// 2 slots held; and each of the crowd's locks is a held row. What `list`
/// answers from one reading of the table and one walk of the descriptors
/// is what each row's own inspection answered (issue 34 item 4).
#[test]
fn every_row_is_right_beside_0_1_and_10000_other_locks() {
    if !needs("python3", "a POSIX lock holder and a crowd of locks")
        || !needs("flock", "util-linux flock(1)")
    {
        return;
    }
    let dir = temp_dir();
    let ours = dir.path().join("ours.lock");
    let theirs = dir.path().join("flock.lock");
    let posix = dir.path().join("posix.lock");
    let ofd = dir.path().join("ofd.lock");
    let orphaned = dir.path().join("orphaned.lock");
    let slotted = dir.path().join("slotted.lock");
    let (mut holder, _) = Background::lockrun_holding(&[], &ours, "echo ready; read x");
    let mut waiters: Vec<Background> = (0..2)
        .map(|_| {
            let mut cmd = std_lockrun();
            cmd.args(["-w", "600"]).arg(&ours).arg("true");
            Background::spawn(cmd)
        })
        .collect();
    wait_for("two waiters in the kernel's queue", || {
        kernel_waiters(&ours) == 2
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
    let (mut gone, orphan) = flock_holding(&[], &orphaned);
    wait_exec(orphan, "sleep");
    kill(gone.pid(), "KILL");
    gone.wait_exit(BOUND);
    let mut slots: Vec<Background> = (0..2)
        .map(|_| Background::lockrun_holding(&["--slots", "4"], &slotted, "echo ready; read x").0)
        .collect();

    for n in [0, 1, 10_000] {
        let many = dir.path().join(format!("crowd{n}"));
        let Some(mut crowd) = crowd(&many, n) else {
            return;
        };
        let (rows, objects) = list(&[]);
        assert_eq!(
            columns_of(&rows, &ours),
            ("held", "flock exclusive", "2"),
            "beside {n}"
        );
        assert_eq!(columns_of(&rows, &theirs), ("held", "flock exclusive", "0"));
        assert_eq!(columns_of(&rows, &posix), ("held", "POSIX exclusive", "0"));
        assert_eq!(columns_of(&rows, &ofd), ("held", "OFD exclusive", "0"));
        let (state, ..) = columns_of(&rows, &orphaned);
        assert_eq!(state, "held");
        assert!(
            row_of(&rows, &orphaned).contains(&format!(
                "pid {orphan} `sleep 60`, which inherited it from pid {}",
                gone.pid()
            )),
            "{}",
            row_of(&rows, &orphaned)
        );
        // The slot files are locks of their own; the queue file itself is
        // not in the kernel's table (nobody waits).
        for k in 1..=2 {
            let slot = dir.path().join(format!("slotted.lock.slot{k}"));
            assert_eq!(columns_of(&rows, &slot).0, "held", "slot {k} beside {n}");
        }
        let crowd_prefix = format!("{}/", many.display());
        let crowd_rows: Vec<&String> = rows
            .iter()
            .filter(|r| r.starts_with(&crowd_prefix))
            .collect();
        assert_eq!(crowd_rows.len(), n, "the crowd's rows beside {n}");
        assert!(crowd_rows.iter().all(|r| cells(r)[1] == "held"));
        // The JSON, line by line, against the documented schema.
        for object in &objects {
            check_schema(object);
        }
        let ours_json = object_of(&objects, &ours);
        assert_eq!(ours_json["state"], "held");
        assert_eq!(ours_json["waiters"], 2);
        assert_eq!(object_of(&objects, &orphaned)["holders"][0]["pid"], orphan);
        assert_eq!(
            objects
                .iter()
                .filter(|o| o["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(&crowd_prefix))
                    && o["state"] == "held")
                .count(),
            n
        );
        // Sorted by path.
        let paths: Vec<String> = objects.iter().map(|o| o["path"].to_string()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        // And given the directory: the slots lock as one row, 2 of 4 held.
        let (rows, _) = list(&[&dir.path().display().to_string()]);
        let slots_row = cells(row_of(&rows, &slotted));
        assert_eq!(slots_row[1..3], ["held", "slots"], "{slots_row:?}");
        assert!(slots_row.contains(&"2 of 4 held"), "{slots_row:?}");
        crowd.release();
        let _ = crowd.wait_exit(BOUND);
    }
    assert_eq!(kernel_waiters_settled(&ours), 2, "list took nothing");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    for mut waiter in waiters.drain(..) {
        assert!(waiter.wait_exit(BOUND).success());
    }
    for mut slot in slots.drain(..) {
        slot.release();
        let _ = slot.wait_exit(BOUND);
    }
    lockf.release();
    fcntl.release();
    let _ = fcntl.wait_exit(BOUND);
    kill(orphan, "KILL");
}

/// `list` under a pseudo-terminal (script(1)) with COLUMNS.
fn list_on_a_terminal(env: &[(&str, &str)], args: &str) -> String {
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c"])
        .arg(format!("{} list {args}", bin()))
        .arg("/dev/null");
    cmd.env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run script(1)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

/// On a terminal the rows are cut to COLUMNS; piped, never. Colour only
/// when asked: `--color always` (NO_COLOR or not), `--color auto` on a
/// terminal unless NO_COLOR; never by default (issue 31).
#[test]
fn rows_are_cut_to_the_terminal_and_coloured_only_when_asked() {
    if !needs("script", "a pseudo-terminal (bsdutils script)") {
        return;
    }
    let dir = temp_dir();
    let lock = dir
        .path()
        .join("a-lock-file-with-a-long-name-to-be-cut.lock");
    let (mut holder, _) = Background::lockrun_holding(
        &[],
        &lock,
        "echo ready; read x # and a command line long enough to pass any width",
    );
    let d = dir.path().display().to_string();
    let held = "\x1b[33mheld\x1b[0m";
    let on_tty = list_on_a_terminal(&[("COLUMNS", "60")], &d);
    let lines: Vec<&str> = on_tty.lines().collect();
    assert_eq!(lines.len(), 2, "{on_tty}");
    for line in &lines {
        assert!(line.chars().count() <= 60, "longer than 60: {line:?}");
    }
    assert!(lines[1].ends_with('…'), "{on_tty}");
    assert!(!on_tty.contains('\x1b'), "coloured unasked: {on_tty:?}");
    // Piped: whole rows, whatever COLUMNS says.
    let piped = lockrun()
        .env("COLUMNS", "60")
        .args(["list", &d])
        .output()
        .expect("run list");
    let piped = String::from_utf8_lossy(&piped.stdout).into_owned();
    assert!(piped.lines().any(|l| l.chars().count() > 60), "{piped}");
    assert!(piped.contains("pass any width"), "{piped}");
    assert!(!piped.contains('\x1b'), "{piped:?}");
    let auto = list_on_a_terminal(&[("COLUMNS", "200")], &format!("--color auto {d}"));
    assert!(auto.contains(held), "{auto:?}");
    let no_color = list_on_a_terminal(
        &[("COLUMNS", "200"), ("NO_COLOR", "1")],
        &format!("--color=auto {d}"),
    );
    assert!(!no_color.contains('\x1b'), "{no_color:?}");
    let always = lockrun()
        .env("NO_COLOR", "1")
        .args(["list", "--color", "always", &d])
        .output()
        .expect("run list");
    let always = String::from_utf8_lossy(&always.stdout).into_owned();
    assert!(always.contains(held), "{always:?}");
    // --json: never cut, never coloured.
    let json = list_on_a_terminal(&[("COLUMNS", "60")], &format!("--json --color always {d}"));
    let object: serde_json::Value = serde_json::from_str(json.trim()).expect("one object");
    assert_eq!(object["state"], "held");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}
