//! Process identity and liveness.
//!
//! A pid alone does not name a process: pids are reused, and a record that
//! says "pid 4242" may meet an unrelated process with that pid after a
//! crash. A (boot id, pid, start time) triple does, on one host. Even so,
//! the answer is only ever diagnostic: whether the lock is held is the
//! kernel's to say.

use crate::platform::{self, ProcessState};
use std::fs;
use std::sync::OnceLock;

/// Who we are, for the record. Everything here is cheap: no NSS look-up
/// (which can mean LDAP round trips), just uname, /etc/passwd and /proc.
pub struct Me {
    pub host: Option<String>,
    pub user: Option<String>,
    pub uid: u32,
    pub boot_id: Option<String>,
    pub pid_ns: Option<u64>,
}

impl Me {
    pub fn gather() -> Me {
        // Windows has no uid (0 there): `Record::starting` writes none.
        let uid = platform::user_id();
        let here = this_machine();
        Me {
            host: here.host.clone(),
            user: user_name(uid),
            uid,
            boot_id: here.boot_id.clone(),
            pid_ns: here.pid_ns,
        }
    }
}

/// Where we run: what a record is compared against. Read once per
/// process: a waiter's status line checks the holder every tick, and
/// `holder` checks one record per path.
struct Machine {
    host: Option<String>,
    boot_id: Option<String>,
    pid_ns: Option<u64>,
}

fn this_machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(|| Machine {
        host: platform::host_name(),
        boot_id: platform::boot_id(),
        pid_ns: platform::pid_namespace(),
    })
}

pub fn host_name() -> Option<&'static str> {
    this_machine().host.as_deref()
}

/// The PID namespace we run in, as records name it.
pub fn pid_namespace() -> Option<u64> {
    this_machine().pid_ns
}

/// The login name for `uid`, from /etc/passwd, else `$USER` or `$LOGNAME`
/// when nothing contradicts it.
fn user_name(uid: u32) -> Option<String> {
    #[cfg(windows)]
    if let Ok(name) = std::env::var("USERNAME") {
        return Some(name);
    }
    passwd_name(uid).or_else(|| {
        std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
    })
}

/// The login name /etc/passwd gives `uid`, for any user (a file's owner).
pub fn passwd_name(uid: u32) -> Option<String> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (Some(name), _, Some(id)) = (fields.next(), fields.next(), fields.next()) else {
            return None;
        };
        (id.parse::<u32>().ok() == Some(uid)).then(|| name.to_owned())
    })
}

/// Whether the process a record names is still that process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    Dead,
    /// Another host, or a PID namespace whose pids we cannot look up.
    CannotTell,
}

impl Liveness {
    pub fn as_option(self) -> Option<bool> {
        match self {
            Liveness::Alive => Some(true),
            Liveness::Dead => Some(false),
            Liveness::CannotTell => None,
        }
    }
}

/// Who a record says holds a lock: enough to tell whether that process is
/// still the one the record names.
pub struct Claim<'a> {
    pub pid: Option<i64>,
    pub pid_start: Option<u64>,
    pub host: Option<&'a str>,
    pub boot_id: Option<&'a str>,
    pub pid_ns: Option<u64>,
}

/// Whether the process a record names is still alive, and the same one.
pub fn liveness(record: &Claim) -> Liveness {
    let Some(pid) = record.pid.and_then(|p| i32::try_from(p).ok()) else {
        return Liveness::CannotTell;
    };
    let here = this_machine();
    if let Some(host) = record.host
        && Some(host) != host_name()
    {
        return Liveness::CannotTell;
    }
    if let (Some(theirs), Some(ours)) = (record.boot_id, here.boot_id.as_deref())
        && theirs != ours
    {
        // Written before the last reboot: nobody from then is alive.
        return Liveness::Dead;
    }
    if let (Some(theirs), Some(ours)) = (record.pid_ns, here.pid_ns)
        && theirs != ours
    {
        return Liveness::CannotTell;
    }
    match (platform::process_state(pid), record.pid_start) {
        (ProcessState::Running { start: Some(now) }, Some(then)) if now == then => Liveness::Alive,
        (ProcessState::Running { start: Some(_) }, Some(_)) => Liveness::Dead, // the pid was reused
        (ProcessState::Running { start: None }, Some(_)) => Liveness::CannotTell,
        (ProcessState::Running { .. }, None) => Liveness::Alive, // cannot rule out reuse; best guess
        (ProcessState::Zombie | ProcessState::Gone, _) => Liveness::Dead,
        (ProcessState::Unknown, _) => Liveness::CannotTell,
    }
}
