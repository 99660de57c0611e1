//! Lock URLs (issue 8, contract §8): lockrun against a real etcd that each
//! test starts for itself on loopback, with free ports and its own data
//! directory. Without the `etcd` binary (Debian: etcd-server) the tests
//! say so loudly, and fail under CI (LOCKRUN_TEST_REQUIRE_ALL).

#![cfg(feature = "etcd")]

mod common;

use common::*;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private etcd, killed (and its data removed) on drop.
struct Etcd {
    child: Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Etcd {
    /// `None` (after a loud skip) when etcd is not installed.
    fn start() -> Option<Etcd> {
        if !needs("etcd", "Debian: apt-get install etcd-server") {
            return None;
        }
        let dir = temp_dir();
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).expect("etcd log");
        let child = Command::new("etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=test={peer_url}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let etcd = Etcd {
            child,
            endpoint: format!("127.0.0.1:{client}"),
            _dir: dir,
        };
        // Ready when it answers a read: `check` says "free" (1).
        let url = etcd.url("ready");
        wait_for("etcd to answer", || {
            std_lockrun()
                .args(["check", "-q", &url])
                .status()
                .is_ok_and(|s| s.code() == Some(1))
        });
        Some(etcd)
    }

    fn url(&self, name: &str) -> String {
        format!("etcd://{}/{name}", self.endpoint)
    }

    fn signal(&self, sig: &str) {
        kill(self.child.id() as i32, sig);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stderr_of(bg: &mut Background) -> String {
    let mut text = String::new();
    if let Some(mut err) = bg.child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

#[test]
fn several_processes_exclude_each_other_and_get_increasing_fencing_tokens() {
    let Some(etcd) = Etcd::start() else { return };
    let dir = temp_dir();
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    std::fs::write(&counter, "0\n").expect("write counter");
    // Read, widen the race window, write: any overlap loses an update.
    let body = format!(
        "n=$(cat {c}); echo \"$LOCKRUN_FENCING_TOKEN\" >> {t}; sleep 0.01; echo $((n+1)) > {c}",
        c = counter.display(),
        t = tokens.display()
    );
    let (workers, rounds) = (4, 6);
    let mut running: Vec<Child> = (0..workers)
        .map(|_| {
            let script = format!(
                "i=0; while [ $i -lt {rounds} ]; do \"$0\" \"$1\" sh -c \"$2\" || exit 9; i=$((i+1)); done"
            );
            Command::new("sh")
                .args(["-c", &script, bin(), &etcd.url("counter"), &body])
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    for worker in &mut running {
        let status = wait_child(worker, BOUND * 3);
        assert!(status.success(), "a worker failed: {status:?}");
    }
    let total: usize = std::fs::read_to_string(&counter)
        .expect("read counter")
        .trim()
        .parse()
        .expect("counter is a number");
    assert_eq!(
        total,
        workers * rounds,
        "lost updates: the lock did not exclude"
    );
    let seen: Vec<i64> = std::fs::read_to_string(&tokens)
        .expect("read tokens")
        .lines()
        .map(|l| l.parse().expect("a fencing token is a number"))
        .collect();
    assert_eq!(seen.len(), workers * rounds);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase in lock order: {seen:?}"
    );
}

#[test]
fn nonblocking_conflict_names_the_remote_holder() {
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("busy");
    let (mut holder, words) =
        Background::lockrun_holding(&[], Path::new(&url), "echo ready $$; read x");
    let pid = &words[0];
    let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.starts_with(&format!("lockrun: {url} is held by pid {pid} (sh -c")),
        "{stderr}"
    );
    lockrun()
        .args(["-n", "-E", "3", &url, "true"])
        .assert()
        .code(3);
    lockrun()
        .args(["-n", "-q", &url, "true"])
        .assert()
        .code(75)
        .stderr("");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    lockrun().args(["-n", &url, "true"]).assert().success();
}

#[test]
fn a_timed_out_waiter_gives_up_and_leaves_no_key_behind() {
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("slow");
    let (mut holder, _) = Background::lockrun_holding(&[], Path::new(&url), "echo ready; read x");
    let started = Instant::now();
    let out = lockrun()
        .args(["-w", "0.5", &url, "true"])
        .assert()
        .code(75);
    assert!(started.elapsed() >= Duration::from_millis(500));
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("timed out after"), "{stderr}");
    // The waiter's key went with its lease: nobody is queued.
    let json = holder_json(&url);
    assert_eq!(json["state"], "held");
    assert_eq!(json["waiting"], 0, "{json}");
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn a_holder_killed_with_sigkill_loses_the_lock_when_its_lease_expires() {
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("crash");
    let (mut holder, words) = Background::lockrun_holding(
        // Long enough that the busy check below surely lands inside it
        // on a loaded machine, short enough to keep the test quick.
        &["--ttl", "4s"],
        Path::new(&url),
        "echo ready $$; exec sleep 60",
    );
    let command = words[0].parse::<i32>().expect("pid");
    kill(holder.pid(), "KILL");
    holder.wait_exit(BOUND);
    // The command does not outlive lockrun: nobody renews the lease.
    wait_for("the command to end with lockrun", || process_gone(command));
    // The lease is still alive for up to 4s, then a waiter gets the lock.
    lockrun().args(["-n", &url, "true"]).assert().code(75);
    let started = Instant::now();
    lockrun()
        .args(["-w", "15", &url, "true"])
        .assert()
        .success();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the lock should pass on within the TTL, took {:?}",
        started.elapsed()
    );
}

#[test]
fn etcd_stopped_past_the_ttl_stops_the_command_and_exits_76() {
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("lost");
    let mut cmd = std_lockrun();
    // The command ignores SIGTERM, so the SIGKILL after the grace is needed.
    cmd.args(["--ttl", "2s", "--kill-grace", "1s", &url, "--"])
        .args(["sh", "-c", "trap '' TERM; echo ready $$; exec sleep 60"])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    let command = lockrun.expect_ready()[0].parse::<i32>().expect("pid");
    etcd.signal("STOP");
    let status = lockrun.wait_exit(BOUND);
    assert_eq!(status.code(), Some(76));
    assert!(process_gone(command), "the command was not stopped");
    let stderr = stderr_of(&mut lockrun);
    assert!(
        stderr.contains(&format!(
            "lockrun: lost the lock {url} while the command ran"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("SIGKILL if it still ran 1s later"),
        "{stderr}"
    );
    etcd.signal("CONT");
}

#[test]
fn a_deleted_lock_key_stops_the_command_and_exits_76() {
    if !needs("etcdctl", "Debian: apt-get install etcd-client") {
        return;
    }
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("gone");
    let mut cmd = std_lockrun();
    cmd.args(["--ttl", "3s", &url, "--"])
        .args(["sh", "-c", "echo ready; exec sleep 60"])
        .stderr(Stdio::piped());
    let mut lockrun = Background::spawn(cmd);
    lockrun.expect_ready();
    let deleted = Command::new("etcdctl")
        .args(["--endpoints", &etcd.endpoint, "del", "--prefix", "gone/"])
        .env("ETCDCTL_API", "3")
        .stdout(Stdio::null())
        .status()
        .expect("run etcdctl");
    assert!(deleted.success());
    assert_eq!(lockrun.wait_exit(BOUND).code(), Some(76));
    let stderr = stderr_of(&mut lockrun);
    assert!(stderr.contains("was deleted in etcd"), "{stderr}");
}

#[test]
fn holder_and_check_read_the_lock_from_etcd() {
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("jobs/report");
    lockrun().args(["check", &url]).assert().code(1);
    let (mut holder, words) = Background::lockrun_holding(
        &[],
        Path::new(&url),
        "echo ready $$ $LOCKRUN_FENCING_TOKEN $LOCKRUN_LOCKFILE; read x",
    );
    let (pid, token) = (&words[0], &words[1]);
    assert_eq!(words[2], url);
    lockrun().args(["check", "-q", &url]).assert().code(0);
    let json = holder_json(&url);
    assert_eq!(json["state"], "held");
    assert_eq!(json["record"]["pid"].to_string(), *pid);
    assert!(json["record"]["host"].is_string());
    assert_eq!(json["etcd"]["fencing_token"].to_string(), *token);
    let out = lockrun().args(["holder", &url]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.starts_with(&format!("{url}: held (exclusive) by pid {pid}")),
        "{text}"
    );
    assert!(text.contains(&format!("fencing token {token}")), "{text}");

    holder.release();
    assert!(holder.wait_exit(BOUND).success());
    lockrun().args(["check", "-q", &url]).assert().code(1);
    let out = lockrun().args(["holder", &url]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.starts_with(&format!("{url}: free; last held by pid {pid}")),
        "{text}"
    );
    assert!(text.contains("exit 0"), "{text}");

    // The next holder's token is larger.
    let out = lockrun()
        .args([&url, "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"])
        .assert()
        .success();
    let next: i64 = String::from_utf8_lossy(&out.get_output().stdout)
        .trim()
        .parse()
        .expect("token");
    assert!(next > token.parse::<i64>().expect("token"));
}

#[test]
fn unreachable_etcd_exits_69_and_never_runs_the_command() {
    let dir = temp_dir();
    let marker = dir.path().join("ran");
    // A port nobody listens on: bound, then closed.
    let url = format!("etcd://127.0.0.1:{}/x", free_port());
    let out = lockrun()
        .args([&url, "touch", &marker.to_string_lossy()])
        .assert()
        .code(69);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.starts_with(&format!("lockrun: cannot take {url}")),
        "{stderr}"
    );
    assert!(stderr.contains("the command was not run"), "{stderr}");
    assert!(!marker.exists());
    lockrun().args(["check", "-q", &url]).assert().code(69);
    lockrun().args(["holder", &url]).assert().code(69);
}

#[test]
fn lock_url_usage_errors_exit_64() {
    let dir = temp_dir();
    let lock = lock_in(&dir);
    let lock = lock.to_string_lossy();
    for args in [
        vec!["--ttl", "5s", &*lock, "true"],
        vec!["--kill-grace", "1s", &*lock, "true"],
        vec!["-s", "etcd://127.0.0.1:1/x", "true"],
        vec!["-F", "etcd://127.0.0.1:1/x", "true"],
        vec!["--poll", "1", "etcd://127.0.0.1:1/x", "true"],
        vec!["etcd://127.0.0.1:1/", "true"],
        vec!["etcd://nohost/x", "true"],
    ] {
        let out = lockrun()
            .args(&args)
            .env_remove("LOCKRUN_ETCD_ENDPOINTS")
            .assert()
            .code(64);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(stderr.starts_with("lockrun: "), "{args:?}: {stderr}");
    }
    // Endpoints from the environment when the URL names none.
    lockrun()
        .args(["etcd:///x", "true"])
        .env_remove("LOCKRUN_ETCD_ENDPOINTS")
        .assert()
        .code(64);
    lockrun()
        .args(["etcd:///x", "true"])
        .env(
            "LOCKRUN_ETCD_ENDPOINTS",
            format!("127.0.0.1:{}", free_port()),
        )
        .assert()
        .code(69);
}

fn waiting_count(url: &str) -> Option<u64> {
    let out = std_lockrun()
        .args(["holder", "--json", url])
        .output()
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    json["waiting"].as_u64()
}

#[test]
fn a_signal_while_waiting_ends_the_wait_and_withdraws_from_the_queue() {
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("queue");
    let (mut holder, _) = Background::lockrun_holding(&[], Path::new(&url), "echo ready; read x");
    let mut cmd = std_lockrun();
    cmd.args([&url, "--", "echo", "ran"]);
    let mut waiter = Background::spawn(cmd);
    wait_for("the waiter to queue in etcd", || {
        waiting_count(&url) == Some(1)
    });
    kill(waiter.pid(), "TERM");
    assert_eq!(waiter.wait_exit(BOUND).code(), Some(128 + 15));
    // The waiter is gone, so its output has ended: no line means none came.
    assert_eq!(waiter.line(BOUND), None, "the command ran");
    // Its lease was revoked on the way out: nobody is queued any more.
    assert_eq!(waiting_count(&url), Some(0));
    holder.release();
    assert!(holder.wait_exit(BOUND).success());
}

#[test]
fn etcdctl_lock_and_lockrun_exclude_each_other() {
    if !needs("etcdctl", "Debian: apt-get install etcd-client") {
        return;
    }
    let Some(etcd) = Etcd::start() else { return };
    let url = etcd.url("shared");
    let mut cmd = Command::new("etcdctl");
    cmd.args(["--endpoints", &etcd.endpoint, "lock", "shared"])
        .env("ETCDCTL_API", "3");
    // Without a command, etcdctl prints its key once it holds the lock and
    // holds it until SIGTERM.
    let mut etcdctl = Background::spawn(cmd);
    let key = etcdctl.line(BOUND).expect("etcdctl never took the lock");
    assert!(key.starts_with("shared/"), "{key}");
    let out = lockrun().args(["-n", &url, "true"]).assert().code(75);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains(&format!("left no lockrun record (key {key}")),
        "{stderr}"
    );
    kill(etcdctl.pid(), "TERM");
    etcdctl.wait_exit(BOUND);
    lockrun()
        .args(["-w", "10", &url, "true"])
        .assert()
        .success();
}
