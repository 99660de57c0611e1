//! `--max-time`: once the command has run that long, stop it and every
//! process that holds the lock through the descriptor lockrun handed down:
//! SIGTERM, then SIGKILL to whatever still lives after the grace. Nothing
//! that holds the lock survives, and nothing else is touched: a daemon that
//! closed the descriptor is left alone.
//!
//! One thread sleeping on one timer; it exists only with `--max-time`, so
//! a run without a limit pays nothing.

use crate::display;
use crate::platform::{self, Target};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::backend::Inheritors;

/// What a stop did, for the message and the record.
#[derive(Debug, Clone)]
pub struct Stopped {
    pub limit: Duration,
    pub grace: Duration,
    /// Every process signalled, with the last signal it got.
    pub stopped: Vec<(i32, i32)>,
    /// SIGKILL if anything needed it, else SIGTERM.
    pub last_signal: i32,
}

impl Stopped {
    pub fn describe(&self) -> String {
        if !platform::STOPS_BY_SIGNALS {
            let pids: Vec<String> = self
                .stopped
                .iter()
                .map(|(pid, _)| pid.to_string())
                .collect();
            return format!(
                "the command ran for --max-time {}: ended pid {} and every process it started (TerminateJobObject on its job)",
                display::span(self.limit),
                pids.join(", ")
            );
        }
        // A command that kept forking can leave thousands: name the first
        // few and count the rest, so the line stays a line.
        let list = |sig: i32| {
            let pids: Vec<String> = self
                .stopped
                .iter()
                .filter(|(_, s)| *s == sig)
                .map(|(pid, _)| pid.to_string())
                .collect();
            if pids.len() <= SHOWN {
                return pids;
            }
            let mut shown = pids[..SHOWN].to_vec();
            shown.push(format!("and {} more", pids.len() - SHOWN));
            shown
        };
        let (term, kill) = (list(platform::STOP_SIGNAL), list(platform::KILL_SIGNAL));
        let mut text = format!(
            "the command ran for --max-time {}: stopped",
            display::span(self.limit)
        );
        if !term.is_empty() {
            text += &format!(" pid {} with SIGTERM", term.join(", "));
        }
        if !kill.is_empty() {
            if !term.is_empty() {
                text += " and";
            }
            text += &format!(
                " pid {} with SIGKILL ({} after SIGTERM)",
                kill.join(", "),
                display::span(self.grace)
            );
        }
        text
    }
}

/// How many pids per signal the message names.
const SHOWN: usize = 10;

#[derive(Default)]
struct State {
    finished: bool,
    stopped: Option<Stopped>,
}

type Shared = crate::sync::Shared<State>;

pub struct Supervisor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts the clock for the command `pid`, started just now.
    pub fn start(
        pid: i32,
        limit: Duration,
        grace: Duration,
        held: &impl crate::backend::Held,
    ) -> Supervisor {
        let shared = Arc::new(Shared::new(State::default()));
        // Pinned now, while the command is surely not yet reaped.
        let command = Target::pin(pid);
        let inheritors = held.inheritors();
        let inner = Arc::clone(&shared);
        let deadline = Instant::now().checked_add(limit);
        let thread = crate::platform::spawn_helper("max-time", move || {
            watch(&inner, deadline, limit, grace, command, inheritors);
        })
        .ok();
        Supervisor { shared, thread }
    }

    /// The command has exited: stop the clock, or let a stop under way end
    /// (everything holding the lock gone), and say what it did.
    pub fn finish(mut self) -> Option<Stopped> {
        self.shared.lock().finished = true;
        self.shared.notify();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.shared.lock().stopped.take()
    }
}

fn watch(
    shared: &Shared,
    deadline: Option<Instant>,
    limit: Duration,
    grace: Duration,
    command: Option<Target>,
    inheritors: Option<Inheritors>,
) {
    {
        let mut state = shared.lock();
        loop {
            if state.finished {
                return;
            }
            let Some(deadline) = deadline else {
                // A limit past what a clock can count: wait for the end.
                state = shared.wait(state);
                continue;
            };
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = shared.wait_until(state, deadline);
        }
    }
    let command_pid = command.as_ref().map_or(0, |c| c.pid);
    let find = || -> Vec<Target> {
        match &inheritors {
            Some(inheritors) => Target::pin_all(inheritors(command_pid)),
            None => Vec::new(),
        }
    };
    let targets: Vec<Target> = command.into_iter().chain(find()).collect();
    let stopped = platform::stop_all(targets, grace, find);
    let last_signal = if stopped.iter().any(|(_, sig)| *sig == platform::KILL_SIGNAL) {
        platform::KILL_SIGNAL
    } else {
        platform::STOP_SIGNAL
    };
    shared.lock().stopped = Some(Stopped {
        limit,
        grace,
        stopped,
        last_signal,
    });
}
