//! From a lock URL and libpq's environment to a connection: the URI's
//! parameters first, then `PG*` variables, then libpq's defaults; the
//! password from the URI, `PGPASSWORD` or the password file; `sslmode`
//! from `disable` to `verify-full` with rustls.
//!
//! The client library parses the URI; what it does not know (libpq's
//! `sslmode` values beyond `require`, `sslrootcert`, `passfile`) is taken
//! out here and done here, so that a URI written for psql works unchanged.

use super::PgUrl;
use postgres::config::SslMode;
use postgres::{CancelToken, Client, Config, NoTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How long connecting may take when neither the URI nor
/// `PGCONNECT_TIMEOUT` says: lockrun must end with 69, never hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ssl {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Ssl {
    fn parse(text: &str) -> Result<Ssl, String> {
        Ok(match text {
            "disable" => Ssl::Disable,
            "allow" => Ssl::Allow,
            "prefer" => Ssl::Prefer,
            "require" => Ssl::Require,
            "verify-ca" => Ssl::VerifyCa,
            "verify-full" => Ssl::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode '{other}' is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

#[derive(Clone)]
enum Tls {
    None,
    Rustls(MakeRustlsConnect),
}

/// Everything needed to open (and cancel on) connections to one server.
#[derive(Clone)]
pub struct Target {
    config: Config,
    tls: Tls,
    /// `user@host:port/db`, never the password: for messages.
    pub describe: String,
    /// Whether the password came from the URI itself (visible in `ps`).
    pub password_in_url: bool,
    /// `sslmode=allow`: plain first, TLS when the server refuses that.
    allow: bool,
}

/// Why a lock URL cannot be used, before any server is asked: a usage
/// error (64) for what the URL and the environment say, 77 for a
/// credential file lockrun refuses to read (a FIFO, a device).
#[derive(Debug)]
pub struct Refusal {
    pub status: u8,
    pub message: String,
}

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal {
            status: crate::exit_codes::USAGE,
            message,
        }
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Refusal {
        Refusal::from(message.to_owned())
    }
}

/// The environment as libpq reads it; a function so tests can give their own.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Target {
    /// `application_name` is ours unless the URI or `PGAPPNAME` set one.
    pub fn new(url: &PgUrl, application_name: &str, env: Env) -> Result<Target, Refusal> {
        let (base, params) = match url.connection.split_once('?') {
            Some((base, query)) => (base, query),
            None => (url.connection.as_str(), ""),
        };
        let mut ssl = None;
        let mut root_cert = None;
        let mut passfile = None;
        let mut kept = Vec::new();
        for param in params.split('&').filter(|p| !p.is_empty()) {
            let (key, raw) = param.split_once('=').unwrap_or((param, ""));
            let value = super::percent_decode(raw)
                .ok_or_else(|| format!("the value of '{key}' in the lock URL is not UTF-8"))?;
            match key {
                "sslmode" => ssl = Some(Ssl::parse(&value)?),
                "sslrootcert" => root_cert = Some(PathBuf::from(value)),
                "passfile" => passfile = Some(PathBuf::from(value)),
                "sslcert" | "sslkey" | "sslcrl" | "sslpassword" | "service" => {
                    return Err(format!(
                        "the lock URL's '{key}' parameter is not supported by lockrun"
                    )
                    .into());
                }
                _ => kept.push(param),
            }
        }
        let uri = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let uri = one_userinfo(&uri)?;
        let mut config = Config::from_str(&uri).map_err(|e| {
            format!(
                "cannot read the connection URI {}: {e}",
                super::redact(&uri)
            )
        })?;

        if config.get_hosts().is_empty() {
            let hosts = env("PGHOST").unwrap_or_else(default_host);
            for host in hosts.split(',') {
                config.host(host.trim());
            }
        }
        if config.get_ports().is_empty()
            && let Some(port) = env("PGPORT")
        {
            for port in port.split(',') {
                let port = port
                    .trim()
                    .parse::<u16>()
                    .map_err(|_| format!("PGPORT '{port}' is not a port number"))?;
                config.port(port);
            }
        }
        if config.get_user().is_none() {
            let user = env("PGUSER").or_else(os_user).ok_or(
                "no user name: set PGUSER or name one in the URL (postgres://USER@HOST/DB#NAME)",
            )?;
            config.user(&user);
        }
        if config.get_dbname().is_none()
            && let Some(db) = env("PGDATABASE")
        {
            config.dbname(&db);
        }
        if config.get_application_name().is_none() {
            config
                .application_name(&env("PGAPPNAME").unwrap_or_else(|| application_name.to_owned()));
        }
        if config.get_connect_timeout().is_none() {
            let timeout = env("PGCONNECT_TIMEOUT")
                .and_then(|t| t.trim().parse::<u64>().ok())
                .filter(|&t| t > 0)
                .map_or(CONNECT_TIMEOUT, |t| Duration::from_secs(t.max(2)));
            config.connect_timeout(timeout);
        }
        let password_in_url = config.get_password().is_some();
        if !password_in_url {
            if let Some(password) = env("PGPASSWORD") {
                config.password(password);
            } else if let Some(password) = from_passfile(&config, passfile, env) {
                config.password(password);
            }
        }

        let explicit_root = root_cert.or_else(|| env("PGSSLROOTCERT").map(PathBuf::from));
        let system = explicit_root.as_deref() == Some(Path::new("system"));
        let ssl = match ssl {
            Some(ssl) => ssl,
            None => match env("PGSSLMODE") {
                Some(mode) => Ssl::parse(&mode)?,
                // As libpq 16: the system's CAs mean verify-full.
                None if system => Ssl::VerifyFull,
                None => Ssl::Prefer,
            },
        };
        if system && ssl != Ssl::VerifyFull {
            return Err(
                "sslrootcert=system trusts every public CA, so it needs sslmode=verify-full".into(),
            );
        }
        let tls = tls_for(ssl, explicit_root)?;
        config.ssl_mode(match ssl {
            Ssl::Disable | Ssl::Allow => SslMode::Disable,
            Ssl::Prefer => SslMode::Prefer,
            Ssl::Require | Ssl::VerifyCa | Ssl::VerifyFull => SslMode::Require,
        });

        let describe = describe(&config);
        Ok(Target {
            config,
            tls,
            describe,
            password_in_url,
            allow: ssl == Ssl::Allow,
        })
    }

    /// TCP keepalives and a user timeout on our side, so that a dead
    /// server or network makes a pending call fail instead of hanging.
    pub fn keepalive(&mut self, ttl: Duration) {
        let idle = (ttl / 3).max(Duration::from_secs(1));
        self.config
            .keepalives(true)
            .keepalives_idle(idle)
            .keepalives_interval((idle / 3).max(Duration::from_secs(1)))
            .keepalives_retries(3)
            .tcp_user_timeout(ttl);
    }

    /// Whether something stands between lockrun and the server (a pooler,
    /// a proxy, a mapped port): the server's own port (`inet_server_port()`,
    /// none over a Unix socket) is not one lockrun dialled.
    pub fn behind_a_proxy(&self, server_port: Option<u16>) -> bool {
        let unix = self.config.get_hosts().iter().all(is_unix_socket);
        let dialled = self.config.get_ports();
        match server_port {
            None => false,
            Some(_) if unix => true,
            Some(port) if dialled.is_empty() => port != 5432,
            Some(port) => !dialled.contains(&port),
        }
    }

    pub fn connect(&self) -> Result<Client, postgres::Error> {
        match self.connect_with(&self.config) {
            // libpq's `allow`: TLS only once the server has refused the
            // plain connection (pg_hba.conf's hostssl, say); not when it
            // cannot be reached, which TLS would not change. When TLS fails
            // too without the server saying why, the plain attempt's answer
            // is the one that explains (a wrong database, a wrong role).
            Err(plain) if self.allow && plain.as_db_error().is_some() => {
                let mut config = self.config.clone();
                config.ssl_mode(SslMode::Require);
                match self.connect_with(&config) {
                    Err(tls) if tls.as_db_error().is_none() => Err(plain),
                    other => other,
                }
            }
            other => other,
        }
    }

    /// The client library resolves a host name on a thread of its own,
    /// started from this one: started with signals blocked, it keeps them
    /// blocked, so lockrun's handlers run only on the main thread. A signal
    /// that arrives meanwhile is taken once the connection is made (or
    /// fails), which a run form would do anyway: its wait starts by
    /// looking at what came.
    fn connect_with(&self, config: &Config) -> Result<Client, postgres::Error> {
        crate::platform::with_signals_blocked(|| match &self.tls {
            Tls::None => config.connect(NoTls),
            Tls::Rustls(tls) => config.connect(tls.clone()),
        })
    }

    /// Asks the server to cancel what `token`'s session is running.
    pub fn cancel(&self, token: &CancelToken) {
        let _ = match &self.tls {
            Tls::None => token.cancel_query(NoTls),
            Tls::Rustls(tls) => token.cancel_query(tls.clone()),
        };
    }
}

/// The URI with the userinfo's own `@`s percent-encoded, so that the
/// client library, which ends the userinfo at the *first* `@`, reads the
/// user and password that lockrun's messages hide (everything up to the
/// *last* `@`, see [`super::password_spans`]). Left as it was, the library
/// would take `ss@host` for the host of `postgres://u:p@ss@host/db` and
/// print the password's tail in "cannot connect as u@ss@host". When the
/// `@`s have a `/` or `?` between them, where the password ends cannot be
/// told (a password with a `/`, or an `@` in the path or a parameter): a
/// usage error that shows the URL masked up to its last `@`.
fn one_userinfo(uri: &str) -> Result<String, Refusal> {
    let Some(start) = ["postgres://", "postgresql://"]
        .iter()
        .find(|s| uri.starts_with(*s))
        .map(|s| s.len())
    else {
        return Ok(uri.to_owned());
    };
    let rest = &uri[start..];
    let (Some(first), Some(last)) = (rest.find('@'), rest.rfind('@')) else {
        return Ok(uri.to_owned());
    };
    if first == last {
        return Ok(uri.to_owned());
    }
    let userinfo = &rest[..last];
    if userinfo.contains(['/', '?']) {
        if !userinfo.contains(':') {
            // No password to hide: the library's reading, right or wrong,
            // shows nothing secret.
            return Ok(uri.to_owned());
        }
        return Err(format!(
            "cannot tell where the password ends in the lock URL {}: it has more than one '@' with a '/' or '?' between them; write each '@' of the user name, password, path and parameters as %40",
            super::redact(uri)
        )
        .into());
    }
    Ok(format!(
        "{}{}{}",
        &uri[..start],
        userinfo.replace('@', "%40"),
        &rest[last..]
    ))
}

/// Whether a host is a Unix socket's directory. The client library has
/// that kind of host only on Unix; on Windows every host is TCP.
fn is_unix_socket(host: &postgres::config::Host) -> bool {
    #[cfg(unix)]
    return matches!(host, postgres::config::Host::Unix(_));
    #[cfg(not(unix))]
    {
        let _ = host;
        false
    }
}

/// libpq's default: the Unix socket directory, Debian's where it exists,
/// upstream's otherwise. On Windows, which has no such socket, libpq's
/// default there: localhost over TCP.
#[cfg(not(unix))]
fn default_host() -> String {
    "localhost".to_owned()
}

#[cfg(unix)]
fn default_host() -> String {
    let debian = "/var/run/postgresql";
    if Path::new(debian).is_dir() {
        debian.to_owned()
    } else {
        "/tmp".to_owned()
    }
}

/// libpq's default user: the effective user's name, read the way the rest
/// of lockrun reads it (from /etc/passwd, never through NSS, which a
/// static binary cannot load).
fn os_user() -> Option<String> {
    crate::identity::Me::gather()
        .user
        .or_else(|| std::env::var("USER").ok())
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

fn describe(config: &Config) -> String {
    use postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().or(config.get_user()).unwrap_or("")
    )
}

/// The password file, as libpq reads it: `host:port:database:user:password`
/// lines, `*` matching anything, `\` escaping; ignored when others can read
/// it. A Unix-socket connection matches `localhost`.
fn from_passfile(config: &Config, explicit: Option<PathBuf>, env: Env) -> Option<String> {
    use postgres::config::Host;
    let path = explicit
        .or_else(|| env("PGPASSFILE").map(PathBuf::from))
        .or_else(|| home().map(|h| h.join(".pgpass")))?;
    let shown = crate::display::escape(&path.to_string_lossy());
    // Opened as every credential file is, never blocking on a FIFO; what
    // is not a regular file is ignored with a warning, as libpq does
    // ("password file is not a plain file"). No such file: nothing to say.
    let (mut file, meta) = match crate::platform::open_regular(&path) {
        Ok(opened) => opened,
        Err(crate::platform::NotRead::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return None;
        }
        Err(e) => {
            crate::say!("lockrun: warning: cannot read the password file {shown}: {e}; ignored");
            return None;
        }
    };
    if crate::platform::others_may_access(&meta) {
        crate::say!(
            "lockrun: warning: password file {shown} has group or world access; ignored (chmod 0600 it)"
        );
        return None;
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        _ => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or("").to_owned();
    let db = config.get_dbname().unwrap_or(&user).to_owned();
    let wanted = [host.as_str(), port.as_str(), db.as_str(), user.as_str()];
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let fields = split_pgpass(line);
            if fields.len() < 5 {
                return None;
            }
            let matches = wanted
                .iter()
                .zip(&fields)
                .all(|(want, field)| field == "*" || field == want);
            matches.then(|| fields[4].clone())
        })
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The TLS set-up for `ssl`. As in libpq: `require` verifies the chain
/// only when a root certificate file is there; `verify-ca` verifies the
/// chain, `verify-full` the chain and the host name.
fn tls_for(ssl: Ssl, explicit_root: Option<PathBuf>) -> Result<Tls, Refusal> {
    if ssl == Ssl::Disable {
        return Ok(Tls::None);
    }
    let default_root = home().map(|h| h.join(".postgresql/root.crt"));
    let root = explicit_root
        .clone()
        .or_else(|| default_root.filter(|p| p.exists()));
    let verify = match ssl {
        Ssl::VerifyCa | Ssl::VerifyFull => true,
        Ssl::Require => root.is_some(),
        _ => false,
    };
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let config = if verify {
        let Some(root) = root else {
            return Err(
                "sslmode verify-ca/verify-full needs a root certificate: set sslrootcert in the URL, PGSSLROOTCERT, or ~/.postgresql/root.crt"
                    .into(),
            );
        };
        let shown = crate::display::escape(&root.to_string_lossy());
        let mut store = RootCertStore::empty();
        if root == Path::new("system") {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err("sslrootcert=system: no CA certificates found on this system".into());
            }
        } else {
            // Read as every credential file is (never blocking on a FIFO),
            // then parsed from memory.
            let pem = crate::platform::read_regular(&root).map_err(|e| Refusal {
                status: match e {
                    crate::platform::NotRead::NotRegular(_) => crate::exit_codes::NO_PERMISSION,
                    crate::platform::NotRead::Io(_) => crate::exit_codes::USAGE,
                },
                message: format!("cannot read the root certificate {shown}: {e}"),
            })?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert =
                    cert.map_err(|e| format!("cannot read the root certificate {shown}: {e}"))?;
                store
                    .add(cert)
                    .map_err(|e| format!("bad root certificate in {shown}: {e}"))?;
            }
        }
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(store),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|e| format!("cannot use the root certificate {shown}: {e}"))?;
        if ssl == Ssl::VerifyFull {
            builder.with_webpki_verifier(webpki).with_no_client_auth()
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Lenient {
                    chain: Some(webpki),
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth()
        }
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Lenient {
                chain: None,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth()
    };
    Ok(Tls::Rustls(MakeRustlsConnect::new(config)))
}

/// What `verify-full` does not check: with a `chain` (`verify-ca`), the
/// chain must lead to the root, whatever name it is for; without one
/// (`prefer`/`require` and no root certificate), encryption against a
/// passive listener only, as libpq does. Either way the handshake's
/// signatures are checked with the provider's algorithms, as rustls's own
/// verifier checks them.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A connection error in words, without anything that could be a secret.
pub fn explain(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    crate::display::error_chain(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unencoded_at_in_the_password_stays_in_the_password() {
        assert_eq!(
            one_userinfo("postgres://u:p@ss@h:1/d").unwrap(),
            "postgres://u:p%40ss@h:1/d"
        );
        let url = PgUrl::parse("postgres://u:p@s@s@h:1/d?sslmode=disable#n").unwrap();
        let target = Target::new(&url, "lockrun", &|_| None).unwrap();
        assert_eq!(target.describe, "u@h:1/d");
        assert_eq!(target.config.get_password(), Some(&b"p@s@s"[..]));
        for ambiguous in [
            "postgres://u:p@s/s@h/d",
            "postgres://u:p@h/d?application_name=a@b",
        ] {
            let err = one_userinfo(ambiguous).unwrap_err().message;
            assert!(err.contains("%40") && !err.contains("p@"), "{err}");
        }
        // Without a password nothing is hidden, and nothing is changed.
        let plain = "postgres://h/d?application_name=a@b@c";
        assert_eq!(one_userinfo(plain).unwrap(), plain);
    }

    #[test]
    fn pgpass_fields_unescape() {
        assert_eq!(
            split_pgpass(r"h:5432:*:u:p\:w\\d:x"),
            ["h", "5432", "*", "u", r"p:w\d:x"]
        );
    }

    #[test]
    fn environment_fills_what_the_url_leaves_out() {
        let url = PgUrl::parse("postgres:///#n").unwrap();
        let env = |k: &str| match k {
            "PGHOST" => Some("db9".to_owned()),
            "PGPORT" => Some("6543".to_owned()),
            "PGUSER" => Some("ops".to_owned()),
            "PGDATABASE" => Some("jobs".to_owned()),
            "PGSSLMODE" => Some("disable".to_owned()),
            _ => None,
        };
        let target = Target::new(&url, "lockrun", &env).unwrap();
        assert_eq!(target.describe, "ops@db9:6543/jobs");
        let url = PgUrl::parse("postgres://me@h:1/d?sslmode=require#n").unwrap();
        let target = Target::new(&url, "lockrun", &env).unwrap();
        assert_eq!(target.describe, "me@h:1/d");
        let url = PgUrl::parse("postgres://h/d?sslmode=bogus#n").unwrap();
        assert!(Target::new(&url, "lockrun", &env).is_err());
        let none = |_: &str| None;
        let url = PgUrl::parse("postgres://u@h/d?sslrootcert=system&sslmode=require#n").unwrap();
        let err = Target::new(&url, "lockrun", &none).err().unwrap();
        assert!(err.message.contains("verify-full"), "{err:?}");
    }
}
