//! Signals: lockrun stands between a supervisor (cron, systemd, a shell,
//! `timeout`) and the command, and must be transparent. A signal meant for
//! lockrun is meant for the command; a command that dies by a signal makes
//! lockrun die by the same signal, so the caller sees what it would have
//! seen without lockrun.

use crate::wait::Wake;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithRawSiginfo;
use std::io;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};

pub const FORWARDED: [i32; 6] = [SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2];

/// si_code of a signal the kernel itself generated, such as the terminal's
/// SIGINT on Ctrl-C. The terminal sends those to the whole foreground
/// process group, which includes the command: forwarding them too would make
/// Ctrl-C arrive twice.
const SI_KERNEL: i32 = 0x80;

enum Phase {
    /// Waiting for the lock: a signal ends the wait.
    Waiting(Sender<Wake>),
    /// Lock held, command not yet started: keep signals for it.
    Starting(Vec<i32>),
    Running(i32),
    /// The command has exited (it may be a zombie not yet reaped): its pid
    /// must not be signalled any more, it could soon belong to someone else.
    Done,
}

/// Catches the forwarded signals from the moment it is installed.
pub struct Relay {
    phase: Arc<Mutex<Phase>>,
}

impl Relay {
    pub fn install_waiting(wake: Sender<Wake>) -> io::Result<Relay> {
        Relay::install(Phase::Waiting(wake))
    }

    pub fn install_starting() -> io::Result<Relay> {
        Relay::install(Phase::Starting(Vec::new()))
    }

    fn install(initial: Phase) -> io::Result<Relay> {
        let phase = Arc::new(Mutex::new(initial));
        let mut signals = SignalsInfo::<WithRawSiginfo>::new(FORWARDED)?;
        let shared = Arc::clone(&phase);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for info in signals.forever() {
                    deliver(&shared, info.si_signo, info.si_code == SI_KERNEL);
                }
            })?;
        Ok(Relay { phase })
    }

    /// The lock is ours; signals from now on are kept for the command.
    pub fn lock_taken(&self) {
        let mut phase = lock(&self.phase);
        if matches!(*phase, Phase::Waiting(_)) {
            *phase = Phase::Starting(Vec::new());
        }
    }

    /// The command runs as `pid`: hand it whatever arrived meanwhile.
    pub fn command_started(&self, pid: i32) {
        let mut phase = lock(&self.phase);
        if let Phase::Starting(pending) = &*phase {
            for &sig in pending {
                send(pid, sig);
            }
        }
        *phase = Phase::Running(pid);
    }

    /// Call before reaping the command, so no signal can reach a reused pid.
    pub fn command_exited(&self) {
        *lock(&self.phase) = Phase::Done;
    }
}

fn lock(phase: &Mutex<Phase>) -> MutexGuard<'_, Phase> {
    phase
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn deliver(phase: &Mutex<Phase>, sig: i32, from_kernel: bool) {
    let mut phase = lock(phase);
    match &mut *phase {
        Phase::Waiting(wake) => {
            let _ = wake.send(Wake::Signal(sig));
        }
        Phase::Starting(pending) => {
            // The command will be in our process group and get a terminal's
            // signal itself only if it exists when the signal is sent.
            pending.push(sig);
        }
        Phase::Running(pid) => {
            if !from_kernel {
                send(*pid, sig);
            }
        }
        Phase::Done => {}
    }
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
