//! The servers the lock-URL tests run against, started one way for every
//! test binary that needs them (tests/etcd.rs, tests/postgres.rs,
//! tests/redis.rs and the shared scenarios of tests/scenarios.rs): each on
//! 127.0.0.1, on a free port, in a private temporary directory, retried on
//! another port when another test took the one chosen. A missing server
//! binary is a loud SKIPPED (a failure under LOCKRUN_TEST_REQUIRE_ALL).
//!
//! `shared()` in each module is the one server a test binary's ordinary
//! tests share (a OnceLock, each test using lock names of its own); a test
//! that stops, restarts or reconfigures its server starts one of its own.
// Not every binary uses every helper of every server.
#![allow(dead_code)]

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(any(feature = "etcd", feature = "redis"))]
pub mod pki;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Stops a server kept in a `static` (whose destructor never runs) when
/// this test process ends, passed, failed or killed: a shell, in a process
/// group of its own, that waits on a pipe only this process holds and
/// kills `pid` and removes `dir` at its end of file.
pub struct AtExit(Mutex<Option<(Child, ChildStdin)>>);

impl AtExit {
    pub fn kill(pid: u32, dir: &Path) -> AtExit {
        let mut child = Command::new("sh")
            .args([
                "-c",
                "read x; kill -CONT \"$0\"; kill -KILL \"$0\"; rm -rf \"$1\"",
            ])
            .arg(pid.to_string())
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start the shell that stops a shared server at exit");
        let stdin = child.stdin.take().expect("its stdin");
        AtExit(Mutex::new(Some((child, stdin))))
    }

    /// Stops the server now, and reaps the shell.
    pub fn now(&self) {
        let taken = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((mut child, mut stdin)) = taken {
            let _ = stdin.write_all(b"stop\n");
            drop(stdin);
            let _ = child.wait();
        }
    }
}
