//! Signalling processes that are not our children without racing pid
//! reuse: on Linux through pidfds, elsewhere by pid.

use std::io;
use std::time::{Duration, Instant};

/// A process we may have to signal: pinned by a pidfd where there is one.
pub struct Target {
    pub pid: i32,
    #[cfg(target_os = "linux")]
    fd: Option<std::os::fd::OwnedFd>,
}

impl Target {
    /// Pins `pid`. Between learning a pid and pinning it, the process may
    /// have exited and the pid been reused: callers re-check what they
    /// learnt the pid from after pinning it.
    pub fn pin(pid: i32) -> Option<Target> {
        let raw = rustix::process::Pid::from_raw(pid)?;
        #[cfg(target_os = "linux")]
        {
            let fd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()).ok();
            // Without pidfds (old kernels) fall back to the pid.
            Some(Target { pid, fd })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = raw;
            Some(Target { pid })
        }
    }

    /// Pins each of `pids`, leaving out those already gone.
    pub fn pin_all(pids: Vec<i32>) -> Vec<Target> {
        pids.into_iter().filter_map(Target::pin).collect()
    }

    pub fn signal(&self, sig: i32) -> io::Result<()> {
        let Some(signal) = rustix::process::Signal::from_named_raw(sig) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            return rustix::process::pidfd_send_signal(fd, signal).map_err(Into::into);
        }
        let pid = rustix::process::Pid::from_raw(self.pid)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        rustix::process::kill_process(pid, signal).map_err(Into::into)
    }

    /// Whether it has exited (a zombie counts as exited).
    pub fn exited(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            use rustix::event::{PollFd, PollFlags, Timespec, poll};
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            return poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0);
        }
        !matches!(
            super::process_state(self.pid),
            super::ProcessState::Running { .. } | super::ProcessState::Unknown
        )
    }
}

/// Waits until every target has exited or `until` passes; returns those
/// still alive. Sleeps in poll(2) on the pidfds, waking when one exits.
pub fn wait_exited(targets: Vec<Target>, until: Instant) -> Vec<Target> {
    let mut alive: Vec<Target> = targets.into_iter().filter(|t| !t.exited()).collect();
    while !alive.is_empty() {
        let now = Instant::now();
        if now >= until {
            break;
        }
        wait_any(&alive, until - now);
        alive.retain(|t| !t.exited());
    }
    alive
}

#[cfg(target_os = "linux")]
fn wait_any(targets: &[Target], timeout: Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds: Vec<PollFd<'_>> = targets
        .iter()
        .filter_map(|t| t.fd.as_ref())
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    // Targets without a pidfd can only be looked at again: every 50 ms.
    let step = if fds.len() < targets.len() {
        timeout.min(Duration::from_millis(50))
    } else {
        timeout
    };
    let step = Timespec::try_from(step).unwrap_or(Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    });
    let _ = poll(&mut fds, Some(&step));
}

#[cfg(not(target_os = "linux"))]
fn wait_any(_targets: &[Target], timeout: Duration) {
    std::thread::sleep(timeout.min(Duration::from_millis(50)));
}

/// The one way lockrun stops processes, whether `--max-time` ran out or a
/// lock URL's lock was lost: SIGTERM to every target, then, after `grace`,
/// SIGKILL to whatever still lives and to whatever `more` finds since (a
/// child that took the lock descriptor meanwhile), then a bounded wait for
/// them to go. Returns each pid signalled with the last signal it got.
///
/// A command that ignores SIGTERM and keeps forking defeats a single scan
/// followed by a single SIGKILL pass: what it forks between the two is
/// missed. So SIGKILL goes to everything found, and `more` is asked again
/// at once, until it finds nothing new alive (bounded): a process with a
/// SIGKILL pending forks no more (the kernel abandons a fork under way), so
/// each pass can only find what the last generation forked before it was
/// killed, and the passes end. Then a bounded wait for them all to go.
///
/// Not a freeze with SIGSTOP first: in an orphaned process group (a
/// script started by `setsid`, many cron jobs, a daemon's children), the
/// kernel answers any exit from a group that has a stopped member with
/// SIGHUP and SIGCONT to the whole group, and the command's group is
/// usually its caller's: the calling script would get a SIGHUP.
pub fn stop_all(
    targets: Vec<Target>,
    grace: Duration,
    more: impl Fn() -> Vec<Target>,
) -> Vec<(i32, i32)> {
    let mut stopped = Vec::new();
    for target in &targets {
        if target.signal(libc::SIGTERM).is_ok() {
            stopped.push((target.pid, libc::SIGTERM));
        }
    }
    let until = Instant::now()
        .checked_add(grace)
        .unwrap_or_else(Instant::now);
    let mut alive = wait_exited(targets, until);
    // Each round kills what is alive and what it forked before its
    // SIGKILL; a few rounds suffice, the bound is for a process the kernel
    // keeps showing (one stuck in uninterruptible sleep).
    for _ in 0..ROUNDS {
        let killed = kill_until_none_new(alive, &more);
        if killed.is_empty() {
            break;
        }
        for target in &killed {
            match stopped.iter_mut().find(|(pid, _)| *pid == target.pid) {
                Some(entry) => entry.1 = libc::SIGKILL,
                None => stopped.push((target.pid, libc::SIGKILL)),
            }
        }
        // SIGKILL cannot be refused; wait (bounded) for the lock to be let go.
        let left = wait_exited(killed, Instant::now() + Duration::from_secs(5));
        if !left.is_empty() {
            // Still there after 5 s: stuck in the kernel, where nothing
            // lockrun sends can hurry it.
            break;
        }
        alive = Vec::new();
    }
    stopped
}

/// How many kill rounds [`stop_all`] makes at most.
const ROUNDS: usize = 200;

/// SIGKILL to `alive` and to everything `more` finds, asking `more` again
/// until it finds no one new alive (bounded); returns those the signal
/// reached.
fn kill_until_none_new(alive: Vec<Target>, more: &impl Fn() -> Vec<Target>) -> Vec<Target> {
    let mut killed: Vec<Target> = Vec::new();
    let mut new = alive;
    for _ in 0..ROUNDS {
        for extra in more() {
            if !killed.iter().chain(&new).any(|t| t.pid == extra.pid) {
                new.push(extra);
            }
        }
        new.retain(|t| !t.exited());
        if new.is_empty() {
            break;
        }
        for target in new.drain(..) {
            if target.signal(libc::SIGKILL).is_ok() {
                killed.push(target);
            }
        }
    }
    killed
}

/// Where the command will run: in lockrun's process group, which lockrun
/// leaves once the command runs ([`leave_command_group`]) so that a signal
/// sent to that whole group (`kill -- -PGID`, a CI runner's or `timeout
/// -k`'s clean-up, SIGKILL included) reaches the command and everything it
/// started directly, once, and not a second time through lockrun's
/// forwarding. A signal that still reaches lockrun was then sent to
/// lockrun itself, and forwarding it is right.
///
/// Not on a controlling terminal: there the shell's job control needs
/// lockrun and the command in one group (Ctrl-Z must stop both, `fg` must
/// give the terminal to both), and the terminal's own signals are told
/// apart by their code instead (see run::signals). A session leader cannot
/// leave its group (setsid, systemd services): it stays.
///
/// Returns the group lockrun will go on sharing with the command, or 0 if
/// it is to leave: decided before the command starts, so that a signal in
/// the moment between the start and the move is judged as later ones are.
pub fn group_kept_with_command() -> i32 {
    // SAFETY: only reads our own ids (libc: in a child PID namespace a
    // group or session outside it reads as 0, which rustix's Pid refuses).
    let (session, me) = unsafe { (libc::getsid(0), libc::getpid()) };
    if session == me || session < 0 || has_controlling_terminal() {
        // SAFETY: as above.
        unsafe { libc::getpgrp() }
    } else {
        0
    }
}

/// Called once the command runs, where [`group_kept_with_command`] said 0.
/// A group leader joins its parent's group, the only other one it may
/// join. Returns the group lockrun still shares with the command: 0 once it
/// has moved, its own if it could not.
pub fn leave_command_group() -> i32 {
    if moved_out_of_the_group() {
        return 0;
    }
    // SAFETY: only reads our own process group.
    unsafe { libc::getpgrp() }
}

fn moved_out_of_the_group() -> bool {
    // libc rather than rustix: in a child PID namespace a session, group or
    // parent outside it reads as 0, which rustix's Pid refuses (a panic).
    // SAFETY: these calls only read or set our own process's ids.
    // Not a session leader: group_kept_with_command said so (and setpgid
    // would refuse one).
    unsafe {
        let me = libc::getpid();
        if libc::getpgrp() != me {
            return libc::setpgid(0, 0) == 0;
        }
        let parent = libc::getppid();
        if parent <= 0 || libc::getsid(parent) != libc::getsid(0) {
            return false;
        }
        let group = libc::getpgid(parent);
        group > 0 && group != me && libc::setpgid(0, group) == 0
    }
}

/// Whether lockrun has a controlling terminal: opening /dev/tty fails with
/// ENXIO exactly when it has none. Any other answer counts as having one,
/// which keeps the command in lockrun's group, the flock(1) arrangement.
fn has_controlling_terminal() -> bool {
    use rustix::fs::{Mode, OFlags, open};
    match open(
        "/dev/tty",
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(_) => true,
        Err(e) => e != rustix::io::Errno::NXIO,
    }
}

/// The signals lockrun stops a process with: SIGTERM first, SIGKILL after
/// the grace.
pub const STOP_SIGNAL: i32 = libc::SIGTERM;
pub const KILL_SIGNAL: i32 = libc::SIGKILL;
/// Whether a stop is signals (here) or a job ended at once (Windows): the
/// messages and the record say which.
pub const STOPS_BY_SIGNALS: bool = true;

/// How a stop of the command and all it started is told where it is not
/// signals (Windows); the run flow words the signals' own stop itself.
pub fn stop_described() -> &'static str {
    "was sent SIGTERM with every process it started"
}

/// Blocks until our child `pid` has exited, without reaping it: while it
/// is a zombie its pid cannot be reused, so it may still be looked at, and
/// signals to it stopped, before [`reap`] frees the pid.
pub fn wait_until_exited(pid: i32) -> io::Result<()> {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let Some(raw) = Pid::from_raw(pid) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad pid {pid}"),
        ));
    };
    let exited = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    loop {
        match waitid(WaitId::Pid(raw), exited) {
            Err(rustix::io::Errno::INTR) => continue,
            // Whatever else: the reaping that follows says it.
            _ => return Ok(()),
        }
    }
}

/// Reaps our child `pid`; `None` when there is no such child (any more).
pub fn reap(pid: i32) -> io::Result<Option<std::process::ExitStatus>> {
    use rustix::process::{Pid, WaitOptions, waitpid};
    use std::os::unix::process::ExitStatusExt;
    let Some(raw) = Pid::from_raw(pid) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad pid {pid}"),
        ));
    };
    loop {
        match waitpid(Some(raw), WaitOptions::empty()) {
            Ok(Some((_, status))) => {
                return Ok(Some(std::process::ExitStatus::from_raw(status.as_raw())));
            }
            Err(rustix::io::Errno::INTR) => continue,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}
