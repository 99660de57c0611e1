//! A lock URL's lock can be lost while the command runs (a lease not
//! renewed for its TTL, a connection broken). Whatever the service, the
//! command must then not go on believing it holds the lock: it and every
//! process it started get SIGTERM, then SIGKILL after the grace. This is
//! that part, shared by every backend whose lock can be lost; each keeps a
//! [`Command`] in the state its watcher thread shares with lockrun.

use std::sync::MutexGuard;
use std::time::Duration;

/// The running command, as a watcher thread may signal it.
#[derive(Default)]
pub struct Command {
    /// `None` before it starts and once it has exited (it may then be an
    /// unreaped zombie, whose pid must never be signalled again).
    pid: Option<i32>,
    exited: bool,
}

impl Command {
    pub fn started(&mut self, pid: i32) {
        self.pid = Some(pid);
    }

    /// Call before reaping the command, so its pid is never signalled once
    /// it could belong to another process.
    pub fn exited(&mut self) {
        self.pid = None;
        self.exited = true;
    }
}

/// The lock is lost (the reason already stored in the state): waits for
/// the command to exist if the loss came between acquiring and starting it
/// (unless `finishing` says lockrun is ending anyway), then stops it.
pub fn stop_command<S>(
    shared: &crate::sync::Shared<S>,
    mut state: MutexGuard<'_, S>,
    command: impl Fn(&S) -> &Command,
    finishing: impl Fn(&S) -> bool,
    grace: Duration,
) {
    while command(&state).pid.is_none() && !command(&state).exited && !finishing(&state) {
        state = shared.wait(state);
    }
    let Some(pid) = command(&state).pid else {
        return;
    };
    // Pinned while the pid is set, so before it can be reaped.
    let target = crate::platform::Target::pin(pid);
    drop(state);
    // Not the command alone: what it started (a shell's children, a
    // daemon in its own session) would go on as if the lock were held, and
    // keep a pipe to lockrun's reader open. The same finder and the same
    // stop as `--max-time` with a lent descriptor.
    let tree = crate::backend::command_tree();
    let find = || crate::platform::Target::pin_all(tree(pid));
    let targets = target.into_iter().chain(find()).collect();
    crate::platform::stop_all(targets, grace, find);
}
