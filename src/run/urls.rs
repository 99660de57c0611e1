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

#[cfg(feature = "etcd")]
/// The run form on a lock URL.
pub fn etcd(opts: &etcd::RunOptions) -> Result<Ending, Failure> {
    let label = display::escape(&opts.url.text);
    super::signals::install_for_command()?;
    let backend = etcd::lock::EtcdBackend::start(opts, &label)?;
    super::run_with(
        backend,
        &Flow {
            label,
            lockfile: OsString::from(&opts.url.text),
            mode: crate::mode::LockMode::Exclusive,
            wait: super::wait::WaitPolicy {
                nonblocking: opts.nonblocking,
                timeout: opts.timeout,
                poll: None,
            },
            conflict_status: opts.conflict_status,
            exec_in_place: false,
            command: &opts.command,
            quiet: opts.quiet,
            verbose: opts.verbose,
            write_record: opts.write_record,
            max_time: opts.max_time,
            kill_grace: opts.kill_grace,
        },
    )
}

#[cfg(not(feature = "etcd"))]
pub fn etcd(_opts: &crate::backend::etcd::RunOptions) -> Result<Ending, Failure> {
    Err(crate::backend::etcd::not_built())
}

#[cfg(feature = "postgres")]
/// The run form on a PostgreSQL lock URL.
pub fn postgres(opts: &postgres::RunOptions) -> Result<Ending, Failure> {
    let label = display::escape(&opts.url.text);
    super::signals::install_for_command()?;
    let backend = postgres::lock::PgBackend::start(opts, &label)?;
    super::run_with(
        backend,
        &Flow {
            label,
            lockfile: OsString::from(&opts.url.text),
            mode: crate::lock::LockMode::Exclusive,
            wait: super::wait::WaitPolicy {
                nonblocking: opts.nonblocking,
                timeout: opts.timeout,
                poll: None,
            },
            conflict_status: opts.conflict_status,
            exec_in_place: false,
            command: &opts.command,
            quiet: opts.quiet,
            verbose: opts.verbose,
            write_record: opts.write_record,
            max_time: opts.max_time,
            kill_grace: opts.kill_grace,
        },
    )
}

#[cfg(not(feature = "postgres"))]
pub fn postgres(_opts: &crate::backend::postgres::RunOptions) -> Result<Ending, Failure> {
    Err(crate::backend::postgres::not_built())
}
