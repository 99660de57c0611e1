//! Locks in Redis: `redis://[USER@]HOST[:PORT][/DB]#NAME` (or `rediss://`
//! over TLS) in place of LOCKFILE (CONTRACT §19).
//!
//! The lock is one key, `NAME`, set only if absent with a lease of
//! `--ttl` (`SET ... PX`), by a Lua script that in the same atomic step
//! increments the counter `NAME:fencing`: that number is the fencing
//! token, and the key's value is the holder's record with it as its first
//! field (`{"fencing_token":17,"lockrun":1,...}`). A thread renews the
//! lease every TTL/4 with a script that compares the token first
//! ([`session`]); when the key is gone or holds another token, or no
//! renewal has been confirmed for a whole TTL, the command is stopped and
//! lockrun exits 76. The release deletes the key only if its token is
//! ours, keeps the record under `NAME:last` (what `holder` shows of a free
//! lock) and publishes on `NAME:released`, where waiters sleep.
//!
//! Reached only through [`crate::registry::LockTarget::Redis`]: the file
//! path never runs a line of this module.

#[cfg(feature = "redis")]
pub mod client;
/// What the registry asks of this backend: options, words, entry points.
pub mod entry;
/// `holder`/`check` on a Redis lock URL; never reached from the run path.
pub mod inspect;
#[cfg(feature = "redis")]
pub mod lock;
#[cfg(feature = "redis")]
pub mod session;

use crate::exit_codes::Failure;
use std::fmt;
use std::ops::Range;

/// What a Redis lock can do, for every build: the CLI refuses the rest.
pub const CAPS: crate::backend::Capabilities = crate::backend::Capabilities {
    kind: "redis:// locks",
    shared: false,
    exec_in_place: false,
    poll: false,
    lease: true,
    byte_ranges: false,
    slots: true,
    stays_to: "renew the lease",
    woken_by: "the holder's release message",
    // The release keeps the last record under `NAME:last`.
    last_record: Ok(()),
};

/// Whether this build has Redis lock URLs (the `redis` cargo feature).
pub const ENABLED: bool = cfg!(feature = "redis");

/// The run form on this kind of lock URL, as the command line gives it.
pub type RunOptions = crate::backend::UrlRunOptions<RedisUrl>;

pub fn not_built() -> Failure {
    Failure::new(
        crate::exit_codes::USAGE,
        "this lockrun was built without Redis lock URL (redis://) support; \
         reinstall it with `cargo install --locked --path . --features redis`",
    )
}

const SCHEME: &str = "redis://";
const TLS_SCHEME: &str = "rediss://";
const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// Sentinel over TLS: the Sentinels and the primary they name, both with
/// the same `--cacert`/`--cert`/`--key` (as redis-cli's one `--tls` serves
/// whichever it connects to).
const SENTINEL_TLS_SCHEME: &str = "rediss+sentinel://";
const SCHEMES: [&str; 4] = [SCHEME, TLS_SCHEME, SENTINEL_SCHEME, SENTINEL_TLS_SCHEME];
const DEFAULT_PORT: u16 = 6379;
const DEFAULT_SENTINEL_PORT: u16 = 26379;
const NAME_AFTER_HASH: &str = "write the lock name after '#', as in redis://HOST:6379#NAME";

/// Where the password comes from: redis-cli's variable, or lockrun's own,
/// which wins.
pub const PASSWORD_VARS: [&str; 2] = ["LOCKRUN_REDIS_PASSWORD", "REDISCLI_AUTH"];

/// The Sentinels' own password (their `requirepass`), which is not the
/// data nodes': Sentinel is configured apart (`sentinel auth-pass` is what
/// it sends the primary), so the data password is never sent to it
/// unasked.
pub const SENTINEL_PASSWORD_VAR: &str = "LOCKRUN_REDIS_SENTINEL_PASSWORD";

/// `0` (or `off`): no `WAIT` for a replica after the acquire.
pub const WAIT_VAR: &str = "LOCKRUN_REDIS_WAIT";

/// Whether a LOCKFILE argument is a Redis lock URL.
pub fn is_url(arg: &std::ffi::OsStr) -> bool {
    SCHEMES
        .iter()
        .any(|s| arg.as_encoded_bytes().starts_with(s.as_bytes()))
}

/// A password, from the environment; never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Password {
    pub var: &'static str,
    pub value: String,
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Password(${})", self.var)
    }
}

/// `--cacert`, `--cert`, `--key`: the server's CA (instead of the
/// system's roots) and a client certificate, for rediss://.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub cacert: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

/// Where `redis+sentinel://` finds the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentinel {
    pub addrs: Vec<(String, u16)>,
    /// The primary's name as the Sentinels monitor it.
    pub master: String,
    /// `$LOCKRUN_REDIS_SENTINEL_PASSWORD`, for the Sentinels only.
    pub password: Option<Password>,
}

/// A parsed lock URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisUrl {
    pub host: String,
    pub port: u16,
    /// `SELECT`ed database (the URL's path), 0 by default.
    pub db: i64,
    /// An ACL user (`USER@`); the default user without one.
    pub user: Option<String>,
    pub password: Option<Password>,
    /// `rediss://` (and `rediss+sentinel://`, to the Sentinels too): TLS,
    /// the server's certificate verified.
    pub tls: bool,
    /// `WAIT 1` after the acquire when the primary has replicas (unless
    /// `LOCKRUN_REDIS_WAIT=0`): the token is on a replica before the
    /// command starts, so a failover right after cannot hand it out again.
    pub wait_replica: bool,
    pub files: TlsFiles,
    /// `redis+sentinel://`: the primary is asked of these Sentinels (then
    /// `host` and `port` are the first Sentinel's, for messages).
    pub sentinel: Option<Sentinel>,
    /// The lock's name (the fragment, percent-decoded): the key.
    pub name: String,
    /// The URL as written, for messages, records and `LOCKRUN_LOCKFILE`.
    pub text: String,
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl RedisUrl {
    /// Parses a lock URL with the process environment.
    pub fn from_arg(text: &str) -> Result<RedisUrl, String> {
        RedisUrl::parse(text, &|var| std::env::var(var).ok())
    }

    /// `redis://[USER@]HOST[:PORT][/DB]#NAME` or `rediss://...`. A
    /// password in the URL is refused: on a command line every user of
    /// the machine can read it (`ps`).
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<RedisUrl, String> {
        let shown = redact(text);
        let (rest, tls, through_sentinel) = if let Some(rest) = text.strip_prefix(TLS_SCHEME) {
            (rest, true, false)
        } else if let Some(rest) = text.strip_prefix(SENTINEL_SCHEME) {
            (rest, false, true)
        } else if let Some(rest) = text.strip_prefix(SENTINEL_TLS_SCHEME) {
            (rest, true, true)
        } else {
            let rest = text
                .strip_prefix(SCHEME)
                .ok_or_else(|| format!("'{shown}' is not a redis:// URL"))?;
            (rest, false, false)
        };
        let Some((location, fragment)) = rest.split_once('#') else {
            return Err(format!("'{shown}' names no lock: {NAME_AFTER_HASH}"));
        };
        let name = crate::backend::postgres::percent_decode(fragment)
            .ok_or_else(|| format!("the lock name in '{shown}' is not valid UTF-8 once decoded"))?;
        crate::backend::check_lock_name(&name, &shown, NAME_AFTER_HASH)?;
        if location.contains('?') {
            return Err(format!(
                "'{shown}': a redis:// lock URL takes no query parameters (the password goes in REDISCLI_AUTH or LOCKRUN_REDIS_PASSWORD)"
            ));
        }
        let (authority, path) = location.split_once('/').unwrap_or((location, ""));
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => {
                if userinfo.contains(':') {
                    return Err(format!(
                        "'{shown}' carries a password, which every user of this machine can read on the command line (ps): \
                         remove it from the URL and set REDISCLI_AUTH or LOCKRUN_REDIS_PASSWORD instead"
                    ));
                }
                let user = crate::backend::postgres::percent_decode(userinfo)
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| {
                        format!("'{shown}': the user name before '@' is empty or not UTF-8")
                    })?;
                (Some(user), hostport)
            }
            None => (None, authority),
        };
        let (mut path, mut sentinel) = (path.trim_end_matches('/'), None);
        let (host, port) = if through_sentinel {
            let addrs = hostport
                .split(',')
                .map(|one| host_port_or(one, DEFAULT_SENTINEL_PORT))
                .collect::<Option<Vec<_>>>()
                .filter(|addrs| !addrs.is_empty())
                .ok_or_else(|| {
                    format!("'{shown}' does not name the Sentinels as HOST:PORT[,HOST:PORT...] (e.g. redis+sentinel://127.0.0.1:26379/mymaster#{name})")
                })?;
            let (master, db) = path.split_once('/').unwrap_or((path, ""));
            if master.is_empty() {
                return Err(format!(
                    "'{shown}' names no primary: write redis+sentinel://HOST:PORT/MASTER#{name}, MASTER as the Sentinels know it"
                ));
            }
            sentinel = Some(Sentinel {
                addrs: addrs.clone(),
                master: master.to_owned(),
                password: env(SENTINEL_PASSWORD_VAR)
                    .filter(|v| !v.is_empty())
                    .map(|value| Password {
                        var: SENTINEL_PASSWORD_VAR,
                        value,
                    }),
            });
            path = db;
            addrs[0].clone()
        } else {
            host_port(hostport).ok_or_else(|| {
                format!("'{shown}' does not name HOST:PORT (e.g. redis://127.0.0.1:6379#{name})")
            })?
        };
        let db = if path.is_empty() {
            0
        } else {
            path.parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| {
                    format!("'{shown}': the database after '/' must be a number (redis://HOST:PORT/0#NAME), not '{path}'")
                })?
        };
        let password = PASSWORD_VARS.iter().find_map(|var| {
            let value = env(var).filter(|v| !v.is_empty())?;
            Some(Password { var, value })
        });
        Ok(RedisUrl {
            host,
            port,
            db,
            user,
            password,
            tls,
            wait_replica: !matches!(env(WAIT_VAR).as_deref(), Some("0" | "off" | "no")),
            files: TlsFiles::default(),
            sentinel,
            name,
            text: shown,
        })
    }

    /// The URL with the TLS files the command line gave.
    pub fn with_files(mut self, files: &TlsFiles) -> Result<RedisUrl, String> {
        if *files == TlsFiles::default() {
            return Ok(self);
        }
        if !self.tls {
            let (tls_scheme, rest) = match self.text.strip_prefix(SENTINEL_SCHEME) {
                Some(rest) => (SENTINEL_TLS_SCHEME, rest),
                None => (
                    TLS_SCHEME,
                    self.text.strip_prefix(SCHEME).unwrap_or(&self.text),
                ),
            };
            return Err(format!(
                "--cacert, --cert and --key need TLS: write the lock URL as {tls_scheme}{rest}"
            ));
        }
        match (&files.cert, &files.key) {
            (Some(_), None) => {
                return Err("--cert needs --key (the client certificate's private key)".into());
            }
            (None, Some(_)) => return Err("--key needs --cert (the client certificate)".into()),
            _ => {}
        }
        self.files = files.clone();
        Ok(self)
    }

    /// `HOST:PORT` (through Sentinel: the primary's name and the
    /// Sentinels), for messages.
    pub fn address(&self) -> String {
        if let Some(s) = &self.sentinel {
            let each: Vec<String> = s.addrs.iter().map(|(h, p)| join(h, *p)).collect();
            return format!("the primary {} of Sentinel {}", s.master, each.join(","));
        }
        join(&self.host, self.port)
    }
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl RedisUrl {
    /// The key whose `INCR` is the fencing token: never expires.
    pub fn fencing_key(&self) -> String {
        format!("{}:fencing", self.name)
    }

    /// Where the last holder's record stays after its release.
    pub fn last_key(&self) -> String {
        format!("{}:last", self.name)
    }

    /// `--slots N`: where N is stated while any slot is held.
    pub fn slots_key(&self) -> String {
        format!("{}:slots", self.name)
    }

    /// `--slots N`: slot K's key (1..=N).
    pub fn slot_key(&self, k: u16) -> String {
        format!("{}:slot:{k}", self.name)
    }

    /// `--slots N`: where slot K's last holder's record stays.
    pub fn slot_last_key(&self, k: u16) -> String {
        format!("{}:slot:{k}:last", self.name)
    }

    /// The waiters' queue: ids by ticket.
    pub fn queue_key(&self) -> String {
        format!("{}:queue", self.name)
    }

    /// The queue's ticket counter.
    pub fn tickets_key(&self) -> String {
        format!("{}:tickets", self.name)
    }

    /// A queued waiter's key (this and its id) lives while it waits.
    pub fn waiter_prefix(&self) -> String {
        format!("{}:waiter:", self.name)
    }

    /// Where a release is announced, to wake the waiters.
    pub fn channel(&self) -> String {
        format!("{}:released", self.name)
    }
}

/// `HOST[:PORT]` or `[V6][:PORT]`.
fn host_port(text: &str) -> Option<(String, u16)> {
    host_port_or(text, DEFAULT_PORT)
}

fn host_port_or(text: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() || host.contains('/') {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default_port,
    };
    Some((host.to_owned(), port))
}

/// Where a password sits in a redis:// URL (`redis://USER:PASSWORD@...`),
/// for main.rs to hide it from `ps` before the URL is refused.
pub fn password_spans(url: &[u8]) -> Vec<Range<usize>> {
    let Some(start) = SCHEMES
        .iter()
        .find(|s| url.starts_with(s.as_bytes()))
        .map(|s| s.len())
    else {
        return Vec::new();
    };
    let end = url.iter().position(|&b| b == b'#').unwrap_or(url.len());
    let Some(at) = url[start..end].iter().rposition(|&b| b == b'@') else {
        return Vec::new();
    };
    let userinfo = start..start + at;
    url[userinfo.clone()]
        .iter()
        .position(|&b| b == b':')
        .map(|colon| userinfo.start + colon + 1..userinfo.end)
        .into_iter()
        .collect()
}

/// The URL with a password replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut last = 0;
    for span in password_spans(url.as_bytes()) {
        out.push_str(&url[last..span.start]);
        out.push_str("***");
        last = span.end;
    }
    out.push_str(&url[last..]);
    out
}

/// The key's value: the record with the fencing token as its first field,
/// so that a script can tell the holder by the value's first bytes, and
/// the holder's id (`owner`, host:pid:start time) second: a token alone
/// does not tell two holders apart once a server restarted without its
/// counter (or failed over to a replica that missed it) hands the same
/// token out again, and a renewal that compared only the token would then
/// renew the new holder's key as its own, both running for ever.
pub fn value_with_token(token: i64, owner: &str, record_line: &[u8]) -> Vec<u8> {
    let body = record_line.trim_ascii();
    let mut out = format!("{{\"fencing_token\":{}", mark(token, owner)).into_bytes();
    match body.strip_prefix(b"{") {
        Some(rest) if rest.trim_ascii() != b"}" && !rest.is_empty() => {
            out.push(b',');
            out.extend_from_slice(rest);
        }
        _ => out.push(b'}'),
    }
    out
}

/// What follows `{"fencing_token":` in a holder's value: its token and
/// its id. The scripts that renew and release compare it.
pub fn mark(token: i64, owner: &str) -> String {
    format!("{token},\"owner\":\"{owner}\"")
}

/// A contender's id (host:pid:start time), with anything that would need
/// escaping in JSON or a Lua pattern replaced: the scripts compare it
/// byte for byte.
pub fn owner_id(host: &str, pid: u32, start: u64) -> String {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{host}:{pid}:{start}")
}

/// The fencing token a key's value starts with.
pub fn token_of(value: &[u8]) -> Option<i64> {
    let rest = value.strip_prefix(b"{\"fencing_token\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn parses_host_port_db_user_and_name() {
        let url = RedisUrl::parse("redis://ops@db1:6380/2#nightly%20backup", &no_env).unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.db, url.user.as_deref()),
            ("db1", 6380, 2, Some("ops"))
        );
        assert_eq!(url.name, "nightly backup");
        assert!(!url.tls);
        let url = RedisUrl::parse("rediss://[::1]#x", &no_env).unwrap();
        assert_eq!((url.host.as_str(), url.port, url.tls), ("::1", 6379, true));
        assert_eq!(url.address(), "[::1]:6379");
        let url = RedisUrl::parse("redis://h:1/#a#b", &no_env).unwrap();
        assert_eq!(url.name, "a#b");
        assert!(url.wait_replica);
    }

    #[test]
    fn sentinel_over_tls_and_the_sentinels_own_password() {
        let env = |var: &str| match var {
            "LOCKRUN_REDIS_SENTINEL_PASSWORD" => Some("sent".to_owned()),
            "LOCKRUN_REDIS_PASSWORD" => Some("data".to_owned()),
            "LOCKRUN_REDIS_WAIT" => Some("0".to_owned()),
            _ => None,
        };
        let url = RedisUrl::parse("rediss+sentinel://s1:26380,s2/m/3#x", &env).unwrap();
        assert!(url.tls && !url.wait_replica);
        assert_eq!(url.db, 3);
        let sentinel = url.sentinel.as_ref().unwrap();
        assert_eq!(sentinel.addrs[1], ("s2".to_owned(), 26379));
        assert_eq!(
            sentinel.password.as_ref().map(|p| p.value.as_str()),
            Some("sent")
        );
        assert_eq!(
            url.password.as_ref().map(|p| p.value.as_str()),
            Some("data")
        );
        let files = TlsFiles {
            cacert: Some("ca.pem".into()),
            ..TlsFiles::default()
        };
        assert!(url.with_files(&files).is_ok());
        let plain = RedisUrl::parse("redis+sentinel://s1/m#x", &no_env).unwrap();
        assert!(plain.sentinel.as_ref().unwrap().password.is_none());
        let err = plain.with_files(&files).unwrap_err();
        assert!(err.contains("rediss+sentinel://s1/m#x"), "{err}");
        assert!(is_url(std::ffi::OsStr::new("rediss+sentinel://s/m#x")));
        assert_eq!(
            redact("rediss+sentinel://:pw@s/m#x"),
            "rediss+sentinel://:***@s/m#x"
        );
    }

    #[test]
    fn the_password_comes_from_the_environment_lockrun_first() {
        let env = |var: &str| match var {
            "REDISCLI_AUTH" => Some("cli".to_owned()),
            "LOCKRUN_REDIS_PASSWORD" => Some("mine".to_owned()),
            _ => None,
        };
        let url = RedisUrl::parse("redis://h:1#x", &env).unwrap();
        assert_eq!(
            url.password.as_ref().map(|p| p.value.as_str()),
            Some("mine")
        );
        assert!(!format!("{url:?}").contains("mine"));
        let cli = |var: &str| (var == "REDISCLI_AUTH").then(|| "cli".to_owned());
        let url = RedisUrl::parse("redis://h:1#x", &cli).unwrap();
        assert_eq!(url.password.map(|p| p.var), Some("REDISCLI_AUTH"));
    }

    #[test]
    fn refuses_what_cannot_work_without_showing_a_password() {
        for bad in [
            "redis://h:1",
            "redis://h:1#",
            "redis://h:1#a%0Ab",
            "redis://:1#x",
            "redis://h:notaport#x",
            "redis://h:0#x",
            "redis://h:1/db#x",
            "redis://h:1?password=x#y",
            "redis+sentinel://h:1#x",
            "redis+sentinel://h:1,/m#x",
        ] {
            assert!(RedisUrl::parse(bad, &no_env).is_err(), "{bad}");
        }
        let err = RedisUrl::parse("redis://u:s3cret@h:1#x", &no_env).unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(err.contains("REDISCLI_AUTH"), "{err}");
        let err = RedisUrl::parse("redis://:s3cret@h:1#x", &no_env).unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn password_spans_cover_only_the_password() {
        let url = b"redis://u:p@ss@h:1/0#x@y";
        let spans = password_spans(url);
        let parts: Vec<&[u8]> = spans.iter().map(|s| &url[s.clone()]).collect();
        assert_eq!(parts, [&b"p@ss"[..]]);
        assert!(password_spans(b"redis://u@h:1#x").is_empty());
        assert_eq!(redact("rediss://:pw@h#x"), "rediss://:***@h#x");
    }

    #[test]
    fn the_token_leads_the_value() {
        let value = value_with_token(17, "h:4:9", b"{\"lockrun\":1,\"pid\":4}\n");
        assert_eq!(
            value,
            b"{\"fencing_token\":17,\"owner\":\"h:4:9\",\"lockrun\":1,\"pid\":4}"
        );
        assert_eq!(token_of(&value), Some(17));
        assert_eq!(
            value_with_token(3, "h:4:9", b""),
            b"{\"fencing_token\":3,\"owner\":\"h:4:9\"}"
        );
        assert_eq!(owner_id("a\"b\\c d.e", 7, 8), "a_b_c_d.e:7:8");
        assert_eq!(token_of(b"{\"fencing_token\":3}"), Some(3));
        assert_eq!(token_of(b"something else"), None);
        let record = crate::record::Record::parse(&value).unwrap();
        assert_eq!(record.pid, Some(4));
    }
}
