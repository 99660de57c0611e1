//! The watchdog of a lock URL's run: a small process that stops the
//! command, and everything it started, if lockrun dies while the command
//! runs (SIGKILL, the OOM killer). On a lock URL lockrun itself keeps the
//! lock (a connection, a lease); once it is gone the lock passes to the
//! next holder at once (PostgreSQL ends the session) or after the TTL
//! (etcd), while a command left running would still act as the holder. A
//! file lock has no such need: the command inherits the lock and keeps it
//! after lockrun's death, by design, so nothing here runs on that path.
//!
//! Why a process of its own, and why this shape:
//! - The command's parent-death signal (`die_with_parent`) reaches the
//!   command alone: not its children (any `sh -c` command), and not a
//!   command that ignores SIGTERM. Worse, beside a watchdog it races it:
//!   a command it killed first left its children orphaned, out of the
//!   watchdog's reach. So with a watchdog the command gets none, and
//!   tells the watchdog its pid itself before its exec (`ChildLink`).
//! - Only a process that outlives lockrun can act after lockrun's death.
//!   The watchdog is forked by lockrun before the lock is even contended
//!   for, while lockrun is still one thread (so the child may allocate and
//!   read /proc like any program), and holds one end of a socket pair whose
//!   other end only lockrun has (close-on-exec: the command never gets it).
//!   When lockrun dies, however it dies, the kernel closes its end and the
//!   watchdog reads end-of-file.
//! - Which processes to stop: the watchdog is lockrun's sibling of the
//!   command, not its ancestor, so it cannot be their subreaper (the
//!   kernel hands orphans to the nearest subreaper *above* the dying
//!   process), and the command's process group or session is not its own
//!   to kill (lockrun leaves it to the command, but it may be the caller's
//!   shell's group too). What does work: the command's own subtree keeps
//!   its parent links when lockrun dies (only lockrun's direct children
//!   are reparented), so the command (pinned by pidfd from the moment
//!   lockrun reports its pid) and its descendants by /proc's parent links
//!   are found, pinned at once, and stopped with the same
//!   `stop_all` as `--max-time` (SIGTERM, SIGKILL after `--kill-grace`,
//!   everything frozen first so that nothing forks its way out). What it
//!   cannot find: a process that had already left the command's subtree
//!   before lockrun died (a double fork or a daemon whose parent exited,
//!   which lockrun had adopted as subreaper); those are reparented above
//!   lockrun with everything else and look like any other orphan there.
//!   docs/LOCK-URLS.md says so.
//! - Where lockrun can hand it over, the watchdog also holds a duplicate of
//!   the lock's own connection (PostgreSQL's socket, passed with
//!   SCM_RIGHTS before the command starts). lockrun's death then does not
//!   close the connection: the server keeps the session, and so the lock,
//!   until the watchdog has stopped the command's tree and closes it. The
//!   next holder cannot start while the old command still runs.
//!
//! The protocol on the socket: 8-byte messages, a kind and a value. The
//! command's pid once it runs; "stand down" once it has exited (sent while
//! it is still an unreaped zombie, so a pid the watchdog pinned can never
//! belong to someone else when it acts); a descriptor to hold. End of file
//! after "stand down" is lockrun's normal end: nothing to do.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};
use std::time::Duration;

/// The watchdog's pid while it runs, else 0: `backend::command_tree`
/// (what `--max-time` and a lost lock stop) leaves it out, since it is
/// lockrun's child but not the command's.
static PID: AtomicI32 = AtomicI32::new(0);

/// The watchdog's pid, 0 when there is none.
pub fn watchdog_pid() -> i32 {
    PID.load(SeqCst)
}

const COMMAND: u32 = 1;
const STAND_DOWN: u32 = 2;
const HOLD: u32 = 3;

/// lockrun's side of the watchdog.
pub struct Watchdog {
    ours: OwnedFd,
}

impl Watchdog {
    /// Forks the watchdog. Call while lockrun is single-threaded (the
    /// child goes on in Rust, allocating). `None` if it could not be
    /// started: the run goes on with the command's parent-death signal
    /// alone, as before the watchdog existed.
    /// `label` and `grace_shown` are the lock and `--kill-grace` in the
    /// words of lockrun's messages.
    pub fn start(label: &str, grace: Duration, grace_shown: &str) -> Option<Watchdog> {
        let (ours, theirs) = pair().ok()?;
        let parent = std::process::id() as i32;
        // SAFETY: lockrun is single-threaded here (see above); the child
        // never returns into lockrun's code.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => {
                drop(ours);
                watch(theirs, parent, label, grace, grace_shown)
            }
            pid => {
                drop(theirs);
                PID.store(pid, SeqCst);
                Some(Watchdog { ours })
            }
        }
    }

    /// Hands the watchdog a duplicate of `fd` (the lock's connection), to
    /// keep open after lockrun's death until the command's tree is gone.
    pub fn hold(&self, fd: BorrowedFd<'_>) {
        let _ = send(self.ours.as_raw_fd(), HOLD, 0, Some(fd.as_raw_fd()));
    }

    pub fn command_started(&self, pid: i32) {
        let _ = send(self.ours.as_raw_fd(), COMMAND, pid, None);
    }

    /// What the command's own process uses, between fork and exec, to tell
    /// the watchdog its pid ([`ChildLink::announce`]).
    pub fn child_link(&self) -> ChildLink {
        ChildLink {
            fd: self.ours.as_raw_fd(),
            parent: std::process::id() as i32,
        }
    }

    /// The command has exited (not yet reaped): the watchdog lets go of
    /// what it holds and exits.
    pub fn command_exited(&self) {
        let _ = send(self.ours.as_raw_fd(), STAND_DOWN, 0, None);
        PID.store(0, SeqCst);
    }
}

/// lockrun's end of the socket as the command's process sees it between
/// fork and exec (close-on-exec: the command itself never has it).
///
/// Why the command announces itself rather than lockrun alone: the
/// watchdog must know the command before lockrun can die, or a lockrun
/// killed right after the fork leaves a command nobody stops. Sent from
/// the child, the pid is on the socket before the exec, and the watchdog
/// cannot read end-of-file before it (the child holds a copy of this end
/// until its exec). That is what lets the command go without a
/// parent-death signal: SIGTERM from the kernel at lockrun's death raced
/// the watchdog, and when it won, the command died alone, its children
/// were reparented out of reach, and the watchdog (finding the command
/// gone) stopped nothing while they ran on past the lock.
#[derive(Clone, Copy)]
pub struct ChildLink {
    fd: RawFd,
    parent: i32,
}

impl ChildLink {
    /// In the command's process before its exec; async-signal-safe (one
    /// getpid, one sendmsg from stack buffers, one getppid). A lockrun
    /// already gone by then never saw the command start: it leaves at once,
    /// as under the parent-death signal.
    pub fn announce(self) {
        // SAFETY: getpid, getppid and _exit are async-signal-safe.
        unsafe {
            let _ = send(self.fd, COMMAND, libc::getpid(), None);
            if libc::getppid() != self.parent {
                libc::_exit(128 + libc::SIGTERM);
            }
        }
    }
}

fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    let kind = libc::SOCK_STREAM;
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors that we own.
    let pair = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    for fd in [&pair.0, &pair.1] {
        // SAFETY: sets a flag on a descriptor we own.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // No MSG_NOSIGNAL there: a write to a watchdog that died must not
    // raise SIGPIPE in lockrun, whose SIGPIPE is the default.
    #[cfg(target_os = "macos")]
    {
        let on: libc::c_int = 1;
        // SAFETY: sets an int option on a socket we own.
        unsafe {
            libc::setsockopt(
                pair.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NOSIGPIPE,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
    Ok(pair)
}

/// Room for one descriptor's control message, aligned as cmsghdr wants.
#[repr(C)]
union Control {
    _align: libc::cmsghdr,
    bytes: [u8; 64],
}

/// One message; async-signal-safe (stack buffers only), as the command's
/// process sends one before its exec.
fn send(fd: RawFd, kind: u32, value: i32, pass: Option<RawFd>) -> io::Result<()> {
    let mut msg = [0u8; 8];
    msg[..4].copy_from_slice(&kind.to_le_bytes());
    msg[4..].copy_from_slice(&value.to_le_bytes());
    let mut iov = libc::iovec {
        iov_base: msg.as_mut_ptr().cast(),
        iov_len: msg.len(),
    };
    let mut control = Control { bytes: [0; 64] };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive
    // the sendmsg call, and the control buffer has room for one
    // descriptor (CMSG_SPACE of an int is well under 64 bytes).
    unsafe {
        let mut header: libc::msghdr = std::mem::zeroed();
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        if let Some(pass) = pass {
            let size = std::mem::size_of::<RawFd>() as u32;
            header.msg_control = control.bytes.as_mut_ptr().cast();
            header.msg_controllen = libc::CMSG_SPACE(size) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), pass);
        }
        loop {
            if libc::sendmsg(fd, &header, send_flags()) == msg.len() as isize {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// A watchdog that died would make lockrun's write raise SIGPIPE.
fn send_flags() -> libc::c_int {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    {
        libc::MSG_NOSIGNAL
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    {
        0
    }
}

/// One message, with the descriptor it carried; `Ok(None)` at end of file.
fn receive(fd: &OwnedFd) -> io::Result<Option<(u32, i32, Option<OwnedFd>)>> {
    let mut msg = [0u8; 8];
    let mut got = 0;
    let mut passed = None;
    while got < msg.len() {
        let mut iov = libc::iovec {
            iov_base: msg[got..].as_mut_ptr().cast(),
            iov_len: msg.len() - got,
        };
        let mut control = Control { bytes: [0; 64] };
        // SAFETY: as in `send`; recvmsg fills at most the buffers given.
        let n = unsafe {
            let mut header: libc::msghdr = std::mem::zeroed();
            header.msg_iov = &mut iov;
            header.msg_iovlen = 1;
            header.msg_control = control.bytes.as_mut_ptr().cast();
            header.msg_controllen = std::mem::size_of::<Control>() as _;
            let n = libc::recvmsg(fd.as_raw_fd(), &mut header, 0);
            if n > 0 {
                let mut cmsg = libc::CMSG_FIRSTHDR(&header);
                while !cmsg.is_null() {
                    if (*cmsg).cmsg_level == libc::SOL_SOCKET
                        && (*cmsg).cmsg_type == libc::SCM_RIGHTS
                    {
                        let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                        passed = Some(OwnedFd::from_raw_fd(raw));
                    }
                    cmsg = libc::CMSG_NXTHDR(&header, cmsg);
                }
            }
            n
        };
        match n {
            0 => return Ok(None),
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    let kind = u32::from_le_bytes([msg[0], msg[1], msg[2], msg[3]]);
    let value = i32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
    Ok(Some((kind, value, passed)))
}

/// The watchdog's whole life; never returns.
fn watch(theirs: OwnedFd, lockrun: i32, label: &str, grace: Duration, grace_shown: &str) -> ! {
    let theirs = settle(theirs);
    let mut command: Option<(i32, super::Target)> = None;
    // Kept open, never used: the lock's connection lives while we hold it.
    let mut held: Vec<OwnedFd> = Vec::new();
    loop {
        match receive(&theirs) {
            Ok(Some((COMMAND, pid, _))) => command = super::Target::pin(pid).map(|t| (pid, t)),
            Ok(Some((STAND_DOWN, _, _))) => quit(),
            Ok(Some((HOLD, _, Some(fd)))) => held.push(fd),
            Ok(Some(_)) => {}
            // End of file, or an error that only lockrun's end can cause:
            // lockrun is gone.
            Ok(None) | Err(_) => break,
        }
    }
    if let Some((pid, target)) = command
        && !target.exited()
    {
        crate::say!(
            "lockrun: the lockrun (pid {lockrun}) holding {label} died while its command (pid {pid}) ran; stopping the command and every process it started (SIGTERM, then SIGKILL after {grace_shown}) before the lock is let go of where lockrun's connection allows it"
        );
        stop_tree(pid, target, grace);
    }
    // Now the server may end the session: the lock passes on.
    drop(held);
    quit()
}

/// Stops `pid` and its descendants. A child whose parent dies under the
/// stop is reparented away from the tree (lockrun, its subreaper, is
/// gone), so every process seen once is kept as a root whose own
/// descendants are looked for again.
fn stop_tree(pid: i32, target: super::Target, grace: Duration) {
    let seen = std::sync::Mutex::new(vec![pid]);
    let find = || {
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = Vec::new();
        let mut next = 0;
        while next < seen.len() {
            for child in super::descendants(seen[next]) {
                if !seen.contains(&child) {
                    seen.push(child);
                    found.push(child);
                }
            }
            next += 1;
        }
        super::Target::pin_all(found)
    };
    let targets = std::iter::once(target).chain(find()).collect();
    super::stop_all(targets, grace, find);
}

/// The watchdog's own set-up: out of the way of signals meant for the
/// command, and holding no descriptor of the caller's but its socket and
/// stderr (for its one message). stdin and stdout go to /dev/null: a
/// pipe read to its end (`$(lockrun …)`, `| cat`) must end with lockrun.
fn settle(theirs: OwnedFd) -> OwnedFd {
    // Above stdin, stdout and stderr, which are about to be replaced (a
    // caller may have started lockrun with one of them closed, and the
    // socket pair took its number).
    let theirs = match theirs.as_raw_fd() {
        0..=2 => match rustix::io::fcntl_dupfd_cloexec(&theirs, 3) {
            Ok(moved) => moved,
            Err(_) => quit(),
        },
        _ => theirs,
    };
    let keep = theirs.as_raw_fd();
    // SAFETY: plain system calls on our own process and descriptors.
    unsafe {
        for sig in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_NAME, c"lockrun-watch".as_ptr(), 0, 0, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::close(null);
        }
        // One call each side of `keep` where the kernel has close_range
        // (Linux 5.9); else one close per possible descriptor.
        #[cfg(target_os = "linux")]
        if (keep == 3 || libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32) == 0)
            && libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32) == 0
        {
            return theirs;
        }
        let most = match libc::sysconf(libc::_SC_OPEN_MAX) {
            n if n > 0 => n.min(1 << 16) as RawFd,
            _ => 1024,
        };
        for fd in 3..most {
            if fd != keep {
                libc::close(fd);
            }
        }
    }
    theirs
}

fn quit() -> ! {
    // SAFETY: ends this process without running lockrun's exit handlers
    // (stdio buffers are the parent's).
    unsafe { libc::_exit(0) }
}
