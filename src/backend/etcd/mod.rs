//! Locks in etcd v3 instead of the file system: `etcd://HOST:PORT[,...]/NAME`
//! in place of LOCKFILE.
//!
//! Reached only through [`crate::cli::LockTarget::Etcd`]: the file path
//! never runs a line of this module. It talks to etcd's JSON gateway with a
//! small blocking HTTP client ([`http`]), so lockrun keeps building with
//! cargo alone (no protoc, no async runtime).
//!
//! A file lock is held by a descriptor and released by the kernel when the
//! last holder dies; an etcd lock is held by a lease that lockrun must keep
//! renewing. So this path has what the file path does not need: a renewal
//! thread ([`session`]), a fencing token for the command, and the duty to
//! stop the command when the lock is lost (exit 76).

#[cfg(feature = "etcd")]
pub mod base64;
#[cfg(feature = "etcd")]
pub mod client;
#[cfg(feature = "etcd")]
pub mod http;
#[cfg(feature = "etcd")]
pub mod inspect;
#[cfg(feature = "etcd")]
pub mod lock;
#[cfg(feature = "etcd")]
pub mod session;

use crate::exit_codes::Failure;
use crate::inspect::Report;
use crate::run::Ending;
use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

/// Whether this build has lock URLs (the `etcd` cargo feature).
pub const ENABLED: bool = cfg!(feature = "etcd");

pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub url: EtcdUrl,
    pub nonblocking: bool,
    pub timeout: Option<Duration>,
    pub conflict_status: u8,
    pub command: Vec<OsString>,
    pub quiet: bool,
    pub verbose: bool,
    pub write_record: bool,
    pub ttl: Duration,
    pub kill_grace: Duration,
    pub max_time: Option<Duration>,
}

/// The run form on a lock URL.
pub fn take_and_run(opts: &RunOptions) -> Result<Ending, Failure> {
    #[cfg(feature = "etcd")]
    return lock::run(opts);
    #[cfg(not(feature = "etcd"))]
    {
        let _ = opts;
        Err(not_built())
    }
}

/// `holder`/`check` on a lock URL.
pub fn look_up(url: &EtcdUrl) -> Result<Report, Failure> {
    #[cfg(feature = "etcd")]
    return Ok(inspect::inspect(url));
    #[cfg(not(feature = "etcd"))]
    {
        let _ = url;
        Err(not_built())
    }
}

/// What a build without the `etcd` feature says to a lock URL.
pub fn not_built() -> Failure {
    Failure::new(
        crate::exit_codes::USAGE,
        "this lockrun was built without lock URL (etcd://) support; \
         reinstall it with `cargo install --locked --path . --features etcd`",
    )
}

pub const SCHEME: &str = "etcd://";

/// Where endpoints come from when the URL names none (`etcd:///NAME`).
pub const ENDPOINTS_ENV: &str = "LOCKRUN_ETCD_ENDPOINTS";

/// A parsed lock URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `host:port`, in the order given.
    pub endpoints: Vec<String>,
    /// The lock's name; contenders' keys live under `NAME/`.
    pub name: String,
    /// The URL as the user wrote it, for messages and `LOCKRUN_LOCKFILE`.
    pub text: String,
}

impl fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether a LOCKFILE argument is a lock URL rather than a path.
pub fn is_url(arg: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    arg.as_bytes().starts_with(SCHEME.as_bytes())
}

impl EtcdUrl {
    /// Parses `etcd://HOST:PORT[,HOST:PORT...]/NAME`. Endpoints in the URL
    /// win; `env_endpoints` (the value of `LOCKRUN_ETCD_ENDPOINTS`) is used
    /// only when the URL names none, as in `etcd:///NAME`.
    pub fn parse(text: &str, env_endpoints: Option<&str>) -> Result<EtcdUrl, String> {
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("'{text}' is not an etcd:// URL"))?;
        let (authority, name) = rest.split_once('/').unwrap_or((rest, ""));
        if name.is_empty() {
            return Err(format!(
                "'{text}' names no lock: write etcd://HOST:PORT/NAME"
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(format!(
                "the lock name in '{}' contains control characters",
                text.escape_debug()
            ));
        }
        let list = if authority.is_empty() {
            env_endpoints.unwrap_or("").trim()
        } else {
            authority
        };
        if list.is_empty() {
            return Err(format!(
                "'{text}' names no etcd endpoint and {ENDPOINTS_ENV} is not set: write etcd://HOST:PORT/{name}"
            ));
        }
        let endpoints = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(endpoint)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EtcdUrl {
            endpoints,
            name: name.to_owned(),
            text: text.to_owned(),
        })
    }
}

/// `host:port`, also accepted as `http://host:port` in
/// LOCKRUN_ETCD_ENDPOINTS (as etcdctl writes endpoints). TLS is not supported: refused rather than sent in clear.
fn endpoint(text: &str) -> Result<String, String> {
    if text.starts_with("https://") {
        return Err(format!(
            "etcd endpoint '{text}': TLS is not supported; use a plain-HTTP client URL (or a local TLS proxy)"
        ));
    }
    let bare = text.strip_prefix("http://").unwrap_or(text);
    let bare = bare.trim_end_matches('/');
    let port_ok = bare
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok || bare.contains('/') {
        return Err(format!(
            "etcd endpoint '{text}' is not HOST:PORT (e.g. 127.0.0.1:2379)"
        ));
    }
    Ok(bare.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_and_name() {
        let url = EtcdUrl::parse("etcd://a:1,b:2/jobs/backup", None).unwrap();
        assert_eq!(url.endpoints, ["a:1", "b:2"]);
        assert_eq!(url.name, "jobs/backup");
    }

    #[test]
    fn url_endpoints_win_over_the_environment() {
        let url = EtcdUrl::parse("etcd://a:1/x", Some("c:3")).unwrap();
        assert_eq!(url.endpoints, ["a:1"]);
        let url = EtcdUrl::parse("etcd:///x", Some("c:3, http://d:4")).unwrap();
        assert_eq!(url.endpoints, ["c:3", "d:4"]);
    }

    #[test]
    fn refuses_what_cannot_work() {
        for bad in [
            "etcd://a:1",
            "etcd://a:1/",
            "etcd:///x",
            "etcd://a/x",
            "etcd://a:notaport/x",
            "etcd://https://a:1/x",
        ] {
            assert!(EtcdUrl::parse(bad, None).is_err(), "{bad}");
        }
    }
}
