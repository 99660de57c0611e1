//! The record and the user's data, and what lockrun says about a holder
//! (issue 12 items 4-6, 8, 17; issue 19 item 6): a command's own writes to
//! its lock file survive the release, a killed writer leaves a record that
//! still parses, a huge argv still gets a record, only a holder the kernel
//! confirms is named, and nothing from a lock file can drive a terminal.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::process::Command;

#[test]
fn the_pid_file_idiom_keeps_the_pid() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = std_lockrun()
        .arg("-v")
        .arg(&lock)
        .args(["sh", "-c", "echo $$ > \"$LOCKRUN_LOCKFILE\"; echo $$"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let pid = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        pid,
        "the pid was lost"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("left") && err.contains("as the command left it"),
        "-v says why there is no release record: {err}"
    );
    // Without -v, nothing is said.
    let out = std_lockrun()
        .arg(&lock)
        .args(["sh", "-c", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn lines_a_command_appends_to_its_lock_file_are_kept() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .arg(&lock)
        .args([
            "sh",
            "-c",
            "for i in $(seq 200); do echo line $i >> \"$LOCKRUN_LOCKFILE\"; done",
        ])
        .assert()
        .success();
    let text = std::fs::read_to_string(&lock).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 201, "{text}");
    assert!(lines[0].starts_with("{\"lockrun\":1"), "{text}");
    assert_eq!(lines[200], "line 200");
}

#[test]
fn a_lock_file_that_got_a_second_name_is_not_written_at_release() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let other = dir.path().join("other-name");
    lockrun()
        .arg(&lock)
        .args(["sh", "-c", "ln \"$LOCKRUN_LOCKFILE\" \"$0\""])
        .arg(&other)
        .assert()
        .success();
    let record = record_json(&other);
    assert!(
        record.get("released_at").is_none(),
        "written through a file with two names: {record}"
    );
}

#[test]
fn a_kill_between_write_and_truncate_leaves_a_record_that_parses() {
    if !needs("strace", "to kill lockrun exactly at its truncate") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // A long record first, so that every later record is shorter than the
    // file and must be truncated to its length.
    let long = "x".repeat(3000);
    lockrun()
        .arg(&lock)
        .args(["sh", "-c", "true", &long])
        .assert()
        .success();
    let works = Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        skip("strace cannot trace here (ptrace not allowed)");
        return;
    }
    // Every truncate, by the command's process (the start record) or by
    // lockrun (the release), is met by SIGKILL.
    let status = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=ftruncate",
            "-e",
            "inject=ftruncate:signal=KILL",
            bin(),
        ])
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap();
    assert!(!status.success(), "strace never killed anything");
    let json = holder_json(&lock);
    assert!(
        json["record"].is_object(),
        "the record no longer parses: {:?}",
        std::fs::read_to_string(&lock)
    );
    // And the file still takes records.
    lockrun().arg(&lock).arg("true").assert().success();
    let record = record_json(&lock);
    assert_eq!(record["command"], serde_json::json!(["true"]));
    assert!(record["released_at"].is_string());
}

#[test]
fn a_huge_command_line_still_gets_a_record() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // Control characters are written \u0001 in JSON: six bytes each.
    let arg = "\u{1}".repeat(1024);
    let mut cmd = lockrun();
    cmd.arg(&lock).arg("true");
    for _ in 0..20 {
        cmd.arg(&arg);
    }
    cmd.assert().success();
    let size = std::fs::metadata(&lock).unwrap().len();
    assert!(size < 64 * 1024, "record of {size} bytes");
    let json = holder_json(&lock);
    assert!(json["record"].is_object(), "no record read back: {json}");
    let command = json["record"]["command"].as_array().unwrap();
    assert_eq!(command[0], "true");
    let shown: String = command.iter().map(|a| a.as_str().unwrap()).collect();
    assert!(shown.contains('…'), "the cut is marked: {command:?}");
    // A long working directory too.
    let deep = (0..40).fold(dir.path().to_owned(), |p, _| p.join("d".repeat(100)));
    std::fs::create_dir_all(&deep).unwrap();
    lockrun()
        .current_dir(&deep)
        .arg(&lock)
        .arg("true")
        .assert()
        .success();
    let record = record_json(&lock);
    assert!(record["cwd"].as_str().unwrap().len() <= 4096, "{record}");
}

/// A record in the lock file that blames pid 1, complete with pid 1's real
/// start time, boot id and host, so that it passes every liveness check.
fn forge_record_blaming_pid_1(lock: &std::path::Path) {
    let stat = std::fs::read_to_string("/proc/1/stat").unwrap();
    let start: u64 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(22 - 3)
        .unwrap()
        .parse()
        .unwrap();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let forged = serde_json::json!({
        "lockrun": 1, "pid": 1, "pid_start": start, "boot_id": boot_id.trim(),
        "lockrun_pid": 1, "host": host, "command": ["forged-blame"],
        "acquired_at": "2026-11-29T02:00:03.120Z"
    });
    std::fs::write(lock, format!("{forged}\n")).unwrap();
}

#[test]
fn conflict_messages_name_only_a_holder_the_kernel_confirms() {
    if !needs("flock", "a holder that writes no record") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    forge_record_blaming_pid_1(&lock);
    let (_flock, _) = flock_holding(&[], &lock);
    for args in [&["-n"][..], &["-v", "-w", "0.2"][..]] {
        let out = lockrun()
            .args(args)
            .arg(&lock)
            .arg("true")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(75));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("pid 1 ") && !err.contains("forged-blame"),
            "blamed the forged holder: {err}"
        );
        assert!(err.contains("lockrun holder"), "{err}");
    }
}

#[test]
fn fd_mode_hint_names_the_file_behind_the_descriptor() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // A holder that left no record: the message points at `holder`.
    let (_holder, _) =
        Background::lockrun_holding(&["--no-record"], &lock, "echo ready; exec sleep 60");
    let out = Command::new("sh")
        .args(["-c", "exec 9<\"$1\"; exec \"$0\" -n 9", bin()])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "fd mode's conflict status (CONTRACT §4)"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("`lockrun holder {}`", lock.display())),
        "{err}"
    );
}

/// Characters that reorder or hide text, and C1/DEL: CONTRACT §6.
const HIDDEN: &[char] = &[
    '\u{7f}',
    '\u{80}',
    '\u{9b}',
    '\u{9f}',
    '\u{61c}',
    '\u{200b}',
    '\u{200d}',
    '\u{200e}',
    '\u{202a}',
    '\u{202e}',
    '\u{2060}',
    '\u{2064}',
    '\u{2066}',
    '\u{2069}',
    '\u{feff}',
    '\u{e0041}',
    '\u{e007f}',
];

#[test]
fn nothing_in_a_record_reaches_the_terminal_raw() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let hostile: String = HIDDEN.iter().flat_map(|&c| ['a', c]).collect();
    let record = serde_json::json!({
        "lockrun": 1, "pid": 999_999_999, "command": [hostile.clone(), "b"],
        "host": hostile.clone(), "user": hostile.clone(),
        "acquired_at": "2026-11-29T02:00:03.120Z"
    });
    std::fs::write(&lock, format!("{record}\n")).unwrap();
    let text = holder_text(&lock);
    for c in HIDDEN {
        assert!(
            !text.contains(*c),
            "U+{:04X} shown raw: {text:?}",
            *c as u32
        );
    }
    let out = lockrun()
        .args(["holder", "--json"])
        .arg(&lock)
        .output()
        .unwrap();
    let json = String::from_utf8(out.stdout).unwrap();
    for c in ['\u{7f}', '\u{80}', '\u{9b}', '\u{9f}'] {
        assert!(
            !json.contains(c),
            "U+{:04X} in --json raw: {json:?}",
            c as u32
        );
    }
    assert!(
        json.contains("\\u009b") && json.contains("\\u007f"),
        "{json}"
    );
    // Still the same strings once parsed.
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["record"]["command"][0], hostile.as_str());
}

#[test]
fn the_live_status_line_fits_the_terminal() {
    if !needs("script", "a pseudo-terminal to test with") || !needs("stty", "to set its width") {
        return;
    }
    let dir = temp_dir();
    // Columns, not characters: each CJK character takes two, so a name cut
    // by characters wrapped the line and left a row of junk per refresh.
    for (name, cols) in [
        ("long-name-".repeat(12), 50),
        ("夜間バックアップ".repeat(6), 100),
    ] {
        let lock = dir.path().join(format!("{name}.lock"));
        let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
        let inner = format!("stty cols {cols}; {} -w 1.5 {} true", bin(), lock.display());
        let out = Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains("\r\x1b[Klockrun: waiting for"), "{shown:?}");
        for piece in shown.split('\r') {
            let visible = piece.replace("\x1b[K", "");
            let visible = visible.trim_end_matches('\n');
            // The final message after the timeout is an ordinary line.
            if visible.starts_with("lockrun: timed out") || visible.is_empty() {
                continue;
            }
            let used = lockrun::display::columns(visible);
            assert!(
                used < cols,
                "{used} columns on a {cols}-column terminal: {visible:?}"
            );
        }
    }
}

/// Issue 32 item 4: on the live line the holder's age moves with the wait
/// (it stood still between askings of who holds the lock, two seconds
/// apart), and its time fields are shown whole or left out, never cut.
#[test]
fn the_live_line_shows_a_moving_age_and_whole_fields() {
    if !needs("script", "a pseudo-terminal to test with") || !needs("stty", "to set its width") {
        return;
    }
    let dir = temp_dir();
    for cols in [80, 200] {
        let lock = dir.path().join(format!("backup-{cols}.lock"));
        let (_holder, _) = Background::lockrun_holding(
            &[],
            &lock,
            "echo ready; exec sleep 60; : a-long-argument-for-the-holders-command",
        );
        let inner = format!("stty cols {cols}; {} -w 3.5 {} true", bin(), lock.display());
        let out = Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        let mut ages = std::collections::BTreeSet::new();
        for piece in shown.split('\r') {
            let visible = piece.replace("\x1b[K", "");
            if !visible.starts_with("lockrun: waiting for") {
                continue;
            }
            if let Some((_, after)) = visible.split_once(" since ") {
                let (age, _) = after
                    .split_once(" ago)")
                    .unwrap_or_else(|| panic!("a time cut short: {visible:?}"));
                ages.insert(age.to_owned());
            }
        }
        if cols == 200 {
            // Refreshed every 250 ms for 2.5 s: about ten ages; a line
            // that moved only when it asked again showed two.
            assert!(ages.len() >= 5, "the age stood still: {ages:?}\n{shown:?}");
        }
    }
}
