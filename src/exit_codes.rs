//! Exit statuses, from sysexits(3) where one fits.
//!
//! Scripts branch on these numbers, so they are part of the contract: a
//! status, once shipped, never changes meaning.

use std::fmt;
use std::io;
use std::path::Path;

/// The lock was not acquired: held and `-n`, or the timeout ran out.
/// EX_TEMPFAIL says "try again later", which is exactly the situation.
pub const CONFLICT: u8 = 75;
pub const USAGE: u8 = 64;
/// `--skip-if-succeeded-within` found a recent success: nothing to do,
/// which is a success (cron mails nothing, a systemd unit stays green).
pub const SKIPPED: u8 = 0;
pub const NO_INPUT: u8 = 66;
/// `check` cannot tell without taking the lock; for a lock URL, etcd
/// cannot be reached (the command never ran).
pub const UNAVAILABLE: u8 = 69;
pub const OS_ERROR: u8 = 71;
/// A lock URL's lock was lost while the command ran (its lease expired or
/// its key was deleted); the command was stopped. No sysexits code fits;
/// 76 (EX_PROTOCOL's number) is ours by the contract.
pub const LOCK_LOST: u8 = 76;
pub const NO_PERMISSION: u8 = 77;
/// `--max-time` ran out and the command was stopped: timeout(1)'s status.
pub const MAX_TIME: u8 = 124;
pub const CANNOT_EXECUTE: u8 = 126;
pub const NOT_FOUND: u8 = 127;

/// `check`: the lock is free (or there is no lock file).
pub const NOT_HELD: u8 = 1;

/// A failure that ends lockrun: what to tell the user and how to exit.
///
/// Every message names the path it concerns and carries the OS error, so a
/// line in a cron mail is enough to act on.
#[derive(Debug)]
pub struct Failure {
    pub status: u8,
    pub message: String,
}

impl Failure {
    pub fn new(status: u8, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub fn io(status: u8, what: &str, path: &Path, err: &io::Error) -> Self {
        Failure::new(status, format!("{what} {}: {err}", path.display()))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// 128+N, the shell's convention for "ended by signal N".
pub fn for_signal(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}
