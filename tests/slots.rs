//! `--slots N` across real processes: at most N at once and N at once,
//! unique slot numbers, agreement on N, `-n`, kill -9, a crowd of 200,
//! no CPU while waiting, first come first served, the live status line,
//! slot files and LOCKFILE replaced while waiting, and what holder/check
//! say.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::meter::{meter_run, read_meter};
use common::*;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

#[test]
fn three_slots_run_seven_jobs_three_at_a_time_with_unique_slots() {
    let dir = temp_dir();
    meter_run(std_lockrun, &["--slots", "3"], dir.path().join("L"), 7, 3).unwrap();
}

/// The control: the meter test fails when the limit is broken (more
/// slots than the limit it checks).
#[test]
fn the_meter_catches_a_broken_limit() {
    let dir = temp_dir();
    let too_many =
        meter_run(std_lockrun, &["--slots", "7"], dir.path().join("L"), 7, 3).unwrap_err();
    // Whichever the meter sees first: a fourth job, or a slot number past 3
    // (a job may get slot 4 while only three run).
    assert!(
        too_many.contains("more than 3") || too_many.contains("out of 1..=3"),
        "{too_many}"
    );
}

#[test]
fn a_crowd_of_200_through_4_slots_never_exceeds_4() {
    let dir = temp_dir();
    let lock = dir.path().join("L");
    let meter = dir.path().join("meter");
    let script = r#"echo "start $$ $LOCKRUN_SLOT" >> "$1"; echo "end $$ $LOCKRUN_SLOT" >> "$1""#;
    let mut crowd: Vec<Child> = (0..200)
        .map(|_| {
            std_lockrun()
                .args(["--slots", "4"])
                .arg(&lock)
                .args(["--", "sh", "-c", script, "job"])
                .arg(&meter)
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut crowd {
        let status = wait_child(child, Duration::from_secs(60));
        assert!(status.success(), "{status:?}");
    }
    let seen = read_meter(dir.path(), 4);
    assert_eq!(seen.ended, 200);
    assert!(seen.peak <= 4, "{} at once", seen.peak);
    assert_eq!(seen.bad_slot, None);
    assert!(seen.running.is_empty());
}

/// Holds every one of the `n` slots of `lock`.
fn fill(lock: &Path, n: usize) -> Vec<(Background, String, i32)> {
    fill_some(lock, n, n)
}

#[test]
fn a_different_number_of_slots_is_a_usage_error_naming_both() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let holders = fill(&lock, 2);
    let out = lockrun()
        .args(["--slots", "3"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("lockrun: ") && err.contains("--slots 2") && err.contains("--slots 3"),
        "{err}"
    );
    // The holder that set it: the first lockrun.
    let first = holders[0].0.pid();
    assert!(err.contains(&format!("lockrun pid {first}")), "{err}");
}

#[test]
fn nonblocking_with_every_slot_full_is_75_and_runs_nothing() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let holders = fill(&lock, 2);
    let mut slots: Vec<&str> = holders.iter().map(|h| h.1.as_str()).collect();
    slots.sort();
    assert_eq!(slots, ["1", "2"]);
    let ran = dir.path().join("ran");
    lockrun()
        .args(["-n", "--slots", "2"])
        .arg(&lock)
        .args(["touch"])
        .arg(&ran)
        .assert()
        .code(75);
    assert!(!ran.exists());
    // -E and -q as for one lock.
    let out = lockrun()
        .args(["-n", "-q", "-E", "9", "--slots", "2"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9));
    assert!(out.stderr.is_empty());
    // -w ends the wait with 75 too.
    lockrun()
        .args(["-w", "0.2", "--slots", "2"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(75);
}

#[test]
fn shared_and_no_fork_are_usage_errors_with_slots() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for flag in ["-s", "-F"] {
        lockrun()
            .args([flag, "--slots", "2"])
            .arg(&lock)
            .arg("true")
            .assert()
            .code(64);
    }
    for n in ["0", "1025", "x"] {
        lockrun()
            .args(["--slots", n])
            .arg(&lock)
            .arg("true")
            .assert()
            .code(64);
    }
}

fn slot_file(lock: &Path, k: usize) -> std::path::PathBuf {
    let mut name = lock.as_os_str().to_owned();
    name.push(format!(".slot{k}"));
    name.into()
}

#[test]
fn sigkill_of_a_holder_frees_its_slot_at_once() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let mut holders = fill(&lock, 2);
    let waiter = Background::spawn({
        let mut cmd = std_lockrun();
        cmd.args(["--slots", "2"])
            .arg(&lock)
            .args(["--", "sh", "-c", "echo ready $LOCKRUN_SLOT"]);
        cmd
    });
    // The head of the queue waits on every slot in the kernel.
    wait_for("the waiter to block on the slots", || {
        kernel_waiters(&slot_file(&lock, 1)) == 1 && kernel_waiters(&slot_file(&lock, 2)) == 1
    });
    let (victim, slot, command_pid) = holders.remove(1);
    kill(victim.pid(), "KILL");
    kill(command_pid, "KILL");
    let words = waiter.expect_ready();
    assert_eq!(words, [slot]);
    drop(victim);
}

#[test]
fn waiters_use_no_cpu_while_they_wait() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let _holders = fill(&lock, 2);
    let waiters: Vec<Child> = (0..2)
        .map(|_| {
            std_lockrun()
                .args(["--slots", "2", "-w", "60"])
                .arg(&lock)
                .arg("true")
                // Not a terminal even when the suite runs on one: the live
                // status line's redraws are not what is measured.
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // One waiter queued behind the other: the other is at the head,
    // waiting for a slot.
    wait_for("one waiter at the head, one in the queue", || {
        kernel_waiters(&lock) == 1
    });
    let before: Vec<(u64, u64)> = waiters
        .iter()
        .map(|w| (cpu_ticks(w.id() as i32), wakeups(w.id() as i32)))
        .collect();
    // The window over which CPU time is counted (not a synchronisation).
    std::thread::sleep(Duration::from_secs(2));
    for (waiter, (ticks, woke)) in waiters.iter().zip(before) {
        let pid = waiter.id() as i32;
        let used = cpu_ticks(pid) - ticks;
        assert!(used <= 1, "a waiter used {used} clock ticks in 2 seconds");
        // A poller wakes hundreds of times a second; the waiter's main
        // thread looks at the clock 4 times a second, its helpers never.
        let woke = wakeups(pid) - woke;
        assert!(
            woke <= 20,
            "a waiter's threads woke {woke} times in 2 seconds"
        );
    }
    for mut waiter in waiters {
        let _ = waiter.kill();
        let _ = waiter.wait();
    }
}

#[test]
fn holder_and_check_show_every_slot() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // Nothing ever ran: a plain free lock file.
    lockrun().arg("check").arg(&lock).assert().code(1);
    let mut holders = fill_some(&lock, 3, 1);
    // Slot 2 is taken and let go: its record names the last holder.
    lockrun()
        .args(["--slots", "3"])
        .arg(&lock)
        .args(["echo", "earlier"])
        .assert()
        .success();
    let (bg, slot, pid) = holders.remove(0);
    assert_eq!(slot, "1");
    let text = holder_text(&lock);
    assert!(text.contains("1 of 3 slots held"), "{text}");
    assert!(
        text.contains(&format!("slot 1: held (exclusive) by pid {pid}")),
        "{text}"
    );
    assert!(text.contains("slot 2: free; last held by"), "{text}");
    assert!(text.contains("slot 3: free (no holder record)"), "{text}");
    lockrun().arg("check").arg(&lock).assert().code(0);

    let json = holder_json(&lock);
    assert_eq!(json["slots"], 3);
    assert_eq!(json["state"], "held");
    let slots = json["slot_reports"].as_array().unwrap();
    assert_eq!(slots.len(), 3);
    assert_eq!(slots[0]["state"], "held");
    assert_eq!(slots[0]["record"]["pid"], pid);
    assert_eq!(slots[1]["state"], "free");
    assert_eq!(slots[1]["record"]["command"][1], "earlier");
    assert_eq!(slots[2]["state"], "free");

    drop(bg);
    wait_for("the slot to be free", || {
        kernel_holders(&slot_file(&lock, 1)) == 0
    });
    wait_for("the holder to be gone", || process_gone(pid));
    lockrun().arg("check").arg(&lock).assert().code(1);
    let json = holder_json(&lock);
    assert_eq!(json["state"], "free");
}

/// Holds `held` of `n` slots: each holder prints `ready SLOT PID` and
/// waits for a line on stdin.
fn fill_some(lock: &Path, n: usize, held: usize) -> Vec<(Background, String, i32)> {
    let slots = n.to_string();
    (0..held)
        .map(|_| {
            let (bg, words) = Background::lockrun_holding(
                &["--slots", &slots],
                lock,
                "echo ready $LOCKRUN_SLOT $$; read x",
            );
            let pid = words[1].parse().unwrap();
            (bg, words[0].clone(), pid)
        })
        .collect()
}

#[test]
fn a_signal_ends_the_wait_at_the_head_and_in_the_queue() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let _holders = fill(&lock, 2);
    let ran = dir.path().join("ran");
    let spawn = |extra: &[&str]| {
        std_lockrun()
            .args(["--slots", "2"])
            .args(extra)
            .arg(&lock)
            .arg("touch")
            .arg(&ran)
            .spawn()
            .unwrap()
    };
    // Waiting for ever (the main thread waits itself) and with a timeout
    // (a helper thread waits): both end at the signal.
    for extra in [&[][..], &["-w", "60"]] {
        let mut head = spawn(extra);
        wait_for("the head to wait on the slots", || {
            kernel_waiters(&slot_file(&lock, 2)) == 1
        });
        let mut queued = spawn(extra);
        wait_for("a waiter in the queue", || kernel_waiters(&lock) == 1);
        for waiter in [&mut head, &mut queued] {
            kill(waiter.id() as i32, "TERM");
            assert_eq!(wait_child(waiter, BOUND).code(), Some(143));
        }
        wait_for("the slots' waiters to be gone", || {
            kernel_waiters(&slot_file(&lock, 2)) == 0 && kernel_waiters(&lock) == 0
        });
    }
    assert!(!ran.exists());
}

#[test]
fn foreign_content_is_never_overwritten() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // A slot file with someone else's content: the lock works, the
    // content stays, no record is written.
    let mine = b"#!/bin/sh\necho not a record\n";
    std::fs::write(slot_file(&lock, 1), mine).unwrap();
    lockrun()
        .args(["--slots", "1"])
        .arg(&lock)
        .args(["sh", "-c", "test \"$LOCKRUN_SLOT\" = 1"])
        .assert()
        .success();
    assert_eq!(std::fs::read(slot_file(&lock, 1)).unwrap(), mine);
    // LOCKFILE with someone else's content cannot keep N: refused (77),
    // untouched, and the command does not run.
    let other = lock.with_extension("other");
    std::fs::write(&other, mine).unwrap();
    let ran = dir.path().join("ran");
    let out = lockrun()
        .args(["--slots", "2"])
        .arg(&other)
        .arg("touch")
        .arg(&ran)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a lockrun record"), "{err}");
    assert_eq!(std::fs::read(&other).unwrap(), mine);
    assert!(!ran.exists());
    // A plain lockrun never writes its record over the number of slots:
    // it is refused (issue 26 item 4), and leaves the file as it was.
    let header = std::fs::read(&lock).unwrap();
    lockrun().arg(&lock).arg("true").assert().code(64);
    assert_eq!(std::fs::read(&lock).unwrap(), header);
}

#[test]
fn verbose_names_the_slot_and_the_holders_while_waiting() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let holders = fill(&lock, 1);
    let mut waiter = std_lockrun()
        .args(["-v", "--slots", "1"])
        .arg(&lock)
        .arg("true")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the waiter to wait", || {
        kernel_waiters(&slot_file(&lock, 1)) == 1
    });
    drop(holders);
    assert!(wait_child(&mut waiter, BOUND).success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut waiter.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("waiting for") && err.contains("slot 1: pid"),
        "{err}"
    );
    assert!(err.contains("took slot 1 of 1"), "{err}");
}

/// `-v` names the lock it took: with `--slots`, the slot's file, not
/// LOCKFILE (issue 32, item 5).
#[test]
fn verbose_names_the_slot_file_it_holds() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let out = lockrun()
        .args(["-v", "--slots", "2"])
        .arg(&lock)
        .arg("true")
        .output()
        .expect("run lockrun");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let slot = slot_file(&lock, 1);
    assert!(
        err.contains(&format!(
            "took the exclusive lock on {} after",
            slot.display()
        )),
        "{err}"
    );
    assert!(
        !err.contains(&format!(
            "took the exclusive lock on {} after",
            lock.display()
        )),
        "{err}"
    );
}

/// How many threads `pid` has: the head of the queue has one per slot.
fn threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_release_wakes_one_waiter_not_the_crowd() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let holders = fill(&lock, 1);
    let spawn = || {
        let mut cmd = std_lockrun();
        cmd.args(["--slots", "1"])
            .arg(&lock)
            .args(["--", "sh", "-c", "echo ready; read x"])
            // Not a terminal even when the suite runs on one: a live
            // status line needs a clock, and so a second thread.
            .stderr(Stdio::null());
        Background::spawn(cmd)
    };
    let head = spawn();
    wait_for("the head to wait on the slot", || {
        kernel_waiters(&slot_file(&lock, 1)) == 1
    });
    let crowd: Vec<Background> = (0..4).map(|_| spawn()).collect();
    wait_for("four waiters in the queue", || kernel_waiters(&lock) == 4);
    let before: Vec<u64> = crowd.iter().map(|w| wakeups(w.pid())).collect();
    drop(holders);
    head.expect_ready();
    // One of the crowd is the new head: it waits on the slot.
    wait_for("a new head", || {
        kernel_waiters(&slot_file(&lock, 1)) == 1 && kernel_waiters(&lock) == 3
    });
    let mut woke_behind = 0;
    let mut behind = 0;
    for (waiter, before) in crowd.iter().zip(before) {
        if threads(waiter.pid()) == 1 {
            behind += 1;
            woke_behind += wakeups(waiter.pid()) - before;
        }
    }
    assert_eq!(behind, 3, "only the head may contend for the slots");
    assert_eq!(
        woke_behind, 0,
        "waiters behind the new head woke on a release (a stampede)"
    );
}

/// lockrun with `args`, its stderr merged into the stdout that
/// [`Background`] reads line by line (through a shell that execs it, so
/// the pid is lockrun's).
fn merged(args: &[&str]) -> Background {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", r#"exec "$0" "$@" 2>&1"#, bin()]).args(args);
    Background::spawn(cmd)
}

/// How many pairs of jobs ran in the opposite order to the one they came
/// in: 0 for first come, first served.
fn inversions(served: &[usize]) -> usize {
    (0..served.len())
        .flat_map(|a| (a + 1..served.len()).map(move |b| (a, b)))
        .filter(|&(a, b)| served[a] > served[b])
        .count()
}

/// Waiters are served in about the order they came: they queue on
/// LOCKFILE, a kernel wait, and only the head contends for the slots.
/// Each waiter is started once the one before it visibly waits (its `-v`
/// line, then asleep); one slot is let go, the other stays held, so the
/// jobs go through one at a time and append their number to a file in the
/// order they got the slot. The kernel wakes a released lock's waiters in
/// the order they blocked and the first of them to run takes it, so on a
/// loaded machine a neighbour may overtake: at most 2 of the 66 pairs of 12
/// may be inverted. Measured: 0 in 10 runs; with the queue's kernel wait
/// replaced by a try-and-sleep poll, 5 to 25 in 10 runs out of 10.
#[test]
fn waiters_are_served_in_about_the_order_they_came() {
    const WAITERS: usize = 12;
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let order = dir.path().join("order");
    let mut holders = fill(&lock, 2);
    let lock_arg = lock.to_string_lossy().into_owned();
    let order_arg = order.to_string_lossy().into_owned();
    let waiters: Vec<Background> = (0..WAITERS)
        .map(|i| {
            let job = i.to_string();
            let waiter = merged(&[
                "-v",
                "--slots",
                "2",
                &lock_arg,
                "--",
                "sh",
                "-c",
                r#"echo "$0" >> "$1""#,
                &job,
                &order_arg,
            ]);
            let line = waiter.line(BOUND).unwrap_or_default();
            assert!(line.contains("waiting for"), "waiter {i}: {line:?}");
            wait_asleep("the waiter to sleep in its wait", waiter.pid());
            waiter
        })
        .collect();
    let (mut freed, ..) = holders.remove(0);
    freed.release();
    freed.wait_exit(BOUND);
    for mut waiter in waiters {
        assert!(waiter.wait_exit(BOUND).success());
    }
    let served: Vec<usize> = std::fs::read_to_string(&order)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let mut sorted = served.clone();
    sorted.sort();
    assert_eq!(sorted, (0..WAITERS).collect::<Vec<_>>(), "{served:?}");
    let inverted = inversions(&served);
    assert!(
        inverted <= 2,
        "served in the order {served:?}: {inverted} inversions"
    );
}

/// A slot file replaced while the head of the queue waits on it: the old
/// inode's lock, got when its holder lets go, excludes nobody who opens
/// the slot file now, so the head must let go of it and contend for the
/// file now at that path, and say so under -v (issue 12 item 7, for
/// slots), or two commands run in slot 1.
#[test]
fn a_slot_file_replaced_while_waiting_is_locked_again() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let mut holders = fill(&lock, 2);
    let lock_arg = lock.to_string_lossy().into_owned();
    let job = ["--slots", "2", &lock_arg, "--", "sh", "-c"];
    let script = "echo got $LOCKRUN_SLOT; read x";
    let head = merged(&[&["-v"][..], &job, &[script]].concat());
    assert!(head.line(BOUND).unwrap_or_default().contains("waiting for"));
    wait_for("the head to wait on both slots", || {
        kernel_waiters(&slot_file(&lock, 1)) == 1 && kernel_waiters(&slot_file(&lock, 2)) == 1
    });
    let replacement = dir.path().join("new");
    std::fs::write(&replacement, "").unwrap();
    std::fs::rename(&replacement, slot_file(&lock, 1)).unwrap();
    let next = merged(&[&job[..], &[script]].concat());
    wait_for("the next to queue behind the head", || {
        kernel_waiters(&lock) == 1
    });

    let first = holders.iter().position(|h| h.1 == "1").unwrap();
    let (mut old_holder, ..) = holders.remove(first);
    old_holder.release();
    old_holder.wait_exit(BOUND);
    let mut waiters = [(head, Vec::new()), (next, Vec::new())];
    let got = |waiters: &mut [(Background, Vec<String>)]| {
        for (waiter, lines) in waiters.iter_mut() {
            while let Some(line) = waiter.line(Duration::ZERO) {
                lines.push(line);
            }
        }
        waiters
            .iter()
            .filter(|(_, lines)| lines.iter().any(|l| l.starts_with("got")))
            .count()
    };
    wait_for("one of them to run", || got(&mut waiters) >= 1);
    // The other runs too (two in slot 1), or waits at the head on both
    // slot files, the new slot 1 among them.
    wait_for("the other to run or to wait on both slots", || {
        got(&mut waiters) == 2
            || (kernel_waiters(&slot_file(&lock, 1)) == 1
                && kernel_waiters(&slot_file(&lock, 2)) == 1)
    });
    let running: Vec<&String> = waiters
        .iter()
        .flat_map(|(_, lines)| lines.iter().filter(|l| l.starts_with("got")))
        .collect();
    assert_eq!(running, ["got 1"], "ran beside the new slot 1's holder");
    // The one running lets go: the other gets slot 1 in its turn.
    let runs = waiters
        .iter()
        .position(|(_, lines)| lines.iter().any(|l| l.starts_with("got")))
        .unwrap();
    waiters[runs].0.release();
    assert!(waiters[runs].0.wait_exit(BOUND).success());
    let (other, lines) = &mut waiters[1 - runs];
    let mut line = None;
    while line.is_none() {
        line = other.line(BOUND);
        assert!(line.is_some(), "the other never ran: {lines:?}");
        if line.as_deref().is_some_and(|l| !l.starts_with("got")) {
            lines.extend(line.take());
        }
    }
    assert_eq!(line.as_deref(), Some("got 1"));
    other.release();
    assert!(other.wait_exit(BOUND).success());
    let said: Vec<&String> = waiters[0].1.iter().collect();
    assert!(
        said.iter().any(|l| l.contains("replaced or deleted")),
        "the head did not say the slot file changed: {said:?}"
    );
}

/// LOCKFILE deleted, then replaced, while a waiter is at the head of the
/// queue: the waiter must take its slot through the LOCKFILE now at that
/// path. Deleted: it makes it again, with N in it, so that `holder` sees
/// the slots it holds (else `holder` finds no lock file while a slot is
/// held). Replaced by one keeping another N: it is refused (64) as any
/// newcomer would be, rather than running on the old file's N.
#[test]
fn lockfile_deleted_or_replaced_while_waiting_is_opened_again() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let mut holders = fill(&lock, 2);
    let lock_arg = lock.to_string_lossy().into_owned();
    let job = [
        "-v",
        "--slots",
        "2",
        &lock_arg,
        "--",
        "sh",
        "-c",
        "echo got $LOCKRUN_SLOT; read x",
    ];
    let at_the_head = |what: &str| {
        wait_for(what, || {
            kernel_waiters(&slot_file(&lock, 1)) == 1 && kernel_waiters(&slot_file(&lock, 2)) == 1
        })
    };
    // The next line from `waiter` that is not one of -v's, and all of them.
    let next_line = |waiter: &Background, said: &mut Vec<String>| loop {
        let line = waiter
            .line(BOUND)
            .unwrap_or_else(|| panic!("no line: {said:?}"));
        if !line.starts_with("lockrun: ") {
            return line;
        }
        said.push(line);
    };

    let mut first = merged(&job);
    at_the_head("the first waiter to wait at the head");
    std::fs::remove_file(&lock).unwrap();
    let one = holders.iter().position(|h| h.1 == "1").unwrap();
    let (mut freed, ..) = holders.remove(one);
    freed.release();
    freed.wait_exit(BOUND);
    let mut said = Vec::new();
    assert_eq!(next_line(&first, &mut said), "got 1", "{said:?}");
    assert!(
        said.iter().any(|l| l.contains("replaced or deleted")),
        "{said:?}"
    );
    let json = holder_json(&lock);
    assert_eq!(json["exists"], true, "{json}");
    assert_eq!(json["slots"], 2, "{json}");
    assert_eq!(json["slot_reports"][0]["state"], "held", "{json}");

    let mut second = merged(&job);
    at_the_head("the second waiter to wait at the head");
    let replacement = dir.path().join("new");
    std::fs::write(&replacement, "{\"lockrun_slots\":1,\"slots\":3}\n").unwrap();
    std::fs::rename(&replacement, &lock).unwrap();
    first.release();
    assert!(first.wait_exit(BOUND).success());
    let status = second.wait_exit(BOUND);
    // Every line up to the end of its output (the reader thread may not
    // have passed them all on yet when the process is reaped).
    let mut said = Vec::new();
    while let Some(line) = second.line(BOUND) {
        said.push(line);
    }
    assert_eq!(status.code(), Some(64), "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.contains("used with --slots 3") && l.contains("not --slots 2")),
        "{said:?}"
    );
    assert!(!said.iter().any(|l| l.starts_with("got")), "{said:?}");
}

/// The live status line with `--slots` on a terminal: it names each
/// slot's holder and the time limit, and is wiped when a slot is taken.
#[test]
fn the_live_status_line_names_every_slot_holder_and_goes_when_a_slot_is_taken() {
    if !needs("script", "a pseudo-terminal to test with") || !needs("stty", "to set its width") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let mut holders = fill(&lock, 2);
    // Wide enough for both holders (the line is cut to the terminal).
    let inner = format!(
        "stty cols 400; exec {} --slots 2 -w 1.6 {} true",
        bin(),
        lock.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(75), "{shown:?}");
    let start = format!(
        "\r\x1b[Klockrun: waiting for {} (held by 2 commands, one per slot (",
        lock.display()
    );
    assert!(shown.contains(&start), "no live line: {shown:?}");
    for (_, slot, pid) in &holders {
        assert!(
            shown.contains(&format!("slot {slot}: pid {pid} ")),
            "slot {slot}'s holder {pid} not named: {shown:?}"
        );
    }
    assert!(shown.contains(" / 1.6s"), "no timeout shown: {shown:?}");

    // Waiting for ever: the line shows, then a slot frees, the line is
    // wiped and the command's output starts on a clean line.
    let inner = format!(
        "stty cols 400; exec {} --slots 2 {} sh -c 'echo got slot $LOCKRUN_SLOT'",
        bin(),
        lock.display()
    );
    let mut script = std::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let shown = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let (shown, mut out) = (shown.clone(), script.stdout.take().unwrap());
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut out, &mut chunk) {
                shown.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        })
    };
    let text = || String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    wait_for("the live line", || text().contains(&start));
    let (mut freed, slot, _) = holders.remove(0);
    freed.release();
    assert_eq!(wait_child(&mut script, BOUND).code(), Some(0));
    reader.join().unwrap();
    let shown = text();
    let last_line = shown.rfind(&start).unwrap();
    let after = &shown[last_line + start.len()..];
    let wiped = after.find("\r\x1b[K").map(|at| &after[at + 4..]);
    assert!(
        wiped.is_some_and(|rest| rest.starts_with(&format!("got slot {slot}"))),
        "the line was not wiped before the command's output: {shown:?}"
    );
}

/// From a child PID namespace the slots' holders are hidden and `check`
/// cannot tell; `--probe` must then try each slot, not LOCKFILE (the queue,
/// free whenever nobody waits at its head), which answered "free" while a
/// slot was held (found by review).
#[test]
fn check_probe_tries_each_slot_not_the_queue() {
    if !pid_namespaces_work() {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let holders = fill_some(&lock, 2, 1);
    let out = in_child_pid_namespace(&["check", "--probe", lock.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    drop(holders);
}

/// Issue 26 item 4: a lock on LOCKFILE itself excludes none of the slots'
/// holders (they hold the slot files), so a lockrun without --slots on a
/// lock file used with --slots N is refused (64) naming N and the
/// holders, whatever its flags, and never runs beside them (CONTRACT
/// §13). And `check`/`holder` report LOCKFILE itself as the kernel has it:
/// held by flock(1) or by a POSIX lock, the lock is held (0), not free.
#[test]
fn item_4_a_plain_lockrun_is_refused_and_the_lock_file_itself_is_reported() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let holders = fill(&lock, 2);
    let ran = dir.path().join("ran");
    for flags in [&["-n"][..], &["-n", "--fcntl"], &["-n", "-s"], &["-w", "5"]] {
        let out = lockrun()
            .args(flags)
            .arg(&lock)
            .arg("touch")
            .arg(&ran)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flags:?}: {err}");
        assert!(err.contains("--slots 2"), "{flags:?}: {err}");
        for (_, slot, pid) in &holders {
            assert!(
                err.contains(&format!("slot {slot}: pid {pid} ")),
                "{flags:?} does not name slot {slot}'s holder {pid}: {err}"
            );
        }
        assert!(!ran.exists(), "{flags:?} ran beside the slots' holders");
    }
    for (bg, _, pid) in holders {
        drop(bg);
        wait_for("the slot holder to be gone", || process_gone(pid));
    }
    // With no slot held, still refused: the next --slots contender would
    // run beside it.
    lockrun()
        .arg("-n")
        .arg(&lock)
        .arg("touch")
        .arg(&ran)
        .assert()
        .code(64);
    assert!(!ran.exists());

    if !needs("flock", "a lock on LOCKFILE itself from flock(1)") {
        return;
    }
    let (flock, flock_pid) = flock_holding(&[], &lock);
    lockrun().arg("check").arg(&lock).assert().code(0);
    let json = holder_json(&lock);
    assert_eq!(json["state"], "held", "{json}");
    let outside: Vec<i64> = json["lockfile_holders"]
        .as_array()
        .unwrap_or_else(|| panic!("no lockfile_holders: {json}"))
        .iter()
        .filter_map(|h| h["pid"].as_i64())
        .collect();
    assert!(outside.contains(&i64::from(flock_pid)), "{json}");
    let text = holder_text(&lock);
    assert!(
        text.contains("itself: held (exclusive) by pid") && text.contains("0 of 2 slots held"),
        "{text}"
    );
    // A --slots waiter that times out behind it is not told of 2 holders,
    // one per slot, that do not exist.
    let out = lockrun()
        .args(["--slots", "2", "-w", "0.3"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(
        !err.contains("2 commands, one per slot") && err.contains("itself"),
        "{err}"
    );
    drop(flock);
    wait_for("flock(1) to let go", || kernel_holders(&lock) == 0);
    lockrun().arg("check").arg(&lock).assert().code(1);

    if !needs("python3", "a POSIX (lockf) lock on LOCKFILE") {
        return;
    }
    let mut cmd = std::process::Command::new("python3");
    cmd.args([
        "-c",
        "import fcntl,sys\nf=open(sys.argv[1],'r+')\nfcntl.lockf(f,fcntl.LOCK_EX)\nprint('ready',flush=True)\nsys.stdin.readline()",
    ])
    .arg(&lock);
    let lockf = Background::spawn(cmd);
    lockf.expect_ready();
    lockrun().arg("check").arg(&lock).assert().code(0);
    let json = holder_json(&lock);
    assert_eq!(json["lockfile_holders"][0]["kind"], "posix", "{json}");
    drop(lockf);
}

/// Issue 26 item 6: the head of the queue holds LOCKFILE while it waits
/// on the slots; stopped there (SIGSTOP, Ctrl-Z), it kept every waiter
/// behind it waiting while the slots were free. The next waiter must get
/// the free slot; the stopped one, continued, gets its turn after it.
#[test]
fn item_6_a_stopped_head_of_the_queue_does_not_keep_the_queue() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let mut holders = fill(&lock, 1);
    let waiter = || {
        let mut cmd = std_lockrun();
        cmd.args(["--slots", "1"])
            .arg(&lock)
            .args(["--", "sh", "-c", "echo ready $LOCKRUN_SLOT; read x"])
            .stderr(Stdio::null());
        Background::spawn(cmd)
    };
    let mut head = waiter();
    wait_for("the head to wait on the slot", || {
        kernel_waiters(&slot_file(&lock, 1)) == 1
    });
    let mut next = waiter();
    wait_for("the next waiter to queue", || kernel_waiters(&lock) == 1);
    kill(head.pid(), "STOP");
    // Every thread, not only the main one: a slot-waiting thread not yet
    // stopped could still take the slot when it frees.
    wait_for("every thread of the head to be stopped", || {
        stopped_threads(head.pid())
    });
    let (mut holder, ..) = holders.remove(0);
    holder.release();
    holder.wait_exit(BOUND);
    // The slot is free and the head cannot take it: the next one must.
    assert_eq!(next.expect_ready(), ["1"]);
    kill(head.pid(), "CONT");
    next.release();
    assert!(next.wait_exit(BOUND).success());
    assert_eq!(head.expect_ready(), ["1"]);
    head.release();
    assert!(head.wait_exit(BOUND).success());
}

/// Whether every thread of `pid` is stopped (state `T`).
fn stopped_threads(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('T'))
        })
    })
}

/// Issue 26 item 14: `holder`/`check` on an idle --slots lock read the
/// kernel's lock table, and scanned every process's descriptors (when the
/// table takes more than one read), once per slot: minutes for 1024 slots
/// on a busy host. Counted, not timed: the opens of /proc/locks and of
/// /proc itself (a scan of the processes) in one `holder` on 16 idle
/// slots, with enough other locks held that the table takes two reads.
#[test]
fn item_14_holder_on_idle_slots_reads_the_table_and_scans_the_processes_once() {
    if !needs("strace", "to count what holder opens") || !needs("python3", "to hold other locks") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .args(["--slots", "16"])
        .arg(&lock)
        .arg("true")
        .assert()
        .success();
    // 200 other flock locks: /proc/locks is then longer than a page.
    let others = hold_other_locks(dir.path(), 200);
    for sub in ["holder", "check"] {
        let trace = dir.path().join(format!("trace-{sub}"));
        let out = std::process::Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=openat,open", "-o"])
            .arg(&trace)
            .arg(bin())
            .arg(sub)
            .arg(&lock)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(if sub == "holder" { 0 } else { 1 }),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let trace = std::fs::read_to_string(&trace).unwrap();
        let table = trace.matches("\"/proc/locks\"").count();
        let scans = trace.matches("\"/proc\", ").count();
        assert!(
            (1..=3).contains(&table),
            "{sub} opened /proc/locks {table} times for 16 slots"
        );
        assert!(
            scans <= 1,
            "{sub} scanned the processes {scans} times for 16 slots"
        );
    }
    drop(others);
}

/// Issue 26 item 15: a --slots waiter whose LOCKFILE is replaced while it
/// waits, before anyone wrote N into it, exited 77 "permissions or a
/// read-only file system": it must contend again through the file now at
/// that path, and write N there.
#[test]
fn item_15_a_lock_file_replaced_before_n_is_written_is_contended_again() {
    if !needs("flock", "to hold LOCKFILE before N is written") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    std::fs::write(&lock, "").unwrap();
    let (flock, _) = flock_holding(&[], &lock);
    let lock_arg = lock.to_string_lossy().into_owned();
    let mut waiter = merged(&[
        "--slots",
        "2",
        &lock_arg,
        "--",
        "sh",
        "-c",
        "echo ready $LOCKRUN_SLOT",
    ]);
    wait_for("the waiter to queue", || kernel_waiters(&lock) == 1);
    let replacement = dir.path().join("new");
    std::fs::write(&replacement, "").unwrap();
    std::fs::rename(&replacement, &lock).unwrap();
    drop(flock);
    let status = waiter.wait_exit(BOUND);
    let mut said = Vec::new();
    while let Some(line) = waiter.line(BOUND) {
        said.push(line);
    }
    assert_eq!(status.code(), Some(0), "{said:?}");
    assert_eq!(said, ["ready 1"]);
    let header = std::fs::read_to_string(&lock).unwrap();
    assert!(header.contains("\"slots\":2"), "{header:?}");
}
