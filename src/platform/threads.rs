//! Helper threads that only the interrupt signal reaches, and that signal:
//! how lockrun ends a blocking lock call on another thread.

use std::io;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// Whether the interrupt signal has a handler of ours, which the command's
/// process must reset before its exec.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The interrupt signal, once lockrun catches it.
pub fn interrupt_signal_in_use() -> Option<i32> {
    INSTALLED.load(SeqCst).then(interrupt_signal)
}

/// The signal the waiter sends its helper thread to end a blocking lock
/// call early (at the deadline, or when a signal ends the wait). Its
/// handler does nothing and is installed without SA_RESTART, so the
/// blocking call returns EINTR.
#[cfg(target_os = "linux")]
pub fn interrupt_signal() -> i32 {
    libc::SIGRTMIN()
}

/// Elsewhere SIGURG: macOS has no real-time signals, and FreeBSD's start
/// at 65, past the 64-bit masks lockrun keeps signals in (`handled`).
/// SIGURG is ignored by default and only sent for a socket's out-of-band
/// data to a process that asked for it (F_SETOWN), which lockrun never
/// does; Go's runtime picked it for the same reason. The command's
/// process puts it back to its default before the exec, as on Linux.
#[cfg(not(target_os = "linux"))]
pub fn interrupt_signal() -> i32 {
    libc::SIGURG
}

extern "C" fn interrupted(_: libc::c_int) {}

/// Installs the no-op handler for [`interrupt_helper`]. Idempotent.
fn install_interrupt() -> io::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid empty one; the handler does
        // nothing.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = interrupted as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(interrupt_signal(), &action, std::ptr::null_mut())
        };
        if installed != 0 {
            result = Err(io::Error::last_os_error());
        } else {
            INSTALLED.store(true, SeqCst);
        }
    });
    result
}

/// Starts a helper thread with every forwarded signal blocked, so that a
/// handler only ever runs on the main thread, where the wake pipe is known
/// to be open while `WAKE` names it. Only the interrupt signal reaches the
/// helper.
pub fn spawn_helper<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    install_interrupt()?;
    // std's default stack: a helper may run a remote client's futures,
    // which need more than a kernel lock call; untouched pages cost nothing.
    with_signals_blocked(|| {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(work)
    })
}

/// Runs `start` with every signal but the interrupt one blocked on the
/// calling thread, then restores the mask. A thread inherits its creator's
/// mask, so every thread `start` creates (a client library's runtime
/// workers, a watcher) keeps lockrun's handlers off it: they run only on
/// the main thread, where the wake pipe is known to be open.
pub fn with_signals_blocked<T>(start: impl FnOnce() -> T) -> T {
    let old = block_signals_on_this_thread();
    let result = start();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    result
}

/// Blocks every signal but the interrupt one on the calling thread and
/// returns the mask it had. For a thread lockrun does not start itself (a
/// client library's runtime calls it from its thread-start hook): signals
/// sent to lockrun then never run a handler there.
pub fn block_signals_on_this_thread() -> libc::sigset_t {
    // SAFETY: plain calls on local, initialised signal sets.
    unsafe {
        let mut blocked = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(blocked.as_mut_ptr());
        libc::sigdelset(blocked.as_mut_ptr(), interrupt_signal());
        let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::pthread_sigmask(libc::SIG_BLOCK, blocked.as_ptr(), old.as_mut_ptr());
        old.assume_init()
    }
}

/// Makes a blocking system call on the helper thread return EINTR.
pub fn interrupt_helper<T>(helper: &std::thread::JoinHandle<T>) {
    use std::os::unix::thread::JoinHandleExt;
    if !helper.is_finished() {
        // std's RawPthread is an integer; libc's pthread_t is one on glibc
        // and a pointer on musl, where without the cast lockrun does not
        // build at all.
        let thread = helper.as_pthread_t() as libc::pthread_t;
        // SAFETY: the thread has not been joined, so its pthread_t is valid.
        unsafe { libc::pthread_kill(thread, interrupt_signal()) };
    }
}

/// Runs `write` with SIGXFSZ ignored: under `ulimit -f` (systemd's
/// LimitFSIZE) a record write past the limit must fail with EFBIG, not kill
/// lockrun or the command's process before its exec. Setting the signal to
/// ignored again afterwards discards one raised while it was blocked.
/// Async-signal-safe: it also runs in the command's process before exec.
pub fn tolerating_file_size_limit<T>(write: impl FnOnce() -> T) -> T {
    // Without a limit (the usual case) there is no signal to hold off: one
    // getrlimit instead of three sigactions, twice a run.
    // SAFETY: getrlimit into a local struct; async-signal-safe.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) == 0
            && limit.rlim_cur == libc::RLIM_INFINITY
        {
            return write();
        }
    }
    // SAFETY: sigaction on a local struct; async-signal-safe.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        libc::sigemptyset(&mut ignore.sa_mask);
        libc::sigaction(libc::SIGXFSZ, &ignore, &mut old);
        let result = write();
        libc::sigaction(libc::SIGXFSZ, &ignore, std::ptr::null_mut());
        libc::sigaction(libc::SIGXFSZ, &old, std::ptr::null_mut());
        result
    }
}
