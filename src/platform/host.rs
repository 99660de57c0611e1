//! Small facts of the system and the process that std does not give
//! portably: who we run as, the host's name, how a process ended, how many
//! names a file has, who may read it. The same functions are in
//! `platform::windows`, with Windows' answers.

use std::ffi::OsString;
use std::io;
pub use std::os::unix::fs::FileExt;

/// Our user id (the record's `uid`).
pub fn user_id() -> u32 {
    rustix::process::getuid().as_raw()
}

/// This host's name (the record's `host`): uname's nodename.
pub fn host_name() -> Option<String> {
    Some(
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
    )
}

/// The signal that ended a process, if one did.
pub fn exit_signal(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// How many names the open file has (its link count).
pub fn link_count(_file: &std::fs::File, meta: &std::fs::Metadata) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(meta.nlink())
}

/// Whether anyone but the owner may read or write the file (libpq ignores
/// a password file that its group or others can read).
pub fn others_may_access(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o077 != 0
}

/// Writes to a connection whose peer has closed it are errors (EPIPE), not
/// the death of the process by SIGPIPE. lockrun starts without std's
/// runtime, which would have set this; the command gets the default back
/// when it starts (`platform::spawn`).
pub fn ignore_broken_pipes() {
    // SAFETY: setting a disposition to SIG_IGN has no handler to race.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Started with fd 0, 1 or 2 closed (a daemon, `cmd <&- >&- 2>&-`), the
/// first descriptor lockrun creates would become "stderr": a message would
/// land in its wake pipe or its lock file. So the three are opened on
/// /dev/null first, as a shell would leave them.
pub fn open_standard_streams() {
    for fd in 0..3 {
        // SAFETY: only asks whether the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // SAFETY: open returns the lowest free descriptor, which is
            // this one; it is meant to stay open for good.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}

/// The arguments as the C `main` got them (lockrun starts without std's
/// runtime: `no_main`).
///
/// # Safety
/// `argv` must hold `argc` valid NUL-terminated strings, as the C runtime
/// passes them.
pub unsafe fn args_from_c(
    argc: std::ffi::c_int,
    argv: *const *const std::ffi::c_char,
) -> Vec<OsString> {
    use std::os::unix::ffi::OsStrExt;
    (0..usize::try_from(argc).unwrap_or(0))
        // SAFETY: the caller's promise: argc valid, NUL-terminated strings.
        .map(|i| unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) })
        .map(|arg| std::ffi::OsStr::from_bytes(arg.to_bytes()).to_owned())
        .collect()
}
