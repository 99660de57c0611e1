//! The run flow's signal handling (`platform::signals` on Unix), under its
//! names. Windows has no signals to forward: Ctrl-C and Ctrl-Break go by
//! the console to every process attached to it, the command included, so
//! lockrun leaves them to the command once it runs (it ignores them and
//! waits for the command, which gets them once), and before that they end
//! lockrun as they end any console program (nothing is held or started
//! yet but the lock, which ends with lockrun's handle or session).

use super::threads::Bell;
use std::io;
use std::sync::Arc;

/// No handlers to install: see the module's documentation.
pub fn install() -> io::Result<()> {
    Ok(())
}

pub fn install_for_command() -> Result<(), crate::exit_codes::Failure> {
    Ok(())
}

/// The handled signals' mask the Unix command's process resets: none.
pub fn handled() -> u64 {
    0
}

pub fn command_exists() {}

pub fn forward(_forward: bool) {}

pub fn blocked_in_flock(_blocked: bool) {}

/// No signal ever ends a wait here.
pub fn pending() -> Option<i32> {
    None
}

/// The command is about to start: from now on Ctrl-C and Ctrl-Break are
/// the command's.
pub fn command_starting(_kept_group: i32) {
    super::leave_console_events_to_command();
}

pub fn command_started(_pid: i32, _shared_group: i32) {}

pub fn command_exited() {}

/// What wakes a waiting lockrun: the lock-waiting thread's answer
/// ([`LOCKED`]); no signal handler writes to it here.
pub struct WakePipe {
    bell: Arc<Bell>,
}

/// The byte the lock-waiting thread rings when its call returns.
pub const LOCKED: u8 = crate::platform::ANSWERED;

impl WakePipe {
    pub fn new() -> io::Result<WakePipe> {
        Ok(WakePipe {
            bell: Arc::new(Bell::new()?),
        })
    }

    pub fn bell(&self) -> Arc<Bell> {
        Arc::clone(&self.bell)
    }

    /// Waits up to `timeout` for a byte; `None` when none came.
    pub fn wait(&self, timeout: std::time::Duration) -> io::Result<Option<u8>> {
        self.bell.wait(Some(timeout))
    }
}
