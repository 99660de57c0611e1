//! The run form on a lock URL: the backend's lock, the one run flow.

use super::Ending;
#[cfg(any(feature = "etcd", feature = "postgres"))]
use super::Flow;
#[cfg(any(feature = "etcd", feature = "postgres"))]
use crate::display;
use crate::exit_codes::Failure;
#[cfg(any(feature = "etcd", feature = "postgres"))]
use std::ffi::OsString;

#[cfg(feature = "etcd")]
use crate::backend::etcd;
#[cfg(feature = "postgres")]
use crate::backend::postgres;

/// The run form on a lock URL named `text`, with the backend `start`
/// makes (it grants a lease or opens a session, given the label).
#[cfg(any(feature = "etcd", feature = "postgres"))]
fn run_url<B: crate::backend::Backend, U>(
    opts: &crate::backend::UrlRunOptions<U>,
    text: &str,
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
    let backend = start(&label)?;
    super::run_with(
        backend,
        &Flow {
            label,
            lockfile: OsString::from(text),
            mode: crate::mode::LockMode::Exclusive,
            wait: super::wait::WaitPolicy {
                nonblocking: opts.nonblocking,
                timeout: opts.timeout,
                poll: None,
            },
            exec_in_place: false,
            settings: &opts.settings,
            watchdog: watchdog.as_ref(),
        },
    )
}

/// The run form on an etcd lock URL.
#[cfg(feature = "etcd")]
pub fn etcd(opts: &etcd::RunOptions) -> Result<Ending, Failure> {
    run_url(opts, &opts.url.text, |label| {
        etcd::lock::EtcdBackend::start(opts, label)
    })
}

#[cfg(not(feature = "etcd"))]
pub fn etcd(_opts: &crate::backend::etcd::RunOptions) -> Result<Ending, Failure> {
    Err(crate::backend::etcd::not_built())
}

/// The run form on a PostgreSQL lock URL.
#[cfg(feature = "postgres")]
pub fn postgres(opts: &postgres::RunOptions) -> Result<Ending, Failure> {
    run_url(opts, &opts.url.text, |label| {
        postgres::lock::PgBackend::start(opts, label)
    })
}

#[cfg(not(feature = "postgres"))]
pub fn postgres(_opts: &crate::backend::postgres::RunOptions) -> Result<Ending, Failure> {
    Err(crate::backend::postgres::not_built())
}
