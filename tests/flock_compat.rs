//! flock(1) compatibility (issue: drop-in for util-linux flock(1)): every
//! example of the flock(1) manual page, and every option spelling it
//! documents, run against /usr/bin/flock and against lockrun, comparing exit
//! statuses and effects.
//!
//! Each scenario is written once, as `sh -c` scripts where the manual's
//! example is shell syntax, with the tool under test in `$T`. It returns
//! what it saw as text; `compare` checks that /usr/bin/flock sees what the
//! manual says (else the test, not lockrun, is wrong) and that lockrun sees
//! the same. Where flock(1) is not installed only the lockrun half runs.
//!
//! The documented differences are mapped, not hidden:
//! - "lock not acquired" is 1 for flock(1) and 75 for lockrun (contract §4):
//!   scripts print it as `conflict` through `st`, which maps only the
//!   tool's own conflict status (`$CONFLICT`); `-E 1` (`$E1`, lockrun only)
//!   restores flock(1)'s 1 where the manual prints `$?` itself. In fd mode
//!   it is 1 for both (`fdst`).
//! - lockrun writes a holder record into an empty lock file, flock(1) never
//!   writes: probes and helper holders pass `$NR` (`--no-record` for
//!   lockrun), and file contents are compared only where flock(1) users rely
//!   on them (created; other content kept byte for byte).
//! - messages differ (`lockrun: ...`): only whether something was said is
//!   compared, for `--verbose`.
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

use common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};

const FLOCK: &str = "/usr/bin/flock";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Flock,
    Lockrun,
}

impl Tool {
    fn program(self) -> &'static str {
        match self {
            Tool::Flock => FLOCK,
            Tool::Lockrun => bin(),
        }
    }

    /// The status for "lock not acquired" when no `-E` is given.
    fn conflict(self) -> i32 {
        match self {
            Tool::Flock => 1,
            Tool::Lockrun => 75,
        }
    }
}

/// Shell functions every script gets (`. "$LIB"`).
const LIB: &str = r#"
# st STATUS: `conflict` for the tool's lock-not-acquired status, else STATUS.
st() { if [ "$1" = "$CONFLICT" ]; then echo conflict; else echo "$1"; fi; }
# fdst STATUS: the same for fd mode, where it is 1 for both tools.
fdst() { if [ "$1" = 1 ]; then echo conflict; else echo "$1"; fi; }
# probe [-s] PATH: from a new open of PATH, could the lock be taken at once?
probe() { "$T" $NR -n "$@" true 2>/dev/null; echo "probe=$(st $?)"; }
"#;

/// One run of a scenario with one tool, in a private directory `$W` with a
/// lock file path `$F` (not created) and a directory `$D`.
struct Run {
    tool: Tool,
    dir: tempfile::TempDir,
    f: PathBuf,
    d: PathBuf,
    /// Options for the scenario's tool invocation, as `$A` (unquoted).
    a: String,
}

impl Run {
    fn new(tool: Tool) -> Run {
        Run::with_args(tool, &[])
    }

    fn with_args(tool: Tool, args: &[&str]) -> Run {
        let dir = temp_dir();
        std::fs::write(dir.path().join("lib.sh"), LIB).unwrap();
        let f = dir.path().join("test.lock");
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        Run {
            tool,
            dir,
            f,
            d,
            a: args.join(" "),
        }
    }

    fn w(&self) -> &Path {
        self.dir.path()
    }

    fn env(&self, cmd: &mut Command) {
        let lockrun = self.tool == Tool::Lockrun;
        cmd.current_dir(self.w())
            .env("T", self.tool.program())
            .env("CONFLICT", self.tool.conflict().to_string())
            .env("NR", if lockrun { "--no-record" } else { "" })
            .env("E1", if lockrun { "-E 1" } else { "" })
            .env("A", &self.a)
            .env("LIB", self.w().join("lib.sh"))
            .env("W", self.w())
            .env("F", &self.f)
            .env("D", &self.d)
            .env("SHELL", "/bin/sh")
            .env_remove("FLOCKER");
    }

    /// Runs SCRIPT with `shell -c`, bounded; returns its stdout.
    fn shell(&self, shell: &str, script: &str) -> String {
        let mut cmd = Command::new("timeout");
        cmd.args(["20", shell, "-c", &format!(". \"$LIB\"\n{script}")]);
        self.env(&mut cmd);
        let out: Output = cmd.output().expect("run the scenario's shell");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_ne!(
            out.status.code(),
            Some(124),
            "{:?}: script timed out\n{script}\nstdout: {stdout}\nstderr: {}",
            self.tool,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn sh(&self, script: &str) -> String {
        self.shell("sh", script)
    }

    /// The tool with ARGS in the background (its stdin a pipe we hold).
    fn spawn(&self, args: &[&str]) -> Background {
        let mut cmd = Command::new(self.tool.program());
        cmd.args(args);
        self.env(&mut cmd);
        Background::spawn(cmd)
    }

    fn f(&self) -> &str {
        self.f.to_str().unwrap()
    }

    fn d(&self) -> &str {
        self.d.to_str().unwrap()
    }

    /// An exit status as scripts print it: `conflict` for the tool's
    /// lock-not-acquired status, 128+N for death by signal N.
    fn status(&self, status: ExitStatus) -> String {
        match (status.code(), status.signal()) {
            (Some(code), _) if code == self.tool.conflict() => "conflict".to_owned(),
            (Some(code), _) => code.to_string(),
            (None, Some(sig)) => (128 + sig).to_string(),
            _ => unreachable!(),
        }
    }
}

/// Runs SCENARIO with lockrun and, where installed, with flock(1): flock(1)
/// must see EXPECTED (what its manual says; otherwise the test is wrong),
/// and lockrun must see what flock(1) saw.
fn compare(what: &str, expected: &str, scenario: impl Fn(Tool) -> String) {
    if Path::new(FLOCK).exists() {
        let flock = scenario(Tool::Flock);
        assert_eq!(
            flock, expected,
            "{what}: {FLOCK} itself does not do what this test expects (a test bug)"
        );
        let lockrun = scenario(Tool::Lockrun);
        assert_eq!(lockrun, flock, "{what}: lockrun differs from flock(1)");
    } else {
        let lockrun = scenario(Tool::Lockrun);
        skip(&format!(
            "{FLOCK} is not installed: `{what}` checked against the manual only"
        ));
        assert_eq!(
            lockrun, expected,
            "{what}: lockrun differs from flock(1)'s manual"
        );
    }
}

// ---------------------------------------------------------------------------
// The manual's EXAMPLES, one test each. A private directory stands in for
// /tmp and a private file for /var/lock/mylockfile, so that tests running
// in parallel (and the machine's own users of /var/lock) never meet.

/// shell1> flock /tmp -c cat
/// shell2> flock -w .007 /tmp -c echo; /bin/echo $?
/// "Set exclusive lock to directory /tmp and the second command will fail."
#[test]
fn manual_exclusive_lock_on_a_directory_makes_a_short_wait_fail() {
    compare(
        "flock DIR -c cat; flock -w .007 DIR -c echo",
        "shell2: 1\ndefault status: conflict\nshell1: 0\n\nafter release: 0\n",
        |tool| {
            let run = Run::new(tool);
            let mut shell1 = run.spawn(&[run.d(), "-c", "cat"]);
            wait_for("shell1 to hold the directory", || {
                kernel_holders(&run.d) == 1
            });
            let mut seen = run.sh(r#"
                "$T" $E1 -w .007 "$D" -c echo; /bin/echo "shell2: $?"
                "$T" -w .007 "$D" -c echo; echo "default status: $(st $?)"
                "#);
            drop(shell1.stdin.take()); // cat reads end of file and exits
            seen += &format!("shell1: {}\n", run.status(shell1.wait_exit(BOUND)));
            seen += &run.sh(r#""$T" -w .007 "$D" -c echo; /bin/echo "after release: $?""#);
            seen
        },
    );
}

/// shell1> flock -s /tmp -c cat
/// shell2> flock -s -w .007 /tmp -c echo; /bin/echo $?
/// "Set shared lock to directory /tmp and the second command will not fail.
/// Notice that attempting to get exclusive lock with second command would
/// fail."
#[test]
fn manual_shared_locks_on_a_directory_coexist_and_keep_out_an_exclusive_one() {
    compare(
        "flock -s DIR -c cat; flock -s -w .007 DIR -c echo",
        "\nshared: 0\nexclusive: 1\nshell1: 0\n",
        |tool| {
            let run = Run::new(tool);
            let mut shell1 = run.spawn(&["-s", run.d(), "-c", "cat"]);
            wait_for("shell1 to hold the directory", || {
                kernel_holders(&run.d) == 1
            });
            let mut seen = run.sh(r#"
                "$T" -s -w .007 "$D" -c echo; /bin/echo "shared: $?"
                "$T" $E1 -w .007 "$D" -c echo; /bin/echo "exclusive: $?"
                "#);
            drop(shell1.stdin.take());
            seen += &format!("shell1: {}\n", run.status(shell1.wait_exit(BOUND)));
            seen
        },
    );
}

/// shell> flock -x local-lock-file echo 'a b c'
/// "Grab the exclusive lock "local-lock-file" before running echo with 'a b c'."
#[test]
fn manual_exclusive_lock_around_a_command_with_arguments() {
    compare(
        "flock -x local-lock-file echo 'a b c'",
        "a b c\nexit=0\ncreated\nprobe=conflict\nprobe=conflict\nunder lock: 0\n",
        |tool| {
            let run = Run::new(tool);
            let seen = run.sh(
                r#"
                "$T" -x local-lock-file echo 'a b c'; echo "exit=$?"
                [ -f local-lock-file ] && echo created
                "$T" -x local-lock-file sh -c '. "$LIB"; probe local-lock-file; probe -s local-lock-file'
                echo "under lock: $?"
                "#,
            );
            // flock(1) leaves the new file empty; lockrun may have written
            // its holder record into it (contract §5), and nothing else.
            let file = run.w().join("local-lock-file");
            if tool == Tool::Lockrun && std::fs::metadata(&file).unwrap().len() > 0 {
                assert_eq!(record_json(&file)["lockrun"], 1);
            }
            seen
        },
    );
}

/// (
///   flock -n 9 || exit 1
///   # ... commands executed under lock ...
/// ) 9>/var/lock/mylockfile
/// "The mode used to open the file doesn't matter to flock; using > or >>
/// allows the lockfile to be created [...] Using < requires that the file
/// already exists but only read permission is required."
#[test]
fn manual_subshell_locks_fd_9_and_gives_up_with_exit_1_when_held() {
    let free = "under lock\nprobe=conflict\nsubshell=0\nprobe=0\nempty\n";
    let held = "lock: conflict\nsubshell=1\n";
    let expected = [free, held].concat().repeat(4);
    compare("( flock -n 9 || exit 1; ... ) 9>FILE", &expected, |tool| {
        let run = Run::new(tool);
        let mut seen = String::new();
        for redirect in ["9>", "9>>", "9<", "9<>"] {
            // As the manual has it; `<` needs an existing file.
            std::fs::write(&run.f, "").unwrap();
            seen += &run.sh(&format!(
                r#"
                (
                  "$T" -n 9 || exit 1
                  echo "under lock"; probe "$F"
                ) {redirect}"$F"
                echo "subshell=$?"; probe "$F"
                [ -s "$F" ] && echo "written to" || echo empty
                "#
            ));
            seen += &run.sh(&format!(
                r#"
                "$T" $NR "$F" sh -c '
                  . "$LIB"
                  ( "$T" -n 9; echo "lock: $(fdst $?)" ) {redirect}"$F"
                  (
                    "$T" -n 9 || exit 1
                    echo "ran under lock"
                  ) {redirect}"$F"
                  echo "subshell=$?"'
                "#
            ));
        }
        seen
    });
}

/// The manual on -u: "it may be required in special cases, for example if
/// the enclosed command group may have forked a background process which
/// should not be holding the lock."
#[test]
fn manual_unlock_frees_the_lock_a_background_child_of_the_subshell_would_keep() {
    compare(
        "( flock -n 9; cmd & flock -u 9 ) 9>FILE",
        "unlock=0\nwith -u: probe=0\nwithout -u: probe=conflict\n",
        |tool| {
            let run = Run::new(tool);
            run.sh(r#"
                (
                  "$T" -n 9 || exit 1
                  sleep 30 </dev/null >/dev/null 2>&1 & echo $! >"$W/bg1"
                  "$T" -u 9; echo "unlock=$?"
                ) 9>"$F"
                printf 'with -u: '; probe "$F"
                (
                  "$T" -n 9 || exit 1
                  sleep 30 </dev/null >/dev/null 2>&1 & echo $! >"$W/bg2"
                ) 9>"$F"
                printf 'without -u: '; probe "$F"
                kill "$(cat "$W/bg1")" "$(cat "$W/bg2")"
                "#)
        },
    );
}

/// (
///   flock -s 213
///   # ... commands executed under lock ...
/// ) 213</tmp
/// (the older manuals' example: a shared lock on a descriptor opened
/// read-only, on a directory or an existing file)
#[test]
fn manual_shared_lock_on_fd_213_opened_read_only() {
    if !needs("bash", "dash has no descriptors above 9") {
        return;
    }
    compare(
        "( flock -s 213; ... ) 213</tmp",
        "lock=0\nprobe=0\nprobe=conflict\nsubshell=0\nprobe=0\n"
            .repeat(2)
            .as_str(),
        |tool| {
            let run = Run::new(tool);
            std::fs::write(&run.f, "data\n").unwrap();
            let mut seen = String::new();
            for target in ["$D", "$F"] {
                seen += &run.shell(
                    "bash",
                    &format!(
                        r#"
                        (
                          "$T" -s 213; echo "lock=$(st $?)"
                          probe -s "{target}"; probe "{target}"
                        ) 213<"{target}"
                        echo "subshell=$?"; probe "{target}"
                        "#
                    ),
                );
            }
            assert_eq!(std::fs::read(&run.f).unwrap(), b"data\n");
            seen
        },
    );
}

/// [ "${FLOCKER}" != "$0" ] && exec env FLOCKER="$0" flock -en "$0" "$0" "$@" || :
/// "Put it at the top of the shell script you want to lock and it'll
/// automatically lock itself on the first run." (The lock descriptor must
/// not be open for writing, or the kernel refuses to execute the script:
/// ETXTBSY. flock(1) opens it read-only.)
#[test]
fn manual_self_locking_script_boilerplate() {
    compare(
        "[ \"${FLOCKER}\" != \"$0\" ] && exec env FLOCKER=\"$0\" flock -en \"$0\" \"$0\" \"$@\" || :",
        "args: 4 [a -n --foo b c]\nprobe=conflict\nexit=0\n\
         second run: conflict\n\
         first run: args: 1 [hold] / probe=conflict / exit 0\n\
         args: 1 [again]\nprobe=conflict\n",
        |tool| {
            let run = Run::new(tool);
            let script = run.w().join("self.sh");
            let text = format!(
                r#"#!/bin/sh
[ "${{FLOCKER}}" != "$0" ] && exec env FLOCKER="$0" {tool} -en "$0" "$0" "$@" || :
if [ "$1" = hold ]; then echo ready; read line; fi
. "$LIB"
echo "args: $# [$*]"
probe "$0"
"#,
                tool = tool.program()
            );
            std::fs::write(&script, &text).unwrap();
            let mut seen =
                run.sh(r#"chmod +x self.sh; ./self.sh a -n --foo 'b c'; echo "exit=$?""#);

            let mut first = Command::new("./self.sh");
            first.arg("hold");
            run.env(&mut first);
            let mut first = Background::spawn(first);
            let ready = first.line(BOUND);
            if ready.as_deref() != Some("ready") {
                let status = run.status(first.wait_exit(BOUND));
                return seen + &format!("first run did not start: {ready:?}, exit {status}\n");
            }
            seen += &run.sh(r#"./self.sh x; echo "second run: $(st $?)""#);
            drop(first.stdin.take());
            let lines: Vec<String> = (0..2).filter_map(|_| first.line(BOUND)).collect();
            seen += &format!(
                "first run: {} / exit {}\n",
                lines.join(" / "),
                run.status(first.wait_exit(BOUND))
            );
            seen += &run.sh("./self.sh again");
            assert_eq!(
                std::fs::read_to_string(&script).unwrap(),
                text,
                "the script was modified"
            );
            seen
        },
    );
}

/// shell> exec 4<>/var/lock/mylockfile
/// shell> flock -n 4
/// "convenient for locking a file without spawning a subprocess"
#[test]
fn manual_lock_a_descriptor_the_shell_opened_with_exec() {
    compare(
        "exec 4<>FILE; flock -n 4",
        "lock=0\nprobe=conflict\nagain=0\nunlock=0\nprobe=0\nempty\n\
         held: lock=conflict\nheld: timed=conflict\nheld: E=9\n",
        |tool| {
            let run = Run::new(tool);
            let mut seen = run.sh(r#"
                exec 4<>"$F"
                "$T" -n 4; echo "lock=$(st $?)"
                probe "$F"
                "$T" -n 4; echo "again=$(st $?)"
                "$T" -u 4; echo "unlock=$(st $?)"
                probe "$F"
                [ -s "$F" ] && echo "written to" || echo empty
                "#);
            seen += &run.sh(r#"
                "$T" $NR "$F" sh -c '
                  . "$LIB"
                  exec 4<>"$F"
                  "$T" -n 4; echo "held: lock=$(fdst $?)"
                  "$T" -w .01 4; echo "held: timed=$(fdst $?)"
                  "$T" -E 9 -n 4; echo "held: E=$?"'
                "#);
            seen
        },
    );
}

// ---------------------------------------------------------------------------
// Behaviour the manual describes outside the examples.

/// A waiter (-w with a fraction) takes the lock as soon as it is released.
#[test]
fn a_timed_wait_takes_the_lock_when_it_is_released_in_time() {
    compare(
        "flock -w 15.5 FILE while another holds it",
        "waiter: got it\nwaiter: 0\nholder: 0\n",
        |tool| {
            let run = Run::new(tool);
            let mut holder = run.spawn(&[run.f(), "-c", "cat"]);
            wait_for("the holder to hold", || {
                run.f.exists() && kernel_holders(&run.f) == 1
            });
            let waiter = run.spawn(&["-w", "15.5", run.f(), "-c", "echo got it"]);
            wait_for("the waiter to wait in the kernel", || {
                kernel_waiters(&run.f) == 1
            });
            let mut waiter = waiter;
            drop(holder.stdin.take());
            let line = waiter.line(BOUND).unwrap_or_default();
            format!(
                "waiter: {line}\nwaiter: {}\nholder: {}\n",
                run.status(waiter.wait_exit(BOUND)),
                run.status(holder.wait_exit(BOUND))
            )
        },
    );
}

/// "When using the command variant, and executing the child worked, then
/// the exit status is that of the child command." (flock(1) exits 128+N for
/// a child killed by signal N; lockrun dies by N: a shell sees 128+N both
/// ways.)
#[test]
fn the_exit_status_is_the_commands() {
    compare(
        "flock FILE COMMAND exits as COMMAND",
        "0 1 3 255 42 7 143 \n",
        |tool| {
            Run::new(tool).sh(r#"
                for c in true false "sh -c 'exit 3'" "sh -c 'exit 255'"; do
                  eval "\"\$T\" \"\$F\" $c"; printf '%s ' $?
                done
                "$T" "$F" -c 'exit 42'; printf '%s ' $?
                "$T" "$D" sh -c 'exit 7'; printf '%s ' $?
                "$T" "$F" sh -c 'kill -TERM $$'; printf '%s ' $?
                echo
                "#)
        },
    );
}

/// Everything after COMMAND is the command's, options included.
#[test]
fn arguments_after_the_command_belong_to_the_command() {
    compare(
        "flock FILE printf ... -n -x --verbose -- -c -E 1",
        "-n|-x|--verbose|--|-c|-E|1| exit=0\n",
        |tool| {
            Run::new(tool)
                .sh(r#""$T" "$F" printf '%s|' -n -x --verbose -- -c -E 1; echo " exit=$?""#)
        },
    );
}

/// `flock [options] number` is the descriptor form only when the number is
/// alone: followed by a command it is a file name.
#[test]
fn a_number_followed_by_a_command_is_a_file_name() {
    compare("flock 9 echo nine", "nine\nexit=0\nfile 9\n", |tool| {
        Run::new(tool).sh(r#""$T" 9 echo nine; echo "exit=$?"; [ -f 9 ] && echo "file 9""#)
    });
}

/// The file is created if missing; a lock file with content (a script, a
/// data file) is locked in every mode and left as it was.
#[test]
fn the_lock_file_is_created_and_existing_content_is_kept() {
    compare(
        "flock FILE ... keeps FILE's content",
        "created\nstatuses: 0 0 0 0 0 0\ndata\n",
        |tool| {
            Run::new(tool).sh(r#"
                "$T" "$W/new.lock" true && [ -f "$W/new.lock" ] && echo created
                printf 'data\n' >"$F"
                "$T" "$F" true; a=$?
                "$T" -s "$F" true; b=$?
                "$T" -o "$F" true; c=$?
                "$T" -F "$F" true; d=$?
                "$T" "$F" -c true; e=$?
                ( "$T" 9; "$T" -u 9 ) 9<"$F"; f=$?
                echo "statuses: $a $b $c $d $e $f"
                cat "$F"
                "#)
        },
    );
}

/// Usage errors exit 64 and an unopenable lock file 66, as <sysexits.h>
/// says, in both tools.
#[test]
fn usage_errors_and_an_unopenable_lock_file_exit_alike() {
    compare(
        "flock usage errors",
        "none: 64\nno command: 64\n-c with two: 64\n-F with -o: 64\n-E 256: 64\n\
         bad -w: 64\nunknown option: 64\nmissing directory: 66\n",
        |tool| {
            Run::new(tool).sh(r#"
                t() { label=$1; shift; "$T" "$@" 2>/dev/null; echo "$label: $?"; }
                t none
                t "no command" "$F"
                t "-c with two" "$F" -c true extra
                t "-F with -o" -F -o "$F" true
                t "-E 256" -E 256 "$F" true
                t "bad -w" -w abc "$F" true
                t "unknown option" --no-such-option "$F" true
                t "missing directory" "$W/missing/x.lock" true
                "#)
        },
    );
}

/// lockrun and flock(1) exclude each other on the same file, in both
/// directions and in both forms.
#[test]
fn lockrun_and_flock_exclude_each_other() {
    if !Path::new(FLOCK).exists() {
        skip(&format!("{FLOCK} is not installed"));
        return;
    }
    let run = Run::new(Tool::Lockrun);
    let seen = run.sh(&format!(
        r#"
        L="$T"; FL={FLOCK}
        "$FL" "$F" "$L" -n --no-record "$F" true; echo "flock holds, lockrun -n: $?"
        "$L" --no-record "$F" "$FL" -n "$F" true; echo "lockrun holds, flock -n: $?"
        "$FL" -s "$F" "$L" -s -n "$F" true; echo "both shared: $?"
        "$FL" -s "$D" "$L" -n "$D" true; echo "flock shared dir, lockrun -x: $?"
        ( "$FL" -n 9; "$L" -n --no-record "$F" true; echo "flock fd 9, lockrun -n: $?" ) 9>"$F"
        ( "$L" -n 9; "$FL" -n "$F" true; echo "lockrun fd 9, flock -n: $?" ) 9>"$F"
        "#
    ));
    assert_eq!(
        seen,
        "flock holds, lockrun -n: 75\nlockrun holds, flock -n: 1\nboth shared: 0\n\
         flock shared dir, lockrun -x: 75\nflock fd 9, lockrun -n: 75\nlockrun fd 9, flock -n: 1\n"
    );
}

// ---------------------------------------------------------------------------
// Every option spelling flock(1) documents (and the ones its parser takes),
// one test each, each checked by what the option does.

fn takes_an_exclusive_lock(args: &[&str]) {
    compare(
        &format!("flock {} FILE cmd: exclusive", args.join(" ")),
        "probe=conflict\nprobe=conflict\nexit=0\n",
        |tool| {
            Run::with_args(tool, args).sh(
                r#""$T" $A "$F" sh -c '. "$LIB"; probe -s "$F"; probe "$F"'; echo "exit=$(st $?)""#,
            )
        },
    );
}

fn takes_a_shared_lock(args: &[&str]) {
    compare(
        &format!("flock {} FILE cmd: shared", args.join(" ")),
        "probe=0\nprobe=conflict\nexit=0\n",
        |tool| {
            Run::with_args(tool, args).sh(
                r#""$T" $A "$F" sh -c '. "$LIB"; probe -s "$F"; probe "$F"'; echo "exit=$(st $?)""#,
            )
        },
    );
}

/// With the lock held elsewhere the command does not run and the status is
/// the conflict status; with the lock free it runs. (A wait that does not
/// give up runs into the script's 20 s bound and fails the test.)
fn gives_up_when_held(args: &[&str]) {
    compare(
        &format!("flock {} FILE cmd: gives up", args.join(" ")),
        "held: exit=conflict\nran\nfree: exit=0\n",
        |tool| {
            Run::with_args(tool, args).sh(r#"
                "$T" $NR "$F" sh -c '. "$LIB"; "$T" $A "$F" echo ran; echo "held: exit=$(st $?)"'
                "$T" $A "$F" echo ran; echo "free: exit=$(st $?)"
                "#)
        },
    );
}

fn conflict_exit_code(args: &[&str], code: u8) {
    compare(
        &format!("flock {} FILE cmd: conflict status", args.join(" ")),
        &format!("-n: {code}\n-w: {code}\nfree: 3\n"),
        |tool| {
            Run::with_args(tool, args).sh(r#"
                "$T" $NR "$F" sh -c '
                  "$T" -n $A "$F" echo ran; echo "-n: $?"
                  "$T" -w .01 $A "$F" echo ran; echo "-w: $?"'
                "$T" $A "$F" sh -c 'exit 3'; echo "free: $?"
                "#)
        },
    );
}

/// -o: the command (and so its background children) does not hold the
/// lock: once the tool exits, a child left running keeps nothing.
fn closes_the_lock_for_the_command(args: &[&str]) {
    compare(
        &format!("flock {} FILE cmd: close", args.join(" ")),
        "with: exit=0\nprobe=0\nwithout: exit=0\nprobe=conflict\n",
        |tool| {
            Run::with_args(tool, args).sh(r#"
                bg='sleep 30 </dev/null >/dev/null 2>&1 & echo $! >"$W/$0"'
                "$T" $A "$F" sh -c "$bg" bg1; echo "with: exit=$?"; probe "$F"
                "$T" "$F" sh -c "$bg" bg2; echo "without: exit=$?"; probe "$F"
                kill "$(cat "$W/bg1")" "$(cat "$W/bg2")"
                "#)
        },
    );
}

/// -F: the tool becomes the command (same process), which holds the lock.
fn runs_the_command_in_place(args: &[&str]) {
    compare(
        &format!("flock {} FILE cmd: no fork", args.join(" ")),
        "probe=conflict\nwith: exit=5 same process\nprobe=conflict\nwithout: exit=5 forked\n",
        |tool| {
            Run::with_args(tool, args).sh(r#"
                cmd='. "$LIB"; echo $$ >"$W/pid"; probe "$F"; exit 5'
                one() {
                  "$T" "$@" "$F" sh -c "$cmd" & tool=$!
                  wait $tool; s=$?
                  [ "$(cat "$W/pid")" = "$tool" ] && how="same process" || how=forked
                }
                one $A; echo "with: exit=$s $how"
                one; echo "without: exit=$s $how"
                "#)
        },
    );
}

/// -c: one string through "$SHELL" -c, under the lock.
fn runs_a_shell_command(args: &[&str]) {
    compare(
        &format!("flock FILE {} STRING", args.join(" ")),
        "/bin/sh 42\nprobe=conflict\nexit=4\n",
        |tool| {
            Run::with_args(tool, args).sh(
                r#""$T" "$F" $A 'echo "$0" $((6*7)); . "$LIB"; probe "$F"; exit 4'; echo "exit=$?""#,
            )
        },
    );
}

/// -u on a descriptor the shell opened: the lock goes, the descriptor stays.
fn unlocks_a_descriptor(args: &[&str]) {
    compare(
        &format!("flock {} FD", args.join(" ")),
        "lock=0\nprobe=conflict\nunlock=0\nprobe=0\nrelock=0\nprobe=conflict\n",
        |tool| {
            Run::with_args(tool, args).sh(r#"
                exec 9>"$F"
                "$T" -n 9; echo "lock=$(st $?)"; probe "$F"
                "$T" $A 9; echo "unlock=$(st $?)"; probe "$F"
                "$T" -n 9; echo "relock=$(st $?)"; probe "$F"
                "#)
        },
    );
}

/// --verbose says something on success and on conflict; without it a
/// success is silent. Statuses are unchanged.
fn reports_verbosely(args: &[&str]) {
    // flock(1) prints its success lines on stdout, lockrun on stderr
    // (contract §4: messages go to stderr): what the tool itself says is
    // collected from both, and the command writes to descriptor 3.
    compare(
        &format!("flock {} FILE cmd", args.join(" ")),
        "ran\nexit=0\nreported\nheld: conflict\nreported\nran\nsilent without it\n",
        |tool| {
            Run::with_args(tool, args).sh(r#"
                said() { [ -s "$W/said" ] && echo "$1"; }
                "$T" $A "$F" sh -c 'echo ran >&3' 3>&1 >"$W/said" 2>&1
                echo "exit=$(st $?)"; said reported
                "$T" $NR "$F" sh -c '
                  . "$LIB"
                  "$T" $A -n "$F" echo ran >"$W/said" 2>&1; echo "held: $(st $?)"
                  [ -s "$W/said" ] && echo reported'
                "$T" "$F" sh -c 'echo ran >&3' 3>&1 >"$W/said" 2>&1
                [ -s "$W/said" ] || echo "silent without it"
                "#)
        },
    );
}

macro_rules! spelling_tests {
    ($($name:ident => $body:expr;)*) => {
        $(
            #[test]
            fn $name() {
                $body;
            }
        )*
    };
}

spelling_tests! {
    option_x => takes_an_exclusive_lock(&["-x"]);
    option_e => takes_an_exclusive_lock(&["-e"]);
    option_exclusive => takes_an_exclusive_lock(&["--exclusive"]);
    option_en_is_exclusive => takes_an_exclusive_lock(&["-en"]);
    option_en_is_nonblocking => gives_up_when_held(&["-en"]);
    option_s => takes_a_shared_lock(&["-s"]);
    option_shared => takes_a_shared_lock(&["--shared"]);
    option_n => gives_up_when_held(&["-n"]);
    option_nb => gives_up_when_held(&["--nb"]);
    option_nonblock => gives_up_when_held(&["--nonblock"]);
    option_nonblocking => gives_up_when_held(&["--nonblocking"]);
    option_w_fraction => gives_up_when_held(&["-w", ".05"]);
    option_w_attached => gives_up_when_held(&["-w0.05"]);
    option_w_zero_is_nonblocking => gives_up_when_held(&["-w", "0"]);
    option_wait => gives_up_when_held(&["--wait", "0.05"]);
    option_wait_equals => gives_up_when_held(&["--wait=.05"]);
    option_timeout => gives_up_when_held(&["--timeout", ".05"]);
    option_timeout_equals => gives_up_when_held(&["--timeout=0.05"]);
    option_e_upper => conflict_exit_code(&["-E", "7"], 7);
    option_e_upper_attached => conflict_exit_code(&["-E7"], 7);
    option_e_upper_zero => conflict_exit_code(&["-E", "0"], 0);
    option_conflict_exit_code => conflict_exit_code(&["--conflict-exit-code", "7"], 7);
    option_conflict_exit_code_equals => conflict_exit_code(&["--conflict-exit-code=255"], 255);
    option_o => closes_the_lock_for_the_command(&["-o"]);
    option_close => closes_the_lock_for_the_command(&["--close"]);
    option_f_upper => runs_the_command_in_place(&["-F"]);
    option_no_fork => runs_the_command_in_place(&["--no-fork"]);
    option_c => runs_a_shell_command(&["-c"]);
    option_command => runs_a_shell_command(&["--command"]);
    option_u => unlocks_a_descriptor(&["-u"]);
    option_unlock => unlocks_a_descriptor(&["--unlock"]);
    option_verbose => reports_verbosely(&["--verbose"]);
    option_double_dash_ends_the_options => gives_up_when_held(&["-n", "--"]);
}

// ---------------------------------------------------------------------------
// getopt's rules (issue 19 item 1): an option given again overrides the
// earlier one, as an alias or wrapper that prepends options needs.

#[test]
fn repeated_options_the_last_one_wins() {
    let expected = "ee=9\nnn=conflict\nww=conflict\nsx=conflict\nxs=0\nux=conflict\n";
    compare(
        "-E 1 -E 9, -n -n, -w 1 -w 0, -s -x, -x -s",
        expected,
        |tool| {
            let run = Run::new(tool);
            run.sh(r#"
            "$T" $NR -s "$F" sh -c '
              . "$LIB"
              "$T" $NR -E 1 -E 9 -x -n "$F" true; echo "ee=$?"
              "$T" $NR -n -n "$F" true; echo "nn=$(st $?)"
              "$T" $NR -w 1 -w 0 "$F" true; echo "ww=$(st $?)"
              "$T" $NR -s -x -n "$F" true; echo "sx=$(st $?)"
              "$T" $NR -x -s -n "$F" true; echo "xs=$?"
              "$T" $NR -u -x -n "$F" true; echo "ux=$(st $?)"'
            "#)
        },
    );
}

/// `-u FILE COMMAND`: flock(1) "unlocks" a descriptor it has just opened,
/// which holds nothing, and runs the command, even while another holds
/// the lock.
#[test]
fn unlock_with_a_file_and_a_command_runs_the_command_holding_nothing() {
    compare("-u FILE COMMAND", "ran\nu=0\nprobe=0\n", |tool| {
        let run = Run::new(tool);
        run.sh(r#"
            "$T" $NR "$F" sh -c '"$T" -u "$F" echo ran; echo "u=$?"'
            "$T" -u "$F" sh -c '. "$LIB"; probe "$F"'
            "#)
    });
}

/// 0666 minus the umask, as flock(1) and touch(1) create files: a group
/// sharing a lock directory (umask 002) can open the file for writing.
#[test]
fn the_lock_file_is_created_0666_minus_the_umask() {
    compare("umask 002; create", "664\n600\n", |tool| {
        let run = Run::new(tool);
        run.sh(r#"
            (umask 002; "$T" $NR "$F" true); stat -c %a "$F"
            (umask 077; "$T" $NR "$F.2" true); stat -c %a "$F.2"
            "#)
    });
}

// ---------------------------------------------------------------------------
// lockrun invoked as `flock` (issue 19 item 5): flock(1)'s statuses and
// output, compared byte for byte with /usr/bin/flock.

/// Runs SCRIPT with `$T` a link named `flock` to lockrun, and (where
/// installed) with /usr/bin/flock itself; both must print exactly the same
/// (stdout and stderr, with times normalised).
fn compare_as_flock(what: &str, script: &str) {
    let run = |flock: &Path| -> String {
        let dir = temp_dir();
        let mut cmd = Command::new("timeout");
        cmd.args(["20", "sh", "-c", &format!("exec 2>&1\n{script}")])
            .current_dir(dir.path())
            .env("T", flock)
            .env("F", dir.path().join("test.lock"))
            .env("SHELL", "/bin/sh");
        let out = cmd.output().expect("run the scenario");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // `getting lock took 0.000004 seconds`
        let mut normal = String::new();
        for line in text.lines() {
            match line.split_once(" took ") {
                Some((head, _)) if head.ends_with("getting lock") => {
                    normal += &format!("{head} took N seconds\n")
                }
                _ => normal += &format!("{line}\n"),
            }
        }
        normal.replace(&dir.path().display().to_string(), "$W")
    };
    let links = temp_dir();
    let link = links.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let ours = run(&link);
    if Path::new(FLOCK).exists() {
        let theirs = run(Path::new(FLOCK));
        assert_eq!(
            ours, theirs,
            "{what}: lockrun as flock differs from {FLOCK}"
        );
    } else {
        skip(&format!("{FLOCK} is not installed: `{what}` not compared"));
    }
}

#[test]
fn as_flock_a_conflict_is_status_1_and_silent() {
    compare_as_flock(
        "conflict",
        r#"
        "$T" "$F" sh -c '
          "$T" -n "$F" echo never; echo "n=$?"
          "$T" -w 0.05 "$F" echo never; echo "w=$?"
          "$T" -n -E 7 "$F" echo never; echo "E=$?"
          exec 9>>"$F"; "$T" -n 9; echo "fd=$?"'
        "#,
    );
}

#[test]
fn as_flock_verbose_prints_flocks_lines() {
    compare_as_flock(
        "--verbose",
        r#"
        "$T" --verbose "$F" echo ran; echo "ok=$?"
        "$T" "$F" sh -c '
          "$T" --verbose -n "$F" true; echo "n=$?"
          "$T" --verbose -w 0.05 "$F" true; echo "w=$?"'
        exec 9>>"$F"; "$T" --verbose 9; echo "fd=$?"
        "#,
    );
}

#[test]
fn as_flock_exit_statuses_are_flocks() {
    compare_as_flock(
        "exit statuses",
        r#"
        "$T" "$F" sh -c 'exit 3'; echo "exit=$?"
        "$T" "$F" sh -c 'kill -TERM $$'; echo "signal=$?"
        "$T" "$F" /no/such/command 2>/dev/null; echo "not found=$?"
        "$T" 9 2>/dev/null; echo "closed fd=$?"
        "$T" "$F" 2>/dev/null; echo "no command=$?"
        "$T" -F -o "$F" true 2>/dev/null; echo "-F -o=$?"
        "$T" -o 9 9>>"$F"; echo "fd form -o=$?"
        "$T" -F 9 9>>"$F"; echo "fd form -F=$?"
        "#,
    );
}

/// No subcommands under the name flock: `flock holder x` locks a file
/// named holder.
#[test]
fn as_flock_holder_and_check_are_file_names() {
    compare_as_flock(
        "no subcommands",
        r#"
        cd "$(dirname "$F")"
        "$T" holder echo one; echo "holder=$?"
        "$T" check echo two; echo "check=$?"
        ls holder check
        "#,
    );
}

/// Under the name flock lockrun still writes its record.
#[test]
fn as_flock_the_record_is_still_written() {
    let dir = temp_dir();
    let link = dir.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let lock = lock_in(&dir);
    let status = Command::new(&link).arg(&lock).arg("true").status().unwrap();
    assert!(status.success());
    let record = record_json(&lock);
    assert_eq!(record["command"], serde_json::json!(["true"]));
    assert_eq!(record["exit"], serde_json::json!({"code": 0}));
}

/// Issue 26 item 16: flock(1)'s getopt stops at the lock file, so what
/// follows it is the command, a `-n` or a `--` included; `-w` is strtold's
/// (hex, and values its timer refuses are EX_OSERR); a write error on
/// stdout at exit is status 1.
#[test]
fn as_flock_the_command_starts_after_the_lock_file_and_w_is_strtold() {
    compare_as_flock(
        "command after the lock file, -w, write errors",
        r#"
        "$T" "$F" -n true 2>/dev/null; echo "-n after=$?"
        "$T" "$F" -- true 2>/dev/null; echo "-- after=$?"
        "$T" -- "$F" echo escaped; echo "-- before=$?"
        "$T" "$F" -c 'echo shell'; echo "-c=$?"
        "$T" -w 0x10 "$F" true; echo "hex=$?"
        "$T" -w 0x1p-2 "$F" true; echo "hex float=$?"
        "$T" -w ' 1e1' "$F" true; echo "exponent=$?"
        "$T" -w 0.0000001 "$F" true; echo "below 1us=$?"
        "$T" -w -1 "$F" true; echo "negative=$?"
        "$T" -w inf "$F" true; echo "inf=$?"
        "$T" -w nan "$F" true; echo "nan=$?"
        "$T" -w 1x "$F" true 2>/dev/null; echo "garbage=$?"
        "$T" --version >/dev/full 2>/dev/null; echo "version to full=$?"
        "$T" --help >/dev/full 2>/dev/null; echo "help to full=$?"
        "$T" --verbose "$F" true >/dev/full 2>/dev/null; echo "verbose to full=$?"
        "#,
    );
    // While held, a -w below a microsecond is -n: it fails at once.
    let dir = temp_dir();
    let link = dir.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let lock = lock_in(&dir);
    let (_holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; sleep 60");
    let status = Command::new(&link)
        .args(["-w", "0.0000001"])
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
}

/// `flock --version` says it is lockrun (issue 32 item 6).
#[test]
fn as_flock_version_names_lockrun() {
    let dir = temp_dir();
    let link = dir.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let out = Command::new(&link).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("flock (lockrun {})\n", env!("CARGO_PKG_VERSION"))
    );
}

/// Issue 26 item 8: as flock, an empty lock file another program made
/// (apt's /var/lib/apt/lists/lock) is locked and never written; one it
/// created itself, or one holding a lockrun record, gets the record.
#[test]
fn as_flock_an_empty_file_of_another_program_is_never_written() {
    let dir = temp_dir();
    let link = dir.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let theirs = dir.path().join("apt.lock");
    std::fs::write(&theirs, "").unwrap();
    let out = Command::new(&link)
        .arg(&theirs)
        .args(["sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n", "{out:?}");
    assert_eq!(
        std::fs::read(&theirs).unwrap(),
        b"",
        "flock wrote into apt's lock file"
    );
    // Under its own name lockrun writes there, as documented.
    lockrun().arg(&theirs).arg("true").assert().success();
    assert_eq!(record_json(&theirs)["command"], serde_json::json!(["true"]));
    // ... and then the file holds a lockrun record, which flock updates.
    Command::new(&link)
        .arg(&theirs)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(record_json(&theirs)["exit"], serde_json::json!({"code": 0}));
    assert!(record_json(&theirs)["released_at"].is_string());
}

/// As flock, a usage error shows flock's usage, which has no holder or
/// check, and names flock (issue 32 item 6).
#[test]
fn as_flock_usage_errors_show_flocks_usage() {
    let dir = temp_dir();
    let link = dir.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    for args in [&[][..], &["-n"], &[dir.path().to_str().unwrap()]] {
        let out = Command::new(&link).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Usage: flock "), "{args:?}: {err}");
        assert!(
            !err.contains("holder") && !err.contains("lockrun"),
            "{args:?}: {err}"
        );
    }
}
