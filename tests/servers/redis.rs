//! A private redis-server (with TLS when asked) for the Redis lock-URL
//! tests; see tests/servers/mod.rs.

pub use super::pki::Pki;
use super::{AtExit, free_port};
use crate::common::*;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const SERVER: &str = "/usr/bin/redis-server";

/// A private redis-server; stopped (and its directory removed) on drop.
pub struct Redis {
    pub port: u16,
    /// With TLS (see `start_tls`): the TLS port.
    pub tls_port: u16,
    pub child: Child,
    pub dir: tempfile::TempDir,
}

pub fn server_binary() -> Option<String> {
    if Path::new(SERVER).exists() {
        return Some(SERVER.to_owned());
    }
    has("redis-server").then(|| "redis-server".to_owned())
}

/// Says loudly that the Redis tests did not run; a failure under CI.
pub fn missing(what: &str) {
    let why = format!("{what} not found (Debian: apt-get install redis-server redis-tools)");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true, and the Redis tests cannot run: {why}");
    }
    // LOCKRUN_TEST_REQUIRE_ALL makes this a failure too.
    skip(&why);
    let line = format!("SKIPPED: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

impl Redis {
    /// `None` (after a loud skip) when redis-server is not installed.
    pub fn start() -> Option<Redis> {
        Redis::start_with(&[], false)
    }

    /// Also serving TLS on a second port with the test CA's certificate;
    /// `clients`: asking clients for a certificate of that CA too.
    pub fn start_tls(pki: &Pki, clients: bool) -> Option<Redis> {
        let (cert, key, ca) = (
            pki.file("server.pem"),
            pki.file("server.key"),
            pki.file("ca.pem"),
        );
        let auth = if clients { "yes" } else { "no" };
        Redis::start_with(
            &[
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                auth,
            ],
            true,
        )
    }

    pub fn start_with(extra: &[&str], tls: bool) -> Option<Redis> {
        let Some(server) = server_binary() else {
            missing("redis-server");
            return None;
        };
        if !has("redis-cli") {
            missing("redis-cli");
            return None;
        }
        for _ in 0..5 {
            let dir = temp_dir();
            let port = free_port();
            let tls_port = if tls { free_port() } else { 0 };
            let log = std::fs::File::create(dir.path().join("log")).expect("redis log");
            let mut cmd = Command::new(&server);
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--enable-debug-command", "local"])
                .arg("--dir")
                .arg(dir.path())
                .args(["--tls-port", &tls_port.to_string()])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(log)
                // Its own process group: a server the tests SIGSTOP must
                // not leave a stopped process in the harness's group.
                .process_group(0);
            let child = cmd.spawn().expect("start redis-server");
            let mut redis = Redis {
                port,
                tls_port,
                child,
                dir,
            };
            let deadline = Instant::now() + BOUND;
            loop {
                if redis.child.try_wait().expect("try_wait").is_some() {
                    // The port was taken meanwhile: another port.
                    break;
                }
                if redis.ping() {
                    return Some(redis);
                }
                assert!(
                    Instant::now() < deadline,
                    "redis-server never answered: {}",
                    redis.log()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        panic!("redis-server never started: ports taken every time");
    }

    /// A raw PING on the port: the server answers, and it is ours.
    pub fn ping(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut answer = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    pub fn url(&self, name: &str) -> String {
        format!("redis://127.0.0.1:{}#{name}", self.port)
    }

    /// `redis-cli` on this server, as the default user; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .env_remove("REDISCLI_AUTH")
            .output()
            .expect("run redis-cli");
        assert!(out.status.success(), "redis-cli {args:?} failed");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn signal(&self, sig: &str) {
        kill(self.child.id() as i32, sig);
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // SIGKILL ends a stopped server too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The redis-server the ordinary tests of a binary share (see
/// tests/servers/mod.rs).
pub fn shared() -> Option<&'static Redis> {
    static SERVER: OnceLock<Option<(Redis, AtExit)>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let redis = Redis::start()?;
            let at_exit = AtExit::kill(redis.child.id(), redis.dir.path());
            Some((redis, at_exit))
        })
        .as_ref()
        .map(|(redis, _)| redis)
}
