//! Which backend a lock goes to, decided once from the LOCKFILE argument:
//! the run form, `holder` and `check` all start from a [`LockTarget`].

use super::etcd::{self, EtcdUrl};
use super::postgres::{self, PgUrl};
use crate::exit_codes::{self, Failure};
use std::ffi::OsString;
use std::path::PathBuf;

/// What a LOCKFILE argument names: the one place that decides which
/// backend a lock goes to. Nothing but a lock URL's scheme (`etcd://`,
/// `postgres://`) makes a URL, so every path a user could mean as a file
/// stays a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockTarget {
    File(PathBuf),
    Etcd(EtcdUrl),
    Postgres(PgUrl),
}

impl LockTarget {
    /// A lock URL: its service, not this machine's kernel, holds the lock,
    /// so a look-up that cannot tell means the service could not be asked.
    pub fn is_url(&self) -> bool {
        !matches!(self, LockTarget::File(_))
    }

    pub fn parse(arg: OsString) -> Result<LockTarget, Failure> {
        if postgres::is_url(&arg) {
            return parse_postgres(&arg);
        }
        if !etcd::is_url(&arg) {
            return Ok(LockTarget::File(PathBuf::from(arg)));
        }
        if !etcd::ENABLED {
            return Err(etcd::not_built());
        }
        let text = arg.to_str().ok_or_else(|| {
            Failure::new(
                exit_codes::USAGE,
                format!("the lock URL {} is not valid UTF-8", arg.to_string_lossy()),
            )
        })?;
        EtcdUrl::from_arg(text)
            .map(LockTarget::Etcd)
            .map_err(|e| Failure::new(exit_codes::USAGE, e))
    }
}

/// `postgres://…#NAME` or `postgresql://…#NAME` (CONTRACT §12).
fn parse_postgres(arg: &std::ffi::OsStr) -> Result<LockTarget, Failure> {
    if !postgres::ENABLED {
        return Err(postgres::not_built());
    }
    let text = arg.to_str().ok_or_else(|| {
        Failure::new(
            exit_codes::USAGE,
            "the postgres:// lock URL is not valid UTF-8",
        )
    })?;
    PgUrl::parse(text)
        .map(LockTarget::Postgres)
        .map_err(|e| Failure::new(exit_codes::USAGE, e))
}
