//! `--metrics-file PATH` (issue 31 item 2, CONTRACT §17): the Prometheus
//! textfile, its counters exact under concurrent writers, the file whole
//! at every moment, and a file that cannot be written never failing a run.
// Unix: these spawn sh and read /proc; tests/windows.rs is the Windows suite.
#![cfg(unix)]

mod common;
#[path = "support/observe.rs"]
mod observe;

use common::*;
use observe::{Series, parse_strict, value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

const OUTCOMES: [&str; 7] = [
    "ran",
    "busy",
    "timeout",
    "skipped_recent",
    "lost",
    "max_time",
    "error",
];

fn read(metrics: &Path) -> BTreeMap<Series, f64> {
    let text = std::fs::read_to_string(metrics).expect("the metrics file");
    parse_strict(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn runs(all: &BTreeMap<Series, f64>, lock: &Path) -> Vec<(&'static str, f64)> {
    let lock = lock.to_str().expect("a UTF-8 temp path");
    OUTCOMES
        .iter()
        .map(|o| {
            let n = value(all, "lockrun_runs_total", lock, Some(o))
                .unwrap_or_else(|| panic!("no {o} counter for {lock}: {all:?}"));
            (*o, n)
        })
        .collect()
}

fn gauge(all: &BTreeMap<Series, f64>, name: &str, lock: &Path) -> f64 {
    let lock = lock.to_str().expect("a UTF-8 temp path");
    value(all, name, lock, None).unwrap_or_else(|| panic!("no {name} for {lock}: {all:?}"))
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// The issue's check: two lockruns (of two locks) writing one PATH 200
/// times each; every update counted, and a reader parsing the file in a
/// loop meanwhile never sees it partial, and never sees a series go back.
#[test]
fn two_lockruns_writing_one_file_200_times_each_lose_no_update_and_it_always_parses() {
    const RUNS: usize = 200;
    let dir = temp_dir();
    let metrics = dir.path().join("jobs.prom");
    let locks = [dir.path().join("a.lock"), dir.path().join("b.lock")];
    let done = Arc::new(AtomicBool::new(false));

    let reader = {
        let (metrics, done) = (metrics.clone(), done.clone());
        std::thread::spawn(move || {
            // What the reader saw wrong, first thing only, reported after
            // the counts (so that a broken build shows both).
            let mut last: BTreeMap<Series, f64> = BTreeMap::new();
            let mut seen = 0usize;
            while !done.load(Ordering::SeqCst) {
                let text = match std::fs::read_to_string(&metrics) {
                    Ok(text) => text,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(format!("reading {}: {e}", metrics.display())),
                };
                let now = parse_strict(&text).map_err(|e| {
                    format!("a reader saw a file that does not parse: {e}\n{text:?}")
                })?;
                for (series, before) in &last {
                    let Some(after) = now.get(series) else {
                        return Err(format!("{series:?} vanished from the file: {text:?}"));
                    };
                    if series.0 == "lockrun_runs_total" && after < before {
                        return Err(format!("{series:?} went from {before} to {after}"));
                    }
                }
                if !now.is_empty() {
                    seen += 1;
                }
                last = now;
            }
            Ok(seen)
        })
    };
    let writers: Vec<_> = locks
        .iter()
        .cloned()
        .map(|lock| {
            let metrics = metrics.clone();
            std::thread::spawn(move || {
                for _ in 0..RUNS {
                    lockrun()
                        .arg("--metrics-file")
                        .arg(&metrics)
                        .arg(&lock)
                        .arg("true")
                        .assert()
                        .success()
                        .stderr("");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("a writer panicked");
    }
    done.store(true, Ordering::SeqCst);
    let reader = reader.join().expect("the reader panicked");
    let all = read(&metrics);
    for lock in &locks {
        let counted = runs(&all, lock);
        assert_eq!(
            counted,
            OUTCOMES
                .iter()
                .map(|o| (*o, if *o == "ran" { RUNS as f64 } else { 0.0 }))
                .collect::<Vec<_>>(),
            "{}",
            lock.display()
        );
    }
    let snapshots = reader.unwrap_or_else(|e| panic!("{e}"));
    assert!(snapshots > 0, "the reader never saw the file");
    eprintln!("the reader parsed {snapshots} non-empty snapshots");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read the directory")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

/// Every outcome lands in its counter, the gauges say what the last run
/// did, and a lock with a quote and a backslash in its name is labelled
/// with both escaped (the strict parser unescapes them back).
#[test]
fn each_outcome_is_counted_and_the_gauges_describe_the_last_run() {
    let dir = temp_dir();
    let metrics = dir.path().join("m.prom");
    let lock = dir.path().join("we\"ird\\name.lock");
    let other = dir.path().join("other.lock");
    let run = |args: &[&str], code: i32| {
        let before = now();
        lockrun()
            .arg("--metrics-file")
            .arg(&metrics)
            .args(args)
            .arg(&lock)
            .args(["sh", "-c", "exit ${EXIT:-0}"])
            .env("EXIT", "3")
            .assert()
            .code(code);
        (before, now())
    };
    lockrun()
        .arg("--metrics-file")
        .arg(&metrics)
        .arg(&other)
        .arg("true")
        .assert()
        .success();

    // ran, status 3: not a success.
    let (before, after) = run(&[], 3);
    let all = read(&metrics);
    assert_eq!(runs(&all, &lock)[0], ("ran", 1.0));
    assert_eq!(gauge(&all, "lockrun_last_exit_status", &lock), 3.0);
    assert_eq!(
        gauge(&all, "lockrun_last_success_timestamp_seconds", &lock),
        0.0
    );
    let (start, end) = (
        gauge(&all, "lockrun_last_start_timestamp_seconds", &lock),
        gauge(&all, "lockrun_last_end_timestamp_seconds", &lock),
    );
    assert!(
        before - 0.001 <= start && start <= end && end <= after + 0.001,
        "{before} {start} {end} {after}"
    );

    // ran, status 0: a success at its end.
    lockrun()
        .arg("--metrics-file")
        .arg(&metrics)
        .arg(&lock)
        .arg("true")
        .assert()
        .success();
    let all = read(&metrics);
    assert_eq!(
        gauge(&all, "lockrun_last_success_timestamp_seconds", &lock),
        gauge(&all, "lockrun_last_end_timestamp_seconds", &lock)
    );

    // busy, then timeout, while another process holds the lock.
    let (mut holder, _) = Background::lockrun_holding(&[], &lock, "echo ready; read x");
    run(&["-n"], 75);
    run(&["-w", "0.2"], 75);
    let all = read(&metrics);
    let counted = runs(&all, &lock);
    assert_eq!(
        &counted[..3],
        [("ran", 2.0), ("busy", 1.0), ("timeout", 1.0)]
    );
    assert_eq!(gauge(&all, "lockrun_not_acquired_in_a_row", &lock), 2.0);
    assert_eq!(gauge(&all, "lockrun_last_exit_status", &lock), 75.0);
    assert!(gauge(&all, "lockrun_last_wait_seconds", &lock) >= 0.2);
    holder.release();
    assert!(holder.wait_exit(BOUND).success());

    // max_time: stopped, 124; the streak of refusals ends.
    lockrun()
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["--max-time", "100ms"])
        .arg(&lock)
        .args(["sleep", "30"])
        .assert()
        .code(124);
    let all = read(&metrics);
    assert_eq!(runs(&all, &lock)[5], ("max_time", 1.0));
    assert_eq!(gauge(&all, "lockrun_last_exit_status", &lock), 124.0);
    assert_eq!(gauge(&all, "lockrun_not_acquired_in_a_row", &lock), 0.0);
    assert!(gauge(&all, "lockrun_last_duration_seconds", &lock) >= 0.1);

    // skipped_recent: a success, then a skip.
    for _ in 0..2 {
        lockrun()
            .arg("--metrics-file")
            .arg(&metrics)
            .args(["--skip-if-succeeded-within", "1h"])
            .arg(&lock)
            .arg("true")
            .assert()
            .success();
    }
    let all = read(&metrics);
    assert_eq!(
        runs(&all, &lock),
        [
            ("ran", 3.0),
            ("busy", 1.0),
            ("timeout", 1.0),
            ("skipped_recent", 1.0),
            ("lost", 0.0),
            ("max_time", 1.0),
            ("error", 0.0)
        ]
    );
    assert_eq!(gauge(&all, "lockrun_last_exit_status", &lock), 0.0);
    // The other lock sharing the file kept its series.
    assert_eq!(runs(&all, &other)[0], ("ran", 1.0));
    let text = std::fs::read_to_string(&metrics).expect("the metrics file");
    assert!(text.contains(r#"lock="#), "{text}");
    assert!(text.contains(r#"we\"ird\\name.lock""#), "{text}");
}

/// A directory lockrun may not write to: a warning naming the file and
/// the OS error, and the run as it would have been (its output, its
/// status). As root the directory's mode stops nobody, so lockrun runs as
/// user nobody there.
#[test]
fn a_metrics_file_that_cannot_be_written_is_a_warning_and_the_run_goes_on() {
    let as_root = rustix::process::geteuid().is_root();
    if as_root && !can_drop_privileges() {
        return;
    }
    let dir = temp_dir();
    let locks = dir.path().join("locks");
    let readonly = dir.path().join("readonly");
    std::fs::create_dir(&locks).unwrap();
    std::fs::create_dir(&readonly).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&readonly, std::fs::Permissions::from_mode(0o555)).unwrap();
    let metrics = readonly.join("m.prom");
    let mut cmd = if as_root {
        lockrun_as_nobody()
    } else {
        std_lockrun()
    };
    cmd.arg("--metrics-file")
        .arg(&metrics)
        .arg(locks.join("a.lock"))
        .args(["sh", "-c", "echo ran; exit 5"]);
    let out = cmd.output().expect("run lockrun");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(
        stderr.contains(&format!(
            "lockrun: warning: could not update the metrics file {}",
            metrics.display()
        )) && stderr.contains("Permission denied")
            && stderr.contains("the run itself is unaffected"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!metrics.exists());
}

#[test]
fn metrics_need_a_run_lockrun_sees_end() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let metrics = dir.path().join("m.prom");
    let m = metrics.to_str().unwrap();
    lockrun()
        .args(["-F", "--metrics-file", m])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(64)
        .stderr(predicates::str::contains("cannot be used with -F"));
    lockrun()
        .args(["--metrics-file", m, "9"])
        .assert()
        .code(64)
        .stderr(predicates::str::contains("fd mode"));
    lockrun()
        .args(["--log-facility", "daemon"])
        .arg(&lock)
        .arg("true")
        .assert()
        .code(64)
        .stderr(predicates::str::contains("--log-facility applies to --log"));
    assert!(!metrics.exists());
}

// A lost lock on every lock URL (counted `lost`, status 76) and
// `--max-time` on every backend (`max_time`): tests/scenarios.rs,
// kill_on_loss and max_time_stops_the_command_and_releases.

/// A run that neither got the lock nor was refused it still reaches the
/// file, as an `error` with its status: an unsafe lock file (a symbolic
/// link, 77) and, with lock URLs, a lock service that cannot be reached
/// (69).
#[test]
fn a_lock_that_cannot_even_be_tried_is_counted_as_an_error() {
    let dir = temp_dir();
    let metrics = dir.path().join("m.prom");
    let link = dir.path().join("link.lock");
    std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
    lockrun()
        .arg("--metrics-file")
        .arg(&metrics)
        .arg(&link)
        .arg("true")
        .assert()
        .code(77);
    let all = read(&metrics);
    assert_eq!(runs(&all, &link)[6], ("error", 1.0));
    assert_eq!(gauge(&all, "lockrun_last_exit_status", &link), 77.0);
    #[cfg(feature = "redis")]
    {
        let (_refusing, port) = refusing_port();
        let url = format!("redis://127.0.0.1:{port}#job");
        lockrun()
            .arg("--metrics-file")
            .arg(&metrics)
            .args([&url, "true"])
            .assert()
            .code(69);
        let all = read(&metrics);
        assert_eq!(
            value(&all, "lockrun_runs_total", &url, Some("error")),
            Some(1.0),
            "{all:?}"
        );
        assert_eq!(runs(&all, &link)[6], ("error", 1.0), "the other lock kept");
    }
}

/// `--also`: the run is one run, labelled by the first lock named; a
/// temporary file left at the writer's name (a killed lockrun's, or one
/// planted in a shared directory) is replaced, never written through.
#[test]
fn an_also_set_is_labelled_by_its_first_lock_and_a_stale_temporary_is_not_written_through() {
    let dir = temp_dir();
    let metrics = dir.path().join("m.prom");
    let (first, second) = (
        dir.path().join("first.lock"),
        dir.path().join("second.lock"),
    );
    // The shell plants a hard link to `victim` at the temporary's name for
    // its own pid, then execs lockrun, which keeps that pid.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    let script = format!(
        "ln -f '{v}' '{d}/.m.prom.'$$'.tmp' && \
         exec '{bin}' --metrics-file '{m}' --also '{s}' '{f}' true",
        v = victim.display(),
        d = dir.path().display(),
        bin = bin(),
        m = metrics.display(),
        s = second.display(),
        f = first.display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let all = read(&metrics);
    assert_eq!(runs(&all, &first)[0], ("ran", 1.0));
    assert!(
        value(
            &all,
            "lockrun_runs_total",
            second.to_str().unwrap(),
            Some("ran")
        )
        .is_none(),
        "{all:?}"
    );
}
