//! A private PostgreSQL server, run as user nobody, for the PostgreSQL
//! lock-URL tests; see tests/servers/mod.rs.

use super::free_port;
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub const NOBODY: u32 = 65534;

/// A private PostgreSQL server. The shell that started it waits on its
/// stdin and stops the server (and removes its directory) when that pipe
/// closes: when this struct is dropped or the test process ends.
pub struct Server {
    pub port: u16,
    pub guard: Mutex<Option<(Child, ChildStdin)>>,
    pub dir: PathBuf,
    /// Where the log of this server's start begins (earlier attempts may
    /// have lost their port).
    pub log_from: u64,
}

pub fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop()
}

pub fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
}

pub fn as_nobody(program: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program);
    cmd
}

/// psql's options for the test server's superuser over TCP, unaligned
/// output, no ~/.psqlrc: every psql a test starts uses them.
pub const PSQL_AS_SUPERUSER: [&str; 8] = [
    "-X",
    "-At",
    "-h",
    "127.0.0.1",
    "-U",
    "postgres",
    "-d",
    "postgres",
];

/// `psql` as the superuser, one statement, unaligned output.
pub fn psql(port: u16, sql: &str) -> String {
    let out = Command::new(bin_dir().expect("postgres bin").join("psql"))
        .args(PSQL_AS_SUPERUSER)
        .args(["-p", &port.to_string(), "-c", sql])
        .env_remove("PGPASSWORD")
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// How one attempt to start the server ended.
pub enum Started {
    Ready,
    /// The log says the port was taken.
    LostPort,
}

impl Server {
    /// `None` (after a loud skip) when PostgreSQL cannot be run here.
    pub fn start(ssl: Option<&Path>) -> Option<Server> {
        Server::start_on(ssl, free_port)
    }

    /// As `start`, each attempt on the port `ports` gives.
    pub fn start_on(ssl: Option<&Path>, ports: impl FnMut() -> u16) -> Option<Server> {
        Server::start_full(ssl, ports, &[])
    }

    /// A server of its own with extra settings (`-c name=value` each).
    pub fn start_tuned(extra: &[&str]) -> Option<Server> {
        Server::start_full(None, free_port, extra)
    }

    pub fn start_full(
        ssl: Option<&Path>,
        mut ports: impl FnMut() -> u16,
        extra: &[&str],
    ) -> Option<Server> {
        let Some(bin) = bin_dir() else {
            skip("PostgreSQL is not installed (Debian: apt-get install postgresql)");
            return None;
        };
        if !rustix::process::geteuid().is_root() || !has("setpriv") {
            skip("needs root and setpriv to run PostgreSQL as user nobody");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("lockrun-pg")
            .tempdir()
            .expect("temp dir")
            .keep();
        chown_nobody(&dir);
        let data = dir.join("data");
        let sockets = dir.join("sock");
        std::fs::create_dir(&sockets).expect("socket dir");
        chown_nobody(&sockets);
        let init = as_nobody(&bin.join("initdb"))
            .args(["-U", "postgres", "-A", "trust", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .expect("run initdb");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        // The superuser without a password; everyone else with one, so
        // that a wrong password can be tried.
        let hba = data.join("pg_hba.conf");
        std::fs::write(
            &hba,
            "local all all trust\nhostnossl all tlsonly 127.0.0.1/32 reject\nhost all postgres 127.0.0.1/32 trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        chown_nobody(&hba);
        let mut settings = vec![
            "-c listen_addresses=127.0.0.1".to_owned(),
            "-c fsync=off".to_owned(),
            "-c max_connections=100".to_owned(),
        ];
        if let Some(certs) = ssl {
            for file in ["server.crt", "server.key"] {
                let to = data.join(file);
                std::fs::copy(certs.join(file), &to).expect("copy server cert");
                chown_nobody(&to);
                std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                    .expect("chmod cert");
            }
            settings.push("-c ssl=on".to_owned());
        }
        settings.extend(extra.iter().map(|e| format!("-c {e}")));
        for _attempt in 0..5 {
            let port = ports();
            // Where this attempt's lines start in the log, which every
            // start appends to.
            let log = dir.join("log");
            let from = std::fs::metadata(&log).map_or(0, |m| m.len());
            // The shell stops postgres when its stdin says so or closes,
            // and removes the directory only then: told `abandon` (this
            // attempt lost its port) it keeps the data for the next one.
            let script = format!(
                "while :; do \"$0\" -D \"$1\" -p {port} -k \"$2\" {} 2>>\"$1/../log\" & p=$!; read x; r=$?; if [ \"$x\" = crash ]; then kill -QUIT $p; else kill -INT $p; fi 2>/dev/null; wait $p; [ $r = 0 ] && [ \"$x\" = restart -o \"$x\" = crash ] || break; done; [ \"$x\" = abandon ] || rm -rf \"$3\"",
                settings.join(" ")
            );
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &format!("exec setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{}' \"$0\" \"$1\" \"$2\" \"$3\"", script.replace('\'', "'\\''"))])
                .arg(bin.join("postgres"))
                .arg(&data)
                .arg(&sockets)
                .arg(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                // Its own process group, as etcd's in tests/etcd.rs: a
                // backend the tests SIGSTOP must not leave a stopped
                // process in the harness's group (SIGHUP to all of it).
                .process_group(0);
            let mut child = cmd.spawn().expect("start postgres");
            let stdin = child.stdin.take().expect("stdin");
            let server = Server {
                port,
                guard: Mutex::new(Some((child, stdin))),
                dir: dir.clone(),
                log_from: from,
            };
            match server.wait_started() {
                Started::Ready => {
                    psql(port, "CREATE ROLE app LOGIN PASSWORD 'secret'");
                    return Some(server);
                }
                Started::LostPort => {
                    // Someone took the port between free_port() and the
                    // bind: stop this attempt's shell, keep the data, and
                    // let the Server go without its Drop (which would
                    // remove the directory).
                    server.abandon();
                    std::mem::forget(server);
                }
            }
        }
        panic!(
            "PostgreSQL did not start: every port tried was taken; see {}",
            dir.join("log").display()
        );
    }

    /// Ready when psql answers; false when the server exited first.
    pub fn wait_ready(&self) -> bool {
        matches!(self.wait_started(), Started::Ready)
    }

    /// Waits, within BOUND, until the server answers, or its log (this
    /// start's part) says it could not bind its port. Any other end is a
    /// failure of the test run, with the log.
    pub fn wait_started(&self) -> Started {
        let deadline = std::time::Instant::now() + BOUND;
        let log = self.dir.join("log");
        loop {
            // Through the private socket: an answer is from our server,
            // never from another that owns the TCP port (postgres makes
            // its Unix socket only once its TCP port is bound).
            let ok = Command::new(bin_dir().expect("bin").join("pg_isready"))
                .args(["-q", "-p", &self.port.to_string(), "-h"])
                .arg(self.dir.join("sock"))
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Started::Ready;
            }
            let text = std::fs::read(&log).unwrap_or_default();
            let from = usize::try_from(self.log_from).unwrap_or(0);
            let text = String::from_utf8_lossy(text.get(from..).unwrap_or_default());
            if text.contains("could not bind") || text.contains("Address already in use") {
                return Started::LostPort;
            }
            let mut guard = self.guard.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((child, _)) = guard.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("PostgreSQL's shell exited ({status}) before the server was ready: {text}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "PostgreSQL never became ready on port {}: {text}",
                self.port
            );
            drop(guard);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ends a start that lost its port, keeping the data directory.
    pub fn abandon(&self) {
        if let Some((mut child, mut stdin)) =
            self.guard.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            let _ = std::io::Write::write_all(&mut stdin, b"abandon\n");
            drop(stdin);
            let _ = wait_child(&mut child, BOUND);
        }
    }

    /// A fast shutdown (every session is ended) and a start on the same
    /// port and data.
    pub fn restart(&self) {
        if let Some((_, stdin)) = self
            .guard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            std::io::Write::write_all(stdin, b"restart\n").expect("ask for a restart");
        }
    }

    /// A crash (SIGQUIT to the postmaster: an immediate shutdown, which
    /// writes nothing out, as at a power cut for what is still in shared
    /// memory) and a start on the same port and data.
    /// Returns once the new server answers.
    pub fn crash_and_restart(&self) {
        let postmaster = || {
            std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
                .ok()
                .and_then(|t| t.lines().next().map(str::to_owned))
        };
        let before = postmaster();
        if let Some((_, stdin)) = self
            .guard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            std::io::Write::write_all(stdin, b"crash\n").expect("ask for a crash");
        }
        wait_for("a new postmaster", || {
            postmaster().is_some_and(|now| Some(&now) != before.as_ref())
        });
        assert!(self.wait_ready(), "the server came back after the crash");
    }

    pub fn stop(&self) {
        if let Some((mut child, stdin)) =
            self.guard.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            drop(stdin);
            let _ = wait_child(&mut child, BOUND);
        }
    }

    /// A lock URL as the superuser (no password needed).
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable#{name}",
            self.port
        )
    }

    /// A lock URL as `app`, whose password is `secret`.
    pub fn app_url(&self, password: &str, name: &str) -> String {
        format!(
            "postgres://app:{password}@127.0.0.1:{}/postgres?sslmode=disable#{name}",
            self.port
        )
    }

    pub fn psql(&self, sql: &str) -> String {
        psql(self.port, sql)
    }

    /// Sessions waiting for the advisory lock on NAME.
    pub fn waiters(&self, name: &str) -> usize {
        self.psql(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('{name}', 0)"
        ))
        .parse()
        .expect("a count")
    }

    pub fn holders(&self, name: &str) -> usize {
        self.psql(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('{name}', 0)"
        ))
        .parse()
        .expect("a count")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One server for the whole test run (each test uses its own lock names).
pub fn shared() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    SERVER.get_or_init(|| Server::start(None)).as_ref()
}
