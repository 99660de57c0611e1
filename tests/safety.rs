//! Hostile paths and bad input: every refusal is clear, has the contract's
//! exit status, and leaves every file involved exactly as it was
//! (issue: hostile paths).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use predicates::prelude::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a file is and holds, to compare before and after.
#[derive(Debug, PartialEq)]
enum Snapshot {
    Missing,
    File(Vec<u8>, u32, u64),
    Link(PathBuf),
    Other(String, u32),
}

fn snapshot(path: &Path) -> Snapshot {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Snapshot::Missing;
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        Snapshot::Link(std::fs::read_link(path).unwrap())
    } else if ft.is_file() {
        Snapshot::File(std::fs::read(path).unwrap(), meta.mode(), meta.nlink())
    } else {
        Snapshot::Other(format!("{ft:?}"), meta.mode())
    }
}

fn unchanged(paths: &[&Path], action: impl FnOnce()) {
    let before: Vec<_> = paths.iter().map(|p| snapshot(p)).collect();
    action();
    let after: Vec<_> = paths.iter().map(|p| snapshot(p)).collect();
    assert_eq!(before, after, "files changed: {paths:?}");
}

#[test]
fn a_symlink_as_lock_file_is_refused_and_its_target_untouched() {
    let dir = temp_dir();
    let target = dir.path().join("precious");
    std::fs::write(&target, "do not touch\n").unwrap();
    let link = dir.path().join("evil.lock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    unchanged(&[&target, &link], || {
        lockrun()
            .arg(&link)
            .arg("true")
            .assert()
            .code(77)
            .stderr(predicate::str::starts_with("lockrun: refusing"))
            .stderr(predicate::str::contains(link.to_str().unwrap()))
            .stderr(predicate::str::contains(target.to_str().unwrap()));
    });
}

#[test]
fn a_dangling_symlink_never_creates_its_target() {
    let dir = temp_dir();
    let target = dir.path().join("would-be-created");
    let link = dir.path().join("dangling.lock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    unchanged(&[&target, &link], || {
        lockrun().arg(&link).arg("true").assert().code(77);
        lockrun()
            .args(["-s", "--no-record"])
            .arg(&link)
            .arg("true")
            .assert()
            .code(77);
    });
    assert!(!target.exists());
}

#[test]
fn symlinks_in_directories_above_are_fine() {
    let dir = temp_dir();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let linked = dir.path().join("linked");
    std::os::unix::fs::symlink(&real, &linked).unwrap();
    lockrun()
        .arg(linked.join("x.lock"))
        .arg("true")
        .assert()
        .success();
    assert!(real.join("x.lock").is_file());
}

#[test]
fn a_fifo_is_refused_without_hanging() {
    let dir = temp_dir();
    let fifo = mkfifo(&dir.path().join("fifo.lock"));
    unchanged(&[&fifo], || {
        lockrun()
            .arg(&fifo)
            .arg("true")
            .assert()
            .code(77)
            .stderr(predicate::str::contains("it is a FIFO"));
    });
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn a_socket_is_refused() {
    let dir = temp_dir();
    let socket = dir.path().join("sock.lock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    unchanged(&[&socket], || {
        lockrun()
            .arg(&socket)
            .arg("true")
            .assert()
            .code(77)
            .stderr(predicate::str::contains("it is a socket"));
    });
}

#[test]
fn a_device_is_refused() {
    let null = Path::new("/dev/null");
    unchanged(&[null], || {
        lockrun()
            .arg(null)
            .arg("true")
            .assert()
            .code(77)
            .stderr(predicate::str::contains("it is a character device"));
    });
    assert!(
        std::fs::metadata(null)
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[test]
fn a_directory_is_locked_but_never_written() {
    let dir = temp_dir();
    let locked = dir.path().join("d");
    std::fs::create_dir(&locked).unwrap();
    lockrun()
        .arg("-v")
        .arg(&locked)
        .arg("true")
        .assert()
        .success()
        .stderr(predicate::str::contains("the lock is a directory"));
    assert_eq!(std::fs::read_dir(&locked).unwrap().count(), 0);
}

#[test]
fn a_file_with_two_names_is_locked_but_never_written() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap();
    let other_name = dir.path().join("other-name");
    std::fs::hard_link(&lock, &other_name).unwrap();
    unchanged(&[&lock, &other_name], || {
        lockrun()
            .arg("-v")
            .arg(&lock)
            .arg("true")
            .assert()
            .success()
            .stderr(predicate::str::contains("more than one hard link"));
    });
    let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
    try_lock_now(&other_name).code(75);
}

#[test]
fn a_read_only_lock_file_still_locks_without_a_record() {
    if !can_drop_privileges() {
        return;
    }
    let dir = temp_dir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap(); // root's, 0644: read-only for nobody
    let as_nobody = |script: &str| {
        let mut cmd = lockrun_as_nobody();
        cmd.arg("-v").arg(&lock).args(["sh", "-c", script]);
        cmd
    };
    unchanged(&[&lock], || {
        let out = as_nobody("true").output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be opened for writing"), "{err}");
        let holder = Background::spawn_quiet(as_nobody("echo ready; exec sleep 60"));
        holder.expect_ready();
        try_lock_now(&lock).code(75);
    });
}

#[test]
fn a_read_only_file_system_still_locks_without_a_record() {
    let Some(mount) = TmpfsMount::new("size=64k") else {
        return;
    };
    let lock = mount.path().join("x.lock");
    std::fs::write(&lock, "").unwrap();
    let remount = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(mount.path())
        .status()
        .unwrap();
    assert!(remount.success());
    unchanged(&[&lock], || {
        lockrun()
            .arg("-v")
            .arg(&lock)
            .arg("true")
            .assert()
            .success()
            .stderr(predicate::str::contains("read-only"));
        let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
        try_lock_now(&lock).code(75);
    });
    // A missing lock file cannot be created there: 66, and nothing made.
    let missing = mount.path().join("new.lock");
    lockrun()
        .arg(&missing)
        .arg("true")
        .assert()
        .code(66)
        .stderr(predicate::str::contains("Read-only file system"));
    assert!(!missing.exists());
}

#[test]
fn a_full_disk_leaves_no_half_record_and_the_command_still_runs() {
    let Some(mount) = TmpfsMount::new("size=16k") else {
        return;
    };
    let lock = mount.path().join("x.lock");
    std::fs::write(&lock, "").unwrap();
    // Fill the file system to the last block.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4096", "count=64"])
        .arg(format!("of={}", mount.path().join("fill").display()))
        .stderr(std::process::Stdio::null())
        .status();
    for exec_mode in [false, true] {
        let mut cmd = lockrun();
        if exec_mode {
            cmd.arg("-F");
        }
        let out = cmd
            .arg(&lock)
            .args(["sh", "-c", "echo ran; exit 7"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(7), "the command's status");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.matches("could not write the holder record").count(),
            1,
            "say it once: {err}"
        );
        assert!(err.contains("No space left on device"), "{err}");
        assert_eq!(
            std::fs::read(&lock).unwrap(),
            b"",
            "a partial record was left"
        );
    }
}

#[test]
fn a_name_too_long_exits_66() {
    let dir = temp_dir();
    let lock = dir.path().join("x".repeat(300));
    lockrun()
        .arg(&lock)
        .arg("true")
        .assert()
        .code(66)
        // The libc's words for ENAMETOOLONG: glibc's, then musl's.
        .stderr(
            predicate::str::contains("File name too long")
                .or(predicate::str::contains("Filename too long")),
        );
}

#[test]
fn refusals_in_inspection_damage_nothing_either() {
    let dir = temp_dir();
    let fifo = mkfifo(&dir.path().join("fifo.lock"));
    unchanged(&[&fifo], || {
        // holder/check read, never open for writing, and never block on a FIFO.
        lockrun().arg("holder").arg(&fifo).assert().success();
        lockrun().arg("check").arg(&fifo).assert().code(1);
    });
}

fn mkfifo(path: &Path) -> PathBuf {
    let made = Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {path:?}");
    path.to_owned()
}

/// A small tmpfs mounted for one test (root only), unmounted on drop.
struct TmpfsMount {
    dir: tempfile::TempDir,
}

impl TmpfsMount {
    fn new(options: &str) -> Option<TmpfsMount> {
        let dir = temp_dir();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            skip("cannot mount a tmpfs here (needs root)");
            return None;
        }
        Some(TmpfsMount { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Issue 26 item 11 (CONTRACT §13): another user's lock file in a sticky,
/// world-writable directory that this user may not read: 66, and the
/// message names the owner, the mode and fs.protected_regular. Root, whom
/// fs.protected_regular refuses where flock(1) opens with O_CREAT, still
/// locks nobody's file there (lockrun opens an existing file without it).
#[test]
fn another_users_lock_file_in_a_sticky_directory_names_the_owner_and_protected_regular() {
    if !can_drop_privileges() {
        return;
    }
    let dir = temp_dir();
    let sticky = dir.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let roots = sticky.join("root.lock");
    std::fs::write(&roots, "").unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = lockrun_as_nobody()
        .arg(&roots)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for words in [
        "root (uid 0)",
        "mode 0600",
        "fs.protected_regular",
        "chmod a+r",
    ] {
        assert!(err.contains(words), "{words:?} missing: {err}");
    }
    // nobody's own file there: root locks it and runs the command.
    let nobodys = sticky.join("nobody.lock");
    lockrun_as_nobody()
        .arg(&nobodys)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(std::fs::metadata(&nobodys).unwrap().uid(), 65534);
    lockrun()
        .arg(&nobodys)
        .args(["echo", "ran"])
        .assert()
        .success()
        .stdout("ran\n");
}

/// Issue 26 item 11: NFSv4 refuses an exclusive flock(2) on a read-only
/// descriptor (EBADF, or EIO); flock(1) reopens read-write and retries,
/// and so must lockrun. No NFS server can run here, so a preloaded shim
/// makes flock(2) answer as NFSv4 does: EBADF for LOCK_EX on a read-only
/// descriptor. Only the dynamically linked (glibc) build can be shimmed:
/// the static musl build ignores LD_PRELOAD, and runs this test as a no-op.
#[test]
fn an_exclusive_lock_refused_on_a_read_only_descriptor_reopens_read_write() {
    if cfg!(target_env = "musl") || !needs("cc", "a preloaded flock(2) shim") {
        return;
    }
    let dir = temp_dir();
    let shim = build_c(
        dir.path(),
        "nfs_flock.so",
        r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
int flock(int fd, int op) {
    static int (*real)(int, int);
    if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    int fl = fcntl(fd, F_GETFL);
    if ((op & LOCK_EX) && fl >= 0 && (fl & O_ACCMODE) == O_RDONLY) { errno = EBADF; return -1; }
    return real(fd, op);
}
"#,
        &["-shared", "-fPIC"],
        &["-ldl"],
    );
    let lock = lock_in(&dir);
    let run = |args: &[&str]| {
        let mut cmd = Command::new(bin());
        cmd.env("LD_PRELOAD", &shim).args(args).arg(&lock);
        cmd.args(["sh", "-c", "echo ran; exec 2>/dev/null; flock -n \"$LOCKRUN_LOCKFILE\" true; echo \"flock -n: $?\""]);
        cmd.output().unwrap()
    };
    // The shim works: flock(1) under it fails the way NFS makes it fail
    // ... unless it retries read-write too, as util-linux's does.
    for args in [&[][..], &["-n"], &["-w", "5"]] {
        let out = run(args);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ran\nflock -n: 1\n",
            "lockrun {args:?}: {out:?}"
        );
        assert!(out.status.success(), "{out:?}");
    }
    // The record was still written.
    assert_eq!(record_json(&lock)["exit"], serde_json::json!({"code": 0}));
}
