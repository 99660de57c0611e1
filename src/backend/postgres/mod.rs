//! Locks in PostgreSQL: `postgres://…#NAME` (or `postgresql://`) in place
//! of LOCKFILE, any libpq connection URI with the lock name as fragment.
//!
//! The lock is a session-level advisory lock, `pg_advisory_lock(key)`, on
//! one connection held for the whole run. Like a kernel lock, the server
//! lets go of it the moment the session ends however it ends, so lockrun
//! has no lease to renew; but a connection can break without lockrun
//! noticing, so a thread checks it every `--ttl`/3 and the command is
//! stopped (exit 76) when the lock cannot be confirmed for a whole TTL.
//!
//! The key is computed by the server from the name so that anyone can take
//! the same lock from SQL: `pg_advisory_lock(hashtextextended('NAME', 0))`
//! in the same database (advisory locks are per database; PostgreSQL 12
//! or later). The command's `LOCKRUN_FENCING_TOKEN` is `txid_current()`
//! (the same number as `pg_current_xact_id()`) taken once the lock is
//! held: transaction ids only grow in a cluster, so every later holder's
//! token is larger, provided the transaction that took it is on disk
//! before the command starts, crash or not (`sql::DURABLE_TOKEN` says how).
//! A standby cannot hand one out, and is refused (69).
//!
//! If lockrun's host dies, the server ends the session (and frees the
//! lock) when its keepalive probes go unanswered: lockrun sets
//! `tcp_keepalives_idle` = TTL, `tcp_keepalives_interval` = TTL/3,
//! `tcp_keepalives_count` = 3 and `tcp_user_timeout` = 2 x TTL on its
//! session, so about 2 x TTL (20 s by default). That is later than
//! lockrun on the cut-off host stops its command (one TTL without a
//! confirmed check), so the two holders' commands do not overlap unless
//! `--kill-grace` is longer than the TTL.
//!
//! Reached only through [`crate::registry::LockTarget::Postgres`]: the file path
//! never runs a line of this module.

#[cfg(feature = "postgres")]
pub mod connect;
/// What the registry asks of this backend: options, words, entry points.
pub mod entry;
/// `holder`/`check` on a PostgreSQL lock URL; never reached from the run path.
pub mod inspect;
#[cfg(feature = "postgres")]
pub mod lock;
#[cfg(feature = "postgres")]
pub mod session;
#[cfg(feature = "postgres")]
pub mod sessions;
#[cfg(feature = "postgres")]
pub mod slots;
#[cfg(feature = "postgres")]
pub mod sql;

use crate::exit_codes::Failure;
use std::fmt;
use std::ops::Range;
use std::time::Duration;

const NAME_AFTER_HASH: &str = "write the lock name after '#', as in postgres://HOST/DB#NAME";

/// What a PostgreSQL lock can do, for every build: the CLI refuses the rest.
pub const CAPS: crate::backend::Capabilities = crate::backend::Capabilities {
    kind: "postgres:// locks",
    shared: false,
    exec_in_place: false,
    poll: false,
    lease: true,
    byte_ranges: false,
    slots: true,
    stays_to: "keep the connection",
    woken_by: "the server itself",
    last_record: Err(
        "an advisory lock keeps no record after its release (PostgreSQL has no place for it), so the last run's success cannot be known; use an etcd:// lock or a lock file",
    ),
};

/// The longest `--ttl` on a PostgreSQL lock. The session gets
/// `tcp_keepalives_idle` = TTL, and Linux refuses a TCP_KEEPIDLE over
/// 32767 s: the server only logs that and goes on probing after its
/// default two hours, so a dead holder's host would keep the lock that
/// long. (`tcp_user_timeout`, 2 x TTL in milliseconds, stays well inside
/// its int; lockrun's own side idles TTL/3.)
pub const LONGEST_TTL: Duration = Duration::from_secs(32767);

/// `--ttl` on a postgres:// URL: within what the server's settings take,
/// else a usage error before any connection.
pub fn check_ttl(ttl: Duration) -> Result<(), String> {
    if ttl > LONGEST_TTL {
        return Err(format!(
            "--ttl {} is too long for a postgres:// lock: give 1s to {}s (9h 6m 7s), the longest keepalive idle time (tcp_keepalives_idle) the server's system takes",
            humantime::format_duration(ttl),
            LONGEST_TTL.as_secs()
        ));
    }
    Ok(())
}

/// Whether this build has PostgreSQL lock URLs (the `postgres` feature).
pub const ENABLED: bool = cfg!(feature = "postgres");

const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// The run form on this kind of lock URL, as the command line gives it.
pub type RunOptions = crate::backend::UrlRunOptions<PgUrl>;

pub fn not_built() -> Failure {
    Failure::new(
        crate::exit_codes::USAGE,
        "this lockrun was built without PostgreSQL lock URL (postgres://) support; \
         reinstall it with `cargo install --locked --path . --features postgres`",
    )
}

/// Whether a LOCKFILE argument is a PostgreSQL lock URL.
pub fn is_url(arg: &std::ffi::OsStr) -> bool {
    SCHEMES
        .iter()
        .any(|s| arg.as_encoded_bytes().starts_with(s.as_bytes()))
}

/// A parsed lock URL. Holds the password (if the URL has one) only in
/// `connection`, which is never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// The connection URI without the fragment, as given (password and
    /// all): only ever handed to the client library.
    pub connection: String,
    /// The lock's name (the fragment, percent-decoded).
    pub name: String,
    /// The URL with any password removed: for messages, records,
    /// `LOCKRUN_LOCKFILE` and `holder`.
    pub text: String,
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the connection string: it may carry a password.
        f.debug_struct("PgUrl")
            .field("name", &self.name)
            .field("text", &self.text)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PgUrl {
    pub fn parse(text: &str) -> Result<PgUrl, String> {
        let shown = redact(text);
        if !SCHEMES.iter().any(|s| text.starts_with(s)) {
            return Err(format!("'{shown}' is not a postgres:// URL"));
        }
        let Some((connection, fragment)) = text.split_once('#') else {
            return Err(format!("'{shown}' names no lock: {NAME_AFTER_HASH}"));
        };
        let name = percent_decode(fragment)
            .ok_or_else(|| format!("the lock name in '{shown}' is not valid UTF-8 once decoded"))?;
        crate::backend::check_lock_name(&name, &shown, NAME_AFTER_HASH)?;
        Ok(PgUrl {
            connection: connection.to_owned(),
            name,
            text: shown,
        })
    }
}

/// Where passwords sit in a connection URI: the userinfo's password and
/// the value of a `password=` query parameter. Byte ranges, so that the
/// process title can be overwritten in place. The userinfo ends at the
/// last `@` before the fragment, even past a `/` or `?`: a password
/// written without percent-encoding must still be hidden, and hiding too
/// much of a message is the better mistake.
pub fn password_spans(url: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let Some(start) = SCHEMES
        .iter()
        .find(|s| url.starts_with(s.as_bytes()))
        .map(|s| s.len())
    else {
        return spans;
    };
    let end = url.iter().position(|&b| b == b'#').unwrap_or(url.len());
    let mut query_from = start;
    if let Some(at) = url[start..end].iter().rposition(|&b| b == b'@') {
        let userinfo = start..start + at;
        if let Some(colon) = url[userinfo.clone()].iter().position(|&b| b == b':') {
            spans.push(userinfo.start + colon + 1..userinfo.end);
        }
        query_from = userinfo.end;
    }
    if let Some(q) = url[query_from..end].iter().position(|&b| b == b'?') {
        let mut pos = query_from + q + 1;
        for param in url[pos..end].split(|&b| b == b'&') {
            if let Some(value) = param.strip_prefix(b"password=") {
                let from = pos + "password=".len();
                spans.push(from..from + value.len());
            }
            pos += param.len() + 1;
        }
    }
    spans
}

/// The URL with every password replaced by `***`.
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

/// `%XX` decoding; `None` when the result is not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_name_and_hides_the_password() {
        let url =
            PgUrl::parse("postgres://app:s3cret@db1:5432/ops?sslmode=verify-full#nightly%20backup")
                .unwrap();
        assert_eq!(url.name, "nightly backup");
        assert_eq!(
            url.text,
            "postgres://app:***@db1:5432/ops?sslmode=verify-full#nightly%20backup"
        );
        assert!(url.connection.contains("s3cret"));
        assert!(!format!("{url:?}").contains("s3cret"));
        let url = PgUrl::parse("postgresql:///ops?password=x%26y&user=a#n").unwrap();
        assert_eq!(url.text, "postgresql:///ops?password=***&user=a#n");
        assert_eq!(
            PgUrl::parse("postgres:///#n").unwrap().connection,
            "postgres:///"
        );
    }

    #[test]
    fn refuses_what_cannot_work() {
        for bad in ["postgres://h/db", "postgres://h/db#", "postgres://h#a%0Ab"] {
            assert!(PgUrl::parse(bad).is_err(), "{bad}");
        }
        let err = PgUrl::parse("postgres://u:pw@h/db").unwrap_err();
        assert!(!err.contains("pw@"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn redacting_hides_the_password(
            user in "[a-z]{1,8}",
            password in "[A-Za-z0-9@:/?&=%]{1,12}",
            rest in "[a-z0-9/?=&.:]{0,30}",
        ) {
            let url = format!("postgres://{user}:{password}@host/db{rest}#n");
            let shown = redact(&url);
            proptest::prop_assert!(
                shown.starts_with(&format!("postgres://{user}:***@host/db")),
                "{}",
                shown
            );
            if let Ok(parsed) = PgUrl::parse(&url) {
                proptest::prop_assert_eq!(parsed.text, shown);
            }
        }

        #[test]
        fn redacting_anything_never_panics(text in "\\PC{0,60}") {
            let _ = redact(&format!("postgres://{text}"));
            let _ = PgUrl::parse(&format!("postgresql://{text}"));
        }
    }

    #[test]
    fn password_spans_cover_only_passwords() {
        let url = b"postgres://u:p@ss@h/d?a=1&password=zz#x";
        let spans = password_spans(url);
        let parts: Vec<&[u8]> = spans.iter().map(|s| &url[s.clone()]).collect();
        assert_eq!(parts, [&b"p@ss"[..], &b"zz"[..]]);
    }
}
