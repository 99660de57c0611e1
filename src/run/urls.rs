//! The run form on a lock URL: the backend's lock, the one run flow. It
//! names no backend: src/registry.rs calls it with each one's `start`.

use super::Ending;
#[cfg(feature = "lock-urls")]
use super::Flow;
#[cfg(feature = "lock-urls")]
use crate::display;
use crate::exit_codes::Failure;
#[cfg(feature = "lock-urls")]
use std::ffi::OsString;

/// The run form on a lock URL named `text`, with the backend `start`
/// makes (it grants a lease or opens a session, given the label).
#[cfg(feature = "lock-urls")]
pub fn run_url<B: crate::backend::Backend, U>(
    opts: &crate::backend::UrlRunOptions<U>,
    (text, public): (&str, String),
    start: impl FnOnce(&str) -> Result<B, Failure>,
) -> Result<Ending, Failure> {
    let label = display::escape(text);
    // First of all, while lockrun is still one thread (the clients start
    // theirs when they connect) and its signal dispositions are the
    // caller's: the process that stops the command if lockrun dies
    // (platform::watchdog). A fork, not paid by lock files.
    let grace = opts.settings.kill_grace;
    let watchdog = crate::platform::Watchdog::start(&label, grace, &display::span(grace));
    // Before the lease or session exists: a signal meanwhile must not
    // leave it behind.
    super::signals::install_for_command()?;
    let backend = match start(&label) {
        Ok(backend) => backend,
        // Its service could not be reached, or refused us: the monitoring
        // hears of it as an `error` (the run flow reports every later end).
        Err(failure) => {
            if let Some(observers) = &opts.settings.observe {
                crate::observe::Watch::begin(observers, public.clone()).ended(
                    crate::observe::Event::Error,
                    failure.status,
                    std::time::Duration::ZERO,
                );
            }
            return Err(failure);
        }
    };
    super::run_with(
        backend,
        &Flow {
            label,
            lockfile: OsString::from(text),
            lock_url: Some(OsString::from(public)),
            mode: crate::mode::LockMode::Exclusive,
            wait: super::wait::WaitPolicy {
                nonblocking: opts.nonblocking,
                timeout: opts.timeout,
                poll: None,
            },
            exec_in_place: false,
            settings: &opts.settings,
            also: Vec::new(),
            watchdog: watchdog.as_ref(),
        },
    )
}

/// A build without lock URLs (no `lock-urls` feature: no lock URL backend
/// built) has no watchdog and runs none; the registry refuses a lock URL
/// before it gets here, so this only keeps its one code path compiling.
#[cfg(not(feature = "lock-urls"))]
pub fn run_url<B: crate::backend::Backend, U>(
    _opts: &crate::backend::UrlRunOptions<U>,
    _text: (&str, String),
    _start: impl FnOnce(&str) -> Result<B, Failure>,
) -> Result<Ending, Failure> {
    Err(Failure::new(
        crate::exit_codes::USAGE,
        "this lockrun was built without lock URLs",
    ))
}
