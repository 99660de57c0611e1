//! The run form on a lock URL: grant a lease, take the lock, start the
//! command with its fencing token, keep the lease alive until the command
//! exits, release.
//!
//! Differences from a file lock, each forced by the medium: the lock lives
//! only as long as lockrun renews the lease (so `-F` is refused, and the
//! command gets SIGTERM if lockrun itself dies); the record gains the
//! command's pid just after it starts; and losing the lock while the
//! command runs stops the command and ends lockrun with 76.

use super::RunOptions;
use super::client::{Attempt, Client, EtcdError, Kv, key_for};
use super::session::Session;
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::identity::Me;
use crate::lock::LockMode;
use crate::record::{Exit, Record};
use crate::run::{Ending, report_spawn_failure, wait_for_command};
use crate::signals::{self, LOCKED, WakePipe};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a release or clean-up call may take: lockrun is finishing and
/// must not hang on an etcd that stopped answering.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(250);

enum Outcome {
    Acquired { revision: i64 },
    Busy { owner: Option<Kv>, waited: Duration },
    Interrupted(i32),
    Failed(EtcdError),
}

pub fn run(opts: &RunOptions) -> Result<Ending, Failure> {
    let label = display::escape(&opts.url.text);
    signals::install_for_command()?;
    let unavailable = |e: &EtcdError| {
        Failure::new(
            exit_codes::UNAVAILABLE,
            format!("cannot take {label}: {e} (the command was not run)"),
        )
    };
    let client = Client::new(&opts.url).map_err(|e| unavailable(&e))?;
    let (lease, ttl) = client.grant(opts.ttl).map_err(|e| unavailable(&e))?;
    let session = Session::start(client.clone(), lease, ttl, opts.kill_grace);
    let give_up = |session: Session| {
        session.finish();
        let _ = client.revoke(lease, Instant::now() + CLEANUP_TIMEOUT);
    };

    let name = &opts.url.name;
    let key = key_for(name, lease);
    let mut record = opts.write_record.then(|| {
        let cwd = std::env::current_dir().ok();
        Record {
            acquired_at: Some(display::now_rfc3339()),
            ..Record::starting(
                Me::gather(),
                &opts.command,
                cwd.as_deref(),
                LockMode::Exclusive,
            )
        }
    });
    let value = record.as_ref().map(Record::to_line).unwrap_or_default();

    let revision = match acquire(&client, &session, opts, &label, lease, &value) {
        Outcome::Acquired { revision } => revision,
        Outcome::Busy { owner, waited } => {
            give_up(session);
            if !opts.quiet {
                eprintln!("lockrun: {}", busy_message(&label, owner.as_ref(), waited));
            }
            return Ok(Ending::Status(opts.conflict_status));
        }
        Outcome::Interrupted(sig) => {
            give_up(session);
            return Ok(Ending::Status(exit_codes::for_signal(sig)));
        }
        Outcome::Failed(e) => {
            give_up(session);
            return Err(unavailable(&e));
        }
    };
    session.held(key.clone(), revision);
    if let Some(r) = &mut record {
        r.acquired_at = Some(display::now_rfc3339());
    }
    if opts.verbose {
        eprintln!(
            "lockrun: took the lock {label} (fencing token {revision}, lease {lease:x}, TTL {}s)",
            ttl.as_secs()
        );
    }

    let mut command = Command::new(&opts.command[0]);
    command
        .args(&opts.command[1..])
        .env("LOCKRUN_LOCKFILE", &opts.url.text)
        .env("LOCKRUN_MODE", "exclusive")
        .env("LOCKRUN_FENCING_TOKEN", revision.to_string());
    // If lockrun dies (even by SIGKILL), nobody renews the lease and the
    // lock will pass to another holder within the TTL: the command must
    // not outlive lockrun. prctl is a plain system call, safe after fork.
    // SAFETY: the closure makes one async-signal-safe system call.
    unsafe {
        command.pre_exec(|| {
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::TERM,
            ));
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let status = report_spawn_failure(&opts.command[0], &e);
            give_up(session);
            return Ok(Ending::Status(status));
        }
    };
    let pid = child.id() as i32;
    signals::command_started(pid);
    session.command_started(pid);
    if let Some(r) = &mut record {
        r.pid = Some(i64::from(pid));
        r.pid_start = crate::platform::process_start_time(pid);
        // A failure here means the key is gone: the session notices and
        // stops the command.
        let _ = client.update_if_ours(&key, revision, &r.to_line(), lease);
    }

    let (status, ()) = wait_for_command(pid, |_| session.command_exited())?;
    let lost = session.finish();
    if let Some(reason) = lost {
        let _ = client.revoke(lease, Instant::now() + CLEANUP_TIMEOUT);
        eprintln!(
            "lockrun: lost the lock {label} while the command ran: {reason}; the command (pid {pid}) was sent SIGTERM (and SIGKILL if it still ran {} later)",
            display::span(opts.kill_grace)
        );
        return Ok(Ending::Status(exit_codes::LOCK_LOST));
    }
    // The last holder's record outlives the lease under NAME itself, so a
    // free lock still tells who ran last and how it ended.
    let last = record.map(|mut r| {
        r.released_at = Some(display::now_rfc3339());
        r.exit = Some(Exit::of(status));
        r.to_line()
    });
    let last = last.as_deref().map(|line| (name.as_str(), line));
    if let Err(e) = client.release(lease, last, Instant::now() + CLEANUP_TIMEOUT) {
        eprintln!(
            "lockrun: could not release {label} ({e}); etcd releases it when the lease expires within {}s",
            ttl.as_secs()
        );
    }
    Ok(Ending::of(status))
}

fn acquire(
    client: &Client,
    session: &Session,
    opts: &RunOptions,
    label: &str,
    lease: i64,
    value: &[u8],
) -> Outcome {
    let start = Instant::now();
    let name = &opts.url.name;
    let (revision, owner) = match client.attempt(name, lease, value) {
        Err(e) => return Outcome::Failed(e),
        Ok(Attempt::Acquired { revision }) => return Outcome::Acquired { revision },
        Ok(Attempt::Queued { revision, owner }) => (revision, owner),
    };
    if opts.nonblocking || opts.timeout == Some(Duration::ZERO) {
        return Outcome::Busy {
            owner,
            waited: Duration::ZERO,
        };
    }
    if opts.verbose {
        eprintln!(
            "lockrun: waiting for {label}, held by {}",
            holder_text(owner.as_ref())
        );
    }

    // The wait happens in etcd (the lock service watches the key ahead of
    // ours); a helper thread makes that call, so that this thread can keep
    // the deadline and end the wait at a signal, through the same
    // self-pipe the file path uses.
    let wake = match WakePipe::new() {
        Ok(wake) => wake,
        Err(e) => return Outcome::Failed(local_error(&e)),
    };
    if let Some(sig) = signals::pending() {
        return Outcome::Interrupted(sig);
    }
    let writer = match wake.writer() {
        Ok(writer) => writer,
        Err(e) => return Outcome::Failed(local_error(&e)),
    };
    let (report, outcome) = mpsc::channel();
    let waiter = client.clone();
    let lock_name = name.clone();
    let spawned = std::thread::Builder::new()
        .name("etcd-lock".into())
        .spawn(move || {
            let _ = report.send(waiter.wait_lock(&lock_name, lease));
            let _ = rustix::io::write(&writer, &[LOCKED]);
        });
    if let Err(e) = spawned {
        return Outcome::Failed(local_error(&e));
    }
    let ours = key_for(name, lease);
    let deadline = opts.timeout.map(|t| start + t);
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            let owner = client.owner(name).ok().and_then(|(owner, _)| owner);
            return Outcome::Busy {
                owner,
                waited: now - start,
            };
        }
        let until = deadline.map_or(now + TICK, |d| d.min(now + TICK));
        match wake.wait(until.saturating_duration_since(now)) {
            Ok(Some(LOCKED)) => {
                return match outcome.try_recv() {
                    Ok(Ok(key)) if key == ours => match signals::pending() {
                        Some(sig) => Outcome::Interrupted(sig),
                        None => Outcome::Acquired { revision },
                    },
                    Ok(Ok(key)) => Outcome::Failed(EtcdError {
                        message: format!("etcd granted the lock to key {key}, not ours ({ours})"),
                    }),
                    Ok(Err(e)) => Outcome::Failed(e),
                    Err(_) => Outcome::Failed(EtcdError {
                        message: "the lock-waiting thread vanished".into(),
                    }),
                };
            }
            Ok(Some(sig)) => return Outcome::Interrupted(i32::from(sig)),
            Ok(None) => {}
            Err(e) => return Outcome::Failed(local_error(&e)),
        }
        if let Some(reason) = session.lost() {
            return Outcome::Failed(EtcdError {
                message: format!("lost the lease while waiting: {reason}"),
            });
        }
    }
}

fn local_error(e: &std::io::Error) -> EtcdError {
    EtcdError {
        message: format!("cannot wait: {e}"),
    }
}

fn holder_text(owner: Option<&Kv>) -> String {
    let Some(owner) = owner else {
        return "another client (it released the lock a moment ago)".to_owned();
    };
    match Record::parse(&owner.value).filter(|r| !r.is_released()) {
        Some(record) => display::holder_summary(&record),
        None => format!(
            "another etcd client that left no lockrun record (key {}, lease {:x})",
            display::escape(&owner.key),
            owner.lease
        ),
    }
}

fn busy_message(label: &str, owner: Option<&Kv>, waited: Duration) -> String {
    display::busy(label, &holder_text(owner), waited)
}
