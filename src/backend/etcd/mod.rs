//! Locks in etcd v3 instead of the file system: `etcd://HOST:PORT[,...]/NAME`
//! in place of LOCKFILE.
//!
//! Reached only through [`crate::registry::LockTarget::Etcd`]: the file path
//! never runs a line of this module. It talks gRPC to etcd ([`client`],
//! on the etcd-client crate), with TLS and authentication as etcdctl has
//! them ([`Access`]).
//!
//! A file lock is held by a descriptor and released by the kernel when the
//! last holder dies; an etcd lock is held by a lease that lockrun must keep
//! renewing. So this path has what the file path does not need: a renewal
//! thread ([`session`]), a fencing token for the command, and the duty to
//! stop the command when the lock is lost (exit 76).

#[cfg(feature = "etcd")]
pub mod client;
/// What the registry asks of this backend: options, words, entry points.
pub mod entry;
/// `holder`/`check` on an etcd lock URL; never reached from the run path.
pub mod inspect;
#[cfg(feature = "etcd")]
pub mod keeper;
#[cfg(feature = "etcd")]
pub mod lock;
#[cfg(feature = "etcd")]
pub mod session;
#[cfg(feature = "etcd")]
pub mod slots;

use crate::exit_codes::Failure;
use std::fmt;
use std::path::PathBuf;

/// What an etcd lock can do, for every build: the CLI refuses the rest.
pub const CAPS: crate::backend::Capabilities = crate::backend::Capabilities {
    kind: "etcd:// locks",
    shared: false,
    exec_in_place: false,
    poll: false,
    lease: true,
    byte_ranges: false,
    slots: true,
    stays_to: "keep the lease alive",
    woken_by: "etcd itself",
    last_record: Ok(()),
};

/// Whether this build has lock URLs (the `etcd` cargo feature).
pub const ENABLED: bool = cfg!(feature = "etcd");

/// The run form on this kind of lock URL, as the command line gives it.
pub type RunOptions = crate::backend::UrlRunOptions<EtcdUrl>;

/// What a build without the `etcd` feature says to a lock URL.
pub fn not_built() -> Failure {
    Failure::new(
        crate::exit_codes::USAGE,
        "this lockrun was built without lock URL (etcd://) support; \
         reinstall it with `cargo install --locked --path . --features etcd`",
    )
}

pub const SCHEME: &str = "etcd://";
/// The same lock URL over TLS (with the system's roots unless a CA file is
/// given): for a cluster whose CA is a public or system-installed one.
pub const TLS_SCHEME: &str = "etcd+https://";

/// Where endpoints come from when the URL names none (`etcd:///NAME`).
pub const ENDPOINTS_ENV: &str = "LOCKRUN_ETCD_ENDPOINTS";

/// A parsed lock URL, with how to reach and authenticate to its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `host:port`, in the order given.
    pub endpoints: Vec<String>,
    /// The lock's name; contenders' keys live under `NAME/`.
    pub name: String,
    /// The URL as the user wrote it, for messages and `LOCKRUN_LOCKFILE`.
    pub text: String,
    /// TLS and credentials, from the environment and then the options.
    pub access: Access,
}

impl fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// TLS and authentication for a lock URL, with etcdctl's names.
///
/// TLS is on when the URL is `etcd+https://`, when an endpoint is written
/// `https://HOST:PORT`, or when a CA, client certificate or key is given
/// (as etcdctl does); the server's certificate is then always verified,
/// against `cacert` or else the system's roots. A password is never sent
/// in clear to a host that is not loopback.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub tls: bool,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<Password>,
}

/// Where the password comes from; read only when connecting, so a file
/// that cannot be read is reported as such (exit 69, naming the file).
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// The value of an environment variable (named for messages).
    Env {
        var: &'static str,
        value: String,
    },
    File(PathBuf),
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the value: options structs are printed in debug output.
        match self {
            Password::Env { var, .. } => write!(f, "Password::Env({var})"),
            Password::File(path) => write!(f, "Password::File({})", path.display()),
        }
    }
}

impl Password {
    /// Where it comes from, for messages.
    pub fn source(&self) -> String {
        match self {
            Password::Env { var, .. } => format!("${var}"),
            Password::File(path) => format!("--password-file {}", path.display()),
        }
    }
}

/// The command-line side of [`Access`]: these win over the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessFlags {
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// Whether a LOCKFILE argument is a lock URL rather than a path.
pub fn is_url(arg: &std::ffi::OsStr) -> bool {
    let bytes = arg.as_encoded_bytes();
    bytes.starts_with(SCHEME.as_bytes()) || bytes.starts_with(TLS_SCHEME.as_bytes())
}

/// `LOCKRUN_ETCD_<NAME>`, else etcdctl's `ETCDCTL_<NAME>`, non-empty.
fn env_var(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<(&'static str, String)> {
    // Leaked once per name and process: a handful of short strings, so that
    // messages can name the variable a value came from.
    ["LOCKRUN_ETCD_", "ETCDCTL_"]
        .into_iter()
        .find_map(|prefix| {
            let var = format!("{prefix}{name}");
            let value = lookup(&var).filter(|v| !v.is_empty())?;
            Some((&*Box::leak(var.into_boxed_str()), value))
        })
}

impl EtcdUrl {
    /// Parses a lock URL with the process environment.
    pub fn from_arg(text: &str) -> Result<EtcdUrl, String> {
        EtcdUrl::parse(text, &|var| std::env::var(var).ok())
    }

    /// Parses `etcd://HOST:PORT[,HOST:PORT...]/NAME` (or `etcd+https://`).
    /// Endpoints in the URL win; `LOCKRUN_ETCD_ENDPOINTS`, else
    /// `ETCDCTL_ENDPOINTS`, is used only when the URL names none, as in
    /// `etcd:///NAME`. TLS and credentials come from `LOCKRUN_ETCD_*`, else
    /// `ETCDCTL_*`; see [`EtcdUrl::with_flags`] for the options.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<EtcdUrl, String> {
        let (rest, tls_scheme) = match text.strip_prefix(TLS_SCHEME) {
            Some(rest) => (rest, true),
            None => (
                text.strip_prefix(SCHEME)
                    .ok_or_else(|| format!("'{text}' is not an etcd:// URL"))?,
                false,
            ),
        };
        let (authority, name) = rest.split_once('/').unwrap_or((rest, ""));
        crate::backend::check_lock_name(name, text, "write etcd://HOST:PORT/NAME")?;
        let from_env = env_var(env, "ENDPOINTS").map(|(_, v)| v);
        let list = if authority.is_empty() {
            from_env.as_deref().unwrap_or("").trim()
        } else {
            authority
        };
        if list.is_empty() {
            return Err(format!(
                "'{text}' names no etcd endpoint and neither {ENDPOINTS_ENV} nor ETCDCTL_ENDPOINTS is set: write etcd://HOST:PORT/{name}"
            ));
        }
        let mut schemes = Vec::new();
        let endpoints = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (endpoint, scheme) = endpoint(e)?;
                schemes.push(scheme);
                Ok(endpoint)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let path = |name| env_var(env, name).map(|(_, v)| PathBuf::from(v));
        let mut access = Access {
            tls: tls_scheme || schemes.contains(&Some(true)),
            cacert: path("CACERT"),
            cert: path("CERT"),
            key: path("KEY"),
            user: None,
            password: env_var(env, "PASSWORD").map(|(var, value)| Password::Env { var, value }),
        };
        if let Some((var, user)) = env_var(env, "USER") {
            // etcdctl takes `--user NAME:PASSWORD`; in the environment that
            // is not on a command line, so it is honoured as etcdctl does.
            match user.split_once(':') {
                Some((name, password)) => {
                    access.user = Some(name.to_owned());
                    access.password = Some(Password::Env {
                        var,
                        value: password.to_owned(),
                    });
                }
                None => access.user = Some(user),
            }
        }
        let mut url = EtcdUrl {
            endpoints,
            name: name.to_owned(),
            text: text.to_owned(),
            access,
        };
        if schemes.contains(&Some(false)) && url.wants_tls() {
            return Err(format!(
                "'{text}': an endpoint is written http:// but TLS is asked for (https, --cacert, --cert or --key); write the endpoints as HOST:PORT or https://HOST:PORT"
            ));
        }
        url.check()?;
        Ok(url)
    }

    /// The options win over the environment; checked again as a whole.
    pub fn with_flags(mut self, flags: &AccessFlags) -> Result<EtcdUrl, String> {
        let a = &mut self.access;
        for (slot, flag) in [
            (&mut a.cacert, &flags.cacert),
            (&mut a.cert, &flags.cert),
            (&mut a.key, &flags.key),
        ] {
            if flag.is_some() {
                slot.clone_from(flag);
            }
        }
        if let Some(user) = &flags.user {
            if user.contains(':') {
                return Err(format!(
                    "--user takes a name only ('{}:...'): a password on the command line is visible to every user of this machine; use LOCKRUN_ETCD_PASSWORD or --password-file",
                    user.split(':').next().unwrap_or("")
                ));
            }
            a.user = Some(user.clone());
        }
        if let Some(file) = &flags.password_file {
            a.password = Some(Password::File(file.clone()));
        }
        self.check()?;
        Ok(self)
    }

    fn wants_tls(&self) -> bool {
        let a = &self.access;
        a.tls || a.cacert.is_some() || a.cert.is_some() || a.key.is_some()
    }

    /// What can be refused before any connection.
    fn check(&mut self) -> Result<(), String> {
        self.access.tls = self.wants_tls();
        let a = &self.access;
        match (&a.cert, &a.key) {
            (Some(_), None) => {
                return Err("--cert needs --key (the client certificate's private key)".into());
            }
            (None, Some(_)) => return Err("--key needs --cert (the client certificate)".into()),
            _ => {}
        }
        if a.user.is_some() && a.password.is_none() {
            return Err("--user needs a password: set LOCKRUN_ETCD_PASSWORD (or ETCDCTL_PASSWORD) or give --password-file FILE".into());
        }
        if a.user.is_some()
            && !a.tls
            && let Some(host) = self.endpoints.iter().find(|e| !is_loopback(e))
        {
            return Err(format!(
                "refusing to send the etcd password in clear to {host}: use TLS (etcd+https://, https:// endpoints or --cacert FILE)"
            ));
        }
        Ok(())
    }
}

/// Whether `host:port` names this machine without a network in between:
/// by address, or as `localhost` (which resolves to loopback only).
pub fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `host:port`, also accepted as `http://host:port` or `https://host:port`
/// (as etcdctl writes endpoints); the scheme, if one was written, is
/// returned as `Some(is_https)`.
fn endpoint(text: &str) -> Result<(String, Option<bool>), String> {
    let (bare, scheme) = if let Some(rest) = text.strip_prefix("https://") {
        (rest, Some(true))
    } else if let Some(rest) = text.strip_prefix("http://") {
        (rest, Some(false))
    } else {
        (text, None)
    };
    let bare = bare.trim_end_matches('/');
    let port_ok = bare
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok || bare.contains('/') {
        return Err(format!(
            "etcd endpoint '{text}' is not HOST:PORT (e.g. 127.0.0.1:2379)"
        ));
    }
    Ok((bare.to_owned(), scheme))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |var| {
            pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn parses_endpoints_and_name() {
        let url = EtcdUrl::parse("etcd://a:1,b:2/jobs/backup", &no_env).unwrap();
        assert_eq!(url.endpoints, ["a:1", "b:2"]);
        assert_eq!(url.name, "jobs/backup");
        assert!(!url.access.tls);
    }

    #[test]
    fn url_endpoints_win_over_the_environment() {
        let e = env(&[
            ("LOCKRUN_ETCD_ENDPOINTS", "c:3, http://d:4"),
            ("ETCDCTL_ENDPOINTS", "e:5"),
        ]);
        let url = EtcdUrl::parse("etcd://a:1/x", &e).unwrap();
        assert_eq!(url.endpoints, ["a:1"]);
        let url = EtcdUrl::parse("etcd:///x", &e).unwrap();
        assert_eq!(url.endpoints, ["c:3", "d:4"]);
        let url = EtcdUrl::parse("etcd:///x", &env(&[("ETCDCTL_ENDPOINTS", "e:5")])).unwrap();
        assert_eq!(url.endpoints, ["e:5"]);
    }

    #[test]
    fn tls_from_the_scheme_an_https_endpoint_or_a_ca() {
        assert!(
            EtcdUrl::parse("etcd+https://a:1/x", &no_env)
                .unwrap()
                .access
                .tls
        );
        let https = env(&[("ETCDCTL_ENDPOINTS", "https://a:1,b:2")]);
        assert!(EtcdUrl::parse("etcd:///x", &https).unwrap().access.tls);
        let url = EtcdUrl::parse("etcd://a:1/x", &env(&[("ETCDCTL_CACERT", "/ca.pem")])).unwrap();
        assert!(url.access.tls);
        assert_eq!(url.access.cacert.as_deref(), Some(Path::new("/ca.pem")));
        let url = EtcdUrl::parse("etcd://a:1/x", &no_env)
            .unwrap()
            .with_flags(&AccessFlags {
                cert: Some("c.pem".into()),
                key: Some("k.pem".into()),
                ..AccessFlags::default()
            })
            .unwrap();
        assert!(url.access.tls);
        let http = env(&[("ETCDCTL_ENDPOINTS", "http://a:1")]);
        assert!(EtcdUrl::parse("etcd+https:///x", &http).is_err());
    }

    #[test]
    fn lockrun_variables_override_etcdctl_ones_and_flags_override_both() {
        let e = env(&[
            ("ETCDCTL_USER", "ops:secret"),
            ("LOCKRUN_ETCD_CACERT", "/mine.pem"),
            ("ETCDCTL_CACERT", "/theirs.pem"),
        ]);
        let url = EtcdUrl::parse("etcd://a:1/x", &e).unwrap();
        assert_eq!(url.access.user.as_deref(), Some("ops"));
        assert_eq!(url.access.cacert.as_deref(), Some(Path::new("/mine.pem")));
        match &url.access.password {
            Some(Password::Env { var, value }) => {
                assert_eq!((*var, value.as_str()), ("ETCDCTL_USER", "secret"));
            }
            other => panic!("{other:?}"),
        }
        let url = url
            .with_flags(&AccessFlags {
                cacert: Some("/flag.pem".into()),
                user: Some("app".into()),
                password_file: Some("/pw".into()),
                ..AccessFlags::default()
            })
            .unwrap();
        assert_eq!(url.access.cacert.as_deref(), Some(Path::new("/flag.pem")));
        assert_eq!(url.access.user.as_deref(), Some("app"));
        assert_eq!(url.access.password, Some(Password::File("/pw".into())));
        assert!(!format!("{url:?}").contains("secret"));
    }

    #[test]
    fn a_password_never_goes_in_clear_beyond_loopback() {
        let pw = env(&[("LOCKRUN_ETCD_PASSWORD", "pw"), ("LOCKRUN_ETCD_USER", "u")]);
        assert!(EtcdUrl::parse("etcd://127.0.0.1:1,localhost:2,[::1]:3/x", &pw).is_ok());
        let err = EtcdUrl::parse("etcd://127.0.0.1:1,db1:2/x", &pw).unwrap_err();
        assert!(err.contains("in clear to db1:2"), "{err}");
        assert!(EtcdUrl::parse("etcd+https://db1:2/x", &pw).is_ok());
        // --user with a password, or without any.
        let url = EtcdUrl::parse("etcd://127.0.0.1:1/x", &no_env).unwrap();
        let flags = |user: &str| AccessFlags {
            user: Some(user.into()),
            ..AccessFlags::default()
        };
        assert!(url.clone().with_flags(&flags("u:pw")).is_err());
        assert!(url.with_flags(&flags("u")).is_err());
    }

    #[test]
    fn refuses_what_cannot_work() {
        for bad in [
            "etcd://a:1",
            "etcd://a:1/",
            "etcd:///x",
            "etcd://a/x",
            "etcd://a:notaport/x",
            "etcd://ftp://a:1/x",
        ] {
            assert!(EtcdUrl::parse(bad, &no_env).is_err(), "{bad}");
        }
        let e = env(&[("LOCKRUN_ETCD_CERT", "c.pem")]);
        assert!(
            EtcdUrl::parse("etcd://a:1/x", &e).is_err(),
            "a cert without its key"
        );
    }
}
