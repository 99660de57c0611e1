//! Starting the command so that lockrun's own code runs in the new process
//! before it execs, without copying lockrun to get there.
//!
//! The holder record must be complete before the command starts, and it
//! names the command's pid and start time, which only the new process can
//! read before its exec. std runs code in the child (`pre_exec`) only after
//! a full fork(): the kernel copies lockrun's page tables, then every page
//! either side writes before the exec takes a copy-on-write fault. That was
//! about 0.2 ms of an uncontended `lockrun L true` (1.7 ms in all), the
//! largest single cost, and it is paid again by every waiter in a handoff.
//!
//! So on Linux the command is started the way glibc's posix_spawn starts
//! one: clone(2) with CLONE_VM | CLONE_VFORK. The child runs on a small
//! stack of its own inside lockrun's memory, and lockrun sleeps until the
//! child has exec'd or died. What the child may do follows from sharing
//! memory with a suspended parent:
//! - only system calls on data prepared beforehand: no allocation (another
//!   thread of ours may hold the allocator's lock), no locks, no panics;
//! - no signal handler of ours may run in it, because the handlers' state
//!   is the parent's: every signal is blocked across the clone, and the
//!   child puts our handlers back to the default before it restores the
//!   signal mask for the command.
//!
//! execvp's own needs are covered: glibc since 2.24 builds PATH candidates
//! and a script's `/bin/sh` argv on the stack (sized for them below),
//! without malloc. Older glibc allocated there; lockrun built against one
//! would need its own PATH search. musl's execvp does not run a script
//! without `#!` at all, so there lockrun searches PATH itself (`execvpe`),
//! as glibc would.
//!
//! Elsewhere, a plain fork through std, as before.

use std::ffi::{CString, OsStr, OsString, c_char};

/// In the command's process before exec: die (SIGTERM) when lockrun dies,
/// and at once if it already has. Only async-signal-safe system calls.
pub fn die_with_parent(parent: i32) {
    #[cfg(target_os = "linux")]
    {
        let parent = rustix::process::Pid::from_raw(parent);
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
        // The parent may have died before the prctl: then nobody would send
        // the signal, so check who our parent is now.
        if rustix::process::getppid() != parent {
            // SAFETY: _exit runs nothing of the parent's.
            unsafe { libc::_exit(128 + libc::SIGTERM) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
}
use std::io;
use std::os::unix::ffi::OsStrExt;

/// The command's argv and environment as C strings, built before the lock
/// is taken so that a waiter that gets the lock starts its command at once.
pub struct CommandLine {
    /// Owns the strings that `argv` points into.
    args: Vec<CString>,
    /// `args` as pointers, then a null: what execvp takes (elsewhere std
    /// builds its own from `args`).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    argv: Vec<*const c_char>,
    /// The variables lockrun adds, as `NAME=value` (on Linux only read
    /// through `envp`, which points into them).
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    added: Vec<CString>,
    /// The command's environment for execvpe: lockrun's own, less any
    /// variable `added` replaces, then `added`, then a null. Built here
    /// rather than by changing lockrun's own environment, which std only
    /// allows where no other thread could be reading it.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    envp: Vec<*const c_char>,
    /// Where a libc's execvp does not run a script without `#!` through
    /// /bin/sh itself (musl; glibc does, and flock(1) inherits that),
    /// lockrun's own PATH search does, and needs these prepared: lockrun's
    /// PATH (which glibc's search uses too), and the shell's argv, whose
    /// second entry the search fills in with the script's path.
    #[cfg(all(target_os = "linux", not(target_env = "gnu")))]
    search: imp::Search,
}

impl CommandLine {
    pub fn new(args: &[OsString], env: &[(&str, &OsStr)]) -> io::Result<CommandLine> {
        if args.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
        }
        let nul = |_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command");
        let args = args
            .iter()
            .map(|arg| CString::new(arg.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(nul)?;
        let mut argv: Vec<*const c_char> = args.iter().map(|arg| arg.as_ptr()).collect();
        argv.push(std::ptr::null());
        let added = env
            .iter()
            .map(|(name, value)| {
                let mut entry = format!("{name}=").into_bytes();
                entry.extend_from_slice(value.as_bytes());
                CString::new(entry)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(nul)?;
        let envp = imp::environment_with(&added);
        #[cfg(all(target_os = "linux", not(target_env = "gnu")))]
        let search = imp::Search::new(&argv);
        Ok(CommandLine {
            args,
            argv,
            added,
            envp,
            #[cfg(all(target_os = "linux", not(target_env = "gnu")))]
            search,
        })
    }

    pub fn program(&self) -> &OsStr {
        OsStr::from_bytes(self.args[0].as_bytes())
    }

    /// Replaces lockrun with the command (`-F`), searching `PATH` as a
    /// shell would. Returns only if the exec failed.
    pub fn exec(&self) -> io::Error {
        imp::exec(self)
    }
}

/// Starts the command in a new process, which first runs `before_exec`
/// and puts every signal in `handled`, and SIGPIPE, back to its default
/// disposition. Returns its pid once it has exec'd, or the exec's error,
/// in which case the process is already reaped.
///
/// # Safety
///
/// `before_exec` runs in the new process between its creation and its
/// exec, in memory it shares with lockrun, whose calling thread is
/// suspended meanwhile: it must keep to raw system calls on data it owns
/// (no allocation, no locks, no panics). See the module documentation.
pub unsafe fn start_command(
    command: &CommandLine,
    handled: u64,
    before_exec: impl Fn() + Send + Sync + 'static,
) -> io::Result<i32> {
    imp::start(command, handled, before_exec)
}

/// SIGPIPE goes back to its default for the command, whatever lockrun
/// inherited (systemd, for one, ignores it): a command writing into a
/// closed pipe should die quietly, as it does when a shell starts it and
/// as std's Command arranges for the lock-URL path.
/// (Elsewhere std's spawn resets it.)
#[cfg(target_os = "linux")]
const RESET_TOO: u64 = 1 << libc::SIGPIPE;

#[cfg(target_os = "linux")]
mod imp {
    use super::CommandLine;
    use std::ffi::{CStr, CString, c_int, c_void};
    use std::io;
    use std::mem::MaybeUninit;
    use std::ptr;
    use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

    /// What the child needs, in memory it shares with the parent.
    struct Job<'a> {
        command: &'a CommandLine,
        handled: u64,
        before_exec: &'a dyn Fn(),
        /// The signal mask lockrun had before blocking everything: the
        /// command gets it back, as it would from flock(1).
        mask: libc::sigset_t,
        /// The exec's errno if it failed; 0 while the child still runs.
        exec_errno: AtomicI32,
    }

    /// Room for glibc's execvp: a PATH candidate buffer and, for a script
    /// without `#!`, a copy of argv, both on the stack.
    const STACK_BASE: usize = 64 * 1024;

    pub fn start(command: &CommandLine, handled: u64, before_exec: impl Fn()) -> io::Result<i32> {
        let stack = ChildStack::new(STACK_BASE + 2 * std::mem::size_of_val(&*command.argv))?;
        // SAFETY: plain calls on local, initialised signal sets.
        let mask = unsafe {
            let mut all = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigfillset(all.as_mut_ptr());
            let mut old = MaybeUninit::<libc::sigset_t>::uninit();
            libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
            old.assume_init()
        };
        let job = Job {
            command,
            handled: handled | super::RESET_TOO,
            before_exec: &before_exec,
            mask,
            exec_errno: AtomicI32::new(0),
        };
        // SAFETY: the child runs `child_main` on its own stack, which stays
        // mapped until it has exec'd or exited (CLONE_VFORK suspends us
        // until then), and `job` outlives it for the same reason.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                ptr::from_ref(&job).cast_mut().cast::<c_void>(),
            )
        };
        let clone_error = io::Error::last_os_error();
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &job.mask, ptr::null_mut()) };
        if pid < 0 {
            return Err(clone_error);
        }
        match job.exec_errno.load(SeqCst) {
            0 => Ok(pid),
            errno => {
                let mut status = 0;
                // SAFETY: reaps our own child, which has exited.
                while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
                    && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
                {
                }
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }

    /// The child's whole life, in the parent's memory, until exec.
    extern "C" fn child_main(job: *mut c_void) -> c_int {
        // SAFETY: `start` passes a `Job` that outlives the child's use of it.
        let job = unsafe { &*job.cast::<Job>() };
        for sig in 1..64 {
            if job.handled & (1 << sig) != 0 {
                // SAFETY: resets a disposition; async-signal-safe.
                unsafe { libc::signal(sig, libc::SIG_DFL) };
            }
        }
        (job.before_exec)();
        // SAFETY: restores the saved mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &job.mask, ptr::null_mut()) };
        execvpe(job.command);
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOEXEC);
        job.exec_errno.store(errno, SeqCst);
        // SAFETY: _exit runs no atexit handlers and flushes nothing, which
        // would be the parent's.
        unsafe { libc::_exit(127) }
    }

    pub fn environment_with(added: &[CString]) -> Vec<*const libc::c_char> {
        unsafe extern "C" {
            static environ: *const *const libc::c_char;
        }
        let replaced = |entry: &CStr| {
            let entry = entry.to_bytes();
            added.iter().any(|add| {
                let add = add.as_bytes();
                let name_len = add.iter().position(|&b| b == b'=').unwrap_or(add.len()) + 1;
                entry.starts_with(&add[..name_len])
            })
        };
        let mut envp = Vec::new();
        // SAFETY: `environ` is a null-terminated array of C strings, which
        // lockrun never changes (it passes its additions here instead).
        unsafe {
            let mut entry = environ;
            while !entry.is_null() && !(*entry).is_null() {
                if !replaced(CStr::from_ptr(*entry)) {
                    envp.push(*entry);
                }
                entry = entry.add(1);
            }
        }
        envp.extend(added.iter().map(|add| add.as_ptr()));
        envp.push(ptr::null());
        envp
    }

    pub fn exec(command: &CommandLine) -> io::Error {
        // SAFETY: resets one disposition.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        execvpe(command);
        io::Error::last_os_error()
    }

    /// glibc's execvpe: the PATH search, and a script without `#!` run
    /// by /bin/sh. Returns only if the exec failed, with errno set.
    #[cfg(target_env = "gnu")]
    fn execvpe(command: &CommandLine) {
        // SAFETY: argv and envp are null-terminated arrays of pointers
        // into strings `command` owns or that `environ` holds unchanged.
        unsafe {
            libc::execvpe(
                *command.argv.as_ptr(),
                command.argv.as_ptr(),
                command.envp.as_ptr(),
            );
        }
    }

    /// What glibc's execvpe does, where the libc's own (musl's) gives up
    /// with ENOEXEC on a script without `#!`: the same PATH search (the
    /// default /bin:/usr/bin without PATH, an empty entry for the current
    /// directory, EACCES if a candidate was found but refused, on to the
    /// next candidate after ENOENT, ESTALE, ENOTDIR, ENODEV or ETIMEDOUT),
    /// and ENOEXEC retried as `/bin/sh path args...`. Runs in the vfork
    /// child: no allocation, the candidate built on the stack.
    #[cfg(not(target_env = "gnu"))]
    fn execvpe(command: &CommandLine) {
        let set_errno = |errno| {
            // SAFETY: our own thread's errno.
            unsafe { *libc::__errno_location() = errno };
        };
        let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let argv = command.argv.as_ptr();
        let envp = command.envp.as_ptr();
        let Some(program) = command.args.first() else {
            return set_errno(libc::ENOENT);
        };
        let file = program.as_bytes();
        if file.is_empty() {
            return set_errno(libc::ENOENT);
        }
        if file.contains(&b'/') {
            // SAFETY: null-terminated arrays of pointers to C strings that
            // `command` owns or `environ` holds.
            unsafe { libc::execve(program.as_ptr(), argv, envp) };
            if errno() == libc::ENOEXEC {
                command.search.run_script(program.as_ptr(), envp);
            }
            return;
        }
        const NAME_MAX: usize = 255;
        const PATH_MAX: usize = 4096;
        if file.len() > NAME_MAX {
            return set_errno(libc::ENAMETOOLONG);
        }
        let mut candidate = [0u8; PATH_MAX + NAME_MAX + 2];
        let mut refused = false;
        for dir in command.search.path().split(|&b| b == b':') {
            let Some(room) = candidate.get_mut(..dir.len() + 1 + file.len() + 1) else {
                continue;
            };
            let (dir_part, rest) = room.split_at_mut(dir.len());
            dir_part.copy_from_slice(dir);
            let rest = if dir.is_empty() {
                rest
            } else {
                rest[0] = b'/';
                &mut rest[1..]
            };
            rest[..file.len()].copy_from_slice(file);
            rest[file.len()] = 0;
            let path = candidate.as_ptr().cast::<libc::c_char>();
            // SAFETY: `candidate` is NUL-terminated; argv and envp as above.
            unsafe { libc::execve(path, argv, envp) };
            if errno() == libc::ENOEXEC {
                command.search.run_script(path, envp);
            }
            match errno() {
                libc::EACCES => refused = true,
                libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return,
            }
        }
        if refused {
            set_errno(libc::EACCES);
        }
    }

    /// See `CommandLine::search`.
    #[cfg(not(target_env = "gnu"))]
    pub struct Search {
        path: Option<CString>,
        /// `/bin/sh`, the script (null until the search fills it in),
        /// argv[1..], null. AtomicPtr has the layout of a pointer, so this
        /// is the array execve takes, written by the child through a
        /// shared reference.
        script_argv: Vec<std::sync::atomic::AtomicPtr<libc::c_char>>,
    }

    #[cfg(not(target_env = "gnu"))]
    impl Search {
        pub fn new(argv: &[*const libc::c_char]) -> Search {
            use std::os::unix::ffi::OsStrExt;
            use std::sync::atomic::AtomicPtr;
            let path = std::env::var_os("PATH").and_then(|path| CString::new(path.as_bytes()).ok());
            let shell = c"/bin/sh".as_ptr().cast_mut();
            let mut script_argv = vec![AtomicPtr::new(shell), AtomicPtr::new(ptr::null_mut())];
            // argv ends with its null, which ends this array too.
            script_argv.extend(
                argv.iter()
                    .skip(1)
                    .map(|arg| AtomicPtr::new(arg.cast_mut())),
            );
            Search { path, script_argv }
        }

        fn path(&self) -> &[u8] {
            self.path
                .as_deref()
                .map_or(b"/bin:/usr/bin", CStr::to_bytes)
        }

        /// `/bin/sh script args...`, as glibc runs a file the kernel
        /// cannot. Returns only if that exec failed too.
        fn run_script(&self, script: *const libc::c_char, envp: *const *const libc::c_char) {
            self.script_argv[1].store(script.cast_mut(), std::sync::atomic::Ordering::Relaxed);
            let argv = self.script_argv.as_ptr().cast::<*const libc::c_char>();
            // SAFETY: a null-terminated array of pointers to C strings the
            // suspended parent keeps alive (or, with -F, lockrun itself).
            unsafe { libc::execve(*argv, argv, envp) };
        }
    }

    /// A stack for the child, with a guard page below it.
    struct ChildStack {
        base: *mut c_void,
        len: usize,
    }

    impl ChildStack {
        fn new(size: usize) -> io::Result<ChildStack> {
            // SAFETY: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .unwrap_or(4096)
                .max(4096);
            let len = size.div_ceil(page) * page + page;
            // SAFETY: a fresh anonymous mapping, unmapped in Drop.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = ChildStack { base, len };
            // SAFETY: the lowest page of our own mapping. The stack grows
            // down: an overflow faults here instead of writing below.
            if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }

        fn top(&self) -> *mut c_void {
            // SAFETY: one past the end of the mapping, page-aligned and so
            // 16-byte aligned as the ABI wants a stack pointer.
            unsafe { self.base.cast::<u8>().add(self.len).cast() }
        }
    }

    impl Drop for ChildStack {
        fn drop(&mut self) {
            // SAFETY: our own mapping, no longer in use: the child has
            // exec'd or exited before clone returned.
            unsafe { libc::munmap(self.base, self.len) };
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::CommandLine;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;

    pub fn start(
        command: &CommandLine,
        handled: u64,
        before_exec: impl Fn() + Send + Sync + 'static,
    ) -> io::Result<i32> {
        let mut std_command = std_command(command);
        // SAFETY: runs between fork and exec; `before_exec` keeps to raw
        // system calls (see `start_command`).
        unsafe {
            std_command.pre_exec(move || {
                for sig in 1..64 {
                    if handled & (1 << sig) != 0 {
                        libc::signal(sig, libc::SIG_DFL);
                    }
                }
                before_exec();
                Ok(())
            });
        }
        Ok(std_command.spawn()?.id() as i32)
    }

    /// std resets SIGPIPE itself here.
    fn std_command(command: &CommandLine) -> std::process::Command {
        let mut std_command = std::process::Command::new(command.program());
        for arg in &command.args[1..] {
            std_command.arg(std::ffi::OsStr::from_bytes(arg.as_bytes()));
        }
        for add in &command.added {
            let add = add.as_bytes();
            let eq = add.iter().position(|&b| b == b'=').unwrap_or(add.len());
            std_command.env(
                std::ffi::OsStr::from_bytes(&add[..eq]),
                std::ffi::OsStr::from_bytes(add.get(eq + 1..).unwrap_or_default()),
            );
        }
        std_command
    }

    pub fn environment_with(_added: &[std::ffi::CString]) -> Vec<*const libc::c_char> {
        Vec::new()
    }

    pub fn exec(command: &CommandLine) -> io::Error {
        std_command(command).exec()
    }
}
