//! The slot meter: gated jobs run through `lockrun --slots N TARGET` (a
//! file, an etcd or a PostgreSQL URL) and append to one file what they do,
//! so a test can count how many ran at once and which slot each had.
//!
//! A job appends `start ID SLOT` once it runs, blocks until the test opens
//! its gate (a FIFO), then appends `end ID SLOT`. Each line is one
//! O_APPEND write, so the file's order is the order things happened in.

use super::{BOUND, wait_child, wait_for};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const JOB: &str = r#"echo "start $1 ${LOCKRUN_SLOT:-none}" >> "$2/meter"; read x < "$2/gate$1"; echo "end $1 ${LOCKRUN_SLOT:-none}" >> "$2/meter""#;

/// What the meter file says so far.
#[derive(Default, Debug)]
pub struct Meter {
    /// Started and not ended: job id -> slot.
    pub running: HashMap<usize, String>,
    pub ended: usize,
    /// The most jobs running at once.
    pub peak: usize,
    /// A slot number two running jobs had at once, or one out of 1..=N.
    pub bad_slot: Option<String>,
}

pub fn read_meter(dir: &Path, n: usize) -> Meter {
    let text = std::fs::read_to_string(dir.join("meter")).unwrap_or_default();
    let mut meter = Meter::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [what, id, slot] = words[..] else {
            panic!("meter line {line:?}")
        };
        let id: usize = id.parse().expect("a job id");
        match what {
            "start" => {
                // No slot at all: a plain lock.
                let in_range =
                    slot == "none" || slot.parse::<usize>().is_ok_and(|s| (1..=n).contains(&s));
                let taken = slot != "none" && meter.running.values().any(|s| s == slot);
                if !in_range || taken {
                    meter.bad_slot.get_or_insert_with(|| slot.to_owned());
                }
                meter.running.insert(id, slot.to_owned());
                meter.peak = meter.peak.max(meter.running.len());
            }
            "end" => {
                meter.running.remove(&id);
                meter.ended += 1;
            }
            _ => panic!("meter line {line:?}"),
        }
    }
    meter
}

fn spawn_job(mut lockrun: Command, dir: &Path, id: usize, args: &[&str], target: &OsStr) -> Child {
    let gate = dir.join(format!("gate{id}"));
    let made = Command::new("mkfifo").arg(&gate).status().expect("mkfifo");
    assert!(made.success());
    lockrun
        .args(args)
        .arg(target)
        .args(["--", "sh", "-c", JOB, "job"])
        .arg(id.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        // Its own process group, so that a failed run can kill the job
        // with its command.
        .process_group(0)
        .spawn()
        .expect("spawn a job")
}

fn open_gate(dir: &Path, id: usize) {
    // Non-blocking: fails (ENXIO) until the job has opened it to read.
    let gate = dir.join(format!("gate{id}"));
    wait_for(&format!("job {id} to wait at its gate"), || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&gate)
            .and_then(|mut f| f.write_all(b"go\n"))
            .is_ok()
    });
}

/// How many at once the lock is asked to admit: the N of `--slots N`, else 1.
fn admitted(args: &[&str]) -> usize {
    args.windows(2)
        .find(|w| w[0] == "--slots")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(1)
}

/// Runs `jobs` gated jobs through `lockrun ARGS TARGET` (each from a fresh
/// `lockrun()`) and checks the meter round by round: never more than
/// `limit` at once, slot numbers unique among running jobs and in
/// 1..=limit, and every job ends.
///
/// Each round waits until as many jobs run as the lock was asked to admit
/// (the N of `--slots N`) before it opens their gates. So a run whose N is
/// above `limit` (the control) always shows more than `limit` at once: a
/// round that moved on when only `limit` had started could let the rest
/// through later without any overlap, and the control would pass by luck.
pub fn meter_run(
    lockrun: impl Fn() -> Command,
    args: &[&str],
    target: impl AsRef<OsStr>,
    jobs: usize,
    limit: usize,
) -> Result<(), String> {
    let admits = admitted(args);
    let dir = super::temp_dir();
    let mut children: Vec<Child> = (0..jobs)
        .map(|id| spawn_job(lockrun(), dir.path(), id, args, target.as_ref()))
        .collect();
    let mut released = BTreeSet::new();
    let result = (|| {
        while released.len() < jobs {
            let want = admits.min(jobs - released.len());
            let deadline = Instant::now() + BOUND;
            let meter = loop {
                let meter = read_meter(dir.path(), limit);
                let fresh = meter
                    .running
                    .keys()
                    .filter(|id| !released.contains(*id))
                    .count();
                if fresh >= want || meter.peak > limit {
                    break meter;
                }
                if Instant::now() > deadline {
                    return Err(format!("{want} jobs never ran at once (meter: {meter:?})"));
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            if meter.peak > limit {
                return Err(format!(
                    "{} jobs ran at once, more than {limit}",
                    meter.peak
                ));
            }
            if let Some(slot) = meter.bad_slot {
                return Err(format!(
                    "slot {slot} was out of 1..={limit} or given to two running jobs"
                ));
            }
            let round: Vec<usize> = meter
                .running
                .keys()
                .filter(|id| !released.contains(*id))
                .copied()
                .collect();
            for id in round {
                open_gate(dir.path(), id);
                released.insert(id);
            }
        }
        Ok(())
    })();
    if result.is_err() {
        // Nothing is left behind: each job dies with its command.
        for child in &children {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
        }
    }
    for child in &mut children {
        let status = wait_child(child, BOUND);
        if result.is_ok() {
            assert!(status.success(), "a job failed: {status:?}");
        }
    }
    result?;
    let meter = read_meter(dir.path(), limit);
    assert_eq!(meter.ended, jobs, "{meter:?}");
    if meter.peak > limit {
        return Err(format!(
            "{} jobs ran at once, more than {limit}",
            meter.peak
        ));
    }
    Ok(())
}
