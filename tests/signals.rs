//! The command's life: signals forwarded, deaths by signal passed on, exec
//! mode, descriptors, interrupted waits (issue: signals and exec).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A command that reports every forwarded signal it receives and exits on
/// the second USR2. `wait` on a background sleep is interrupted by trapped
/// signals, so each trap runs at once.
const COUNTER: &str = r#"
for s in TERM HUP INT QUIT USR1; do trap "echo got $s" $s; done
n=0; trap 'echo got USR2; n=$((n+1)); [ $n -ge 2 ] && exit 0' USR2
echo ready $$
while :; do sleep 0.05 & wait $!; done
"#;

#[test]
fn forwarded_signals_reach_the_command_once_each() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut lockrun, _) = Background::lockrun_holding(&[], &lock, COUNTER);
    for sig in ["TERM", "HUP", "INT", "QUIT", "USR1", "USR2"] {
        kill(lockrun.pid(), sig);
        assert_eq!(
            lockrun.line(BOUND).as_deref(),
            Some(format!("got {sig}").as_str())
        );
    }
    kill(lockrun.pid(), "USR2");
    assert_eq!(lockrun.line(BOUND).as_deref(), Some("got USR2"));
    assert!(lockrun.wait_exit(BOUND).success());
    // lockrun has exited, so its output has ended: no line means none came.
    assert_eq!(lockrun.line(BOUND), None, "a signal arrived twice");
}

#[test]
fn ctrl_c_on_a_terminal_reaches_the_command_once() {
    if !needs("script", "a pseudo-terminal to test with") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let script = dir.path().join("count.sh");
    std::fs::write(
        &script,
        "trap 'echo got INT' INT\necho ready\nwhile :; do sleep 0.05 & wait $!; [ -e \"$0.stop\" ] && exit 0; done\n",
    )
    .unwrap();
    let inner = format!(
        "{} {} sh {}",
        common::bin(),
        lock.display(),
        script.display()
    );
    let mut term = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = term.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
        }
    });
    let mut last = String::new();
    let mut seen = |needle: &str| {
        let deadline = Instant::now() + BOUND;
        while Instant::now() < deadline {
            if let Ok(text) = rx.recv_timeout(Duration::from_millis(100)) {
                last = text;
            }
            if last.contains(needle) {
                return last.clone();
            }
        }
        panic!("never saw {needle:?} in {last:?}");
    };
    seen("ready");
    // ^C typed at the terminal: the kernel sends SIGINT to the whole
    // foreground process group, lockrun and command alike.
    term.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    seen("got INT");
    std::fs::write(format!("{}.stop", script.display()), "").unwrap();
    wait_child(&mut term, BOUND);
    // Everything the terminal showed, up to end of file.
    while let Ok(text) = rx.recv_timeout(BOUND) {
        last = text;
    }
    let text = last;
    assert_eq!(
        text.matches("got INT").count(),
        1,
        "Ctrl-C arrived more than once: {text:?}"
    );
}

#[test]
fn a_command_killed_by_a_signal_kills_lockrun_the_same_way() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    // What the shell sees, exactly as without lockrun.
    let out = Command::new("sh")
        .args([
            "-c",
            "\"$0\" \"$1\" sh -c 'kill -TERM $$'; echo $?",
            common::bin(),
        ])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "143\n");
    for (name, number) in [("TERM", 15), ("KILL", 9), ("SEGV", 11), ("INT", 2)] {
        let status = std_lockrun()
            .current_dir(dir.path())
            .arg(&lock)
            .args(["sh", "-c", &format!("kill -{name} $$")])
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(number), "{name}: {status:?}");
        assert!(
            !status.core_dumped(),
            "lockrun dumped core re-raising {name}"
        );
        assert_eq!(
            record_json(&lock)["exit"],
            serde_json::json!({ "signal": number })
        );
        // Released before the re-raise.
        try_lock_now(&lock).success();
    }
}

#[test]
fn a_signal_while_waiting_ends_the_wait_at_once_and_runs_nothing() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; exec sleep 60");
    let before = std::fs::read(&lock).unwrap();
    // Both ways of waiting: blocked in flock on the main thread (no
    // timeout), and on a helper thread with a deadline or polling.
    let cases = [
        ("TERM", 143, vec![]),
        ("INT", 130, vec![]),
        ("HUP", 129, vec![]),
        ("TERM", 143, vec!["-w", "60"]),
        ("USR1", 138, vec!["--timeout", "1m"]),
        ("TERM", 143, vec!["--poll", "10ms"]),
        // -F installs its handlers only once it has to wait.
        ("TERM", 143, vec!["-F"]),
        ("INT", 130, vec!["-F", "-w", "60"]),
    ];
    for (sig, code, args) in cases {
        let marker = dir.path().join("ran");
        let mut cmd = std_lockrun();
        cmd.args(&args).arg(&lock).arg("touch").arg(&marker);
        let mut waiter = Background::spawn_quiet(cmd);
        if args.contains(&"--poll") {
            // A poller never queues in the kernel; wait until it is sleeping.
            wait_asleep("the poller to start", waiter.pid());
        } else {
            wait_for("the waiter to block", || kernel_waiters(&lock) == 1);
        }
        kill(waiter.pid(), sig);
        // Within BOUND, shorter than every deadline here, with the holder
        // still holding: only the signal can have ended the wait. (No
        // timing: a loaded machine may take its time to run the handler.)
        let status = waiter.wait_exit(BOUND);
        // At least one: a /proc/locks read in pieces can show an entry
        // twice when other tests' locks come and go.
        assert!(kernel_holders(&lock) >= 1, "the holder let go meanwhile");
        assert_eq!(
            status.code(),
            Some(code),
            "{sig} {args:?}: a normal exit with 128+N"
        );
        assert!(!marker.exists(), "the command ran");
        assert_eq!(
            std::fs::read(&lock).unwrap(),
            before,
            "the lock file changed"
        );
        wait_for("the waiter to leave the queue", || {
            kernel_waiters(&lock) == 0
        });
    }
}

#[test]
fn exec_mode_becomes_the_command_and_the_lock_lasts_until_it_exits() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut holder, words) =
        Background::lockrun_holding(&["-F"], &lock, "echo ready $$; read line");
    assert_eq!(
        words[0],
        holder.pid().to_string(),
        "the command has lockrun's pid"
    );
    let json = holder_json(&lock);
    assert_eq!(json["holders"][0]["pid"], holder.pid());
    assert_eq!(json["holders"].as_array().unwrap().len(), 1);
    try_lock_now(&lock).code(75);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    try_lock_now(&lock).success();
}

/// Runs `lockrun ARGS LOCK -- sh -c 'sleep 60 & echo $!'` to completion and
/// returns the pid of the `sleep` the command left behind.
fn run_starting_a_daemon(args: &[&str], lock: &std::path::Path) -> i32 {
    let out = std_lockrun()
        .args(args)
        .arg(lock)
        .args(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn without_close_a_background_child_keeps_the_lock() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let daemon = run_starting_a_daemon(&[], &lock);
    try_lock_now(&lock)
        .code(75)
        .stderr(predicates::str::contains(
            "a background child of it may hold the lock",
        ));
    let text = holder_text(&lock);
    assert!(text.contains(&format!("pid {daemon} `sleep 60`")), "{text}");
    kill(daemon, "KILL");
    wait_for("the daemon to let go", || kernel_holders(&lock) == 0);
}

#[test]
fn with_close_a_background_child_does_not_keep_the_lock() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let daemon = run_starting_a_daemon(&["-o"], &lock);
    assert!(!process_gone(daemon), "the daemon should still run");
    try_lock_now(&lock).success();
    kill(daemon, "KILL");
}

#[test]
fn a_signal_ignored_at_start_stays_ignored_for_lockrun_and_the_command() {
    // As under flock(1): `nohup lockrun …` keeps the command immune to
    // SIGHUP, and a shell's background job keeps ignoring SIGINT. A handler
    // in lockrun would undo that (exec resets caught signals to default).
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let output = Command::new("sh")
        .args([
            "-c",
            r#"trap '' HUP INT; exec "$0" "$1" sh -c 'kill -HUP $PPID; kill -INT $PPID; kill -HUP $$; kill -INT $$; echo survived'"#,
            common::bin(),
        ])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "survived\n");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // A signal that was not ignored is still forwarded. (Sent by the test:
    // on a terminal, lockrun keeps what the command sends its own group.)
    let mut start = Command::new("sh");
    start
        .args([
            "-c",
            r#"trap '' INT; exec "$0" "$1" sh -c 'echo ready; exec sleep 30'"#,
            common::bin(),
        ])
        .arg(&lock);
    let mut lockrun = Background::spawn_quiet(start);
    assert_eq!(lockrun.line(BOUND).as_deref(), Some("ready"));
    kill(lockrun.pid(), "HUP");
    let status = lockrun.wait_exit(BOUND);
    assert_eq!(status.signal(), Some(1), "{status:?}");
}

#[test]
fn standard_streams_pass_through() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    lockrun()
        .arg(&lock)
        .arg("cat")
        .write_stdin("hello\nworld\n")
        .assert()
        .success()
        .stdout("hello\nworld\n");
    lockrun()
        .arg(&lock)
        .args(["sh", "-c", "echo out; echo err >&2"])
        .assert()
        .success()
        .stdout("out\n")
        .stderr("err\n");
    // 64 MiB through a pipe: lockrun is not in the data path at all.
    let out = Command::new("sh")
        .args([
            "-c",
            "\"$0\" \"$1\" head -c 67108864 /dev/zero | wc -c",
            common::bin(),
        ])
        .arg(&lock)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "67108864");
}

#[test]
fn the_command_stays_in_the_terminals_foreground_group() {
    if !needs("script", "a pseudo-terminal to test with")
        || !needs("ps", "to read the terminal's process group")
    {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let inner = format!(
        "{} {} sh -c 'ps -o tpgid=,pgid= -p $$'",
        common::bin(),
        lock.display()
    );
    let out = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(ids.len(), 2, "{text:?}");
    assert_eq!(
        ids[0], ids[1],
        "the command is not in the terminal's foreground group: {text:?}"
    );
}

/// lockrun as cron, a CI runner or `timeout` starts it: no controlling
/// terminal, not a session leader, in its caller's process group (`setsid
/// sh` is the caller and leads the group and the session). With `leads`,
/// lockrun leads a process group of its own, as under a job-control shell
/// or `Popen(process_group=0)`. Returns the caller, the group to signal and
/// lockrun's pid, once the command has printed `ready`.
fn lockrun_in_a_process_group(
    lock: &std::path::Path,
    script: &str,
    leads: bool,
) -> (Background, Group, i32) {
    let start = if leads {
        // perl's setpgrp(0,0) is setpgid(0, 0); exec keeps the pid.
        r#"perl -e 'setpgrp(0, 0); exec @ARGV or die "exec: $!"' "$0" "$@" &"#
    } else {
        r#""$0" "$@" &"#
    };
    let mut cmd = Command::new("setsid");
    cmd.args(["-w", "sh", "-c", &format!("{start} echo lockrun $!; wait")])
        .arg(common::bin())
        .arg(lock)
        .args(["sh", "-c", script]);
    // Quiet: the group's TERM makes a shell in it say "Terminated", which
    // a passing run must not print (issue 33 item 7).
    let caller = Background::spawn_quiet(cmd);
    let (mut lockrun, mut ready) = (None, false);
    for _ in 0..2 {
        let line = caller
            .line(BOUND)
            .expect("no `lockrun PID` and `ready` lines");
        match line.split_once(' ') {
            Some(("lockrun", pid)) => lockrun = pid.parse().ok(),
            Some(("ready", _)) => ready = true,
            _ => panic!("unexpected line {line:?}"),
        }
    }
    let lockrun: i32 = lockrun.expect("lockrun's pid");
    let group = Group {
        id: if leads { lockrun } else { caller.pid() },
        session: caller.pid(),
    };
    assert!(ready);
    // lockrun leaves the group just after starting the command: on a busy
    // machine the command may print `ready` first.
    wait_for("lockrun to leave the command's process group", || {
        process_group(lockrun) != Some(group.id)
    });
    (caller, group, lockrun)
}

/// The process group a test signals. Everything the test started, lockrun
/// (which leaves the group) too, is killed when the test ends, even by a
/// failed assertion (an orphaned lockrun would keep the test harness's
/// output pipe open).
struct Group {
    id: i32,
    /// The caller's session (its pid, a process the test has not reaped
    /// while the Group lives): everything the test started is in it.
    session: i32,
}

impl Drop for Group {
    fn drop(&mut self) {
        // Not kill(-id): once lockrun (a group leader) is gone, the group's
        // id is a free pid that any new process, and then its group, may
        // get. The session's id is the unreaped caller's, so every process
        // in it is this test's.
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if pid != self.session && session_of(pid) == Some(self.session) {
                // SAFETY: kill(2) on a process of the session of a process
                // this test started and has not reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The session of `pid` (field 6 of /proc/PID/stat).
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// The process group of `pid` (field 5 of /proc/PID/stat).
fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

fn signal_group(group: i32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group.
    assert_eq!(unsafe { libc::kill(-group, sig) }, 0, "kill -- -{group}");
}

/// systemd's KillMode=control-group, `kill -- -PGID`, a CI runner's clean-up:
/// the signal reaches the command by itself, and lockrun must not forward
/// it a second time. A signal sent to lockrun alone is still forwarded.
#[test]
fn a_signal_to_the_whole_process_group_reaches_the_command_once() {
    if !needs("setsid", "to start lockrun without a terminal") {
        return;
    }
    for leads in [false, true] {
        if leads && !needs("perl", "to make lockrun lead its own process group") {
            return;
        }
        let dir = temp_dir();
        let lock = lock_in(&dir);
        let (caller, group, lockrun) = lockrun_in_a_process_group(&lock, COUNTER, leads);
        // lockrun stopped meanwhile, a copy it forwarded would come only
        // after the command had taken the group's TERM, and could not merge
        // into it unseen.
        kill(lockrun, "STOP");
        wait_for("lockrun to stop", || process_state(lockrun) == Some('T'));
        signal_group(group.id, libc::SIGTERM);
        assert_eq!(caller.line(BOUND).as_deref(), Some("got TERM"));
        kill(lockrun, "CONT");
        // Sent to lockrun alone: forwarded, once.
        kill(lockrun, "USR1");
        assert_eq!(caller.line(BOUND).as_deref(), Some("got USR1"));
        // Two USR2s, one at a time (two at once may merge into one), end
        // the command; any line before them is a TERM that came twice.
        let mut rest = Vec::new();
        for _ in 0..2 {
            kill(lockrun, "USR2");
            while let Some(line) = caller.line(BOUND) {
                let done = line == "got USR2";
                rest.push(line);
                if done {
                    break;
                }
            }
        }
        while let Some(line) = caller.line(BOUND) {
            rest.push(line);
        }
        assert_eq!(
            rest,
            ["got USR2", "got USR2"],
            "leads={leads}: a signal to the process group arrived twice"
        );
        wait_for("lockrun to exit", || process_gone(lockrun));
    }
}

/// `timeout -k`, `kill -9 -- -PGID`: SIGKILL to the group ends the command
/// (which lockrun could not forward), and lockrun, outside the group, still
/// records how the command ended and lets go of the lock.
#[test]
fn sigkill_to_the_process_group_ends_the_command_and_lockrun_records_it() {
    if !needs("setsid", "to start lockrun without a terminal") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (_caller, group, lockrun) = lockrun_in_a_process_group(&lock, COUNTER, false);
    signal_group(group.id, libc::SIGKILL);
    wait_for("lockrun to exit", || process_gone(lockrun));
    let record = record_json(&lock);
    assert_eq!(
        record["exit"],
        serde_json::json!({ "signal": 9 }),
        "{record}"
    );
    // The command's own children (its `sleep`s) were killed with it, but
    // one may still be on its way out, holding the descriptor it inherited
    // (seen beside CPU hogs): the kernel's table says when all have let go.
    wait_for("the killed group to let go of the lock", || {
        kernel_holders(&lock) == 0
    });
    try_lock_now(&lock).success();
}

/// A lockrun that leads a process group of its own (a job-control shell's
/// job, `Popen(process_group=0)`) cannot leave it for a new one: it joins
/// its caller's group, the only other it may join (docs/GUIDE.md,
/// "Signals"). Its old group's signals then reach the command once, and a
/// signal to the caller's group, which now holds lockrun, reaches the
/// command once too, forwarded.
#[test]
fn a_group_leader_joins_its_callers_group_and_each_group_signal_arrives_once() {
    if !needs("setsid", "to start lockrun without a terminal")
        || !needs("perl", "to make lockrun lead its own process group")
    {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (caller, group, lockrun) = lockrun_in_a_process_group(&lock, COUNTER, true);
    assert_eq!(
        process_group(lockrun),
        Some(group.session),
        "lockrun's group"
    );
    // The caller's shell dies of USR1 (it has no trap); the command, whose
    // output the test reads, is told once, by lockrun.
    signal_group(group.session, libc::SIGUSR1);
    assert_eq!(caller.line(BOUND).as_deref(), Some("got USR1"));
    signal_group(group.id, libc::SIGHUP);
    assert_eq!(caller.line(BOUND).as_deref(), Some("got HUP"));
    let mut rest = Vec::new();
    for _ in 0..2 {
        kill(lockrun, "USR2");
        while let Some(line) = caller.line(BOUND) {
            let done = line == "got USR2";
            rest.push(line);
            if done {
                break;
            }
        }
    }
    assert_eq!(
        rest,
        ["got USR2", "got USR2"],
        "a group signal arrived twice"
    );
    wait_for("lockrun to exit", || process_gone(lockrun));
}

/// A command that signals its own process group (a script's `trap 'kill
/// 0' EXIT`) on USR1, itself or, with KILL_FROM=child, from a child that
/// stays alive (ignoring the TERM) until the test kills it. It writes
/// every signal it receives into the file named by $1 (a terminal's output
/// would stop with script(1), which stops itself when its child is stopped).
const KILLS_ITS_GROUP: &str = r#"
exec >>"$1"
kill_group() {
  if [ "$KILL_FROM" = child ]; then
    sh -c 'trap "" TERM; kill -TERM 0; echo killer $$; exec sleep 600 </dev/null 2>/dev/null' &
  else
    kill -TERM 0
  fi
}
trap 'echo got TERM' TERM
trap kill_group USR1
n=0; trap 'echo got USR2; n=$((n+1)); [ $n -ge 2 ] && exit 0' USR2
echo ready $$ $PPID
while :; do sleep 0.05 & wait $!; done
"#;

/// Where lockrun stays in the command's process group (a session leader,
/// or on a terminal), the command's own `kill 0` reaches lockrun too: it
/// has reached the command already, and must not come back through
/// lockrun. A signal from outside the command is still forwarded.
/// `start` runs lockrun on `sh SCRIPT OUT`.
fn the_commands_kill_zero_reaches_it_once(
    start: impl FnOnce(&std::path::Path, &std::path::Path, &std::path::Path) -> Command,
    how: &str,
    from_a_child: bool,
) {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (script, out) = (
        dir.path().join("kills-its-group.sh"),
        dir.path().join("out"),
    );
    std::fs::write(&script, KILLS_ITS_GROUP).unwrap();
    let mut start = start(&lock, &script, &out);
    if from_a_child {
        start.env("KILL_FROM", "child");
    }
    let caller = Background::spawn_quiet(start);
    let killer = || -> Option<i32> {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("killer ")?.parse().ok())
    };
    // The killing child outlives lockrun: gone at the end, even when an
    // assertion fails.
    struct Reap<F: Fn() -> Option<i32>>(F);
    impl<F: Fn() -> Option<i32>> Drop for Reap<F> {
        fn drop(&mut self) {
            if let Some(pid) = (self.0)() {
                // SAFETY: kill(2) on the child this test's command started
                // and that waits in sleep(1) for it.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let _reap = Reap(killer);
    // The child's line comes in no particular order.
    let lines = || -> Vec<String> {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines()
            .filter(|l| !l.starts_with("killer "))
            .map(str::to_owned)
            .collect()
    };
    let lines_after = |n: usize| {
        wait_for("the command's next line", || lines().len() > n);
        lines()
    };
    let ready = lines_after(0).remove(0);
    let pids: Vec<i32> = ready
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        ready.starts_with("ready ") && pids.len() == 2,
        "{how}: {ready:?}"
    );
    let (command, lockrun) = (pids[0], pids[1]);
    assert_eq!(
        process_group(command),
        process_group(lockrun),
        "{how}: lockrun is not in the command's group"
    );
    // Stopped, lockrun takes the group's TERM only after the command has
    // taken its own: a copy forwarded could not merge into it unseen.
    kill(lockrun, "STOP");
    wait_for("lockrun to stop", || process_state(lockrun) == Some('T'));
    kill(command, "USR1");
    assert_eq!(lines_after(1)[1..], ["got TERM"], "{how}");
    if from_a_child {
        // Alive, so that lockrun can follow its parents.
        wait_for("the killing child's line", || killer().is_some());
    }
    kill(lockrun, "CONT");
    for n in [2, 3] {
        kill(lockrun, "USR2");
        wait_for("the USR2 to arrive", || {
            lines().iter().filter(|l| *l == "got USR2").count() == n - 1
        });
    }
    wait_for("lockrun to exit", || process_gone(lockrun));
    assert_eq!(
        lines()[1..],
        ["got TERM", "got USR2", "got USR2"],
        "{how}: the command's own kill 0 came back through lockrun"
    );
    drop(caller);
}

#[test]
fn a_session_leaders_command_that_signals_its_own_group_gets_the_signal_once() {
    if !needs("setsid", "to start lockrun as a session leader") {
        return;
    }
    for (how, from_a_child) in [
        ("session leader", false),
        ("session leader, from a child", true),
    ] {
        the_commands_kill_zero_reaches_it_once(
            |lock, script, out| {
                // Not a group leader, setsid(1) calls setsid(2) itself and
                // execs: a service manager's arrangement.
                let mut start = Command::new("setsid");
                start
                    .arg(common::bin())
                    .arg(lock)
                    .arg("sh")
                    .arg(script)
                    .arg(out);
                start
            },
            how,
            from_a_child,
        );
    }
}

#[test]
fn on_a_terminal_a_command_that_signals_its_own_group_gets_the_signal_once() {
    if !needs("script", "a pseudo-terminal to test with")
        || !needs("setsid", "to give script(1) a session of its own")
    {
        return;
    }
    the_commands_kill_zero_reaches_it_once(
        |lock, script, out| {
            let inner = format!(
                "exec {} {} sh {} {}",
                common::bin(),
                lock.display(),
                script.display(),
                out.display()
            );
            // script(1) stops itself while its child is stopped. In the
            // test binary's process group, a stopped member makes the
            // kernel send SIGHUP to the whole group (the test binary and
            // cargo included) as soon as another test's command exits
            // with its lockrun outside the group: the group then counts
            // as orphaned with a stopped job. Hence a session of its own.
            let mut start = Command::new("setsid");
            start.args(["script", "-qec", &inner, "/dev/null"]);
            start
        },
        "terminal",
        false,
    );
}

/// Whether `sig` is pending for `pid` (its main thread or the whole
/// process), from /proc/PID/status.
fn signal_pending(pid: i32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().any(|l| {
        let Some((name, mask)) = l.split_once(':') else {
            return false;
        };
        (name == "SigPnd" || name == "ShdPnd")
            && u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & (1 << (sig - 1)) != 0)
    })
}

/// `--forward never`, for a supervisor that signals every process itself
/// (systemd's KillMode=control-group, GNU timeout without --foreground):
/// a signal sent to lockrun stays with lockrun, which waits for the
/// command and ends as it does. The command hears only the supervisor.
#[test]
fn with_forward_never_lockrun_keeps_its_signals_and_ends_as_the_command_does() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (mut lockrun, words) = Background::lockrun_holding(&["--forward", "never"], &lock, COUNTER);
    let command: i32 = words[0].parse().unwrap();
    // The supervisor signals the main process first, then each other one.
    kill(lockrun.pid(), "TERM");
    wait_for("lockrun to take its TERM and wait again", || {
        !signal_pending(lockrun.pid(), libc::SIGTERM) && process_state(lockrun.pid()) == Some('S')
    });
    // A TERM forwarded would be pending before this USR2, and be reported
    // before the next step.
    kill(command, "USR2");
    assert_eq!(lockrun.line(BOUND).as_deref(), Some("got USR2"));
    kill(command, "TERM");
    assert_eq!(lockrun.line(BOUND).as_deref(), Some("got TERM"));
    kill(command, "USR2");
    assert_eq!(lockrun.line(BOUND).as_deref(), Some("got USR2"));
    let status = lockrun.wait_exit(BOUND);
    assert!(
        status.success(),
        "lockrun did not end as its command: {status:?}"
    );
    assert_eq!(lockrun.line(BOUND), None, "a signal came twice");
    assert_eq!(record_json(&lock)["exit"], serde_json::json!({ "code": 0 }));
}

/// On a terminal a script and the lockrun it starts with `&` share one
/// process group (no job control in scripts). A signal from the script's
/// other processes (a watchdog subshell's `kill $pid`) is meant for
/// lockrun alone, and is forwarded: only the command's own are not.
#[test]
fn on_a_terminal_a_watchdog_subshells_signal_is_still_forwarded() {
    if !needs("script", "a pseudo-terminal to test with") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (script, out) = (dir.path().join("command.sh"), dir.path().join("out"));
    std::fs::write(&script, KILLS_ITS_GROUP).unwrap();
    let caller = format!(
        r#"{} {} sh {} {} &
pid=$!
until grep -q ready "$out"; do sleep 0.01; done
( kill -USR2 $pid )
until grep -q 'got USR2' "$out"; do sleep 0.01; done
( kill -USR2 $pid )
wait $pid
echo "lockrun exited $?" >>"$out""#,
        common::bin(),
        lock.display(),
        script.display(),
        out.display()
    );
    let mut start = Command::new("script");
    start
        .args([
            "-qec",
            &format!("out={}; {caller}", out.display()),
            "/dev/null",
        ])
        .env("SHELL", "/bin/sh");
    let _terminal = Background::spawn_quiet(start);
    let lines = || -> Vec<String> {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines().skip(1).map(str::to_owned).collect()
    };
    wait_for("lockrun to exit", || {
        lines()
            .last()
            .is_some_and(|l| l.starts_with("lockrun exited"))
    });
    assert_eq!(lines(), ["got USR2", "got USR2", "lockrun exited 0"]);
}

#[test]
fn forward_takes_auto_or_never_and_needs_a_command() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    for ok in [
        &["--forward", "auto"][..],
        &["--forward=never"],
        &["--forward", "never", "-F"],
    ] {
        lockrun().args(ok).arg(&lock).arg("true").assert().success();
    }
    let out = lockrun()
        .args(["--forward", "sometimes"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("--forward") && text.contains("sometimes"),
        "{text}"
    );
    let out = lockrun()
        .args(["--forward", "never", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--forward"));
}

/// GNU timeout without --foreground signals its child, then its whole
/// group. With `--forward never` the command hears it once, from the
/// group, and lockrun ends as the command does.
#[test]
fn under_gnu_timeout_with_forward_never_the_command_hears_the_timeout_once() {
    if !needs("timeout", "GNU timeout") || !needs("setsid", "to start timeout in its own session") {
        return;
    }
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let (script, out) = (dir.path().join("command.sh"), dir.path().join("out"));
    std::fs::write(
        &script,
        "exec >>\"$1\"\ntrap 'echo got TERM' TERM\ntrap 'exit 3' USR2\necho ready $$\nwhile :; do sleep 0.05 & wait $!; done\n",
    )
    .unwrap();
    // Its own session: timeout's group signal must reach nothing of ours.
    let mut start = Command::new("setsid");
    start
        .args(["timeout", "1h"])
        .arg(common::bin())
        .args(["--forward", "never"])
        .arg(&lock)
        .arg("sh")
        .arg(&script)
        .arg(&out);
    let mut timeout = Background::spawn_quiet(start);
    let lines = || std::fs::read_to_string(&out).unwrap_or_default();
    wait_for("the command to be ready", || lines().ends_with('\n'));
    let command: i32 = lines()["ready ".len()..].trim().parse().unwrap();
    let lockrun = parent_of(command).unwrap();
    // SIGALRM is timeout's own timer going off: the time limit, now.
    // (setsid, not a group leader, has exec'd timeout.)
    kill(timeout.pid(), "ALRM");
    wait_for("the command to hear it", || lines().contains("got TERM"));
    // A copy forwarded by lockrun is pending at the command once lockrun
    // has taken its TERM and waits again (unless the two merged).
    wait_for("lockrun to take its TERM and wait again", || {
        !signal_pending(lockrun, libc::SIGTERM) && process_state(lockrun) == Some('S')
    });
    kill(command, "USR2");
    let status = timeout.wait_exit(BOUND);
    assert_eq!(status.code(), Some(124), "timeout's status: {status:?}");
    assert_eq!(
        lines(),
        format!("ready {command}\ngot TERM\n"),
        "the command heard the timeout twice"
    );
    assert_eq!(record_json(&lock)["exit"], serde_json::json!({ "code": 3 }));
}
