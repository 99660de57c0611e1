//! Signals: lockrun stands between a supervisor (cron, systemd, a shell,
//! `timeout`) and the command, and must be transparent. A signal meant for
//! lockrun is meant for the command; a command that dies by a signal makes
//! lockrun die by the same signal, so the caller sees what it would have
//! seen without lockrun.
//!
//! The handlers do all their work inside the signal handler with
//! async-signal-safe calls (atomics, kill, write): no thread is started for
//! signals, so the uncontended path stays a single-threaded process, with
//! no thread to race with the start or the reaping of the command.

use crate::platform::Bell;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Once};

pub const FORWARDED: [i32; 6] = [SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2];

// si_code of a signal the kernel itself generated, such as the terminal's
// SIGINT on Ctrl-C. The terminal sends those to the whole foreground
// process group, which includes the command: forwarding them too would make
// Ctrl-C arrive twice. (`None` where lockrun does not know the code.)
use crate::platform::SI_KERNEL;

/// The command's pid once it runs; 0 before; -1 once it has exited (it may
/// be a zombie not yet reaped: its pid must not be signalled any more, it
/// could soon belong to someone else).
static COMMAND: AtomicI32 = AtomicI32::new(0);
/// Whether signals sent to lockrun go on to the command: not with
/// `--forward never`, for supervisors that signal every process themselves.
static FORWARD: AtomicBool = AtomicBool::new(true);
/// The process group lockrun still shares with the command (on a terminal,
/// or as a session leader), else 0. See [`from_the_commands_group`].
static SHARED_GROUP: AtomicI32 = AtomicI32::new(0);
/// The command's pid, set from the command's own process before its exec
/// (on Linux it shares our memory until then), while lockrun has not yet
/// come back from starting it; 0 before. Only compared, never signalled:
/// if the exec fails, the pid is soon reaped and free for reuse.
static STARTING: AtomicI32 = AtomicI32::new(0);
/// Signals that arrived before the command existed, one bit each.
static PENDING: AtomicU64 = AtomicU64::new(0);
/// Write end of the wake-up pipe while lockrun waits for the lock, else -1.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// Set while the main thread itself is blocked in flock(2): a signal then
/// ends lockrun on the spot (nothing has been written or started yet).
static BLOCKED_IN_FLOCK: AtomicBool = AtomicBool::new(false);

static INSTALL: Once = Once::new();
/// The signals lockrun has a handler for, one bit each.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Starts catching the forwarded signals. Idempotent.
///
/// A signal that lockrun was started with ignored stays ignored, for
/// lockrun and for the command, as it would under flock(1): `nohup
/// lockrun …` must leave the command immune to SIGHUP, and a shell starts a
/// background job with SIGINT and SIGQUIT ignored. A handler would undo
/// that, since exec resets a caught signal to its default.
pub fn install() -> io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        // lockrun reaps its command itself, to learn how it ended: with
        // SIGCHLD inherited as ignored, the kernel would reap it first and
        // the command's status would be lost. flock(1) resets it too.
        if is_ignored(libc::SIGCHLD) {
            // SAFETY: restores a default disposition.
            unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
        }
        for sig in FORWARDED {
            if is_ignored(sig) {
                continue;
            }
            // A plain sigaction rather than a registry that chains handlers:
            // lockrun is the only one catching these, and the registry's
            // set-up (a hash map, a random seed, locks) cost more than all
            // six system calls together.
            // SAFETY: a zeroed sigaction is a valid empty one; the handler
            // only uses async-signal-safe operations.
            let installed = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = handle as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut())
            };
            if installed != 0 {
                result = Err(io::Error::last_os_error());
                return;
            }
            HANDLED.fetch_or(1 << sig, SeqCst);
        }
    });
    result
}

// si_code of a signal sent with kill(2), the only call that can signal a
// whole process group.
use crate::platform::SI_USER;

extern "C" fn handle(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo.
    let info = unsafe { info.as_ref() };
    let code = info.map_or(0, |info| info.si_code);
    // SAFETY: si_pid is the sender's pid for a signal sent by kill(2).
    let sender = info
        .filter(|_| code == SI_USER)
        .map_or(0, |info| unsafe { info.si_pid() });
    crate::platform::keeping_errno(|| on_signal(sig, Some(code) == SI_KERNEL, sender));
}

/// [`install`], for a command about to be started: a failure ends lockrun.
pub fn install_for_command() -> Result<(), crate::exit_codes::Failure> {
    install().map_err(|e| {
        crate::exit_codes::Failure::new(
            crate::exit_codes::OS_ERROR,
            format!("cannot set up signal handling: {e}"),
        )
    })
}

/// The signals lockrun catches, one bit each: the command must start with
/// them back at their default, before anything of ours runs in it.
pub fn handled() -> u64 {
    let interrupt = crate::platform::interrupt_signal_in_use().map_or(0, |sig| 1 << sig);
    HANDLED.load(SeqCst) | interrupt
}

fn is_ignored(sig: i32) -> bool {
    let mut current = std::mem::MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: only reads the disposition into a local.
    let read = unsafe { libc::sigaction(sig, std::ptr::null(), current.as_mut_ptr()) };
    // SAFETY: sigaction filled it in when it returned 0.
    read == 0 && unsafe { current.assume_init() }.sa_sigaction == libc::SIG_IGN
}

fn on_signal(sig: i32, from_kernel: bool, sender: i32) {
    let command = COMMAND.load(SeqCst);
    if command > 0 {
        if forwards(from_kernel, sender, command, SHARED_GROUP.load(SeqCst)) {
            send(command, sig);
        }
        return;
    }
    if command < 0 {
        return;
    }
    // The command exists, but lockrun has not yet come back from starting
    // it: the same rules, with the group lockrun will share with it.
    // Whatever passes is sent when lockrun is back.
    let starting = STARTING.load(SeqCst);
    if starting > 0 && !forwards(from_kernel, sender, starting, SHARED_GROUP.load(SeqCst)) {
        return;
    }
    if BLOCKED_IN_FLOCK.load(SeqCst) {
        // _exit is async-signal-safe; exit(3) would run atexit handlers.
        signal_hook::low_level::exit(128 + sig);
    }
    PENDING.fetch_or(1 << sig, SeqCst);
    let wake = WAKE.load(SeqCst);
    if wake >= 0 {
        // SAFETY: the pipe stays open while WAKE names it (see WakePipe).
        let _ = rustix::io::write(unsafe { BorrowedFd::borrow_raw(wake) }, &[sig as u8]);
    }
}

/// Whether a signal that reached lockrun while `command` exists goes on
/// to it: not the terminal's own (the kernel's: they reached the whole
/// foreground group), not with `--forward never`, and not one the command
/// sent its own group (see [`from_the_commands_group`]).
fn forwards(from_kernel: bool, sender: i32, command: i32, group: i32) -> bool {
    !from_kernel && FORWARD.load(SeqCst) && !from_the_commands_group(sender, command, group)
}

/// Whether a signal from `sender` (0: unknown) came from the command or
/// one of its children while they share lockrun's process group: that is
/// `kill 0` (a script's `trap 'kill 0' EXIT`), which reached the command
/// already. Anyone else's signal may have been sent to lockrun alone (a
/// script's `kill $!`, a watchdog subshell's), and is forwarded.
/// Async-signal-safe: plain system calls, no allocation.
fn from_the_commands_group(sender: i32, command: i32, group: i32) -> bool {
    // SAFETY: getpgid only reads a process's group.
    if group <= 0 || sender <= 0 || command <= 0 || unsafe { libc::getpgid(sender) } != group {
        return false;
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut pid = sender;
    // Bounded: a chain of parents cannot loop, but pids are reused.
    for _ in 0..64 {
        if pid == command {
            return true;
        }
        if pid <= 1 || pid == me {
            return false;
        }
        match crate::platform::parent_without_allocating(pid) {
            Some(parent) => pid = parent,
            None => return false,
        }
    }
    false
}

/// Called in the command's process between clone and exec, which on Linux
/// shares lockrun's memory (elsewhere it changes the child's copy only, and
/// a signal in that moment reaches the command as if it came before).
/// Async-signal-safe.
pub fn command_exists() {
    // SAFETY: getpid has no preconditions (a system call: nothing cached
    // from the parent).
    STARTING.store(unsafe { libc::getpid() }, SeqCst);
}

/// `--forward never`: signals sent to lockrun while the command runs stay
/// with lockrun (set before the command starts).
pub fn forward(forward: bool) {
    FORWARD.store(forward, SeqCst);
}

/// Marks the main thread as blocked in flock(2) (or no longer): a signal
/// meanwhile makes lockrun exit 128+N at once.
pub fn blocked_in_flock(blocked: bool) {
    BLOCKED_IN_FLOCK.store(blocked, SeqCst);
}

/// The first signal that arrived before the command started, if any.
pub fn pending() -> Option<i32> {
    let bits = PENDING.load(SeqCst);
    (bits != 0).then(|| bits.trailing_zeros() as i32)
}

/// The command is about to start; `kept_group` is the process group lockrun
/// will go on sharing with it, or 0.
pub fn command_starting(kept_group: i32) {
    SHARED_GROUP.store(kept_group, SeqCst);
}

/// The command runs as `pid`: from now on signals go to it, starting with
/// any that arrived meanwhile (with `--forward never` too: no supervisor
/// can have signalled a command that did not exist yet). `shared_group`
/// is the process group lockrun still shares with it, or 0.
pub fn command_started(pid: i32, shared_group: i32) {
    SHARED_GROUP.store(shared_group, SeqCst);
    COMMAND.store(pid, SeqCst);
    let mut bits = PENDING.swap(0, SeqCst);
    while bits != 0 {
        let sig = bits.trailing_zeros() as i32;
        send(pid, sig);
        bits &= bits - 1;
    }
}

/// Call before reaping the command, so no signal can reach a reused pid.
pub fn command_exited() {
    COMMAND.store(-1, SeqCst);
}

fn send(pid: i32, sig: i32) {
    let (Some(pid), Some(sig)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_named_raw(sig),
    ) else {
        return;
    };
    let _ = rustix::process::kill_process(pid, sig);
}

/// A self-pipe that wakes a waiting lockrun: the signal handler writes the
/// signal's number, the lock-waiting thread writes [`LOCKED`].
pub struct WakePipe {
    bell: Arc<Bell>,
}

/// The byte the lock-waiting thread writes when its flock call returns.
pub const LOCKED: u8 = crate::platform::ANSWERED;

impl WakePipe {
    pub fn new() -> io::Result<WakePipe> {
        let bell = Arc::new(Bell::new()?);
        WAKE.store(bell.write_end().as_raw_fd(), SeqCst);
        Ok(WakePipe { bell })
    }

    /// The pipe, for the helper threads that answer through it: shared,
    /// so that one left behind keeps it open (a write to a closed pipe
    /// would raise SIGPIPE in it) after signals stop writing to it.
    pub fn bell(&self) -> Arc<Bell> {
        Arc::clone(&self.bell)
    }

    /// Waits up to `timeout` for a byte; `None` when none came.
    pub fn wait(&self, timeout: std::time::Duration) -> io::Result<Option<u8>> {
        self.bell.wait(Some(timeout))
    }
}

impl Drop for WakePipe {
    fn drop(&mut self) {
        WAKE.store(-1, SeqCst);
    }
}

/// Ends lockrun the way the command ended: by signal `sig`. The default
/// disposition is restored first (our handler would just catch it), and core
/// dumps are switched off: the command already left its core, a second one
/// of lockrun would only bury it. Where the signal cannot end the process
/// (one whose default is to be ignored), exit 128+N.
pub fn die_by(sig: i32) -> ! {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut core = getrlimit(Resource::Core);
    core.current = Some(0);
    let _ = setrlimit(Resource::Core, core);
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    std::process::exit(i32::from(crate::exit_codes::for_signal(sig)))
}
